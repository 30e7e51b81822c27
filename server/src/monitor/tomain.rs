//! Running an attached process to `main`: a job its launcher holds before the tasks' first
//! instruction (srun with `MPIR_being_debugged` set stops each task at its exec, before the
//! dynamic linker runs) is attached to, and each task run to `main` and left stopped there,
//! as `--stop-at-main` leaves a program this server starts.

use nix::sys::ptrace;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::breakpoints::poke_byte;
use super::control::{wait_interrupted, wait_trace_stop};
use super::{MonResult, Monitor, ProcState, errno, raw, state};

impl Monitor {
    /// Runs the attached process to `main` and leaves it stopped there (traced, as `stop`
    /// leaves it). It must not have reached `main` yet: a process already past it runs on
    /// until it ends or calls `main` again, so this is for tasks held before their start.
    pub fn run_attached_to_main(&mut self) -> MonResult<()> {
        let addr = self.resolve("main")?;
        let p = self.proc()?;
        let pid = p.pid;
        if !p.traced || p.child.is_some() {
            return Err(
                state("only a process attached to runs to main this way".into()).with_pid(raw(pid)),
            );
        }
        // Into a ptrace stop. A process seized while stopped (the held task) reports that
        // stop by itself; a running one is interrupted.
        if p.state == ProcState::Running {
            if super::symbolic::proc_state(pid).is_some_and(|c| matches!(c, 'T' | 't')) {
                wait_trace_stop(p)?;
            } else {
                ptrace::interrupt(pid).map_err(|e| errno(pid, "ptrace interrupt", e))?;
                wait_interrupted(p)?;
            }
        }
        // It runs on: run states a `stop` recorded describe no later stop.
        self.run_states.clear();
        // SIGCONT ends the stop the launcher left it in; PTRACE_CONT lets it run.
        kill(pid, Signal::SIGCONT).map_err(|e| errno(pid, "SIGCONT", e))?;
        self.run_into(pid, addr, true)?;
        self.proc()?.state = ProcState::Stopped;
        Ok(())
    }
}

impl Monitor {
    /// Runs the ptrace-stopped process `pid` until it reaches `addr` (`main`), with a
    /// breakpoint put there and taken out again; it stays in that ptrace stop. `skip_stops`:
    /// stops on the way (job control, a launcher's SIGSTOP) are not kept.
    pub(super) fn run_into(&mut self, pid: Pid, addr: u64, skip_stops: bool) -> MonResult<()> {
        let word = ptrace::read(pid, addr as ptrace::AddressType)
            .map_err(|e| errno(pid, &format!("reading {addr:#x}"), e))?;
        poke_byte(pid, addr, 0xcc)?;
        ptrace::cont(pid, None).map_err(|e| errno(pid, "ptrace cont", e))?;
        loop {
            match waitpid(pid, Some(WaitPidFlag::__WALL)).map_err(|e| errno(pid, "waitpid", e))? {
                WaitStatus::Stopped(_, Signal::SIGTRAP) => {
                    let mut r = ptrace::getregs(pid).map_err(|e| errno(pid, "getregs", e))?;
                    if r.rip.wrapping_sub(1) != addr {
                        ptrace::cont(pid, None).map_err(|e| errno(pid, "ptrace cont", e))?;
                        continue;
                    }
                    r.rip = addr;
                    ptrace::setregs(pid, r).map_err(|e| errno(pid, "setregs", e))?;
                    return poke_byte(pid, addr, (word & 0xff) as u8);
                }
                WaitStatus::Stopped(_, Signal::SIGSTOP | Signal::SIGCONT)
                | WaitStatus::PtraceEvent(..)
                    if skip_stops =>
                {
                    ptrace::cont(pid, None).map_err(|e| errno(pid, "ptrace cont", e))?;
                }
                WaitStatus::Stopped(_, sig) => {
                    ptrace::cont(pid, sig).map_err(|e| errno(pid, "ptrace cont", e))?;
                }
                WaitStatus::Exited(_, c) => {
                    self.proc()?.state = ProcState::Exited(c);
                    return Err(state(format!("the program exited with {c} before main"))
                        .with_pid(raw(pid)));
                }
                WaitStatus::Signaled(_, s, _) => {
                    self.proc()?.state = ProcState::Signaled(s.to_string());
                    return Err(state(format!("the program was killed by {s} before main"))
                        .with_pid(raw(pid)));
                }
                _ => {}
            }
        }
    }
}
