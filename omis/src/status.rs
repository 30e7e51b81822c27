//! Typed failures of OMIS services: [`ServiceError`] with its [`ErrorKind`], and the kind a
//! failed basic reply carries to the tool (`3 [0-3] stack_backtrace!not_stopped("…")`), so
//! the tool tells a failure from a result by a field, never by the result's text.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// What kind of failure a service had; printed in a failed reply after its service name
/// (`stop!no_process(…)`) by its [`ErrorKind::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request text could not be read (a reply to no service: `0 [] error!bad_request`).
    BadRequest,
    /// A parameter is missing, of the wrong type or out of range.
    BadArgument,
    /// No service has the name asked for.
    UnknownService,
    /// The monitor has no process to act on (none started or attached).
    NoProcess,
    /// The process is not in a state that allows the request (running, not stopped).
    WrongState,
    /// The process has ended (the reply's results say how).
    Ended,
    /// The service gave up waiting (a debugger that did not answer).
    TimedOut,
    /// The service cannot do this here (not built in, not on this platform).
    Unsupported,
    /// A service or extension could not be registered (a name or prefix clash).
    Registration,
    /// The service ran and failed (a system call, the debugger, memory access).
    Failed,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::BadRequest,
        ErrorKind::BadArgument,
        ErrorKind::UnknownService,
        ErrorKind::NoProcess,
        ErrorKind::WrongState,
        ErrorKind::Ended,
        ErrorKind::TimedOut,
        ErrorKind::Unsupported,
        ErrorKind::Registration,
        ErrorKind::Failed,
    ];

    /// The kind's name in reply text: `bad_argument`, `no_process`, ...
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::BadArgument => "bad_argument",
            ErrorKind::UnknownService => "unknown_service",
            ErrorKind::NoProcess => "no_process",
            ErrorKind::WrongState => "wrong_state",
            ErrorKind::Ended => "ended",
            ErrorKind::TimedOut => "timed_out",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Registration => "registration",
            ErrorKind::Failed => "failed",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no [`ErrorKind`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown failure kind '{0}'")]
pub struct UnknownKind(pub String);

impl FromStr for ErrorKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, UnknownKind> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownKind(s.to_owned()))
    }
}

/// A service failed, or could not be found or registered: its [`ErrorKind`], a message
/// saying why, and the error underneath, if any.
#[derive(Debug, Clone)]
pub struct ServiceError {
    kind: ErrorKind,
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl ServiceError {
    /// A failure of `kind`, described by `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A failure of `kind` caused by `source`; the message says what was being done.
    pub fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// A bad parameter: missing, of the wrong type or out of range.
    pub fn bad_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadArgument, message)
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the errors underneath.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The message followed by each error underneath (`what: why: why`), as a reply
    /// carries it (the chain itself does not travel).
    pub fn full_message(&self) -> String {
        let mut text = self.message.clone();
        let mut next = std::error::Error::source(self);
        while let Some(e) = next {
            let e_text = e.to_string();
            // A message made from its source already says it.
            if !text.ends_with(&e_text) {
                text.push_str(": ");
                text.push_str(&e_text);
            }
            next = e.source();
        }
        text
    }
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServiceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Two errors are equal when their kinds and messages are (sources are not compared).
impl PartialEq for ServiceError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for ServiceError {}
