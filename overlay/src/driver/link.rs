//! One link as the node's task drives it ([`LinkIo`]: its framed halves and the frames
//! queued for it, control ahead of bulk), and the children's links by id ([`Children`]).

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};

use futures::{Sink, StreamExt};
use sdm_proto::{Control, FrameCodec, Kind, Message};
use sdm_topology::NodeId;
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::flow;
use crate::link_end::LinkEnd;
use crate::liveness::Peer;
use crate::node::Node;
use crate::transport::{BoxReader, BoxWriter, Link};

/// One link as the node's task drives it: its framed halves and the frames waiting to be
/// written. Two queues: control (commands, replies, keepalives, credit) and bulk (stdio and
/// events, which keep their order among themselves). Control goes first, so a reply is
/// never stuck behind output waiting for the same link; how much bulk is queued at all is
/// the node's flow control ([`flow`]): at most a window beyond what the receiver took in.
pub(super) struct LinkIo {
    reader: FramedRead<BoxReader, FrameCodec>,
    pub(super) writer: FramedWrite<BoxWriter, FrameCodec>,
    ctrl: VecDeque<Message>,
    bulk: VecDeque<Message>,
    /// Frames handed to the writer's buffer and not flushed yet.
    unflushed: bool,
    /// A frame [`LinkIo::push`] could not encode: the link fails at its next write.
    broken: Option<LinkEnd>,
    /// Frames read from this link per turn, in drains: a child's [`flow::weight`], so the
    /// node's time is shared by the ranks behind each link, like its flow-control window.
    pub(super) weight: usize,
    /// What the reader is polled with: marks this link in the driver's readiness.
    waker: Waker,
}

impl LinkIo {
    pub(super) fn new(link: Link, waker: Waker) -> Self {
        Self {
            reader: link.reader,
            writer: link.writer,
            ctrl: VecDeque::new(),
            bulk: VecDeque::new(),
            unflushed: false,
            broken: None,
            weight: 1,
            waker,
        }
    }

    /// The link to child `id` of `node`, just opened: the node takes it up (its window,
    /// weighted by the servers below it) and the driver reads it by the same weight.
    pub(super) fn open_child(
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
    /// A control frame goes straight into the writer's buffer when no other control frame
    /// waits and the buffer is below its backpressure boundary (where `poll_ready` would
    /// say ready anyway), so it does not move through the queue.
    pub(super) fn push(&mut self, m: Message) {
        if flow::is_bulk(m.kind) {
            self.bulk.push_back(m);
        } else if self.ctrl.is_empty()
            && self.broken.is_none()
            && self.writer.write_buffer().len() < self.writer.backpressure_boundary()
        {
            match Pin::new(&mut self.writer).start_send(&m) {
                Ok(()) => self.unflushed = true,
                Err(e) => self.broken = Some(LinkEnd::from_wire(&e)),
            }
        } else {
            self.ctrl.push_back(m);
        }
    }

    /// Nothing queued and nothing buffered unwritten.
    pub(super) fn idle(&self) -> bool {
        !self.unflushed && self.ctrl.is_empty() && self.bulk.is_empty() && self.broken.is_none()
    }

    /// The next frame from the peer (the link's own waker registered if there is none
    /// yet), or how the link ended.
    pub(super) fn poll_frame(&mut self) -> Poll<Result<Message, LinkEnd>> {
        let mut cx = Context::from_waker(&self.waker);
        let m = match ready!(self.reader.poll_next_unpin(&mut cx)) {
            Some(Ok(m)) => m,
            Some(Err(e)) => return Poll::Ready(Err(LinkEnd::from_wire(&e))),
            None => return Poll::Ready(Err(LinkEnd::Closed)),
        };
        if m.kind == Kind::Control {
            match Control::from_message(&m) {
                Ok(Control::Goodbye) => return Poll::Ready(Err(LinkEnd::Goodbye)),
                Ok(_) => {}
                Err(e) => {
                    let why = format!("a bad control frame: {e}");
                    return Poll::Ready(Err(LinkEnd::Protocol(why)));
                }
            }
        }
        Poll::Ready(Ok(m))
    }

    /// Moves queued frames (control first) into the writer's buffer while it takes them,
    /// then flushes once: several frames per system call. Never waits: what the socket does
    /// not take stays queued, and the task is woken when it can take more.
    pub(super) fn poll_write(&mut self, cx: &mut Context<'_>) -> Result<(), LinkEnd> {
        if let Some(why) = self.broken.take() {
            return Err(why);
        }
        let fail = |e| LinkEnd::from_wire(&e);
        while !(self.ctrl.is_empty() && self.bulk.is_empty()) {
            match Sink::<&Message>::poll_ready(Pin::new(&mut self.writer), cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Err(fail(e)),
                Poll::Pending => break,
            }
            let m = match self.ctrl.pop_front() {
                Some(m) => m,
                None => self.bulk.pop_front().expect("a queue is not empty"),
            };
            Pin::new(&mut self.writer).start_send(&m).map_err(fail)?;
            self.unflushed = true;
        }
        if self.unflushed {
            match Sink::<&Message>::poll_flush(Pin::new(&mut self.writer), cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(e)) => return Err(fail(e)),
                Poll::Pending => {}
            }
        }
        Ok(())
    }
}

/// The children's links, by id, in a stable order (so the turns can go round them fairly).
#[derive(Default)]
pub(super) struct Children {
    pub(super) slots: Vec<Option<(NodeId, LinkIo)>>,
    pub(super) index: HashMap<NodeId, usize, rustc_hash::FxBuildHasher>,
    /// Where the next turn starts reading.
    pub(super) next: usize,
}

impl Children {
    /// The slot the next [`Children::insert`] takes.
    pub(super) fn next_slot(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn insert(&mut self, id: NodeId, link: LinkIo) {
        self.remove(id);
        self.index.insert(id, self.slots.len());
        self.slots.push(Some((id, link)));
    }

    pub(super) fn remove(&mut self, id: NodeId) {
        if let Some(k) = self.index.remove(&id) {
            self.slots[k] = None;
        }
    }

    pub(super) fn get_mut(&mut self, id: NodeId) -> Option<&mut LinkIo> {
        let k = *self.index.get(&id)?;
        self.slots[k].as_mut().map(|(_, l)| l)
    }

    pub(super) fn links_mut(&mut self) -> impl Iterator<Item = &mut (NodeId, LinkIo)> {
        self.slots.iter_mut().flatten()
    }
}
