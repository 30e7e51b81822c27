//! The node driver: one task reading and writing all of a node's links itself, one timer
//! for the node's deadline, and local delivery to a handler. It owns no routing logic: it
//! turns `poll_output` into link writes and link events into `handle_*` calls, like quinn's
//! driver around quinn-proto.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures::Sink;
use sdm_proto::{Control, Message, Status};
use sdm_topology::NodeId;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use super::link::{Children, LinkIo};
use super::wake::{ADOPTIONS, CHILD0, EVENTS, Inbox, PARENT, Readiness, set_wanted};
use super::{Delivery, LocalEvents, LocalHandler, Options, Replier, ReplyTo};
use crate::link_end::LinkEnd;
use crate::liveness::{Liveness, Peer};
use crate::node::{Node, Output};
use crate::transport::Link;

/// What a turn of the node's task ended with.
enum Turn {
    /// Something was handled: look again (tokio's cooperative budget makes the task yield
    /// when it has run long enough).
    Busy,
    /// The parent link ended, this way.
    ParentGone(LinkEnd),
}

/// Frames taken from one link (or local replies, or local events) in one turn of the
/// node's task: several per wake-up, and still a bounded time before the parent, the other
/// children and the timer are looked at again.
pub(super) const DRAIN: usize = 32;

/// Frames taken from all the children together in one turn, at most (a node with a
/// thousand children still reads its parent and runs its timer between batches).
const TURN_FRAMES: usize = 256;

/// A node and everything its task drives: the links, the local handler and its replies,
/// the timer.
pub(super) struct Driver {
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
    parent_gone: Option<LinkEnd>,
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
    /// When the turn began: frames, replies and the timer are handled at this time.
    now: std::time::Instant,
    /// The timer, set to the node's deadline.
    timer: Pin<Box<Sleep>>,
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
                    None => self.node.handle_link_down(self.now, c, LinkEnd::Closed),
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
    fn poll_turn(&mut self, cx: &mut Context<'_>) -> Poll<Turn> {
        // What the last turn queued goes out before this one reads (reads use the task's
        // tokio budget too, and may leave none for the writes at the end).
        self.inbox.enter();
        self.ready.take(&mut self.want);
        self.now = std::time::Instant::now();
        let mut more = self.write_all(cx);
        more |= self.read_parent();
        self.dispatch();
        more |= self.take_replies();
        if self.armed.is_some() && self.timer.as_mut().poll(cx).is_ready() {
            self.armed = None;
            // Due by tokio's timer may be later than the turn's time.
            self.now = self.now.max(Instant::now().into_std());
            self.node.handle_timeout(self.now);
        }
        self.dispatch();
        more |= self.take_adoption();
        more |= self.read_children();
        // This server's own output, which takes turns with the children's.
        self.read_events();
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
        self.arm();
        more |= self.armed.is_some() && self.timer.as_mut().poll(cx).is_ready();
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

    /// Frames from the parent, up to [`DRAIN`]: whether it may have more.
    fn read_parent(&mut self) -> bool {
        if !self.want[PARENT] {
            return false;
        }
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
        !drained
    }

    /// An orphan's link, if one came: whether one did.
    fn take_adoption(&mut self) -> bool {
        let Some(rx) = self.adoptions.as_mut().filter(|_| self.want[ADOPTIONS]) else {
            return false;
        };
        match rx.poll_recv(&mut Context::from_waker(&self.adoptions_waker)) {
            Poll::Ready(Some((id, link))) => {
                self.adopt(id, link);
                true
            }
            Poll::Ready(None) | Poll::Pending => {
                self.want[ADOPTIONS] = false;
                false
            }
        }
    }

    /// This server's own output, up to [`DRAIN`] events. (Paused, or paused by what it
    /// took: left wanted, and read in a turn after output resumes.)
    fn read_events(&mut self) {
        if !self.want[EVENTS] || self.local_paused {
            return;
        }
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

    /// The handlers' replies, up to [`DRAIN`], and what they complete handed to the
    /// links' queues: whether there may be more.
    fn take_replies(&mut self) -> bool {
        let mut more = true;
        for _ in 0..DRAIN {
            let Some((op, ranks, status, payload)) = self.inbox.pop() else {
                more = false;
                break;
            };
            match status {
                Status::Error => self.node.handle_local_failure(op, &ranks, payload),
                _ => self.node.handle_local_reply(self.now, op, &ranks, payload),
            }
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
                        self.node.handle_from_child(self.now, c, m);
                    }
                    Poll::Ready(Err(why)) => {
                        self.children.remove(c);
                        self.node.handle_link_down(self.now, c, why);
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
            self.node.handle_link_down(self.now, c, why);
            self.dispatch();
        }
        any
    }

    /// Moves the timer to the node's deadline, if that changed (a new registration per
    /// frame would cost more than the frame).
    fn arm(&mut self) {
        let deadline = self.node.poll_timeout().map(Instant::from_std);
        if deadline != self.armed {
            if let Some(d) = deadline {
                self.timer.as_mut().reset(d);
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

impl Driver {
    /// The driver of `node` over `parent` and `children` (a child's error: its ids are
    /// lost from the start), every source to be read in the first turn.
    fn new(
        mut node: Node,
        parent: Link,
        children: Vec<(NodeId, Result<Link, crate::error::LinkError>)>,
        handler: LocalHandler,
        options: &mut Options,
    ) -> Self {
        node.set_liveness(Some(options.liveness.unwrap_or_else(Liveness::from_env)));
        node.set_telemetry(true);
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
                Err(e) => node.handle_link_down(start, id, LinkEnd::from(&e)),
            }
        }
        let events = options.events.take().unwrap_or_else(|| mpsc::channel(1).1);
        Driver {
            node,
            parent: LinkIo::new(parent, ready.waker(PARENT)),
            // Every source is read in the first turn (which registers its waker).
            want: vec![true; CHILD0 + kids.next_slot()],
            children: kids,
            handler,
            inbox: Arc::default(),
            events,
            adoptions: options.recovery.adoptions.take(),
            local_paused: false,
            armed: None,
            parent_gone: None,
            events_waker: ready.waker(EVENTS),
            adoptions_waker: ready.waker(ADOPTIONS),
            ready,
            now: start,
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
        }
    }
}

/// Runs `node` until its parent link ends and no new parent is found: see
/// [`super::run_node`].
pub(super) async fn drive(
    node: Node,
    parent: Link,
    children: Vec<(NodeId, Result<Link, crate::error::LinkError>)>,
    handler: LocalHandler,
    mut options: Options,
) {
    let mut d = Driver::new(node, parent, children, handler, &mut options);
    loop {
        d.dispatch();
        d.arm();
        let why = match std::future::poll_fn(|cx| d.poll_turn(cx)).await {
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
        let reattach = options
            .recovery
            .reattach
            .as_mut()
            .filter(|_| why.reattaches());
        let new_parent = match reattach {
            Some(reattach) => reattach().await,
            None => None,
        };
        let Some((ancestor, link)) = new_parent else {
            d.goodbye(std::time::Duration::from_secs(1)).await;
            return;
        };
        tracing::info!(node = %d.node.id(), "re-attached to {ancestor} at {}", link.peer);
        d.parent = LinkIo::new(link, d.ready.waker(PARENT));
        // Read in the next turn: its waker is registered once it is polled.
        set_wanted(&mut d.want, PARENT);
        d.node
            .handle_link_open(Instant::now().into_std(), Peer::Parent, true);
        d.node.set_parent(ancestor);
    }
}
