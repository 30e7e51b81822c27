//! The tokio driver of a [`Node`]: one reader and one batching writer task per link, a
//! timer, and local delivery to a handler. Links come from [`crate::setup`].
//!
//! The driver owns no routing logic: it only turns `poll_output` into socket writes and
//! socket events into `handle_*` calls, like quinn's driver around quinn-proto.

use std::collections::HashMap;
use std::io;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use sdm_proto::{Control, Kind, Message};
use sdm_topology::NodeId;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use crate::flow;
use crate::liveness::Peer;
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
    /// Service the command is for (empty: the built-in `sdm` service); see
    /// `sdm_proto::Message::service`.
    pub service: String,
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
    /// A replier for op `op` whose reply goes to `tx` as `(op, payload)`: what a driver
    /// hands a handler (also for testing handlers without a node).
    pub fn new(op: u64, tx: mpsc::UnboundedSender<(u64, Bytes)>) -> Self {
        Self { op, tx }
    }

    /// Sends the local reply. If the node is gone, the reply is dropped.
    pub fn send(self, payload: impl Into<Bytes>) {
        let _ = self.tx.send((self.op, payload.into()));
    }
}

/// Runs a command locally: called on the node's task, so it must not block; spawn for
/// anything slow and answer through [`Delivery::reply`].
pub type LocalHandler = Box<dyn FnMut(Delivery) + Send>;

pub use crate::liveness::{KEEPALIVE_ENV, Liveness};

/// Why a link ended when the peer said goodbye: an orderly end of the session (the tree
/// is shutting down), after which a node does not look for a new parent.
const GOODBYE: &str = "the parent ended the session";

#[derive(Debug)]
enum Inbound {
    Frame(Peer, Message),
    /// The link of this generation carried something the node has not seen (a keepalive,
    /// credit, output still queued): its peer is alive.
    Heard(Peer, u64),
    /// A link ended: its peer, why, and its generation (so the end of a replaced link
    /// cannot remove the link that replaced it).
    Closed(Peer, String, u64),
}

/// Stdio or an event from a child, with the generation of the link it came on (its credit
/// goes back on that link only).
type Bulk = (NodeId, Message, u64);

/// Where a link's reader puts what it receives: control frames and link ends on `ctrl`;
/// bulk from a child on `bulk` (unbounded, because [`flow`] bounds it: at most one
/// window per child link), so a reader never stops reading for want of room.
struct Queues {
    ctrl: mpsc::Sender<Inbound>,
    bulk: Option<mpsc::UnboundedSender<Bulk>>,
}

/// Generations of links, unique in the process.
static LINK_GENERATION: AtomicUsize = AtomicUsize::new(1);

/// Starts the reader and writer tasks of one link; returns the writer's queues.
///
/// The writer has two queues: control (commands and replies) and bulk (stdio and events,
/// which keep their order among themselves). Control goes first, so a reply is never stuck
/// behind a flood of output waiting for the same link; on the parent link bulk is also
/// held by the receiver's credit ([`flow`]), so at most a window of it is ever in flight.
///
/// Liveness is the node's ([`crate::liveness`]): the writer sends the keepalives the node
/// asks for, and the reader tells the node it heard from the peer at least every
/// `heard_every` while frames arrive that the node does not see at once.
fn spawn_link(peer: Peer, link: Link, queues: Queues, heard_every: std::time::Duration) -> LinkTx {
    let generation = LINK_GENERATION.fetch_add(1, Ordering::Relaxed) as u64;
    let Link {
        mut reader,
        mut writer,
        peer: name,
    } = link;
    let (ctrl, mut ctrl_rx) = mpsc::unbounded_channel::<Message>();
    let (bulk, mut bulk_rx) = mpsc::unbounded_channel::<Message>();
    let backlog = Arc::new(AtomicUsize::new(0));
    let queued = backlog.clone();
    let drained = Arc::new(Notify::new());
    let drained_w = drained.clone();
    let credits = flow::Credits::default();
    let credits_w = credits.clone();
    let outstanding = flow::Outstanding::default();
    let outstanding_r = outstanding.clone();
    let Queues {
        ctrl: inbound,
        bulk: bulk_inbound,
    } = queues;
    let inbound_w = inbound.clone();
    let name_w = name.clone();
    let writer_task = tokio::spawn(async move {
        loop {
            let can_bulk = credits_w.available();
            let (m, is_bulk) = tokio::select! {
                biased;
                m = ctrl_rx.recv() => match m {
                    Some(m) => (m, false),
                    None => break,
                },
                Some(m) = bulk_rx.recv(), if can_bulk => (m, true),
                () = credits_w.wait(), if !can_bulk => continue,
            };
            if is_bulk {
                credits_w.spend(&m);
            }
            // Batch: queue what else is waiting (control first), then flush once.
            let mut res = writer.feed(&m).await;
            let (mut n, mut bulk_n) = (1, usize::from(is_bulk));
            while res.is_ok() && n < 256 {
                let next = match ctrl_rx.try_recv() {
                    Ok(m) => m,
                    Err(_) if !credits_w.available() => break,
                    Err(_) => match bulk_rx.try_recv() {
                        Ok(m) => {
                            credits_w.spend(&m);
                            bulk_n += 1;
                            m
                        }
                        Err(_) => break,
                    },
                };
                res = writer.feed(&next).await;
                n += 1;
            }
            res = res.and(writer.flush().await);
            queued.fetch_sub(bulk_n, Ordering::Relaxed);
            // Wakes a node loop that stopped taking input while this queue was full (a
            // stored permit if it is not waiting yet: no lost wake-up).
            drained_w.notify_one();
            if let Err(e) = res {
                let why = format!("write to {name_w} failed: {e}");
                let _ = inbound_w.send(Inbound::Closed(peer, why, generation)).await;
                return;
            }
        }
        let _ = writer.close().await;
    });
    let reader_task = tokio::spawn(async move {
        let mut told = Instant::now();
        let why = loop {
            let m = match reader.next().await {
                Some(Ok(m)) => m,
                Some(Err(e)) => break format!("bad frame from {name}: {e}"),
                None => break format!("{name} closed the connection"),
            };
            // The node hears of frames it does not get at once (control frames handled
            // here, output queued for it), so a busy link never looks silent.
            if (m.kind == Kind::Control || flow::is_bulk(m.kind)) && told.elapsed() >= heard_every {
                told = Instant::now();
                if inbound
                    .send(Inbound::Heard(peer, generation))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if m.kind == Kind::Control {
                match Control::from_message(&m) {
                    Ok(Control::Keepalive) => {}
                    Ok(Control::Goodbye) => break GOODBYE.to_owned(),
                    Ok(Control::Credit(n)) if n > 0 => credits.add(n.min(i64::MAX as u64) as i64),
                    Ok(other) => {
                        tracing::warn!(
                            "ignored a {} frame from {name} on an open link",
                            other.name()
                        )
                    }
                    Err(e) => break format!("{name} sent a bad control frame: {e}"),
                }
                continue;
            }
            let sent = match (&bulk_inbound, peer) {
                (Some(bulk), Peer::Child(c)) if flow::is_bulk(m.kind) => {
                    if let Err(e) = outstanding_r.receive(&m) {
                        break format!("{name} {e}");
                    }
                    bulk.send((c, m, generation)).is_ok()
                }
                _ => inbound.send(Inbound::Frame(peer, m)).await.is_ok(),
            };
            if !sent {
                return;
            }
        };
        let _ = inbound.send(Inbound::Closed(peer, why, generation)).await;
    });
    LinkTx {
        reader: AbortOnDrop(reader_task),
        ctrl,
        bulk,
        backlog,
        drained,
        grant: flow::Grant::new(outstanding),
        generation,
        writer: writer_task,
    }
}

/// A task that ends with its owner (a link's reader, which may wait on a silent peer for
/// ever).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The sending side of a link: its two queues, and how many bulk frames wait.
struct LinkTx {
    /// The link's reader (aborted when the link is dropped).
    reader: AbortOnDrop,
    ctrl: mpsc::UnboundedSender<Message>,
    bulk: mpsc::UnboundedSender<Message>,
    backlog: Arc<AtomicUsize>,
    /// Signalled each time the writer has sent a batch.
    drained: Arc<Notify>,
    /// Credit owed to the peer for the bulk taken from it (child links).
    grant: flow::Grant,
    /// Which link this is (see [`Inbound::Closed`]).
    generation: u64,
    /// The writer task: it ends once both queues are closed and drained.
    writer: tokio::task::JoinHandle<()>,
}

impl LinkTx {
    /// Closes the queues and waits (at most `grace`) until what was queued is written.
    async fn finish(self, grace: std::time::Duration) {
        let LinkTx {
            ctrl,
            bulk,
            writer,
            reader,
            ..
        } = self;
        drop((ctrl, bulk));
        let _ = tokio::time::timeout(grace, writer).await;
        drop(reader);
    }
}

impl LinkTx {
    fn send(&self, m: Message) -> bool {
        if flow::is_bulk(m.kind) {
            self.backlog.fetch_add(1, Ordering::Relaxed);
            self.bulk.send(m).is_ok()
        } else {
            self.ctrl.send(m).is_ok()
        }
    }

    fn backlog(&self) -> usize {
        self.backlog.load(Ordering::Relaxed)
    }
}

/// Bulk frames (stdio, events) waiting for the parent link above which this node stops
/// taking bulk from below and from its own process (so output slows the printers down
/// instead of piling up here, and the children's credit stops); control frames from
/// anywhere are always taken.
const PARENT_BACKLOG_LIMIT: usize = 1024;

/// Events a server's local side sends up (kind and payload), for [`run_node_with_events`].
/// The channel is bounded: a full channel makes the producer (the process's output
/// reader) wait, which makes the process wait: backpressure, never a dropped line.
pub type LocalEvents = mpsc::Receiver<(Kind, Bytes)>;

/// Runs `node` until its parent link closes. `children` holds each child's link, or the
/// error that kept it from connecting (those ids are reported lost on every command).
pub async fn run_node(
    node: Node,
    parent: Link,
    children: Vec<(NodeId, io::Result<Link>)>,
    handler: LocalHandler,
) -> io::Result<()> {
    let (_tx, rx) = mpsc::channel(1);
    run_node_with_events(node, parent, children, handler, rx).await
}

/// [`run_node`], also sending up every event that arrives on `events`.
pub async fn run_node_with_events(
    node: Node,
    parent: Link,
    children: Vec<(NodeId, io::Result<Link>)>,
    handler: LocalHandler,
    events: LocalEvents,
) -> io::Result<()> {
    run_node_full(node, parent, children, handler, events, Recovery::default()).await
}

/// Finds a new parent after the parent link died: resolves to a fresh, authenticated link
/// to a live ancestor, or `None` to give up (the node then ends).
pub type Reattach = Box<dyn FnMut() -> futures::future::BoxFuture<'static, Option<Link>> + Send>;

/// How a node survives failures around it (both optional).
#[derive(Default)]
pub struct Recovery {
    /// Links from descendants orphaned by a dead node between us, with their ids: their
    /// subtrees are routed to them from then on ([`Node::handle_adopt`]).
    pub adoptions: Option<mpsc::Receiver<(NodeId, Link)>>,
    /// Called when the parent link dies; a new link keeps the node (and its children)
    /// running under a new parent.
    pub reattach: Option<Reattach>,
    /// Keepalive settings instead of [`Liveness::from_env`].
    pub liveness: Option<Liveness>,
}

/// [`run_node_with_events`] with failure recovery: adopting orphaned descendants and
/// re-attaching to a live ancestor when the parent dies.
pub async fn run_node_full(
    mut node: Node,
    parent: Link,
    children: Vec<(NodeId, io::Result<Link>)>,
    mut handler: LocalHandler,
    mut events: LocalEvents,
    mut recovery: Recovery,
) -> io::Result<()> {
    // Frames from the parent and from children come on separate queues, so control from
    // above is never stuck behind a flood from below.
    let (up_tx, mut up_rx) = mpsc::channel::<Inbound>(1024);
    let (in_tx, mut in_rx) = mpsc::channel::<Inbound>(1024);
    let (bulk_tx, mut bulk_rx) = mpsc::unbounded_channel::<Bulk>();
    let up_queues = |up_tx: &mpsc::Sender<Inbound>| Queues {
        ctrl: up_tx.clone(),
        bulk: None,
    };
    let (reply_tx, mut reply_rx) = mpsc::unbounded_channel::<(u64, Bytes)>();
    let live = recovery.liveness.unwrap_or_else(Liveness::from_env);
    let heard_every = live.interval / 4;
    node.set_liveness(Some(live));
    // The master's parent is the front-end, which sends no keepalives.
    let watch_parent = node.id() != NodeId::Master;
    let start = Instant::now().into_std();
    let mut to_parent = spawn_link(Peer::Parent, parent, up_queues(&up_tx), heard_every);
    node.handle_link_open(start, Peer::Parent, watch_parent);
    let mut to_child: HashMap<NodeId, LinkTx> = HashMap::new();
    for (id, link) in children {
        match link {
            Ok(link) => {
                let queues = Queues {
                    ctrl: in_tx.clone(),
                    bulk: Some(bulk_tx.clone()),
                };
                let tx = spawn_link(Peer::Child(id), link, queues, heard_every);
                to_child.insert(id, tx);
                node.handle_link_open(start, Peer::Child(id), true);
            }
            Err(e) => node.handle_link_down(start, id, &format!("could not connect: {e}")),
        }
    }
    // Kept only while adoptions may add children; otherwise the end of every child link
    // closes the queue.
    let adopt_tx = recovery
        .adoptions
        .as_ref()
        .map(|_| (in_tx.clone(), bulk_tx.clone()));
    drop((in_tx, bulk_tx));
    let mut children_open = true;
    loop {
        let mut parent_gone = None;
        // Drain outputs first: they may arm a timer.
        while let Some(out) = node.poll_output() {
            match out {
                Output::ToParent(m) => {
                    let _ = to_parent.send(m);
                }
                Output::ToChild(c, m) => {
                    if to_child.get(&c).is_none_or(|tx| !tx.send(m)) {
                        to_child.remove(&c);
                        let now = Instant::now().into_std();
                        node.handle_link_down(now, c, "no link");
                    }
                }
                Output::Deliver {
                    op,
                    kind,
                    filter,
                    service,
                    payload,
                } => handler(Delivery {
                    op,
                    kind,
                    filter,
                    service,
                    payload,
                    reply: Replier {
                        op,
                        tx: reply_tx.clone(),
                    },
                }),
                // The node already reported the child's ids lost.
                Output::LinkDead(Peer::Child(c), _) => drop(to_child.remove(&c)),
                Output::LinkDead(Peer::Parent, why) => parent_gone = Some(why),
            }
        }
        let deadline = node.poll_timeout().map(Instant::from_std);
        let room = to_parent.backlog() < PARENT_BACKLOG_LIMIT;
        tokio::select! {
            biased;
            ev = up_rx.recv() => {
                let now = Instant::now().into_std();
                match ev {
                    Some(Inbound::Frame(_, m)) => node.handle_from_parent(now, m),
                    Some(Inbound::Heard(p, g)) if g == to_parent.generation => node.handle_heard(now, p),
                    Some(Inbound::Heard(..)) => {}
                    // The end of a parent link this node already replaced.
                    Some(Inbound::Closed(_, _, g)) if g != to_parent.generation => {}
                    Some(Inbound::Closed(_, w, _)) => parent_gone = Some(w),
                    None => parent_gone = Some("parent link closed".to_owned()),
                }
            }
            Some((op, payload)) = reply_rx.recv() => {
                node.handle_local_reply(Instant::now().into_std(), op, payload);
            }
            () = sleep_until(deadline) => node.handle_timeout(Instant::now().into_std()),
            Some((id, link)) = async {
                match recovery.adoptions.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                if node.handle_adopt(id) {
                    let (ctrl, bulk) = adopt_tx.clone().expect("adoptions come with a queue");
                    let queues = Queues { ctrl, bulk: Some(bulk) };
                    to_child.insert(id, spawn_link(Peer::Child(id), link, queues, heard_every));
                    node.handle_link_open(Instant::now().into_std(), Peer::Child(id), true);
                } else {
                    tracing::warn!(node = %node.id(), "refused adoption of {id}: not an orphan below this node");
                }
            }
            ev = in_rx.recv(), if children_open => {
                let now = Instant::now().into_std();
                match ev {
                    Some(Inbound::Frame(Peer::Parent, m)) => node.handle_from_parent(now, m),
                    Some(Inbound::Frame(Peer::Child(c), m)) => node.handle_from_child(now, c, m),
                    Some(Inbound::Heard(p @ Peer::Child(c), g)) => {
                        if to_child.get(&c).is_some_and(|tx| tx.generation == g) {
                            node.handle_heard(now, p);
                        }
                    }
                    Some(Inbound::Heard(Peer::Parent, _)) => {}
                    Some(Inbound::Closed(Peer::Parent, why, _)) => parent_gone = Some(why),
                    Some(Inbound::Closed(Peer::Child(c), why, g)) => {
                        if to_child.get(&c).is_some_and(|tx| tx.generation == g) {
                            to_child.remove(&c);
                            node.handle_link_down(now, c, &why);
                        }
                    }
                    // No children (left): only the parent can end this node.
                    None => children_open = false,
                }
            }
            Some((c, m, g)) = bulk_rx.recv(), if room => {
                // Taken in: its credit goes back to the child (on the link it came on).
                if let Some(tx) = to_child.get_mut(&c).filter(|tx| tx.generation == g)
                    && let Some(credit) = tx.grant.taken(&m)
                {
                    tx.send(credit);
                }
                node.handle_from_child(Instant::now().into_std(), c, m);
                // Turn about with this server's own output, which would otherwise wait
                // as long as any child has some.
                if let Ok((kind, payload)) = events.try_recv() {
                    node.handle_local_event(kind, payload);
                }
            }
            Some((kind, payload)) = events.recv(), if room => node.handle_local_event(kind, payload),
            () = to_parent.drained.notified(), if !room => {}
        }
        if let Some(why) = parent_gone {
            tracing::info!(node = %node.id(), "parent link ended: {why}");
            node.handle_parent_down();
            let reattach = recovery.reattach.as_mut().filter(|_| why != GOODBYE);
            let new_parent = match reattach {
                Some(reattach) => reattach().await,
                None => None,
            };
            match new_parent {
                Some(link) => {
                    tracing::info!(node = %node.id(), "re-attached to {}", link.peer);
                    to_parent = spawn_link(Peer::Parent, link, up_queues(&up_tx), heard_every);
                    node.handle_link_open(Instant::now().into_std(), Peer::Parent, true);
                }
                None => {
                    // The children end too, without looking for another parent: say so,
                    // and let the goodbyes reach them before this node goes.
                    let grace = std::time::Duration::from_secs(1);
                    let ends = to_child.into_values().map(|tx| {
                        tx.send(Control::Goodbye.to_message());
                        tx.finish(grace)
                    });
                    futures::future::join_all(ends).await;
                    return Ok(());
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
