//! The binary form of an [`IdSet`] (`sdm_set_serialize`): a run list or roaring's
//! portable format, whichever is shorter, behind a one-byte tag; and its checked reading.

use std::ops::RangeInclusive;
use std::sync::Arc;

use bytes::BufMut;
use roaring::RoaringBitmap;

use super::{Id, IdSet, IdSetError, Repr};

/// The shorter of an id-set's two binary forms ([`IdSet::form`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Form {
    /// The run list (else roaring's format).
    runs: bool,
    /// Its length, without the one-byte tag.
    pub(crate) len: usize,
}

/// Serialized form tag: a list of runs, `(gap, len - 1)` varint pairs.
pub(super) const TAG_RUNS: u8 = 0;
/// Serialized form tag: roaring's portable format.
pub(super) const TAG_ROARING: u8 = 1;

impl IdSet {
    /// Appends the binary form to `out` (`sdm_set_serialize`): whichever of the run list
    /// and roaring's portable format is smaller, behind a one-byte tag.
    pub fn serialize_into(&self, out: &mut Vec<u8>) {
        let form = self.form();
        out.reserve(1 + form.len);
        self.write_form(form, out);
    }

    /// Writes the binary form (as [`IdSet::serialize_into`]) into any buffer: an envelope
    /// encoder writes it straight into the link's buffer, [`IdSet::serialized_len`] bytes.
    pub fn write_to(&self, out: &mut impl BufMut) {
        self.write_form(self.form(), out);
    }

    /// Which of the two forms is shorter, and its length without the tag: measuring both
    /// walks the set once, so an encoder that needs the length first measures once and
    /// writes with [`IdSet::write_form`].
    pub(crate) fn form(&self) -> Form {
        // One range (a subtree's share, a server's own id): one run, which is never longer
        // than roaring's form; measured without walking anything.
        if let Repr::Range(lo, hi) = self.0 {
            return Form {
                runs: true,
                len: 1 + varint_len(u64::from(lo)) + varint_len(u64::from(hi - lo)),
            };
        }
        let runs = self.runs_encoded_len();
        let roaring = self.roaring_len();
        if runs <= roaring {
            Form {
                runs: true,
                len: runs,
            }
        } else {
            Form {
                runs: false,
                len: roaring,
            }
        }
    }

    /// Writes the binary form in `form` (from [`IdSet::form`] of this set).
    pub(crate) fn write_form(&self, form: Form, out: &mut impl BufMut) {
        if let Repr::Range(lo, hi) = self.0 {
            out.put_u8(TAG_RUNS);
            put_varint(out, 1);
            put_varint(out, u64::from(lo));
            put_varint(out, u64::from(hi - lo));
        } else {
            self.write_bitmap_form(form, out);
        }
    }

    /// [`IdSet::write_form`] of a set held as a bitmap: out of line, so the common case,
    /// a range, stays a few instructions where the form is written.
    #[inline(never)]
    fn write_bitmap_form(&self, form: Form, out: &mut impl BufMut) {
        if form.runs {
            out.put_u8(TAG_RUNS);
            let count = self.runs().count() as u64;
            put_varint(out, count);
            let mut next: u64 = 0;
            for r in self.runs() {
                let (s, e) = (u64::from(*r.start()), u64::from(*r.end()));
                put_varint(out, s - next);
                put_varint(out, e - s);
                next = e + 1;
            }
        } else {
            out.put_u8(TAG_ROARING);
            self.bitmap()
                .serialize_into(out.writer())
                .expect("writing to a buffer cannot fail");
        }
    }

    /// The binary form as a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.serialize_into(&mut v);
        v
    }

    /// The serialized length (`sdm_set_serialized_length`).
    pub fn serialized_len(&self) -> usize {
        1 + self.form().len
    }

    /// Length of roaring's form; a range's is never shorter than its run (one run takes
    /// at most 11 bytes, roaring's header alone 8), so it is not made to be measured.
    fn roaring_len(&self) -> usize {
        match &self.0 {
            Repr::Range(..) => usize::MAX,
            Repr::Bitmap(b) => b.serialized_size(),
        }
    }

    fn runs_encoded_len(&self) -> usize {
        let mut n = 0usize;
        let mut count = 0u64;
        let mut next: u64 = 0;
        for r in self.runs() {
            let (s, e) = (u64::from(*r.start()), u64::from(*r.end()));
            n += varint_len(s - next) + varint_len(e - s);
            next = e + 1;
            count += 1;
        }
        n + varint_len(count)
    }

    /// Parses the binary form (`sdm_set_deserialize`). The whole slice must be one set.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, IdSetError> {
        let (&tag, rest) = bytes.split_first().ok_or(IdSetError::Truncated(0))?;
        match tag {
            TAG_RUNS => {
                let mut pos = 1usize;
                let count = get_varint(bytes, &mut pos)?;
                // Each run takes at least two bytes: refuse counts the input cannot hold.
                if count > (bytes.len() - pos) as u64 / 2 {
                    return Err(IdSetError::Truncated(bytes.len()));
                }
                // Check the whole run list before building anything (a refused input costs
                // its length, never the size of the ranges it names), then build: two
                // walks, no list of runs in between.
                if count == 1 {
                    // One run (most sets on the wire): read once, kept inline.
                    let mut run = 0..=0;
                    let end = walk_runs(bytes, pos, count, |r| run = r)?;
                    if end != bytes.len() {
                        return Err(IdSetError::Trailing(bytes.len() - end));
                    }
                    return Ok(Self(Repr::Range(*run.start(), *run.end())));
                }
                let end = walk_runs(bytes, pos, count, |_| {})?;
                if end != bytes.len() {
                    return Err(IdSetError::Trailing(bytes.len() - end));
                }
                let mut set = IdSet::new();
                walk_runs(bytes, pos, count, |r| set.insert_range(r))?;
                Ok(set)
            }
            TAG_ROARING => {
                check_roaring_header(rest)?;
                let mut cursor = std::io::Cursor::new(rest);
                let b = RoaringBitmap::deserialize_from(&mut cursor).map_err(|e| {
                    IdSetError::Roaring {
                        what: e.to_string(),
                        source: Some(Arc::new(e)),
                    }
                })?;
                let used = cursor.position() as usize;
                if used != rest.len() {
                    return Err(IdSetError::Trailing(rest.len() - used));
                }
                Ok(Self(Repr::Bitmap(b)))
            }
            t => Err(IdSetError::UnknownTag(t)),
        }
    }
}

/// Reads `count` runs (gap from the end of the last, then length minus one, as varints)
/// from `bytes` at `pos`, handing each to `each`: where they end.
fn walk_runs(
    bytes: &[u8],
    mut pos: usize,
    count: u64,
    mut each: impl FnMut(RangeInclusive<Id>),
) -> Result<usize, IdSetError> {
    let mut next: u64 = 0;
    for _ in 0..count {
        let at = pos;
        let gap = get_varint(bytes, &mut pos)?;
        let extra = get_varint(bytes, &mut pos)?;
        let start = next.checked_add(gap).ok_or(IdSetError::Overflow(at))?;
        let end = start.checked_add(extra).ok_or(IdSetError::Overflow(at))?;
        if end > u64::from(Id::MAX) {
            return Err(IdSetError::Overflow(at));
        }
        each(start as Id..=end as Id);
        next = end + 1;
    }
    Ok(pos)
}

/// Refuses roaring headers that promise more containers than the input could hold, so a
/// hostile length can never make the decoder allocate more than the input's size.
fn check_roaring_header(b: &[u8]) -> Result<(), IdSetError> {
    const COOKIE_NO_RUN: u32 = 12346;
    const COOKIE: u16 = 12347;
    if b.len() < 4 {
        return Err(IdSetError::Truncated(1 + b.len()));
    }
    let word = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let containers = if word == COOKIE_NO_RUN {
        if b.len() < 8 {
            return Err(IdSetError::Truncated(1 + b.len()));
        }
        u64::from(u32::from_le_bytes([b[4], b[5], b[6], b[7]]))
    } else if (word & 0xffff) as u16 == COOKIE {
        u64::from(word >> 16) + 1
    } else {
        return Err(IdSetError::Roaring {
            what: format!("unknown cookie {word:#x}"),
            source: None,
        });
    };
    // Each container needs at least a 4-byte description and 2 bytes of data.
    if containers > 65536 || containers * 6 > b.len() as u64 {
        return Err(IdSetError::Roaring {
            what: format!("{containers} containers do not fit in {} bytes", b.len()),
            source: None,
        });
    }
    Ok(())
}

fn varint_len(v: u64) -> usize {
    prost::encoding::encoded_len_varint(v)
}

/// How many ids a bitmap holds: out of line, so that [`IdSet::len`] of a range, inlined
/// where a frame is routed, is not spread among roaring's unrolled count of its containers.
#[inline(never)]
pub(super) fn bitmap_len(b: &RoaringBitmap) -> u64 {
    b.len()
}

/// Writes `v` as a protobuf varint: the one byte of a value below 128 (nearly every key,
/// enum, length and run of a frame) inline, anything longer through prost's encoder, which
/// the compiler keeps out of line.
#[inline(always)]
pub(crate) fn put_varint(out: &mut impl BufMut, v: u64) {
    if v < 0x80 {
        out.put_u8(v as u8);
    } else {
        prost::encoding::encode_varint(v, out);
    }
}

/// Writes a protobuf field key (`tag` and wire type), as prost's `encode_key` does.
#[inline(always)]
pub(crate) fn put_key(out: &mut impl BufMut, tag: u32, wire_type: prost::encoding::WireType) {
    put_varint(out, u64::from((tag << 3) | wire_type as u32));
}

fn get_varint(b: &[u8], pos: &mut usize) -> Result<u64, IdSetError> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let &byte = b.get(*pos).ok_or(IdSetError::Truncated(*pos))?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(IdSetError::Overflow(*pos))
}
