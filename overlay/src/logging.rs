//! Logging of the nodes' listeners: [`Refusals`], which keeps connections a stranger can
//! open at will from flooding the log: the first refusal is a warning as always, the ones
//! after it within an interval are counted (and logged at debug level) and reported in one
//! summary line per interval; and [`panic_text`], what a caught panic said.

use std::fmt::Display;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a listener reports the refusals it did not log one by one.
pub(crate) const REFUSAL_INTERVAL: Duration = Duration::from_secs(10);

/// What to do with one occurrence of a repeated event: see [`RateLimit::hit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Log it in full: the first one in a while.
    Log,
    /// Count it, do not log it.
    Suppressed,
    /// Log a summary instead: `count` occurrences (this one included) over `over`.
    Summary {
        /// Occurrences not logged one by one.
        count: u64,
        /// The time they came in.
        over: Duration,
    },
}

/// A rate limiter for a repeated log line: the first occurrence is logged, the ones within
/// the following interval are counted, and the count is reported at most once per
/// interval. The clock is the caller's (`Instant`s passed in), so it is deterministic.
#[derive(Debug, Clone)]
pub(crate) struct RateLimit {
    interval: Duration,
    /// When the current interval began (`None`: nothing yet).
    since: Option<Instant>,
    /// Occurrences counted but not yet reported.
    suppressed: u64,
}

impl RateLimit {
    /// A limiter that reports at most once per `interval`.
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            since: None,
            suppressed: 0,
        }
    }

    /// One occurrence at `now`: the first one (or the first after a quiet interval) is
    /// [`Verdict::Log`]; later ones within the interval are [`Verdict::Suppressed`]; the
    /// first one after the interval, if some were suppressed, is a [`Verdict::Summary`] of
    /// them and itself, and starts the next interval.
    pub(crate) fn hit(&mut self, now: Instant) -> Verdict {
        match self.since {
            Some(since) if now.saturating_duration_since(since) < self.interval => {
                self.suppressed += 1;
                Verdict::Suppressed
            }
            Some(since) if self.suppressed > 0 => {
                let count = self.suppressed + 1;
                self.since = Some(now);
                self.suppressed = 0;
                Verdict::Summary {
                    count,
                    over: now.saturating_duration_since(since),
                }
            }
            _ => {
                self.since = Some(now);
                Verdict::Log
            }
        }
    }

    /// The summary due at `now` without a new occurrence: the suppressed ones once their
    /// interval is over (then a new interval starts, so a flood that goes on is still
    /// reported once per interval).
    pub(crate) fn flush(&mut self, now: Instant) -> Option<Verdict> {
        let since = self.since?;
        if now.saturating_duration_since(since) < self.interval {
            return None;
        }
        self.take(now)
    }

    /// The summary of the suppressed ones at `now`, interval over or not (at the end).
    pub(crate) fn take(&mut self, now: Instant) -> Option<Verdict> {
        let since = self.since?;
        if self.suppressed == 0 {
            return None;
        }
        let count = std::mem::take(&mut self.suppressed);
        self.since = Some(now);
        Some(Verdict::Summary {
            count,
            over: now.saturating_duration_since(since),
        })
    }
}

/// The refused connections of one listener, logged through a [`RateLimit`]: in full (a
/// warning with the peer and the reason) the first time in [`REFUSAL_INTERVAL`], then as
/// one summary warning per interval; each refusal is still logged at debug level.
#[derive(Debug)]
pub(crate) struct Refusals {
    node: String,
    limit: Mutex<RateLimit>,
}

impl Refusals {
    /// The refusals of node `node`'s listener.
    pub(crate) fn new(node: impl Into<String>) -> Self {
        Self {
            node: node.into(),
            limit: Mutex::new(RateLimit::new(REFUSAL_INTERVAL)),
        }
    }

    /// Logs that the connection from `peer` was refused because of `why`.
    pub(crate) fn refused(&self, peer: &dyn Display, why: &dyn Display) {
        let verdict = self.lock().hit(Instant::now());
        if verdict == Verdict::Log {
            tracing::warn!(node = %self.node, peer = %peer, "refused connection: {why}");
        } else {
            tracing::debug!(node = %self.node, peer = %peer, "refused connection: {why}");
            self.report(Some(verdict));
        }
    }

    /// Logs the summary that is due once per [`REFUSAL_INTERVAL`], for ever: run it beside
    /// the accept loop (pinned outside it), so a flood that stops is still reported.
    pub(crate) async fn keep_reporting(&self) {
        loop {
            tokio::time::sleep(REFUSAL_INTERVAL).await;
            let due = self.lock().flush(Instant::now());
            self.report(due);
        }
    }

    fn report(&self, verdict: Option<Verdict>) {
        if let Some(Verdict::Summary { count, over }) = verdict {
            tracing::warn!(
                node = %self.node,
                "refused {count} more unauthenticated connections in the last {:.1} s \
                 (each one at debug level: RUST_LOG=sdm_overlay=debug)",
                over.as_secs_f64()
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RateLimit> {
        self.limit.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Refusals {
    /// The listener is done: what was not reported yet is, however recent.
    fn drop(&mut self) {
        let rest = self.lock().take(Instant::now());
        self.report(rest);
    }
}

/// The message a caught panic carried (`panic!("...")` with or without arguments), or
/// nothing for another payload: for reporting a panic that was caught instead of lost.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn summary(count: u64, secs: u64) -> Verdict {
        Verdict::Summary {
            count,
            over: Duration::from_secs(secs),
        }
    }

    #[test]
    fn a_flood_is_one_line_then_one_summary_per_interval() {
        let t0 = Instant::now();
        let mut l = RateLimit::new(10 * S);
        assert_eq!(l.flush(t0), None);
        assert_eq!(l.hit(t0), Verdict::Log);
        assert_eq!(l.flush(t0), None, "nothing suppressed yet");
        for k in 1..=4007u32 {
            assert_eq!(l.hit(t0 + k * S / 1000), Verdict::Suppressed);
        }
        assert_eq!(l.flush(t0 + 9 * S), None, "the interval is not over");
        assert_eq!(l.flush(t0 + 10 * S), Some(summary(4007, 10)));
        // Reported once: nothing more is due until new refusals come.
        assert_eq!(l.flush(t0 + 12 * S), None);
        assert_eq!(l.take(t0 + 12 * S), None);
        // Within the next interval (started by the summary): counted again.
        assert_eq!(l.hit(t0 + 15 * S), Verdict::Suppressed);
        assert_eq!(l.hit(t0 + 16 * S), Verdict::Suppressed);
        // The first one after it reports them and itself, without a timer.
        assert_eq!(l.hit(t0 + 21 * S), summary(3, 11));
    }

    #[test]
    fn after_a_quiet_interval_a_refusal_is_logged_in_full_again() {
        let t0 = Instant::now();
        let mut l = RateLimit::new(10 * S);
        assert_eq!(l.hit(t0), Verdict::Log);
        assert_eq!(l.hit(t0 + 10 * S), Verdict::Log);
        assert_eq!(l.hit(t0 + 11 * S), Verdict::Suppressed);
        assert_eq!(l.hit(t0 + 60 * S), summary(2, 50));
        assert_eq!(l.hit(t0 + 75 * S), Verdict::Log);
    }

    #[test]
    fn at_the_end_the_rest_is_reported_however_recent() {
        let t0 = Instant::now();
        let mut l = RateLimit::new(10 * S);
        assert_eq!(l.take(t0), None, "nothing yet");
        assert_eq!(l.hit(t0), Verdict::Log);
        assert_eq!(l.take(t0 + S), None, "the one logged is not repeated");
        assert_eq!(l.hit(t0 + 2 * S), Verdict::Suppressed);
        assert_eq!(l.flush(t0 + 3 * S), None);
        assert_eq!(l.take(t0 + 3 * S), Some(summary(1, 3)));
    }
}
