//! sdm-bench: the scale simulator (`sdm-sim`), the macro benchmark harness (`sdm-bench`),
//! its minimal-relay baseline (`sdm-relay`), and benchmark helpers.
//!
//! Results go to BENCHMARKS.md with the command, the machine and the date.

pub mod baseline;
pub mod stats;
pub mod wire;

/// Peak resident set size of this process in MiB (VmHWM from /proc/self/status).
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}
