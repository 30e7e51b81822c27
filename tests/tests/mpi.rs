//! Real MPI jobs under sdm: programs built with `mpicc` run under `sdm run --launcher
//! mpirun|srun`, where MPI_Init must succeed and the ranks must talk to each other (an
//! MPI_Allreduce and a token ring), with every rank's output and exit accounted.

use std::process::Command;

use sdm_e2e::hungjob::HungJob;
use sdm_e2e::procs::{state_and_tracer, tracer};
use sdm_e2e::{mpi_program, sdm};

/// `sdm run --launcher L -n 4 -- mpi_allreduce`: one merged line of results, one merged
/// exit, status 0.
fn allreduce_under(launcher: &str) {
    let prog = mpi_program("mpi_allreduce");
    let out = Command::new(sdm())
        .args(["run", "--launcher", launcher, "-n", "4", "--"])
        .arg(&prog)
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        vec![
            "[0-3] size=4 allreduce=6 ring=4 ok",
            "[0-3] exited with status 0"
        ],
        "stderr: {stderr}"
    );
    assert!(out.status.success(), "{:?}; stderr: {stderr}", out.status);
}

#[test]
#[cfg_attr(
    not(sdm_have_mpirun),
    ignore = "needs mpirun and mpicc (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn an_mpi_job_runs_under_sdm_with_mpirun() {
    allreduce_under("mpirun");
}

#[test]
#[cfg_attr(
    not(sdm_have_slurm),
    ignore = "needs srun with PMIx and mpicc (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn an_mpi_job_runs_under_sdm_with_srun() {
    allreduce_under("srun");
}

/// `sdm attach LAUNCHER -c stop -c status -c 'bt --classes' -c detach` on a hung job of `n`
/// ranks: every rank attached and stopped, the last one in `compute`, two stack classes,
/// all let go running and untraced, the job still alive afterwards.
fn attach_stop_detach(launcher: &str, n: u32) {
    let job = HungJob::start(launcher, n);
    let ranks = job.ranks();
    assert_eq!(ranks.len(), n as usize);
    let out = Command::new(sdm())
        .args(["attach", &job.pid().to_string()])
        .args([
            "-c",
            "stop",
            "-c",
            "status",
            "-c",
            "bt --classes",
            "-c",
            "detach",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = n - 1;
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], format!("[0-{last}] stopped"), "{stdout}{stderr}");
    assert!(
        lines.contains(&format!("[{last}] stopped in compute at mpi_hang.c:11").as_str()),
        "{stdout}{stderr}"
    );
    // STAT's answer for the hung job: two classes, the waiting ranks through the barrier
    // called from step, and the late rank computing in step.
    sdm_e2e::assert_hung_job_classes(&lines, n, &format!("{stdout}{stderr}"));
    assert_eq!(
        lines.last().copied(),
        Some(format!("[0-{last}] detached").as_str()),
        "{stdout}{stderr}"
    );
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    for pid in ranks {
        let (state, tracer) = state_and_tracer(pid);
        assert_eq!(tracer, 0, "rank pid {pid} still traced");
        assert!(
            state == 'R' || state == 'S',
            "rank pid {pid} left in state {state}"
        );
    }
    let (launcher_state, _) = state_and_tracer(job.pid());
    assert_ne!(launcher_state, 'Z', "the launcher ended");
}

#[test]
#[cfg_attr(
    not(sdm_have_mpirun),
    ignore = "needs mpirun and mpicc (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn attach_to_a_hung_mpirun_job_and_detach() {
    attach_stop_detach("mpirun", 8);
}

#[test]
#[cfg_attr(
    not(sdm_have_slurm),
    ignore = "needs srun with PMIx and mpicc (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn attach_to_a_hung_srun_job_and_detach() {
    attach_stop_detach("srun", 8);
}

/// The report of issue 36: `stop`, a gdb-driven `print go = 1` and `next` on the last
/// rank, `cont`, `detach`: every rank is let go running and untraced (the last one no
/// longer left in a stop once gdb let it go), and the job, released by the assignment,
/// completes with status 0.
#[test]
#[cfg_attr(
    not(sdm_have_mpirun),
    ignore = "needs mpirun and mpicc (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
fn a_job_released_through_gdb_completes_after_detach() {
    let n = 4;
    let last = n - 1;
    let mut job = HungJob::start_program("mpirun", n, "mpi_release");
    let ranks = job.ranks();
    assert_eq!(ranks.len(), n as usize);
    let out = Command::new(sdm())
        .args(["attach", &job.pid().to_string()])
        .args(["-c", "stop", "-c", &format!("print go = 1 [{last}]")])
        .args([
            "-c",
            &format!("next [{last}]"),
            "-c",
            "cont",
            "-c",
            "detach",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    for want in [
        format!("[0-{last}] stopped"),
        format!("[{last}] go = 1 = 1"),
        format!("[0-{last}] running"),
        format!("[0-{last}] detached"),
    ] {
        assert!(
            lines.contains(&want.as_str()),
            "no {want:?}: {stdout}{stderr}"
        );
    }
    assert!(out.status.success(), "{:?}: {stdout}{stderr}", out.status);
    for pid in ranks {
        // A rank that finished meanwhile is gone: nothing left to check of it.
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let (state, tracer) = state_and_tracer(pid);
        assert_eq!(tracer, 0, "rank pid {pid} still traced: {status}");
        assert!(
            matches!(state, 'R' | 'S' | 'Z'),
            "rank pid {pid} left in state {state}"
        );
    }
    // The job completes (a hang guard, not a timing check).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(s) = job.launcher.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job never completed after detach"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "the job ended with {status:?}");
}

/// `--pids` for a job whose launcher is gone; a pid that no longer exists is reported for
/// its rank, the others attach, and the exit status says something failed.
#[test]
fn attach_by_pids_reports_a_vanished_pid_for_its_rank() {
    let mut procs: Vec<std::process::Child> = (0..3)
        .map(|_| Command::new("sleep").arg("300").spawn().unwrap())
        .collect();
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let list = format!("{},localhost:{},{gone_pid}", procs[0].id(), procs[1].id());
    let out = Command::new(sdm())
        .args(["attach", "--pids", &list, "-c", "status", "-c", "detach"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[2] could not attach") && stderr.contains(&gone_pid.to_string()),
        "{stderr}"
    );
    assert!(
        stdout.lines().any(|l| l == "[0-1] running"),
        "{stdout}{stderr}"
    );
    assert!(
        stdout.lines().any(|l| l == "[0-1] detached"),
        "{stdout}{stderr}"
    );
    assert!(!out.status.success());
    for p in &procs[..2] {
        assert_eq!(tracer(p.id()), 0);
    }
    for p in &mut procs {
        let _ = p.kill();
        let _ = p.wait();
    }
}
