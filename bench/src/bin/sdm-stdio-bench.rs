//! sdm-stdio-bench: stdio forwarding under load, on a real local tree.
//!
//! - `lines`: every rank prints `--lines` lines as fast as it can (distinct per rank, or
//!   the same on every rank with `--identical`); reports the lines per second handed to
//!   the front-end's stdio handler (counted per rank: a merged `[0-63] 5` counts 64) and
//!   checks that none is lost; with distinct lines also how the intake was shared between
//!   ranks (`per_rank`: min and max lines/s while every rank was still printing, which
//!   ranks and their depth in the tree).
//!   With `--numbers` every rank prints `step I took T s on rank R` (per-rank numbers in one
//!   template): with `--merge template` the tree folds them into one templated line per
//!   step; the JSON then also reports the lines and bytes that reached the front-end.
//! - `stop`: the latency of a global stop (request to all ranks, every reply back) while
//!   the programs sleep and while every rank floods its output (`yes`), as ratio
//!   flood/idle, measured in the same invocation.
//!
//! Each run prints one JSON line.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::{Parser, Subcommand};
use sdm_bench::stats::summarize;
use sdm_client::iof::Iof;
use sdm_client::session::{Session, SessionOptions, find_sdm_binary};
use sdm_overlay::template::MergeMode;
use sdm_proto::{IdSet, Status, SyncMode};
use serde_json::json;

/// Stdio benchmarks.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Number of servers (and programs).
    #[arg(short, long, default_value_t = 64, global = true)]
    n: u32,
    /// The front-end's merge window in milliseconds (interior nodes use a tenth).
    #[arg(long, default_value_t = 200, global = true)]
    window_ms: u64,
    /// Ranks each server serves (default: one server for the host).
    #[arg(long, global = true)]
    ranks_per_server: Option<u32>,
    /// How lines of different ranks merge: exact or template.
    #[arg(long, default_value = "exact", global = true)]
    merge: MergeMode,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Lines per second to the front-end.
    Lines {
        /// Lines each rank prints.
        #[arg(long, default_value_t = 20_000)]
        lines: u64,
        /// Every rank prints the same lines (they merge) instead of its own.
        #[arg(long)]
        identical: bool,
        /// Every rank prints lines of one template with numbers of its own.
        #[arg(long, conflicts_with = "identical")]
        numbers: bool,
    },
    /// Global stop latency, idle against flooding.
    Stop {
        /// Timed stops per condition.
        #[arg(long, default_value_t = 20)]
        iters: u32,
        /// Time a `ping` round trip (answered by the server itself, not the monitor)
        /// instead of stop.
        #[arg(long)]
        ping: bool,
    },
}

/// How the tree is set up.
#[derive(Debug, Clone, Copy)]
struct Setup {
    n: u32,
    window_ms: u64,
    ranks_per_server: Option<u32>,
    merge: MergeMode,
}

/// What the ranks print.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Text {
    Distinct,
    Identical,
    Numbers,
}

async fn launch(n: u32, window_ms: u64) -> anyhow::Result<Session> {
    launch_with(Setup {
        n,
        window_ms,
        ranks_per_server: None,
        merge: MergeMode::Exact,
    })
    .await
}

async fn launch_with(t: Setup) -> anyhow::Result<Session> {
    let opts = SessionOptions {
        n: t.n,
        program: Some(find_sdm_binary()?),
        stdio_window: Duration::from_millis(t.window_ms / 10),
        ranks_per_server: t.ranks_per_server,
        stdio_merge: t.merge,
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.context("launch")?;
    ensure!(
        s.report().failed.is_empty(),
        "start-up incomplete: {:?}",
        s.report().failed
    );
    Ok(s)
}

async fn start(s: &mut Session, script: &str) -> anyhow::Result<()> {
    let all = s.all();
    let req = format!(
        "0 [] sdm_start(\"/bin/sh\", [\"-c\", {}], \"pty\")",
        sdm_omis::Value::Str(script.to_owned())
    );
    for g in s
        .request_command(sdm_client::service::omis(&all, SyncMode::WaitAll, req))
        .await?
    {
        ensure!(
            g.status == Status::Replied,
            "start failed on {}: {:?}",
            g.sources,
            g.payload
        );
    }
    Ok(())
}

async fn lines(setup: Setup, per_rank: u64, text: Text) -> anyhow::Result<serde_json::Value> {
    let (n, window_ms) = (setup.n, setup.window_ms);
    let identical = text == Text::Identical;
    let mut s = launch_with(setup).await?;
    let count = Arc::new(AtomicU64::new(0));
    let ended = Arc::new(std::sync::Mutex::new(IdSet::new()));
    let mut iof = Iof::new(s.all(), Duration::from_millis(window_ms));
    let c = count.clone();
    let e = ended.clone();
    let share = Arc::new(std::sync::Mutex::new(Share::new(n, per_rank)));
    let sh = share.clone();
    iof.set_stdout_handler(move |ids, _| {
        c.fetch_add(ids.len(), Ordering::Relaxed);
        sh.lock().expect("not poisoned").add(ids);
    })
    .set_event_handler(move |ids, text| {
        if text.starts_with("process_terminated") {
            e.lock().expect("not poisoned").union_with(ids);
        }
    });
    let script = match text {
        Text::Identical => format!("seq 1 {per_rank}"),
        Text::Distinct => format!(
            "awk -v r=\"$SDM_RANK\" 'BEGIN {{ for (i = 1; i <= {per_rank}; i++) print r, i }}'"
        ),
        // One template per step, a value of each rank's own (0.900-1.899 s).
        Text::Numbers => format!(
            "awk -v r=\"$SDM_RANK\" 'BEGIN {{ for (i = 1; i <= {per_rank}; i++) \
             printf \"step %d took %.3f s on rank %d\\n\", i, 0.9 + ((r * 7919 + i * 31) % 1000) / 1000, r }}'"
        ),
    };
    let all = s.all();
    let t0 = Instant::now();
    share.lock().expect("not poisoned").t0 = t0;
    start(&mut s, &script).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while !all.is_subset(&ended.lock().expect("not poisoned")) {
        if tokio::time::Instant::now() > deadline {
            bail!("programs did not end within 600 s");
        }
        let step = tokio::time::Instant::now() + Duration::from_millis(50);
        s.pump_stdio(&mut iof, step).await?;
    }
    iof.flush();
    let secs = t0.elapsed().as_secs_f64();
    let (frontend_lines, frontend_bytes) = iof.received();
    let got = count.load(Ordering::Relaxed);
    let want = per_rank * u64::from(n);
    s.shutdown(Duration::from_secs(20)).await;
    ensure!(got == want, "{got} rank-lines arrived, {want} were printed");
    let mut out = json!({
        "bench": "stdio_lines", "n": n, "lines_per_rank": per_rank, "identical": identical,
        "window_ms": window_ms, "seconds": secs, "rank_lines": got,
        "rank_lines_per_second": got as f64 / secs, "merge": setup.merge.name(),
        "numbers": text == Text::Numbers, "ranks_per_server": setup.ranks_per_server,
        "frontend_lines": frontend_lines, "frontend_bytes": frontend_bytes,
    });
    if text == Text::Distinct {
        let topo = sdm_topology::Shape::Binomial.build(n);
        out["per_rank"] = share.lock().expect("not poisoned").report(&*topo);
    }
    Ok(out)
}

/// How the front-end's intake was shared between ranks while all of them were still
/// printing: each rank's lines that had arrived when the first rank's last line arrived,
/// per second.
struct Share {
    t0: Instant,
    per_rank: u64,
    counts: Vec<u64>,
    /// Seconds from the start to the first rank done, and every rank's count then.
    first_done: Option<(f64, Vec<u64>)>,
}

impl Share {
    fn new(n: u32, per_rank: u64) -> Self {
        Self {
            t0: Instant::now(),
            per_rank,
            counts: vec![0; n as usize],
            first_done: None,
        }
    }

    fn add(&mut self, ids: &IdSet) {
        for r in ids.iter() {
            let c = &mut self.counts[r as usize];
            *c += 1;
            if *c == self.per_rank && self.first_done.is_none() {
                self.first_done = Some((self.t0.elapsed().as_secs_f64(), self.counts.clone()));
            }
        }
    }

    /// Min and max lines/s over the ranks, which ranks, and their depth in the tree.
    fn report(&self, topo: &dyn sdm_topology::Topology) -> serde_json::Value {
        let Some((secs, counts)) = &self.first_done else {
            return serde_json::Value::Null;
        };
        let depth = |r: usize| topo.depth(sdm_topology::NodeId::Server(r as u32)) as usize;
        let (lo, hi) = (0..counts.len()).fold((0, 0), |(lo, hi), r| {
            (
                if counts[r] < counts[lo] { r } else { lo },
                if counts[r] > counts[hi] { r } else { hi },
            )
        });
        let rate = |r: usize| counts[r] as f64 / secs;
        // Mean lines/s of the ranks at each depth (1: children of the master).
        let mut by_depth: Vec<(f64, u32)> = Vec::new();
        for r in 0..counts.len() {
            let d = depth(r);
            if by_depth.len() < d {
                by_depth.resize(d, (0.0, 0));
            }
            by_depth[d - 1].0 += rate(r);
            by_depth[d - 1].1 += 1;
        }
        let by_depth: Vec<f64> = by_depth
            .iter()
            .map(|&(sum, k)| if k == 0 { 0.0 } else { sum / f64::from(k) })
            .collect();
        json!({
            "mean_lines_per_s_by_depth": by_depth,
            "ranks_with_none": counts.iter().filter(|&&c| c == 0).count(),
            "until_first_done_s": secs,
            "min_lines_per_s": rate(lo), "min_rank": lo, "min_rank_depth": depth(lo),
            "max_lines_per_s": rate(hi), "max_rank": hi, "max_rank_depth": depth(hi),
            "max_over_min": rate(hi) / rate(lo).max(f64::MIN_POSITIVE),
        })
    }
}

/// Times `iters` global stops (each followed by a cont and 300 ms of output flowing).
async fn stops(s: &mut Session, iof: &mut Iof, iters: u32, ping: bool) -> anyhow::Result<Vec<f64>> {
    let all = s.all();
    let mut samples = Vec::new();
    for _ in 0..iters {
        let t = Instant::now();
        let probe = if ping { "ping" } else { "0 [] stop()" };
        let service = if ping {
            sdm_client::service::SDM
        } else {
            sdm_client::service::OMIS
        };
        let m = sdm_client::service::command(service, &all, SyncMode::WaitAll, probe);
        let groups = s.request_command(m).await?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
        ensure!(
            groups.len() == 1 && groups[0].status == Status::Replied && groups[0].sources == all,
            "{probe}: {groups:?}"
        );
        if !ping {
            s.request_command(sdm_client::service::omis(
                &all,
                SyncMode::WaitAll,
                "0 [] cont()",
            ))
            .await?;
        }
        let until = tokio::time::Instant::now() + Duration::from_millis(300);
        s.pump_stdio(iof, until).await?;
    }
    Ok(samples)
}

async fn stop(n: u32, window_ms: u64, iters: u32, ping: bool) -> anyhow::Result<serde_json::Value> {
    let mut results = serde_json::Map::new();
    let mut p50 = Vec::new();
    for (name, script) in [
        ("idle", "exec sleep 100000"),
        ("flood", "exec yes \"rank $SDM_RANK floods\""),
    ] {
        let mut s = launch(n, window_ms).await?;
        let lines = Arc::new(AtomicU64::new(0));
        let mut iof = Iof::new(s.all(), Duration::from_millis(window_ms));
        let l = lines.clone();
        iof.set_stdout_handler(move |ids, _| {
            l.fetch_add(ids.len(), Ordering::Relaxed);
        });
        start(&mut s, script).await?;
        let until = tokio::time::Instant::now() + Duration::from_millis(500);
        s.pump_stdio(&mut iof, until).await?;
        let t0 = Instant::now();
        let samples = stops(&mut s, &mut iof, iters, ping).await?;
        let secs = t0.elapsed().as_secs_f64();
        s.shutdown(Duration::from_secs(20)).await;
        let sum = summarize(&samples);
        p50.push(sum.p50);
        results.insert(
            name.into(),
            json!({"p50_us": sum.p50, "p99_us": sum.p99, "mean_us": sum.mean, "max_us": sum.max,
                   "rank_lines_per_second_meanwhile": lines.load(Ordering::Relaxed) as f64 / secs}),
        );
    }
    Ok(json!({
        "bench": if ping { "stdio_ping" } else { "stdio_stop" }, "n": n, "iters": iters, "window_ms": window_ms,
        "idle": results["idle"], "flood": results["flood"],
        "flood_over_idle_p50": p50[1] / p50[0],
    }))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let out = rt.block_on(async {
        match cli.cmd {
            Cmd::Lines {
                lines: l,
                identical,
                numbers,
            } => {
                let setup = Setup {
                    n: cli.n,
                    window_ms: cli.window_ms,
                    ranks_per_server: cli.ranks_per_server,
                    merge: cli.merge,
                };
                let text = match (identical, numbers) {
                    (true, _) => Text::Identical,
                    (_, true) => Text::Numbers,
                    _ => Text::Distinct,
                };
                lines(setup, l, text).await
            }
            Cmd::Stop { iters, ping } => stop(cli.n, cli.window_ms, iters, ping).await,
        }
    })?;
    println!("{out}");
    Ok(())
}
