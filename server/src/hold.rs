//! Starting a parallel job held for a tool, the MPIR launch mode of TotalView, STAT and
//! LaunchMON: the launcher (`srun`, Open MPI's `mpirun`) is started under ptrace, told it
//! is being debugged (`MPIR_being_debugged = 1`), and stopped in `MPIR_Breakpoint` once its
//! job is spawned (`MPIR_debug_state == MPIR_DEBUG_SPAWNED`). Its process table
//! ([`ProcTable`], read as [`crate::mpir`] reads it) then names every task while the tasks
//! are still held; [`HeldJob::release`] lets the launcher, and with it the job, go on.
//!
//! How it runs: the launcher is forked with `PTRACE_TRACEME` and stops at its exec; a
//! breakpoint (`int3`) on its entry point (`AT_ENTRY` in /proc/PID/auxv) runs it until the
//! dynamic linker has mapped its libraries (the MPIR symbols are in `srun` itself and in
//! Open MPI's `libopen-rte.so`); there the flag is set and the breakpoint goes on
//! `MPIR_Breakpoint`. Every thread of the launcher is traced (`PTRACE_O_TRACECLONE`: `srun`
//! is multithreaded, and an untraced thread reaching the `int3` would die of SIGTRAP);
//! signals the launcher gets are passed on to it. Only the thread in `MPIR_Breakpoint`
//! waits while the job is held: the launcher's other threads go on serving their job. One
//! tracer thread per held job does all the ptrace calls (the kernel ties a tracee to the
//! thread that traces it), so a [`HeldJob`] may be released or dropped from any thread.
//!
//! What holds the tasks, and what releases them:
//!
//! - Slurm (`srun`, 22.05 here): with `MPIR_being_debugged` set, srun launches the step
//!   for a parallel debugger; slurmstepd makes each task trace itself before its exec
//!   (`PTRACE_TRACEME`), and at the exec stop hands it over stopped by SIGSTOP and
//!   untraced: the task is in state `T`, `TracerPid` 0, before the dynamic linker has run
//!   one instruction of it, on every node. When srun goes on past `MPIR_Breakpoint` it
//!   asks every slurmstepd to wake its tasks (SIGCONT), skipping tasks a debugger traces
//!   by then: a tool that attached to the tasks meanwhile continues them itself.
//! - Open MPI 4.x (`mpirun`, ORTE): nothing holds the ranks before `main`. The ranks run
//!   their `main` into `MPI_Init`, which, told by mpirun that a debugger is there
//!   (`orte_in_parallel_debugger`), waits in `ompi_rte_wait_for_debugger` for the PMIx
//!   event "debugger release"; mpirun sends that event to all ranks when it returns from
//!   `MPIR_Breakpoint`. Held ranks sleep in MPI_Init (state `S`, untraced); code before
//!   `MPI_Init` has run. (`MPIR_debug_gate`, the other gate in `libmpi`, is only used by
//!   a singleton or a directly launched rank of ORTE's own.) mpirun prints a warning
//!   about the MPIR interface being deprecated unless `OMPI_MPIR_DO_NOT_WARN` is set.
//!
//! Releasing takes the breakpoint out, puts the waiting thread back at the start of
//! `MPIR_Breakpoint` and detaches from every thread of the launcher (each one first
//! stopped with a thread-directed SIGSTOP that is then swallowed): the launcher goes on
//! untraced. Dropping a [`HeldJob`] releases it too: a launcher is never left stopped or
//! traced. A launcher whose image has no `MPIR_being_debugged` or `MPIR_Breakpoint`
//! (a shell, a wrapper script: the launcher must be the launcher's binary itself) is
//! killed before it ran its first instruction, and the error says so
//! ([`HoldError::NoMpir`]), so the caller can start the job otherwise and attach to it.

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::mpir::{Memory, MpirError, ProcTable, find_symbols, read_table};

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

/// How a launcher ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It exited with this status.
    Exited(i32),
    /// A signal killed it.
    Killed(Signal),
}

impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited(c) => write!(f, "exited with status {c}"),
            Self::Killed(s) => write!(f, "was killed by {s}"),
        }
    }
}

/// Why a job could not be started held, or released.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    /// The command line is empty.
    #[error("no launcher command given")]
    NoCommand,
    /// The launcher (or the tracer thread) could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The launcher.
        program: String,
        /// The system error.
        source: std::io::Error,
    },
    /// The launcher has no MPIR interface to hold a job with; it was killed before it ran.
    #[error(
        "{program} has no MPIR interface (no {missing} in it or the libraries it loads): it \
         cannot hold a job for a tool; start the job and attach to it instead"
    )]
    NoMpir {
        /// The launcher's executable.
        program: String,
        /// The symbol not found.
        missing: &'static str,
    },
    /// The launcher ended before its job was spawned, or while it was held.
    #[error("launcher {pid} ({program}) {ending} {when}")]
    Ended {
        /// The launcher.
        pid: u32,
        /// Its executable.
        program: String,
        /// How it ended.
        ending: Ending,
        /// "before its job was spawned" or "while its job was held".
        when: &'static str,
    },
    /// The launcher reported its job aborting instead of spawned; it was killed.
    #[error(
        "launcher {pid} ({program}) stopped in MPIR_Breakpoint with MPIR_debug_state {state} \
         (not spawned: its job is aborting); it was killed"
    )]
    Aborting {
        /// The launcher.
        pid: u32,
        /// Its executable.
        program: String,
        /// `MPIR_debug_state`.
        state: i32,
    },
    /// A ptrace request failed.
    #[error("launcher {pid}: {op}: {errno}")]
    Trace {
        /// The process or thread.
        pid: u32,
        /// The request.
        op: &'static str,
        /// The system error.
        errno: nix::Error,
    },
    /// Reading the launcher's memory or its table failed.
    #[error(transparent)]
    Mpir(#[from] MpirError),
    /// The tracer thread ended without an answer (it panicked).
    #[error("the thread tracing launcher {program} ended unexpectedly")]
    TracerGone {
        /// The launcher.
        program: String,
    },
}

/// A job whose tasks are spawned and held, its launcher stopped in `MPIR_Breakpoint`.
/// [`HeldJob::release`] (or dropping it) lets them go on.
pub struct HeldJob {
    table: ProcTable,
    program: String,
    child: Option<Child>,
    release: Option<mpsc::Sender<()>>,
    tracer: Option<JoinHandle<Result<(), HoldError>>>,
}

impl std::fmt::Debug for HeldJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldJob")
            .field("program", &self.program)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl HeldJob {
    /// The job's tasks (rank, host, executable, pid), from the launcher's MPIR table.
    pub fn table(&self) -> &ProcTable {
        &self.table
    }

    /// The launcher's pid.
    pub fn launcher_pid(&self) -> u32 {
        self.table.launcher
    }

    /// Lets the launcher go on, untraced, and with it the job; returns the launcher's
    /// process to wait for.
    pub fn release(mut self) -> Result<Child, HoldError> {
        self.finish()?;
        Ok(self
            .child
            .take()
            .expect("the launcher's process until released"))
    }

    /// Tells the tracer thread to release the launcher and waits for it to have done so.
    fn finish(&mut self) -> Result<(), HoldError> {
        let Some(tracer) = self.tracer.take() else {
            return Ok(());
        };
        drop(self.release.take());
        tracer.join().unwrap_or_else(|_| {
            Err(HoldError::TracerGone {
                program: self.program.clone(),
            })
        })
    }
}

impl Drop for HeldJob {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Starts `argv` (a launcher and its arguments, e.g. `srun -n 4 prog`), with `env` added to
/// this process's environment, and returns once its job is spawned and held (see the
/// module documentation for what holds the tasks under each launcher).
pub fn launch_held(argv: &[String], env: &[(String, String)]) -> Result<HeldJob, HoldError> {
    let program = argv.first().ok_or(HoldError::NoCommand)?.clone();
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (argv, env) = (argv.to_vec(), env.to_vec());
    let tracer = std::thread::Builder::new()
        .name("sdm-hold".into())
        .spawn(move || trace(&argv, &env, &held_tx, &release_rx))
        .map_err(|source| HoldError::Spawn {
            program: program.clone(),
            source,
        })?;
    match held_rx.recv() {
        Ok(Ok((table, child))) => Ok(HeldJob {
            table,
            program,
            child: Some(child),
            release: Some(release_tx),
            tracer: Some(tracer),
        }),
        Ok(Err(e)) => {
            let _ = tracer.join();
            Err(e)
        }
        Err(_) => Err(match tracer.join() {
            Ok(Err(e)) => e,
            _ => HoldError::TracerGone { program },
        }),
    }
}

type Held = Result<(ProcTable, Child), HoldError>;

/// The tracer thread: starts the launcher, holds it, sends the table (or the error) and,
/// when `release` is dropped, lets it go.
fn trace(
    argv: &[String],
    env: &[(String, String)],
    held: &mpsc::Sender<Held>,
    release: &mpsc::Receiver<()>,
) -> Result<(), HoldError> {
    let (mut launcher, child) = match Launcher::start(argv, env) {
        Ok(l) => l,
        Err(e) => {
            let _ = held.send(Err(e));
            return Ok(());
        }
    };
    let at = match launcher.hold() {
        Ok(at) => at,
        Err(e) => {
            launcher.kill();
            let _ = held.send(Err(e));
            return Ok(());
        }
    };
    let table = match read_table(launcher.mem(), at.table, at.size, Some(at.state)) {
        Ok(t) => t,
        Err(e) => {
            launcher.kill();
            let _ = held.send(Err(e.into()));
            return Ok(());
        }
    };
    if held.send(Ok((table, child))).is_err() {
        return launcher.release(&at);
    }
    match serve(&mut launcher, &at, release) {
        Ok(()) => launcher.release(&at),
        Err(e @ HoldError::Ended { .. }) => Err(e),
        // Not left stopped at a breakpoint whatever went wrong.
        Err(e) => {
            let _ = launcher.release(&at);
            Err(e)
        }
    }
}

/// While the job is held: serves the launcher's other threads (new threads, signals)
/// until the caller lets go (`release` dropped).
fn serve(
    launcher: &mut Launcher,
    at: &Spawned,
    release: &mpsc::Receiver<()>,
) -> Result<(), HoldError> {
    loop {
        match release.recv_timeout(Duration::from_millis(10)) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return Ok(()),
        }
        while let Some(stop) = launcher.poll()? {
            match stop {
                // Another thread in MPIR_Breakpoint: held there too.
                Stop::Trap { tid, pc } if pc == at.breakpoint + 1 => launcher.park(tid),
                Stop::Trap { tid, .. } => launcher.resume(tid, Some(Signal::SIGTRAP))?,
                Stop::Exec => {}
                Stop::Ended(ending) => {
                    return Err(launcher.ended(ending, "while its job was held"));
                }
            }
        }
    }
}

/// Where the launcher's MPIR interface is, once it is stopped in `MPIR_Breakpoint`.
struct Spawned {
    breakpoint: u64,
    /// The byte the `int3` replaced.
    saved: u8,
    table: u64,
    size: u64,
    state: u64,
}

/// What a thread of the launcher reported.
enum Stop {
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
struct Launcher {
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
    fn start(argv: &[String], env: &[(String, String)]) -> Result<(Self, Child), HoldError> {
        let program = argv[0].clone();
        let mut cmd = Command::new(&program);
        cmd.args(&argv[1..]).envs(env.iter().cloned());
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
        let l = Self {
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
    fn mem(&self) -> &Memory {
        self.mem
            .as_ref()
            .expect("the memory is open from the exec stop on")
    }

    /// From the exec stop: runs the launcher to its entry point, arms the MPIR interface
    /// and runs it into `MPIR_Breakpoint` with its job spawned, where it stays.
    fn hold(&mut self) -> Result<Spawned, HoldError> {
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

    /// Leaves thread `tid` in its stop (held) until the release.
    fn park(&mut self, tid: Pid) {
        self.threads.insert(tid, Thread::Stopped);
    }

    /// Resumes thread `tid` from its ptrace stop, delivering `sig`.
    fn resume(&mut self, tid: Pid, sig: Option<Signal>) -> Result<(), HoldError> {
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
    fn poll(&mut self) -> Result<Option<Stop>, HoldError> {
        let tids: Vec<Pid> = self
            .threads
            .iter()
            .filter(|&(_, &t)| t != Thread::Stopped)
            .map(|(&tid, _)| tid)
            .collect();
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
    fn release(mut self, at: &Spawned) -> Result<(), HoldError> {
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

    /// Kills the launcher (on an error before it was handed out) and reaps every thread,
    /// the main thread last (its end is reported once the others are reaped).
    fn kill(mut self) {
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        let mut tids: Vec<Pid> = self
            .threads
            .keys()
            .copied()
            .filter(|&t| t != self.pid)
            .collect();
        tids.push(self.pid);
        for tid in tids {
            while let Ok(s) = waitpid(tid, Some(WaitPidFlag::__WALL)) {
                if matches!(s, WaitStatus::Exited(..) | WaitStatus::Signaled(..)) {
                    break;
                }
            }
        }
        self.threads.clear();
    }

    fn ended(&self, ending: Ending, when: &'static str) -> HoldError {
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

#[cfg(test)]
mod tests;
