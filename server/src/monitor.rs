//! The node-local monitor of one rank: controls the application process a server starts or
//! attaches to for that rank (a server runs one monitor per local rank, see
//! `crate::ranks`), with signals, /proc and ptrace.
//!
//! ptrace requests must come from the tracing thread, so the [`Monitor`] lives on one
//! dedicated OS thread ([`MonitorHandle`] sends it jobs) that also polls the process for
//! breakpoint hits and exits and reports them as events. A process is only ptrace-attached
//! while it has breakpoints (or for a moment, to read registers): a plain `stop` is a
//! SIGSTOP, so tools outside see it in state `T` like any stopped job.
//!
//! This file holds the monitor's state; its jobs live in the submodules:
//! - `handle`: the monitor thread and [`MonitorHandle`];
//! - `control`: start, attach, stop, continue, kill, detach, status;
//! - `stdio`: the started program's streams ([`IoMode`]), stdin, the idle marker;
//! - `inspect`: /proc facts, registers, memory, stacks (`threads`: every thread's);
//! - `breakpoints`: native breakpoints (`hit`: where a hit stands);
//! - `events`: exits and hits as events, stored OMIS event requests and their actions;
//! - `symbolic`, `gdbcmd`, `native`: the process handed to gdb, and `print` without it;
//! - `detach`, `session`, `tomain`, `waiter`, `idle`: letting go, ending a program's
//!   session, running to `main`, waking on state changes, idle detection.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use nix::unistd::Pid;
use sdm_omis::Registry;
use sdm_proto::Kind;
use tokio::sync::mpsc;

use crate::error::{Error, ErrorKind};
use crate::unwind::Stacks;
pub use crate::unwind::{Frame, SIGNAL_FRAME, UNKNOWN_FRAME};

mod breakpoints;
mod control;
mod detach;
mod events;
mod gdbcmd;
mod handle;
mod hit;
mod idle;
mod inspect;
mod native;
mod session;
mod stdio;
mod symbolic;
mod threads;
mod tomain;
mod waiter;
pub use detach::Leave;
pub use events::{AsyncRequest, run_event_actions};
use handle::LazyThread;
pub use handle::MonitorHandle;
pub use stdio::IoMode;
pub use symbolic::{FrameMove, Step};
pub use threads::ThreadStack;

/// What the monitored process is doing, as the monitor knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcState {
    /// Running.
    Running,
    /// Stopped by the monitor.
    Stopped,
    /// Stopped at the breakpoint at this address.
    AtBreakpoint(u64),
    /// Exited with this status.
    Exited(i32),
    /// Killed by this signal.
    Signaled(String),
}

/// One monitored process.
#[derive(Debug)]
struct Proc {
    pid: Pid,
    exe: PathBuf,
    /// The process handle, if this server started it (`None`: attached).
    child: Option<Child>,
    traced: bool,
    /// Address -> (original byte, name).
    breakpoints: HashMap<u64, (u8, String)>,
    state: ProcState,
    /// Where stdin data goes (the pty master or the stdin pipe); `None` once closed.
    stdin: Option<std::fs::File>,
    /// Whether stdin is a pty (end of input is ^D) or a pipe (end of input is close).
    stdin_is_pty: bool,
    /// The threads reading the process's output; joined before its exit is reported.
    readers: Vec<std::thread::JoinHandle<()>>,
    /// The gdb holding the process once a symbolic request asked for one.
    gdb: Option<symbolic::Held>,
}

/// Stream tags of a stdio payload (its first byte), defined with the coalescer that reads them.
pub use sdm_overlay::stdio::{STDERR, STDOUT};

/// Where a monitor's output lines and end-of-process events go to the node: each as
/// `(kind, rank, payload)`, naming the local rank they come from.
pub type Output = mpsc::Sender<(Kind, u32, Bytes)>;

/// The monitor of one rank (runs on its own thread; see [`MonitorHandle`]).
pub struct Monitor {
    /// Where the process's output lines and its exit event go.
    stdio: Output,
    /// The rank (handed to the process as `SDM_RANK`).
    pub rank: u32,
    /// Its index among this server's ranks (`SDM_LOCAL_RANK`), once the init command said.
    pub local_rank: Option<u32>,
    /// How many ranks the job has (`SDM_SIZE`), once the init command said.
    pub size: Option<u32>,
    /// Whether this server serves this rank alone, as its launcher's task of that rank:
    /// the launcher's variables it inherited are the program's (see [`crate::rankenv`]).
    pub own_task: bool,
    /// Number of servers in the tree.
    pub servers: u32,
    proc: Option<Proc>,
    /// Where breakpoint hits and event-action replies go, as OMIS-style texts.
    events: mpsc::UnboundedSender<String>,
    /// What stack walks read of the process's mapped files.
    stacks: Stacks,
    /// The Python interpreter of the process, where it runs one (its frames in stacks).
    python: crate::python::Python,
    /// The services event actions run with (set once the server has its registry).
    pub registry: Option<Arc<Registry<Monitor>>>,
    /// Stored event-action requests, by request id.
    pub requests: BTreeMap<i64, AsyncRequest>,
    /// Defined user events.
    pub user_events: BTreeSet<i64>,
    /// How deep event actions are nested (an action may raise an event).
    firing: u32,
    /// CPU seconds of the process and when they were read, for `procstat`'s CPU %.
    last_cpu: Option<(f64, std::time::Instant)>,
    /// The state letter (/proc) of each thread just before `stop` last stopped the
    /// process, by thread id; cleared by `cont` (`sdm_stacks` reports it: a CPU profile
    /// counts the threads that were running).
    run_states: HashMap<u32, char>,
    /// The counters socket handed to started programs (`SDM_COUNTERS`), bound when the
    /// first program starts.
    pub counters: Option<Arc<crate::counters::Socket>>,
    /// When the started program goes idle (for the front-end's line alignment).
    idle: Option<idle::Watch>,
    /// The process a waiter thread waits for ([`waiter`]), and that thread, if one does.
    waiter: Option<(Pid, std::thread::JoinHandle<()>)>,
    /// Where a waiter sends the job that wakes this monitor (gone with the last handle).
    wake: Weak<LazyThread>,
}

/// A monitor result: the error names the pid, address or symbol involved.
pub type MonResult<T> = Result<T, Error>;

/// A failed system call on process `pid`.
fn errno(pid: Pid, what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    sys(what, e).with_pid(raw(pid))
}

fn raw(pid: Pid) -> u32 {
    pid.as_raw() as u32
}

/// A failed system call before there is a process: the message names the error, which is
/// also the source.
fn sys(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::new(ErrorKind::Process, format!("{what}: {e}")).caused_by(e)
}

fn state(what: String) -> Error {
    Error::new(ErrorKind::ProcessState, what)
}

fn symbol(what: String) -> Error {
    Error::new(ErrorKind::Symbol, what)
}

impl Monitor {
    /// The process, or an error saying there is none yet.
    fn proc(&mut self) -> MonResult<&mut Proc> {
        self.proc
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::NoProcess, "no process: start one first"))
    }

    /// The process id, if a process was started.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.pid.as_raw() as u32)
    }

    /// The monitor's view of the process state.
    pub fn state(&self) -> Option<ProcState> {
        self.proc.as_ref().map(|p| p.state.clone())
    }
}

/// This host's name (from /proc; `unknown` if unreadable).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_kind_of_failure_they_are() {
        let (tx, _rx) = mpsc::channel(16);
        let (m, _events) = MonitorHandle::new(5, 8, tx);
        let e = m.submit(|m| m.stop()).blocking_recv().unwrap().unwrap_err();
        assert!(e.is_no_process(), "{e}");
        assert_eq!(e.pid(), None);
        let started = m
            .submit(|m| m.start("sleep", &["30".into()], IoMode::Pipes))
            .blocking_recv()
            .unwrap()
            .unwrap();
        let e = m
            .submit(|m| m.read_memory(8, 16))
            .blocking_recv()
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Memory, "{e}");
        assert_eq!(e.pid(), Some(started));
        // The system's error is kept as the source, not only named in the message.
        let io = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert!(io.is_some(), "{e:?}");
        assert_eq!(e.chain(), e.to_string(), "the cause is not printed twice");
        let e = m
            .submit(|m| m.registers())
            .blocking_recv()
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ProcessState, "{e}");
        m.submit(|m| m.kill()).blocking_recv().unwrap().unwrap();
        let e = m
            .submit(|m| m.start("/nonexistent/program", &[], IoMode::Pipes))
            .blocking_recv()
            .unwrap()
            .unwrap_err();
        let io = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            io.map(|e| e.kind()),
            Some(std::io::ErrorKind::NotFound),
            "{e:?}"
        );
        assert_eq!(
            "tty".parse::<IoMode>().unwrap_err().kind(),
            ErrorKind::BadInput
        );
    }
}
