//! An operation in flight at a node: the ids still expected from each source, the op's
//! filter folding the replies, and the lost, timed-out and error groups beside it.

use std::time::Instant;

use bytes::Bytes;
use sdm_filters::{Filter, FilterError};
use sdm_proto::{IdSet, LinkEndKind, Status, SyncMode};
use sdm_topology::NodeId;

use crate::link_end::LinkEnd;

/// Where an outstanding id will come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Source {
    Local,
    Child(NodeId),
}

/// One lost, timed-out or error group waiting to go up.
#[derive(Debug)]
pub(super) struct Group {
    pub(super) status: Status,
    /// Lost ids: how the link they were behind ended.
    pub(super) link_end: Option<LinkEndKind>,
    pub(super) payload: Bytes,
    pub(super) sources: IdSet,
}

/// An operation in flight at this node.
#[derive(Debug)]
pub(super) struct PendingOp {
    pub(super) sync: SyncMode,
    /// Folds the replied payloads (the command's filter); `Err` if the filter could not be
    /// made here: then every replied id goes up as an error with this payload.
    pub(super) filter: Result<Box<dyn Filter>, Bytes>,
    /// Every id this node answers for (`destination ∩ reach`), to account the ids of a
    /// failed flush.
    pub(super) expected: IdSet,
    /// Ids already sent up, by a don't-wait op (boxed: the other ops send once, when
    /// done, and an op should be small, as a million are in flight in the simulator).
    pub(super) sent: Option<Box<IdSet>>,
    /// Ids still expected, per source (a node has few sources but many nodes have an op
    /// in flight at once: a vector is the smallest map). Sorted by source when it holds
    /// more than [`SCANNED_SOURCES`], searched in order otherwise
    /// ([`PendingOp::source_index`]).
    pub(super) outstanding: Vec<(Source, IdSet)>,
    /// How many ids `outstanding` holds in all.
    pub(super) left: u64,
    /// Lost, timed-out and error groups not yet sent up, merged by status and payload.
    pub(super) groups: Vec<Group>,
    pub(super) deadline: Option<Instant>,
}

/// Sources an op looks through in order ([`PendingOp::source_index`]): more than a
/// binomial tree gives a server below a master of 10^6 servers (its children and itself),
/// and few enough that a search by halves would not be quicker.
const SCANNED_SOURCES: usize = 24;

/// The name an op's filter time is counted under when its filter could not be made.
pub(crate) const FAILED_FILTER: &str = "(failed filter)";

impl PendingOp {
    /// A new op expecting `expected`, with room for `sources` sources, folding with
    /// `filter` (or, if it could not be made, answering every replied id with this error).
    pub(super) fn new(
        sync: SyncMode,
        filter: Result<Box<dyn Filter>, Bytes>,
        expected: IdSet,
        sources: usize,
    ) -> Box<Self> {
        Box::new(PendingOp {
            sync,
            filter,
            expected,
            sent: None,
            outstanding: Vec::with_capacity(sources),
            left: 0,
            groups: Vec::new(),
            deadline: None,
        })
    }

    /// The name of the op's filter ([`FAILED_FILTER`] if it could not be made).
    pub(super) fn filter_name(&self) -> &str {
        self.filter.as_ref().map_or(FAILED_FILTER, |f| f.name())
    }

    pub(super) fn done(&self) -> bool {
        self.left == 0
    }

    /// The ids still expected from `from`, if it is a source of this op.
    pub(super) fn outstanding_mut(&mut self, from: Source) -> Option<&mut IdSet> {
        let i = self.source_index(from)?;
        Some(&mut self.outstanding[i].1)
    }

    /// Where `from` is in `outstanding`: looked for in order among a few sources (a
    /// server's children and itself), searched for by halves among more.
    pub(super) fn source_index(&self, from: Source) -> Option<usize> {
        if self.outstanding.len() <= SCANNED_SOURCES {
            self.outstanding.iter().position(|(s, _)| *s == from)
        } else {
            self.outstanding
                .binary_search_by_key(&from, |(s, _)| *s)
                .ok()
        }
    }

    /// Makes `outstanding` searchable once all its sources are in: sorted if it holds more
    /// than [`SCANNED_SOURCES`].
    pub(super) fn sources_complete(&mut self) {
        if self.outstanding.len() > SCANNED_SOURCES {
            self.outstanding.sort_unstable_by_key(|(s, _)| *s);
        }
    }

    /// Adds `ids` with `status`/`payload`: replies are folded into the filter; other groups
    /// (and replies the filter refuses, as errors with the filter's error) merge by payload.
    pub(super) fn add(&mut self, status: Status, payload: Bytes, ids: &IdSet) {
        self.add_ended(status, None, payload, ids);
    }

    /// [`PendingOp::add`] for ids lost when a link ended `end` way: groups merge by status,
    /// link end and payload.
    pub(super) fn add_ended(
        &mut self,
        status: Status,
        end: Option<LinkEndKind>,
        payload: Bytes,
        ids: &IdSet,
    ) {
        let (status, payload) = match (status, &mut self.filter) {
            (Status::Replied, Ok(f)) => match f.fold(&payload, ids) {
                Ok(()) => return,
                Err(e) => (Status::Error, filter_failure(&e)),
            },
            (Status::Replied, Err(why)) => (Status::Error, why.clone()),
            (s, _) => (s, payload),
        };
        match self
            .groups
            .iter_mut()
            .find(|g| g.status == status && g.link_end == end && g.payload == payload)
        {
            Some(g) => g.sources.union_with(ids),
            None => self.groups.push(Group {
                status,
                link_end: end,
                payload,
                sources: ids.clone(),
            }),
        }
    }

    /// After a failed flush: the ids the filter held (answered here, not yet sent, not in
    /// a group) go up as an error group, with the filter's error. (Cold, out of line.)
    #[cold]
    #[inline(never)]
    pub(super) fn flush_failed(&mut self, e: &FilterError) {
        let mut held = match &self.sent {
            Some(sent) => &self.expected - sent,
            None => self.expected.clone(),
        };
        for (_, ids) in &self.outstanding {
            held.difference_with(ids);
        }
        for g in &self.groups {
            held.difference_with(&g.sources);
        }
        if !held.is_empty() {
            self.add(Status::Error, filter_failure(e), &held);
        }
    }

    /// Takes everything ready to go up: the filter's flushed groups (replied) and the
    /// lost, timed-out and error groups. A failed flush sends the ids the filter held up as
    /// an error.
    pub(super) fn take_groups(&mut self) -> (Vec<sdm_filters::Group>, Vec<Group>) {
        let replied = match &mut self.filter {
            Ok(f) => f.flush().unwrap_or_else(|e| {
                self.flush_failed(&e);
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        let others = std::mem::take(&mut self.groups);
        // Only don't-wait ops flush more than once (others flush when done), so only they
        // need to remember what went up for the accounting of a later failed flush.
        if self.sync == SyncMode::DontWait {
            let sent = self.sent.get_or_insert_default();
            for ids in replied.iter().map(|g| &g.sources) {
                sent.union_with(ids);
            }
            for ids in others.iter().map(|g| &g.sources) {
                sent.union_with(ids);
            }
        }
        (replied, others)
    }
}

/// The payload of the ids lost with the link to `child`.
pub(super) fn lost_reason(child: NodeId, end: &LinkEnd) -> Bytes {
    Bytes::from(format!("link to server {child} lost: {end}"))
}

/// The payload of an error group whose replies a filter could not fold: the filter's error,
/// e.g. `filter "sum": payload from [7] is not a decimal number: "x"`.
pub(super) fn filter_failure(e: &FilterError) -> Bytes {
    Bytes::from(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_op_whose_filter_could_not_be_made_is_not_timed_as_identical() {
        let op = PendingOp::new(
            SyncMode::WaitAll,
            Err(Bytes::from_static(b"no such filter")),
            IdSet::single(0),
            1,
        );
        assert_eq!(op.filter_name(), FAILED_FILTER);
    }
}
