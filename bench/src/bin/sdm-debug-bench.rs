//! sdm-debug-bench: the symbolic debugger's latency on a real local tree: N ranks of a
//! program started stopped at `main`, then the time to the merged reply of the first `print`
//! on every rank (what a tool's first symbolic command costs), of each further `print EXPR`,
//! and of each `next`. Prints one JSON line (milliseconds).

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::Parser;
use sdm_bench::stats::summarize;
use sdm_client::session::{Session, SessionOptions, find_sdm_binary};
use sdm_omis::Value;
use sdm_proto::{IdSet, Status, SyncMode};
use serde_json::json;

/// Symbolic debugger latency.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Number of ranks (programs); one server serves them all unless --ranks-per-server
    /// splits them.
    #[arg(short, long, default_value_t = 64)]
    n: u32,
    /// Ranks per server, in blocks (1: one server per rank).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    ranks_per_server: Option<u32>,
    /// The program (built with -g; it is started stopped at `main`).
    #[arg(long)]
    program: String,
    /// The expression printed.
    #[arg(long, default_value = "rank")]
    expr: String,
    /// Timed prints and nexts.
    #[arg(long, default_value_t = 10)]
    iters: u32,
}

/// Sends one OMIS request to every rank; the reply groups (all must be replies without
/// an error) and the time to the last one.
async fn timed(s: &mut Session, request: &str) -> anyhow::Result<(usize, Duration)> {
    let all: IdSet = s.all();
    let t0 = Instant::now();
    let groups = s
        .request_command(sdm_client::service::omis(
            &all,
            SyncMode::Timeout(600_000),
            request.to_owned(),
        ))
        .await?;
    let took = t0.elapsed();
    for g in &groups {
        let text = String::from_utf8_lossy(&g.payload);
        ensure!(
            g.status == Status::Replied && !text.contains("error"),
            "{request} on {}: {text}",
            g.sources
        );
    }
    Ok((groups.len(), took))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn bench(cli: Cli) -> anyhow::Result<serde_json::Value> {
    let opts = SessionOptions {
        n: cli.n,
        ranks_per_server: cli.ranks_per_server,
        program: Some(find_sdm_binary()?),
        ..SessionOptions::default()
    };
    let mut s = Session::launch(&opts, |_| {}).await.context("launch")?;
    ensure!(
        s.report().failed.is_empty(),
        "start-up incomplete: {:?}",
        s.report().failed
    );
    let start = format!(
        "1 [] sdm_start({}, [], \"pipes\", 1)",
        Value::Str(cli.program.clone())
    );
    timed(&mut s, &start).await?;
    let print = format!("2 [] sdm_print({})", Value::Str(cli.expr.clone()));
    let (groups, handover) = timed(&mut s, &print).await?;
    let mut prints = Vec::new();
    for _ in 0..cli.iters {
        prints.push(ms(timed(&mut s, &print).await?.1));
    }
    let mut nexts = Vec::new();
    for _ in 0..cli.iters {
        nexts.push(ms(timed(&mut s, "3 [] sdm_step(\"next\")").await?.1));
    }
    timed(&mut s, "4 [] kill()").await?;
    s.shutdown(Duration::from_secs(10)).await;
    let (p, n) = (summarize(&prints), summarize(&nexts));
    Ok(json!({
        "bench": "debugger", "n": cli.n, "ranks_per_server": cli.ranks_per_server,
        "iters": cli.iters, "expr": cli.expr,
        "print_groups": groups, "handover_print_ms": ms(handover),
        "print_p50_ms": p.p50, "next_p50_ms": n.p50,
    }))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    println!("{}", rt.block_on(bench(cli))?);
    Ok(())
}
