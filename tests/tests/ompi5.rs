//! Open MPI 5 (issue 39): its `mpirun` is PRRTE's `prterun`, which keeps no MPIR table; sdm
//! reads the job's process table as a PMIx tool of the launcher's server and holds a job
//! it launches in `PMIx_Init` (`--stop-in-init`), released by the PMIx debugger-release
//! event. The programs are built with Open MPI 5's `mpicc` (/opt/sdm-venv, never on PATH);
//! `SDM_MPIRUN` makes `sdm run --launcher mpirun` use its `mpirun`.
//!
//! - `sdm attach MPIRUN --table --json` on a hung job (tests/programs/mpi_hang.c): every
//!   rank, its pid a process of the job, the table's source `pmix`; `stop`, `bt
//!   --classes`: the hung job's two classes; the same across the four namespace hosts, each
//!   rank on the host the table names.
//! - `sdm_server::pmix::launch_held` with `--stop-in-init` (tests/programs/mpi_hold.c):
//!   every rank reaches `MPI_Init` and none passes it until the job is released; then all
//!   do and the job ends. A job that cannot be held (fewer ranks than awaited) ends with
//!   its launcher, its ranks included.
//! - `sdm run --launcher mpirun` with Open MPI 5: one server for the host's ranks, the
//!   hung job's two classes (`stop`, `bt --classes`, `cont` until every rank is there);
//!   across the four hosts, one server per host for its two ranks; each rank traced as it
//!   leaves `MPI_Init`.
//!
//! PRRTE names a node by its daemon's host name, so the multi-host tests give each
//! namespace host its own (`SshHosts::create_named`).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use sdm_e2e::{assert_hung_job_classes, sdm_ok};

/// Open MPI 5's installation (deploy/ci-setup.sh).
const VENV: &str = "/opt/sdm-venv/bin";

/// tests/programs/NAME.c built with Open MPI 5's mpicc (once per test process), as a copy
/// of its own for each caller: the tests here run at once, and each finds (and kills) its
/// job's ranks by their executable's path.
fn ompi5_program(name: &str) -> PathBuf {
    static COPIES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let built = sdm_e2e::mpi_program_with(&format!("{VENV}/mpicc"), name);
    let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let own = built.with_file_name(format!("{name}-ompi5-{n}"));
    std::fs::copy(&built, &own).expect("a copy of the MPI program");
    own
}

/// A hung Open MPI 5 job; its launcher terminated (and its ranks killed) when dropped.
struct HungJob5 {
    mpirun: Child,
    prog: PathBuf,
}

impl HungJob5 {
    /// `mpirun -n N mpi_hang` (with `extra` arguments and environment), once every rank
    /// printed `ready`.
    fn start(n: u32, extra: &[String], env: &[(&str, &str)]) -> Self {
        let prog = ompi5_program("mpi_hang");
        let mut mpirun = Command::new(format!("{VENV}/mpirun"))
            .args(["--allow-run-as-root", "--oversubscribe"])
            .args(extra)
            .args(["-n", &n.to_string()])
            .arg(&prog)
            .envs(env.iter().copied())
            // The waiting ranks poll: let them yield the machine's few cores.
            .env("OMPI_MCA_mpi_yield_when_idle", "1")
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting Open MPI 5's mpirun");
        let out = mpirun.stdout.take().unwrap();
        let job = HungJob5 { mpirun, prog };
        let mut lines = BufReader::new(out).lines();
        for _ in 0..n {
            let l = lines.next().expect("a rank's ready line").unwrap();
            assert_eq!(l, "ready");
        }
        std::thread::spawn(move || for _ in lines {});
        job
    }

    fn pid(&self) -> String {
        self.mpirun.id().to_string()
    }
}

impl Drop for HungJob5 {
    fn drop(&mut self) {
        sdm_e2e::daemons::terminate(&mut self.mpirun);
        // Never leave a spinning rank behind (ranks on other hosts included: one kernel).
        sdm_e2e::hungjob::kill_running(&self.prog);
    }
}

/// `sdm attach MPIRUN --table --json`: (rank, host, pid) of each line, each line's source
/// checked to be PMIx and its executable `prog`.
fn pmix_table(mpirun: &str, prog: &Path) -> Vec<(u32, String, u32)> {
    let table = sdm_ok(["attach", mpirun, "--table", "--json"]);
    table
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["source"], "pmix", "{table}");
            assert_eq!(v["executable"].as_str(), prog.to_str(), "{table}");
            (
                v["rank"].as_u64().unwrap() as u32,
                v["host"].as_str().unwrap().to_owned(),
                v["pid"].as_u64().unwrap() as u32,
            )
        })
        .collect()
}

/// `sdm attach MPIRUN -c stop -c 'bt --classes' -c detach`: the hung job's two classes over
/// all `n` ranks.
fn attach_and_classify(mpirun: &str, n: u32) {
    let out = Command::new(sdm_e2e::sdm())
        .args(["attach", mpirun])
        .args(["-c", "stop", "-c", "bt --classes", "-c", "detach"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    let last = n - 1;
    assert_eq!(
        lines.first().copied(),
        Some(format!("[0-{last}] stopped").as_str()),
        "{context}"
    );
    assert_hung_job_classes(&lines, n, &context);
    assert_eq!(
        lines.last().copied(),
        Some(format!("[0-{last}] detached").as_str()),
        "{context}"
    );
    assert!(out.status.success(), "{:?}: {context}", out.status);
}

#[test]
#[cfg_attr(
    not(sdm_have_ompi5),
    ignore = "needs Open MPI 5 in /opt/sdm-venv (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn attach_to_a_hung_open_mpi_5_job_reads_its_table_through_pmix() {
    let n = 6;
    let job = HungJob5::start(n, &[], &[]);
    let table = pmix_table(&job.pid(), &job.prog);
    let ranks: Vec<u32> = table.iter().map(|t| t.0).collect();
    assert_eq!(ranks, (0..n).collect::<Vec<_>>());
    // Each pid is a rank of this job: a child of the launcher, running the program.
    let children: BTreeSet<u32> = sdm_e2e::children_of(job.mpirun.id()).into_iter().collect();
    for (rank, _, pid) in &table {
        assert!(
            children.contains(pid),
            "rank {rank}: {pid} not in {children:?}"
        );
    }
    attach_and_classify(&job.pid(), n);
}

/// `sdm attach` of an Open MPI 5 job whose ranks run on the four namespace hosts: prterun
/// starts its daemons (prted) over ssh, the table names each rank's host, and one server
/// per rank starts there. The hosts share one kernel and one /dev/shm, which Open MPI's
/// shared-memory transports take for one machine's: the ranks talk over TCP only.
#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh, sdm_have_ompi5)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, sshd and Open MPI 5 (deploy/ci-setup.sh)"
)]
fn attach_to_a_hung_open_mpi_5_job_across_four_hosts() {
    let _one = sdm_e2e::netns::one_at_a_time();
    // PRRTE names a node by its daemon's host name: each host has its own.
    let h = sdm_e2e::sshhosts::SshHosts::create_named(4);
    let n = 8u32;
    let hosts: Vec<String> = h.names().iter().map(|name| format!("{name}:2")).collect();
    let job = HungJob5::start(
        n,
        // Each host's slots in turn: PRRTE's default mapping put all eight on the first.
        &[
            "--host".into(),
            hosts.join(","),
            "--map-by".into(),
            "slot".into(),
        ],
        &[("OMPI_MCA_btl", "self,tcp"), ("OMPI_MCA_pml", "ob1")],
    );
    let table = pmix_table(&job.pid(), &job.prog);
    assert_eq!(table.len(), n as usize);
    for name in h.names() {
        assert_eq!(
            table.iter().filter(|t| t.1 == name).count(),
            2,
            "{name}: {table:?}"
        );
    }
    attach_and_classify(&job.pid(), n);
    sdm_e2e::daemons::assert_daemons_gone(&h.hosts, "tcp", "detach");
    drop(job);
}

/// The files tests/programs/mpi_hold.c made in `dir` (`before.RANK`, `after.RANK`).
fn markers(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Open MPI 5's mpirun holding `n` ranks of `prog` in `PMIx_Init`, and the environment
/// that has them write their markers into `dir` (tests/programs/mpi_hold.c).
fn held_in_init(prog: &Path, n: u32, dir: &Path) -> (Vec<String>, [(String, String); 1]) {
    let argv = [
        format!("{VENV}/mpirun"),
        "--allow-run-as-root".into(),
        "--oversubscribe".into(),
        "--stop-in-init".into(),
        "-n".into(),
        n.to_string(),
        prog.display().to_string(),
    ];
    let env = [("SDM_HOLD_DIR".to_owned(), dir.display().to_string())];
    (argv.into(), env)
}

fn four(what: &str) -> BTreeSet<String> {
    (0..4).map(|r| format!("{what}.{r}")).collect()
}

#[test]
#[cfg_attr(
    not(sdm_have_ompi5),
    ignore = "needs Open MPI 5 in /opt/sdm-venv (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn open_mpi_5_holds_its_ranks_in_pmix_init_until_released() {
    let prog = ompi5_program("mpi_hold");
    let dir = std::env::temp_dir().join(format!("sdm-ompi5-hold-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (argv, env) = held_in_init(&prog, 4, &dir);
    let job = sdm_server::pmix::launch_held(
        &argv,
        &env,
        Default::default(),
        4,
        sdm_e2e::daemons::PATIENCE,
    )
    .unwrap();
    let table = job.table();
    assert_eq!(table.source, sdm_server::mpir::TableSource::Pmix);
    assert_eq!(
        table.tasks.iter().map(|t| t.rank).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    for t in &table.tasks {
        let exe = std::fs::read_link(format!("/proc/{}/exe", t.pid)).unwrap();
        assert_eq!(exe, prog, "rank {}", t.rank);
    }
    // Held: every rank has connected to its server, so has reached MPI_Init (its `before`
    // file is there), and none has passed it.
    assert_eq!(markers(&dir), four("before"), "a rank passed MPI_Init");
    let mut launcher = job.release().unwrap();
    // Released, the ranks finish at once (a hang guard, not a timing check).
    let deadline = std::time::Instant::now() + sdm_e2e::daemons::PATIENCE;
    let status = loop {
        if let Some(s) = launcher.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = launcher.kill();
            let _ = launcher.wait();
            panic!("the released job did not end: {:?}", markers(&dir));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    let mut want = four("after");
    want.extend(four("before"));
    assert_eq!(markers(&dir), want);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A job that cannot be held (here: it has fewer ranks than awaited, so the hold times
/// out) has its launcher ended with SIGTERM, and its ranks with it: prterun killed
/// outright leaves them waiting in `PMIx_Init`, for good.
#[test]
#[cfg_attr(
    not(sdm_have_ompi5),
    ignore = "needs Open MPI 5 in /opt/sdm-venv (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn a_job_that_cannot_be_held_ends_with_its_launcher() {
    let prog = ompi5_program("mpi_hold");
    let dir = std::env::temp_dir().join(format!("sdm-ompi5-unheld-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (argv, env) = held_in_init(&prog, 2, &dir);
    let patience = std::time::Duration::from_secs(5);
    let err = sdm_server::pmix::launch_held(&argv, &env, Default::default(), 3, patience)
        .expect_err("a job of 2 ranks held as one of 3");
    assert!(
        matches!(err, sdm_server::pmix::PmixError::Timeout { .. }),
        "{err}"
    );
    // The ranks end with their launcher (the patience is a hang guard).
    let deadline = std::time::Instant::now() + sdm_e2e::daemons::PATIENCE;
    while !sdm_e2e::hungjob::running(&prog).is_empty() {
        if std::time::Instant::now() > deadline {
            sdm_e2e::hungjob::kill_running(&prog);
            panic!("ranks outlived their ended launcher: {:?}", markers(&dir));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // None passed MPI_Init.
    assert!(markers(&dir).iter().all(|m| m.starts_with("before.")));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether `round` (a `bt --classes` answer) shows the hung job of `n` ranks: every rank's
/// main thread in the barrier or in `compute` (the classes [`assert_hung_job_classes`]
/// checks); before that, ranks may still be in `MPI_Init` or on their way.
fn hung(round: &[String], n: u32) -> bool {
    let last = n - 1;
    let classes: Vec<String> = round
        .iter()
        .filter(|l| l.contains("(representative"))
        .map(|l| sdm_e2e::functions_only(l))
        .filter(|l| l.split(" > ").any(|f| f == "main"))
        .collect();
    classes.len() == 2
        && classes[0].starts_with(&format!("[0-{}] ", last - 1))
        && classes[0].contains("Barrier")
        && classes[1].starts_with(&format!("[{last}] "))
        && classes[1].ends_with(" > main > step > compute")
}

/// What [`run_until_hung`] saw: all of stdout, the round that showed the hang, stderr.
struct Seen {
    stdout: String,
    round: Vec<String>,
    context: String,
    status: std::process::ExitStatus,
}

/// Runs `sdm` (set up with `-x -`, its console reading commands from standard input) on
/// an `n`-rank mpi_hang job: `stop`, `bt --classes`, `cont` again until every rank is in
/// the barrier or `compute`, then `kill`. The patience is a hang guard only.
fn run_until_hung(cmd: &mut Command, n: u32) -> Seen {
    let mut sdm = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = BufReader::new(sdm.stdout.take().unwrap());
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut err = sdm.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let mut input = sdm.stdin.take().unwrap();
    let (running, deadline) = (
        format!("[0-{}] running", n - 1),
        std::time::Instant::now() + sdm_e2e::daemons::PATIENCE,
    );
    let mut all = Vec::new();
    let round = loop {
        assert!(std::time::Instant::now() < deadline, "never hung: {all:?}");
        writeln!(input, "stop\nbt --classes\ncont").unwrap();
        let mut round = Vec::new();
        while let Ok(l) = rx.recv_timeout(sdm_e2e::daemons::PATIENCE) {
            all.push(l.clone());
            if l == running {
                break;
            }
            round.push(l);
        }
        if hung(&round, n) {
            break round;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    writeln!(input, "kill").unwrap();
    drop(input);
    let status = sdm.wait().unwrap();
    all.extend(rx.iter());
    let stdout = all.join("\n");
    let context = format!("{stdout}\n{}", errors.join().unwrap());
    Seen {
        stdout,
        round,
        context,
        status,
    }
}

#[test]
#[cfg_attr(
    not(sdm_have_ompi5),
    ignore = "needs Open MPI 5 in /opt/sdm-venv (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn sdm_run_holds_an_open_mpi_5_job_and_sees_its_hang_with_one_server() {
    let prog = ompi5_program("mpi_hang");
    let seen = run_until_hung(
        Command::new(sdm_e2e::sdm())
            .args(["run", "--launcher", "mpirun", "-n", "6"])
            .args(["-c", "omis 1 [] node_info()", "-x", "-", "--"])
            .arg(&prog)
            .env("SDM_MPIRUN", format!("{VENV}/mpirun"))
            .env("OMPI_MCA_mpi_yield_when_idle", "1"),
        6,
    );
    let context = &seen.context;
    assert!(seen.status.success(), "{:?}: {context}", seen.status);
    // Held by the launcher (not one server per rank, the fallback): one server.
    assert_eq!(sdm_e2e::node_info_pids(&seen.stdout).len(), 1, "{context}");
    assert!(
        !context.contains("starting one server per rank"),
        "{context}"
    );
    let lines: Vec<&str> = seen.round.iter().map(String::as_str).collect();
    assert_hung_job_classes(&lines, 6, context);
}

/// `sdm run --launcher mpirun` with Open MPI 5 attaches the job's ranks before they leave
/// `MPI_Init`: each is traced as `MPI_Init` returns (tests/programs/mpi_hold.c records its
/// TracerPid then). Open MPI 5's `MPI_Init` goes on long after `PMIx_Init`, so this does
/// not tell a release just before the attach from one just after it.
#[test]
#[cfg_attr(
    not(sdm_have_ompi5),
    ignore = "needs Open MPI 5 in /opt/sdm-venv (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn sdm_run_releases_an_open_mpi_5_job_only_once_attached() {
    let prog = ompi5_program("mpi_hold");
    let dir = std::env::temp_dir().join(format!("sdm-ompi5-run-hold-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(sdm_e2e::sdm())
        .args(["run", "--launcher", "mpirun", "-n", "4", "--"])
        .arg(&prog)
        .env("SDM_MPIRUN", format!("{VENV}/mpirun"))
        .env("SDM_HOLD_DIR", &dir)
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let context = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{:?}: {context}", out.status);
    assert!(
        !context.contains("starting one server per rank"),
        "{context}"
    );
    for r in 0..4 {
        let after = std::fs::read_to_string(dir.join(format!("after.{r}"))).unwrap();
        let tracer: u32 = after
            .trim()
            .strip_prefix("TracerPid:")
            .unwrap_or_else(|| panic!("rank {r}: {after:?}"))
            .trim()
            .parse()
            .unwrap();
        assert_ne!(tracer, 0, "rank {r} left MPI_Init untraced: {context}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sdm run --launcher mpirun --hosts …` with Open MPI 5: prterun starts its daemons over
/// ssh on the four hosts (each with its own host name, as PRRTE names nodes by them), the
/// job is held in `PMIx_Init`, one server per host attaches to that host's two ranks, and
/// the released job's hang is seen across them.
#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh, sdm_have_ompi5)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, sshd and Open MPI 5 (deploy/ci-setup.sh)"
)]
fn sdm_run_holds_an_open_mpi_5_job_across_four_hosts() {
    let _one = sdm_e2e::netns::one_at_a_time();
    let h = sdm_e2e::sshhosts::SshHosts::create_named(4);
    let prog = ompi5_program("mpi_hang");
    let seen = run_until_hung(
        Command::new(sdm_e2e::sdm())
            .args([
                "run",
                "--launcher",
                "mpirun",
                "--hosts",
                &h.hosts.hostlist(),
            ])
            .args(["-n", "8", "-c", "omis 1 [] node_info()", "-x", "-", "--"])
            .arg(&prog)
            .env("SDM_MPIRUN", format!("{VENV}/mpirun"))
            .env("OMPI_MCA_btl", "self,tcp")
            .env("OMPI_MCA_pml", "ob1")
            .env("OMPI_MCA_mpi_yield_when_idle", "1")
            .current_dir(std::env::temp_dir()),
        8,
    );
    let (stdout, context) = (&seen.stdout, &seen.context);
    assert!(seen.status.success(), "{:?}: {context}", seen.status);
    assert!(
        !context.contains("starting one server per rank"),
        "{context}"
    );
    // One server per host, serving that host's two ranks.
    assert_eq!(sdm_e2e::node_info_pids(stdout).len(), 4, "{context}");
    for name in h.names() {
        let on_host = stdout
            .lines()
            .filter(|l| l.contains("node_info(") && l.contains(&format!("\"{name}\"")))
            .count();
        assert_eq!(on_host, 2, "{name}: {context}");
    }
    let lines: Vec<&str> = seen.round.iter().map(String::as_str).collect();
    assert_hung_job_classes(&lines, 8, context);
    sdm_e2e::daemons::assert_daemons_gone(&h.hosts, "tcp", "the run ended");
}
