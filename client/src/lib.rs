//! sdm-client: the front-end library for tool builders (a debugger, a profiler, a metric
//! collector): launch a tree of sdm daemons or attach to one, send payloads to id-sets with a
//! filter and a sync mode, receive merged reply groups and events, forward stdio, shut down.
//! No ptrace and no terminal: the daemons are `sdm-server`, the console is the `sdm` command.
//!
//! - [`session`]: [`Session`] and [`SessionOptions`]: launch/attach, send, collect,
//!   requests, events, stdin, shutdown.
//! - [`frontend`]: [`Frontend`], the minimal end of the master link (send, collect merged
//!   [`ReplyGroup`]s); [`finish`](frontend::finish) of a filter at the front-end.
//! - [`link`]: [`Handle`], the master link shared by concurrent senders (a table of
//!   pending operations filled by one reader task).
//! - [`service`]: commands tagged with their service (the stock services' names, helpers).
//! - [`iof`]: stdio handlers (the programs' output and events, merged line by line by
//!   [`align`]).
//! - [`health`]: the tree's health per subtree (full, degraded, partial, lost).
//! - [`top`]: job-wide process metrics, merged by the `stats` filter.
//! - [`counters`]: the Rust client a program uses to feed its own counters to its server.
//! - [`omis`]: the OMIS request/reply language (the `sdm-omis` crate, re-exported).
//!
//! Errors are one opaque [`Error`]: ask `is_timeout()`, `is_closed()`, `is_launch()`.
//!
//! # Quick start
//!
//! A tool in 30 lines: start 64 servers on this machine (`launcher`, `hosts` for a cluster),
//! ask every one for its process info, ask for a sum merged in the tree, shut down.
//!
//! ```no_run
//! use std::time::Duration;
//! use sdm_client::{Session, SessionOptions, service};
//! use sdm_proto::{Status, SyncMode};
//!
//! #[tokio::main]
//! async fn main() -> sdm_client::Result<()> {
//!     let opts = SessionOptions { n: 64, ..SessionOptions::default() };
//!     let session = Session::launch(&opts, |_| {}).await?;
//!     let all = session.all();
//!     // Identical replies come back as one group with the union of their sources.
//!     for g in session.request(&all, SyncMode::WaitAll, "info").await? {
//!         match g.status {
//!             Status::Replied => println!("{} {}", g.sources, String::from_utf8_lossy(&g.payload)),
//!             _ => eprintln!("{} {:?}: {}", g.sources, g.status, String::from_utf8_lossy(&g.payload)),
//!         }
//!     }
//!     // Each server answers its id; the `sum` filter adds them up on the way.
//!     let m = service::filtered(service::SDM, &all, SyncMode::Timeout(5000), "sum", "value");
//!     let sum = session.request_command(m).await?;
//!     println!("sum of ids: {}", String::from_utf8_lossy(&sum[0].payload)); // 2016
//!     session.shutdown(Duration::from_secs(5)).await;
//!     Ok(())
//! }
//! ```
//!
//! # Features
//!
//! - `quic` (default): sessions over `quic://` (`SessionOptions::transport = "quic"`), with a
//!   per-session certificate handed to the daemons. Without it only tcp is offered and quinn,
//!   rustls and rcgen are not compiled.

pub mod address;
pub mod align;
pub mod counters;
mod error;
pub mod frontend;
pub mod health;
pub mod iof;
pub mod layout;
pub mod link;
pub mod service;
pub mod session;
pub mod telemetry;
pub mod top;

pub use error::{Error, Result};
pub use frontend::{Frontend, ReplyGroup};
pub use link::{Handle, ProgramStart};
pub use sdm_omis as omis;
pub use sdm_proto::LinkEndKind;
pub use session::{LaunchReport, Progress, Session, SessionOptions};
