//! [`Error`]: the one error type of sdm-client, opaque like hyper's: callers ask what sort
//! of failure it was (`is_timeout()`, `is_closed()`, ...) and print it; they do not match.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// What went wrong in a session: launching, connecting, or on the master link. The text
/// names the id, address, program or pid involved; the `is_*` methods say which sort of
/// failure it was.
#[derive(thiserror::Error)]
#[error(transparent)]
pub struct Error {
    inner: Box<ErrorKind>,
}

/// The sorts of failure (private: callers use the `is_*` methods).
#[derive(Debug, thiserror::Error)]
enum ErrorKind {
    /// The options or an argument cannot work (no servers, unknown transport, a plugin
    /// that does not load, an op that was never sent).
    #[error("{what}")]
    Invalid {
        what: String,
        /// The error underneath (a parser's, a plugin loader's), when one caused it.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A launcher or the `sdm` binary failed to start processes.
    #[error("launching {what}: {source}")]
    Launch {
        what: String,
        #[source]
        source: sdm_deploy::LaunchError,
    },
    /// The `sdm` binary is nowhere to be found.
    #[error("cannot find the sdm binary near {}; set SDM_BIN", near.display())]
    NoBinary { near: PathBuf },
    /// Something did not happen within its deadline.
    #[error("{what} within {after:?}")]
    Timeout { what: String, after: Duration },
    /// The master link is closed (lost, or the session was shut down).
    #[error("master link closed: {reason}")]
    Closed { reason: String },
    /// Writing an op to the master failed; the link is closed.
    #[error("master link closed: sending op {op}: {source}")]
    Write {
        op: u64,
        #[source]
        source: WriteFailure,
    },
    /// An I/O failure on a socket or file, with what was being done.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("sdm_client::Error")
            .field(&self.inner)
            .finish()
    }
}

impl Error {
    fn new(kind: ErrorKind) -> Self {
        Self {
            inner: Box::new(kind),
        }
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid {
            what: what.into(),
            source: None,
        })
    }

    /// An invalid option or argument, caused by `source` (kept as the error's source).
    pub(crate) fn invalid_because(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::new(ErrorKind::Invalid {
            what: what.into(),
            source: Some(source.into()),
        })
    }

    pub(crate) fn launch(what: impl Into<String>, source: sdm_deploy::LaunchError) -> Self {
        Self::new(ErrorKind::Launch {
            what: what.into(),
            source,
        })
    }

    pub(crate) fn no_binary(near: PathBuf) -> Self {
        Self::new(ErrorKind::NoBinary { near })
    }

    pub(crate) fn timeout(what: impl Into<String>, after: Duration) -> Self {
        Self::new(ErrorKind::Timeout {
            what: what.into(),
            after,
        })
    }

    pub(crate) fn closed(reason: impl Into<String>) -> Self {
        Self::new(ErrorKind::Closed {
            reason: reason.into(),
        })
    }

    pub(crate) fn write(op: u64, source: WriteFailure) -> Self {
        Self::new(ErrorKind::Write { op, source })
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::new(ErrorKind::Io {
            context: context.into(),
            source,
        })
    }

    /// Whether something did not happen within its deadline (the master did not connect).
    pub fn is_timeout(&self) -> bool {
        matches!(*self.inner, ErrorKind::Timeout { .. })
    }

    /// Whether the master link is closed: lost, or the session was shut down.
    pub fn is_closed(&self) -> bool {
        matches!(
            *self.inner,
            ErrorKind::Closed { .. } | ErrorKind::Write { .. }
        )
    }

    /// Whether processes could not be started (a launcher failed, no `sdm` binary).
    pub fn is_launch(&self) -> bool {
        matches!(
            *self.inner,
            ErrorKind::Launch { .. } | ErrorKind::NoBinary { .. }
        )
    }

    /// Whether the options or an argument cannot work (fix the call, not the machine).
    pub fn is_invalid(&self) -> bool {
        matches!(*self.inner, ErrorKind::Invalid { .. })
    }

    /// Whether an I/O operation failed (binding, accepting, writing to the master).
    pub fn is_io(&self) -> bool {
        matches!(*self.inner, ErrorKind::Io { .. })
    }
}

/// Why the master link's writer failed, shared by every op that waited on it.
pub(crate) type WriteFailure = std::sync::Arc<dyn std::error::Error + Send + Sync>;

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_constructor_answers_exactly_its_own_kind() {
        let io = || std::io::Error::other("boom");
        let all = [
            Error::invalid("no servers"),
            Error::launch(
                "sdm server on 4 ranks",
                sdm_deploy::LaunchError::NoRank("none".into()),
            ),
            Error::no_binary(PathBuf::from("/x")),
            Error::timeout("the master did not connect", Duration::from_secs(1)),
            Error::closed("master closed the connection"),
            Error::io("binding tcp://127.0.0.1:0", io()),
        ];
        let kinds = |e: &Error| {
            [
                e.is_invalid(),
                e.is_launch(),
                e.is_timeout(),
                e.is_closed(),
                e.is_io(),
            ]
        };
        let expected = [
            [true, false, false, false, false],
            [false, true, false, false, false],
            [false, true, false, false, false],
            [false, false, true, false, false],
            [false, false, false, true, false],
            [false, false, false, false, true],
        ];
        for (e, want) in all.iter().zip(expected) {
            assert_eq!(kinds(e), want, "{e}");
        }
        // The source chain is kept for launch and I/O failures.
        assert!(std::error::Error::source(&all[1]).is_some());
    }
}
