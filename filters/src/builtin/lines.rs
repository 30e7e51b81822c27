//! `lines`: coalesces the text output of many ranks. Line `i` of one rank merges with line
//! `i` of every rank that printed the same text there; each rank's order is kept.
//!
//! Merging by (line number, text) is what makes the result independent of the tree: it is a
//! union of sets keyed by that pair. Leaf input: text (invalid UTF-8 replaced by U+FFFD), split
//! at `\n`. Record: `{"sdm":1,"type":"lines","lines":[{"i":0,"text":"iteration 5 done",
//! "ids":"[0-1023]"}]}`, ordered by line number, then smallest id. `finish` renders
//! `[ids] text` per line in that order.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sdm_proto::IdSet;
use serde::{Deserialize, Serialize};

use super::FoldedIds;
use crate::record::{self, ids_text};
use crate::{Filter, FilterError, Group};

/// One coalesced line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineGroup {
    /// Line number within each rank's output.
    pub i: u64,
    /// The text, without the newline.
    pub text: String,
    /// Ranks that printed it there.
    #[serde(with = "ids_text")]
    pub ids: IdSet,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct LinesRecord {
    lines: Vec<LineGroup>,
}

/// The `lines` filter.
#[derive(Debug, Default)]
pub struct Lines {
    lines: BTreeMap<(u64, String), IdSet>,
    folded: FoldedIds,
}

impl Lines {
    /// No lines yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn take(&mut self) -> Option<(Vec<LineGroup>, IdSet)> {
        let s = std::mem::take(self);
        let ids = s.folded.take()?;
        let mut v: Vec<LineGroup> = s
            .lines
            .into_iter()
            .map(|((i, text), ids)| LineGroup { i, text, ids })
            .collect();
        v.sort_by(|a, b| (a.i, a.ids.first(), &a.text).cmp(&(b.i, b.ids.first(), &b.text)));
        Some((v, ids))
    }

    /// Reads a flushed `lines` record.
    pub fn decode(payload: &[u8]) -> Result<Vec<LineGroup>, FilterError> {
        Ok(record::decode::<LinesRecord>("lines", "lines", payload, &IdSet::new())?.lines)
    }
}

impl Filter for Lines {
    fn name(&self) -> &str {
        "lines"
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        let add: Vec<(u64, String)> = if record::is_record(payload) {
            let r: LinesRecord = record::decode("lines", "lines", payload, sources)?;
            // A record's groups carry their own ids (a subset of `sources`).
            for g in r.lines {
                self.lines
                    .entry((g.i, g.text))
                    .or_default()
                    .union_with(&g.ids);
            }
            Vec::new()
        } else {
            let text = String::from_utf8_lossy(payload);
            let text = text.strip_suffix('\n').unwrap_or(&text);
            if text.is_empty() && payload.is_empty() {
                Vec::new()
            } else {
                text.split('\n')
                    .enumerate()
                    .map(|(i, l)| (i as u64, l.strip_suffix('\r').unwrap_or(l).to_owned()))
                    .collect()
            }
        };
        for k in add {
            self.lines.entry(k).or_default().union_with(sources);
        }
        self.folded.add(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        Ok(match self.take() {
            Some((lines, ids)) => vec![Group::new(
                record::encode("lines", &LinesRecord { lines }),
                ids,
            )],
            None => Vec::new(),
        })
    }

    fn finish(&mut self) -> Result<Vec<Group>, FilterError> {
        Ok(match self.take() {
            Some((lines, ids)) => {
                let mut out = String::new();
                for l in lines {
                    let _ = writeln!(out, "{} {}", l.ids, l.text);
                }
                vec![Group::new(out, ids)]
            }
            None => Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesces_in_order() {
        let mut a = Lines::new();
        a.fold(b"start\niteration 1\ndone\n", &IdSet::single(0))
            .unwrap();
        a.fold(b"start\niteration 1\ndone\n", &IdSet::single(1))
            .unwrap();
        let up = a.flush().unwrap();
        let mut root = Lines::new();
        root.fold(
            b"start\nwarning: slow\niteration 1\ndone",
            &IdSet::single(2),
        )
        .unwrap();
        root.fold(&up[0].payload, &up[0].sources).unwrap();
        let g = root.finish().unwrap();
        assert_eq!(
            std::str::from_utf8(&g[0].payload).unwrap(),
            "[0-2] start\n[0-1] iteration 1\n[2] warning: slow\n[0-1] done\n[2] iteration 1\n[2] done\n"
        );
        assert_eq!(g[0].sources.to_string(), "[0-2]");
    }
}
