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
mod tests;
