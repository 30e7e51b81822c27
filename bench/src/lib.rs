//! sdm-bench: the scale simulator (`sdm-sim`), the macro benchmark harness (`sdm-bench`),
//! its minimal-relay baseline (`sdm-relay`), and benchmark helpers.
//!
//! Results go to BENCHMARKS.md with the command, the machine and the date.

pub mod baseline;
pub mod results;
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

pub use sdm_server::mpir::descendants;

/// CPU time consumed so far by the processes `pids`, all their threads, in nanoseconds
/// (the first field of /proc/PID/task/TID/schedstat: time spent running). Processes that
/// are gone count 0.
pub fn cpu_ns(pids: &[u32]) -> u64 {
    let mut total = 0u64;
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Some(ns) = std::fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            {
                total += ns;
            }
        }
    }
    total
}
