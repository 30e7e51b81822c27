//! Process control: starting a program or attaching to a process, stopping, continuing,
//! killing and letting it go, and its one-line status. A process is ptrace-attached only
//! while something needs it (breakpoints, registers); a plain `stop` is a SIGSTOP.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use nix::sys::ptrace;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::breakpoints::poke_byte;
use super::detach::{self, Leave};
use super::stdio::{self, IoMode};
use super::{MonResult, Monitor, Proc, ProcState, errno, idle, raw, session, state, sys, threads};
use crate::error::{Error, ErrorKind};

impl Monitor {
    /// Starts `program` with `args`, its stdio handled as `mode` says.
    pub fn start(&mut self, program: &str, args: &[String], mode: IoMode) -> MonResult<u32> {
        self.launch(program, args, mode, false)
    }

    /// Starts `program` like [`Monitor::start`], and leaves it stopped at the start of
    /// `main` (in a SIGSTOP stop, as `stop` leaves a process).
    pub fn start_at_main(
        &mut self,
        program: &str,
        args: &[String],
        mode: IoMode,
    ) -> MonResult<u32> {
        self.launch(program, args, mode, true)
    }

    /// Starts the program in a session of its own, its stdio wired as `mode` says; with
    /// `at_main`, runs it to `main` and leaves it stopped there.
    fn launch(
        &mut self,
        program: &str,
        args: &[String],
        mode: IoMode,
        at_main: bool,
    ) -> MonResult<u32> {
        if let Some(p) = &self.proc
            && matches!(
                p.state,
                ProcState::Running | ProcState::Stopped | ProcState::AtBreakpoint(_)
            )
        {
            return Err(state(format!("process {} is still alive", p.pid)));
        }
        // No stop of this new process has been recorded yet.
        self.run_states.clear();
        let mut cmd = self.command(program, args);
        let master = stdio::wire(&mut cmd, mode)?;
        own_session(&mut cmd, at_main);
        let mut child = cmd
            .spawn()
            .map_err(|e| sys(&format!("cannot start {program}"), e))?;
        // The parent's copies of the pty slave went with `cmd`.
        drop(cmd);
        let pid = Pid::from_raw(child.id() as i32);
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .unwrap_or_else(|_| PathBuf::from(program));
        let streams = stdio::read(&mut child, mode, master, (self.stdio.clone(), self.rank))?;
        let taps = streams.taps;
        self.idle = (!taps.is_empty()).then(|| idle::Watch::new(pid, taps));
        self.proc = Some(Proc {
            pid,
            exe,
            child: Some(child),
            traced: false,
            breakpoints: HashMap::new(),
            state: ProcState::Running,
            stdin: streams.stdin,
            stdin_is_pty: streams.stdin_is_pty,
            readers: streams.readers,
            gdb: None,
        });
        if at_main && let Err(e) = self.run_to_main() {
            self.kill_quietly();
            return Err(e);
        }
        Ok(pid.as_raw() as u32)
    }

    /// The command that starts `program` with `args` for this rank, with sdm's variables
    /// and the launcher's rank variables set for it (see [`crate::rankenv`]).
    fn command(&self, program: &str, args: &[String]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args).env("SDM_RANK", self.rank.to_string());
        // Only sdm's own names: an MPI library reading OMPI_COMM_WORLD_RANK or PMI_RANK
        // would take them for its launcher's and look for a PMI server there is not.
        if let Some(local) = self.local_rank {
            cmd.env("SDM_LOCAL_RANK", local.to_string());
        }
        if let Some(size) = self.size {
            cmd.env("SDM_SIZE", size.to_string());
        }
        let own = self.own_task;
        crate::rankenv::set(&mut cmd, std::env::vars(), self.rank, self.local_rank, own);
        if let Some(path) = self.counters.as_ref().and_then(|c| c.path()) {
            cmd.env(sdm_deploy::COUNTERS_ENV, path);
        }
        cmd
    }

    /// Stops the process (SIGSTOP, or a ptrace interrupt while breakpoints are set).
    pub fn stop(&mut self) -> MonResult<()> {
        // What each thread was doing when stopped (all `T` when it was stopped already).
        self.run_states = self.proc().map(|p| threads::task_states(p.pid))?;
        if self.symbolic() {
            return self.stop_symbolic();
        }
        let p = self.proc()?;
        match p.state {
            ProcState::Running => {}
            ProcState::Stopped | ProcState::AtBreakpoint(_) => return Ok(()),
            ref s => return Err(state(format!("process {} has ended ({s:?})", p.pid))),
        }
        if p.traced {
            ptrace::interrupt(p.pid).map_err(|e| errno(p.pid, "ptrace interrupt", e))?;
            wait_interrupted(p)?;
        } else {
            kill(p.pid, Signal::SIGSTOP).map_err(|e| errno(p.pid, "SIGSTOP", e))?;
            wait_stopped(p, WaitPidFlag::WUNTRACED, false)?;
        }
        if p.state == ProcState::Running {
            p.state = ProcState::Stopped;
        }
        Ok(())
    }

    /// Continues the process (stepping over a breakpoint it stopped at).
    pub fn cont(&mut self) -> MonResult<()> {
        self.run_states.clear();
        if self.symbolic() {
            return self.cont_symbolic();
        }
        let p = self.proc()?;
        match p.state.clone() {
            ProcState::Running => Ok(()),
            ProcState::AtBreakpoint(addr) => {
                let (orig, _) = p.breakpoints[&addr];
                poke_byte(p.pid, addr, orig)?;
                ptrace::step(p.pid, None).map_err(|e| errno(p.pid, "ptrace step", e))?;
                wait_trace_stop(p)?;
                poke_byte(p.pid, addr, 0xcc)?;
                ptrace::cont(p.pid, None).map_err(|e| errno(p.pid, "ptrace cont", e))?;
                p.state = ProcState::Running;
                Ok(())
            }
            ProcState::Stopped if p.traced => {
                ptrace::cont(p.pid, None).map_err(|e| errno(p.pid, "ptrace cont", e))?;
                p.state = ProcState::Running;
                // The other threads of a process `stop` left in a group-stop.
                threads::end_group_stop(p.pid)?;
                Ok(())
            }
            ProcState::Stopped => {
                kill(p.pid, Signal::SIGCONT).map_err(|e| errno(p.pid, "SIGCONT", e))?;
                p.state = ProcState::Running;
                Ok(())
            }
            s => Err(state(format!("process {} has ended ({s:?})", p.pid))),
        }
    }

    /// Kills the process and reaps it: a program started here with every process of its
    /// session and their descendants (SIGTERM, then SIGKILL after a 2 s grace).
    pub fn kill(&mut self) -> MonResult<()> {
        self.drop_symbolic();
        self.run_states.clear();
        let p = self.proc()?;
        if matches!(p.state, ProcState::Exited(_) | ProcState::Signaled(_)) {
            return Ok(());
        }
        if p.child.is_some() && p.traced {
            // Untraced first (breakpoints out), so SIGTERM reaches it as it reaches
            // the others, not as a ptrace stop.
            self.detach(detach::Leave::Running);
        }
        let p = self.proc()?;
        match p.state.clone() {
            // It ended meanwhile (reaped while being untraced).
            ProcState::Exited(c) => {
                self.report_exit(format!("process_terminated(\"exited\",{c})"));
                return Ok(());
            }
            ProcState::Signaled(s) => {
                self.report_exit(format!("process_terminated(\"killed\",\"{s}\")"));
                return Ok(());
            }
            _ => {}
        }
        // A program started here ends with its whole session, as srun ends a step; a
        // process attached to is killed alone.
        let end = match p.child.as_mut() {
            Some(c) => session::end(c, p.traced, session::GRACE),
            None => {
                let _ = kill(p.pid, Signal::SIGKILL);
                let _ = waitpid(p.pid, Some(WaitPidFlag::__WALL));
                session::End::Signaled(Signal::SIGKILL)
            }
        };
        let event = match end {
            session::End::Exited(c) => {
                p.state = ProcState::Exited(c);
                format!("process_terminated(\"exited\",{c})")
            }
            session::End::Signaled(s) => {
                p.state = ProcState::Signaled(s.to_string());
                format!("process_terminated(\"killed\",\"{s}\")")
            }
        };
        self.report_exit(event);
        Ok(())
    }

    /// At shutdown: kills the process if this server started it; a process it attached to
    /// is detached (breakpoints removed) and left running.
    pub fn kill_quietly(&mut self) {
        match &self.proc {
            Some(p) if p.child.is_none() => {
                self.detach(Leave::Running);
                // Let go for good: a second call (the thread's end) must not touch it.
                self.proc = None;
            }
            Some(_) => drop(self.kill()),
            None => {}
        }
    }

    /// Attaches to a running process this server did not start (ptrace seize, so it may
    /// be stopped, inspected and given breakpoints); it is detached, not killed, when the
    /// server ends.
    pub fn attach(&mut self, pid: u32) -> MonResult<u32> {
        if let Some(p) = &self.proc
            && matches!(
                p.state,
                ProcState::Running | ProcState::Stopped | ProcState::AtBreakpoint(_)
            )
        {
            return Err(state(format!("already controlling process {}", p.pid)));
        }
        let raw = i32::try_from(pid)
            .map_err(|_| Error::new(ErrorKind::BadInput, format!("{pid} is not a process id")))?;
        let pid = Pid::from_raw(raw);
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map_err(|e| errno(pid, &format!("no process {pid} to attach to"), e))?;
        ptrace::seize(pid, ptrace::Options::empty()).map_err(|e| errno(pid, "ptrace seize", e))?;
        self.idle = None;
        // No stop of this process has been recorded yet.
        self.run_states.clear();
        self.proc = Some(Proc {
            pid,
            exe,
            child: None,
            traced: true,
            breakpoints: HashMap::new(),
            state: ProcState::Running,
            stdin: None,
            stdin_is_pty: false,
            readers: Vec::new(),
            gdb: None,
        });
        Ok(pid.as_raw() as u32)
    }

    /// Lets the process this monitor attached to go, for good: breakpoints removed, detached,
    /// left running; the monitor then controls no process. Returns its pid. A process this
    /// monitor started cannot be detached (it would be left without its server); if gdb
    /// holds it (symbolic commands), gdb lets it go instead and the native monitor has it
    /// back, stopped. `leave` says whether an attached process that is stopped stays so.
    pub fn detach_process(&mut self, leave: Leave) -> MonResult<u32> {
        let p = self.proc()?;
        let pid = raw(p.pid);
        // A process started here and held by gdb goes back to the native monitor.
        if p.child.is_some() && self.release()? {
            return Ok(pid);
        }
        let p = self.proc()?;
        if p.child.is_some() {
            return Err(state(format!(
                "process {} was started by this server, not attached to: kill it instead",
                p.pid
            ))
            .with_pid(raw(p.pid)));
        }
        let pid = p.pid.as_raw() as u32;
        self.detach(leave);
        self.proc = None;
        Ok(pid)
    }

    /// One-line status: `running`, `stopped at 0x… in func`, `exited 0`, …
    pub fn status(&mut self) -> MonResult<String> {
        if self.symbolic() {
            return self.status_symbolic();
        }
        let state = self.proc()?.state.clone();
        Ok(match state {
            ProcState::Running => "running".into(),
            ProcState::Stopped => match self.backtrace() {
                // No absolute address: it differs per process (ASLR), and identical
                // statuses should merge across ranks.
                Ok(frames) if !frames.is_empty() => match &frames[0].location {
                    Some(loc) => format!("stopped in {} at {loc}", frames[0].function),
                    None => format!("stopped in {}", frames[0].function),
                },
                _ => "stopped".into(),
            },
            ProcState::AtBreakpoint(addr) => {
                let name = self.proc()?.breakpoints[&addr].1.clone();
                format!("stopped at breakpoint in {name}")
            }
            ProcState::Exited(c) => format!("exited {c}"),
            ProcState::Signaled(s) => format!("killed by {s}"),
        })
    }
}

/// Has the child start a session of its own (so the pty can be its terminal) and die with
/// this (monitor) thread, so a server killed with SIGKILL leaves no application process
/// behind; with `at_main`, it is traced by this thread from its exec on (see `run_to_main`).
fn own_session(cmd: &mut Command, at_main: bool) {
    // SAFETY: setsid, prctl and ptrace(TRACEME) are async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            let _ = nix::unistd::setsid();
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            if at_main {
                ptrace::traceme().map_err(std::io::Error::from)?;
            }
            Ok(())
        });
    }
}

/// Waits until the traced process reports a ptrace stop.
pub(super) fn wait_trace_stop(p: &mut Proc) -> MonResult<()> {
    wait_stopped(p, WaitPidFlag::__WALL, false)
}

/// Waits for the stop a `ptrace::interrupt` asked for. A signal on its way to the process
/// first (its signal-delivery stop) is passed on, not taken for the stop (continuing from
/// it would discard the signal); the interrupt stops the process right after.
pub(super) fn wait_interrupted(p: &mut Proc) -> MonResult<()> {
    wait_stopped(p, WaitPidFlag::__WALL, true)
}

/// Waits (`waitpid` with `flags`) until the process reports a stop; an exit or a kill on
/// the way is recorded in its state and returned as the error. With `pass_signals`, a
/// traced process's signal-delivery stops (other than SIGSTOP and SIGTRAP) are continued
/// with their signal instead.
pub(super) fn wait_stopped(p: &mut Proc, flags: WaitPidFlag, pass_signals: bool) -> MonResult<()> {
    loop {
        match waitpid(p.pid, Some(flags)).map_err(|e| errno(p.pid, "waitpid", e))? {
            WaitStatus::Stopped(pid, sig)
                if pass_signals && sig != Signal::SIGSTOP && sig != Signal::SIGTRAP =>
            {
                ptrace::cont(pid, sig).map_err(|e| errno(pid, "ptrace cont", e))?;
            }
            WaitStatus::Stopped(..) | WaitStatus::PtraceEvent(..) => return Ok(()),
            WaitStatus::Exited(_, c) => {
                p.state = ProcState::Exited(c);
                return Err(state(format!("process exited with {c}")).with_pid(raw(p.pid)));
            }
            WaitStatus::Signaled(_, s, _) => {
                p.state = ProcState::Signaled(s.to_string());
                return Err(state(format!("process killed by {s}")).with_pid(raw(p.pid)));
            }
            _ => {}
        }
    }
}
