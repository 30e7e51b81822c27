//! Credit-based flow control of output going up the tree, so output can never occupy the
//! path that commands and replies take: sans-IO window state that [`crate::Node`] owns.
//!
//! Frames going up are of two sorts: control (replies, keepalives) and bulk (stdio and
//! events, which keep their order among themselves). A link's sender may have at most
//! [`WINDOW`] bytes of bulk (as counted by [`cost`]) that its receiver has not yet taken
//! in ([`SendWindow`]); the receiver hands credit back, in [`Control::Credit`] frames, as it
//! takes bulk in ([`RecvWindow`], [`Grant`]). A node forwards its children's output up
//! against its parent's credit and hands its children credit back once what it took from
//! them has gone up (nothing waits for the parent's credit); its own program's output it
//! takes only while less than [`QUEUE_LIMIT`] waits, asking its driver to pause the local
//! producer past it ([`crate::Output::PauseLocal`]). So a parent that gives no credit stops
//! its children's credit, and so on down to the process writing the output, which blocks
//! in `write`: backpressure, never a dropped line, and every node's queue bounded (by
//! [`QUEUE_LIMIT`] and a window per child).
//! Replies never wait for credit, so a reply is behind at most one window of output per
//! hop instead of behind every line the socket buffers and queues can hold.
//!
//! The window only limits bulk sent to a parent (or by the master to the front-end);
//! frames going down are commands and are never held. A child that sends bulk while it
//! has no credit breaks the protocol and loses its link ([`RecvWindow::receive`]).

use std::collections::VecDeque;

use sdm_proto::{Control, Kind, Message};

/// Bytes of bulk a sender may have unacknowledged on one link.
pub const WINDOW: i64 = 64 * 1024;

/// Credit is handed back once this much was taken in, not per frame.
pub const GRANT_STEP: i64 = WINDOW / 4;

/// Bytes of bulk waiting for the parent's credit from which a node pauses its local
/// producer (its program's output).
pub const QUEUE_LIMIT: i64 = WINDOW;

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
pub struct WindowExceeded {
    unacknowledged: i64,
    window: i64,
}

impl WindowExceeded {
    /// Bytes the sender had unacknowledged when it sent the offending frame.
    pub fn unacknowledged(&self) -> i64 {
        self.unacknowledged
    }
}

/// The sender's side of one link: credit left, and the bulk waiting for more of it, in
/// order.
#[derive(Debug)]
pub struct SendWindow {
    credit: i64,
    queue: VecDeque<Message>,
    queued: i64,
}

impl Default for SendWindow {
    fn default() -> Self {
        Self {
            credit: WINDOW,
            queue: VecDeque::new(),
            queued: 0,
        }
    }
}

impl SendWindow {
    /// Queues a bulk frame behind those already waiting.
    pub fn push(&mut self, m: Message) {
        self.queued += cost(&m);
        self.queue.push_back(m);
    }

    /// The next queued frame the credit lets go, counted as sent. One frame may overdraw
    /// the credit, so a frame larger than the window still goes (alone).
    pub fn pop(&mut self) -> Option<Message> {
        if self.credit <= 0 {
            return None;
        }
        let m = self.queue.pop_front()?;
        let c = cost(&m);
        self.queued -= c;
        self.credit -= c;
        Some(m)
    }

    /// Adds credit handed back by the receiver.
    pub fn add_credit(&mut self, n: i64) {
        self.credit = self.credit.saturating_add(n);
    }

    /// A fresh link (a new receiver): the whole window again; what waits stays queued.
    pub fn reset(&mut self) {
        self.credit = WINDOW;
    }

    /// Bytes of bulk waiting for credit.
    pub fn queued(&self) -> i64 {
        self.queued
    }

    /// Whether the window is as new: nothing queued and the whole window of credit.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.queued == 0 && self.credit == WINDOW
    }

    /// Frames waiting for credit.
    pub fn queued_frames(&self) -> usize {
        self.queue.len()
    }

    /// Credit left (negative after an overdraw).
    pub fn credit(&self) -> i64 {
        self.credit
    }
}

/// Credit for bulk taken in but not handed back yet (the front-end's side of the master
/// link, and part of [`RecvWindow`]).
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
pub const MAX_WEIGHT: u64 = 16;

/// The weight of a child whose subtree holds `servers` servers: one per server, from 1 to
/// [`MAX_WEIGHT`]. Its window holds that many [`WINDOW`]s, and its parent's driver reads
/// that many turns' worth of its frames at a time.
pub fn weight(servers: u64) -> u64 {
    servers.clamp(1, MAX_WEIGHT)
}

/// The receiver's side of one link: bulk received and not handed back as credit, and the
/// credit owed for what was taken in.
#[derive(Debug)]
pub struct RecvWindow {
    outstanding: i64,
    grant: Grant,
    /// The sender's window on this link: [`WINDOW`] times its weight.
    window: i64,
}

impl Default for RecvWindow {
    fn default() -> Self {
        Self {
            outstanding: 0,
            grant: Grant::default(),
            window: WINDOW,
        }
    }
}

impl RecvWindow {
    /// The window of a child whose subtree holds `servers` servers: one [`WINDOW`] per
    /// server, at most [`MAX_WEIGHT`], so a parent shares its own link to its parent
    /// between its children by how many ranks print below each (with equal windows a leaf
    /// child got as much through as a child carrying half the tree). Every sender starts
    /// with one window; the credit frame returned gives it the rest.
    pub fn weighted(servers: u64) -> (Self, Option<Message>) {
        let weight = weight(servers) as i64;
        let extra = (weight - 1) * WINDOW;
        let w = Self {
            window: weight * WINDOW,
            ..Self::default()
        };
        (w, (extra > 0).then(|| credit(extra)))
    }

    /// The sender's window on this link.
    pub fn window(&self) -> i64 {
        self.window
    }

    /// The weight the window was made with ([`RecvWindow::weighted`]).
    pub fn weight(&self) -> u64 {
        (self.window / WINDOW) as u64
    }

    /// Counts a bulk frame as it arrives and takes it in. An error if the sender had no
    /// credit left when it sent it (it ignored the window).
    pub fn receive(&mut self, m: &Message) -> Result<(), WindowExceeded> {
        let before = self.outstanding;
        if before >= self.window {
            return Err(WindowExceeded {
                unacknowledged: before,
                window: self.window,
            });
        }
        self.outstanding += cost(m);
        self.grant.count(m);
        Ok(())
    }

    /// The credit frame to send back, once at least [`GRANT_STEP`] is owed.
    pub fn grant(&mut self) -> Option<Message> {
        if self.grant.pending() < GRANT_STEP {
            return None;
        }
        self.outstanding -= self.grant.pending();
        Some(self.grant.flush())
    }

    /// Bulk received and not handed back yet.
    pub fn outstanding(&self) -> i64 {
        self.outstanding
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use sdm_proto::IdSet;

    use super::*;

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
        assert_eq!(parse_credit(&Control::Keepalive.to_message()), None);
        assert_eq!(parse_credit(&line(3)), None);
    }

    #[test]
    fn a_sender_within_its_window_is_accepted_and_one_beyond_it_is_refused() {
        let mut send = SendWindow::default();
        let mut recv = RecvWindow::default();
        for _ in 0..200 {
            send.push(line(1000));
        }
        // Send until the credit runs out; the receiver accepts every one of them.
        let mut sent = 0;
        while let Some(m) = send.pop() {
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
            send.push(line(1000));
        }
        while let Some(m) = send.pop() {
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
            send.push(line(700));
        }
        let (mut steps, mut got) = (0, 0);
        while got < total {
            let m = send.pop().expect("credit comes back before it runs out");
            recv.receive(&m).unwrap();
            got += 1;
            if let Some(c) = recv.grant() {
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
}
