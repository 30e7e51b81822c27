//! sdm: the `sdm` command, the user's side of the tree: `sdm launch`, `sdm run` and its
//! parallel debugger console, `sdm top`, `sdm status`, `sdm topology`, and the daemons `sdm
//! master` and `sdm server`. Tools link `sdm-client` (the front-end library) and
//! `sdm-server` (the daemons) instead; this crate is the command built on both.
//!
//! - [`cli`]: the command's definitions (clap) and its `main`.
//! - [`console`]: the parallel debugger console of `sdm run`; [`commands`] (help,
//!   breakpoint numbers, tab completion) and [`words`] (events and replies in plain words).
//! - [`editor`]: the interactive console on a terminal (line editor, command loop);
//!   [`screen`]: its output, written on a thread of its own; [`script`]: commands from
//!   `-c`, command files (`-x`) and standard input.
//! - [`stacks`]: `bt`'s views of the merged stacks (tree, classes, DOT, SVG, JSON).
//! - [`flame`]: flame graphs and folded stacks of `bt --samples` and `sdm top --flame`.
//! - [`report`]: the hang report, one HTML page (`bt --html`, `sdm attach --report`).
//! - [`top`]: `sdm top`'s tables and JSON.
//! - [`status`]: `sdm status`, the health asked of a running `sdm run` from elsewhere.
//! - [`manual`]: shell completions and man pages generated from the command's definitions.
//!
//! # Features
//!
//! - `quic` (default): the `quic` transport, in the front-end and in the daemons. Without it
//!   `--transport quic` is refused and quinn, rustls and rcgen are not compiled.

pub mod cli;
pub mod commands;
pub mod console;
pub mod editor;
pub mod flame;
mod held;
mod heldtree;
mod holdtask;
mod hosts;
pub mod interrupt;
pub mod links;
pub mod manual;
mod mpilib;
pub mod report;
pub mod screen;
pub mod script;
pub mod stacks;
pub mod status;
mod tasks;
pub mod top;
pub mod words;
