//! `stats`: per-key statistics over key/value maps: count, exact sum, min and max with the
//! ids holding them ("which ranks are slow"); `finish` adds the mean.
//!
//! Leaf input: a key/value map ([`record::leaf_map`]); a map from several ids counts once per
//! id. Record: `{"sdm":1,"type":"stats","keys":{"cpu":{"count":4,"sum":"10","min":"1",
//! "min_ids":"[0]","max":"4","max_ids":"[3]"}}}`, keys sorted; after `finish` each key also
//! has `"mean":"2.5"`.

use std::collections::BTreeMap;

use sdm_proto::IdSet;
use serde::{Deserialize, Serialize};

use super::FoldedIds;
use crate::decimal::Decimal;
use crate::record::{self, ids_text, overflow};
use crate::{Filter, FilterError, Group};

/// Statistics of one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyStats {
    /// Number of values.
    pub count: u64,
    /// Exact sum of the values.
    pub sum: Decimal,
    /// Smallest value.
    pub min: Decimal,
    /// The ids that hold the smallest value.
    #[serde(with = "ids_text")]
    pub min_ids: IdSet,
    /// Largest value.
    pub max: Decimal,
    /// The ids that hold the largest value.
    #[serde(with = "ids_text")]
    pub max_ids: IdSet,
    /// `sum / count` (only after `finish`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<Decimal>,
}

impl KeyStats {
    /// One value `v` held by every id of `ids`.
    pub fn single(v: Decimal, ids: &IdSet) -> Option<Self> {
        Some(Self {
            count: ids.len(),
            sum: v.checked_mul_int(i128::from(ids.len()))?,
            min: v,
            min_ids: ids.clone(),
            max: v,
            max_ids: ids.clone(),
            mean: None,
        })
    }

    /// Merges `other` in; `None` on overflow.
    pub fn merge(&mut self, other: &KeyStats) -> Option<()> {
        let count = self.count.checked_add(other.count)?;
        let sum = self.sum.checked_add(other.sum)?;
        self.count = count;
        self.sum = sum;
        match other.min.cmp(&self.min) {
            std::cmp::Ordering::Less => {
                self.min = other.min;
                self.min_ids = other.min_ids.clone();
            }
            std::cmp::Ordering::Equal => self.min_ids.union_with(&other.min_ids),
            std::cmp::Ordering::Greater => {}
        }
        match other.max.cmp(&self.max) {
            std::cmp::Ordering::Greater => {
                self.max = other.max;
                self.max_ids = other.max_ids.clone();
            }
            std::cmp::Ordering::Equal => self.max_ids.union_with(&other.max_ids),
            std::cmp::Ordering::Less => {}
        }
        self.mean = None;
        Some(())
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StatsRecord {
    keys: BTreeMap<String, KeyStats>,
    /// What ids answered with an error instead of values, by error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    errors: Vec<ErrorIds>,
}

/// One error, and the ids that answered with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ErrorIds {
    error: String,
    #[serde(with = "ids_text")]
    ids: IdSet,
}

/// Adds `add` to `into`, merging the ids of equal errors.
fn merge_errors(into: &mut Vec<ErrorIds>, add: Vec<ErrorIds>) {
    for e in add {
        match into.iter_mut().find(|i| i.error == e.error) {
            Some(i) => i.ids.union_with(&e.ids),
            None => into.push(e),
        }
    }
}

/// Per-key statistics.
#[derive(Debug, Default)]
pub struct Stats {
    keys: BTreeMap<String, KeyStats>,
    errors: Vec<ErrorIds>,
    folded: FoldedIds,
}

impl Stats {
    /// Empty statistics.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Merges `add` into a copy of `into`'s entries it touches; all or nothing.
pub(crate) fn merge_keys(
    into: &mut BTreeMap<String, KeyStats>,
    add: BTreeMap<String, KeyStats>,
) -> Option<()> {
    let mut merged = Vec::with_capacity(add.len());
    for (k, v) in add {
        match into.get(&k) {
            Some(cur) => {
                let mut m = cur.clone();
                m.merge(&v)?;
                merged.push((k, m));
            }
            None => merged.push((k, v)),
        }
    }
    into.extend(merged);
    Some(())
}

impl Filter for Stats {
    fn name(&self) -> &str {
        "stats"
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        let add = record::record_or_leaf("stats", payload, sources, || {
            let mut keys = BTreeMap::new();
            for (k, v) in record::leaf_map("stats", payload, sources)? {
                let s = KeyStats::single(v, sources).ok_or_else(|| overflow("stats", sources))?;
                keys.insert(k, s);
            }
            Ok(StatsRecord {
                keys,
                errors: Vec::new(),
            })
        })?;
        merge_keys(&mut self.keys, add.keys).ok_or_else(|| overflow("stats", sources))?;
        merge_errors(&mut self.errors, add.errors);
        self.folded.add(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        let s = std::mem::take(self);
        let body = StatsRecord {
            keys: s.keys,
            errors: s.errors,
        };
        Ok(s.folded.into_groups(|| record::encode("stats", &body)))
    }

    fn finish(&mut self) -> Result<Vec<Group>, FilterError> {
        let mut s = std::mem::take(self);
        for v in s.keys.values_mut() {
            v.mean = v.sum.div_int(v.count);
        }
        let body = StatsRecord {
            keys: s.keys,
            errors: s.errors,
        };
        Ok(s.folded.into_groups(|| record::encode("stats", &body)))
    }
}

impl Stats {
    /// Reads a `stats` record (flushed or finished) back into its per-key statistics.
    pub fn decode(payload: &[u8]) -> Result<BTreeMap<String, KeyStats>, FilterError> {
        Ok(record::decode::<StatsRecord>("stats", "stats", payload, &IdSet::new())?.keys)
    }

    /// Reads the errors of a `stats` record: each error with the ids that answered with it
    /// instead of values.
    pub fn decode_errors(payload: &[u8]) -> Result<Vec<(IdSet, String)>, FilterError> {
        let r = record::decode::<StatsRecord>("stats", "stats", payload, &IdSet::new())?;
        Ok(r.errors.into_iter().map(|e| (e.ids, e.error)).collect())
    }

    /// The leaf answer of `ids` that have no values but an error: a record the filter
    /// folds like any other, so the error reaches the tool with the ids that gave it (and
    /// identical errors merge on the way).
    pub fn error_record(error: &str, ids: &IdSet) -> bytes::Bytes {
        let body = StatsRecord {
            keys: BTreeMap::new(),
            errors: vec![ErrorIds {
                error: error.to_owned(),
                ids: ids.clone(),
            }],
        };
        record::encode("stats", &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_ranks_are_slow() {
        let mut f = Stats::new();
        f.fold(b"t 1\nn 2", &"[0-1]".parse().unwrap()).unwrap();
        f.fold(br#"{"t": 5}"#, &IdSet::single(2)).unwrap();
        f.fold(br#"{"t": "5.0"}"#, &IdSet::single(3)).unwrap();
        let g = f.finish().unwrap();
        let k = Stats::decode(&g[0].payload).unwrap();
        let t = &k["t"];
        assert_eq!(t.count, 4);
        assert_eq!(t.sum.to_string(), "12");
        assert_eq!(t.mean.unwrap().to_string(), "3");
        assert_eq!(t.min_ids.to_string(), "[0-1]");
        assert_eq!(t.max_ids.to_string(), "[2-3]");
        assert_eq!(k["n"].count, 2);
        assert_eq!(g[0].sources.to_string(), "[0-3]");
    }

    #[test]
    fn errors_travel_with_their_ids_and_merge() {
        let mut f = Stats::new();
        f.fold(b"t 1", &IdSet::single(0)).unwrap();
        let no = Stats::error_record("no symbol t", &IdSet::single(1));
        f.fold(&no, &IdSet::single(1)).unwrap();
        // Through an interior node: a flushed record folds again.
        let mut up = Stats::new();
        for g in f.flush().unwrap() {
            up.fold(&g.payload, &g.sources).unwrap();
        }
        let no = Stats::error_record("no symbol t", &IdSet::single(2));
        up.fold(&no, &IdSet::single(2)).unwrap();
        let g = up.finish().unwrap();
        assert_eq!(g.len(), 1);
        assert_eq!(Stats::decode(&g[0].payload).unwrap()["t"].count, 1);
        assert_eq!(
            Stats::decode_errors(&g[0].payload).unwrap(),
            vec![("[1-2]".parse().unwrap(), "no symbol t".to_owned())]
        );
    }
}
