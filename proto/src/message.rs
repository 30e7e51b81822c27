//! [`Message`]: a decoded and validated envelope, with its id-sets parsed, and the
//! conversions to and from the protobuf [`crate::pb::Envelope`].

use bytes::Bytes;
use prost::Message as _;

use crate::idset::{IdSet, IdSetError};
use crate::pb;

/// The wire version this build speaks; frames of any other version are refused.
pub const WIRE_VERSION: u32 = 1;

/// What an envelope is for (see `sdm.proto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A request fanned out to the destination.
    Command,
    /// One merged group of replies.
    Reply,
    /// An unsolicited event.
    Event,
    /// Application stdio.
    Stdio,
    /// Link management.
    Control,
}

/// How an operation decides it is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SyncMode {
    /// Wait for every expected id (replied or lost).
    #[default]
    WaitAll,
    /// Forward each reply as soon as it arrives.
    DontWait,
    /// Wait for all, at most this many milliseconds; the missing ids time out.
    Timeout(u32),
}

/// What happened to the ids of a reply group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// They replied with the payload.
    Replied,
    /// Their link died; the payload is the reason.
    Lost,
    /// They did not answer in time.
    TimedOut,
}

/// The aggregate element of a message (the seed's `sdm_aggregate`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Aggregate {
    /// Filter name; empty = identical-merge.
    pub filter: String,
    /// Completion rule.
    pub sync: SyncMode,
    /// Upstream: XXH3-64 of the payload (a hint; merges confirm byte for byte).
    pub payload_hash: u64,
    /// Upstream: status of the group (replies only).
    pub status: Option<Status>,
}

/// A validated envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// What the message is for.
    pub kind: Kind,
    /// Operation id (commands and their replies share it).
    pub op: u64,
    /// Who should receive it (commands).
    pub dest: IdSet,
    /// Who produced it (replies, events).
    pub source: IdSet,
    /// Merge configuration or description.
    pub aggregate: Aggregate,
    /// Opaque bytes.
    pub payload: Bytes,
    /// Commands: the service that answers the payload at each server; empty means the
    /// built-in `sdm` service (see `sdm.proto`).
    pub service: String,
}

/// Why a frame was refused. The connection it came on is closed; nothing else is touched.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The link failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A length prefix announced more than the maximum frame size.
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// Announced length.
        len: u64,
        /// Configured maximum.
        max: usize,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame ({0} bytes of it received)")]
    Truncated(usize),
    /// The frame is not a protobuf envelope.
    #[error("frame is not a valid envelope: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// The envelope has a version this build does not speak.
    #[error("envelope version {got} is not supported (this build speaks {WIRE_VERSION})")]
    Version {
        /// Version found.
        got: u32,
    },
    /// A field holds a value outside its enum.
    #[error("envelope field {field} has unknown value {value}")]
    UnknownEnum {
        /// Field name.
        field: &'static str,
        /// Value found.
        value: i32,
    },
    /// An id-set field could not be decoded.
    #[error("envelope field {field}: {err}")]
    IdSet {
        /// Field name.
        field: &'static str,
        /// Decoder error.
        err: IdSetError,
    },
}

/// XXH3-64 of a payload: the merge hash carried upstream.
pub fn payload_hash(payload: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(payload)
}

impl Message {
    /// A command to `dest`.
    pub fn command(op: u64, dest: IdSet, sync: SyncMode, payload: impl Into<Bytes>) -> Self {
        Self {
            kind: Kind::Command,
            op,
            dest,
            source: IdSet::new(),
            aggregate: Aggregate {
                sync,
                ..Aggregate::default()
            },
            payload: payload.into(),
            service: String::new(),
        }
    }

    /// The same command addressed to `service` (see [`Message::service`]).
    pub fn for_service(mut self, service: impl Into<String>) -> Self {
        self.service = service.into();
        self
    }

    /// A reply group: `source` ended with `status` and `payload`.
    pub fn reply(op: u64, source: IdSet, status: Status, payload: Bytes) -> Self {
        Self {
            kind: Kind::Reply,
            op,
            dest: IdSet::new(),
            source,
            aggregate: Aggregate {
                payload_hash: payload_hash(&payload),
                status: Some(status),
                ..Aggregate::default()
            },
            payload,
            service: String::new(),
        }
    }

    /// The protobuf form.
    pub fn to_pb(&self) -> pb::Envelope {
        let (sync, timeout_ms) = match self.aggregate.sync {
            SyncMode::WaitAll => (pb::SyncMode::WaitAll, 0),
            SyncMode::DontWait => (pb::SyncMode::DontWait, 0),
            SyncMode::Timeout(ms) => (pb::SyncMode::Timeout, ms),
        };
        let status = match self.aggregate.status {
            None => pb::Status::Unspecified,
            Some(Status::Replied) => pb::Status::Replied,
            Some(Status::Lost) => pb::Status::Lost,
            Some(Status::TimedOut) => pb::Status::TimedOut,
        };
        let kind = match self.kind {
            Kind::Command => pb::Kind::Command,
            Kind::Reply => pb::Kind::Reply,
            Kind::Event => pb::Kind::Event,
            Kind::Stdio => pb::Kind::Stdio,
            Kind::Control => pb::Kind::Control,
        };
        let set = |s: &IdSet| {
            if s.is_empty() {
                Bytes::new()
            } else {
                Bytes::from(s.to_bytes())
            }
        };
        pb::Envelope {
            version: WIRE_VERSION,
            kind: kind as i32,
            op_id: self.op,
            destination: set(&self.dest),
            source: set(&self.source),
            aggregate: Some(pb::Aggregate {
                filter: self.aggregate.filter.clone(),
                sync: sync as i32,
                timeout_ms,
                payload_hash: self.aggregate.payload_hash,
                status: status as i32,
            }),
            payload: self.payload.clone(),
            service: self.service.clone(),
        }
    }

    /// Encodes the message as one frame body (without the length prefix).
    pub fn encode(&self) -> Bytes {
        Bytes::from(self.to_pb().encode_to_vec())
    }

    /// Size of [`Message::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        self.to_pb().encoded_len()
    }

    /// Decodes and validates one frame body.
    pub fn decode(frame: Bytes) -> Result<Self, WireError> {
        Self::from_pb(pb::Envelope::decode(frame)?)
    }

    /// Validates a protobuf envelope.
    pub fn from_pb(env: pb::Envelope) -> Result<Self, WireError> {
        if env.version != WIRE_VERSION {
            return Err(WireError::Version { got: env.version });
        }
        let bad = |field, value| WireError::UnknownEnum { field, value };
        let kind = match pb::Kind::try_from(env.kind).map_err(|_| bad("kind", env.kind))? {
            pb::Kind::Unspecified => return Err(bad("kind", env.kind)),
            pb::Kind::Command => Kind::Command,
            pb::Kind::Reply => Kind::Reply,
            pb::Kind::Event => Kind::Event,
            pb::Kind::Stdio => Kind::Stdio,
            pb::Kind::Control => Kind::Control,
        };
        let agg = env.aggregate.unwrap_or_default();
        let sync = match pb::SyncMode::try_from(agg.sync).map_err(|_| bad("sync", agg.sync))? {
            pb::SyncMode::Unspecified | pb::SyncMode::WaitAll => SyncMode::WaitAll,
            pb::SyncMode::DontWait => SyncMode::DontWait,
            pb::SyncMode::Timeout => SyncMode::Timeout(agg.timeout_ms),
        };
        let status =
            match pb::Status::try_from(agg.status).map_err(|_| bad("status", agg.status))? {
                pb::Status::Unspecified => None,
                pb::Status::Replied => Some(Status::Replied),
                pb::Status::Lost => Some(Status::Lost),
                pb::Status::TimedOut => Some(Status::TimedOut),
            };
        let set = |field, b: &Bytes| {
            if b.is_empty() {
                Ok(IdSet::new())
            } else {
                IdSet::from_bytes(b).map_err(|err| WireError::IdSet { field, err })
            }
        };
        Ok(Self {
            kind,
            op: env.op_id,
            dest: set("destination", &env.destination)?,
            source: set("source", &env.source)?,
            aggregate: Aggregate {
                filter: agg.filter,
                sync,
                payload_hash: agg.payload_hash,
                status,
            },
            payload: env.payload,
            service: env.service,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_version() {
        let m = Message::command(7, IdSet::all(1000), SyncMode::Timeout(250), "1 [] stop([])");
        assert_eq!(Message::decode(m.encode()).unwrap(), m);
        let mut env = m.to_pb();
        env.version = 9;
        let e = Message::from_pb(env).unwrap_err();
        assert!(matches!(e, WireError::Version { got: 9 }), "{e}");
        let s = Message::command(
            8,
            IdSet::range(0..=7),
            SyncMode::WaitAll,
            &b"\0\xff\xfe raw"[..],
        )
        .for_service("checksum");
        assert_eq!(Message::decode(s.encode()).unwrap(), s);
        let r = Message::reply(7, IdSet::range(0..=999), Status::Lost, Bytes::from("gone"));
        assert_eq!(Message::decode(r.encode()).unwrap(), r);
    }

    #[test]
    fn unknown_kind_is_refused() {
        let mut env = Message::command(1, IdSet::single(0), SyncMode::WaitAll, "x").to_pb();
        env.kind = 42;
        assert!(matches!(
            Message::from_pb(env),
            Err(WireError::UnknownEnum {
                field: "kind",
                value: 42
            })
        ));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Message::decode(Bytes::from(b));
        }

        #[test]
        fn mutated_frames_never_panic(idx in any::<prop::sample::Index>(), byte in any::<u8>()) {
            let m = Message::reply(3, IdSet::range(5..=900), Status::Replied, Bytes::from("payload"));
            let mut b = m.encode().to_vec();
            let i = idx.index(b.len());
            b[i] = byte;
            let _ = Message::decode(Bytes::from(b));
        }
    }
}
