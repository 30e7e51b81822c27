//! Templated output merge: lines that differ only in their numbers merge into one template
//! with per-slot value ranges.
//!
//! With [`MergeMode::Template`] a server turns each line its program prints that holds
//! numbers (see [`scan`]) into a *templated line*: a stdio payload of its own tag
//! ([`TEMPLATE`] with the stream in the low bits) carrying the template key and the values.
//! Interior nodes (`crate::coalesce`) and the front-end (`sdm_client::align`) fold the
//! templated lines of equal stream, line index and key into one [`Group`] (per slot: min
//! and max with their ranks, an exact sum, and the extreme rows): interior nodes fold the
//! lines that reach them within their hold, the front-end's aligner the rest. The fold is a
//! union: associative and commutative, the same whatever the tree's shape or the arrival
//! order. [`expand`] turns a group into the lines a person reads: the template with
//! ranges, and its outliers each on a line of its own with its exact text. Lines without numbers, or with more than
//! [`MAX_SLOTS`] (a group keeps its extreme rows per slot, so its cost grows with the
//! slots), stay plain, exact lines.

mod group;
mod number;
mod render;
mod scan;
mod wire;

#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use sdm_proto::IdSet;

pub use group::{Group, KEEP, Row, Slot};
pub use number::{Sum, Value};
pub use render::{Expanded, MIN_RANKS, SlotView, TemplateLine, expand};
pub use scan::{HEX_WORD, scan};
pub use wire::{TemplateError, decode, encode};

/// Bit set in the tag (a stdio payload's first byte) of a templated line; the stream is in
/// the low bits (`TEMPLATE | STDOUT`).
pub const TEMPLATE: u8 = 0x10;

/// The most numbers a templated line holds: a line with more stays exact.
pub const MAX_SLOTS: usize = 16;

/// How output lines of different ranks merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MergeMode {
    /// Only identical lines merge.
    #[default]
    Exact,
    /// Lines differing only in their numbers merge into a template.
    Template,
}

impl MergeMode {
    /// The name `--merge` takes.
    pub fn name(self) -> &'static str {
        match self {
            MergeMode::Exact => "exact",
            MergeMode::Template => "template",
        }
    }
}

impl fmt::Display for MergeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MergeMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "exact" => Ok(MergeMode::Exact),
            "template" => Ok(MergeMode::Template),
            _ => Err(format!("unknown merge mode {s:?} (exact or template)")),
        }
    }
}

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SlotKind {
    /// A decimal number.
    Dec,
    /// Hex digits (an id or an address).
    Hex,
}

/// A template: the literal text around its slots and what each slot holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// The text before each slot, and after the last (one more than the slots).
    pub segs: Vec<Box<str>>,
    /// Each slot's kind.
    pub kinds: Vec<SlotKind>,
}

impl Key {
    /// The template with its slots shown as `{}`.
    pub fn pattern(&self) -> String {
        self.fill(|_| "{}".to_owned())
    }

    /// The text with slot `i` shown as `f(i)`.
    pub fn fill(&self, mut f: impl FnMut(usize) -> String) -> String {
        let mut out = String::new();
        for (i, seg) in self.segs.iter().enumerate() {
            out.push_str(seg);
            if i < self.kinds.len() {
                out.push_str(&f(i));
            }
        }
        out
    }
}

/// Whether a stdio payload is a templated line.
pub fn is_template(payload: &[u8]) -> bool {
    payload.first().is_some_and(|&t| t & TEMPLATE != 0)
}

/// The stream tag of a stdio payload (a templated line's stream, or the tag itself).
pub fn stream_of(payload: &[u8]) -> u8 {
    match payload.first() {
        Some(&t) if t & TEMPLATE != 0 => t & !TEMPLATE,
        Some(&t) => t,
        None => 1,
    }
}

/// What lines merge by: a templated line's tag and key (a prefix of its payload), any
/// other payload whole.
pub fn merge_key(payload: &Bytes) -> Bytes {
    if is_template(payload) {
        payload.slice(..wire::key_end(payload).unwrap_or(payload.len()))
    } else {
        payload.clone()
    }
}

/// A line `ranks` printed (`[stream, text…]`) as a templated line, if it holds numbers;
/// else the payload itself.
pub fn templated(payload: Bytes, ranks: &IdSet) -> Bytes {
    let Some((&stream, text)) = payload.split_first() else {
        return payload;
    };
    if stream & TEMPLATE != 0 {
        return payload;
    }
    match scan(text) {
        Some((key, values)) => encode(stream, &Group::single(key, values, ranks.clone())),
        None => payload,
    }
}

/// A stdio payload of `sources` read for folding: `Ok(None)` if it is no templated line,
/// its group if it is, an error if it is one that does not decode (such a line joins no
/// group: its ranks print as malformed, never as another line's values).
pub fn to_fold(payload: &[u8], sources: &IdSet) -> Result<Option<Group>, TemplateError> {
    if !is_template(payload) {
        return Ok(None);
    }
    decode(payload, sources).map(|(_, g)| Some(g))
}

/// The templated lines folded into the line that opened a group (its payload decoded at
/// the first fold, encoded again when the group leaves). Interior nodes and the
/// front-end's aligner fold alike with it.
#[derive(Debug, Default)]
pub struct Folding(Option<Box<Group>>);

impl Folding {
    /// Folds `g` (a line of the key of `payload`, the opening line of `sources`) in.
    pub fn fold(&mut self, payload: &[u8], sources: &IdSet, g: Group) {
        match &mut self.0 {
            Some(f) => f.merge(g),
            None => {
                // (The opening line decoded when it came: see `to_fold`.)
                if let Ok((_, mut f)) = decode(payload, sources) {
                    f.merge(g);
                    self.0 = Some(Box::new(f));
                }
            }
        }
    }

    /// The group's payload: `payload` (the opening line's) if nothing was folded in.
    pub fn into_payload(self, payload: Bytes) -> Bytes {
        match self.0 {
            Some(g) => encode(stream_of(&payload), &g),
            None => payload,
        }
    }
}

/// What a line that claims to be templated but does not decode prints as.
pub const MALFORMED: &str = "(malformed templated line)";

/// A templated payload of `sources` expanded (`None`: it does not decode).
pub fn expanded(payload: &[u8], sources: &IdSet) -> Option<Expanded> {
    decode(payload, sources).ok().map(|(_, g)| expand(&g))
}

/// The lines a templated payload of `sources` prints as (the template's, then each
/// outlier's), each with its ranks; a malformed one prints as one line saying so.
pub fn lines(payload: &[u8], sources: &IdSet) -> Vec<(IdSet, String)> {
    match expanded(payload, sources) {
        Some(x) => x.lines(),
        None => vec![(sources.clone(), MALFORMED.into())],
    }
}
