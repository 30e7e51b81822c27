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
            me => flow::window_for(self.topo.subtree(me).len()),
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use sdm_proto::{Control, IdSet, Kind, Message, Status, SyncMode};
    use sdm_topology::{NodeId, Shape, Topology};

    use super::super::{Node, Output};
    use crate::liveness::{Liveness, Peer};
    use crate::telemetry::{NodeReport, SERVICE};

    fn to_parent(n: &mut Node) -> Message {
        match n.poll_output() {
            Some(Output::ToParent(m)) => m,
            other => panic!("expected a frame to the parent, got {other:?}"),
        }
    }

    #[test]
    fn a_server_times_its_keepalives_and_answers_the_telemetry_request_itself() {
        let (t, ms) = (Instant::now(), Duration::from_millis);
        let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(1));
        let mut n = Node::new(NodeId::Server(0), topo);
        n.set_telemetry(true);
        n.set_liveness(Some(Liveness {
            interval: ms(100),
            dead_after: ms(1000),
        }));
        n.handle_link_open(t, Peer::Parent, true);
        n.handle_timeout(t + ms(100));
        // The keepalive carries a sequence number; its echo comes back 3 ms later.
        let k = to_parent(&mut n);
        let Ok(Control::Keepalive(seq)) = Control::from_message(&k) else {
            panic!("not a keepalive: {k:?}")
        };
        assert_ne!(seq, 0);
        n.handle_from_parent(t + ms(103), Control::Echo(seq).to_message());
        // The parent's keepalive is echoed at once.
        n.handle_from_parent(t + ms(104), Control::Keepalive(9).to_message());
        let e = to_parent(&mut n);
        assert_eq!(Control::from_message(&e), Ok(Control::Echo(9)));
        // The request is answered by the node, not delivered to a handler.
        let m = Message::command(5, IdSet::all(1), SyncMode::WaitAll, "").for_service(SERVICE);
        n.handle_from_parent(t + ms(105), m);
        let r = to_parent(&mut n);
        assert!(n.poll_output().is_none());
        assert_eq!((r.kind, r.op), (Kind::Reply, 5));
        assert_eq!(
            (r.aggregate.status, r.source),
            (Some(Status::Replied), IdSet::all(1))
        );
        let report = NodeReport::decode(&r.payload).unwrap();
        assert_eq!((report.server, report.reattached), (Some(0), 0));
        let up = report.parent_link().expect("the parent link");
        let rtt = up.figures.rtt;
        assert_eq!(
            (rtt.samples, rtt.last, rtt.min, rtt.max),
            (1, ms(3), ms(3), ms(3))
        );
        // Out: the keepalive and the echo; in: the echo, the keepalive and the request.
        assert_eq!((up.figures.frames_out, up.figures.frames_in), (2, 3));
        assert_eq!(
            up.figures.bytes_out,
            (k.encoded_len() + e.encoded_len()) as u64
        );
    }
}
