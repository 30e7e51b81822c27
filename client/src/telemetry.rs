//! The tree's own figures per link (`sdm status -v`, the console's `health -v`,
//! `sdm top --tree`): one wave of the telemetry request ([`SERVICE`]), which every server
//! answers itself with its [`NodeReport`] (its links' frames, bytes, keepalive round-trip
//! times and flow-control state, its filters' time, its re-attachments), merged up the
//! tree like any reply.
//!
//! Each server reports the link to its parent, so the links of the tree are listed once
//! each, by the child's end: the current parent (the ancestor the server re-attached to
//! after its parent died, as it or its adopter says, else the tree's parent) → the server.
//! A server that did not answer is listed with why ([`NoAnswer`]: lost, timed out...),
//! never left out.

use std::collections::BTreeMap;
use std::time::Duration;

use sdm_overlay::telemetry::{LinkReport, NodeReport};
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::{NodeId, Tree};

pub use sdm_overlay::telemetry::SERVICE;

use crate::session::Session;

/// One link of the tree, parent → child, with the child's figures.
#[derive(Debug, Clone)]
pub struct Link {
    /// The parent: `None` is the master.
    pub parent: Option<u32>,
    /// The child server.
    pub child: u32,
    /// The child's host, if known.
    pub host: Option<String>,
    /// The child's record, or why there is none.
    pub answer: Result<NodeReport, NoAnswer>,
}

impl Link {
    /// The child's parent link figures, if it answered.
    pub fn figures(&self) -> Option<&LinkReport> {
        self.answer.as_ref().ok().and_then(NodeReport::parent_link)
    }

    /// The row's state: `answered`, else [`NoAnswer::state`].
    pub fn state(&self) -> &'static str {
        self.answer
            .as_ref()
            .err()
            .map_or("answered", NoAnswer::state)
    }
}

/// Why a server gave no figures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoAnswer {
    /// A link between it and the front-end died; which end said so.
    #[error("lost: {link_end}")]
    Lost {
        /// The tree's account of the lost link.
        link_end: String,
    },
    /// It did not answer within the wave's timeout.
    #[error("timed out")]
    TimedOut,
    /// It answered with an error.
    #[error("error: {0}")]
    Refused(String),
    /// Its record did not decode, or names another server (or none).
    #[error("bad record: {0}")]
    BadRecord(String),
    /// It serves no rank, so no command reaches it.
    #[error("no answer (it serves no rank)")]
    NoRank,
}

impl NoAnswer {
    /// The state's name in JSON: `lost`, `timed_out`, `refused`, `bad_record`, `no_rank`.
    pub fn state(&self) -> &'static str {
        match self {
            NoAnswer::Lost { .. } => "lost",
            NoAnswer::TimedOut => "timed_out",
            NoAnswer::Refused(_) => "refused",
            NoAnswer::BadRecord(_) => "bad_record",
            NoAnswer::NoRank => "no_rank",
        }
    }
}

/// One wave of the telemetry request.
#[derive(Debug, Clone)]
pub struct Wave {
    /// One link per server, in server order.
    pub links: Vec<Link>,
    /// The bytes of the records that reached the front-end (the wave's own cost).
    pub bytes: u64,
    /// The wave's round trip.
    pub elapsed: Duration,
}

/// Asks every server of `s` for its figures (waiting at most `timeout`).
pub async fn gather(s: &Session, timeout: Duration) -> crate::Result<Wave> {
    let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
    let all = s.all();
    let m = crate::service::command(SERVICE, &all, SyncMode::Timeout(ms), "");
    let start = std::time::Instant::now();
    let groups = s.request_command(m).await?;
    let elapsed = start.elapsed();
    let bytes = groups.iter().map(|g| g.payload.len() as u64).sum();
    let tree = s.tree();
    let mut reports = BTreeMap::new();
    let mut missing: Vec<(IdSet, NoAnswer)> = Vec::new();
    for g in groups {
        let text = || String::from_utf8_lossy(&g.payload).into_owned();
        let why = match g.status {
            Status::Replied => match record(&tree, &g.sources, &g.payload) {
                Ok((server, r)) => {
                    reports.insert(server, r);
                    continue;
                }
                Err(why) => why,
            },
            Status::TimedOut => NoAnswer::TimedOut,
            Status::Lost => NoAnswer::Lost { link_end: text() },
            Status::Error => NoAnswer::Refused(text()),
        };
        missing.push((g.sources, why));
    }
    let hosts: BTreeMap<u32, String> = s
        .report()
        .processes
        .iter()
        .map(|(server, host, _)| (*server, host.clone()))
        .collect();
    Ok(Wave {
        links: links(s, reports, &missing, &hosts),
        bytes,
        elapsed,
    })
}

/// The record of a reply group and its server: the tree's server of the group's ranks.
/// A record that does not decode, that names another server (or none), or a group whose
/// ranks span several servers is a bad record, listed on the row of its first rank's
/// server.
fn record(tree: &Tree, sources: &IdSet, payload: &[u8]) -> Result<(u32, NodeReport), NoAnswer> {
    let bad = |why: String| NoAnswer::BadRecord(why);
    let server = sources
        .first()
        .and_then(|rank| tree.server_of(rank))
        .ok_or_else(|| bad("a reply from no server's ranks".to_owned()))?;
    if !sources.is_subset(&tree.local(NodeId::Server(server))) {
        return Err(bad(format!(
            "ranks {sources} are not all server {server}'s"
        )));
    }
    let r = NodeReport::decode(payload).map_err(|e| bad(e.to_string()))?;
    match r.server {
        Some(s) if s == server => Ok((server, r)),
        Some(s) => Err(bad(format!(
            "server {server}'s ranks sent server {s}'s record"
        ))),
        None => Err(bad(format!(
            "server {server}'s ranks sent a record naming no server"
        ))),
    }
}

/// The links of the tree of `s` from the servers' `reports` (by server), the ranks that
/// gave none and why, and the servers' hosts.
fn links(
    s: &Session,
    mut reports: BTreeMap<u32, NodeReport>,
    missing: &[(IdSet, NoAnswer)],
    hosts: &BTreeMap<u32, String>,
) -> Vec<Link> {
    let tree = s.tree();
    // Adopters name the orphans they hold now: those are their children.
    let adopter: BTreeMap<u32, u32> = reports
        .iter()
        .flat_map(|(&a, r)| r.adopted_now.iter().map(move |&o| (o, a)))
        .collect();
    (0..tree.servers())
        .map(|server| {
            let node = NodeId::Server(server);
            // The ancestor it says it re-attached to, else the one that says it adopted
            // it, else its parent in the tree.
            let parent = match (
                reports.get(&server).and_then(|r| r.parent),
                adopter.get(&server),
            ) {
                (Some(p), _) => p.server(),
                (None, Some(&a)) => Some(a),
                (None, None) => tree.shape().parent(node).and_then(|p| p.server()),
            };
            let answer = reports.remove(&server).ok_or_else(|| {
                let ranks = tree.local(node);
                missing
                    .iter()
                    .find(|(ids, _)| !ids.is_disjoint(&ranks))
                    .map_or(NoAnswer::NoRank, |(_, why)| why.clone())
            });
            Link {
                parent,
                child: server,
                host: hosts.get(&server).cloned(),
                answer,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdm_topology::{Placement, Shape};
    use std::sync::Arc;

    #[test]
    fn a_record_belongs_to_its_ranks_server_and_any_other_is_a_bad_record() {
        // Four servers, two ranks each: server 1 serves ranks 2 and 3.
        let tree = Tree::new(Arc::from(Shape::Flat.build(4)), Placement::blocks(2, 8));
        let report = |server| {
            NodeReport {
                server,
                ..NodeReport::default()
            }
            .encode()
        };
        let ranks = IdSet::from_iter([2, 3]);
        let (server, r) = record(&tree, &ranks, &report(Some(1))).unwrap();
        assert_eq!((server, r.server), (1, Some(1)));
        for bad in [report(Some(2)), report(None), b"\xff\xff".to_vec()] {
            let why = record(&tree, &ranks, &bad).unwrap_err();
            assert_eq!(why.state(), "bad_record", "{why}");
        }
        // A group spanning two servers' ranks is no one server's record.
        let two = IdSet::from_iter([3, 4]);
        assert_eq!(
            record(&tree, &two, &report(Some(1))).unwrap_err().state(),
            "bad_record"
        );
    }
}
