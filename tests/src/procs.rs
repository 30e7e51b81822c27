//! What the tests read of the processes they start or attach to: `sleep`s killed when
//! dropped, a process's state letter (`/proc/PID/stat`) and tracer (`/proc/PID/status`).

use std::process::{Child, Command, Stdio};

/// `sleep 1000` processes to attach to, killed when dropped (a failed test leaves none).
pub struct Sleeps(pub Vec<Child>);

impl Sleeps {
    /// Starts `n` of them.
    pub fn start(n: u32) -> Sleeps {
        Sleeps(
            (0..n)
                .map(|_| {
                    Command::new("sleep")
                        .arg("1000")
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("starting sleep")
                })
                .collect(),
        )
    }

    /// Their pids, in start order.
    pub fn pids(&self) -> Vec<u32> {
        self.0.iter().map(Child::id).collect()
    }
}

impl Drop for Sleeps {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The state letter of `pid` (`R`, `S`, `T`, `t`, `Z`…), `None` once it is reaped.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Whether `pid` still lives: neither reaped nor a zombie.
pub fn alive(pid: u32) -> bool {
    !matches!(state(pid), None | Some('Z' | 'X'))
}

/// The parent of `pid` (the field after the state in `/proc/PID/stat`), `None` once it is
/// reaped.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// One read of `/proc/PID/status`, as a reader of its fields (`"State:"` gives `S (sleeping)`).
pub fn status_fields(pid: u32) -> impl Fn(&str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("no process {pid}: {e}"));
    move |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
            .trim()
            .to_owned()
    }
}

/// The state letter of `pid` and its tracer (0: none), from one read of its status.
pub fn state_and_tracer(pid: u32) -> (char, u32) {
    let field = status_fields(pid);
    let state = field("State:").chars().next().expect("a state letter");
    (state, field("TracerPid:").parse().expect("a tracer pid"))
}

/// The tracer of `pid` (0: none).
pub fn tracer(pid: u32) -> u32 {
    state_and_tracer(pid).1
}
