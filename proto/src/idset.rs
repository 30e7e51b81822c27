//! `IdSet`: a set of server ids over a roaring bitmap (the seed's `sdm_idset`), with the
//! range text form `[0-3,7,100-199]` and a compact binary serialization.
//!
//! The empty set means *no* server. (The old SDM read an empty set as "all"; we don't.)

use std::borrow::Cow;
use std::fmt;
use std::ops::{BitAnd, BitOr, RangeInclusive, Sub};
use std::str::FromStr;

use bytes::BufMut;
use roaring::RoaringBitmap;

/// A server id: servers are numbered `0..N`.
pub type Id = u32;

/// A set of server ids, efficient for millions of ids (a roaring bitmap).
///
/// One contiguous range (a subtree's share, `[0-N)`, a single id: nearly every set a tree
/// passes around) is held inline, without a bitmap: making, copying, comparing, routing
/// and encoding it allocate nothing and cost the same whatever its length (a roaring
/// bitmap keeps a range of 1024 ids as an array of 1024 entries).
pub struct IdSet(Repr);

impl Clone for IdSet {
    /// A range by value, inline; a bitmap out of line (`clone_bitmap`).
    fn clone(&self) -> Self {
        match &self.0 {
            Repr::Range(lo, hi) => Self(Repr::Range(*lo, *hi)),
            Repr::Bitmap(b) => clone_bitmap(b),
        }
    }
}

/// A set holding a copy of bitmap `b` (out of line: cloning a range, where a command's
/// share is copied for a child, is not spread among a bitmap's allocation and copy).
#[inline(never)]
fn clone_bitmap(b: &RoaringBitmap) -> IdSet {
    IdSet(Repr::Bitmap(b.clone()))
}

#[derive(Clone)]
enum Repr {
    /// Every id of `lo..=hi`, `lo <= hi`.
    Range(Id, Id),
    /// Any set (the empty set included; it may also be one range).
    Bitmap(RoaringBitmap),
}

impl Default for IdSet {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for IdSet {
    fn eq(&self, other: &IdSet) -> bool {
        match (&self.0, &other.0) {
            (Repr::Range(a, b), Repr::Range(c, d)) => (a, b) == (c, d),
            (Repr::Bitmap(a), Repr::Bitmap(b)) => a == b,
            _ => {
                self.len() == other.len()
                    && self.first() == other.first()
                    && self.last() == other.last()
                    && self.runs().eq(other.runs())
            }
        }
    }
}

impl Eq for IdSet {}

fn bitmap_of(lo: Id, hi: Id) -> RoaringBitmap {
    let mut b = RoaringBitmap::new();
    b.insert_range(lo..=hi);
    b
}

/// Whether `lo..=hi` and `c..=d` overlap or touch, so their union is one range.
fn joinable(lo: Id, hi: Id, c: Id, d: Id) -> bool {
    u64::from(c) <= u64::from(hi) + 1 && u64::from(lo) <= u64::from(d) + 1
}

/// The shorter of an id-set's two binary forms ([`IdSet::form`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Form {
    /// The run list (else roaring's format).
    runs: bool,
    /// Its length, without the one-byte tag.
    pub(crate) len: usize,
}

/// Serialized form tag: a list of runs, `(gap, len - 1)` varint pairs.
const TAG_RUNS: u8 = 0;
/// Serialized form tag: roaring's portable format.
const TAG_ROARING: u8 = 1;

/// Why a serialized or textual id-set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdSetError {
    /// The binary form was cut short.
    #[error("id-set bytes end early at byte {0}")]
    Truncated(usize),
    /// The binary form starts with a tag this version does not know.
    #[error("id-set encoding tag {0} is unknown (expected 0 = runs or 1 = roaring)")]
    UnknownTag(u8),
    /// A run would go past the largest id.
    #[error("id-set run at byte {0} goes past id {max}", max = Id::MAX)]
    Overflow(usize),
    /// Bytes are left after the set.
    #[error("id-set has {0} trailing bytes")]
    Trailing(usize),
    /// Roaring's own decoder refused the bytes.
    #[error("id-set roaring data is invalid: {0}")]
    Roaring(String),
    /// The text form could not be parsed.
    #[error("id-set text {text:?} is invalid at column {column}: {problem}")]
    Text {
        /// The text that was given.
        text: String,
        /// 1-based column of the problem.
        column: usize,
        /// What was wrong there.
        problem: &'static str,
    },
}

impl IdSet {
    /// The empty set (`sdm_set_new`).
    pub fn new() -> Self {
        Self(Repr::Bitmap(RoaringBitmap::new()))
    }

    /// The set holding every id of `range`.
    pub fn range(range: RangeInclusive<Id>) -> Self {
        let (lo, hi) = (*range.start(), *range.end());
        if lo > hi {
            Self::new()
        } else {
            Self(Repr::Range(lo, hi))
        }
    }

    /// The set `{0, 1, …, n - 1}`: all servers of an `n`-server tree.
    pub fn all(n: u32) -> Self {
        if n == 0 {
            Self::new()
        } else {
            Self::range(0..=n - 1)
        }
    }

    /// The set holding one id.
    pub fn single(id: Id) -> Self {
        Self(Repr::Range(id, id))
    }

    /// The set as a bitmap (made for a range).
    fn bitmap(&self) -> Cow<'_, RoaringBitmap> {
        match &self.0 {
            Repr::Range(lo, hi) => Cow::Owned(bitmap_of(*lo, *hi)),
            Repr::Bitmap(b) => Cow::Borrowed(b),
        }
    }

    /// The set's bitmap, to change it (a range becomes one).
    fn bitmap_mut(&mut self) -> &mut RoaringBitmap {
        if let Repr::Range(lo, hi) = self.0 {
            self.0 = Repr::Bitmap(bitmap_of(lo, hi));
        }
        match &mut self.0 {
            Repr::Bitmap(b) => b,
            Repr::Range(..) => unreachable!("made a bitmap above"),
        }
    }

    /// The set's one range, if it is held as one.
    fn as_range(&self) -> Option<(Id, Id)> {
        match self.0 {
            Repr::Range(lo, hi) => Some((lo, hi)),
            Repr::Bitmap(_) => None,
        }
    }

    /// Removes every element (`sdm_set_clear`).
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// Number of ids in the set (`sdm_set_size`).
    pub fn len(&self) -> u64 {
        match &self.0 {
            Repr::Range(lo, hi) => u64::from(*hi) - u64::from(*lo) + 1,
            Repr::Bitmap(b) => bitmap_len(b),
        }
    }

    /// True if the set holds no id (`sdm_set_is_empty`).
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            Repr::Range(..) => false,
            Repr::Bitmap(b) => b.is_empty(),
        }
    }

    /// Adds `id`; returns true if it was not there (`sdm_set_add_element`).
    pub fn insert(&mut self, id: Id) -> bool {
        if self.contains(id) {
            return false;
        }
        self.insert_range(id..=id);
        true
    }

    /// Adds every id of `range`.
    pub fn insert_range(&mut self, range: RangeInclusive<Id>) {
        let (c, d) = (*range.start(), *range.end());
        if c > d {
            return;
        }
        match self.0 {
            Repr::Range(lo, hi) if joinable(lo, hi, c, d) => {
                self.0 = Repr::Range(lo.min(c), hi.max(d));
            }
            Repr::Bitmap(ref b) if b.is_empty() => self.0 = Repr::Range(c, d),
            _ => {
                self.bitmap_mut().insert_range(c..=d);
            }
        }
    }

    /// Removes `id`; returns true if it was there (`sdm_set_remove_element`).
    pub fn remove(&mut self, id: Id) -> bool {
        match self.0 {
            Repr::Range(lo, hi) if id < lo || id > hi => false,
            Repr::Range(lo, hi) if lo == hi => {
                *self = Self::new();
                true
            }
            Repr::Range(lo, hi) if id == lo => {
                self.0 = Repr::Range(lo + 1, hi);
                true
            }
            Repr::Range(lo, hi) if id == hi => {
                self.0 = Repr::Range(lo, hi - 1);
                true
            }
            _ => self.bitmap_mut().remove(id),
        }
    }

    /// Adds every id in `0..=id` (`sdm_set_add_all`).
    pub fn add_all(&mut self, id: Id) {
        self.insert_range(0..=id);
    }

    /// True if every id of `self` is in `other` (`sdm_set_is_subset`).
    pub fn is_subset(&self, other: &IdSet) -> bool {
        match (&self.0, &other.0) {
            (Repr::Range(a, b), Repr::Range(c, d)) => c <= a && b <= d,
            (Repr::Range(a, b), Repr::Bitmap(o)) => o.range_cardinality(*a..=*b) == self.len(),
            (Repr::Bitmap(s), Repr::Range(c, d)) => {
                s.is_empty() || (*c <= s.min().unwrap_or(0) && s.max().unwrap_or(0) <= *d)
            }
            (Repr::Bitmap(s), Repr::Bitmap(o)) => s.is_subset(o),
        }
    }

    /// True if the two sets share no id.
    pub fn is_disjoint(&self, other: &IdSet) -> bool {
        match (&self.0, &other.0) {
            (Repr::Range(a, b), Repr::Range(c, d)) => b < c || d < a,
            (Repr::Range(a, b), Repr::Bitmap(o)) | (Repr::Bitmap(o), Repr::Range(a, b)) => {
                o.range_cardinality(*a..=*b) == 0
            }
            (Repr::Bitmap(s), Repr::Bitmap(o)) => s.is_disjoint(o),
        }
    }

    /// True if `id` is in the set (`sdm_set_contains`).
    pub fn contains(&self, id: Id) -> bool {
        match &self.0 {
            Repr::Range(lo, hi) => *lo <= id && id <= *hi,
            Repr::Bitmap(b) => b.contains(id),
        }
    }

    /// `self ← self ∪ other` (`sdm_set_union`).
    pub fn union_with(&mut self, other: &IdSet) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            *self = other.clone();
            return;
        }
        if let Some((c, d)) = other.as_range() {
            self.insert_range(c..=d);
            return;
        }
        let o = other.bitmap();
        *self.bitmap_mut() |= &*o;
    }

    /// `self ← self ∩ other` (`sdm_set_intersect`).
    pub fn intersect_with(&mut self, other: &IdSet) {
        *self = match (self.as_range(), other.as_range()) {
            (_, Some((c, d))) => self.intersect_range(c..=d),
            (Some((a, b)), None) => other.intersect_range(a..=b),
            (None, None) => {
                *self.bitmap_mut() &= &*other.bitmap();
                return;
            }
        };
    }

    /// `self ← self \ other` (`sdm_set_diff`).
    pub fn difference_with(&mut self, other: &IdSet) {
        if other.is_empty() || self.is_empty() {
            return;
        }
        if let (Some((a, b)), Some((c, d))) = (self.as_range(), other.as_range()) {
            if d < a || b < c {
                return;
            }
            if c <= a && b <= d {
                *self = Self::new();
                return;
            }
            if c <= a {
                self.0 = Repr::Range(d + 1, b);
                return;
            }
            if b <= d {
                self.0 = Repr::Range(a, c - 1);
                return;
            }
        }
        let o = other.bitmap();
        *self.bitmap_mut() -= &*o;
    }

    /// The ids of `self` that lie in `range`.
    pub fn intersect_range(&self, range: RangeInclusive<Id>) -> IdSet {
        let (lo, hi) = (*range.start(), *range.end());
        if lo > hi || self.is_empty() {
            return IdSet::new();
        }
        let b = match &self.0 {
            Repr::Range(a, b) => return IdSet::range(lo.max(*a)..=hi.min(*b)),
            Repr::Bitmap(b) => b,
        };
        // Fast paths: the range covers the set, or misses it.
        let (min, max) = (b.min().unwrap_or(0), b.max().unwrap_or(0));
        if lo <= min && max <= hi {
            return self.clone();
        }
        if hi < min || lo > max {
            return IdSet::new();
        }
        if lo == hi {
            return if self.contains(lo) {
                IdSet::single(lo)
            } else {
                IdSet::new()
            };
        }
        let mut out = b.clone();
        if lo > 0 {
            out.remove_range(0..lo);
        }
        if hi < Id::MAX {
            out.remove_range(hi + 1..=Id::MAX);
        }
        IdSet(Repr::Bitmap(out))
    }

    /// Number of ids of `self` in `range`.
    pub fn range_len(&self, range: RangeInclusive<Id>) -> u64 {
        match &self.0 {
            Repr::Range(..) => self.intersect_range(range).len(),
            Repr::Bitmap(b) => b.range_cardinality(range),
        }
    }

    /// The largest id any set can hold (`sdm_set_max`).
    pub const MAX_ID: Id = Id::MAX;

    /// The smallest id in the set (`sdm_set_first`).
    pub fn first(&self) -> Option<Id> {
        match &self.0 {
            Repr::Range(lo, _) => Some(*lo),
            Repr::Bitmap(b) => b.min(),
        }
    }

    /// The largest id in the set.
    pub fn last(&self) -> Option<Id> {
        match &self.0 {
            Repr::Range(_, hi) => Some(*hi),
            Repr::Bitmap(b) => b.max(),
        }
    }

    /// The ids in increasing order (`sdm_set_first` / `sdm_set_next` / `sdm_set_done`).
    pub fn iter(&self) -> impl Iterator<Item = Id> + '_ {
        let (range, bitmap) = match &self.0 {
            Repr::Range(lo, hi) => (Some(*lo..=*hi), None),
            Repr::Bitmap(b) => (None, Some(b.iter())),
        };
        range
            .into_iter()
            .flatten()
            .chain(bitmap.into_iter().flatten())
    }

    /// The maximal runs of consecutive ids, in increasing order.
    pub fn runs(&self) -> Runs<'_> {
        match &self.0 {
            Repr::Range(lo, hi) => Runs(RunsOf::One(Some(*lo..=*hi))),
            Repr::Bitmap(b) => Runs(RunsOf::Bitmap {
                inner: b.iter(),
                pending: None,
            }),
        }
    }

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

    /// [`IdSet::write_form`] of a set held as a bitmap: out of line, so a range's few
    /// instructions are not spread among a bitmap's many where the form is written.
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
                let b = RoaringBitmap::deserialize_from(&mut cursor)
                    .map_err(|e| IdSetError::Roaring(e.to_string()))?;
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
        return Err(IdSetError::Roaring(format!("unknown cookie {word:#x}")));
    };
    // Each container needs at least a 4-byte description and 2 bytes of data.
    if containers > 65536 || containers * 6 > b.len() as u64 {
        return Err(IdSetError::Roaring(format!(
            "{containers} containers do not fit in {} bytes",
            b.len()
        )));
    }
    Ok(())
}

fn varint_len(v: u64) -> usize {
    prost::encoding::encoded_len_varint(v)
}

/// How many ids a bitmap holds: out of line, so that [`IdSet::len`] of a range, inlined
/// where a frame is routed, is not spread among roaring's unrolled count of its containers.
#[inline(never)]
fn bitmap_len(b: &RoaringBitmap) -> u64 {
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

/// Iterator over the maximal runs of an [`IdSet`], from [`IdSet::runs`].
///
/// Walks roaring's own runs (at most one per container boundary more than the set's maximal
/// runs), so the cost follows the number of runs, never the number of ids: `[0-4294967295]`
/// is one step, not four billion.
pub struct Runs<'a>(RunsOf<'a>);

enum RunsOf<'a> {
    /// An inline range: its one run.
    One(Option<RangeInclusive<Id>>),
    /// A bitmap's runs.
    Bitmap {
        /// Roaring's runs, split at container boundaries.
        inner: roaring::bitmap::Iter<'a>,
        /// A run read ahead while joining.
        pending: Option<RangeInclusive<Id>>,
    },
}

impl Iterator for Runs<'_> {
    type Item = RangeInclusive<Id>;

    fn next(&mut self) -> Option<Self::Item> {
        let (inner, pending) = match &mut self.0 {
            RunsOf::One(r) => return r.take(),
            RunsOf::Bitmap { inner, pending } => (inner, pending),
        };
        let first = pending.take().or_else(|| inner.next_range())?;
        let (start, mut end) = (*first.start(), *first.end());
        // Roaring splits runs at every 65536-id container boundary: join them back.
        while let Some(r) = inner.next_range() {
            if end.checked_add(1) == Some(*r.start()) {
                end = *r.end();
            } else {
                *pending = Some(r);
                break;
            }
        }
        Some(start..=end)
    }
}

impl fmt::Display for IdSet {
    /// The range form, e.g. `[0-3,7,100-199]`; `[]` for the empty set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, r) in self.runs().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if r.start() == r.end() {
                write!(f, "{}", r.start())?;
            } else {
                write!(f, "{}-{}", r.start(), r.end())?;
            }
        }
        f.write_str("]")
    }
}

impl fmt::Debug for IdSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdSet{self}")
    }
}

impl FromStr for IdSet {
    type Err = IdSetError;

    /// Parses the range form: `[0-3,7,100-199]`, spaces allowed between tokens, ranges in
    /// any order and possibly overlapping; `[]` is the empty set.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |column: usize, problem: &'static str| IdSetError::Text {
            text: text.to_owned(),
            column: column + 1,
            problem,
        };
        let b = text.as_bytes();
        let mut pos = 0usize;
        let skip_ws = |pos: &mut usize| {
            while *pos < b.len() && b[*pos].is_ascii_whitespace() {
                *pos += 1;
            }
        };
        let number = |pos: &mut usize| -> Result<Id, IdSetError> {
            let start = *pos;
            while *pos < b.len() && b[*pos].is_ascii_digit() {
                *pos += 1;
            }
            if start == *pos {
                return Err(err(start, "expected a number"));
            }
            text[start..*pos]
                .parse::<Id>()
                .map_err(|_| err(start, "number is larger than 4294967295"))
        };
        skip_ws(&mut pos);
        if b.get(pos) != Some(&b'[') {
            return Err(err(pos, "expected '['"));
        }
        pos += 1;
        let mut set = IdSet::new();
        skip_ws(&mut pos);
        if b.get(pos) == Some(&b']') {
            pos += 1;
        } else {
            loop {
                skip_ws(&mut pos);
                let at = pos;
                let lo = number(&mut pos)?;
                skip_ws(&mut pos);
                let hi = if b.get(pos) == Some(&b'-') {
                    pos += 1;
                    skip_ws(&mut pos);
                    let hi = number(&mut pos)?;
                    if hi < lo {
                        return Err(err(at, "range ends before it starts"));
                    }
                    hi
                } else {
                    lo
                };
                set.insert_range(lo..=hi);
                skip_ws(&mut pos);
                match b.get(pos) {
                    Some(b',') => pos += 1,
                    Some(b']') => {
                        pos += 1;
                        break;
                    }
                    Some(_) => return Err(err(pos, "expected ',' or ']'")),
                    None => return Err(err(pos, "missing ']'")),
                }
            }
        }
        skip_ws(&mut pos);
        if pos != b.len() {
            return Err(err(pos, "unexpected text after ']'"));
        }
        Ok(set)
    }
}

impl FromIterator<Id> for IdSet {
    fn from_iter<T: IntoIterator<Item = Id>>(iter: T) -> Self {
        Self(Repr::Bitmap(iter.into_iter().collect()))
    }
}

impl Extend<Id> for IdSet {
    fn extend<T: IntoIterator<Item = Id>>(&mut self, iter: T) {
        self.bitmap_mut().extend(iter)
    }
}

impl From<RoaringBitmap> for IdSet {
    fn from(b: RoaringBitmap) -> Self {
        Self(Repr::Bitmap(b))
    }
}

impl BitOr for &IdSet {
    type Output = IdSet;
    fn bitor(self, rhs: &IdSet) -> IdSet {
        let mut out = self.clone();
        out.union_with(rhs);
        out
    }
}

impl BitAnd for &IdSet {
    type Output = IdSet;
    fn bitand(self, rhs: &IdSet) -> IdSet {
        let mut out = self.clone();
        out.intersect_with(rhs);
        out
    }
}

impl Sub for &IdSet {
    type Output = IdSet;
    fn sub(self, rhs: &IdSet) -> IdSet {
        let mut out = self.clone();
        out.difference_with(rhs);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn model(s: &IdSet) -> BTreeSet<Id> {
        s.iter().collect()
    }

    fn arb_ids() -> impl Strategy<Value = Vec<Id>> {
        prop_oneof![
            proptest::collection::vec(0u32..200, 0..60),
            proptest::collection::vec(any::<u32>(), 0..20),
            (0u32..2_000_000, 0u32..300_000)
                .prop_map(|(s, l)| (s..s.saturating_add(l)).step_by(1).collect()),
            (0u32..100_000, 1u32..5).prop_map(|(n, k)| (0..n).step_by(k as usize).collect()),
        ]
    }

    /// The set of `ids`: collected into a bitmap, or (`inline`) made from its runs, which
    /// keeps a set of one run inline.
    fn set_of(ids: &[Id], inline: bool) -> IdSet {
        if !inline {
            return ids.iter().copied().collect();
        }
        let sorted: BTreeSet<Id> = ids.iter().copied().collect();
        let mut s = IdSet::new();
        for id in sorted {
            s.insert_range(id..=id);
        }
        s
    }

    #[test]
    fn one_range_is_inline_and_ops_keep_it_so() {
        let mut s = IdSet::range(10..=19);
        assert!(s.as_range().is_some());
        s.insert(20);
        s.insert_range(0..=9);
        assert_eq!(s.as_range(), Some((0, 20)));
        s.remove(0);
        s.difference_with(&IdSet::range(15..=30));
        assert_eq!(s.as_range(), Some((1, 14)));
        s.intersect_with(&IdSet::range(5..=100));
        assert_eq!(s.as_range(), Some((5, 14)));
        let bytes = s.to_bytes();
        assert_eq!(IdSet::from_bytes(&bytes).unwrap().as_range(), Some((5, 14)));
        s.remove(9);
        assert!(s.as_range().is_none());
        assert_eq!(s.to_string(), "[5-8,10-14]");
        assert_eq!(IdSet::range(0..=u32::MAX).len(), 1 << 32);
        let mut full = IdSet::range(0..=u32::MAX);
        full.insert(7);
        assert_eq!(full.as_range(), Some((0, u32::MAX)));
    }

    #[test]
    fn text_examples() {
        let s: IdSet = "[0-3,7,100-199]".parse().unwrap();
        assert_eq!(s.len(), 4 + 1 + 100);
        assert_eq!(s.to_string(), "[0-3,7,100-199]");
        assert_eq!("[]".parse::<IdSet>().unwrap(), IdSet::new());
        assert_eq!(IdSet::new().to_string(), "[]");
        assert_eq!(
            " [ 5 , 1 - 2 ] ".parse::<IdSet>().unwrap().to_string(),
            "[1-2,5]"
        );
        assert_eq!(
            "[4294967295]".parse::<IdSet>().unwrap().to_string(),
            "[4294967295]"
        );
    }

    #[test]
    fn text_errors_name_the_column() {
        for (bad, col) in [
            ("", 1),
            ("0-3", 1),
            ("[0-", 4),
            ("[3-1]", 2),
            ("[1,,2]", 4),
            ("[1 2]", 4),
            ("[1]x", 4),
            ("[4294967296]", 2),
            ("[1", 3),
        ] {
            match bad.parse::<IdSet>() {
                Err(IdSetError::Text { column, .. }) => assert_eq!(column, col, "{bad:?}"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn empty_means_empty() {
        let e = IdSet::new();
        assert!(e.is_empty());
        assert!(!e.contains(0));
        assert_eq!(IdSet::all(0), e);
        assert_eq!(IdSet::from_bytes(&e.to_bytes()).unwrap(), e);
    }

    #[test]
    fn million_broadcast_is_tiny() {
        let s = IdSet::all(1_000_000);
        assert!(s.to_bytes().len() <= 8, "{}", s.to_bytes().len());
        assert_eq!(s.to_string(), "[0-999999]");
    }

    #[test]
    fn sparse_sets_use_roaring() {
        let s: IdSet = (0..200_000).step_by(2).collect();
        let b = s.to_bytes();
        assert_eq!(b[0], TAG_ROARING);
        assert!(b.len() < 60_000, "{}", b.len());
        assert_eq!(IdSet::from_bytes(&b).unwrap(), s);
    }

    #[test]
    fn whole_id_space_is_cheap_to_walk_print_and_encode() {
        // A 7-byte frame field can name every id: walking it must cost its runs, not its ids.
        let all = IdSet::range(0..=Id::MAX);
        let b = all.to_bytes();
        assert_eq!(b, [TAG_RUNS, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        let back = IdSet::from_bytes(&b).unwrap();
        assert_eq!(back.len(), 1 << 32);
        assert_eq!(back.runs().collect::<Vec<_>>(), vec![0..=Id::MAX]);
        assert_eq!(back.to_string(), "[0-4294967295]");
        let mut holes = back.clone();
        for id in [5, 65_535, 65_536, 1 << 31, Id::MAX] {
            holes.remove(id);
        }
        assert_eq!(
            holes.to_string(),
            "[0-4,6-65534,65537-2147483647,2147483649-4294967294]"
        );
        assert_eq!(IdSet::from_bytes(&holes.to_bytes()).unwrap(), holes);
    }

    #[test]
    fn runs_join_across_container_boundaries() {
        let s: IdSet = (65_530..65_545)
            .chain([70_000])
            .chain(131_000..140_000)
            .collect();
        let runs: Vec<_> = s.runs().collect();
        assert_eq!(
            runs,
            vec![65_530..=65_544, 70_000..=70_000, 131_000..=139_999]
        );
    }

    #[test]
    fn hostile_roaring_header_is_refused() {
        let mut b = vec![TAG_ROARING];
        b.extend_from_slice(&12346u32.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(IdSet::from_bytes(&b), Err(IdSetError::Roaring(_))));
    }

    proptest! {
        #[test]
        fn ops_match_btreeset(
            a in arb_ids(),
            b in arb_ids(),
            probe in any::<u32>(),
            inline in (any::<bool>(), any::<bool>()),
        ) {
            let (sa, sb) = (set_of(&a, inline.0), set_of(&b, inline.1));
            prop_assert_eq!(&sa, &set_of(&a, !inline.0));
            let (ma, mb): (BTreeSet<Id>, BTreeSet<Id>) = (a.into_iter().collect(), b.into_iter().collect());
            prop_assert_eq!(sa.len(), ma.len() as u64);
            prop_assert_eq!(sa.is_empty(), ma.is_empty());
            prop_assert_eq!(model(&(&sa | &sb)), &ma | &mb);
            prop_assert_eq!(model(&(&sa & &sb)), &ma & &mb);
            prop_assert_eq!(model(&(&sa - &sb)), &ma - &mb);
            prop_assert_eq!(sa.is_subset(&sb), ma.is_subset(&mb));
            prop_assert_eq!(sa.is_disjoint(&sb), ma.is_disjoint(&mb));
            prop_assert_eq!(sa.contains(probe), ma.contains(&probe));
            prop_assert_eq!(sa == sb, ma == mb);
            prop_assert_eq!(sa.first(), ma.first().copied());
            prop_assert_eq!(sa.last(), ma.last().copied());
            let mut u = sa.clone(); u.union_with(&sb);
            prop_assert_eq!(model(&u), &ma | &mb);
            let mut i = sa.clone(); i.intersect_with(&sb);
            prop_assert_eq!(model(&i), &ma & &mb);
            let mut d = sa.clone(); d.difference_with(&sb);
            prop_assert_eq!(model(&d), &ma - &mb);
            let mut r = sa.clone();
            prop_assert_eq!(r.insert(probe), !ma.contains(&probe));
            prop_assert!(r.remove(probe));
            let mut m2 = ma.clone(); m2.remove(&probe);
            prop_assert_eq!(model(&r), m2);
            let mut c = sa.clone(); c.clear();
            prop_assert!(c.is_empty());
            let lo = probe % 3_000_000; let hi = lo.saturating_add(probe % 70_000);
            let ir = sa.intersect_range(lo..=hi);
            prop_assert_eq!(model(&ir), ma.range(lo..=hi).copied().collect::<BTreeSet<_>>());
            prop_assert_eq!(sa.range_len(lo..=hi), ma.range(lo..=hi).count() as u64);
        }

        #[test]
        fn runs_match_a_walk_over_the_ids(a in arb_ids()) {
            let s: IdSet = a.into_iter().collect();
            let mut want: Vec<RangeInclusive<Id>> = Vec::new();
            for id in s.iter() {
                match want.last_mut() {
                    Some(r) if r.end().checked_add(1) == Some(id) => *r = *r.start()..=id,
                    _ => want.push(id..=id),
                }
            }
            prop_assert_eq!(s.runs().collect::<Vec<_>>(), want);
        }

        #[test]
        fn add_all_is_prefix(n in 0u32..100_000) {
            let mut s = IdSet::new();
            s.add_all(n);
            prop_assert_eq!(s.len(), u64::from(n) + 1);
            prop_assert_eq!(s, IdSet::range(0..=n));
        }

        #[test]
        fn text_round_trips(a in arb_ids()) {
            let s: IdSet = a.into_iter().collect();
            let t = s.to_string();
            let back: IdSet = t.parse().unwrap();
            prop_assert_eq!(&back, &s);
            prop_assert_eq!(back.to_string(), t);
        }

        #[test]
        fn bytes_round_trip(a in arb_ids()) {
            let s: IdSet = a.into_iter().collect();
            let b = s.to_bytes();
            prop_assert!(b.len() <= s.serialized_len());
            prop_assert_eq!(IdSet::from_bytes(&b).unwrap(), s);
        }

        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = IdSet::from_bytes(&b);
        }

        #[test]
        fn random_text_never_panics(t in "[\\[\\]0-9, -]{0,24}") {
            if let Ok(s) = t.parse::<IdSet>() {
                prop_assert_eq!(s.to_string().parse::<IdSet>().unwrap(), s);
            }
        }
    }
}
