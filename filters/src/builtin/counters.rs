//! `counters`: per-rank counter rows (seed 001, MTF Table 6: operation counts, bytes sent and
//! received per rank) merged by key into a total row, with ranks whose rows are identical
//! grouped into rank sets.
//!
//! Leaf input: one row, a key/value map ([`record::leaf_map`]), e.g. [`MtfRankStats`]'s
//! [`to_payload`](MtfRankStats::to_payload); a row from several ids counts once per id in the
//! total. Record: `{"sdm":1,"type":"counters","total":{"isend":"1070",…},"rows":[{"ids":
//! "[1-2,13-14]","row":{…}}]}`, keys sorted, rows ordered by smallest id.

use std::collections::BTreeMap;

use bytes::Bytes;
use sdm_proto::IdSet;
use serde::{Deserialize, Serialize};

use super::FoldedIds;
use crate::decimal::Decimal;
use crate::record::{self, ids_text, overflow};
use crate::{Filter, FilterError, Group};

/// A row of named counters.
pub type Row = BTreeMap<String, Decimal>;

/// Ranks sharing one identical row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankRow {
    /// The ranks.
    #[serde(with = "ids_text")]
    pub ids: IdSet,
    /// Their common row.
    pub row: Row,
}

/// The merged state: the total row and the groups of identical rows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountersRecord {
    /// Sum of every rank's row, key by key.
    pub total: Row,
    /// Distinct rows with the ranks that have them, ordered by smallest rank.
    pub rows: Vec<RankRow>,
}

/// The `counters` filter.
#[derive(Debug, Default)]
pub struct Counters {
    total: Row,
    rows: BTreeMap<Row, IdSet>,
    folded: FoldedIds,
}

impl Counters {
    /// No rows yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a flushed `counters` record.
    pub fn decode(payload: &[u8]) -> Result<CountersRecord, FilterError> {
        record::decode("counters", "counters", payload, &IdSet::new())
    }
}

fn add_row(total: &mut Row, row: &Row, times: u64) -> Option<()> {
    for (k, v) in row {
        let t = total.entry(k.clone()).or_default();
        *t = t.checked_add(v.checked_mul_int(i128::from(times))?)?;
    }
    Some(())
}

impl Filter for Counters {
    fn name(&self) -> &str {
        "counters"
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        let rec = record::record_or_leaf("counters", payload, sources, || {
            let row = record::leaf_map("counters", payload, sources)?;
            let mut total = Row::new();
            add_row(&mut total, &row, sources.len())
                .ok_or_else(|| overflow("counters", sources))?;
            let ids = sources.clone();
            Ok(CountersRecord {
                total,
                rows: vec![RankRow { ids, row }],
            })
        })?;
        let mut total = self.total.clone();
        add_row(&mut total, &rec.total, 1).ok_or_else(|| overflow("counters", sources))?;
        self.total = total;
        for r in rec.rows {
            self.rows.entry(r.row).or_default().union_with(&r.ids);
        }
        self.folded.add(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        let s = std::mem::take(self);
        let mut rows: Vec<RankRow> = s
            .rows
            .into_iter()
            .map(|(row, ids)| RankRow { ids, row })
            .collect();
        rows.sort_by_key(|r| r.ids.first());
        let rec = CountersRecord {
            total: s.total,
            rows,
        };
        Ok(s.folded.into_groups(|| record::encode("counters", &rec)))
    }
}

/// One rank's MPI statistics, the columns of MTF's Table 6 (seed 001).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MtfRankStats {
    /// `MPI_Init` calls.
    pub init: u64,
    /// `MPI_Finalize` calls.
    pub fin: u64,
    /// `MPI_Wait` calls.
    pub wait: u64,
    /// `MPI_Bcast` calls.
    pub bcast: u64,
    /// `MPI_Gather` calls.
    pub gather: u64,
    /// `MPI_Scatterv` calls.
    pub scatterv: u64,
    /// `MPI_Isend` calls.
    pub isend: u64,
    /// `MPI_Irecv` calls.
    pub irecv: u64,
    /// Bytes sent (point-to-point and collective: the process's M-fan-out).
    pub bytes_sent: u64,
    /// Bytes received (the process's M-fan-in).
    pub bytes_received: u64,
}

impl MtfRankStats {
    /// The column names, in Table 6's order.
    pub const KEYS: [&'static str; 10] = [
        "init",
        "fin",
        "wait",
        "bcast",
        "gather",
        "scatterv",
        "isend",
        "irecv",
        "bytes_sent",
        "bytes_received",
    ];

    fn values(&self) -> [u64; 10] {
        [
            self.init,
            self.fin,
            self.wait,
            self.bcast,
            self.gather,
            self.scatterv,
            self.isend,
            self.irecv,
            self.bytes_sent,
            self.bytes_received,
        ]
    }

    /// The row as a `counters` leaf payload (a JSON object).
    pub fn to_payload(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("plain struct"))
    }

    /// The row as named counters.
    pub fn to_row(&self) -> Row {
        Self::KEYS
            .iter()
            .zip(self.values())
            .map(|(k, v)| ((*k).to_owned(), Decimal::from_int(i128::from(v))))
            .collect()
    }

    /// Reads a row back (missing keys are zero); `None` if a value is not a `u64`.
    pub fn from_row(row: &Row) -> Option<Self> {
        let get = |k: &str| -> Option<u64> {
            match row.get(k) {
                None => Some(0),
                Some(d) => u64::try_from(d.as_int()?).ok(),
            }
        };
        Some(Self {
            init: get("init")?,
            fin: get("fin")?,
            wait: get("wait")?,
            bcast: get("bcast")?,
            gather: get("gather")?,
            scatterv: get("scatterv")?,
            isend: get("isend")?,
            irecv: get("irecv")?,
            bytes_sent: get("bytes_sent")?,
            bytes_received: get("bytes_received")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_totals() {
        let a = MtfRankStats {
            init: 1,
            isend: 5,
            bytes_sent: 100,
            ..Default::default()
        };
        let b = MtfRankStats { isend: 6, ..a };
        let mut f = Counters::new();
        f.fold(&a.to_payload(), &IdSet::single(0)).unwrap();
        f.fold(&b.to_payload(), &IdSet::single(1)).unwrap();
        f.fold(&a.to_payload(), &IdSet::single(2)).unwrap();
        let g = f.flush().unwrap();
        let r = Counters::decode(&g[0].payload).unwrap();
        let t = MtfRankStats::from_row(&r.total).unwrap();
        assert_eq!((t.init, t.isend, t.bytes_sent), (3, 16, 300));
        assert_eq!(r.rows.len(), 2);
        assert_eq!(r.rows[0].ids.to_string(), "[0,2]");
        assert_eq!(MtfRankStats::from_row(&r.rows[1].row), Some(b));
    }
}
