//! sdm-bench: macro benchmarks of real sdm trees (start-up, round-trip time, pipelined
//! reduction throughput) against a minimal-relay baseline over the same binomial tree.
//!
//! Every run prints one JSON line with `bench`, `system` (`sdm` or `baseline`), `n` and the
//! figures. `--baseline` runs the same benchmark over `sdm-relay` processes instead of sdm.
//! See `bench/run-macro.sh` for the series in BENCHMARKS.md.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use clap::{Args, Parser, Subcommand};
use sdm_bench::baseline::{RelayTree, find_relay_binary};
use sdm_bench::stats::summarize;
use sdm_client::session::{Progress, Session, SessionOptions, find_sdm_binary};
use sdm_deploy::LauncherKind;
use sdm_proto::{IdSet, Message, Status, SyncMode};
use sdm_topology::Shape;
use serde_json::{Value, json};

/// Macro benchmarks: sdm against a minimal relay tree.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    #[command(flatten)]
    Bench(Bench),
    /// Reads JSON lines of earlier runs (a file, or - for stdin) and prints the markdown
    /// table of BENCHMARKS.md: median per figure, sdm against baseline, and their ratio.
    Table {
        /// The JSON lines.
        file: String,
    },
}

/// The benchmarks; each prints one JSON line.
#[derive(Subcommand, Debug)]
enum Bench {
    /// Wall time from launch to every server ready.
    Startup(Common),
    /// Round-trip time of a broadcast `ping` with merged replies.
    Rtt {
        #[command(flatten)]
        common: Common,
        /// Timed round trips.
        #[arg(long, default_value_t = 200)]
        iters: u32,
        /// Untimed round trips first.
        #[arg(long, default_value_t = 20)]
        warmup: u32,
    },
    /// Pipelined waves of the sum reduction.
    Throughput {
        #[command(flatten)]
        common: Common,
        /// Timed waves.
        #[arg(long, default_value_t = 500)]
        waves: u32,
        /// Waves kept in flight.
        #[arg(long, default_value_t = 16)]
        window: u32,
        /// Untimed waves first (the window is full when timing starts).
        #[arg(long, default_value_t = 32)]
        warmup: u32,
        /// The service the waves' `value` requests name (sdm only; empty: the built-in
        /// service, unnamed). `--service sdm` names the built-in one, so that every command
        /// carries a service name, as a tool's OMIS commands do.
        #[arg(long, default_value = "")]
        service: String,
    },
}

#[derive(Args, Debug, Clone)]
struct Common {
    /// Number of ranks: sdm serves them from one server (one per host) unless
    /// --ranks-per-server splits them; the baseline runs n relays (plus position 0).
    #[arg(short, long)]
    n: u32,
    /// Ranks per sdm server, in blocks (1: one server per rank).
    #[arg(long)]
    ranks_per_server: Option<u32>,
    /// sdm transport: tcp or quic (the baseline is always tcp).
    #[arg(long, default_value = "tcp")]
    transport: String,
    /// Run the minimal-relay baseline instead of sdm.
    #[arg(long)]
    baseline: bool,
    /// sdm start-up deadline in seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// How sdm's servers start: `local` (this host) or `ssh` (one server per --hosts entry
    /// by default).
    #[arg(long, default_value = "local")]
    launcher: LauncherKind,
    /// The hosts for `--launcher ssh`, comma-separated.
    #[arg(long, value_delimiter = ',')]
    hosts: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    sdm_server::logging::init("warn");
    let cli = Cli::parse();
    let bench = match &cli.cmd {
        Cmd::Bench(b) => b,
        Cmd::Table { file } => {
            let text = if file == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?
            };
            print!("{}", table(&text));
            return Ok(());
        }
    };
    let common = match bench {
        Bench::Startup(c) | Bench::Rtt { common: c, .. } | Bench::Throughput { common: c, .. } => c,
    };
    ensure!(common.n > 0, "-n must be at least 1");
    ensure!(
        common.ranks_per_server != Some(0),
        "--ranks-per-server must be at least 1"
    );
    let out = if common.baseline {
        ensure!(
            common.transport == "tcp",
            "the baseline relays over tcp only (got --transport {})",
            common.transport
        );
        baseline(bench)?
    } else {
        // One thread: the front-end is one task, as the baseline's front-end is one thread.
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(sdm_run(bench))?
    };
    println!("{out}");
    Ok(())
}

fn header(bench: &str, system: &str, c: &Common) -> Value {
    json!({
        "bench": bench,
        "system": system,
        "n": c.n,
        "ranks_per_server": c.ranks_per_server,
        "transport": if c.baseline { "tcp" } else { c.transport.as_str() },
        "launcher": if c.baseline { "local".into() } else { format!("{:?}", c.launcher).to_lowercase() },
        "hosts": c.hosts.len(),
    })
}

fn extend(mut v: Value, more: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (v.as_object_mut(), more) {
        a.extend(b);
    }
    v
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

// ---- sdm ----------------------------------------------------------------------------------

/// Launches a tree; returns it with the harness's own wall time of `Session::launch` and
/// the moments (seconds since the call) each start-up phase ended.
async fn launch(c: &Common) -> anyhow::Result<(Session, f64, Value)> {
    let opts = SessionOptions {
        n: c.n,
        ranks_per_server: c.ranks_per_server,
        launcher: c.launcher,
        hosts: c.hosts.clone(),
        transport: c.transport.clone(),
        topology: Shape::Binomial,
        program: Some(find_sdm_binary()?),
        startup_timeout: Duration::from_secs(c.timeout),
        ..SessionOptions::default()
    };
    let n = c.n;
    let t0 = Instant::now();
    let mut phases = serde_json::Map::new();
    let s = Session::launch(&opts, |p| {
        let name = match p {
            Progress::Launched => "spawned",
            Progress::Listening { count, .. } if *count == n => "listening",
            Progress::Listening { .. } => return,
            Progress::MasterConnected => "master_connected",
            Progress::InitSent => "init_sent",
        };
        phases.insert(name.into(), json!(t0.elapsed().as_secs_f64()));
    })
    .await
    .context("Session::launch")?;
    let wall = t0.elapsed().as_secs_f64();
    phases.insert("ready".into(), json!(wall));
    Ok((s, wall, Value::Object(phases)))
}

fn failures(s: &Session) -> Vec<Value> {
    s.report()
        .failed
        .iter()
        .map(|(ids, why)| json!({"ids": ids.to_string(), "count": ids.len(), "reason": why}))
        .collect()
}

/// Launches and insists every server is ready (for rtt and throughput).
async fn launch_all_ready(c: &Common) -> anyhow::Result<(Session, f64)> {
    let (s, wall, _) = launch(c).await?;
    if !s.report().failed.is_empty() {
        let f = failures(&s);
        s.shutdown(Duration::from_secs(20)).await;
        bail!("start-up incomplete: {}", Value::Array(f));
    }
    Ok((s, wall))
}

fn check_single(groups: &[sdm_client::ReplyGroup], all: &IdSet, want: &[u8]) -> anyhow::Result<()> {
    match groups {
        [g] if g.status == Status::Replied && &g.sources == all && &g.payload[..] == want => Ok(()),
        _ => Err(anyhow!(
            "expected one group {all} {:?}, got {:?}",
            String::from_utf8_lossy(want),
            groups
                .iter()
                .map(|g| format!(
                    "{:?} {} {:?}",
                    g.status,
                    g.sources,
                    String::from_utf8_lossy(&g.payload)
                ))
                .collect::<Vec<_>>()
        )),
    }
}

async fn sdm_run(cmd: &Bench) -> anyhow::Result<Value> {
    match cmd {
        Bench::Startup(c) => sdm_startup(c).await,
        Bench::Rtt {
            common: c,
            iters,
            warmup,
        } => sdm_rtt(c, *iters, *warmup).await,
        Bench::Throughput {
            common: c,
            waves,
            window,
            warmup,
            service,
        } => sdm_throughput(c, *waves, *window, *warmup, service).await,
    }
}

/// Start-up: the time until every server is ready, and its phases.
async fn sdm_startup(c: &Common) -> anyhow::Result<Value> {
    let (s, wall, phases) = launch(c).await?;
    let r = s.report();
    let out = extend(
        header("startup", "sdm", c),
        json!({
            "ready": r.ready.len(),
            "failed": failures(&s),
            "report_seconds": r.seconds,
            "wall_seconds": wall,
            "phases": phases,
        }),
    );
    s.shutdown(Duration::from_secs(20)).await;
    Ok(out)
}

/// Round trip: `iters` timed pings of every server after `warmup` untimed ones.
async fn sdm_rtt(c: &Common, iters: u32, warmup: u32) -> anyhow::Result<Value> {
    let (s, wall) = launch_all_ready(c).await?;
    let servers = s.servers();
    let all = s.all();
    let mut samples = Vec::with_capacity(iters as usize);
    let result: anyhow::Result<()> = async {
        for i in 0..warmup + iters {
            let t = Instant::now();
            let op = s.send(&all, SyncMode::WaitAll, "ping").await?;
            let groups = s.collect(op, &all).await?;
            let dt = t.elapsed();
            check_single(&groups, &all, b"pong")?;
            if i >= warmup {
                samples.push(micros(dt));
            }
        }
        Ok(())
    }
    .await;
    s.shutdown(Duration::from_secs(20)).await;
    result?;
    let out = rtt_json(c, "sdm", wall, iters, warmup, &samples);
    Ok(extend(out, json!({ "servers": servers })))
}

/// Throughput: `waves` timed sum waves, `window` in flight, after `warmup` untimed ones;
/// the daemons' CPU per wave.
async fn sdm_throughput(
    c: &Common,
    waves: u32,
    window: u32,
    warmup: u32,
    service: &str,
) -> anyhow::Result<Value> {
    let (s, wall) = launch_all_ready(c).await?;
    let servers = s.servers();
    let all = s.all();
    let n = u64::from(c.n);
    let want = (n * (n - 1) / 2).to_string();
    let total = warmup + waves;
    let mut bad = 0u32;
    let mut first_bad = None;
    let mut inflight = VecDeque::new();
    let (mut sent, mut done) = (0u32, 0u32);
    let mut t0 = Instant::now();
    // Every daemon (the master and the servers are this process's descendants).
    let daemons = sdm_bench::descendants(std::process::id());
    let mut cpu0 = 0;
    let result: anyhow::Result<()> = async {
        while done < total {
            while sent < total && inflight.len() < window as usize {
                let mut m = Message::command(0, all.clone(), SyncMode::WaitAll, "value")
                    .for_service(service);
                m.aggregate.filter = "sum".into();
                inflight.push_back(s.send_command(m).await?);
                sent += 1;
            }
            let op = inflight.pop_front().expect("a wave is in flight");
            let groups = s.collect(op, &all).await?;
            if let Err(e) = check_single(&groups, &all, want.as_bytes()) {
                bad += 1;
                first_bad.get_or_insert_with(|| e.to_string());
            }
            done += 1;
            if done == warmup {
                t0 = Instant::now();
                cpu0 = sdm_bench::cpu_ns(&daemons);
            }
        }
        Ok(())
    }
    .await;
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = per_daemon_wave_us(sdm_bench::cpu_ns(&daemons) - cpu0, &daemons, waves);
    s.shutdown(Duration::from_secs(20)).await;
    result?;
    if let Some(e) = first_bad {
        bail!("{bad} waves had a wrong sum; first: {e}");
    }
    let out = throughput_json(c, "sdm", wall, waves, window, warmup, elapsed, cpu);
    Ok(extend(out, json!({ "servers": servers })))
}

fn rtt_json(
    c: &Common,
    system: &str,
    startup: f64,
    iters: u32,
    warmup: u32,
    samples: &[f64],
) -> Value {
    let st = summarize(samples);
    extend(
        header("rtt", system, c),
        json!({
            "iters": iters,
            "warmup": warmup,
            "p50_us": st.p50,
            "p99_us": st.p99,
            "mean_us": st.mean,
            "min_us": st.min,
            "max_us": st.max,
            "startup_seconds": startup,
        }),
    )
}

/// CPU microseconds per daemon per wave, from `ns` spent by `daemons` over `waves`.
fn per_daemon_wave_us(ns: u64, daemons: &[u32], waves: u32) -> f64 {
    ns as f64 / 1e3 / daemons.len().max(1) as f64 / f64::from(waves.max(1))
}

#[allow(clippy::too_many_arguments)]
fn throughput_json(
    c: &Common,
    system: &str,
    startup: f64,
    waves: u32,
    window: u32,
    warmup: u32,
    elapsed: f64,
    cpu_us_per_daemon_wave: f64,
) -> Value {
    extend(
        header("throughput", system, c),
        json!({
            "waves": waves,
            "window": window,
            "warmup": warmup,
            "elapsed_seconds": elapsed,
            "waves_per_second": f64::from(waves) / elapsed,
            "cpu_us_per_daemon_wave": cpu_us_per_daemon_wave,
            "sums_ok": true,
            "startup_seconds": startup,
        }),
    )
}

// ---- baseline -----------------------------------------------------------------------------

fn baseline(cmd: &Bench) -> anyhow::Result<Value> {
    let relay = find_relay_binary()?;
    match cmd {
        Bench::Startup(c) => {
            let t = RelayTree::launch(&relay, c.n).context("starting the relay tree")?;
            let ph = t.phases();
            let out = extend(
                header("startup", "baseline", c),
                json!({
                    "ready": t.connected().saturating_sub(1),
                    "wall_seconds": t.startup().as_secs_f64(),
                    "phases": {
                        "spawned": ph.spawned.as_secs_f64(),
                        "listening": ph.listening.as_secs_f64(),
                        "tables_sent": ph.tables_sent.as_secs_f64(),
                        "ready": ph.acked.as_secs_f64(),
                    },
                }),
            );
            ensure!(
                t.connected() == u64::from(c.n) + 1,
                "only {} of {} relays connected",
                t.connected(),
                c.n + 1
            );
            t.shutdown(Duration::from_secs(20));
            Ok(out)
        }
        Bench::Rtt {
            common: c,
            iters,
            warmup,
        } => {
            let mut t = RelayTree::launch(&relay, c.n).context("starting the relay tree")?;
            let want = t.expected_sum();
            let mut samples = Vec::with_capacity(*iters as usize);
            for i in 0..warmup + iters {
                let s = Instant::now();
                let r = t.request()?;
                let dt = s.elapsed();
                ensure!(r.value == want, "reply sum {} != {want}", r.value);
                if i >= *warmup {
                    samples.push(micros(dt));
                }
            }
            let startup = t.startup().as_secs_f64();
            t.shutdown(Duration::from_secs(20));
            Ok(rtt_json(c, "baseline", startup, *iters, *warmup, &samples))
        }
        Bench::Throughput {
            common: c,
            waves,
            window,
            warmup,
            ..
        } => {
            let mut t = RelayTree::launch(&relay, c.n).context("starting the relay tree")?;
            let want = t.expected_sum();
            let total = warmup + waves;
            let mut inflight = VecDeque::new();
            let (mut sent, mut done, mut bad) = (0u32, 0u32, 0u32);
            let mut t0 = Instant::now();
            let daemons = sdm_bench::descendants(std::process::id());
            let mut cpu0 = 0;
            while done < total {
                while sent < total && inflight.len() < *window as usize {
                    inflight.push_back(t.send()?);
                    sent += 1;
                }
                let op = inflight.pop_front().expect("a wave is in flight");
                let r = t.recv()?;
                ensure!(r.op == op, "reply for op {} while waiting for {op}", r.op);
                if r.value != want {
                    bad += 1;
                }
                done += 1;
                if done == *warmup {
                    t0 = Instant::now();
                    cpu0 = sdm_bench::cpu_ns(&daemons);
                }
            }
            let elapsed = t0.elapsed().as_secs_f64();
            let cpu = per_daemon_wave_us(sdm_bench::cpu_ns(&daemons) - cpu0, &daemons, *waves);
            let startup = t.startup().as_secs_f64();
            t.shutdown(Duration::from_secs(20));
            ensure!(bad == 0, "{bad} waves had a sum other than {want}");
            Ok(throughput_json(
                c, "baseline", startup, *waves, *window, *warmup, elapsed, cpu,
            ))
        }
    }
}

// ---- table --------------------------------------------------------------------------------

/// The figures of the table: bench, JSON field, row label, scale to the shown unit.
const FIGURES: [(&str, &str, &str, f64); 5] = [
    ("startup", "wall_seconds", "start-up (s)", 1.0),
    ("rtt", "p50_us", "rtt p50 (ms)", 1e-3),
    ("rtt", "p99_us", "rtt p99 (ms)", 1e-3),
    (
        "throughput",
        "waves_per_second",
        "throughput (waves/s)",
        1.0,
    ),
    (
        "throughput",
        "cpu_us_per_daemon_wave",
        "CPU per daemon per wave (us)",
        1.0,
    ),
];

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        k if k % 2 == 1 => v[k / 2],
        k => (v[k / 2 - 1] + v[k / 2]) / 2.0,
    }
}

/// Three significant digits, at least.
fn fmt3(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let digits = if x.abs() >= 100.0 {
        0
    } else if x.abs() >= 10.0 {
        1
    } else if x.abs() >= 1.0 {
        2
    } else {
        3
    };
    format!("{x:.digits$}")
}

/// Median (min–max over runs) of one figure, already scaled.
fn cell(v: &[f64]) -> (f64, String) {
    let mut v = v.to_vec();
    let m = median(&mut v);
    let s = match v.len() {
        0 => "–".into(),
        1 => fmt3(m),
        _ => format!("{} ({}–{})", fmt3(m), fmt3(v[0]), fmt3(v[v.len() - 1])),
    };
    (m, s)
}

/// The markdown table of sdm against the baseline (tcp runs only) from JSON lines.
fn table(text: &str) -> String {
    use std::collections::BTreeMap;
    // (figure index, n, system) -> scaled samples
    let mut data: BTreeMap<(usize, u64, String), Vec<f64>> = BTreeMap::new();
    let mut runs: BTreeMap<(usize, u64, String), usize> = BTreeMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let (Some(bench), Some(n), Some(system)) =
            (v["bench"].as_str(), v["n"].as_u64(), v["system"].as_str())
        else {
            continue;
        };
        if v["transport"].as_str().is_some_and(|t| t != "tcp") {
            continue;
        }
        for (i, (b, field, _, scale)) in FIGURES.iter().enumerate() {
            if *b == bench
                && let Some(x) = v[*field].as_f64()
            {
                data.entry((i, n, system.to_owned()))
                    .or_default()
                    .push(x * scale);
                *runs.entry((i, n, system.to_owned())).or_default() += 1;
            }
        }
    }
    // With runs of an older build (`run-macro.sh --old-bin`, system `sdm-old`), it gets
    // its own columns, so before and after come from one sitting.
    let with_old = data.keys().any(|(_, _, sys)| sys == "sdm-old");
    let mut out = if with_old {
        String::from(
            "| figure | n | sdm before | sdm | baseline | before / baseline | sdm / baseline | sdm / before |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        )
    } else {
        String::from(
            "| figure | n | sdm | baseline | sdm / baseline |\n| --- | --- | --- | --- | --- |\n",
        )
    };
    let mut keys: Vec<(usize, u64)> = data.keys().map(|(i, n, _)| (*i, *n)).collect();
    keys.dedup();
    for (i, n) in keys {
        let get = |sys: &str| data.get(&(i, n, sys.to_owned())).map(|v| cell(v));
        let (old, sdm, base) = (get("sdm-old"), get("sdm"), get("baseline"));
        let ratio = |x: &Option<(f64, String)>| match (x, &base) {
            (Some((a, _)), Some((b, _))) if *b != 0.0 => format!("{:.2}", a / b),
            _ => "–".into(),
        };
        let show = |c: &Option<(f64, String)>| c.as_ref().map_or("–".into(), |c| c.1.clone());
        if with_old {
            let against_old = match (&sdm, &old) {
                (Some((a, _)), Some((b, _))) if *b != 0.0 => format!("{:.2}", a / b),
                _ => "–".into(),
            };
            out.push_str(&format!(
                "| {} | {n} | {} | {} | {} | {} | {} | {against_old} |\n",
                FIGURES[i].2,
                show(&old),
                show(&sdm),
                show(&base),
                ratio(&old),
                ratio(&sdm)
            ));
        } else {
            out.push_str(&format!(
                "| {} | {n} | {} | {} | {} |\n",
                FIGURES[i].2,
                show(&sdm),
                show(&base),
                ratio(&sdm)
            ));
        }
    }
    out
}
