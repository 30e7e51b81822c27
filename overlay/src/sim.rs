//! [`SimNet`]: a whole tree of [`Node`]s in one process with a virtual clock, for unit tests
//! and for the `sdm-sim` scale simulator. Every frame is really encoded and decoded.
//!
//! This is the second driver of the state machine (the tokio driver is the first); it is
//! never the only test of a feature.
//!
//! Besides killing and hanging servers it models output flow control end to end: servers'
//! programs print through [`SimNet::print`] (a producer that stops while its node says
//! [`Output::PauseLocal`]), the front-end takes output in and hands credit back unless told
//! not to ([`SimNet::set_frontend_reading`]), and a node can stop reading altogether
//! ([`SimNet::stall`]) and go on later ([`SimNet::resume`]).
//!
//! Built to hold millions of nodes: a node exists only while it holds state (it is made
//! when something arrives for it and dropped once [`Node::is_idle`]), every node shares
//! one topology, and events wait in one queue per instant (with a fixed link latency most
//! events share a few instants), in the order they were scheduled.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sdm_filters::Registry;
use sdm_proto::{IdSet, Kind, Message, Status, SyncMode};
use sdm_topology::{NodeId, Topology, Tree};

use crate::flow::{self, Grant};
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
        ranks: IdSet,
        payload: Bytes,
    },
    Timer {
        to: u64,
    },
}

impl Event {
    /// The position it happens at.
    fn to(&self) -> u64 {
        match self {
            Event::Frame { to, .. }
            | Event::LinkDown { to, .. }
            | Event::LocalReply { to, .. }
            | Event::Timer { to } => *to,
        }
    }
}

/// One reply group as the simulated front-end received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// What happened to the ids.
    pub status: Status,
    /// Who.
    pub sources: IdSet,
    /// Reply bytes (for lost groups: the reason; for error groups: the filter's error).
    pub payload: Bytes,
}

impl Group {
    fn from_message(m: &Message) -> Self {
        Self {
            status: m.aggregate.status.unwrap_or(Status::Replied),
            sources: m.source.clone(),
            payload: m.payload.clone(),
        }
    }
}

/// A simulated tree: the front-end, the master and `N` servers.
pub struct SimNet {
    topo: Arc<dyn Topology>,
    /// The shape with the ranks each server serves (every node shares it).
    tree: Tree,
    /// The node at each position while it holds state (the master always).
    nodes: Vec<Option<Box<Node>>>,
    /// Positions killed or hung: no node is made there any more.
    gone: Vec<bool>,
    /// The registry new nodes make their filters from (`None`: the built-ins).
    registry: Option<Arc<Registry>>,
    /// Scheduled timer per position (nanoseconds since the start, [`NOT_ARMED`] if none),
    /// to avoid queueing duplicates.
    armed: Vec<u64>,
    start: Instant,
    now: Instant,
    latency: Duration,
    /// Events by instant, each instant's in the order they were scheduled.
    queue: BTreeMap<Instant, VecDeque<Event>>,
    responder: Responder,
    frontend: Vec<Message>,
    /// Bytes (frames including their 4-byte prefix) the master received from its children.
    pub root_bytes: u64,
    /// Frames delivered in total.
    pub frames: u64,
    /// Whether the front-end takes output in (and so hands credit back).
    fe_reading: bool,
    /// Frames of `frontend` the front-end has looked at for credit.
    fe_taken: usize,
    /// Credit the front-end owes the master.
    fe_grant: Grant,
    /// Lines each position's program has printed that its node has not taken yet (only
    /// positions with such lines have an entry).
    producers: HashMap<u64, VecDeque<Bytes>>,
    /// Positions whose node paused local output ([`Output::PauseLocal`]).
    paused: Vec<bool>,
    /// Positions that neither read nor run for now ([`SimNet::stall`]), and their events.
    stalled: Vec<bool>,
    held: Vec<Event>,
    /// The most output each node had waiting for its parent's credit (only positions
    /// that ever had some have an entry).
    max_queued: HashMap<u64, i64>,
}

/// [`SimNet::armed`] of a position without a timer.
const NOT_ARMED: u64 = u64::MAX;

impl SimNet {
    /// A tree over `topo`, one rank per server; every link has one-way `latency`.
    pub fn new(topo: Arc<dyn Topology>, latency: Duration, responder: Responder) -> Self {
        Self::with_tree(Tree::identity(topo), latency, responder)
    }

    /// A tree of servers serving ranks as `tree`'s placement says (a server answers once
    /// for all its ranks in a command's destination); every link has one-way `latency`.
    pub fn with_tree(tree: Tree, latency: Duration, responder: Responder) -> Self {
        let topo = Arc::clone(tree.shape());
        let m = topo.positions() as usize;
        let mut nodes: Vec<Option<Box<Node>>> = Vec::new();
        nodes.resize_with(m, || None);
        nodes[0] = Some(Box::new(Node::new(NodeId::Master, tree.clone())));
        let start = Instant::now();
        Self {
            topo,
            tree,
            nodes,
            gone: vec![false; m],
            registry: None,
            armed: vec![NOT_ARMED; m],
            start,
            now: start,
            latency,
            queue: BTreeMap::new(),
            responder,
            frontend: Vec::new(),
            root_bytes: 0,
            frames: 0,
            fe_reading: true,
            fe_taken: 0,
            fe_grant: Grant::default(),
            producers: HashMap::new(),
            paused: vec![false; m],
            stalled: vec![false; m],
            held: Vec::new(),
            max_queued: HashMap::new(),
        }
    }

    /// The node at position `p`, made now if it held no state; `None` if it was killed or
    /// hung.
    fn node_mut(&mut self, p: u64) -> Option<&mut Node> {
        let p = p as usize;
        if self.gone[p] {
            return None;
        }
        let slot = &mut self.nodes[p];
        if slot.is_none() {
            let me = NodeId::from_position(p as u64);
            let topo = self.tree.clone();
            *slot = Some(Box::new(match &self.registry {
                Some(r) => Node::with_registry(me, topo, Arc::clone(r)),
                None => Node::new(me, topo),
            }));
        }
        slot.as_deref_mut()
    }

    /// Makes every live node's filters of later ops from `registry` (see
    /// [`Node::set_registry`]).
    pub fn set_registry(&mut self, registry: Arc<Registry>) {
        for n in self.nodes.iter_mut().flatten() {
            n.set_registry(Arc::clone(&registry));
        }
        self.registry = Some(registry);
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// The node at `id`, if alive and holding state: the master always is; a server's
    /// node is dropped while it is idle ([`Node::is_idle`]), as it would act like a new
    /// one.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        let p = id.position() as usize;
        if self.gone[p] {
            return None;
        }
        self.nodes[p].as_deref()
    }

    fn push(&mut self, at: Instant, ev: Event) {
        self.queue.entry(at).or_default().push_back(ev);
    }

    /// Kills server `s` now (like SIGKILL): its parent sees the link die after one latency;
    /// frames to or from it are dropped.
    pub fn kill(&mut self, s: u32) {
        let id = NodeId::Server(s);
        self.nodes[id.position() as usize] = None;
        self.gone[id.position() as usize] = true;
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
        let p = NodeId::Server(s).position() as usize;
        self.nodes[p] = None;
        self.gone[p] = true;
    }

    /// Stalls node `id` now: events for it (frames, replies, timers) wait until
    /// [`SimNet::resume`], and its program's output is not taken; its links stay open.
    /// Unlike [`SimNet::hang`] nothing is lost.
    pub fn stall(&mut self, id: NodeId) {
        self.stalled[id.position() as usize] = true;
    }

    /// Ends [`SimNet::stall`]: what waited for node `id` arrives now, in order.
    pub fn resume(&mut self, id: NodeId) {
        let pos = id.position();
        self.stalled[pos as usize] = false;
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|e| e.to() == pos);
        self.held = others;
        let now = self.now;
        for e in mine {
            self.push(now, e);
        }
        self.drain(pos);
    }

    /// Server `s`'s program prints `lines` (stdio payloads: stream tag, then the text). Its
    /// node takes them as its flow control lets it ([`Output::PauseLocal`]); the rest wait
    /// here, as a real program waits in `write`.
    pub fn print(&mut self, s: u32, lines: impl IntoIterator<Item = Bytes>) {
        let pos = NodeId::Server(s).position();
        self.producers.entry(pos).or_default().extend(lines);
        self.drain(pos);
    }

    /// Lines server `s`'s program printed that its node has not taken yet.
    pub fn unprinted(&self, s: u32) -> usize {
        self.producers
            .get(&NodeId::Server(s).position())
            .map_or(0, VecDeque::len)
    }

    /// Whether node `id` has paused its local output ([`Output::PauseLocal`]).
    pub fn paused(&self, id: NodeId) -> bool {
        self.paused[id.position() as usize]
    }

    /// The most output (bytes, see [`flow::cost`]) node `id` ever had waiting for its
    /// parent's credit ([`Node::queued_output`]).
    pub fn max_queued_output(&self, id: NodeId) -> i64 {
        self.max_queued.get(&id.position()).copied().unwrap_or(0)
    }

    /// Whether the front-end takes output in (the default) and so hands the master credit
    /// back. Turning it back on takes in everything that arrived meanwhile.
    pub fn set_frontend_reading(&mut self, on: bool) {
        self.fe_reading = on;
        self.take_output();
    }

    /// Output (stdio and events) that reached the front-end, in arrival order.
    pub fn output(&self) -> impl Iterator<Item = &Message> {
        self.frontend.iter().filter(|m| flow::is_bulk(m.kind))
    }

    /// Takes in the output that reached the front-end, handing credit back in steps.
    fn take_output(&mut self) {
        if !self.fe_reading {
            return;
        }
        let mut credits = Vec::new();
        for m in &self.frontend[self.fe_taken..] {
            if flow::is_bulk(m.kind)
                && let Some(c) = self.fe_grant.taken(m)
            {
                credits.push(c);
            }
        }
        self.fe_taken = self.frontend.len();
        for c in credits {
            self.command_message(c);
        }
    }

    /// Every node sends keepalives and watches its links as `live` says (the master does
    /// not watch its link to the front-end), from now on.
    pub fn set_liveness(&mut self, live: Liveness) {
        self.open_links_with(Some(live));
    }

    /// Tells every node that its links are open, as the driver does when a node starts
    /// (liveness clocks start, children get the rest of their windows).
    pub fn open_links(&mut self) {
        self.open_links_with(None);
    }

    /// [`SimNet::open_links`], first setting each node's liveness to `live` if given.
    fn open_links_with(&mut self, live: Option<Liveness>) {
        let now = self.now;
        for pos in 0..self.nodes.len() as u64 {
            let me = NodeId::from_position(pos);
            let children = self.topo.children(me);
            let Some(node) = self.node_mut(pos) else {
                continue;
            };
            if live.is_some() {
                node.set_liveness(live);
            }
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
            .first_key_value()
            .is_some_and(|(at, _)| *at <= end)
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
        let Some(mut first) = self.queue.first_entry() else {
            return false;
        };
        let at = *first.key();
        let ev = first
            .get_mut()
            .pop_front()
            .expect("no instant is kept empty");
        if first.get().is_empty() {
            first.remove();
        }
        self.now = at;
        let now = at;
        let pos = ev.to();
        if self.stalled[pos as usize] {
            self.held.push(ev);
            return true;
        }
        if self.gone[pos as usize] {
            return true; // dead: dropped
        }
        if let Event::Frame {
            from_child, frame, ..
        } = &ev
        {
            self.frames += 1;
            if pos == 0 && from_child.is_some() {
                self.root_bytes += frame.len() as u64 + 4;
            }
        }
        let node = self.node_mut(pos).expect("not gone");
        match ev {
            Event::Frame {
                from_child, frame, ..
            } => {
                let msg = Message::decode(frame).expect("simulated frames are well formed");
                match from_child {
                    None => node.handle_from_parent(now, msg),
                    Some(c) => node.handle_from_child(now, c, msg),
                }
            }
            Event::LinkDown { child, .. } => {
                node.handle_link_down(now, child, crate::LinkEnd::Closed)
            }
            Event::LocalReply {
                op, ranks, payload, ..
            } => node.handle_local_reply(now, op, &ranks, payload),
            Event::Timer { .. } => {
                node.handle_timeout(now);
                self.armed[pos as usize] = NOT_ARMED;
            }
        }
        self.drain(pos);
        true
    }

    /// Carries every output of `pos`'s node (its program printing while it may), then
    /// settles the node.
    fn drain(&mut self, pos: u64) {
        let p = pos as usize;
        loop {
            let Some(out) = self.nodes[p].as_deref_mut().and_then(Node::poll_output) else {
                // Nothing more to send: the program prints on while it may.
                if self.produce(pos) {
                    continue;
                }
                break;
            };
            if let Some(node) = self.nodes[p].as_deref() {
                let q = node.queued_output();
                if q > 0 {
                    let max = self.max_queued.entry(pos).or_insert(0);
                    *max = (*max).max(q);
                }
            }
            self.route(pos, out);
        }
        self.settle(pos);
    }

    /// Feeds the next line of `pos`'s program to its node; says whether one went in.
    fn produce(&mut self, pos: u64) -> bool {
        let p = pos as usize;
        if self.paused[p] || self.stalled[p] || self.gone[p] {
            return false;
        }
        let Some(lines) = self.producers.get_mut(&pos) else {
            return false;
        };
        let line = lines.pop_front();
        if lines.is_empty() {
            self.producers.remove(&pos);
        }
        let now = self.now;
        match (line, self.node_mut(pos)) {
            (Some(l), Some(node)) => {
                // A server's program is its first rank's.
                let Some(rank) = node.local_ranks().first() else {
                    return false;
                };
                node.handle_local_event(now, Kind::Stdio, rank, l);
                true
            }
            _ => false,
        }
    }

    /// Carries one output of `pos`'s node: a frame to its parent or a child after the
    /// latency, a reply of its program after the responder's delay.
    fn route(&mut self, pos: u64, out: Output) {
        let me = NodeId::from_position(pos);
        let parent = self.topo.parent_position(pos);
        let p = pos as usize;
        let at = self.now + self.latency;
        match out {
            Output::ToParent(m) => match parent {
                None => {
                    self.frontend.push(m);
                    self.take_output();
                }
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
            Output::PauseLocal => self.paused[p] = true,
            Output::ResumeLocal => self.paused[p] = false,
            Output::Deliver {
                op, ranks, payload, ..
            } => {
                if let Some((delay, reply)) = (self.responder)(me, &payload) {
                    let at = self.now + delay;
                    self.push(
                        at,
                        Event::LocalReply {
                            to: pos,
                            op,
                            ranks,
                            payload: reply,
                        },
                    );
                }
            }
        }
    }

    /// After `pos`'s node has nothing more to send: an idle node is dropped, a busy one's
    /// next deadline armed.
    fn settle(&mut self, pos: u64) {
        let p = pos as usize;
        let Some(node) = self.nodes[p].as_deref_mut() else {
            return;
        };
        if pos != 0 && node.is_idle() {
            // It would act like a new node (and has no deadline): made again when
            // something arrives.
            self.nodes[p] = None;
            return;
        }
        node.shrink_to_fit();
        if let Some(d) = node.poll_timeout() {
            let at = u64::try_from(d.saturating_duration_since(self.start).as_nanos())
                .unwrap_or(NOT_ARMED - 1);
            if at < self.armed[p] {
                self.armed[p] = at;
                self.push(d, Event::Timer { to: pos });
            }
        }
    }

    /// The reply groups the front-end received for `op`, in arrival order.
    pub fn groups(&self, op: u64) -> Vec<Group> {
        self.frontend
            .iter()
            .filter(|m| m.op == op && m.kind == Kind::Reply)
            .map(Group::from_message)
            .collect()
    }
}
