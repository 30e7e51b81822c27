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
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::error::LinkError;
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
    /// A frame from the link of this generation.
    Frame(Peer, Message, u64),
    /// A link ended: its peer, why, and its generation (so the end of a replaced link
    /// cannot remove the link that replaced it).
    Closed(Peer, String, u64),
}

/// Generations of links, unique in the process.
static LINK_GENERATION: AtomicU64 = AtomicU64::new(1);

/// Starts the reader and writer tasks of one link; returns the writer's queues. The reader
/// puts every frame it receives (but a goodbye, which ends the link) on `inbound`.
///
/// The writer has two queues: control (commands, replies, keepalives, credit) and bulk
/// (stdio and events, which keep their order among themselves). Control goes first, so a
/// reply is never stuck behind output waiting for the same link; how much bulk reaches
/// the writer at all is the node's flow control ([`flow`]): at most a window beyond what
/// the receiver took in.
fn spawn_link(peer: Peer, link: Link, inbound: mpsc::Sender<Inbound>) -> LinkTx {
    let generation = LINK_GENERATION.fetch_add(1, Ordering::Relaxed);
    let Link {
        mut reader,
        mut writer,
        peer: name,
    } = link;
    let (ctrl, mut ctrl_rx) = mpsc::unbounded_channel::<Message>();
    let (bulk, mut bulk_rx) = mpsc::unbounded_channel::<Message>();
    let inbound_w = inbound.clone();
    let name_w = name.clone();
    let writer_task = tokio::spawn(async move {
        loop {
            let m = tokio::select! {
                biased;
                m = ctrl_rx.recv() => match m {
                    Some(m) => m,
                    None => break,
                },
                Some(m) = bulk_rx.recv() => m,
                else => break,
            };
            // Batch: queue what else is waiting (control first), then flush once.
            let mut res = writer.feed(&m).await;
            let mut n = 1;
            while res.is_ok() && n < 256 {
                let Ok(next) = ctrl_rx.try_recv().or_else(|_| bulk_rx.try_recv()) else {
                    break;
                };
                res = writer.feed(&next).await;
                n += 1;
            }
            if let Err(e) = res.and(writer.flush().await) {
                let why = format!("write to {name_w} failed: {e}");
                let _ = inbound_w.send(Inbound::Closed(peer, why, generation)).await;
                return;
            }
        }
        let _ = writer.close().await;
    });
    let reader_task = tokio::spawn(async move {
        let why = loop {
            let m = match reader.next().await {
                Some(Ok(m)) => m,
                Some(Err(e)) => break format!("bad frame from {name}: {e}"),
                None => break format!("{name} closed the connection"),
            };
            if m.kind == Kind::Control {
                match Control::from_message(&m) {
                    Ok(Control::Goodbye) => break GOODBYE.to_owned(),
                    Ok(_) => {}
                    Err(e) => break format!("{name} sent a bad control frame: {e}"),
                }
            }
            if inbound
                .send(Inbound::Frame(peer, m, generation))
                .await
                .is_err()
            {
                return;
            }
        };
        let _ = inbound.send(Inbound::Closed(peer, why, generation)).await;
    });
    LinkTx {
        reader: AbortOnDrop(reader_task),
        ctrl,
        bulk,
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

/// The sending side of a link: its two queues.
struct LinkTx {
    /// The link's reader (aborted when the link is dropped).
    reader: AbortOnDrop,
    ctrl: mpsc::UnboundedSender<Message>,
    bulk: mpsc::UnboundedSender<Message>,
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

    fn send(&self, m: Message) -> bool {
        if flow::is_bulk(m.kind) {
            self.bulk.send(m).is_ok()
        } else {
            self.ctrl.send(m).is_ok()
        }
    }
}

/// Events a server's local side sends up (kind and payload), for [`run_node_with_events`].
/// The channel is bounded, and the driver stops reading it while the node says so
/// ([`Output::PauseLocal`]): a full channel makes the producer (the process's output
/// reader) wait, which makes the process wait: backpressure, never a dropped line.
pub type LocalEvents = mpsc::Receiver<(Kind, Bytes)>;

/// Runs `node` until its parent link closes. `children` holds each child's link, or the
/// error that kept it from connecting (those ids are reported lost on every command).
pub async fn run_node(
    node: Node,
    parent: Link,
    children: Vec<(NodeId, Result<Link, LinkError>)>,
    handler: LocalHandler,
) -> io::Result<()> {
    let (_tx, rx) = mpsc::channel(1);
    run_node_with_events(node, parent, children, handler, rx).await
}

/// [`run_node`], also sending up every event that arrives on `events`.
pub async fn run_node_with_events(
    node: Node,
    parent: Link,
    children: Vec<(NodeId, Result<Link, LinkError>)>,
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
    children: Vec<(NodeId, Result<Link, LinkError>)>,
    mut handler: LocalHandler,
    mut events: LocalEvents,
    mut recovery: Recovery,
) -> io::Result<()> {
    // Frames from the parent and from children come on separate queues, so control from
    // above is never stuck behind a flood from below.
    let (up_tx, mut up_rx) = mpsc::channel::<Inbound>(1024);
    let (in_tx, mut in_rx) = mpsc::channel::<Inbound>(1024);
    let (reply_tx, mut reply_rx) = mpsc::unbounded_channel::<(u64, Bytes)>();
    node.set_liveness(Some(recovery.liveness.unwrap_or_else(Liveness::from_env)));
    // The master's parent is the front-end, which sends no keepalives.
    let watch_parent = node.id() != NodeId::Master;
    let start = Instant::now().into_std();
    let mut to_parent = spawn_link(Peer::Parent, parent, up_tx.clone());
    node.handle_link_open(start, Peer::Parent, watch_parent);
    let mut to_child: HashMap<NodeId, LinkTx> = HashMap::new();
    for (id, link) in children {
        match link {
            Ok(link) => {
                to_child.insert(id, spawn_link(Peer::Child(id), link, in_tx.clone()));
                node.handle_link_open(start, Peer::Child(id), true);
            }
            Err(e) => node.handle_link_down(start, id, &format!("could not connect: {e}")),
        }
    }
    // Kept only while adoptions may add children; otherwise the end of every child link
    // closes the queue.
    let adopt_tx = recovery.adoptions.as_ref().map(|_| in_tx.clone());
    drop(in_tx);
    let mut children_open = true;
    // Whether the node asked to stop taking local output (flow control).
    let mut local_paused = false;
    // One timer for the node's deadline, moved only when the deadline changes (a new
    // registration per frame would cost more than the frame).
    let timer = tokio::time::sleep_until(Instant::now());
    tokio::pin!(timer);
    let mut armed: Option<Instant> = None;
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
                Output::PauseLocal => local_paused = true,
                Output::ResumeLocal => local_paused = false,
            }
        }
        if parent_gone.is_none() {
            let deadline = node.poll_timeout().map(Instant::from_std);
            if deadline != armed {
                if let Some(d) = deadline {
                    timer.as_mut().reset(d);
                }
                armed = deadline;
            }
            tokio::select! {
                biased;
                ev = up_rx.recv() => {
                    let now = Instant::now().into_std();
                    match ev {
                        Some(Inbound::Frame(_, m, g)) if g == to_parent.generation => {
                            node.handle_from_parent(now, m);
                        }
                        // From a parent link this node already replaced.
                        Some(Inbound::Frame(..)) => {}
                        Some(Inbound::Closed(_, _, g)) if g != to_parent.generation => {}
                        Some(Inbound::Closed(_, w, _)) => parent_gone = Some(w),
                        None => parent_gone = Some("parent link closed".to_owned()),
                    }
                }
                Some((op, payload)) = reply_rx.recv() => {
                    let now = Instant::now().into_std();
                    node.handle_local_reply(now, op, payload);
                    // Replies that are already waiting go in with this one.
                    for _ in 0..DRAIN {
                        let Ok((op, payload)) = reply_rx.try_recv() else { break };
                        node.handle_local_reply(now, op, payload);
                    }
                }
                () = &mut timer, if armed.is_some() => {
                    armed = None;
                    node.handle_timeout(Instant::now().into_std());
                }
                Some((id, link)) = async {
                    match recovery.adoptions.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => std::future::pending().await,
                    }
                } => {
                    if node.handle_adopt(id) {
                        let tx = adopt_tx.clone().expect("adoptions come with a queue");
                        to_child.insert(id, spawn_link(Peer::Child(id), link, tx));
                        node.handle_link_open(Instant::now().into_std(), Peer::Child(id), true);
                    } else {
                        tracing::warn!(node = %node.id(), "refused adoption of {id}: not an orphan below this node");
                    }
                }
                ev = in_rx.recv(), if children_open => {
                    let now = Instant::now().into_std();
                    // This frame, then those already queued behind it (a bounded number,
                    // so the parent's queue is looked at again soon).
                    let mut ev = ev;
                    for k in 0..DRAIN {
                        let current = |c: &NodeId, g: u64| to_child.get(c).is_some_and(|tx| tx.generation == g);
                        match ev {
                            Some(Inbound::Frame(Peer::Child(c), m, g)) if current(&c, g) => {
                                node.handle_from_child(now, c, m);
                                // Turn about with this server's own output, which would
                                // otherwise wait as long as any child has some (once per
                                // turn: a pause the node asks for is seen between turns).
                                if k == 0 && !local_paused && let Ok((kind, payload)) = events.try_recv() {
                                    node.handle_local_event(kind, payload);
                                }
                            }
                            Some(Inbound::Frame(..)) => {}
                            Some(Inbound::Closed(Peer::Parent, why, _)) => {
                                parent_gone = Some(why);
                                break;
                            }
                            Some(Inbound::Closed(Peer::Child(c), why, g)) => {
                                if current(&c, g) {
                                    to_child.remove(&c);
                                    node.handle_link_down(now, c, &why);
                                }
                            }
                            // No children (left): only the parent can end this node.
                            None => {
                                children_open = false;
                                break;
                            }
                        }
                        if k + 1 == DRAIN {
                            break;
                        }
                        ev = match in_rx.try_recv() {
                            Ok(next) => Some(next),
                            Err(_) => break,
                        };
                    }
                }
                Some((kind, payload)) = events.recv(), if !local_paused => {
                    node.handle_local_event(kind, payload);
                }
            }
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
                    to_parent = spawn_link(Peer::Parent, link, up_tx.clone());
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

/// Frames (or local replies) taken from a queue in one turn of the node's loop: fewer
/// wake-ups and timer checks per frame, and still a bounded time before the parent's queue
/// and the timer are looked at again.
const DRAIN: usize = 32;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::{SinkExt, StreamExt};
    use sdm_proto::{DEFAULT_MAX_FRAME, IdSet, Kind, Message, Status};
    use sdm_topology::{NodeId, Shape, Topology};

    use super::run_node;
    use crate::node::Node;
    use crate::transport::Link;

    /// Two ends of an in-memory link.
    fn pair() -> (Link, Link) {
        let (a, b) = tokio::io::duplex(1 << 20);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        (
            Link::new(Box::new(ar), Box::new(aw), "a", DEFAULT_MAX_FRAME),
            Link::new(Box::new(br), Box::new(bw), "b", DEFAULT_MAX_FRAME),
        )
    }

    /// Many frames from a child queued before the node runs are taken several per turn:
    /// every one goes up, in order (a turn once dropped the frame it fetched last).
    #[tokio::test]
    async fn frames_queued_past_one_turn_all_go_up_in_order() {
        let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(1));
        let node = Node::new(NodeId::Master, topo);
        let (parent_here, mut parent_there) = pair();
        let (child_here, mut child_there) = pair();
        let n = 200u64;
        for i in 0..n {
            let mut m = Message::reply(
                i,
                IdSet::single(0),
                Status::Replied,
                format!("event {i}").into(),
            );
            m.kind = Kind::Event;
            child_there.writer.feed(&m).await.unwrap();
        }
        child_there.writer.flush().await.unwrap();
        let node = tokio::spawn(run_node(
            node,
            parent_here,
            vec![(NodeId::Server(0), Ok(child_here))],
            Box::new(|_| {}),
        ));
        for i in 0..n {
            let m = parent_there.reader.next().await.unwrap().unwrap();
            assert_eq!(m.kind, Kind::Event);
            assert_eq!(&m.payload[..], format!("event {i}").as_bytes());
            assert_eq!(m.source, IdSet::single(0));
        }
        node.abort();
    }
}
