//! Four hosts for real: network namespaces joined by a bridge ([`Hosts`]), an sshd inside
//! each (key-only, host and user keys made here), and the real `sdm` daemons started on them
//! by the real ssh launcher, with no address flags: the front-end listens on its address on
//! the route to the first host (the bridge's), each server binds and advertises its own
//! host's address on the route back.
//!
//! - `sdm launch --launcher ssh --hosts 'TAGh[1-4]' -n 16 --send ping`: 16 ready, one `[0-15]`
//!   pong, each host's servers listening on that host's address and none on loopback (`ss`
//!   inside each namespace); the same over `--transport quic`.
//! - One host's link cut in the middle of a command (`ip link set … down`): its servers come
//!   back lost with the reason, the others answer; after `up` they re-attach and answer.
//! - `sdm run --launcher mpirun --hosts 'TAGh[1-4]' -n 8 -- mpi_allreduce`: Open MPI's daemons
//!   reach the hosts over the same ssh, and the MPI job's collectives cross them.
//! - `sdm launch --launcher srun -n 16 --launcher-args '-N 4'` on a Slurm cluster of the
//!   test's own ([`SlurmHosts`]: slurmctld in the root namespace, one slurmd per host as its
//!   own node): the step spans the four nodes, each host's servers on its address.
//! - A server told to advertise loopback to a front-end on another host stops, naming itself,
//!   its host and both addresses; and (no namespaces needed) a tree over IPv6 loopback.
//!
//! The hosts are named `<tag>h1..<tag>h4` in an ssh configuration this test writes into
//! /etc/ssh/ssh_config.d/ (included by ssh's system-wide configuration; deploy/ci-setup.sh
//! makes sure), with `SetEnv` passing the daemons short keepalive timings. Needs root, network namespaces
//! and sshd (the Slurm test: Slurm and munge instead of sshd): ignored where build.rs finds
//! them missing, always run under CI (`CI` set), where their absence fails it. Everything
//! made here is removed at the end, panic included.

use sdm_e2e as support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sdm_client::session::{Session, SessionOptions};
use sdm_deploy::LauncherKind;
use sdm_overlay::liveness::KEEPALIVE_ENV;
use sdm_overlay::recover::PATIENCE_ENV;
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::{NodeId, Shape};
use support::netns::Hosts;
use support::{assert_partition, ids_with};

/// Hosts, and servers per host.
const HOSTS: u32 = 4;
const PER_HOST: u32 = 4;

/// The directory ssh's system-wide configuration includes (Debian's /etc/ssh/ssh_config
/// has `Include /etc/ssh/ssh_config.d/*.conf`; deploy/ci-setup.sh makes sure).
const SSH_INCLUDE_DIR: &str = "/etc/ssh/ssh_config.d";

/// One test at a time: each makes four hosts with an sshd and 16 daemons.
static SERIAL: Mutex<()> = Mutex::new(());

/// Bounds for waiting on conditions (generous: the machine may be loaded).
const PATIENCE: Duration = Duration::from_secs(180);

/// Runs `cmd`; panics with what it printed unless it succeeded.
fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `done` every 200 ms until it holds or `PATIENCE` passed; whether it held.
fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + PATIENCE;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Four hosts with an sshd each, reachable as `<tag>h<k>` through root's ssh configuration.
/// Dropping it stops the sshds and removes the keys and the configuration, then the hosts.
struct SshHosts {
    sshds: Vec<Child>,
    dir: PathBuf,
    config: PathBuf,
    hosts: Hosts,
}

impl SshHosts {
    fn create() -> SshHosts {
        let hosts = Hosts::create(HOSTS);
        let dir = std::env::temp_dir().join(hosts.tag());
        let config = Path::new(SSH_INCLUDE_DIR).join(format!("{}.conf", hosts.tag()));
        let mut me = SshHosts {
            sshds: Vec::new(),
            dir,
            config,
            hosts,
        };
        std::fs::create_dir_all(&me.dir).unwrap();
        // sshd's privilege separation directory.
        std::fs::create_dir_all("/run/sshd").unwrap();
        let key = |name: &str| {
            run_ok(
                Command::new("ssh-keygen")
                    .args(["-q", "-t", "ed25519", "-N", "", "-C"])
                    .args([name, "-f", me.dir.join(name).to_str().unwrap()]),
            );
            me.dir.join(name)
        };
        let host_key = key("host_key");
        let user_key = key("user_key");
        let authorized = me.dir.join("authorized_keys");
        std::fs::copy(user_key.with_extension("pub"), &authorized).unwrap();
        let mut client = String::new();
        for k in 1..=HOSTS {
            let addr = me.hosts.addr(k);
            let conf = me.dir.join(format!("sshd_h{k}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "ListenAddress {addr}\nPort 22\nHostKey {}\nPidFile {}\n\
                     AuthorizedKeysFile {}\nPermitRootLogin prohibit-password\n\
                     PubkeyAuthentication yes\nPasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n\
                     PrintMotd no\nAcceptEnv SDM_*\nMaxStartups 200:30:400\nMaxSessions 200\n",
                    host_key.display(),
                    me.dir.join(format!("sshd_h{k}.pid")).display(),
                    authorized.display(),
                ),
            )
            .unwrap();
            let log = std::fs::File::create(me.dir.join(format!("sshd_h{k}.log"))).unwrap();
            let sshd = me
                .hosts
                .exec(k, "/usr/sbin/sshd")
                .args(["-D", "-e", "-f"])
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("starting sshd in a namespace");
            me.sshds.push(sshd);
            client.push_str(&format!(
                "Host {}\n    HostName {addr}\n    User root\n    IdentityFile {}\n    \
                 IdentitiesOnly yes\n    StrictHostKeyChecking no\n    \
                 UserKnownHostsFile /dev/null\n    LogLevel ERROR\n    BatchMode yes\n    \
                 ConnectTimeout 20\n    SetEnv {KEEPALIVE_ENV}=100,3000 {PATIENCE_ENV}=60000\n",
                me.hosts.namespace(k),
                user_key.display()
            ));
        }
        std::fs::write(&me.config, client).unwrap();
        // ssh must read it (deploy/ci-setup.sh puts the Include in root's ssh configuration).
        let first = me.name(1);
        let g = run_ok(Command::new("ssh").args(["-G", &first]));
        assert!(
            g.lines()
                .any(|l| l == format!("hostname {}", me.hosts.addr(1))),
            "ssh does not read {}: run deploy/ci-setup.sh, which makes /etc/ssh/ssh_config \
             include {SSH_INCLUDE_DIR}/*.conf",
            me.config.display()
        );
        for k in 1..=HOSTS {
            let name = me.name(k);
            let ok = wait_for(|| {
                Command::new("ssh")
                    .args(["-n", &name, "true"])
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            });
            let log = std::fs::read_to_string(me.dir.join(format!("sshd_h{k}.log")));
            assert!(ok, "ssh {name} true never worked; sshd said: {log:?}");
        }
        me
    }

    /// Host `k`'s ssh name.
    fn name(&self, k: u32) -> String {
        self.hosts.namespace(k)
    }

    /// Every host's ssh name.
    fn names(&self) -> Vec<String> {
        (1..=HOSTS).map(|k| self.name(k)).collect()
    }
}

/// Every host in Slurm's hostlist form, `<tag>h[1-4]`.
fn hostlist(hosts: &Hosts) -> String {
    format!("{}h[1-{HOSTS}]", hosts.tag())
}

/// How `ss` names the `sdm` daemons: by their comm, the first 15 bytes of the file name.
fn sdm_comm() -> String {
    let exe = Path::new(support::sdm())
        .file_name()
        .unwrap()
        .to_string_lossy();
    exe.chars().take(15).collect()
}

/// The local addresses of the `sdm` daemons' sockets in host `k` of `hosts` (TCP listeners,
/// or for quic the UDP sockets), from `ss` inside its namespace.
fn daemon_sockets(hosts: &Hosts, k: u32, transport: &str) -> Vec<String> {
    let flags = if transport == "quic" {
        "-Hlunp"
    } else {
        "-Hltnp"
    };
    let out = run_ok(hosts.exec(k, "ss").arg(flags));
    let comm = sdm_comm();
    out.lines()
        .filter(|l| l.contains(&format!("((\"{comm}\"")))
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_owned))
        .collect()
}

/// Each host's `PER_HOST` servers listen on that host's address, none on loopback.
fn assert_servers_on_their_hosts(hosts: &Hosts, transport: &str) {
    for k in 1..=HOSTS {
        let socks = daemon_sockets(hosts, k, transport);
        let here = format!("{}:", hosts.addr(k));
        let on_host = socks.iter().filter(|s| s.starts_with(&here)).count();
        assert!(
            on_host >= PER_HOST as usize,
            "host {k}: {on_host} daemon sockets on {here}, not {PER_HOST}: {socks:?}"
        );
        if transport == "tcp" {
            assert_eq!(on_host, PER_HOST as usize, "host {k}: {socks:?}");
        }
        assert!(
            !socks
                .iter()
                .any(|s| s.starts_with("127.") || s.starts_with("[::1]")),
            "host {k}: a daemon listens on loopback: {socks:?}"
        );
    }
}

/// No `sdm` daemon is left on any host (`when` says after what).
fn assert_daemons_gone(hosts: &Hosts, transport: &str, when: &str) {
    for k in 1..=HOSTS {
        assert!(
            wait_for(|| daemon_sockets(hosts, k, transport).is_empty()),
            "host {k}: daemons left after {when}: {:?}",
            daemon_sockets(hosts, k, transport)
        );
    }
}

impl Drop for SshHosts {
    fn drop(&mut self) {
        for s in &mut self.sshds {
            let _ = s.kill();
            let _ = s.wait();
        }
        let _ = std::fs::remove_file(&self.config);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running `sdm` command, interrupted and then killed if the test ends early.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// `sdm launch … --send ping --hold` with the arguments `args` adds, until the merged reply
/// to the ping came back: the running command and what it printed so far.
fn launch_held(args: impl FnOnce(&mut Command)) -> (Running, Vec<String>) {
    let mut cmd = Command::new(support::sdm());
    cmd.arg("launch");
    args(&mut cmd);
    let mut child = cmd
        .args(["--timeout", "150", "--send", "ping", "--hold"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("running sdm launch");
    let out = child.stdout.take().unwrap();
    let running = Running(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    while !lines.iter().any(|l: &String| l.ends_with(" pong")) {
        match rx.recv_timeout(PATIENCE) {
            Ok(l) => lines.push(l),
            Err(e) => panic!("sdm launch ({e}) printed only: {lines:#?}"),
        }
    }
    (running, lines)
}

/// What a held `sdm launch -n 16 --send ping` printed: all 16 ready, none failed, and one
/// merged `[0-15] pong`.
fn assert_all_ready_and_pong(lines: &[String]) {
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ready  [0-15] (16 of 16)")),
        "{lines:#?}"
    );
    assert!(lines.contains(&"[0-15] pong".to_owned()), "{lines:#?}");
    assert!(!lines.iter().any(|l| l.starts_with("failed")), "{lines:#?}");
    eprintln!("sdm launch printed:\n{}", lines.join("\n"));
}

/// SIGTERM to `child`, then SIGKILL if it has not ended within `PATIENCE`; reaped.
fn terminate(child: &mut Child) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    if !wait_for(|| matches!(child.try_wait(), Ok(Some(_)))) {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// ^C to a held `sdm launch`: it shuts the tree down and exits with success.
fn interrupt(mut running: Running) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(running.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let ended = wait_for(|| matches!(running.0.try_wait(), Ok(Some(_))));
    assert!(ended, "sdm launch did not end after ^C");
    let status = running.0.wait().unwrap();
    assert!(status.success(), "sdm launch: {status}");
}

/// `sdm launch --launcher ssh --hosts … -n 16 --send ping --hold`: all ready, one merged
/// pong, every host's servers on that host's address (none on loopback), and after ^C no
/// daemon left on any host.
fn launch_through_ssh(transport: &str) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = SshHosts::create();
    let n = HOSTS * PER_HOST;
    let (running, lines) = launch_held(|c| {
        c.args(["--launcher", "ssh", "--hosts", &hostlist(&h.hosts)])
            .args(["-n", &n.to_string(), "--transport", transport]);
    });
    assert_all_ready_and_pong(&lines);
    assert_servers_on_their_hosts(&h.hosts, transport);
    // ^C: the tree shuts down on every host.
    interrupt(running);
    assert_daemons_gone(&h.hosts, transport, "the front-end ended");
}

#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 and sshd (deploy/ci-setup.sh)"
)]
fn ssh_launch_across_four_hosts() {
    launch_through_ssh("tcp");
}

#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 and sshd (deploy/ci-setup.sh)"
)]
fn ssh_launch_across_four_hosts_over_quic() {
    launch_through_ssh("quic");
}

/// The host (from 1) of server `id`: the ssh launcher goes round robin over the hosts.
fn host_of(id: u32) -> u32 {
    id % HOSTS + 1
}

#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 and sshd (deploy/ci-setup.sh)"
)]
fn a_host_cut_off_mid_command_is_lost_and_comes_back() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = SshHosts::create();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(cut_and_restore(&h));
}

/// 16 servers through the Session API on `h`; one host's link cut mid-command and restored.
async fn cut_and_restore(h: &SshHosts) {
    let n = HOSTS * PER_HOST;
    let opts = SessionOptions {
        n,
        launcher: LauncherKind::Ssh,
        hosts: h.names(),
        program: Some(support::sdm().into()),
        startup_timeout: Duration::from_secs(150),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    let all = IdSet::all(n);
    assert_eq!(s.report().ready, all, "{:?}", s.report().failed);
    let g = s.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!((g[0].status, &g[0].sources), (Status::Replied, &all));

    // Cut a host whose servers all have servers for parents: the daemons (short keepalives,
    // from the ssh configuration) notice the silence, not the master (default timings).
    let topo = Shape::Binomial.build(n);
    let cut = (1..=HOSTS)
        .find(|&k| {
            (0..n)
                .filter(|&id| host_of(id) == k)
                .all(|id| matches!(topo.parent(NodeId::Server(id)), Some(NodeId::Server(_))))
        })
        .expect("a host whose servers all have server parents");
    let on_cut: IdSet = (0..n).filter(|&id| host_of(id) == cut).collect();
    let mut below = IdSet::new();
    for id in on_cut.iter() {
        below.union_with(&topo.subtree(NodeId::Server(id)));
    }
    let survivors = &all - &below;

    let op = s.send(&all, SyncMode::WaitAll, "sleep 5000").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.hosts.set_link(cut, false);
    let g = s.collect(op, &all).await.unwrap();
    assert_partition(&g, &all);
    let lost = ids_with(&g, Status::Lost);
    assert!(
        on_cut.is_subset(&lost),
        "host {cut} ({on_cut}) not all lost: {g:?}"
    );
    assert!(
        lost.is_subset(&below),
        "lost beyond host {cut}'s subtrees: {g:?}"
    );
    assert!(survivors.is_subset(&ids_with(&g, Status::Replied)), "{g:?}");
    for lost in g.iter().filter(|x| x.status == Status::Lost) {
        let why = String::from_utf8_lossy(&lost.payload);
        assert!(why.contains("keepalive"), "{} lost: {why}", lost.sources);
    }
    // The others still answer while the host is away.
    let g = s.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_partition(&g, &all);
    assert!(survivors.is_subset(&ids_with(&g, Status::Replied)), "{g:?}");
    assert!(on_cut.is_subset(&ids_with(&g, Status::Lost)), "{g:?}");

    // The link comes back: the cut-off servers re-attach and every server answers for itself.
    h.hosts.set_link(cut, true);
    let until = tokio::time::Instant::now() + PATIENCE;
    let mut g;
    loop {
        g = s.request(&all, SyncMode::WaitAll, "value").await.unwrap();
        assert_partition(&g, &all);
        if ids_with(&g, Status::Replied) == all || tokio::time::Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let answered: IdSet = g
        .iter()
        .filter(|g| g.status == Status::Replied)
        .map(|g| String::from_utf8_lossy(&g.payload).parse::<u32>().unwrap())
        .collect();
    assert_eq!(answered, all, "after the link came back: {g:?}");

    s.shutdown(Duration::from_secs(30)).await;
    assert_daemons_gone(&h.hosts, "tcp", "shutdown");
}

#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 and sshd (deploy/ci-setup.sh)"
)]
fn advertising_loopback_to_another_host_is_an_error_naming_it() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = SshHosts::create();
    let out = Command::new(support::sdm())
        .args([
            "launch",
            "--launcher",
            "ssh",
            "--hosts",
            &h.names().join(","),
        ])
        .args(["-n", "4", "--timeout", "30", "--advertise", "127.0.0.1"])
        .args(["--send", "ping"])
        .output()
        .expect("running sdm launch");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains("ready  [0-3]"), "{stdout}{stderr}");
    // Each server says who it is, where, and which addresses.
    let host = sdm_server::monitor::hostname();
    let fe = h.hosts.gateway();
    for id in 0..4 {
        let said = stderr
            .lines()
            .find(|l| l.contains(&format!("server {id} on host {host}")))
            .unwrap_or_else(|| panic!("server {id} said nothing: {stdout}{stderr}"));
        assert!(
            said.contains("loopback address 127.0.0.1") && said.contains(&fe),
            "{said}"
        );
    }
}

/// IPv6 end to end on this machine: `--listen ::1` puts the front-end on `[::1]`, and the
/// servers, following the route there, bind and advertise `[::1]` too (seen with `ss`).
#[test]
fn a_tree_over_ipv6_loopback() {
    if std::net::UdpSocket::bind("[::1]:0").is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "IPv6 loopback is missing under CI"
        );
        eprintln!("skipped: this machine has no IPv6 loopback");
        return;
    }
    let (running, lines) = launch_held(|c| {
        c.args(["-n", "4", "--listen", "::1"]);
    });
    assert!(
        lines.iter().any(|l| l.starts_with("ready  [0-3] (4 of 4)")),
        "{lines:#?}"
    );
    assert!(lines.contains(&"[0-3] pong".to_owned()), "{lines:#?}");
    // The daemons are below the launch (local launcher: the master, and the servers under
    // the one process they were forked from): their TCP listeners.
    let below = support::descendants_of(running.0.id());
    let pids: Vec<String> = below.iter().map(|p| format!("pid={p},")).collect();
    assert_eq!(pids.len(), 6, "master, supervisor and 4 servers: {below:?}");
    let ss = run_ok(Command::new("ss").arg("-Hltnp"));
    let socks: Vec<&str> = ss
        .lines()
        .filter(|l| pids.iter().any(|p| l.contains(p.as_str())))
        .filter_map(|l| l.split_whitespace().nth(3))
        .collect();
    assert!(socks.len() >= 4, "{socks:?}");
    assert!(socks.iter().all(|s| s.starts_with("[::1]:")), "{socks:?}");
    interrupt(running);
}

/// `sdm run --launcher mpirun --hosts TAGh[1-4] -n 8 CONSOLE_ARGS -- PROGRAM` (an MPI test
/// program), its ranks talking over TCP only (see below), to its end.
fn sdm_run_across(h: &SshHosts, console: &[&str], program: &str) -> std::process::Output {
    Command::new(support::sdm())
        .args([
            "run",
            "--launcher",
            "mpirun",
            "--hosts",
            &hostlist(&h.hosts),
            "-n",
            "8",
        ])
        .args(console)
        .arg("--")
        .arg(support::mpi_program(program))
        .env("OMPI_MCA_btl", "self,tcp")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("running sdm run")
}

/// `sdm run --launcher mpirun --hosts … -n 8 -- mpi_allreduce`: Open MPI starts its daemons
/// over ssh into the four hosts, they start the sdm servers, the servers start the ranks,
/// and the ranks' MPI_Allreduce and token ring cross the bridge. The hosts share one kernel,
/// one host name and one /dev/shm, which Open MPI's shared-memory transport (vader) takes for
/// one machine's and crashes on, so the ranks talk over TCP only (`OMPI_MCA_btl=self,tcp`,
/// which mpirun passes on to every host), as ranks on separate machines do.
#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh, sdm_have_mpirun)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, sshd and Open MPI (deploy/ci-setup.sh)"
)]
fn an_mpi_job_across_four_hosts_under_mpirun() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = SshHosts::create();
    let out = sdm_run_across(&h, &[], "mpi_allreduce");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "[0-7] size=8 allreduce=28 ring=8 ok",
            "[0-7] exited with status 0"
        ],
        "stderr: {stderr}"
    );
    assert!(out.status.success(), "{:?}; stderr: {stderr}", out.status);
}

/// The `sdm` daemons' established TCP connections in host `k`: the peer addresses.
fn daemon_peers(h: &SshHosts, k: u32) -> Vec<String> {
    let out = run_ok(h.hosts.exec(k, "ss").arg("-Htnp"));
    let comm = sdm_comm();
    out.lines()
        .filter(|l| l.starts_with("ESTAB") && l.contains(&format!("((\"{comm}\"")))
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_owned))
        .collect()
}

/// `--topology file:PATH` in MRNet's form places the interior nodes on chosen hosts: h1 and
/// h2 hold the master's children, h3's servers hang below h1's interior node and h4's below
/// h2's, so h3 and h4 talk only to h1 and h2 (`ss` inside each namespace).
#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 and sshd (deploy/ci-setup.sh)"
)]
fn a_topology_file_places_interior_nodes_on_chosen_hosts() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = SshHosts::create();
    let [h1, h2, h3, h4] = [1, 2, 3, 4].map(|k| h.name(k));
    let file = h.dir.join("tree.top");
    std::fs::write(
        &file,
        format!(
            "# MRNet's form: the root is the front-end's host\nfe:0 => {h1}:0 {h2}:0 ;\n\
             {h1}:0 => {h1}:1 {h3}:0 {h3}:1 ;\n{h2}:0 => {h2}:1 {h4}:0 {h4}:1 ;\n"
        ),
    )
    .unwrap();
    let (running, lines) = launch_held(|c| {
        c.args(["--launcher", "ssh", "-n", "8"])
            .arg("--topology")
            .arg(format!("file:{}", file.display()));
    });
    assert!(
        lines.iter().any(|l| l.starts_with("ready  [0-7] (8 of 8)")),
        "{lines:#?}"
    );
    assert!(lines.contains(&"[0-7] pong".to_owned()), "{lines:#?}");
    // Two servers on each host, on its own address.
    for k in 1..=HOSTS {
        let here = format!("{}:", h.hosts.addr(k));
        let socks = daemon_sockets(&h.hosts, k, "tcp");
        assert_eq!(
            socks.iter().filter(|s| s.starts_with(&here)).count(),
            2,
            "host {k}: {socks:?}"
        );
    }
    // The leaves on h3 and h4 are connected to their interior node's host only.
    for (leaf, interior) in [(3, 1), (4, 2)] {
        let peers = daemon_peers(&h, leaf);
        let want = format!("{}:", h.hosts.addr(interior));
        assert!(
            peers.len() >= 2 && peers.iter().all(|p| p.starts_with(&want)),
            "host {leaf}'s daemons should talk only to host {interior}: {peers:?}"
        );
    }
    interrupt(running);
}

/// A hung MPI job across the four hosts, started by `mpirun` outside sdm; terminated (and
/// its ranks with it) at the end, whatever happens.
struct HungJobAcross {
    mpirun: Child,
    prog: PathBuf,
}

impl HungJobAcross {
    fn start(h: &SshHosts, n: u32) -> HungJobAcross {
        let prog = support::mpi_program("mpi_hang");
        let per_host = n / HOSTS;
        let hosts: Vec<String> = h
            .names()
            .iter()
            .map(|name| format!("{name}:{per_host}"))
            .collect();
        let mut mpirun = Command::new("mpirun")
            .args(["--allow-run-as-root", "--oversubscribe", "--host"])
            .arg(hosts.join(","))
            .args(["-n", &n.to_string()])
            .arg(&prog)
            .env("OMPI_MCA_btl", "self,tcp")
            .env_remove("SLURM_JOB_ID")
            .env_remove("SLURM_JOBID")
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting mpirun");
        let out = mpirun.stdout.take().unwrap();
        let job = HungJobAcross { mpirun, prog };
        let mut lines = BufReader::new(out).lines();
        for _ in 0..n {
            let l = lines.next().expect("a rank's ready line").unwrap();
            assert_eq!(l, "ready");
        }
        std::thread::spawn(move || for _ in lines {});
        job
    }
}

impl Drop for HungJobAcross {
    fn drop(&mut self) {
        // SIGTERM first: mpirun then ends the ranks on every host through its daemons.
        terminate(&mut self.mpirun);
        // Never leave a spinning rank behind for the tests that follow.
        let _ = Command::new("pkill")
            .args(["-KILL", "-f"])
            .arg(&self.prog)
            .status();
    }
}

/// `sdm attach MPIRUN` on a hung job whose ranks run on four hosts: the process table (from
/// mpirun's MPIR table) names the hosts, one server starts on each rank's host through ssh
/// and attaches to its rank; `stop`, `bt --classes`, `cont` and `detach` act on all ranks.
#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh, sdm_have_mpirun)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, sshd and Open MPI (deploy/ci-setup.sh)"
)]
fn attach_to_a_hung_mpi_job_across_four_hosts() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = SshHosts::create();
    let n = 8u32;
    let job = HungJobAcross::start(&h, n);
    let mpirun = job.mpirun.id().to_string();
    let table = support::sdm_ok(["attach", &mpirun, "--table", "--json"]);
    let hosts: Vec<String> = table
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["host"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(hosts.len(), n as usize, "{table}");
    let names = h.names();
    for name in &names {
        assert_eq!(
            hosts.iter().filter(|x| *x == name).count(),
            (n / HOSTS) as usize,
            "{table}"
        );
    }
    let out = Command::new(support::sdm())
        .args(["attach", &mpirun])
        .args([
            "-c",
            "stop",
            "-c",
            "bt --classes",
            "-c",
            "cont",
            "-c",
            "status",
        ])
        .args(["-c", "detach"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    let last = n - 1;
    assert_eq!(lines[0], format!("[0-{last}] stopped"), "{stdout}{stderr}");
    support::assert_hung_job_classes(&lines, n, &format!("{stdout}{stderr}"));
    assert!(
        lines.contains(&format!("[0-{last}] running").as_str()),
        "{stdout}{stderr}"
    );
    assert_eq!(
        lines.last().copied(),
        Some(format!("[0-{last}] detached").as_str()),
        "{stdout}{stderr}"
    );
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    // The servers ran on the ranks' hosts: none is left on any of them.
    assert_daemons_gone(&h.hosts, "tcp", "detach");
    // The job is still running after the detach.
    assert!(matches!(
        Command::new("kill")
            .args(["-0", &mpirun])
            .status()
            .map(|s| s.success()),
        Ok(true)
    ));
    drop(job);
}

/// The port every slurmd of [`SlurmHosts`] listens on, inside its own host.
const SLURMD_PORT: u16 = 6818;

/// A Slurm cluster of its own on four hosts: slurmctld in the root namespace on the bridge's
/// address, one slurmd per host as node `<tag>h<k>` (its `NodeAddr` that host's address,
/// `PER_HOST` CPUs), with configuration, state, spool and logs in a directory of its own,
/// named to every Slurm command by `SLURM_CONF`. The machine's cluster (deploy/ci-setup.sh)
/// is left alone: this one has its own name, partition and slurmctld port; munge is shared.
/// Dropping it cancels its jobs, stops its daemons and removes the directory, then the hosts.
struct SlurmHosts {
    slurmds: Vec<Child>,
    slurmctld: Option<Child>,
    dir: PathBuf,
    conf: PathBuf,
    hosts: Hosts,
}

impl SlurmHosts {
    fn create() -> SlurmHosts {
        let hosts = Hosts::create(HOSTS);
        let dir = std::env::temp_dir().join(format!("{}-slurm", hosts.tag()));
        let mut me = SlurmHosts {
            slurmds: Vec::new(),
            slurmctld: None,
            conf: dir.join("slurm.conf"),
            dir,
            hosts,
        };
        for k in 1..=HOSTS {
            std::fs::create_dir_all(me.dir.join("spool").join(me.hosts.namespace(k))).unwrap();
        }
        std::fs::create_dir_all(me.dir.join("state")).unwrap();
        std::fs::write(&me.conf, me.config()).unwrap();

        let out = std::fs::File::create(me.dir.join("slurmctld.out")).unwrap();
        let slurmctld = me
            .slurm(&mut Command::new("/usr/sbin/slurmctld"))
            .arg("-D")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("starting slurmctld");
        me.slurmctld = Some(slurmctld);
        let up = wait_for(|| {
            me.slurm(&mut Command::new("scontrol"))
                .arg("ping")
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"))
        });
        assert!(up, "slurmctld never answered: {}", me.logs());

        for k in 1..=HOSTS {
            let out = std::fs::File::create(me.dir.join(format!("slurmd-h{k}.out"))).unwrap();
            let slurmd = me
                .slurm(&mut me.hosts.enter(k, "/usr/sbin/slurmd"))
                .args(["-D", "-N", &me.hosts.namespace(k)])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(out)
                .spawn()
                .expect("starting slurmd in a namespace");
            me.slurmds.push(slurmd);
        }
        let idle = wait_for(|| {
            let states = me.squery("sinfo", &["-h", "-N", "-o", "%N %T"]);
            states.lines().filter(|l| l.ends_with(" idle")).count() == HOSTS as usize
        });
        assert!(
            idle,
            "the nodes never all became idle: {}{}",
            me.squery("sinfo", &["-N", "-l"]),
            me.logs()
        );
        me
    }

    /// The cluster's slurm.conf.
    fn config(&self) -> String {
        let tag = self.hosts.tag();
        let dir = self.dir.display();
        let controller = sdm_server::monitor::hostname();
        let controller = controller.split('.').next().unwrap();
        // A port for slurmctld that is free now on the bridge's address.
        let port = std::net::TcpListener::bind((self.hosts.gateway().as_str(), 0))
            .and_then(|l| l.local_addr())
            .expect("a free port for slurmctld")
            .port();
        let mut conf = format!(
            "ClusterName={tag}\nSlurmctldHost={controller}({gw})\nSlurmctldPort={port}\n\
             SlurmdPort={SLURMD_PORT}\nSlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nCredType=cred/munge\n\
             StateSaveLocation={dir}/state\nSlurmdSpoolDir={dir}/spool/%n\n\
             SlurmctldPidFile={dir}/slurmctld.pid\nSlurmdPidFile={dir}/slurmd-%n.pid\n\
             SlurmctldLogFile={dir}/slurmctld.log\nSlurmdLogFile={dir}/slurmd-%n.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\nMpiDefault=none\nSwitchType=switch/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n\
             SlurmdParameters=config_overrides\nReturnToService=2\nInactiveLimit=0\n\
             KillWait=5\nMinJobAge=30\nMessageTimeout=20\nMailProg=/bin/true\n",
            gw = self.hosts.gateway(),
        );
        for k in 1..=HOSTS {
            conf.push_str(&format!(
                "NodeName={} NodeAddr={} CPUs={PER_HOST} RealMemory=1000 State=UNKNOWN\n",
                self.hosts.namespace(k),
                self.hosts.addr(k)
            ));
        }
        conf.push_str(&format!(
            "PartitionName={tag} Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
        ));
        conf
    }

    /// `cmd` set to act on this cluster: `SLURM_CONF` names its configuration, and no
    /// `SLURM_*` variable of the caller (a job it runs in) comes along.
    fn slurm<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SLURM_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("SLURM_CONF", &self.conf)
    }

    /// What the Slurm command `program args` printed about this cluster (errors included).
    fn squery(&self, program: &str, args: &[&str]) -> String {
        match self.slurm(&mut Command::new(program)).args(args).output() {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("{program}: {e}"),
        }
    }

    /// The ends of the daemons' logs, for a failure's message.
    fn logs(&self) -> String {
        let mut text = String::new();
        let mut names = vec!["slurmctld.log".to_owned()];
        names.extend((1..=HOSTS).map(|k| format!("slurmd-{}.log", self.hosts.namespace(k))));
        for name in names {
            let log = std::fs::read_to_string(self.dir.join(&name)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            text.push_str(&format!("\n--- {name}:\n{tail}"));
        }
        text
    }

    /// The ids of this cluster's jobs.
    fn jobs(&self) -> Vec<String> {
        let out = self
            .slurm(&mut Command::new("squeue"))
            .args(["-h", "-o", "%i"])
            .output();
        out.map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
    }
}

impl Drop for SlurmHosts {
    fn drop(&mut self) {
        // Jobs first (an srun a failed test left ends with its job), then the daemons.
        let jobs = self.jobs();
        if !jobs.is_empty() {
            let _ = self
                .slurm(&mut Command::new("scancel"))
                .args(&jobs)
                .status();
            wait_for(|| self.jobs().is_empty());
        }
        for d in &mut self.slurmds {
            terminate(d);
        }
        if let Some(c) = &mut self.slurmctld {
            terminate(c);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `sdm launch --launcher srun -n 16` on a Slurm cluster whose nodes are the four hosts,
/// three times: with `--launcher-args '-N 4'` (Slurm picks the nodes; srun names no host to
/// find a route to, so `--listen` gives the front-end the bridge's address); with `--hosts
/// '<tag>h[1-4]'` and no address flag (`--nodelist`; the front-end finds its route to the
/// first node through the node's `NodeAddr`, which only Slurm knows); and under `salloc -N 4`
/// with neither (the route to the allocation's first node).
#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_slurm)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, Slurm and munge (deploy/ci-setup.sh)"
)]
fn srun_launch_across_four_slurm_nodes() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = SlurmHosts::create();
    let n = (HOSTS * PER_HOST).to_string();
    let nodes = format!("-N {HOSTS}");
    srun_across(
        &h,
        &[
            "-n",
            &n,
            "--launcher-args",
            &nodes,
            "--listen",
            &h.hosts.gateway(),
        ],
    );
    srun_across(&h, &["-n", &n, "--hosts", &hostlist(&h.hosts)]);

    // Inside an allocation, as on a login node: no host and no address given, the front-end
    // finds its route to the job's first node (`SLURM_JOB_NODELIST`) by itself.
    let out = h
        .slurm(&mut Command::new("salloc"))
        .args(["-N", &HOSTS.to_string(), "-n", &n])
        .arg(support::sdm())
        .args(["launch", "--launcher", "srun", "-n", &n])
        .args(["--timeout", "150", "--send", "ping"])
        .stdin(Stdio::null())
        .output()
        .expect("running salloc");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
    assert!(
        out.status.success(),
        "salloc … sdm launch: {}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_all_ready_and_pong(&lines);
    assert!(
        wait_for(|| h.jobs().is_empty()),
        "the allocation is still there after salloc ended: {}",
        h.squery("squeue", &[])
    );
}

/// `sdm launch --launcher srun ARGS --send ping --hold` on `h`: Slurm runs one step on the
/// four nodes, each slurmd starts its host's four servers, which listen on that host's
/// address; all ready, one merged pong; after ^C no daemon is left on any host and the job
/// has ended.
fn srun_across(h: &SlurmHosts, args: &[&str]) {
    let (running, lines) = launch_held(|c| {
        h.slurm(c).args(["--launcher", "srun"]).args(args);
    });
    assert_all_ready_and_pong(&lines);
    let nodes = h.squery("squeue", &["-h", "-o", "%D %N"]);
    assert_eq!(
        nodes.trim(),
        format!("{HOSTS} {}", hostlist(&h.hosts)),
        "{args:?}: {nodes}"
    );
    assert_servers_on_their_hosts(&h.hosts, "tcp");
    interrupt(running);
    assert_daemons_gone(&h.hosts, "tcp", "the front-end ended");
    assert!(
        wait_for(|| h.jobs().is_empty()),
        "{args:?}: the job is still there after the front-end ended: {}",
        h.squery("squeue", &[])
    );
}

/// `sdm run --launcher mpirun --hosts … -- mpi_hang` with `stop`, `bt`, `cont`, `kill`: the
/// console acts on the MPI job's ranks on all four hosts. Where each rank stands when it is
/// stopped depends on timing, so the check is that every command reached all eight: one
/// `[0-7] stopped`, the stack trees' roots covering [0-7] once, `[0-7] running`, `[0-7]
/// killed`.
#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh, sdm_have_mpirun)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, sshd and Open MPI (deploy/ci-setup.sh)"
)]
fn stop_bt_cont_on_an_mpi_job_across_four_hosts_under_sdm_run() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = SshHosts::create();
    let out = sdm_run_across(
        &h,
        &[
            "-c",
            "sleep 3",
            "-c",
            "stop",
            "-c",
            "bt --thread 1",
            "-c",
            "cont",
            "-c",
            "kill",
        ],
        "mpi_hang",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    let at = |want: &str| {
        lines
            .iter()
            .position(|l| *l == want)
            .unwrap_or_else(|| panic!("no line {want:?}: {stdout}{stderr}"))
    };
    let (stopped, running) = (at("[0-7] stopped"), at("[0-7] running"));
    assert!(stopped < running, "{stdout}");
    // The main threads' trees printed by bt: their outermost frames account for every rank
    // once.
    let mut roots = IdSet::new();
    for l in &lines[stopped + 1..running] {
        if let Some((ids, _)) = l.strip_prefix('[').and_then(|r| r.split_once(']')) {
            let ids: IdSet = format!("[{ids}]").parse().unwrap();
            assert!(roots.is_disjoint(&ids), "{l}: {stdout}");
            roots.union_with(&ids);
        }
    }
    assert_eq!(roots, IdSet::all(8), "{stdout}{stderr}");
    assert!(at("[0-7] killed") > running, "{stdout}");
}
