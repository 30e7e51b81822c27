//! sdm-filters: the [`Filter`] trait, the built-in filters, typed payloads and C-ABI filter
//! plugins. No I/O: the overlay node feeds replies in and sends what comes out upward.
//!
//! # Quick start
//!
//! ```
//! use sdm_filters::Registry;
//! use sdm_proto::IdSet;
//!
//! // What a node does with an op's replies: fold each group, flush upward; at the
//! // front-end, finish.
//! let registry = Registry::new();
//! let mut sum = registry.create("sum").unwrap();
//! sum.fold(b"40", &"[0-3]".parse::<IdSet>().unwrap()).unwrap();
//! sum.fold(b"2", &IdSet::single(4)).unwrap();
//! let out = sum.finish().unwrap();
//! assert_eq!(&out[0].payload[..], b"42");
//! assert_eq!(out[0].sources.to_string(), "[0-4]");
//! ```
//!
//! A filter of your own implements [`Filter`] and is added with [`Registry::register`]
//! (in Rust), or is a shared library implementing `include/sdm_filter.h` (see [`plugin`]),
//! which `sdm --filter-plugin PATH` hands to every daemon.
//!
//! # How a node uses a filter
//!
//! For each operation (or each wave of a stream) a node creates one filter from the
//! [`Registry`] by the name the command carries (`sum`, `histogram:0:100:10`, …). Every
//! *replied* reply group is folded in with [`Filter::fold`]`(payload, sources)`; when the node
//! sends upward (all expected ids are in, or at once under `SyncMode::DontWait`, or at the
//! timeout) it calls [`Filter::flush`] and sends each returned [`Group`] as one reply.
//! Lost and timed-out ids never enter a filter. The front-end folds what reaches it into a
//! fresh filter and calls [`Filter::finish`] once, for the final form (a mean from a sum and a
//! count, a rendered stack tree). A flush may come at any time, with any subset of the inputs:
//! folding flushed groups again gives the same result as folding the inputs directly.
//!
//! # Shape independence
//!
//! Every built-in filter gives bit-identical output for the same inputs whatever the tree
//! (binomial, k-ary, k-nomial, flat) and whatever the partial waves: arithmetic is exact
//! ([`Decimal`]: 128-bit fixed point, integers stay integers), and output order is canonical
//! (sorted keys; groups ordered by their smallest id). `tests/shape.rs` checks this.
//!
//! # Payload encodings (version 1)
//!
//! * **Scalar**: decimal text, `42`, `-0.25`, `1.5e3` (see [`decimal`]). `sum`, `min`, `max`
//!   read and write it; `mean` and `histogram` read it at the leaves.
//! * **Key/value map** (leaf input of `stats` and `counters`): a JSON object of numbers or
//!   decimal strings, `{"cpu": 12.5, "rss": "1024"}`, or text lines `key value` / `key=value`.
//! * **Record** (what a filter sends upward when a scalar cannot carry its state): a JSON
//!   object that begins with the bytes `{"sdm":1,"type":"<filter>"`, followed by the filter's
//!   fields; decimals are strings, id-sets are in their text form (`"[0-3,7]"`). A record
//!   with another `sdm` version is refused with [`ErrorKind::Version`]. The key `sdm` is
//!   therefore reserved in leaf maps. See [`record`] and each filter's docs.
//!
//! # Built-in filters
//!
//! | name | leaf input | flushes | finish |
//! | --- | --- | --- | --- |
//! | `identical` (also `""`) | any bytes | one group per distinct payload | same |
//! | `sum` | scalar | scalar (each group's value counts once) | same |
//! | `min`, `max` | scalar | scalar | same |
//! | `count` | any | number of ids, as a scalar | same |
//! | `mean` | scalar (counts once per id) | record `mean` (sum, count) | scalar |
//! | `histogram:LO:HI:N` | scalar | record `histogram` | same |
//! | `concat` | any bytes | record `concat` (parts by smallest id) | the bytes, in id order |
//! | `stats` | key/value map | record `stats` (count, sum, min, max, ids at min and max) | plus `mean` |
//! | `stacktrace` | lines `main;solve;MPI_Wait` | record `stacktrace` (prefix tree) | indented text |
//! | `lines` | text | record `lines` (line i of each rank merged) | `[ids] line` text |
//! | `counters` | key/value map (a per-rank row) | record `counters` (total, identical rows) | same |
//! | `statements` | seed-004 statement records | record `statements` | same |
//!
//! # Plugins
//!
//! [`Registry::load_plugin`] loads a shared library that implements the C ABI of
//! `include/sdm_filter.h` (see [`plugin`]). In a running tree the front-end names the
//! plugins (`sdm_client::SessionOptions::filter_plugins`, `sdm --filter-plugin`): it loads
//! each one itself (a plugin that does not load fails the launch), and the init command
//! carries their absolute
//! paths (`InitSpec::filter_plugins`) to every daemon, which loads them into the registry
//! its node makes each op's filter from. A plugin that fails (init, fold or flush) fails the
//! ids concerned, which reach the front-end as a lost group naming the error.

pub mod builtin;
pub mod decimal;
mod error;
pub mod plugin;
pub mod record;
mod registry;

use bytes::Bytes;
pub use decimal::Decimal;
pub use error::{ErrorKind, FilterError};
pub use registry::{Factory, Registry};
pub use sdm_proto::IdSet;

/// One payload and the ids it speaks for: what goes into and comes out of a filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The payload bytes.
    pub payload: Bytes,
    /// The ids whose replies it stands for.
    pub sources: IdSet,
}

impl Group {
    /// A group of `payload` from `sources`.
    pub fn new(payload: impl Into<Bytes>, sources: IdSet) -> Self {
        Self {
            payload: payload.into(),
            sources,
        }
    }
}

/// Folds the replies of one operation (or one stream wave) at one node into fewer groups.
///
/// Contract, for every implementation:
/// * [`fold`](Filter::fold) either takes the whole input or returns an error and leaves the
///   state as it was; it never panics on bad input.
/// * [`flush`](Filter::flush) returns what was folded since the last flush and resets the
///   state; the groups' sources are disjoint and their union is the union of the folded
///   sources (every id stays accounted exactly once). Nothing folded: no groups.
/// * Folding flushed groups into a fresh filter and flushing again gives the same result as
///   folding the original inputs (so any tree and any partial waves give the same output).
pub trait Filter: Send {
    /// The name the filter was created under, with its parameters (`histogram:0:10:5`).
    fn name(&self) -> &str;

    /// Folds one payload, replied by `sources`, into the state.
    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError>;

    /// Takes the groups to send upward, ordered canonically, and resets the state.
    fn flush(&mut self) -> Result<Vec<Group>, FilterError>;

    /// At the front-end, once: like [`flush`](Filter::flush), in final form (a mean instead
    /// of a sum and a count, a rendered tree). The default is `flush`.
    fn finish(&mut self) -> Result<Vec<Group>, FilterError> {
        self.flush()
    }
}

impl std::fmt::Debug for dyn Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("name", &self.name())
            .finish()
    }
}

/// Orders groups canonically: by smallest id, then by payload.
pub(crate) fn sort_groups(groups: &mut [Group]) {
    groups.sort_by(|a, b| (a.sources.first(), &a.payload).cmp(&(b.sources.first(), &b.payload)));
}

/// Folds `inputs` into `filter` and flushes: a convenience for tests and the front-end.
pub fn reduce<'a>(
    filter: &mut dyn Filter,
    inputs: impl IntoIterator<Item = (&'a [u8], &'a IdSet)>,
) -> Result<Vec<Group>, FilterError> {
    for (p, ids) in inputs {
        filter.fold(p, ids)?;
    }
    filter.flush()
}
