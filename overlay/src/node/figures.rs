//! The node's own figures ([`crate::telemetry`]): turning them on, and the record it
//! answers the telemetry request with (its links' counts with their flow-control state).

use super::{Node, Output};
use crate::flow::{self, WINDOW};
use crate::liveness::Peer;
use crate::telemetry::{LinkReport, NodeReport, Queue, Telemetry};
use sdm_proto::Message;
use sdm_topology::NodeId;

impl Node {
    /// Counts frames, bytes, keepalive round trips, filter time and re-attachments
    /// ([`crate::telemetry`]) from now on (`false`, the default: not; the tokio driver
    /// turns it on).
    pub fn set_telemetry(&mut self, on: bool) {
        if on != self.telemetry.is_some() {
            self.telemetry = on.then(Box::default);
        }
    }

    /// This node re-attached to `ancestor` (its figures name it as the parent from now on).
    pub fn set_parent(&mut self, ancestor: NodeId) {
        if let Some(t) = &mut self.telemetry {
            t.parent = Some(ancestor);
        }
    }

    /// Queues `m` for `peer`.
    pub(super) fn send_to(&mut self, peer: Peer, m: Message) {
        self.out.push_back(match peer {
            Peer::Parent => Output::ToParent(m),
            Peer::Child(c) => Output::ToChild(c, m),
        });
    }

    /// This node's figures now (empty counts while telemetry is off): every link it
    /// counted, the parent link's queue of output waiting for credit and the credit in use
    /// on it, each child link's credit in use (taken in, not yet granted back).
    pub fn telemetry_report(&self) -> NodeReport {
        let empty = Telemetry::default();
        let t = self.telemetry.as_deref().unwrap_or(&empty);
        // The window the parent gave this node: one per server below it, as the parent
        // weighs its link (`RecvWindow::weighted`); the master's is one window.
        let window = match self.me {
            NodeId::Master => WINDOW,
            me => WINDOW * flow::weight(self.topo.subtree(me).len()) as i64,
        };
        let up = self.up.as_ref().map_or(Queue::default(), |u| Queue {
            bytes: u.queued().max(0) as u64,
            frames: u.queued_frames() as u64,
            credit_in_use: (window - u.credit()).max(0) as u64,
        });
        let mut links: Vec<LinkReport> = t
            .links
            .iter()
            .map(|(peer, figures)| {
                let queue = match peer {
                    Peer::Parent => up,
                    Peer::Child(c) => Queue {
                        credit_in_use: self
                            .down
                            .get(c)
                            .map_or(0, |w| w.outstanding().max(0) as u64),
                        ..Queue::default()
                    },
                };
                LinkReport {
                    peer: match peer {
                        Peer::Parent => None,
                        Peer::Child(c) => c.server(),
                    },
                    figures: figures.clone(),
                    queue,
                }
            })
            .collect();
        if t.links.is_empty() {
            links.push(LinkReport {
                peer: None,
                queue: up,
                ..LinkReport::default()
            });
        }
        NodeReport {
            server: self.me.server(),
            links,
            filters: t.filters.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            adopted: t.adopted,
            reattached: t.parent_links.saturating_sub(1),
            parent: t.parent,
            adopted_now: self
                .losses()
                .adopted
                .iter()
                .filter_map(|n| n.server())
                .collect(),
        }
    }
}
