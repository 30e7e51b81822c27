//! Launch mode (`sdm run --launcher srun|mpirun|hydra`): the job is started by its own
//! launcher, so MPI wiring and PMI come from it, and held for the tool as STAT, TotalView
//! and LaunchMON hold it (the launcher traced with `MPIR_being_debugged` set, stopped in
//! `MPIR_Breakpoint`); its process table places one server per host, each attaching to
//! its host's ranks; then the launcher is released. Under srun the tasks wait before their
//! first instruction, so `--stop-at-main` and breakpoints set before the program runs work
//! as they do locally; Open MPI 4 holds its ranks inside `MPI_Init` instead. Open MPI 5's
//! mpirun (PRRTE) has no MPIR: it is started with `--stop-in-init`, its ranks wait in
//! `PMIx_Init` (inside `MPI_Init`), their table comes from its PMIx server, and the PMIx
//! debugger-release event lets them go (see sdm_server::pmix). MPICH's hydra has no MPIR
//! here: its tasks are held by `sdm hold-task` before their first instruction, as srun's
//! are (heldtree.rs).

use std::io::Write;

use anyhow::Context;
use sdm_deploy::LauncherKind;
use sdm_deploy::job::Labels;
use sdm_proto::{IdSet, Kind, Message, Status};
use sdm_server::hold::{HeldJob, HoldError, SlurmStep, Streams, launch_held_with};
use sdm_server::mpir::ProcDesc;
use sdm_server::pmix::PmixError;

use crate::console::Console;

/// How the launcher holds its job.
pub(crate) enum HeldBy {
    /// MPIR: the launcher stopped in `MPIR_Breakpoint` (srun, Open MPI 4).
    Mpir(HeldJob),
    /// PMIx: the ranks wait in `PMIx_Init` for the debugger release (Open MPI 5).
    #[cfg(feature = "pmix")]
    Pmix(sdm_server::pmix::PmixHeldJob),
    /// `sdm hold-task` under each task (hydra); the launcher runs.
    Tree(crate::heldtree::TreeHeld),
}

impl HeldBy {
    /// The job's tasks, from the launcher.
    pub(crate) fn table(&self) -> &[ProcDesc] {
        match self {
            Self::Mpir(j) => &j.table().tasks,
            #[cfg(feature = "pmix")]
            Self::Pmix(j) => &j.table().tasks,
            Self::Tree(t) => &t.table,
        }
    }

    /// The Slurm job step, under srun.
    pub(crate) fn slurm_step(&self) -> Option<&SlurmStep> {
        match self {
            Self::Mpir(j) => j.slurm_step(),
            #[cfg(feature = "pmix")]
            Self::Pmix(_) => None,
            Self::Tree(_) => None,
        }
    }

    /// Lets the job go on; returns the launcher's process.
    fn release(self) -> anyhow::Result<std::process::Child> {
        Ok(match self {
            Self::Mpir(j) => j.release()?,
            #[cfg(feature = "pmix")]
            Self::Pmix(j) => j.release()?,
            Self::Tree(t) => t.release().context("the launcher was released already")?,
        })
    }
}

/// A job its launcher holds, and which launcher that is.
pub(crate) struct Held {
    /// The held job (released once its ranks are attached).
    pub job: HeldBy,
    /// srun or mpirun.
    pub kind: LauncherKind,
    /// How the launcher labels its ranks' output lines.
    pub labels: Labels,
    /// Its ranks' lines on its standard error, read since it started (its own lines are
    /// printed as they come), for the console once it is there.
    stderr: std::sync::mpsc::Receiver<Vec<u8>>,
}

impl Held {
    /// Whether the launcher holds the tasks before their first instruction (srun, and
    /// hydra's tasks under `sdm hold-task`), so they are run to `main` as they are
    /// attached; Open MPI 4 holds them in `MPI_Init`.
    pub(crate) fn at_start(&self) -> bool {
        self.kind == LauncherKind::Srun || matches!(self.job, HeldBy::Tree(_))
    }
}

/// Why a job is not held: the caller says so and falls back to one server per rank.
#[derive(Debug)]
pub(crate) enum NotHeld {
    /// The launcher cannot hold a job (no MPIR interface, or it ended).
    Launcher(HoldError),
    /// A PMIx launcher (Open MPI 5) could not hold it.
    Pmix(PmixError),
    /// Open MPI's mpirun reaches `MPIR_Breakpoint` only once every rank is in `MPI_Init`:
    /// a program that never calls it would run unheld (or, ending, run twice).
    NotMpi {
        /// The program.
        program: String,
    },
}

impl std::fmt::Display for NotHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Launcher(e) => e.fmt(f),
            Self::Pmix(e) => e.fmt(f),
            Self::NotMpi { program } => write!(
                f,
                "Open MPI's mpirun holds a job in MPI_Init, and {program} is not a program \
                 linked with libmpi"
            ),
        }
    }
}

/// Starts `program` as an `n`-rank job of `kind` held in `MPIR_Breakpoint`, its output
/// captured (merged into the console's), its standard input this one's only with `input`
/// (else the console reads it: srun would forward it to its tasks). `Ok(Err(e))` when the
/// job cannot be held (see [`NotHeld`]), before anything ran: the caller falls back.
/// Under hydra the tasks are held by `sdm hold-task` and found as `finding` says.
pub(crate) async fn start(
    kind: LauncherKind,
    hosts: &[String],
    extra: &[String],
    n: u32,
    program: &[String],
    input: bool,
    finding: &crate::heldtree::Finding,
) -> anyhow::Result<Result<Held, NotHeld>> {
    let mut program = program.to_vec();
    // hydra keeps no MPIR table, whether named so or as the mpirun of MPICH.
    let tree = match kind {
        LauncherKind::Hydra => true,
        LauncherKind::Mpirun => sdm_deploy::mpirun_flavor()? == sdm_deploy::MpirunFlavor::Mpich,
        _ => false,
    };
    if tree {
        let sdm = finding.reader.remote_sdm.display().to_string();
        let hold = [sdm, "hold-task".into()];
        program.splice(0..0, hold.into_iter().chain(["--".into()]));
    }
    let job = sdm_deploy::job::job_command(kind, hosts, extra, n, &program)?;
    let (argv, labels) = (job.argv, job.labels);
    let open_mpi = matches!(labels, Labels::OpenMpi | Labels::OpenMpi5);
    if open_mpi && !crate::mpilib::links_mpi(&program[0]) {
        return Ok(Err(NotHeld::NotMpi {
            program: program[0].clone(),
        }));
    }
    tracing::info!("launch mode: {}", argv.join(" "));
    // Open MPI warns on stderr that MPIR is deprecated unless told not to.
    let env = [("OMPI_MPIR_DO_NOT_WARN".to_owned(), "1".to_owned())];
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .context("a pipe for the launcher's stderr")?;
    let stderr = read_stderr(read, labels);
    if tree {
        // It polls /proc and ssh: off the runtime's workers.
        let held = tokio::task::block_in_place(|| {
            crate::heldtree::start(&argv, n, input, write, finding)
        })?;
        return Ok(Ok(Held {
            job: HeldBy::Tree(held),
            kind,
            labels,
            stderr,
        }));
    }
    let streams = Streams {
        capture: true,
        no_input: !input,
        stderr: Some(write),
    };
    let job = if labels == Labels::OpenMpi5 {
        match hold_pmix(argv, env.to_vec(), streams, n, finding.patience).await? {
            Ok(job) => job,
            Err(e) => return Ok(Err(NotHeld::Pmix(e))),
        }
    } else {
        let held = tokio::task::spawn_blocking(move || launch_held_with(&argv, &env, streams))
            .await
            .context("the thread holding the launcher")?;
        match held {
            Ok(job) => HeldBy::Mpir(job),
            Err(e) => return Ok(Err(NotHeld::Launcher(e))),
        }
    };
    Ok(Ok(Held {
        job,
        kind,
        labels,
        stderr,
    }))
}

/// Starts a PMIx launcher's job held in `PMIx_Init` (see sdm_server::pmix).
#[cfg(feature = "pmix")]
async fn hold_pmix(
    argv: Vec<String>,
    env: Vec<(String, String)>,
    streams: Streams,
    n: u32,
    patience: std::time::Duration,
) -> anyhow::Result<Result<HeldBy, PmixError>> {
    let held = tokio::task::spawn_blocking(move || {
        sdm_server::pmix::launch_held(&argv, &env, streams, n, patience)
    })
    .await
    .context("the thread holding the launcher")?;
    Ok(held.map(HeldBy::Pmix))
}

/// Without the `pmix` feature, an Open MPI 5 job cannot be held: said before it starts.
#[cfg(not(feature = "pmix"))]
async fn hold_pmix(
    argv: Vec<String>,
    _env: Vec<(String, String)>,
    _streams: Streams,
    _n: u32,
    _patience: std::time::Duration,
) -> anyhow::Result<Result<HeldBy, PmixError>> {
    Ok(Err(PmixError::NotBuilt {
        launcher: argv.first().cloned().unwrap_or_default(),
    }))
}

/// Reads the launcher's standard error from its start, on a thread of its own: its own
/// lines (srun saying it waits for its allocation) print at once; its ranks' labelled lines
/// are kept for the console (see [`release`]). The pipe ends with the launcher.
fn read_stderr(from: std::os::fd::OwnedFd, labels: Labels) -> std::sync::mpsc::Receiver<Vec<u8>> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(std::fs::File::from(from)).split(b'\n') {
            let Ok(line) = line else { break };
            let text = String::from_utf8_lossy(&line);
            let text = text.strip_suffix('\r').unwrap_or(&text);
            if labels.parse(text).is_none() {
                eprintln!("{text}");
            } else if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The held job's tasks as (host, pid), in rank order; an error names a rank missing from
/// the launcher's table.
pub(crate) fn tasks(held: &Held, n: u32) -> anyhow::Result<Vec<(String, u32)>> {
    let mut tasks: Vec<Option<(String, u32)>> = vec![None; n as usize];
    for d in held.job.table() {
        if let Some(slot) = tasks.get_mut(d.rank as usize) {
            *slot = Some((d.host.clone(), d.pid));
        }
    }
    tasks
        .into_iter()
        .enumerate()
        .map(|(r, t)| t.with_context(|| format!("rank {r} is not in the launcher's process table")))
        .collect()
}

/// Once the servers have attached (srun's tasks, held before their first instruction, run
/// to `main` as they were): the launcher is released, and the tasks go on unless
/// `--stop-at-main`. Returns the
/// launcher, to wait for or end with the session.
pub(crate) async fn release(
    console: &mut Console,
    held: Held,
    stop_at_main: bool,
    out: &mut dyn Write,
) -> anyhow::Result<std::process::Child> {
    let at_start = held.at_start();
    let (kind, labels, stderr) = (held.kind, held.labels, held.stderr);
    let mut child = tokio::task::spawn_blocking(move || held.job.release())
        .await
        .context("the thread releasing the launcher")??;
    // The ranks' lines, labelled by the launcher, join the tree's output to be merged.
    let counts = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let handle = console.session().handle();
    if let Some(o) = child.stdout.take() {
        let lines =
            std::io::BufRead::split(std::io::BufReader::new(o), b'\n').map_while(Result::ok);
        forward(lines, STDOUT, labels, handle.clone(), counts.clone());
    }
    forward(stderr.into_iter(), STDERR, labels, handle, counts);
    match (at_start, stop_at_main) {
        // Quietly: the ranks simply run, as a program started without --stop-at-main does.
        (true, false) => {
            console.command("cont", &mut std::io::sink()).await?;
        }
        (false, true) => {
            eprintln!(
                "sdm: {kind} holds its ranks inside MPI_Init, after main began: they are stopped there"
            );
            console.command("stop", out).await?;
        }
        _ => {}
    }
    Ok(child)
}

/// Ends a released launcher with the session: one still running (its job outlived the
/// console) gets SIGTERM, as srun ends its step; then it is waited for. The job's status
/// is its ranks' (the console saw each end, and ranks it killed do not count), not the
/// launcher's, which reports those kills too.
pub(crate) fn finish(mut child: std::process::Child) {
    if matches!(child.try_wait(), Ok(None)) {
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    }
    match child.wait() {
        Ok(s) => tracing::info!("the job's launcher ended: {s}"),
        Err(e) => eprintln!("sdm: waiting for the job's launcher: {e}"),
    }
}

/// Stream tags of stdio payloads.
const STDOUT: u8 = 1;
const STDERR: u8 = 2;

/// Lines each (rank, stream) has had so far: the index of its next line.
type LineCounts = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<(u32, u8), u64>>>;

/// Forwards the launcher's `stream` lines on a thread of its own: each labelled line goes
/// to the console as that rank's next line (numbered per rank and stream, as servers number
/// theirs, so the console aligns and merges them); the launcher's own lines go to stderr.
fn forward(
    from: impl Iterator<Item = Vec<u8>> + Send + 'static,
    stream: u8,
    labels: Labels,
    to: sdm_client::link::Handle,
    counts: LineCounts,
) {
    std::thread::spawn(move || {
        for line in from {
            let text = String::from_utf8_lossy(&line);
            let text = text.strip_suffix('\r').unwrap_or(&text);
            let Some((rank, tagged, body)) = labels.parse(text) else {
                eprintln!("{text}");
                continue;
            };
            let stream = tagged.unwrap_or(stream);
            let index = {
                let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
                let n = c.entry((rank, stream)).or_insert(0);
                *n += 1;
                *n - 1
            };
            let mut payload = vec![stream];
            payload.extend_from_slice(body.as_bytes());
            let mut m = Message::reply(index, IdSet::single(rank), Status::Replied, payload.into());
            m.kind = Kind::Stdio;
            m.aggregate.status = None;
            to.inject_output(m);
        }
    });
}
