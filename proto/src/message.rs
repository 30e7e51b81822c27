//! [`Message`]: a decoded and validated envelope, with its id-sets parsed, and the
//! conversions to and from the protobuf [`crate::pb::Envelope`].

use std::sync::Arc;

use bytes::{BufMut, Bytes};

use crate::idset::{IdSet, IdSetError, put_key, put_varint};
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
    /// They answered, but the op's filter refused their replies (or could not be made);
    /// the payload is the filter's error. Their servers are alive: not lost.
    Error,
}

/// How the link that lost a group's ids ended ([`Aggregate::link_end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkEndKind {
    /// The peer said goodbye: the session ended in order.
    Goodbye,
    /// The peer closed the connection.
    Closed,
    /// Reading or writing failed.
    Io,
    /// The peer sent what the node cannot take.
    Protocol,
    /// Nothing was heard from the peer for the keepalive dead-after.
    Silent,
    /// The link never came up.
    Unreachable,
}

/// The aggregate element of a message (the seed's `sdm_aggregate`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Aggregate {
    /// Filter name; empty = identical-merge.
    pub filter: FilterName,
    /// Completion rule.
    pub sync: SyncMode,
    /// Upstream: XXH3-64 of the payload (a hint; merges confirm byte for byte).
    pub payload_hash: u64,
    /// Upstream: status of the group (replies only).
    pub status: Option<Status>,
    /// Upstream, lost ids: how the link they were behind ended (`None` for other groups,
    /// and for ids no node can reach).
    pub link_end: Option<LinkEndKind>,
}

/// A name as an envelope carries it, a filter's or a service's: the empty name (the
/// identical merge and the built-in service, and every reply) holds nothing, so making and
/// dropping a message touches no reference count; a given name is shared by the copies of a
/// command for each child and by the commands a link decodes one after another (one
/// allocation, not one per frame or per child). Reads as a `&str`.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Name(Option<Arc<str>>);

/// A command's filter name ([`Aggregate::filter`]).
pub type FilterName = Name;

/// A command's service name ([`Message::service`]).
pub type ServiceName = Name;

impl Name {
    fn shared(name: Arc<str>) -> Self {
        Self((!name.is_empty()).then_some(name))
    }

    /// `bytes` as a name, shared with `last` (the name the same field of the previous
    /// frame of a link carried) when they are equal, else checked as UTF-8 and made the
    /// new `last`.
    #[inline(always)]
    fn share(
        bytes: &[u8],
        last: &mut Option<Arc<str>>,
        field: &'static str,
    ) -> Result<Self, WireError> {
        // The empty name (most frames' service, every reply's filter) without a call.
        if bytes.is_empty() {
            return Ok(Name::default());
        }
        Self::share_given(bytes, last, field)
    }

    /// [`Name::share`] of a name that is not empty.
    fn share_given(
        bytes: &[u8],
        last: &mut Option<Arc<str>>,
        field: &'static str,
    ) -> Result<Self, WireError> {
        Ok(match last {
            Some(l) if l.as_bytes() == bytes => Name::shared(Arc::clone(l)),
            _ => Name::shared(last.insert(Arc::from(utf8(bytes, field)?)).clone()),
        })
    }
}

/// `b` as text, or the error naming `field`.
fn utf8<'a>(b: &'a [u8], field: &'static str) -> Result<&'a str, WireError> {
    std::str::from_utf8(b).map_err(|_| WireError::NotUtf8(field))
}

impl std::ops::Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }
}

impl From<&str> for Name {
    fn from(name: &str) -> Self {
        Self((!name.is_empty()).then(|| Arc::from(name)))
    }
}

impl From<&String> for Name {
    fn from(name: &String) -> Self {
        Self::from(name.as_str())
    }
}

impl From<String> for Name {
    fn from(name: String) -> Self {
        Self((!name.is_empty()).then(|| Arc::from(name)))
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        **self == *other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

/// The names the previous frame of a link carried ([`Message::decode_sharing`]): a frame
/// with the same filter or service name shares it, with no allocation or UTF-8 check.
#[derive(Debug, Clone, Default)]
pub struct LastNames {
    filter: Option<Arc<str>>,
    service: Option<Arc<str>>,
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
    pub service: ServiceName,
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
    /// A length-delimited field runs past the end of its message.
    #[error("envelope field {0}: length {1} runs past the end of the frame ({2} bytes left)")]
    Malformed(&'static str, u64, usize),
    /// A string field is not UTF-8.
    #[error("envelope field {0} is not UTF-8")]
    NotUtf8(&'static str),
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
        #[source]
        err: IdSetError,
    },
}

/// An envelope's fields but its names and payload, as read from the wire and not yet
/// checked: what [`Message::validate`] checks, whether read from a frame ([`Fields`]) or
/// taken from prost's struct ([`Message::from_pb`]).
#[derive(Debug, Default, PartialEq)]
struct Head<'a> {
    version: u32,
    kind: i32,
    op: u64,
    dest: &'a [u8],
    source: &'a [u8],
    /// The aggregate's fields but its filter name.
    agg: pb::Aggregate,
}

/// An envelope's fields where they lie in a frame, before they are checked: what
/// [`Message::decode_sharing`] reads.
#[derive(Debug, Default, PartialEq)]
struct Fields<'a> {
    head: Head<'a>,
    /// Checked as UTF-8 (or found equal to the last frame's name) afterwards.
    filter: &'a [u8],
    /// Where the payload lies in the frame.
    payload: std::ops::Range<usize>,
    /// Checked as the filter name is.
    service: &'a [u8],
}

impl<'a> Fields<'a> {
    /// The fields of any envelope protobuf allows (unknown fields skipped, a repeated
    /// field's last value kept, repeated aggregates merged), or why it is not one.
    fn read(frame: &'a [u8]) -> Result<Self, WireError> {
        use prost::encoding::{WireType, decode_key};
        let mut buf: &[u8] = frame;
        let mut version = 0u32;
        let mut kind = 0i32;
        let mut op = 0u64;
        let mut dest: &[u8] = &[];
        let mut source: &[u8] = &[];
        let mut agg = pb::Aggregate::default();
        // Checked as UTF-8 where it is replaced by a later occurrence, or at the end unless
        // it is the previous frame's name (the usual case: then it is known to be text).
        let mut filter: &[u8] = &[];
        let mut payload = 0..0;
        // Checked as the filter name is.
        let mut service: &[u8] = &[];
        while !buf.is_empty() {
            let (tag, wt) = decode_key(&mut buf)?;
            match tag {
                1 => version = varint(wt, &mut buf)? as u32,
                2 => kind = varint(wt, &mut buf)? as i32,
                3 => op = varint(wt, &mut buf)?,
                4 => dest = delimited(wt, &mut buf, "destination")?,
                5 => source = delimited(wt, &mut buf, "source")?,
                6 => {
                    let mut a = delimited(wt, &mut buf, "aggregate")?;
                    while !a.is_empty() {
                        let (tag, wt) = decode_key(&mut a)?;
                        match tag {
                            1 => {
                                utf8(filter, "filter")?;
                                filter = delimited(wt, &mut a, "filter")?;
                            }
                            2 => agg.sync = varint(wt, &mut a)? as i32,
                            3 => agg.timeout_ms = varint(wt, &mut a)? as u32,
                            4 => {
                                prost::encoding::check_wire_type(WireType::SixtyFourBit, wt)?;
                                let (b, rest) = a
                                    .split_first_chunk::<8>()
                                    .ok_or(WireError::Malformed("payload_hash", 8, a.len()))?;
                                agg.payload_hash = u64::from_le_bytes(*b);
                                a = rest;
                            }
                            5 => agg.status = varint(wt, &mut a)? as i32,
                            6 => agg.link_end = varint(wt, &mut a)? as i32,
                            _ => skip(wt, tag, &mut a)?,
                        }
                    }
                }
                7 => {
                    let p = delimited(wt, &mut buf, "payload")?;
                    let at = p.as_ptr() as usize - frame.as_ptr() as usize;
                    payload = at..at + p.len();
                }
                // Each occurrence must be UTF-8, as prost checks it, not only the last.
                8 => {
                    utf8(service, "service")?;
                    service = delimited(wt, &mut buf, "service")?;
                }
                _ => skip(wt, tag, &mut buf)?,
            }
        }
        Ok(Fields {
            head: Head {
                version,
                kind,
                op,
                dest,
                source,
                agg,
            },
            filter,
            payload,
            service,
        })
    }
}

/// A varint field's value (inlined: called for every field of every frame).
#[inline(always)]
fn varint(wt: prost::encoding::WireType, buf: &mut &[u8]) -> Result<u64, WireError> {
    prost::encoding::check_wire_type(prost::encoding::WireType::Varint, wt)?;
    Ok(prost::encoding::decode_varint(buf)?)
}

/// A length-delimited field's bytes, or why `field` runs past the end of `buf`.
#[inline(always)]
fn delimited<'a>(
    wt: prost::encoding::WireType,
    buf: &mut &'a [u8],
    field: &'static str,
) -> Result<&'a [u8], WireError> {
    prost::encoding::check_wire_type(prost::encoding::WireType::LengthDelimited, wt)?;
    let len = prost::encoding::decode_varint(buf)?;
    if len > buf.len() as u64 {
        return Err(WireError::Malformed(field, len, buf.len()));
    }
    let (v, rest) = buf.split_at(len as usize);
    *buf = rest;
    Ok(v)
}

/// Skips an unknown field.
fn skip(wt: prost::encoding::WireType, tag: u32, buf: &mut &[u8]) -> Result<(), WireError> {
    let ctx = prost::encoding::DecodeContext::default();
    Ok(prost::encoding::skip_field(wt, tag, buf, ctx)?)
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
            service: ServiceName::default(),
        }
    }

    /// A copy of this message for `dest` (a command's share for a child): every field but
    /// the destination cloned, the destination not.
    pub fn to(&self, dest: IdSet) -> Self {
        Self {
            kind: self.kind,
            op: self.op,
            dest,
            source: self.source.clone(),
            aggregate: self.aggregate.clone(),
            payload: self.payload.clone(),
            service: self.service.clone(),
        }
    }

    /// The same command addressed to `service` (see [`Message::service`]).
    pub fn for_service(mut self, service: impl Into<ServiceName>) -> Self {
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
            service: ServiceName::default(),
        }
    }

    /// The wire values of the enums: kind, sync mode, timeout and status.
    fn wire_enums(&self) -> (pb::Kind, pb::SyncMode, u32, pb::Status) {
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
            Some(Status::Error) => pb::Status::Error,
        };
        let kind = match self.kind {
            Kind::Command => pb::Kind::Command,
            Kind::Reply => pb::Kind::Reply,
            Kind::Event => pb::Kind::Event,
            Kind::Stdio => pb::Kind::Stdio,
            Kind::Control => pb::Kind::Control,
        };
        (kind, sync, timeout_ms, status)
    }

    /// The protobuf form.
    pub fn to_pb(&self) -> pb::Envelope {
        let (kind, sync, timeout_ms, status) = self.wire_enums();
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
                filter: self.aggregate.filter.to_string(),
                sync: sync as i32,
                timeout_ms,
                payload_hash: self.aggregate.payload_hash,
                status: status as i32,
                link_end: self.wire_link_end() as i32,
            }),
            payload: self.payload.clone(),
            service: self.service.to_string(),
        }
    }

    /// [`Aggregate::link_end`] as the wire's enum.
    fn wire_link_end(&self) -> pb::LinkEnd {
        match self.aggregate.link_end {
            None => pb::LinkEnd::Unspecified,
            Some(LinkEndKind::Goodbye) => pb::LinkEnd::Goodbye,
            Some(LinkEndKind::Closed) => pb::LinkEnd::Closed,
            Some(LinkEndKind::Io) => pb::LinkEnd::Io,
            Some(LinkEndKind::Protocol) => pb::LinkEnd::Protocol,
            Some(LinkEndKind::Silent) => pb::LinkEnd::Silent,
            Some(LinkEndKind::Unreachable) => pb::LinkEnd::Unreachable,
        }
    }

    /// Length of the nested `Aggregate` message.
    fn aggregate_len(&self, sync: pb::SyncMode, timeout_ms: u32, status: pb::Status) -> usize {
        use prost::encoding::{encoded_len_varint, fixed64, int32, key_len, uint32};
        let a = &self.aggregate;
        (if a.filter.is_empty() {
            0
        } else {
            key_len(1) + encoded_len_varint(a.filter.len() as u64) + a.filter.len()
        }) + (if sync as i32 == 0 {
            0
        } else {
            int32::encoded_len(2, &(sync as i32))
        }) + (if timeout_ms == 0 {
            0
        } else {
            uint32::encoded_len(3, &timeout_ms)
        }) + (if a.payload_hash == 0 {
            0
        } else {
            fixed64::encoded_len(4, &a.payload_hash)
        }) + (if status as i32 == 0 {
            0
        } else {
            int32::encoded_len(5, &(status as i32))
        }) + match self.wire_link_end() as i32 {
            0 => 0,
            end => int32::encoded_len(6, &end),
        }
    }

    /// Size of the encoded envelope (without the length prefix).
    pub fn encoded_len(&self) -> usize {
        use prost::encoding::{encoded_len_varint, int32, key_len, uint32, uint64};
        let (kind, sync, timeout_ms, status) = self.wire_enums();
        let set = |tag, s: &IdSet| {
            if s.is_empty() {
                0
            } else {
                let n = s.serialized_len();
                key_len(tag) + encoded_len_varint(n as u64) + n
            }
        };
        let agg = self.aggregate_len(sync, timeout_ms, status);
        uint32::encoded_len(1, &WIRE_VERSION)
            + int32::encoded_len(2, &(kind as i32))
            + (if self.op == 0 {
                0
            } else {
                uint64::encoded_len(3, &self.op)
            })
            + set(4, &self.dest)
            + set(5, &self.source)
            + key_len(6)
            + encoded_len_varint(agg as u64)
            + agg
            + (if self.payload.is_empty() {
                0
            } else {
                prost::encoding::bytes::encoded_len(7, &self.payload)
            })
            + (if self.service.is_empty() {
                0
            } else {
                key_len(8) + encoded_len_varint(self.service.len() as u64) + self.service.len()
            })
    }

    /// Writes the envelope (what [`Message::to_pb`] encodes, byte for byte) straight into
    /// `buf`: no protobuf struct in between, so nothing is cloned or allocated per frame
    /// (the id-sets are serialized into the buffer, the payload copied once).
    pub fn encode_to(&self, buf: &mut impl BufMut) {
        use prost::encoding::WireType::{LengthDelimited, SixtyFourBit, Varint};
        let (kind, sync, timeout_ms, status) = self.wire_enums();
        // Enums as prost writes an `int32`: sign-extended (all of ours are non-negative).
        let enum_value = |v: i32| i64::from(v) as u64;
        put_key(buf, 1, Varint);
        put_varint(buf, u64::from(WIRE_VERSION));
        put_key(buf, 2, Varint);
        put_varint(buf, enum_value(kind as i32));
        if self.op != 0 {
            put_key(buf, 3, Varint);
            put_varint(buf, self.op);
        }
        for (tag, s) in [(4, &self.dest), (5, &self.source)] {
            if !s.is_empty() {
                let form = s.form();
                put_key(buf, tag, LengthDelimited);
                put_varint(buf, 1 + form.len as u64);
                s.write_form(form, buf);
            }
        }
        put_key(buf, 6, LengthDelimited);
        put_varint(buf, self.aggregate_len(sync, timeout_ms, status) as u64);
        let a = &self.aggregate;
        if !a.filter.is_empty() {
            put_key(buf, 1, LengthDelimited);
            put_varint(buf, a.filter.len() as u64);
            buf.put_slice(a.filter.as_bytes());
        }
        if sync as i32 != 0 {
            put_key(buf, 2, Varint);
            put_varint(buf, enum_value(sync as i32));
        }
        if timeout_ms != 0 {
            put_key(buf, 3, Varint);
            put_varint(buf, u64::from(timeout_ms));
        }
        if a.payload_hash != 0 {
            put_key(buf, 4, SixtyFourBit);
            buf.put_u64_le(a.payload_hash);
        }
        if status as i32 != 0 {
            put_key(buf, 5, Varint);
            put_varint(buf, enum_value(status as i32));
        }
        let end = self.wire_link_end() as i32;
        if end != 0 {
            put_key(buf, 6, Varint);
            put_varint(buf, enum_value(end));
        }
        if !self.payload.is_empty() {
            // prost's own `bytes::encode` puts a clone of the `Bytes`, which for a payload
            // made from a vector allocates its shared header: the slice is copied instead.
            put_key(buf, 7, LengthDelimited);
            put_varint(buf, self.payload.len() as u64);
            buf.put_slice(&self.payload);
        }
        if !self.service.is_empty() {
            put_key(buf, 8, LengthDelimited);
            put_varint(buf, self.service.len() as u64);
            buf.put_slice(self.service.as_bytes());
        }
    }

    /// Encodes the message as one frame body (without the length prefix).
    pub fn encode(&self) -> Bytes {
        let mut b = Vec::with_capacity(self.encoded_len());
        self.encode_to(&mut b);
        Bytes::from(b)
    }

    /// Decodes and validates one frame body: what [`Message::from_pb`] of prost's
    /// [`pb::Envelope`] gives, read straight from the frame (no envelope struct in between:
    /// the id-sets are parsed where they lie, the payload is a slice of the frame) with
    /// prost's own key and varint decoders. Unknown fields are skipped, a repeated field's
    /// last value wins and repeated `aggregate`s merge, as protobuf says; the test
    /// `the_direct_decoder_agrees_with_prost` holds it to that.
    pub fn decode(frame: Bytes) -> Result<Self, WireError> {
        Self::decode_sharing(frame, &mut LastNames::default())
    }

    /// [`Message::decode`], sharing the filter and the service name each with `last`'s,
    /// the names the previous frame of the same link carried, when they are the same (then
    /// nothing is allocated or checked for it); `last` keeps this frame's names.
    pub fn decode_sharing(frame: Bytes, last: &mut LastNames) -> Result<Self, WireError> {
        let f = Fields::read(&frame)?;
        let filter = Name::share(f.filter, &mut last.filter, "filter")?;
        let service = Name::share(f.service, &mut last.service, "service")?;
        Self::validate(f.head, filter, frame.slice(f.payload), service)
    }

    /// Validates a protobuf envelope.
    pub fn from_pb(env: pb::Envelope) -> Result<Self, WireError> {
        let mut agg = env.aggregate.unwrap_or_default();
        let filter = FilterName::from(std::mem::take(&mut agg.filter));
        let head = Head {
            version: env.version,
            kind: env.kind,
            op: env.op_id,
            dest: &env.destination,
            source: &env.source,
            agg,
        };
        Self::validate(head, filter, env.payload, ServiceName::from(env.service))
    }

    /// Checks an envelope's version and enums and parses its id-sets: the message of
    /// `env` with these names and payload.
    fn validate(
        env: Head<'_>,
        filter: FilterName,
        payload: Bytes,
        service: ServiceName,
    ) -> Result<Self, WireError> {
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
        let agg = env.agg;
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
                pb::Status::Error => Some(Status::Error),
            };
        let end = agg.link_end;
        let link_end = match pb::LinkEnd::try_from(end).map_err(|_| bad("link_end", end))? {
            pb::LinkEnd::Unspecified => None,
            pb::LinkEnd::Goodbye => Some(LinkEndKind::Goodbye),
            pb::LinkEnd::Closed => Some(LinkEndKind::Closed),
            pb::LinkEnd::Io => Some(LinkEndKind::Io),
            pb::LinkEnd::Protocol => Some(LinkEndKind::Protocol),
            pb::LinkEnd::Silent => Some(LinkEndKind::Silent),
            pb::LinkEnd::Unreachable => Some(LinkEndKind::Unreachable),
        };
        let set = |field, b: &[u8]| {
            if b.is_empty() {
                Ok(IdSet::new())
            } else {
                IdSet::from_bytes(b).map_err(|err| WireError::IdSet { field, err })
            }
        };
        Ok(Self {
            kind,
            op: env.op,
            dest: set("destination", env.dest)?,
            source: set("source", env.source)?,
            aggregate: Aggregate {
                filter,
                sync,
                payload_hash: agg.payload_hash,
                status,
                link_end,
            },
            payload,
            service,
        })
    }
}

#[cfg(test)]
mod tests;
