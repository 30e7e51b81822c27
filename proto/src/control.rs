//! [`Control`]: the typed link-level messages (handshake, keepalive and its echo, goodbye,
//! credit) that travel as the payload of [`Kind::Control`] envelopes, encoded as the
//! `Control` protobuf of `proto/sdm.proto` — never as text to be sniffed.

use bytes::Bytes;
use prost::Message as _;

use crate::message::{Kind, Message, SyncMode};
use crate::{IdSet, pb};

/// One link-level message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Connector -> acceptor: the node it wants, itself, its nonce (hex).
    Hello {
        /// The node the connector wants to reach.
        to: String,
        /// The connector.
        from: String,
        /// The connector's nonce (hex).
        nonce: String,
    },
    /// Acceptor -> connector: it is `to`; its nonce and MAC (hex).
    Welcome {
        /// The acceptor (the node asked for).
        to: String,
        /// The acceptor's nonce (hex).
        nonce: String,
        /// The acceptor's MAC over both names and nonces (hex).
        mac: String,
    },
    /// Connector -> acceptor: the connector's MAC (hex).
    Proof {
        /// The MAC (hex).
        mac: String,
    },
    /// Acceptor -> connector: the link is up.
    Ready,
    /// Acceptor -> connector: it is not the node asked for.
    Refuse {
        /// Who the acceptor is.
        me: String,
    },
    /// The writer is alive; a non-zero sequence number asks for an [`Control::Echo`] of
    /// it (the sender's round-trip time).
    Keepalive(u64),
    /// The answer to a [`Control::Keepalive`] with this sequence number.
    Echo(u64),
    /// The session ends in order.
    Goodbye,
    /// The receiver took this many more bytes of output in.
    Credit(u64),
}

/// Why a frame is not a valid control message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ControlError {
    /// The envelope is not of kind control.
    #[error("not a control frame (kind {0:?})")]
    NotControl(Kind),
    /// The payload is not a `Control` protobuf.
    #[error("bad control message: {0}")]
    Decode(#[source] prost::DecodeError),
    /// The `Control` protobuf holds no message.
    #[error("empty control message")]
    Empty,
}

impl Control {
    /// Its name, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Control::Hello { .. } => "hello",
            Control::Welcome { .. } => "welcome",
            Control::Proof { .. } => "proof",
            Control::Ready => "ready",
            Control::Refuse { .. } => "refuse",
            Control::Keepalive(_) => "keepalive",
            Control::Echo(_) => "echo",
            Control::Goodbye => "goodbye",
            Control::Credit(_) => "credit",
        }
    }

    /// The protobuf form.
    pub fn to_pb(&self) -> pb::Control {
        use pb::control::Msg;
        let msg = match self.clone() {
            Control::Hello { to, from, nonce } => Msg::Hello(pb::Hello { to, from, nonce }),
            Control::Welcome { to, nonce, mac } => Msg::Welcome(pb::Welcome { to, nonce, mac }),
            Control::Proof { mac } => Msg::Proof(pb::Proof { mac }),
            Control::Ready => Msg::Ready(pb::Ready {}),
            Control::Refuse { me } => Msg::Refuse(pb::Refuse { me }),
            Control::Keepalive(seq) => Msg::Keepalive(pb::Keepalive { seq }),
            Control::Echo(seq) => Msg::Echo(pb::Echo { seq }),
            Control::Goodbye => Msg::Goodbye(pb::Goodbye {}),
            Control::Credit(bytes) => Msg::Credit(pb::Credit { bytes }),
        };
        pb::Control { msg: Some(msg) }
    }

    /// From the protobuf form.
    pub fn from_pb(c: pb::Control) -> Result<Self, ControlError> {
        use pb::control::Msg;
        Ok(match c.msg.ok_or(ControlError::Empty)? {
            Msg::Hello(h) => Control::Hello {
                to: h.to,
                from: h.from,
                nonce: h.nonce,
            },
            Msg::Welcome(w) => Control::Welcome {
                to: w.to,
                nonce: w.nonce,
                mac: w.mac,
            },
            Msg::Proof(p) => Control::Proof { mac: p.mac },
            Msg::Ready(_) => Control::Ready,
            Msg::Refuse(r) => Control::Refuse { me: r.me },
            Msg::Keepalive(k) => Control::Keepalive(k.seq),
            Msg::Echo(e) => Control::Echo(e.seq),
            Msg::Goodbye(_) => Control::Goodbye,
            Msg::Credit(c) => Control::Credit(c.bytes),
        })
    }

    /// The envelope that carries it.
    pub fn to_message(&self) -> Message {
        let payload = Bytes::from(self.to_pb().encode_to_vec());
        let mut m = Message::command(0, IdSet::new(), SyncMode::DontWait, payload);
        m.kind = Kind::Control;
        m
    }

    /// The control message an envelope carries.
    pub fn from_message(m: &Message) -> Result<Self, ControlError> {
        if m.kind != Kind::Control {
            return Err(ControlError::NotControl(m.kind));
        }
        let c = pb::Control::decode(&m.payload[..]).map_err(ControlError::Decode)?;
        Self::from_pb(c)
    }
}

impl From<Control> for Message {
    fn from(c: Control) -> Self {
        c.to_message()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_message_round_trips_through_a_frame() {
        let all = [
            Control::Hello {
                to: "5".into(),
                from: "master".into(),
                nonce: "00ff".into(),
            },
            Control::Welcome {
                to: "5".into(),
                nonce: "11".into(),
                mac: "ab".into(),
            },
            Control::Proof { mac: "cd".into() },
            Control::Ready,
            Control::Refuse { me: "6".into() },
            Control::Keepalive(0),
            Control::Keepalive(7),
            Control::Echo(7),
            Control::Goodbye,
            Control::Credit(65536),
        ];
        for c in all {
            let frame = c.to_message().encode();
            let m = Message::decode(frame).unwrap();
            assert_eq!(m.kind, Kind::Control);
            assert_eq!(Control::from_message(&m).unwrap(), c, "{}", c.name());
        }
    }

    #[test]
    fn text_and_other_kinds_are_not_control_messages() {
        let mut m = Message::command(0, IdSet::new(), SyncMode::DontWait, "keepalive");
        assert_eq!(
            Control::from_message(&m),
            Err(ControlError::NotControl(Kind::Command))
        );
        m.kind = Kind::Control;
        assert!(matches!(
            Control::from_message(&m),
            Err(ControlError::Decode(_))
        ));
        m.payload = Bytes::new();
        assert_eq!(Control::from_message(&m), Err(ControlError::Empty));
    }
}
