//! `histogram:LO:HI:N`: counts scalar values in `N` equal buckets over `[LO, HI)`, plus
//! `under` (below `LO`) and `over` (`HI` and above). A scalar counts once per id.
//!
//! Record: `{"sdm":1,"type":"histogram","lo":"0","hi":"100","counts":[…N…],"under":0,
//! "over":0}`. Bucket `i` holds `LO + i·w <= x < LO + (i+1)·w` with `w = (HI-LO)/N`, decided
//! exactly (no floating point), once, at the leaf.

use sdm_proto::IdSet;
use serde::{Deserialize, Serialize};

use super::FoldedIds;
use crate::decimal::Decimal;
use crate::error::ErrorKind;
use crate::record;
use crate::{Filter, FilterError, Group};

/// Most buckets a histogram may have.
pub const MAX_BUCKETS: usize = 1 << 16;

/// The state of a histogram, as sent upward.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramRecord {
    /// Lower bound of bucket 0.
    pub lo: Decimal,
    /// Upper bound (exclusive) of the last bucket.
    pub hi: Decimal,
    /// Count per bucket.
    pub counts: Vec<u64>,
    /// Values below `lo`.
    pub under: u64,
    /// Values at or above `hi`.
    pub over: u64,
}

/// Fixed-bucket histogram.
#[derive(Debug)]
pub struct Histogram {
    name: String,
    state: HistogramRecord,
    folded: FoldedIds,
}

impl Histogram {
    /// A histogram of `buckets` buckets over `[lo, hi)`.
    pub fn new(lo: Decimal, hi: Decimal, buckets: usize) -> Result<Self, FilterError> {
        let name = format!("histogram:{lo}:{hi}:{buckets}");
        let bad = |w: &str| Err(FilterError::new(&name, ErrorKind::BadParameters, w));
        if lo >= hi {
            return bad("the lower bound must be below the upper bound");
        }
        if buckets == 0 || buckets > MAX_BUCKETS {
            return bad("the number of buckets must be 1 to 65536");
        }
        if hi.checked_sub(lo).is_none() {
            return bad("the range is too large");
        }
        Ok(Self {
            name,
            state: HistogramRecord {
                lo,
                hi,
                counts: vec![0; buckets],
                under: 0,
                over: 0,
            },
            folded: FoldedIds::default(),
        })
    }

    /// Parses `LO:HI:N` (the part after `histogram:`).
    pub fn from_params(params: &str) -> Result<Self, FilterError> {
        let bad = || {
            FilterError::new(
                format!("histogram:{params}"),
                ErrorKind::BadParameters,
                "expected histogram:LO:HI:BUCKETS, e.g. histogram:0:100:10",
            )
        };
        let v: Vec<&str> = params.split(':').collect();
        let [lo, hi, n] = v[..] else {
            return Err(bad());
        };
        let lo = lo.parse().map_err(|_| bad())?;
        let hi = hi.parse().map_err(|_| bad())?;
        let n = n.parse().map_err(|_| bad())?;
        Self::new(lo, hi, n)
    }

    /// The bucket of `x`: `Ok(None)` under, `Ok(Some(N))` over.
    fn bucket(&self, x: Decimal) -> Option<Option<usize>> {
        let s = &self.state;
        if x < s.lo {
            return Some(None);
        }
        if x >= s.hi {
            return Some(Some(s.counts.len()));
        }
        // floor((x - lo) * n / (hi - lo)), at a common scale, in integers.
        let num = x.checked_sub(s.lo)?;
        let den = s.hi.checked_sub(s.lo)?;
        let scale = num.scale().max(den.scale());
        let at = |d: Decimal| {
            d.mantissa()
                .checked_mul(10i128.checked_pow(scale - d.scale())?)
        };
        let n = i128::try_from(s.counts.len()).ok()?;
        let i = at(num)?.checked_mul(n)? / at(den)?;
        Some(Some(usize::try_from(i).ok()?.min(s.counts.len() - 1)))
    }
}

impl Filter for Histogram {
    fn name(&self) -> &str {
        &self.name
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        let s = &self.state;
        let mut next = s.clone();
        if record::is_record(payload) {
            let r: HistogramRecord = record::decode(&self.name, "histogram", payload, sources)?;
            if r.lo != s.lo || r.hi != s.hi || r.counts.len() != s.counts.len() {
                return Err(FilterError::bad_input(
                    &self.name,
                    sources,
                    format_args!(
                        "is a histogram over [{}, {}) in {} buckets",
                        r.lo,
                        r.hi,
                        r.counts.len()
                    ),
                ));
            }
            let add = |a: u64, b: u64| {
                a.checked_add(b)
                    .ok_or_else(|| record::overflow(&self.name, sources))
            };
            for (c, v) in next.counts.iter_mut().zip(&r.counts) {
                *c = add(*c, *v)?;
            }
            next.under = add(next.under, r.under)?;
            next.over = add(next.over, r.over)?;
        } else {
            let x = record::scalar(&self.name, payload, sources)?;
            let slot = match self.bucket(x) {
                Some(None) => &mut next.under,
                Some(Some(i)) if i == next.counts.len() => &mut next.over,
                Some(Some(i)) => &mut next.counts[i],
                None => return Err(record::overflow(&self.name, sources)),
            };
            *slot = slot
                .checked_add(sources.len())
                .ok_or_else(|| record::overflow(&self.name, sources))?;
        }
        self.state = next;
        self.folded.add(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        let groups = std::mem::take(&mut self.folded)
            .into_groups(|| record::encode("histogram", &self.state));
        self.state.counts.iter_mut().for_each(|c| *c = 0);
        self.state.under = 0;
        self.state.over = 0;
        Ok(groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        let mut h = Histogram::from_params("0:1:4").unwrap();
        for (v, i) in [
            ("0", 0),
            ("0.25", 1),
            ("0.2499", 2),
            ("0.99", 3),
            ("1", 4),
            ("-1", 5),
        ] {
            h.fold(v.as_bytes(), &IdSet::single(i)).unwrap();
        }
        let g = h.flush().unwrap();
        let r: HistogramRecord =
            record::decode("h", "histogram", &g[0].payload, &g[0].sources).unwrap();
        assert_eq!(r.counts, vec![2, 1, 0, 1]);
        assert_eq!((r.under, r.over), (1, 1));
        assert!(Histogram::from_params("1:0:4").is_err());
        assert!(Histogram::from_params("0:1:0").is_err());
        assert!(Histogram::from_params("0:1").is_err());
        let mut other = Histogram::from_params("0:2:4").unwrap();
        assert!(other.fold(&g[0].payload, &g[0].sources).is_err());
    }
}
