//! Jobs started held for a tool (`sdm_server::hold`, MPIR launch mode): under srun and
//! Open MPI's mpirun, a 4-task job is spawned and held, its table names every task, the
//! tasks have not got past the point their launcher holds them at (srun: before `main`;
//! mpirun: in `MPI_Init`), and once released the job runs to the end, status 0, with its
//! launcher untraced. A launcher without MPIR gets the typed error.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use sdm_e2e::procs::{state_and_tracer, tracer};
use sdm_e2e::{c_program, mpi_program};
use sdm_server::hold::{HeldJob, HoldError, launch_held};

/// A fresh directory for the tasks' marker files.
fn marker_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sdm-hold-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The files in `dir`, sorted.
fn markers(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// `PREFIX.0` … `PREFIX.3`.
fn four(prefix: &str) -> Vec<String> {
    (0..4).map(|r| format!("{prefix}.{r}")).collect()
}

/// [`launch_held`] with a hang guard (a launcher that never spawns its job fails the test
/// instead of hanging it).
fn held(argv: &[&str], env: &[(&str, &Path)]) -> Result<HeldJob, HoldError> {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.display().to_string()))
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(launch_held(&argv, &env));
    });
    rx.recv_timeout(Duration::from_secs(300))
        .expect("the job is spawned and held within 5 minutes")
}

/// Waits (a hang guard) for the released launcher; its exit status must be 0.
fn wait_success(mut launcher: Child) {
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(s) = launcher.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = launcher.kill();
            panic!("the released job did not end within 5 minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "the job ended with {status}");
}

/// The checks common to every launcher: 4 tasks, ranks 0-3, live pids running `prog`,
/// the launcher traced (by this process) while held.
fn assert_table(job: &HeldJob, prog: &Path) {
    let t = job.table();
    assert_eq!(t.launcher, job.launcher_pid());
    let ranks: Vec<u32> = t.tasks.iter().map(|d| d.rank).collect();
    assert_eq!(ranks, vec![0, 1, 2, 3], "{t:?}");
    for d in &t.tasks {
        assert!(d.pid > 0, "{d:?}");
        assert!(!d.host.is_empty(), "{d:?}");
        assert_eq!(Path::new(&d.executable), prog, "{d:?}");
        let exe = std::fs::read_link(format!("/proc/{}/exe", d.pid)).unwrap();
        assert_eq!(exe, prog, "rank {} runs {}", d.rank, exe.display());
    }
    assert_ne!(
        tracer(job.launcher_pid()),
        0,
        "the held launcher is not traced"
    );
}

#[test]
#[cfg_attr(
    not(sdm_have_slurm),
    ignore = "needs srun, a running Slurm (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn srun_holds_its_tasks_before_main_until_released() {
    let prog = c_program("hold_marker", &["-O1"]);
    let dir = marker_dir("srun");
    let prog_s = prog.to_str().unwrap();
    let job = held(
        &[
            "srun",
            "-n",
            "4",
            "--export=ALL",
            "--kill-on-bad-exit=0",
            prog_s,
        ],
        &[("SDM_HOLD_DIR", &dir)],
    )
    .unwrap();
    assert_table(&job, &prog);
    // Held by Slurm: stopped (SIGSTOP) at the exec, untraced, nothing of main run.
    for d in &job.table().tasks {
        assert_eq!(state_and_tracer(d.pid), ('T', 0), "rank {}", d.rank);
    }
    assert_eq!(markers(&dir), Vec::<String>::new());
    // The step, for a tool's own daemons on its nodes: the tasks' own ids.
    let step = job.slurm_step().expect("srun's job and step ids");
    let env = std::fs::read(format!("/proc/{}/environ", job.table().tasks[0].pid)).unwrap();
    let var = |name: &str| {
        env.split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(format!("{name}=").as_bytes()))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    assert_eq!(Some(&step.job_id), var("SLURM_JOB_ID").as_ref());
    assert_eq!(Some(&step.step_id), var("SLURM_STEP_ID").as_ref());
    let pid = job.launcher_pid();
    let launcher = job.release().unwrap();
    assert_eq!(tracer(pid), 0, "the launcher is left traced");
    wait_success(launcher);
    assert_eq!(markers(&dir), four("started"));
}

#[test]
#[cfg_attr(
    not(sdm_have_mpirun),
    ignore = "needs mpirun and mpicc (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn mpirun_holds_its_ranks_in_mpi_init_until_released() {
    let prog = mpi_program("mpi_hold");
    let dir = marker_dir("mpirun");
    let job = held(
        &[
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "4",
            prog.to_str().unwrap(),
        ],
        &[
            ("SDM_HOLD_DIR", &dir),
            ("OMPI_MPIR_DO_NOT_WARN", Path::new("1")),
        ],
    )
    .unwrap();
    assert_table(&job, &prog);
    assert_eq!(job.slurm_step(), None);
    // Open MPI holds nothing before main: every rank gets to MPI_Init (a hang guard, not a
    // timing check) and stays there, untraced, until the launcher is released.
    let deadline = Instant::now() + Duration::from_secs(120);
    while markers(&dir) != four("before") {
        let m = markers(&dir);
        assert!(m.iter().all(|f| f.starts_with("before.")), "{m:?}");
        assert!(Instant::now() < deadline, "ranks did not start: {m:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    for d in &job.table().tasks {
        let (state, tracer) = state_and_tracer(d.pid);
        assert_eq!(tracer, 0, "rank {}", d.rank);
        assert!(
            // Waiting in MPI_Init, running or paging in: anything but stopped or traced.
            matches!(state, 'S' | 'R' | 'D'),
            "rank {} in state {state}",
            d.rank
        );
    }
    assert_eq!(markers(&dir), four("before"), "a rank passed MPI_Init");
    let pid = job.launcher_pid();
    let launcher = job.release().unwrap();
    assert_eq!(tracer(pid), 0, "the launcher is left traced");
    wait_success(launcher);
    let mut want = four("after");
    want.extend(four("before"));
    assert_eq!(markers(&dir), want);
}

#[test]
fn a_launcher_without_mpir_is_refused_before_it_runs() {
    let dir = marker_dir("nompir");
    let touched = dir.join("ran");
    let cmd = format!("touch {}", touched.display());
    match held(&["/bin/sh", "-c", &cmd], &[]) {
        Err(HoldError::NoMpir { program, missing }) => {
            assert!(
                program.ends_with("sh") || program.contains("dash"),
                "{program}"
            );
            assert_eq!(missing, "MPIR_being_debugged");
        }
        other => panic!("expected NoMpir, got {other:?}"),
    }
    assert!(!touched.exists(), "the shell ran its command");
    assert!(matches!(held(&[], &[]), Err(HoldError::NoCommand)));
    match held(&["/nonexistent/srun", "-n", "1", "true"], &[]) {
        Err(HoldError::Spawn { program, .. }) => assert_eq!(program, "/nonexistent/srun"),
        other => panic!("expected Spawn, got {other:?}"),
    }
}
