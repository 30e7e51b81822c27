//! Scalar filters: `sum`, `min`, `max`, `count`, `mean`. Inputs are decimal text
//! ([`Decimal`]); arithmetic is exact, so the result does not depend on the tree.
//!
//! `sum` adds each payload once, whatever its number of sources (a child's flushed sum speaks
//! for its whole subtree); this is the overlay's original `sum` (`"40"` + `"2"` → `"42"`).
//! `count` ignores payloads and counts ids. `mean` counts a scalar once per id of its sources
//! and sends upward the record `{"sdm":1,"type":"mean","sum":"<decimal>","count":<n>}`;
//! its `finish` gives `sum / count` as a scalar, rounded half-to-even to 18 fraction digits.

use bytes::Bytes;
use sdm_proto::IdSet;
use serde::{Deserialize, Serialize};

use super::FoldedIds;
use crate::decimal::Decimal;
use crate::record::{self, overflow};
use crate::{Filter, FilterError, Group, flush_new};

/// Adds decimal numbers exactly.
#[derive(Debug, Default)]
pub struct Sum {
    total: Decimal,
    folded: FoldedIds,
    /// Values folded since the last flush.
    values: u32,
    /// The first value's payload, if it is the text `total` would flush as
    /// ([`Decimal::is_canonical_text`]): a sum of that one value (a leaf's, every op) sends
    /// it on as it is.
    first: Option<Bytes>,
}

impl Sum {
    /// An empty sum.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Filter for Sum {
    fn name(&self) -> &str {
        "sum"
    }

    /// Its flush takes the whole state first and cannot fail.
    fn reusable(&self) -> bool {
        true
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        let v = record::scalar("sum", payload, sources)?;
        self.total = self
            .total
            .checked_add(v)
            .ok_or_else(|| overflow("sum", sources))?;
        self.folded.add(sources);
        // Saturating: past 2^32 values it still says "more than one".
        self.values = self.values.saturating_add(1);
        Ok(())
    }

    fn fold_bytes(&mut self, payload: Bytes, sources: &IdSet) -> Result<(), FilterError> {
        self.fold(&payload, sources)?;
        if self.values == 1 && Decimal::is_canonical_text(&payload) {
            self.first = Some(payload);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        flush_new(self)
    }

    fn flush_into(&mut self, out: &mut Vec<Group>) -> Result<(), FilterError> {
        let s = std::mem::take(self);
        let (total, first) = (s.total, s.first.filter(|_| s.values == 1));
        s.folded
            .push_group(out, || first.unwrap_or_else(|| total.to_bytes()));
        Ok(())
    }
}

/// Keeps the smallest (or largest) decimal number.
#[derive(Debug)]
pub struct MinMax {
    max: bool,
    best: Option<Decimal>,
    /// The best value's payload, if it is the text `best` would flush as
    /// ([`Decimal::is_canonical_text`]): sent on as it is.
    best_text: Option<Bytes>,
    sources: IdSet,
}

impl MinMax {
    /// The `min` filter.
    pub fn min() -> Self {
        Self {
            max: false,
            best: None,
            best_text: None,
            sources: IdSet::new(),
        }
    }

    /// The `max` filter.
    pub fn max() -> Self {
        Self {
            max: true,
            ..Self::min()
        }
    }
}

impl Filter for MinMax {
    fn name(&self) -> &str {
        if self.max { "max" } else { "min" }
    }

    /// Its flush takes the whole state first and cannot fail.
    fn reusable(&self) -> bool {
        true
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        self.fold_value(payload, sources)?;
        Ok(())
    }

    fn fold_bytes(&mut self, payload: Bytes, sources: &IdSet) -> Result<(), FilterError> {
        if self.fold_value(&payload, sources)? && Decimal::is_canonical_text(&payload) {
            self.best_text = Some(payload);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        flush_new(self)
    }

    fn flush_into(&mut self, out: &mut Vec<Group>) -> Result<(), FilterError> {
        let sources = std::mem::take(&mut self.sources);
        let text = self.best_text.take();
        if let Some(b) = self.best.take() {
            out.push(Group::new(text.unwrap_or_else(|| b.to_bytes()), sources));
        }
        Ok(())
    }
}

impl MinMax {
    /// Folds one value; whether it is the new best (then any payload kept as the best's
    /// text is no longer its text, and is dropped).
    fn fold_value(&mut self, payload: &[u8], sources: &IdSet) -> Result<bool, FilterError> {
        let v = record::scalar(self.name(), payload, sources)?;
        let better = match self.best {
            None => true,
            Some(b) if self.max => v > b,
            Some(b) => v < b,
        };
        if better {
            self.best = Some(v);
            self.best_text = None;
        }
        self.sources.union_with(sources);
        Ok(better)
    }
}

/// Counts the ids that replied.
#[derive(Debug, Default)]
pub struct Count(FoldedIds);

impl Count {
    /// An empty count.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Filter for Count {
    fn name(&self) -> &str {
        "count"
    }

    /// Its flush takes the whole state first and cannot fail.
    fn reusable(&self) -> bool {
        true
    }

    fn fold(&mut self, _payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        self.0.add(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        flush_new(self)
    }

    fn flush_into(&mut self, out: &mut Vec<Group>) -> Result<(), FilterError> {
        if let Some(ids) = std::mem::take(&mut self.0).take() {
            out.push(Group::new(
                Decimal::from_int(i128::from(ids.len())).to_bytes(),
                ids,
            ));
        }
        Ok(())
    }
}

/// The partial state of `mean`: an exact sum and the number of values in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeanRecord {
    /// Sum of the values.
    pub sum: Decimal,
    /// Number of values.
    pub count: u64,
}

/// The arithmetic mean, exact until the final division.
#[derive(Debug, Default)]
pub struct Mean {
    sum: Decimal,
    count: u64,
    folded: FoldedIds,
}

impl Mean {
    /// An empty mean.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Filter for Mean {
    fn name(&self) -> &str {
        "mean"
    }

    /// Its flush takes the whole state first and cannot fail.
    fn reusable(&self) -> bool {
        true
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        let r = record::record_or_leaf("mean", payload, sources, || {
            let v = record::scalar("mean", payload, sources)?;
            let n = sources.len();
            Ok(MeanRecord {
                sum: v
                    .checked_mul_int(i128::from(n))
                    .ok_or_else(|| overflow("mean", sources))?,
                count: n,
            })
        })?;
        let sum = self
            .sum
            .checked_add(r.sum)
            .ok_or_else(|| overflow("mean", sources))?;
        let count = self
            .count
            .checked_add(r.count)
            .ok_or_else(|| overflow("mean", sources))?;
        self.sum = sum;
        self.count = count;
        self.folded.add(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        flush_new(self)
    }

    fn flush_into(&mut self, out: &mut Vec<Group>) -> Result<(), FilterError> {
        let s = std::mem::take(self);
        let rec = MeanRecord {
            sum: s.sum,
            count: s.count,
        };
        s.folded.push_group(out, || record::encode("mean", &rec));
        Ok(())
    }

    fn finish(&mut self) -> Result<Vec<Group>, FilterError> {
        let s = std::mem::take(self);
        // count is zero only if every source set was empty: no values, no mean.
        let text = s.sum.div_int(s.count).map(|m| m.to_string());
        Ok(s.folded.into_groups(|| text.unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn ids(s: &str) -> IdSet {
        s.parse().unwrap()
    }

    /// A sum of one value and a minimum or maximum send on the payload that holds their
    /// result when it is already in canonical form (the same bytes, not formatted again);
    /// any other input is formatted, and a payload kept is never sent for another value.
    #[test]
    fn a_result_already_in_canonical_form_is_sent_as_it_is() {
        let same = |g: &[Group], p: &Bytes| g[0].payload.as_ptr() == p.as_ptr();
        let p = |t: &'static str| Bytes::from_static(t.as_bytes());
        let mut sum = Sum::new();
        let one = p("-17");
        sum.fold_bytes(one.clone(), &ids("[4]")).unwrap();
        let g = sum.flush().unwrap();
        assert!(same(&g, &one));
        assert_eq!(
            (&g[0].payload[..], &g[0].sources),
            (&b"-17"[..], &ids("[4]"))
        );
        // Not canonical: formatted.
        for (text, want) in [
            ("+5", "5"),
            ("05", "5"),
            (" 5\n", "5"),
            ("-0", "0"),
            ("2.50", "2.5"),
        ] {
            sum.fold_bytes(p(text), &ids("[0]")).unwrap();
            assert_eq!(
                &sum.flush().unwrap()[0].payload[..],
                want.as_bytes(),
                "{text:?}"
            );
        }
        // Two values: their sum, whatever the first was.
        sum.fold_bytes(p("40"), &ids("[0]")).unwrap();
        sum.fold_bytes(p("2"), &ids("[1]")).unwrap();
        assert_eq!(&sum.flush().unwrap()[0].payload[..], b"42");
        // The first folded without its bytes: formatted.
        sum.fold(b"7", &ids("[0]")).unwrap();
        assert_eq!(&sum.flush().unwrap()[0].payload[..], b"7");

        let (mut min, mut max) = (MinMax::min(), MinMax::max());
        let (low, high) = (p("3"), p("9"));
        for f in [&mut min, &mut max] {
            f.fold_bytes(p("5"), &ids("[0]")).unwrap();
            f.fold_bytes(low.clone(), &ids("[1]")).unwrap();
            f.fold_bytes(high.clone(), &ids("[2]")).unwrap();
        }
        let (gmin, gmax) = (min.flush().unwrap(), max.flush().unwrap());
        assert!(same(&gmin, &low) && same(&gmax, &high));
        assert_eq!(gmin[0].sources, ids("[0-2]"));
        // A better value in a form that is not canonical replaces the kept payload.
        min.fold_bytes(p("3"), &ids("[0]")).unwrap();
        min.fold_bytes(p("+1"), &ids("[1]")).unwrap();
        min.fold(b"2", &ids("[2]")).unwrap();
        assert_eq!(&min.flush().unwrap()[0].payload[..], b"1");
        max.fold_bytes(p("3"), &ids("[0]")).unwrap();
        max.fold(b"8", &ids("[1]")).unwrap();
        assert_eq!(&max.flush().unwrap()[0].payload[..], b"8");
    }

    #[test]
    fn sum_is_exact_and_compatible() {
        let mut f = Sum::new();
        f.fold(b"40", &ids("[0]")).unwrap();
        f.fold(b"2\n", &ids("[1-3]")).unwrap();
        let g = f.flush().unwrap();
        assert_eq!(&g[0].payload[..], b"42");
        assert_eq!(g[0].sources, ids("[0-3]"));
        f.fold(b"0.1", &ids("[0]")).unwrap();
        f.fold(b"0.2", &ids("[1]")).unwrap();
        assert_eq!(&f.flush().unwrap()[0].payload[..], b"0.3");
        let e = f.fold(b"forty", &ids("[7]")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadInput);
        assert_eq!(e.sources(), Some(&ids("[7]")));
        assert_eq!(
            e.to_string(),
            r#"filter "sum": payload from [7] is not a decimal number: "forty""#
        );
        assert!(
            f.flush().unwrap().is_empty(),
            "a failed fold leaves no state"
        );
        f.fold(b"170141183460469231731687303715884105727", &ids("[0]"))
            .unwrap();
        assert_eq!(
            f.fold(b"1", &ids("[1]")).unwrap_err().kind(),
            ErrorKind::Overflow
        );
    }

    #[test]
    fn min_max_count() {
        let mut lo = MinMax::min();
        let mut hi = MinMax::max();
        let mut n = Count::new();
        for (v, i) in [("3", 0), ("-1.5", 1), ("7", 2)] {
            for f in [&mut lo as &mut dyn Filter, &mut hi, &mut n] {
                f.fold(v.as_bytes(), &IdSet::single(i)).unwrap();
            }
        }
        assert_eq!(&lo.flush().unwrap()[0].payload[..], b"-1.5");
        assert_eq!(&hi.flush().unwrap()[0].payload[..], b"7");
        assert_eq!(&n.flush().unwrap()[0].payload[..], b"3");
    }

    #[test]
    fn mean_through_a_record() {
        let mut a = Mean::new();
        a.fold(b"1", &ids("[0]")).unwrap();
        a.fold(b"2", &ids("[1-2]")).unwrap();
        let up = a.flush().unwrap();
        assert_eq!(
            &up[0].payload[..],
            br#"{"sdm":1,"type":"mean","sum":"5","count":3}"#
        );
        let mut root = Mean::new();
        root.fold(&up[0].payload, &up[0].sources).unwrap();
        root.fold(b"3", &ids("[3]")).unwrap();
        let g = root.finish().unwrap();
        assert_eq!(&g[0].payload[..], b"2");
        assert_eq!(g[0].sources, ids("[0-3]"));
    }
}
