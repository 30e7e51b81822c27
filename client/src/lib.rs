//! sdm-client: the front-end library for tool builders (a debugger, a profiler, a metric
//! collector): launch a tree of sdm daemons or attach to one, send payloads to id-sets with a
//! filter and a sync mode, receive merged reply groups and events, forward stdio, shut down.
//! No ptrace and no terminal: the daemons are `sdm-server`, the console is the `sdm` command.
//!
//! - [`session`]: [`Session`] and [`SessionOptions`]: launch/attach, send, collect,
//!   requests, events, stdin, shutdown.
//! - [`service`]: commands tagged with their service (the stock services' names, helpers).
//! - [`iof`]: stdio handlers (the programs' output and events, merged line by line).
//! - [`health`]: the tree's health per subtree (full, degraded, partial, lost).
//! - [`top`]: job-wide process metrics, merged by the `stats` filter.
//! - [`counters`]: the Rust client a program uses to feed its own counters to its server.
//! - [`omis`]: the OMIS request/reply language (the `sdm-omis` crate, re-exported).
//!
//! # Features
//!
//! - `quic` (default): sessions over `quic://` (`SessionOptions::transport = "quic"`), with a
//!   per-session certificate handed to the daemons. Without it only tcp is offered and quinn,
//!   rustls and rcgen are not compiled.

pub mod address;
pub mod counters;
pub mod health;
pub mod iof;
pub mod service;
pub mod session;
pub mod top;

pub use sdm_omis as omis;
pub use session::{LaunchReport, Progress, Session, SessionOptions};
