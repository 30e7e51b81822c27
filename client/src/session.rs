//! [`Session`]: the front-end library. Launch a tree (master plus N servers through a
//! launcher) or attach to a master, send payloads to id-sets with a sync mode and filter,
//! receive merged reply groups and unsolicited events, shut down.
//!
//! Start-up: the front-end listens, launches the servers (each prints `SDM-LISTEN ID ADDR`
//! through the launcher), launches the master, accepts it, and sends the init command with
//! the routing table. The merged acknowledgements say which ids are ready and which failed
//! and why, within the start-up deadline.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::frontend::Frontend;
use sdm_deploy::{Launched, LauncherKind};
use sdm_overlay::filters::Registry;
use sdm_overlay::setup::SessionKey;
use sdm_overlay::transport::PortRange;
use sdm_proto::{IdSet, Message, Status, SyncMode};
use sdm_topology::{Placement, Shape, Tree};

use sdm_overlay::setup::{INIT_SERVICE, InitSpec, Table};

use crate::error::{Error, Result};
use crate::link::Handle;

mod start;

use start::{collect_listening, listen, server_spec, start_master, transport_env};

/// How to launch a tree.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Number of ranks (the ids commands are addressed to).
    pub n: u32,
    /// Ranks each server serves, in blocks (`--ranks-per-server`; 1 is the seed's layout,
    /// one server per rank). `None`: one server per host, serving every rank on it.
    pub ranks_per_server: Option<u32>,
    /// The ranks each server serves, given outright (attach: the ranks found on each
    /// host); overrides [`SessionOptions::ranks_per_server`].
    pub placement: Option<Placement>,
    /// How to start the servers.
    pub launcher: LauncherKind,
    /// Hosts for the ssh launcher.
    pub hosts: Vec<String>,
    /// `tcp` or `quic`.
    pub transport: String,
    /// Tree shape.
    pub topology: Shape,
    /// First port servers try (default: random for this session, with its 2048 ports
    /// between 10000 and the start of the ephemeral range, 32768 by default; ignored
    /// with [`SessionOptions::port_range`]).
    pub base_port: Option<u16>,
    /// Ports every listener of the tree uses (the front-end's, the master's, each
    /// server's), for a site whose firewall opens only these; default: the front-end and
    /// the master take ephemeral ports, servers `base_port` and the 2047 after it.
    pub port_range: Option<PortRange>,
    /// Address the front-end listens on (default: see [`crate::address::default_listen`]:
    /// loopback for one machine, else this host's address on the route to the first host).
    pub listen: Option<String>,
    /// Address every server binds (default: its host's address on the route to the
    /// front-end; `0.0.0.0` or `::` for all interfaces).
    pub bind: Option<String>,
    /// Address every server advertises to its parent (default: the bound one, or for all
    /// interfaces its host's address on the route to the front-end).
    pub advertise: Option<String>,
    /// Limit for the whole start-up: launch, connect, init.
    pub startup_timeout: Duration,
    /// Connection rounds per child and the delay between them.
    pub connect_attempts: u32,
    /// Delay between connection rounds.
    pub connect_delay: Duration,
    /// The `sdm` binary (default: found next to the running program, or `$SDM_BIN`), or a
    /// server of a tool's own built on `sdm_server::Server::main`. The local launcher
    /// starts it once and it forks the servers (`sdm_deploy::fork_copies`).
    pub program: Option<PathBuf>,
    /// How long interior nodes hold stdio lines to merge identical ones (zero: never).
    pub stdio_window: Duration,
    /// How the servers send their programs' lines up: as they are, or as templated lines
    /// (lines differing only in their numbers merge, see `sdm_overlay::template`).
    pub stdio_merge: sdm_overlay::template::MergeMode,
    /// Filter plugins (shared libraries implementing `sdm_filter.h`) the front-end and every
    /// daemon load, so commands can name their filters. The front-end loads them first (a
    /// plugin that does not load fails the launch); daemons get the absolute paths in the
    /// init command, so each path must hold the same library on every host.
    pub filter_plugins: Vec<PathBuf>,
    /// Arguments for the launcher itself, placed before the program: ssh options, or
    /// mpirun/srun arguments (a hostfile, a partition, an account, `--overlap`).
    pub launcher_args: Vec<String>,
    /// The `sdm` binary as the servers' hosts see it (default: [`SessionOptions::program`]'s
    /// path); a host where it is not an executable is named in the launch report.
    pub remote_program: Option<PathBuf>,
    /// Service plugins (shared libraries implementing `sdm_service.h`) every server loads
    /// when the init command arrives, so commands tagged with their services reach them.
    /// Paths are made absolute and must hold the same library on every host; a plugin that
    /// does not load at a server is logged there, and commands for its service get an error
    /// reply naming the plugin and why.
    pub service_plugins: Vec<PathBuf>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            n: 4,
            ranks_per_server: None,
            placement: None,
            launcher: LauncherKind::Local,
            hosts: Vec::new(),
            transport: "tcp".into(),
            topology: Shape::Binomial,
            base_port: None,
            port_range: None,
            listen: None,
            bind: None,
            advertise: None,
            startup_timeout: Duration::from_secs(60),
            connect_attempts: 20,
            connect_delay: Duration::from_millis(100),
            program: None,
            stdio_window: Duration::from_millis(20),
            stdio_merge: Default::default(),
            filter_plugins: Vec::new(),
            launcher_args: Vec::new(),
            remote_program: None,
            service_plugins: Vec::new(),
        }
    }
}

/// Start-up progress, for a progress bar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// The launcher started.
    Launched,
    /// A server reported its address (`count` so far).
    Listening {
        /// The server.
        id: u32,
        /// Its host name.
        host: String,
        /// Its process id on that host.
        pid: u32,
        /// Servers that reported so far.
        count: u32,
    },
    /// The master connected to the front-end.
    MasterConnected,
    /// The init command went down the tree.
    InitSent,
}

/// What start-up achieved.
#[derive(Debug, Clone)]
pub struct LaunchReport {
    /// Ranks whose servers acknowledged the init command.
    pub ready: IdSet,
    /// Ranks whose servers did not, grouped by reason.
    pub failed: Vec<(IdSet, String)>,
    /// Seconds from launch to the last acknowledgement.
    pub seconds: f64,
    /// The process table: (server id, host, pid) of every server that reported.
    pub processes: Vec<(u32, String, u32)>,
}

/// A running tree, driven from the front-end.
///
/// Sending, collecting and events are the methods of its [`Handle`] (through `Deref`): they
/// take `&self`, so many tasks can have requests in flight on one session at once (share
/// the session by reference, or move a [`Session::handle`] clone into each task).
pub struct Session {
    link: Handle,
    servers: Option<Launched>,
    master: Option<Launched>,
    n: u32,
    servers_count: u32,
    placement: Placement,
    shape: Shape,
    report: LaunchReport,
}

/// Loads `paths` into a registry of the built-in filters, as the front-end's check that
/// each plugin loads; returns the registry and the plugins' absolute paths for the daemons.
fn load_filter_plugins(paths: &[PathBuf]) -> Result<(Registry, Vec<String>)> {
    let mut registry = Registry::new();
    let absolute = absolute_paths("filter plugin", paths)?;
    for abs in &absolute {
        registry
            .load_plugin(abs)
            .map_err(|e| Error::invalid_because(format!("filter plugin {abs}: {e}"), e))?;
    }
    Ok((registry, absolute))
}

/// `paths` made absolute, as UTF-8 text for the init command (`what` names them in errors).
fn absolute_paths(what: &str, paths: &[PathBuf]) -> Result<Vec<String>> {
    paths
        .iter()
        .map(|p| {
            let abs = std::path::absolute(p)
                .map_err(|e| Error::io(format!("{what} {}", p.display()), e))?;
            abs.to_str().map(str::to_owned).ok_or_else(|| {
                Error::invalid(format!("{what} path {} is not UTF-8", abs.display()))
            })
        })
        .collect()
}

/// Finds the `sdm` binary: `$SDM_BIN`, the running program if it is `sdm`, or an `sdm`
/// next to it or one directory up (tests and examples live in subdirectories of target/).
pub fn find_sdm_binary() -> Result<PathBuf> {
    if let Ok(p) = std::env::var("SDM_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| Error::io("locating the running program", e))?;
    if exe.file_name().is_some_and(|n| n == "sdm") {
        return Ok(exe);
    }
    let mut dir = exe.parent();
    for _ in 0..2 {
        let Some(d) = dir else { break };
        let cand = d.join("sdm");
        if cand.is_file() {
            return Ok(cand);
        }
        dir = d.parent();
    }
    Err(Error::no_binary(exe))
}

/// The first of the servers' ports when none was given: random, and with the whole span
/// (`span` ports) below the kernel's ephemeral range (`ip_local_port_range`, 32768 by
/// default). Ports in that range are taken by the source ports of outgoing connections,
/// and a connection's TIME-WAIT keeps its port from a listener for a minute: a base in it
/// after a few trees had come and gone made servers collide and walk port by port onto
/// each other's, and a large start-up spent its time in failed binds.
fn random_port(span: u16) -> u16 {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    base_below(ephemeral, span, random_u16())
}

/// How many ports the servers of one host pick from without `--port-range`: one each.
pub const SERVER_PORT_SPAN: u16 = 2048;

/// More servers on one host than its port range has ports is an error at once, naming the
/// range (they would otherwise start, and the ones past the range fail one by one). Known
/// for the local launcher (every server here) and ssh (one per host in turn); mpirun and
/// srun place servers themselves.
fn check_ports_per_host(opts: &SessionOptions, servers: u32) -> Result<()> {
    let per_host = match opts.launcher {
        LauncherKind::Local => servers,
        LauncherKind::Ssh if !opts.hosts.is_empty() => {
            servers.div_ceil(u32::try_from(opts.hosts.len()).unwrap_or(u32::MAX))
        }
        _ => return Ok(()),
    };
    let (ports, range) = match opts.port_range {
        Some(r) => (r.len(), format!("--port-range {}-{}", r.first(), r.last())),
        None => (
            u32::from(SERVER_PORT_SPAN),
            format!("the {SERVER_PORT_SPAN} ports a host's servers pick from"),
        ),
    };
    if per_host > ports {
        return Err(Error::invalid(format!(
            "-n {}: {per_host} servers on one host, but {range} hold at most {ports} \
             (one port each; --port-range FIRST-LAST gives more, or fewer servers: \
             --ranks-per-server)",
            opts.n
        )));
    }
    Ok(())
}

/// A base in [10000, `ephemeral` - `span`) picked by `r` (or 10000 when that is empty).
fn base_below(ephemeral: u32, span: u16, r: u16) -> u16 {
    const LOW: u32 = 10000;
    let room = ephemeral
        .saturating_sub(u32::from(span))
        .saturating_sub(LOW);
    if room == 0 {
        return LOW as u16;
    }
    (LOW + u32::from(r) % room) as u16
}

fn random_u16() -> u16 {
    let k = SessionKey::generate().to_hex();
    u16::from_str_radix(&k[..4], 16).unwrap_or(0)
}

impl Session {
    /// Launches the master and the servers serving `opts.n` ranks (one server per host,
    /// or as [`SessionOptions::ranks_per_server`] or [`SessionOptions::placement`] say)
    /// and initializes the tree. Returns once every rank is ready or the start-up deadline
    /// passed; see [`Session::report`].
    pub async fn launch(
        opts: &SessionOptions,
        mut progress: impl FnMut(&Progress),
    ) -> Result<Self> {
        let started = Instant::now();
        // Up to a stdout pipe per server (ssh starts a client each): lift the soft
        // descriptor limit to the hard one.
        sdm_deploy::raise_fd_limit();
        let deadline = tokio::time::Instant::now() + opts.startup_timeout;
        if opts.n == 0 {
            return Err(Error::invalid("a tree needs at least one rank (-n)"));
        }
        let layout = crate::layout::of(opts)?;
        let servers_n = layout.servers;
        check_ports_per_host(opts, servers_n)?;
        let (registry, filter_plugins) = load_filter_plugins(&opts.filter_plugins)?;
        let service_plugins = absolute_paths("service plugin", &opts.service_plugins)?;
        let program = match &opts.program {
            Some(p) => p.clone(),
            None => find_sdm_binary()?,
        };
        let key = SessionKey::generate();
        let (env, cfg) = transport_env(opts, &key)?;
        let launcher = opts
            .launcher
            .build_with(opts.hosts.clone(), opts.launcher_args.clone());
        let (mut listener, fe_host) = listen(opts, &*launcher, &cfg).await?;
        let spec = server_spec(opts, servers_n, &program, fe_host, &env);
        let mut servers = launcher.launch(&spec).map_err(|e| {
            Error::launch(
                format!("{servers_n} servers of {}", spec.program.display()),
                e,
            )
        })?;
        progress(&Progress::Launched);
        let listening = collect_listening(&mut servers, opts, servers_n, &mut progress).await;
        let (master, fe) = start_master(opts, program, env, &mut *listener, &key, deadline).await?;
        progress(&Progress::MasterConnected);
        let mut session = Session {
            link: Handle::spawn(fe.into_link(), Arc::new(registry)),
            servers: Some(servers),
            master: Some(master),
            n: opts.n,
            servers_count: servers_n,
            placement: layout.placement.clone(),
            shape: opts.topology.clone(),
            report: LaunchReport {
                ready: IdSet::new(),
                failed: Vec::new(),
                seconds: 0.0,
                processes: listening.processes,
            },
        };
        let init = InitSpec {
            servers: servers_n,
            topology: opts.topology.to_string(),
            // Addresses are single words (split from their start-up lines).
            table: Table::new(listening.table)
                .map_err(|e| Error::invalid_because(e.to_string(), e))?,
            attempts: opts.connect_attempts,
            delay_ms: opts.connect_delay.as_millis() as u64,
            probe_span: 1,
            handshake_ms: 5000,
            stdio_window_ms: opts.stdio_window.as_millis() as u64,
            stdio_merge: opts.stdio_merge,
            filter_plugins,
            service_plugins,
            master: None,
            placement: layout.placement.clone(),
        };
        session.init(&init, deadline, &mut progress).await?;
        session.note_launch_errors(listening.errors, &layout.placement);
        session.report.seconds = started.elapsed().as_secs_f64();
        Ok(session)
    }

    /// Sends the init command down the tree and notes which ranks acknowledged it, and
    /// why the others did not, in the report.
    async fn init(
        &mut self,
        init: &InitSpec,
        deadline: tokio::time::Instant,
        progress: &mut impl FnMut(&Progress),
    ) -> Result<()> {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let all = IdSet::all(self.n);
        let op = self
            .link
            .send_command(
                Message::command(
                    0,
                    all.clone(),
                    SyncMode::Timeout(left.as_millis().max(1) as u32),
                    init.to_payload(),
                )
                .for_service(INIT_SERVICE),
            )
            .await?;
        progress(&Progress::InitSent);
        let groups = self.link.collect(op, &all).await?;
        for g in groups {
            match g.status {
                Status::Replied if &g.payload[..] == b"ready" => {
                    self.report.ready.union_with(&g.sources)
                }
                Status::Replied => self
                    .report
                    .failed
                    .push((g.sources, String::from_utf8_lossy(&g.payload).into_owned())),
                Status::Lost | Status::Error => self
                    .report
                    .failed
                    .push((g.sources, String::from_utf8_lossy(&g.payload).into_owned())),
                Status::TimedOut => self.report.failed.push((
                    g.sources,
                    "did not acknowledge the init command in time".into(),
                )),
            }
        }
        Ok(())
    }

    /// Servers the launcher could not start on their host say why themselves (for their
    /// ranks), in place of what the tree reported for those ranks.
    fn note_launch_errors(&mut self, launch_errors: Vec<(IdSet, String)>, placement: &Placement) {
        for (servers, why) in launch_errors {
            let mut ids = IdSet::new();
            for s in servers.iter() {
                ids.union_with(&placement.ranks_of(s));
            }
            for (f, _) in &mut self.report.failed {
                *f = &*f - &ids;
            }
            self.report.failed.retain(|(f, _)| !f.is_empty());
            match self.report.failed.iter_mut().find(|(_, w)| *w == why) {
                Some((f, _)) => f.union_with(&ids),
                None => self.report.failed.push((ids, why)),
            }
        }
    }

    /// Attaches to a master that connected to the front-end (`fe`, from
    /// [`Frontend::accept_master`]); used by tools that start the daemons themselves. Must
    /// run inside a tokio runtime: the link's reader and writer tasks start on it.
    pub fn attach(fe: Frontend, n: u32) -> Self {
        Session {
            link: Handle::spawn(fe.into_link(), Arc::new(Registry::new())),
            servers: None,
            master: None,
            n,
            servers_count: n,
            placement: Placement::Identity,
            shape: Shape::Binomial,
            report: LaunchReport {
                ready: IdSet::all(n),
                failed: Vec::new(),
                seconds: 0.0,
                processes: Vec::new(),
            },
        }
    }

    /// What start-up achieved.
    pub fn report(&self) -> &LaunchReport {
        &self.report
    }

    /// Number of ranks (the ids commands are addressed to).
    pub fn size(&self) -> u32 {
        self.n
    }

    /// Number of servers in the tree.
    pub fn servers(&self) -> u32 {
        self.servers_count
    }

    /// Which ranks each server serves.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The tree: its shape over the servers and the ranks each serves.
    pub fn tree(&self) -> Tree {
        Tree::new(
            Arc::from(self.shape.build(self.servers_count)),
            self.placement.clone(),
        )
    }

    /// The tree's shape (binomial for an attached session unless it says otherwise).
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Number of ranks.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// Every rank.
    pub fn all(&self) -> IdSet {
        IdSet::all(self.n)
    }

    /// A cloneable handle on the master link, to move into tasks or threads that send and
    /// collect at the same time as this one.
    pub fn handle(&self) -> Handle {
        self.link.clone()
    }

    /// Why the master link ended, if it did.
    pub fn closed_reason(&self) -> String {
        self.link
            .closed_reason()
            .unwrap_or_else(|| "it is still open".to_owned())
    }

    /// Process ids of the launched processes (master first), for orphan checks.
    pub fn launched_pids(&self) -> Vec<u32> {
        let mut v = Vec::new();
        for l in [&self.master, &self.servers].into_iter().flatten() {
            v.extend(l.pids());
        }
        v
    }

    /// Closes the front-end link: the master exits, its children see their parent go and
    /// exit, and so on down the tree. Waits up to `grace` for the launched processes, then
    /// kills what is left.
    pub async fn shutdown(self, grace: Duration) {
        let Session {
            link,
            servers,
            master,
            ..
        } = self;
        // Clones of the handle elsewhere see the link closed from now on.
        link.close();
        drop(link);
        for mut l in [master, servers].into_iter().flatten() {
            l.shutdown(grace).await;
        }
    }
}

impl std::ops::Deref for Session {
    type Target = Handle;

    /// The master link: send, collect, events (all `&self`).
    fn deref(&self) -> &Handle {
        &self.link
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filter plugin that does not load is an invalid-argument error whose source is the
    /// filter crate's error (and, under it, the loader's).
    #[test]
    fn a_plugin_that_does_not_load_keeps_its_cause() {
        let e = load_filter_plugins(&[PathBuf::from("/nonexistent/libnothing.so")]).unwrap_err();
        assert!(e.is_invalid(), "{e}");
        let source = std::error::Error::source(&e);
        let filter = source.and_then(|s| s.downcast_ref::<sdm_overlay::filters::FilterError>());
        assert!(filter.is_some(), "{e:?}");
        assert!(std::error::Error::source(filter.unwrap()).is_some());
    }

    /// Every random base keeps the whole span of ports below the ephemeral range.
    #[test]
    fn the_random_base_keeps_the_span_below_the_ephemeral_ports() {
        for r in [0, 1, 777, 20_000, u16::MAX] {
            let b = base_below(32768, 2048, r);
            assert!((10000..32768 - 2048).contains(&b), "{r} -> {b}");
        }
        assert_eq!(
            base_below(11000, 2048, 5),
            10000,
            "no room: the lowest base"
        );
        let here = random_port(2048);
        assert!(here >= 10000, "{here}");
    }
}
