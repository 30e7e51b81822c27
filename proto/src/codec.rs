//! [`FrameCodec`]: 4-byte big-endian length prefix, a configurable maximum frame size, and
//! envelope validation.

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::message::{LastNames, Message, WireError};

/// Default maximum frame: 64 MiB.
pub const DEFAULT_MAX_FRAME: usize = 64 << 20;

/// Frames [`Message`]s on a byte stream. An oversize length, a frame cut short at end of
/// stream, garbage or an unknown version is an error, never a panic.
#[derive(Debug)]
pub struct FrameCodec {
    max: usize,
    /// Length of the frame whose length prefix was read (and checked against the maximum)
    /// and whose bytes are not all there yet, if any.
    in_frame: Option<u64>,
    /// Where a small frame is encoded before it is copied into the link's buffer.
    scratch: Vec<u8>,
    /// The filter and service names of the last frames decoded, shared with the next that
    /// carry them.
    last_names: LastNames,
}

/// Frames whose payload is at most this size are encoded into [`FrameCodec`]'s scratch
/// buffer and copied into the link's buffer at once: putting field by field into a
/// `BytesMut` checks its capacity at every byte of every varint. Larger payloads are
/// written straight in, not copied twice.
const SCRATCH_MAX: usize = 1024;

impl FrameCodec {
    /// A codec refusing frames larger than `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            in_frame: None,
            scratch: Vec::with_capacity(SCRATCH_MAX),
            last_names: LastNames::default(),
        }
    }

    /// The configured maximum frame size.
    pub fn max_frame(&self) -> usize {
        self.max
    }

    /// Changes the maximum frame size from the next frame on (e.g. a small limit while a
    /// link is still unauthenticated, the session's limit after).
    pub fn set_max_frame(&mut self, max: usize) {
        self.max = max;
    }
}

impl Default for FrameCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME)
    }
}

impl Decoder for FrameCodec {
    type Item = Message;
    type Error = WireError;

    /// The prefix is read once (and the maximum checked then, so a new maximum counts from
    /// the next frame on); the frame is taken when all of it is there, and room for all of
    /// it is made at once until then.
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Message>, WireError> {
        let len = match self.in_frame {
            Some(len) => len as usize,
            None => {
                let Some(prefix) = src.first_chunk::<4>() else {
                    return Ok(None);
                };
                let len = u64::from(u32::from_be_bytes(*prefix));
                if len > self.max as u64 {
                    return Err(WireError::FrameTooLarge { len, max: self.max });
                }
                self.in_frame = Some(len);
                len as usize
            }
        };
        if src.len() < 4 + len {
            src.reserve(4 + len - src.len());
            return Ok(None);
        }
        self.in_frame = None;
        src.advance(4);
        let frame = src.split_to(len).freeze();
        Message::decode_sharing(frame, &mut self.last_names).map(Some)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Message>, WireError> {
        match self.decode(src)? {
            Some(m) => Ok(Some(m)),
            None if src.is_empty() => Ok(None),
            // Bytes of the frame received (its prefix not counted once it was read whole).
            None if self.in_frame.is_some() => Err(WireError::Truncated(src.len() - 4)),
            None => Err(WireError::Truncated(src.len())),
        }
    }
}

impl Encoder<&Message> for FrameCodec {
    type Error = WireError;

    /// The length prefix and the envelope go into `dst`: a small envelope through the
    /// codec's scratch buffer (one copy of a few hundred bytes at most, no allocation),
    /// one with a large payload straight in.
    fn encode(&mut self, msg: &Message, dst: &mut BytesMut) -> Result<(), WireError> {
        if msg.payload.len() <= SCRATCH_MAX {
            // Encoded first, measured after: the envelope is walked once.
            self.scratch.clear();
            msg.encode_to(&mut self.scratch);
            let len = self.scratch.len();
            let fits = len <= self.max;
            if fits {
                dst.reserve(4 + len);
                dst.put_u32(len as u32);
                dst.extend_from_slice(&self.scratch);
            }
            // A large id-set does not keep its buffer.
            if self.scratch.capacity() > 4 * SCRATCH_MAX {
                self.scratch = Vec::with_capacity(SCRATCH_MAX);
            }
            if !fits {
                return Err(WireError::FrameTooLarge {
                    len: len as u64,
                    max: self.max,
                });
            }
            return Ok(());
        }
        let len = msg.encoded_len();
        if len > self.max {
            return Err(WireError::FrameTooLarge {
                len: len as u64,
                max: self.max,
            });
        }
        dst.reserve(4 + len);
        dst.put_u32(len as u32);
        msg.encode_to(dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IdSet, SyncMode};
    use proptest::prelude::*;

    fn frame(m: &Message) -> BytesMut {
        let mut b = BytesMut::new();
        FrameCodec::default().encode(m, &mut b).unwrap();
        b
    }

    #[test]
    fn decodes_back_to_back_frames() {
        let a = Message::command(1, IdSet::all(4), SyncMode::WaitAll, "a");
        let b = Message::command(2, IdSet::single(3), SyncMode::DontWait, "b");
        let mut buf = frame(&a);
        buf.extend_from_slice(&frame(&b));
        let mut c = FrameCodec::default();
        assert_eq!(c.decode(&mut buf).unwrap().unwrap(), a);
        assert_eq!(c.decode(&mut buf).unwrap().unwrap(), b);
        assert!(c.decode(&mut buf).unwrap().is_none());
    }

    /// Commands a link decodes one after another share their filter name while it stays
    /// the same (one allocation, not one per frame); a new name is its own, the empty name
    /// is the empty name, and every frame decodes to the message that was sent.
    #[test]
    fn frames_in_a_row_share_their_filter_name() {
        let names = ["sum", "sum", "max", "", "max"];
        let mut buf = BytesMut::new();
        let mut sent = Vec::new();
        for (i, f) in names.into_iter().enumerate() {
            let mut m = Message::command(i as u64 + 1, IdSet::all(4), SyncMode::WaitAll, "x");
            m.aggregate.filter = f.into();
            FrameCodec::default().encode(&m, &mut buf).unwrap();
            sent.push(m);
        }
        let mut c = FrameCodec::default();
        let got: Vec<Message> = (0..names.len())
            .map(|_| c.decode(&mut buf).unwrap().unwrap())
            .collect();
        assert_eq!(got, sent);
        let name = |i: usize| &got[i].aggregate.filter;
        assert_eq!(name(0).as_ptr(), name(1).as_ptr());
        assert_ne!(name(1).as_ptr(), name(2).as_ptr());
        // The empty name in between does not make the link forget "max".
        assert_eq!(name(2).as_ptr(), name(4).as_ptr());
        assert_eq!(&**name(3), "");
    }

    /// Frames on both sides of the scratch buffer's limit, one codec for all (its scratch
    /// reused): each is the length prefix and exactly what prost writes, and decodes back.
    #[test]
    fn frames_small_and_large_are_the_envelope_prost_writes() {
        let mut c = FrameCodec::default();
        let mut buf = BytesMut::new();
        let mut sent = Vec::new();
        for n in [
            0,
            1,
            900,
            SCRATCH_MAX - 40,
            SCRATCH_MAX,
            SCRATCH_MAX + 1,
            70_000,
            3,
        ] {
            let m = Message::command(n as u64 + 1, IdSet::all(9), SyncMode::WaitAll, vec![7u8; n]);
            let before = buf.len();
            c.encode(&m, &mut buf).unwrap();
            let body = prost::Message::encode_to_vec(&m.to_pb());
            assert_eq!(&buf[before..before + 4], &(body.len() as u32).to_be_bytes());
            assert_eq!(&buf[before + 4..], &body[..], "payload of {n} bytes");
            sent.push(m);
        }
        for m in sent {
            assert_eq!(c.decode(&mut buf).unwrap().unwrap(), m);
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn four_gib_length_is_refused_at_once() {
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 1, 2][..]);
        let e = FrameCodec::default().decode(&mut buf).unwrap_err();
        assert!(
            matches!(
                e,
                WireError::FrameTooLarge {
                    len: 0xffff_ffff,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn small_maximum_is_enforced_both_ways() {
        let m = Message::command(1, IdSet::all(4), SyncMode::WaitAll, vec![0u8; 100]);
        let mut c = FrameCodec::new(64);
        // Refused whole, leaving the link's buffer as it was, on both encoding paths: a
        // small payload (the scratch buffer) and a large one (straight in).
        let big = Message::command(1, IdSet::all(4), SyncMode::WaitAll, vec![0u8; 5000]);
        for m in [&m, &big] {
            let mut dst = BytesMut::from(&b"kept"[..]);
            assert!(matches!(
                c.encode(m, &mut dst),
                Err(WireError::FrameTooLarge { max: 64, .. })
            ));
            assert_eq!(&dst[..], b"kept");
        }
        let mut buf = frame(&m);
        assert!(matches!(
            c.decode(&mut buf),
            Err(WireError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn frame_cut_in_half_is_an_error_at_eof() {
        let m = Message::command(1, IdSet::all(4), SyncMode::WaitAll, "hello");
        let full = frame(&m);
        let mut half = BytesMut::from(&full[..full.len() / 2]);
        let mut c = FrameCodec::default();
        assert!(c.decode(&mut half).unwrap().is_none());
        assert!(matches!(
            c.decode_eof(&mut half),
            Err(WireError::Truncated(_))
        ));
    }

    /// Frames fed one byte at a time decode as when whole, and a stream cut anywhere says
    /// how much of the frame it held: the prefix's bytes, or the frame's after it.
    #[test]
    fn frames_arriving_byte_by_byte_and_cut_anywhere() {
        let ms = [
            Message::command(1, IdSet::all(4), SyncMode::WaitAll, "hello"),
            Message::command(2, IdSet::single(3), SyncMode::DontWait, vec![7u8; 300]),
            Message::command(3, IdSet::all(9), SyncMode::WaitAll, ""),
        ];
        let mut all = BytesMut::new();
        for m in &ms {
            all.extend_from_slice(&frame(m));
        }
        let mut c = FrameCodec::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &byte in all.iter() {
            buf.extend_from_slice(&[byte]);
            while let Some(m) = c.decode(&mut buf).unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, ms);
        assert!(c.decode_eof(&mut buf).unwrap().is_none());
        let one = frame(&ms[0]);
        for cut in 1..one.len() {
            let mut c = FrameCodec::default();
            let mut part = BytesMut::from(&one[..cut]);
            assert!(c.decode(&mut part).unwrap().is_none());
            let held = if cut < 4 { cut } else { cut - 4 };
            assert!(
                matches!(c.decode_eof(&mut part), Err(WireError::Truncated(n)) if n == held),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn lowered_maximum_applies_to_the_next_frame() {
        let m = Message::command(1, IdSet::all(4), SyncMode::WaitAll, vec![0u8; 100]);
        let mut buf = frame(&m);
        buf.extend_from_slice(&frame(&m));
        let mut c = FrameCodec::default();
        assert_eq!(c.decode(&mut buf).unwrap().unwrap(), m);
        c.set_max_frame(64);
        assert_eq!(c.max_frame(), 64);
        assert!(matches!(
            c.decode(&mut buf),
            Err(WireError::FrameTooLarge { max: 64, .. })
        ));
        c.set_max_frame(DEFAULT_MAX_FRAME);
        assert_eq!(c.decode(&mut buf).unwrap().unwrap(), m);
    }

    proptest! {
        #[test]
        fn random_streams_never_panic(chunks in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..40), 0..8)) {
            let mut c = FrameCodec::new(1 << 16);
            let mut buf = BytesMut::new();
            'outer: for ch in chunks {
                buf.extend_from_slice(&ch);
                loop {
                    match c.decode(&mut buf) {
                        Ok(Some(_)) => continue,
                        Ok(None) => break,
                        Err(_) => break 'outer,
                    }
                }
            }
            let _ = c.decode_eof(&mut buf);
        }
    }
}
