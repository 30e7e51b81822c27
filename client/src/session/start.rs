//! The steps of [`Session::launch`](super::Session::launch): the session's environment,
//! the front-end's listener, the servers' command line, their start-up lines, and the
//! master.

use std::path::PathBuf;

use crate::frontend::Frontend;
use sdm_deploy::{LaunchSpec, Launched, LauncherKind};
use sdm_overlay::setup::ConnectPolicy;
use sdm_overlay::setup::{SESSION_KEY_ENV, SessionKey};
use sdm_overlay::transport::{Address, Listener, TransportConfig, bind_in_range, transport_for};
#[cfg(feature = "quic")]
use sdm_overlay::transport::{SESSION_TLS_ENV, SessionTls, tls_to_env};
use sdm_proto::IdSet;

use super::{Progress, SERVER_PORT_SPAN, SessionOptions, random_port};
use crate::error::{Error, Result};

/// The session's environment for the daemons (its key; with quic, its TLS identity)
/// and the front-end's transport configuration.
pub(super) fn transport_env(
    opts: &SessionOptions,
    key: &SessionKey,
) -> Result<(Vec<(String, String)>, TransportConfig)> {
    #[cfg_attr(not(feature = "quic"), allow(unused_mut))]
    let mut env = vec![(SESSION_KEY_ENV.to_owned(), key.to_hex())];
    #[cfg_attr(not(feature = "quic"), allow(unused_mut))]
    let mut cfg = TransportConfig::default();
    if opts.transport == "quic" {
        #[cfg(feature = "quic")]
        {
            let tls = SessionTls::generate();
            env.push((SESSION_TLS_ENV.to_owned(), tls_to_env(&tls)));
            cfg.tls = Some(tls);
        }
        #[cfg(not(feature = "quic"))]
        return Err(Error::invalid(
            "transport quic: sdm-client was built without the quic feature",
        ));
    } else if opts.transport != "tcp" {
        return Err(Error::invalid(format!(
            "unknown transport {:?}: expected tcp or quic",
            opts.transport
        )));
    }
    Ok((env, cfg))
}

/// Listens for the master on the front-end's address toward the servers' hosts; returns
/// the listener and the host name the servers are told to reach the front-end by.
pub(super) async fn listen(
    opts: &SessionOptions,
    launcher: &dyn sdm_deploy::Launcher,
    cfg: &TransportConfig,
) -> Result<(Box<dyn Listener>, String)> {
    let (listen, fe_host) = crate::address::frontend_addresses(
        opts.launcher,
        launcher,
        &opts.hosts,
        opts.listen.as_deref(),
    )?;
    let fe_addr: Address = format!("{}://{listen}:0", opts.transport)
        .parse()
        .map_err(|e| Error::invalid_because(format!("front-end address on {listen}: {e}"), e))?;
    let transport = transport_for(&fe_addr, cfg)
        .map_err(|e| Error::io(format!("transport for {fe_addr}"), e))?;
    let listener = bind_in_range(&*transport, &opts.transport, &listen, opts.port_range, 0)
        .await
        .map_err(|e| Error::io(format!("listening on {fe_addr}"), e))?;
    Ok((listener, fe_host))
}

/// What the launcher starts: `sdm server` with its ports and the front-end's host; local
/// servers as copies forked from one process.
pub(super) fn server_spec(
    opts: &SessionOptions,
    servers_n: u32,
    program: &std::path::Path,
    fe_host: String,
    env: &[(String, String)],
) -> LaunchSpec {
    let (base, span) = match opts.port_range {
        Some(r) => (r.first(), r.len().min(u32::from(u16::MAX)) as u16),
        None => (
            opts.base_port
                .unwrap_or_else(|| random_port(SERVER_PORT_SPAN)),
            SERVER_PORT_SPAN,
        ),
    };
    let mut args = vec![
        "server".into(),
        "--port".into(),
        base.to_string(),
        "--port-span".into(),
        span.to_string(),
        "--transport".into(),
        opts.transport.clone(),
        "--frontend-host".into(),
        fe_host,
    ];
    for (flag, value) in [("--host", &opts.bind), ("--advertise", &opts.advertise)] {
        if let Some(v) = value {
            args.extend([flag.to_owned(), v.clone()]);
        }
    }
    // Local servers come as copies forked from one process: one exec and one pipe, not
    // one per server (see `sdm_deploy::fork_copies`; `sdm server` and every server
    // built on `sdm_server::Server::main` make them).
    let copies = opts.launcher == LauncherKind::Local && servers_n > 1;
    let mut server_env = env.to_vec();
    if copies {
        server_env.push((sdm_deploy::COPIES_ENV.to_owned(), servers_n.to_string()));
    }
    LaunchSpec {
        n: if copies { 1 } else { servers_n },
        program: opts
            .remote_program
            .clone()
            .unwrap_or_else(|| program.to_owned()),
        args,
        env: server_env,
    }
}

/// What the servers reported at start-up.
pub(super) struct Listening {
    /// Each server's address, by server id.
    pub(super) table: Vec<Option<String>>,
    /// (server id, host, pid) of every server that reported.
    pub(super) processes: Vec<(u32, String, u32)>,
    /// Servers that could not start, by server id, and why.
    pub(super) errors: Vec<(IdSet, String)>,
}

/// Reads the servers' `SDM-LISTEN ID ADDR HOST PID` and `SDM-ERROR ID WHY` lines until
/// every server reported or a third of the start-up time passed.
pub(super) async fn collect_listening(
    servers: &mut Launched,
    opts: &SessionOptions,
    servers_n: u32,
    progress: &mut impl FnMut(&Progress),
) -> Listening {
    let listen_deadline = tokio::time::Instant::now() + opts.startup_timeout / 3;
    let mut table: Vec<Option<String>> = vec![None; servers_n as usize];
    let mut count = 0u32;
    let mut session_procs = Vec::new();
    // Servers that could not start, by server id (their ranks are reported).
    let mut launch_errors: Vec<(IdSet, String)> = Vec::new();
    while count < servers_n {
        let line = match tokio::time::timeout_at(listen_deadline, servers.next_line()).await {
            Ok(Some(l)) => l,
            Ok(None) | Err(_) => break,
        };
        // A launcher's report that a server cannot start on its host (ssh).
        if let Some(why) = line.strip_prefix("SDM-ERROR ") {
            let (id, what) = why.split_once(' ').unwrap_or((why, ""));
            match id.parse::<u32>() {
                Ok(id) if id < servers_n => {
                    launch_errors.push((IdSet::single(id), what.to_owned()))
                }
                _ => tracing::warn!("launcher: {why}"),
            }
            continue;
        }
        let mut parts = line.split_whitespace();
        if parts.next() != Some("SDM-LISTEN") {
            tracing::debug!("server output: {line}");
            continue;
        }
        let (Some(id), Some(addr), host, pid) = (
            parts.next().and_then(|s| s.parse::<u32>().ok()),
            parts.next(),
            parts.next().unwrap_or("?").to_owned(),
            parts
                .next()
                .and_then(|s| s.parse::<u32>().ok())
                .unwrap_or(0),
        ) else {
            tracing::warn!("malformed start-up line {line:?}");
            continue;
        };
        // Checked here, once: the nodes parse only the addresses they connect to.
        if let Err(e) = addr.parse::<Address>()
            && id < servers_n
        {
            launch_errors.push((
                IdSet::single(id),
                format!("server {id} reported an address that does not parse ({addr}): {e}"),
            ));
            continue;
        }
        match table.get_mut(id as usize) {
            Some(slot @ None) => {
                *slot = Some(addr.to_owned());
                count += 1;
                progress(&Progress::Listening {
                    id,
                    host: host.clone(),
                    pid,
                    count,
                });
                session_procs.push((id, host, pid));
            }
            Some(Some(_)) => tracing::warn!("server {id} reported twice; keeping the first"),
            None => tracing::warn!("server id {id} is outside 0..{servers_n}"),
        }
    }
    Listening {
        table,
        processes: session_procs,
        errors: launch_errors,
    }
}

/// Starts the master next to the front-end and accepts its connection on `listener`,
/// within the start-up deadline.
pub(super) async fn start_master(
    opts: &SessionOptions,
    program: PathBuf,
    env: Vec<(String, String)>,
    listener: &mut dyn Listener,
    key: &SessionKey,
    deadline: tokio::time::Instant,
) -> Result<(Launched, Frontend)> {
    let fe_addr = listener.local_addr();
    // The master runs here, next to the front-end.
    let mut master_args = vec!["master".into(), "--frontend".into(), fe_addr.to_string()];
    if let Some(r) = opts.port_range {
        master_args.extend(["--port-range".into(), r.to_string()]);
    }
    let master_spec = LaunchSpec {
        n: 1,
        program,
        args: master_args,
        env,
    };
    let master = sdm_deploy::Local
        .launch_one(&master_spec)
        .map_err(|e| Error::launch(format!("the master {}", master_spec.program.display()), e))?;
    let policy = ConnectPolicy::new(key.clone());
    let fe = tokio::time::timeout_at(deadline, Frontend::accept_master(listener, &policy))
        .await
        .map_err(|_| {
            Error::timeout(
                format!(
                    "the master (pid {}) did not connect to {fe_addr}",
                    master.pids().first().copied().unwrap_or(0)
                ),
                opts.startup_timeout,
            )
        })?
        .map_err(|e| Error::io(format!("accepting the master on {fe_addr}"), e.into()))?;
    Ok((master, fe))
}
