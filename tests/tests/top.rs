//! `sdm top` over real processes: per-process metrics from /proc on every server, merged by
//! the `stats` filter in the tree, name the busiest rank; the console's `top` does the same.

use sdm_e2e as support;

use support::sdm_ok;

/// Rank 5 spins; every other rank sleeps.
const BUSY_FIVE: &str =
    "if [ \"$SDM_RANK\" = 5 ]; then while :; do :; done; else exec sleep 1000; fi";

#[test]
fn top_names_the_busiest_rank() {
    let text = sdm_ok([
        "top", "-n", "16", "--period", "0.5", "--count", "4", "--json", "--", "sh", "-c", BUSY_FIVE,
    ]);
    let samples: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("metrics").is_some())
        .collect();
    assert_eq!(samples.len(), 4, "{text}");
    let last = &samples[3]["metrics"];
    assert_eq!(last["cpu_pct"]["max_ids"], "[5]", "{last}");
    assert_eq!(last["cpu_pct"]["count"], 16, "every rank sampled: {last}");
    for key in [
        "rss_kb",
        "threads",
        "read_bytes",
        "write_bytes",
        "ctx_switches",
    ] {
        assert_eq!(last[key]["count"], 16, "{key}: {last}");
    }
    assert_eq!(last["threads"]["max"], 1, "{last}");
}

#[test]
fn console_top_command() {
    let text = sdm_ok([
        "run",
        "-n",
        "8",
        "-c",
        "sleep 1",
        "-c",
        "top",
        "-c",
        "top [0-3]",
        "-c",
        "kill",
        "--",
        "sh",
        "-c",
        BUSY_FIVE,
    ]);
    let cpu: Vec<&str> = text.lines().filter(|l| l.starts_with("CPU %")).collect();
    assert_eq!(cpu.len(), 2, "{text}");
    // metric, min, at, mean, max, at, sum: the ranks at the maximum come before the sum.
    let cols: Vec<&str> = cpu[0].split_whitespace().collect();
    assert_eq!(
        cols[cols.len() - 2],
        "[5]",
        "rank 5 is the busiest: {}",
        cpu[0]
    );
    assert!(!cpu[1].contains("[5]"), "only ranks 0-3 asked: {}", cpu[1]);
}
