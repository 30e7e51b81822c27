//! [`Node`]: the sans-IO state machine of one tree node (master or server), in the style of
//! quinn-proto's `Connection`: no sockets and no clock inside, time is an argument.
//!
//! Inputs are `handle_*` calls (a frame from the parent or a child, a local reply, a dead
//! link, a timer); outputs are pulled with [`Node::poll_output`] (frames to send, payloads to
//! deliver locally) and [`Node::poll_timeout`] (when to call [`Node::handle_timeout`]). Call
//! the inputs as things happen, then drain `poll_output` and re-read `poll_timeout`.
//!
//! Down, a command is delivered locally if this node is in its destination and forwarded to
//! each child with the destination narrowed to that child's subtree. Up, replied payloads are
//! folded into the op's filter, made from the node's [`Registry`] by the name the command
//! carries (`""`: `identical`, which groups by XXH3 hash confirmed byte for byte); when the op
//! sends upward the filter is flushed and each group goes up as one reply. Lost and timed-out
//! ids merge by status and payload, outside the filter. Every id of `destination ∩ subtree`
//! leaves this node exactly once: replied, lost (its link died), timed out, or error (the
//! filter could not fold its reply: the payload names the filter error).
//!
//! Links: the node keeps the liveness clocks of its links (`crate::liveness`): with
//! [`Node::set_liveness`] it sends keepalives and declares a silent link dead
//! ([`Output::LinkDead`]) from [`Node::handle_timeout`], like any other deadline. It also
//! keeps the flow-control windows of output going up (`crate::flow`): stdio and events
//! leave as [`Output::ToParent`] only as the parent's credit allows (replies never wait),
//! shared between this server's program and each child's subtree by the servers behind
//! each (`flow::SendWindow`); a child gets credit back for what of its output no longer
//! waits here, and [`Output::PauseLocal`] / [`Output::ResumeLocal`] tell the driver when
//! to stop and restart reading this server's own output.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sdm_filters::builtin::Identical;
use sdm_filters::{Filter, Registry};
use sdm_proto::{Control, IdSet, Kind, LinkEndKind, Message, Status, SyncMode};
use sdm_topology::{NodeId, Topology, Tree};

use crate::flow::{Origin, RecvWindow, SendWindow};
use crate::link_end::LinkEnd;
use crate::liveness::{Clocks, Liveness, Peer};
use crate::telemetry::Telemetry;

use crate::coalesce::{Coalescer, StdioLine};
use crate::telemetry;
use crate::template::MergeMode;
use losses::Losses;
use op::{PendingOp, Source, filter_failure};
use ops::OpTable;

/// What a node asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send a frame to the parent (the front-end, for the master).
    ToParent(Message),
    /// Send a frame to a child.
    ToChild(NodeId, Message),
    /// Run a command here for `ranks`; answer with [`Node::handle_local_reply`].
    Deliver {
        /// Operation id to answer.
        op: u64,
        /// This server's ranks in the command's destination.
        ranks: IdSet,
        /// The command's kind (command or stdio).
        kind: Kind,
        /// The command's filter name.
        filter: sdm_proto::FilterName,
        /// The service the command is for (empty: the built-in `sdm` service).
        service: sdm_proto::ServiceName,
        /// The opaque request.
        payload: Bytes,
    },
    /// The link to this peer is dead (nothing heard for the liveness dead-after): close
    /// it. A dead child's ids are already reported lost; a dead parent is for the driver
    /// to replace (or end the node).
    LinkDead(Peer, LinkEnd),
    /// Stop taking this server's own output ([`Node::handle_local_event`]): what waits for
    /// the parent's credit reached `flow::QUEUE_LIMIT`. The producer (the program's
    /// output reader) should wait, so the program blocks in `write`.
    PauseLocal,
    /// Take this server's own output again (after [`Output::PauseLocal`]).
    ResumeLocal,
}

/// Counters a driver or benchmark may read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Commands received from the parent.
    pub commands: u64,
    /// Reply groups received from children.
    pub replies_in: u64,
    /// Reply groups sent to the parent.
    pub replies_out: u64,
    /// Reply ids dropped because they were not outstanding (late after a timeout, a
    /// duplicate, or outside the child's share).
    pub stray_ids: u64,
    /// Frames refused (wrong kind or direction, duplicate op id).
    pub refused: u64,
}

/// The registry a [`Node`] uses unless given another: the built-in filters, made once per
/// process and shared.
pub(crate) fn builtin_registry() -> Arc<Registry> {
    static BUILTIN: LazyLock<Arc<Registry>> = LazyLock::new(|| Arc::new(Registry::new()));
    Arc::clone(&BUILTIN)
}

/// The routing and aggregation state machine of one node.
#[derive(Debug)]
pub struct Node {
    me: NodeId,
    topo: Tree,
    /// Boxed: an op is large, and a box keeps the table's entries small and cheap to move.
    ops: OpTable<Box<PendingOp>>,
    /// (deadline, op) for every op with a deadline.
    timers: BTreeSet<(Instant, u64)>,
    /// Dead children and adopted descendants (`None`: neither; boxed, made at the first
    /// loss or adoption, as most nodes never see one and a node should be small when
    /// millions are simulated; dropped when it holds neither again).
    losses: Option<Box<Losses>>,
    out: VecDeque<Output>,
    stats: NodeStats,
    /// Stdio lines from children waiting to merge with identical lines of other ranks.
    /// (`None`: a zero window, lines pass straight through; boxed, as most nodes never
    /// coalesce and a node should be small when millions are simulated.)
    stdio: Option<Box<Coalescer>>,
    /// How local ranks' lines are sent up: as they are, or as templated lines.
    merge: MergeMode,
    /// How many lines each local rank has sent up on each stream (indexed by the stream
    /// tag, the payload's first byte: 1 stdout, 2 stderr; tags from 3 up share the last
    /// slot): the index of its next line there.
    /// (Boxed when first used: most nodes never send a line of their own.)
    lines_sent: Option<BTreeMap<u32, [u64; 4]>>,
    /// Where each op's filter comes from.
    registry: Arc<Registry>,
    /// Liveness of the links (keepalives sent, silence watched).
    clocks: Clocks,
    /// Output (stdio, events) going up, held by the parent's credit. (Made when first
    /// used, boxed: most nodes never send output, and a node should be small when
    /// millions are simulated; `None` is a fresh window.)
    up: Option<Box<SendWindow>>,
    /// Output taken in from each child, and the credit owed to it.
    down: BTreeMap<NodeId, RecvWindow>,
    /// Whether the driver was told to stop taking local output.
    local_paused: bool,
    /// Per-link counts, filter time, re-attachments (`None`: off, as in the simulator;
    /// see [`Node::set_telemetry`]).
    telemetry: Option<Box<Telemetry>>,
}

impl Node {
    /// The node `me` in tree `topo` (a shape with one rank per server, or a [`Tree`] with
    /// a placement of ranks on servers).
    pub fn new(me: NodeId, topo: impl Into<Tree>) -> Self {
        let topo = topo.into();
        Self {
            me,
            topo,
            ops: OpTable::default(),
            timers: BTreeSet::new(),
            losses: None,
            out: VecDeque::new(),
            stats: NodeStats::default(),
            stdio: None,
            merge: MergeMode::Exact,
            lines_sent: None,
            clocks: Clocks::default(),
            registry: builtin_registry(),
            up: None,
            down: BTreeMap::new(),
            local_paused: false,
            telemetry: None,
        }
    }

    /// The node `me` in tree `topo`, making each op's filter from `registry` (the built-ins
    /// plus the plugins a daemon loaded) instead of the built-ins alone.
    pub fn with_registry(me: NodeId, topo: impl Into<Tree>, registry: Arc<Registry>) -> Self {
        Self {
            registry,
            ..Self::new(me, topo)
        }
    }

    /// Makes the filters of later ops from `registry` (ops in flight keep theirs).
    pub fn set_registry(&mut self, registry: Arc<Registry>) {
        self.registry = registry;
    }

    /// The registry the filters of new ops come from.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// How long stdio lines from children wait to merge with identical ones (zero: no
    /// coalescing).
    pub fn set_stdio_window(&mut self, window: Duration) {
        for l in self.stdio.as_mut().map(|c| c.drain()).unwrap_or_default() {
            self.push_stdio(l, None);
        }
        self.stdio = (!window.is_zero()).then(|| Box::new(Coalescer::new(window)));
    }

    /// Sends local ranks' lines up as templated lines (`Template`, see `crate::template`)
    /// or as they are.
    pub fn set_stdio_merge(&mut self, merge: MergeMode) {
        self.merge = merge;
    }

    /// Sends keepalives and watches links for silence as `live` says (`None`, the default:
    /// neither). Applies to the links reported up from now on.
    pub fn set_liveness(&mut self, live: Option<Liveness>) {
        self.clocks.set(live);
    }

    /// A link to `peer` is up (again); `watched`: silence on it kills it.
    pub fn handle_link_open(&mut self, now: Instant, peer: Peer, watched: bool) {
        self.clocks.up(now, peer, watched);
        if let Some(t) = &mut self.telemetry {
            t.link_open(peer);
        }
        match peer {
            // A new parent: output that waited for the old one goes on.
            Peer::Parent => self.release_output(),
            // A child's window grows with the servers below it (their output shares it).
            Peer::Child(c) => {
                let (window, extra) = RecvWindow::weighted(self.topo.subtree(c).len());
                self.down.insert(c, window);
                if let Some(m) = extra {
                    self.out.push_back(Output::ToChild(c, m));
                }
            }
        }
    }

    /// The weight of child `c`'s link (`flow::weight` of the servers below it) once the
    /// link is open; 1 otherwise.
    pub fn child_weight(&self, c: NodeId) -> u64 {
        self.down.get(&c).map_or(1, RecvWindow::weight)
    }

    /// Something arrived from `peer` (a frame, or bytes the driver has not handed over
    /// yet): it is alive at `now`.
    pub fn handle_heard(&mut self, now: Instant, peer: Peer) {
        self.clocks.heard(now, peer);
    }

    /// A link-level message from `peer`: keepalives prove it alive (and one with a
    /// sequence number is echoed), an echo times our keepalive; credit from the parent lets
    /// queued output go; the others belong to the handshake (or are credit from a child,
    /// which receives none) and are refused here.
    fn handle_control(&mut self, now: Instant, peer: Peer, msg: &Message) {
        match Control::from_message(msg) {
            Ok(Control::Keepalive(0)) => {}
            Ok(Control::Keepalive(seq)) => self.send_to(peer, Control::Echo(seq).to_message()),
            Ok(Control::Echo(seq)) => {
                if let Some(t) = &mut self.telemetry {
                    t.echo(peer, seq, now);
                }
            }
            Ok(Control::Credit(n)) if peer == Peer::Parent => {
                self.up_mut()
                    .add_credit(i64::try_from(n).unwrap_or(i64::MAX));
                self.release_output();
            }
            other => {
                tracing::warn!(node = %self.me, %peer, ?other, "refused control frame");
                self.stats.refused += 1;
            }
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.me
    }

    /// The shape of the tree this node is part of.
    pub fn topology(&self) -> &Arc<dyn Topology> {
        self.topo.shape()
    }

    /// The tree this node is part of, with the ranks each server serves.
    pub fn tree(&self) -> &Tree {
        &self.topo
    }

    /// The ranks this node serves (none at the master).
    pub fn local_ranks(&self) -> IdSet {
        self.topo.local(self.me)
    }

    /// Counters.
    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }

    /// Number of operations in flight.
    pub fn pending_ops(&self) -> usize {
        self.ops.len()
    }

    /// Whether this node holds nothing but its counters and registry: no op in flight,
    /// nothing queued or buffered, no dead or adopted child, no liveness or flow-control
    /// state, no line of its own sent yet. Such a node acts exactly like a new one, so a
    /// driver of very many nodes (the simulator) may drop it and make a new one when
    /// something arrives for it.
    pub fn is_idle(&self) -> bool {
        self.ops.is_empty()
            && self.timers.is_empty()
            && self.losses.is_none()
            && self.out.is_empty()
            && self.stdio.is_none()
            && self.lines_sent.is_none()
            && self.clocks.is_idle()
            && self.up.as_ref().is_none_or(|u| u.is_idle())
            && self.down.is_empty()
            && !self.local_paused
    }

    /// Gives back the spare capacity of the node's queues, and makes its op table a vector
    /// again if it holds a few ops (a driver of very many nodes calls it once their output
    /// is drained, so a node waiting for replies holds only what it needs).
    pub fn shrink_to_fit(&mut self) {
        self.out.shrink_to_fit();
        self.ops.shrink_to_fit();
    }

    /// A frame arrived from the parent (or, at the master, from the front-end).
    pub fn handle_from_parent(&mut self, now: Instant, msg: Message) {
        self.clocks.heard(now, Peer::Parent);
        if let Some(t) = &mut self.telemetry {
            t.received(Peer::Parent, &msg);
        }
        match msg.kind {
            Kind::Command | Kind::Stdio => self.handle_command(now, msg),
            Kind::Control => self.handle_control(now, Peer::Parent, &msg),
            _ => {
                tracing::warn!(node = %self.me, kind = ?msg.kind, op = msg.op, "refused frame from parent: not a command");
                self.stats.refused += 1;
            }
        }
    }

    /// A command whose op id is already in flight here is refused (out of line, as the
    /// other rare paths of [`Node::handle_command`] are, so the common route stays short).
    #[cold]
    #[inline(never)]
    fn refuse_duplicate(&mut self, op: u64) {
        tracing::warn!(node = %self.me, op, "refused command: op id already in flight");
        self.stats.refused += 1;
    }

    /// The part of `dest` this node reaches (this server if `local`, and the children's
    /// `shares`), and the rest, which none below it can.
    #[cold]
    #[inline(never)]
    fn split_unreachable(
        &self,
        local: &IdSet,
        shares: &[(NodeId, IdSet)],
        dest: &IdSet,
    ) -> (IdSet, IdSet) {
        let mut reach = local.clone();
        for (_, share) in shares {
            reach.union_with(share);
        }
        let unreachable = dest - &reach;
        (reach, unreachable)
    }

    /// Ids of op `op` that no node below here can reach: lost at the master (no such
    /// server), only logged below it (the parent already narrowed the destination).
    #[cold]
    #[inline(never)]
    fn no_such_rank(&self) -> String {
        let servers = self.topo.servers();
        if self.topo.placement().is_identity() {
            format!("no such server: the tree has {servers} servers")
        } else {
            format!(
                "no such rank: the {servers} servers serve ranks {}",
                self.topo.all_ranks()
            )
        }
    }

    fn account_unreachable(&self, op: u64, pending: &mut PendingOp, unreachable: &IdSet) {
        let why = if self.me == NodeId::Master {
            self.no_such_rank()
        } else {
            format!("not in the subtree of server {}", self.me)
        };
        if self.me == NodeId::Master {
            pending.add(Status::Lost, Bytes::from(why), unreachable);
        } else {
            tracing::warn!(node = %self.me, op, ids = %unreachable, "{why}");
        }
    }

    fn handle_command(&mut self, now: Instant, mut msg: Message) {
        self.stats.commands += 1;
        let op = msg.op;
        if self.ops.contains_key(op) {
            self.refuse_duplicate(op);
            return;
        }
        let mut shares = Vec::new();
        let mut local = self.topo.route_into(self.me, &msg.dest, &mut shares);
        // Ids the destination names that no node below here can reach. Below the master
        // the parent already narrowed the destination, so this is only ever non-empty at
        // the master (ids beyond N) or if a parent misbehaves.
        // The shares are disjoint parts of the destination, so when they (and this
        // server) count as many ids as it has, they are all of it.
        let dest = std::mem::take(&mut msg.dest);
        let reached = local.len() + shares.iter().map(|(_, s)| s.len()).sum::<u64>();
        let (reach, unreachable) = if reached == dest.len() {
            (dest, IdSet::new())
        } else {
            self.split_unreachable(&local, &shares, &dest)
        };
        let (me, registry) = (self.me, &self.registry);
        let make = |spec: &str| match spec {
            // The default, without a registry lookup: `""` is always the identical merge.
            "" => Ok(Box::new(Identical::new()) as Box<dyn Filter>),
            spec => registry.create(spec).map_err(|e| {
                tracing::debug!(node = %me, op, "{e}; the replies of this op go up as errors");
                filter_failure(&e)
            }),
        };
        let mut pending = PendingOp::new(
            msg.aggregate.sync,
            make(&msg.aggregate.filter),
            reach,
            shares.len() + usize::from(!local.is_empty()),
        );
        if !unreachable.is_empty() {
            self.account_unreachable(op, &mut pending, &unreachable);
        }
        // Children's deadlines end a little before ours, so their precise timed-out
        // groups reach us before our own timer fires.
        let child_sync = match msg.aggregate.sync {
            SyncMode::Timeout(ms) if ms > 0 => {
                pending.deadline = Some(now + Duration::from_millis(u64::from(ms)));
                SyncMode::Timeout(ms.saturating_sub((ms / 16).max(1)).max(1))
            }
            s => s,
        };
        // The route's own vector, when this node lost no child and adopted no descendant
        // (nearly always).
        let mut forward = match self.losses {
            None => shares,
            Some(_) => self.route_around_losses(shares, &mut pending),
        };
        forward.retain(|(_, share)| !share.is_empty());
        // `msg` has no destination any more: each copy gets its child's share.
        msg.aggregate.sync = child_sync;
        for (child, share) in forward.drain(..) {
            let fwd = msg.to(share.clone());
            pending.left += share.len();
            pending.outstanding.push((Source::Child(child), share));
            self.out.push_back(Output::ToChild(child, fwd));
        }
        // The telemetry request is answered here, by the node, once the op is in.
        let mut answer_here = None;
        if !local.is_empty() && &*msg.service == telemetry::SERVICE {
            pending.left += local.len();
            pending.outstanding.push((Source::Local, local.clone()));
            answer_here = Some(std::mem::take(&mut local));
        }
        if !local.is_empty() {
            pending.left += local.len();
            pending.outstanding.push((Source::Local, local.clone()));
            self.out.push_back(Output::Deliver {
                op,
                ranks: local,
                kind: msg.kind,
                filter: msg.aggregate.filter,
                service: msg.service,
                payload: msg.payload,
            });
        }
        pending.sources_complete();
        if let Some(d) = pending.deadline {
            self.timers.insert((d, op));
        }
        self.ops.insert(op, pending);
        if let Some(ranks) = answer_here {
            let report = Bytes::from(self.telemetry_report().encode());
            self.accept(op, Source::Local, (Status::Replied, None), report, &ranks);
        }
        self.progress(op);
    }

    /// Gives each copy of command `op` still queued here (for a child, or to run at this
    /// server) the payload `f(to)` returns, `to` being who that copy is for (the child, or
    /// this node): a command whose payload each subtree needs only part of (the init
    /// command's routing table) is narrowed to its share.
    pub fn tailor_queued(&mut self, op: u64, mut f: impl FnMut(NodeId) -> Bytes) {
        let me = self.me;
        for o in &mut self.out {
            match o {
                Output::ToChild(c, m) if m.op == op && m.kind == Kind::Command => {
                    m.payload = f(*c);
                }
                Output::Deliver {
                    op: o,
                    kind: Kind::Command,
                    payload,
                    ..
                } if *o == op => {
                    *payload = f(me);
                }
                _ => {}
            }
        }
    }

    /// A frame arrived from child `child`.
    pub fn handle_from_child(&mut self, now: Instant, child: NodeId, msg: Message) {
        self.clocks.heard(now, Peer::Child(child));
        if let Some(t) = &mut self.telemetry {
            t.received(Peer::Child(child), &msg);
        }
        match msg.kind {
            Kind::Control => self.handle_control(now, Peer::Child(child), &msg),
            Kind::Reply => {
                self.stats.replies_in += 1;
                let status = msg.aggregate.status.unwrap_or(Status::Replied);
                let end = msg.aggregate.link_end;
                let from = Source::Child(child);
                self.accept(msg.op, from, (status, end), msg.payload, &msg.source);
            }
            Kind::Stdio | Kind::Event => {
                if self.losses().dead.contains_key(&child) {
                    // Output still in flight from a link already declared dead.
                    return;
                }
                if let Err(e) = self.down.entry(child).or_default().receive(&msg) {
                    let why = LinkEnd::Protocol(format!("server {child} {e}"));
                    self.handle_link_down(now, child, why.clone());
                    self.out
                        .push_back(Output::LinkDead(Peer::Child(child), why));
                    return;
                }
                // Events share the buffer so they never overtake their sources' output.
                let line = StdioLine {
                    kind: msg.kind,
                    sources: msg.source,
                    index: msg.op,
                    payload: msg.payload,
                };
                match self.stdio.as_mut() {
                    None => self.push_stdio(line, Some(Origin::Child(child))),
                    Some(c) => {
                        for l in c.push(now, line) {
                            self.push_stdio(l, None);
                        }
                    }
                }
                // Credit for it goes back now if it went up at once (or merged).
                self.release_output();
                self.grant(child);
            }
            _ => {
                tracing::warn!(node = %self.me, %child, kind = ?msg.kind, "refused frame from child");
                self.stats.refused += 1;
            }
        }
    }

    /// The local command `op` produced `payload` for the local ranks `ranks` (all of the
    /// delivery's ranks, or some of them: the others answer in replies of their own, and
    /// the op's filter merges them as it merges children's).
    pub fn handle_local_reply(&mut self, now: Instant, op: u64, ranks: &IdSet, payload: Bytes) {
        let _ = now;
        self.accept(op, Source::Local, (Status::Replied, None), payload, ranks);
    }

    /// The local command `op` failed for the local ranks `ranks`: `why` joins the op's
    /// error groups as it is, not its filter.
    pub fn handle_local_failure(&mut self, op: u64, ranks: &IdSet, why: Bytes) {
        self.accept(op, Source::Local, (Status::Error, None), why, ranks);
    }

    /// Accounts `ids` from `from` with their status (and, lost, their link's end): only ids
    /// still outstanding from that source count.
    fn accept(
        &mut self,
        op: u64,
        from: Source,
        (status, end): (Status, Option<LinkEndKind>),
        payload: Bytes,
        ids: &IdSet,
    ) {
        let Some(p) = self.ops.get_mut(op) else {
            self.stats.stray_ids += ids.len();
            tracing::debug!(node = %self.me, op, %ids, "reply for an op no longer in flight");
            return;
        };
        let Some(want) = p.outstanding_mut(from) else {
            self.stats.stray_ids += ids.len();
            return;
        };
        // Most often a source answers for all it still owes at once: take it whole.
        let got = if want == ids {
            std::mem::take(want)
        } else {
            let got = want as &IdSet & ids;
            want.difference_with(&got);
            got
        };
        self.stats.stray_ids += ids.len() - got.len();
        if got.is_empty() {
            return;
        }
        p.left -= got.len();
        // Filter time is measured only while telemetry is on (it reads the clock).
        match self
            .telemetry
            .as_mut()
            .filter(|_| status == Status::Replied)
        {
            None => p.add_ended(status, end, payload, &got),
            Some(t) => {
                let start = Instant::now();
                p.add_ended(status, end, payload, &got);
                t.filter_time(p.filter_name(), start.elapsed());
            }
        }
        self.progress(op);
    }

    /// The parent link died: nothing can be answered any more; all state is dropped but
    /// the output waiting for credit, which goes to the next parent (with a whole window).
    pub fn handle_parent_down(&mut self) {
        self.clocks.gone(Peer::Parent);
        self.ops.clear();
        self.timers.clear();
        if let Some(u) = &mut self.up {
            u.reset();
        }
    }

    /// Time has reached `now`: operations past their deadline time out. (Out of line: a
    /// driver calls it in the turn that frames go through, at most once a timer.)
    #[inline(never)]
    pub fn handle_timeout(&mut self, now: Instant) {
        for l in self
            .stdio
            .as_mut()
            .map(|c| c.expire(now))
            .unwrap_or_default()
        {
            self.push_stdio(l, None);
        }
        while let Some(&(d, op)) = self.timers.first() {
            if d > now {
                break;
            }
            self.timers.pop_first();
            if let Some(p) = self.ops.get_mut(op) {
                let mut missing = IdSet::new();
                for (_, ids) in &mut p.outstanding {
                    missing.union_with(&std::mem::take(ids));
                }
                p.left = 0;
                if !missing.is_empty() {
                    p.add(Status::TimedOut, Bytes::new(), &missing);
                }
                self.progress(op);
            }
        }
        let due = self.clocks.due(now);
        for peer in due.pings {
            // Timed (a sequence number the peer echoes) while telemetry is on.
            let seq = self.telemetry.as_mut().map_or(0, |t| t.ping(peer, now));
            self.send_to(peer, Control::Keepalive(seq).to_message());
        }
        for (peer, why) in due.dead {
            if let Peer::Child(c) = peer {
                self.handle_link_down(now, c, why.clone());
            }
            self.out.push_back(Output::LinkDead(peer, why));
        }
    }

    /// When [`Node::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let op = self.timers.first().map(|&(d, _)| d);
        [
            op,
            self.stdio.as_ref().and_then(|c| c.deadline()),
            self.clocks.deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next thing to do, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        let out = self.out.pop_front();
        if let Some(t) = &mut self.telemetry {
            match &out {
                Some(Output::ToParent(m)) => t.sent(Peer::Parent, m),
                Some(Output::ToChild(c, m)) => t.sent(Peer::Child(*c), m),
                _ => {}
            }
        }
        out
    }

    /// Whether something is waiting for [`Node::poll_output`].
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Sends what is ready for `op` upward and retires it when every id is accounted.
    fn progress(&mut self, op: u64) {
        let Some(p) = self.ops.get_mut(op) else {
            return;
        };
        let done = p.done();
        if done || p.sync == SyncMode::DontWait {
            let start = self.telemetry.is_some().then(Instant::now);
            let (replied, others) = p.take_groups();
            if let (Some(t), Some(start)) = (&mut self.telemetry, start) {
                t.filter_time(p.filter_name(), start.elapsed());
            }
            let flushed = replied
                .into_iter()
                .map(|g| Message::reply(op, g.sources, Status::Replied, g.payload));
            let others = others.into_iter().map(|g| {
                let mut m = Message::reply(op, g.sources, g.status, g.payload);
                m.aggregate.link_end = g.link_end;
                m
            });
            for m in flushed.chain(others) {
                self.stats.replies_out += 1;
                self.out.push_back(Output::ToParent(m));
            }
        }
        if done {
            if let Some(d) = p.deadline {
                self.timers.remove(&(d, op));
            }
            self.ops.remove(op);
        }
    }
}

mod figures;
mod losses;
mod op;
mod ops;
mod output;
#[cfg(test)]
mod ranks_tests;
#[cfg(test)]
mod tests;
