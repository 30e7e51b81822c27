//! Scalar filters: `sum`, `min`, `max`, `count`, `mean`. Inputs are decimal text
//! ([`Decimal`]); arithmetic is exact, so the result does not depend on the tree.
//!
//! `sum` adds each payload once, whatever its number of sources (a child's flushed sum speaks
//! for its whole subtree); this is the overlay's original `sum` (`"40"` + `"2"` → `"42"`).
//! `count` ignores payloads and counts ids. `mean` counts a scalar once per id of its sources
//! and sends upward the record `{"sdm":1,"type":"mean","sum":"<decimal>","count":<n>}`;
//! its `finish` gives `sum / count` as a scalar, rounded half-to-even to 18 fraction digits.

use sdm_proto::IdSet;
use serde::{Deserialize, Serialize};

use super::FoldedIds;
use crate::decimal::Decimal;
use crate::record::{self, overflow};
use crate::{Filter, FilterError, Group};

/// Adds decimal numbers exactly.
#[derive(Debug, Default)]
pub struct Sum {
    total: Decimal,
    folded: FoldedIds,
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

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        let v = record::scalar("sum", payload, sources)?;
        self.total = self
            .total
            .checked_add(v)
            .ok_or_else(|| overflow("sum", sources))?;
        self.folded.add(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        let s = std::mem::take(self);
        Ok(s.folded.into_groups(|| s.total.to_bytes()))
    }
}

/// Keeps the smallest (or largest) decimal number.
#[derive(Debug)]
pub struct MinMax {
    max: bool,
    best: Option<Decimal>,
    sources: IdSet,
}

impl MinMax {
    /// The `min` filter.
    pub fn min() -> Self {
        Self {
            max: false,
            best: None,
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

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        let v = record::scalar(self.name(), payload, sources)?;
        let better = match self.best {
            None => true,
            Some(b) if self.max => v > b,
            Some(b) => v < b,
        };
        if better {
            self.best = Some(v);
        }
        self.sources.union_with(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        let sources = std::mem::take(&mut self.sources);
        Ok(self
            .best
            .take()
            .map(|b| Group::new(b.to_bytes(), sources))
            .into_iter()
            .collect())
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

    fn fold(&mut self, _payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        self.0.add(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        let ids = std::mem::take(&mut self.0).take();
        Ok(ids
            .map(|ids| Group::new(Decimal::from_int(i128::from(ids.len())).to_bytes(), ids))
            .into_iter()
            .collect())
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
        let s = std::mem::take(self);
        let rec = MeanRecord {
            sum: s.sum,
            count: s.count,
        };
        Ok(s.folded.into_groups(|| record::encode("mean", &rec)))
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

    /// Results go up in canonical form, whatever form the inputs had.
    #[test]
    fn results_are_sent_in_canonical_form() {
        let mut sum = Sum::new();
        for (text, want) in [
            ("-17", "-17"),
            ("+5", "5"),
            ("05", "5"),
            (" 5\n", "5"),
            ("-0", "0"),
            ("2.50", "2.5"),
        ] {
            sum.fold(text.as_bytes(), &ids("[0]")).unwrap();
            assert_eq!(
                &sum.flush().unwrap()[0].payload[..],
                want.as_bytes(),
                "{text:?}"
            );
        }
        let (mut min, mut max) = (MinMax::min(), MinMax::max());
        for f in [&mut min, &mut max] {
            f.fold(b"5", &ids("[0]")).unwrap();
            f.fold(b"+1", &ids("[1]")).unwrap();
            f.fold(b"09", &ids("[2]")).unwrap();
        }
        let (gmin, gmax) = (min.flush().unwrap(), max.flush().unwrap());
        assert_eq!(&gmin[0].payload[..], b"1");
        assert_eq!(&gmax[0].payload[..], b"9");
        assert_eq!(gmin[0].sources, ids("[0-2]"));
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
