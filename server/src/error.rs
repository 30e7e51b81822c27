//! [`Error`]: what failed in a daemon, its monitor or a service, naming the server id, the
//! pid, the address or the plugin involved; callers ask [`Error::kind`], not the text.

use std::error::Error as StdError;
use std::fmt;

/// `e`'s message followed by each error underneath, `what: why: why`, for printing an
/// error once with its causes. A cause whose text is already in the message is not
/// repeated: many messages name their cause (replies carry only the message), and anyhow's
/// `{:#}` would print it twice.
pub fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let why = cause.to_string();
        if !why.is_empty() && !text.contains(&why) {
            text.push_str(": ");
            text.push_str(&why);
        }
        next = cause.source();
    }
    text
}

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
    /// A service plugin's handler failed, or did not reply exactly once.
    PluginCall,
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
/// process it is about, and [`std::error::Error::source`] the error underneath, if any
/// (printed by [`Error::chain`]).
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    what: String,
    pid: Option<u32>,
    source: Option<Box<dyn StdError + Send + Sync>>,
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("sdm_server::Error")
            .field("kind", &self.inner.kind)
            .field("what", &self.inner.what)
            .field("pid", &self.inner.pid)
            .field("source", &self.inner.source)
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.what)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

impl Error {
    /// A failure of `kind`, described by `what`.
    pub(crate) fn new(kind: ErrorKind, what: impl Into<String>) -> Self {
        Self {
            inner: Box::new(Inner {
                kind,
                what: what.into(),
                pid: None,
                source: None,
            }),
        }
    }

    /// A failure of `kind` caused by `source`; `what` says what was being done.
    pub(crate) fn with_source(
        kind: ErrorKind,
        what: impl Into<String>,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        let mut e = Self::new(kind, what);
        e.inner.source = Some(source.into());
        e
    }

    /// The same error, caused by `source`; the message stays as it is.
    pub(crate) fn caused_by(mut self, source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        self.inner.source = Some(source.into());
        self
    }

    /// The message followed by each error underneath: `what: why: why` (see [`chain`]).
    pub fn chain(&self) -> String {
        chain(self)
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
pub(crate) fn startup(
    context: impl fmt::Display,
    e: impl Into<Box<dyn StdError + Send + Sync>>,
) -> Error {
    Error::with_source(ErrorKind::Startup, context.to_string(), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error underneath is kept as the source, not folded into the message; `chain`
    /// prints the whole story.
    #[test]
    fn a_wrapped_error_is_the_source() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "port taken");
        let e = startup("server 3: binding 0.0.0.0", io);
        assert_eq!(e.kind(), ErrorKind::Startup);
        assert_eq!(e.to_string(), "server 3: binding 0.0.0.0");
        let source = e.source().expect("a source");
        assert_eq!(
            source.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::AddrInUse)
        );
        assert_eq!(e.chain(), "server 3: binding 0.0.0.0: port taken");
    }

    /// A cause the message already names (as a thiserror `{0}` beside `#[source]` does) is
    /// printed once; a cause it does not name is appended.
    #[test]
    fn a_cause_named_in_the_message_prints_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("no process 7: {0}")]
        struct Named(#[source] std::io::Error);
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        assert_eq!(chain(&Named(io())), "no process 7: gone");
        let outer = startup("attaching", Named(io()));
        assert_eq!(outer.chain(), "attaching: no process 7: gone");
    }
}
