//! sdm-deploy: launchers that start sdm daemons through what a site already has (local
//! fork/exec, ssh, Open MPI or MPICH `mpirun`, Slurm `srun`), behind one [`Launcher`] trait,
//! and `fork_copies` (feature `copies`), with which one server process started locally
//! becomes many.
//!
//! # Quick start
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use sdm_deploy::{LaunchSpec, Launcher, Local};
//!
//! // Four copies of a program on this machine, each told its rank in SDM_ID.
//! let spec = LaunchSpec {
//!     n: 4,
//!     program: "/bin/sh".into(),
//!     args: vec!["-c".into(), "echo rank $SDM_ID".into()],
//!     env: vec![],
//! };
//! let mut job = Local.launch(&spec)?;
//! let mut lines = Vec::new();
//! while let Some(line) = job.next_line().await {
//!     lines.push(line);
//! }
//! lines.sort();
//! assert_eq!(lines, ["rank 0", "rank 1", "rank 2", "rank 3"]);
//! # Ok(())
//! # }
//! ```
//!
//! `Ssh`, `Mpirun` and `Srun` implement the same [`Launcher`] trait, so a tool starts its
//! daemons through whatever the site has.
//!
//! A launcher starts `n` copies of a program; each copy learns its rank from the
//! launcher's own variable (`SDM_ID` for local and ssh, `OMPI_COMM_WORLD_RANK` / `PMI_RANK`
//! for mpirun, `SLURM_PROCID` for srun). Secrets travel in the environment (or, for ssh, on
//! stdin), never on a command line. Every line the copies print on stdout comes back
//! through [`Launched::next_line`].

pub mod hostlist;
pub mod job;
pub mod maps;

mod hydra;
mod local;
mod mpirun;
mod srun;
mod ssh;

pub use hydra::{HYDRA, Hydra};
pub use local::Local;
pub(crate) use mpirun::mpirun_hosts;
pub use mpirun::{Mpirun, MpirunFlavor, mpirun_flavor, mpirun_program};
pub use srun::Srun;
pub use ssh::{Ssh, shell_quote, ssh_args};

#[cfg(feature = "copies")]
mod copies;

#[cfg(feature = "copies")]
pub use copies::{Copies, fork_copies};

/// Set to N by a launcher that wants N servers from one process (see `fork_copies`, with
/// the `copies` feature).
pub const COPIES_ENV: &str = "SDM_COPIES";

use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// The environment variable naming the Unix socket where a program started by an sdm server
/// writes its own counters (set by the server, `sdm-server`; read by the program's client,
/// `sdm_client::counters::Client` or `sdm_counters.h`). Kept here, below both, as the one
/// name they agree on, like `SDM_ID` for the daemons this crate launches.
pub const COUNTERS_ENV: &str = "SDM_COUNTERS";

/// Why a launcher could not start its copies, or a rank could not be read; the message
/// names the launcher, the program, the host or variable involved.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The launcher's own command (or the program, for `local`) could not be started.
    #[error("{launcher} launcher: cannot start {program}: {source}")]
    Spawn {
        /// `local`, `ssh`, `mpirun`, `srun`.
        launcher: &'static str,
        /// What was being started.
        program: String,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The launch was asked for with something the launcher cannot use.
    #[error("{launcher} launcher: {what}")]
    Invalid {
        /// `ssh`, …
        launcher: &'static str,
        /// What was wrong.
        what: String,
        /// The error underneath (a system call's, a parser's), when one caused it.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A launcher name that is not one of ours.
    #[error("unknown launcher {0:?}: expected local, ssh, mpirun, srun or hydra")]
    UnknownLauncher(String),
    /// No rank variable in this process's environment.
    #[error("{0}")]
    NoRank(String),
    /// A rank variable that is not a number.
    #[error("{var}={value:?} is not a server id")]
    BadRank {
        /// The variable (`SDM_ID`, `SLURM_PROCID`, …).
        var: &'static str,
        /// Its value.
        value: String,
        /// Why it is not a number.
        #[source]
        source: std::num::ParseIntError,
    },
}

impl LaunchError {
    /// Whether the command to start was not found (not installed, not on `PATH`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Spawn { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

impl From<LaunchError> for io::Error {
    fn from(e: LaunchError) -> Self {
        let kind = match &e {
            LaunchError::Spawn { source, .. } => source.kind(),
            _ => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// Number of copies (ranks).
    pub n: u32,
    /// The program (an absolute path for remote launchers).
    pub program: PathBuf,
    /// Its arguments (nothing secret).
    pub args: Vec<String>,
    /// Environment for every copy; secrets belong here.
    pub env: Vec<(String, String)>,
}

/// The running copies, and their stdout lines.
pub struct Launched {
    children: Vec<Child>,
    lines: mpsc::Receiver<String>,
    launcher: &'static str,
}

impl Launched {
    fn new(launcher: &'static str) -> (Self, mpsc::Sender<String>) {
        let (tx, rx) = mpsc::channel(4096);
        (
            Self {
                children: Vec::new(),
                lines: rx,
                launcher,
            },
            tx,
        )
    }

    /// Starts `cmd` with stdout piped into the line stream; `stdin` is written and closed.
    fn spawn(
        &mut self,
        mut cmd: Command,
        stdin: Option<String>,
        tx: &mpsc::Sender<String>,
    ) -> Result<(), LaunchError> {
        cmd.stdout(Stdio::piped())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .kill_on_drop(true);
        let program = cmd.as_std().get_program().to_string_lossy().into_owned();
        let mut child = cmd.spawn().map_err(|source| LaunchError::Spawn {
            launcher: self.launcher,
            program,
            source,
        })?;
        if let (Some(text), Some(mut w)) = (stdin, child.stdin.take()) {
            tokio::spawn(async move {
                let _ = w.write_all(text.as_bytes()).await;
                let _ = w.shutdown().await;
            });
        }
        let out = child.stdout.take().expect("stdout is piped");
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut r = BufReader::new(out).lines();
            while let Ok(Some(l)) = r.next_line().await {
                if tx.send(l).await.is_err() {
                    break;
                }
            }
        });
        self.children.push(child);
        Ok(())
    }

    /// The next stdout line of any copy; `None` once every copy closed its stdout.
    pub async fn next_line(&mut self) -> Option<String> {
        self.lines.recv().await
    }

    /// Process ids of the launcher processes this side started (the copies themselves for
    /// `local`, the `ssh` / `mpirun` / `srun` clients otherwise).
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().filter_map(Child::id).collect()
    }

    /// Waits up to `grace` for every process to exit, then kills the rest.
    pub async fn shutdown(&mut self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        for c in &mut self.children {
            if tokio::time::timeout_at(deadline, c.wait()).await.is_err() {
                let _ = c.kill().await;
            }
        }
    }

    /// Kills every process at once.
    pub async fn kill(&mut self) {
        for c in &mut self.children {
            let _ = c.kill().await;
        }
    }
}

/// Starts copies of a program.
pub trait Launcher: Send + Sync + std::fmt::Debug {
    /// Short name (`local`, `ssh`, `mpirun`, `srun`).
    fn name(&self) -> &str;
    /// Starts `spec.n` copies.
    fn launch(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError>;
    /// The name or address under which the network knows `host`, a host given to this
    /// launcher: `host` itself, for ssh the `HostName` its configuration gives an alias
    /// (`ssh -G`), for srun the node's `NodeAddr`, so the front-end can find the route there.
    fn network_name(&self, host: &str) -> io::Result<String> {
        Ok(host.to_owned())
    }
    /// Where the copies will run when no host was given to the launcher, as far as it can
    /// tell before starting them (srun inside an allocation: the job's nodes); empty when it
    /// cannot.
    fn implied_hosts(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A launcher by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LauncherKind {
    /// [`Local`].
    #[default]
    Local,
    /// [`Ssh`].
    Ssh,
    /// [`Mpirun`].
    Mpirun,
    /// [`Srun`].
    Srun,
    /// [`Hydra`].
    Hydra,
}

impl FromStr for LauncherKind {
    type Err = LaunchError;
    fn from_str(s: &str) -> Result<Self, LaunchError> {
        match s {
            "local" => Ok(Self::Local),
            "ssh" => Ok(Self::Ssh),
            "mpirun" | "mpiexec" => Ok(Self::Mpirun),
            "srun" => Ok(Self::Srun),
            "hydra" | "mpiexec.hydra" => Ok(Self::Hydra),
            _ => Err(LaunchError::UnknownLauncher(s.to_owned())),
        }
    }
}

impl std::fmt::Display for LauncherKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Local => "local",
            Self::Ssh => "ssh",
            Self::Mpirun => "mpirun",
            Self::Srun => "srun",
            Self::Hydra => "hydra",
        })
    }
}

impl LauncherKind {
    /// The launcher; `hosts` is used by ssh, and by mpirun as its `--host` list.
    pub fn build(self, hosts: Vec<String>) -> Box<dyn Launcher> {
        self.build_with(hosts, Vec::new())
    }

    /// The launcher over `hosts` (ssh: one copy per host in turn; mpirun: `--host` with the
    /// copies spread evenly; srun: `--nodelist` in hostlist form; local: must be empty),
    /// with a site's `extra` arguments (ssh options; mpirun or srun arguments such as a
    /// hostfile, a partition, an account, `--overlap`) placed before the program.
    pub fn build_with(self, hosts: Vec<String>, extra: Vec<String>) -> Box<dyn Launcher> {
        match self {
            Self::Local => Box::new(Local),
            Self::Ssh => Box::new(Ssh {
                hosts,
                options: extra,
            }),
            Self::Mpirun => Box::new(Mpirun { extra, hosts }),
            Self::Srun => Box::new(Srun { extra, hosts }),
            Self::Hydra => Box::new(Hydra { extra, hosts }),
        }
    }
}

/// Lifts this process's soft limit of open files to its hard limit: a launcher keeps one
/// stdout pipe per copy it starts, so a front-end launching thousands of servers needs more
/// than the usual soft limit of 1024. Failing to raise it is not an error (the launch then
/// fails later, naming the descriptor it could not open).
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the `rlimit` we pass, which lives
    // across both calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Variables holding the task's rank in the job, each with the variable holding the job's
/// size beside it, in the order a task's rank is read from them (see
/// `sdm_server::proctree::RankVars`): Open MPI, PMIx, PMI (MPICH's hydra), Slurm, Flux, and
/// the `RANK` of torchrun-style launchers.
pub const RANK_VARS: [(&str, &str); 6] = [
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMIX_RANK", "PMIX_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("FLUX_TASK_RANK", "FLUX_JOB_SIZE"),
    ("RANK", "WORLD_SIZE"),
];

/// The rank a launcher gave this process: `SDM_ID`, else the first of [`RANK_VARS`] set.
pub fn rank_from_env() -> Result<u32, LaunchError> {
    rank_from(|v| std::env::var(v).ok())
}

/// The rank in the first rank variable `var` finds.
fn rank_from(var: impl Fn(&str) -> Option<String>) -> Result<u32, LaunchError> {
    let vars = || std::iter::once("SDM_ID").chain(RANK_VARS.iter().map(|&(r, _)| r));
    for v in vars() {
        if let Some(s) = var(v) {
            return s.trim().parse().map_err(|source| LaunchError::BadRank {
                var: v,
                value: s.clone(),
                source,
            });
        }
    }
    Err(LaunchError::NoRank(format!(
        "no server id in the environment: set one of {}",
        vars().collect::<Vec<_>>().join(", ")
    )))
}

/// The rank among the copies on this host, if the launcher says (used as a port hint).
pub fn local_rank_from_env() -> Option<u32> {
    [
        "SDM_LOCAL_ID",
        "SLURM_LOCALID",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank variable that is not a number keeps the parser's error as the source; the
    /// message names the variable and its value.
    #[test]
    fn a_bad_rank_keeps_the_parse_error() {
        let e = rank_from(|v| (v == "SLURM_PROCID").then(|| "x1".to_owned())).unwrap_err();
        assert_eq!(e.to_string(), r#"SLURM_PROCID="x1" is not a server id"#);
        let source = std::error::Error::source(&e);
        assert!(
            source.is_some_and(|s| s.is::<std::num::ParseIntError>()),
            "{e:?}"
        );
        assert!(matches!(rank_from(|_| None), Err(LaunchError::NoRank(_))));
        assert_eq!(
            rank_from(|v| (v == "PMI_RANK").then(|| " 7".into())).unwrap(),
            7
        );
    }

    /// A server's rank is read as a task's is: `SDM_ID`, then [`RANK_VARS`] in order.
    #[test]
    fn a_rank_is_read_in_the_rank_variables_order() {
        let env = |set: &'static [(&'static str, &'static str)]| {
            move |v: &str| {
                set.iter()
                    .find(|(k, _)| *k == v)
                    .map(|(_, x)| x.to_string())
            }
        };
        let both = env(&[("SLURM_PROCID", "0"), ("OMPI_COMM_WORLD_RANK", "3")]);
        assert_eq!(rank_from(both).unwrap(), 3);
        assert_eq!(rank_from(env(&[("PMIX_RANK", "4")])).unwrap(), 4);
        assert_eq!(
            rank_from(env(&[("RANK", "5"), ("SDM_ID", "6")])).unwrap(),
            6
        );
    }

    #[test]
    fn names_parse() {
        for n in ["local", "ssh", "mpirun", "srun", "hydra"] {
            assert_eq!(n.parse::<LauncherKind>().unwrap().to_string(), n);
        }
        assert!(matches!(
            "pbs".parse::<LauncherKind>(),
            Err(LaunchError::UnknownLauncher(n)) if n == "pbs"
        ));
    }

    #[test]
    fn launch_errors_have_kinds() {
        let spec = LaunchSpec {
            n: 1,
            program: "/nonexistent/program".into(),
            args: vec![],
            env: vec![],
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = rt.block_on(async { Local.launch(&spec).err().unwrap() });
        assert!(e.is_not_found(), "{e}");
        assert!(
            matches!(&e, LaunchError::Spawn { launcher: "local", program, .. } if program == "/nonexistent/program")
        );
        let e = Ssh {
            hosts: vec![],
            options: vec![],
        }
        .launch(&spec)
        .err()
        .unwrap();
        assert!(
            matches!(
                e,
                LaunchError::Invalid {
                    launcher: "ssh",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::InvalidInput);
    }
}
