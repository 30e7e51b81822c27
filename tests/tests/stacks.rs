//! Stack walks checked against gdb: on the same stopped process, sdm's frames (the monitor's,
//! and through real daemons the OMIS `stack_backtrace` service's) name the same functions in
//! the same order as gdb's `bt`, for tests/programs/stacks.c built -O0, -O2 and -O2
//! -fomit-frame-pointer, stopped in a call chain with an inlined function, in libc's
//! nanosleep, in a signal handler and in the vdso, and ranks of an `mpirun` job (mpicc -O2) waiting in
//! MPI_Barrier or computing; the console's `bt` merges those stacks into one tree.
//!
//! The comparison covers every frame to the outermost (`_start`; gdb with `backtrace
//! past-main`). gdb reads no separate debug files (libc is named from its symbol table, as
//! sdm names it), and its `??` (no symbol covers the pc) matches sdm's `file+0xoffset`.
//! gdb's `<signal handler called>` is sdm's name for a signal trampoline's frame too.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use sdm::console::Console;
use sdm_client::session::{Session, SessionOptions};
use sdm_e2e::console_command as run;
use sdm_e2e::procs::state;
use sdm_omis::Value;
use sdm_proto::{IdSet, Status};
use sdm_server::monitor::{MonitorHandle, SIGNAL_FRAME};

/// Compiler flags of each build of the test program.
const BUILDS: [(&str, &[&str]); 3] = [
    ("O0", &["-O0", "-g"]),
    ("O2", &["-O2", "-g"]),
    ("O2-nofp", &["-O2", "-g", "-fomit-frame-pointer"]),
];

/// A place the program waits in: its mode argument and its stack down to `main`.
struct Case {
    mode: &'static str,
    to_main: &'static [&'static str],
}

const CHAIN: Case = Case {
    mode: "chain",
    to_main: &["spin", "leaf", "mid", "top", "main"],
};
const SLEEP: Case = Case {
    mode: "sleep",
    to_main: &["clock_nanosleep", "nanosleep", "sleeper", "main"],
};
const SIGNAL: Case = Case {
    mode: "signal",
    to_main: &["on_alarm", SIGNAL_FRAME, "wait_loop", "main"],
};

/// tests/programs/stacks.c built with `build`'s flags, once per test process.
fn program(build: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = built.get(build) {
        return p.clone();
    }
    let flags = BUILDS.iter().find(|(b, _)| *b == build).unwrap().1;
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sdm-stacks-{build}-{}", std::process::id()));
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/programs/stacks.c");
    let ok = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(src)
        .status()
        .expect("cc (deploy/ci-setup.sh installs gcc)");
    assert!(ok.success(), "cc {flags:?} {src} failed");
    built.insert(build.to_owned(), out.clone());
    out
}

/// A started test program, killed when dropped.
struct Running(Child);

impl Running {
    fn start(build: &str, case: &Case) -> Self {
        let child = Command::new(program(build))
            .arg(case.mode)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Self(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The function of each frame of gdb's `bt` of process `pid` (attached, then detached).
fn gdb_bt(pid: u32) -> Vec<String> {
    let out = Command::new("gdb")
        .args(["-nx", "-batch"])
        .args(["-iex", "set debuginfod enabled off"])
        .args(["-iex", "set debug-file-directory /nonexistent-sdm-test"])
        .args(["-iex", "set backtrace past-main on"])
        .args(["-p", &pid.to_string(), "-ex", "bt"])
        .stdin(Stdio::null())
        .output()
        .expect("gdb (deploy/ci-setup.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    let frames: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| {
            // `#3  0x000055… in mid () at f.c:31`, `#1  leaf () at …`, `#1  <signal handler called>`
            let rest = l
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start();
            let rest = match rest.split_once(" in ") {
                Some((addr, name)) if addr.starts_with("0x") => name,
                _ => rest,
            };
            if rest.starts_with('<') {
                rest.trim().to_owned()
            } else {
                rest.split(" (").next().unwrap_or(rest).trim().to_owned()
            }
        })
        .collect();
    assert!(
        !frames.is_empty(),
        "gdb printed no frames for {pid}: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    frames
}

/// Asserts sdm's and gdb's frames name the same functions, in order (gdb's `??` matching
/// sdm's `file+0xoffset` for a pc no symbol covers).
fn assert_same_frames(what: &str, sdm: &[String], gdb: &[String]) {
    let same = sdm.len() == gdb.len()
        && sdm
            .iter()
            .zip(gdb)
            .all(|(s, g)| s == g || (g == "??" && s.contains("+0x")));
    assert!(same, "{what}:\n  sdm: {sdm:?}\n  gdb: {gdb:?}");
}

/// Asserts the frames down to `main` are the case's.
fn assert_to_main(what: &str, frames: &[String], case: &Case) {
    let main = frames.iter().position(|f| f == "main");
    let to_main = main.map(|m| &frames[..=m]).unwrap_or(frames);
    assert_eq!(to_main, case.to_main, "{what}: {frames:?}");
}

/// sdm's frames of `pid` (the monitor attached, stopped, walked, detached), once the
/// program waits in the case's innermost function.
async fn monitor_frames(pid: u32, case: &Case) -> Vec<String> {
    monitor_frames_when(pid, |f| {
        f.first().map(String::as_str) == Some(case.to_main[0])
    })
    .await
}

/// sdm's frames of `pid` (the monitor attached, stopped, walked, detached), once they are
/// `ready` (at once for a process that stays stopped).
async fn monitor_frames_when(pid: u32, ready: impl Fn(&[String]) -> bool) -> Vec<String> {
    let (stdio, _) = tokio::sync::mpsc::channel(16);
    let (mon, _events) = MonitorHandle::new(0, 1, stdio);
    mon.call(move |m| m.attach(pid)).await.unwrap();
    let mut names = Vec::new();
    // Until it is past its start-up (and, for `signal`, its alarm has gone off).
    for _ in 0..500 {
        mon.call(|m| m.stop()).await.unwrap();
        let frames = mon.call(|m| m.backtrace()).await.unwrap();
        names = frames.into_iter().map(|f| f.function).collect();
        if ready(&names) {
            break;
        }
        mon.call(|m| m.cont()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Detached (left running, untraced) for gdb.
    mon.call(|m| m.kill_quietly()).await;
    names
}

/// For each case: sdm's stack through the monitor, then gdb's, on the same process.
async fn frames_match_gdb(build: &str) {
    for case in [CHAIN, SLEEP, SIGNAL] {
        let p = Running::start(build, &case);
        let sdm = monitor_frames(p.pid(), &case).await;
        let what = format!("{build} {}", case.mode);
        assert_to_main(&what, &sdm, &case);
        let gdb = gdb_bt(p.pid());
        assert_same_frames(&what, &sdm, &gdb);
    }
}

#[tokio::test]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn frames_match_gdb_at_o0() {
    frames_match_gdb("O0").await;
}

#[tokio::test]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn frames_match_gdb_at_o2() {
    frames_match_gdb("O2").await;
}

#[tokio::test]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn frames_match_gdb_at_o2_without_frame_pointers() {
    frames_match_gdb("O2-nofp").await;
}

/// Each rank's frames from one `stack_backtrace` request, by rank.
async fn stack_backtraces(c: &mut Console, n: u32, id: i64) -> HashMap<u32, Vec<String>> {
    let lines = c
        .request(&IdSet::all(n), &format!("{id} [] stack_backtrace()"))
        .await
        .unwrap();
    let mut stacks = HashMap::new();
    for l in lines {
        assert_eq!(l.status, Status::Replied, "{l:?}");
        let Some(Value::List(frames)) = l.reply.as_ref().and_then(|r| r.results.first()) else {
            panic!("no stack from {}: {}", l.ids, l.text);
        };
        let names: Vec<String> = frames
            .iter()
            .map(|f| match f {
                Value::List(parts) => match parts.get(2) {
                    Some(Value::Str(s)) => s.clone(),
                    other => panic!("frame without a name: {other:?}"),
                },
                other => panic!("frame is not a list: {other:?}"),
            })
            .collect();
        for id in l.ids.iter() {
            stacks.insert(id, names.clone());
        }
    }
    stacks
}

/// The line of `tree` that names `node` (`[0-2] top`), and its indentation.
fn tree_line(tree: &str, node: &str) -> (usize, usize) {
    let lines: Vec<&str> = tree.lines().collect();
    let i = lines
        .iter()
        .position(|l| l.trim_start() == node)
        .unwrap_or_else(|| panic!("no {node:?} in\n{tree}"));
    (i, lines[i].len() - lines[i].trim_start().len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn daemons_stacks_match_gdb_and_merge_in_bt() {
    // Ranks 0-2: the chain in each build; 3: asleep in libc; 4: in a signal handler.
    let ranks = [
        ("O0", CHAIN),
        ("O2", CHAIN),
        ("O2-nofp", CHAIN),
        ("O2-nofp", SLEEP),
        ("O2", SIGNAL),
    ];
    let procs: Vec<Running> = ranks.iter().map(|(b, c)| Running::start(b, c)).collect();
    let pids: Vec<u32> = procs.iter().map(Running::pid).collect();
    let n = pids.len() as u32;
    let opts = SessionOptions {
        n,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    let mut c = Console::new(s, false);
    for l in c.attach(&pids).await.unwrap() {
        assert_eq!(l.status, Status::Replied, "{l:?}");
        assert!(!l.text.contains("error"), "{}", l.text);
    }
    let mut stacks = HashMap::new();
    // Until every program waits where its case does (past start-up, the alarm gone off).
    for id in 0..500 {
        run(&mut c, "stop").await;
        stacks = stack_backtraces(&mut c, n, 1000 + id).await;
        let ready = ranks.iter().enumerate().all(|(r, (_, case))| {
            stacks[&(r as u32)].first().map(String::as_str) == Some(case.to_main[0])
        });
        if ready {
            break;
        }
        run(&mut c, "cont").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (r, (build, case)) in ranks.iter().enumerate() {
        assert_to_main(&format!("rank {r}: {build}"), &stacks[&(r as u32)], case);
    }
    // The console's tree: every rank through main, then the ranks split by where they
    // wait, inline frames as children of the function they are inlined into.
    let tree = run(&mut c, "bt --functions").await;
    for (parent, child) in [
        ("[0-4] main", "[0-2] top"),
        ("[0-2] top", "[0-2] mid"),
        ("[0-2] mid", "[0-2] leaf"),
        ("[0-2] leaf", "[0-2] spin"),
        ("[0-4] main", "[3] sleeper"),
        ("[3] sleeper", "[3] nanosleep"),
        ("[3] nanosleep", "[3] clock_nanosleep"),
        ("[0-4] main", "[4] wait_loop"),
        ("[4] wait_loop", &format!("[4] {SIGNAL_FRAME}")),
        (&format!("[4] {SIGNAL_FRAME}"), "[4] on_alarm"),
    ] {
        let (p, pd) = tree_line(&tree, parent);
        let (ch, cd) = tree_line(&tree, child);
        assert!(ch > p && cd == pd + 2, "{child} under {parent}:\n{tree}");
    }
    // The servers detach from processes they attached to; then gdb sees the same stacks.
    c.shutdown().await;
    for (r, (build, case)) in ranks.iter().enumerate() {
        let gdb = gdb_bt(pids[r]);
        let what = format!("rank {r}: {build} {}", case.mode);
        assert_same_frames(&what, &stacks[&(r as u32)], &gdb);
    }
    drop(procs);
}

/// gdb's and then sdm's frames of `pid`, held in a group stop (SIGSTOP) for both, so both
/// see the same pc even where the program moves on: sdm's frames first.
async fn held_frames(pid: u32) -> (Vec<String>, Vec<String>) {
    signal(pid, nix::sys::signal::Signal::SIGSTOP);
    while state(pid) != Some('T') {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let gdb = gdb_bt(pid);
    let sdm = monitor_frames_when(pid, |_| true).await;
    (sdm, gdb)
}

fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
}

#[tokio::test]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn frames_match_gdb_in_the_vdso() {
    // The vdso's code, read from the process's memory, unwound through its .eh_frame.
    let case = Case {
        mode: "vdso",
        to_main: &["clock_gettime", "clock_gettime", "clock_loop", "main"],
    };
    let p = Running::start("O2", &case);
    let mut frames = (Vec::new(), Vec::new());
    // Until it is stopped inside the vdso's clock_gettime (called by libc's).
    for _ in 0..200 {
        frames = held_frames(p.pid()).await;
        if frames.0.len() > 2 && frames.0[..2] == case.to_main[..2] {
            break;
        }
        signal(p.pid(), nix::sys::signal::Signal::SIGCONT);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (sdm, gdb) = frames;
    assert_to_main("O2 vdso", &sdm, &case);
    assert_same_frames("O2 vdso", &sdm, &gdb);
}

/// The MPI program's stack in a rank: `compute` (the last rank) or the barrier, from `step`.
const MPI_COMPUTE: &[&str] = &["compute", "step", "main"];
const MPI_BARRIER: &[&str] = &["PMPI_Barrier", "step", "main"];

/// The frames of `frames` from `first` down to `main`, if both are there.
fn from_to_main<'a>(frames: &'a [String], first: &str) -> Option<&'a [String]> {
    let start = frames.iter().position(|f| f == first)?;
    let main = frames.iter().position(|f| f == "main")?;
    frames.get(start..=main)
}

/// An `mpirun` job and its ranks, killed (ranks first) when dropped.
struct Job {
    mpirun: Child,
    ranks: Vec<u32>,
}

impl Drop for Job {
    fn drop(&mut self) {
        for &pid in &self.ranks {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.mpirun.kill();
        let _ = self.mpirun.wait();
    }
}

/// The processes whose parent is `parent` and whose executable is `exe`.
fn children_running(parent: u32, exe: &std::path::Path) -> Vec<u32> {
    sdm_e2e::children_of(parent)
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .ok()
                .as_deref()
                == Some(exe)
        })
        .collect()
}

#[tokio::test]
#[cfg_attr(
    not(all(sdm_have_gdb, sdm_have_mpirun)),
    ignore = "needs gdb and mpirun (deploy/ci-setup.sh)"
)]
async fn mpi_ranks_frames_match_gdb_through_libmpi() {
    let exe = sdm_e2e::mpi_program("mpi_hang");
    const N: usize = 3;
    let mpirun = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            &N.to_string(),
        ])
        .arg(&exe)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("mpirun");
    let mut job = Job {
        mpirun,
        ranks: Vec::new(),
    };
    for _ in 0..1000 {
        job.ranks = children_running(job.mpirun.id(), &exe);
        if job.ranks.len() == N {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(job.ranks.len(), N, "ranks of mpirun {}", job.mpirun.id());
    let mut computing = 0;
    for &pid in &job.ranks {
        // Past MPI_Init, in the barrier or in compute.
        let ready = |f: &[String]| {
            from_to_main(f, "compute").is_some() || from_to_main(f, "PMPI_Barrier").is_some()
        };
        monitor_frames_when(pid, ready).await;
        // Held in one place for both: the barrier's progress loop moves.
        let (sdm, gdb) = held_frames(pid).await;
        let what = format!("rank pid {pid}");
        assert_same_frames(&what, &sdm, &gdb);
        match from_to_main(&sdm, "compute") {
            Some(f) => {
                assert_eq!(f, MPI_COMPUTE, "{what}: {sdm:?}");
                computing += 1;
            }
            None => {
                let f = from_to_main(&sdm, "PMPI_Barrier");
                assert_eq!(
                    f,
                    Some(
                        MPI_BARRIER
                            .iter()
                            .map(|s| s.to_string())
                            .collect::<Vec<_>>()
                            .as_slice()
                    ),
                    "{what}: {sdm:?}"
                );
            }
        }
    }
    assert_eq!(
        computing, 1,
        "one rank computes, the others wait in the barrier"
    );
}
