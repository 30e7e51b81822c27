//! How the node's task learns what to look at: the handlers' replies waiting in an
//! [`Inbox`], and which links woke it, marked in [`Readiness`]. Neither wakes the task
//! while it is in a turn, which looks at both before it ends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};

use bytes::Bytes;
use futures::task::AtomicWaker;
use sdm_proto::{IdSet, Status};

/// Where the handlers' replies wait for the node's task. A reply made while the task is in
/// a turn (a handler answering at once, the usual case) does not wake it: the turn takes
/// it before it ends. Waking would cost the task a second turn per command, finding
/// nothing, and the runtime another trip through its driver. A reply from elsewhere (a
/// spawned task, another thread, later) wakes the task as a channel would.
#[derive(Debug, Default)]
pub(super) struct Inbox {
    queue: Mutex<VecDeque<LocalReply>>,
    turn: TurnWaker,
}

/// A handler's answer: the op, the ranks it answers for, [`Status::Replied`] or
/// [`Status::Error`] (the service refused the request), and the payload.
pub(super) type LocalReply = (u64, IdSet, Status, Bytes);

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
    pub(super) fn push(&self, reply: LocalReply) {
        self.lock().push_back(reply);
        self.turn.wake();
    }

    pub(super) fn pop(&self) -> Option<LocalReply> {
        self.lock().pop_front()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<LocalReply>> {
        // A panic while pushing or popping leaves the queue whole.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A turn starts: replies made from now on are taken by it.
    pub(super) fn enter(&self) {
        self.turn.enter();
    }

    /// A turn ends: replies made from now on wake the task. Whether some are waiting.
    pub(super) fn leave(&self, cx: &Context<'_>) -> bool {
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
pub(super) struct Readiness {
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
pub(super) const MARKED_SOURCES: usize = 64 * 64;

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
pub(super) const PARENT: usize = 0;
pub(super) const EVENTS: usize = 1;
pub(super) const ADOPTIONS: usize = 2;
pub(super) const CHILD0: usize = 3;

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
    pub(super) fn mark(&self, source: usize) {
        if source < MARKED_SOURCES {
            self.words[source / 64].fetch_or(1 << (source % 64), Ordering::SeqCst);
            self.summary.fetch_or(1 << (source / 64), Ordering::SeqCst);
        } else {
            self.beyond.store(true, Ordering::SeqCst);
        }
        self.turn.wake();
    }

    /// The waker of source `source`.
    pub(super) fn waker(self: &Arc<Self>, source: usize) -> Waker {
        Waker::from(Arc::new(SourceWaker {
            source,
            ready: Arc::clone(self),
        }))
    }

    /// A turn starts: moves the marks into `want` (a flag per source, set for each marked
    /// one) and clears them; marks from now on are the turn's to see.
    pub(super) fn take(&self, want: &mut Vec<bool>) {
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
    pub(super) fn leave(&self, cx: &Context<'_>) -> bool {
        self.turn.leave(cx);
        self.summary.load(Ordering::SeqCst) != 0 || self.beyond.load(Ordering::SeqCst)
    }
}

/// Sets source `source`'s flag in `want`, growing it as needed.
pub(super) fn set_wanted(want: &mut Vec<bool>, source: usize) {
    if want.len() <= source {
        want.resize(source + 1, false);
    }
    want[source] = true;
}
