//! jobsnap: LaunchMON's Jobsnap on sdm in a few lines. Launches N servers, gathers host,
//! pid, resident memory and load from every one, and prints them merged.
//!
//! `cargo run --release -p sdm-client --example jobsnap -- 16 [local|mpirun|srun]`

use std::collections::BTreeMap;
use std::time::Duration;

use sdm_client::session::{Session, SessionOptions};
use sdm_proto::{IdSet, Status, SyncMode};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().as_deref().unwrap_or("8").parse()?;
    let launcher = args
        .next()
        .as_deref()
        .unwrap_or("local")
        .parse()
        .map_err(anyhow::Error::msg)?;
    let opts = SessionOptions {
        n,
        launcher,
        ..SessionOptions::default()
    };
    let session = Session::launch(&opts, |_| {}).await?;
    let report = session.report().clone();
    println!(
        "{} of {n} servers ready in {:.2} s",
        report.ready.len(),
        report.seconds
    );
    for (ids, why) in &report.failed {
        println!("  {ids} failed: {why}");
    }

    let groups = session
        .request(&report.ready, SyncMode::Timeout(10_000), "info")
        .await?;
    // Rows keyed by rank; identical (host, load) pairs merge into one line per host.
    let mut rows = Vec::new();
    let mut per_host: BTreeMap<(String, String), (IdSet, u64)> = BTreeMap::new();
    for g in &groups {
        if g.status != Status::Replied {
            println!(
                "  {} {:?}: {}",
                g.sources,
                g.status,
                String::from_utf8_lossy(&g.payload)
            );
            continue;
        }
        let text = String::from_utf8_lossy(&g.payload).into_owned();
        let field = |k: &str| {
            text.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                .unwrap_or("?")
                .to_owned()
        };
        let rss: u64 = field("rss_kb").parse().unwrap_or(0);
        let e = per_host.entry((field("host"), field("load"))).or_default();
        e.0.union_with(&g.sources);
        e.1 += rss * g.sources.len();
        rows.push((
            g.sources.first(),
            g.sources.to_string(),
            field("host"),
            field("pid"),
            rss,
        ));
    }
    rows.sort();
    println!(
        "{:<10} {:<16} {:>8} {:>10}",
        "rank", "host", "pid", "rss_kb"
    );
    for (_, ranks, host, pid, rss) in &rows {
        println!("{ranks:<10} {host:<16} {pid:>8} {rss:>10}");
    }
    println!("merged:");
    for ((host, load), (ids, rss)) in &per_host {
        println!(
            "  {ids} on {host}: {} servers, load {load}, {:.1} MiB resident",
            ids.len(),
            *rss as f64 / 1024.0
        );
    }
    session.shutdown(Duration::from_secs(10)).await;
    Ok(())
}
