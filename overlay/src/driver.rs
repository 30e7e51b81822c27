//! The tokio driver of a [`Node`]: one reader and one batching writer task per link, a
//! timer, and local delivery to a handler. Links come from [`crate::setup`].
//!
//! The driver owns no routing logic: it only turns `poll_output` into socket writes and
//! socket events into `handle_*` calls, like quinn's driver around quinn-proto.

use std::collections::HashMap;
use std::io;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use sdm_proto::{Kind, Message};
use sdm_topology::NodeId;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::node::{Node, Output};
use crate::transport::Link;

/// A command delivered to this server, with the means to answer it.
#[derive(Debug)]
pub struct Delivery {
    /// Operation id.
    pub op: u64,
    /// Kind of the request (command or stdio).
    pub kind: Kind,
    /// Filter the command asked for.
    pub filter: String,
    /// Opaque request bytes.
    pub payload: Bytes,
    /// Where the answer goes.
    pub reply: Replier,
}

/// Answers one [`Delivery`]; may be moved to another task and used later.
#[derive(Debug)]
pub struct Replier {
    op: u64,
    tx: mpsc::UnboundedSender<(u64, Bytes)>,
}

impl Replier {
    /// Sends the local reply. If the node is gone, the reply is dropped.
    pub fn send(self, payload: impl Into<Bytes>) {
        let _ = self.tx.send((self.op, payload.into()));
    }
}

/// Runs a command locally: called on the node's task, so it must not block; spawn for
/// anything slow and answer through [`Delivery::reply`].
pub type LocalHandler = Box<dyn FnMut(Delivery) + Send>;

/// Which link an event came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Peer {
    Parent,
    Child(NodeId),
}

#[derive(Debug)]
enum Inbound {
    Frame(Peer, Message),
    Closed(Peer, String),
}

/// Starts the reader and writer tasks of one link; returns the writer's queue.
fn spawn_link(
    peer: Peer,
    link: Link,
    inbound: mpsc::Sender<Inbound>,
) -> mpsc::UnboundedSender<Message> {
    let Link {
        mut reader,
        mut writer,
        peer: name,
    } = link;
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    let inbound_w = inbound.clone();
    let name_w = name.clone();
    tokio::spawn(async move {
        // Batch: queue every frame already waiting, then flush once.
        while let Some(m) = rx.recv().await {
            let mut res = writer.feed(&m).await;
            while res.is_ok() {
                match rx.try_recv() {
                    Ok(m) => res = writer.feed(&m).await,
                    Err(_) => break,
                }
            }
            if let Err(e) = res.and(writer.flush().await) {
                let why = format!("write to {name_w} failed: {e}");
                let _ = inbound_w.send(Inbound::Closed(peer, why)).await;
                return;
            }
        }
        let _ = writer.close().await;
    });
    tokio::spawn(async move {
        let why = loop {
            match reader.next().await {
                Some(Ok(m)) => {
                    if inbound.send(Inbound::Frame(peer, m)).await.is_err() {
                        return;
                    }
                }
                Some(Err(e)) => break format!("bad frame from {name}: {e}"),
                None => break format!("{name} closed the connection"),
            }
        };
        let _ = inbound.send(Inbound::Closed(peer, why)).await;
    });
    tx
}

/// Events a server's local side sends up (kind and payload), for [`run_node_with_events`].
pub type LocalEvents = mpsc::UnboundedReceiver<(Kind, Bytes)>;

/// Runs `node` until its parent link closes. `children` holds each child's link, or the
/// error that kept it from connecting (those ids are reported lost on every command).
pub async fn run_node(
    node: Node,
    parent: Link,
    children: Vec<(NodeId, io::Result<Link>)>,
    handler: LocalHandler,
) -> io::Result<()> {
    let (_tx, rx) = mpsc::unbounded_channel();
    run_node_with_events(node, parent, children, handler, rx).await
}

/// [`run_node`], also sending up every event that arrives on `events`.
pub async fn run_node_with_events(
    mut node: Node,
    parent: Link,
    children: Vec<(NodeId, io::Result<Link>)>,
    mut handler: LocalHandler,
    mut events: LocalEvents,
) -> io::Result<()> {
    let (in_tx, mut in_rx) = mpsc::channel::<Inbound>(1024);
    let (reply_tx, mut reply_rx) = mpsc::unbounded_channel::<(u64, Bytes)>();
    let to_parent = spawn_link(Peer::Parent, parent, in_tx.clone());
    let mut to_child: HashMap<NodeId, mpsc::UnboundedSender<Message>> = HashMap::new();
    let start = Instant::now().into_std();
    for (id, link) in children {
        match link {
            Ok(link) => {
                to_child.insert(id, spawn_link(Peer::Child(id), link, in_tx.clone()));
            }
            Err(e) => node.handle_link_down(start, id, &format!("could not connect: {e}")),
        }
    }
    drop(in_tx);
    loop {
        // Drain outputs first: they may arm a timer.
        while let Some(out) = node.poll_output() {
            match out {
                Output::ToParent(m) => {
                    let _ = to_parent.send(m);
                }
                Output::ToChild(c, m) => {
                    if to_child.get(&c).is_none_or(|tx| tx.send(m).is_err()) {
                        to_child.remove(&c);
                        let now = Instant::now().into_std();
                        node.handle_link_down(now, c, "no link");
                    }
                }
                Output::Deliver {
                    op,
                    kind,
                    filter,
                    payload,
                } => handler(Delivery {
                    op,
                    kind,
                    filter,
                    payload,
                    reply: Replier {
                        op,
                        tx: reply_tx.clone(),
                    },
                }),
            }
        }
        let deadline = node.poll_timeout().map(Instant::from_std);
        tokio::select! {
            ev = in_rx.recv() => {
                let now = Instant::now().into_std();
                match ev {
                    Some(Inbound::Frame(Peer::Parent, m)) => node.handle_from_parent(now, m),
                    Some(Inbound::Frame(Peer::Child(c), m)) => node.handle_from_child(now, c, m),
                    Some(Inbound::Closed(Peer::Parent, why)) => {
                        tracing::info!(node = %node.id(), "parent link ended: {why}");
                        node.handle_parent_down();
                        return Ok(());
                    }
                    Some(Inbound::Closed(Peer::Child(c), why)) => {
                        if to_child.remove(&c).is_some() {
                            node.handle_link_down(now, c, &why);
                        }
                    }
                    None => return Ok(()),
                }
            }
            Some((kind, payload)) = events.recv() => node.handle_local_event(kind, payload),
            Some((op, payload)) = reply_rx.recv() => {
                node.handle_local_reply(Instant::now().into_std(), op, payload);
            }
            () = sleep_until(deadline) => node.handle_timeout(Instant::now().into_std()),
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
