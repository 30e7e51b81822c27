//! The node-local monitor of one rank: controls the application process a server starts or
//! attaches to for that rank (a server runs one monitor per local rank, see
//! `crate::ranks`), with
//! signals, /proc and ptrace (stop, continue, kill, process info, registers, memory, stack
//! backtraces unwound from DWARF call-frame information and symbolized with addr2line,
//! breakpoints).
//!
//! ptrace requests must come from the tracing thread, so the [`Monitor`] lives on one
//! dedicated OS thread ([`MonitorHandle`] sends it jobs) that also polls the process for
//! breakpoint hits and exits and reports them as events. A process is only ptrace-attached
//! while it has breakpoints (or for a moment, to read registers): a plain `stop` is a
//! SIGSTOP, so tools outside see it in state `T` like any stopped job.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use nix::sys::ptrace;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use sdm_proto::Kind;
use tokio::sync::{mpsc, oneshot};

use sdm_omis::{ActionList, BasicReply, BasicRequest, Registry, Value};

use crate::error::{Error, ErrorKind};

pub use crate::unwind::{Frame, SIGNAL_FRAME, UNKNOWN_FRAME};
use crate::unwind::{Stacks, read_maps};

mod detach;
mod gdbcmd;
mod hit;
mod idle;
mod native;
mod session;
mod symbolic;
mod threads;
mod tomain;
mod waiter;
pub use detach::Leave;
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

/// How a started process's stdio is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// A pseudo-terminal: stdout and stderr interleave as on a terminal.
    Pty,
    /// Pipes: stdout and stderr stay apart.
    Pipes,
    /// Left to the launcher (the seed's attach case): inherited from the server.
    Runtime,
}

impl std::str::FromStr for IoMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "pty" => Ok(Self::Pty),
            "pipes" => Ok(Self::Pipes),
            "runtime" => Ok(Self::Runtime),
            _ => Err(Error::new(
                ErrorKind::BadInput,
                format!("unknown stdio mode {s:?}: expected pty, pipes or runtime"),
            )),
        }
    }
}

/// Stream tags of a stdio payload (its first byte), defined with the coalescer that reads them.
pub use sdm_overlay::coalesce::{STDERR, STDOUT};

/// Where a monitor's output lines and end-of-process events go to the node: each as
/// `(kind, rank, payload)`, naming the local rank they come from.
pub type Output = mpsc::Sender<(Kind, u32, Bytes)>;

/// Reads `fd` line by line and sends each line (tagged with `stream`) as stdio; blocks when
/// the channel is full, which blocks the process when its output buffer fills. What it
/// holds is kept in a tap, added to `taps` with a copy of `fd`, for the idle watch.
fn spawn_reader(
    fd: std::fs::File,
    stream: u8,
    (tx, rank): (Output, u32),
    taps: &mut Vec<(Arc<idle::Tap>, std::os::fd::OwnedFd)>,
) -> std::thread::JoinHandle<()> {
    let tap = Arc::new(idle::Tap::default());
    if let Ok(copy) = fd.try_clone() {
        taps.push((tap.clone(), copy.into()));
    }
    std::thread::Builder::new()
        .name("sdm-stdio".into())
        .spawn(move || {
            idle::read_lines(fd, stream, &tap, |line| {
                tx.blocking_send((Kind::Stdio, rank, line)).is_ok()
            })
        })
        .expect("spawning a stdio reader")
}

/// The monitor of one rank (runs on its own thread; see [`MonitorHandle`]).
pub struct Monitor {
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
    events: mpsc::UnboundedSender<String>,
    /// What stack walks read of the process's mapped files.
    stacks: Stacks,
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

type Job = Box<dyn FnOnce(&mut Monitor) + Send>;

/// Sends jobs to the monitor thread, which starts with the first job: a server that never
/// touches a process (most of a big tree's start-up, every benchmark wave) never pays for a
/// thread.
#[derive(Clone)]
pub struct MonitorHandle {
    inner: Arc<LazyThread>,
}

struct LazyThread {
    tx: OnceLock<std_mpsc::Sender<Job>>,
    /// What the thread starts from, until it is started.
    start: Mutex<Option<Start>>,
}

struct Start {
    rank: u32,
    servers: u32,
    stdio: Output,
    events: mpsc::UnboundedSender<String>,
    /// Jobs run before any other once the thread starts ([`MonitorHandle::prepare`]).
    prepared: Vec<Job>,
}

impl MonitorHandle {
    /// A handle of the monitor thread (started on the first job); events it detects
    /// (breakpoint hits, exits) arrive on the returned receiver as OMIS-style event texts.
    pub fn new(rank: u32, servers: u32, stdio: Output) -> (Self, mpsc::UnboundedReceiver<String>) {
        let (etx, erx) = mpsc::unbounded_channel();
        let start = Start {
            rank,
            servers,
            stdio,
            events: etx,
            prepared: Vec::new(),
        };
        let inner = LazyThread {
            tx: OnceLock::new(),
            start: Mutex::new(Some(start)),
        };
        (
            Self {
                inner: Arc::new(inner),
            },
            erx,
        )
    }

    /// Whether the monitor thread has started (some job was submitted).
    pub fn started(&self) -> bool {
        self.inner.tx.get().is_some()
    }

    /// Has `f` run on the monitor before any other job, without starting the thread for it
    /// (set-up such as the services event actions use); at once if it runs already.
    pub fn prepare(&self, f: impl FnOnce(&mut Monitor) + Send + 'static) {
        let mut start = self.inner.start.lock().expect("not poisoned");
        match start.as_mut() {
            Some(s) => s.prepared.push(Box::new(f)),
            None => {
                drop(start);
                self.send(Box::new(f));
            }
        }
    }

    fn send(&self, job: Job) {
        let tx = self.inner.tx.get_or_init(|| {
            let start = self
                .inner
                .start
                .lock()
                .expect("not poisoned")
                .take()
                .expect("the monitor thread starts once");
            run_thread(start, Arc::downgrade(&self.inner))
        });
        tx.send(job)
            .expect("the monitor thread runs as long as its handle");
    }

    /// Queues `f` for the monitor thread at once (jobs run in the order they were
    /// submitted) and returns where its result will arrive.
    pub fn submit<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Monitor) -> R + Send + 'static,
    ) -> oneshot::Receiver<R> {
        let (tx, rx) = oneshot::channel();
        self.submit_then(f, move |r| {
            let _ = tx.send(r);
        });
        rx
    }

    /// Queues `f` like [`MonitorHandle::submit`], and has the monitor thread hand its result
    /// to `then`: a service's answer goes from there straight to the node (a [`Reply`]
    /// may be sent from any thread), with no task on the runtime in between. If the
    /// monitor never runs the job, `then` is dropped unrun (a reply it holds then answers
    /// with an error).
    ///
    /// [`Reply`]: crate::service::Reply
    pub fn submit_then<R>(
        &self,
        f: impl FnOnce(&mut Monitor) -> R + Send + 'static,
        then: impl FnOnce(R) + Send + 'static,
    ) {
        self.send(Box::new(move |m| then(f(m))));
    }

    /// Runs `f` on the monitor thread and returns its result.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Monitor) -> R + Send + 'static,
    ) -> R {
        self.submit(f)
            .await
            .expect("the monitor thread answers every job")
    }
}

/// Starts the monitor thread from `s`; it runs jobs until every handle is gone.
fn run_thread(s: Start, wake: Weak<LazyThread>) -> std_mpsc::Sender<Job> {
    let (tx, rx) = std_mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("sdm-monitor".into())
        .spawn(move || {
            crate::gate::lower_this_thread();
            let mut m = Monitor {
                stdio: s.stdio,
                rank: s.rank,
                local_rank: None,
                own_task: true,
                size: None,
                servers: s.servers,
                proc: None,
                events: s.events,
                stacks: Stacks::default(),
                registry: None,
                requests: BTreeMap::new(),
                user_events: BTreeSet::new(),
                firing: 0,
                last_cpu: None,
                counters: None,
                idle: None,
                waiter: None,
                wake,
            };
            for job in s.prepared {
                job(&mut m);
            }
            let mut polling = false;
            loop {
                // A waiter wakes the monitor on its process's exits and stops; timers are
                // left for gdb's reports and the started program's idle watch.
                let wait = match &m.proc {
                    Some(p) if p.gdb.is_some() && p.state == ProcState::Running => {
                        Duration::from_millis(10)
                    }
                    Some(p) if p.state == ProcState::Running && (polling || m.idle.is_some()) => {
                        Duration::from_millis(50)
                    }
                    _ => Duration::from_secs(3600),
                };
                match rx.recv_timeout(wait) {
                    Ok(job) => job(&mut m),
                    Err(std_mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
                }
                m.poll();
                m.check_idle();
                polling = m.arm_waiter();
            }
            m.kill_quietly();
        })
        .expect("spawning the monitor thread");
    tx
}

/// A monitor result: the error names the pid, address or symbol involved.
pub type MonResult<T> = Result<T, Error>;

/// A failed system call on process `pid`.
fn errno(pid: Pid, what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Process, format!("{what}: {e}")).with_pid(raw(pid))
}

fn raw(pid: Pid) -> u32 {
    pid.as_raw() as u32
}

/// A failed system call before there is a process.
fn sys(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Process, format!("{what}: {e}"))
}

fn state(what: String) -> Error {
    Error::new(ErrorKind::ProcessState, what)
}

fn symbol(what: String) -> Error {
    Error::new(ErrorKind::Symbol, what)
}

impl Monitor {
    fn proc(&mut self) -> MonResult<&mut Proc> {
        self.proc
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::NoProcess, "no process: start one first"))
    }

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
        use std::os::fd::{AsFd, OwnedFd};
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
        let mut master: Option<OwnedFd> = None;
        match mode {
            IoMode::Pty => {
                let pty = nix::pty::openpty(None, None).map_err(|e| sys("openpty", e))?;
                use nix::sys::termios::{LocalFlags, OutputFlags, SetArg, tcgetattr, tcsetattr};
                let mut t = tcgetattr(&pty.slave).map_err(|e| sys("tcgetattr", e))?;
                // No echo of forwarded input, no CR added to output lines.
                t.local_flags.remove(LocalFlags::ECHO | LocalFlags::ECHONL);
                t.output_flags.remove(OutputFlags::ONLCR);
                tcsetattr(&pty.slave, SetArg::TCSANOW, &t).map_err(|e| sys("tcsetattr", e))?;
                let dup = |f: &OwnedFd| f.try_clone().map_err(|e| sys("dup pty", e));
                cmd.stdin(Stdio::from(dup(&pty.slave)?))
                    .stdout(Stdio::from(dup(&pty.slave)?))
                    .stderr(Stdio::from(pty.slave));
                master = Some(pty.master);
            }
            IoMode::Pipes => {
                cmd.stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
            }
            IoMode::Runtime => {
                let out = std::io::stderr()
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(|e| sys("dup stderr", e))?;
                cmd.stdin(Stdio::null()).stdout(out);
            }
        }
        // SAFETY: setsid and prctl are async-signal-safe. The child gets its own session
        // (so the pty can be its terminal), and dies with this (monitor) thread, so a
        // server killed with SIGKILL leaves no application process behind.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                let _ = nix::unistd::setsid();
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
                if at_main {
                    // Traced by this (monitor) thread from the exec on: see `run_to_main`.
                    ptrace::traceme().map_err(std::io::Error::from)?;
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| sys(&format!("cannot start {program}"), e))?;
        // The parent's copies of the pty slave went with `cmd`.
        drop(cmd);
        let pid = Pid::from_raw(child.id() as i32);
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .unwrap_or_else(|_| PathBuf::from(program));
        let mut readers = Vec::new();
        let mut taps = Vec::new();
        let (stdin, stdin_is_pty) = match (mode, master) {
            (IoMode::Pty, Some(m)) => {
                let w = std::fs::File::from(m.try_clone().map_err(|e| sys("dup pty", e))?);
                readers.push(spawn_reader(
                    std::fs::File::from(m),
                    STDOUT,
                    (self.stdio.clone(), self.rank),
                    &mut taps,
                ));
                (Some(w), true)
            }
            (IoMode::Pipes, _) => {
                let out = child.stdout.take().expect("piped");
                let err = child.stderr.take().expect("piped");
                readers.push(spawn_reader(
                    std::fs::File::from(OwnedFd::from(out)),
                    STDOUT,
                    (self.stdio.clone(), self.rank),
                    &mut taps,
                ));
                readers.push(spawn_reader(
                    std::fs::File::from(OwnedFd::from(err)),
                    STDERR,
                    (self.stdio.clone(), self.rank),
                    &mut taps,
                ));
                let w = child
                    .stdin
                    .take()
                    .map(|s| std::fs::File::from(OwnedFd::from(s)));
                (w, false)
            }
            _ => (None, false),
        };
        self.idle = (!taps.is_empty()).then(|| idle::Watch::new(pid, taps));
        self.proc = Some(Proc {
            pid,
            exe,
            child: Some(child),
            traced: false,
            breakpoints: HashMap::new(),
            state: ProcState::Running,
            stdin,
            stdin_is_pty,
            readers,
            gdb: None,
        });
        if at_main && let Err(e) = self.run_to_main() {
            self.kill_quietly();
            return Err(e);
        }
        Ok(pid.as_raw() as u32)
    }

    /// Writes `data` to the process's stdin; `eof` then ends its input (^D on a pty, close
    /// on a pipe).
    pub fn write_stdin(&mut self, data: &[u8], eof: bool) -> MonResult<()> {
        use std::io::Write;
        let p = self.proc()?;
        let Some(w) = p.stdin.as_mut() else {
            return if data.is_empty() {
                Ok(())
            } else {
                Err(state("the process's stdin is closed".into()).with_pid(raw(p.pid)))
            };
        };
        w.write_all(data)
            .map_err(|e| errno(p.pid, "writing stdin", e))?;
        if eof {
            if p.stdin_is_pty {
                // ^D ends input at the start of a line; a partial line needs two.
                let eot: &[u8] = if data.is_empty() || data.ends_with(b"\n") {
                    b"\x04"
                } else {
                    b"\x04\x04"
                };
                w.write_all(eot)
                    .map_err(|e| errno(p.pid, "writing stdin", e))?;
            } else {
                p.stdin = None;
            }
        }
        Ok(())
    }

    /// The process id, if a process was started.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.pid.as_raw() as u32)
    }

    /// The monitor's view of the process state.
    pub fn state(&self) -> Option<ProcState> {
        self.proc.as_ref().map(|p| p.state.clone())
    }

    /// Stops the process (SIGSTOP, or a ptrace interrupt while breakpoints are set).
    pub fn stop(&mut self) -> MonResult<()> {
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

    /// Metrics of the process for `sdm top`, from /proc: CPU % since the previous sample
    /// (since the start for the first), RSS (kB), threads, bytes read and written, and
    /// context switches (voluntary + involuntary), as `name value` pairs.
    pub fn procstat(&mut self) -> MonResult<Vec<(&'static str, f64)>> {
        let pid = self.proc()?.pid;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_err(|e| errno(pid, &format!("/proc/{pid}/stat"), e))?;
        let f: Vec<&str> = stat
            .rsplit_once(") ")
            .map(|(_, r)| r)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let field = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let tick = 100.0; // USER_HZ on Linux
        let cpu = (field(11) + field(12)) / tick;
        let now = std::time::Instant::now();
        let cpu_pct = match self.last_cpu {
            Some((c, t)) if now > t => 100.0 * (cpu - c) / now.duration_since(t).as_secs_f64(),
            _ => {
                let uptime: f64 = std::fs::read_to_string("/proc/uptime")
                    .ok()
                    .and_then(|u| u.split_whitespace().next()?.parse().ok())
                    .unwrap_or(0.0);
                let age = uptime - field(19) / tick;
                if age > 0.0 { 100.0 * cpu / age } else { 0.0 }
            }
        };
        self.last_cpu = Some((cpu, now));
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let from_status = |key: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0.0)
        };
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
        let from_io = |key: &str| -> f64 {
            io.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0)
        };
        Ok(vec![
            ("cpu_pct", (cpu_pct * 10.0).round() / 10.0),
            ("rss_kb", from_status("VmRSS:")),
            ("threads", from_status("Threads:")),
            ("read_bytes", from_io("rchar:")),
            ("write_bytes", from_io("wchar:")),
            (
                "ctx_switches",
                from_status("voluntary_ctxt_switches:")
                    + from_status("nonvoluntary_ctxt_switches:"),
            ),
        ])
    }

    /// Facts from /proc: state letter, RSS (kB), user and system time (s), argv.
    pub fn process_info(&mut self) -> MonResult<(String, u64, f64, f64, Vec<String>)> {
        let pid = self.proc()?.pid;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_err(|e| errno(pid, &format!("/proc/{pid}/stat"), e))?;
        let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        let tick = 100.0; // USER_HZ on Linux
        let state = f.first().copied().unwrap_or("?").to_owned();
        let utime = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / tick;
        let stime = f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / tick;
        let rss_pages: u64 = f.get(21).and_then(|v| v.parse().ok()).unwrap_or(0);
        let argv = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_default()
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
        Ok((state, rss_pages * 4, utime, stime, argv))
    }

    /// Runs `f` with the process ptrace-stopped, seizing it (for good) if it is not traced yet.
    fn with_traced<R>(&mut self, f: impl FnOnce(Pid) -> MonResult<R>) -> MonResult<R> {
        let p = self.proc()?;
        if p.gdb.is_some() {
            return Err(state(
                "the process is held by gdb (since a symbolic command): use the symbolic commands"
                    .into(),
            )
            .with_pid(raw(p.pid)));
        }
        if !matches!(p.state, ProcState::Stopped | ProcState::AtBreakpoint(_)) {
            return Err(state("the process must be stopped first".into()).with_pid(raw(p.pid)));
        }
        if p.traced {
            return f(p.pid);
        }
        // Stopped by SIGSTOP: from now on held in a ptrace stop instead (state `t`), which
        // `cont` ends with PTRACE_CONT like any traced stop. (Detaching again would let
        // the process run until the SIGSTOP passed on with the detach takes effect again:
        // a process the console calls stopped must not run.)
        // Seizing a process in group-stop re-traps it at once (a PTRACE_EVENT_STOP to
        // wait for); an interrupt on top would stay pending and stop it again right after
        // the next `cont`.
        ptrace::seize(p.pid, ptrace::Options::PTRACE_O_EXITKILL)
            .map_err(|e| errno(p.pid, "ptrace seize", e))?;
        p.traced = true;
        wait_trace_stop(p)?;
        f(p.pid)
    }

    /// Integer registers (x86-64), as (name, value) pairs.
    pub fn registers(&mut self) -> MonResult<Vec<(&'static str, u64)>> {
        self.with_traced(|pid| {
            let r = ptrace::getregs(pid).map_err(|e| errno(pid, "ptrace getregs", e))?;
            Ok(vec![
                ("rip", r.rip),
                ("rsp", r.rsp),
                ("rbp", r.rbp),
                ("rax", r.rax),
                ("rbx", r.rbx),
                ("rcx", r.rcx),
                ("rdx", r.rdx),
                ("rsi", r.rsi),
                ("rdi", r.rdi),
                ("r8", r.r8),
                ("r9", r.r9),
                ("r10", r.r10),
                ("r11", r.r11),
                ("r12", r.r12),
                ("r13", r.r13),
                ("r14", r.r14),
                ("r15", r.r15),
                ("eflags", r.eflags),
            ])
        })
    }

    /// Reads `len` bytes at `addr` (through /proc/PID/mem).
    pub fn read_memory(&mut self, addr: u64, len: usize) -> MonResult<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let pid = self.proc()?.pid;
        let f = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| {
            Error::new(ErrorKind::Memory, format!("/proc/{pid}/mem: {e}")).with_pid(raw(pid))
        })?;
        let mut buf = vec![0u8; len.min(1 << 20)];
        f.read_exact_at(&mut buf, addr).map_err(|e| {
            Error::new(
                ErrorKind::Memory,
                format!("reading {len} bytes at {addr:#x}: {e}"),
            )
            .with_pid(raw(pid))
        })?;
        Ok(buf)
    }

    /// Writes `bytes` at `addr` (through /proc/PID/mem).
    pub fn write_memory(&mut self, addr: u64, bytes: &[u8]) -> MonResult<()> {
        use std::os::unix::fs::FileExt;
        let pid = self.proc()?.pid;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| {
                Error::new(ErrorKind::Memory, format!("/proc/{pid}/mem: {e}")).with_pid(raw(pid))
            })?;
        f.write_all_at(bytes, addr).map_err(|e| {
            Error::new(
                ErrorKind::Memory,
                format!("writing {} bytes at {addr:#x}: {e}", bytes.len()),
            )
            .with_pid(raw(pid))
        })
    }

    /// The stack as (pc, fp) pairs, innermost first, one per real frame, unwound from
    /// DWARF call-frame information (frame pointers where none covers a pc).
    pub fn raw_backtrace(&mut self) -> MonResult<Vec<(u64, u64)>> {
        let pid = self.with_traced(Ok)?;
        self.stacks
            .raw_backtrace(pid)
            .map_err(|e| Error::new(ErrorKind::Process, e.to_string()).with_pid(raw(pid)))
    }

    /// The stack, innermost first, each frame symbolized where symbols or debug info exist;
    /// functions inlined at a frame's pc are frames of their own, innermost first.
    pub fn backtrace(&mut self) -> MonResult<Vec<Frame>> {
        if self.symbolic() {
            return self.backtrace_symbolic();
        }
        let pid = self.with_traced(Ok)?;
        self.stacks
            .backtrace(pid)
            .map_err(|e| Error::new(ErrorKind::Process, e.to_string()).with_pid(raw(pid)))
    }

    /// Sets a breakpoint on a function name or `0x` address; returns the address. The
    /// process stays ptrace-attached from now on.
    pub fn set_breakpoint(&mut self, target: &str) -> MonResult<u64> {
        let addr = self.resolve(target)?;
        if self.symbolic() {
            self.break_native(addr, target)?;
            return Ok(addr);
        }
        let p = self.proc()?;
        if p.breakpoints.contains_key(&addr) {
            return Ok(addr);
        }
        let was_running = p.state == ProcState::Running;
        if matches!(p.state, ProcState::Exited(_) | ProcState::Signaled(_)) {
            return Err(state(format!("process {} has ended", p.pid)));
        }
        if !p.traced {
            ptrace::seize(p.pid, ptrace::Options::PTRACE_O_EXITKILL)
                .map_err(|e| errno(p.pid, "ptrace seize", e))?;
            p.traced = true;
            if !was_running {
                // Stopped by SIGSTOP: from now on held in a ptrace stop instead (state
                // `t`), which `cont` ends with PTRACE_CONT like any traced stop. Seizing a
                // process in group-stop re-traps it at once: no interrupt (it would stay
                // pending and stop the process again after the next `cont`).
                wait_trace_stop(p)?;
            }
        }
        if was_running {
            ptrace::interrupt(p.pid).map_err(|e| errno(p.pid, "ptrace interrupt", e))?;
            wait_interrupted(p)?;
        }
        let word = ptrace::read(p.pid, addr as ptrace::AddressType)
            .map_err(|e| errno(p.pid, &format!("reading {addr:#x}"), e))?;
        let orig = (word & 0xff) as u8;
        poke_byte(p.pid, addr, 0xcc)?;
        p.breakpoints.insert(addr, (orig, target.to_owned()));
        if was_running {
            ptrace::cont(p.pid, None).map_err(|e| errno(p.pid, "ptrace cont", e))?;
        }
        Ok(addr)
    }

    /// An event occurred here: runs the actions of the enabled requests waiting for it
    /// (OMIS section 5.2) and sends their replies up. `key` selects among definitions (a
    /// breakpoint's function, a user event's number); `params` are `$1`, `$2`…
    pub fn fire(&mut self, service: &str, key: Option<Value>, params: Vec<Value>) {
        const MAX_DEPTH: u32 = 8;
        let Some(reg) = self.registry.clone() else {
            return;
        };
        if self.firing >= MAX_DEPTH {
            let _ = self.events.send(format!(
                "error(\"event {service} not handled: actions raise events {MAX_DEPTH} deep\")"
            ));
            return;
        }
        self.firing += 1;
        let replies = run_event_actions(&reg, self, service, key.as_ref(), &params);
        self.firing -= 1;
        for r in replies {
            let _ = self.events.send(r);
        }
    }

    /// Reports the process's end (`event`) after its last output line: a helper thread
    /// waits for the output readers to reach end of file, then sends the event on the same
    /// queue as the output, so no line can arrive after the exit. The monitor thread never
    /// waits for output to drain (a reader may be blocked on a full queue).
    fn report_exit(&mut self, event: String) {
        let Some(p) = self.proc.as_mut() else { return };
        p.stdin = None;
        let readers = std::mem::take(&mut p.readers);
        let (tx, rank) = (self.stdio.clone(), self.rank);
        // What the program started and left behind ends with it (it would hold the
        // output open); a process attached to is not ours to end.
        let session = p.child.is_some().then_some(p.pid);
        let spawned = std::thread::Builder::new()
            .name("sdm-exit".into())
            .spawn(move || {
                if let Some(sid) = session {
                    session::end_rest(sid, session::GRACE);
                }
                for r in readers {
                    let _ = r.join();
                }
                let _ = tx.blocking_send((Kind::Event, rank, Bytes::from(event)));
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot report the process's exit: {e}");
        }
    }

    /// The address of a function name (or a `0x` address) in the process.
    fn resolve(&mut self, target: &str) -> MonResult<u64> {
        let (pid, exe) = {
            let p = self.proc()?;
            (p.pid, p.exe.clone())
        };
        Ok(match target.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16)
                .map_err(|_| symbol(format!("bad address {target:?}")))?,
            None => {
                let svma = symbol_address(&exe, target)?;
                let bias = read_maps(pid)
                    .iter()
                    .find(|m| m.path == exe)
                    .map(|m| m.start - m.offset)
                    .ok_or_else(|| {
                        symbol(format!("{} is not mapped in process {pid}", exe.display()))
                    })?;
                if is_pie(&exe)? { bias + svma } else { svma }
            }
        })
    }

    /// Removes the breakpoint at `target` (restoring the original byte); a process stopped
    /// at it stays stopped there, and continues from it with `cont`.
    pub fn clear_breakpoint(&mut self, target: &str) -> MonResult<()> {
        if self.symbolic() {
            return self.delete_break(target);
        }
        let addr = self.resolve(target)?;
        let p = self.proc()?;
        let Some(&(orig, _)) = p.breakpoints.get(&addr) else {
            return Ok(());
        };
        match p.state {
            ProcState::AtBreakpoint(a) if a == addr => {
                // Stopped on it (the pc already back on the breakpoint's instruction):
                // restored, it is a plain traced stop that `cont` resumes.
                poke_byte(p.pid, addr, orig)?;
                p.breakpoints.remove(&addr);
                p.state = ProcState::Stopped;
                return Ok(());
            }
            ProcState::Exited(_) | ProcState::Signaled(_) => {
                p.breakpoints.remove(&addr);
                return Ok(());
            }
            _ => {}
        }
        let was_running = p.state == ProcState::Running;
        if was_running {
            ptrace::interrupt(p.pid).map_err(|e| errno(p.pid, "ptrace interrupt", e))?;
            wait_interrupted(p)?;
        }
        poke_byte(p.pid, addr, orig)?;
        p.breakpoints.remove(&addr);
        if was_running {
            ptrace::cont(p.pid, None).map_err(|e| errno(p.pid, "ptrace cont", e))?;
        }
        Ok(())
    }

    /// Sends an idle marker up when the started program has gone idle with all its output
    /// sent (see [`idle`]): the front-end stops waiting for its later lines.
    fn check_idle(&mut self) {
        let alive = self.proc.as_ref().is_some_and(|p| {
            matches!(
                p.state,
                ProcState::Running | ProcState::Stopped | ProcState::AtBreakpoint(_)
            )
        });
        let Some(w) = self.idle.as_mut().filter(|_| alive) else {
            return;
        };
        let (tx, rank) = (&self.stdio, self.rank);
        w.check(std::time::Instant::now(), || {
            let marker = Bytes::from_static(&[sdm_overlay::coalesce::IDLE]);
            tx.try_send((Kind::Stdio, rank, marker)).is_ok()
        });
    }

    /// Notices breakpoint hits and exits; reports them as events.
    fn poll(&mut self) {
        if self.symbolic() {
            return self.poll_symbolic();
        }
        let Some(p) = self.proc.as_mut() else { return };
        if !matches!(p.state, ProcState::Running) {
            return;
        }
        let flags = WaitPidFlag::WNOHANG | WaitPidFlag::__WALL;
        let st = match waitpid(p.pid, Some(flags)) {
            Ok(s) => s,
            Err(_) => return,
        };
        match st {
            WaitStatus::StillAlive => {}
            WaitStatus::Exited(_, c) => {
                p.state = ProcState::Exited(c);
                self.report_exit(format!("process_terminated(\"exited\",{c})"));
                let how = vec![Value::Str("exited".into()), Value::Int(i64::from(c))];
                self.fire("process_terminated", None, how);
            }
            WaitStatus::Signaled(_, s, _) => {
                p.state = ProcState::Signaled(s.to_string());
                self.report_exit(format!("process_terminated(\"killed\",\"{s}\")"));
                let how = vec![Value::Str("killed".into()), Value::Str(s.to_string())];
                self.fire("process_terminated", None, how);
            }
            WaitStatus::Stopped(pid, Signal::SIGTRAP) => {
                let hit = ptrace::getregs(pid).ok().and_then(|mut r| {
                    let addr = r.rip - 1;
                    p.breakpoints.get(&addr).map(|(_, name)| {
                        r.rip = addr;
                        let _ = ptrace::setregs(pid, r);
                        (addr, name.clone())
                    })
                });
                match hit {
                    Some((addr, name)) => {
                        p.state = ProcState::AtBreakpoint(addr);
                        // Said by function and line, so the hits of many ranks merge.
                        let place = self.hit_place(pid, addr);
                        let _ = self.events.send(format!(
                            "breakpoint({},{})",
                            Value::Str(name.clone()),
                            Value::Str(place)
                        ));
                        let key = Value::Str(name.clone());
                        let params = vec![Value::Str(name), Value::Int(addr as i64)];
                        self.fire("breakpoint", Some(key), params);
                    }
                    None => {
                        let _ = ptrace::cont(pid, Signal::SIGTRAP);
                    }
                }
            }
            WaitStatus::Stopped(pid, sig) => {
                let _ = ptrace::cont(pid, sig);
            }
            WaitStatus::PtraceEvent(pid, _, _) => {
                let _ = ptrace::cont(pid, None);
            }
            _ => {}
        }
    }
}

/// Waits until the traced process reports a ptrace stop.
fn wait_trace_stop(p: &mut Proc) -> MonResult<()> {
    wait_stopped(p, WaitPidFlag::__WALL, false)
}

/// Waits for the stop a `ptrace::interrupt` asked for. A signal on its way to the process
/// first (its signal-delivery stop) is passed on, not taken for the stop (continuing from
/// it would discard the signal); the interrupt stops the process right after.
fn wait_interrupted(p: &mut Proc) -> MonResult<()> {
    wait_stopped(p, WaitPidFlag::__WALL, true)
}

/// Waits (`waitpid` with `flags`) until the process reports a stop; an exit or a kill on
/// the way is recorded in its state and returned as the error. With `pass_signals`, a
/// traced process's signal-delivery stops (other than SIGSTOP and SIGTRAP) are continued
/// with their signal instead.
fn wait_stopped(p: &mut Proc, flags: WaitPidFlag, pass_signals: bool) -> MonResult<()> {
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

fn poke_byte(pid: Pid, addr: u64, byte: u8) -> MonResult<()> {
    let word = ptrace::read(pid, addr as ptrace::AddressType)
        .map_err(|e| errno(pid, &format!("reading {addr:#x}"), e))?;
    let new = (word & !0xff) | i64::from(byte);
    ptrace::write(pid, addr as ptrace::AddressType, new)
        .map_err(|e| errno(pid, &format!("writing {addr:#x}"), e))
}

fn symbol_address(exe: &Path, name: &str) -> MonResult<u64> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(exe).map_err(|e| symbol(format!("{}: {e}", exe.display())))?;
    let file =
        object::File::parse(&*data).map_err(|e| symbol(format!("{}: {e}", exe.display())))?;
    file.symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name() == Ok(name) && s.address() != 0)
        .map(|s| s.address())
        .ok_or_else(|| symbol(format!("no function {name:?} in {}", exe.display())))
}

fn is_pie(exe: &Path) -> MonResult<bool> {
    use object::Object;
    let data = std::fs::read(exe).map_err(|e| symbol(format!("{}: {e}", exe.display())))?;
    let file =
        object::File::parse(&*data).map_err(|e| symbol(format!("{}: {e}", exe.display())))?;
    Ok(file.kind() == object::ObjectKind::Dynamic)
}
/// This host's name (from /proc; `unknown` if unreadable).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// An asynchronous service request (OMIS section 5.2): an event and the actions to run
/// at each occurrence; stored disabled until `enable`.
#[derive(Debug, Clone)]
pub struct AsyncRequest {
    /// The event definition (its id is the request id).
    pub event: BasicRequest,
    /// What runs when the event occurs.
    pub actions: ActionList,
    /// Whether occurrences are being looked for.
    pub enabled: bool,
}

/// Whether a stored event definition matches an occurrence with `key` (the breakpoint's
/// function or address, the user event's number).
fn matches(def: &BasicRequest, key: Option<&Value>, params: &[Value]) -> bool {
    match (def.service.as_str(), def.params.first(), key) {
        ("breakpoint", Some(Value::Int(addr)), _) => params.get(1) == Some(&Value::Int(*addr)),
        ("breakpoint", Some(name), Some(k)) => name == k,
        ("user_event", Some(n), Some(k)) => n == k,
        ("user_event", _, _) => false,
        _ => true,
    }
}

/// `$0` is this node, `$n` the occurrence's n-th parameter.
fn substitute(v: &Value, node: u32, params: &[Value]) -> Value {
    match v {
        Value::Ref(0) => Value::Int(i64::from(node)),
        Value::Ref(n) => params
            .get(*n as usize - 1)
            .cloned()
            .unwrap_or(Value::List(Vec::new())),
        Value::List(items) => {
            Value::List(items.iter().map(|x| substitute(x, node, params)).collect())
        }
        other => other.clone(),
    }
}

/// Runs the actions of every enabled request waiting for `service` (with `key` and the
/// occurrence's `params`); returns one reply text per request that ran.
pub fn run_event_actions(
    registry: &Registry<Monitor>,
    m: &mut Monitor,
    service: &str,
    key: Option<&Value>,
    params: &[Value],
) -> Vec<String> {
    let due: Vec<ActionList> = m
        .requests
        .values()
        .filter(|r| r.enabled && r.event.service == service && matches(&r.event, key, params))
        .map(|r| r.actions.clone())
        .collect();
    let mut out = Vec::new();
    for actions in due {
        let mut replies = Vec::new();
        for a in actions.actions() {
            let mut a = a.clone();
            a.params = a
                .params
                .iter()
                .map(|v| substitute(v, m.rank, params))
                .collect();
            let outcome = registry.call(m, &a);
            replies.push(BasicReply::answer(a.id, &a.service, outcome));
        }
        out.push(sdm_omis::Reply(replies).to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_starts_with_the_first_job_after_what_was_prepared() {
        let (tx, _rx) = mpsc::channel(16);
        let (m, _events) = MonitorHandle::new(5, 8, tx);
        m.prepare(|m| m.servers = 64);
        m.prepare(|m| m.firing = 3);
        assert!(!m.started(), "prepared set-up started the thread");
        let seen = m.submit(|m| (m.servers, m.firing)).blocking_recv().unwrap();
        assert!(m.started());
        assert_eq!(seen, (64, 3));
        // Once running, prepared set-up is just the next job.
        m.prepare(|m| m.servers = 65);
        assert_eq!(m.submit(|m| m.servers).blocking_recv().unwrap(), 65);
    }

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
        let e = m
            .submit(|m| m.registers())
            .blocking_recv()
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ProcessState, "{e}");
        m.submit(|m| m.kill()).blocking_recv().unwrap().unwrap();
        assert_eq!(
            "tty".parse::<IoMode>().unwrap_err().kind(),
            ErrorKind::BadInput
        );
    }
}
