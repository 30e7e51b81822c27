//! Message-level liveness of the links around a node, as sans-IO state the [`Node`] owns:
//! every `interval` it sends a keepalive on each link, and a link it has heard nothing on
//! for `dead_after` is declared dead (a silent peer: a hung process, a cut cable that TCP
//! would take minutes to notice while data is outstanding). The deadlines are part of
//! [`Node::poll_timeout`], so a driver only has to call [`Node::handle_timeout`] — the tokio
//! driver and [`crate::sim::SimNet`] alike — and tests can expire a link in virtual time.
//!
//! [`Node`]: crate::Node
//! [`Node::poll_timeout`]: crate::Node::poll_timeout
//! [`Node::handle_timeout`]: crate::Node::handle_timeout

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use sdm_topology::NodeId;

/// How often a node sends keepalives, and after how much silence a link is dead. The
/// master does not watch its link to the front-end (a person may be thinking at the
/// console); the front-end ignores the keepalives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// Time between keepalives on a link.
    pub interval: Duration,
    /// Silence after which the link is declared dead.
    pub dead_after: Duration,
}

/// The environment variable that sets [`Liveness`]: `INTERVAL_MS,DEAD_AFTER_MS`.
pub const KEEPALIVE_ENV: &str = "SDM_KEEPALIVE_MS";

impl Default for Liveness {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            dead_after: Duration::from_secs(10),
        }
    }
}

/// A malformed [`KEEPALIVE_ENV`] value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{KEEPALIVE_ENV}={value:?}: {why}")]
pub struct LivenessError {
    value: String,
    why: String,
}

impl Liveness {
    /// From `SDM_KEEPALIVE_MS` (`INTERVAL_MS,DEAD_AFTER_MS`), else the default (1 s, 10 s).
    /// A malformed value is reported and the default used.
    pub fn from_env() -> Self {
        match std::env::var(KEEPALIVE_ENV) {
            Ok(v) => Self::parse(&v).unwrap_or_else(|e| {
                tracing::warn!("{e}; using the default");
                Self::default()
            }),
            Err(_) => Self::default(),
        }
    }

    /// Parses `INTERVAL_MS,DEAD_AFTER_MS` (dead-after must exceed the interval).
    pub fn parse(v: &str) -> Result<Self, LivenessError> {
        let bad = |why: String| LivenessError {
            value: v.to_owned(),
            why,
        };
        let (i, d) = v
            .split_once(',')
            .ok_or_else(|| bad("expected INTERVAL_MS,DEAD_AFTER_MS".into()))?;
        let ms = |x: &str| {
            x.trim()
                .parse::<u64>()
                .map_err(|e| bad(format!("{x:?}: {e}")))
        };
        let (i, d) = (ms(i)?, ms(d)?);
        if i == 0 || d <= i {
            return Err(bad(
                "the interval must be positive and shorter than dead-after".into(),
            ));
        }
        Ok(Self {
            interval: Duration::from_millis(i),
            dead_after: Duration::from_millis(d),
        })
    }
}

/// The other end of one of a node's links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    /// The parent (the front-end, for the master).
    Parent,
    /// A child (or an adopted descendant).
    Child(NodeId),
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Parent => f.write_str("the parent"),
            Peer::Child(c) => write!(f, "{c}"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Clock {
    heard: Instant,
    next_ping: Instant,
    watched: bool,
}

/// What [`Clocks::due`] found: links owed a keepalive, and links found dead (with why).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) pings: Vec<Peer>,
    pub(crate) dead: Vec<(Peer, crate::LinkEnd)>,
}

/// The liveness clocks of a node's links (none while liveness is off). Boxed, and only
/// made once liveness is set or a link reported: a simulated node without liveness keeps
/// 8 bytes here instead of 56.
#[derive(Debug, Default)]
pub(crate) struct Clocks(Option<Box<ClocksOf>>);

#[derive(Debug, Default)]
struct ClocksOf {
    live: Option<Liveness>,
    links: BTreeMap<Peer, Clock>,
}

impl Clocks {
    pub(crate) fn set(&mut self, live: Option<Liveness>) {
        if live.is_some() || self.0.is_some() {
            self.0.get_or_insert_default().live = live;
        }
    }

    /// A link to `peer` is up (`watched`: silence on it kills it).
    pub(crate) fn up(&mut self, now: Instant, peer: Peer, watched: bool) {
        let c = self.0.get_or_insert_default();
        let interval = c.live.map_or(Duration::ZERO, |l| l.interval);
        c.links.insert(
            peer,
            Clock {
                heard: now,
                next_ping: now + interval,
                watched,
            },
        );
    }

    pub(crate) fn heard(&mut self, now: Instant, peer: Peer) {
        if let Some(c) = self.0.as_mut().and_then(|c| c.links.get_mut(&peer)) {
            c.heard = c.heard.max(now);
        }
    }

    pub(crate) fn gone(&mut self, peer: Peer) {
        if let Some(c) = &mut self.0 {
            c.links.remove(&peer);
        }
    }

    /// Whether liveness is off and no link is known (as when new).
    pub(crate) fn is_idle(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|c| c.live.is_none() && c.links.is_empty())
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        let c = self.0.as_ref()?;
        let live = c.live?;
        c.links
            .values()
            .map(|c| {
                if c.watched {
                    c.next_ping.min(c.heard + live.dead_after)
                } else {
                    c.next_ping
                }
            })
            .min()
    }

    /// Keepalives owed and links dead at `now` (dead links are forgotten).
    pub(crate) fn due(&mut self, now: Instant) -> Due {
        let mut due = Due::default();
        let Some(c) = &mut self.0 else {
            return due;
        };
        let Some(live) = c.live else {
            return due;
        };
        for (&peer, c) in &mut c.links {
            if c.watched && now >= c.heard + live.dead_after {
                due.dead
                    .push((peer, crate::LinkEnd::Silent(live.dead_after)));
            } else if now >= c.next_ping {
                due.pings.push(peer);
                c.next_ping = now + live.interval;
            }
        }
        for (peer, _) in &due.dead {
            c.links.remove(peer);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_interval_and_dead_after_and_names_bad_values() {
        assert_eq!(
            Liveness::parse("100, 3000").unwrap(),
            Liveness {
                interval: Duration::from_millis(100),
                dead_after: Duration::from_millis(3000)
            }
        );
        for bad in ["100", "0,10", "10,10", "x,10"] {
            let e = Liveness::parse(bad).unwrap_err().to_string();
            assert!(e.contains(KEEPALIVE_ENV) && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn pings_every_interval_and_a_silent_watched_link_dies() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut c = Clocks::default();
        c.set(Some(Liveness {
            interval: ms(100),
            dead_after: ms(1000),
        }));
        c.up(t, Peer::Parent, false);
        c.up(t, Peer::Child(NodeId::Server(3)), true);
        assert_eq!(c.deadline(), Some(t + ms(100)));
        let due = c.due(t + ms(100));
        assert_eq!(due.pings, [Peer::Parent, Peer::Child(NodeId::Server(3))]);
        // Heard at 900 ms: alive until 1900 ms.
        c.heard(t + ms(900), Peer::Child(NodeId::Server(3)));
        assert!(c.due(t + ms(1899)).dead.is_empty());
        let due = c.due(t + ms(1900));
        assert_eq!(due.dead.len(), 1);
        assert!(
            matches!(due.dead[0].1, crate::LinkEnd::Silent(_)),
            "{:?}",
            due.dead
        );
        // The unwatched parent link never dies; the dead child is forgotten.
        assert!(c.due(t + ms(60_000)).dead.is_empty());
        assert_eq!(c.0.as_ref().map(|c| c.links.len()), Some(1));
    }

    #[test]
    fn nothing_is_made_until_liveness_or_a_link() {
        let mut c = Clocks::default();
        c.set(None);
        c.heard(Instant::now(), Peer::Parent);
        c.gone(Peer::Parent);
        assert!(c.0.is_none() && c.is_idle() && c.deadline().is_none());
        assert_eq!(c.due(Instant::now()), Due::default());
    }

    #[test]
    fn off_means_no_deadline() {
        let mut c = Clocks::default();
        c.up(Instant::now(), Peer::Parent, true);
        assert_eq!(c.deadline(), None);
        assert_eq!(
            c.due(Instant::now() + Duration::from_secs(3600)),
            Due::default()
        );
    }
}
