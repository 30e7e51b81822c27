//! The tree's health per subtree (`health` in the console): a `ping` to every server, and
//! for each subtree under the master how its ids came back.
//!
//! - `full`: every id replied.
//! - `degraded`: none lost, but some timed out (alive links, slow or hung servers: Flux's
//!   "torpid").
//! - `partial`: some ids lost (a dead link or server inside), the rest answered.
//! - `lost`: no id answered.
//!
//! For a subtree that is not full, the report goes down to the subtrees that failed, with
//! the reason the tree gave for them.

use std::fmt::Write as _;
use std::time::Duration;

use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::NodeId;

use crate::session::Session;

/// The health of one subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Every id replied.
    Full,
    /// Nothing lost, some timed out.
    Degraded,
    /// Some lost, some replied.
    Partial,
    /// Nothing replied.
    Lost,
}

impl Health {
    /// The health of `ids` given who replied and who was lost.
    pub fn of(ids: &IdSet, replied: &IdSet, lost: &IdSet) -> Self {
        if ids.is_subset(replied) {
            Health::Full
        } else if ids.is_disjoint(replied) {
            Health::Lost
        } else if ids.is_disjoint(lost) {
            Health::Degraded
        } else {
            Health::Partial
        }
    }

    /// The word for it.
    pub fn name(self) -> &'static str {
        match self {
            Health::Full => "full",
            Health::Degraded => "degraded",
            Health::Partial => "partial",
            Health::Lost => "lost",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Line {
    /// Depth below the master (1: the master's children).
    pub depth: usize,
    /// The subtree's root.
    pub root: u32,
    /// Its ids.
    pub ids: IdSet,
    /// How they came back.
    pub health: Health,
    /// How many replied.
    pub replied: u64,
    /// Why ids were lost or timed out (the tree's reasons), for unhealthy subtrees.
    pub why: Vec<String>,
}

/// Pings every server (waiting at most `timeout`) and reports each subtree's health.
pub async fn report(s: &Session, timeout: Duration) -> crate::Result<Vec<Line>> {
    let all = s.all();
    let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
    let groups = s.request(&all, SyncMode::Timeout(ms), "ping").await?;
    let (mut replied, mut lost) = (IdSet::new(), IdSet::new());
    let mut reasons: Vec<(IdSet, String)> = Vec::new();
    for g in groups {
        match g.status {
            Status::Replied => replied.union_with(&g.sources),
            Status::Lost => {
                lost.union_with(&g.sources);
                reasons.push((g.sources, String::from_utf8_lossy(&g.payload).into_owned()));
            }
            Status::TimedOut => reasons.push((g.sources, "timed out".into())),
            Status::Error => reasons.push((
                g.sources,
                format!("error: {}", String::from_utf8_lossy(&g.payload)),
            )),
        }
    }
    let tree = s.tree();
    let topo = tree.shape();
    let mut out = Vec::new();
    let mut stack: Vec<(NodeId, usize)> = topo
        .children(NodeId::Master)
        .into_iter()
        .map(|c| (c, 1))
        .collect();
    while let Some((node, depth)) = stack.pop() {
        let NodeId::Server(root) = node else { continue };
        let ids = tree.subtree(node);
        let health = Health::of(&ids, &replied, &lost);
        let why = if health == Health::Full {
            Vec::new()
        } else {
            reasons
                .iter()
                .filter(|(r, _)| !r.is_disjoint(&ids))
                .map(|(r, w)| format!("{} {w}", r & &ids))
                .collect()
        };
        out.push(Line {
            depth,
            root,
            replied: (&ids & &replied).len(),
            ids,
            health,
            why,
        });
        // Go down only where something is wrong and the cause may be further below.
        // (Children come largest position first, so the stack yields them in order.)
        if matches!(health, Health::Partial | Health::Degraded) {
            for c in topo.children(node) {
                stack.push((c, depth + 1));
            }
        }
    }
    Ok(out)
}

/// The report as indented text, one subtree a line.
pub fn text(lines: &[Line]) -> String {
    let mut t = String::new();
    for l in lines {
        let pad = "  ".repeat(l.depth - 1);
        let _ = writeln!(
            t,
            "{pad}server {} subtree {}: {} ({}/{} replied)",
            l.root,
            l.ids,
            l.health.name(),
            l.replied,
            l.ids.len()
        );
        if l.health != Health::Partial && l.health != Health::Degraded {
            for w in &l.why {
                let _ = writeln!(t, "{pad}  {w}");
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_words() {
        let ids: IdSet = "[0-3]".parse().unwrap();
        let none = IdSet::new();
        assert_eq!(Health::of(&ids, &ids, &none), Health::Full);
        assert_eq!(
            Health::of(&ids, &"[0-1]".parse().unwrap(), &none),
            Health::Degraded
        );
        let lost: IdSet = "[2-3]".parse().unwrap();
        assert_eq!(
            Health::of(&ids, &"[0-1]".parse().unwrap(), &lost),
            Health::Partial
        );
        assert_eq!(Health::of(&ids, &none, &ids), Health::Lost);
    }
}
