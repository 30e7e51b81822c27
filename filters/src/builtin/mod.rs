//! The built-in filters (see the table in the crate docs) and the typed records some of them
//! exchange. Each module holds one filter family and documents its record.

mod concat;
mod counters;
mod histogram;
mod identical;
mod lines;
mod scalar;
mod stacktrace;
mod statements;
mod stats;

pub use concat::{Concat, ConcatPart};
pub use counters::{Counters, CountersRecord, MtfRankStats, RankRow, Row};
pub use histogram::{Histogram, HistogramRecord, MAX_BUCKETS};
pub use identical::Identical;
pub use lines::{LineGroup, Lines};
pub use scalar::{Count, Mean, MeanRecord, MinMax, Sum};
pub use stacktrace::{StackClass, StackNode, StackTrace, StackTree};
pub use statements::{EventKind, StatementRecord, StatementTotal, Statements};
pub use stats::{KeyStats, Stats};

use bytes::Bytes;
use sdm_proto::IdSet;

use crate::error::{ErrorKind, FilterError};
use crate::registry::Registry;
use crate::{Filter, Group};

/// The ids folded into a one-group filter since its last flush, and whether anything was
/// folded at all (a fold from an empty id-set still counts). Shared by the filters whose
/// flush is a single group speaking for every folded id.
#[derive(Debug, Default)]
pub(crate) struct FoldedIds {
    ids: IdSet,
    any: bool,
}

impl FoldedIds {
    /// Notes a successful fold of a payload from `sources`.
    pub(crate) fn add(&mut self, sources: &IdSet) {
        self.ids.union_with(sources);
        self.any = true;
    }

    /// The ids, or `None` if nothing was folded.
    pub(crate) fn take(self) -> Option<IdSet> {
        self.any.then_some(self.ids)
    }

    /// A flush: no groups if nothing was folded, else one group of `payload()` from every
    /// folded id.
    pub(crate) fn into_groups<B: Into<Bytes>>(self, payload: impl FnOnce() -> B) -> Vec<Group> {
        let mut out = Vec::new();
        self.push_group(&mut out, payload);
        out
    }

    /// [`FoldedIds::into_groups`], appended to `out`.
    pub(crate) fn push_group<B: Into<Bytes>>(
        self,
        out: &mut Vec<Group>,
        payload: impl FnOnce() -> B,
    ) {
        if let Some(ids) = self.take() {
            out.push(Group::new(payload(), ids));
        }
    }
}

/// Refuses parameters for filters that take none.
fn no_params(name: &str, params: &str) -> Result<(), FilterError> {
    if params.is_empty() {
        Ok(())
    } else {
        Err(FilterError::new(
            format!("{name}:{params}"),
            ErrorKind::BadParameters,
            format!("filter {name:?} takes no parameters"),
        ))
    }
}

fn simple<F: Filter + 'static>(r: &mut Registry, name: &'static str, make: fn() -> F) {
    r.register(name, move |p| {
        no_params(name, p)?;
        Ok(Box::new(make()) as Box<dyn Filter>)
    })
    .expect("built-in names are distinct");
}

/// Registers every built-in filter in `r`.
pub(crate) fn register_all(r: &mut Registry) {
    simple(r, "identical", Identical::new);
    simple(r, "sum", Sum::new);
    simple(r, "min", MinMax::min);
    simple(r, "max", MinMax::max);
    simple(r, "count", Count::new);
    simple(r, "mean", Mean::new);
    simple(r, "concat", Concat::new);
    simple(r, "stats", Stats::new);
    simple(r, "stacktrace", StackTrace::new);
    simple(r, "lines", Lines::new);
    simple(r, "counters", Counters::new);
    simple(r, "statements", Statements::new);
    r.register("histogram", |p| {
        Ok(Box::new(Histogram::from_params(p)?) as Box<dyn Filter>)
    })
    .expect("built-in names are distinct");
}
