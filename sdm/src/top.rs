//! `sdm top`'s printing: the merged samples of [`sdm_client::top`] (job-wide process metrics,
//! or the programs' own counters, see [`sdm_client::counters`]) as a table or as JSON, and
//! the counters grouped by identical ranks.

use std::fmt::Write as _;

use sdm_client::top::{METRICS, Sample};
use sdm_overlay::filters::Decimal;
use sdm_overlay::filters::builtin::CountersRecord;
use sdm_proto::IdSet;

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
