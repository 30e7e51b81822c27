//! Credit-based flow control of output going up the tree, so output can never occupy the
//! path that commands and replies take: sans-IO window state that [`crate::Node`] owns.
//!
//! Frames going up are of two sorts: control (replies, keepalives) and bulk (stdio and
//! events, which keep their order among themselves). A link's sender may have at most
//! [`WINDOW`] bytes of bulk (as counted by [`cost`]) that its receiver has not yet taken
//! in ([`SendWindow`]); the receiver hands credit back, in [`Control::Credit`] frames, as it
//! takes bulk in ([`RecvWindow`], [`Grant`]). A node forwards its children's output up
//! against its parent's credit and hands a child credit back for what it took from that
//! child and no longer holds (gone up, or merged into another line); its own program's
//! output it takes only while less than [`QUEUE_LIMIT`] of it waits, asking its driver to
//! pause the local producer past it ([`crate::Output::PauseLocal`]). So a parent that gives
//! no credit stops its children's credit, and so on down to the process writing the
//! output, which blocks in `write`: backpressure, never a dropped line, and every node's
//! queue bounded (by [`QUEUE_LIMIT`] and a window per child).
//!
//! What waits for the parent's credit is queued by [`Origin`] (this server's program, or
//! the subtree behind one child link) and the credit is shared between the origins by
//! weight, the servers each stands for (start-time fair queuing): under a flood every rank
//! gets the same share of the master's link, however deep it sits, instead of the share
//! falling at each level. A line merged from several origins keeps every rank's order: it
//! goes when it is first in each of their queues, and holds back what they queued after
//! it.
//! Replies never wait for credit, so a reply is behind at most one window of output per
//! hop instead of behind every line the socket buffers and queues can hold.
//!
//! The window only limits bulk sent to a parent (or by the master to the front-end);
//! frames going down are commands and are never held. A child that sends bulk while it
//! has no credit breaks the protocol and loses its link ([`RecvWindow::receive`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use rustc_hash::FxBuildHasher;
use sdm_proto::{Control, Kind, Message};
use sdm_topology::NodeId;

/// Bytes of bulk a sender may have unacknowledged on one link.
pub const WINDOW: i64 = 64 * 1024;

/// Credit is handed back once this much was taken in, not per frame.
pub const GRANT_STEP: i64 = WINDOW / 4;

/// Bytes of bulk waiting for the parent's credit from which a node pauses its local
/// producer (its program's output).
pub(crate) const QUEUE_LIMIT: i64 = WINDOW;

/// Whether `kind` is bulk (stdio or events): held by the window when sent up.
pub fn is_bulk(kind: Kind) -> bool {
    matches!(kind, Kind::Stdio | Kind::Event)
}

/// What a bulk frame counts against the window. Both ends compute it from the frame, so
/// it need not be its exact size on the wire, only the same on both sides.
pub fn cost(m: &Message) -> i64 {
    m.payload.len() as i64 + 32
}

/// The control frame that hands `n` bytes of credit back to a sender.
pub fn credit(n: i64) -> Message {
    Control::Credit(n.max(0) as u64).to_message()
}

/// The credit `m` hands back, if it is a credit frame.
pub fn parse_credit(m: &Message) -> Option<i64> {
    match Control::from_message(m) {
        Ok(Control::Credit(n)) if n > 0 => Some(n.min(i64::MAX as u64) as i64),
        _ => None,
    }
}

/// A sender ignored the window: it sent bulk while it had no credit left.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "sent output beyond its flow-control window ({unacknowledged} bytes unacknowledged, \
     window {window})"
)]
pub(crate) struct WindowExceeded {
    unacknowledged: i64,
    window: i64,
}

impl WindowExceeded {
    /// Bytes the sender had unacknowledged when it sent the offending frame.
    #[cfg(test)]
    pub(crate) fn unacknowledged(&self) -> i64 {
        self.unacknowledged
    }
}

/// Whose output a frame going up is: this server's own program's, or the subtree's behind
/// one child link. Each has its queue and its share of the parent's credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Origin {
    /// This server's program (its stdio and events).
    Local,
    /// What came over the link from this child (or adopted descendant).
    Child(NodeId),
}

/// Virtual time advances by a frame's cost times this over its origin's weight.
const TIME_SCALE: u128 = 1 << 20;

/// One origin's queue.
#[derive(Debug)]
struct Lane {
    origin: Origin,
    /// The servers this origin stands for: its share of the credit.
    weight: u64,
    entries: VecDeque<Entry>,
    /// Bulk waiting here (a merged frame counts in its first lane).
    bytes: i64,
    /// Virtual start time of the head frame.
    tag: u128,
}

#[derive(Debug)]
enum Entry {
    Own(Message),
    /// A frame queued in several lanes at once (a line merged from several origins).
    Shared(u64),
}

/// A frame merged from several origins: it goes once it heads every lane it is in.
#[derive(Debug)]
struct SharedFrame {
    msg: Message,
    lanes: Vec<usize>,
    /// How many of those lanes it heads.
    heading: usize,
}

/// The sender's side of one link: credit left, and the bulk waiting for more of it,
/// queued by [`Origin`] and let go in weighted fair order (each origin's frames in order).
#[derive(Debug)]
pub(crate) struct SendWindow {
    credit: i64,
    lanes: Vec<Lane>,
    by_origin: HashMap<Origin, usize, FxBuildHasher>,
    shared: HashMap<u64, SharedFrame, FxBuildHasher>,
    next_shared: u64,
    /// Lanes whose head can go, by virtual start time (then lane, so ties are stable).
    ready: BinaryHeap<Reverse<(u128, usize)>>,
    /// Virtual time: the start time of the frame let go last.
    now: u128,
    queued: i64,
    frames: usize,
}

impl Default for SendWindow {
    fn default() -> Self {
        Self {
            credit: WINDOW,
            lanes: Vec::new(),
            by_origin: HashMap::default(),
            shared: HashMap::default(),
            next_shared: 0,
            ready: BinaryHeap::new(),
            now: 0,
            queued: 0,
            frames: 0,
        }
    }
}

impl SendWindow {
    /// Queues a bulk frame from `origins` (each with its weight, which counts the first
    /// time the origin is seen; one origin for most frames, several for a line merged from
    /// several, none meaning this server's own) behind what each of them queued before.
    pub(crate) fn push(&mut self, origins: &[(Origin, u64)], m: Message) {
        let c = cost(&m);
        self.queued += c;
        self.frames += 1;
        let (o, w) = match origins {
            [] => (Origin::Local, 1),
            [one] => *one,
            _ => return self.push_shared(origins, m, c),
        };
        let k = self.lane(o, w);
        self.push_entry(k, Entry::Own(m), c);
    }

    /// [`SendWindow::push`] of a frame from several origins: one entry in each of their
    /// lanes (its bytes counted in the first), all naming the one frame.
    fn push_shared(&mut self, origins: &[(Origin, u64)], m: Message, c: i64) {
        let mut lanes: Vec<usize> = origins.iter().map(|&(o, w)| self.lane(o, w)).collect();
        lanes.sort_unstable();
        lanes.dedup();
        if let [k] = lanes[..] {
            return self.push_entry(k, Entry::Own(m), c);
        }
        let id = self.next_shared;
        self.next_shared += 1;
        // Kept before its entries are queued: a lane it heads at once counts it.
        self.shared.insert(
            id,
            SharedFrame {
                msg: m,
                lanes: lanes.clone(),
                heading: 0,
            },
        );
        for (i, k) in lanes.into_iter().enumerate() {
            self.push_entry(k, Entry::Shared(id), if i == 0 { c } else { 0 });
        }
    }

    /// The lane of `origin`, made with `weight` if it is new.
    fn lane(&mut self, origin: Origin, weight: u64) -> usize {
        if let Some(&k) = self.by_origin.get(&origin) {
            return k;
        }
        self.lanes.push(Lane {
            origin,
            weight: weight.max(1),
            entries: VecDeque::new(),
            bytes: 0,
            tag: self.now,
        });
        self.by_origin.insert(origin, self.lanes.len() - 1);
        self.lanes.len() - 1
    }

    fn push_entry(&mut self, k: usize, e: Entry, bytes: i64) {
        let lane = &mut self.lanes[k];
        lane.bytes += bytes;
        lane.entries.push_back(e);
        if lane.entries.len() == 1 {
            self.head_changed(k);
        }
    }

    /// Lane `k` has a new head (or none): makes it ready if that head can go.
    fn head_changed(&mut self, k: usize) {
        let id = match self.lanes[k].entries.front() {
            None => return,
            Some(Entry::Own(_)) => return self.make_ready(k),
            Some(&Entry::Shared(id)) => id,
        };
        let f = self
            .shared
            .get_mut(&id)
            .expect("a shared entry's frame is kept");
        f.heading += 1;
        if f.heading == f.lanes.len() {
            // First in every lane it is in: it goes in its first lane's turn.
            let first = f.lanes[0];
            self.make_ready(first);
        }
    }

    fn make_ready(&mut self, k: usize) {
        let lane = &mut self.lanes[k];
        lane.tag = lane.tag.max(self.now);
        self.ready.push(Reverse((lane.tag, k)));
    }

    /// The next queued frame the credit lets go, counted as sent, and the origin it was
    /// counted for: the head of the lane with the earliest virtual start time. One frame
    /// may overdraw the credit, so a frame larger than the window still goes (alone).
    /// Once nothing waits, the origins and their history are forgotten (the window is then
    /// as new, but for its credit).
    pub(crate) fn pop(&mut self) -> Option<(Message, Origin)> {
        if self.credit <= 0 {
            return None;
        }
        let Reverse((tag, k)) = self.ready.pop()?;
        self.now = tag;
        // The lanes besides `k` a merged frame leaves too (`k` is the first of them).
        let (m, lanes) = match self.lanes[k].entries.pop_front() {
            Some(Entry::Own(m)) => (m, Vec::new()),
            Some(Entry::Shared(id)) => {
                let f = self
                    .shared
                    .remove(&id)
                    .expect("a shared entry's frame is kept");
                for &l in &f.lanes[1..] {
                    let front = self.lanes[l].entries.pop_front();
                    debug_assert!(matches!(front, Some(Entry::Shared(i)) if i == id));
                }
                (f.msg, f.lanes)
            }
            None => unreachable!("a ready lane has a head"),
        };
        let c = cost(&m);
        self.queued -= c;
        self.frames -= 1;
        self.credit -= c;
        let lane = &mut self.lanes[k];
        let origin = lane.origin;
        lane.bytes -= c;
        lane.tag = tag + (c.max(1) as u128) * TIME_SCALE / u128::from(lane.weight);
        if self.frames == 0 {
            self.lanes.clear();
            self.by_origin.clear();
            self.ready.clear();
            self.now = 0;
        } else {
            self.head_changed(k);
            for &l in lanes.iter().skip(1) {
                self.head_changed(l);
            }
        }
        Some((m, origin))
    }

    /// Adds credit handed back by the receiver.
    pub(crate) fn add_credit(&mut self, n: i64) {
        self.credit = self.credit.saturating_add(n);
    }

    /// A fresh link (a new receiver): the whole window again; what waits stays queued.
    pub(crate) fn reset(&mut self) {
        self.credit = WINDOW;
    }

    /// Bytes of bulk waiting for credit.
    pub(crate) fn queued(&self) -> i64 {
        self.queued
    }

    /// Bytes of bulk from `origin` waiting for credit (a line merged from several origins
    /// counts for the first of them).
    pub(crate) fn queued_from(&self, origin: Origin) -> i64 {
        self.by_origin
            .get(&origin)
            .map_or(0, |&k| self.lanes[k].bytes)
    }

    /// Whether the window is as new: nothing queued and the whole window of credit.
    pub(crate) fn is_idle(&self) -> bool {
        self.frames == 0 && self.credit == WINDOW
    }

    /// Frames waiting for credit.
    pub(crate) fn queued_frames(&self) -> usize {
        self.frames
    }

    /// Credit left (negative after an overdraw).
    pub(crate) fn credit(&self) -> i64 {
        self.credit
    }
}

/// Credit for bulk taken in but not handed back yet (the front-end's side of the master
/// link, and part of `RecvWindow`).
#[derive(Debug, Default)]
pub struct Grant {
    pending: i64,
}

impl Grant {
    /// Counts a bulk frame taken in; returns the credit frame to send back, once enough
    /// was taken in to be worth one.
    pub fn taken(&mut self, m: &Message) -> Option<Message> {
        self.count(m);
        (self.pending >= GRANT_STEP).then(|| self.flush())
    }

    /// Counts a bulk frame taken in, leaving the credit frame to [`Grant::flush`].
    pub fn count(&mut self, m: &Message) {
        self.pending += cost(m);
    }

    /// The credit frame for everything taken in so far (even below [`GRANT_STEP`]).
    pub fn flush(&mut self) -> Message {
        credit(std::mem::take(&mut self.pending))
    }

    /// Credit taken in and not handed back yet.
    pub fn pending(&self) -> i64 {
        self.pending
    }
}

/// The largest weight of a child's window ([`RecvWindow::weighted`]): a node holds at most
/// this many windows of one child's output.
pub(crate) const MAX_WEIGHT: u64 = 16;

/// The weight of a child whose subtree holds `servers` servers: one per server, from 1 to
/// [`MAX_WEIGHT`]. Its window holds that many [`WINDOW`]s, and its parent's driver reads
/// that many turns' worth of its frames at a time.
pub(crate) fn weight(servers: u64) -> u64 {
    servers.clamp(1, MAX_WEIGHT)
}

/// The window a parent gives the link of a child whose subtree holds `servers` servers:
/// [`WINDOW`] times its [`weight`] ([`RecvWindow::weighted`]; the telemetry's credit in use).
pub(crate) fn window_for(servers: u64) -> i64 {
    weight(servers) as i64 * WINDOW
}

/// The receiver's side of one link: bulk received and not handed back as credit yet.
#[derive(Debug)]
pub(crate) struct RecvWindow {
    outstanding: i64,
    /// The sender's window on this link: [`WINDOW`] times its weight.
    window: i64,
    /// The servers behind the link: its origin's share of this node's own window.
    servers: u64,
}

impl Default for RecvWindow {
    fn default() -> Self {
        Self {
            outstanding: 0,
            window: WINDOW,
            servers: 1,
        }
    }
}

impl RecvWindow {
    /// The window of a child whose subtree holds `servers` servers: one [`WINDOW`] per
    /// server, at most [`MAX_WEIGHT`], so a parent shares its own link to its parent
    /// between its children by how many ranks print below each (with equal windows a leaf
    /// child got as much through as a child carrying half the tree). Every sender starts
    /// with one window; the credit frame returned gives it the rest.
    pub(crate) fn weighted(servers: u64) -> (Self, Option<Message>) {
        let window = window_for(servers);
        let extra = window - WINDOW;
        let w = Self {
            window,
            servers: servers.max(1),
            ..Self::default()
        };
        (w, (extra > 0).then(|| credit(extra)))
    }

    /// The sender's window on this link.
    #[cfg(test)]
    pub(crate) fn window(&self) -> i64 {
        self.window
    }

    /// The weight the window was made with ([`RecvWindow::weighted`]).
    pub(crate) fn weight(&self) -> u64 {
        (self.window / WINDOW) as u64
    }

    /// The servers behind the link ([`RecvWindow::weighted`]; 1 for a default window).
    pub(crate) fn servers(&self) -> u64 {
        self.servers
    }

    /// Counts a bulk frame as it arrives and takes it in. An error if the sender had no
    /// credit left when it sent it (it ignored the window).
    pub(crate) fn receive(&mut self, m: &Message) -> Result<(), WindowExceeded> {
        let before = self.outstanding;
        if before >= self.window {
            return Err(WindowExceeded {
                unacknowledged: before,
                window: self.window,
            });
        }
        self.outstanding += cost(m);
        Ok(())
    }

    /// The credit frame for what was taken in and no longer waits here (`waiting`: what
    /// of the sender's still does), once that is at least [`GRANT_STEP`]: the sender never
    /// has more than its window queued at this node.
    pub(crate) fn grant(&mut self, waiting: i64) -> Option<Message> {
        let owed = self.outstanding - waiting.max(0);
        if owed < GRANT_STEP {
            return None;
        }
        self.outstanding -= owed;
        Some(credit(owed))
    }

    /// Bulk received and not handed back yet.
    pub(crate) fn outstanding(&self) -> i64 {
        self.outstanding
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;
    use sdm_proto::IdSet;

    use super::*;

    fn child(c: u32) -> Origin {
        Origin::Child(NodeId::Server(c))
    }

    fn line(n: usize) -> Message {
        let mut m = Message::reply(
            0,
            IdSet::single(1),
            sdm_proto::Status::Replied,
            Bytes::from(vec![b'x'; n]),
        );
        m.kind = Kind::Stdio;
        m
    }

    #[test]
    fn credit_frames_round_trip_and_junk_is_not_credit() {
        assert_eq!(parse_credit(&credit(4096)), Some(4096));
        let mut bad = credit(1);
        bad.payload = Bytes::from_static(b"credit 5");
        assert_eq!(parse_credit(&bad), None, "text is not a credit frame");
        assert_eq!(parse_credit(&credit(0)), None);
        assert_eq!(parse_credit(&Control::Keepalive(0).to_message()), None);
        assert_eq!(parse_credit(&line(3)), None);
    }

    #[test]
    fn a_sender_within_its_window_is_accepted_and_one_beyond_it_is_refused() {
        let mut send = SendWindow::default();
        let mut recv = RecvWindow::default();
        for _ in 0..200 {
            send.push(&[], line(1000));
        }
        // Send until the credit runs out; the receiver accepts every one of them.
        let mut sent = 0;
        while let Some((m, _)) = send.pop() {
            recv.receive(&m).expect("within the window");
            sent += 1;
        }
        let c = cost(&line(1000));
        assert_eq!(sent as i64, (WINDOW + c - 1) / c);
        assert_eq!(send.queued_frames(), 200 - sent);
        assert_eq!(send.queued(), (200 - sent) as i64 * c);
        // A sender that goes on regardless is refused.
        let e = recv.receive(&line(1)).unwrap_err();
        assert!(e.unacknowledged() >= WINDOW);
    }

    #[test]
    fn a_childs_window_is_one_per_server_below_it_up_to_the_largest_weight() {
        let (w, extra) = RecvWindow::weighted(1);
        assert_eq!((w.window(), extra), (WINDOW, None));
        // The sender starts with one window; the rest is granted at once.
        let (mut w, extra) = RecvWindow::weighted(4);
        assert_eq!(w.window(), 4 * WINDOW);
        assert_eq!(extra.as_ref().and_then(parse_credit), Some(3 * WINDOW));
        let mut send = SendWindow::default();
        send.add_credit(3 * WINDOW);
        for _ in 0..(8 * WINDOW / cost(&line(1000))) {
            send.push(&[], line(1000));
        }
        while let Some((m, _)) = send.pop() {
            w.receive(&m).expect("within the weighted window");
        }
        assert!(w.receive(&line(1)).is_err(), "beyond four windows");
        let (w, _) = RecvWindow::weighted(1 << 20);
        assert_eq!(w.window(), MAX_WEIGHT as i64 * WINDOW);
    }

    #[test]
    fn taking_frames_in_hands_all_their_credit_back_in_steps() {
        let mut send = SendWindow::default();
        let mut recv = RecvWindow::default();
        let total = 300;
        for _ in 0..total {
            send.push(&[], line(700));
        }
        let (mut steps, mut got) = (0, 0);
        while got < total {
            let (m, _) = send.pop().expect("credit comes back before it runs out");
            recv.receive(&m).unwrap();
            got += 1;
            if let Some(c) = recv.grant(0) {
                let n = parse_credit(&c).unwrap();
                assert!(n >= GRANT_STEP, "credit goes back in steps, not per frame");
                send.add_credit(n);
                steps += 1;
            }
        }
        assert!(steps >= 3, "{steps} steps");
        assert_eq!(send.queued(), 0);
        // What was not handed back is below one step, and the sender still has credit.
        assert!(recv.outstanding() < GRANT_STEP);
        assert_eq!(send.credit(), WINDOW - recv.outstanding());
        let mut g = Grant::default();
        assert!(g.taken(&line(10)).is_none(), "one small frame is no step");
        assert_eq!(parse_credit(&g.flush()), Some(cost(&line(10))));
        assert_eq!(g.pending(), 0);
    }

    /// Three origins flooding, weights 1, 2 and 4: the credit goes to them 1 : 2 : 4,
    /// each origin's frames in order.
    #[test]
    fn the_credit_is_shared_by_weight_and_each_origin_keeps_its_order() {
        let mut send = SendWindow::default();
        send.add_credit(i64::MAX / 2);
        let origins = [(Origin::Local, 1), (child(5), 2), (child(9), 4)];
        for i in 0..1000u64 {
            for &o in &origins {
                let mut m = line(100);
                m.op = i;
                send.push(&[o], m);
            }
        }
        let mut got = HashMap::<Origin, u64>::new();
        for _ in 0..700 {
            let (m, o) = send.pop().unwrap();
            let n = got.entry(o).or_default();
            assert_eq!(m.op, *n, "{o:?} out of order");
            *n += 1;
        }
        for (o, w) in origins {
            let n = got[&o];
            assert!(n.abs_diff(100 * w) <= 2, "{o:?} got {n} of 700: {got:?}");
        }
        assert_eq!(
            send.queued_from(Origin::Local),
            (1000 - got[&Origin::Local] as i64) * cost(&line(100))
        );
    }

    /// An origin that had nothing queued for a while does not get the credit it did not
    /// use: it joins at the others' pace instead of sending a burst.
    #[test]
    fn an_origin_that_was_quiet_joins_at_the_current_pace() {
        let mut send = SendWindow::default();
        send.add_credit(i64::MAX / 2);
        // Child 2 is served once, then has nothing while child 1 goes on (its lane, and
        // its place in virtual time, stay: the window never drains).
        send.push(&[(child(2), 1)], line(100));
        for _ in 0..400 {
            send.push(&[(child(1), 1)], line(100));
        }
        for _ in 0..300 {
            send.pop().unwrap();
        }
        for _ in 0..100 {
            send.push(&[(child(2), 1)], line(100));
        }
        let from2 = (0..100)
            .filter(|_| send.pop().unwrap().1 == child(2))
            .count();
        assert!((49..=51).contains(&from2), "{from2} of 100");
    }

    #[test]
    fn credit_goes_back_for_what_no_longer_waits_here() {
        let mut recv = RecvWindow::default();
        for _ in 0..40 {
            recv.receive(&line(1000)).unwrap();
        }
        let taken = 40 * cost(&line(1000));
        // All of it still here: nothing to hand back.
        assert!(recv.grant(taken).is_none());
        // Less than a step gone: still nothing.
        assert!(recv.grant(taken - GRANT_STEP + 1).is_none());
        // Half gone: that half goes back, and the sender may send as much again.
        let c = recv.grant(taken / 2).and_then(|m| parse_credit(&m));
        assert_eq!(c, Some(taken - taken / 2));
        assert_eq!(recv.outstanding(), taken / 2);
    }

    proptest! {
        /// Frames from random sets of origins (lines merged from several among them),
        /// with credit coming in random steps: every frame goes once, and every origin's
        /// frames (merged ones included) go in the order they were queued.
        #[test]
        fn merged_lines_keep_every_origins_order(
            frames in proptest::collection::vec(proptest::collection::btree_set(0u32..4, 1..4), 1..200),
            steps in proptest::collection::vec(1i64..4000, 1..50),
        ) {
            let origin = |k: u32| if k == 0 { Origin::Local } else { child(k) };
            let mut send = SendWindow::default();
            for (i, set) in frames.iter().enumerate() {
                let mut m = line(10 + i % 300);
                m.op = i as u64;
                let origins: Vec<(Origin, u64)> =
                    set.iter().map(|&k| (origin(k), u64::from(k) + 1)).collect();
                send.push(&origins, m);
            }
            let mut sent = Vec::new();
            let mut step = steps.iter().cycle();
            while sent.len() < frames.len() {
                match send.pop() {
                    Some((m, _)) => sent.push(m.op as usize),
                    None => send.add_credit(*step.next().unwrap()),
                }
            }
            prop_assert_eq!(send.queued(), 0);
            prop_assert!(send.pop().is_none());
            let mut once = sent.clone();
            once.sort_unstable();
            prop_assert_eq!(once, (0..frames.len()).collect::<Vec<_>>());
            for k in 0..4 {
                let order: Vec<usize> = sent.iter().copied().filter(|&i| frames[i].contains(&k)).collect();
                prop_assert!(order.is_sorted(), "origin {}: {:?}", k, order);
            }
        }
    }
}
