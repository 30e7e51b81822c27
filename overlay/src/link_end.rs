//! Why a link ended, as a value: the driver reports it to the node, the node to its logs
//! and to the replies of the ids lost with the link, and re-attachment is decided by it.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::error::{LinkError, LinkErrorKind};

/// Why a link to a parent or a child ended (or never came up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEnd {
    /// The peer said goodbye: an orderly end of the session, after which a node does not
    /// look for a new parent.
    Goodbye,
    /// The peer closed the connection (its process ended, or it dropped the link).
    Closed,
    /// Reading or writing failed with this kind of I/O error.
    Io(io::ErrorKind),
    /// The peer sent what this node cannot take (a bad frame, a flow-control breach).
    Protocol(String),
    /// Nothing was heard from the peer for this long (the liveness dead-after).
    Silent(Duration),
    /// The link never came up: connecting to the peer failed.
    Unreachable {
        /// Why, as the set-up classified it.
        kind: LinkErrorKind,
        /// The set-up's own words (address, rounds tried).
        detail: String,
    },
}

impl LinkEnd {
    /// Whether a node whose parent link ended this way should look for another parent:
    /// every end but an orderly goodbye.
    pub fn reattaches(&self) -> bool {
        !matches!(self, LinkEnd::Goodbye)
    }

    /// This end as the wire carries it with the ids lost ([`sdm_proto::Aggregate::link_end`]).
    pub fn kind(&self) -> sdm_proto::LinkEndKind {
        use sdm_proto::LinkEndKind as K;
        match self {
            LinkEnd::Goodbye => K::Goodbye,
            LinkEnd::Closed => K::Closed,
            LinkEnd::Io(_) => K::Io,
            LinkEnd::Protocol(_) => K::Protocol,
            LinkEnd::Silent(_) => K::Silent,
            LinkEnd::Unreachable { .. } => K::Unreachable,
        }
    }

    /// The end of a link that failed reading or writing frames.
    pub(crate) fn from_wire(e: &sdm_proto::WireError) -> Self {
        match e {
            sdm_proto::WireError::Io(e) => LinkEnd::Io(e.kind()),
            other => LinkEnd::Protocol(other.to_string()),
        }
    }
}

impl From<&LinkError> for LinkEnd {
    fn from(e: &LinkError) -> Self {
        LinkEnd::Unreachable {
            kind: e.kind(),
            detail: e.to_string(),
        }
    }
}

impl fmt::Display for LinkEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkEnd::Goodbye => f.write_str("the peer ended the session"),
            LinkEnd::Closed => f.write_str("the peer closed the connection"),
            LinkEnd::Io(kind) => write!(f, "i/o error: {kind}"),
            LinkEnd::Protocol(detail) => write!(f, "protocol error: {detail}"),
            LinkEnd::Silent(d) => write!(f, "the peer sent nothing for {d:?} (keepalive)"),
            LinkEnd::Unreachable { detail, .. } => write!(f, "could not connect: {detail}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a goodbye keeps a node from looking for a new parent.
    #[test]
    fn every_end_but_goodbye_reattaches() {
        assert!(!LinkEnd::Goodbye.reattaches());
        for end in [
            LinkEnd::Closed,
            LinkEnd::Io(io::ErrorKind::ConnectionReset),
            LinkEnd::Protocol("bad frame".into()),
            LinkEnd::Silent(Duration::from_secs(10)),
        ] {
            assert!(end.reattaches(), "{end}");
        }
    }
}
