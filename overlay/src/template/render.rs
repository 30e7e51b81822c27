//! Turns a [`Group`] into the lines a person reads: outliers split off (each its own line
//! with its ranks and exact text), then the template of the rest with its ranges.
//!
//! The outlier rule: with at least [`MIN_RANKS`] ranks, the highest row of a decimal slot
//! is an outlier when its distance to the next row is larger than the spread of the rest
//! (the next row's value minus the slot's minimum), and so on down the kept rows; the same
//! for the lowest. Outliers hold at most an eighth of the ranks and are at most `KEEP - 1`
//! rows, so each slot's range over the rest is read exactly off the kept rows.

use std::cmp::Ordering;

use sdm_proto::IdSet;

use super::SlotKind;
use super::group::{Group, KEEP, Row};
use super::number::{self, Sum};

/// The fewest ranks a template needs before any of them is split off as an outlier.
pub const MIN_RANKS: u64 = 8;

/// One slot over the template's ranks (the outliers' excluded).
#[derive(Debug, Clone, PartialEq)]
pub struct SlotView {
    /// The lowest value, as printed.
    pub min: String,
    /// The highest value, as printed.
    pub max: String,
    /// Who printed the lowest (`None`: not known exactly, the group kept too few rows).
    pub min_at: Option<IdSet>,
    /// Who printed the highest (`None` as for `min_at`).
    pub max_at: Option<IdSet>,
    /// The mean (decimal slots), with the values' precision.
    pub mean: Option<String>,
}

/// A template's line: its ranks, its text (ranges in the varying slots), and the slots.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateLine {
    /// The ranks.
    pub ranks: IdSet,
    /// What prints: the exact text if every slot holds one value, else the template with
    /// ranges and means.
    pub text: String,
    /// The template, `{}` for each slot.
    pub pattern: String,
    /// The slots.
    pub slots: Vec<SlotView>,
}

/// A group as lines: the template (of the ranks that are no outlier) and the outliers.
#[derive(Debug, Clone, PartialEq)]
pub struct Expanded {
    /// The template's line.
    pub main: TemplateLine,
    /// Each outlier row: its ranks and exact text, by first rank.
    pub outliers: Vec<(IdSet, String)>,
}

impl Expanded {
    /// The lines it prints as: the template's (if it has ranks), then each outlier's.
    pub fn lines(self) -> Vec<(IdSet, String)> {
        let main = (!self.main.ranks.is_empty()).then_some((self.main.ranks, self.main.text));
        main.into_iter().chain(self.outliers).collect()
    }
}

/// The rows of `g` that are outliers (indices into `g.rows`).
fn outliers(g: &Group) -> Vec<usize> {
    let n = g.ranks.len();
    if n < MIN_RANKS {
        return Vec::new();
    }
    let (max_ranks, max_rows) = ((n / 8).max(1), KEEP - 1);
    let (mut out, mut held) = (Vec::new(), 0u64);
    for (s, slot) in g.slots.iter().enumerate() {
        if g.key.kinds[s] != SlotKind::Dec {
            continue;
        }
        let asc = g.order(s);
        let desc: Vec<usize> = asc.iter().rev().copied().collect();
        let (lo, hi) = (number::decimal(&slot.min), number::decimal(&slot.max));
        for (order, far) in [(desc, lo), (asc, hi)] {
            let v = |j: usize| g.rows[order[j]].values[s].num();
            let mut side = 0;
            while side + 1 < order.len().min(KEEP) {
                let (a, b) = (v(side), v(side + 1));
                if (a - b).abs() <= (b - far).abs() {
                    break;
                }
                side += 1;
            }
            for &i in &order[..side] {
                let r = g.rows[i].ranks.len();
                if !out.contains(&i) && out.len() < max_rows && held + r <= max_ranks {
                    out.push(i);
                    held += r;
                }
            }
        }
    }
    out
}

/// The end of slot `s` (`top`: its max) over the rows not in `out`, and who printed it.
fn rest_end(
    g: &Group,
    s: usize,
    out: &[usize],
    gone: &IdSet,
    top: bool,
) -> (String, Option<IdSet>) {
    let slot = &g.slots[s];
    let (v, at) = if top {
        (&slot.max, &slot.max_at)
    } else {
        (&slot.min, &slot.min_at)
    };
    if at.is_disjoint(gone) {
        return (v.to_string(), Some(at.clone()));
    }
    let mut order = g.order(s);
    if top {
        order.reverse();
    }
    // The first KEEP rows are the whole group's ends: one of them is no outlier.
    let ends = &order[..order.len().min(KEEP)];
    let rest: Vec<&Row> = order
        .iter()
        .filter(|i| !out.contains(i))
        .map(|&i| &g.rows[i])
        .collect();
    let Some(first) = rest.first() else {
        // (Only a malformed group has no row besides its outliers: keep the whole end.)
        return (v.to_string(), Some(at.clone()));
    };
    let v = &first.values[s];
    let mut at = IdSet::new();
    for r in rest.iter().take_while(|r| r.values[s] == *v) {
        at.union_with(&r.ranks);
    }
    // Exact if a row past the value is among the ends (every row of it is kept).
    let past = ends.iter().any(|&i| {
        !out.contains(&i) && g.rows[i].values[s].cmp(g.key.kinds[s], v) != Ordering::Equal
    });
    (v.text.to_string(), (past || g.complete()).then_some(at))
}

fn mean(sum: Sum, count: u64, frac: u8, exp: bool) -> String {
    let m = sum.to_f64() / count as f64;
    let digits = usize::from(frac.max(u8::from(m.fract() != 0.0 && frac == 0)));
    if exp {
        format!("{m:.digits$e}")
    } else {
        format!("{m:.digits$}")
    }
}

fn row_text(g: &Group, r: &Row) -> String {
    g.key.fill(|i| r.values[i].text.to_string())
}

/// Splits off the outliers of `g` and renders the rest as one line.
pub fn expand(g: &Group) -> Expanded {
    let out = outliers(g);
    let mut gone = IdSet::new();
    for &i in &out {
        gone.union_with(&g.rows[i].ranks);
    }
    let ranks = &g.ranks - &gone;
    let slots: Vec<SlotView> = (0..g.slots.len())
        .map(|s| {
            let (min, min_at) = rest_end(g, s, &out, &gone, false);
            let (max, max_at) = rest_end(g, s, &out, &gone, true);
            let slot = &g.slots[s];
            let mean = (g.key.kinds[s] == SlotKind::Dec).then(|| {
                let sum = out.iter().fold(slot.sum, |acc, &i| {
                    let r = &g.rows[i];
                    acc.add_times(Sum::of(&r.values[s].text), -(r.ranks.len() as i64))
                });
                mean(sum, ranks.len(), slot.frac, slot.exp)
            });
            SlotView {
                min,
                max,
                min_at,
                max_at,
                mean,
            }
        })
        .collect();
    let varying: Vec<usize> = (0..slots.len())
        .filter(|&s| slots[s].min != slots[s].max)
        .collect();
    let mut text = g.key.fill(|s| match &slots[s] {
        v if v.min == v.max => v.min.clone(),
        v => format!("{{{}..{}}}", v.min, v.max),
    });
    let notes: Vec<String> = varying
        .iter()
        .filter_map(|&s| {
            let v = &slots[s];
            let mut note = format!("mean {}", v.mean.as_ref()?);
            if let Some(at) = &v.max_at {
                note.push_str(&format!(", max at {at}"));
            }
            Some(if varying.len() > 1 {
                format!("#{} {note}", s + 1)
            } else {
                note
            })
        })
        .collect();
    if !notes.is_empty() {
        text.push_str(&format!(" ({})", notes.join("; ")));
    }
    let mut outliers: Vec<(IdSet, String)> = out
        .iter()
        .map(|&i| (g.rows[i].ranks.clone(), row_text(g, &g.rows[i])))
        .collect();
    outliers.sort_by_key(|(ids, _)| ids.first());
    Expanded {
        main: TemplateLine {
            ranks,
            text,
            pattern: g.key.pattern(),
            slots,
        },
        outliers,
    }
}
