//! Console commands without a terminal: `sdm attach` reads them from standard input (one a
//! line, as gdb does) and ends at its end, also when it is empty; `-x FILE` runs a command
//! file (comments and blank lines skipped, an error named by FILE:LINE) for `sdm run` and
//! `sdm attach`, `-x -` standard input; `sdm attach --pids ... --table` prints the table and
//! attaches to nothing. Every sdm run here has a hang guard: it is killed, and the test
//! fails, if it does not end.

use sdm_e2e as support;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long one sdm command may run before the test calls it hung.
const HANG: Duration = Duration::from_secs(90);

/// What an sdm command did: exit code, stdout, stderr.
struct Ran {
    code: Option<i32>,
    out: String,
    err: String,
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.out, self.err
        )
    }
}

/// Runs `sdm ARGS` with `input` as its standard input (a pipe, closed after it), no
/// terminal anywhere; kills it and panics if it has not ended within [`HANG`].
fn sdm(args: &[&str], input: &str) -> Ran {
    let mut child = Command::new(support::sdm())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running sdm");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    // Read both pipes on threads, so a chatty sdm never blocks on a full pipe.
    let read = |r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut r = r;
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().unwrap()));
    let err = read(Box::new(child.stderr.take().unwrap()));
    let code = wait_or_kill(&mut child, args);
    Ran {
        code,
        out: out.join().unwrap(),
        err: err.join().unwrap(),
    }
}

fn wait_or_kill(child: &mut Child, args: &[&str]) -> Option<i32> {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        if t0.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sdm {args:?} did not end within {HANG:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `n` `sleep` processes to attach to, killed when this is dropped.
struct Sleepers(Vec<Child>);

impl Sleepers {
    fn start(n: usize) -> Sleepers {
        Sleepers(
            (0..n)
                .map(|_| Command::new("sleep").arg("600").spawn().unwrap())
                .collect(),
        )
    }

    /// Their pids, comma-separated, for `--pids`.
    fn pids(&self) -> String {
        self.0
            .iter()
            .map(|c| c.id().to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Each is alive, neither stopped nor traced.
    fn assert_running_untraced(&self, context: &Ran) {
        for c in &self.0 {
            let status = std::fs::read_to_string(format!("/proc/{}/status", c.id())).unwrap();
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::trim)
                    .unwrap_or("")
                    .to_owned()
            };
            assert!(
                field("State:").starts_with('S') || field("State:").starts_with('R'),
                "pid {}: {}\n{context}",
                c.id(),
                field("State:")
            );
            assert_eq!(field("TracerPid:"), "0", "pid {}\n{context}", c.id());
        }
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn attach_without_a_terminal_reads_commands_from_standard_input() {
    let job = Sleepers::start(2);
    let pids = job.pids();
    let r = sdm(
        &["attach", "--pids", &pids],
        "stop\n\n# a comment\nstatus 1\ncont\n",
    );
    assert_eq!(r.code, Some(0), "{r}");
    let lines: Vec<&str> = r.out.lines().collect();
    assert_eq!(lines[0], "[0-1] stopped", "{r}");
    assert!(lines[1].starts_with("[1] stopped"), "{r}");
    assert_eq!(lines[2], "[0-1] running", "{r}");
    job.assert_running_untraced(&r);
    // Nothing to read: sdm ends at once, detached.
    let r = sdm(&["attach", "--pids", &pids], "");
    assert_eq!(r.code, Some(0), "{r}");
    assert_eq!(r.out, "", "{r}");
    job.assert_running_untraced(&r);
    // A bad command is named by its line; the ones after it still run.
    let r = sdm(&["attach", "--pids", &pids], "frobnicate\nstatus\n");
    assert_eq!(r.code, Some(1), "{r}");
    assert!(
        r.err.contains("sdm: stdin:1: frobnicate: unknown command"),
        "{r}"
    );
    assert!(r.out.contains("[0-1] running"), "{r}");
    job.assert_running_untraced(&r);
}

#[test]
fn command_files_run_for_run_and_attach_and_errors_name_file_and_line() {
    let dir = std::env::temp_dir().join(format!("sdm-scripts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cmds.sdm");
    std::fs::write(
        &file,
        "# stop them, look, go on\n\nstop\n  status 0\nfrobnicate now\ncont\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let check = |r: &Ran| {
        assert_eq!(r.code, Some(1), "{r}");
        let lines: Vec<&str> = r.out.lines().collect();
        assert_eq!(lines[0], "[0-1] stopped", "{r}");
        assert!(lines[1].starts_with("[0] stopped"), "{r}");
        assert_eq!(lines[2], "[0-1] running", "{r}");
        assert!(
            r.err
                .contains(&format!("sdm: {f}:5: frobnicate now: unknown command")),
            "{r}"
        );
    };
    let r = sdm(&["run", "-n", "2", "-x", f, "--", "/bin/sleep", "600"], "");
    check(&r);
    let job = Sleepers::start(2);
    let r = sdm(&["attach", "--pids", &job.pids(), "-x", f], "");
    check(&r);
    job.assert_running_untraced(&r);
    // `-x -`: commands from standard input, after the -c ones, for `sdm run` too.
    let r = sdm(
        &[
            "run",
            "-n",
            "2",
            "-c",
            "stop",
            "-x",
            "-",
            "--",
            "/bin/sleep",
            "600",
        ],
        "status 1\nkill\n",
    );
    assert_eq!(r.code, Some(0), "{r}");
    let lines: Vec<&str> = r.out.lines().collect();
    assert_eq!(lines[0], "[0-1] stopped", "{r}");
    assert!(lines[1].starts_with("[1] stopped"), "{r}");
    assert_eq!(lines[2], "[0-1] killed", "{r}");
    // A file that cannot be read is named before anything starts.
    let r = sdm(
        &[
            "run",
            "-n",
            "2",
            "-x",
            "/nonexistent/cmds",
            "--",
            "/bin/sleep",
            "600",
        ],
        "",
    );
    assert_eq!(r.code, Some(1), "{r}");
    assert!(
        r.err
            .contains("-x /nonexistent/cmds: cannot read the command file"),
        "{r}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn table_with_pids_prints_the_table_and_attaches_to_nothing() {
    let job = Sleepers::start(2);
    let r = sdm(&["attach", "--pids", &job.pids(), "--table"], "");
    assert_eq!(r.code, Some(0), "{r}");
    let here = sdm_server::monitor::hostname();
    let sleep = std::fs::read_link(format!("/proc/{}/exe", job.0[0].id())).unwrap();
    let want: String = job
        .0
        .iter()
        .enumerate()
        .map(|(rank, c)| format!("{rank} {here} {} {}\n", c.id(), sleep.display()))
        .collect();
    assert_eq!(r.out, want, "{r}");
    job.assert_running_untraced(&r);
    // A pid that is not there is named.
    let r = sdm(&["attach", "--pids", "999999999", "--table"], "");
    assert_eq!(r.code, Some(1), "{r}");
    assert!(
        r.err
            .contains("--pids: rank 0: no process 999999999 on this host"),
        "{r}"
    );
}
