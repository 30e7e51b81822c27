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
//! killed at its entry point, before its `main`, and the error says so
//! ([`HoldError::NoMpir`]), so the caller can start the job otherwise and attach to it.
//! A launcher that dies while held (killed, or ending its job) is reaped and reported
//! ([`HoldError::Ended`]); one that never spawns its job (waiting for a Slurm allocation)
//! keeps [`launch_held`] waiting: there is no time limit of its own.

use std::process::Child;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::mpir::{MpirError, ProcTable, read_table};

mod tracee;

use tracee::{Launcher, Spawned, Stop};

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
        #[source]
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

/// The Slurm job step a held srun launched (srun's `totalview_jobid` and
/// `totalview_stepid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmStep {
    /// The job id (`SLURM_JOB_ID` of the tasks).
    pub job_id: String,
    /// The step id (`SLURM_STEP_ID` of the tasks).
    pub step_id: String,
}

/// A job whose tasks are spawned and held, its launcher stopped in `MPIR_Breakpoint`.
/// [`HeldJob::release`] (or dropping it) lets them go on.
pub struct HeldJob {
    table: ProcTable,
    slurm: Option<SlurmStep>,
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

    /// The Slurm job and step of the held job, when the launcher is srun: what a tool
    /// needs to start its own daemons on the job's nodes (`srun --jobid=JOB --overlap`).
    pub fn slurm_step(&self) -> Option<&SlurmStep> {
        self.slurm.as_ref()
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
    launch_held_with(argv, env, Streams::default())
}

/// The standard streams of a held launcher.
#[derive(Debug, Default)]
pub struct Streams {
    /// Its standard output and error are pipes, taken with the `Child` [`HeldJob::release`]
    /// returns (read them from then on: before, the held job writes nothing, and a
    /// launcher whose pipe fills waits); else they are this process's.
    pub capture: bool,
    /// Its standard input is /dev/null (a tool reading its own, its console's commands,
    /// keeps it from the launcher, which would forward it to its tasks); else this
    /// process's.
    pub no_input: bool,
    /// Its standard error, from its start (a pipe the caller reads at once: the launcher
    /// may say why it waits before its job is held, e.g. srun for its allocation).
    pub stderr: Option<std::os::fd::OwnedFd>,
}

/// [`launch_held`] with the launcher's standard streams as `streams` says.
pub fn launch_held_with(
    argv: &[String],
    env: &[(String, String)],
    streams: Streams,
) -> Result<HeldJob, HoldError> {
    let program = argv.first().ok_or(HoldError::NoCommand)?.clone();
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (argv, env) = (argv.to_vec(), env.to_vec());
    let tracer = std::thread::Builder::new()
        .name("sdm-hold".into())
        .spawn(move || trace(&argv, &env, streams, &held_tx, &release_rx))
        .map_err(|source| HoldError::Spawn {
            program: program.clone(),
            source,
        })?;
    match held_rx.recv() {
        Ok(Ok((table, slurm, child))) => Ok(HeldJob {
            table,
            slurm,
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

/// How long [`end_launcher`] lets a launcher end its job after SIGTERM.
pub const END_GRACE: Duration = Duration::from_secs(5);

/// Ends a launcher and its job: SIGTERM first, since a launcher killed outright leaves its
/// ranks running (Open MPI 5's prterun, hydra), then SIGKILL once `grace` has passed; the
/// launcher is reaped either way. Blocks for at most about `grace`.
pub fn end_launcher(launcher: &mut Child, grace: Duration) {
    if !matches!(launcher.try_wait(), Ok(None)) {
        return;
    }
    let pid = nix::unistd::Pid::from_raw(launcher.id() as i32);
    let _ = nix::sys::signal::kill(pid, Signal::SIGTERM);
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if !matches!(launcher.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = launcher.kill();
    let _ = launcher.wait();
}

type Held = Result<(ProcTable, Option<SlurmStep>, Child), HoldError>;

/// The tracer thread: starts the launcher, holds it, sends the table (or the error) and,
/// when `release` is dropped, lets it go.
fn trace(
    argv: &[String],
    env: &[(String, String)],
    streams: Streams,
    held: &mpsc::Sender<Held>,
    release: &mpsc::Receiver<()>,
) -> Result<(), HoldError> {
    let (mut launcher, child) = match Launcher::start(argv, env, streams) {
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
    let slurm = launcher.slurm_step();
    if held.send(Ok((table, slurm, child))).is_err() {
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

#[cfg(test)]
mod tests;
