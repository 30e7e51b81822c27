//! The `sdm` command's definitions and its [`main`]: `sdm launch` (start a tree, report,
//! optionally send requests), `sdm run`, `sdm top`, `sdm status`, `sdm topology` (print a
//! tree shape), and the daemons `sdm master` and `sdm server` (from `sdm-server`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use nix::sys::signal::SigHandler;
use sdm_client::ReplyGroup;
use sdm_client::session::{Progress, Session, SessionOptions};
use sdm_deploy::LauncherKind;
use sdm_overlay::setup::SessionKey;
use sdm_overlay::template::MergeMode;
use sdm_overlay::transport::{Address, PortRange};
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::{Shape, Topology};

mod attach;
mod job;
mod launch;
mod top;
pub(crate) use attach::{is_this_host, local_executable};

/// The longest wait an option may ask for (a day, in milliseconds): longer ones are typing
/// mistakes, and a bound keeps deadlines from overflowing the clock.
const MAX_WAIT_MS: u64 = 86_400_000;

#[derive(Parser, Debug)]
#[command(
    name = "sdm",
    version,
    about = "sdm: a tree-based overlay network for parallel tools"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start a master and N servers, report who is ready, optionally send requests, shut down.
    Launch(LaunchArgs),
    /// Start PROGRAM under control on N servers, then run console commands (-c) or an
    /// interactive console. Without a terminal, -c or -x, standard input goes to the
    /// programs, and Ctrl-C kills them, ends the tree and exits 130 (a second: at once).
    Run(RunArgs),
    /// Attach to a running parallel job (a hung MPI job, say): read its process table from
    /// its launcher (MPIR, as STAT and LaunchMON do), start one server per rank next to its
    /// task, attach each to its rank's process, then run console commands (-c) or an
    /// interactive console. `detach` or quitting leaves every task running and untraced.
    Attach(AttachArgs),
    /// Start PROGRAM on N servers and show job-wide process metrics (min / mean / max and
    /// the ranks at the extremes) every period, merged in the tree.
    Top(TopArgs),
    /// The health of a running tree per subtree (full, degraded, partial, lost), asked of
    /// the `sdm run` front-end that holds it. Exit status 0: every subtree full; 2: some
    /// subtree is not; 1: no answer.
    Status {
        /// The front-end's process id (default: the only `sdm run` of this user).
        pid: Option<u32>,
        /// One JSON object per subtree (and, with -v, per link).
        #[arg(long)]
        json: bool,
        /// Every link of the tree too (parent -> child): keepalive round-trip time, frames
        /// and bytes each way, output queued and credit in use, the filters' time and the
        /// re-attachments of the child.
        #[arg(short, long)]
        verbose: bool,
    },
    /// Print a tree shape.
    Topology {
        /// Number of servers (a topology file fixes its own).
        #[arg(short, long)]
        n: Option<u32>,
        /// binomial, kary:K, knomial:K, flat, or file:PATH (a topology file: `PARENT:
        /// CHILD...` lines, or MRNet's `host:0 => host:1 ... ;`).
        #[arg(long, default_value = "binomial")]
        shape: Shape,
        /// Graphviz DOT instead of one line per node.
        #[arg(long)]
        dot: bool,
    },
    /// Daemon: the root of the tree; connects to the front-end.
    Master {
        /// The front-end's address, e.g. tcp://HOST:PORT.
        #[arg(long)]
        frontend: Address,
        /// Connection attempts before giving up.
        #[arg(long, default_value_t = 50)]
        attempts: u32,
        /// Ports to listen on for re-attaching orphans (default: an ephemeral port).
        #[arg(long, value_name = "FIRST-LAST")]
        port_range: Option<PortRange>,
    },
    // Its description is ServerArgs's, so `sdm server` parsed alone reads the same.
    Server(ServerArgs),
    /// A task of a job `sdm run --launcher hydra` starts: PROGRAM held stopped before its
    /// first instruction until a server attaches to it.
    #[command(hide = true)]
    HoldTask {
        /// The program and its arguments.
        #[arg(last = true, required = true)]
        program: Vec<String>,
    },
    /// Helper of `sdm attach` on another host (run there over ssh): print the tasks found
    /// below a launcher, a command's process, or given pids, one JSON object a line.
    #[command(hide = true)]
    Tasks {
        /// The launcher whose descendants are the tasks.
        #[arg(long, conflicts_with_all = ["command", "pid"])]
        tree: Option<u32>,
        /// The command line (words joined by spaces) of the process whose descendants are
        /// the tasks.
        #[arg(long, conflicts_with = "pid")]
        command: Option<String>,
        /// Processes that are tasks (repeatable).
        #[arg(long)]
        pid: Vec<u32>,
        /// The rank variable (see `sdm attach --rank-env`).
        #[arg(long, value_name = "NAME")]
        rank_env: Option<String>,
    },
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: crate::manual::Shell,
    },
    /// Print the man page (roff), or write one page per command into DIR.
    Man {
        /// Write sdm.1, sdm-launch.1, ... into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

// `sdm server`'s options: a type of its own so a server, started a thousand times at once,
// parses only them (see `parse`).
/// Daemon: one server; its id comes from SDM_ID, else the first rank variable set
/// (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID, FLUX_TASK_RANK, RANK).
#[derive(clap::Args, Debug)]
struct ServerArgs {
    /// First port of the server's range: it tries the --port-span ports from here,
    /// starting at PORT + its local rank and wrapping around (0: an ephemeral port).
    #[arg(long)]
    port: u16,
    /// tcp or quic.
    #[arg(long, default_value = "tcp")]
    transport: String,
    /// Address to bind (default: this host's address on the route to --frontend-host,
    /// else 127.0.0.1); 0.0.0.0 or :: for all interfaces.
    #[arg(long, visible_alias = "bind")]
    host: Option<String>,
    /// Address or host name to advertise to the parent (default: the bound address, or
    /// for all interfaces this host's address on the route to --frontend-host).
    #[arg(long)]
    advertise: Option<String>,
    /// The front-end's host: the defaults of --host and --advertise follow the route
    /// there, and advertising a loopback address while it is on another host is an error.
    #[arg(long)]
    frontend_host: Option<String>,
    /// How many ports to try.
    #[arg(long, default_value_t = 2048)]
    port_span: u16,
    /// Seconds to wait for a parent before exiting.
    #[arg(long, default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_MS / 1000))]
    parent_timeout: u64,
}

/// How to start a tree: the options `launch` and `run` share.
#[derive(clap::Args, Debug)]
pub(crate) struct TreeArgs {
    /// local, ssh, mpirun, srun or hydra (MPICH's mpiexec.hydra); `SDM_MPIRUN=PATH` runs
    /// another mpirun than PATH's, e.g. Open MPI 5's.
    #[arg(long, default_value = "local")]
    launcher: LauncherKind,
    /// Hosts, in Slurm's hostlist form (`node[01-04,07],login1`; repeatable): ssh starts
    /// one server per host in turn, mpirun spreads them evenly (`--host`), srun runs the
    /// step on those nodes (`--nodelist`).
    #[arg(long, value_name = "HOSTLIST")]
    hosts: Vec<String>,
    /// Arguments for the launcher itself, before the program, split at spaces: ssh options
    /// (`-p 2222 -i KEY`), or mpirun/srun arguments (`--hostfile FILE`, `-p PARTITION
    /// -A ACCOUNT`, `--overlap`).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    launcher_args: Option<String>,
    /// The `sdm` binary on the servers' hosts (default: this one's path); a host where it
    /// is missing is named.
    #[arg(long, value_name = "PATH")]
    remote_sdm: Option<PathBuf>,
    /// Address the front-end listens on (default: this host's address on the route to the
    /// first of --hosts with a remote launcher, for srun without --hosts the first of the
    /// allocation's nodes, else 127.0.0.1); IPv6 in brackets or bare.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Address every server binds (default: its host's address on the route to the
    /// front-end); 0.0.0.0 or :: for all interfaces.
    #[arg(long, value_name = "ADDR")]
    bind: Option<String>,
    /// Address or host name every server advertises to its parent (default: the bound
    /// address, or for all interfaces its address on the route to the front-end).
    #[arg(long, value_name = "ADDR")]
    advertise: Option<String>,
    /// tcp or quic.
    #[arg(long, default_value = "tcp")]
    transport: String,
    /// Ports every listener of the tree takes (the front-end's, the master's, each
    /// server's), for a firewall that opens only these: FIRST-LAST, e.g. 40000-40999
    /// (default: servers the 2048 ports from a random start, all in 10000 up to the
    /// ephemeral range, 10000-32767 on a default Linux; the front-end and the master
    /// ephemeral ports).
    #[arg(long, value_name = "FIRST-LAST")]
    port_range: Option<PortRange>,
    /// binomial, kary:K, knomial:K, flat, or file:PATH: an explicit tree, one `PARENT:
    /// CHILD...` line per interior node (`master: 0 8`, `0: 1-7`), or MRNet's topology
    /// file (`fe:0 => h1:0 h2:0 ;`), whose host names place the servers (with ssh).
    #[arg(long, default_value = "binomial")]
    topology: Shape,
    /// Ranks each server serves, in blocks (default: one server per host, serving every
    /// rank on it, as STAT's and TotalView's daemons do; K splits a large host; 1 is one
    /// server per rank).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) ranks_per_server: Option<u32>,
    /// A filter plugin (a shared library implementing sdm_filter.h) the front-end and every
    /// daemon load, so requests can name its filter (repeatable). The path must hold the
    /// same library on every host.
    #[arg(long = "filter-plugin", value_name = "PATH")]
    filter_plugins: Vec<PathBuf>,
    /// A service plugin (a shared library implementing sdm_service.h) every server loads,
    /// so requests tagged with its service reach it (repeatable). The path must hold the
    /// same library on every host; one that does not load here is an error naming it and
    /// why, before any server starts.
    #[arg(long = "service-plugin", value_name = "PATH")]
    service_plugins: Vec<PathBuf>,
}

impl TreeArgs {
    /// `--launcher-args` split at spaces.
    pub(crate) fn launcher_args(&self) -> Vec<String> {
        self.launcher_args
            .as_deref()
            .map(|a| a.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    pub(crate) fn options(&self, n: u32) -> anyhow::Result<SessionOptions> {
        let mut hosts = sdm_deploy::hostlist::expand_all(&self.hosts).context("--hosts")?;
        // A plugin named here that does not load is fatal, as a --filter-plugin's is.
        for p in &self.service_plugins {
            sdm_server::plugin::check(p).context("--service-plugin")?;
        }
        tree_size(&self.topology, Some(n))?;
        if let Some(placed) = self.topology_hosts()? {
            if !hosts.is_empty() {
                anyhow::bail!(
                    "--hosts {} and a topology file that places servers on hosts ({}): give one",
                    sdm_deploy::hostlist::compress(&hosts),
                    sdm_deploy::hostlist::compress(placed)
                );
            }
            // The ssh launcher starts server i on hosts[i].
            hosts = placed.to_vec();
        }
        if self.launcher == LauncherKind::Local && !hosts.is_empty() {
            anyhow::bail!(
                "--hosts {} needs a launcher that reaches them: --launcher ssh, mpirun or srun",
                sdm_deploy::hostlist::compress(&hosts)
            );
        }
        // A topology file fixes the servers: one rank each, as it numbers them.
        let ranks_per_server = match &self.topology {
            Shape::Explicit(_) => Some(1),
            _ => self.ranks_per_server,
        };
        Ok(SessionOptions {
            n,
            ranks_per_server,
            launcher: self.launcher,
            hosts,
            launcher_args: self.launcher_args(),
            remote_program: self.remote_sdm.clone(),
            listen: self.listen.clone(),
            bind: self.bind.clone(),
            advertise: self.advertise.clone(),
            transport: self.transport.clone(),
            topology: self.topology.clone(),
            port_range: self.port_range,
            filter_plugins: self.filter_plugins.clone(),
            service_plugins: self.service_plugins.clone(),
            ..SessionOptions::default()
        })
    }
}

impl TreeArgs {
    /// [`TreeArgs::options`] for a tree whose servers start the program: under srun or
    /// mpirun a program gets its MPI wiring from the launcher's task that runs its server,
    /// so each rank has a server of its own unless `--ranks-per-server` says otherwise.
    fn program_options(&self, n: u32) -> anyhow::Result<SessionOptions> {
        let mut opts = self.options(n)?;
        if matches!(
            opts.launcher,
            LauncherKind::Srun | LauncherKind::Mpirun | LauncherKind::Hydra
        ) {
            opts.ranks_per_server.get_or_insert(1);
        }
        Ok(opts)
    }

    /// The hosts a topology file in MRNet's form places the servers on: only the ssh
    /// launcher can honour them (mpirun and srun place ranks themselves).
    fn topology_hosts(&self) -> anyhow::Result<Option<&[String]>> {
        let Shape::Explicit(tree) = &self.topology else {
            return Ok(None);
        };
        let Some(placed) = tree.hosts() else {
            return Ok(None);
        };
        if self.launcher != LauncherKind::Ssh {
            anyhow::bail!(
                "the topology file places servers on hosts ({}), which only --launcher ssh \
                 can do; with {} give the tree in sdm's form (`PARENT: CHILD...` lines)",
                sdm_deploy::hostlist::compress(placed),
                self.launcher
            );
        }
        Ok(Some(placed))
    }
}

/// The number of servers: `-n`, which must match a topology file's tree if one is given.
fn tree_size(shape: &Shape, n: Option<u32>) -> anyhow::Result<u32> {
    match (shape.servers(), n) {
        (Some(m), Some(n)) if m != n => {
            anyhow::bail!("the topology file's tree has {m} servers, not {n} (-n)")
        }
        (Some(m), _) => Ok(m),
        (None, Some(n)) => Ok(n),
        (None, None) => anyhow::bail!("-n is required unless --shape is a topology file"),
    }
}

/// The console options `run` and `attach` share.
#[derive(clap::Args, Debug)]
struct ConsoleArgs {
    #[command(flatten)]
    tree: TreeArgs,
    /// A console command to run (repeatable, in order); without any (and without -x), the
    /// console is interactive on a terminal.
    #[arg(short = 'c', long = "command")]
    commands: Vec<String>,
    /// A command file to run after the -c commands (repeatable, in order): one console
    /// command a line, blank lines and `#` comments skipped; an error names FILE:LINE. `-`
    /// reads commands from standard input until its end, as `sdm attach` (and `sdm run
    /// --attach`) do without a terminal; `sdm run` without a terminal otherwise passes its
    /// standard input to the programs, as srun does.
    #[arg(short = 'x', long = "command-file", value_name = "FILE")]
    command_files: Vec<PathBuf>,
    /// Machine-readable output (JSON lines).
    #[arg(long)]
    json: bool,
    /// Print every output line once per rank, as `[3] text`.
    #[arg(long)]
    label: bool,
    /// Do not merge identical output lines of different ranks.
    #[arg(long)]
    no_coalesce: bool,
    /// How the k-th output lines of different ranks merge: `exact` (only identical lines,
    /// every value shown) or `template` (lines differing only in their numbers merge into
    /// one, `[0-1023] step 5 took {0.91..1.37} s (mean 1.02, max at [77])`, outliers on
    /// lines of their own). Default: `template` when standard output is a terminal (a
    /// person reads it), `exact` when it is a file or a pipe, or with --json or --label (a
    /// script wants every value). `template` with --label is an error.
    #[arg(long, value_name = "MODE", value_parser = clap::value_parser!(MergeMode))]
    merge: Option<MergeMode>,
    /// How long interior nodes hold an output line to merge it with identical lines of
    /// other ranks, in milliseconds.
    #[arg(long, default_value_t = 20, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(0..=MAX_WAIT_MS))]
    coalesce_ms: u64,
    /// How long the console holds a rank's k-th output line for the ranks that have not
    /// printed their k-th line yet, in milliseconds: identical k-th lines of all ranks
    /// print once whatever the load; past this lag the late ranks' lines print on their own.
    #[arg(long, default_value_t = 5000, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(0..=MAX_WAIT_MS))]
    merge_lag: u64,
    /// Stdio of the programs: pty (default), pipes (stdout and stderr apart), or runtime
    /// (left to the launcher).
    #[arg(long, default_value = "pty")]
    iof: String,
    /// Which ranks get standard input (default: all).
    #[arg(long)]
    stdin: Option<String>,
    /// Start every program stopped at `main` (`sdm run`; `cont` runs them).
    #[arg(long)]
    stop_at_main: bool,
    /// Start-up deadline of the servers in seconds (the launch, the tree's connections,
    /// its init): a loaded host's servers may need more.
    #[arg(long, default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_MS / 1000))]
    timeout: u64,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Number of ranks (program processes).
    #[arg(short, long)]
    n: u32,
    #[command(flatten)]
    console: ConsoleArgs,
    /// Attach to these running processes (one pid per rank, comma-separated) instead of
    /// starting a program; they are detached, not killed, at the end.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "PIDS",
        conflicts_with = "program"
    )]
    attach: Vec<u32>,
    /// The program and its arguments.
    #[arg(last = true, required_unless_present = "attach")]
    program: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct AttachArgs {
    /// The job's launcher process: Open MPI's `mpirun`, Slurm's `srun`, or an `mpiexec`
    /// that keeps an MPIR process table, which names every rank's host and pid; or any
    /// other launcher (MPICH's hydra, a shell loop, torchrun): its descendants, and what it
    /// starts on other hosts over ssh, ranked by their environments (see --pids).
    #[arg(
        value_name = "LAUNCHER_PID",
        required_unless_present = "pids",
        conflicts_with = "pids"
    )]
    launcher_pid: Option<u32>,
    /// The tasks of a job whose launcher is gone: HOST:PID,... (a bare PID is on this
    /// host), ranked by the rank variable in their environments when every one has one
    /// (the first set of OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID,
    /// FLUX_TASK_RANK, RANK; or --rank-env), else in the order given.
    #[arg(long, value_delimiter = ',', value_name = "HOST:PID")]
    pids: Vec<String>,
    /// With --pids: each is a launcher (a shell loop, torchrun, a node's agent) whose
    /// descendants on its host are the tasks, ranked by their environments.
    #[arg(long, requires = "pids")]
    tree: bool,
    /// The environment variable holding each task's rank, for a launcher whose tasks carry
    /// none of the usual ones (or carry one inherited by all): only it is read.
    #[arg(long, value_name = "NAME")]
    rank_env: Option<String>,
    /// Print the process table and exit, attaching to nothing.
    #[arg(long)]
    table: bool,
    /// Attach, take the ranks' stacks, write the hang report (one HTML page: the classes
    /// and their source lines, the call tree, every rank's host, pid and state) to FILE,
    /// detach and exit: STAT's one-shot use, the console's `bt --html FILE` then `detach`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["table", "commands", "command_files"])]
    report: Option<PathBuf>,
    #[command(flatten)]
    console: ConsoleArgs,
}

#[derive(clap::Args, Debug)]
struct TopArgs {
    /// Number of ranks (program processes).
    #[arg(short, long)]
    n: u32,
    #[command(flatten)]
    tree: TreeArgs,
    /// Seconds between samples.
    #[arg(long, default_value_t = 1.0)]
    period: f64,
    /// Stop after this many samples (default: until the programs end or ^C).
    #[arg(long)]
    count: Option<u64>,
    /// JSON lines instead of a table refreshed in place.
    #[arg(long)]
    json: bool,
    /// Also sample stacks every period (stop, walk, continue, as `bt` does) and, when top
    /// ends, write a CPU flame graph (SVG) here: the threads that were running or runnable
    /// (state R) when stopped, one count per thread per sample; the whole job here, each
    /// class beside it as NAME.class-N.svg.
    #[arg(long, value_name = "FILE.svg")]
    flame: Option<PathBuf>,
    /// The same CPU samples as folded stacks (`main;f;g COUNT` lines, as flamegraph.pl and
    /// speedscope read them), each class beside it as NAME.class-N.EXT; with or without
    /// --flame.
    #[arg(long, value_name = "FILE")]
    folded: Option<PathBuf>,
    /// The tree's own figures per link instead of the programs' metrics (round-trip time,
    /// frames and bytes, queue and credit, filter time, re-attachments), the worst first.
    #[arg(long = "tree")]
    links: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    program: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct LaunchArgs {
    /// Number of ranks (the ids the tree's servers serve).
    #[arg(short, long)]
    n: u32,
    #[command(flatten)]
    tree: TreeArgs,
    /// Start-up deadline in seconds.
    #[arg(long, default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_MS / 1000))]
    timeout: u64,
    /// Send this request to every server after start-up and print the merged replies (repeatable).
    #[arg(long)]
    send: Vec<String>,
    /// The filter merging the replies of --send (default: identical replies merged), e.g.
    /// `sum`, `stats`, or a filter of a --filter-plugin.
    #[arg(long, value_name = "FILTER")]
    filter: Option<String>,
    /// The service that answers --send: sdm (ping, info, value, sleep MS), omis (OMIS
    /// requests such as `1 [] node_info()`), counters, procstat, or the service of a
    /// --service-plugin.
    #[arg(long, value_name = "NAME", default_value = "sdm")]
    service: String,
    /// Keep the tree up until Ctrl-C.
    #[arg(long)]
    hold: bool,
    /// Machine-readable output (JSON lines).
    #[arg(long)]
    json: bool,
}

/// Runs the `sdm` command with the process's arguments; the exit code of the process.
pub fn main() -> std::process::ExitCode {
    match real_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // A reader that went away (`sdm man | head`): end quietly, as a shell tool
        // killed by SIGPIPE would (128 + 13).
        Err(e) if broken_pipe(&e) => std::process::ExitCode::from(141),
        Err(e) => {
            eprintln!("sdm: {}", error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Whether `e` is a write to a reader that went away (EPIPE): the end of a run whose
/// output was piped into `head`, not an error to report.
/// `e` with its causes, each once (anyhow's `{:#}` repeats a cause its message names).
pub(crate) fn error_text(e: &anyhow::Error) -> String {
    sdm_server::error::chain(e.as_ref())
}

pub(crate) fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The command line `args` (the program's name first). `sdm server ...` builds only the
/// server's options: a launcher may start a thousand at once, and building the whole
/// command tree is a large part of a server's start. Help and errors read as from the
/// full parser.
fn parse(args: Vec<std::ffi::OsString>) -> Cli {
    if args.get(1).is_some_and(|a| a == "server") {
        let server = server_command()
            .try_get_matches_from(&args[1..])
            .and_then(|m| <ServerArgs as clap::FromArgMatches>::from_arg_matches(&m));
        match server {
            Ok(a) => Cli {
                cmd: Cmd::Server(a),
            },
            Err(e) => e.exit(),
        }
    } else {
        Cli::parse_from(args)
    }
}

/// Sets SIGPIPE's disposition (only the default or ignored: no handler runs).
fn set_sigpipe(how: SigHandler) {
    // SAFETY: no handler function is installed, and this runs before any other thread.
    let _ = unsafe { nix::sys::signal::signal(nix::sys::signal::Signal::SIGPIPE, how) };
}

/// The command line of `sdm server` alone.
fn server_command() -> clap::Command {
    <ServerArgs as clap::Args>::augment_args(clap::Command::new("server").bin_name("sdm server"))
}

fn real_main() -> anyhow::Result<()> {
    sdm_server::logging::init("warn");
    // Help, the version, completions, man pages and tree shapes only print: a reader that
    // goes (`| head`) ends them by SIGPIPE, quietly, as any printing tool. Every other
    // command has sockets and children, where a closed peer is an error (EPIPE) to handle,
    // not a signal that kills the front-end: SIGPIPE stays ignored (Rust's default) there.
    set_sigpipe(SigHandler::SigDfl);
    let cli = parse(std::env::args_os().collect());
    // A held task forks too, before any thread; it runs with SIGPIPE at its default, as it
    // would without sdm (an ignored disposition survives exec).
    if let Cmd::HoldTask { program } = &cli.cmd {
        std::process::exit(crate::holdtask::run(program)?);
    }
    if !matches!(
        cli.cmd,
        Cmd::Topology { .. } | Cmd::Completions { .. } | Cmd::Man { .. }
    ) {
        set_sigpipe(SigHandler::SigIgn);
    }
    // Local servers asked for as copies of this process are forked here, before any thread.
    if let Cmd::Server(_) = cli.cmd
        && let sdm_deploy::Copies::Done { copies, failed } = sdm_deploy::fork_copies()?
    {
        anyhow::ensure!(failed == 0, "{failed} of {copies} local servers failed");
        return Ok(());
    }
    // Daemons run everything on one thread: a frame never crosses threads on its way
    // through a node, which makes round trips shorter than on a worker pool.
    let rt = match &cli.cmd {
        Cmd::Master { .. } | Cmd::Server(_) | Cmd::Topology { .. } | Cmd::Tasks { .. } => {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
        }
        _ => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?,
    };
    rt.block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Launch(a) => launch::launch(a).await,
        Cmd::Run(a) => job::run_job(a).await,
        Cmd::Attach(a) => attach::attach_job(a).await,
        Cmd::Tasks {
            tree,
            command,
            pid,
            rank_env,
        } => attach::print_tasks(tree, command, pid, rank_env.as_deref()),
        // Run by `real_main` before the runtime starts.
        Cmd::HoldTask { .. } => anyhow::bail!("hold-task runs before any thread"),
        Cmd::Top(a) => top::run_top(a).await,
        Cmd::Status { pid, json, verbose } => {
            let (healthy, text) = crate::status::status(pid, json, verbose).await?;
            write!(std::io::stdout(), "{text}")?;
            if !healthy {
                std::io::stdout().flush()?;
                std::process::exit(2);
            }
            Ok(())
        }
        Cmd::Topology { n, shape, dot } => {
            let t = shape.build(tree_size(&shape, n)?);
            if dot {
                print!("{}", sdm_topology::to_dot(&*t));
            } else {
                print_tree(&*t);
            }
            Ok(())
        }
        Cmd::Master {
            frontend,
            attempts,
            port_range,
        } => {
            let key = SessionKey::from_env()?;
            Ok(sdm_server::daemon::run_master(frontend, key, attempts, port_range).await?)
        }
        Cmd::Server(ServerArgs {
            port,
            transport,
            host,
            advertise,
            frontend_host,
            port_span,
            parent_timeout,
        }) => {
            let id = sdm_deploy::rank_from_env().map_err(anyhow::Error::msg)?;
            let key = SessionKey::from_env()?;
            let opt = sdm_server::daemon::ServerOptions {
                scheme: transport,
                bind_host: host,
                advertise,
                frontend_host,
                base_port: port,
                port_span,
                parent_timeout: Duration::from_secs(parent_timeout),
            };
            let server = sdm_server::Server::builder().build()?;
            Ok(server
                .run(id, sdm_deploy::local_rank_from_env(), key, opt)
                .await?)
        }
        Cmd::Completions { shell } => {
            crate::manual::completions(shell, &mut Cli::command(), &mut std::io::stdout());
            Ok(())
        }
        Cmd::Man { dir: None } => Ok(crate::manual::man_page(
            Cli::command(),
            &mut std::io::stdout(),
        )?),
        Cmd::Man { dir: Some(dir) } => {
            for page in crate::manual::man_pages(Cli::command(), &dir)? {
                println!("{}", page.display());
            }
            Ok(())
        }
    }
}

fn print_tree(t: &dyn Topology) {
    use sdm_topology::NodeId;
    let mut stack = vec![(NodeId::Master, 0usize)];
    while let Some((node, depth)) = stack.pop() {
        println!("{}{} {}", "  ".repeat(depth), node, t.subtree(node));
        for c in t.children(node).into_iter().rev() {
            stack.push((c, depth + 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sdm server` parsed alone reads as from the whole command tree: the same help, the
    /// same options and defaults, the same error for a bad one.
    #[test]
    fn the_server_alone_parses_as_the_whole_command_line_does() {
        let mut full = Cli::command();
        full.build();
        let whole = full.find_subcommand_mut("server").unwrap();
        assert_eq!(
            server_command().render_help().to_string(),
            whole.render_help().to_string()
        );
        let argv =
            |s: &str| -> Vec<std::ffi::OsString> { s.split_whitespace().map(Into::into).collect() };
        for line in [
            "sdm server --port 7000",
            "sdm server --port 0 --transport quic --bind 0.0.0.0 --advertise n1 --frontend-host fe --port-span 3 --parent-timeout 9",
        ] {
            let fast = format!("{:?}", parse(argv(line)));
            let slow = format!("{:?}", Cli::try_parse_from(argv(line)).unwrap());
            assert_eq!(fast, slow, "{line}");
        }
        for line in [
            "sdm server",
            "sdm server --port x",
            "sdm server --port 1 --bogus",
        ] {
            let fast = server_command()
                .try_get_matches_from(&argv(line)[1..])
                .unwrap_err();
            let slow = Cli::try_parse_from(argv(line)).unwrap_err();
            assert_eq!(fast.kind(), slow.kind(), "{line}");
            assert_eq!(fast.to_string(), slow.to_string(), "{line}");
        }
    }
}
