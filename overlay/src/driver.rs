//! The tokio driver of a [`Node`]: one task per node reading and writing all its links
//! itself, a timer, and local delivery to a handler. Links come from [`crate::setup`].
//! A daemon runs the same task on a loop of its own when its links are plain tcp
//! ([`run_node_spawned`], `crate::poller`): the links are then read and written there, and
//! the timer is the loop's deadline.
//!
//! The driver owns no routing logic: it only turns `poll_output` into socket writes and
//! socket events into `handle_*` calls, like quinn's driver around quinn-proto.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker, ready};

use bytes::Bytes;
use futures::task::AtomicWaker;
use futures::{Sink, StreamExt};
use sdm_proto::{Control, FrameCodec, IdSet, Kind, Message, WireError};
use sdm_topology::NodeId;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use crate::poller;
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::error::LinkError;
use crate::flow;
use crate::liveness::Peer;
use crate::node::{Node, Output};
use crate::transport::{BoxReader, BoxWriter, Link};

/// A command delivered to this server, with the means to answer it.
#[derive(Debug)]
pub struct Delivery {
    /// Operation id.
    pub op: u64,
    /// This server's ranks in the command's destination: the command runs once for them.
    pub ranks: IdSet,
    /// Kind of the request (command or stdio).
    pub kind: Kind,
    /// Filter the command asked for.
    pub filter: sdm_proto::FilterName,
    /// Service the command is for (empty: the built-in `sdm` service); see
    /// `sdm_proto::Message::service`.
    pub service: sdm_proto::ServiceName,
    /// Opaque request bytes.
    pub payload: Bytes,
    /// Where the answer goes.
    pub reply: Replier,
}

/// Answers one [`Delivery`]; may be moved to another task and used later.
#[derive(Debug)]
pub struct Replier {
    op: u64,
    /// The ranks this replier answers for.
    ranks: IdSet,
    to: ReplyTo,
}

#[derive(Debug)]
enum ReplyTo {
    /// The node's task, through its [`Inbox`].
    Node(Arc<Inbox>),
    /// A channel, as `(op, payload)` (for testing handlers without a node).
    Channel(mpsc::UnboundedSender<(u64, Bytes)>),
}

impl ReplyTo {
    fn clone_to(&self) -> Self {
        match self {
            ReplyTo::Node(i) => ReplyTo::Node(i.clone()),
            ReplyTo::Channel(t) => ReplyTo::Channel(t.clone()),
        }
    }
}

impl Replier {
    /// A replier for op `op` whose reply goes to `tx` as `(op, payload)` (for testing
    /// handlers without a node).
    pub fn new(op: u64, tx: mpsc::UnboundedSender<(u64, Bytes)>) -> Self {
        Self {
            op,
            ranks: IdSet::single(0),
            to: ReplyTo::Channel(tx),
        }
    }

    /// This replier answering for `ranks` instead (for testing handlers of several ranks
    /// without a node).
    pub fn for_ranks(mut self, ranks: IdSet) -> Self {
        self.ranks = ranks;
        self
    }

    /// The ranks this replier answers for.
    pub fn ranks(&self) -> &IdSet {
        &self.ranks
    }

    /// One replier per rank this one answers for: each rank's reply goes up on its own,
    /// and the node merges them through the command's filter.
    pub fn split(self) -> Vec<(u32, Replier)> {
        self.ranks
            .iter()
            .map(|r| {
                (
                    r,
                    Replier {
                        op: self.op,
                        ranks: IdSet::single(r),
                        to: self.to.clone_to(),
                    },
                )
            })
            .collect()
    }

    /// Sends the local reply, for all the ranks this replier answers for. If the node is
    /// gone, the reply is dropped.
    pub fn send(self, payload: impl Into<Bytes>) {
        match self.to {
            ReplyTo::Node(inbox) => inbox.push(self.op, self.ranks, payload.into()),
            ReplyTo::Channel(tx) => {
                let _ = tx.send((self.op, payload.into()));
            }
        }
    }
}

/// Where the handlers' replies wait for the node's task. A reply made while the task is in
/// a turn (a handler answering at once, the usual case) does not wake it: the turn takes
/// it before it ends. Waking would cost the task a second turn per command, finding
/// nothing, and the runtime another trip through its driver. A reply from elsewhere (a
/// spawned task, another thread, later) wakes the task as a channel would.
#[derive(Debug, Default)]
struct Inbox {
    queue: Mutex<VecDeque<(u64, IdSet, Bytes)>>,
    turn: TurnWaker,
}

/// Wakes a node's task, except while it is in a turn, which looks for itself at its end:
/// the protocol of the [`Inbox`] and of [`Readiness`]. Whoever has something for the task
/// stores it first, then calls [`TurnWaker::wake`]; a turn's end calls
/// [`TurnWaker::leave`], then looks at the store. Either the turn sees what was stored, or
/// the waker sees the flag cleared and wakes the task.
#[derive(Debug, Default)]
struct TurnWaker {
    /// The node's task is in a turn.
    in_turn: AtomicBool,
    task: AtomicWaker,
}

impl TurnWaker {
    /// A turn starts: what is stored from now on is the turn's to see.
    fn enter(&self) {
        self.in_turn.store(true, Ordering::SeqCst);
    }

    /// Something was stored for the task: wake it, unless it is in a turn.
    fn wake(&self) {
        if !self.in_turn.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }

    /// A turn ends: what is stored from now on wakes the task (look at the store after
    /// this).
    fn leave(&self, cx: &Context<'_>) {
        self.task.register(cx.waker());
        self.in_turn.store(false, Ordering::SeqCst);
    }
}

impl Inbox {
    fn push(&self, op: u64, ranks: IdSet, payload: Bytes) {
        self.lock().push_back((op, ranks, payload));
        self.turn.wake();
    }

    fn pop(&self) -> Option<(u64, IdSet, Bytes)> {
        self.lock().pop_front()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, IdSet, Bytes)>> {
        // A panic while pushing or popping leaves the queue whole.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A turn starts: replies made from now on are taken by it.
    fn enter(&self) {
        self.turn.enter();
    }

    /// A turn ends: replies made from now on wake the task. Whether some are waiting.
    fn leave(&self, cx: &Context<'_>) -> bool {
        self.turn.leave(cx);
        !self.lock().is_empty()
    }
}

/// Which of a driver's sources woke its task since a turn last looked. Each source (the
/// parent's reader, each child's, the local events, the adoptions) is polled with a waker
/// of its own, which marks the source here and then wakes the task: a turn reads the
/// sources that have something instead of polling every link of the node (a master woken
/// by one child's reply polls that child's reader, not all of them, nor its parent's).
///
/// A mark is two atomic ORs (the source's bit, and its word's bit in a summary), no lock:
/// it runs at every wake-up, usually with the process's memory cold. Marks made during a
/// turn do not wake the task (the turn sees them at its end), as with the [`Inbox`].
struct Readiness {
    /// Bit `w` set: word `w` of `words` may have marks.
    summary: AtomicU64,
    /// A bit per source below [`MARKED_SOURCES`].
    words: Box<[AtomicU64]>,
    /// Some source at or above [`MARKED_SOURCES`] was marked (a node with more children
    /// than that reads all of those when one of them woke it).
    beyond: AtomicBool,
    /// Entered by [`Readiness::take`], left by [`Readiness::leave`].
    turn: TurnWaker,
}

/// Sources with a bit of their own in [`Readiness`]: 64 words of 64.
const MARKED_SOURCES: usize = 64 * 64;

impl Default for Readiness {
    fn default() -> Self {
        Self {
            summary: AtomicU64::new(0),
            words: (0..MARKED_SOURCES / 64)
                .map(|_| AtomicU64::new(0))
                .collect(),
            beyond: AtomicBool::new(false),
            turn: TurnWaker::default(),
        }
    }
}

/// Source numbers of [`Readiness`]: the parent link, the local events, the adoptions,
/// then child slot `k` at `CHILD0 + k`.
const PARENT: usize = 0;
const EVENTS: usize = 1;
const ADOPTIONS: usize = 2;
const CHILD0: usize = 3;

/// The waker source `source` is polled with.
struct SourceWaker {
    source: usize,
    ready: Arc<Readiness>,
}

impl Wake for SourceWaker {
    fn wake(self: Arc<Self>) {
        self.ready.mark(self.source);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.mark(self.source);
    }
}

impl Readiness {
    /// Source `source` has something (or was closed): mark it, and wake the task unless
    /// it is in a turn.
    fn mark(&self, source: usize) {
        if source < MARKED_SOURCES {
            self.words[source / 64].fetch_or(1 << (source % 64), Ordering::SeqCst);
            self.summary.fetch_or(1 << (source / 64), Ordering::SeqCst);
        } else {
            self.beyond.store(true, Ordering::SeqCst);
        }
        self.turn.wake();
    }

    /// The waker of source `source`.
    fn waker(self: &Arc<Self>, source: usize) -> Waker {
        Waker::from(Arc::new(SourceWaker {
            source,
            ready: Arc::clone(self),
        }))
    }

    /// A turn starts: moves the marks into `want` (a flag per source, set for each marked
    /// one) and clears them; marks from now on are the turn's to see.
    fn take(&self, want: &mut Vec<bool>) {
        self.turn.enter();
        // A mark between the two swaps is taken now or in the next turn (its summary bit
        // is set after its word bit): never lost.
        let mut summary = self.summary.swap(0, Ordering::SeqCst);
        while summary != 0 {
            let w = summary.trailing_zeros() as usize;
            summary &= summary - 1;
            let mut bits = self.words[w].swap(0, Ordering::SeqCst);
            while bits != 0 {
                let s = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                set_wanted(want, s);
            }
        }
        if self.beyond.swap(false, Ordering::SeqCst) {
            for w in want.iter_mut().skip(MARKED_SOURCES) {
                *w = true;
            }
        }
    }

    /// A turn ends: marks from now on wake the task. Whether some came since
    /// [`Readiness::take`].
    fn leave(&self, cx: &Context<'_>) -> bool {
        self.turn.leave(cx);
        self.summary.load(Ordering::SeqCst) != 0 || self.beyond.load(Ordering::SeqCst)
    }
}

/// Sets source `source`'s flag in `want`, growing it as needed.
fn set_wanted(want: &mut Vec<bool>, source: usize) {
    if want.len() <= source {
        want.resize(source + 1, false);
    }
    want[source] = true;
}

/// Runs a command locally: called on the node's task, so it must not block; spawn for
/// anything slow and answer through [`Delivery::reply`].
pub type LocalHandler = Box<dyn FnMut(Delivery) + Send>;

pub use crate::liveness::{KEEPALIVE_ENV, Liveness};

/// Why a link ended when the peer said goodbye: an orderly end of the session (the tree
/// is shutting down), after which a node does not look for a new parent.
const GOODBYE: &str = "the parent ended the session";

/// One link as the node's task drives it: its framed halves and the frames waiting to be
/// written. Two queues: control (commands, replies, keepalives, credit) and bulk (stdio and
/// events, which keep their order among themselves). Control goes first, so a reply is
/// never stuck behind output waiting for the same link; how much bulk is queued at all is
/// the node's flow control ([`flow`]): at most a window beyond what the receiver took in.
struct LinkIo {
    reader: Frames,
    writer: FramedWrite<BoxWriter, FrameCodec>,
    /// The peer, for errors.
    name: String,
    ctrl: VecDeque<Message>,
    bulk: VecDeque<Message>,
    /// Frames handed to the writer's buffer and not flushed yet.
    unflushed: bool,
    /// A frame [`LinkIo::push`] could not encode: the link fails at its next write.
    broken: Option<String>,
    /// Frames read from this link per turn, in [`DRAIN`]s: a child's [`flow::weight`], so
    /// the node's time is shared by the ranks behind each link, like its flow-control
    /// window.
    weight: usize,
    /// What the reader is polled with: marks this link in the driver's [`Readiness`].
    waker: Waker,
    /// Its socket, when the link runs on the node's own loop (which can mute its reads).
    socket: Option<poller::SocketRef>,
}

/// Where a link's frames come from.
enum Frames {
    /// Straight from its socket, on the node's own loop.
    Own(poller::FrameReader),
    /// Through the runtime (a link of another transport, or off the node's own loop).
    Framed(FramedRead<BoxReader, FrameCodec>),
}

impl LinkIo {
    fn new(link: Link, waker: Waker) -> Self {
        // On a node's own loop, a tcp link is read and written there.
        let (reader, writer, peer, socket) = match poller::take_over_parts(link) {
            Ok(t) => (Frames::Own(t.frames), t.writer, t.peer, Some(t.socket)),
            Err(link) => (Frames::Framed(link.reader), link.writer, link.peer, None),
        };
        Self {
            reader,
            writer,
            name: peer,
            ctrl: VecDeque::new(),
            bulk: VecDeque::new(),
            unflushed: false,
            broken: None,
            weight: 1,
            waker,
            socket,
        }
    }

    /// Whether the link's reads are muted on the node's own loop.
    fn muted(&self) -> bool {
        self.socket.as_ref().is_some_and(poller::SocketRef::muted)
    }

    fn set_muted(&self, on: bool) {
        if let Some(s) = &self.socket {
            s.set_muted(on);
        }
    }

    /// The link to child `id` of `node`, just opened: the node takes it up (its window,
    /// weighted by the servers below it) and the driver reads it by the same weight.
    fn open_child(
        node: &mut Node,
        now: std::time::Instant,
        id: NodeId,
        link: Link,
        waker: Waker,
    ) -> Self {
        node.handle_link_open(now, Peer::Child(id), true);
        Self {
            weight: node.child_weight(id) as usize,
            ..Self::new(link, waker)
        }
    }

    /// Hands `m` to the link: control frames go out ahead of bulk ones still queued.
    ///
    /// A control frame (commands, replies) goes straight into the writer's buffer when no
    /// other control frame waits and the buffer takes it without a write: where
    /// [`LinkIo::poll_write`] would put it, without moving the message through the queue.
    /// (`start_send` without `poll_ready`: below the backpressure boundary tokio-util's
    /// `poll_ready` does nothing but say ready, so the buffer is checked here instead.)
    fn push(&mut self, m: Message) {
        if flow::is_bulk(m.kind) {
            self.bulk.push_back(m);
        } else if self.ctrl.is_empty()
            && self.broken.is_none()
            && self.writer.write_buffer().len() < self.writer.backpressure_boundary()
        {
            match Pin::new(&mut self.writer).start_send(&m) {
                Ok(()) => self.unflushed = true,
                Err(e) => self.broken = Some(write_failed(e, &self.name)),
            }
        } else {
            self.ctrl.push_back(m);
        }
    }

    /// Nothing queued and nothing buffered unwritten.
    fn idle(&self) -> bool {
        !self.unflushed && self.ctrl.is_empty() && self.bulk.is_empty() && self.broken.is_none()
    }

    /// The next frame from the peer (the link's own waker registered if there is none
    /// yet), or why the link ended (the peer closed it, sent a bad
    /// frame, or said goodbye).
    fn poll_frame(&mut self) -> Poll<Result<Message, String>> {
        let mut cx = Context::from_waker(&self.waker);
        let next = match &mut self.reader {
            Frames::Own(r) => r.poll_frame(&cx),
            Frames::Framed(r) => r.poll_next_unpin(&mut cx).map(Option::transpose),
        };
        let m = match ready!(next) {
            Ok(Some(m)) => m,
            Err(e) => return Poll::Ready(Err(format!("bad frame from {}: {e}", self.name))),
            Ok(None) => return Poll::Ready(Err(format!("{} closed the connection", self.name))),
        };
        if m.kind == Kind::Control {
            match Control::from_message(&m) {
                Ok(Control::Goodbye) => return Poll::Ready(Err(GOODBYE.to_owned())),
                Ok(_) => {}
                Err(e) => {
                    let why = format!("{} sent a bad control frame: {e}", self.name);
                    return Poll::Ready(Err(why));
                }
            }
        }
        Poll::Ready(Ok(m))
    }

    /// Moves queued frames (control first) into the writer's buffer while it takes them,
    /// then flushes once: several frames per system call. Never waits: what the socket does
    /// not take stays queued, and the task is woken when it can take more.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Result<(), String> {
        if let Some(why) = self.broken.take() {
            return Err(why);
        }
        let fail = write_failed;
        while !(self.ctrl.is_empty() && self.bulk.is_empty()) {
            match Sink::<&Message>::poll_ready(Pin::new(&mut self.writer), cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Err(fail(e, &self.name)),
                Poll::Pending => break,
            }
            let m = match self.ctrl.pop_front() {
                Some(m) => m,
                None => self.bulk.pop_front().expect("a queue is not empty"),
            };
            Pin::new(&mut self.writer)
                .start_send(&m)
                .map_err(|e| fail(e, &self.name))?;
            self.unflushed = true;
        }
        if self.unflushed {
            match Sink::<&Message>::poll_flush(Pin::new(&mut self.writer), cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(e)) => return Err(fail(e, &self.name)),
                Poll::Pending => {}
            }
        }
        Ok(())
    }
}

/// Why a write to `name` failed.
fn write_failed(e: WireError, name: &str) -> String {
    format!("write to {name} failed: {e}")
}

/// The children's links, by id, in a stable order (so the turns can go round them fairly).
#[derive(Default)]
struct Children {
    slots: Vec<Option<(NodeId, LinkIo)>>,
    index: HashMap<NodeId, usize, rustc_hash::FxBuildHasher>,
    /// Where the next turn starts reading.
    next: usize,
}

impl Children {
    /// The slot the next [`Children::insert`] takes.
    fn next_slot(&self) -> usize {
        self.slots.len()
    }

    fn insert(&mut self, id: NodeId, link: LinkIo) {
        self.remove(id);
        self.index.insert(id, self.slots.len());
        self.slots.push(Some((id, link)));
    }

    fn remove(&mut self, id: NodeId) {
        if let Some(k) = self.index.remove(&id) {
            self.slots[k] = None;
        }
    }

    fn get_mut(&mut self, id: NodeId) -> Option<&mut LinkIo> {
        let k = *self.index.get(&id)?;
        self.slots[k].as_mut().map(|(_, l)| l)
    }

    fn links_mut(&mut self) -> impl Iterator<Item = &mut (NodeId, LinkIo)> {
        self.slots.iter_mut().flatten()
    }
}

/// The node's timer: tokio's, or on a node's own loop ([`poller`]) the loop's deadline.
enum Timer {
    Tokio(Pin<Box<Sleep>>),
    Own,
}

impl Timer {
    fn new() -> Self {
        if poller::active() {
            Timer::Own
        } else {
            Timer::Tokio(Box::pin(tokio::time::sleep_until(Instant::now())))
        }
    }

    /// Sets the timer to `at`.
    fn reset(&mut self, at: Instant) {
        match self {
            Timer::Tokio(sleep) => sleep.as_mut().reset(at),
            Timer::Own => poller::set_deadline(at.into_std()),
        }
    }

    /// Whether the timer, set to `at`, is due at `now` (if not, the task is woken when it
    /// is).
    fn due(&mut self, cx: &mut Context<'_>, at: Instant, now: std::time::Instant) -> bool {
        match self {
            Timer::Tokio(sleep) => sleep.as_mut().poll(cx).is_ready(),
            // The loop keeps the deadline `reset` gave it until it has passed, and polls
            // the task again then.
            Timer::Own => now >= at.into_std(),
        }
    }
}

/// What a turn of the node's task ended with.
enum Turn {
    /// Something was handled: look again (tokio's cooperative budget makes the task yield
    /// when it has run long enough).
    Busy,
    /// The parent link ended, for this reason.
    ParentGone(String),
}

/// Frames taken from one link (or local replies, or local events) in one turn of the
/// node's task: several per wake-up, and still a bounded time before the parent, the other
/// children and the timer are looked at again.
const DRAIN: usize = 32;

/// Children a node may have and still mute some of them ([`Mute`]).
const MUTE_MAX_CHILDREN: usize = 32;

/// Frames taken from all the children together in one turn, at most (a node with a
/// thousand children still reads its parent and runs its timer between batches).
const TURN_FRAMES: usize = 256;

/// Which children's reads a node on its own loop mutes while it waits for their replies
/// ([`Node::reply_waits`], [`poller::SocketRef::set_muted`]): those it waits for but the
/// one it expects last (the anchor), read whenever the loop wakes, except a child that an
/// op not sent to the anchor waits for (its reply may complete that op). A child stays muted
/// once it answered, until the node waits for no child at all (no system call per reply).
/// A wait that ran out with nothing from them ([`poller::MUTE_POLL`]: an op that takes
/// long) pauses muting until the anchor sends a frame, so a long wait costs one extra
/// wake-up and not one per poll. A node with more than [`MUTE_MAX_CHILDREN`] children
/// mutes none.
#[derive(Default)]
struct Mute {
    /// The children in flight ops wait for, sorted.
    waits: Vec<NodeId>,
    /// Those of them an op waits for without the anchor, sorted.
    heard: Vec<NodeId>,
    anchor: Option<NodeId>,
    paused: bool,
    /// Since the loop last waited: a frame came from the anchor, from a muted child.
    anchor_spoke: bool,
    muted_spoke: bool,
    /// A child is muted.
    any: bool,
}

/// A node and everything its task drives: the links, the local handler and its replies,
/// the timer.
struct Driver {
    node: Node,
    parent: LinkIo,
    children: Children,
    handler: LocalHandler,
    /// The handlers' replies.
    inbox: Arc<Inbox>,
    events: LocalEvents,
    adoptions: Option<mpsc::Receiver<(NodeId, Link)>>,
    /// Whether the node asked to stop taking local output (flow control).
    local_paused: bool,
    /// The node's deadline the timer is set to.
    armed: Option<Instant>,
    /// Why the parent link ended, once it has.
    parent_gone: Option<String>,
    /// Which sources woke the task.
    ready: Arc<Readiness>,
    /// The sources a turn reads, by source number ([`PARENT`]...): those marked in
    /// `ready`, and those the last turn left with more than it took. A source not wanted
    /// was last polled until it had nothing (so its waker is registered), or is closed, or
    /// is an empty child slot.
    want: Vec<bool>,
    /// The wakers of the local events and of the adoptions.
    events_waker: Waker,
    adoptions_waker: Waker,
    /// The children's muted reads, on the node's own loop (`None` elsewhere).
    mute: Option<Mute>,
    /// The time of this turn: when the loop stopped waiting ([`poller::loop_time`]), or
    /// when the turn began. Frames, replies and the timer are handled at this time.
    now: std::time::Instant,
}

impl Driver {
    /// Carries out what the node asked for: frames onto their links' queues, commands to
    /// the handler, link ends, pauses.
    fn dispatch(&mut self) {
        while let Some(out) = self.node.poll_output() {
            match out {
                Output::ToParent(m) => self.parent.push(m),
                Output::ToChild(c, m) => match self.children.get_mut(c) {
                    Some(link) => link.push(m),
                    None => self.node.handle_link_down(self.now, c, "no link"),
                },
                Output::Deliver {
                    op,
                    ranks,
                    kind,
                    filter,
                    service,
                    payload,
                } => (self.handler)(Delivery {
                    op,
                    ranks: ranks.clone(),
                    kind,
                    filter,
                    service,
                    payload,
                    reply: Replier {
                        op,
                        ranks,
                        to: ReplyTo::Node(self.inbox.clone()),
                    },
                }),
                // The node already reported the child's ids lost.
                Output::LinkDead(Peer::Child(c), _) => self.children.remove(c),
                Output::LinkDead(Peer::Parent, why) => {
                    self.parent_gone.get_or_insert(why);
                }
                Output::PauseLocal => self.local_paused = true,
                Output::ResumeLocal => self.local_paused = false,
            }
        }
    }

    /// One turn: what is queued goes out; frames from the parent first (a command waits
    /// behind at most one turn of the children's frames, [`TURN_FRAMES`]), local replies,
    /// the timer, adoptions, the children in turn, local output; then every link's queue
    /// goes out again and the timer is moved to the node's deadline.
    ///
    /// Pending when every source was read until it had nothing (so each of them will wake
    /// the task): one turn per wake-up. `Busy` only when a source may have more than the
    /// turn took (a drain limit, the tokio budget), or the turn's end changed what must be
    /// looked at (a link failed, local output resumed, the timer is already due).
    fn poll_turn(&mut self, cx: &mut Context<'_>, timer: &mut Timer) -> Poll<Turn> {
        // What the last turn queued goes out before this one reads (reads use the task's
        // tokio budget too, and may leave none for the writes at the end).
        self.inbox.enter();
        self.ready.take(&mut self.want);
        self.now = poller::loop_time().unwrap_or_else(std::time::Instant::now);
        let mut more = self.write_all(cx);
        if self.want[PARENT] {
            let mut drained = false;
            for _ in 0..DRAIN {
                match self.parent.poll_frame() {
                    Poll::Ready(Ok(m)) => self.node.handle_from_parent(self.now, m),
                    Poll::Ready(Err(why)) => {
                        self.parent_gone.get_or_insert(why);
                        drained = true;
                        break;
                    }
                    Poll::Pending => {
                        drained = true;
                        break;
                    }
                }
            }
            self.want[PARENT] = !drained;
            more |= !drained;
        }
        self.dispatch();
        more |= self.take_replies();
        if self.armed.is_some_and(|at| timer.due(cx, at, self.now)) {
            self.armed = None;
            // Due by tokio's timer may be later than the turn's time.
            self.now = self.now.max(Instant::now().into_std());
            self.node.handle_timeout(self.now);
        }
        self.dispatch();
        if let Some(rx) = self.adoptions.as_mut().filter(|_| self.want[ADOPTIONS]) {
            let adopted = match rx.poll_recv(&mut Context::from_waker(&self.adoptions_waker)) {
                Poll::Ready(Some(a)) => Some(a),
                Poll::Ready(None) | Poll::Pending => {
                    self.want[ADOPTIONS] = false;
                    None
                }
            };
            if let Some((id, link)) = adopted {
                more = true;
                self.adopt(id, link);
            }
        }
        more |= self.read_children();
        // This server's own output, which takes turns with the children's. (Paused, or
        // paused by what it took: left wanted, and read in a turn after output resumes.)
        if self.want[EVENTS] && !self.local_paused {
            for _ in 0..DRAIN {
                if self.local_paused {
                    break;
                }
                let Poll::Ready(Some((kind, rank, payload))) = self
                    .events
                    .poll_recv(&mut Context::from_waker(&self.events_waker))
                else {
                    self.want[EVENTS] = false;
                    break;
                };
                self.node.handle_local_event(self.now, kind, rank, payload);
                self.dispatch();
            }
        }
        // Handlers that answered during this turn (their replies do not wake the task).
        more |= self.take_replies();
        // A link whose write failed changes the node's state (its ids are lost, replies
        // may now be complete): look again, so what that produced goes out.
        more |= self.write_all(cx);
        more |= self.inbox.leave(cx);
        more |= self.ready.leave(cx);
        // Events left to read (a drain limit, or output paused and resumed since they were
        // looked at): nothing will wake the task for what waits there.
        more |= self.want[EVENTS] && !self.local_paused;
        if let Some(why) = self.parent_gone.take() {
            return Poll::Ready(Turn::ParentGone(why));
        }
        self.arm(timer);
        more |= self.armed.is_some_and(|at| timer.due(cx, at, self.now));
        if !more {
            self.mute_children();
        }
        // Everything the node asked for was handed to a link before the last writes (a
        // frame left in the node now would wait for an unrelated wake-up).
        debug_assert!(
            !self.node.has_output(),
            "output left in the node at a turn's end"
        );
        if more {
            Poll::Ready(Turn::Busy)
        } else {
            Poll::Pending
        }
    }

    /// The handlers' replies, up to [`DRAIN`], and what they complete handed to the
    /// links' queues: whether there may be more.
    fn take_replies(&mut self) -> bool {
        let mut more = true;
        for _ in 0..DRAIN {
            let Some((op, ranks, payload)) = self.inbox.pop() else {
                more = false;
                break;
            };
            self.node.handle_local_reply(self.now, op, &ranks, payload);
        }
        self.dispatch();
        more
    }

    /// Frames from the children, each up to [`DRAIN`] times its weight, at most
    /// [`TURN_FRAMES`] in all and while the task's tokio budget lasts, starting where the
    /// last turn stopped: the parent, the timer and the writes come round again soon
    /// however many children there are. Whether a child may have more than was taken.
    fn read_children(&mut self) -> bool {
        let mut more = false;
        let n = self.children.slots.len();
        let start = self.children.next;
        self.children.next = if n == 0 { 0 } else { (start + 1) % n };
        let mut taken = 0;
        for k in 0..n {
            let slot = (start + k) % n;
            if !self.want.get(CHILD0 + slot).copied().unwrap_or(false) {
                continue;
            }
            if taken >= TURN_FRAMES || !tokio::task::coop::has_budget_remaining() {
                // Not every child was looked at: the next turn starts here.
                self.children.next = slot;
                return true;
            }
            let budget = self.children.slots[slot]
                .as_ref()
                .map_or(0, |(_, l)| DRAIN * l.weight);
            if budget == 0 {
                self.want[CHILD0 + slot] = false;
                continue;
            }
            let mut drained = false;
            for _ in 0..budget {
                let Some((c, link)) = self.children.slots[slot].as_mut() else {
                    drained = true;
                    break;
                };
                let c = *c;
                match link.poll_frame() {
                    Poll::Ready(Ok(m)) => {
                        taken += 1;
                        if let Some(mute) = &mut self.mute {
                            mute.muted_spoke |= link.muted();
                            mute.anchor_spoke |= mute.anchor == Some(c);
                        }
                        self.node.handle_from_child(self.now, c, m);
                    }
                    Poll::Ready(Err(mut why)) => {
                        if why == GOODBYE {
                            why = format!("{c} said goodbye");
                        }
                        self.children.remove(c);
                        self.node.handle_link_down(self.now, c, &why);
                    }
                    Poll::Pending => drained = true,
                }
                self.dispatch();
                if drained {
                    break;
                }
            }
            self.want[CHILD0 + slot] = !drained;
            more |= !drained;
        }
        more
    }

    /// Takes the link of orphan `id` as a child, if it is one below this node.
    fn adopt(&mut self, id: NodeId, link: Link) {
        if self.node.handle_adopt(id) {
            let slot = self.children.next_slot();
            let waker = self.ready.waker(CHILD0 + slot);
            let now = Instant::now().into_std();
            let io = LinkIo::open_child(&mut self.node, now, id, link, waker);
            self.children.insert(id, io);
            set_wanted(&mut self.want, CHILD0 + slot);
        } else {
            tracing::warn!(node = %self.node.id(), "refused adoption of {id}: not an orphan below this node");
        }
    }

    /// Every link's queued frames out, as far as the sockets take them; a link whose write
    /// failed ends. Whether one did.
    fn write_all(&mut self, cx: &mut Context<'_>) -> bool {
        if let Err(why) = self.parent.poll_write(cx) {
            self.parent_gone.get_or_insert(why);
        }
        let mut failed = Vec::new();
        for (c, link) in self.children.links_mut() {
            if !link.idle()
                && let Err(why) = link.poll_write(cx)
            {
                failed.push((*c, why));
            }
        }
        let any = !failed.is_empty() || self.parent_gone.is_some();
        for (c, why) in failed {
            self.children.remove(c);
            self.node.handle_link_down(self.now, c, &why);
            self.dispatch();
        }
        any
    }

    /// Before the loop waits: mutes the children the node waits for but the anchor, and
    /// hears the others ([`Mute`]).
    fn mute_children(&mut self) {
        let Some(mute) = &mut self.mute else {
            return;
        };
        // With one child (a leaf has none) there is nothing to mute; with many, muting
        // and hearing them again would cost more system calls than the wake-ups it saves.
        let fan = self.children.index.len();
        let fits = (2..=MUTE_MAX_CHILDREN).contains(&fan);
        if !fits && !mute.any {
            return;
        }
        if poller::take_mute_lapsed() && !mute.muted_spoke {
            mute.paused = true;
        }
        let anchor = if fits {
            self.node.reply_waits(&mut mute.waits, &mut mute.heard)
        } else {
            None
        };
        if mute.anchor_spoke || anchor != mute.anchor {
            mute.paused = false;
        }
        mute.anchor = anchor;
        mute.anchor_spoke = false;
        mute.muted_spoke = false;
        mute.any = false;
        for (c, link) in self.children.links_mut() {
            let on = match anchor {
                Some(a) if !mute.paused && a != *c && mute.heard.binary_search(c).is_err() => {
                    link.muted() || mute.waits.binary_search(c).is_ok()
                }
                _ => false,
            };
            #[cfg(test)]
            let was = link.muted();
            link.set_muted(on);
            let now = link.muted();
            #[cfg(test)]
            if now && !was {
                tests::MUTINGS.fetch_add(1, Ordering::Relaxed);
            }
            mute.any |= now;
        }
    }

    /// Moves the timer to the node's deadline, if that changed (a new registration per
    /// frame would cost more than the frame).
    fn arm(&mut self, timer: &mut Timer) {
        let deadline = self.node.poll_timeout().map(Instant::from_std);
        if deadline != self.armed {
            if let Some(d) = deadline {
                timer.reset(d);
            }
            self.armed = deadline;
        }
    }

    /// Says goodbye to every child and waits (at most `grace`) until what was queued for
    /// them is written and each link is closed (a tcp stream shut down, a quic stream
    /// finished and acknowledged): the children end too, without looking for another
    /// parent.
    async fn goodbye(mut self, grace: std::time::Duration) {
        for (_, link) in self.children.links_mut() {
            link.set_muted(false);
            link.push(Control::Goodbye.to_message());
        }
        let mut closed = vec![false; self.children.slots.len()];
        let drained = std::future::poll_fn(|cx| {
            let mut left = false;
            for (k, slot) in self.children.slots.iter_mut().enumerate() {
                let Some((_, link)) = slot.as_mut() else {
                    continue;
                };
                if closed[k] || link.poll_write(cx).is_err() {
                    closed[k] = true;
                    continue;
                }
                if !link.idle() {
                    left = true;
                    continue;
                }
                match Sink::<&Message>::poll_close(Pin::new(&mut link.writer), cx) {
                    Poll::Ready(_) => closed[k] = true,
                    Poll::Pending => left = true,
                }
            }
            if left { Poll::Pending } else { Poll::Ready(()) }
        });
        // Closing waits for delivery (a quic stream until the peer acknowledged it).
        let _ = tokio::time::timeout(grace, drained).await;
    }
}

/// Events a server's local side sends up (kind, the local rank it is from, payload), for
/// [`run_node_with_events`].
/// The channel is bounded, and the driver stops reading it while the node says so
/// ([`Output::PauseLocal`]): a full channel makes the producer (the process's output
/// reader) wait, which makes the process wait: backpressure, never a dropped line.
pub type LocalEvents = mpsc::Receiver<(Kind, u32, Bytes)>;

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
///
/// One task drives the node and all its links: it reads every link itself (several frames
/// per read), hands what arrives to the node, and writes what the node sends straight into
/// the links' buffers, flushed once per turn; no task or channel between a socket and the
/// node, so a frame costs one wake-up per hop, not three.
pub async fn run_node_full(
    mut node: Node,
    parent: Link,
    children: Vec<(NodeId, Result<Link, LinkError>)>,
    handler: LocalHandler,
    events: LocalEvents,
    mut recovery: Recovery,
) -> io::Result<()> {
    node.set_liveness(Some(recovery.liveness.unwrap_or_else(Liveness::from_env)));
    // The master's parent is the front-end, which sends no keepalives.
    let watch_parent = node.id() != NodeId::Master;
    let start = Instant::now().into_std();
    node.handle_link_open(start, Peer::Parent, watch_parent);
    let ready = Arc::new(Readiness::default());
    let mut kids = Children::default();
    for (id, link) in children {
        match link {
            Ok(link) => {
                let waker = ready.waker(CHILD0 + kids.next_slot());
                kids.insert(id, LinkIo::open_child(&mut node, start, id, link, waker));
            }
            Err(e) => node.handle_link_down(start, id, &format!("could not connect: {e}")),
        }
    }
    // Every source is read in the first turn (which registers its waker).
    let want = vec![true; CHILD0 + kids.next_slot()];
    let mut d = Driver {
        node,
        parent: LinkIo::new(parent, ready.waker(PARENT)),
        children: kids,
        handler,
        inbox: Arc::default(),
        events,
        adoptions: recovery.adoptions.take(),
        local_paused: false,
        armed: None,
        parent_gone: None,
        events_waker: ready.waker(EVENTS),
        adoptions_waker: ready.waker(ADOPTIONS),
        ready,
        want,
        mute: (poller::active() && muting_wanted()).then(Mute::default),
        now: start,
    };
    // One timer for the node's deadline, moved only when the deadline changes.
    let mut timer = Timer::new();
    loop {
        d.dispatch();
        d.arm(&mut timer);
        let why = match std::future::poll_fn(|cx| d.poll_turn(cx, &mut timer)).await {
            Turn::Busy if poller::active() => {
                // Look at the sockets between turns, as tokio's budget makes a task do.
                poller::yield_now().await;
                continue;
            }
            Turn::Busy => {
                // Give the runtime back once the task's budget is spent: quic streams do
                // not count against it, and their connections' tasks must run.
                tokio::task::coop::consume_budget().await;
                continue;
            }
            Turn::ParentGone(why) => why,
        };
        tracing::info!(node = %d.node.id(), "parent link ended: {why}");
        d.node.handle_parent_down();
        let reattach = recovery.reattach.as_mut().filter(|_| why != GOODBYE);
        let new_parent = match reattach {
            Some(reattach) => reattach().await,
            None => None,
        };
        match new_parent {
            Some(link) => {
                tracing::info!(node = %d.node.id(), "re-attached to {}", link.peer);
                d.parent = LinkIo::new(link, d.ready.waker(PARENT));
                // Read in the next turn: its waker is registered once it is polled.
                set_wanted(&mut d.want, PARENT);
                d.node
                    .handle_link_open(Instant::now().into_std(), Peer::Parent, true);
            }
            None => {
                d.goodbye(std::time::Duration::from_secs(1)).await;
                return Ok(());
            }
        }
    }
}

/// Environment variable: `tokio` keeps a daemon's node on the process's tokio runtime
/// instead of a loop of its own ([`run_node_spawned`]), to compare the two.
pub const NODE_LOOP_ENV: &str = "SDM_NODE_LOOP";

/// Environment variable: `0` makes a node on its own loop hear every child at all times
/// instead of muting those it is not waiting on last (`crate::poller`), to compare the
/// two.
pub const MUTE_ENV: &str = "SDM_MUTE";

/// Whether a node on its own loop mutes children ([`MUTE_ENV`]).
fn muting_wanted() -> bool {
    std::env::var_os(MUTE_ENV).is_none_or(|v| v != "0")
}

/// [`run_node_full`] where it costs least. When every link is a plain tcp stream, on a
/// thread of its own that waits on epoll for them (`poller`): an event reaches the node
/// without the runtime's driver, scheduler and task harness in between. The calling
/// runtime keeps everything else (the handler's spawned work, the local program's output,
/// re-attaching), entered by that thread. Otherwise, or with [`NODE_LOOP_ENV`] set to
/// `tokio`, as a task of the calling runtime (a wake-up polls it from the runtime's loop,
/// not through the frames of the caller).
pub async fn run_node_spawned(
    node: Node,
    parent: Link,
    children: Vec<(NodeId, Result<Link, LinkError>)>,
    handler: LocalHandler,
    events: LocalEvents,
    recovery: Recovery,
) -> io::Result<()> {
    let all_tcp = parent.tcp.is_some()
        && children
            .iter()
            .all(|(_, l)| !matches!(l, Ok(l) if l.tcp.is_none()));
    let own = all_tcp && std::env::var(NODE_LOOP_ENV).map_or(true, |v| v != "tokio");
    if !own {
        let task = tokio::spawn(run_node_full(
            node, parent, children, handler, events, recovery,
        ));
        return task
            .await
            .unwrap_or_else(|e| Err(io::Error::other(format!("the node's task failed: {e}"))));
    }
    let runtime = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("sdm-node".into())
        .spawn(move || {
            let _entered = runtime.enter();
            let node = run_node_full(node, parent, children, handler, events, recovery);
            let run = std::panic::AssertUnwindSafe(|| poller::block_on(node));
            let r = match std::panic::catch_unwind(run) {
                Ok(r) => r.and_then(|r| r),
                Err(panic) => {
                    let what = crate::logging::panic_text(&*panic);
                    Err(io::Error::other(format!(
                        "the node's thread panicked: {what}"
                    )))
                }
            };
            let _ = tx.send(r);
        })?;
    rx.await
        .unwrap_or_else(|_| Err(io::Error::other("the node's thread failed")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::time::Duration;

    use futures::{SinkExt, StreamExt};
    use sdm_proto::{DEFAULT_MAX_FRAME, IdSet, Kind, Message, Status, SyncMode};
    use sdm_topology::{NodeId, Shape, Topology};

    use super::run_node;
    use crate::node::Node;
    use crate::transport::Link;

    /// Children a node on its own loop muted (a child heard again and muted again counts
    /// twice), in this process.
    pub(super) static MUTINGS: AtomicU64 = AtomicU64::new(0);

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

    /// The master of a flat tree over `children` (their near ends) under the driver, with a
    /// handler that answers nothing: its task and the front-end's end of its parent link.
    fn run_master(children: Vec<Link>) -> (tokio::task::JoinHandle<std::io::Result<()>>, Link) {
        let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(children.len() as u32));
        let children = (0..).map(NodeId::Server).zip(children).collect();
        run_master_in(topo, children)
    }

    /// The master of `topo` with links to `children` under the driver (as [`run_master`]).
    fn run_master_in(
        topo: Arc<dyn Topology>,
        children: Vec<(NodeId, Link)>,
    ) -> (tokio::task::JoinHandle<std::io::Result<()>>, Link) {
        let (parent_here, parent_there) = pair();
        let children = children.into_iter().map(|(c, l)| (c, Ok(l))).collect();
        let node = Node::new(NodeId::Master, topo);
        let task = tokio::spawn(run_node(node, parent_here, children, Box::new(|_| {})));
        (task, parent_there)
    }

    /// No keepalives: their timer would wake the node and hide a reply (or an output line)
    /// that did not.
    fn quiet() -> super::Recovery {
        super::Recovery {
            liveness: Some(super::Liveness {
                interval: Duration::from_secs(3600),
                dead_after: Duration::from_secs(7200),
            }),
            ..Default::default()
        }
    }

    /// Commands 1..=`n` for server 0, sent down `parent` at once.
    async fn ask(parent: &mut Link, n: u64) {
        for op in 1..=n {
            let cmd = Message::command(op, IdSet::single(0), SyncMode::WaitAll, "ask");
            parent.writer.feed(&cmd).await.unwrap();
        }
        parent.writer.flush().await.unwrap();
    }

    /// Command `op` for servers 0 and 1 of a flat tree, down `parent`; child 0 (the far end
    /// `c0`) answers it and child 1's link is gone: server 0's reply and server 1 lost go
    /// up, every id once.
    async fn ping_with_child_1_gone(op: u64, parent: &mut Link, c0: &mut Link) {
        let cmd = Message::command(op, IdSet::all(2), SyncMode::WaitAll, "ping");
        parent.writer.send(&cmd).await.unwrap();
        let got = c0.reader.next().await.unwrap().unwrap();
        assert_eq!((got.kind, got.op), (Kind::Command, op));
        let r = Message::reply(op, IdSet::single(0), Status::Replied, "pong".into());
        c0.writer.send(&r).await.unwrap();
        let mut seen = IdSet::new();
        while seen != IdSet::all(2) {
            let m = parent.reader.next().await.unwrap().unwrap();
            if m.kind != Kind::Reply {
                continue;
            }
            let status = m.aggregate.status.unwrap_or(Status::Replied);
            let want = if m.source.contains(0) {
                Status::Replied
            } else {
                Status::Lost
            };
            assert_eq!(status, want, "{m:?}");
            assert!(m.source.is_disjoint(&seen), "an id twice: {m:?}");
            seen.union_with(&m.source);
        }
    }

    /// `n` events from server `id`, queued on `link` and flushed.
    async fn queue_events(link: &mut Link, id: u32, n: u64) {
        for i in 0..n {
            link.writer.feed(&event(id, i)).await.unwrap();
        }
        link.writer.flush().await.unwrap();
    }

    /// Event `i` of server `id` (its text says `i`).
    fn event(id: u32, i: u64) -> Message {
        let mut m = Message::reply(
            i,
            IdSet::single(id),
            Status::Replied,
            format!("event {i}").into(),
        );
        m.kind = Kind::Event;
        m
    }

    /// A master of a flat tree over `children` on its own loop ([`super::run_node_spawned`]),
    /// with a handler that answers nothing and no local output.
    fn spawn_own_master(
        parent: Link,
        children: Vec<(NodeId, Result<Link, crate::error::LinkError>)>,
        recovery: super::Recovery,
    ) -> tokio::task::JoinHandle<std::io::Result<()>> {
        let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(children.len() as u32));
        let (_events_tx, events) = tokio::sync::mpsc::channel(1);
        tokio::spawn(super::run_node_spawned(
            Node::new(NodeId::Master, topo),
            parent,
            children,
            Box::new(|_| {}),
            events,
            recovery,
        ))
    }

    /// A command to two children, one of whose links is gone (its far end dropped): the
    /// node reports that child's id lost and sends the other's reply up with it, every id
    /// accounted, with nothing else happening on the node's links.
    #[tokio::test]
    async fn a_child_whose_link_is_gone_is_answered_lost_and_the_rest_goes_up() {
        let (c0_here, mut c0_there) = pair();
        let (c1_here, c1_there) = pair();
        drop(c1_there);
        let (node, mut parent_there) = run_master(vec![c0_here, c1_here]);
        ping_with_child_1_gone(5, &mut parent_there, &mut c0_there).await;
        node.abort();
    }

    /// Many frames from a child queued before the node runs are taken several per turn:
    /// every one goes up, in order (a turn once dropped the frame it fetched last).
    #[tokio::test]
    async fn frames_queued_past_one_turn_all_go_up_in_order() {
        let (child_here, mut child_there) = pair();
        let n = 200u64;
        queue_events(&mut child_there, 0, n).await;
        let (node, mut parent_there) = run_master(vec![child_here]);
        for i in 0..n {
            let m = parent_there.reader.next().await.unwrap().unwrap();
            assert_eq!(m.kind, Kind::Event);
            assert_eq!(&m.payload[..], format!("event {i}").as_bytes());
            assert_eq!(m.source, IdSet::single(0));
        }
        node.abort();
    }

    /// Two children with everything queued before the node runs, one carrying four servers
    /// and one carrying one: the node reads them by weight (4 to 1), so the bigger subtree's
    /// frames make most of what goes up first (with equal reads the first 160 were 96 from
    /// the small child, 64 from the big one). Every frame still goes up, each child's in
    /// order.
    #[tokio::test]
    async fn children_are_read_by_the_servers_behind_them() {
        // Server 0 under the master alone; server 1 under the master with 2, 3 and 4 below.
        let tree = sdm_topology::Explicit::from_parents(vec![0, 0, 2, 2, 2], "test").unwrap();
        let topo: Arc<dyn Topology> = Arc::from(Shape::Explicit(Arc::new(tree)).build(5));
        let (small_here, mut small_there) = pair();
        let (big_here, mut big_there) = pair();
        let n = 400u64;
        queue_events(&mut small_there, 0, n).await;
        queue_events(&mut big_there, 1, n).await;
        let (node, mut parent_there) = run_master_in(
            topo,
            vec![
                (NodeId::Server(0), small_here),
                (NodeId::Server(1), big_here),
            ],
        );
        let mut next = [0u64; 2];
        let mut first = [0u64; 2];
        for k in 0..2 * n {
            let m = parent_there.reader.next().await.unwrap().unwrap();
            assert_eq!(m.kind, Kind::Event);
            let from = usize::from(m.source == IdSet::single(1));
            assert_eq!(&m.payload[..], format!("event {}", next[from]).as_bytes());
            next[from] += 1;
            if k < 5 * super::DRAIN as u64 {
                first[from] += 1;
            }
        }
        assert!(
            first[1] >= 2 * first[0],
            "the first {} frames up: {} from the small child, {} from the big one",
            5 * super::DRAIN,
            first[0],
            first[1]
        );
        node.abort();
    }

    /// A server whose handler answers some commands at once (inside the node's turn, which
    /// takes the reply without being woken) and the rest from another thread a little
    /// later (which must wake the node): every command gets its one reply up, with the
    /// payload its handler gave.
    #[tokio::test]
    async fn replies_made_at_once_and_from_other_threads_all_go_up() {
        let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(1));
        let node = Node::new(NodeId::Server(0), topo);
        let (parent_here, mut parent_there) = pair();
        let handler = Box::new(|d: super::Delivery| {
            let answer = format!("answer {}", d.op);
            if d.op.is_multiple_of(2) {
                d.reply.send(answer);
            } else {
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(d.op % 3));
                    d.reply.send(answer);
                });
            }
        });
        let (_events_tx, events) = tokio::sync::mpsc::channel(1);
        let task = tokio::spawn(super::run_node_full(
            node,
            parent_here,
            Vec::new(),
            handler,
            events,
            quiet(),
        ));
        let n = 200u64;
        ask(&mut parent_there, n).await;
        let mut seen = std::collections::BTreeSet::new();
        while seen.len() < n as usize {
            // Generous: a reply that never woke the node would otherwise hang the test.
            let next = tokio::time::timeout(Duration::from_secs(60), parent_there.reader.next());
            let Ok(m) = next.await else {
                panic!("no reply for 60 s: {} of {n} arrived", seen.len());
            };
            let m = m.unwrap().unwrap();
            assert_eq!(m.kind, Kind::Reply, "{m:?}");
            assert_eq!(m.source, IdSet::single(0));
            assert_eq!(&m.payload[..], format!("answer {}", m.op).as_bytes());
            assert!(seen.insert(m.op), "op {} answered twice", m.op);
        }
        task.abort();
    }

    /// A master on its own loop ([`super::run_node_spawned`]) over tcp links: a child's
    /// frames queued before the node ran (read ahead by the link's first reader) all go up
    /// in order; a command to both children gets every id back, the child whose far end
    /// is gone as lost; when the front-end goes, the master says goodbye to its children
    /// and closes their links, and ends cleanly.
    #[tokio::test]
    async fn a_master_on_its_own_loop_relays_over_tcp_and_says_goodbye() {
        use crate::poller::tests::tcp_pair;
        let (c0_here, mut c0_there) = tcp_pair().await;
        let (c1_here, c1_there) = tcp_pair().await;
        let (parent_here, mut parent_there) = tcp_pair().await;
        assert!(c0_here.tcp.is_some() && parent_here.tcp.is_some());
        let n = 200u64;
        queue_events(&mut c0_there, 0, n).await;
        drop(c1_there);
        let children = vec![
            (NodeId::Server(0), Ok(c0_here)),
            (NodeId::Server(1), Ok(c1_here)),
        ];
        let task = spawn_own_master(parent_here, children, super::Recovery::default());
        let mut next = 0;
        while next < n {
            let m = parent_there.reader.next().await.unwrap().unwrap();
            if m.kind == Kind::Event {
                assert_eq!(&m.payload[..], format!("event {next}").as_bytes());
                next += 1;
            }
        }
        ping_with_child_1_gone(7, &mut parent_there, &mut c0_there).await;
        drop(parent_there);
        let mut said_goodbye = false;
        while let Some(m) = c0_there.reader.next().await {
            let m = m.unwrap();
            said_goodbye |= m.kind == Kind::Control
                && matches!(
                    sdm_proto::Control::from_message(&m),
                    Ok(sdm_proto::Control::Goodbye)
                );
        }
        assert!(said_goodbye, "the child's link closed without a goodbye");
        task.await.unwrap().unwrap();
    }

    /// A master on its own loop mutes the children it is not waiting on last (all three
    /// have one server; server 2 is the anchor) while commands are in flight: 100
    /// pipelined commands each get every id back once, merged, with the muted children's
    /// output in order beside them; and while the anchor keeps a command waiting, the
    /// others' replies stay below (the command waits for all) but their output still goes
    /// up (the muted links are read at the poll).
    #[test]
    fn a_master_on_its_own_loop_mutes_children_and_loses_nothing() {
        crate::poller::tests::within_a_minute(|| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(mutes_children_and_loses_nothing());
        });
    }

    async fn mutes_children_and_loses_nothing() {
        use crate::poller::tests::tcp_pair;
        let mutings = MUTINGS.load(Ordering::Relaxed);
        let mut here = Vec::new();
        let mut there = Vec::new();
        for id in 0..3 {
            let (h, t) = tcp_pair().await;
            here.push((NodeId::Server(id), Ok(h)));
            there.push(t);
        }
        let (parent_here, mut parent) = tcp_pair().await;
        let task = spawn_own_master(parent_here, here, quiet());
        // What the front-end got: per op the ids replied, per server the next event.
        #[derive(Default)]
        struct Got {
            replied: std::collections::HashMap<u64, IdSet>,
            next_event: [u64; 3],
        }
        impl Got {
            fn take(&mut self, m: Message) {
                match m.kind {
                    Kind::Reply => {
                        let status = m.aggregate.status.unwrap_or(Status::Replied);
                        assert_eq!(status, Status::Replied);
                        assert_eq!(&m.payload[..], b"pong", "{m:?}");
                        let ids = self.replied.entry(m.op).or_default();
                        assert!(ids.is_disjoint(&m.source), "an id twice: {m:?}");
                        ids.union_with(&m.source);
                    }
                    Kind::Event => {
                        let id = m.source.first().unwrap() as usize;
                        assert_eq!(
                            m.op, self.next_event[id],
                            "server {id}'s output out of order"
                        );
                        self.next_event[id] += 1;
                    }
                    _ => {}
                }
            }
            fn complete(&self, op: u64) -> bool {
                self.replied
                    .get(&op)
                    .is_some_and(|ids| *ids == IdSet::all(3))
            }
        }
        let mut got = Got::default();
        // 100 commands at once; servers 0 and 1 answer each with an output line after it,
        // then server 2 answers them all.
        let n = 100u64;
        for op in 1..=n {
            let cmd = Message::command(op, IdSet::all(3), SyncMode::WaitAll, "ping");
            parent.writer.feed(&cmd).await.unwrap();
        }
        parent.writer.flush().await.unwrap();
        for (id, child) in there.iter_mut().enumerate() {
            for op in 1..=n {
                let cmd = child.reader.next().await.unwrap().unwrap();
                assert_eq!((cmd.kind, cmd.op), (Kind::Command, op));
                let r =
                    Message::reply(op, IdSet::single(id as u32), Status::Replied, "pong".into());
                child.writer.feed(&r).await.unwrap();
                if id < 2 {
                    child.writer.feed(&event(id as u32, op - 1)).await.unwrap();
                }
            }
            child.writer.flush().await.unwrap();
        }
        while !((1..=n).all(|op| got.complete(op)) && got.next_event[..2] == [n, n]) {
            got.take(parent.reader.next().await.unwrap().unwrap());
        }
        // One more command, which server 2 keeps waiting: the others answer and print 20
        // lines each, and the lines come up while the command waits.
        let op = n + 1;
        let cmd = Message::command(op, IdSet::all(3), SyncMode::WaitAll, "ping");
        parent.writer.send(&cmd).await.unwrap();
        for (id, child) in there.iter_mut().enumerate().take(2) {
            let cmd = child.reader.next().await.unwrap().unwrap();
            assert_eq!((cmd.kind, cmd.op), (Kind::Command, op));
            let r = Message::reply(op, IdSet::single(id as u32), Status::Replied, "pong".into());
            child.writer.feed(&r).await.unwrap();
            for i in 0..20 {
                child.writer.feed(&event(id as u32, n + i)).await.unwrap();
            }
            child.writer.flush().await.unwrap();
        }
        while got.next_event[..2] != [n + 20, n + 20] {
            got.take(parent.reader.next().await.unwrap().unwrap());
        }
        let early = got.replied.contains_key(&op);
        assert!(!early, "a command went up before every id answered");
        let cmd = there[2].reader.next().await.unwrap().unwrap();
        assert_eq!((cmd.kind, cmd.op), (Kind::Command, op));
        let r = Message::reply(op, IdSet::single(2), Status::Replied, "pong".into());
        there[2].writer.send(&r).await.unwrap();
        while !got.complete(op) {
            got.take(parent.reader.next().await.unwrap().unwrap());
        }
        // Servers 0 and 1 were muted at least for the last command (the turn that sent it
        // down muted them before any reply could be read).
        let muted = MUTINGS.load(Ordering::Relaxed) - mutings;
        assert!(muted >= 2, "{muted} children muted");
        drop(parent);
        task.await.unwrap().unwrap();
    }

    /// A server on its own loop: its handler runs on the node's thread; commands answered
    /// at once and from tasks the handler spawned on the runtime (woken across threads)
    /// each get their one reply, and output sent from the runtime through a small channel
    /// (so the sender waits on the node) all goes up, in order.
    #[tokio::test]
    async fn a_server_on_its_own_loop_takes_replies_and_output_from_the_runtime() {
        use crate::poller::tests::tcp_pair;
        let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(1));
        let node = Node::new(NodeId::Server(0), topo);
        let (parent_here, mut parent_there) = tcp_pair().await;
        let handler = Box::new(|d: super::Delivery| {
            let thread = std::thread::current().name().unwrap_or("").to_owned();
            let answer = format!("answer {} on {thread}", d.op);
            if d.op.is_multiple_of(2) {
                d.reply.send(answer);
            } else {
                tokio::spawn(async move {
                    tokio::task::yield_now().await;
                    d.reply.send(answer);
                });
            }
        });
        let (events_tx, events) = tokio::sync::mpsc::channel(4);
        let task = tokio::spawn(super::run_node_spawned(
            node,
            parent_here,
            Vec::new(),
            handler,
            events,
            quiet(),
        ));
        let n_events = 300u64;
        let output = tokio::spawn(async move {
            for i in 0..n_events {
                let line = bytes::Bytes::from(format!("line {i}"));
                events_tx.send((Kind::Event, 0, line)).await.unwrap();
            }
        });
        let n = 200u64;
        ask(&mut parent_there, n).await;
        let mut seen = std::collections::BTreeSet::new();
        let mut next_line = 0;
        while seen.len() < n as usize || next_line < n_events {
            let next = tokio::time::timeout(Duration::from_secs(60), parent_there.reader.next());
            let Ok(m) = next.await else {
                panic!(
                    "nothing for 60 s: {} replies, {next_line} lines",
                    seen.len()
                );
            };
            let m = m.unwrap().unwrap();
            match m.kind {
                Kind::Reply => {
                    let want = format!("answer {} on sdm-node", m.op);
                    assert_eq!(&m.payload[..], want.as_bytes());
                    assert!(seen.insert(m.op), "op {} answered twice", m.op);
                }
                Kind::Event => {
                    assert_eq!(&m.payload[..], format!("line {next_line}").as_bytes());
                    next_line += 1;
                }
                _ => {}
            }
        }
        output.await.unwrap();
        drop(parent_there);
        task.await.unwrap().unwrap();
    }

    /// A waker for a task that only counts how often it was woken (`count.0`).
    fn counting_waker() -> (std::task::Waker, Arc<Count>) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (futures::task::waker(count.clone()), count)
    }

    struct Count(AtomicUsize);

    impl futures::task::ArcWake for Count {
        fn wake_by_ref(me: &Arc<Self>) {
            me.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The inbox wakes the node's task for a reply made outside a turn, not for one made
    /// inside (the turn takes that itself), and a turn ending with replies waiting says so.
    #[test]
    fn the_inbox_wakes_the_task_only_outside_a_turn() {
        let (waker, count) = counting_waker();
        let cx = std::task::Context::from_waker(&waker);
        let inbox = super::Inbox::default();
        inbox.enter();
        inbox.push(1, IdSet::single(0), "in the turn".into());
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        assert!(inbox.leave(&cx), "a reply is waiting");
        assert_eq!(inbox.pop().map(|(op, _, _)| op), Some(1));
        assert!(!inbox.leave(&cx));
        inbox.push(2, IdSet::single(0), "between turns".into());
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(inbox.pop().map(|(op, _, _)| op), Some(2));
        assert_eq!(inbox.pop(), None);
    }

    /// A reader that counts how often it is polled.
    struct Counted(crate::transport::BoxReader, Arc<AtomicUsize>);

    impl tokio::io::AsyncRead for Counted {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
        }
    }

    /// A turn reads only the links that woke the task. Eight children, frames from one of
    /// them, each waited for at the parent (a wake-up and a turn each): after the first
    /// turn, which reads every link once to register its waker, the seven quiet links are
    /// never polled again, and every frame of the busy one goes up, in order.
    #[tokio::test]
    async fn a_turn_reads_only_the_links_that_woke_it() {
        let mut near = Vec::new();
        let mut far = Vec::new();
        let mut polls = Vec::new();
        for _ in 0..8 {
            let (a, b) = tokio::io::duplex(1 << 20);
            let (ar, aw) = tokio::io::split(a);
            let (br, bw) = tokio::io::split(b);
            let count = Arc::new(AtomicUsize::new(0));
            let reader = Box::new(Counted(Box::new(ar), count.clone()));
            near.push(Link::new(reader, Box::new(aw), "a", DEFAULT_MAX_FRAME));
            far.push(Link::new(
                Box::new(br),
                Box::new(bw),
                "b",
                DEFAULT_MAX_FRAME,
            ));
            polls.push(count);
        }
        let (node, mut parent_there) = run_master(near);
        let mut before = Vec::new();
        let busy = 3u32;
        let n = 30;
        // Event `i` from the busy child, sent, and seen at the parent.
        for i in 0..=n as u64 {
            let mut m = Message::reply(
                i,
                IdSet::single(busy),
                Status::Replied,
                format!("event {i}").into(),
            );
            m.kind = Kind::Event;
            far[busy as usize].writer.send(&m).await.unwrap();
            let got = parent_there.reader.next().await.unwrap().unwrap();
            assert_eq!(
                (got.kind, got.source, got.payload),
                (m.kind, m.source, m.payload)
            );
            if i == 0 {
                before = polls.iter().map(|c| c.load(Ordering::SeqCst)).collect();
            }
        }
        assert!(
            before.iter().all(|&n| n >= 1),
            "every link read once: {before:?}"
        );
        let after: Vec<usize> = polls.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        for k in 0..8 {
            if k == busy as usize {
                assert!(
                    after[k] >= before[k] + n as usize,
                    "busy link: {before:?} then {after:?}"
                );
            } else {
                assert_eq!(
                    after[k], before[k],
                    "quiet link {k} polled: {before:?} then {after:?}"
                );
            }
        }
        node.abort();
    }

    /// A source's waker marks that source (once, however often it fires) and wakes the
    /// task; a turn takes the marks as the sources it reads; marks made during a turn make
    /// its end say so; sources never marked are not wanted.
    #[test]
    fn readiness_marks_the_sources_that_woke_the_task() {
        let (task, count) = counting_waker();
        let cx = std::task::Context::from_waker(&task);
        let ready = Arc::new(super::Readiness::default());
        let child = ready.waker(super::CHILD0 + 7);
        let parent = ready.waker(super::PARENT);
        assert!(!ready.leave(&cx));
        child.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the task is woken");
        // From another thread too, and twice: still one mark.
        let c2 = child.clone();
        std::thread::spawn(move || c2.wake()).join().unwrap();
        // Sources in several words, and one beyond those with a bit of their own.
        let far = ready.waker(super::CHILD0 + 200);
        let beyond = ready.waker(super::MARKED_SOURCES + 5);
        far.wake_by_ref();
        beyond.wake_by_ref();
        let mut want = vec![false; super::MARKED_SOURCES + 8];
        ready.take(&mut want);
        let wanted: Vec<usize> = (0..want.len()).filter(|&s| want[s]).collect();
        let mut expect = vec![super::CHILD0 + 7, super::CHILD0 + 200];
        expect.extend(super::MARKED_SOURCES..super::MARKED_SOURCES + 8);
        assert_eq!(wanted, expect);
        want.iter_mut().for_each(|w| *w = false);
        // Marked during a turn: no wake-up (the turn's end sees it).
        assert!(!ready.leave(&cx));
        ready.take(&mut want);
        parent.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "not woken in a turn");
        assert!(ready.leave(&cx));
        ready.take(&mut want);
        assert!(want[super::PARENT]);
        assert!(!ready.leave(&cx));
        parent.wake_by_ref();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            2,
            "woken again after the turn"
        );
    }
}
