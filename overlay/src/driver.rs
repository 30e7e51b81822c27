//! The tokio driver of a [`Node`]: one reader and one batching writer task per link, a
//! timer, and local delivery to a handler; plus tree set-up (connect to children, accept
//! the parent) with an id-checking handshake.
//!
//! The driver owns no routing logic: it only turns `poll_output` into socket writes and
//! socket events into `handle_*` calls, like quinn's driver around quinn-proto.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use sdm_proto::{IdSet, Kind, Message, SyncMode};
use sdm_topology::{NodeId, Topology};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::node::{Node, Output};
use crate::transport::{Address, Link, Listener, Transport};

/// Payload of the hello a connecting parent sends; followed by the child id it expects.
const HELLO: &str = "sdm-hello ";
/// Payload of the answer of a child that accepted the hello.
const WELCOME: &str = "sdm-welcome ";

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

/// Runs `node` until its parent link closes. `children` holds each child's link, or the
/// error that kept it from connecting (those ids are reported lost on every command).
pub async fn run_node(
    mut node: Node,
    parent: Link,
    children: Vec<(NodeId, io::Result<Link>)>,
    mut handler: LocalHandler,
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

/// How hard to try when connecting to a child.
#[derive(Debug, Clone)]
pub struct ConnectPolicy {
    /// Attempts before giving up.
    pub attempts: u32,
    /// Delay between attempts.
    pub delay: Duration,
    /// Limit for one connect plus handshake.
    pub handshake_timeout: Duration,
}

impl Default for ConnectPolicy {
    fn default() -> Self {
        Self {
            attempts: 20,
            delay: Duration::from_millis(100),
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

fn hello(to: &str, from: &str) -> Message {
    let mut m = Message::command(0, IdSet::new(), SyncMode::WaitAll, format!("{HELLO}{to} {from}"));
    m.kind = Kind::Control;
    m
}

/// Connects to child `child` at `addr`, retrying, and checks it is that child.
pub async fn connect_child(
    transport: &dyn Transport,
    addr: &Address,
    me: NodeId,
    child: NodeId,
    policy: &ConnectPolicy,
) -> io::Result<Link> {
    connect_hello(transport, addr, &me.to_string(), &child.to_string(), policy).await
}

/// Connects the master to the front-end listening at `addr`, retrying.
pub async fn connect_frontend(
    transport: &dyn Transport,
    addr: &Address,
    policy: &ConnectPolicy,
) -> io::Result<Link> {
    connect_hello(transport, addr, "master", FRONTEND, policy).await
}

/// The name the front-end answers to in the handshake.
pub const FRONTEND: &str = "frontend";

/// Connects to `addr` and checks that the peer answers to the name `child`.
async fn connect_hello(
    transport: &dyn Transport,
    addr: &Address,
    me: &str,
    child: &str,
    policy: &ConnectPolicy,
) -> io::Result<Link> {
    let mut last = None;
    for attempt in 0..policy.attempts.max(1) {
        if attempt > 0 {
            tokio::time::sleep(policy.delay).await;
        }
        let tried = tokio::time::timeout(policy.handshake_timeout, async {
            let mut link = transport.connect(addr).await?;
            link.writer
                .send(&hello(child, me))
                .await
                .map_err(io::Error::other)?;
            match link.reader.next().await {
                Some(Ok(m)) if m.kind == Kind::Control && m.payload == format!("{WELCOME}{child}") => {
                    Ok(link)
                }
                Some(Ok(m)) => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{addr} is not {child}: it answered {:?}",
                        String::from_utf8_lossy(&m.payload)
                    ),
                )),
                Some(Err(e)) => Err(io::Error::other(e)),
                None => Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    format!("{addr} closed the connection during the handshake (not {child}?)"),
                )),
            }
        })
        .await;
        match tried {
            Ok(Ok(link)) => return Ok(link),
            Ok(Err(e)) => last = Some(e),
            Err(_) => {
                last = Some(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("handshake with {addr} timed out"),
                ))
            }
        }
    }
    let e = last.expect("at least one attempt");
    Err(io::Error::new(
        e.kind(),
        format!("{child} at {addr}: {e} (after {} attempts)", policy.attempts.max(1)),
    ))
}

/// Connects to every child of `me`; `table[s]` is server `s`'s address.
pub async fn connect_children(
    transport: &dyn Transport,
    topo: &dyn Topology,
    me: NodeId,
    table: &[Address],
    policy: &ConnectPolicy,
) -> Vec<(NodeId, io::Result<Link>)> {
    let kids = topo.children(me);
    let futs = kids.iter().map(|&c| async move {
        let s = c.server().expect("children are servers") as usize;
        let res = match table.get(s) {
            Some(addr) => connect_child(transport, addr, me, c, policy).await,
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("routing table has no address for server {c}"),
            )),
        };
        (c, res)
    });
    futures::future::join_all(futs).await
}

/// Accepts connections on `listener` until one proves to be our parent (its hello names
/// `me`); others are refused and logged, costing only their own connection.
pub async fn accept_parent(
    listener: &mut dyn Listener,
    me: NodeId,
    handshake_timeout: Duration,
) -> io::Result<Link> {
    accept_hello(listener, &me.to_string(), handshake_timeout).await
}

/// Accepts connections until one sends a hello addressed to `me`.
pub(crate) async fn accept_hello(
    listener: &mut dyn Listener,
    me: &str,
    handshake_timeout: Duration,
) -> io::Result<Link> {
    loop {
        let mut link = listener.accept().await?;
        let first = tokio::time::timeout(handshake_timeout, link.reader.next()).await;
        let refused = match first {
            Ok(Some(Ok(m))) if m.kind == Kind::Control => {
                let text = String::from_utf8_lossy(&m.payload).into_owned();
                match text.strip_prefix(HELLO).and_then(|r| r.split_once(' ')) {
                    Some((to, _from)) if to == me => {
                        let mut w = m.clone();
                        w.payload = Bytes::from(format!("{WELCOME}{me}"));
                        link.writer.send(&w).await.map_err(io::Error::other)?;
                        return Ok(link);
                    }
                    _ => format!("hello {text:?} is not for {me}"),
                }
            }
            Ok(Some(Ok(m))) => format!("first frame is {:?}, not a hello", m.kind),
            Ok(Some(Err(e))) => format!("bad first frame: {e}"),
            Ok(None) => "closed before the handshake".to_owned(),
            Err(_) => "no handshake in time".to_owned(),
        };
        tracing::warn!(node = %me, peer = %link.peer, "refused connection: {refused}");
    }
}
