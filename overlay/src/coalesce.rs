//! [`Coalescer`]: merges identical stdio lines from many ranks that arrive within a short
//! window into one line with the union of their sources, keeping each rank's order.
//!
//! A line from sources `S` may only join a buffered group that comes after every group
//! already holding an id of `S`; otherwise it starts a new group at the end. Groups leave
//! in buffer order, so each rank's lines leave in the order they came. Events (a process's
//! exit, a breakpoint hit) go through the same buffer, so they never overtake their
//! sources' output, and identical events of many ranks merge too.
//!
//! Templated lines (see `crate::template`) merge by their template key rather than their
//! whole payload: a group holding them folds each one in (decoded once, encoded when it
//! leaves).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sdm_proto::{IdSet, Kind};

use crate::template;

/// Stream tag (a stdio payload's first byte) of a line the program wrote to standard output.
pub const STDOUT: u8 = 1;
/// Stream tag of a line the program wrote to standard error.
pub const STDERR: u8 = 2;
/// Tag of an *idle marker*, not a line: the server saw its program go idle (nothing
/// runnable, or computing without printing) with every line it printed sent. Its payload is
/// `[IDLE, stream]` and its index the number of lines the rank printed on that stream, so
/// the front-end stops waiting for that rank's later lines there (see `sdm_client::align`).
/// A server sends one as `[IDLE]` alone; its node adds the stream and the counts.
pub const IDLE: u8 = 0;

/// The stream an idle marker speaks of, or `None` if `l` is not one.
pub fn idle_stream(l: &StdioLine) -> Option<u8> {
    match (l.kind, &l.payload[..]) {
        (Kind::Stdio, [IDLE, stream]) => Some(*stream),
        _ => None,
    }
}

/// One buffered line (or event) and who printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioLine {
    /// [`Kind::Stdio`] for output, [`Kind::Event`] for an event.
    pub kind: Kind,
    /// The ranks that printed it.
    pub sources: IdSet,
    /// For output, the line's index in its ranks' stream (the k-th line each of them
    /// printed on that stream, counted by their servers from 0): lines merge only with
    /// lines of the same index, so the front-end can align ranks line by line (see
    /// `sdm_client::align`). Zero for events.
    pub index: u64,
    /// The payload (stream tag and text, or the event text).
    pub payload: Bytes,
}

/// The ordering channel of events.
const EVENT: u8 = 0;

/// The channel a line is ordered in: its stream tag (the payload's first byte; 1 stdout,
/// 2 stderr; an idle marker's that of its stream) or [`EVENT`].
fn line_channel(l: &StdioLine) -> u8 {
    match l.kind {
        Kind::Stdio => match &l.payload[..] {
            [IDLE, stream] => (*stream).max(1),
            p => template::stream_of(p).max(1),
        },
        _ => EVENT,
    }
}

#[derive(Debug)]
struct Group {
    line: StdioLine,
    /// When the group was opened.
    born: Instant,
    /// The templated lines folded in so far.
    folded: template::Folding,
}

/// A coalescing buffer (a zero window: lines pass straight through).
///
/// The group at the front leaves when its window has passed and no rank outside it has
/// printed anything for about a window (so nobody who might still print the same line is
/// busy), or when it has waited `max_hold` (a flood of different lines), or when more
/// than `max_groups` groups are buffered. Lookups are indexed (by payload, and by rank
/// for the last group holding it), so a push costs O(sources), not O(buffer).
#[derive(Debug)]
pub(crate) struct Coalescer {
    window: Duration,
    max_hold: Duration,
    max_groups: usize,
    groups: VecDeque<Group>,
    /// Sequence number of `groups[0]`.
    base: u64,
    /// Groups with a given kind, line index and payload, by sequence number (ascending;
    /// stale entries below `base` are pruned lazily).
    by_payload: HashMap<(Kind, u64, Bytes), VecDeque<u64>>,
    /// For each rank and channel (an event, or an output stream), the sequence number of
    /// the last group holding it.
    last: HashMap<(u32, u8), u64>,
    /// Ranks that printed in this activity period and the one before.
    active: IdSet,
    active_before: IdSet,
    /// When the current activity period ends.
    period_end: Option<Instant>,
}

impl Coalescer {
    /// A buffer holding lines for `window` (more while other ranks are still printing,
    /// up to 25 windows).
    pub(crate) fn new(window: Duration) -> Self {
        Self::with_limits(window, window * 25, 1 << 16)
    }

    /// A buffer with explicit limits: `max_hold` bounds how long any line waits and
    /// `max_groups` how many groups are held.
    pub(crate) fn with_limits(window: Duration, max_hold: Duration, max_groups: usize) -> Self {
        Self {
            window,
            max_hold: max_hold.max(window),
            max_groups: max_groups.max(1),
            groups: VecDeque::new(),
            base: 0,
            by_payload: HashMap::new(),
            last: HashMap::new(),
            active: IdSet::new(),
            active_before: IdSet::new(),
            period_end: None,
        }
    }

    /// How many groups are buffered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether nothing is buffered.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    fn rotate(&mut self, now: Instant) {
        match self.period_end {
            Some(end) if now < end => {}
            Some(end) if now < end + self.window => {
                self.active_before = std::mem::take(&mut self.active);
                self.period_end = Some(end + self.window);
            }
            _ => {
                self.active_before = IdSet::new();
                self.active = IdSet::new();
                self.period_end = Some(now + self.window);
            }
        }
    }

    /// Adds a line; returns lines that must leave now (window zero, or buffer full). (Out
    /// of line: a node's driver reads its children's replies and their output in one loop,
    /// and this, inlined there, would lie among the replies' instructions.)
    #[inline(never)]
    pub(crate) fn push(&mut self, now: Instant, line: StdioLine) -> Vec<StdioLine> {
        if self.window.is_zero() {
            return vec![line];
        }
        self.rotate(now);
        if idle_stream(&line).is_none() {
            // (An idle marker is no activity: nothing of its ranks is still coming.)
            self.active.union_with(&line.sources);
        }
        // We may only join a group after the last one holding any of these sources in the
        // same stream or an event: streams of one rank (stdout and stderr on pipes) have
        // no order between them, but an event comes after all of its ranks' output.
        let channel = line_channel(&line);
        let after: &[u8] = if channel == EVENT {
            &[EVENT, 1, 2]
        } else {
            &[EVENT, channel]
        };
        let floor = line
            .sources
            .iter()
            .flat_map(|r| after.iter().map(move |&c| (r, c)))
            .filter_map(|k| self.last.get(&k).map(|&s| s + 1))
            .max()
            .unwrap_or(0)
            .max(self.base);
        // A templated line that does not decode is a group of its own, never indexed.
        let decoded = match line.kind {
            Kind::Stdio => template::to_fold(&line.payload, &line.sources),
            _ => Ok(None),
        };
        let key = (line.kind, line.index, template::merge_key(&line.payload));
        let base = self.base;
        let seqs = self.by_payload.entry(key).or_default();
        while seqs.front().is_some_and(|&s| s < base) {
            seqs.pop_front();
        }
        // Ascending: the first candidate at or after the floor, by binary search (a rank
        // repeating one line would otherwise make every push scan all its copies).
        let found = seqs.get(seqs.partition_point(|&s| s < floor));
        let seq = match found.filter(|_| decoded.is_ok()) {
            Some(&s) => {
                let g = &mut self.groups[(s - base) as usize];
                if let Ok(Some(t)) = decoded {
                    g.folded.fold(&g.line.payload, &g.line.sources, t);
                }
                g.line.sources.union_with(&line.sources);
                s
            }
            None => {
                let s = base + self.groups.len() as u64;
                if decoded.is_ok() {
                    seqs.push_back(s);
                }
                for r in line.sources.iter() {
                    self.last.insert((r, channel), s);
                }
                self.groups.push_back(Group {
                    line,
                    born: now,
                    folded: template::Folding::default(),
                });
                return self.overflow();
            }
        };
        for r in line.sources.iter() {
            let e = self.last.entry((r, channel)).or_insert(seq);
            *e = (*e).max(seq);
        }
        Vec::new()
    }

    fn overflow(&mut self) -> Vec<StdioLine> {
        let mut out = Vec::new();
        while self.groups.len() > self.max_groups {
            out.push(self.pop());
        }
        out
    }

    fn pop(&mut self) -> StdioLine {
        let g = self.groups.pop_front().expect("non-empty");
        self.base += 1;
        if self.groups.is_empty() {
            self.last.clear();
            self.by_payload.clear();
        } else if self.by_payload.len() > 2 * self.groups.len() + 64 {
            // The index keeps (about) only groups still here: under a flood that never
            // empties the buffer it would otherwise grow by a key per line. Swept when
            // twice the buffer, so a sweep's cost is spread over the lines that left.
            let base = self.base;
            self.by_payload.retain(|_, seqs| {
                while seqs.front().is_some_and(|&s| s < base) {
                    seqs.pop_front();
                }
                !seqs.is_empty()
            });
        }
        let mut line = g.line;
        line.payload = g.folded.into_payload(line.payload);
        line
    }

    /// Keys in the payload index (each has a group still buffered).
    #[cfg(test)]
    fn indexed(&self) -> usize {
        self.by_payload.len()
    }

    /// Whether the front group may leave at `now`.
    fn ripe(&self, g: &Group, now: Instant) -> bool {
        let age = now.saturating_duration_since(g.born);
        if age >= self.max_hold {
            return true;
        }
        age >= self.window
            && self.active.is_subset(&g.line.sources)
            && self.active_before.is_subset(&g.line.sources)
    }

    /// Lines that may leave at `now`, in order.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<StdioLine> {
        self.rotate(now);
        let mut out = Vec::new();
        while self.groups.front().is_some_and(|g| self.ripe(g, now)) {
            out.push(self.pop());
        }
        out
    }

    /// Everything buffered, in order.
    pub(crate) fn drain(&mut self) -> Vec<StdioLine> {
        let mut out = Vec::with_capacity(self.groups.len());
        while !self.groups.is_empty() {
            out.push(self.pop());
        }
        out
    }

    /// When [`Coalescer::expire`] should next be called.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let g = self.groups.front()?;
        let window_end = g.born + self.window;
        let hold_end = g.born + self.max_hold;
        // Past its window a group waits for activity to stop (checked each period).
        let next_period = self.period_end.map_or(window_end, |p| p.min(hold_end));
        Some(window_end.max(next_period))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stdout line (stream tag 1).
    fn line(ids: &str, text: &str) -> StdioLine {
        tagged(1, ids, text)
    }

    fn tagged(stream: u8, ids: &str, text: &str) -> StdioLine {
        let mut payload = vec![stream];
        payload.extend_from_slice(text.as_bytes());
        StdioLine {
            kind: Kind::Stdio,
            sources: ids.parse().unwrap(),
            index: 0,
            payload: Bytes::from(payload),
        }
    }

    #[test]
    fn equal_idle_markers_merge_and_are_no_activity() {
        let t = Instant::now();
        let mut c = Coalescer::new(Duration::from_millis(10));
        let marker = |ids: &str| StdioLine {
            kind: Kind::Stdio,
            sources: ids.parse().unwrap(),
            index: 3,
            payload: Bytes::from_static(&[IDLE, STDERR]),
        };
        assert!(c.push(t, marker("[0]")).is_empty());
        assert!(c.push(t, marker("[1-2]")).is_empty());
        let out = c.expire(t + Duration::from_millis(30));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].sources, "[0-2]".parse().unwrap());
        assert_eq!(idle_stream(&out[0]), Some(STDERR));
    }

    #[test]
    fn identical_lines_merge_and_order_per_rank_holds() {
        let t = Instant::now();
        let mut c = Coalescer::new(Duration::from_millis(20));
        assert!(c.push(t, line("[0]", "a")).is_empty());
        assert!(c.push(t, line("[0]", "b")).is_empty());
        assert!(c.push(t, line("[1]", "b")).is_empty()); // joins "b"
        assert!(c.push(t, line("[1]", "a")).is_empty()); // may not join "a": it is before rank 1's "b"
        // Both ranks were printing a moment ago: "[0] a" may still be joined by rank 1.
        assert!(c.expire(t + ms(20)).is_empty());
        // Once both are quiet for a period, everything leaves.
        let out = c.expire(t + ms(45));
        let shown: Vec<String> = out
            .iter()
            .map(|l| format!("{} {}", l.sources, String::from_utf8_lossy(&l.payload[1..])))
            .collect();
        assert_eq!(shown, ["[0] a", "[0-1] b", "[1] a"]);
        assert_eq!(c.deadline(), None);
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_lagging_rank_still_merges_while_it_prints() {
        let t = Instant::now();
        let mut c = Coalescer::new(ms(20));
        // Rank 0 prints 1..=50 at once; rank 1 prints the same, 2 ms a line.
        for i in 1..=50 {
            assert!(c.push(t, line("[0]", &i.to_string())).is_empty());
        }
        let mut out = Vec::new();
        for i in 1..=50u64 {
            let now = t + ms(2 * i);
            out.extend(c.expire(now));
            assert!(c.push(now, line("[1]", &i.to_string())).is_empty());
        }
        out.extend(c.expire(t + ms(200)));
        assert_eq!(out.len(), 50, "every line once, for both ranks: {out:?}");
        assert!(out.iter().all(|l| l.sources == "[0-1]".parse().unwrap()));
    }

    #[test]
    fn a_lone_line_leaves_after_the_window_when_others_are_quiet() {
        let t = Instant::now();
        let mut c = Coalescer::new(ms(20));
        assert!(c.push(t, line("[3]", "step 1")).is_empty());
        assert!(c.expire(t + ms(10)).is_empty());
        assert_eq!(c.expire(t + ms(20)), [line("[3]", "step 1")]);
    }

    #[test]
    fn a_busy_other_rank_delays_a_line_at_most_max_hold() {
        let t = Instant::now();
        let mut c = Coalescer::with_limits(ms(20), ms(100), 1 << 16);
        assert!(c.push(t, line("[0]", "only mine")).is_empty());
        let mut out = Vec::new();
        for i in 1..=60u64 {
            let now = t + ms(2 * i);
            out.extend(c.expire(now));
            let _ = c.push(now, line("[1]", &format!("other {i}")));
            if now < t + ms(100) {
                assert!(out.is_empty(), "held while rank 1 prints");
            }
        }
        assert_eq!(out.first(), Some(&line("[0]", "only mine")));
    }

    /// Two ranks flooding different lines, the buffer never empty: what left is swept from
    /// the payload index, which stays within twice the buffer (it grew by a key per line),
    /// and identical lines still merge.
    #[test]
    fn the_index_holds_only_what_is_buffered_under_a_flood() {
        let t = Instant::now();
        let mut c = Coalescer::with_limits(ms(20), ms(40), 1 << 16);
        let mut out = Vec::new();
        for i in 0..2_500u64 {
            let now = t + Duration::from_micros(200 * i);
            for r in 0..2u32 {
                let mut l = line(&format!("[{r}]"), &format!("line {i}"));
                l.index = i;
                out.extend(c.push(now, l));
            }
            out.extend(c.expire(now));
            assert!(!c.is_empty());
            assert!(
                c.indexed() <= 2 * c.len() + 64,
                "{} keys for {} groups",
                c.indexed(),
                c.len()
            );
        }
        out.extend(c.drain());
        // Both ranks' copies of each line merged: one group per line, carrying both.
        assert_eq!(out.len(), 2_500);
        assert!(
            out.iter().all(|l| l.sources == "[0-1]".parse().unwrap()),
            "{:?}",
            &out[..3]
        );
    }

    #[test]
    fn a_rank_repeating_one_line_keeps_every_copy_in_order() {
        let t = Instant::now();
        let mut c = Coalescer::with_limits(ms(20), ms(500), 1 << 20);
        for _ in 0..100_000 {
            assert!(c.push(t, line("[0]", "y")).is_empty());
        }
        assert!(c.push(t, line("[1]", "y")).is_empty()); // joins the first copy
        let out = c.drain();
        assert_eq!(out.len(), 100_000);
        assert_eq!(out[0], line("[0-1]", "y"));
    }

    #[test]
    fn the_buffer_is_bounded() {
        let t = Instant::now();
        let mut c = Coalescer::with_limits(ms(20), ms(500), 3);
        let mut out = Vec::new();
        for i in 0..5 {
            out.extend(c.push(t, line("[0]", &i.to_string())));
        }
        assert_eq!(out, [line("[0]", "0"), line("[0]", "1")]);
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn events_keep_their_place_and_merge() {
        let t = Instant::now();
        let mut c = Coalescer::new(Duration::from_millis(20));
        let exit = |ids: &str| StdioLine {
            kind: Kind::Event,
            ..line(ids, "exited")
        };
        assert!(c.push(t, line("[0]", "a")).is_empty());
        assert!(c.push(t, exit("[0]")).is_empty());
        assert!(c.push(t, line("[1]", "a")).is_empty());
        assert!(c.push(t, exit("[1]")).is_empty());
        assert!(c.push(t, line("[2]", "exited")).is_empty()); // output, not the event
        assert_eq!(
            c.drain(),
            [line("[0-1]", "a"), exit("[0-1]"), line("[2]", "exited")]
        );
        // An event never passes its sources' lines.
        assert!(c.push(t, exit("[0]")).is_empty());
        assert!(c.push(t, line("[1]", "b")).is_empty());
        assert!(c.push(t, exit("[1]")).is_empty());
        assert_eq!(c.drain(), [exit("[0]"), line("[1]", "b"), exit("[1]")]);
    }

    #[test]
    fn stdout_and_stderr_of_a_rank_are_ordered_apart() {
        let t = Instant::now();
        let mut c = Coalescer::new(ms(20));
        let out = |ids: &str, text: &str| tagged(1, ids, text);
        let err = |ids: &str, text: &str| tagged(2, ids, text);
        // Rank 0's stderr line came before its stdout line; rank 1's the other way round.
        for l in [
            err("[0]", "e"),
            out("[0]", "o"),
            out("[1]", "o"),
            err("[1]", "e"),
        ] {
            assert!(c.push(t, l).is_empty());
        }
        assert_eq!(c.drain(), [err("[0-1]", "e"), out("[0-1]", "o")]);
    }

    /// Templated lines of one template fold into one line carrying every rank and value;
    /// a plain line of the same index stays apart.
    #[test]
    fn templated_lines_fold_into_one() {
        let t = Instant::now();
        let mut c = Coalescer::new(ms(20));
        for r in 0..8u32 {
            let ids = IdSet::single(r);
            let text = format!("\u{1}took {}.5 s", r + 1);
            let payload = template::templated(Bytes::from(text.into_bytes()), &ids);
            let l = StdioLine {
                kind: Kind::Stdio,
                sources: ids,
                index: 0,
                payload,
            };
            assert!(c.push(t, l).is_empty());
        }
        assert!(c.push(t, line("[8]", "took no time")).is_empty());
        let out = c.drain();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].sources, "[0-7]".parse().unwrap());
        assert_eq!(
            template::lines(&out[0].payload, &out[0].sources),
            [(
                "[0-7]".parse().unwrap(),
                "took {1.5..8.5} s (mean 5.0, max at [7])".into()
            )]
        );
        assert_eq!(out[1], line("[8]", "took no time"));
    }

    /// A templated line that does not decode joins no group and no line joins it: its
    /// ranks print as malformed, never as the template's values.
    #[test]
    fn a_malformed_templated_line_joins_no_group() {
        let t = Instant::now();
        let mut c = Coalescer::new(ms(20));
        let l = |r: u32, cut: bool| {
            let ids = IdSet::single(r);
            let text = format!("\u{1}took {}.5 s", r + 1);
            let mut payload = template::templated(Bytes::from(text.into_bytes()), &ids);
            if cut {
                // (The key is whole: it merges by key with the others.)
                payload.truncate(payload.len() - 1);
            }
            StdioLine {
                kind: Kind::Stdio,
                sources: ids,
                index: 0,
                payload,
            }
        };
        for (r, cut) in [(0, true), (1, false), (2, false), (3, true)] {
            assert!(c.push(t, l(r, cut)).is_empty());
        }
        let out: Vec<_> = (c.drain().iter())
            .flat_map(|l| template::lines(&l.payload, &l.sources))
            .collect();
        let bad = template::MALFORMED.to_owned();
        assert_eq!(
            out,
            [
                ("[0]".parse().unwrap(), bad.clone()),
                (
                    "[1-2]".parse().unwrap(),
                    "took {2.5..3.5} s (mean 3.0, max at [2])".into()
                ),
                ("[3]".parse().unwrap(), bad),
            ]
        );
    }

    #[test]
    fn zero_window_passes_through() {
        let mut c = Coalescer::new(Duration::ZERO);
        assert_eq!(c.push(Instant::now(), line("[3]", "x")).len(), 1);
    }
}
