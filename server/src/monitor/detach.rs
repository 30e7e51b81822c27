//! Letting an attached process go for good (`detach`, the end of a session, a lost
//! front-end): whatever held it (the native ptrace monitor, or gdb since a symbolic
//! command), it is left untraced, without breakpoints or watchpoints, without a stop or
//! trap pending, and running: or stopped, when it was stopped and the user asked for that
//! (`detach --stopped`).
//!
//! A process that was ever in a SIGSTOP group-stop (`stop` of an untraced process, the
//! handover to gdb) goes back into it when its tracer lets it go: the kernel keeps the
//! group-stop until a SIGCONT. So a process meant to run gets a SIGCONT after the detach,
//! which also discards any SIGSTOP still pending.

use nix::sys::ptrace;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use std::time::Duration;

use super::breakpoints::poke_byte;
use super::symbolic::{gdb_err, interrupt, resume};
use super::{MonResult, Monitor, ProcState};

/// How long each step of letting a process go may take (a gdb that takes longer is
/// killed instead).
const DETACH_PATIENCE: Duration = Duration::from_secs(30);

/// How a detached process is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// Running (the default).
    Running,
    /// Stopped, if it was stopped (`detach --stopped`); a running process stays running.
    Stopped,
}

impl Monitor {
    /// Lets the process go (see the module doc); the monitor keeps its entry (the caller
    /// drops it). Errors on the way are not fatal: what can be undone is undone.
    pub(super) fn detach(&mut self, leave: Leave) {
        let Some(p) = self.proc.as_ref() else { return };
        let pid = p.pid;
        // Run states recorded at a stop describe no later stop, and no other process.
        self.run_states.clear();
        let stopped = !matches!(p.state, ProcState::Running);
        let keep_stopped = leave == Leave::Stopped && stopped;
        if self.symbolic() {
            self.detach_symbolic();
            if keep_stopped {
                settle_stopped(pid);
            }
        } else {
            self.detach_native(keep_stopped);
        }
        if self.proc.as_ref().is_some_and(|p| p.child.is_none()) {
            self.end_waiter();
        }
        let Some(p) = self.proc.as_mut() else { return };
        if matches!(p.state, ProcState::Exited(_) | ProcState::Signaled(_)) {
            return;
        }
        if keep_stopped {
            p.state = ProcState::Stopped;
        } else {
            // Out of any group-stop; a pending SIGSTOP is discarded with it.
            let _ = kill(pid, Signal::SIGCONT);
            p.state = ProcState::Running;
        }
    }

    /// The native side of [`Monitor::detach`]: stops a running traced process (a
    /// breakpoint hit met on the way is undone), removes the breakpoints and detaches,
    /// with a SIGSTOP to stay in when `keep_stopped`.
    fn detach_native(&mut self, keep_stopped: bool) {
        let Some(p) = self.proc.as_mut() else { return };
        if !p.traced {
            return;
        }
        let pid = p.pid;
        if p.state == ProcState::Running {
            if ptrace::interrupt(pid).is_err() {
                return;
            }
            // Until the process is in a ptrace stop the breakpoints can be taken out in.
            loop {
                match waitpid(pid, Some(WaitPidFlag::__WALL)) {
                    Ok(WaitStatus::PtraceEvent(..)) => break,
                    Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {
                        // A hit: back to the breakpoint's address, where the original
                        // instruction goes again. (The interrupt still pending ends with the
                        // detach.)
                        if let Ok(mut r) = ptrace::getregs(pid)
                            && p.breakpoints.contains_key(&(r.rip - 1))
                        {
                            r.rip -= 1;
                            let _ = ptrace::setregs(pid, r);
                            break;
                        }
                        // The program's own SIGTRAP: delivered, as without sdm.
                        let _ = ptrace::cont(pid, Signal::SIGTRAP);
                    }
                    // A signal on its way: delivered; the interrupt's stop follows.
                    Ok(WaitStatus::Stopped(_, sig)) => {
                        let _ = ptrace::cont(pid, sig);
                    }
                    Ok(WaitStatus::Exited(_, c)) => {
                        p.state = ProcState::Exited(c);
                        return;
                    }
                    Ok(WaitStatus::Signaled(_, s, _)) => {
                        p.state = ProcState::Signaled(s.to_string());
                        return;
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        }
        for (addr, (orig, _)) in std::mem::take(&mut p.breakpoints) {
            let _ = poke_byte(pid, addr, orig);
        }
        if let ProcState::AtBreakpoint(addr) = p.state
            && let Ok(mut r) = ptrace::getregs(pid)
        {
            r.rip = addr;
            let _ = ptrace::setregs(pid, r);
        }
        let _ = ptrace::detach(pid, keep_stopped.then_some(Signal::SIGSTOP));
        p.traced = false;
    }

    /// Has gdb let the held process go for good (the monitor's detach): stopped first if
    /// it runs, every breakpoint and watchpoint deleted, then detached (into the group-stop
    /// of the handover, which the caller ends or keeps). A gdb that does not answer is
    /// killed (the kernel detaches it then).
    pub(super) fn detach_symbolic(&mut self) {
        // Stops gdb has reported meanwhile (a hit, an exit) are taken first.
        let stops = match self.proc.as_mut().and_then(|p| p.gdb.as_mut()) {
            Some(h) => h.gdb.take_stops(),
            None => return,
        };
        for s in &stops {
            self.stopped(s, false);
        }
        let Some(p) = self.proc.as_mut() else { return };
        let pid = p.pid;
        let Some(mut h) = p.gdb.take() else { return };
        let mut let_go = || -> MonResult<()> {
            if h.running {
                let stop = interrupt(&mut h)?;
                // Another stop came before the interrupt's: its SIGINT, still pending,
                // would reach the program once detached. It is taken here instead.
                if stop.str("signal-name") != Some("SIGINT") && pending_sigint(pid) {
                    resume(&mut h)?;
                    h.gdb.wait_stopped(DETACH_PATIENCE).map_err(gdb_err)?;
                }
            }
            for n in std::mem::take(&mut h.breaks).into_keys() {
                h.gdb
                    .command(&format!("-break-delete {n}"), DETACH_PATIENCE)
                    .map_err(gdb_err)?;
            }
            h.gdb
                .command("-target-detach", DETACH_PATIENCE)
                .map_err(gdb_err)?;
            Ok(())
        };
        // Whatever failed, gdb ends with `h` here.
        let _ = let_go();
    }
}

/// Leaves the untraced process `pid` in a group-stop with no SIGSTOP pending (one sent
/// to a process already stopped would stay pending): seized, trapped, and detached with
/// the SIGSTOP delivered at once.
fn settle_stopped(pid: Pid) {
    if ptrace::seize(pid, ptrace::Options::empty()).is_err() {
        return;
    }
    // Seizing a process in a group-stop traps it at once; the interrupt is for one that
    // runs (one left over ends with the detach).
    let _ = ptrace::interrupt(pid);
    loop {
        match waitpid(pid, Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::PtraceEvent(..)) => break,
            Ok(WaitStatus::Stopped(_, sig)) => {
                let _ = ptrace::cont(pid, sig);
            }
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_) => return,
            Ok(_) => {}
        }
    }
    let _ = ptrace::detach(pid, Signal::SIGSTOP);
}

/// Whether a SIGINT waits to be delivered to process `pid` (its own or its main
/// thread's pending signals, in /proc).
fn pending_sigint(pid: Pid) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let bit = 1u64 << (Signal::SIGINT as i32 - 1);
    status
        .lines()
        .filter_map(|l| l.strip_prefix("SigPnd:").or(l.strip_prefix("ShdPnd:")))
        .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
        .any(|mask| mask & bit != 0)
}
