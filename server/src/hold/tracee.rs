//! The traced launcher of [`super`]: its threads (each one traced, new ones taken in),
//! its memory, the breakpoints on its entry point and on `MPIR_Breakpoint`, and the
//! release that detaches every thread. Only the tracer thread of a held job uses it.

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::time::Duration;

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::{Ending, HoldError, SlurmStep, Streams};
use crate::mpir::{Memory, MpirError, find_symbols};

/// `MPIR_debug_state` once the launcher has spawned its job.
const MPIR_DEBUG_SPAWNED: i32 = 1;
/// `MPIR_debug_state` when the launcher gives its job up.
const MPIR_DEBUG_ABORTING: i32 = 2;
/// The x86-64 breakpoint instruction.
const INT3: u8 = 0xcc;
/// The auxiliary vector entry holding the executable's entry point.
const AT_ENTRY: u64 = 9;
/// How long the tracer sleeps when no thread of the launcher has anything to report.
const POLL: Duration = Duration::from_millis(2);

/// Where the launcher's MPIR interface is, once it is stopped in `MPIR_Breakpoint`.
pub(super) struct Spawned {
    pub(super) breakpoint: u64,
    /// The byte the `int3` replaced.
    saved: u8,
    pub(super) table: u64,
    pub(super) size: u64,
    pub(super) state: u64,
}

/// What a thread of the launcher reported.
pub(super) enum Stop {
    /// A SIGTRAP (a breakpoint when `pc - 1` is one): the thread stays stopped.
    Trap { tid: Pid, pc: u64 },
    /// The launcher exec'd another program (its breakpoints are gone).
    Exec,
    /// The launcher (its main thread) ended.
    Ended(Ending),
}

/// A thread of the launcher, as the tracer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Thread {
    /// Running (or in a stop not yet reported).
    Running,
    /// Just created: its first stop, a SIGSTOP, is still to come.
    Starting,
    /// Sent a SIGSTOP to stop it for the detach.
    Stopping,
    /// In a ptrace stop, left there.
    Stopped,
}

/// The traced launcher: its threads and its memory.
pub(super) struct Launcher {
    pid: Pid,
    program: String,
    /// Its memory, opened at each exec stop (an exec replaces it).
    mem: Option<Memory>,
    threads: BTreeMap<Pid, Thread>,
    /// Stopping every thread for the detach: a SIGSTOP ends `Starting` and `Stopping`.
    detaching: bool,
}

impl Launcher {
    /// Forks and execs the launcher, traced from its exec, where it is left stopped.
    pub(super) fn start(
        argv: &[String],
        env: &[(String, String)],
        streams: Streams,
    ) -> Result<(Self, Child), HoldError> {
        let program = argv[0].clone();
        let mut cmd = Command::new(&program);
        cmd.args(&argv[1..]).envs(env.iter().cloned());
        if streams.capture {
            cmd.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
        }
        if let Some(fd) = streams.stderr {
            cmd.stderr(fd);
        }
        if streams.no_input {
            cmd.stdin(std::process::Stdio::null());
        }
        // SAFETY: ptrace(PTRACE_TRACEME) is a system call, async-signal-safe.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| ptrace::traceme().map_err(std::io::Error::from));
        }
        let child = cmd.spawn().map_err(|source| HoldError::Spawn {
            program: program.clone(),
            source,
        })?;
        let pid = Pid::from_raw(child.id() as i32);
        let mut l = Self {
            pid,
            program,
            mem: None,
            threads: BTreeMap::from([(pid, Thread::Stopped)]),
            detaching: false,
        };
        match waitpid(pid, Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::Exited(_, c)) => {
                return Err(l.ended(Ending::Exited(c), "before its job was spawned"));
            }
            Ok(WaitStatus::Signaled(_, s, _)) => {
                return Err(l.ended(Ending::Killed(s), "before its job was spawned"));
            }
            Ok(_) => {}
            Err(errno) => {
                let e = l.trace_error(pid, "waitpid", errno);
                l.kill();
                return Err(e);
            }
        }
        let options = ptrace::Options::PTRACE_O_TRACECLONE | ptrace::Options::PTRACE_O_TRACEEXEC;
        if let Err(errno) = ptrace::setoptions(pid, options) {
            let e = l.trace_error(pid, "ptrace setoptions", errno);
            l.kill();
            return Err(e);
        }
        Ok((l, child))
    }

    /// The launcher's memory (its current image's, opened at its last exec).
    pub(super) fn mem(&self) -> &Memory {
        self.mem
            .as_ref()
            .expect("the memory is open from the exec stop on")
    }

    /// From the exec stop: runs the launcher to its entry point, arms the MPIR interface
    /// and runs it into `MPIR_Breakpoint` with its job spawned, where it stays.
    pub(super) fn hold(&mut self) -> Result<Spawned, HoldError> {
        'image: loop {
            let tid = self.run_to_entry()?;
            let at = self.arm()?;
            self.resume(tid, None)?;
            loop {
                match self.next_stop()? {
                    Stop::Trap { tid, pc } if pc == at.breakpoint + 1 => {
                        let state = self.mem().i32_at(at.state, "MPIR_debug_state")?;
                        if state == MPIR_DEBUG_SPAWNED {
                            self.park(tid);
                            return Ok(at);
                        }
                        if state == MPIR_DEBUG_ABORTING {
                            return Err(HoldError::Aborting {
                                pid: self.pid.as_raw() as u32,
                                program: self.program.clone(),
                                state,
                            });
                        }
                        // Another report (MPIR_NULL): on to the next one.
                        self.step_over(tid, &at)?;
                    }
                    Stop::Trap { tid, .. } => self.resume(tid, Some(Signal::SIGTRAP))?,
                    Stop::Exec => continue 'image,
                    Stop::Ended(e) => return Err(self.ended(e, "before its job was spawned")),
                }
            }
        }
    }

    /// With the launcher stopped at an exec: runs it to its entry point (its libraries
    /// mapped, their constructors run) and leaves the main thread stopped there.
    fn run_to_entry(&mut self) -> Result<Pid, HoldError> {
        self.mem = Some(Memory::open_writable(self.pid.as_raw() as u32)?);
        let entry = self.entry()?;
        let saved = self.insert(entry, "the entry point")?;
        self.resume(self.pid, None)?;
        loop {
            match self.next_stop()? {
                Stop::Trap { tid, pc } if pc == entry + 1 => {
                    self.mem().write(entry, &[saved], "the entry point")?;
                    self.set_pc(tid, entry)?;
                    self.threads.insert(tid, Thread::Stopped);
                    return Ok(tid);
                }
                Stop::Trap { tid, .. } => self.resume(tid, Some(Signal::SIGTRAP))?,
                // A new image: its own entry point.
                Stop::Exec => return self.run_to_entry(),
                Stop::Ended(e) => return Err(self.ended(e, "before its job was spawned")),
            }
        }
    }

    /// Finds the MPIR symbols, sets `MPIR_being_debugged` and breaks on `MPIR_Breakpoint`.
    fn arm(&mut self) -> Result<Spawned, HoldError> {
        const NAMES: [&str; 5] = [
            "MPIR_being_debugged",
            "MPIR_Breakpoint",
            "MPIR_debug_state",
            "MPIR_proctable",
            "MPIR_proctable_size",
        ];
        let pid = self.pid.as_raw() as u32;
        let found = find_symbols(pid, &NAMES);
        let at = |name: &'static str| {
            found.get(name).copied().ok_or_else(|| HoldError::NoMpir {
                program: std::fs::read_link(format!("/proc/{pid}/exe"))
                    .map_or_else(|_| self.program.clone(), |p| p.display().to_string()),
                missing: name,
            })
        };
        let flag = at(NAMES[0])?;
        let mut spawned = Spawned {
            breakpoint: at(NAMES[1])?,
            saved: 0,
            state: at(NAMES[2])?,
            table: at(NAMES[3])?,
            size: at(NAMES[4])?,
        };
        self.mem()
            .write(flag, &1i32.to_le_bytes(), "MPIR_being_debugged")?;
        spawned.saved = self.insert(spawned.breakpoint, "MPIR_Breakpoint")?;
        Ok(spawned)
    }

    /// Runs thread `tid`, stopped at `MPIR_Breakpoint`'s `int3`, through the instruction
    /// the `int3` replaced, and puts the `int3` back.
    fn step_over(&mut self, tid: Pid, at: &Spawned) -> Result<(), HoldError> {
        self.mem()
            .write(at.breakpoint, &[at.saved], "MPIR_Breakpoint")?;
        self.set_pc(tid, at.breakpoint)?;
        ptrace::step(tid, None).map_err(|e| self.trace_error(tid, "ptrace singlestep", e))?;
        loop {
            match waitpid(tid, Some(WaitPidFlag::__WALL)) {
                Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => break,
                Ok(WaitStatus::Stopped(_, sig)) => {
                    ptrace::step(tid, sig)
                        .map_err(|e| self.trace_error(tid, "ptrace singlestep", e))?;
                }
                Ok(WaitStatus::Exited(_, c)) if tid == self.pid => {
                    return Err(self.ended(Ending::Exited(c), "before its job was spawned"));
                }
                Ok(WaitStatus::Signaled(_, s, _)) if tid == self.pid => {
                    return Err(self.ended(Ending::Killed(s), "before its job was spawned"));
                }
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => {
                    self.threads.remove(&tid);
                    break;
                }
                Ok(_) => {
                    ptrace::step(tid, None)
                        .map_err(|e| self.trace_error(tid, "ptrace singlestep", e))?;
                }
                Err(errno) => return Err(self.trace_error(tid, "waitpid", errno)),
            }
        }
        self.insert(at.breakpoint, "MPIR_Breakpoint")?;
        if self.threads.contains_key(&tid) {
            self.resume(tid, None)?;
        }
        Ok(())
    }

    /// The executable's entry point, from /proc/PID/auxv.
    fn entry(&self) -> Result<u64, HoldError> {
        let pid = self.pid.as_raw() as u32;
        let auxv = std::fs::read(format!("/proc/{pid}/auxv")).map_err(|e| MpirError::Memory {
            pid,
            what: "/proc/PID/auxv",
            addr: 0,
            why: e.to_string(),
            source: Some(e),
        })?;
        auxv.chunks_exact(16)
            .map(|kv| {
                let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
                (word(&kv[..8]), word(&kv[8..]))
            })
            .find(|&(k, _)| k == AT_ENTRY)
            .map(|(_, v)| v)
            .ok_or_else(|| {
                MpirError::Memory {
                    pid,
                    what: "AT_ENTRY in /proc/PID/auxv",
                    addr: 0,
                    why: "not there".into(),
                    source: None,
                }
                .into()
            })
    }

    /// Writes an `int3` at `addr`; returns the byte it replaced.
    fn insert(&self, addr: u64, what: &'static str) -> Result<u8, HoldError> {
        let mut saved = [0u8];
        self.mem().read(addr, &mut saved, what)?;
        self.mem().write(addr, &[INT3], what)?;
        Ok(saved[0])
    }

    fn set_pc(&self, tid: Pid, pc: u64) -> Result<(), HoldError> {
        let mut regs = ptrace::getregs(tid).map_err(|e| self.trace_error(tid, "getregs", e))?;
        regs.rip = pc;
        ptrace::setregs(tid, regs).map_err(|e| self.trace_error(tid, "setregs", e))
    }

    /// srun's job and step ids (`totalview_jobid`, `totalview_stepid`: strings it sets
    /// before `MPIR_Breakpoint`); `None` for another launcher.
    pub(super) fn slurm_step(&self) -> Option<SlurmStep> {
        let found = find_symbols(
            self.pid.as_raw() as u32,
            &["totalview_jobid", "totalview_stepid"],
        );
        let read = |name: &'static str| {
            let at = self.mem().u64_at(*found.get(name)?, name).ok()?;
            let s = self.mem().c_string(at, name).ok()?;
            (!s.is_empty()).then_some(s)
        };
        Some(SlurmStep {
            job_id: read("totalview_jobid")?,
            step_id: read("totalview_stepid")?,
        })
    }

    /// Leaves thread `tid` in its stop (held) until the release.
    pub(super) fn park(&mut self, tid: Pid) {
        self.threads.insert(tid, Thread::Stopped);
    }

    /// Resumes thread `tid` from its ptrace stop, delivering `sig`.
    pub(super) fn resume(&mut self, tid: Pid, sig: Option<Signal>) -> Result<(), HoldError> {
        if let Some(t) = self.threads.get_mut(&tid)
            && *t == Thread::Stopped
        {
            *t = Thread::Running;
        }
        match ptrace::cont(tid, sig) {
            Ok(()) => Ok(()),
            // Killed meanwhile: its exit is still to be reported.
            Err(nix::Error::ESRCH) => Ok(()),
            Err(e) => Err(self.trace_error(tid, "ptrace cont", e)),
        }
    }

    /// The next stop worth a decision, the others handled (see [`Launcher::poll`]).
    fn next_stop(&mut self) -> Result<Stop, HoldError> {
        loop {
            if let Some(stop) = self.poll()? {
                return Ok(stop);
            }
            std::thread::sleep(POLL);
        }
    }

    /// Looks once at every thread for a stop or an exit, without blocking. New threads
    /// are taken in, signals passed on; a SIGTRAP, an exec or the launcher's end is
    /// returned. (Only this launcher's threads are waited for, never `-1`: the process
    /// may have other children.)
    pub(super) fn poll(&mut self) -> Result<Option<Stop>, HoldError> {
        // Stopped threads too: one killed in its stop reports its end, and the main
        // thread's end is only reported once every other thread's is reaped.
        let tids: Vec<Pid> = self.threads.keys().copied().collect();
        for tid in tids {
            let status = match waitpid(tid, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
                Ok(s) => s,
                Err(nix::Error::ECHILD) if tid != self.pid => {
                    self.threads.remove(&tid);
                    continue;
                }
                Err(errno) => return Err(self.trace_error(tid, "waitpid", errno)),
            };
            if let Some(stop) = self.on_status(tid, status)? {
                return Ok(Some(stop));
            }
        }
        Ok(None)
    }

    /// Handles one wait status of thread `tid`.
    fn on_status(&mut self, tid: Pid, status: WaitStatus) -> Result<Option<Stop>, HoldError> {
        use nix::libc::{PTRACE_EVENT_CLONE, PTRACE_EVENT_EXEC};
        let state = self.threads.get(&tid).copied();
        match status {
            WaitStatus::StillAlive | WaitStatus::Continued(_) => {}
            WaitStatus::PtraceEvent(_, _, PTRACE_EVENT_CLONE) => {
                let new =
                    ptrace::getevent(tid).map_err(|e| self.trace_error(tid, "getevent", e))?;
                self.threads
                    .insert(Pid::from_raw(new as i32), Thread::Starting);
                self.resume(tid, None)?;
            }
            WaitStatus::PtraceEvent(_, _, PTRACE_EVENT_EXEC) => {
                // The other threads are gone with the old image.
                self.threads = BTreeMap::from([(self.pid, Thread::Stopped)]);
                return Ok(Some(Stop::Exec));
            }
            WaitStatus::PtraceEvent(..) | WaitStatus::PtraceSyscall(_) => self.resume(tid, None)?,
            WaitStatus::Stopped(_, Signal::SIGSTOP)
                if matches!(state, Some(Thread::Starting | Thread::Stopping)) =>
            {
                if self.detaching {
                    self.threads.insert(tid, Thread::Stopped);
                } else {
                    self.threads.insert(tid, Thread::Running);
                    self.resume(tid, None)?;
                }
            }
            WaitStatus::Stopped(_, Signal::SIGTRAP) => {
                let pc = ptrace::getregs(tid)
                    .map_err(|e| self.trace_error(tid, "getregs", e))?
                    .rip;
                return Ok(Some(Stop::Trap { tid, pc }));
            }
            // A job-control stop of the whole launcher (not a signal to deliver: no
            // siginfo) is not kept while its job is held.
            WaitStatus::Stopped(_, sig) if ptrace::getsiginfo(tid) == Err(nix::Error::EINVAL) => {
                let _ = sig;
                self.resume(tid, None)?;
            }
            WaitStatus::Stopped(_, sig) => self.resume(tid, Some(sig))?,
            WaitStatus::Exited(_, c) => return Ok(self.gone(tid, Ending::Exited(c))),
            WaitStatus::Signaled(_, s, _) => return Ok(self.gone(tid, Ending::Killed(s))),
        }
        Ok(None)
    }

    fn gone(&mut self, tid: Pid, ending: Ending) -> Option<Stop> {
        self.threads.remove(&tid);
        (tid == self.pid).then_some(Stop::Ended(ending))
    }

    /// Lets the launcher go on from `MPIR_Breakpoint`, untraced: the `int3` out, every
    /// thread stopped (a thread-directed SIGSTOP, swallowed) and detached.
    pub(super) fn release(mut self, at: &Spawned) -> Result<(), HoldError> {
        match self.let_go(at) {
            Err(e @ HoldError::Ended { .. }) => Err(e),
            // Not left in a breakpoint it cannot get out of: killed, and, when it was
            // dying anyway, said so.
            Err(e) => match self.kill() {
                Some(ending) => Err(self.ended(ending, "while its job was held")),
                None => Err(e),
            },
            Ok(()) => Ok(()),
        }
    }

    /// [`Launcher::release`]'s work.
    fn let_go(&mut self, at: &Spawned) -> Result<(), HoldError> {
        self.mem()
            .write(at.breakpoint, &[at.saved], "MPIR_Breakpoint")?;
        let parked: Vec<Pid> = self
            .threads
            .iter()
            .filter(|&(_, &t)| t == Thread::Stopped)
            .map(|(&tid, _)| tid)
            .collect();
        for tid in parked {
            if ptrace::getregs(tid).is_ok_and(|r| r.rip == at.breakpoint + 1) {
                self.set_pc(tid, at.breakpoint)?;
            }
        }
        self.detaching = true;
        for (&tid, state) in self.threads.iter_mut() {
            if *state == Thread::Running {
                *state = Thread::Stopping;
                tgkill_stop(self.pid, tid);
            }
        }
        while self
            .threads
            .values()
            .any(|t| matches!(t, Thread::Starting | Thread::Stopping))
        {
            match self.poll()? {
                None => std::thread::sleep(POLL),
                // A thread that reached the breakpoint before it was taken out.
                Some(Stop::Trap { tid, pc }) if pc == at.breakpoint + 1 => {
                    self.set_pc(tid, at.breakpoint)?;
                    self.resume_stopping(tid, None)?;
                }
                Some(Stop::Trap { tid, .. }) => self.resume_stopping(tid, Some(Signal::SIGTRAP))?,
                Some(Stop::Exec) => {}
                Some(Stop::Ended(e)) => return Err(self.ended(e, "while its job was held")),
            }
        }
        for &tid in self.threads.keys() {
            match ptrace::detach(tid, None) {
                Ok(()) | Err(nix::Error::ESRCH) => {}
                Err(e) => return Err(self.trace_error(tid, "ptrace detach", e)),
            }
        }
        Ok(())
    }

    /// [`Launcher::resume`] for a thread sent a SIGSTOP, which stays on its way.
    fn resume_stopping(&mut self, tid: Pid, sig: Option<Signal>) -> Result<(), HoldError> {
        let state = self.threads.get(&tid).copied();
        self.resume(tid, sig)?;
        if let Some(s) = state {
            self.threads.insert(tid, s);
        }
        Ok(())
    }

    /// Kills the launcher (on an error before it was handed out, or one that would leave
    /// it stopped in a breakpoint) and reaps every thread, the main thread last (its end
    /// is reported once the others are reaped; /proc/PID/task names threads not seen
    /// yet). Returns how the main thread ended.
    pub(super) fn kill(&mut self) -> Option<Ending> {
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        self.mem = None;
        let flags = Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG);
        loop {
            let mut tids: Vec<Pid> = self.threads.keys().copied().collect();
            if let Ok(dir) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) {
                tids.extend(
                    dir.flatten()
                        .filter_map(|e| e.file_name().to_str()?.parse().ok().map(Pid::from_raw)),
                );
            }
            for tid in tids.into_iter().filter(|&t| t != self.pid) {
                if matches!(
                    waitpid(tid, flags),
                    Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_)
                ) {
                    self.threads.remove(&tid);
                }
            }
            match waitpid(self.pid, flags) {
                Ok(WaitStatus::Exited(_, c)) => return Some(Ending::Exited(c)),
                Ok(WaitStatus::Signaled(_, s, _)) => return Some(Ending::Killed(s)),
                Err(_) => return None,
                Ok(_) => std::thread::sleep(POLL),
            }
        }
    }

    pub(super) fn ended(&self, ending: Ending, when: &'static str) -> HoldError {
        HoldError::Ended {
            pid: self.pid.as_raw() as u32,
            program: self.program.clone(),
            ending,
            when,
        }
    }

    fn trace_error(&self, tid: Pid, op: &'static str, errno: nix::Error) -> HoldError {
        HoldError::Trace {
            pid: tid.as_raw() as u32,
            op,
            errno,
        }
    }
}

/// Sends SIGSTOP to thread `tid` of process `pid` alone (a thread gone meanwhile reports
/// its exit instead).
fn tgkill_stop(pid: Pid, tid: Pid) {
    // SAFETY: tgkill takes integers only.
    unsafe {
        nix::libc::syscall(
            nix::libc::SYS_tgkill,
            pid.as_raw(),
            tid.as_raw(),
            nix::libc::SIGSTOP,
        );
    }
}
