//! Terminal signals and a killed front-end, with real processes: `sdm run -n 2 -- sleep 1000`
//! started in a process group of its own, as a shell starts a foreground job. A Ctrl-C (a
//! SIGINT to the whole group, as the terminal sends it) reaches the front-end alone, which
//! kills the programs through the tree, ends the tree and exits 130; a SIGKILLed front-end
//! leaves nothing behind either. Every process of a run carries a unique variable in its
//! environment, so /proc says what is left.

use sdm_e2e as support;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Hang guard for every wait below: generous, never a measure.
const GUARD: Duration = Duration::from_secs(90);

/// `sdm run -n 2 -- sleep 1000` in a process group of its own, stdin a pipe held open (no
/// console: standard input goes to the programs, as with srun), every process marked.
fn start(marker: &str) -> Child {
    Command::new(support::sdm())
        .args(["run", "-n", "2", "--", "sleep", "1000"])
        .env("SDM_SIGNALS_TEST_MARK", marker)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("sdm starts")
}

/// The live processes (not zombies) whose environment holds `marker`, with their names.
fn marked(marker: &str) -> Vec<(u32, String)> {
    let want = format!("SDM_SIGNALS_TEST_MARK={marker}");
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let (Ok(env), Ok(stat)) = (
            std::fs::read(format!("/proc/{pid}/environ")),
            std::fs::read_to_string(format!("/proc/{pid}/stat")),
        ) else {
            continue;
        };
        let Some((comm, rest)) = stat.split_once(" (").and_then(|(_, r)| r.rsplit_once(") "))
        else {
            continue;
        };
        if rest.starts_with('Z') || !env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            continue;
        }
        found.push((pid, comm.to_owned()));
    }
    found
}

/// Waits until `done` holds for the marked processes; panics with them after [`GUARD`].
fn wait_marked(marker: &str, what: &str, done: impl Fn(&[(u32, String)]) -> bool) {
    let t0 = Instant::now();
    loop {
        let now = marked(marker);
        if done(&now) {
            return;
        }
        assert!(t0.elapsed() < GUARD, "{what}: still {now:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for `child` to exit (hang guard), then returns its status and its whole output.
fn finish(mut child: Child) -> (std::process::ExitStatus, String, String) {
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > GUARD {
            let _ = child.kill();
            panic!("sdm did not exit within {GUARD:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut out, mut err) = (String::new(), String::new());
    let _ = child.stdout.take().expect("piped").read_to_string(&mut out);
    let _ = child.stderr.take().expect("piped").read_to_string(&mut err);
    (status, out, err)
}

fn unique(name: &str) -> String {
    format!("{name}-{}-{:?}", std::process::id(), Instant::now())
}

#[test]
fn ctrl_c_to_the_foreground_group_kills_the_programs_and_ends_cleanly() {
    let marker = unique("ctrl-c");
    let child = start(&marker);
    let pgid = Pid::from_raw(child.id() as i32);
    wait_marked(&marker, "both programs started", |p| {
        p.iter().filter(|(_, c)| c == "sleep").count() == 2
    });
    // What a terminal does on Ctrl-C: SIGINT to every process of the foreground group.
    kill(Pid::from_raw(-pgid.as_raw()), Signal::SIGINT).expect("SIGINT to the group");
    let (status, out, err) = finish(child);
    let context = format!("status {status:?}\nstdout:\n{out}\nstderr:\n{err}");
    // The front-end decided: it exited with the shell's status for SIGINT, not of it.
    assert_eq!(status.code(), Some(130), "{context}");
    assert!(err.contains("SIGINT: killing the programs"), "{context}");
    // Both ranks' ends were reported, killed, in one merged line; no server was lost.
    assert!(
        out.lines()
            .chain(err.lines())
            .any(|l| l.starts_with("[0-1] ") && l.contains("killed")),
        "{context}"
    );
    assert!(!err.contains("lost"), "{context}");
    assert!(!err.contains("did not drain"), "{context}");
    wait_marked(&marker, "nothing of the run left", <[_]>::is_empty);
}

#[test]
fn a_sigkilled_front_end_leaves_nothing_behind() {
    let marker = unique("sigkill");
    let mut child = start(&marker);
    wait_marked(&marker, "both programs started", |p| {
        p.iter().filter(|(_, c)| c == "sleep").count() == 2
    });
    child.kill().expect("SIGKILL to the front-end");
    child.wait().expect("reaped");
    // The daemons lose their link to the front-end and end, and their programs with them.
    wait_marked(&marker, "nothing of the run left", <[_]>::is_empty);
}
