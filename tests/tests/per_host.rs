//! One server per host, across four real hosts (network namespaces with their own sshd, or
//! their own Slurm nodes; see tests/multihost.rs for the hosts themselves), 16 ranks on
//! each, 64 in all:
//!
//! - through `--launcher ssh --hosts …`, `--launcher mpirun --hosts …` and `--launcher
//!   srun --hosts …` with no layout flag: exactly one `sdm server` process on each host (`ip
//!   netns pids` and /proc, one listener on the host's address with `ss`), `sdm launch -n 64
//!   --send ping` all ready and one `[0-63] pong`; over ssh `sdm run -n 64` merges the
//!   ranks' output exactly (`[0-63] hello`, each number once for all, each rank's own line
//!   once, in order), and a console script `stop`, `bt --classes`, `cont`, `kill` over a C
//!   program answers for all 64, each rank's stack its own (tests/programs/spinner.c
//!   `funcs`: the function a rank spins in follows from its rank);
//! - under mpirun and srun, `sdm run -n 64` in launch mode (the job started by its own
//!   launcher and held, one server per host started over ssh or as a step of the job's
//!   allocation, each attaching to its host's ranks, then the launcher released): the
//!   launcher's labelled output merged exactly, one server per host, and `stop`, `bt
//!   --classes`, `cont`, `kill` of all 64 (tests/programs/held_lines.c);
//! - `sdm attach` of a hung 64-rank `mpirun` job spread over the four hosts: one server per
//!   host, and STAT's two classes of tests/programs/mpi_hang.c;
//! - SIGKILL of one host's server inside its namespace: exactly that host's 16 ranks are
//!   lost (at first possibly with the ranks its subtree routed, per the placement), the
//!   others answer.
//!
//! Needs root, network namespaces and sshd (and Open MPI, or Slurm and munge): ignored where
//! build.rs finds them missing, always run under CI (`CI` set).

use sdm_e2e as support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use sdm_client::session::{Session, SessionOptions};
use sdm_deploy::LauncherKind;
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::{NodeId, Shape, Tree};
use support::daemons::{
    PATIENCE, assert_daemons_gone, daemon_sockets, interrupt, launch_held, server_pids,
};
use support::hungjob::HungJobAcross;
use support::netns::{Hosts, one_at_a_time};
use support::slurmhosts::SlurmHosts;
use support::sshhosts::SshHosts;
use support::{assert_partition, ids_with};

/// Hosts, and ranks on each.
const HOSTS: u32 = 4;
const RANKS_PER_HOST: u32 = 16;
/// Ranks in all.
const N: u32 = HOSTS * RANKS_PER_HOST;

/// The layout flags under test: none, one server per host by default.
const LAYOUT: [&str; 0] = [];

/// Every rank, `[0-63]`.
fn all() -> IdSet {
    IdSet::all(N)
}

/// Exactly one `sdm server` process on each host, listening on that host's address alone
/// (`when` says at which point of the test).
fn assert_one_server_per_host(hosts: &Hosts, when: &str) {
    for k in 1..=hosts.count() {
        let pids = server_pids(hosts, k);
        assert_eq!(pids.len(), 1, "{when}: host {k}: sdm servers {pids:?}");
        let socks = daemon_sockets(hosts, k, "tcp");
        let here = format!("{}:", hosts.addr(k));
        assert!(
            socks.len() == 1 && socks[0].starts_with(&here),
            "{when}: host {k}: the daemons' listeners are {socks:?}, not one on {here}"
        );
    }
}

/// `sdm launch LAUNCHER -n 64 --send ping --hold`: all 64 ready, one merged pong, one
/// server per host; after ^C none left.
fn launch_pings(hosts: &Hosts, launcher: impl Fn(&mut Command)) {
    let (running, lines) = launch_held(|c| {
        launcher(c);
        c.args(["-n", &N.to_string()]).args(LAYOUT);
    });
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("ready  {} ({N} of {N})", all()))),
        "{lines:#?}"
    );
    assert!(lines.contains(&format!("{} pong", all())), "{lines:#?}");
    assert!(!lines.iter().any(|l| l.starts_with("failed")), "{lines:#?}");
    assert_one_server_per_host(hosts, "sdm launch");
    interrupt(running);
    assert_daemons_gone(hosts, "tcp", "sdm launch ended");
}

/// How many numbers each rank prints in [`merged_stdio`].
const NUMBERS: u32 = 100;

/// `sdm run LAUNCHER -n 64 -- sh -c 'echo hello; seq 1 100; echo rank $SDM_RANK'`: the
/// ranks' output merged exactly, as on one host: `[0-63] hello`, each number once for all
/// 64 in order, each rank's own line once under its rank, one merged exit.
fn merged_stdio(hosts: &Hosts, launcher: impl Fn(&mut Command)) {
    let mut cmd = Command::new(support::sdm());
    cmd.arg("run");
    launcher(&mut cmd);
    // Lines wait for the same line of every rank as long as it takes on a loaded machine.
    cmd.args(["-n", &N.to_string(), "--merge-lag", "120000"])
        .args(LAYOUT)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "echo hello; seq 1 {NUMBERS}; echo \"rank $SDM_RANK\""
        ))
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null());
    let out = output_within(cmd);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{}: {stdout}{stderr}", out.status);
    let everyone = all().to_string();
    let mut want: Vec<String> = vec![format!("{everyone} hello")];
    want.extend((1..=NUMBERS).map(|k| format!("{everyone} {k}")));
    let (own, shared): (Vec<&str>, Vec<&str>) = stdout.lines().partition(|l| l.contains(" rank "));
    let (exits, merged): (Vec<&str>, Vec<&str>) =
        shared.into_iter().partition(|l| l.contains(" exited "));
    assert_eq!(merged, want, "{stdout}{stderr}");
    assert_eq!(
        exits,
        [format!("{everyone} exited with status 0")],
        "{stdout}"
    );
    let mut own: Vec<String> = own.into_iter().map(str::to_owned).collect();
    own.sort();
    let mut want_own: Vec<String> = (0..N).map(|r| format!("[{r}] rank {r}")).collect();
    want_own.sort();
    assert_eq!(own, want_own, "each rank's own line once: {stdout}{stderr}");
    assert_daemons_gone(hosts, "tcp", "sdm run ended");
}

/// What `cmd` printed, once it ended; killed (and the test failed) if it has not ended
/// within `PATIENCE` (a hang guard).
fn output_within(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(PATIENCE) {
        Ok(out) => out.expect("waiting for sdm"),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let out = rx.recv().expect("sdm reaped").expect("waiting for sdm");
            let (stdout, stderr) = texts(&out);
            panic!("{cmd:?} still ran after {PATIENCE:?}: {stdout}{stderr}");
        }
    }
}

/// Standard output and error of `out` as text.
fn texts(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An `sdm` command reading console commands from its standard input, its output read
/// line by line; killed if the test ends early.
struct Scripted {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Scripted {
    /// Starts `cmd` (already given its arguments) with piped standard streams.
    fn start(mut cmd: Command) -> Scripted {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
        let stdin = child.stdin.take();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Scripted {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// Sends the console command `line`.
    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("commands still open");
        writeln!(stdin, "{line}").expect("writing a console command");
    }

    /// Reads output until the line `want`; panics with everything printed if it does not
    /// come within `PATIENCE`.
    fn until(&mut self, want: &str) {
        while !self.seen.iter().any(|l| l == want) {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(l) => self.seen.push(l),
                Err(e) => panic!("no line {want:?} ({e}): {:#?}", self.seen),
            }
        }
    }

    /// Reads output until a line starting with `prefix`; panics with everything printed if
    /// it does not come within `PATIENCE`.
    fn until_prefix(&mut self, prefix: &str) {
        while !self.seen.iter().any(|l| l.starts_with(prefix)) {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(l) => self.seen.push(l),
                Err(e) => panic!("no line {prefix:?}… ({e}): {:#?}", self.seen),
            }
        }
    }

    /// Reads whatever output comes for `period`.
    fn read_for(&mut self, period: Duration) {
        let until = std::time::Instant::now() + period;
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => break,
            }
        }
    }

    /// Closes the commands and waits for the end: everything printed.
    fn finish(mut self) -> Vec<String> {
        drop(self.stdin.take());
        // The output ends when the command does (a hang guard of `PATIENCE` a line).
        loop {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(l) => self.seen.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("sdm did not end ({e}): {:#?}", self.seen),
            }
        }
        std::mem::take(&mut self.seen)
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// `sdm run LAUNCHER -n 64 --stop-at-main -- held_lines 3` under srun, whose tasks are held
/// before their first instruction: every rank stopped in `main` (one server per host), a
/// breakpoint on `func_b` set before `cont` stops exactly the ranks 1 mod 3 there.
fn held_to_main(hosts: &Hosts, launcher: impl Fn(&mut Command), program: &Path) {
    let mut cmd = Command::new(support::sdm());
    cmd.arg("run");
    launcher(&mut cmd);
    cmd.args(["-n", &N.to_string(), "--timeout", "600", "--stop-at-main"])
        .args(LAYOUT)
        .args(["-x", "-", "--"])
        .arg(program)
        .arg("3")
        .current_dir(std::env::temp_dir());
    let mut run = Scripted::start(cmd);
    let everyone = all();
    run.send("status");
    run.until_prefix(&format!("{everyone} stopped in main at held_lines.c"));
    assert_one_server_per_host(hosts, "sdm run --stop-at-main");
    run.send("break func_b");
    run.send("cont");
    let ones: IdSet = (0..N).filter(|r| r % 3 == 1).collect();
    let want = format!("{ones} stopped at breakpoint in func_b");
    // They reach it in their own time: asked again until all are there (a hang guard).
    let deadline = std::time::Instant::now() + PATIENCE;
    while !run.seen.contains(&want) {
        assert!(
            std::time::Instant::now() < deadline,
            "no {want:?}: {:#?}",
            run.seen
        );
        run.send("status");
        run.read_for(Duration::from_secs(1));
    }
    run.send("kill");
    run.until(&format!("{everyone} killed"));
    drop(run.finish());
    assert_daemons_gone(hosts, "tcp", "the held job's run to main ended");
}

/// The classes `bt --classes` printed, as (ranks, the line).
fn classes(lines: &[String]) -> Vec<(IdSet, String)> {
    lines
        .iter()
        .filter_map(|l| {
            let (ids, _) = l.split_once(" (representative")?;
            Some((ids.parse().ok()?, l.clone()))
        })
        .collect()
}

/// A console script over 64 ranks of tests/programs/spinner.c `funcs` (rank r spins below
/// `func_a`, `func_b` or `func_c` as r % 3 is 0, 1 or 2): `stop` answers for all 64, with
/// one server per host; `bt --classes` accounts for every rank once, each in its own
/// rank's function; `cont` and `kill` answer for all 64.
fn console_script(hosts: &Hosts, launcher: impl Fn(&mut Command)) {
    let spinner = support::spinner();
    let mut cmd = Command::new(support::sdm());
    cmd.arg("run");
    launcher(&mut cmd);
    cmd.args(["-n", &N.to_string()])
        .args(LAYOUT)
        .args(["-x", "-", "--"])
        .arg(&spinner)
        .arg("funcs")
        .current_dir(std::env::temp_dir());
    let mut run = Scripted::start(cmd);
    let everyone = all();
    // Let the ranks get past the dynamic loader (not needed for the checks, which hold
    // wherever a rank stands, but it makes the stacks worth looking at).
    run.send("sleep 3");
    run.send("stop");
    run.until(&format!("{everyone} stopped"));
    assert_one_server_per_host(hosts, "sdm run, stopped");
    for c in ["bt --classes", "cont", "kill"] {
        run.send(c);
    }
    run.until(&format!("{everyone} killed"));
    let lines = run.finish();
    let text = lines.join("\n");
    let running = format!("{everyone} running");
    assert!(lines.contains(&running), "{text}");
    let mut seen = IdSet::new();
    for (ids, line) in classes(&lines) {
        assert!(seen.is_disjoint(&ids), "a rank in two classes: {text}");
        seen.union_with(&ids);
        for (k, func) in ["func_a", "func_b", "func_c"].into_iter().enumerate() {
            if line.contains(&format!(" {func}")) {
                assert!(
                    ids.iter().all(|r| r % 3 == k as u32),
                    "{ids} spin in {func}, which only ranks {k} mod 3 reach: {text}"
                );
            }
        }
    }
    assert_eq!(seen, everyone, "the classes of bt: {text}");
    assert_daemons_gone(hosts, "tcp", "the console script ended");
}

/// The checks with `launcher` setting the launcher and hosts; `merged`: sdm starts the
/// ranks and merges their output (ssh). Under mpirun and srun the job is started by its
/// own launcher and held for the servers (launch mode), so its output is the launcher's
/// (tests/stdio.rs `runtime_leaves_stdio_to_the_launcher`).
fn sixty_four_ranks(hosts: &Hosts, merged: bool, launcher: impl Fn(&mut Command)) {
    launch_pings(hosts, &launcher);
    if merged {
        merged_stdio(hosts, &launcher);
    }
    console_script(hosts, &launcher);
}

#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 and sshd (deploy/ci-setup.sh)"
)]
fn ssh_starts_one_server_per_host_for_sixteen_ranks_each() {
    let _one = one_at_a_time();
    let h = SshHosts::create(HOSTS);
    let list = h.hosts.hostlist();
    sixty_four_ranks(&h.hosts, true, |c| {
        c.args(["--launcher", "ssh", "--hosts", &list]);
    });
}

#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh, sdm_have_mpirun)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, sshd and Open MPI (deploy/ci-setup.sh)"
)]
fn mpirun_starts_one_server_per_host_for_sixteen_ranks_each() {
    let _one = one_at_a_time();
    let h = SshHosts::create(HOSTS);
    let list = h.hosts.hostlist();
    let launcher = |c: &mut Command| {
        c.args(["--launcher", "mpirun", "--hosts", &list])
            // The namespace hosts share one kernel: MPI's shared-memory transport would
            // join ranks of different hosts.
            .env("OMPI_MCA_btl", "self,tcp")
            .env("OMPI_MCA_mpi_yield_when_idle", "1");
    };
    launch_pings(&h.hosts, launcher);
    // Open MPI's mpirun holds only MPI programs (in MPI_Init).
    held_job(&h.hosts, launcher, &held_lines(true));
}

#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_slurm)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, Slurm and munge (deploy/ci-setup.sh)"
)]
fn srun_starts_one_server_per_host_for_sixteen_ranks_each() {
    let _one = one_at_a_time();
    // A CPU for each rank: srun starts the job's 16 tasks on each node itself.
    let h = SlurmHosts::create(HOSTS, RANKS_PER_HOST);
    let list = h.hosts.hostlist();
    let launcher = |c: &mut Command| {
        h.slurm(c).args(["--launcher", "srun", "--hosts", &list]);
    };
    // Each run's job gone and the nodes idle again before the next (else a held srun
    // waits for the nodes).
    let idle = || {
        let gone = support::daemons::wait_for(|| {
            let states = h.squery("sinfo", &["-h", "-N", "-o", "%T"]);
            h.jobs().is_empty() && states.lines().all(|l| l == "idle")
        });
        assert!(
            gone,
            "a job is still there, or a node is not idle: {}{}{}",
            h.squery("squeue", &[]),
            h.squery("sinfo", &["-N", "-l"]),
            h.logs()
        );
    };
    launch_pings(&h.hosts, launcher);
    idle();
    held_job(&h.hosts, launcher, &held_lines(false));
    idle();
    held_to_main(&h.hosts, launcher, &held_lines(false));
    idle();
}

/// tests/programs/held_lines.c, built with mpicc and `-DUSE_MPI` when `mpi`.
fn held_lines(mpi: bool) -> PathBuf {
    const FLAGS: [&str; 3] = ["-O0", "-g", "-fno-omit-frame-pointer"];
    if !mpi {
        return support::c_program("held_lines", &FLAGS);
    }
    let out = std::env::temp_dir().join(format!("sdm-held-lines-mpi-{}", std::process::id()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/held_lines.c");
    support::daemons::output_ok(
        Command::new("mpicc")
            .arg("-DUSE_MPI")
            .args(FLAGS)
            .arg("-o")
            .arg(&out)
            .arg(&src),
    );
    out
}

/// `sdm run LAUNCHER -n 64 -- held_lines 100` (launch mode: the job started by its own
/// launcher, held, one server per host attaching to its ranks, then released): the
/// ranks' output, labelled by the launcher, merged exactly as on one host (`[0-63] hello`,
/// each number once for all 64 in order, each rank's own line once, `[0-63] done`); then
/// `stop` answers for all 64 with exactly one server on each host; `bt --classes` puts every
/// rank in its own rank's function; `cont` and `kill` answer for all 64; no daemon is left.
fn held_job(hosts: &Hosts, launcher: impl Fn(&mut Command), program: &Path) {
    let mut cmd = Command::new(support::sdm());
    cmd.arg("run");
    launcher(&mut cmd);
    // Under Open MPI the held ranks poll in MPI_Init until released: on this machine's
    // few cores the servers' start-up competes with 64 of them (a hang guard).
    cmd.args([
        "-n",
        &N.to_string(),
        "--timeout",
        "600",
        "--merge-lag",
        "120000",
    ])
    .args(LAYOUT)
    .args(["-x", "-", "--"])
    .arg(program)
    .arg(NUMBERS.to_string())
    .current_dir(std::env::temp_dir());
    let mut run = Scripted::start(cmd);
    let everyone = all();
    run.until(&format!("{everyone} done"));
    run.send("stop");
    run.until(&format!("{everyone} stopped"));
    assert_one_server_per_host(hosts, "sdm run, held job");
    for c in ["bt --classes", "cont", "kill"] {
        run.send(c);
    }
    run.until(&format!("{everyone} killed"));
    let lines = run.finish();
    let text = lines.join("\n");
    let prefix = format!("{everyone} ");
    let printed: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter(|rest| matches!(*rest, "hello" | "done") || rest.parse::<u32>().is_ok())
        .collect();
    let mut want = vec!["hello".to_owned()];
    want.extend((1..=NUMBERS).map(|k| k.to_string()));
    want.push("done".into());
    assert_eq!(printed, want, "{text}");
    let mut own: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| l.contains(" rank "))
        .collect();
    own.sort();
    let mut want_own: Vec<String> = (0..N).map(|r| format!("[{r}] rank {r}")).collect();
    want_own.sort();
    assert_eq!(own, want_own, "each rank's own line once: {text}");
    assert!(lines.contains(&format!("{everyone} running")), "{text}");
    // The classes of the ranks' main threads (an MPI library's threads make their own).
    let mut seen = IdSet::new();
    for (ids, line) in classes(&lines) {
        let Some(k) = ["func_a", "func_b", "func_c"]
            .iter()
            .position(|f| line.contains(&format!(" {f} ")))
        else {
            continue;
        };
        assert!(seen.is_disjoint(&ids), "a rank in two classes: {text}");
        seen.union_with(&ids);
        assert!(
            ids.iter().all(|r| r % 3 == k as u32),
            "{ids} wait in func {k}, which only ranks {k} mod 3 reach: {text}"
        );
    }
    assert_eq!(seen, everyone, "the classes of bt: {text}");
    assert_daemons_gone(hosts, "tcp", "the held job's run ended");
}

/// `sdm attach MPIRUN` on a hung 64-rank job, 16 ranks on each host: the process table
/// grouped by host gives one server per host, attached to its 16 ranks; `stop` answers for
/// all, `bt --classes` gives STAT's two classes, `cont` and `detach` answer for all, no
/// daemon is left and the job still runs.
#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh, sdm_have_mpirun)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, sshd and Open MPI (deploy/ci-setup.sh)"
)]
fn attach_to_a_hung_job_starts_one_server_per_host() {
    let _one = one_at_a_time();
    let h = SshHosts::create(HOSTS);
    let job = HungJobAcross::start(&h, N);
    let mpirun = job.mpirun.id().to_string();
    let mut cmd = Command::new(support::sdm());
    cmd.args(["attach", &mpirun]).args(LAYOUT);
    let mut attach = Scripted::start(cmd);
    let everyone = all();
    attach.send("stop");
    attach.until(&format!("{everyone} stopped"));
    assert_one_server_per_host(&h.hosts, "sdm attach");
    for c in ["bt --classes", "cont", "detach"] {
        attach.send(c);
    }
    attach.until(&format!("{everyone} detached"));
    let lines = attach.finish();
    let text = lines.join("\n");
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    support::assert_hung_job_classes(&lines, N, &text);
    assert!(
        lines.contains(&format!("{everyone} running").as_str()),
        "{text}"
    );
    assert_daemons_gone(&h.hosts, "tcp", "detach");
    // The job still runs after the detach.
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(job.mpirun.id() as i32), None).is_ok(),
        "mpirun ended with the detach"
    );
    drop(job);
}

#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 and sshd (deploy/ci-setup.sh)"
)]
fn a_host_whose_server_is_killed_loses_exactly_its_ranks() {
    let _one = one_at_a_time();
    let h = SshHosts::create(HOSTS);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(kill_one_host(&h));
}

/// The host (from 1) of server `pid`, found inside the namespaces.
fn host_of_pid(hosts: &Hosts, pid: u32) -> u32 {
    (1..=hosts.count())
        .find(|&k| server_pids(hosts, k).contains(&pid))
        .unwrap_or_else(|| panic!("server pid {pid} is on no host"))
}

/// 64 ranks over ssh through the Session API (one server per host by default); the server
/// of a host whose server routes for others is killed: first its ranks are lost (with, at
/// most, those below it), the others answer; once its orphans re-attached, exactly its
/// ranks are lost and every other rank answers.
async fn kill_one_host(h: &SshHosts) {
    let opts = SessionOptions {
        n: N,
        launcher: LauncherKind::Ssh,
        hosts: h.names(),
        program: Some(support::sdm().into()),
        startup_timeout: Duration::from_secs(150),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    let everyone = all();
    assert_eq!(s.report().ready, everyone, "{:?}", s.report().failed);
    let g = s
        .request(&everyone, SyncMode::WaitAll, "ping")
        .await
        .unwrap();
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!((g[0].status, &g[0].sources), (Status::Replied, &everyone));
    assert_one_server_per_host(&h.hosts, "started");

    // The server with the most ranks below it (an interior one), and where it runs.
    let tree = Tree::new(
        Arc::from(Shape::Binomial.build(s.servers())),
        s.placement().clone(),
    );
    let victim = (0..s.servers())
        .max_by_key(|&v| tree.subtree(NodeId::Server(v)).len())
        .unwrap();
    let own = tree.local(NodeId::Server(victim));
    let below = tree.subtree(NodeId::Server(victim));
    let &(_, _, pid) = s
        .report()
        .processes
        .iter()
        .find(|(id, _, _)| *id == victim)
        .expect("the victim's process");
    let host = host_of_pid(&h.hosts, pid);
    let on_host: IdSet = (0..N).filter(|r| r / RANKS_PER_HOST == host - 1).collect();
    assert_eq!(own, on_host, "server {victim} on host {host}");
    eprintln!("killing server {victim} on host {host}: ranks {own}, subtree {below}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    let g = s
        .request(&everyone, SyncMode::WaitAll, "ping")
        .await
        .unwrap();
    assert_partition(&g, &everyone);
    let lost = ids_with(&g, Status::Lost);
    assert!(
        own.is_subset(&lost),
        "host {host} ({own}) not all lost: {g:?}"
    );
    assert!(
        lost.is_subset(&below),
        "lost beyond server {victim}'s subtree: {g:?}"
    );
    assert_eq!(ids_with(&g, Status::Replied), &everyone - &lost, "{g:?}");

    // Its orphans re-attach: then exactly the host's ranks are lost, the rest answer.
    let until = tokio::time::Instant::now() + PATIENCE;
    let mut g;
    loop {
        g = s
            .request(&everyone, SyncMode::WaitAll, "ping")
            .await
            .unwrap();
        assert_partition(&g, &everyone);
        if ids_with(&g, Status::Lost) == own || tokio::time::Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(ids_with(&g, Status::Lost), own, "{g:?}");
    assert_eq!(ids_with(&g, Status::Replied), &everyone - &own, "{g:?}");
    s.shutdown(Duration::from_secs(30)).await;
    assert_daemons_gone(&h.hosts, "tcp", "shutdown");
}
