//! Output going up from a node: stdio and events of this server and of its children's
//! subtrees, held by the parent's credit and shared between the links by the servers
//! behind each ([`crate::flow`]), and coalesced with identical lines of other ranks.

use std::time::Instant;

use bytes::Bytes;
use sdm_proto::{IdSet, Kind, Message, Status};
use sdm_topology::NodeId;

use super::{Node, Output};
use crate::coalesce::{IDLE, STDERR, STDOUT, StdioLine};
use crate::flow::{self, Origin, RecvWindow, SendWindow};
use crate::template::{self, MergeMode};

impl Node {
    /// Queues a line for the parent: `via`, the link it came in on if it did not go
    /// through the coalescing buffer (which merges lines of several links), says whose it
    /// is; otherwise its sources do.
    pub(super) fn push_stdio(&mut self, l: StdioLine, via: Option<Origin>) {
        let mut m = Message::reply(l.index, l.sources, Status::Replied, l.payload);
        m.kind = l.kind;
        m.aggregate.status = None;
        self.send_bulk(m, via);
    }

    /// Queues output for the parent, behind what came before from the same origins (`via`,
    /// or those of its sources), and sends what its credit allows.
    pub(super) fn send_bulk(&mut self, m: Message, via: Option<Origin>) {
        // One origin (most lines): without a list or a copy of the id-set.
        let one = via.or_else(|| match m.source.first() {
            Some(id) if m.source.len() == 1 => Some(self.origin_of(id)),
            _ => None,
        });
        match one {
            Some(o) => {
                let servers = self.servers_behind(o);
                self.up_mut().push(&[(o, servers)], m);
            }
            None => {
                let origins = self.origins(&m.source);
                self.up_mut().push(&origins, m);
            }
        }
        self.release_output();
    }

    /// The servers `o` stands for: its share of this node's credit.
    pub(super) fn servers_behind(&self, o: Origin) -> u64 {
        match o {
            Origin::Child(c) => self.down.get(&c).map_or(1, RecvWindow::servers),
            Origin::Local => 1,
        }
    }

    /// Whose output a line from `sources` is, with each origin's weight (the servers it
    /// stands for): this server's own, and the links its other sources came through (one
    /// for most lines; several for a line merged from ranks behind several links).
    pub(super) fn origins(&self, sources: &IdSet) -> Vec<(Origin, u64)> {
        let mut out = Vec::with_capacity(1);
        let mut left = sources.clone();
        while let Some(id) = left.first() {
            let o = self.origin_of(id);
            out.push((o, self.servers_behind(o)));
            // The rest of that child's subtree comes the same way, unless part of it was
            // adopted here (then each id is looked up).
            match o {
                Origin::Child(c) if left.len() > 1 && self.losses().adopted.is_empty() => {
                    left.difference_with(&self.topo.subtree(c))
                }
                _ => {}
            }
            left.remove(id);
        }
        out
    }

    /// Whose server `id`'s output is here: this server's own, or that of the link it comes
    /// up through (the child, or adopted descendant, nearest it on its way here).
    pub(super) fn origin_of(&self, id: u32) -> Origin {
        if self.topo.serves(self.me, id) {
            return Origin::Local;
        }
        let Some(server) = self.topo.server_of(id) else {
            return Origin::Child(NodeId::Server(id));
        };
        let mut at = NodeId::Server(server);
        loop {
            // A live adopted descendant has a link of its own (a dead one's ranks come
            // through whoever adopted them since).
            let losses = self.losses();
            if losses.adopted.contains(&at) && !losses.dead.contains_key(&at) {
                return Origin::Child(at);
            }
            match self.topo.shape().parent(at) {
                Some(p) if p == self.me => return Origin::Child(at),
                Some(p) => at = p,
                // Not below this node: a link of its own.
                None => return Origin::Child(NodeId::Server(server)),
            }
        }
    }

    /// Sends the queued output the parent's credit allows; hands the children whose
    /// output went their credit back; pauses or resumes local output as its queue is long
    /// or short.
    pub(super) fn release_output(&mut self) {
        let mut last = None;
        while let Some((m, origin)) = self.up.as_mut().and_then(|u| u.pop()) {
            self.out.push_back(Output::ToParent(m));
            if last != Some(origin) {
                if let Some(Origin::Child(c)) = last {
                    self.grant(c);
                }
                last = Some(origin);
            }
        }
        if let Some(Origin::Child(c)) = last {
            self.grant(c);
        }
        let room = self.queued_from(Origin::Local) < flow::QUEUE_LIMIT;
        if self.me.server().is_some() && self.local_paused == room {
            self.local_paused = !room;
            self.out.push_back(if room {
                Output::ResumeLocal
            } else {
                Output::PauseLocal
            });
        }
    }

    /// Hands child `c` back the credit for what it sent that no longer waits here.
    pub(super) fn grant(&mut self, c: NodeId) {
        let waiting = self.queued_from(Origin::Child(c));
        if let Some(credit) = self.down.get_mut(&c).and_then(|w| w.grant(waiting)) {
            self.out.push_back(Output::ToChild(c, credit));
        }
    }

    /// Whether local output is paused ([`Output::PauseLocal`] was the last word on it).
    pub fn local_output_paused(&self) -> bool {
        self.local_paused
    }

    /// Bytes of output (stdio, events) waiting here for the parent's credit.
    pub fn queued_output(&self) -> i64 {
        self.up.as_ref().map_or(0, |u| u.queued())
    }

    /// The window of output going up, made if this is its first use.
    pub(super) fn up_mut(&mut self) -> &mut SendWindow {
        self.up.get_or_insert_default()
    }

    /// What of the output from `origin` waits here for the parent's credit.
    pub(super) fn queued_from(&self, origin: Origin) -> i64 {
        self.up.as_ref().map_or(0, |u| u.queued_from(origin))
    }

    /// Something happened to local rank `rank` (a breakpoint, an exit, a line of output):
    /// send it up as an event (or stdio) from that rank. A line of output carries its index
    /// in its stream (the rank's k-th line there), so lines of many ranks can be aligned
    /// line by line. A stdio payload of [`IDLE`] alone (the rank went idle) becomes one idle
    /// marker per stream, carrying the number of lines it sent there. Output of a rank this
    /// node does not serve is dropped (logged).
    pub fn handle_local_event(&mut self, now: Instant, kind: Kind, rank: u32, payload: Bytes) {
        if !self.topo.serves(self.me, rank) {
            tracing::warn!(node = %self.me, rank, "output of a rank not served here dropped");
            return;
        }
        // Lines of several local ranks merge here as children's do.
        let merge = self.stdio.is_some() && self.topo.local_count(self.me) > 1;
        let lines = self.lines_sent.get_or_insert_default();
        let counts = lines.entry(rank).or_default();
        if kind == Kind::Stdio && payload[..] == [IDLE] {
            // The rank went idle: one marker per stream, after the lines sent there.
            let marks: Vec<StdioLine> = [STDOUT, STDERR]
                .into_iter()
                .map(|stream| StdioLine {
                    kind,
                    sources: IdSet::single(rank),
                    index: counts[usize::from(stream)],
                    payload: Bytes::copy_from_slice(&[IDLE, stream]),
                })
                .collect();
            for line in marks {
                self.push_local_line(now, line, merge);
            }
            return;
        }
        let index = match (kind, payload.first()) {
            (Kind::Stdio, Some(&stream)) => {
                let n = &mut counts[usize::from(stream.min(3))];
                *n += 1;
                *n - 1
            }
            _ => 0,
        };
        let sources = IdSet::single(rank);
        let payload = match (kind, self.merge) {
            (Kind::Stdio, MergeMode::Template) => template::templated(payload, &sources),
            _ => payload,
        };
        let line = StdioLine {
            kind,
            sources,
            index,
            payload,
        };
        self.push_local_line(now, line, merge);
    }

    /// A local rank's line goes up, through the coalescing buffer when `merge`.
    pub(super) fn push_local_line(&mut self, now: Instant, line: StdioLine, merge: bool) {
        match self.stdio.as_mut() {
            Some(c) if merge => {
                for l in c.push(now, line) {
                    self.push_stdio(l, None);
                }
            }
            _ => self.push_stdio(line, Some(Origin::Local)),
        }
    }
}
