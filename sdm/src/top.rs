//! `sdm top`: a periodic reduction of per-process metrics over the whole job.
//!
//! Each wave asks every server for its program's metrics (`procstat`: CPU %, RSS, threads,
//! bytes read and written, context switches, read from /proc) and merges them in the tree
//! with the `stats` filter, so the front-end receives one record however many servers there
//! are: per metric the minimum, mean and maximum, and the ranks holding the minimum and the
//! maximum ("which ranks are busy"), and the sum over the ranks. The programs' own counters
//! (see [`crate::counters`]) print the same way, or grouped by identical ranks.

use std::fmt::Write as _;
use std::time::Duration;

use sdm_overlay::filters::Decimal;
use sdm_overlay::filters::builtin::{CountersRecord, KeyStats, Stats};
use sdm_proto::{IdSet, Status, SyncMode};

use crate::session::Session;

/// The metrics, in display order, with their units.
pub const METRICS: [(&str, &str); 6] = [
    ("cpu_pct", "CPU %"),
    ("rss_kb", "RSS kB"),
    ("threads", "threads"),
    ("read_bytes", "read B"),
    ("write_bytes", "written B"),
    ("ctx_switches", "ctx switches"),
];

/// One wave's result.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Statistics per metric (as merged by the tree).
    pub stats: Vec<(String, KeyStats)>,
    /// Ranks that gave no metrics, with why (program ended, timed out, lost).
    pub missing: Vec<(IdSet, String)>,
}

/// Samples the programs of `dest` once (waiting at most `timeout` for the slowest).
pub async fn sample(s: &mut Session, dest: &IdSet, timeout: Duration) -> anyhow::Result<Sample> {
    sample_of(s, dest, timeout, "procstat").await
}

/// Merges the key/value maps `request` returns on `dest` (`procstat`, or `counters`: the
/// programs' own counters) with the `stats` filter.
pub async fn sample_of(
    s: &mut Session,
    dest: &IdSet,
    timeout: Duration,
    request: &str,
) -> anyhow::Result<Sample> {
    let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
    let groups = s
        .request_filtered(dest, SyncMode::Timeout(ms), "stats", request.to_owned())
        .await?;
    let mut out = Sample::default();
    for g in groups {
        match g.status {
            Status::Replied => match Stats::decode(&g.payload) {
                Ok(keys) => out.stats.extend(keys),
                Err(e) => out.missing.push((g.sources, e.to_string())),
            },
            Status::Lost => out
                .missing
                .push((g.sources, String::from_utf8_lossy(&g.payload).into_owned())),
            Status::TimedOut => out.missing.push((g.sources, "timed out".into())),
        }
    }
    let order = |k: &str| {
        METRICS
            .iter()
            .position(|(m, _)| *m == k)
            .unwrap_or(usize::MAX)
    };
    out.stats.sort_by_key(|(k, _)| order(k));
    Ok(out)
}

/// Shortens a rank set for a table cell.
fn ranks(ids: &IdSet) -> String {
    let s = ids.to_string();
    if s.len() > 24 {
        format!("{}… ({} ranks)", &s[..20], ids.len())
    } else {
        s
    }
}

/// The sample as a table: metric, min (ranks), mean, max (ranks), sum.
pub fn table(s: &Sample) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<13} {:>12} {:<26} {:>12} {:>12} {:<26} {:>14}",
        "metric", "min", "at", "mean", "max", "at", "sum"
    );
    for (k, st) in &s.stats {
        let name = METRICS
            .iter()
            .find(|(m, _)| m == k)
            .map_or(k.as_str(), |(_, n)| n);
        let mean = st.mean.map(|m| m.to_string()).unwrap_or_default();
        let _ = writeln!(
            t,
            "{name:<13} {:>12} {:<26} {mean:>12} {:>12} {:<26} {:>14}",
            st.min.to_string(),
            ranks(&st.min_ids),
            st.max.to_string(),
            ranks(&st.max_ids),
            st.sum.to_string(),
        );
    }
    for (ids, why) in &s.missing {
        let _ = writeln!(t, "{ids} no metrics: {why}");
    }
    t
}

/// The sample as one JSON object (`t`: seconds since the first wave).
pub fn json(s: &Sample, t: f64) -> serde_json::Value {
    let metrics: serde_json::Map<String, serde_json::Value> = s
        .stats
        .iter()
        .map(|(k, st)| {
            (
                k.clone(),
                serde_json::json!({
                    "min": number(st.min), "min_ids": st.min_ids.to_string(),
                    "mean": st.mean.map(number),
                    "max": number(st.max), "max_ids": st.max_ids.to_string(),
                    "sum": number(st.sum),
                    "count": st.count,
                }),
            )
        })
        .collect();
    let missing: Vec<serde_json::Value> = s
        .missing
        .iter()
        .map(|(ids, why)| serde_json::json!({"ids": ids.to_string(), "why": why}))
        .collect();
    serde_json::json!({"t": t, "metrics": metrics, "missing": missing})
}

/// A decimal as a JSON number: an integer when it is one, otherwise the nearest double.
pub fn number(d: Decimal) -> serde_json::Value {
    match d.as_int().and_then(|i| i64::try_from(i).ok()) {
        Some(i) => serde_json::json!(i),
        None => d
            .to_string()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(serde_json::Value::Null, serde_json::Value::Number),
    }
}

/// `counters --groups` as a table: one column per counter, the sum over the ranks first,
/// then one row per set of ranks whose counters are all identical.
pub fn groups_table(rec: &CountersRecord) -> String {
    let keys: Vec<&String> = rec.total.keys().collect();
    let label = |ids: &IdSet| ranks(ids);
    let width = rec
        .rows
        .iter()
        .map(|r| label(&r.ids).chars().count())
        .max()
        .unwrap_or(0)
        .max("ranks".len());
    let cell = |k: &str, v: Option<&Decimal>| {
        let v = v.map_or("-".to_owned(), Decimal::to_string);
        format!(" {v:>w$}", w = k.len().max(8))
    };
    let mut t = format!("{:<width$}", "ranks");
    for k in &keys {
        t += &format!(" {k:>w$}", w = k.len().max(8));
    }
    t += "\n";
    let mut row = |name: String, values: &sdm_overlay::filters::builtin::Row| {
        t += &format!("{name:<width$}");
        for k in &keys {
            t += &cell(k, values.get(*k));
        }
        t += "\n";
    };
    row("sum".into(), &rec.total);
    for r in &rec.rows {
        row(label(&r.ids), &r.row);
    }
    t
}

/// `counters --groups` as one JSON object: `sum`, and `groups` of ranks with identical
/// counters; values are JSON numbers.
pub fn groups_json(rec: &CountersRecord) -> serde_json::Value {
    let map =
        |row: &sdm_overlay::filters::builtin::Row| -> serde_json::Map<String, serde_json::Value> {
            row.iter().map(|(k, v)| (k.clone(), number(*v))).collect()
        };
    let groups: Vec<serde_json::Value> = rec
        .rows
        .iter()
        .map(|r| serde_json::json!({"ids": r.ids.to_string(), "counters": map(&r.row)}))
        .collect();
    serde_json::json!({"command": "counters", "sum": map(&rec.total), "groups": groups})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_numbers_are_numbers() {
        let d = |t: &str| Decimal::parse(t.as_bytes()).unwrap();
        assert_eq!(number(d("450")), serde_json::json!(450));
        assert_eq!(number(d("1.5")), serde_json::json!(1.5));
        assert_eq!(number(d("-3")), serde_json::json!(-3));
    }

    #[test]
    fn groups_table_has_the_sum_and_one_row_per_group() {
        let row = |v: i128| -> sdm_overlay::filters::builtin::Row {
            [("ops".to_owned(), Decimal::from_int(v))]
                .into_iter()
                .collect()
        };
        let rec = CountersRecord {
            total: row(7),
            rows: vec![
                sdm_overlay::filters::builtin::RankRow {
                    ids: "[0,2]".parse().unwrap(),
                    row: row(1),
                },
                sdm_overlay::filters::builtin::RankRow {
                    ids: "[1]".parse().unwrap(),
                    row: row(5),
                },
            ],
        };
        assert_eq!(
            groups_table(&rec),
            "ranks      ops\nsum          7\n[0,2]        1\n[1]          5\n"
        );
        let j = groups_json(&rec);
        assert_eq!(j["sum"]["ops"], 7);
        assert_eq!(j["groups"][1]["ids"], "[1]");
        assert_eq!(j["groups"][1]["counters"]["ops"], 5);
    }
}
