//! Idle detection of a started program, for the front-end's line alignment: the program
//! is *idle* when the server holds none of its output (nothing unread in the pty or pipes,
//! no partial or unsent line in a reader) and either none of its processes has been
//! runnable for [`IDLE_WALL`], or they used [`IDLE_CPU`] of CPU time since its last line
//! (computing without printing). A program starved of CPU on a loaded machine stays
//! runnable and uses no CPU time, so it is never called idle: its lines are still awaited.
//!
//! The readers ([`read_lines`]) keep a [`Tap`] up to date; the monitor thread calls
//! [`Watch::check`] on its poll timer, which samples /proc only once the program has
//! been quiet for a while, and says when to send one idle marker per quiet period.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nix::unistd::Pid;

/// How long no process of the program may be runnable before it is idle.
pub(super) const IDLE_WALL: Duration = Duration::from_millis(100);
/// How much CPU time the program may use without printing before it is idle.
pub(super) const IDLE_CPU: Duration = Duration::from_millis(50);
/// How long the program must be quiet before /proc is sampled at all.
const QUIET: Duration = Duration::from_millis(50);

/// What one output reader holds, shared with the monitor thread.
#[derive(Debug, Default)]
pub(super) struct Tap {
    /// Lines sent so far.
    lines: AtomicU64,
    /// Whether the reader holds bytes not sent yet (a partial line, or lines being sent).
    holding: AtomicBool,
    /// The reader thread's id (0 until it runs).
    tid: AtomicI32,
}

/// Reads `fd` and calls `send` with each line (tagged `stream`, without its `\n` or `\r\n`;
/// a last line without `\n` too) until end of file or until `send` says stop, keeping `tap`
/// up to date.
pub(super) fn read_lines(
    mut fd: std::fs::File,
    stream: u8,
    tap: &Tap,
    mut send: impl FnMut(Bytes) -> bool,
) {
    tap.tid
        .store(nix::unistd::gettid().as_raw(), Ordering::Release);
    let mut buf = vec![0u8; 64 << 10];
    let mut line = vec![stream];
    loop {
        // Blocking in read with nothing held: the reader is done with what it read.
        tap.holding.store(line.len() > 1, Ordering::Release);
        let n = match fd.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break, // EIO once a pty's last writer is gone
        };
        tap.holding.store(true, Ordering::Release);
        for part in buf[..n].split_inclusive(|&b| b == b'\n') {
            line.extend_from_slice(part);
            if line.last() != Some(&b'\n') {
                continue;
            }
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if !send(Bytes::copy_from_slice(&line)) {
                return;
            }
            tap.lines.fetch_add(1, Ordering::AcqRel);
            line.truncate(1);
        }
    }
    if line.len() > 1 {
        let _ = send(Bytes::copy_from_slice(&line));
        tap.lines.fetch_add(1, Ordering::AcqRel);
    }
}

/// The idle watch of one started program.
#[derive(Debug)]
pub(super) struct Watch {
    pid: Pid,
    /// Each reader's tap, with a copy of the descriptor it reads (for what is unread).
    taps: Vec<(Arc<Tap>, OwnedFd)>,
    /// Lines seen at the last check, and when that count last changed.
    lines: u64,
    quiet_since: Instant,
    /// CPU ticks of the program when this quiet period was first sampled.
    cpu_base: Option<u64>,
    /// Since when no process of the program was seen runnable.
    asleep_since: Option<Instant>,
    last_sample: Option<Instant>,
    /// Whether this quiet period's marker was sent.
    reported: bool,
}

impl Watch {
    /// Watches program `pid` whose output the readers of `taps` read (from the descriptors
    /// given with them).
    pub(super) fn new(pid: Pid, taps: Vec<(Arc<Tap>, OwnedFd)>) -> Self {
        Self {
            pid,
            taps,
            lines: 0,
            quiet_since: Instant::now(),
            cpu_base: None,
            asleep_since: None,
            last_sample: None,
            reported: false,
        }
    }

    /// Calls `send` when the program has gone idle (once per quiet period: until `send`
    /// says the marker went), to send an idle marker after the lines sent so far. Returns
    /// whether it went.
    pub(super) fn check(&mut self, now: Instant, send: impl FnOnce() -> bool) -> bool {
        if self.reported || self.taps.is_empty() || self.output_changed(now) {
            return false;
        }
        if now.saturating_duration_since(self.quiet_since) < QUIET
            || self
                .last_sample
                .is_some_and(|t| now.saturating_duration_since(t) < QUIET)
        {
            return false;
        }
        self.last_sample = Some(now);
        // The processes first, then the output: a line written before they were seen
        // asleep is then seen unread, in a reader, or sent.
        let Some((runnable, cpu)) = sample(self.pid) else {
            return false;
        };
        if !self.output_drained() || self.output_changed(now) {
            self.asleep_since = None;
            return false;
        }
        let base = *self.cpu_base.get_or_insert(cpu);
        let asleep = if runnable {
            self.asleep_since = None;
            Duration::ZERO
        } else {
            now.saturating_duration_since(*self.asleep_since.get_or_insert(now))
        };
        let computing = ticks_to_duration(cpu.saturating_sub(base)) >= IDLE_CPU;
        self.reported = (asleep >= IDLE_WALL || computing) && send();
        self.reported
    }

    /// Whether a line was sent since the last check (a new quiet period starts).
    fn output_changed(&mut self, now: Instant) -> bool {
        let lines: u64 = self
            .taps
            .iter()
            .map(|(t, _)| t.lines.load(Ordering::Acquire))
            .sum();
        if lines == self.lines {
            return false;
        }
        self.lines = lines;
        self.quiet_since = now;
        self.cpu_base = None;
        self.asleep_since = None;
        self.reported = false;
        true
    }

    /// Whether the server holds none of the program's output: each reader blocked with
    /// nothing held, nothing unread in its descriptor.
    fn output_drained(&self) -> bool {
        self.taps.iter().all(|(t, fd)| {
            let tid = t.tid.load(Ordering::Acquire);
            tid != 0
                && !t.holding.load(Ordering::Acquire)
                && !matches!(thread_state(tid), Some(b'R') | None)
                && unread(fd) == Some(0)
        })
    }
}

/// The state letter of this process's thread `tid`.
fn thread_state(tid: i32) -> Option<u8> {
    let stat = std::fs::read(format!("/proc/self/task/{tid}/stat")).ok()?;
    stat_fields(&stat).and_then(|f| f.first().and_then(|s| s.first().copied()))
}

/// The fields of a /proc stat line after the command name (state first).
fn stat_fields(stat: &[u8]) -> Option<Vec<&[u8]>> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    Some(
        stat[close + 1..]
            .split(|&b| b == b' ')
            .filter(|f| !f.is_empty())
            .collect(),
    )
}

/// Bytes waiting to be read from `fd`.
fn unread(fd: &OwnedFd) -> Option<i32> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to the pointer, which outlives the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    (r == 0).then_some(n)
}

/// Whether a thread of program `pid` or of its descendants is runnable (state R, or D:
/// waiting for the disk is no sign of idleness), and their CPU time in clock ticks (of the
/// waited-for children too). `None`: the program is gone.
fn sample(pid: Pid) -> Option<(bool, u64)> {
    let mut runnable = false;
    let mut cpu = 0;
    let mut todo = vec![pid.as_raw()];
    let mut seen = 0;
    while let Some(p) = todo.pop() {
        seen += 1;
        if seen > 4096 {
            break;
        }
        let Ok(stat) = std::fs::read(format!("/proc/{p}/stat")) else {
            if p == pid.as_raw() {
                return None;
            }
            continue;
        };
        // After the state: ppid pgrp session tty tpgid flags minflt cminflt majflt
        // cmajflt utime stime cutime cstime (fields 14-17 of proc(5)).
        if let Some(f) = stat_fields(&stat) {
            cpu += f
                .get(11..15)
                .into_iter()
                .flatten()
                .filter_map(|v| std::str::from_utf8(v).ok()?.parse::<u64>().ok())
                .sum::<u64>();
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let dir = t.path();
            if let Ok(s) = std::fs::read(dir.join("stat"))
                && matches!(
                    stat_fields(&s).and_then(|f| f.first().and_then(|x| x.first().copied())),
                    Some(b'R' | b'D')
                )
            {
                runnable = true;
            }
            if let Ok(children) = std::fs::read_to_string(dir.join("children")) {
                todo.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<i32>().ok()),
                );
            }
        }
    }
    Some((runnable, cpu))
}

/// `ticks` of CPU time (`sysconf(_SC_CLK_TCK)` a second) as a duration.
fn ticks_to_duration(ticks: u64) -> Duration {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100);
    Duration::from_millis(ticks.saturating_mul(1000) / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_start_after_the_command_name() {
        let f = stat_fields(b"12 (a b) c) S 1 12 12 0 -1 0 0 0 0 0 7 3 1 2 20").unwrap();
        assert_eq!(f[0], b"S");
        assert_eq!(&f[11..15], [&b"7"[..], b"3", b"1", b"2"]);
    }

    #[test]
    fn a_sleeping_program_is_idle_and_only_once() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(child.id() as i32);
        let (r, _w) = nix::unistd::pipe().unwrap();
        let tap = Arc::new(Tap::default());
        // A reader thread blocked in its read, holding nothing.
        let t2 = tap.clone();
        let fd = std::fs::File::from(r.try_clone().unwrap());
        let reader = std::thread::spawn(move || read_lines(fd, 1, &t2, |_| true));
        let mut w = Watch::new(pid, vec![(tap, r)]);
        let start = Instant::now();
        let mut fired = 0;
        while start.elapsed() < Duration::from_secs(20) && fired == 0 {
            std::thread::sleep(Duration::from_millis(20));
            fired += usize::from(w.check(Instant::now(), || true));
        }
        assert_eq!(fired, 1, "a sleeping program is idle");
        assert!(
            !w.check(Instant::now() + Duration::from_secs(1), || true),
            "once per quiet period"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        drop(_w);
        reader.join().unwrap();
    }
}
