//! [`SimNet`]: a whole tree of [`Node`]s in one process with a virtual clock, for unit tests
//! and for the `sdm-sim` scale simulator. Every frame is really encoded and decoded.
//!
//! This is the second driver of the state machine (the tokio driver is the first); it is
//! never the only test of a feature.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sdm_filters::Registry;
use sdm_proto::{IdSet, Message, SyncMode};
use sdm_topology::{NodeId, Topology};

use crate::liveness::{Liveness, Peer};
use crate::node::{Node, Output};

/// How a simulated server answers a delivered command: `Some(reply)` after `delay`, or
/// `None` to stay silent.
pub type Responder = Box<dyn FnMut(NodeId, &Bytes) -> Option<(Duration, Bytes)>>;

#[derive(Debug)]
enum Event {
    /// Encoded frame to position `to` from its parent (`from_child = None`) or a child.
    Frame {
        to: u64,
        from_child: Option<NodeId>,
        frame: Bytes,
    },
    LinkDown {
        to: u64,
        child: NodeId,
    },
    LocalReply {
        to: u64,
        op: u64,
        payload: Bytes,
    },
    Timer {
        to: u64,
    },
}

pub use crate::frontend::ReplyGroup as Group;

/// A simulated tree: the front-end, the master and `N` servers.
pub struct SimNet {
    topo: Arc<dyn Topology>,
    nodes: Vec<Option<Node>>,
    /// Scheduled timer per position, to avoid queueing duplicates.
    armed: Vec<Option<Instant>>,
    start: Instant,
    now: Instant,
    latency: Duration,
    seq: u64,
    queue: BinaryHeap<Reverse<(Instant, u64, EventBox)>>,
    responder: Responder,
    frontend: Vec<Message>,
    /// Bytes (frames including their 4-byte prefix) the master received from its children.
    pub root_bytes: u64,
    /// Frames delivered in total.
    pub frames: u64,
}

/// Heap entry wrapper: orders by (time, seq) only.
#[derive(Debug)]
struct EventBox(Event);
impl PartialEq for EventBox {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for EventBox {}
impl PartialOrd for EventBox {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for EventBox {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl SimNet {
    /// A tree over `topo`; every link has one-way `latency`.
    pub fn new(topo: Arc<dyn Topology>, latency: Duration, responder: Responder) -> Self {
        let m = topo.positions() as usize;
        let nodes = (0..m)
            .map(|p| Some(Node::new(NodeId::from_position(p as u64), topo.clone())))
            .collect();
        let start = Instant::now();
        Self {
            topo,
            nodes,
            armed: vec![None; m],
            start,
            now: start,
            latency,
            seq: 0,
            queue: BinaryHeap::new(),
            responder,
            frontend: Vec::new(),
            root_bytes: 0,
            frames: 0,
        }
    }

    /// Makes every live node's filters of later ops from `registry` (see
    /// [`Node::set_registry`]).
    pub fn set_registry(&mut self, registry: Arc<Registry>) {
        for n in self.nodes.iter_mut().flatten() {
            n.set_registry(Arc::clone(&registry));
        }
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// The node at `id`, if alive.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes[id.position() as usize].as_ref()
    }

    fn push(&mut self, at: Instant, ev: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, EventBox(ev))));
    }

    /// Kills server `s` now (like SIGKILL): its parent sees the link die after one latency;
    /// frames to or from it are dropped.
    pub fn kill(&mut self, s: u32) {
        let id = NodeId::Server(s);
        self.nodes[id.position() as usize] = None;
        let parent = self.topo.parent(id).expect("a server has a parent");
        let at = self.now + self.latency;
        self.push(
            at,
            Event::LinkDown {
                to: parent.position(),
                child: id,
            },
        );
    }

    /// Hangs server `s` now (like SIGSTOP): its links stay open but it neither reads nor
    /// writes; only liveness ([`SimNet::set_liveness`]) can tell its parent.
    pub fn hang(&mut self, s: u32) {
        self.nodes[NodeId::Server(s).position() as usize] = None;
    }

    /// Every node sends keepalives and watches its links as `live` says (the master does
    /// not watch its link to the front-end), from now on.
    pub fn set_liveness(&mut self, live: Liveness) {
        let now = self.now;
        for pos in 0..self.nodes.len() as u64 {
            let me = NodeId::from_position(pos);
            let children = self.topo.children(me);
            let Some(node) = self.nodes[pos as usize].as_mut() else {
                continue;
            };
            node.set_liveness(Some(live));
            node.handle_link_open(now, Peer::Parent, me != NodeId::Master);
            for c in children {
                node.handle_link_open(now, Peer::Child(c), true);
            }
            self.drain(pos);
        }
    }

    /// Runs every event up to `elapsed` since the start (with liveness on, keepalives
    /// never let the queue run dry).
    pub fn run_until(&mut self, elapsed: Duration) {
        let end = self.start + elapsed;
        while self
            .queue
            .peek()
            .is_some_and(|Reverse((at, _, _))| *at <= end)
        {
            self.step();
        }
        self.now = self.now.max(end);
    }

    /// The front-end sends command `op` to `dest` (encoded, as on a real link).
    pub fn command(&mut self, op: u64, dest: IdSet, sync: SyncMode, payload: impl Into<Bytes>) {
        self.command_message(Message::command(op, dest, sync, payload));
    }

    /// The front-end sends `msg` (a command with any filter).
    pub fn command_message(&mut self, msg: Message) {
        let frame = msg.encode();
        let at = self.now + self.latency;
        self.push(
            at,
            Event::Frame {
                to: 0,
                from_child: None,
                frame,
            },
        );
    }

    /// Runs until nothing is left to do.
    pub fn run(&mut self) {
        while self.step() {}
    }

    /// Processes one event; false when the queue is empty.
    pub fn step(&mut self) -> bool {
        let Some(Reverse((at, _, EventBox(ev)))) = self.queue.pop() else {
            return false;
        };
        self.now = at;
        let now = at;
        let pos = match &ev {
            Event::Frame { to, .. }
            | Event::LinkDown { to, .. }
            | Event::LocalReply { to, .. }
            | Event::Timer { to } => *to,
        };
        let Some(node) = self.nodes[pos as usize].as_mut() else {
            return true; // dead: dropped
        };
        match ev {
            Event::Frame {
                from_child, frame, ..
            } => {
                self.frames += 1;
                if pos == 0 && from_child.is_some() {
                    self.root_bytes += frame.len() as u64 + 4;
                }
                let msg = Message::decode(frame).expect("simulated frames are well formed");
                match from_child {
                    None => node.handle_from_parent(now, msg),
                    Some(c) => node.handle_from_child(now, c, msg),
                }
            }
            Event::LinkDown { child, .. } => node.handle_link_down(now, child, "killed"),
            Event::LocalReply { op, payload, .. } => node.handle_local_reply(now, op, payload),
            Event::Timer { .. } => {
                self.armed[pos as usize] = None;
                node.handle_timeout(now);
            }
        }
        self.drain(pos);
        true
    }

    fn drain(&mut self, pos: u64) {
        let me = NodeId::from_position(pos);
        let parent = self.topo.parent_position(pos);
        while let Some(out) = self.nodes[pos as usize]
            .as_mut()
            .and_then(Node::poll_output)
        {
            let at = self.now + self.latency;
            match out {
                Output::ToParent(m) => match parent {
                    None => self.frontend.push(m),
                    Some(pp) => {
                        let frame = m.encode();
                        self.push(
                            at,
                            Event::Frame {
                                to: pp,
                                from_child: Some(me),
                                frame,
                            },
                        );
                    }
                },
                Output::ToChild(c, m) => {
                    let frame = m.encode();
                    self.push(
                        at,
                        Event::Frame {
                            to: c.position(),
                            from_child: None,
                            frame,
                        },
                    );
                }
                // A dead child's ids are already lost; the simulator re-attaches nobody.
                Output::LinkDead(..) => {}
                Output::Deliver { op, payload, .. } => {
                    if let Some((delay, reply)) = (self.responder)(me, &payload) {
                        let at = self.now + delay;
                        self.push(
                            at,
                            Event::LocalReply {
                                to: pos,
                                op,
                                payload: reply,
                            },
                        );
                    }
                }
            }
        }
        if let Some(d) = self.nodes[pos as usize]
            .as_ref()
            .and_then(Node::poll_timeout)
            && self.armed[pos as usize].is_none_or(|a| d < a)
        {
            self.armed[pos as usize] = Some(d);
            self.push(d, Event::Timer { to: pos });
        }
    }

    /// The reply groups the front-end received for `op`, in arrival order.
    pub fn groups(&self, op: u64) -> Vec<Group> {
        self.frontend
            .iter()
            .filter(|m| m.op == op)
            .map(Group::from_message)
            .collect()
    }
}
