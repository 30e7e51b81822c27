//! `sdm master` and `sdm server`: bind or connect, take the init command from the parent
//! (the front-end, for the master), connect to the children it names, then run the node
//! until the parent link ends. A daemon whose parent never comes exits on its own.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use sdm_overlay::Node;
use sdm_overlay::driver::{self, Delivery, LocalHandler};
use sdm_overlay::setup::SessionKey;
use sdm_overlay::setup::{self, ConnectPolicy};
use sdm_overlay::transport::{
    Address, Link, Listener, PortRange, Transport, TransportConfig, bind_in_range, transport_for,
};
use sdm_proto::{IdSet, Kind, Message};
use sdm_topology::{NodeId, Topology, Tree};

use crate::error::{Error, ErrorKind, startup};
use crate::ranks::Ranks;
use crate::service::Services;
use sdm_overlay::setup::InitSpec;

/// Reads the init command from a fresh parent link, connects to our children, and runs the
/// node until the parent goes away (re-attaching to a live ancestor if it dies).
async fn serve(
    me: NodeId,
    mut parent: Link,
    transport: Arc<dyn Transport>,
    key: SessionKey,
    handler: LocalHandler,
    events: driver::LocalEvents,
    listener: Option<Box<dyn Listener>>,
) -> Result<(), Error> {
    let (first, spec) = read_init(me, &mut parent, listener.as_deref()).await?;
    let fail = |what: String| Error::new(ErrorKind::Startup, format!("{me}: {what}"));
    let init_error =
        |e| Error::with_source(ErrorKind::Startup, format!("{me}: the init command"), e);
    let shape = spec.shape().map_err(init_error)?;
    let master_addr: Option<Address> = spec.master.as_deref().and_then(|a| a.parse().ok());
    if let NodeId::Server(s) = me
        && s >= spec.servers
    {
        return Err(fail(format!(
            "not part of a tree of {} servers",
            spec.servers
        )));
    }
    let topo: Arc<dyn Topology> = Arc::from(shape.build(spec.servers));
    let table = spec
        .addresses_of(needed_addresses(&*topo, me))
        .map_err(init_error)?;
    let policy = spec.policy(key);
    let children = setup::connect_children(&*transport, &*topo, me, &table, &policy).await;
    for (c, r) in &children {
        if let Err(e) = r {
            tracing::warn!(node = %me, child = %c, "{e}");
        }
    }
    let tree = Tree::new(topo.clone(), spec.placement.clone());
    let mut node = Node::with_registry(me, tree, Arc::new(spec.registry()));
    node.set_stdio_window(Duration::from_millis(spec.stdio_window_ms));
    node.set_stdio_merge(spec.stdio_merge);
    let op = first.op;
    node.handle_from_parent(tokio::time::Instant::now().into_std(), first);
    // Each child takes only its subtree's part of the table (and its ancestors'); this
    // server's own init service only its own (it reads the tree's size and the plugins).
    node.tailor_queued(op, |to| {
        let servers = match to {
            _ if to == me => IdSet::from_iter(me.server()),
            c => topo.subtree(c),
        };
        spec.for_child(&*topo, me, &servers).to_payload()
    });
    let recovery = setup::recovery(
        me,
        &*topo,
        &table,
        master_addr.as_ref(),
        transport,
        &policy,
        listener,
    );
    let options = driver::Options {
        events: Some(events),
        recovery,
        liveness: None,
    };
    // A task of its own: a wake-up polls it from the runtime's loop, not through `serve`.
    tokio::spawn(driver::run_node(node, parent, children, handler, options))
        .await
        .map_err(|e| {
            Error::with_source(ErrorKind::Link, format!("{me}: the node's task failed"), e)
        })
}

/// The init command from the parent (within 120 s) and its spec; the master fills in its
/// own listening address, where orphans of its children re-attach.
async fn read_init(
    me: NodeId,
    parent: &mut Link,
    listener: Option<&dyn Listener>,
) -> Result<(Message, InitSpec), Error> {
    let fail = |what: String| Error::new(ErrorKind::Startup, format!("{me}: {what}"));
    let mut first = tokio::time::timeout(Duration::from_secs(120), parent.reader.next())
        .await
        .map_err(|_| fail("no init command from the parent within 120 s".into()))?
        .ok_or_else(|| fail("parent closed before sending the init command".into()))?
        .map_err(|e| {
            Error::with_source(
                ErrorKind::Startup,
                format!("{me}: reading the init command"),
                e,
            )
        })?;
    if first.kind != Kind::Command {
        return Err(fail(format!(
            "expected the init command, got a {:?} frame",
            first.kind
        )));
    }
    let init_error =
        |e| Error::with_source(ErrorKind::Startup, format!("{me}: the init command"), e);
    let mut spec = InitSpec::from_payload(&first.payload).map_err(init_error)?;
    if me == NodeId::Master
        && let Some(l) = listener
    {
        // Orphans of the master's children re-attach here: tell the tree where.
        spec.master = Some(l.local_addr().to_string());
        first.payload = spec.to_payload();
    }
    Ok((first, spec))
}

/// The servers whose addresses `me` uses: its children's, and its ancestors' for
/// re-attaching.
fn needed_addresses(topo: &dyn Topology, me: NodeId) -> Vec<u32> {
    let mut needed: Vec<u32> = topo
        .children(me)
        .iter()
        .filter_map(|c| c.server())
        .collect();
    let mut up = topo.parent(me);
    while let Some(a) = up {
        needed.extend(a.server());
        up = topo.parent(a);
    }
    needed
}

/// `sdm master --frontend ADDR`: connects to the front-end (a bounded number of tries),
/// then serves the tree below.
pub async fn run_master(
    frontend: Address,
    key: SessionKey,
    attempts: u32,
    ports: Option<PortRange>,
) -> Result<(), Error> {
    let cfg = TransportConfig::from_env().map_err(|e| startup("master", e))?;
    let transport = transport_for(&frontend, &cfg).map_err(|e| startup("master", e))?;
    let policy = ConnectPolicy {
        attempts,
        ..ConnectPolicy::new(key.clone())
    };
    let link = setup::connect_frontend(&*transport, &frontend, &policy)
        .await
        .map_err(|e| {
            startup(
                format_args!("master: cannot reach the front-end at {frontend}"),
                e,
            )
        })?;
    let none: LocalHandler = Box::new(|d: Delivery| d.reply.fail("the master runs no requests"));
    let (_tx, events) = tokio::sync::mpsc::channel(1);
    // Orphans of the master's children re-attach to it: it listens on the front-end's host.
    let here = frontend.target().to_owned();
    let host = here.rsplit_once(':').map_or("", |(h, _)| h);
    let listener = match frontend {
        Address::Mem(_) => None,
        _ => match bind_in_range(
            &*transport,
            frontend.scheme(),
            host,
            ports,
            std::process::id(),
        )
        .await
        {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!("master: cannot listen for re-attaching orphans on {host}: {e}");
                None
            }
        },
    };
    serve(
        NodeId::Master,
        link,
        Arc::from(transport),
        key,
        none,
        events,
        listener,
    )
    .await
}

/// Options of `sdm server`.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Scheme to listen with (`tcp` or `quic`).
    pub scheme: String,
    /// Host to bind (default: this host's address on the route to `frontend_host`, else
    /// loopback).
    pub bind_host: Option<String>,
    /// Host to advertise to the parent (default: the bound host, or for an unspecified one
    /// such as `0.0.0.0`, this host's address on the route to `frontend_host`).
    pub advertise: Option<String>,
    /// The front-end's host: the defaults above follow the route there, and a loopback
    /// address advertised while it is on another host is an error at start-up.
    pub frontend_host: Option<String>,
    /// First port to try.
    pub base_port: u16,
    /// Ports to try after it.
    pub port_span: u16,
    /// How long to wait for a parent before exiting.
    pub parent_timeout: Duration,
}

/// `sdm server --port BASE` with the stock services: see [`crate::Server`] for a server
/// with services of a tool's own.
pub async fn run_server(
    id: u32,
    local_rank: Option<u32>,
    key: SessionKey,
    opt: ServerOptions,
) -> Result<(), Error> {
    run_server_with(Services::stock(), id, local_rank, key, opt).await
}

/// `sdm server --port BASE` answering with `services`: binds BASE (plus its local rank,
/// then incrementing while taken), prints `SDM-LISTEN ID ADDRESS`, waits for its parent,
/// then serves.
pub(crate) async fn run_server_with(
    services: Services,
    id: u32,
    local_rank: Option<u32>,
    key: SessionKey,
    opt: ServerOptions,
) -> Result<(), Error> {
    let at = format!("server {id} on host {}", crate::monitor::hostname());
    let cfg = TransportConfig::from_env().map_err(|e| startup(&at, e))?;
    // The address on the route to the front-end: other hosts of the tree reach it.
    let route = match &opt.frontend_host {
        Some(h) => Some(setup::source_for(h).map_err(|e| startup(&at, e))?),
        None => None,
    };
    let bind_host = match (&opt.bind_host, route) {
        (Some(h), _) => setup::bracketed(h),
        (None, Some(ip)) => setup::host_text(ip),
        (None, None) => "127.0.0.1".to_owned(),
    };
    let probe: Address = format!("{}://{bind_host}:0", opt.scheme)
        .parse()
        .map_err(|e| startup(&at, e))?;
    let transport = transport_for(&probe, &cfg).map_err(|e| startup(&at, e))?;
    // `--port BASE --port-span SPAN`: the ports BASE.. (a range of SPAN), each server of a
    // host starting at its local rank; BASE 0: an ephemeral port.
    let last = (u32::from(opt.base_port) + u32::from(opt.port_span.max(1)) - 1).min(65535);
    let range = PortRange::new(opt.base_port, last as u16);
    let mut listener = bind_in_range(
        &*transport,
        &opt.scheme,
        &bind_host,
        range,
        local_rank.unwrap_or(0),
    )
    .await
    .map_err(|e| startup(format_args!("{at}: binding {bind_host}"), e))?;
    let local = listener.local_addr();
    let (bound_host, port) = local.target().rsplit_once(':').unwrap_or(("", "0"));
    let unspecified = setup::resolve(bound_host).is_ok_and(|ip| ip.is_unspecified());
    let advertised = match (&opt.advertise, route) {
        (Some(h), _) => setup::bracketed(h),
        (None, Some(ip)) if unspecified => setup::host_text(ip),
        (None, _) => bound_host.to_owned(),
    };
    if let Some(fe) = &opt.frontend_host {
        setup::check_advertised(&advertised, fe).map_err(|e| startup(&at, e))?;
    }
    let shown = format!("{}://{advertised}:{port}", opt.scheme);
    // One write, so launchers that merge the copies' stdout keep the line whole.
    println!(
        "SDM-LISTEN {id} {shown} {} {}",
        crate::monitor::hostname(),
        std::process::id()
    );
    let me = NodeId::Server(id);
    let policy = ConnectPolicy::new(key.clone());
    let parent = tokio::time::timeout(
        opt.parent_timeout,
        setup::accept_parent(&mut *listener, me, &policy),
    )
    .await
    .map_err(|_| {
        Error::new(
            ErrorKind::Startup,
            format!(
                "{at}: no parent connected within {:?}; exiting",
                opt.parent_timeout
            ),
        )
    })?
    .map_err(|e| startup(format_args!("{at}: accepting the parent"), e))?;
    // The listener stays open while we serve (a quic listener owns the endpoint): it takes
    // orphaned descendants re-attaching.
    // Output lines and events share one bounded queue to the node: a full queue makes
    // the output reader, and so the process, wait.
    // Every local rank's output and events go to the node on it, each naming its rank.
    let (rank_tx, events) = tokio::sync::mpsc::channel(1024);
    let ranks = Arc::new(Ranks::new(id, rank_tx));
    let table = Arc::clone(&ranks);
    let served = serve(
        me,
        parent,
        Arc::from(transport),
        key,
        Box::new(move |d| services.dispatch(&table, d)),
        events,
        Some(listener),
    )
    .await;
    // Kill only what we started, and only once the tree is gone.
    ranks.end().await;
    served
}
