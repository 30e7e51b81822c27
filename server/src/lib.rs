//! sdm-server: the sdm daemons as a library. `sdm master` and `sdm server` are thin calls
//! into [`daemon`]; a tool can run the same daemons from its own binary.
//!
//! Modules, each importing only those above it in this list:
//! - [`counters`]: the socket where a monitored program feeds its own counters.
//! - `unwind` (private): stack walks of a stopped process from DWARF call-frame
//!   information (framehop), frames named with addr2line, inline frames included.
//! - [`monitor`]: the node-local monitor over real processes (signals, /proc, ptrace,
//!   addr2line), its stored OMIS event requests and their actions.
//! - [`mpir`]: the process table of a running job, read from its launcher (MPIR, or the
//!   launcher's ranked descendants).
//! - [`services`]: the OMIS services every server offers over its monitor.
//! - [`service`]: dispatch of the requests a server answers (init, built-ins, OMIS).
//! - [`daemon`]: start-up, the init command, the node loop ([`daemon::run_master`],
//!   [`daemon::run_server`], [`daemon::ServerOptions`]).
//!
//! # Features
//!
//! - `quic` (default): the daemons' `quic://` links (the session certificate arrives in
//!   `SDM_SESSION_TLS`). Without it the daemons speak tcp only and quinn, rustls and rcgen
//!   are not compiled.

pub mod counters;
pub mod daemon;
pub mod monitor;
pub mod mpir;
pub mod service;
pub mod services;
mod unwind;

pub use daemon::{ServerOptions, run_master, run_server};
