//! `sdm run`: the job's tree (launch mode under a launcher that holds the job, or servers
//! starting their ranks), and the console over a tree, which `sdm attach` (attach.rs) also
//! runs once it has read the job's process table.

use super::*;

/// `sdm run` and `sdm attach`: a tree of `n` servers, each starting `program` or attaching
/// to its rank's pid in `attach`, then the console.
/// `sdm run`: under srun, mpirun or hydra (without `--ranks-per-server`) the job is
/// started by its launcher and held for the tool (launch mode, see held.rs), one server per host
/// attaching to its ranks; a launcher that cannot hold a job is said so and the job runs
/// with one server per rank, each starting its rank; otherwise the servers start the
/// program (or attach to `--attach`).
pub(super) async fn run_job(a: RunArgs) -> anyhow::Result<()> {
    let tree = &a.console.tree;
    if a.attach.is_empty()
        && matches!(
            tree.launcher,
            LauncherKind::Srun | LauncherKind::Mpirun | LauncherKind::Hydra
        )
        && tree.ranks_per_server.is_none()
    {
        let opts = tree.options(a.n)?;
        // The launcher forwards standard input to its tasks only when no console reads it
        // (no script, no terminal), as run_console passes it to the programs then.
        let c = &a.console;
        let input =
            c.commands.is_empty() && c.command_files.is_empty() && !std::io::stdin().is_terminal();
        match crate::held::start(
            tree.launcher,
            &opts.hosts,
            &opts.launcher_args,
            a.n,
            &a.program,
            input,
            &crate::heldtree::Finding {
                reader: super::attach::reader(tree, None)?,
                patience: Duration::from_secs(c.timeout),
            },
        )
        .await?
        {
            Ok(held) => {
                let tasks = crate::held::tasks(&held, a.n)?;
                let step = held.job.slurm_step();
                let opts = crate::hosts::per_host_options(a.n, tree, &tasks, step)?;
                let pids = tasks.iter().map(|&(_, p)| p).collect();
                return run_console(a.n, a.console, Some(opts), pids, Vec::new(), Some(held)).await;
            }
            Err(e) => eprintln!("sdm: {e}; starting one server per rank instead"),
        }
    }
    run_console(a.n, a.console, None, a.attach, a.program, None).await
}

/// How the tree merges the programs' output, as `c` asks: the interior nodes' hold
/// (`--coalesce-ms`, none with `--no-coalesce`) and exact or templated lines.
fn stdio_options(c: &ConsoleArgs, opts: &mut SessionOptions) -> anyhow::Result<()> {
    opts.stdio_window = if c.no_coalesce {
        Duration::ZERO
    } else {
        Duration::from_millis(c.coalesce_ms)
    };
    // A template's ranges under each rank's label would read as that rank's own value.
    anyhow::ensure!(
        !(c.label && c.merge == Some(MergeMode::Template)),
        "--merge template and --label do not go together: --label prints each rank's own \
         line (use --merge exact, its default with --label)"
    );
    opts.stdio_merge = c.merge.unwrap_or_else(|| default_merge(c.json || c.label));
    Ok(())
}

pub(super) async fn run_console(
    n: u32,
    c: ConsoleArgs,
    opts: Option<SessionOptions>,
    attach: Vec<u32>,
    program: Vec<String>,
    held: Option<crate::held::Held>,
) -> anyhow::Result<()> {
    let mut opts = match opts {
        Some(o) => o,
        None => c.tree.program_options(n)?,
    };
    // Command files are read now: a missing one is named before anything starts.
    let script = crate::script::sources(&c.commands, &c.command_files)?;
    // Without a console, the front-end answers Ctrl-C itself from now on (see interrupt.rs):
    // one typed while the tree starts ends the start-up.
    let mut early_interrupts =
        (script.is_empty() && attach.is_empty() && !std::io::stdin().is_terminal())
            .then(crate::interrupt::Interrupts::catch)
            .transpose()?;
    stdio_options(&c, &mut opts)?;
    opts.startup_timeout = Duration::from_secs(c.timeout);
    let stdin_ids = stdin_ranks(c.stdin.as_deref(), n)?;
    c.iof
        .parse::<sdm_server::monitor::IoMode>()
        .map_err(anyhow::Error::msg)?;
    if !attach.is_empty() && attach.len() != n as usize {
        anyhow::bail!(
            "--attach: {} pids for {} ranks (give one per rank)",
            attach.len(),
            n
        );
    }
    let session = launch(&opts, early_interrupts.as_mut()).await?;
    let r = session.report().clone();
    for (ids, why) in &r.failed {
        eprintln!("sdm: {ids} failed to start: {why}");
    }
    let mut console = crate::console::Console::new(session, c.json);
    let lag = if c.no_coalesce {
        Duration::ZERO
    } else {
        Duration::from_millis(c.merge_lag)
    };
    console.set_stdio(c.label, lag);
    console.set_invocation(std::env::args().collect());
    // `sdm status` in another terminal asks this front-end (the socket goes with it).
    let status_socket = serve_status(&mut console);
    // A script stops at a program that could not start (its commands would all fail), or
    // when no rank could be attached to.
    let start_failed = start_or_attach(&mut console, &c, &attach, &program, held.as_ref()).await?;
    // A held job goes on once its ranks are attached (and run to main).
    let launcher = match held {
        Some(h) => Some(
            crate::held::release(&mut console, h, c.stop_at_main, &mut std::io::stdout()).await?,
        ),
        None => None,
    };
    let run = Run {
        script,
        attach: !attach.is_empty(),
        held: launcher.is_some(),
        start_failed,
        stdin_ids,
    };
    let (failed, interrupted) = match drive(&mut console, &c, run, early_interrupts).await? {
        Driven::Done {
            failed,
            interrupted,
        } => (failed || !r.failed.is_empty(), interrupted),
        Driven::BrokenPipe(e) => {
            console.shutdown().await;
            return Err(e);
        }
    };
    // Like srun: the largest exit status of the programs, at least 1 when a program
    // could not start, a server was lost or a command failed.
    let ending = console.shutdown().await;
    // A held job ends with the session, as a job `sdm run` started does.
    if let Some(l) = launcher {
        crate::held::finish(l);
    }
    let code = ending
        .exit_code()
        .max(i32::from(failed))
        .max(interrupted.map_or(0, crate::interrupt::exit_status));
    // `exit` runs no destructors: the socket goes first.
    drop(status_socket);
    std::io::stdout().flush()?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

/// Answers `sdm status` from other terminals on a socket of this run's own (none, said
/// on stderr, if it cannot be made).
fn serve_status(console: &mut crate::console::Console) -> Option<crate::status::Served> {
    match crate::status::serve() {
        Ok((served, queries)) => {
            console.serve_queries(queries);
            tracing::info!("sdm status answers on {}", served.path().display());
            Some(served)
        }
        Err(e) => {
            eprintln!("sdm: no status socket (sdm status will not find this run): {e}");
            None
        }
    }
}

/// The merge mode without `--merge`: templates for a person at a terminal, every value
/// (exact lines) for a file, a pipe, JSON or per-rank labels.
fn default_merge(machine: bool) -> MergeMode {
    if !machine && std::io::stdout().is_terminal() {
        MergeMode::Template
    } else {
        MergeMode::Exact
    }
}

/// The ranks `--stdin` names (all `n` without it): a set with or without its brackets,
/// within the job.
fn stdin_ranks(stdin: Option<&str>, n: u32) -> anyhow::Result<IdSet> {
    Ok(match stdin {
        None => IdSet::all(n),
        Some(s) => {
            let s = if s.starts_with('[') {
                s.to_owned()
            } else {
                format!("[{s}]")
            };
            let ids: IdSet = s.parse().map_err(|e| anyhow::anyhow!("--stdin: {e}"))?;
            let beyond = &ids - &IdSet::all(n);
            anyhow::ensure!(
                beyond.is_empty(),
                "--stdin: no rank {beyond}: ranks are 0 to {} (-n {n})",
                n.saturating_sub(1)
            );
            ids
        }
    })
}

/// Launches the tree; an interrupt during start-up (when the front-end catches them)
/// ends the process, the daemons started so far killed with the dropped start-up.
async fn launch(
    opts: &SessionOptions,
    early_interrupts: Option<&mut crate::interrupt::Interrupts>,
) -> anyhow::Result<Session> {
    let launching = Session::launch(opts, |_| {});
    let launched = match early_interrupts {
        Some(i) => tokio::select! {
            s = launching => Ok(s),
            sig = i.next() => Err(sig),
        },
        None => Ok(launching.await),
    };
    match launched {
        Ok(s) => s.context("launching the tree"),
        Err(sig) => {
            // The start-up was dropped, which killed the daemons it had started.
            eprintln!("sdm: {sig} during start-up: nothing was started");
            std::process::exit(crate::interrupt::exit_status(sig));
        }
    }
}

/// Starts the program on every rank, or attaches each rank to its pid in `attach`; says
/// which ranks could not. Returns whether the start failed as a whole (a script is then
/// not run).
async fn start_or_attach(
    console: &mut crate::console::Console,
    c: &ConsoleArgs,
    attach: &[u32],
    program: &[String],
    held: Option<&crate::held::Held>,
) -> anyhow::Result<bool> {
    if attach.is_empty() {
        let exe = std::fs::canonicalize(&program[0])
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| program[0].clone());
        console.set_stop_at_main(c.stop_at_main);
        let started = console.start_program(&exe, &program[1..], &c.iof).await?;
        for l in started.iter().filter(|l| !l.started()) {
            eprintln!(
                "sdm: {} could not start {exe}: {}",
                l.ids,
                l.shown(crate::words::reply)
            );
        }
        Ok(started.iter().any(|l| !l.started()))
    } else {
        // srun's held tasks wait before their first instruction: run to main as attached.
        let to_main = held.is_some_and(crate::held::Held::at_start);
        let attached = console.attach_with(attach, to_main).await?;
        // Like STAT, a job with ranks that vanished is still inspected through the others.
        for l in attached.iter().filter(|l| !l.started()) {
            eprintln!(
                "sdm: {} could not attach: {}",
                l.ids,
                l.shown(crate::words::reply)
            );
        }
        Ok(attached.iter().all(|l| !l.started()))
    }
}

/// What the console's part of a run works with.
struct Run {
    /// Command sources (`--command`, `--command-file`); none: a terminal or the programs'
    /// input.
    script: Vec<crate::script::Source>,
    /// The ranks were attached to, not started.
    attach: bool,
    /// The job is held by its launcher, which has the programs' input.
    held: bool,
    /// The program could not start (see [`start_or_attach`]).
    start_failed: bool,
    /// Ranks whose program gets the front-end's standard input.
    stdin_ids: IdSet,
}

/// How the console's part of a run ended.
enum Driven {
    /// The programs ended, the script ran, or the user quit; `failed`: something failed.
    Done {
        failed: bool,
        interrupted: Option<nix::sys::signal::Signal>,
    },
    /// Standard output was closed: the run ends with this error once the console is shut
    /// down.
    BrokenPipe(anyhow::Error),
}

/// Runs the console: without a script or terminal, passes standard input to the programs
/// and waits for their end; on a terminal, the line editor; else the script.
async fn drive(
    console: &mut crate::console::Console,
    c: &ConsoleArgs,
    mut run: Run,
    early_interrupts: Option<crate::interrupt::Interrupts>,
) -> anyhow::Result<Driven> {
    let mut failed = false;
    let mut interrupted = None;
    let mut out = std::io::stdout();
    let interactive = std::io::stdin().is_terminal();
    if run.script.is_empty() && !interactive && run.attach && !run.held {
        // Processes attached to take no input from here: it holds commands, as gdb's does.
        run.script.push(crate::script::Source::Stdin);
    }
    if run.script.is_empty() && !interactive {
        // Like srun: standard input goes to the programs (a held job's launcher has its
        // own); wait for them to end.
        let rx = stdin_reader();
        // Like srun, a Ctrl-C (or SIGTERM, SIGHUP) kills the programs and ends the run.
        let mut interrupts = match early_interrupts {
            Some(i) => i,
            None => crate::interrupt::Interrupts::catch()?,
        };
        match console
            .wait_for_exit(
                (!run.held).then_some(rx),
                &run.stdin_ids,
                &mut interrupts,
                &mut out,
            )
            .await
        {
            Ok(None) => {}
            Ok(Some(sig)) => {
                eprintln!("sdm: {sig}: killing the programs (again to exit at once)");
                interrupts.exit_on_next();
                interrupted = Some(sig);
            }
            Err(e) if broken_pipe(&e) => return Ok(Driven::BrokenPipe(e)),
            Err(e) => {
                eprintln!("sdm: {}", crate::cli::error_text(&e));
                failed = true;
            }
        }
    } else if run.script.is_empty() {
        crate::editor::line_editor(console, c.json).await?;
    } else if run.start_failed {
        eprintln!("sdm: the script is not run: a program could not start");
        failed = true;
    } else {
        match crate::script::run(console, &run.script, &mut out).await {
            Ok(o) => failed |= o.failed,
            Err(e) if broken_pipe(&e) => return Ok(Driven::BrokenPipe(e)),
            Err(e) => return Err(e),
        }
    }
    Ok(Driven::Done {
        failed,
        interrupted,
    })
}

/// A thread reading standard input for the programs: chunks, then `None` at its end.
fn stdin_reader() -> tokio::sync::mpsc::Receiver<Option<String>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Option<String>>(64);
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = vec![0u8; 16 << 10];
        let mut stdin = std::io::stdin().lock();
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let chunk = String::from_utf8_lossy(&buf[..n]).into_owned();
                    if tx.blocking_send(Some(chunk)).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = tx.blocking_send(None);
    });
    rx
}
