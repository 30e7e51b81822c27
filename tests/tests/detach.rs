//! Letting attached processes go (issue 36, item 1): after a mix of native and gdb-driven
//! commands (`stop`, `print`, `break`, `next`, `cont`), `detach`, `detach --stopped`, the
//! end of the session and a killed front-end each leave every process untraced
//! (TracerPid 0), without a stop or trap pending, running (`R`/`S`; `T` only after
//! `detach --stopped`), and without breakpoints: released (a flag file), each program of
//! tests/programs/release.c calls the function the breakpoint was in once more and exits 0.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sdm::console::Console;
use sdm_client::session::{Session, SessionOptions};
use sdm_e2e::console_command as run;
use sdm_e2e::procs::{alive, status_fields};
use sdm_proto::IdSet;

/// How many processes each test attaches to.
const N: usize = 4;

/// The program, built `-O0 -g` once per test process.
fn program() -> PathBuf {
    sdm_e2e::c_program("release", &["-O0", "-g"])
}

/// `N` processes of the program, killed when dropped (a failed test leaves none).
struct Programs {
    children: Vec<Child>,
    flag: PathBuf,
}

impl Programs {
    fn start(tag: &str) -> Self {
        let flag = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("sdm-release-{tag}-{}.go", std::process::id()));
        let _ = std::fs::remove_file(&flag);
        let children = (0..N)
            .map(|r| {
                Command::new(program())
                    .arg(&flag)
                    .arg(r.to_string())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        Self { children, flag }
    }

    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Lets the programs end and says how each did (a hang guard, not a timing check).
    fn release(&mut self) -> Vec<Option<i32>> {
        std::fs::write(&self.flag, b"").unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        self.children
            .iter_mut()
            .map(|c| {
                loop {
                    if let Some(s) = c.try_wait().unwrap() {
                        use std::os::unix::process::ExitStatusExt;
                        break s.code().or(s.signal().map(|s| -s));
                    }
                    if Instant::now() > deadline {
                        break None;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
            .collect()
    }
}

impl Drop for Programs {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.flag);
    }
}

/// What /proc says of `pid`: state letter, tracer, and whether a SIGSTOP, SIGTRAP or
/// SIGINT is pending.
fn proc_status(pid: u32) -> (char, u32, bool) {
    let field = status_fields(pid);
    let bad = [19, 5, 2].iter().fold(0u64, |m, s| m | 1 << (s - 1));
    let pending = ["SigPnd:", "ShdPnd:"]
        .iter()
        .any(|f| u64::from_str_radix(&field(f), 16).unwrap() & bad != 0);
    (
        field("State:").chars().next().unwrap(),
        field("TracerPid:").parse().unwrap(),
        pending,
    )
}

/// Asserts `pid` is let go: untraced, nothing pending, in one of `states`.
fn assert_let_go(pid: u32, states: &[char], what: &str) {
    let (state, tracer, pending) = proc_status(pid);
    assert_eq!(tracer, 0, "{what}: pid {pid} still traced");
    assert!(!pending, "{what}: pid {pid} has a stop or trap pending");
    assert!(
        states.contains(&state),
        "{what}: pid {pid} left in state {state}, expected one of {states:?}"
    );
}

/// Asserts `out` (a command's output, events may follow) has the line `line`.
fn has_line(out: &str, line: &str) {
    assert!(out.lines().any(|l| l == line), "no {line:?} in:\n{out}");
}

/// Runs `cmd` until `done` holds for its output (a hang guard of a minute).
async fn until(c: &mut Console, cmd: &str, done: impl Fn(&str) -> bool) -> String {
    let mut out = String::new();
    for _ in 0..600 {
        out = run(c, cmd).await;
        if done(&out) {
            return out;
        }
        run(c, "sleep 0.1").await;
    }
    panic!("{cmd}: never as expected; last:\n{out}");
}

/// A console attached to `pids`, one rank each.
async fn attached(pids: &[u32]) -> Console {
    let opts = SessionOptions {
        n: pids.len() as u32,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(pids.len() as u32));
    let mut c = Console::new(s, false);
    for l in c.attach(pids).await.unwrap() {
        assert!(l.started(), "{l:?}");
    }
    c
}

/// The line of the source holding `marker`.
fn line_of(marker: &str) -> u32 {
    sdm_e2e::source_line("release", marker)
}

/// `stop`, `print` of an expression only gdb evaluates (gdb takes the processes over),
/// `break work`, `cont` until every
/// rank stands at the breakpoint, `next` there, a watchpoint on rank 0, and `cont`: the
/// programs run with breakpoints and a watchpoint set, gdb holding them.
async fn native_and_gdb_commands(c: &mut Console) {
    let all = format!("[0-{}]", N - 1);
    has_line(&run(c, "stop").await, &format!("{all} stopped"));
    let printed = run(c, "print rank + 0").await;
    for r in 0..N {
        assert!(
            printed.contains(&format!("[{r}] rank + 0 = {r}\n")),
            "{printed}"
        );
    }
    let set = run(c, "break work").await;
    assert!(set.starts_with(&format!("{all} breakpoint 1")), "{set}");
    has_line(&run(c, "cont").await, &format!("{all} running"));
    until(c, "status", |s| {
        s.lines()
            .any(|l| l.starts_with(&format!("{all} stopped in work at release.c:")))
    })
    .await;
    // From the entry of `work` (a native breakpoint) to its first line.
    let next = line_of("LINE_WORK ");
    has_line(
        &run(c, "next").await,
        &format!("{all} release.c:{next} in work()"),
    );
    has_line(&run(c, "watch total [0]").await, "[0] watchpoint on total");
    has_line(&run(c, "cont").await, &format!("{all} running"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn detach_and_quit_after_gdb_commands_leave_every_process_running_untraced() {
    let mut progs = Programs::start("console");
    let pids = progs.pids();
    let mut c = attached(&pids).await;
    native_and_gdb_commands(&mut c).await;
    // Ranks 0-1 detached (whatever they do now: at the breakpoint again or running), rank
    // 2 stopped first and detached --stopped, rank 3 let go by the end of the session.
    has_line(&run(&mut c, "detach 0-1").await, "[0-1] detached");
    has_line(&run(&mut c, "stop 2").await, "[2] stopped");
    has_line(&run(&mut c, "detach --stopped 2").await, "[2] detached");
    let bad = c.command("detach --nonsense 3", &mut Vec::new()).await;
    assert!(
        bad.as_ref()
            .is_err_and(|e| e.to_string().contains("--nonsense")),
        "{bad:?}"
    );
    c.shutdown().await;
    for (r, &pid) in pids.iter().enumerate() {
        let states: &[char] = if r == 2 { &['T'] } else { &['R', 'S'] };
        assert_let_go(pid, states, &format!("rank {r}"));
    }
    kill_cont(pids[2]);
    assert_eq!(progs.release(), vec![Some(0); N], "the programs' ends");
}

fn kill_cont(pid: u32) {
    let ok = Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
fn a_killed_front_end_lets_every_process_go() {
    let mut progs = Programs::start("killed");
    let pids = progs.pids();
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    let all = format!("[0-{}]", N - 1);
    let mut sdm = Command::new(sdm_e2e::sdm())
        .args(["attach", "--pids", &list.join(",")])
        .args(["-c", "stop", "-c", "print rank + 0", "-c", "break work"])
        .args(["-c", "cont", "-c", "sleep 600"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = sdm.stdout.take().unwrap();
    let mut seen = Vec::new();
    for l in std::io::BufReader::new(out).lines() {
        let l = l.unwrap();
        let running = l == format!("{all} running");
        seen.push(l);
        if running {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| *l == format!("{all} running")),
        "{seen:?}"
    );
    // The daemons (and their gdbs) end on their own once the front-end is gone.
    let below = sdm_e2e::descendants_of(sdm.id());
    assert!(!below.is_empty());
    sdm.kill().unwrap();
    sdm.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while below.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "daemons still there: {:?}",
            below.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for (r, &pid) in pids.iter().enumerate() {
        assert_let_go(pid, &['R', 'S'], &format!("rank {r}"));
    }
    assert_eq!(
        progs.release(),
        vec![Some(0); N],
        "the programs' ends: {seen:?}"
    );
}
