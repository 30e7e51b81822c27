//! End-to-end start-up through real launchers and real daemons: local servers forked from
//! one process (64 of them, and the copies' own contract), quic, a server killed before its parent connects, mpirun, srun and ssh, the
//! `sdm launch` command, and no orphans when the front-end goes away.

use std::process::{Command, Stdio};
use std::time::Duration;

use sdm_client::session::{Progress, Session, SessionOptions};
use sdm_deploy::LauncherKind;
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::{NodeId, Shape};

fn opts(n: u32, launcher: LauncherKind) -> SessionOptions {
    SessionOptions {
        n,
        launcher,
        ranks_per_server: Some(1),
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    }
}

/// True if process `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

async fn wait_gone(pids: &[u32]) {
    for _ in 0..300 {
        if pids.iter().all(|&p| gone(p)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left: Vec<_> = pids.iter().filter(|&&p| !gone(p)).collect();
    panic!("daemons still running: {left:?}");
}

/// Launch, check all ready, broadcast, sum, shut down, check no daemon is left.
async fn full_cycle(o: SessionOptions) {
    let n = o.n;
    let s = Session::launch(&o, |_| {}).await.unwrap();
    let r = s.report().clone();
    assert_eq!(r.ready, IdSet::all(n), "failed: {:?}", r.failed);
    assert!(r.failed.is_empty());
    assert_eq!(r.processes.len(), n as usize);
    let all = s.all();
    let g = s.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(
        (g[0].status, &g[0].payload[..]),
        (Status::Replied, &b"pong"[..])
    );
    assert_eq!(g[0].sources, all);
    let op = s
        .send_filtered(&all, SyncMode::WaitAll, "sum", "value")
        .await
        .unwrap();
    let g = s.collect(op, &all).await.unwrap();
    let expect = (u64::from(n) * u64::from(n - 1) / 2).to_string();
    assert_eq!(g.len(), 1);
    assert_eq!(String::from_utf8_lossy(&g[0].payload), expect);
    let pids: Vec<u32> = r.processes.iter().map(|p| p.2).collect();
    s.shutdown(Duration::from_secs(20)).await;
    wait_gone(&pids).await;
}

/// The parent of process `pid`.
fn parent_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(") ")?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `sdm server` started once with `SDM_COPIES=3`, as the local launcher starts its
/// servers: three servers forked from that process, ids 0-2 with a pid each, all its
/// children; killed, it takes them with it. Copies that never get a parent end, and the
/// process reports how many failed; a bad count is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_process_forks_its_copies_and_they_die_with_it() {
    let key = sdm_overlay::setup::SessionKey::generate().to_hex();
    let start = |parent_timeout: &str, copies: &str| {
        Command::new(sdm_e2e::sdm())
            .args(["server", "--port", "0", "--parent-timeout", parent_timeout])
            .env("SDM_SESSION_KEY", &key)
            .env("SDM_ID", "0")
            .env(sdm_deploy::COPIES_ENV, copies)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let listening = |text: &str| -> Vec<(u32, u32)> {
        let mut got: Vec<(u32, u32)> = text
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.first() == Some(&"SDM-LISTEN"))
                    .then(|| (f[1].parse().unwrap(), f[4].parse().unwrap()))
            })
            .collect();
        got.sort();
        got
    };

    let mut sup = start("600", "3");
    let mut out = std::io::BufReader::new(sup.stdout.take().unwrap());
    let mut text = String::new();
    for _ in 0..3 {
        std::io::BufRead::read_line(&mut out, &mut text).unwrap();
    }
    let copies = listening(&text);
    assert_eq!(
        copies.iter().map(|c| c.0).collect::<Vec<_>>(),
        [0, 1, 2],
        "{text}"
    );
    for &(id, pid) in &copies {
        assert_ne!(
            pid,
            sup.id(),
            "server {id} is a copy, not the process started"
        );
        assert_eq!(parent_of(pid), Some(sup.id()), "server {id} (pid {pid})");
    }
    sup.kill().unwrap();
    sup.wait().unwrap();
    wait_gone(&copies.iter().map(|c| c.1).collect::<Vec<_>>()).await;

    let done = start("1", "3").wait_with_output().unwrap();
    assert!(!done.status.success());
    assert_eq!(listening(&String::from_utf8_lossy(&done.stdout)).len(), 3);
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(err.contains("3 of 3 local servers failed"), "{err}");
    assert!(err.contains("no parent connected"), "{err}");

    let bad = start("1", "three").wait_with_output().unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("SDM_COPIES=\"three\""), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_launch_of_64_is_all_ready() {
    full_cycle(opts(64, LauncherKind::Local)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_tree_of_8() {
    full_cycle(SessionOptions {
        transport: "quic".into(),
        topology: Shape::KAry(3),
        ..opts(8, LauncherKind::Local)
    })
    .await;
}

/// A local tree of `n` in `shape` whose server `victim` is killed as soon as it listens,
/// before its parent connects.
async fn launch_killing(shape: Shape, n: u32, victim: u32) -> Session {
    let o = SessionOptions {
        topology: shape,
        connect_attempts: 5,
        connect_delay: Duration::from_millis(50),
        ..opts(n, LauncherKind::Local)
    };
    Session::launch(&o, |p| {
        if let Progress::Listening { id, pid, .. } = p
            && *id == victim
        {
            Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status()
                .unwrap();
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_before_it_connects_is_reported_by_id() {
    let n = 16;
    let victim = 3u32; // position 4: subtree [3-6]
    let s = launch_killing(Shape::Binomial, n, victim).await;
    let r = s.report().clone();
    let sub = Shape::Binomial
        .build(n)
        .as_ref()
        .subtree(NodeId::Server(victim));
    assert_eq!(sub.to_string(), "[3-6]");
    assert_eq!(r.ready, &IdSet::all(n) - &sub, "{:?}", r.failed);
    assert_eq!(r.failed.len(), 1, "{:?}", r.failed);
    let (ids, why) = &r.failed[0];
    assert_eq!(ids, &sub);
    assert!(
        why.contains("server 3") && why.contains("could not connect"),
        "{why}"
    );
    s.shutdown(Duration::from_secs(20)).await;
}

// Launchers that need system setup: ignored where deploy/ci-setup.sh has not set them up
// (build.rs looks for its markers), and always run under CI, where a missing one fails.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(sdm_have_mpirun),
    ignore = "needs mpirun (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
async fn mpirun_launch() {
    full_cycle(opts(8, LauncherKind::Mpirun)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(sdm_have_slurm),
    ignore = "needs srun, a running Slurm (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
async fn srun_launch() {
    full_cycle(opts(8, LauncherKind::Srun)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(sdm_have_ssh),
    ignore = "needs sshd on loopback (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
async fn ssh_launch_over_loopback() {
    full_cycle(SessionOptions {
        hosts: vec!["sdmci-localhost".into()],
        ..opts(4, LauncherKind::Ssh)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_launch_json_and_frontend_death_leaves_no_orphans() {
    let sdm = sdm_e2e::sdm();
    let out = Command::new(sdm)
        .args([
            "launch",
            "--ranks-per-server",
            "1",
            "-n",
            "8",
            "--json",
            "--send",
            "ping",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let summary: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(summary["ready"], "[0-7]");
    assert_eq!(summary["ready_count"], 8);
    let reply: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        (reply["ids"].as_str(), reply["reply"].as_str()),
        (Some("[0-7]"), Some("pong"))
    );

    // Kill the front-end (sdm launch --hold) with SIGKILL: the master and every server exit.
    let mut child = Command::new(sdm)
        .args([
            "launch",
            "--ranks-per-server",
            "1",
            "-n",
            "6",
            "--json",
            "--hold",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let summary: serde_json::Value = serde_json::from_str(&line).unwrap();
    let pids: Vec<u32> = summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(pids.len(), 6);
    child.kill().unwrap();
    child.wait().unwrap();
    wait_gone(&pids).await;
}

#[test]
fn topology_dot() {
    let out = Command::new(sdm_e2e::sdm())
        .args(["topology", "-n", "4", "--dot"])
        .output()
        .unwrap();
    let dot = String::from_utf8_lossy(&out.stdout);
    assert!(
        dot.starts_with("digraph") && dot.contains("master"),
        "{dot}"
    );
    assert_eq!(dot.matches("->").count(), 4);
}

/// A topology file in sdm's form: the master's children are 0 and 1, 0 holds the even
/// servers and 1 the odd ones (no built-in shape has subtrees like these).
const EVEN_ODD: &str =
    "# evens under 0, odds under 1\nmaster: 0 1\n0: 2 4 6 8 10 12 14\n1: [3,5,7,9] 11,13 15\n";

/// A scratch directory removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `text` in a fresh file (each caller its own directory: tests run in parallel).
fn topology_file(text: &str) -> (Scratch, std::path::PathBuf) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sdm-topology-{}-{k}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tree.txt");
    std::fs::write(&path, text).unwrap();
    (Scratch(dir), path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_tree_from_a_file_is_the_tree_the_daemons_build() {
    let (_dir, path) = topology_file(EVEN_ODD);
    let shape = Shape::from_file(&path).unwrap();
    let n = shape.servers().unwrap();
    assert_eq!(n, 16);
    full_cycle(SessionOptions {
        topology: shape.clone(),
        ..opts(n, LauncherKind::Local)
    })
    .await;
    // Server 1 killed before its parent (the master) connects: exactly the odd servers are
    // lost, so the daemons connected along the file's tree, not a built-in one.
    let s = launch_killing(shape, n, 1).await;
    let r = s.report().clone();
    let odd: IdSet = (0..n).filter(|i| i % 2 == 1).collect();
    assert_eq!(r.ready, &IdSet::all(n) - &odd, "{:?}", r.failed);
    assert_eq!(r.failed.len(), 1, "{:?}", r.failed);
    assert_eq!(r.failed[0].0, odd);
    // The rest answer as one group.
    let even = &IdSet::all(n) - &odd;
    let g = s.request(&even, SyncMode::WaitAll, "ping").await.unwrap();
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(g[0].sources, even);
    s.shutdown(Duration::from_secs(20)).await;
}

#[test]
fn topology_files_on_the_command_line() {
    let (dir, path) = topology_file(EVEN_ODD);
    let shape = format!("file:{}", path.display());
    let out = Command::new(sdm_e2e::sdm())
        .args(["topology", "--shape", &shape])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "master [0-15]");
    assert_eq!(lines[1], "  0 [0,2,4,6,8,10,12,14]");
    assert_eq!(lines[2], "    2 [2]");
    assert_eq!(lines[9], "  1 [1,3,5,7,9,11,13,15]");
    assert_eq!(lines.len(), 17);

    // A launch over it, from the CLI.
    let out = Command::new(sdm_e2e::sdm())
        .args([
            "launch",
            "--ranks-per-server",
            "1",
            "-n",
            "16",
            "--topology",
            &shape,
            "--send",
            "ping",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("[0-15] pong"), "{text}");

    // Errors name the file and the line, or the mismatch, and exit non-zero.
    let run = |args: &[&str]| {
        let out = Command::new(sdm_e2e::sdm()).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&[
        "launch",
        "--ranks-per-server",
        "1",
        "-n",
        "8",
        "--topology",
        &shape,
    ]);
    assert!(
        err.contains("the topology file's tree has 16 servers, not 8"),
        "{err}"
    );
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "master: 0 1\n0: 2\n1: two\n").unwrap();
    let err = run(&["topology", "--shape", &format!("file:{}", bad.display())]);
    assert!(
        err.contains(&format!(
            "topology file {}, line 3: \"two\" is not a server id or range",
            bad.display()
        )),
        "{err}"
    );
    // MRNet's form names hosts: only the ssh launcher places servers on hosts.
    let mrnet = dir.path().join("mrnet.top");
    std::fs::write(&mrnet, "fe:0 => a:0 b:0 ;\n").unwrap();
    let err = run(&[
        "launch",
        "--ranks-per-server",
        "1",
        "-n",
        "2",
        "--topology",
        &format!("file:{}", mrnet.display()),
    ]);
    assert!(
        err.contains("places servers on hosts (a,b), which only --launcher ssh can do"),
        "{err}"
    );
}

/// A child process killed if the test ends early.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// The listening TCP ports of the processes `pids` (from `ss`).
fn listening_ports(pids: &[u32]) -> Vec<u16> {
    let out = Command::new("ss").arg("-Hltnp").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| pids.iter().any(|p| l.contains(&format!("pid={p},"))))
        .filter_map(|l| {
            l.split_whitespace()
                .nth(3)?
                .rsplit_once(':')?
                .1
                .parse()
                .ok()
        })
        .collect()
}

#[test]
fn every_listener_stays_in_the_port_range() {
    use std::io::{BufRead, BufReader};
    // A range of 40 ports at a place this process picks (other tests' daemons may hold some
    // of them: a taken port is skipped).
    let first = 40000 + (std::process::id() % 200) as u16 * 100;
    let range = format!("{first}-{}", first + 39);
    let child = Command::new(sdm_e2e::sdm())
        .args([
            "launch",
            "--ranks-per-server",
            "1",
            "-n",
            "8",
            "--port-range",
            &range,
            "--send",
            "ping",
            "--hold",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.ends_with(" pong")) {
        seen.push(lines.next().expect("sdm launch ended early").unwrap());
    }
    assert!(seen.contains(&"[0-7] pong".to_owned()), "{seen:#?}");
    let mut tree = sdm_server::mpir::descendants(child.0.id());
    tree.push(child.0.id());
    let in_range = |p: &u16| (first..=first + 39).contains(p);
    // The master and eight servers listen, every one inside the range.
    let ports = listening_ports(&tree);
    assert_eq!(ports.len(), 9, "{ports:?} of {tree:?}");
    assert!(ports.iter().all(in_range), "{ports:?} not all in {range}");
    // The front-end listened there too, until the master connected (it listens for nothing
    // else): the master's --frontend names its port.
    let frontend_ports: Vec<u16> = tree
        .iter()
        .filter_map(|p| std::fs::read(format!("/proc/{p}/cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter_map(|c| {
            let fe = c
                .split_once(" master --frontend ")?
                .1
                .split_whitespace()
                .next()?;
            fe.rsplit_once(':')?.1.parse().ok()
        })
        .collect();
    assert_eq!(frontend_ports.len(), 1, "{tree:?}");
    assert!(
        in_range(&frontend_ports[0]),
        "{frontend_ports:?} not in {range}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    assert!(child.0.wait().unwrap().success());

    // Too small a range for the servers of one host: one line says so before any starts.
    let out = Command::new(sdm_e2e::sdm())
        .args([
            "launch",
            "--ranks-per-server",
            "1",
            "-n",
            "4",
            "--timeout",
            "20",
            "--port-range",
        ])
        .arg(format!("{first}-{}", first + 1))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "--port-range {first}-{} hold at most 2",
            first + 1
        )),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
}
