//! [`Aligner`]: the front-end's merge of output lines across ranks, line by line.
//!
//! Every server numbers the lines its program writes on each stream (0, 1, 2, …; see
//! `sdm_overlay::Node::handle_local_event`) and interior nodes merge only lines of equal
//! index and text. The front-end knows which ranks are still running, so it
//! can wait for the k-th line of every one of them before printing the k-th lines: identical
//! k-th lines of all ranks print once (`[0-15] 42`), however late one rank is, and the same
//! output gives the same groups on an idle and on a loaded machine.
//!
//! A rank is awaited only while it is producing output: its server sends an *idle marker*
//! ([`IDLE`](sdm_overlay::stdio::IDLE)) when its program goes idle with every line sent
//! (nothing runnable, or computing without printing), saying how many lines it printed on each
//! stream; a group of k-th lines waits for a rank idle after n ≤ k lines only a moment
//! ([`IDLE_GRACE`], for a rank that wakes with the others, as in a collective), not the lag.
//! A rank that prints again is awaited again from its next line. Only the server can tell a silent
//! rank from a late one (starved of CPU on a loaded machine, it is runnable and never idle),
//! so the merge stays exact under load while a rank-0-only progress line shows at once.
//!
//! The wait is bounded: a group leaves without the ranks that have not printed their k-th
//! line yet when it has waited `lag` (a rank that is stopped, or prints less), or when more
//! than `max_lines` lines are held; those ranks' k-th lines then print on their own when
//! they come. Each rank's lines leave in the order it printed them.
//!
//! Events leave after every line their ranks printed before them. An *end* (a program's
//! exit, pushed with [`Aligner::push_end`]) takes its ranks out of those awaited, and ends
//! merge: they wait until every rank has ended (at most `lag`, or `window` once every rank
//! still running is idle), so sixteen identical exits print as one line. Other identical
//! events merge when they come within `window` of each other.
//!
//! Templated k-th lines (`sdm_overlay::template`) of one template merge here as they do in
//! the tree: folded into one group, whatever ranks and subtrees they came from.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sdm_proto::{IdSet, Kind};

use sdm_overlay::stdio::{StdioLine, idle_stream};
use sdm_overlay::template;

/// How long identical events (other than ends) of different ranks wait for each other, by
/// default.
pub const DEFAULT_EVENT_WINDOW: Duration = Duration::from_millis(200);

/// How long a line still waits for ranks that are idle before it (a rank idle in a
/// collective wakes with the others and prints its line a moment later).
pub const IDLE_GRACE: Duration = Duration::from_millis(250);

/// How many groups of lines are held at most, by default (past it the oldest leave).
pub const DEFAULT_MAX_LINES: usize = 1 << 20;

/// The k-th lines of the ranks (one group per distinct text).
#[derive(Debug)]
struct Entry {
    /// When the first of them arrived.
    born: Instant,
    /// The ranks that printed their k-th line.
    have: IdSet,
    /// Distinct texts (or templates) with their ranks, in order of arrival.
    groups: Vec<Held>,
}

/// One distinct k-th line and its ranks.
#[derive(Debug)]
struct Held {
    /// What lines merge by (the payload, or a templated line's key); `None`: a templated
    /// line that does not decode, which nothing joins.
    key: Option<Bytes>,
    payload: Bytes,
    ids: IdSet,
    /// Templated lines folded in (encoded into the payload when it leaves).
    folded: template::Folding,
}

/// One output stream (stdout, stderr) of all ranks.
#[derive(Debug, Default)]
struct Channel {
    /// Index of the first line not released yet: every line below it has left.
    next: u64,
    /// Held lines by index.
    entries: BTreeMap<u64, Entry>,
    /// Ranks idle (by their latest marker, nothing printed since), with how many lines
    /// they had printed on this stream.
    idle: BTreeMap<u32, u64>,
    /// The ranks of `idle`.
    idle_ids: IdSet,
}

impl Channel {
    /// Whether the group at index `k` waits for none of `running` but idle ones (each one
    /// that has not printed its k-th line is idle before it): then it leaves once it is
    /// [`IDLE_GRACE`] old.
    fn only_idle_missing(&self, running: &IdSet, k: u64, e: &Entry) -> bool {
        let missing = running - &e.have;
        missing.is_subset(&self.idle_ids)
            && missing
                .iter()
                .all(|r| self.idle.get(&r).is_some_and(|&n| n <= k))
    }

    /// `ranks` printed line `index`: they are awaited again.
    fn printed(&mut self, ranks: &IdSet, index: u64) {
        if self.idle_ids.is_disjoint(ranks) {
            return;
        }
        for r in (ranks & &self.idle_ids).iter() {
            if self.idle.get(&r).is_some_and(|&n| index >= n) {
                self.idle.remove(&r);
                self.idle_ids.remove(r);
            }
        }
    }
}

/// An event waiting for its ranks' earlier lines (and, to merge, for other ranks).
#[derive(Debug)]
struct Pending {
    line: StdioLine,
    born: Instant,
    /// An end: its ranks print nothing more.
    end: bool,
    /// Per stream tag, the index every line of the event's ranks printed before it is
    /// below: the event leaves once the stream's `next` has reached it.
    need: Vec<(u8, u64)>,
}

/// Line-aligned merging of output and events at the front-end (see the module docs).
#[derive(Debug)]
pub struct Aligner {
    /// Ranks whose lines are awaited.
    running: IdSet,
    lag: Duration,
    window: Duration,
    max_lines: usize,
    /// Groups held, over all streams.
    held: usize,
    channels: BTreeMap<u8, Channel>,
    events: VecDeque<Pending>,
}

/// The stream tag of an output line (its payload's first byte; 1 stdout, 2 stderr).
fn stream(l: &StdioLine) -> u8 {
    template::stream_of(&l.payload).max(1)
}

impl Aligner {
    /// Aligns the output of `ranks`, holding a line at most `lag` for the ranks that have
    /// not printed theirs ([`DEFAULT_EVENT_WINDOW`] and [`DEFAULT_MAX_LINES`] for the
    /// rest). A zero `lag` passes everything straight through.
    pub fn new(ranks: IdSet, lag: Duration) -> Self {
        Self::with_limits(ranks, lag, DEFAULT_EVENT_WINDOW, DEFAULT_MAX_LINES)
    }

    /// [`Aligner::new`] holding events `window` to merge with identical ones (at most the
    /// lag), and at most `max_lines` groups of lines.
    pub fn with_limits(ranks: IdSet, lag: Duration, window: Duration, max_lines: usize) -> Self {
        Self {
            running: ranks,
            lag,
            window: window.min(lag),
            max_lines: max_lines.max(1),
            held: 0,
            channels: BTreeMap::new(),
            events: VecDeque::new(),
        }
    }

    /// How long a line waits at most for the ranks that have not printed theirs.
    pub fn lag(&self) -> Duration {
        self.lag
    }

    /// The ranks still awaited (not ended).
    pub fn running(&self) -> &IdSet {
        &self.running
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0 && self.events.is_empty()
    }

    /// `ranks` will print nothing more (their server was lost, their program never
    /// started): lines stop waiting for them. Returns what may leave now.
    pub fn end(&mut self, now: Instant, ranks: &IdSet) -> Vec<StdioLine> {
        self.running.difference_with(ranks);
        self.release(now)
    }

    /// Takes a line of output or an event (not an end); returns what may leave now, in
    /// order.
    pub fn push(&mut self, now: Instant, line: StdioLine) -> Vec<StdioLine> {
        if let Some(tag) = idle_stream(&line) {
            return self.push_idle(now, tag, line);
        }
        if line.kind == Kind::Stdio {
            self.push_line(now, line)
        } else {
            self.push_event(now, line, false)
        }
    }

    /// Takes an event after which its ranks print nothing more (a program's exit).
    pub fn push_end(&mut self, now: Instant, line: StdioLine) -> Vec<StdioLine> {
        self.running.difference_with(&line.sources);
        self.push_event(now, line, true)
    }

    /// An idle marker: its ranks printed `line.index` lines on stream `tag` and no more
    /// for now; lines past those stop waiting for them. (Never printed.)
    fn push_idle(&mut self, now: Instant, tag: u8, line: StdioLine) -> Vec<StdioLine> {
        if self.lag.is_zero() {
            return Vec::new();
        }
        let ch = self.channels.entry(tag.max(1)).or_default();
        for r in line.sources.iter() {
            ch.idle.insert(r, line.index);
        }
        ch.idle_ids.union_with(&line.sources);
        self.release(now)
    }

    /// Whether every rank still running is idle on every stream (nothing of theirs is
    /// coming for now).
    fn all_idle(&self) -> bool {
        !self.channels.is_empty()
            && self
                .channels
                .values()
                .all(|ch| self.running.is_subset(&ch.idle_ids))
    }

    fn push_line(&mut self, now: Instant, line: StdioLine) -> Vec<StdioLine> {
        if self.lag.is_zero() {
            return vec![line];
        }
        let ch = self.channels.entry(stream(&line)).or_default();
        ch.printed(&line.sources, line.index);
        if line.index < ch.next {
            // Its group has left without these ranks: it prints on its own (every
            // earlier line of theirs has left too).
            let mut out = vec![line];
            out.extend(self.release(now));
            return out;
        }
        let entry = ch.entries.entry(line.index).or_insert_with(|| Entry {
            born: now,
            have: IdSet::new(),
            groups: Vec::new(),
        });
        entry.have.union_with(&line.sources);
        let decoded = template::to_fold(&line.payload, &line.sources);
        let key = decoded.is_ok().then(|| template::merge_key(&line.payload));
        match entry
            .groups
            .iter_mut()
            .find(|h| key.is_some() && h.key == key)
        {
            Some(h) => {
                if let Ok(Some(g)) = decoded {
                    h.folded.fold(&h.payload, &h.ids, g);
                }
                h.ids.union_with(&line.sources);
            }
            None => {
                entry.groups.push(Held {
                    key,
                    payload: line.payload,
                    ids: line.sources,
                    folded: template::Folding::default(),
                });
                self.held += 1;
            }
        }
        self.release(now)
    }

    fn push_event(&mut self, now: Instant, line: StdioLine, end: bool) -> Vec<StdioLine> {
        if self.lag.is_zero() {
            return vec![line];
        }
        // The event's ranks' earlier lines still held: up to the last held index that one
        // of them printed (every earlier line of theirs is held below it or has left).
        let need: Vec<(u8, u64)> = self
            .channels
            .iter()
            .filter_map(|(&tag, ch)| {
                let (&k, _) = ch
                    .entries
                    .iter()
                    .rev()
                    .find(|(_, e)| !e.have.is_disjoint(&line.sources))?;
                Some((tag, k + 1))
            })
            .collect();
        // Join the last pending event of the same text, unless one of these ranks has a
        // later event pending (its events keep their order).
        let later = self
            .events
            .iter()
            .rposition(|p| p.end == end && p.line.payload == line.payload);
        let joinable = later.filter(|&i| {
            self.events
                .iter()
                .skip(i + 1)
                .all(|p| p.line.sources.is_disjoint(&line.sources))
        });
        match joinable {
            Some(i) => {
                let p = &mut self.events[i];
                p.line.sources.union_with(&line.sources);
                for (tag, upto) in need {
                    match p.need.iter_mut().find(|(t, _)| *t == tag) {
                        Some((_, u)) => *u = (*u).max(upto),
                        None => p.need.push((tag, upto)),
                    }
                }
            }
            None => self.events.push_back(Pending {
                line,
                born: now,
                end,
                need,
            }),
        }
        self.release(now)
    }

    /// What may leave at `now`, in order.
    pub fn expire(&mut self, now: Instant) -> Vec<StdioLine> {
        self.release(now)
    }

    /// Everything held, in order: each event after the lines its ranks printed before it.
    pub fn drain(&mut self) -> Vec<StdioLine> {
        let mut out = Vec::new();
        while let Some(p) = self.events.pop_front() {
            for &(tag, upto) in &p.need {
                if let Some(ch) = self.channels.get_mut(&tag) {
                    while ch.entries.first_key_value().is_some_and(|(&k, _)| k < upto) {
                        out.extend(Self::pop_front(ch, &mut self.held));
                    }
                }
            }
            out.push(p.line);
        }
        for ch in self.channels.values_mut() {
            while !ch.entries.is_empty() {
                out.extend(Self::pop_front(ch, &mut self.held));
            }
        }
        out
    }

    /// Releases the first held index of `ch`: its groups in rank order.
    fn pop_front(ch: &mut Channel, held: &mut usize) -> Vec<StdioLine> {
        let Some((index, entry)) = ch.entries.pop_first() else {
            return Vec::new();
        };
        let mut groups = entry.groups;
        *held -= groups.len();
        groups.sort_by_key(|h| h.ids.first());
        ch.next = index + 1;
        groups
            .into_iter()
            .map(|h| StdioLine {
                kind: Kind::Stdio,
                sources: h.ids.clone(),
                index,
                payload: h.folded.into_payload(h.payload),
            })
            .collect()
    }

    /// When [`Aligner::expire`] may next have something.
    pub fn deadline(&self) -> Option<Instant> {
        let lines = self.channels.values().filter_map(|ch| {
            let (&k, e) = ch.entries.first_key_value()?;
            Some(if ch.only_idle_missing(&self.running, k, e) {
                e.born + IDLE_GRACE.min(self.lag)
            } else {
                e.born + self.lag
            })
        });
        let all_idle = self.all_idle();
        let events = self.events.iter().map(|p| {
            p.born
                + if p.end && !self.running.is_empty() && !all_idle {
                    self.lag
                } else {
                    self.window
                }
        });
        lines.chain(events).min()
    }

    fn release(&mut self, now: Instant) -> Vec<StdioLine> {
        let mut out = Vec::new();
        loop {
            let before = out.len();
            for ch in self.channels.values_mut() {
                while let Some((&k, e)) = ch.entries.first_key_value() {
                    let age = now.saturating_duration_since(e.born);
                    let due = self.running.is_subset(&e.have)
                        || (age >= IDLE_GRACE.min(self.lag)
                            && ch.only_idle_missing(&self.running, k, e))
                        || now.saturating_duration_since(e.born) >= self.lag
                        || self.held > self.max_lines;
                    if !due {
                        break;
                    }
                    out.extend(Self::pop_front(ch, &mut self.held));
                }
            }
            let all_idle = self.all_idle();
            let mut i = 0;
            while i < self.events.len() {
                let p = &self.events[i];
                let lines_out = p
                    .need
                    .iter()
                    .all(|&(tag, upto)| self.channels.get(&tag).is_none_or(|ch| ch.next >= upto));
                let age = now.saturating_duration_since(p.born);
                let merged = if p.end {
                    self.running.is_empty() || age >= self.lag || (all_idle && age >= self.window)
                } else {
                    age >= self.window
                };
                let first_of_its_ranks = self
                    .events
                    .iter()
                    .take(i)
                    .all(|q| q.line.sources.is_disjoint(&p.line.sources));
                if first_of_its_ranks && lines_out && merged {
                    let p = self.events.remove(i).expect("in range");
                    out.push(p.line);
                } else {
                    i += 1;
                }
            }
            if out.len() == before {
                return out;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The k-th templated lines of two subtrees (one of them a group already) fold into one
    /// line holding every rank's value; a plain line of the same index stays apart.
    #[test]
    fn templated_lines_of_subtrees_fold_into_one() {
        let t = Instant::now();
        let mut a = Aligner::new("[0-3]".parse().unwrap(), Duration::from_secs(60));
        let templated = |ids: &str, value: u32| {
            let ids: IdSet = ids.parse().unwrap();
            let text = format!("\u{1}took {value} ms");
            StdioLine {
                kind: Kind::Stdio,
                payload: template::templated(Bytes::from(text.into_bytes()), &ids),
                sources: ids,
                index: 0,
            }
        };
        assert!(a.push(t, templated("[0]", 5)).is_empty());
        assert!(a.push(t, templated("[1]", 9)).is_empty());
        let plain = StdioLine {
            kind: Kind::Stdio,
            sources: "[2-3]".parse().unwrap(),
            index: 0,
            payload: Bytes::from_static(b"\x01took no time"),
        };
        let out = a.push(t, plain.clone());
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(
            template::lines(&out[0].payload, &out[0].sources),
            [(
                "[0-1]".parse().unwrap(),
                "took {5..9} ms (mean 7, max at [1])".into()
            )]
        );
        assert_eq!(out[1], plain);
    }

    /// A templated line that does not decode joins no group and no line joins it: its
    /// ranks print as malformed, never as the template's values.
    #[test]
    fn a_malformed_templated_line_joins_no_group() {
        let t = Instant::now();
        let mut a = Aligner::new("[0-3]".parse().unwrap(), Duration::from_secs(60));
        let l = |r: u32, cut: bool| {
            let ids = IdSet::single(r);
            let text = format!("\u{1}took {} ms", r + 5);
            let mut payload = template::templated(Bytes::from(text.into_bytes()), &ids);
            if cut {
                payload.truncate(payload.len() - 1);
            }
            StdioLine {
                kind: Kind::Stdio,
                sources: ids,
                index: 0,
                payload,
            }
        };
        let mut out = Vec::new();
        for (r, cut) in [(0, true), (1, false), (2, false), (3, true)] {
            out.extend(a.push(t, l(r, cut)));
        }
        let out: Vec<_> = (out.iter())
            .flat_map(|l| template::lines(&l.payload, &l.sources))
            .collect();
        let bad = template::MALFORMED.to_owned();
        assert_eq!(
            out,
            [
                ("[0]".parse().unwrap(), bad.clone()),
                (
                    "[1-2]".parse().unwrap(),
                    "took {6..7} ms (mean 6.5, max at [2])".into()
                ),
                ("[3]".parse().unwrap(), bad),
            ]
        );
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn line(ids: &str, index: u64, text: &str) -> StdioLine {
        let mut payload = vec![1u8];
        payload.extend_from_slice(text.as_bytes());
        StdioLine {
            kind: Kind::Stdio,
            sources: ids.parse().unwrap(),
            index,
            payload: Bytes::from(payload),
        }
    }

    fn event(ids: &str, text: &str) -> StdioLine {
        StdioLine {
            kind: Kind::Event,
            sources: ids.parse().unwrap(),
            index: 0,
            payload: Bytes::copy_from_slice(text.as_bytes()),
        }
    }

    fn shown(lines: &[StdioLine]) -> Vec<String> {
        lines
            .iter()
            .map(|l| {
                let text = match l.kind {
                    Kind::Stdio => String::from_utf8_lossy(&l.payload[1..]).into_owned(),
                    _ => format!("event {}", String::from_utf8_lossy(&l.payload)),
                };
                format!("{} {text}", l.sources)
            })
            .collect()
    }

    fn aligner(n: u32) -> Aligner {
        Aligner::with_limits(IdSet::all(n), ms(5000), ms(100), 1 << 20)
    }

    #[test]
    fn kth_lines_wait_for_every_running_rank_however_late() {
        let t = Instant::now();
        let mut a = aligner(3);
        let mut out = Vec::new();
        // Ranks 0 and 1 print everything; rank 2 is late (by any amount below the lag).
        for k in 0..100 {
            out.extend(a.push(t, line("[0]", k, &k.to_string())));
            out.extend(a.push(t, line("[1]", k, &k.to_string())));
        }
        assert!(out.is_empty());
        for k in 0..100 {
            out.extend(a.push(t + ms(4000), line("[2]", k, &k.to_string())));
        }
        assert_eq!(out.len(), 100);
        assert!(out.iter().all(|l| l.sources == IdSet::all(3)));
        assert_eq!(
            out.iter().map(|l| l.index).collect::<Vec<_>>(),
            (0..100).collect::<Vec<_>>()
        );
        assert!(a.is_empty());
    }

    #[test]
    fn merged_partial_groups_from_the_tree_become_one() {
        let t = Instant::now();
        let mut a = aligner(16);
        assert!(a.push(t, line("[0-3,7-9,11-12,15]", 0, "x")).is_empty());
        let out = a.push(t, line("[4-6,10,13-14]", 0, "x"));
        assert_eq!(shown(&out), ["[0-15] x"]);
    }

    #[test]
    fn different_texts_of_one_index_leave_together_in_rank_order() {
        let t = Instant::now();
        let mut a = aligner(3);
        assert!(a.push(t, line("[2]", 0, "rank 2")).is_empty());
        assert!(a.push(t, line("[0]", 0, "rank 0")).is_empty());
        let out = a.push(t, line("[1]", 0, "rank 0"));
        assert_eq!(shown(&out), ["[0-1] rank 0", "[2] rank 2"]);
    }

    #[test]
    fn past_the_lag_stragglers_print_on_their_own_in_order() {
        let t = Instant::now();
        let mut a = aligner(2);
        for k in 0..3 {
            assert!(a.push(t, line("[0]", k, "a")).is_empty());
        }
        assert_eq!(a.deadline(), Some(t + ms(5000)));
        assert!(a.expire(t + ms(4999)).is_empty());
        let out = a.expire(t + ms(5000));
        assert_eq!(shown(&out), ["[0] a", "[0] a", "[0] a"]);
        // Rank 1's lines come after their groups left: each prints at once, in order.
        let out: Vec<_> = (0..3)
            .flat_map(|k| a.push(t + ms(6000), line("[1]", k, "a")))
            .collect();
        assert_eq!(out.iter().map(|l| l.index).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(a.is_empty());
    }

    #[test]
    fn ended_ranks_are_not_awaited_and_ends_merge() {
        let t = Instant::now();
        let mut a = aligner(3);
        let mut out = Vec::new();
        out.extend(a.push(t, line("[0-1]", 0, "one")));
        out.extend(a.push_end(t, event("[0]", "exited 0")));
        // Rank 2 prints "one" and "two" much later; rank 1 "two" too.
        out.extend(a.push(t + ms(1000), line("[1]", 1, "two")));
        assert!(out.is_empty(), "{:?}", shown(&out));
        out.extend(a.push(t + ms(2000), line("[2]", 0, "one")));
        out.extend(a.push(t + ms(2000), line("[2]", 1, "two")));
        assert_eq!(shown(&out), ["[0-2] one", "[1-2] two"]);
        out.clear();
        out.extend(a.push_end(t + ms(2100), event("[1]", "exited 0")));
        assert!(out.is_empty(), "ends wait for every rank");
        out.extend(a.push_end(t + ms(3000), event("[2]", "exited 0")));
        assert_eq!(shown(&out), ["[0-2] event exited 0"]);
    }

    #[test]
    fn an_event_never_passes_its_ranks_lines() {
        let t = Instant::now();
        let mut a = aligner(2);
        assert!(a.push(t, line("[0]", 0, "before")).is_empty());
        assert!(a.push(t, event("[0]", "breakpoint")).is_empty());
        assert!(
            a.expire(t + ms(200)).is_empty(),
            "the line still waits for rank 1"
        );
        let out = a.push(t + ms(300), line("[1]", 0, "before"));
        assert_eq!(shown(&out), ["[0-1] before", "[0] event breakpoint"]);
    }

    #[test]
    fn identical_events_within_the_window_merge() {
        let t = Instant::now();
        let mut a = aligner(4);
        assert!(a.push(t, event("[0]", "stopped")).is_empty());
        assert!(a.push(t + ms(50), event("[1-3]", "stopped")).is_empty());
        assert_eq!(shown(&a.expire(t + ms(100))), ["[0-3] event stopped"]);
    }

    #[test]
    fn lost_ranks_stop_being_awaited() {
        let t = Instant::now();
        let mut a = aligner(3);
        assert!(a.push(t, line("[0-1]", 0, "x")).is_empty());
        assert_eq!(shown(&a.end(t, &IdSet::single(2))), ["[0-1] x"]);
    }

    #[test]
    fn the_held_lines_are_bounded() {
        let t = Instant::now();
        let mut a = Aligner::with_limits(IdSet::all(2), ms(5000), ms(100), 10);
        let out: Vec<_> = (0..20)
            .flat_map(|k| a.push(t, line("[0]", k, &k.to_string())))
            .collect();
        assert_eq!(out.len(), 10);
        assert_eq!(out[0].index, 0);
    }

    fn idle(ids: &str, lines: u64) -> StdioLine {
        StdioLine {
            kind: Kind::Stdio,
            sources: ids.parse().unwrap(),
            index: lines,
            payload: Bytes::from_static(&[sdm_overlay::stdio::IDLE, 1]),
        }
    }

    #[test]
    fn a_line_waits_only_the_grace_when_the_other_ranks_are_idle_before_it() {
        let t = Instant::now();
        let g = IDLE_GRACE;
        let mut a = aligner(4);
        // Ranks 1-3 print nothing and say so; rank 0's progress lines leave after the
        // grace, not the lag.
        assert!(a.push(t, idle("[1-2]", 0)).is_empty());
        assert!(a.push(t, line("[0]", 0, "progress 0")).is_empty());
        assert!(a.push(t, idle("[3]", 0)).is_empty());
        assert_eq!(a.deadline(), Some(t + g));
        assert_eq!(shown(&a.expire(t + g)), ["[0] progress 0"]);
        assert!(a.push(t + g, line("[0]", 1, "progress 1")).is_empty());
        assert_eq!(shown(&a.expire(t + 2 * g)), ["[0] progress 1"]);
        // A rank idle after 2 lines is still awaited for its first two.
        let mut b = aligner(2);
        assert!(b.push(t, idle("[1]", 2)).is_empty());
        assert!(b.push(t, line("[0]", 1, "x")).is_empty());
        assert!(b.push(t, line("[0]", 0, "w")).is_empty());
        assert!(b.expire(t + g).is_empty());
        assert_eq!(shown(&b.push(t + g, line("[1]", 0, "w"))), ["[0-1] w"]);
        assert_eq!(shown(&b.push(t + g, line("[1]", 1, "x"))), ["[0-1] x"]);
        assert!(b.push(t + g, line("[0]", 2, "y")).is_empty());
        assert_eq!(shown(&b.expire(t + 2 * g)), ["[0] y"]);
        assert!(b.is_empty());
    }

    #[test]
    fn a_rank_idle_but_printing_within_the_grace_still_merges() {
        let t = Instant::now();
        let mut a = aligner(2);
        assert!(a.push(t, idle("[1]", 0)).is_empty());
        assert!(a.push(t, line("[0]", 0, "ok")).is_empty());
        let out = a.push(t + IDLE_GRACE / 2, line("[1]", 0, "ok"));
        assert_eq!(shown(&out), ["[0-1] ok"]);
    }

    #[test]
    fn a_rank_that_prints_again_is_awaited_again() {
        let t = Instant::now();
        let g = IDLE_GRACE;
        let mut a = aligner(2);
        assert!(a.push(t, idle("[1]", 0)).is_empty());
        assert!(a.push(t, line("[0]", 0, "a")).is_empty());
        assert_eq!(shown(&a.expire(t + g)), ["[0] a"]);
        // Rank 1 wakes up: it prints its line 0, and is awaited for line 1 again.
        assert_eq!(shown(&a.push(t + g, line("[1]", 0, "a"))), ["[1] a"]);
        assert!(a.push(t + g, line("[0]", 1, "b")).is_empty());
        assert!(a.expire(t + ms(4999)).is_empty());
        assert_eq!(
            shown(&a.push(t + ms(4999), line("[1]", 1, "b"))),
            ["[0-1] b"]
        );
    }

    #[test]
    fn without_markers_the_merge_waits_as_before() {
        let t = Instant::now();
        let mut a = aligner(3);
        // A marker on stderr says nothing of stdout.
        let mut err = idle("[1-2]", 0);
        err.payload = Bytes::from_static(&[sdm_overlay::stdio::IDLE, 2]);
        assert!(a.push(t, err).is_empty());
        assert!(a.push(t, line("[0]", 0, "a")).is_empty());
        assert!(a.push(t + ms(3000), line("[1]", 0, "a")).is_empty());
        assert_eq!(
            shown(&a.push(t + ms(4000), line("[2]", 0, "a"))),
            ["[0-2] a"]
        );
    }

    #[test]
    fn ends_do_not_wait_for_idle_ranks_past_the_window() {
        let t = Instant::now();
        let mut a = aligner(3);
        assert!(a.push(t, line("[0]", 0, "done")).is_empty());
        assert!(a.push_end(t, event("[0]", "exited 0")).is_empty());
        let mut out = a.push(t, idle("[1-2]", 0));
        out.extend(a.push(t, {
            let mut e = idle("[1-2]", 0);
            e.payload = Bytes::from_static(&[sdm_overlay::stdio::IDLE, 2]);
            e
        }));
        assert!(out.is_empty());
        assert_eq!(
            shown(&a.expire(t + IDLE_GRACE)),
            ["[0] done", "[0] event exited 0"]
        );
        // Markers are never printed, and pass no line when merging is off.
        let mut z = Aligner::new(IdSet::all(2), Duration::ZERO);
        assert!(z.push(t, idle("[1]", 0)).is_empty());
    }

    #[test]
    fn zero_lag_passes_through() {
        let mut a = Aligner::new(IdSet::all(2), Duration::ZERO);
        assert_eq!(a.push(Instant::now(), line("[0]", 0, "x")).len(), 1);
    }

    #[test]
    fn drain_keeps_each_ranks_order() {
        let t = Instant::now();
        let mut a = aligner(2);
        assert!(a.push(t, line("[0]", 0, "a")).is_empty());
        assert!(a.push(t, event("[0]", "e")).is_empty());
        assert!(a.push(t, line("[0]", 1, "b")).is_empty());
        assert_eq!(shown(&a.drain()), ["[0] a", "[0] event e", "[0] b"]);
    }
}
