//! The minimal-relay baseline's wire format: fixed 20-byte frames (a 4-byte big-endian
//! length of 16, then an op id and a value, both u64 little-endian). Pure std.

use std::io::{self, Read};

/// Bytes after the length prefix.
pub const BODY: usize = 16;
/// Bytes of a whole frame, prefix included.
pub const FRAME: usize = 4 + BODY;
/// The op id of the start-up acknowledgement; its value counts the connected nodes below.
pub const ACK_OP: u64 = u64::MAX;

/// One frame: down, an op to relay; up, the op's reply carrying the subtree's sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Operation id (or [`ACK_OP`]).
    pub op: u64,
    /// The payload: 0 going down, the subtree's sum (or node count) going up.
    pub value: u64,
}

impl Frame {
    /// The frame as bytes on the wire.
    pub fn encode(self) -> [u8; FRAME] {
        let mut b = [0u8; FRAME];
        b[..4].copy_from_slice(&(BODY as u32).to_be_bytes());
        b[4..12].copy_from_slice(&self.op.to_le_bytes());
        b[12..].copy_from_slice(&self.value.to_le_bytes());
        b
    }

    /// Appends the encoded frame to `out` (for batched writes).
    pub fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.encode());
    }

    /// Parses one frame; a length prefix other than 16 is an error.
    pub fn decode(b: &[u8; FRAME]) -> io::Result<Self> {
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        if len as usize != BODY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("frame length {len}, expected {BODY}"),
            ));
        }
        let mut op = [0u8; 8];
        let mut value = [0u8; 8];
        op.copy_from_slice(&b[4..12]);
        value.copy_from_slice(&b[12..]);
        Ok(Self {
            op: u64::from_le_bytes(op),
            value: u64::from_le_bytes(value),
        })
    }
}

/// Reads one frame; `Ok(None)` on a clean end of stream at a frame boundary, an error if
/// the stream ends inside a frame.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Frame>> {
    let mut b = [0u8; FRAME];
    let mut filled = 0;
    while filled < FRAME {
        match r.read(&mut b[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("stream ended {filled} bytes into a frame"),
                ));
            }
            Ok(k) => filled += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Frame::decode(&b).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_eof_and_bad_length() {
        let mut bytes = Vec::new();
        Frame { op: 7, value: 42 }.put(&mut bytes);
        Frame {
            op: ACK_OP,
            value: 1025,
        }
        .put(&mut bytes);
        let mut r = &bytes[..];
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some(Frame { op: 7, value: 42 })
        );
        assert_eq!(read_frame(&mut r).unwrap().unwrap().op, ACK_OP);
        assert_eq!(read_frame(&mut r).unwrap(), None);
        let mut torn = &bytes[..FRAME - 1];
        assert!(read_frame(&mut torn).is_err());
        let mut bad = Frame { op: 1, value: 1 }.encode();
        bad[3] = 17;
        assert!(Frame::decode(&bad).is_err());
    }
}
