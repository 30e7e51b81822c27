//! `statements`: the per-statement statistics of seed 004 ("statistics instead of traces"),
//! merged across processes by statement.
//!
//! Seed 004 keeps, per interesting statement, a *proc record* (activate line, accumulated
//! time, count), a *loop record* (time, count) or a list of *com records* (destination node,
//! transmission time, count, synchronisation delay). A leaf payload is a JSON array of
//! [`StatementRecord`]s for one process. They merge by key `(event, line, caller, dest)`:
//! counts and times add up exactly (integers, nanoseconds), the ranks holding the key are
//! unioned, and the smallest and largest per-rank time keep the ranks that hold them.
//! Record: `{"sdm":1,"type":"statements","statements":[…StatementTotal…]}`, sorted by key.

use std::collections::BTreeMap;

use sdm_proto::IdSet;
use serde::{Deserialize, Serialize};

use super::FoldedIds;
use crate::error::excerpt;
use crate::record::{self, ids_text, overflow};
use crate::{Filter, FilterError, Group};

/// The kind of program event a statement record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// A procedure called from a call statement (seed 004's proc record).
    Proc,
    /// A loop (loop record).
    Loop,
    /// A communication statement, per destination (com record).
    Comm,
}

/// One process's statistics for one statement (and caller or destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatementRecord {
    /// Kind of event.
    pub event: EventKind,
    /// Source line of the statement (the procedure's or loop's first line).
    pub line: u32,
    /// Proc: line of the call statement (seed 004's "activate line").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<u32>,
    /// Comm: the destination process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest: Option<u32>,
    /// Executions (proc num, loop num, trans num).
    pub count: u64,
    /// Accumulated time in nanoseconds (proc time, loop time, trans time).
    pub time_ns: u64,
    /// Comm: accumulated synchronisation delay in nanoseconds.
    #[serde(default)]
    pub sync_delay_ns: u64,
}

/// One statement merged over processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatementTotal {
    /// Kind of event.
    pub event: EventKind,
    /// Source line.
    pub line: u32,
    /// Proc: call statement line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<u32>,
    /// Comm: destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest: Option<u32>,
    /// Ranks that executed it.
    #[serde(with = "ids_text")]
    pub ids: IdSet,
    /// Executions, all ranks.
    pub count: u64,
    /// Time in nanoseconds, all ranks.
    pub time_ns: u64,
    /// Synchronisation delay in nanoseconds, all ranks.
    pub sync_delay_ns: u64,
    /// Smallest per-rank time.
    pub min_time_ns: u64,
    /// Ranks with the smallest time.
    #[serde(with = "ids_text")]
    pub min_ids: IdSet,
    /// Largest per-rank time.
    pub max_time_ns: u64,
    /// Ranks with the largest time.
    #[serde(with = "ids_text")]
    pub max_ids: IdSet,
}

type Key = (EventKind, u32, Option<u32>, Option<u32>);

impl StatementTotal {
    fn key(&self) -> Key {
        (self.event, self.line, self.caller, self.dest)
    }

    fn from_leaf(r: &StatementRecord, ids: &IdSet) -> Option<Self> {
        let n = ids.len();
        Some(Self {
            event: r.event,
            line: r.line,
            caller: r.caller,
            dest: r.dest,
            ids: ids.clone(),
            count: r.count.checked_mul(n)?,
            time_ns: r.time_ns.checked_mul(n)?,
            sync_delay_ns: r.sync_delay_ns.checked_mul(n)?,
            min_time_ns: r.time_ns,
            min_ids: ids.clone(),
            max_time_ns: r.time_ns,
            max_ids: ids.clone(),
        })
    }

    fn merge(&mut self, o: &StatementTotal) -> Option<()> {
        let count = self.count.checked_add(o.count)?;
        let time = self.time_ns.checked_add(o.time_ns)?;
        let sync = self.sync_delay_ns.checked_add(o.sync_delay_ns)?;
        (self.count, self.time_ns, self.sync_delay_ns) = (count, time, sync);
        self.ids.union_with(&o.ids);
        use std::cmp::Ordering::*;
        match o.min_time_ns.cmp(&self.min_time_ns) {
            Less => (self.min_time_ns, self.min_ids) = (o.min_time_ns, o.min_ids.clone()),
            Equal => self.min_ids.union_with(&o.min_ids),
            Greater => {}
        }
        match o.max_time_ns.cmp(&self.max_time_ns) {
            Greater => (self.max_time_ns, self.max_ids) = (o.max_time_ns, o.max_ids.clone()),
            Equal => self.max_ids.union_with(&o.max_ids),
            Less => {}
        }
        Some(())
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StatementsRecord {
    statements: Vec<StatementTotal>,
}

/// The `statements` filter.
#[derive(Debug, Default)]
pub struct Statements {
    by_key: BTreeMap<Key, StatementTotal>,
    folded: FoldedIds,
}

impl Statements {
    /// No statements yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a flushed `statements` record.
    pub fn decode(payload: &[u8]) -> Result<Vec<StatementTotal>, FilterError> {
        Ok(
            record::decode::<StatementsRecord>("statements", "statements", payload, &IdSet::new())?
                .statements,
        )
    }
}

impl Filter for Statements {
    fn name(&self) -> &str {
        "statements"
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        let add = record::record_or_leaf("statements", payload, sources, || {
            let leaf: Vec<StatementRecord> = serde_json::from_slice(payload).map_err(|e| {
                FilterError::bad_input(
                    "statements",
                    sources,
                    format_args!(
                        "is not a JSON array of statement records ({e}): {}",
                        excerpt(payload)
                    ),
                )
            })?;
            let statements = leaf
                .iter()
                .map(|r| StatementTotal::from_leaf(r, sources))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| overflow("statements", sources))?;
            Ok(StatementsRecord { statements })
        })?;
        // Merge into copies first: a failed fold changes nothing.
        let mut merged: BTreeMap<Key, StatementTotal> = BTreeMap::new();
        for t in add.statements {
            let k = t.key();
            let slot = match merged.remove(&k).or_else(|| self.by_key.get(&k).cloned()) {
                Some(mut cur) => {
                    cur.merge(&t)
                        .ok_or_else(|| overflow("statements", sources))?;
                    cur
                }
                None => t,
            };
            merged.insert(k, slot);
        }
        self.by_key.extend(merged);
        self.folded.add(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        let s = std::mem::take(self);
        let rec = StatementsRecord {
            statements: s.by_key.into_values().collect(),
        };
        Ok(s.folded.into_groups(|| record::encode("statements", &rec)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_by_statement_and_destination() {
        let p0 =
            br#"[{"event":"comm","line":12,"dest":1,"count":10,"time_ns":500,"sync_delay_ns":20},
                      {"event":"proc","line":8,"caller":5,"count":2,"time_ns":100}]"#;
        let p1 =
            br#"[{"event":"comm","line":12,"dest":1,"count":10,"time_ns":900,"sync_delay_ns":5},
                      {"event":"comm","line":12,"dest":2,"count":1,"time_ns":50}]"#;
        let mut f = Statements::new();
        f.fold(p0, &IdSet::single(0)).unwrap();
        f.fold(p1, &IdSet::single(1)).unwrap();
        let g = f.flush().unwrap();
        let s = Statements::decode(&g[0].payload).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].event, EventKind::Proc);
        let c = &s[1];
        assert_eq!(
            (c.dest, c.count, c.time_ns, c.sync_delay_ns),
            (Some(1), 20, 1400, 25)
        );
        assert_eq!(
            (c.max_time_ns, c.max_ids.to_string()),
            (900, "[1]".to_owned())
        );
        assert_eq!(c.ids.to_string(), "[0-1]");
        assert!(f.fold(b"[{\"event\":\"x\"}]", &IdSet::single(3)).is_err());
    }
}
