//! A node's lost children and adopted descendants: ids behind a dead link are answered
//! lost, and an orphan that re-attached here gets its subtree's share of later commands.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use sdm_proto::{IdSet, Status};
use sdm_topology::NodeId;

use super::Node;
use super::op::{PendingOp, Source, lost_reason};
use crate::link_end::LinkEnd;
use crate::liveness::Peer;

/// What a node keeps of its lost children and of the descendants that re-attached to it
/// ([`Node`]'s `losses`).
#[derive(Debug, Default)]
pub(super) struct Losses {
    /// Children whose link died, and how.
    pub(super) dead: BTreeMap<NodeId, LinkEnd>,
    /// Descendants below a dead child that re-attached straight to this node (their
    /// subtrees are routed to them instead of being reported lost).
    pub(super) adopted: BTreeSet<NodeId>,
}

/// The losses of a node that has none.
pub(super) static NO_LOSSES: Losses = Losses {
    dead: BTreeMap::new(),
    adopted: BTreeSet::new(),
};

impl Node {
    /// Each child's share less the subtrees of its descendants adopted here (orphaned
    /// while it was dead), which go to them, whether or not the child came back since: they
    /// are no longer linked below it. The deepest first, so an adoptee inside another's
    /// subtree keeps its share.
    pub(super) fn split_adoptees(&self, shares: Vec<(NodeId, IdSet)>) -> Vec<(NodeId, IdSet)> {
        let mut forward = Vec::with_capacity(shares.len());
        for (child, share) in shares {
            let mut rest = share;
            let servers_under = self.topo.shape().subtree(child);
            let losses = self.losses();
            let mut adoptees: Vec<(u64, NodeId, IdSet)> = losses
                .adopted
                .iter()
                .filter(|a| {
                    **a != child
                        && a.server().is_some_and(|s| servers_under.contains(s))
                        && !losses.dead.contains_key(a)
                })
                .map(|&a| {
                    let sub = self.topo.subtree(a);
                    (sub.len(), a, sub)
                })
                .collect();
            adoptees.sort_by_key(|(len, a, _)| (*len, *a));
            for (_, a, sub) in adoptees {
                let part = &rest & &sub;
                if !part.is_empty() {
                    rest = &rest - &part;
                    forward.push((a, part));
                }
            }
            forward.push((child, rest));
        }
        forward
    }

    /// The children's `shares` at a node that lost a child or adopted a descendant: the
    /// adoptees' subtrees go to them, and a dead child's share is accounted to `pending` as
    /// lost, with the reason, instead of being sent. (Out of line, not cold: a node that
    /// adopted a descendant comes here for every command from then on.)
    #[inline(never)]
    pub(super) fn route_around_losses(
        &self,
        shares: Vec<(NodeId, IdSet)>,
        pending: &mut PendingOp,
    ) -> Vec<(NodeId, IdSet)> {
        let mut forward = if self.losses().adopted.is_empty() {
            shares
        } else {
            self.split_adoptees(shares)
        };
        forward.retain(|(child, share)| match self.losses().dead.get(child) {
            _ if share.is_empty() => false,
            None => true,
            Some(end) => {
                let reason = lost_reason(*child, end);
                pending.add_ended(Status::Lost, Some(end.kind()), reason, share);
                false
            }
        });
        forward
    }

    /// The link to `child` died: everything outstanding behind it is lost, now and for
    /// later commands, until [`Node::handle_link_up`].
    pub fn handle_link_down(&mut self, now: Instant, child: NodeId, end: LinkEnd) {
        let _ = now;
        self.clocks.gone(Peer::Child(child));
        self.down.remove(&child);
        let reason = lost_reason(child, &end);
        tracing::info!(node = %self.me, "link to server {child} lost: {end}");
        for op in self.ops.ids() {
            let p = self.ops.get_mut(op).expect("listed above");
            if let Some(ids) = p.outstanding_mut(Source::Child(child)) {
                let lost = std::mem::take(ids);
                p.left -= lost.len();
                if !lost.is_empty() {
                    p.add_ended(Status::Lost, Some(end.kind()), reason.clone(), &lost);
                    self.progress(op);
                }
            }
        }
        // The first end says why: a child that never connected stays unreachable, not
        // "closed" when a later command finds no link to it.
        self.losses
            .get_or_insert_default()
            .dead
            .entry(child)
            .or_insert(end);
    }

    /// A link to `child` is (again) usable.
    pub fn handle_link_up(&mut self, child: NodeId) {
        self.forget_dead(child);
        self.down.remove(&child);
    }

    /// `descendant`, orphaned by a dead node between us, re-attached to this node: later
    /// commands reach its subtree through it. Refused (false) for a node outside our
    /// subtree, ourselves, or a direct child that is alive.
    pub fn handle_adopt(&mut self, descendant: NodeId) -> bool {
        let Some(s) = descendant.server() else {
            return false;
        };
        let direct = self.topo.shape().children(self.me).contains(&descendant);
        if descendant == self.me
            || !self.topo.shape().subtree(self.me).contains(s)
            || (direct && !self.losses().dead.contains_key(&descendant))
        {
            return false;
        }
        // Adopted first: the box is then kept, not dropped and made again.
        if !direct {
            self.losses
                .get_or_insert_default()
                .adopted
                .insert(descendant);
        }
        self.forget_dead(descendant);
        self.down.remove(&descendant);
        if let Some(t) = &mut self.telemetry {
            t.adopted += 1;
        }
        tracing::info!(node = %self.me, "adopted server {descendant}");
        true
    }

    /// Children currently marked dead, and how their links ended.
    pub fn dead_children(&self) -> impl Iterator<Item = (&NodeId, &LinkEnd)> {
        self.losses().dead.iter()
    }

    /// The node's dead children and adopted descendants (none, for most nodes).
    pub(super) fn losses(&self) -> &Losses {
        self.losses.as_deref().unwrap_or(&NO_LOSSES)
    }

    /// `c` is no longer a dead child (its box dropped once it holds nothing).
    pub(super) fn forget_dead(&mut self, c: NodeId) {
        if let Some(l) = &mut self.losses {
            l.dead.remove(&c);
            if l.dead.is_empty() && l.adopted.is_empty() {
                self.losses = None;
            }
        }
    }
}
