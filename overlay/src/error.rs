//! [`LinkError`]: why a link could not be set up (connect, handshake, accept), naming the
//! peer or address involved; opaque, with [`LinkError::kind`] and `is_*` questions.

use std::fmt;
use std::io;

/// What sort of failure a [`LinkError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LinkErrorKind {
    /// Connecting, reading or writing failed (the transport's error is the source).
    Io,
    /// No connection or handshake within the limit.
    Timeout,
    /// A peer could not prove the session key: not part of this session.
    AuthFailed,
    /// A live peer that is not the node asked for (it refused the hello).
    WrongPeer,
    /// The peer broke the handshake protocol (a bad or unexpected frame).
    Protocol,
    /// The peer closed the connection during the handshake.
    Closed,
    /// There is no address to connect to (the server never reported one).
    NoAddress,
}

/// Why a link could not be set up: its kind, the peer or address involved, and a message
/// saying what happened (e.g. `5 at tcp://10.0.0.7:7000: tcp://10.0.0.7:7000 is 6, not 5
/// (after 20 rounds)`).
pub struct LinkError {
    inner: Box<Inner>,
}

struct Inner {
    kind: LinkErrorKind,
    peer: String,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl LinkError {
    pub(crate) fn new(kind: LinkErrorKind, peer: impl fmt::Display, message: String) -> Self {
        Self {
            inner: Box::new(Inner {
                kind,
                peer: peer.to_string(),
                message,
                source: None,
            }),
        }
    }

    /// An I/O failure with `peer`; the message says what was being done.
    pub(crate) fn io(peer: impl fmt::Display, message: String, source: io::Error) -> Self {
        let mut e = Self::new(LinkErrorKind::Io, peer, message);
        e.inner.source = Some(Box::new(source));
        e
    }

    /// A frame from `peer` that breaks the protocol, refused by `source` (a decoder).
    pub(crate) fn protocol(
        peer: impl fmt::Display,
        message: String,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let mut e = Self::new(LinkErrorKind::Protocol, peer, message);
        e.inner.source = Some(Box::new(source));
        e
    }

    /// The same failure, said again in the words of a caller that knows more (which node,
    /// after how many rounds).
    pub(crate) fn context(self, peer: impl fmt::Display, message: String) -> Self {
        let mut e = Self::new(self.inner.kind, peer, message);
        e.inner.source = self.inner.source;
        e
    }

    /// What sort of failure this is.
    pub fn kind(&self) -> LinkErrorKind {
        self.inner.kind
    }

    /// The peer (its address, or the name it gave) or the address involved.
    pub fn peer(&self) -> &str {
        &self.inner.peer
    }

    /// Whether nothing (or not enough) came within the time limit.
    pub fn is_timeout(&self) -> bool {
        self.inner.kind == LinkErrorKind::Timeout
    }

    /// Whether a live peer said it is not the node asked for.
    pub fn is_wrong_peer(&self) -> bool {
        self.inner.kind == LinkErrorKind::WrongPeer
    }

    /// Whether the session key was not proved.
    pub fn is_auth_failed(&self) -> bool {
        self.inner.kind == LinkErrorKind::AuthFailed
    }
}

impl fmt::Debug for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkError")
            .field("kind", &self.inner.kind)
            .field("peer", &self.inner.peer)
            .field("message", &self.inner.message)
            .field("source", &self.inner.source)
            .finish()
    }
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)
    }
}

impl std::error::Error for LinkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<LinkError> for io::Error {
    fn from(e: LinkError) -> Self {
        let kind = match e.kind() {
            LinkErrorKind::Io => e
                .inner
                .source
                .as_deref()
                .and_then(|s| s.downcast_ref::<io::Error>())
                .map_or(io::ErrorKind::Other, io::Error::kind),
            LinkErrorKind::Timeout => io::ErrorKind::TimedOut,
            LinkErrorKind::AuthFailed => io::ErrorKind::PermissionDenied,
            LinkErrorKind::WrongPeer => io::ErrorKind::ConnectionRefused,
            LinkErrorKind::Protocol => io::ErrorKind::InvalidData,
            LinkErrorKind::Closed => io::ErrorKind::ConnectionAborted,
            LinkErrorKind::NoAddress => io::ErrorKind::NotFound,
        };
        io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_peer_and_text_survive_context_and_conversion() {
        let e = LinkError::io(
            "tcp://10.0.0.7:7000",
            "connect to tcp://10.0.0.7:7000 failed".into(),
            io::Error::from(io::ErrorKind::ConnectionRefused),
        );
        assert_eq!(e.kind(), LinkErrorKind::Io);
        let message = format!("5 at tcp://10.0.0.7:7000: {e}");
        let e = e.context("tcp://10.0.0.7:7000", message);
        assert_eq!(e.peer(), "tcp://10.0.0.7:7000");
        assert!(std::error::Error::source(&e).is_some());
        let io: io::Error = e.into();
        assert_eq!(io.kind(), io::ErrorKind::ConnectionRefused);
        let t = LinkError::new(LinkErrorKind::Timeout, "x", "no handshake".into());
        assert!(t.is_timeout() && !t.is_auth_failed() && !t.is_wrong_peer());
        assert_eq!(io::Error::from(t).kind(), io::ErrorKind::TimedOut);
        // A decoder's refusal is the source of a protocol error.
        let bad = sdm_proto::IdSet::from_bytes(&[9]).unwrap_err();
        let p = LinkError::protocol("x", format!("bad frame from x: {bad}"), bad);
        assert_eq!(p.kind(), LinkErrorKind::Protocol);
        let source = std::error::Error::source(&p);
        assert!(
            source.is_some_and(|s| s.is::<sdm_proto::IdSetError>()),
            "{p:?}"
        );
    }
}
