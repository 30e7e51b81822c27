//! `IdSet`: a set of server ids over a roaring bitmap (the seed's `sdm_idset`), with the
//! range text form `[0-3,7,100-199]` and a compact binary serialization.
//!
//! The empty set means *no* server. (The old SDM read an empty set as "all"; we don't.)

use std::borrow::Cow;
use std::fmt;
use std::ops::{BitAnd, BitOr, RangeInclusive, Sub};
use std::str::FromStr;
use std::sync::Arc;

use roaring::RoaringBitmap;

use wire::bitmap_len;
pub(crate) use wire::{put_key, put_varint};

mod wire;

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

/// Why a serialized or textual id-set was refused.
#[derive(Debug, Clone, thiserror::Error)]
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
    /// The roaring data is refused: its header by our checks, or the rest by roaring's own
    /// decoder (then its error is the source).
    #[error("id-set roaring data is invalid: {what}")]
    Roaring {
        /// What was wrong.
        what: String,
        /// Roaring's decoder error, when it refused the bytes.
        #[source]
        source: Option<Arc<std::io::Error>>,
    },
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
mod tests;
