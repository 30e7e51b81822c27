//! Job-wide process metrics, sampled through the tree (the data behind `sdm top`).
//!
//! Each wave asks every server for its program's metrics (`procstat`: CPU %, RSS, threads,
//! bytes read and written, context switches, read from /proc) and merges them in the tree
//! with the `stats` filter, so the front-end receives one record however many servers there
//! are: per metric the minimum, mean and maximum, and the ranks holding the minimum and the
//! maximum ("which ranks are busy"), and the sum over the ranks. The programs' own counters
//! (see [`crate::counters`]) are sampled the same way ([`sample_of`] with `counters`).

use std::time::Duration;

use sdm_overlay::filters::builtin::{KeyStats, Stats};
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
pub async fn sample(s: &Session, dest: &IdSet, timeout: Duration) -> crate::Result<Sample> {
    sample_of(s, dest, timeout, crate::service::PROCSTAT).await
}

/// Merges the key/value maps the service `service` returns on `dest`
/// ([`crate::service::PROCSTAT`], or [`crate::service::COUNTERS`]: the programs' own
/// counters) with the `stats` filter.
pub async fn sample_of(
    s: &Session,
    dest: &IdSet,
    timeout: Duration,
    service: &str,
) -> crate::Result<Sample> {
    let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
    let m = crate::service::filtered(service, dest, SyncMode::Timeout(ms), "stats", "");
    let groups = s.request_command(m).await?;
    let mut out = Sample::default();
    for g in groups {
        match g.status {
            Status::Replied => match Stats::decode(&g.payload) {
                Ok(keys) => out.stats.extend(keys),
                Err(e) => out.missing.push((g.sources, e.to_string())),
            },
            Status::Lost | Status::Error => out
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
