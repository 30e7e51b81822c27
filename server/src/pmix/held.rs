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
use crate::hold::Streams;
use crate::mpir::ProcTable;

/// How long the launcher gets to start its server and all of its ranks (a hang guard:
/// ranks across hosts start through ssh).
const PATIENCE: Duration = Duration::from_secs(300);

/// A job held in `PMIx_Init` by its launcher; released by [`PmixHeldJob::release`] or
/// when dropped.
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
    /// returns the launcher's process to wait for.
    pub fn release(mut self) -> Result<Child, PmixError> {
        self.let_go()?;
        Ok(self.child.take().expect("the launcher until released"))
    }

    fn let_go(&mut self) -> Result<(), PmixError> {
        match self.tool.take() {
            Some(tool) => tool.release(&self.nspace),
            None => Ok(()),
        }
    }
}

impl Drop for PmixHeldJob {
    fn drop(&mut self) {
        let _ = self.let_go();
    }
}

/// Starts `argv` (`mpirun --stop-in-init -n N prog`), with `env` added, its streams as
/// `streams` says, and returns once its `n` ranks wait in `PMIx_Init`. The launcher is
/// killed when it cannot be held.
pub fn launch_held(
    argv: &[String],
    env: &[(String, String)],
    streams: Streams,
    n: u32,
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
    match hold(&mut child, &program, n) {
        Ok((tool, nspace, table)) => Ok(PmixHeldJob {
            table,
            nspace,
            tool: Some(tool),
            child: Some(child),
        }),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// Connects to the started launcher and waits for its `n` ranks to be held.
fn hold(child: &mut Child, program: &str, n: u32) -> Result<(Tool, String, ProcTable), PmixError> {
    let pid = child.id();
    let deadline = Instant::now() + PATIENCE;
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
                seconds: PATIENCE.as_secs(),
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
