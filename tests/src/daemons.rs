//! The `sdm` daemons on the multi-host tests' hosts ([`crate::netns::Hosts`]): seen from
//! inside each host's namespace (`ss` for their sockets, `ip netns pids` and /proc for the
//! server processes), a held `sdm launch` driven from the test, and the waiting and
//! process helpers those tests share.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::netns::Hosts;

/// Bounds for waiting on conditions (generous: the machine may be loaded).
pub const PATIENCE: Duration = Duration::from_secs(180);

/// Runs `cmd`; panics with what it printed unless it succeeded; returns its stdout.
pub fn output_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `done` every 200 ms until it holds or `PATIENCE` passed; whether it held.
pub fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + PATIENCE;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// How `ss` and /proc name the `sdm` daemons: by their comm, the first 15 bytes of the
/// file name.
pub fn sdm_comm() -> String {
    let exe = Path::new(crate::sdm())
        .file_name()
        .unwrap()
        .to_string_lossy();
    exe.chars().take(15).collect()
}

/// The local addresses of the `sdm` daemons' sockets in host `k` of `hosts` (TCP listeners,
/// or for quic the UDP sockets), from `ss` inside its namespace.
pub fn daemon_sockets(hosts: &Hosts, k: u32, transport: &str) -> Vec<String> {
    let flags = if transport == "quic" {
        "-Hlunp"
    } else {
        "-Hltnp"
    };
    let out = output_ok(hosts.exec(k, "ss").arg(flags));
    let comm = sdm_comm();
    out.lines()
        .filter(|l| l.contains(&format!("((\"{comm}\"")))
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_owned))
        .collect()
}

/// The `sdm server` processes in host `k`'s namespace (`ip netns pids`): the processes
/// named like the `sdm` command whose first argument is `server`.
pub fn server_pids(hosts: &Hosts, k: u32) -> Vec<u32> {
    let out = output_ok(Command::new("ip").args(["netns", "pids", &hosts.namespace(k)]));
    let comm = sdm_comm();
    out.split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .filter(|pid| {
            let named = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim_end() == comm);
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            named && cmdline.split(|&b| b == 0).nth(1) == Some(b"server".as_slice())
        })
        .collect()
}

/// No `sdm` daemon is left on any host (`when` says after what).
pub fn assert_daemons_gone(hosts: &Hosts, transport: &str, when: &str) {
    for k in 1..=hosts.count() {
        assert!(
            wait_for(|| daemon_sockets(hosts, k, transport).is_empty()),
            "host {k}: daemons left after {when}: {:?}",
            daemon_sockets(hosts, k, transport)
        );
    }
}

/// SIGTERM to `child`, then SIGKILL if it has not ended within `PATIENCE`; reaped.
pub fn terminate(child: &mut Child) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    if !wait_for(|| matches!(child.try_wait(), Ok(Some(_)))) {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// A running `sdm` command, killed if the test ends early.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// `sdm launch … --send ping --hold` with the arguments `args` adds, until the merged reply
/// to the ping came back: the running command and what it printed so far.
pub fn launch_held(args: impl FnOnce(&mut Command)) -> (Running, Vec<String>) {
    let mut cmd = Command::new(crate::sdm());
    cmd.arg("launch");
    args(&mut cmd);
    let mut child = cmd
        .args(["--timeout", "150", "--send", "ping", "--hold"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("running sdm launch");
    let out = child.stdout.take().unwrap();
    let running = Running(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    while !lines.iter().any(|l: &String| l.ends_with(" pong")) {
        match rx.recv_timeout(PATIENCE) {
            Ok(l) => lines.push(l),
            Err(e) => panic!("sdm launch ({e}) printed only: {lines:#?}"),
        }
    }
    (running, lines)
}

/// ^C to a held `sdm launch`: it shuts the tree down and exits with success.
pub fn interrupt(mut running: Running) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(running.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let ended = wait_for(|| matches!(running.0.try_wait(), Ok(Some(_))));
    assert!(ended, "sdm launch did not end after ^C");
    let status = running.0.wait().unwrap();
    assert!(status.success(), "sdm launch: {status}");
}
