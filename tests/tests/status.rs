//! `sdm status` from another process against a running `sdm run`: the tree's health per
//! subtree, in text and JSON, with the exit status saying whether it is whole; a stale
//! socket is removed; after a server is SIGKILLed the report names the lost subtree, and
//! the run itself does not hang waiting for the lost rank's program.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A private runtime directory for this test (so it sees no other front-end).
fn runtime_dir() -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let d = std::env::temp_dir().join(format!("sdm-status-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
    d
}

fn status(runtime: &Path, args: &[&str]) -> Output {
    Command::new(sdm_e2e::sdm())
        .arg("status")
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime)
        .output()
        .expect("running sdm status")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The pid of the server with rank `id` below the front-end `parent`.
fn server_pid(parent: u32, id: u32) -> i32 {
    sdm_e2e::server_of_rank(parent, id).unwrap_or_else(|| panic!("no server {id} under {parent}"))
        as i32
}

struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sdm_status_asks_the_running_front_end() {
    let runtime = runtime_dir();
    // Eight programs that end when their input does, like `srun`.
    let mut run = Run(Command::new(sdm_e2e::sdm())
        .args([
            "run",
            "--ranks-per-server",
            "1",
            "-n",
            "8",
            "--",
            "sh",
            "-c",
            "read x",
        ])
        .env("XDG_RUNTIME_DIR", &runtime)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap());
    let pid = run.0.id();
    let sock = runtime.join("sdm").join(format!("{pid}.sock"));
    let guard = Instant::now() + Duration::from_secs(60);
    while !sock.exists() {
        assert!(Instant::now() < guard, "no socket at {}", sock.display());
        std::thread::sleep(Duration::from_millis(50));
    }

    // Binomial over 8: the master's children are 0, 1, 3 and 7.
    let o = status(&runtime, &[]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(
        text(&o),
        "server 0 subtree [0]: full (1/1 replied)\n\
         server 1 subtree [1-2]: full (2/2 replied)\n\
         server 3 subtree [3-6]: full (4/4 replied)\n\
         server 7 subtree [7]: full (1/1 replied)\n"
    );
    let o = status(&runtime, &[&pid.to_string(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let rows: Vec<serde_json::Value> = text(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(rows.iter().all(|r| r["health"] == "full"), "{rows:?}");

    // A socket whose front-end is gone is removed; the live one still answers.
    let stale = runtime.join("sdm").join("4000000.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let o = status(&runtime, &[]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(!stale.exists(), "the stale socket was removed");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("removing stale"),
        "{o:?}"
    );
    // A pid with no front-end is a clear error.
    let o = status(&runtime, &["4000001"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no sdm front-end with pid 4000001"),
        "{o:?}"
    );

    // Server 4, a leaf under 3, is killed.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server_pid(pid, 4)),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let o = status(&runtime, &[]);
    assert_eq!(o.status.code(), Some(2), "not every subtree is full: {o:?}");
    let t = text(&o);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines[0], "server 0 subtree [0]: full (1/1 replied)", "{t}");
    assert_eq!(
        lines[2], "server 3 subtree [3-6]: partial (3/4 replied)",
        "{t}"
    );
    assert_eq!(
        lines[3], "  server 4 subtree [4]: lost (0/1 replied)",
        "{t}"
    );

    // End of input: the other programs end, rank 4's end never comes (its server is
    // gone), and the run must notice that instead of waiting for ever.
    drop(run.0.stdin.take());
    let guard = Instant::now() + Duration::from_secs(120);
    let code = loop {
        if let Some(s) = run.0.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            Instant::now() < guard,
            "sdm run hangs after losing a server"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    run.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let mut out = String::new();
    run.0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(code, Some(1), "a lost rank fails the run: {err}");
    assert!(err.contains("sdm: [4] lost: "), "{err}");
    // Every other program's end was printed (merged or not).
    let ended = out
        .lines()
        .filter(|l| l.contains(" exited with status "))
        .fold(sdm_proto::IdSet::new(), |acc, l| {
            &acc | &l.split(' ').next().unwrap().parse().unwrap()
        });
    assert_eq!(ended.to_string(), "[0-3,5-7]", "{out}");
    assert!(!sock.exists(), "the run removed its socket");
    let _ = std::fs::remove_dir_all(&runtime);
}
