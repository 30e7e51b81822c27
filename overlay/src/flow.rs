//! Credit-based flow control of output going up the tree, so output can never occupy the
//! path that commands and replies take.
//!
//! Frames going up are of two sorts: control (replies, keepalives) and bulk (stdio and
//! events, which keep their order among themselves). A link's sender may have at most
//! [`WINDOW`] bytes of bulk (as counted by [`cost`]) that its receiver has not yet taken
//! in; the receiver hands credit back, in [`Control::Credit`] frames, as it takes bulk
//! frames off its queue ([`Grant`]). A node whose own parent gives it no credit stops
//! taking bulk from below, which stops its children's credit, and so on down to the
//! process writing the output, which blocks in `write`: backpressure, never a dropped
//! line. Because bulk in flight on a link is bounded, a receiver always reads its sockets
//! promptly, and a reply waits behind at most one window of output per hop instead of
//! behind every line the socket buffers and queues can hold.
//!
//! The window only limits bulk sent to a parent (or by the master to the front-end);
//! frames going down are commands and are never held. A child that sends bulk while it
//! has no credit breaks the protocol and loses its link ([`Outstanding::receive`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use sdm_proto::{Control, Kind, Message};

/// Bytes of bulk a sender may have unacknowledged on one link.
pub const WINDOW: i64 = 64 * 1024;

/// Credit is handed back once this much was taken in, not per frame.
pub const GRANT_STEP: i64 = WINDOW / 4;

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

/// The sender's side: credit left on one link.
#[derive(Debug, Clone)]
pub struct Credits {
    left: Arc<AtomicI64>,
    more: Arc<tokio::sync::Notify>,
}

impl Default for Credits {
    fn default() -> Self {
        Self {
            left: Arc::new(AtomicI64::new(WINDOW)),
            more: Arc::new(tokio::sync::Notify::new()),
        }
    }
}

impl Credits {
    /// Whether a bulk frame may go now. One frame may overdraw the credit, so a frame
    /// larger than the window still goes (alone).
    pub fn available(&self) -> bool {
        self.left.load(Ordering::Acquire) > 0
    }

    /// Counts a bulk frame sent.
    pub fn spend(&self, m: &Message) {
        self.left.fetch_sub(cost(m), Ordering::AcqRel);
    }

    /// Adds credit handed back by the receiver and wakes a sender waiting for it.
    pub fn add(&self, n: i64) {
        self.left.fetch_add(n, Ordering::AcqRel);
        self.more.notify_one();
    }

    /// Waits until [`Credits::add`] is called (a stored wake-up if it already was).
    pub async fn wait(&self) {
        self.more.notified().await;
    }
}

/// The receiver's side: bulk received but not yet handed back as credit.
#[derive(Debug, Clone, Default)]
pub struct Outstanding(Arc<AtomicI64>);

impl Outstanding {
    /// Counts a bulk frame as it arrives. An error if the sender had no credit left when
    /// it sent it (it ignored the window).
    pub fn receive(&self, m: &Message) -> Result<(), String> {
        let before = self.0.fetch_add(cost(m), Ordering::AcqRel);
        if before >= WINDOW {
            return Err(format!(
                "sent output beyond its flow-control window ({before} bytes unacknowledged, \
                 window {WINDOW})"
            ));
        }
        Ok(())
    }

    /// Counts credit handed back.
    fn grant(&self, n: i64) {
        self.0.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The receiver's side: credit for bulk taken in but not handed back yet.
#[derive(Debug, Default)]
pub struct Grant {
    pending: i64,
    outstanding: Outstanding,
}

impl Grant {
    /// A grant that reports what it hands back to `outstanding` (the reader's count).
    pub fn new(outstanding: Outstanding) -> Self {
        Self {
            pending: 0,
            outstanding,
        }
    }

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
        let n = std::mem::take(&mut self.pending);
        self.outstanding.grant(n);
        credit(n)
    }

    /// Credit taken in and not handed back yet.
    pub fn pending(&self) -> i64 {
        self.pending
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
        let credits = Credits::default();
        let out = Outstanding::default();
        // Send until the credit runs out; the receiver accepts every one of them.
        let mut sent = Vec::new();
        while credits.available() {
            let m = line(1000);
            credits.spend(&m);
            out.receive(&m).expect("within the window");
            sent.push(m);
        }
        let c = cost(&line(1000));
        assert_eq!(sent.len() as i64, (WINDOW + c - 1) / c);
        // A sender that goes on regardless is refused.
        let e = out.receive(&line(1)).unwrap_err();
        assert!(e.contains("beyond its flow-control window"), "{e}");
    }

    #[test]
    fn taking_frames_in_hands_all_their_credit_back_in_steps() {
        let credits = Credits::default();
        let out = Outstanding::default();
        let mut grant = Grant::new(out.clone());
        let sent: Vec<_> = std::iter::repeat_with(|| line(700)).take(90).collect();
        for m in &sent {
            credits.spend(m);
        }
        assert!(!credits.available());
        let mut steps = 0;
        for m in &sent {
            out.receive(m).ok();
            if let Some(c) = grant.taken(m) {
                let n = parse_credit(&c).unwrap();
                assert!(n >= GRANT_STEP, "credit goes back in steps, not per frame");
                credits.add(n);
                steps += 1;
            }
        }
        assert!(steps >= 3, "{steps} steps");
        let rest = grant.flush();
        credits.add(parse_credit(&rest).unwrap());
        assert_eq!(grant.pending(), 0);
        // Everything sent was handed back: the sender has its whole window again, and the
        // receiver counts nothing outstanding.
        assert_eq!(credits.left.load(Ordering::Acquire), WINDOW);
        assert_eq!(out.0.load(Ordering::Acquire), 0);
        assert!(
            grant.taken(&line(10)).is_none(),
            "one small frame is no step"
        );
    }
}
