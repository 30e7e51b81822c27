//! [`Group`]: the lines of many ranks that share one template, as per-slot statistics and
//! the extreme rows, merged by an associative and commutative union.

use std::cmp::Ordering;
use std::collections::HashMap;

use sdm_proto::IdSet;

use super::number::{self, Sum, Value};
use super::{Key, SlotKind};

/// How many rows a group keeps at each end of each slot's order: outliers are split off
/// among them (at most `KEEP - 1` rows in all, so a slot's range without them stays exact).
pub const KEEP: usize = 4;

/// One distinct vector of values and the ranks that printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// A value per slot, as printed (with its number).
    pub values: Vec<Value>,
    /// Who printed it.
    pub ranks: IdSet,
}

/// One slot's statistics over every rank of a group.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    /// The lowest value, as printed.
    pub min: Box<str>,
    /// Who printed the lowest value.
    pub min_at: IdSet,
    /// The highest value, as printed.
    pub max: Box<str>,
    /// Who printed the highest value.
    pub max_at: IdSet,
    /// The sum of the values (decimal slots).
    pub sum: Sum,
    /// The most digits after the point a value had (the precision the mean prints with).
    pub frac: u8,
    /// Whether a value had an exponent.
    pub exp: bool,
}

impl Slot {
    fn single(v: &str, ranks: &IdSet, kind: SlotKind) -> Slot {
        Slot {
            min: v.into(),
            min_at: ranks.clone(),
            max: v.into(),
            max_at: ranks.clone(),
            sum: match kind {
                // (Every rank of a one-row group printed the value.)
                SlotKind::Dec => Sum::default().add_times(Sum::of(v), ranks.len() as i64),
                SlotKind::Hex => Sum::default(),
            },
            frac: number::fraction_digits(v),
            exp: number::has_exponent(v),
        }
    }

    fn merge(&mut self, o: Slot, kind: SlotKind) {
        match number::cmp(kind, &o.min, &self.min) {
            Ordering::Less => (self.min, self.min_at) = (o.min, o.min_at),
            Ordering::Equal => self.min_at.union_with(&o.min_at),
            Ordering::Greater => {}
        }
        match number::cmp(kind, &o.max, &self.max) {
            Ordering::Greater => (self.max, self.max_at) = (o.max, o.max_at),
            Ordering::Equal => self.max_at.union_with(&o.max_at),
            Ordering::Less => {}
        }
        self.sum = self.sum + o.sum;
        self.frac = self.frac.max(o.frac);
        self.exp |= o.exp;
    }
}

/// The lines (of one stream and line index) of many ranks sharing one template.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// The template.
    pub key: Key,
    /// Every rank merged in.
    pub ranks: IdSet,
    /// Per slot statistics.
    pub slots: Vec<Slot>,
    /// The rows at the ends of each slot's order (at most `2 * KEEP` per slot).
    pub rows: Vec<Row>,
}

impl Row {
    /// The values of `texts` in the slots of `key`.
    pub fn values(key: &Key, texts: Vec<Box<str>>) -> Vec<Value> {
        (texts.into_iter().zip(&key.kinds))
            .map(|(t, &k)| Value::new(k, t))
            .collect()
    }
}

impl Group {
    /// One rank's line: its template and values.
    pub fn single(key: Key, values: Vec<Box<str>>, ranks: IdSet) -> Group {
        let values = Row::values(&key, values);
        Group::of_row(key, Row { values, ranks })
    }

    fn of_row(key: Key, row: Row) -> Group {
        let slots = row
            .values
            .iter()
            .zip(&key.kinds)
            .map(|(v, &k)| Slot::single(&v.text, &row.ranks, k))
            .collect();
        Group {
            key,
            ranks: row.ranks.clone(),
            rows: vec![row],
            slots,
        }
    }

    /// The group of distinct `rows` (its statistics are theirs), or `None` if none.
    pub fn from_rows(key: Key, rows: Vec<Row>) -> Option<Group> {
        let mut it = rows.into_iter();
        let mut g = Group::of_row(key, it.next()?);
        let kinds = g.key.kinds.clone();
        for row in it {
            g.ranks.union_with(&row.ranks);
            for ((s, v), &k) in g.slots.iter_mut().zip(&row.values).zip(&kinds) {
                s.merge(Slot::single(&v.text, &row.ranks, k), k);
            }
            g.rows.push(row);
        }
        g.prune();
        Some(g)
    }

    /// Orders rows by slot `s`, then by every slot in turn (a total order on distinct rows).
    pub fn row_cmp(&self, s: usize, a: &Row, b: &Row) -> Ordering {
        let k = &self.key.kinds;
        a.values[s].cmp(k[s], &b.values[s]).then_with(|| {
            (0..k.len())
                .map(|i| a.values[i].cmp(k[i], &b.values[i]))
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        })
    }

    /// Indices of the rows in slot `s`'s order, lowest first.
    pub fn order(&self, s: usize) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.rows.len()).collect();
        idx.sort_by(|&a, &b| self.row_cmp(s, &self.rows[a], &self.rows[b]));
        idx
    }

    /// Folds `other` (of the same key) in: the union of both groups' ranks.
    pub fn merge(&mut self, other: Group) {
        debug_assert_eq!(self.key, other.key);
        let kinds = self.key.kinds.clone();
        self.ranks.union_with(&other.ranks);
        for ((s, o), k) in self.slots.iter_mut().zip(other.slots).zip(kinds) {
            s.merge(o, k);
        }
        // Rows are matched by an index of their values (not a scan per row).
        let at: Vec<Option<usize>> = {
            let index: HashMap<&[Value], usize> = (self.rows.iter().enumerate())
                .map(|(i, r)| (&r.values[..], i))
                .collect();
            (other.rows.iter())
                .map(|r| index.get(&r.values[..]).copied())
                .collect()
        };
        for (row, at) in other.rows.into_iter().zip(at) {
            match at {
                Some(i) => self.rows[i].ranks.union_with(&row.ranks),
                None => self.rows.push(row),
            }
        }
        self.prune();
    }

    /// Keeps only the rows among the `KEEP` lowest and highest of some slot.
    fn prune(&mut self) {
        let n = self.rows.len();
        if n <= 2 * KEEP {
            return;
        }
        let mut keep = vec![false; n];
        let mut idx: Vec<usize> = (0..n).collect();
        for s in 0..self.slots.len() {
            // Selection, not a sort: only which rows are at the ends matters.
            let by = |a: &usize, b: &usize| self.row_cmp(s, &self.rows[*a], &self.rows[*b]);
            idx.select_nth_unstable_by(KEEP - 1, by);
            idx[..KEEP].iter().for_each(|&i| keep[i] = true);
            idx.select_nth_unstable_by(n - KEEP, by);
            idx[n - KEEP..].iter().for_each(|&i| keep[i] = true);
        }
        let mut it = keep.into_iter();
        self.rows.retain(|_| it.next().unwrap_or(false));
    }

    /// Puts the rows in their canonical order: the same group whatever the order of the
    /// merges (for comparing groups).
    pub fn canonical(mut self) -> Group {
        let mut rows = std::mem::take(&mut self.rows);
        rows.sort_by(|a, b| self.row_cmp(0, a, b));
        self.rows = rows;
        self
    }

    /// Whether the kept rows hold every rank (nothing was pruned).
    pub fn complete(&self) -> bool {
        self.rows.iter().map(|r| r.ranks.len()).sum::<u64>() == self.ranks.len()
    }
}
