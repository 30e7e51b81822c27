//! [`Error`]: what failed in a daemon, its monitor or a service, naming the server id, the
//! pid, the address or the plugin involved; callers ask [`Error::kind`], not the text.

use std::fmt;

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The monitor has no process: none was started or attached.
    NoProcess,
    /// The process is not in a state that allows the request (ended, still alive, not
    /// stopped).
    ProcessState,
    /// A system call on the process failed (start, signal, ptrace, /proc).
    Process,
    /// Reading or writing the process's memory at an address failed.
    Memory,
    /// A function name or address could not be resolved in the program.
    Symbol,
    /// A bad request or input line (a counters line, a stdio mode, a service payload).
    BadInput,
    /// A service plugin could not be loaded (missing file, missing symbol, wrong ABI
    /// version, init failed).
    PluginLoad,
    /// No service has the name a command was tagged with.
    UnknownService,
    /// Daemon start-up failed: binding, reaching the parent or the front-end, the init
    /// command.
    Startup,
    /// A link failed while the node ran.
    Link,
}

/// A failure in sdm-server: the message names what failed and the server id, address or
/// plugin involved; [`Error::kind`] says what kind of failure it is, [`Error::pid`] which
/// process it is about.
#[derive(Debug, thiserror::Error)]
#[error("{}", inner.what)]
pub struct Error {
    inner: Box<Inner>,
}

#[derive(Debug)]
struct Inner {
    kind: ErrorKind,
    what: String,
    pid: Option<u32>,
}

impl Error {
    /// A failure of `kind`, described by `what`.
    pub(crate) fn new(kind: ErrorKind, what: impl Into<String>) -> Self {
        Self {
            inner: Box::new(Inner {
                kind,
                what: what.into(),
                pid: None,
            }),
        }
    }

    /// The same error, about process `pid`. The message need not repeat it: monitor errors
    /// travel in replies, and identical replies of many servers merge only if they do not
    /// name each server's own pid.
    pub(crate) fn with_pid(mut self, pid: u32) -> Self {
        self.inner.pid = Some(pid);
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The process the failure is about, when there is one.
    pub fn pid(&self) -> Option<u32> {
        self.inner.pid
    }

    /// Whether the monitor had no process to act on.
    pub fn is_no_process(&self) -> bool {
        self.kind() == ErrorKind::NoProcess
    }

    /// Whether a memory access at an address failed.
    pub fn is_memory(&self) -> bool {
        self.kind() == ErrorKind::Memory
    }

    /// Whether a service plugin did not load.
    pub fn is_plugin_load(&self) -> bool {
        self.kind() == ErrorKind::PluginLoad
    }

    /// Whether input (a request, a counters line) was refused.
    pub fn is_bad_input(&self) -> bool {
        self.kind() == ErrorKind::BadInput
    }
}

/// A result of sdm-server.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Start-up failures from lower layers, named with what was being done.
pub(crate) fn startup(context: impl fmt::Display, e: impl fmt::Display) -> Error {
    Error::new(ErrorKind::Startup, format!("{context}: {e}"))
}
