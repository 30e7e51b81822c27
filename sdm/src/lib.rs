//! sdm: the daemons (master and server), the front-end library for tool builders, and the
//! pieces the `sdm` command is made of.
//!
//! - [`session`]: launch or attach a tree, send payloads to id-sets, receive merged reply
//!   groups and events, shut down (the library a debugger or profiler links).
//! - [`daemon`]: `sdm master` and `sdm server`: start-up, the init command, the node loop.
//! - [`init`]: the init command that carries the routing table down the tree.
//! - [`service`]: the requests every server answers by itself (`ping`, `info`, …).
//! - [`omis`]: the OMIS request/reply language (parser, printer, service registry).
//! - [`monitor`] and [`services`]: the node-local monitor over real processes (signals,
//!   /proc, ptrace) and the OMIS services on it.
//! - [`iof`]: stdio handlers for tools (output and events of the programs, merged).
//! - [`console`]: the parallel debugger console of `sdm run`; [`commands`] (help,
//!   breakpoint numbers, tab completion) and [`words`] (events and replies in plain words).
//! - [`top`]: `sdm top`, job-wide process metrics merged by the `stats` filter.
//! - [`health`]: the tree's health per subtree (full, degraded, partial, lost).
//! - [`status`]: `sdm status`, that health asked of a running `sdm run` from elsewhere.
//! - [`counters`]: a program's own counters, fed to its server (Rust and C clients).
//! - [`manual`]: shell completions and man pages generated from the command's definitions.

pub mod commands;
pub mod console;
pub mod counters;
pub mod daemon;
pub mod health;
pub mod init;
pub mod iof;
pub mod manual;
pub mod monitor;
pub mod omis;
pub mod service;
pub mod services;
pub mod session;
pub mod status;
pub mod top;
pub mod words;

pub use session::{LaunchReport, Progress, Session, SessionOptions};
