//! MPICH (4.0, Debian's): tests/programs/mpi_hang.c built with `mpicc.mpich`, hung under
//! hydra's `mpiexec.hydra` (every rank but the last in `MPI_Barrier`, the last computing),
//! attached with `sdm attach MPIEXEC_PID`. Debian's hydra keeps no MPIR table, so the
//! table comes from the launcher's process tree: its ranks carry `PMI_RANK`; across hosts
//! it starts a `hydra_pmi_proxy` on each over ssh, which sdm follows, reading each host's
//! tree there.
//!
//! - On this host: the table names 4 ranks; `stop`, `bt --classes` (two classes, every
//!   rank in one), `detach`.
//! - Across the four namespace hosts: the table places two ranks on each host; the same
//!   commands reach all 8 ranks, and no server is left on any host after `detach`.
//!
//! Launch mode, `sdm run --launcher hydra -- mpi_hang`: hydra holds nothing itself, so each
//! task runs under `sdm hold-task`, held before its first instruction; with
//! `--stop-at-main` every rank is seen stopped in `main` (a job not held would be past it,
//! in its barrier), one server per host; once continued, the job hangs as above (two
//! classes); on this host and across the four hosts; the same under `--launcher mpirun`
//! when that mpirun is MPICH's (`SDM_MPIRUN`).

use sdm_e2e as support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::daemons::assert_daemons_gone;
use support::hungjob::{HungJob, HungJobAcross};
use support::netns::one_at_a_time;
use support::sshhosts::SshHosts;

/// `sdm attach LAUNCHER --table --json`: the hosts of ranks 0..n, in rank order.
fn table_hosts(launcher: &str, n: u32) -> Vec<String> {
    let table = support::sdm_ok(["attach", launcher, "--table", "--json"]);
    let rows: Vec<serde_json::Value> = table
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ranks: Vec<u64> = rows.iter().map(|v| v["rank"].as_u64().unwrap()).collect();
    assert_eq!(ranks, (0..u64::from(n)).collect::<Vec<_>>(), "{table}");
    for v in &rows {
        assert!(
            v["executable"].as_str().unwrap().contains("mpi_hang"),
            "{table}"
        );
    }
    rows.iter()
        .map(|v| v["host"].as_str().unwrap().to_owned())
        .collect()
}

/// `sdm attach LAUNCHER -c stop -c "bt --classes" -c cont -c detach`: every rank stopped,
/// the hung job's two classes, every rank running again, then detached.
fn attach_and_classify(launcher: &str, n: u32) {
    let out = Command::new(support::sdm())
        .args(["attach", launcher])
        .args(["-c", "stop", "-c", "bt --classes", "-c", "cont"])
        .args(["-c", "detach"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let context = format!("{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let last = n - 1;
    assert_eq!(
        lines.first().copied(),
        Some(format!("[0-{last}] stopped").as_str()),
        "{context}"
    );
    support::assert_hung_job_classes(&lines, n, &context);
    assert!(
        lines.contains(&format!("[0-{last}] running").as_str()),
        "{context}"
    );
    assert_eq!(
        lines.last().copied(),
        Some(format!("[0-{last}] detached").as_str()),
        "{context}"
    );
    assert!(out.status.success(), "{:?}: {context}", out.status);
}

#[test]
#[cfg_attr(not(sdm_have_mpich), ignore = "needs MPICH (deploy/ci-setup.sh)")]
fn attach_to_a_hung_mpich_job() {
    let n = 4;
    let job = HungJob::start("mpiexec.hydra", n);
    let launcher = job.pid().to_string();
    let here = sdm_server::monitor::hostname();
    assert!(table_hosts(&launcher, n).iter().all(|h| *h == here));
    attach_and_classify(&launcher, n);
    // The job goes on after the detach.
    assert!(support::procs::alive(job.pid()));
}

#[test]
#[cfg_attr(
    not(all(sdm_have_mpich, sdm_have_netns, sdm_have_ssh)),
    ignore = "needs MPICH, root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 and sshd (deploy/ci-setup.sh)"
)]
fn attach_to_a_hung_mpich_job_across_four_hosts() {
    let _one = one_at_a_time();
    let h = SshHosts::create(4);
    let n = 8;
    let job = HungJobAcross::start_hydra(&h, n);
    let launcher = job.mpirun.id().to_string();
    let hosts = table_hosts(&launcher, n);
    for name in h.names() {
        assert_eq!(hosts.iter().filter(|x| **x == name).count(), 2, "{hosts:?}");
    }
    attach_and_classify(&launcher, n);
    assert_daemons_gone(&h.hosts, "tcp", "detach");
    assert!(support::procs::alive(job.mpirun.id()));
    drop(job);
}

/// `sdm run LAUNCHER -n N --stop-at-main ARGS -x - -- mpi_hang`: every rank stopped in
/// `main` before it ran, one server per host (`node_info`), then continued into the hang:
/// stopped and classified until every rank is in its barrier or computing (two classes;
/// a hang guard, not a timing); killed, and the run ends well.
fn run_held(launcher: &[&str], env: &[(&str, &str)], n: u32, servers: usize, args: &[&str]) {
    let prog = support::mpich_program("mpi_hang");
    let mut sdm = Command::new(support::sdm())
        .args(["run", "--launcher"])
        .args(launcher)
        .envs(env.iter().copied())
        .args(["-n", &n.to_string()])
        .args(args)
        .args([
            "--stop-at-main",
            "-c",
            "omis 1 [] node_info()",
            "-c",
            "status",
        ])
        .args(["-x", "-", "--"])
        .arg(&prog)
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut input = sdm.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = sdm.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let guard = Instant::now() + Duration::from_secs(600);
    let mut seen: Vec<String> = Vec::new();
    // The lines up to the first one `want` accepts (a hang guard: `guard`).
    let mut until = |want: &dyn Fn(&str) -> bool| -> Vec<String> {
        let from = seen.len();
        loop {
            let wait = guard.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(l) => {
                    let done = want(&l);
                    seen.push(l);
                    if done {
                        return seen[from..].to_vec();
                    }
                }
                Err(e) => panic!("{e}: {seen:#?}"),
            }
        }
    };
    let last = n - 1;
    let stopped = format!("[0-{last}] stopped in main at mpi_hang.c");
    let lines = until(&|l| l.starts_with(&stopped));
    // `[ids] 1 [ids] node_info(RANK,"HOST",PID)`: the distinct server pids.
    let pids: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter_map(|l| l.rsplit_once("node_info(")?.1.rsplit(',').next())
        .collect();
    assert_eq!(pids.len(), servers, "{lines:#?}");
    let running = format!("[0-{last}] running");
    writeln!(input, "cont").unwrap();
    until(&|l| l == running);
    // The hung state lasts once reached: asked again until every rank is in it.
    loop {
        writeln!(input, "sleep 1\nstop\nbt --classes\ncont").unwrap();
        let round = until(&|l| l == running);
        let round: Vec<&str> = round.iter().map(String::as_str).collect();
        if support::hung_job_classes(&round, n) {
            break;
        }
    }
    writeln!(input, "kill").unwrap();
    let killed = format!("[0-{last}] killed");
    until(&|l| l == killed);
    drop(input);
    let status = sdm.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
#[cfg_attr(not(sdm_have_mpich), ignore = "needs MPICH (deploy/ci-setup.sh)")]
fn an_mpich_job_is_held_before_main_under_hydra() {
    run_held(&["hydra"], &[], 4, 1, &[]);
}

/// `--launcher mpirun` whose mpirun is MPICH's hydra holds the job as hydra does.
#[test]
#[cfg_attr(not(sdm_have_mpich), ignore = "needs MPICH (deploy/ci-setup.sh)")]
fn an_mpich_job_is_held_before_main_under_an_mpich_mpirun() {
    let hydra = [("SDM_MPIRUN", "/usr/bin/mpiexec.hydra")];
    run_held(&["mpirun"], &hydra, 4, 1, &[]);
}

#[test]
#[cfg_attr(
    not(all(sdm_have_mpich, sdm_have_netns, sdm_have_ssh)),
    ignore = "needs MPICH, root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 and sshd (deploy/ci-setup.sh)"
)]
fn an_mpich_job_across_four_hosts_is_held_before_main_under_hydra() {
    let _one = one_at_a_time();
    let h = SshHosts::create(4);
    let hydra = format!("-launcher ssh -localhost {}", h.hosts.gateway());
    run_held(
        &["hydra"],
        &[],
        8,
        4,
        &["--hosts", &h.hosts.hostlist(), "--launcher-args", &hydra],
    );
    assert_daemons_gone(&h.hosts, "tcp", "the run ended");
}
