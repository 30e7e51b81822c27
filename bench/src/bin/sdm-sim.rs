//! sdm-sim: one broadcast through a simulated tree of up to millions of servers, every
//! frame really encoded and decoded, driven by the same `Node` state machine as the daemons.
//!
//! The ids are ranks: `--ranks R` spreads R ranks over the servers in blocks (each server
//! answers once for all its ranks); without it every server serves one rank.
//!
//! Prints one JSON line: servers, ranks, accounted, groups, root_bytes, dest_header_bytes,
//! elapsed_ms, peak_rss_mb (and lost / timed_out in range form when there are any).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use sdm_overlay::sim::SimNet;
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::{NodeId, Placement, Shape, Tree};

/// Millions of small objects made and freed in waves: glibc's allocator spends much of
/// the run consolidating its free lists, mimalloc's size classes do not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Simulate one broadcast and its merged replies.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Number of servers.
    #[arg(long, default_value_t = 1000)]
    servers: u32,
    /// Number of ranks, in blocks over the servers (default: one per server).
    #[arg(long)]
    ranks: Option<u32>,
    /// Tree shape: binomial, kary:K, knomial:K or flat.
    #[arg(long, default_value = "binomial")]
    topology: Shape,
    /// Make this many servers reply differently (spread over the id range).
    #[arg(long, default_value_t = 0)]
    distinct: u32,
    /// Kill this server before it replies (repeatable).
    #[arg(long)]
    kill: Vec<u32>,
    /// One-way link latency in virtual microseconds.
    #[arg(long, default_value_t = 50)]
    latency_us: u64,
    /// Command timeout in ms (0 = wait for all).
    #[arg(long, default_value_t = 0)]
    timeout_ms: u32,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.servers > 0, "--servers must be at least 1");
    for &k in &args.kill {
        anyhow::ensure!(
            k < args.servers,
            "--kill {k}: no such server (0..{})",
            args.servers
        );
    }
    let n = args.servers;
    let ranks = args.ranks.unwrap_or(n);
    anyhow::ensure!(
        ranks >= n,
        "--ranks {ranks}: fewer ranks than servers ({n})"
    );
    let placement = Placement::blocks(ranks.div_ceil(n), ranks);
    anyhow::ensure!(
        placement.servers_for(ranks) == n,
        "--ranks {ranks} in blocks of {} fill {} servers, not {n}",
        ranks.div_ceil(n),
        placement.servers_for(ranks)
    );
    let distinct = args.distinct.min(n);
    // Distinct repliers spread evenly: ids i * (n / distinct).
    let stride = n.checked_div(distinct).unwrap_or(0);
    let started = Instant::now();
    let topo = Tree::new(Arc::from(args.topology.build(n)), placement);
    let responder = Box::new(move |id: NodeId, _: &Bytes| {
        let s = id.server().expect("only servers deliver");
        let body: Bytes = if stride > 0 && s.is_multiple_of(stride) && s / stride < distinct {
            Bytes::from(format!("distinct reply from {s}"))
        } else {
            Bytes::from_static(b"ok")
        };
        Some((Duration::from_micros(10), body))
    });
    let mut net = SimNet::with_tree(topo, Duration::from_micros(args.latency_us), responder);
    let dest = IdSet::all(ranks);
    let dest_header_bytes = dest.to_bytes().len();
    for &k in &args.kill {
        net.kill(k);
    }
    let sync = match args.timeout_ms {
        0 => SyncMode::WaitAll,
        ms => SyncMode::Timeout(ms),
    };
    net.command(1, dest.clone(), sync, "ping");
    net.run();
    let groups = net.groups(1);
    let mut accounted = IdSet::new();
    let mut twice = 0u64;
    let (mut lost, mut timed_out) = (IdSet::new(), IdSet::new());
    for g in &groups {
        twice += (&accounted & &g.sources).len();
        accounted.union_with(&g.sources);
        match g.status {
            Status::Lost => lost.union_with(&g.sources),
            Status::TimedOut => timed_out.union_with(&g.sources),
            Status::Replied | Status::Error => {}
        }
    }
    let mut out = serde_json::json!({
        "servers": n,
        "ranks": ranks,
        "topology": args.topology.to_string(),
        "accounted": accounted.len(),
        "accounted_twice": twice,
        "groups": groups.len(),
        "root_bytes": net.root_bytes,
        "dest_header_bytes": dest_header_bytes,
        "frames": net.frames,
        "virtual_ms": net.elapsed().as_secs_f64() * 1e3,
        "elapsed_ms": started.elapsed().as_secs_f64() * 1e3,
        "peak_rss_mb": sdm_bench::peak_rss_mb(),
    });
    if !lost.is_empty() {
        out["lost"] = lost.to_string().into();
    }
    if !timed_out.is_empty() {
        out["timed_out"] = timed_out.to_string().into();
    }
    println!(
        "{}",
        serde_json::to_string(&out).context("printing the result")?
    );
    anyhow::ensure!(
        accounted == dest && twice == 0,
        "invariant broken: accounted {accounted} of {dest}, {twice} twice"
    );
    Ok(())
}
