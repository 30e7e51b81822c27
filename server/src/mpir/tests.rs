//! Tests of reading a launcher's MPIR process table.

use super::*;
use std::process::{Command, Stdio};

/// A fake launcher in C: forks `n` tasks that sleep, fills an MPIR table the way srun
/// does, and prints READY. Built with the system's cc.
const FAKE_LAUNCHER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
struct MPIR_PROCDESC { char *host_name; char *executable_name; int pid; };
struct MPIR_PROCDESC *MPIR_proctable = 0;
int MPIR_proctable_size = 0;
volatile int MPIR_debug_state = 0;
volatile int MPIR_being_debugged = 0;
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    int fill = argc > 2;
    char rank[16], size[16];
    if (fill) MPIR_proctable = calloc(n, sizeof *MPIR_proctable);
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p == 0) {
            snprintf(rank, sizeof rank, "%d", i);
            snprintf(size, sizeof size, "%d", n);
            setenv("PMI_RANK", rank, 1);
            setenv("PMI_SIZE", size, 1);
            execlp("sleep", "sleep", "300", (char *)0);
            _exit(127);
        }
        if (fill) {
            MPIR_proctable[i].host_name = strdup("node-with-a-long-name-007");
            MPIR_proctable[i].executable_name = strdup("/usr/bin/sleep");
            MPIR_proctable[i].pid = p;
        }
    }
    if (fill) { MPIR_proctable_size = n; MPIR_debug_state = 1; }
    printf("READY\n");
    fflush(stdout);
    pause();
    return 0;
}
"#;

fn build_fake() -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("sdm-mpir-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join("fake_launcher.c");
    let bin = dir.join("fake_launcher");
    if bin.exists() {
        return Some(bin);
    }
    std::fs::write(&src, FAKE_LAUNCHER).ok()?;
    let tmp = dir.join(format!("fake_launcher.{:?}", std::thread::current().id()));
    let ok = Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .status()
        .ok()?
        .success();
    assert!(ok, "cc failed on the fake launcher");
    std::fs::rename(&tmp, &bin).ok()?;
    Some(bin)
}

struct Job(std::process::Child);

impl Job {
    fn start(n: u32, fill: bool) -> Self {
        let bin = build_fake().expect("cc builds the fake launcher");
        let mut cmd = Command::new(bin);
        cmd.arg(n.to_string());
        if fill {
            cmd.arg("fill");
        }
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("fake launcher");
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(line.trim(), "READY");
        let job = Self(child);
        // READY comes after the forks, not after the execs: wait until every task
        // carries its rank in its (exec-time) environment.
        while job.children().len() != n as usize
            || !job
                .children()
                .iter()
                .all(|&c| environ(c).is_some_and(|e| e.contains_key("PMI_RANK")))
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        job
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn children(&self) -> Vec<u32> {
        children(self.pid())
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        for k in self.children() {
            let _ = nix::sys::signal::kill(Pid::from_raw(k as i32), nix::sys::signal::SIGKILL);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tracer of `pid` (0: none), from /proc (also used by the hold tests).
pub(crate) fn tracer_of(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn reads_a_filled_mpir_table_and_releases_the_launcher() {
    let job = Job::start(5, true);
    let t = read_proctable(job.pid()).unwrap();
    assert_eq!(t.source, TableSource::Mpir);
    assert_eq!(t.tasks.len(), 5);
    let mut pids: Vec<u32> = t.tasks.iter().map(|d| d.pid).collect();
    pids.sort_unstable();
    assert_eq!(pids, job.children());
    for (i, d) in t.tasks.iter().enumerate() {
        assert_eq!(d.rank, i as u32);
        assert_eq!(d.host, "node-with-a-long-name-007");
        assert_eq!(d.executable, "/usr/bin/sleep");
    }
    // Released: running and untraced.
    assert_eq!(tracer_of(job.pid()), 0);
    let state = std::fs::read_to_string(format!("/proc/{}/stat", job.pid())).unwrap();
    let state = state
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .next()
        .unwrap();
    assert!(matches!(state, "S" | "R"), "launcher left in state {state}");
}

#[test]
fn an_empty_table_falls_back_to_the_ranked_descendants() {
    let job = Job::start(4, false);
    let t = read_proctable(job.pid()).unwrap();
    assert_eq!(t.source, TableSource::ProcessTree);
    let ranks: Vec<u32> = t.tasks.iter().map(|d| d.rank).collect();
    assert_eq!(ranks, vec![0, 1, 2, 3]);
    let mut pids: Vec<u32> = t.tasks.iter().map(|d| d.pid).collect();
    pids.sort_unstable();
    assert_eq!(pids, job.children());
    assert!(t.tasks.iter().all(|d| d.executable.ends_with("sleep")));
    assert_eq!(tracer_of(job.pid()), 0);
}

#[test]
fn a_missing_rank_is_named() {
    let job = Job::start(4, false);
    let victim = job.children()[2];
    let rank_of_victim = environ(victim).unwrap()["PMI_RANK"].clone();
    nix::sys::signal::kill(Pid::from_raw(victim as i32), nix::sys::signal::SIGKILL).unwrap();
    // Reap it (the fake launcher does not): wait until it is gone from the tree.
    while parent_map().get(&victim) == Some(&job.pid())
        && std::fs::read_to_string(format!("/proc/{victim}/stat"))
            .map(|s| !s.contains(") Z"))
            .unwrap_or(false)
    {
        std::thread::yield_now();
    }
    match read_proctable(job.pid()) {
        Err(MpirError::Incomplete { missing, size, .. }) => {
            assert_eq!(size, 4);
            assert_eq!(missing, format!("[{rank_of_victim}]"));
        }
        other => panic!("expected Incomplete, got {other:?}"),
    }
}

#[test]
fn a_process_that_is_no_launcher_is_refused() {
    let mut child = Command::new("sleep").arg("300").spawn().unwrap();
    let e = read_proctable(child.id()).unwrap_err();
    let _ = child.kill();
    let _ = child.wait();
    assert!(matches!(e, MpirError::NotALauncher { .. }), "{e}");
    let e = read_proctable(u32::MAX - 7).unwrap_err();
    assert!(matches!(e, MpirError::NoProcess { .. }), "{e}");
    // What /proc said is the source too, not only text.
    let io = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
    assert_eq!(
        io.map(|e| e.kind()),
        Some(std::io::ErrorKind::NotFound),
        "{e:?}"
    );
}
