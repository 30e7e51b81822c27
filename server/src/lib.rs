//! sdm-server: the sdm daemons as a library. `sdm master` and `sdm server` are thin calls
//! into [`daemon`] and [`Server`]; a tool runs the same daemons from its own binary, with
//! request types of its own.
//!
//! Modules, each importing only those above it in this list:
//! - [`error`]: [`Error`], with [`Error::kind`] naming what kind of failure it is.
//! - [`logging`]: the tracing subscriber every sdm binary installs.
//! - [`counters`]: the socket where a monitored program feeds its own counters.
//! - `unwind` (private): stack walks of a stopped process from DWARF call-frame
//!   information (framehop), frames named with addr2line, inline frames included.
//! - [`gdbmi`]: the symbolic backend: a gdb per process driven over GDB/MI, and the MI
//!   output parser.
//! - [`monitor`]: the node-local monitor over real processes (signals, /proc, ptrace,
//!   addr2line), its stored OMIS event requests and their actions.
//! - [`mpir`]: the process table of a running job, read from its launcher (MPIR, or the
//!   launcher's ranked descendants).
//! - [`hold`]: a job started held for a tool (MPIR launch mode): the launcher stopped in
//!   `MPIR_Breakpoint`, the tasks spawned and not yet running, their table read.
//! - [`services`]: the OMIS services every server offers over its monitor.
//! - [`plugin`]: service plugins, shared libraries implementing `include/sdm_service.h`.
//! - [`ranks`]: the table of a server's local ranks, each with its own monitor
//!   ([`ranks::ServerContext`]), made at its first command.
//! - [`service`]: the service registry ([`Services`]): commands go to the service their
//!   envelope's tag names, payload bytes unchanged; the stock services (`sdm`, `omis`,
//!   `counters`, `procstat`, `sdm.init`) are registered like any tool's.
//! - [`daemon`]: start-up, the init command, the node loop ([`daemon::run_master`],
//!   [`daemon::run_server`], [`daemon::ServerOptions`]).
//! - [`server`]: [`Server::builder`], the daemon with services of a tool's own.
//!
//! # Add your own service
//!
//! A service is a name and a [`Handler`]: a function of the [`Request`] (op, the rank it is
//! for, the payload bytes as sent, the rank's monitor and its program's pid) and a [`Reply`] it may
//! move to a task and answer later. The front-end tags its commands with the name
//! (`Message::command(..).for_service("checksum")`, `sdm launch --service checksum`).
//!
//! In Rust, write the server binary (the example `examples/checksum_server.rs` is a whole
//! tool's server), and name it in `SessionOptions::program`:
//!
//! ```no_run
//! use sdm_server::{Reply, Request, Server};
//!
//! fn main() -> std::process::ExitCode {
//!     Server::builder()
//!         .service("hello", |req: Request, reply: Reply| {
//!             reply.send(format!("hello from server {}", req.server()))
//!         })
//!         .main()
//! }
//! ```
//!
//! In C (or any language with a C ABI), write a plugin against `include/sdm_service.h`
//! (`examples/c/checksum_service.c`) and name it with `--service-plugin PATH` or
//! `SessionOptions::service_plugins`: the stock `sdm server` loads it from the init command.
//! A handler's panic, or a plugin's error, fails only that command, with an error reply
//! naming the service.
//!
//! # Features
//!
//! - `quic` (default): the daemons' `quic://` links (the session certificate arrives in
//!   `SDM_SESSION_TLS`). Without it the daemons speak tcp only and quinn, rustls and rcgen
//!   are not compiled.

pub mod counters;
pub mod daemon;
pub mod error;
mod gate;
pub mod gdbmi;
pub mod hold;
pub mod logging;
pub mod monitor;
pub mod mpir;
mod natprint;
pub mod plugin;
pub mod pmix;
pub mod proctree;
pub mod python;
pub mod rankenv;
pub mod ranks;
pub mod server;
pub mod service;
pub mod services;
mod unwind;

pub use daemon::{ServerOptions, run_master, run_server};
pub use error::{Error, ErrorKind};
pub use server::{Server, ServerBuilder};
pub use service::{Handler, Reply, Request, Services};
