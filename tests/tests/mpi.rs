//! Real MPI jobs under sdm: programs built with `mpicc` run under `sdm run --launcher
//! mpirun|srun`, where MPI_Init must succeed and the ranks must talk to each other (an
//! MPI_Allreduce and a token ring), with every rank's output and exit accounted.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use sdm_e2e::{run_ok, sdm};

/// Builds tests/programs/NAME.c with `mpicc -O2 -g` once per test process.
fn mpi_program(name: &'static str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("sdm-mpi-tests-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    });
    let out = dir.join(name);
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !out.exists() {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("programs")
            .join(format!("{name}.c"));
        run_ok(
            Command::new("mpicc")
                .args(["-O2", "-g", "-Wall", "-o"])
                .arg(&out)
                .arg(&src),
        );
    }
    out
}

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
