//! [`Frontend`]: the front-end's end of the link to the master: send a command to an
//! id-set, collect the merged reply groups until every destination id is accounted.
//!
//! An op sent with a filter ([`Frontend::send_filtered`]) is finished here: [`Frontend::collect`]
//! folds the replied groups that reach the front-end into a fresh filter and returns its
//! [`finish`](sdm_overlay::filters::Filter::finish) (`mean`: the mean, not a sum and a count;
//! `stacktrace`: the printed tree). [`Frontend::next_group`] streams the groups unfinished.
//!
//! The richer tool-builder library (launching, events, stdio), [`crate::Session`], builds
//! on this.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use sdm_overlay::filters::{FilterError, Registry};
use sdm_overlay::setup::{ConnectPolicy, FRONTEND, accept_named};
use sdm_overlay::stdio as flow;
use sdm_overlay::transport::{Link, Listener};
use sdm_proto::{IdSet, Kind, LinkEndKind, Message, Status, SyncMode};

/// One reply group as the front-end sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyGroup {
    /// What happened to the ids.
    pub status: Status,
    /// Who.
    pub sources: IdSet,
    /// Reply bytes (for lost groups: the reason; for error groups: the filter's error).
    pub payload: Bytes,
    /// How the link that lost the ids ended (lost groups the tree reported; `None` for
    /// other groups and for ids lost with the front-end's own link to the master).
    pub link_end: Option<LinkEndKind>,
}

impl ReplyGroup {
    /// The group carried by a reply message.
    pub fn from_message(m: &Message) -> Self {
        Self {
            status: m.aggregate.status.unwrap_or(Status::Replied),
            sources: m.source.clone(),
            payload: m.payload.clone(),
            link_end: m.aggregate.link_end,
        }
    }
}

/// A result goes to the tool, which may keep it: a small payload is copied out of the
/// received frame's read buffer it shares, which it would otherwise keep alive; a large one
/// is kept as it is.
fn own_if_small(payload: Bytes) -> Bytes {
    /// At most this many bytes are copied.
    const SMALL: usize = 64;
    if payload.len() <= SMALL {
        Bytes::copy_from_slice(&payload)
    } else {
        payload
    }
}

/// Runs the front-end end of filter `filter` over the final groups of one op: the replied
/// groups are folded into a fresh filter from `registry` and replaced by its
/// [`finish`](sdm_overlay::filters::Filter::finish); lost, timed-out and error groups follow.
///
/// Every id stays accounted: if the filter cannot be made, refuses a group, or fails to
/// finish, the ids concerned come back as an error group ([`Status::Error`], not lost:
/// their servers answered) whose payload is the filter error
/// (`filter "sum": payload from [7] is not a decimal number: "x"`).
pub fn finish(registry: &Registry, filter: &str, groups: Vec<ReplyGroup>) -> Vec<ReplyGroup> {
    let (replied, others): (Vec<_>, Vec<_>) = groups
        .into_iter()
        .partition(|g| g.status == Status::Replied);
    let mut out = Vec::with_capacity(others.len() + 1);
    let mut failed = Vec::new();
    let refused = |e: &FilterError, sources: IdSet| ReplyGroup {
        status: Status::Error,
        sources,
        payload: Bytes::from(e.to_string()),
        link_end: None,
    };
    match registry.create(filter) {
        Err(e) => failed.extend(replied.into_iter().map(|g| refused(&e, g.sources))),
        Ok(mut f) => {
            let mut folded = IdSet::new();
            for g in replied {
                match f.fold(&g.payload, &g.sources) {
                    Ok(()) => folded.union_with(&g.sources),
                    Err(e) => failed.push(refused(&e, g.sources)),
                }
            }
            match f.finish() {
                Ok(groups) => out.extend(groups.into_iter().map(|g| ReplyGroup {
                    status: Status::Replied,
                    sources: g.sources,
                    payload: own_if_small(g.payload),
                    link_end: None,
                })),
                Err(e) if !folded.is_empty() => failed.push(refused(&e, folded)),
                Err(_) => {}
            }
        }
    }
    // One group per distinct status, link end and payload, like the tree's own merge
    // (errors made here join the equal errors the tree sent up).
    for g in failed.into_iter().chain(others) {
        match out.iter_mut().find(|o| {
            o.status == g.status
                && o.status != Status::Replied
                && o.link_end == g.link_end
                && o.payload == g.payload
        }) {
            Some(o) => o.sources.union_with(&g.sources),
            None => out.push(g),
        }
    }
    out
}

/// The front-end side of the master link.
pub struct Frontend {
    link: Link,
    next_op: u64,
    inbox: HashMap<u64, Vec<ReplyGroup>>,
    events: VecDeque<Message>,
    closed: Option<String>,
    /// Filters of the ops in flight that were sent with one (not `identical`).
    filters: HashMap<u64, String>,
    /// Where those filters come from, for their finish.
    registry: Arc<Registry>,
    /// Credit owed to the master for the stdio and events the tool has taken
    /// ([`sdm_overlay::stdio`]): output flows only as fast as the tool takes it.
    grant: flow::Grant,
}

impl Frontend {
    /// Wraps an established link to the master.
    pub fn new(link: Link) -> Self {
        Self {
            link,
            next_op: 1,
            inbox: HashMap::new(),
            events: VecDeque::new(),
            closed: None,
            filters: HashMap::new(),
            registry: Arc::new(Registry::new()),
            grant: flow::Grant::default(),
        }
    }

    /// Finishes filtered ops with the filters of `registry` (the built-ins plus the
    /// plugins the daemons load) instead of the built-ins alone.
    pub fn set_registry(&mut self, registry: Arc<Registry>) {
        self.registry = registry;
    }

    /// The link to the master, for a front-end that drives it itself (sdm-client's
    /// concurrent session). Frames already read and not yet taken are dropped.
    pub fn into_link(self) -> Link {
        self.link
    }

    /// Waits on `listener` for the master to connect and say hello.
    pub async fn accept_master(
        listener: &mut dyn Listener,
        policy: &ConnectPolicy,
    ) -> Result<Self, sdm_overlay::LinkError> {
        Ok(Self::new(accept_named(listener, FRONTEND, policy).await?))
    }

    /// Sends `payload` to `dest`; returns the op id to [`Frontend::collect`].
    pub async fn send(
        &mut self,
        dest: &IdSet,
        sync: SyncMode,
        payload: impl Into<Bytes>,
    ) -> io::Result<u64> {
        self.send_filtered(dest, sync, "", payload).await
    }

    /// Sends `payload` to `dest`, replies merged by the filter named `filter` (`name` or
    /// `name:params`; `""` is `identical`). [`Frontend::collect`] returns the filter's
    /// finished form.
    pub async fn send_filtered(
        &mut self,
        dest: &IdSet,
        sync: SyncMode,
        filter: &str,
        payload: impl Into<Bytes>,
    ) -> io::Result<u64> {
        let mut m = Message::command(0, dest.clone(), sync, payload);
        m.aggregate.filter = filter.into();
        self.send_command(m).await
    }

    /// Sends the command `m` (its destination, sync mode, filter, service and payload as
    /// built, e.g. with [`Message::for_service`]) under a fresh op id, which it returns.
    pub async fn send_command(&mut self, mut m: Message) -> io::Result<u64> {
        let op = self.next_op;
        self.next_op += 1;
        m.op = op;
        m.kind = Kind::Command;
        self.link.writer.send(&m).await.map_err(io::Error::other)?;
        if !matches!(&*m.aggregate.filter, "" | "identical") {
            self.filters.insert(op, m.aggregate.filter.to_string());
        }
        Ok(op)
    }

    /// Reads reply groups for `op` until they cover `dest`. If the master link ends first,
    /// the ids not yet accounted come back as one lost group naming the reason. An op sent
    /// with a filter comes back finished (see [`finish`]).
    pub async fn collect(&mut self, op: u64, dest: &IdSet) -> io::Result<Vec<ReplyGroup>> {
        let filter = self.filters.remove(&op);
        let mut seen = IdSet::new();
        let mut out = Vec::new();
        while let Some(g) = self.next_group(op, dest, &mut seen).await? {
            out.push(g);
        }
        Ok(match filter {
            Some(filter) => finish(&self.registry, &filter, out),
            None => out,
        })
    }

    /// The next reply group of `op` as it arrives; `seen` accumulates the ids accounted so
    /// far, and `None` comes once it covers `dest`. A dead master link yields one lost
    /// group for the rest.
    pub async fn next_group(
        &mut self,
        op: u64,
        dest: &IdSet,
        seen: &mut IdSet,
    ) -> io::Result<Option<ReplyGroup>> {
        loop {
            if let Some(groups) = self.inbox.get_mut(&op)
                && !groups.is_empty()
            {
                let g = groups.remove(0);
                seen.union_with(&g.sources);
                return Ok(Some(g));
            }
            if dest.is_subset(seen) {
                self.inbox.remove(&op);
                self.filters.remove(&op);
                return Ok(None);
            }
            match self.next_frame().await {
                Some(m) => self.file(m),
                None => {
                    let missing = dest - &*seen;
                    seen.union_with(&missing);
                    let why = self.closed.clone().unwrap_or_default();
                    return Ok(Some(ReplyGroup {
                        status: Status::Lost,
                        sources: missing,
                        payload: Bytes::from(format!("master link lost: {why}")),
                        link_end: None,
                    }));
                }
            }
        }
    }

    /// Sends and collects in one call.
    pub async fn request(
        &mut self,
        dest: &IdSet,
        sync: SyncMode,
        payload: impl Into<Bytes>,
    ) -> io::Result<Vec<ReplyGroup>> {
        let op = self.send(dest, sync, payload).await?;
        self.collect(op, dest).await
    }

    /// Sends with filter `filter` and collects the finished groups in one call.
    pub async fn request_filtered(
        &mut self,
        dest: &IdSet,
        sync: SyncMode,
        filter: &str,
        payload: impl Into<Bytes>,
    ) -> io::Result<Vec<ReplyGroup>> {
        let op = self.send_filtered(dest, sync, filter, payload).await?;
        self.collect(op, dest).await
    }

    /// Why the master link ended, if it did.
    pub fn closed_reason(&self) -> Option<&str> {
        self.closed.as_deref()
    }

    /// An event already received, without waiting.
    pub fn queued_event(&mut self) -> Option<Message> {
        let m = self.events.pop_front()?;
        self.taken(&m);
        Some(m)
    }

    /// Counts an event or stdio frame handed to the tool; its credit goes back to the
    /// master before the next read.
    fn taken(&mut self, m: &Message) {
        if flow::is_bulk(m.kind) {
            // A credit frame is due once a step was taken; `next_frame` sends it.
            self.grant.count(m);
        }
    }

    /// The next unsolicited event (or stdio), waiting for one.
    pub async fn next_event(&mut self) -> Option<Message> {
        loop {
            if let Some(m) = self.queued_event() {
                return Some(m);
            }
            let m = self.next_frame().await?;
            self.file(m);
        }
    }

    fn file(&mut self, m: Message) {
        match m.kind {
            Kind::Reply => self
                .inbox
                .entry(m.op)
                .or_default()
                .push(ReplyGroup::from_message(&m)),
            // Link keepalives (see `liveness`) carry nothing for the tool.
            Kind::Control => {}
            _ => self.events.push_back(m),
        }
    }

    async fn next_frame(&mut self) -> Option<Message> {
        if self.closed.is_some() {
            return None;
        }
        // Hand back the credit for what the tool took. Cancel-safe (this runs inside
        // `select!`): the grant is only cleared once its frame is in the writer's buffer,
        // and a flush cut short is finished by the next one.
        let mut res = Ok(());
        if self.grant.pending() >= flow::GRANT_STEP {
            res = self
                .link
                .writer
                .feed(&flow::credit(self.grant.pending()))
                .await;
            if res.is_ok() {
                self.grant.flush();
            }
        }
        if let Err(e) = res.and(self.link.writer.flush().await) {
            self.closed = Some(format!("handing credit to the master: {e}"));
            return None;
        }
        match self.link.reader.next().await {
            Some(Ok(m)) => Some(m),
            Some(Err(e)) => {
                self.closed = Some(e.to_string());
                None
            }
            None => {
                self.closed = Some("master closed the connection".into());
                None
            }
        }
    }
}
