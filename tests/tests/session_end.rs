//! The end of a program under `sdm run` is the end of everything it started, as srun ends a
//! step: `kill`, the end of a script, a program that leaves children behind, and a
//! front-end killed with SIGKILL leave no process of the program alive (a shell's `sleep`,
//! a flooding `yes`), on a pseudo-terminal and on pipes; the ends are reported (nothing
//! "did not drain") and the exit status is srun's.
//!
//! The processes are found in /proc by a marker argument unique to each test run.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sdm_proto::IdSet;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Longest a run may take before the test calls it hung (a hang guard, not a measure).
const HANG_GUARD: Duration = Duration::from_secs(180);

/// A `sleep` duration no other process uses: `300.<test pid><k>`.
fn sleep_marker(k: u32) -> String {
    format!("300.{}{k}", std::process::id())
}

/// The live processes (zombies excluded) running `program` with `arg` as first argument.
fn marked(program: &str, arg: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let argv: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let name = std::path::Path::new(std::str::from_utf8(argv.first()?).ok()?).file_name()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let state = stat.rsplit_once(") ")?.1.chars().next()?;
        (name == program && argv.get(1) == Some(&arg.as_bytes()) && state != 'Z').then_some(pid)
    })
    .collect()
}

/// Kills what a failed test left behind (the processes marked `program arg`).
struct Sweep(&'static str, String);

impl Drop for Sweep {
    fn drop(&mut self) {
        for p in marked(self.0, &self.1) {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
}

/// What one `sdm run` did.
struct Run {
    status: ExitStatus,
    /// Standard output, without the lines holding `skip` (a flood's).
    stdout: String,
    stderr: String,
    /// The most marked processes seen alive at once while it ran.
    seen: usize,
}

/// Starts `sdm run ARGS` (standard input empty).
fn spawn(args: &[&str]) -> Child {
    Command::new(sdm_e2e::sdm())
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting sdm run")
}

/// Runs `sdm run ARGS` to its end, watching the processes marked `program arg`.
fn run(args: &[&str], program: &str, arg: &str, skip: &str) -> Run {
    let mut child = spawn(args);
    let out = child.stdout.take().expect("piped");
    let skip = skip.to_owned();
    let stdout = std::thread::spawn(move || {
        let mut kept = String::new();
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if skip.is_empty() || !line.contains(&skip) {
                kept.push_str(&line);
                kept.push('\n');
            }
        }
        kept
    });
    let mut err = child.stderr.take().expect("piped");
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let mut seen = 0;
    let status = loop {
        seen = seen.max(marked(program, arg).len());
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > HANG_GUARD {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "sdm run {args:?} still running after {HANG_GUARD:?}: {}",
                stderr.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        seen,
    }
}

/// Runs `sdm run -n 2 [--iof IOF] -c 'sleep PAUSE' [-c kill] -- sh -c SCRIPT` until both
/// ranks' marked processes were alive before the end (a longer pause each try, for a
/// loaded machine), and checks what srun would: no marked process left, every end
/// reported, exit status 0 (what the console ended does not count).
fn ends_everything(iof: &str, with_kill: bool, script: &str, program: &str, arg: &str) {
    let _sweep = Sweep(
        if program == "yes" { "yes" } else { "sleep" },
        arg.to_owned(),
    );
    for pause in ["1", "5", "20", "60"] {
        let pause = format!("sleep {pause}");
        let mut args = vec!["-n", "2", "--iof", iof, "-c", &pause];
        if with_kill {
            args.extend(["-c", "kill"]);
        }
        args.extend(["--", "sh", "-c", script]);
        let r = run(&args, program, arg, arg);
        let left = marked(program, arg);
        assert!(
            left.is_empty(),
            "{args:?}: {program} {arg} outlived sdm: pids {left:?}\n{}",
            r.stderr
        );
        assert!(
            !r.stderr.contains("did not drain"),
            "{args:?}: {}",
            r.stderr
        );
        assert_eq!(r.status.code(), Some(0), "{args:?}: {}", r.stderr);
        if with_kill {
            assert!(
                r.stdout.contains("[0-1] killed\n"),
                "{args:?}: {}",
                r.stdout
            );
        }
        // Each rank's end printed once (the ranks' ends may print apart).
        let mut ended = IdSet::new();
        for l in r.stdout.lines() {
            if let Some(ids) = l.strip_suffix(" killed by signal SIGTERM") {
                let ids: IdSet = ids.parse().unwrap_or_else(|e| panic!("{l:?}: {e}"));
                assert!(ended.is_disjoint(&ids), "{l}: a second end: {}", r.stdout);
                ended.union_with(&ids);
            } else {
                assert!(!l.contains("exited with"), "{l}");
            }
        }
        assert_eq!(ended, IdSet::all(2), "{args:?}: {}", r.stdout);
        if r.seen == 2 {
            return;
        }
    }
    panic!("{program} {arg} never ran on both ranks before the end");
}

#[test]
fn kill_ends_a_shells_children() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for (k, iof) in ["pty", "pipes"].into_iter().enumerate() {
        let m = sleep_marker(k as u32);
        ends_everything(iof, true, &format!("sleep {m}; echo x"), "sleep", &m);
    }
}

#[test]
fn kill_ends_a_flood() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for iof in ["pty", "pipes"] {
        let m = format!("flood-{}-{iof}", std::process::id());
        ends_everything(iof, true, &format!("yes {m}; echo x"), "yes", &m);
    }
}

#[test]
fn the_end_of_a_script_ends_a_shells_children() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let m = sleep_marker(2);
    ends_everything("pty", false, &format!("sleep {m}; echo x"), "sleep", &m);
}

#[test]
fn what_a_program_leaves_behind_ends_with_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The shell exits at once, its background sleep holding its output open: the run
    // ends (the exit reported, like srun's step end), and the sleep with it.
    for (k, iof) in ["pty", "pipes"].into_iter().enumerate() {
        let m = sleep_marker(3 + k as u32);
        let _sweep = Sweep("sleep", m.clone());
        let script = format!("sleep {m} & echo started; exit 3");
        let args = ["-n", "2", "--iof", iof, "--", "sh", "-c", &script];
        let r = run(&args, "sleep", &m, "");
        assert_eq!(r.status.code(), Some(3), "{args:?}: {}", r.stderr);
        assert!(r.stdout.contains("[0-1] started\n"), "{}", r.stdout);
        assert!(
            r.stdout.contains("[0-1] exited with status 3\n"),
            "{}",
            r.stdout
        );
        assert_eq!(marked("sleep", &m), Vec::<i32>::new(), "{args:?}");
    }
}

#[test]
fn a_killed_front_end_leaves_no_process_behind() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let m = sleep_marker(5);
    let _sweep = Sweep("sleep", m.clone());
    let script = format!("sleep {m}; echo x");
    let mut fe = spawn(&["-n", "2", "--", "sh", "-c", &script]);
    let start = Instant::now();
    while marked("sleep", &m).len() < 2 {
        assert!(start.elapsed() < HANG_GUARD, "the programs never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    fe.kill().unwrap(); // SIGKILL
    fe.wait().unwrap();
    // The servers see their front-end gone and end their programs, children included.
    let start = Instant::now();
    while !marked("sleep", &m).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "sleep {m} outlived its front-end: {:?}",
            marked("sleep", &m)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
