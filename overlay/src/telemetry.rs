//! The figures a node keeps about itself, cheap enough to stay on: per link the frames and
//! bytes each way and the keepalive round-trip time; the time its ops' filters took, per
//! filter; its re-attachments. A node answers the [`SERVICE`] command with them itself
//! ([`NodeReport`], a `NodeTelemetry` protobuf), so the front-end gathers every node's
//! figures with one wave, merged up the tree like any reply (`sdm status -v`,
//! `sdm top --tree`).
//!
//! Round-trip time: each keepalive carries a sequence number, and the peer sends it back
//! at once in an echo ([`sdm_proto::Control::Echo`]); the time from sending the keepalive
//! to reading its echo is one sample (both taken at the start of the node's turn, so it
//! includes the time the two nodes' tasks took to be scheduled: the delay a command sees).
//! Only the last keepalive sent is timed; an echo of an older one is ignored.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prost::Message as _;
use sdm_proto::{Message, pb};

use crate::liveness::Peer;
use sdm_topology::NodeId;

/// The service tag of the telemetry request: every server in its destination answers with
/// its [`NodeReport`] without handing the command to its handler.
pub const SERVICE: &str = "sdm.telemetry";

/// Keepalive round-trip times of one link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rtt {
    /// Samples taken.
    pub samples: u64,
    /// The last one.
    pub last: Duration,
    /// The smallest.
    pub min: Duration,
    /// The largest.
    pub max: Duration,
    /// Smoothed as TCP does (RFC 6298: 7/8 of the old value, 1/8 of the new sample).
    pub smoothed: Duration,
}

impl Rtt {
    fn add(&mut self, d: Duration) {
        if self.samples == 0 {
            *self = Rtt {
                samples: 1,
                last: d,
                min: d,
                max: d,
                smoothed: d,
            };
            return;
        }
        self.samples += 1;
        self.last = d;
        self.min = self.min.min(d);
        self.max = self.max.max(d);
        self.smoothed = (self.smoothed * 7 + d) / 8;
    }
}

/// One link's counts, as its node sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkFigures {
    /// Frames read from the peer.
    pub frames_in: u64,
    /// Frames handed to the link for the peer.
    pub frames_out: u64,
    /// Bytes of those frames read (encoded envelopes, without the length prefix).
    pub bytes_in: u64,
    /// Bytes of those frames sent.
    pub bytes_out: u64,
    /// Keepalive round trips.
    pub rtt: Rtt,
    /// The keepalive timed now: its sequence number and when it was sent.
    ping: Option<(u64, Instant)>,
}

/// Time one filter spent at this node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilterTime {
    /// Folds and flushes timed.
    pub calls: u64,
    /// Their total time.
    pub total: Duration,
    /// The longest one.
    pub max: Duration,
}

/// What a node counts while [`crate::Node::set_telemetry`] is on.
#[derive(Debug, Default)]
pub(crate) struct Telemetry {
    pub(crate) links: BTreeMap<Peer, LinkFigures>,
    pub(crate) filters: BTreeMap<String, FilterTime>,
    /// Descendants adopted (each re-attachment to this node).
    pub(crate) adopted: u64,
    /// Parent links opened: the first, then one per re-attachment.
    pub(crate) parent_links: u64,
    /// The ancestor this node re-attached to last (`None`: its parent in the tree).
    pub(crate) parent: Option<NodeId>,
    next_seq: u64,
}

impl Telemetry {
    pub(crate) fn sent(&mut self, peer: Peer, m: &Message) {
        let l = self.links.entry(peer).or_default();
        l.frames_out += 1;
        l.bytes_out += m.encoded_len() as u64;
    }

    pub(crate) fn received(&mut self, peer: Peer, m: &Message) {
        let l = self.links.entry(peer).or_default();
        l.frames_in += 1;
        l.bytes_in += m.encoded_len() as u64;
    }

    /// A keepalive goes to `peer` at `now`: its sequence number (timed until its echo).
    pub(crate) fn ping(&mut self, peer: Peer, now: Instant) -> u64 {
        self.next_seq += 1;
        let seq = self.next_seq;
        self.links.entry(peer).or_default().ping = Some((seq, now));
        seq
    }

    /// `peer` echoed keepalive `seq` at `now`.
    pub(crate) fn echo(&mut self, peer: Peer, seq: u64, now: Instant) {
        if let Some(l) = self.links.get_mut(&peer)
            && let Some((s, sent)) = l.ping
            && s == seq
        {
            l.ping = None;
            l.rtt.add(now.saturating_duration_since(sent));
        }
    }

    /// Filter `name` took `d` once.
    pub(crate) fn filter_time(&mut self, name: &str, d: Duration) {
        let f = match self.filters.get_mut(name) {
            Some(f) => f,
            None => self.filters.entry(name.to_owned()).or_default(),
        };
        f.calls += 1;
        f.total += d;
        f.max = f.max.max(d);
    }

    /// A link to `peer` is up: a new parent link after the first is a re-attachment. A
    /// child's link and a re-attached parent link start their counts afresh (a re-attached
    /// link's figures are its own, not the dead link's).
    pub(crate) fn link_open(&mut self, peer: Peer) {
        if peer == Peer::Parent {
            self.parent_links += 1;
            if self.parent_links == 1 {
                return;
            }
        }
        self.links.insert(peer, LinkFigures::default());
    }
}

/// A link's flow-control state at the moment of the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Queue {
    /// Bytes of output waiting for credit.
    pub bytes: u64,
    /// Frames of output waiting for credit.
    pub frames: u64,
    /// Credit in use (sent and not granted back, or taken in and not granted back yet).
    pub credit_in_use: u64,
}

/// One link in a [`NodeReport`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkReport {
    /// The peer.
    pub peer: Option<u32>,
    /// Its counts.
    pub figures: LinkFigures,
    /// Its flow-control state.
    pub queue: Queue,
}

/// A node's answer to the [`SERVICE`] command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeReport {
    /// The server (`None`: the master).
    pub server: Option<u32>,
    /// Its links: `peer` `None` is the parent link, else the child server.
    pub links: Vec<LinkReport>,
    /// Time per filter, by name (`(failed filter)`: ops whose filter could not be made).
    pub filters: Vec<(String, FilterTime)>,
    /// Descendants adopted.
    pub adopted: u64,
    /// Re-attachments to a new parent.
    pub reattached: u64,
    /// Adopted descendants it holds now.
    pub adopted_now: Vec<u32>,
    /// The ancestor it re-attached to last (`None`: it never did; its parent is the
    /// tree's).
    pub parent: Option<NodeId>,
}

/// A [`NodeReport`] that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("bad telemetry record: {0}")]
pub struct ReportError(#[from] prost::DecodeError);

/// A duration in whole nanoseconds, saturating (as records and JSON carry it).
pub fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl NodeReport {
    /// The record as sent up (a `NodeTelemetry` protobuf).
    pub fn encode(&self) -> Vec<u8> {
        let links = self
            .links
            .iter()
            .map(|l| {
                let (f, r) = (&l.figures, &l.figures.rtt);
                pb::LinkTelemetry {
                    parent: l.peer.is_none(),
                    child: l.peer.unwrap_or(0),
                    frames_in: f.frames_in,
                    frames_out: f.frames_out,
                    bytes_in: f.bytes_in,
                    bytes_out: f.bytes_out,
                    rtt_samples: r.samples,
                    rtt_last_ns: ns(r.last),
                    rtt_min_ns: ns(r.min),
                    rtt_max_ns: ns(r.max),
                    rtt_smoothed_ns: ns(r.smoothed),
                    queued_bytes: l.queue.bytes,
                    queued_frames: l.queue.frames,
                    credit_in_use: l.queue.credit_in_use,
                }
            })
            .collect();
        let filters = self
            .filters
            .iter()
            .map(|(name, t)| pb::FilterTime {
                filter: name.clone(),
                calls: t.calls,
                total_ns: ns(t.total),
                max_ns: ns(t.max),
            })
            .collect();
        pb::NodeTelemetry {
            server: self.server,
            links,
            filters,
            adopted: self.adopted,
            reattached: self.reattached,
            adopted_now: self.adopted_now.clone(),
            parent_server: self.parent.and_then(NodeId::server),
            parent_master: self.parent == Some(NodeId::Master),
        }
        .encode_to_vec()
    }

    /// A record as [`NodeReport::encode`] made it.
    pub fn decode(bytes: &[u8]) -> Result<Self, ReportError> {
        let t = pb::NodeTelemetry::decode(bytes)?;
        let d = Duration::from_nanos;
        let links = t
            .links
            .into_iter()
            .map(|l| LinkReport {
                peer: (!l.parent).then_some(l.child),
                figures: LinkFigures {
                    frames_in: l.frames_in,
                    frames_out: l.frames_out,
                    bytes_in: l.bytes_in,
                    bytes_out: l.bytes_out,
                    rtt: Rtt {
                        samples: l.rtt_samples,
                        last: d(l.rtt_last_ns),
                        min: d(l.rtt_min_ns),
                        max: d(l.rtt_max_ns),
                        smoothed: d(l.rtt_smoothed_ns),
                    },
                    ping: None,
                },
                queue: Queue {
                    bytes: l.queued_bytes,
                    frames: l.queued_frames,
                    credit_in_use: l.credit_in_use,
                },
            })
            .collect();
        let filters = t
            .filters
            .into_iter()
            .map(|f| {
                let time = FilterTime {
                    calls: f.calls,
                    total: d(f.total_ns),
                    max: d(f.max_ns),
                };
                (f.filter, time)
            })
            .collect();
        Ok(NodeReport {
            server: t.server,
            links,
            filters,
            adopted: t.adopted,
            reattached: t.reattached,
            adopted_now: t.adopted_now,
            parent: match (t.parent_master, t.parent_server) {
                (true, _) => Some(NodeId::Master),
                (false, s) => s.map(NodeId::Server),
            },
        })
    }

    /// The link to the parent, if the record has it.
    pub fn parent_link(&self) -> Option<&LinkReport> {
        self.links.iter().find(|l| l.peer.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdm_proto::{Control, IdSet, SyncMode};
    use sdm_topology::NodeId;

    #[test]
    fn an_echo_of_the_last_keepalive_is_a_sample_and_others_are_not() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut tm = Telemetry::default();
        let p = Peer::Child(NodeId::Server(3));
        let old = tm.ping(p, t);
        let seq = tm.ping(p, t + ms(10));
        tm.echo(p, old, t + ms(11));
        assert_eq!(tm.links[&p].rtt.samples, 0, "an older keepalive's echo");
        tm.echo(p, seq, t + ms(14));
        tm.echo(p, seq, t + ms(20));
        let rtt = tm.links[&p].rtt;
        assert_eq!(
            (rtt.samples, rtt.last, rtt.min, rtt.max),
            (1, ms(4), ms(4), ms(4))
        );
        let seq = tm.ping(p, t + ms(100));
        tm.echo(p, seq, t + ms(112));
        let rtt = tm.links[&p].rtt;
        assert_eq!((rtt.samples, rtt.min, rtt.max), (2, ms(4), ms(12)));
        assert_eq!(rtt.smoothed, ms(5));
    }

    #[test]
    fn a_new_parent_link_starts_its_figures_afresh_and_counts_as_a_reattachment() {
        let t = Instant::now();
        let mut tm = Telemetry::default();
        let m = Message::command(1, IdSet::all(4), SyncMode::WaitAll, "ping");
        tm.link_open(Peer::Parent);
        tm.sent(Peer::Parent, &m);
        tm.received(Peer::Parent, &m);
        let seq = tm.ping(Peer::Parent, t);
        tm.echo(Peer::Parent, seq, t + Duration::from_millis(5));
        tm.link_open(Peer::Parent);
        assert_eq!(tm.links[&Peer::Parent], LinkFigures::default());
        assert_eq!(tm.parent_links, 2);
    }

    #[test]
    fn frames_count_their_encoded_bytes_and_a_record_round_trips() {
        let mut tm = Telemetry::default();
        let m = Message::command(1, IdSet::all(4), SyncMode::WaitAll, "ping");
        let k = Control::Keepalive(9).to_message();
        tm.sent(Peer::Parent, &m);
        tm.received(Peer::Parent, &k);
        tm.filter_time("identical", Duration::from_micros(3));
        tm.filter_time("identical", Duration::from_micros(5));
        let l = &tm.links[&Peer::Parent];
        assert_eq!((l.frames_out, l.frames_in), (1, 1));
        assert_eq!(l.bytes_out, m.encode().len() as u64);
        assert_eq!(l.bytes_in, k.encode().len() as u64);
        let f = tm.filters["identical"];
        assert_eq!(
            (f.calls, f.total, f.max),
            (2, Duration::from_micros(8), Duration::from_micros(5))
        );
        let r = NodeReport {
            server: Some(5),
            links: vec![LinkReport {
                peer: None,
                figures: l.clone(),
                queue: Queue {
                    bytes: 10,
                    frames: 1,
                    credit_in_use: 42,
                },
            }],
            filters: vec![("identical".into(), f)],
            adopted: 2,
            reattached: 1,
            adopted_now: vec![7, 8],
            parent: Some(NodeId::Master),
        };
        assert_eq!(NodeReport::decode(&r.encode()).unwrap(), r);
        assert!(NodeReport::decode(b"\xff\xff").is_err());
    }
}
