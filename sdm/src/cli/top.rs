//! `sdm top`: starts the program on every rank, then samples the ranks every period, the
//! samples reduced in the tree and shown as a live table (or JSON lines); with `--tree`,
//! the tree's own figures per link instead ([`crate::links`]).

use super::*;

pub(super) async fn run_top(a: TopArgs) -> anyhow::Result<()> {
    let most = MAX_WAIT_MS as f64 / 1000.0;
    anyhow::ensure!(
        a.period > 0.0 && a.period <= most,
        "--period {}: seconds from 0 (excluded) to {most}",
        a.period
    );
    let flame = crate::flame::FlameFiles {
        svg: a.flame.clone(),
        folded: a.folded.clone(),
    };
    let cpu = cpu_args(&flame)?;
    let session = Session::launch(&a.tree.program_options(a.n)?, |_| {})
        .await
        .context("launching the tree")?;
    for (ids, why) in &session.report().failed {
        eprintln!("sdm: {ids} failed to start: {why}");
    }
    let mut console = crate::console::Console::new(session, a.json);
    let program = std::fs::canonicalize(&a.program[0])
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| a.program[0].clone());
    // The programs' own output would scroll the table away: it goes to the launcher.
    for l in &console
        .start_program(&program, &a.program[1..], "runtime")
        .await?
    {
        if !l.started() {
            eprintln!("sdm: {} could not start {program}: {}", l.ids, l.text);
        }
    }
    let period = Duration::from_secs_f64(a.period);
    // Ctrl-C (SIGTERM, SIGHUP) ends the sampling; the programs are killed and the tree ends.
    let mut interrupts = crate::interrupt::Interrupts::catch()?;
    let tty = !a.json && std::io::stdout().is_terminal();
    let t0 = tokio::time::Instant::now();
    let mut n = 0u64;
    let all = console.session().all();
    let mut stacks = crate::stacks::Stacks::default();
    let wait = period.max(Duration::from_secs(2));
    loop {
        n += 1;
        let ended = if a.links {
            tree_wave(console.session(), wait, n, t0, a.json, tty).await?
        } else {
            metrics_wave(console.session(), &all, wait, (n, a.n), t0, a.json, tty).await?
        };
        if flame.wanted() && !ended {
            let mut err = std::io::stderr();
            console
                .sample_cpu_stacks(&all, &mut stacks, &cpu, &mut err)
                .await?;
        }
        std::io::stdout().flush()?;
        if ended || a.count.is_some_and(|c| n >= c) {
            break;
        }
        let until = t0 + period.mul_f64(n as f64);
        let mut sink = std::io::sink();
        let pump = async {
            while tokio::time::Instant::now() < until {
                console.pump(until, &mut sink).await?;
            }
            anyhow::Ok(())
        };
        tokio::select! {
            r = pump => r?,
            _ = interrupts.next() => break,
        }
    }
    console
        .session()
        .request_command(sdm_client::service::omis(
            &all,
            SyncMode::Timeout(10_000),
            "0 [] kill()",
        ))
        .await?;
    let _ = console.shutdown().await;
    if flame.wanted() {
        let title = format!("sdm top, CPU samples every {} s", a.period);
        let written = crate::flame::write_all(&stacks.traces, &flame, &title)?;
        let mut err = std::io::stderr();
        crate::flame::print_written(&written, &stacks.traces, false, &mut err)?;
    }
    Ok(())
}

/// What `top --flame`'s samples keep: only the threads running on a CPU, every thread,
/// classes by function (a busy loop sampled at many lines is one class). The files are
/// created at once, so a path that cannot be written is refused before the job starts.
fn cpu_args(files: &crate::flame::FlameFiles) -> anyhow::Result<crate::stacks::BtArgs> {
    for path in files.svg.iter().chain(&files.folded) {
        std::fs::File::create(path)
            .with_context(|| format!("--flame/--folded: cannot write {}", path.display()))?;
    }
    let mut a = crate::stacks::BtArgs::parse("--functions")?;
    a.on_cpu = true;
    a.flame = files.clone();
    Ok(a)
}

/// One wave of `sdm top`: the programs' metrics merged in the tree, as a table (refreshed
/// in place on a terminal) or one JSON line. Whether the programs have all ended (no
/// metrics, only missing ranks). `wave` is the wave's number and the job's size.
async fn metrics_wave(
    session: &Session,
    all: &IdSet,
    wait: Duration,
    (n, ranks): (u64, u32),
    t0: tokio::time::Instant,
    json: bool,
    tty: bool,
) -> anyhow::Result<bool> {
    let s = sdm_client::top::sample(session, all, wait).await?;
    let t = t0.elapsed().as_secs_f64();
    let mut out = std::io::stdout();
    if json {
        writeln!(out, "{}", crate::top::json(&s, t))?;
    } else {
        if tty {
            write!(out, "\x1b[H\x1b[2J")?;
        }
        writeln!(out, "sdm top: {ranks} ranks, sample {n} at {t:.1} s")?;
        write!(out, "{}", crate::top::table(&s))?;
    }
    Ok(s.stats.is_empty() && !s.missing.is_empty())
}

/// One wave of `sdm top --tree`: every link's figures, the worst first, as a table
/// (refreshed in place on a terminal) or one JSON line `{"t", "wave", "links": [...],
/// "wave_us", "wave_bytes"}` (the telemetry wave's own round trip and bytes). Whether the
/// tree has ended (no server answered).
async fn tree_wave(
    session: &Session,
    wait: Duration,
    n: u64,
    t0: tokio::time::Instant,
    json: bool,
    tty: bool,
) -> anyhow::Result<bool> {
    let wave = sdm_client::telemetry::gather(session, wait).await?;
    let (links, us) = (&wave.links, wave.elapsed.as_micros() as u64);
    let t = t0.elapsed().as_secs_f64();
    let mut out = std::io::stdout();
    if json {
        let rows: Vec<serde_json::Value> = links.iter().map(crate::links::json).collect();
        let line = serde_json::json!({"t": t, "wave": n, "links": rows,
            "wave_us": us, "wave_bytes": wave.bytes});
        writeln!(out, "{line}")?;
    } else {
        if tty {
            write!(out, "\x1b[H\x1b[2J")?;
        }
        let ms = us as f64 / 1000.0;
        writeln!(
            out,
            "sdm top --tree: {} links, wave {n} at {t:.1} s ({ms:.2} ms, {} bytes), the worst first",
            links.len(),
            wave.bytes
        )?;
        let table = crate::links::table(links, crate::links::Order::Worst);
        write!(out, "{table}")?;
    }
    Ok(links.iter().all(|l| l.answer.is_err()))
}
