//! Launch mode under a PMIx launcher (Open MPI 5's `mpirun --stop-in-init`): the launcher
//! is started (untraced), sdm connects to its PMIx server as a tool once the server's
//! rendezvous file is there, and waits until every rank has connected to its server: the
//! ranks then wait in `PMIx_Init` (inside `MPI_Init`) for `PMIX_DEBUGGER_RELEASE`, which
//! [`PmixHeldJob::release`] sends once the tool's servers have attached.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::PmixError;
use super::table::job_table;
use super::tool::Tool;
use crate::hold::{END_GRACE, Streams, end_launcher};
use crate::mpir::ProcTable;

/// A job held in `PMIx_Init` by its launcher; released by [`PmixHeldJob::release`].
/// Dropped before that (or when the release fails), its launcher is ended, and with it
/// the job: ranks let go unattached would run untraced, or wait in `PMIx_Init` for good.
#[derive(Debug)]
pub struct PmixHeldJob {
    table: ProcTable,
    nspace: String,
    tool: Option<Tool>,
    child: Option<Child>,
}

impl PmixHeldJob {
    /// The job's tasks (rank, host, executable, pid) from the launcher's PMIx server.
    pub fn table(&self) -> &ProcTable {
        &self.table
    }

    /// The job's PMIx namespace.
    pub fn nspace(&self) -> &str {
        &self.nspace
    }

    /// Sends the debugger release to the job's ranks and closes the tool connection;
    /// returns the launcher's process to wait for. When the release fails, the launcher
    /// is ended (see [`PmixHeldJob`]).
    pub fn release(mut self) -> Result<Child, PmixError> {
        if let Some(tool) = self.tool.take() {
            tool.release(&self.nspace)?;
        }
        Ok(self.child.take().expect("the launcher until released"))
    }
}

impl Drop for PmixHeldJob {
    fn drop(&mut self) {
        // The tool connection closes first: the launcher's server is going.
        drop(self.tool.take());
        if let Some(mut child) = self.child.take() {
            // Bounded by END_GRACE: this may run on an async runtime's thread.
            end_launcher(&mut child, END_GRACE);
        }
    }
}

/// Starts `argv` (`mpirun --stop-in-init -n N prog`), with `env` added, its streams as
/// `streams` says, and returns once its `n` ranks wait in `PMIx_Init`; `patience` is how
/// long they may take (a hang guard: ranks across hosts start through ssh). The launcher
/// is ended (SIGTERM, then SIGKILL) when it cannot be held: killed outright, Open MPI 5's
/// prterun would leave its ranks running.
pub fn launch_held(
    argv: &[String],
    env: &[(String, String)],
    streams: Streams,
    n: u32,
    patience: Duration,
) -> Result<PmixHeldJob, PmixError> {
    let program = argv.first().cloned().unwrap_or_default();
    let mut cmd = Command::new(&program);
    cmd.args(argv.iter().skip(1)).envs(env.iter().cloned());
    if streams.capture {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    if let Some(fd) = streams.stderr {
        cmd.stderr(fd);
    }
    if streams.no_input {
        cmd.stdin(Stdio::null());
    }
    let mut child = cmd.spawn().map_err(|source| PmixError::Spawn {
        program: program.clone(),
        source,
    })?;
    match hold(&mut child, &program, n, patience) {
        Ok((tool, nspace, table)) => Ok(PmixHeldJob {
            table,
            nspace,
            tool: Some(tool),
            child: Some(child),
        }),
        Err(e) => {
            end_launcher(&mut child, END_GRACE);
            Err(e)
        }
    }
}

/// Connects to the started launcher and waits for its `n` ranks to be held.
fn hold(
    child: &mut Child,
    program: &str,
    n: u32,
    patience: Duration,
) -> Result<(Tool, String, ProcTable), PmixError> {
    let pid = child.id();
    let deadline = Instant::now() + patience;
    let mut waiting_for = String::from("its PMIx library");
    let mut tool = None;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(PmixError::LauncherEnded {
                program: program.to_owned(),
                pid,
                status,
            });
        }
        if Instant::now() > deadline {
            return Err(PmixError::Timeout {
                program: program.to_owned(),
                pid,
                seconds: patience.as_secs(),
                why: format!("still waiting for {waiting_for}"),
            });
        }
        match &tool {
            None => {
                if let Some(lib) = super::server_library(pid) {
                    let tmpdir = super::launcher_tmpdir(pid);
                    waiting_for = "its PMIx server".into();
                    if rendezvous(pid, tmpdir.as_deref()).is_some() {
                        tool = Some(Tool::connect(pid, &lib, tmpdir.as_deref())?);
                        continue;
                    }
                }
            }
            Some(t) => match job_table(t, pid, Some(n), true) {
                Ok((nspace, table)) => {
                    return Ok((tool.take().expect("connected"), nspace, table));
                }
                Err(PmixError::NotReady { missing, .. }) => {
                    waiting_for = format!("ranks {missing} to reach PMIx_Init");
                }
                Err(e) => return Err(e),
            },
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The rendezvous file a PMIx server writes for tools (`pmix.HOST.tool.PID`), where
/// PMIx's tool library looks for it: the temporary directory, or a directory in it named
/// for the launcher (Open MPI 5's `ompi.PID`). A tool connecting before the file is there
/// fails, and PMIx does not allow it to try again.
fn rendezvous(pid: u32, tmpdir: Option<&str>) -> Option<PathBuf> {
    let base = PathBuf::from(
        tmpdir
            .map(str::to_owned)
            .or_else(|| std::env::var("TMPDIR").ok().filter(|d| !d.is_empty()))
            .unwrap_or_else(|| "/tmp".into()),
    );
    let name = format!("pmix.{}.tool.{pid}", crate::monitor::hostname());
    let suffix = format!(".{pid}");
    let mut dirs = vec![base.clone()];
    if let Ok(entries) = std::fs::read_dir(&base) {
        dirs.extend(
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(&suffix))
                .map(|e| e.path()),
        );
    }
    dirs.into_iter().map(|d| d.join(&name)).find(|f| f.exists())
}
