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
//!   [`filters`], timeouts, lost links, keepalives, flow control, merged stdio).
//! - [`driver`]: runs a [`Node`] over real links.
//! - [`transport`]: `tcp://`, `quic://` and `mem://` links behind one trait, chosen by scheme.
//! - [`setup`]: connecting the tree: the session key and its challenge-response, the init
//!   command (routing table, tree shape, connection policy), the addresses a host is reached
//!   at, and a node's recovery (adopting orphans, re-attaching to an ancestor);
//!   [`LinkError`] says why a link could not be set up.
//! - [`stdio`]: the output going up besides replies: the stdio line format and the credit a
//!   receiver hands back for output it took.
//! - [`telemetry`]: the figures a node keeps about its links (frames, bytes, keepalive
//!   round-trip time, flow-control queue), its filters' time and its re-attachments, and
//!   the record it answers the telemetry request with.
//! - [`sim`]: a whole tree in one process with a virtual clock (tests and `sdm-sim`).
//!
//! # Features
//!
//! - `quic` (off unless asked for; the `sdm` command turns it on): the `quic://` transport
//!   (quinn, rustls on ring, rcgen for the per-session certificate), `transport::SessionTls`
//!   and `transport::tls_to_env`. Without it a `quic://` address parses but
//!   [`transport::transport_for`] refuses it, and none of those crates is compiled.

mod auth;
mod coalesce;
pub mod driver;
mod error;
mod flow;
mod init;
mod link_end;
mod liveness;
mod logging;
pub mod node;
mod recover;
mod route;
pub mod setup;
pub mod sim;
pub mod stdio;
pub mod telemetry;
pub mod template;
pub mod transport;

pub use error::{LinkError, LinkErrorKind};
pub use init::InitError;
pub use link_end::LinkEnd;
pub use liveness::{LivenessError, Peer};
pub use logging::panic_text;
pub use node::{Node, NodeStats, Output};
/// The filters crate, whose [`Registry`](sdm_filters::Registry) a [`Node`] makes its ops'
/// filters from (re-exported so daemons and tools name one version of it).
pub use sdm_filters as filters;
