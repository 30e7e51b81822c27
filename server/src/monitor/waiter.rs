//! Waking a rank's monitor when its process changes state, without polling it.
//!
//! While the process runs under the monitor (one it traces, or a program it started and
//! polls on no idle-watch timer), one waiter thread blocks in `waitid(WNOWAIT)` until the
//! process exits or, traced, stops: the status stays for the monitor, which the waiter
//! wakes with a job and then ends. The monitor arms a new waiter whenever its process runs
//! again and none waits on it. So an idle rank costs a blocked thread, not a timer firing
//! many times a second (a thousand such timers starve a server's link).

use std::os::unix::thread::JoinHandleExt;
use std::sync::{Once, Weak};
use std::thread::JoinHandle;

use nix::errno::Errno;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;

use super::{LazyThread, Monitor, ProcState};

/// A waiter only waits: a small stack is plenty.
const WAITER_STACK: usize = 64 << 10;

/// Interrupts the `waitid` of a waiter whose process this monitor let go (which would
/// otherwise never return): its handler does nothing, and nothing else in a server uses
/// the signal (its default action is to ignore it).
const KICK: Signal = Signal::SIGURG;

impl Monitor {
    /// Whether something must notice the process's exits and stops as they happen: it
    /// runs, traced or started here, and gdb does not hold it (gdb reports those itself).
    /// An untraced program with an idle watch needs none: the watch's timer polls it.
    fn needs_waiter(&self) -> Option<Pid> {
        let p = self.proc.as_ref()?;
        let ours = p.traced || (p.child.is_some() && self.idle.is_none());
        (p.state == ProcState::Running && ours && p.gdb.is_none()).then_some(p.pid)
    }

    /// Arms a waiter for the process if it needs one and none waits on it yet. Returns
    /// whether the process needs polling instead (no waiter could be started).
    pub(super) fn arm_waiter(&mut self) -> bool {
        let Some(pid) = self.needs_waiter() else {
            return false;
        };
        if self.waiter.as_ref().is_some_and(|(p, _)| *p == pid) {
            return false;
        }
        match spawn(pid, self.wake.clone()) {
            Ok(thread) => {
                // A waiter of an earlier process ends with that process's end.
                self.waiter = Some((pid, thread));
                false
            }
            Err(e) => {
                tracing::debug!(
                    "rank {}: no waiter thread for {pid} ({e}): polling",
                    self.rank
                );
                true
            }
        }
    }

    /// Ends the waiter of a process this monitor attached to and has just let go (no
    /// longer its tracer, never its parent): interrupted, its `waitid` fails at once.
    pub(super) fn end_waiter(&mut self) {
        let Some((_, thread)) = self.waiter.take() else {
            return;
        };
        // SAFETY: the thread is not joined (nor detached) yet, so its id is valid; the
        // signal's handler does nothing.
        unsafe { libc::pthread_kill(thread.as_pthread_t(), KICK as libc::c_int) };
        // Dropped: it ends on its own once interrupted.
    }
}

/// Starts a waiter of `pid` that wakes the monitor thread behind `wake` once the process
/// has a status to collect (or is gone).
fn spawn(pid: Pid, wake: Weak<LazyThread>) -> std::io::Result<JoinHandle<()>> {
    static HANDLER: Once = Once::new();
    HANDLER.call_once(|| {
        extern "C" fn nothing(_: libc::c_int) {}
        // Without SA_RESTART, so that the signal ends a blocked waitid with EINTR.
        let action = SigAction::new(
            SigHandler::Handler(nothing),
            SaFlags::empty(),
            SigSet::empty(),
        );
        // SAFETY: the handler does nothing at all, which is async-signal-safe.
        if let Err(e) = unsafe { sigaction(KICK, &action) } {
            tracing::warn!("no handler for {KICK}: let-go waiters stay blocked ({e})");
        }
    });
    std::thread::Builder::new()
        .name("sdm-waiter".into())
        .stack_size(WAITER_STACK)
        .spawn(move || {
            // Exits, and (without WSTOPPED) only the ptrace stops of a traced process:
            // exactly what the monitor's poll collects, so no status is left to wake on
            // again. Interrupted, it waits again, unless the process is no longer its
            // monitor's (ECHILD).
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::__WALL;
            while waitid(Id::Pid(pid), flags) == Err(Errno::EINTR) {}
            // No handle left: the monitor thread is ending anyway.
            let Some(inner) = wake.upgrade() else { return };
            if let Some(tx) = inner.tx.get() {
                let _ = tx.send(Box::new(move |m: &mut Monitor| {
                    if m.waiter.as_ref().is_some_and(|(p, _)| *p == pid) {
                        // It has sent this and ends: joined at once.
                        if let Some((_, thread)) = m.waiter.take() {
                            let _ = thread.join();
                        }
                    }
                }));
            }
        })
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::super::{IoMode, MonitorHandle};
    use sdm_proto::Kind;

    /// How often thread `tid` of this process was switched out so far.
    fn switches(tid: i32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        status
            .lines()
            .filter_map(|l| {
                l.strip_prefix("voluntary_ctxt_switches:")
                    .or(l.strip_prefix("nonvoluntary_ctxt_switches:"))
            })
            .map(|v| v.trim().parse::<u64>().unwrap())
            .sum()
    }

    /// Waits until thread `tid` is blocked (state S), so the switch out of its last reply
    /// is counted before the test starts counting.
    fn wait_blocked(tid: i32) {
        let state = || {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
            stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next())
        };
        while state() != Some('S') {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills the child if the test fails before it was killed, so no process outlives it.
    struct KillOnDrop(Option<std::process::Child>);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            if let Some(mut child) = self.0.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// The monitor thread's id, asked of the thread itself.
    fn monitor_tid(m: &MonitorHandle) -> i32 {
        m.submit(|_| nix::unistd::gettid().as_raw())
            .blocking_recv()
            .unwrap()
    }

    #[test]
    fn an_attached_idle_process_leaves_its_monitor_asleep_until_it_exits() {
        let (tx, mut rx) = mpsc::channel(16);
        let (m, _events) = MonitorHandle::new(3, 1, tx);
        let mut guard = KillOnDrop(Some(
            Command::new("sleep")
                .arg("1000")
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        ));
        let pid = guard.0.as_ref().unwrap().id();
        let attached = m.submit(move |m| m.attach(pid)).blocking_recv().unwrap();
        assert_eq!(attached.unwrap(), pid);
        let tid = monitor_tid(&m);
        // Traced and running, with nothing happening: once asleep, the thread does not
        // wake at all.
        wait_blocked(tid);
        let before = switches(tid);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(switches(tid), before, "the idle monitor woke");
        // Its end wakes the monitor, which reports it for its rank.
        // Killed here, the guard has nothing left to do (the monitor reaps it).
        let mut sleep = guard.0.take().unwrap();
        sleep.kill().unwrap();
        let (kind, rank, event) = rx.blocking_recv().expect("the exit event");
        assert_eq!((kind, rank), (Kind::Event, 3));
        assert_eq!(&event[..], b"process_terminated(\"killed\",\"SIGKILL\")");
        // The monitor (its tracer) reaped it already.
        assert!(sleep.wait().is_err(), "the monitor left a zombie");
    }

    #[test]
    fn a_started_program_that_ends_is_reported_without_a_poll_timer() {
        let (tx, mut rx) = mpsc::channel(16);
        let (m, _events) = MonitorHandle::new(4, 1, tx);
        m.submit(|m| m.start("sh", &["-c".into(), "sleep 0.2".into()], IoMode::Runtime))
            .blocking_recv()
            .unwrap()
            .unwrap();
        let (kind, rank, event) = rx.blocking_recv().expect("the exit event");
        assert_eq!((kind, rank), (Kind::Event, 4));
        assert_eq!(&event[..], b"process_terminated(\"exited\",0)");
    }
}
