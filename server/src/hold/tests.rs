//! [`launch_held`] on a fake launcher in C, without Slurm or MPI: a multithreaded launcher
//! that spawns its tasks and calls `MPIR_Breakpoint` from a thread of its own (as a
//! launcher's progress thread may), while another thread keeps making threads.

use crate::mpir::tests::tracer_of;
use std::process::Command;

use super::*;

/// The fake: thread `launch` forks `n` tasks that each wait for a byte on a pipe, then
/// create `DIR/task.RANK` and exit 0; it fills the MPIR table, calls `MPIR_Breakpoint`
/// (when a debugger said so) and then writes the bytes that let the tasks go. Thread
/// `churn` starts short-lived threads meanwhile. Exit status: 0 when every task exited 0,
/// 3 when not debugged.
const FAKE: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
struct MPIR_PROCDESC { char *host_name; char *executable_name; int pid; };
struct MPIR_PROCDESC *MPIR_proctable = 0;
int MPIR_proctable_size = 0;
volatile int MPIR_debug_state = 0;
volatile int MPIR_being_debugged = 0;
__attribute__((noinline)) void MPIR_Breakpoint(void) { __asm__ volatile(""); }
static int n;
static const char *dir;
static void *nothing(void *a) { return a; }
static void *churn(void *a) {
    for (;;) {
        pthread_t t;
        pthread_create(&t, 0, nothing, 0);
        pthread_join(t, 0);
        usleep(1000);
    }
    return a;
}
static void *launch(void *a) {
    int go[2];
    if (pipe(go)) exit(4);
    MPIR_proctable = calloc(n, sizeof *MPIR_proctable);
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p == 0) {
            char c, path[4096];
            close(go[1]);
            if (read(go[0], &c, 1) != 1) _exit(5);
            snprintf(path, sizeof path, "%s/task.%d", dir, i);
            FILE *f = fopen(path, "w");
            _exit(f && fclose(f) == 0 ? 0 : 6);
        }
        MPIR_proctable[i].host_name = strdup("fakehost");
        MPIR_proctable[i].executable_name = strdup("/fake/task");
        MPIR_proctable[i].pid = p;
    }
    MPIR_proctable_size = n;
    MPIR_debug_state = 1;
    if (!MPIR_being_debugged) exit(3);
    MPIR_Breakpoint();
    for (int i = 0; i < n; i++)
        if (write(go[1], "g", 1) != 1) exit(7);
    for (int i = 0; i < n; i++) {
        int st;
        if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) exit(8);
    }
    exit(0);
    return a;
}
int main(int argc, char **argv) {
    pthread_t c, l;
    n = atoi(argv[1]);
    dir = argv[2];
    pthread_create(&c, 0, churn, 0);
    pthread_create(&l, 0, launch, 0);
    pthread_join(l, 0);
    return 9;
}
"#;

fn build_fake(dir: &std::path::Path) -> String {
    let src = dir.join("fake_launcher.c");
    let bin = dir.join("fake_launcher");
    std::fs::write(&src, FAKE).unwrap();
    let ok = Command::new("cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cc failed on the fake launcher");
    bin.display().to_string()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sdm-hold-unit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn tasks_done(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("task."))
        })
        .count()
}

#[test]
fn a_multithreaded_launcher_is_held_in_mpir_breakpoint_and_released() {
    let dir = scratch("threads");
    let bin = build_fake(&dir);
    let argv = vec![bin, "3".into(), dir.display().to_string()];
    let job = launch_held(&argv, &[]).unwrap();
    let t = job.table();
    assert_eq!(t.launcher, job.launcher_pid());
    assert_eq!(t.tasks.len(), 3);
    for (i, d) in t.tasks.iter().enumerate() {
        assert_eq!((d.rank, d.host.as_str()), (i as u32, "fakehost"));
        assert_eq!(d.executable, "/fake/task");
        assert!(std::path::Path::new(&format!("/proc/{}", d.pid)).exists());
    }
    // Held: the launcher's churning thread goes on making threads, the tasks wait.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(tasks_done(&dir), 0);
    assert_ne!(tracer_of(job.launcher_pid()), 0);
    let pid = job.launcher_pid();
    let mut launcher = job.release().unwrap();
    assert_eq!(tracer_of(pid), 0, "the launcher is left traced");
    let status = launcher.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(tasks_done(&dir), 3);
}

#[test]
fn dropping_a_held_job_releases_it() {
    let dir = scratch("drop");
    let bin = build_fake(&dir);
    let argv = vec![bin, "2".into(), dir.display().to_string()];
    let job = launch_held(&argv, &[]).unwrap();
    let pid = job.launcher_pid();
    drop(job);
    assert_eq!(tracer_of(pid), 0, "the launcher is left traced");
    // Not our child's status to take any more: wait for the tasks' traces (hang guard).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while tasks_done(&dir) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the tasks were not let go"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills a held launcher and releases it: the release reports the end, and reaps it.
/// Whether the release finds the launcher's memory still there or already gone depends on
/// how far the kernel got, so the test goes through it a few times.
#[test]
fn a_launcher_killed_while_held_is_reported_so() {
    let dir = scratch("killed");
    let bin = build_fake(&dir);
    let argv = vec![bin, "2".into(), dir.display().to_string()];
    for _ in 0..5 {
        let job = launch_held(&argv, &[]).unwrap();
        let pid = job.launcher_pid();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
        // A hang guard: a release waiting for ever on the dead launcher fails the test.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(job.release().map(|_| ()));
        });
        match rx
            .recv_timeout(Duration::from_secs(60))
            .expect("released within a minute")
        {
            Err(HoldError::Ended { ending, when, .. }) => {
                assert_eq!(ending, Ending::Killed(Signal::SIGKILL));
                assert_eq!(when, "while its job was held");
            }
            other => panic!("expected Ended, got {other:?}"),
        }
        // Reaped: no zombie left of it.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
