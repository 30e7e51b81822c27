//! [`Handle`]: the master link shared by every thread and task of a tool. One reader task
//! owns the link's reading side and files each reply group under its op in the table of
//! pending operations (a [`DashMap`]); one writer task owns the writing side.
//!
//! Senders take `&self`: each gets a fresh op id from an atomic counter, registers the op
//! before its command leaves, and awaits only its own op's groups, so any number of
//! requests can be in flight at once. Every destination id is accounted: the tree answers
//! each (replied, lost, timed out), and if the master link dies every pending op's missing
//! ids come back as one lost group naming the reason. Events and stdio go to their own
//! queue; the output credit ([`flow::Grant`]) for what the tool took goes back to the master
//! when it next waits or sends.
//!
//! ```no_run
//! # async fn demo(session: sdm_client::Session) -> Result<(), sdm_client::Error> {
//! use sdm_proto::{IdSet, SyncMode};
//! let mut tasks = Vec::new();
//! for rank in 0..session.size() {
//!     let link = session.handle();
//!     tasks.push(tokio::spawn(async move {
//!         // Each task's request is in flight with the others' and gets only its replies.
//!         link.request(&IdSet::single(rank), SyncMode::WaitAll, "info").await
//!     }));
//! }
//! for t in tasks {
//!     for group in t.await.expect("task")? {
//!         println!("{} {:?}", group.sources, group.payload);
//!     }
//! }
//! # Ok(()) }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};

use bytes::Bytes;
use dashmap::DashMap;
use futures::{SinkExt, StreamExt};
use sdm_overlay::filters::Registry;
use sdm_overlay::stdio as flow;
use sdm_overlay::transport::Link;
use sdm_proto::{IdSet, Kind, Message, Status, SyncMode};
use tokio::sync::{Mutex, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::error::{Error, Result, WriteFailure};
use crate::frontend::{ReplyGroup, finish};

/// Why a link closed when the reader did not say (its task was stopped).
const SHUT_DOWN: &str = "the session was shut down";

/// What [`Handle::start_program`] achieved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgramStart {
    /// Ranks that run the program.
    pub started: IdSet,
    /// Ranks that do not, with why (the server's error, lost, timed out).
    pub failed: Vec<(IdSet, String)>,
}

/// One op in flight: where the reader files its groups and how it is finished.
struct PendingOp {
    /// The reader's end: each reply group of this op, in arrival order.
    tx: mpsc::UnboundedSender<ReplyGroup>,
    /// The collector's end (one collector at a time per op).
    rx: Arc<Mutex<mpsc::UnboundedReceiver<ReplyGroup>>>,
    /// The filter the op was sent with, finished here (`None`: `identical`).
    filter: Option<String>,
}

/// A frame for the writer task, and where to say whether it was written.
struct Outgoing {
    frame: Message,
    done: Option<oneshot::Sender<std::result::Result<(), WriteFailure>>>,
}

/// What every clone of a [`Handle`] shares.
struct Shared {
    pending: Arc<DashMap<u64, PendingOp>>,
    next_op: AtomicU64,
    out: mpsc::UnboundedSender<Outgoing>,
    events: Mutex<mpsc::UnboundedReceiver<Message>>,
    /// Output that reached the front-end by another path ([`Handle::inject_output`]).
    injected: Mutex<mpsc::UnboundedReceiver<Message>>,
    inject: mpsc::UnboundedSender<Message>,
    grant: SyncMutex<flow::Grant>,
    closed: watch::Receiver<Option<String>>,
    registry: Arc<Registry>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Shared {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A cloneable handle on a session's master link: send commands, collect their reply
/// groups, take events. Clones share the link; all methods take `&self` and may run at
/// the same time from many tasks. Get one from [`crate::Session::handle`]; the link closes
/// when the session shuts down (or every handle is dropped).
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    /// Starts the reader and writer tasks on the current tokio runtime for `link`; filtered
    /// ops are finished with the filters of `registry`.
    pub(crate) fn spawn(link: Link, registry: Arc<Registry>) -> Self {
        let Link { reader, writer, .. } = link;
        let pending: Arc<DashMap<u64, PendingOp>> = Arc::new(DashMap::new());
        let (closed_tx, closed) = watch::channel(None);
        let (events_tx, events) = mpsc::unbounded_channel();
        let (out, out_rx) = mpsc::unbounded_channel();
        let (inject, injected) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_loop(reader, pending.clone(), events_tx, closed_tx));
        let writer = tokio::spawn(write_loop(writer, out_rx));
        Self {
            shared: Arc::new(Shared {
                pending,
                next_op: AtomicU64::new(1),
                out,
                events: Mutex::new(events),
                injected: Mutex::new(injected),
                inject,
                grant: SyncMutex::new(flow::Grant::default()),
                closed,
                registry,
                tasks: [reader, writer],
            }),
        }
    }

    /// Sends `payload` to `dest`; returns the op id to [`Handle::collect`].
    pub async fn send(
        &self,
        dest: &IdSet,
        sync: SyncMode,
        payload: impl Into<Bytes>,
    ) -> Result<u64> {
        self.send_filtered(dest, sync, "", payload).await
    }

    /// Sends `payload` to `dest`, replies merged by the filter named `filter` (`name` or
    /// `name:params`; `""` is `identical`). [`Handle::collect`] returns the filter's
    /// finished form.
    pub async fn send_filtered(
        &self,
        dest: &IdSet,
        sync: SyncMode,
        filter: &str,
        payload: impl Into<Bytes>,
    ) -> Result<u64> {
        let mut m = Message::command(0, dest.clone(), sync, payload);
        m.aggregate.filter = filter.into();
        self.send_command(m).await
    }

    /// Sends the command `m` (its destination, sync mode, filter, service and payload as
    /// built, e.g. with [`Message::for_service`]) under a fresh op id, which it returns.
    /// The op is registered before the command leaves, so no reply can miss it.
    pub async fn send_command(&self, mut m: Message) -> Result<u64> {
        self.hand_back_credit();
        let op = self.shared.next_op.fetch_add(1, Ordering::Relaxed);
        m.op = op;
        m.kind = Kind::Command;
        let filter = m.aggregate.filter.clone();
        let (tx, rx) = mpsc::unbounded_channel();
        self.shared.pending.insert(
            op,
            PendingOp {
                tx,
                rx: Arc::new(Mutex::new(rx)),
                filter: (!matches!(&*filter, "" | "identical")).then(|| filter.to_string()),
            },
        );
        let (done, written) = oneshot::channel();
        let sent = self
            .shared
            .out
            .send(Outgoing {
                frame: m,
                done: Some(done),
            })
            .is_ok();
        let res = match (sent, written.await) {
            (true, Ok(Ok(()))) => Ok(op),
            (true, Ok(Err(e))) => Err(Error::write(op, e)),
            _ => Err(Error::closed(format!("sending op {op}: {}", self.reason()))),
        };
        if res.is_err() {
            self.shared.pending.remove(&op);
        }
        res
    }

    /// Every reply group of `op`, once they account for all of `dest`; an op sent with a
    /// filter comes back finished (see [`finish`]). If the master link ends first, the ids
    /// not yet accounted come back as one lost group naming the reason.
    pub async fn collect(&self, op: u64, dest: &IdSet) -> Result<Vec<ReplyGroup>> {
        let filter = self.shared.pending.get(&op).and_then(|p| p.filter.clone());
        let mut seen = IdSet::new();
        let mut out = Vec::new();
        while let Some(g) = self.next_group(op, dest, &mut seen).await? {
            out.push(g);
        }
        Ok(match filter {
            Some(filter) => finish(&self.shared.registry, &filter, out),
            None => out,
        })
    }

    /// The next reply group of `op` as it arrives, unfinished; `seen` accumulates the ids
    /// accounted so far, and `None` comes once it covers `dest` (the op is then forgotten).
    /// A dead master link yields one lost group for the rest. An error if `op` is not in
    /// flight (never sent, or already finished).
    pub async fn next_group(
        &self,
        op: u64,
        dest: &IdSet,
        seen: &mut IdSet,
    ) -> Result<Option<ReplyGroup>> {
        if dest.is_subset(seen) {
            self.shared.pending.remove(&op);
            return Ok(None);
        }
        self.hand_back_credit();
        // Clone the queue out: the table's shard lock is never held across an await.
        let rx = match self.shared.pending.get(&op) {
            Some(p) => p.rx.clone(),
            None => return Err(Error::invalid(format!("op {op} is not in flight"))),
        };
        let mut rx = rx.lock().await;
        let mut closed = self.shared.closed.clone();
        let g = tokio::select! {
            biased;
            g = rx.recv() => g,
            _ = closed.wait_for(Option::is_some) => rx.try_recv().ok(),
        };
        let g = g.unwrap_or_else(|| ReplyGroup {
            status: Status::Lost,
            sources: dest - &*seen,
            payload: Bytes::from(format!("master link lost: {}", self.reason())),
            link_end: None,
        });
        seen.union_with(&g.sources);
        Ok(Some(g))
    }

    /// Sends the command `m` and collects every reply group of it (see
    /// [`crate::service`] for commands tagged with their service).
    pub async fn request_command(&self, m: Message) -> Result<Vec<ReplyGroup>> {
        let dest = m.dest.clone();
        let op = self.send_command(m).await?;
        self.collect(op, &dest).await
    }

    /// Sends and collects in one call.
    pub async fn request(
        &self,
        dest: &IdSet,
        sync: SyncMode,
        payload: impl Into<Bytes>,
    ) -> Result<Vec<ReplyGroup>> {
        let op = self.send(dest, sync, payload).await?;
        self.collect(op, dest).await
    }

    /// Sends with filter `filter` and collects the finished result: the filter's `finish`
    /// over every replied group (`mean`: the mean), then the lost and timed-out groups.
    /// Ids whose replies the filter refused come back lost, with the filter's error as the
    /// payload.
    pub async fn request_filtered(
        &self,
        dest: &IdSet,
        sync: SyncMode,
        filter: &str,
        payload: impl Into<Bytes>,
    ) -> Result<Vec<ReplyGroup>> {
        let op = self.send_filtered(dest, sync, filter, payload).await?;
        self.collect(op, dest).await
    }

    /// Writes `data` to the standard input of the programs on `ids` (`eof`: then ends
    /// their input: ^D on a pty, close on a pipe). Returns the merged replies (errors
    /// name the ranks whose input is already closed).
    pub async fn write_stdin(
        &self,
        ids: &IdSet,
        data: &[u8],
        eof: bool,
    ) -> Result<Vec<ReplyGroup>> {
        let text = sdm_omis::Value::Str(String::from_utf8_lossy(data).into_owned());
        let req = format!("0 [] sdm_stdin({text}, {})", i32::from(eof));
        self.request_command(crate::service::omis(ids, SyncMode::Timeout(30_000), req))
            .await
    }

    /// Starts `program` with `args` on every server of `dest` (the OMIS `sdm_start`
    /// request; `iof`: `pipes` keeps stdout and stderr apart, `pty` gives a terminal) and
    /// says which ranks run it and why the others do not.
    pub async fn start_program(
        &self,
        dest: &IdSet,
        program: &str,
        args: &[String],
        iof: &str,
    ) -> Result<ProgramStart> {
        use sdm_omis::Value;
        let args: Vec<String> = args
            .iter()
            .map(|a| Value::Str(a.clone()).to_string())
            .collect();
        let req = format!(
            "0 [] sdm_start({}, [{}], {})",
            Value::Str(program.to_owned()),
            args.join(","),
            Value::Str(iof.to_owned())
        );
        let mut out = ProgramStart::default();
        for g in self
            .request_command(crate::service::omis(dest, SyncMode::WaitAll, req))
            .await?
        {
            let text = String::from_utf8_lossy(&g.payload).into_owned();
            // A started program's reply carries its pid; anything else says why not.
            let pid = (g.status == Status::Replied)
                .then(|| sdm_omis::parse_reply(&text).ok())
                .flatten()
                .and_then(|r| r.0.into_iter().next())
                .is_some_and(|r| matches!(r.results.first(), Some(Value::Int(_))));
            if pid {
                out.started.union_with(&g.sources);
            } else {
                out.failed.push((g.sources, text));
            }
        }
        Ok(out)
    }

    /// The next unsolicited event or stdio message, waiting for one; `None` once the link
    /// is closed and every event was taken. Cancel-safe (use it in `select!`); one taker at
    /// a time, the others wait their turn.
    pub async fn next_event(&self) -> Option<Message> {
        self.hand_back_credit();
        let mut events = self.shared.events.lock().await;
        let mut injected = self.shared.injected.lock().await;
        tokio::select! {
            Some(m) = injected.recv() => Some(m),
            m = events.recv() => {
                let m = m?;
                self.taken(&m);
                Some(m)
            }
        }
    }

    /// An event already received, without waiting.
    pub fn queued_event(&self) -> Option<Message> {
        if let Some(m) = self
            .shared
            .injected
            .try_lock()
            .ok()
            .and_then(|mut r| r.try_recv().ok())
        {
            return Some(m);
        }
        let m = self.shared.events.try_lock().ok()?.try_recv().ok()?;
        self.taken(&m);
        Some(m)
    }

    /// Output of the ranks that reached the front-end by another path than the tree (a
    /// held job's launcher's labelled output): taken with the tree's events and stdio, in
    /// the same form (stdio with its rank as source and its line index as op), without
    /// flow-control credit.
    pub fn inject_output(&self, m: Message) {
        let _ = self.shared.inject.send(m);
    }

    /// Counts an event or stdio frame handed to the tool; its credit goes back to the
    /// master when the tool next waits or sends ([`Handle::hand_back_credit`]).
    fn taken(&self, m: &Message) {
        if flow::is_bulk(m.kind) {
            self.grant().count(m);
        }
    }

    fn grant(&self) -> std::sync::MutexGuard<'_, flow::Grant> {
        self.shared.grant.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands the credit for the output the tool took back to the master, once enough was
    /// taken to be worth a frame; called as the tool next waits for an event or a reply, or
    /// sends: output flows only as fast as the tool takes it, and what the front-end holds
    /// unread between two such calls stays within one window.
    fn hand_back_credit(&self) {
        let credit = {
            let mut g = self.grant();
            (g.pending() >= flow::GRANT_STEP).then(|| g.flush())
        };
        if let Some(frame) = credit {
            // A closed writer means a closed link: nothing is owed any more.
            let _ = self.shared.out.send(Outgoing { frame, done: None });
        }
    }

    /// Why the master link ended, if it did.
    pub fn closed_reason(&self) -> Option<String> {
        self.shared.closed.borrow().clone().or_else(|| {
            self.shared.tasks[0]
                .is_finished()
                .then(|| SHUT_DOWN.to_owned())
        })
    }

    /// Ops sent and not yet collected to the end.
    pub fn pending_ops(&self) -> usize {
        self.shared.pending.len()
    }

    /// Closes the link: both tasks stop, every pending op's missing ids come back lost.
    pub(crate) fn close(&self) {
        for t in &self.shared.tasks {
            t.abort();
        }
    }

    fn reason(&self) -> String {
        self.closed_reason().unwrap_or_else(|| SHUT_DOWN.to_owned())
    }
}

/// The reader task: files reply groups under their op, events and stdio in their queue;
/// says why when the link ends (every pending op then accounts its missing ids as lost).
async fn read_loop<R, E>(
    mut reader: R,
    pending: Arc<DashMap<u64, PendingOp>>,
    events: mpsc::UnboundedSender<Message>,
    closed: watch::Sender<Option<String>>,
) where
    R: futures::Stream<Item = std::result::Result<Message, E>> + Unpin,
    E: std::fmt::Display,
{
    let reason = loop {
        match reader.next().await {
            Some(Ok(m)) => match m.kind {
                Kind::Reply => match pending.get(&m.op) {
                    // The collector may have given up (dropped its future): nobody reads
                    // the queue then, and the entry goes with the op's last group.
                    Some(p) => drop(p.tx.send(ReplyGroup::from_message(&m))),
                    None => tracing::debug!("reply for op {} which is not in flight", m.op),
                },
                // Link keepalives (see `liveness`) carry nothing for the tool.
                Kind::Control => {}
                _ => drop(events.send(m)),
            },
            Some(Err(e)) => break e.to_string(),
            None => break "master closed the connection".to_owned(),
        }
    };
    tracing::debug!("master link closed: {reason}");
    closed.send_replace(Some(reason));
}

/// The writer task: writes commands and credit frames in the order they were queued, and
/// tells each sender that waits whether its frame went out.
async fn write_loop<W, E>(mut writer: W, mut queue: mpsc::UnboundedReceiver<Outgoing>)
where
    W: for<'a> futures::Sink<&'a Message, Error = E> + Unpin,
    E: std::error::Error + Send + Sync + 'static,
{
    let mut failed: Option<WriteFailure> = None;
    while let Some(Outgoing { frame, done }) = queue.recv().await {
        let res = match &failed {
            Some(e) => Err(e.clone()),
            None => writer
                .send(&frame)
                .await
                .map_err(|e| -> WriteFailure { std::sync::Arc::new(e) }),
        };
        if let Err(e) = &res {
            failed.get_or_insert_with(|| e.clone());
        }
        if let Some(done) = done {
            let _ = done.send(res);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle on one end of an in-memory link, and the master's end as a bare link.
    fn pair() -> (Handle, Link) {
        let (a, b) = tokio::io::duplex(1 << 20);
        let link = |s: tokio::io::DuplexStream, peer: &str| {
            let (r, w) = tokio::io::split(s);
            Link::new(Box::new(r), Box::new(w), peer, sdm_proto::DEFAULT_MAX_FRAME)
        };
        let handle = Handle::spawn(link(a, "master"), Arc::new(Registry::new()));
        (handle, link(b, "front-end"))
    }

    async fn command(master: &mut Link) -> Message {
        loop {
            let m = master
                .reader
                .next()
                .await
                .expect("a frame")
                .expect("decodes");
            if m.kind == Kind::Command {
                return m;
            }
        }
    }

    fn reply(op: u64, ids: &str, payload: &'static str) -> Message {
        Message::reply(
            op,
            ids.parse().unwrap(),
            Status::Replied,
            Bytes::from_static(payload.as_bytes()),
        )
    }

    #[tokio::test]
    async fn replies_reach_their_own_op_whatever_the_order_and_events_their_queue() {
        let (h, mut master) = pair();
        let (d1, d2): (IdSet, IdSet) = ("[0-3]".parse().unwrap(), "[2,5]".parse().unwrap());
        let op1 = h.send(&d1, SyncMode::WaitAll, "one").await.unwrap();
        let op2 = h.send(&d2, SyncMode::WaitAll, "two").await.unwrap();
        assert_ne!(op1, op2);
        let (c1, c2) = (command(&mut master).await, command(&mut master).await);
        assert_eq!((c1.op, c2.op), (op1, op2));
        let mut event = reply(0, "[1]", "process_terminated(\"exited\",0)");
        event.kind = Kind::Event;
        for m in [
            reply(op2, "[5]", "b"),
            reply(op1, "[0-1]", "a"),
            event,
            reply(op2, "[2]", "b"),
            reply(op1, "[2-3]", "a"),
        ] {
            master.writer.send(&m).await.unwrap();
        }
        let (g1, g2) = tokio::join!(h.collect(op1, &d1), h.collect(op2, &d2));
        let ids = |gs: &[ReplyGroup], want: &[u8]| {
            assert!(gs.iter().all(|g| &g.payload[..] == want), "{gs:?}");
            gs.iter().fold(IdSet::new(), |acc, g| &acc | &g.sources)
        };
        assert_eq!(ids(&g1.unwrap(), b"a"), d1);
        assert_eq!(ids(&g2.unwrap(), b"b"), d2);
        let e = h.next_event().await.unwrap();
        assert_eq!((e.kind, e.source), (Kind::Event, IdSet::single(1)));
        assert_eq!(h.pending_ops(), 0);
        // An op that is not in flight is refused, not waited for.
        let err = h.collect(op1, &d1).await.unwrap_err();
        assert!(err.is_invalid(), "{err}");
    }

    #[tokio::test]
    async fn a_dead_link_answers_the_missing_ids_lost_and_refuses_new_sends() {
        let (h, mut master) = pair();
        let dest: IdSet = "[0-7]".parse().unwrap();
        let op = h.send(&dest, SyncMode::WaitAll, "x").await.unwrap();
        command(&mut master).await;
        master.writer.send(&reply(op, "[0-2]", "ok")).await.unwrap();
        drop(master);
        let groups = h.collect(op, &dest).await.unwrap();
        assert_eq!(groups.len(), 2, "{groups:?}");
        assert_eq!(groups[0].sources, "[0-2]".parse().unwrap());
        assert_eq!(groups[1].status, Status::Lost);
        assert_eq!(groups[1].sources, "[3-7]".parse().unwrap());
        assert_eq!(
            &groups[1].payload[..],
            b"master link lost: master closed the connection"
        );
        assert!(h.next_event().await.is_none());
        // The writer finds the link gone (at once, or after the first frame it buffers).
        let mut refused = None;
        for _ in 0..64 {
            if let Err(e) = h.send(&dest, SyncMode::WaitAll, "again").await {
                refused = Some(e);
                break;
            }
        }
        assert!(refused.expect("a send fails").is_closed());
    }

    #[tokio::test]
    async fn output_credit_goes_back_as_the_tool_takes_output() {
        let (h, mut master) = pair();
        let line = |i: u64| {
            let mut m = Message::reply(
                i,
                IdSet::single(0),
                Status::Replied,
                Bytes::from(vec![b'x'; 1000]),
            );
            m.kind = Kind::Stdio;
            m
        };
        // A window's worth of output.
        let n = (flow::WINDOW / flow::cost(&line(0))) as u64;
        for i in 0..n {
            master.writer.feed(&line(i)).await.unwrap();
        }
        master.writer.flush().await.unwrap();
        // The tool takes a grant step's worth, then sends: the first frame the master
        // gets is the credit for exactly what was taken, then the command.
        let mut taken = 0;
        while taken < flow::GRANT_STEP {
            taken += flow::cost(&h.next_event().await.unwrap());
        }
        let op = h
            .send(&IdSet::single(0), SyncMode::WaitAll, "ping")
            .await
            .unwrap();
        let credit = master.reader.next().await.unwrap().unwrap();
        assert_eq!(flow::parse_credit(&credit), Some(taken));
        assert_eq!(command(&mut master).await.op, op);
        // Nothing more is owed until more is taken.
        let op = h
            .send(&IdSet::single(0), SyncMode::WaitAll, "ping")
            .await
            .unwrap();
        let next = master.reader.next().await.unwrap().unwrap();
        assert_eq!((next.kind, next.op), (Kind::Command, op));
    }
}
