//! The templated line's payload: `[TEMPLATE | stream]`, the key (length-prefixed, so a
//! node can merge by it without decoding the rest), then one row's values (a line of one
//! row), or every row with its ranks (a group whose rows hold all its ranks: its statistics
//! follow from them), or the whole group (statistics and the kept rows).
//!
//! Numbers are LEB128 varints; texts and id sets are length-prefixed. The ranks of the
//! group are the line's sources, not repeated here.

use bytes::Bytes;
use sdm_proto::IdSet;
use thiserror::Error;

use super::group::{Group, Row, Slot};
use super::number::Sum;
use super::{Key, MAX_SLOTS, SlotKind, TEMPLATE};

/// Why a templated payload could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateError {
    /// It ends before its last field.
    #[error("templated line truncated at byte {0}")]
    Truncated(usize),
    /// A field holds a value it cannot.
    #[error("templated line: bad {0}")]
    Bad(&'static str),
}

const ONE_ROW: u8 = 0;
const FULL: u8 = 1;
const ROWS: u8 = 2;

fn put_varint(out: &mut Vec<u8>, v: u64) {
    put_varint128(out, u128::from(v));
}

fn put_varint128(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_row(out: &mut Vec<u8>, r: &Row) {
    for v in &r.values {
        put_bytes(out, v.text.as_bytes());
    }
    put_ids(out, &r.ranks);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_ids(out: &mut Vec<u8>, ids: &IdSet) {
    put_bytes(out, &ids.to_bytes());
}

fn put_key(out: &mut Vec<u8>, k: &Key) {
    put_varint(out, k.kinds.len() as u64);
    out.extend(k.kinds.iter().map(|&k| k as u8));
    for s in &k.segs {
        put_bytes(out, s.as_bytes());
    }
}

/// The templated payload of `g` on stream `stream`.
pub fn encode(stream: u8, g: &Group) -> Bytes {
    let mut key = Vec::new();
    put_key(&mut key, &g.key);
    let mut out = Vec::with_capacity(key.len() + 32);
    out.push(TEMPLATE | stream);
    put_bytes(&mut out, &key);
    if g.rows.len() == 1 && g.complete() {
        out.push(ONE_ROW);
        for v in &g.rows[0].values {
            put_bytes(&mut out, v.text.as_bytes());
        }
        return out.into();
    }
    if g.complete() {
        // (Smaller than the statistics while few rows: a subtree's partial group.)
        out.push(ROWS);
        put_varint(&mut out, g.rows.len() as u64);
        for r in &g.rows {
            put_row(&mut out, r);
        }
        return out.into();
    }
    out.push(FULL);
    for s in &g.slots {
        put_bytes(&mut out, s.min.as_bytes());
        put_ids(&mut out, &s.min_at);
        put_bytes(&mut out, s.max.as_bytes());
        put_ids(&mut out, &s.max_at);
        match s.sum {
            Sum::Exact { mant, scale } => {
                out.push(0);
                // Zigzag: small sums of either sign take a few bytes.
                put_varint128(&mut out, ((mant << 1) ^ (mant >> 127)) as u128);
                put_varint(&mut out, u64::from(scale));
            }
            Sum::Float(f) => {
                out.push(1);
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
        out.push(s.frac);
        out.push(u8::from(s.exp));
    }
    put_varint(&mut out, g.rows.len() as u64);
    for r in &g.rows {
        put_row(&mut out, r);
    }
    out.into()
}

/// A reader over a payload.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, TemplateError> {
        let v = *self
            .b
            .get(self.pos)
            .ok_or(TemplateError::Truncated(self.pos))?;
        self.pos += 1;
        Ok(v)
    }

    fn varint(&mut self) -> Result<u64, TemplateError> {
        u64::try_from(self.varint128()?).map_err(|_| TemplateError::Bad("varint"))
    }

    fn varint128(&mut self) -> Result<u128, TemplateError> {
        let mut v = 0u128;
        for shift in (0..128).step_by(7) {
            let b = self.byte()?;
            v |= u128::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(TemplateError::Bad("varint"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], TemplateError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or(TemplateError::Truncated(self.b.len()))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn bytes(&mut self) -> Result<&'a [u8], TemplateError> {
        let n = usize::try_from(self.varint()?).map_err(|_| TemplateError::Bad("length"))?;
        self.take(n)
    }

    fn text(&mut self) -> Result<Box<str>, TemplateError> {
        std::str::from_utf8(self.bytes()?)
            .map(Into::into)
            .map_err(|_| TemplateError::Bad("text"))
    }

    fn ids(&mut self) -> Result<IdSet, TemplateError> {
        IdSet::from_bytes(self.bytes()?).map_err(|_| TemplateError::Bad("id set"))
    }

    fn count(&mut self, each: usize) -> Result<usize, TemplateError> {
        // A count the rest of the input cannot hold is refused before anything is allocated.
        let n = self.varint()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n.saturating_mul(each) <= self.b.len() - self.pos)
            .ok_or(TemplateError::Bad("count"))
    }
}

/// Where a templated payload's key ends (its tag and key are what lines merge by).
pub(super) fn key_end(payload: &[u8]) -> Option<usize> {
    let mut r = Reader { b: payload, pos: 1 };
    r.bytes().ok()?;
    Some(r.pos)
}

fn key(b: &[u8]) -> Result<Key, TemplateError> {
    let mut r = Reader { b, pos: 0 };
    let n = r.count(2)?;
    let kinds = r
        .take(n)?
        .iter()
        .map(|&k| match k {
            0 => Ok(SlotKind::Dec),
            1 => Ok(SlotKind::Hex),
            _ => Err(TemplateError::Bad("slot kind")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let segs = (0..=n).map(|_| r.text()).collect::<Result<Vec<_>, _>>()?;
    if r.pos != b.len() || n == 0 || n > MAX_SLOTS {
        return Err(TemplateError::Bad("key"));
    }
    Ok(Key { segs, kinds })
}

fn slot(r: &mut Reader<'_>) -> Result<Slot, TemplateError> {
    let (min, min_at, max, max_at) = (r.text()?, r.ids()?, r.text()?, r.ids()?);
    let sum = match r.byte()? {
        0 => {
            let z = r.varint128()?;
            let mant = ((z >> 1) as i128) ^ -((z & 1) as i128);
            let scale = u32::try_from(r.varint()?).map_err(|_| TemplateError::Bad("scale"))?;
            Sum::Exact { mant, scale }
        }
        1 => Sum::Float(f64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"))),
        _ => return Err(TemplateError::Bad("sum")),
    };
    Ok(Slot {
        min,
        min_at,
        max,
        max_at,
        sum,
        frac: r.byte()?,
        exp: r.byte()? != 0,
    })
}

/// Reads a templated payload of the lines of `sources`: its stream and group.
pub fn decode(payload: &[u8], sources: &IdSet) -> Result<(u8, Group), TemplateError> {
    let mut r = Reader { b: payload, pos: 0 };
    let tag = r.byte()?;
    if tag & TEMPLATE == 0 {
        return Err(TemplateError::Bad("tag"));
    }
    let key = key(r.bytes()?)?;
    let n = key.kinds.len();
    let values = |r: &mut Reader<'_>| (0..n).map(|_| r.text()).collect::<Result<Vec<_>, _>>();
    let rows = |r: &mut Reader<'_>| {
        (0..r.count(n + 2)?)
            .map(|_| {
                Ok(Row {
                    values: Row::values(&key, values(r)?),
                    ranks: r.ids()?,
                })
            })
            .collect::<Result<Vec<_>, TemplateError>>()
    };
    let g = match r.byte()? {
        ONE_ROW => Group::single(key, values(&mut r)?, sources.clone()),
        ROWS => {
            // The statistics are the rows' own.
            let rows = rows(&mut r)?;
            let g = Group::from_rows(key, rows).ok_or(TemplateError::Bad("rows"))?;
            if &g.ranks != sources {
                return Err(TemplateError::Bad("ranks of the rows"));
            }
            g
        }
        FULL => {
            let slots = (0..n)
                .map(|_| slot(&mut r))
                .collect::<Result<Vec<_>, _>>()?;
            let rows = rows(&mut r)?;
            Group {
                key,
                ranks: sources.clone(),
                slots,
                rows,
            }
        }
        _ => return Err(TemplateError::Bad("form")),
    };
    if r.pos != payload.len() {
        return Err(TemplateError::Bad("trailing bytes"));
    }
    Ok((tag & !TEMPLATE, g))
}
