//! Failure recovery wiring for a node process: the [`driver::Recovery`] a server (the `sdm`
//! daemons, `sdm-testnode`) runs with.
//!
//! - **Adoptions**: the node's listener stays open after its parent connected, and takes
//!   orphaned descendants re-attaching ([`adoptions`]), one handshake task per connection.
//! - **Re-attachment**: when the parent link dies, the node connects to its nearest live
//!   ancestor ([`ancestors`]: its parent first, since a cut link may heal, then upward, the
//!   master last). Rounds over those ancestors repeat, with a growing pause, for up to the
//!   *patience* (`SDM_REATTACH_PATIENCE_MS`, default 20 s): a network partition that heals
//!   within it costs the subtree nothing but the commands sent meanwhile (reported lost).
//!   After it the node gives up and ends, like a node whose front-end is gone.
//!
//! `SDM_REATTACH=0` turns both off: a node whose parent dies ends with its subtree.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::driver::{self, Reattach};
use crate::logging::Refusals;
use crate::setup::{self, ConnectPolicy};
use crate::transport::{Address, Link, Listener, Transport};
use sdm_topology::{NodeId, Topology};

/// `0` turns re-attachment and adoptions off.
pub const REATTACH_ENV: &str = "SDM_REATTACH";

/// How long (ms) an orphan keeps looking for a live ancestor.
pub const PATIENCE_ENV: &str = "SDM_REATTACH_PATIENCE_MS";

/// The default of [`PATIENCE_ENV`].
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(20);

/// Whether orphans re-attach to a live ancestor (`SDM_REATTACH=0` turns it off).
pub(crate) fn enabled() -> bool {
    std::env::var(REATTACH_ENV).map_or(true, |v| v != "0")
}

/// [`PATIENCE_ENV`], else [`DEFAULT_PATIENCE`] (a malformed value is reported).
pub(crate) fn patience() -> Duration {
    match std::env::var(PATIENCE_ENV) {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(ms) => Duration::from_millis(ms),
            Err(e) => {
                tracing::warn!("{PATIENCE_ENV}={v:?}: {e}; using {DEFAULT_PATIENCE:?}");
                DEFAULT_PATIENCE
            }
        },
        Err(_) => DEFAULT_PATIENCE,
    }
}

/// Accepts orphaned descendants on `listener` for as long as the node runs, one handshake
/// task per connection (several orphans arrive at once when a node dies).
pub(crate) fn adoptions(
    me: NodeId,
    mut listener: Box<dyn Listener>,
    policy: ConnectPolicy,
) -> mpsc::Receiver<(NodeId, Link)> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let name = me.to_string();
        let refusals = Arc::new(Refusals::new(name.clone()));
        let reporting = refusals.keep_reporting();
        tokio::pin!(reporting);
        loop {
            let accepted = tokio::select! {
                () = &mut reporting => continue,
                accepted = listener.accept() => accepted,
            };
            let mut link = match accepted {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(node = %me, "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (tx, name, policy) = (tx.clone(), name.clone(), policy.clone());
            let refusals = refusals.clone();
            tokio::spawn(async move {
                match setup::handshake_accepted(&mut link, &name, &policy).await {
                    Ok(from) => match from.parse::<u32>() {
                        Ok(s) => drop(tx.send((NodeId::Server(s), link)).await),
                        Err(_) => tracing::warn!(node = %me, "refused re-attachment from {from:?}"),
                    },
                    Err(e) => refusals.refused(&link.peer, &e),
                }
            });
        }
    });
    rx
}

/// The ancestors an orphan tries, nearest first (its parent too: a cut link may heal),
/// with where each listens; the master only if its address is known.
pub(crate) fn ancestors(
    topo: &dyn Topology,
    me: NodeId,
    table: &[Option<Address>],
    master: Option<&Address>,
) -> Vec<(NodeId, Address)> {
    let mut out = Vec::new();
    let mut at = topo.parent(me);
    while let Some(a) = at {
        let addr = match a {
            NodeId::Master => master.cloned(),
            NodeId::Server(s) => table.get(s as usize).cloned().flatten(),
        };
        if let Some(addr) = addr {
            out.push((a, addr));
        }
        at = topo.parent(a);
    }
    out
}

/// Re-attaches `me` to the first of `targets` that answers, in rounds, for up to
/// `patience`.
pub(crate) fn reattach(
    me: NodeId,
    transport: Arc<dyn Transport>,
    targets: Vec<(NodeId, Address)>,
    policy: &ConnectPolicy,
    patience: Duration,
) -> Reattach {
    // One try per ancestor per round, each bounded: an unreachable host must not hold up
    // the ancestors behind it.
    let quick = ConnectPolicy {
        attempts: 1,
        handshake_timeout: policy.handshake_timeout.min(Duration::from_secs(2)),
        ..policy.clone()
    };
    Box::new(move || {
        let (transport, targets, quick) = (transport.clone(), targets.clone(), quick.clone());
        Box::pin(async move {
            let give_up = tokio::time::Instant::now() + patience;
            let mut pause = Duration::from_millis(100);
            loop {
                for (a, addr) in &targets {
                    match setup::connect_child(&*transport, addr, me, *a, &quick).await {
                        Ok(link) => return Some((*a, link)),
                        Err(e) => tracing::info!(node = %me, "cannot re-attach to {a}: {e}"),
                    }
                }
                if tokio::time::Instant::now() + pause >= give_up {
                    tracing::warn!(
                        node = %me,
                        "no live ancestor to re-attach to within {patience:?}; ending"
                    );
                    return None;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        })
    })
}

/// The [`driver::Recovery`] of node `me` (nothing if `enabled` is false): adoptions on
/// `listener` (if given) and, below the master, re-attachment to `ancestors` with
/// `patience`.
pub fn recovery(
    me: NodeId,
    topo: &dyn Topology,
    table: &[Option<Address>],
    master: Option<&Address>,
    transport: Arc<dyn Transport>,
    policy: &ConnectPolicy,
    listener: Option<Box<dyn Listener>>,
) -> driver::Recovery {
    let mut recovery = driver::Recovery::default();
    if !enabled() {
        return recovery;
    }
    if let Some(l) = listener {
        recovery.adoptions = Some(adoptions(me, l, policy.clone()));
    }
    if me != NodeId::Master {
        let targets = ancestors(topo, me, table, master);
        recovery.reattach = Some(reattach(me, transport, targets, policy, patience()));
    }
    recovery
}
