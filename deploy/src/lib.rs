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

#[cfg(feature = "copies")]
mod copies;
#[cfg(feature = "copies")]
mod hugetext;

#[cfg(feature = "copies")]
pub use copies::{Copies, fork_copies};

/// Set to N by a launcher that wants N servers from one process (see `fork_copies`, with
/// the `copies` feature).
pub const COPIES_ENV: &str = "SDM_COPIES";

/// `SDM_HUGE_TEXT=0` keeps a server's code on the file's pages instead of moving it onto
/// transparent huge pages before `fork_copies` (with the `copies` feature).
pub const HUGE_TEXT_ENV: &str = "SDM_HUGE_TEXT";

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
    },
    /// A launcher name that is not one of ours.
    #[error("unknown launcher {0:?}: expected local, ssh, mpirun or srun")]
    UnknownLauncher(String),
    /// No rank variable in this process's environment, or one that is not a number.
    #[error("{0}")]
    NoRank(String),
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

/// Fork/exec on this machine; rank in `SDM_ID`.
#[derive(Debug, Default)]
pub struct Local;

impl Local {
    /// Starts one copy with no rank variable (the master).
    pub fn launch_one(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        let (mut l, tx) = Launched::new("local");
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args).envs(spec.env.iter().cloned());
        own_session(&mut cmd);
        l.spawn(cmd, None, &tx)?;
        Ok(l)
    }
}

/// Starts the daemon `cmd` in a session of its own, as srun's daemons run on other
/// machines: a Ctrl-C or Ctrl-Z typed at the front-end's terminal reaches the front-end
/// alone, which decides what the programs and the tree do, instead of every daemon dying
/// or stopping at once. The daemons still end with the front-end: they exit when their
/// link to it is lost.
fn own_session(cmd: &mut Command) {
    // SAFETY: setsid is async-signal-safe and touches nothing of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl Launcher for Local {
    fn name(&self) -> &str {
        "local"
    }
    fn launch(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        let (mut l, tx) = Launched::new("local");
        for id in 0..spec.n {
            let mut cmd = Command::new(&spec.program);
            cmd.args(&spec.args)
                .envs(spec.env.iter().cloned())
                .env("SDM_ID", id.to_string())
                .env("SDM_LOCAL_ID", id.to_string());
            own_session(&mut cmd);
            l.spawn(cmd, None, &tx)?;
        }
        Ok(l)
    }
}

/// One `ssh` per copy, round-robin over `hosts`; the environment (secrets included) is
/// sent on stdin and read by the remote shell, so it never appears on a command line.
#[derive(Debug)]
pub struct Ssh {
    /// Hosts (ssh destinations, e.g. aliases from ~/.ssh/config).
    pub hosts: Vec<String>,
    /// Extra ssh options.
    pub options: Vec<String>,
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Launcher for Ssh {
    fn name(&self) -> &str {
        "ssh"
    }
    fn launch(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        if self.hosts.is_empty() {
            return Err(LaunchError::Invalid {
                launcher: "ssh",
                what: "no hosts given (--hosts)".into(),
            });
        }
        let (mut l, tx) = Launched::new("ssh");
        for (name, v) in &spec.env {
            if v.contains('\n') {
                return Err(LaunchError::Invalid {
                    launcher: "ssh",
                    what: format!("environment value of {name} spans lines; encode it on one line"),
                });
            }
        }
        for id in 0..spec.n {
            let host = &self.hosts[id as usize % self.hosts.len()];
            let mut script = String::new();
            let mut stdin = String::new();
            for (name, v) in &spec.env {
                script.push_str(&format!("IFS= read -r {name}; export {name}; "));
                stdin.push_str(v);
                stdin.push('\n');
            }
            let argv: Vec<String> = std::iter::once(spec.program.display().to_string())
                .chain(spec.args.iter().cloned())
                .map(|a| shell_quote(&a))
                .collect();
            // A program missing on that host is named with the host, on the line stream
            // the front-end reads (`SDM-ERROR ID HOST: what`), instead of a bare 127.
            let prog = shell_quote(&spec.program.display().to_string());
            script.push_str(&format!(
                "[ -x {prog} ] || {{ echo \"SDM-ERROR {id} $(hostname): {} is not an \
                 executable there\"; exit 127; }}; SDM_ID={id} exec {}",
                spec.program
                    .display()
                    .to_string()
                    .replace(['"', '$', '`', '\\'], "?"),
                argv.join(" ")
            ));
            let mut cmd = Command::new("ssh");
            cmd.args(["-o", "BatchMode=yes"])
                .args(&self.options)
                .arg(host)
                .arg(script);
            l.spawn(cmd, Some(stdin), &tx)?;
        }
        Ok(l)
    }

    fn network_name(&self, host: &str) -> io::Result<String> {
        ssh_network_name(&self.options, host)
    }
}

/// The `HostName` ssh's configuration gives `host` (`ssh -G OPTIONS HOST`; `host` itself
/// when it names no alias).
fn ssh_network_name(options: &[String], host: &str) -> io::Result<String> {
    let out = std::process::Command::new("ssh")
        .arg("-G")
        .args(options)
        .arg(host)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run ssh -G {host}: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ssh -G {host}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(ssh_config_hostname(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|| host.to_owned()))
}

/// The `hostname` line of `ssh -G` output.
fn ssh_config_hostname(config: &str) -> Option<String> {
    config.lines().find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key.eq_ignore_ascii_case("hostname") && !value.trim().is_empty())
            .then(|| value.trim().to_owned())
    })
}

/// `mpirun` of Open MPI or MPICH (detected from `mpirun --version`).
#[derive(Debug, Default)]
pub struct Mpirun {
    /// Extra arguments before the program (e.g. a hostfile).
    pub extra: Vec<String>,
    /// Hosts to spread the copies over (`--host`); empty: mpirun's default placement.
    pub hosts: Vec<String>,
}

/// `--host` for mpirun: every distinct host with an equal share of `n` slots (rounded up).
pub(crate) fn mpirun_hosts(hosts: &[String], n: u32) -> String {
    let mut distinct: Vec<&str> = Vec::new();
    for h in hosts {
        if !distinct.contains(&h.as_str()) {
            distinct.push(h);
        }
    }
    let slots = n.div_ceil(distinct.len().max(1) as u32).max(1);
    distinct
        .iter()
        .map(|h| format!("{h}:{slots}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `mpirun` is Open MPI's (else MPICH's hydra), from `mpirun --version`.
pub(crate) fn mpirun_is_open_mpi() -> Result<bool, LaunchError> {
    let version = std::process::Command::new("mpirun")
        .arg("--version")
        .output()
        .map_err(|source| LaunchError::Spawn {
            launcher: "mpirun",
            program: "mpirun --version (install openmpi-bin)".into(),
            source,
        })?;
    let text = String::from_utf8_lossy(&version.stdout).to_string()
        + &String::from_utf8_lossy(&version.stderr);
    Ok(text.contains("Open MPI") || text.contains("OpenRTE"))
}

impl Launcher for Mpirun {
    fn name(&self) -> &str {
        "mpirun"
    }
    fn launch(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        let open_mpi = mpirun_is_open_mpi()?;
        let names: Vec<&str> = spec.env.iter().map(|(k, _)| k.as_str()).collect();
        let mut cmd = Command::new("mpirun");
        // Open MPI 4.1 loses a child's exit when many ranks end at once and mpirun hangs;
        // launching from the main thread avoids it (see deploy/README.md).
        cmd.envs(spec.env.iter().cloned())
            .env("OMPI_MCA_odls_base_max_threads", "0");
        if open_mpi {
            // Names only: the values come from our environment.
            cmd.args([
                "--allow-run-as-root",
                "--oversubscribe",
                "-n",
                &spec.n.to_string(),
            ]);
            for n in &names {
                cmd.args(["-x", n]);
            }
            if !self.hosts.is_empty() {
                cmd.args(["--host", &mpirun_hosts(&self.hosts, spec.n)]);
            }
        } else {
            cmd.args(["-n", &spec.n.to_string()]);
            if !names.is_empty() {
                cmd.args(["-genvlist", &names.join(",")]);
            }
            if !self.hosts.is_empty() {
                cmd.args(["-hosts", &mpirun_hosts(&self.hosts, spec.n)]);
            }
        }
        cmd.args(&self.extra).arg(&spec.program).args(&spec.args);
        let (mut l, tx) = Launched::new("mpirun");
        l.spawn(cmd, None, &tx)?;
        Ok(l)
    }

    /// mpirun starts its daemons on other hosts through ssh (Open MPI's rsh launcher,
    /// MPICH's hydra): a host is what ssh's configuration makes of it.
    fn network_name(&self, host: &str) -> io::Result<String> {
        ssh_network_name(&[], host).or_else(|_| Ok(host.to_owned()))
    }
}

/// Slurm's `srun`: one job step of `n` tasks; the environment is inherited.
#[derive(Debug, Default)]
pub struct Srun {
    /// Extra arguments (partition, nodes…).
    pub extra: Vec<String>,
    /// Nodes for the step (`--nodelist`, in hostlist form); empty: Slurm's choice.
    pub hosts: Vec<String>,
}

impl Launcher for Srun {
    fn name(&self) -> &str {
        "srun"
    }
    fn launch(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        let mut cmd = Command::new("srun");
        cmd.envs(spec.env.iter().cloned()).args([
            "-n",
            &spec.n.to_string(),
            "--export=ALL",
            "--kill-on-bad-exit=0",
        ]);
        if !self.hosts.is_empty() {
            cmd.arg(format!("--nodelist={}", hostlist::compress(&self.hosts)));
        }
        cmd.args(&self.extra).arg(&spec.program).args(&spec.args);
        let (mut l, tx) = Launched::new("srun");
        l.spawn(cmd, None, &tx)?;
        Ok(l)
    }

    /// Inside an allocation (`salloc`, a batch script) the step runs on the job's nodes,
    /// `SLURM_JOB_NODELIST`.
    fn implied_hosts(&self) -> Vec<String> {
        std::env::var("SLURM_JOB_NODELIST")
            .ok()
            .and_then(|list| hostlist::expand(&list).ok())
            .unwrap_or_default()
    }

    /// A Slurm node is known to the network by its `NodeAddr` (`scontrol show node`), which
    /// DNS may not know; `host` itself when Slurm does not know it either.
    fn network_name(&self, host: &str) -> io::Result<String> {
        let out = std::process::Command::new("scontrol")
            .args(["--oneliner", "show", "node", host])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        let addr = out
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| slurm_node_addr(&String::from_utf8_lossy(&o.stdout)).map(str::to_owned));
        Ok(addr.unwrap_or_else(|| host.to_owned()))
    }
}

/// The `NodeAddr` in `scontrol --oneliner show node`'s line for one node.
fn slurm_node_addr(line: &str) -> Option<&str> {
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("NodeAddr="))
        .filter(|addr| !addr.is_empty() && *addr != "(null)")
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
}

impl FromStr for LauncherKind {
    type Err = LaunchError;
    fn from_str(s: &str) -> Result<Self, LaunchError> {
        match s {
            "local" => Ok(Self::Local),
            "ssh" => Ok(Self::Ssh),
            "mpirun" | "mpiexec" => Ok(Self::Mpirun),
            "srun" => Ok(Self::Srun),
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

/// The rank a launcher gave this process: `SDM_ID`, else `SLURM_PROCID`,
/// `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `FLUX_TASK_RANK`.
pub fn rank_from_env() -> Result<u32, LaunchError> {
    const VARS: [&str; 5] = [
        "SDM_ID",
        "SLURM_PROCID",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "FLUX_TASK_RANK",
    ];
    for v in VARS {
        if let Ok(s) = std::env::var(v) {
            return s
                .trim()
                .parse()
                .map_err(|_| LaunchError::NoRank(format!("{v}={s:?} is not a server id")));
        }
    }
    Err(LaunchError::NoRank(format!(
        "no server id in the environment: set one of {}",
        VARS.join(", ")
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

    #[test]
    fn slurm_node_addresses() {
        let line = "NodeName=n01 Arch=x86_64 CoresPerSocket=4 NodeAddr=10.1.2.3 \
                    NodeHostName=n01 Version=22.05.8";
        assert_eq!(slurm_node_addr(line), Some("10.1.2.3"));
        assert_eq!(slurm_node_addr("NodeName=n01 NodeHostName=n01"), None);
        assert_eq!(slurm_node_addr("NodeName=n01 NodeAddr=(null)"), None);
        assert_eq!(slurm_node_addr("Node n01 not found"), None);
    }

    #[test]
    fn names_parse() {
        for n in ["local", "ssh", "mpirun", "srun"] {
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

    #[test]
    fn ssh_config_names_the_host_an_alias_stands_for() {
        let g = "user root\nhostname 10.200.7.11\nport 22\n";
        assert_eq!(ssh_config_hostname(g).as_deref(), Some("10.200.7.11"));
        assert_eq!(ssh_config_hostname("port 22\n"), None);
    }

    #[test]
    fn quoting_survives_spaces_and_quotes() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[tokio::test]
    async fn local_launches_and_collects_lines() {
        let spec = LaunchSpec {
            n: 3,
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "echo rank=$SDM_ID secret=$S".into()],
            env: vec![("S".into(), "x".into())],
        };
        let mut l = Local.launch(&spec).unwrap();
        let mut got = Vec::new();
        while let Some(line) = l.next_line().await {
            got.push(line);
        }
        got.sort();
        assert_eq!(
            got,
            ["rank=0 secret=x", "rank=1 secret=x", "rank=2 secret=x"]
        );
        l.shutdown(Duration::from_secs(5)).await;
    }
}
