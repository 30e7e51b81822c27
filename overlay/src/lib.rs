//! sdm-overlay: the sdm node, its tokio driver, and the transports that carry its frames.
//!
//! # Quick start
//!
//! The node is a state machine: time is an argument and frames are values, so a whole tree
//! runs in one process under [`sim::SimNet`], deterministically.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use bytes::Bytes;
//! use sdm_overlay::sim::SimNet;
//! use sdm_proto::{IdSet, Status, SyncMode};
//! use sdm_topology::Shape;
//!
//! // 64 servers, 1 ms per hop; every server answers "ok" after 1 ms.
//! let tree = Arc::from(Shape::Binomial.build(64));
//! let ms = Duration::from_millis(1);
//! let mut net = SimNet::new(tree, ms, Box::new(move |_, _| Some((ms, Bytes::from("ok")))));
//! net.command(1, IdSet::all(64), SyncMode::WaitAll, "ping");
//! net.run();
//! let groups = net.groups(1);
//! assert_eq!(groups.len(), 1); // 64 identical replies merged on the way up
//! assert_eq!(groups[0].sources, IdSet::all(64));
//! assert_eq!(groups[0].status, Status::Replied);
//! ```
//!
//! Real links run the same node through [`driver`]; a tool talks to the tree through
//! `sdm-client`, and daemons are built with `sdm-server`.
//!
//! - [`node`]: the sans-IO state machine (routing down, merging up through the op's
//!   [`filters`], timeouts, lost links).
//! - [`driver`]: runs a [`node::Node`] over real links with tokio: one task, one timer.
//! - [`setup`] and [`auth`]: connecting the tree; the session-key challenge-response;
//!   [`LinkError`] says why a link could not be set up.
//! - [`logging`]: the binaries' log set-up; refused connections logged without flooding.
//! - [`recover`]: a node process's recovery: adopting orphans, re-attaching to an ancestor.
//! - [`transport`]: `tcp://`, `quic://` and `mem://` links behind one trait, chosen by scheme.
//! - [`frontend`]: the minimal front-end client of issue 2 (send, collect merged groups).
//! - [`liveness`]: keepalives and dead-after of a node's links, as sans-IO node state.
//! - [`flow`]: credit-based flow control of output going up, so it never holds up control.
//! - [`coalesce`]: merging identical stdio lines of many ranks, each rank's order kept.
//! - [`align`]: the front-end's line-by-line alignment of output across ranks.
//! - [`sim`]: a whole tree in one process with a virtual clock (tests and `sdm-sim`).
//! - [`init`]: the init command the front-end sends first: routing table, tree shape and
//!   connection policy (built by the front-end, read by every daemon).
//!
//! # Features
//!
//! - `quic` (off unless asked for; the `sdm` command turns it on): the `quic://` transport
//!   (quinn, rustls on ring, rcgen for the per-session certificate), `transport::SessionTls`
//!   and `transport::tls_to_env`. Without it a `quic://` address parses but
//!   [`transport::transport_for`] refuses it, and none of those crates is compiled.
//! - `log-init`: `logging::init`, the tracing subscriber the binaries install
//!   (tracing-subscriber); libraries only log through `tracing` and need not pull it in.

pub mod align;
pub mod auth;
pub mod coalesce;
pub mod driver;
mod error;
pub mod flow;
pub mod frontend;
pub mod init;
mod link_end;
pub mod liveness;
pub mod logging;
pub mod node;
pub mod recover;
pub mod route;
pub mod setup;
pub mod sim;
pub mod transport;

pub use error::{LinkError, LinkErrorKind};
pub use init::InitError;
pub use link_end::LinkEnd;
pub use node::{Node, NodeStats, Output};
/// The filters crate, whose [`Registry`](sdm_filters::Registry) a [`Node`] makes its ops'
/// filters from (re-exported so daemons and tools name one version of it).
pub use sdm_filters as filters;
