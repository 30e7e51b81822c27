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

use std::process::{Command, Stdio};
use std::time::Duration;

use sdm_client::session::{Session, SessionOptions};
use sdm_deploy::LauncherKind;
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::{NodeId, Shape};
use support::daemons::{
    PATIENCE, assert_daemons_gone, daemon_sockets, interrupt, launch_held, output_ok, sdm_comm,
    wait_for,
};
use support::hungjob::HungJobAcross;
use support::netns::{Hosts, one_at_a_time};
use support::slurmhosts::SlurmHosts;
use support::sshhosts::SshHosts;
use support::{assert_partition, ids_with};

/// Hosts, and servers per host.
const HOSTS: u32 = 4;
const PER_HOST: u32 = 4;

/// The seed's layout, one server per rank, which these tests count servers of (tests/
/// per_host.rs has one server per host).
const SEED_LAYOUT: [&str; 2] = ["--ranks-per-server", "1"];

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

/// `sdm launch --launcher ssh --hosts … -n 16 --send ping --hold`: all ready, one merged
/// pong, every host's servers on that host's address (none on loopback), and after ^C no
/// daemon left on any host.
fn launch_through_ssh(transport: &str) {
    let _one = one_at_a_time();
    let h = SshHosts::create(HOSTS);
    let n = HOSTS * PER_HOST;
    let (running, lines) = launch_held(|c| {
        c.args(["--launcher", "ssh", "--hosts", &h.hosts.hostlist()])
            .args(["-n", &n.to_string(), "--transport", transport])
            .args(SEED_LAYOUT);
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

#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 and sshd (deploy/ci-setup.sh)"
)]
fn a_host_cut_off_mid_command_is_lost_and_comes_back() {
    let _one = one_at_a_time();
    let h = SshHosts::create(HOSTS);
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
        ranks_per_server: Some(1),
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
                .filter(|&id| h.hosts.host_of(id) == k)
                .all(|id| matches!(topo.parent(NodeId::Server(id)), Some(NodeId::Server(_))))
        })
        .expect("a host whose servers all have server parents");
    let on_cut: IdSet = (0..n).filter(|&id| h.hosts.host_of(id) == cut).collect();
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
    let _one = one_at_a_time();
    let h = SshHosts::create(HOSTS);
    let out = Command::new(support::sdm())
        .args([
            "launch",
            "--launcher",
            "ssh",
            "--hosts",
            &h.names().join(","),
        ])
        .args(["-n", "4", "--timeout", "30", "--advertise", "127.0.0.1"])
        .args(SEED_LAYOUT)
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
        c.args(["-n", "4", "--listen", "::1"]).args(SEED_LAYOUT);
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
    let ss = output_ok(Command::new("ss").arg("-Hltnp"));
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
            &h.hosts.hostlist(),
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
    let _one = one_at_a_time();
    let h = SshHosts::create(HOSTS);
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
    let out = output_ok(h.hosts.exec(k, "ss").arg("-Htnp"));
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
    let _one = one_at_a_time();
    let h = SshHosts::create(HOSTS);
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

/// `sdm attach MPIRUN` on a hung job whose ranks run on four hosts: the process table (from
/// mpirun's MPIR table) names the hosts, one server starts on each rank's host through ssh
/// and attaches to its rank; `stop`, `bt --classes`, `cont` and `detach` act on all ranks.
#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh, sdm_have_mpirun)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, sshd and Open MPI (deploy/ci-setup.sh)"
)]
fn attach_to_a_hung_mpi_job_across_four_hosts() {
    let _one = one_at_a_time();
    let h = SshHosts::create(HOSTS);
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
    let _one = one_at_a_time();
    let h = SlurmHosts::create(HOSTS, PER_HOST);
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
    srun_across(&h, &["-n", &n, "--hosts", &h.hosts.hostlist()]);

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
        h.slurm(c)
            .args(["--launcher", "srun"])
            .args(args)
            .args(SEED_LAYOUT);
    });
    assert_all_ready_and_pong(&lines);
    let nodes = h.squery("squeue", &["-h", "-o", "%D %N"]);
    assert_eq!(
        nodes.trim(),
        format!("{HOSTS} {}", h.hosts.hostlist()),
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
    let _one = one_at_a_time();
    let h = SshHosts::create(HOSTS);
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
