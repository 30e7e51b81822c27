//! The process table of a job whose launcher keeps no MPIR table but runs a PMIx server
//! (Open MPI 5's `mpirun`, which is PRRTE's `prterun`), read through the PMIx tool
//! interface as PRRTE's debugger examples read it: sdm connects to the launcher as a PMIx
//! tool (`PMIx_tool_init` with `PMIX_SERVER_PIDINFO`), asks it for its namespaces and the
//! job's `PMIX_QUERY_PROC_TABLE` (host, executable, pid of every rank, on every host).
//! Launch mode ([`launch_held`]) starts the launcher with `--stop-in-init`, so its ranks
//! wait in `PMIx_Init` (inside `MPI_Init`) until the tool sends `PMIX_DEBUGGER_RELEASE`.
//!
//! The PMIx library is the launcher's own, loaded at run time (see `ffi.rs` for why), from
//! the launcher's memory map (`SDM_LIBPMIX` names another). The tool side is behind the
//! cargo feature `pmix` (on by default; it needs no library to build): without it, a PMIx
//! launcher is recognised and the error says that the feature is missing.

use std::path::PathBuf;

#[cfg(feature = "pmix")]
mod ffi;
#[cfg(feature = "pmix")]
mod held;
#[cfg(feature = "pmix")]
mod table;
#[cfg(feature = "pmix")]
mod tool;

#[cfg(feature = "pmix")]
pub use held::{PmixHeldJob, launch_held};
#[cfg(feature = "pmix")]
pub use table::read_proctable;

/// Why a PMIx launcher's table could not be read, or its job held or released.
#[derive(Debug, thiserror::Error)]
pub enum PmixError {
    /// This sdm was built without the `pmix` feature.
    #[error(
        "{launcher} is a PMIx launcher (Open MPI 5's mpirun, PRRTE's prterun), and this sdm \
         was built without PMIx support: rebuild it with the cargo feature `pmix` (cargo \
         build -p sdm --features pmix)"
    )]
    NotBuilt {
        /// The launcher: its pid and library, or its program.
        launcher: String,
    },
    /// The launcher's PMIx library could not be loaded.
    #[error("the PMIx library: {0}")]
    Load(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Another PMIx tool connection is open in this process.
    #[error("a PMIx tool connection is already open in this process")]
    Busy,
    /// `PMIx_tool_init` could not connect to the launcher's server.
    #[error(
        "cannot connect to the PMIx server of process {launcher} (with {library}): \
         PMIx_tool_init: {name} ({status}); is it a PMIx launcher (Open MPI 5's mpirun), \
         of this user?"
    )]
    Connect {
        /// The launcher.
        launcher: u32,
        /// The library used.
        library: PathBuf,
        /// `pmix_status_t`.
        status: i32,
        /// Its name.
        name: String,
    },
    /// A PMIx call failed.
    #[error("launcher {launcher}: {call}: {name} ({status})")]
    Call {
        /// The launcher.
        launcher: u32,
        /// The call.
        call: &'static str,
        /// `pmix_status_t`.
        status: i32,
        /// Its name.
        name: String,
    },
    /// The launcher's server knows no job with processes.
    #[error("launcher {launcher} has no job with processes (its PMIx namespaces: {namespaces})")]
    NoJob {
        /// The launcher.
        launcher: u32,
        /// The namespaces it named.
        namespaces: String,
    },
    /// The job's ranks are not all started (or connected) yet.
    #[error(
        "launcher {launcher}: ranks {missing} of job {nspace} are not running yet; try \
         again once the job runs"
    )]
    NotReady {
        /// The launcher.
        launcher: u32,
        /// The job's namespace.
        nspace: String,
        /// Ranks not running, in range form.
        missing: String,
    },
    /// Ranks of the held job ended before it was released.
    #[error("launcher {launcher}: ranks {ranks} of job {nspace} ended while it was being held")]
    Ended {
        /// The launcher.
        launcher: u32,
        /// The job's namespace.
        nspace: String,
        /// The ranks, in range form.
        ranks: String,
    },
    /// The launcher could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The launcher.
        program: String,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// The launcher ended before its job was held.
    #[error("{program} (pid {pid}) ended before its job was held: {status}")]
    LauncherEnded {
        /// The launcher.
        program: String,
        /// Its pid.
        pid: u32,
        /// How it ended.
        status: std::process::ExitStatus,
    },
    /// The launcher's job was not held within the time allowed.
    #[error("{program} (pid {pid}) did not hold its job within {seconds} s: {why}")]
    Timeout {
        /// The launcher.
        program: String,
        /// Its pid.
        pid: u32,
        /// The time allowed.
        seconds: u64,
        /// What was still missing.
        why: String,
    },
}

/// The PMIx library process `pid` maps (`SDM_LIBPMIX`, when set, instead): `Some` for a
/// process that may run a PMIx server; `None` when it maps none (not a PMIx launcher).
pub fn server_library(pid: u32) -> Option<PathBuf> {
    let maps = crate::unwind::read_maps(nix::unistd::Pid::from_raw(pid as i32));
    let mapped = maps.into_iter().map(|m| m.path).find(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("libpmix.so"))
    })?;
    Some(match std::env::var_os("SDM_LIBPMIX") {
        Some(lib) if !lib.is_empty() => PathBuf::from(lib),
        _ => mapped,
    })
}

/// The launcher's own temporary directory, when it has one (`PMIX_SERVER_TMPDIR` or
/// `TMPDIR` in its environment): where its server's rendezvous files are.
#[cfg(feature = "pmix")]
pub(crate) fn launcher_tmpdir(pid: u32) -> Option<String> {
    let vars = crate::proctree::environ(pid)?;
    ["PMIX_SERVER_TMPDIR", "TMPDIR"]
        .iter()
        .find_map(|want| vars.get(*want).filter(|v| !v.is_empty()).cloned())
}

/// Without the `pmix` feature: a PMIx launcher's table cannot be read; the error says so.
#[cfg(not(feature = "pmix"))]
pub fn read_proctable(
    launcher: u32,
    library: &std::path::Path,
) -> Result<crate::mpir::ProcTable, PmixError> {
    Err(PmixError::NotBuilt {
        launcher: format!("launcher {launcher} (mapping {})", library.display()),
    })
}
