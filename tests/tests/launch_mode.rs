//! Launch mode (issue 37): `sdm run --launcher srun|mpirun` starts the job through its own
//! launcher, held in `MPIR_Breakpoint`, then one server for the host attaches to every
//! rank before the launcher is released. Under srun the tasks are held before their first
//! instruction, so `--stop-at-main` and a breakpoint set before the program runs work as
//! locally; Open MPI 4 holds its ranks in `MPI_Init`.

use sdm_e2e::{assert_hung_job_classes, c_program, mpi_program, sdm_ok};

#[test]
#[cfg_attr(
    not(sdm_have_slurm),
    ignore = "needs srun, a running Slurm (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn an_srun_job_is_held_stopped_at_main_and_breakpoints_set_before_it_runs_hit() {
    let prog = c_program("ranks", &["-g", "-O0"]);
    let out = sdm_ok([
        "run",
        "--launcher",
        "srun",
        "-n",
        "4",
        "--stop-at-main",
        "-c",
        "omis 1 [] node_info()",
        "-c",
        "status",
        "-c",
        "break work",
        "-c",
        "cont",
        "-c",
        "sleep 1",
        "-c",
        "status",
        "-c",
        "kill",
        "--",
        prog.to_str().unwrap(),
    ]);
    // One server on this host serves the four ranks srun started.
    assert_eq!(sdm_e2e::node_info_pids(&out).len(), 1, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("[0-3] stopped in main at ranks.c")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("[0-3] breakpoint 1 hit in work() at ranks.c:")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l == "[0-3] stopped at breakpoint in work"),
        "{out}"
    );
}

#[test]
#[cfg_attr(
    not(sdm_have_mpirun),
    ignore = "needs mpirun and mpicc (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn an_mpirun_job_is_held_in_mpi_init_and_its_hang_is_seen_by_one_server() {
    let prog = mpi_program("mpi_hang");
    let out = sdm_ok([
        "run",
        "--launcher",
        "mpirun",
        "-n",
        "8",
        "-c",
        "omis 1 [] node_info()",
        "-c",
        "sleep 2",
        "-c",
        "bt --classes",
        "-c",
        "kill",
        "--",
        prog.to_str().unwrap(),
    ]);
    assert_eq!(sdm_e2e::node_info_pids(&out).len(), 1, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_hung_job_classes(&lines, 8, &out);
}

/// Open MPI's mpirun holds a job only once its ranks are in `MPI_Init`: a program that is
/// not linked with libmpi is not held (held, it would run unheld and, once ended, be run a
/// second time by the fallback), which sdm says, and it runs once, one server per rank.
#[test]
#[cfg_attr(
    not(sdm_have_mpirun),
    ignore = "needs mpirun and mpicc (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn a_program_without_mpi_is_not_held_by_open_mpi_and_runs_once() {
    let dir = std::env::temp_dir().join(format!("sdm-not-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("runs");
    let out = std::process::Command::new(sdm_e2e::sdm())
        .args(["run", "--launcher", "mpirun", "-n", "2", "--", "sh", "-c"])
        .arg(format!("echo ran >> {}", log.display()))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("running sdm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    let runs = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(runs, "ran\nran\n", "each rank once: {stderr}");
    assert!(
        stderr.contains("sh is not a program linked with libmpi"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each program a server of two ranks starts under `launcher` (`--ranks-per-server 2`, so
/// not held: the servers start the programs) prints `VARS` as its launcher's variables
/// hold them; `--label` keeps every rank's line its own.
fn programs_of_two_rank_servers(launcher: &str, vars: &str) -> Vec<String> {
    let out = sdm_ok([
        "run",
        "--launcher",
        launcher,
        "-n",
        "4",
        "--ranks-per-server",
        "2",
        "--label",
        "--",
        "sh",
        "-c",
        &format!("echo {vars}"),
    ]);
    let mut lines: Vec<String> = out
        .lines()
        .filter(|l| !l.contains("exited"))
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// A server started by srun serving two ranks passes each program its own rank's
/// `SLURM_PROCID` and `SLURM_LOCALID`, not the server's own task's, and no `SLURM_TASK_PID`.
#[test]
#[cfg_attr(
    not(sdm_have_slurm),
    ignore = "needs srun, a running Slurm (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn programs_of_a_server_of_two_ranks_under_srun_see_their_own_ranks() {
    let lines = programs_of_two_rank_servers(
        "srun",
        "$SDM_RANK procid=$SLURM_PROCID localid=$SLURM_LOCALID pid=${SLURM_TASK_PID:-none}",
    );
    let want: Vec<String> = (0..4)
        .map(|r| format!("[{r}] {r} procid={r} localid={} pid=none", r % 2))
        .collect();
    assert_eq!(lines, want);
}

/// The same under Open MPI's mpirun: `OMPI_COMM_WORLD_RANK` is each program's own rank and
/// the server's PMIx identity is not passed on.
#[test]
#[cfg_attr(
    not(sdm_have_mpirun),
    ignore = "needs mpirun and mpicc (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn programs_of_a_server_of_two_ranks_under_mpirun_see_their_own_ranks() {
    let lines = programs_of_two_rank_servers(
        "mpirun",
        "$SDM_RANK rank=$OMPI_COMM_WORLD_RANK local=$OMPI_COMM_WORLD_LOCAL_RANK \
         pmix=${PMIX_RANK:-none}",
    );
    let want: Vec<String> = (0..4)
        .map(|r| format!("[{r}] {r} rank={r} local={} pmix=none", r % 2))
        .collect();
    assert_eq!(lines, want);
}

/// A held srun that waits for its allocation says so at once (its standard error is read
/// from its start, not only once its job is held): with every CPU of the cluster taken by
/// another job, `srun: job N queued and waiting for resources` reaches sdm's standard error
/// while the other job still runs; once it is cancelled, the job is held and runs.
#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_slurm)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, Slurm and munge (deploy/ci-setup.sh)"
)]
fn an_srun_waiting_for_its_allocation_says_so_before_its_job_is_held() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let h = sdm_e2e::slurmhosts::SlurmHosts::create(1, 2);
    let mut busy = h
        .slurm(&mut Command::new("srun"))
        .args(["-n", "2", "sleep", "600"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting srun");
    let running = || h.squery("squeue", &["-h", "-t", "R", "-o", "%i"]);
    assert!(
        sdm_e2e::daemons::wait_for(|| !running().trim().is_empty()),
        "the other job never ran: {}",
        h.squery("squeue", &[])
    );
    let other = running().trim().to_owned();
    let prog = c_program("held_lines", &["-g", "-O0"]);
    let mut sdm = h
        .slurm(&mut Command::new(sdm_e2e::sdm()))
        .args(["run", "--launcher", "srun", "-n", "2", "-c", "kill", "--"])
        .arg(&prog)
        .arg("1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting sdm run");
    let (tx, rx) = std::sync::mpsc::channel();
    let err = sdm.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("queued and waiting for resources"))
    {
        match rx.recv_timeout(sdm_e2e::daemons::PATIENCE) {
            Ok(l) => seen.push(l),
            Err(e) => panic!("srun's wait not said ({e}): {seen:#?}"),
        }
    }
    h.squery("scancel", &[&other]);
    let status = sdm.wait().expect("waiting for sdm");
    let _ = busy.kill();
    let _ = busy.wait();
    seen.extend(rx.try_iter());
    assert!(status.success(), "{status}: {seen:#?}");
}
