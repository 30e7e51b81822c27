//! sdm-e2e: the end-to-end tests of sdm (in tests/: real daemons, real launchers, real
//! hosts in network namespaces, SIGKILL), and the one harness they share (this library).
//!
//! # The programs under test
//!
//! They are binaries of this package, so `cargo test -p sdm-e2e` (and `cargo test
//! --workspace`) builds them before the tests run: `sdm-e2e-cli` (the `sdm` command, whose
//! `main` is `sdm::cli::main` like the real binary's), `sdm-testnode` (a bare overlay node),
//! `sdm-counters-demo` (a program using the counters client) and `sdm-checksum-server`
//! (sdm-server's example of a tool's own server, built with `Server::builder`). Cargo puts
//! them in `target/<profile>/`, the directory above the test executables
//! (`target/<profile>/deps/`); [`sdm()`], [`testnode`], [`counters_demo`] and
//! [`checksum_server`] find them there.
//!
//! # Trees
//!
//! - The `sdm` command and its daemons: [`sdm()`] for `sdm_client::SessionOptions::program`,
//!   [`sdm_ok`] to run a command and take its output, [`sdm_run`] for `sdm run` with input
//!   and exact merging, [`console_command`] to run a console command and take what it
//!   printed, [`one_server`] for the one server process serving every rank.
//! - Programs under test: [`c_program`] and [`mpi_program`] build tests/programs/NAME.c,
//!   [`spinner`] the console tests' program; [`source_line`] finds a line in one;
//!   [`procs`] reads a process's state, parent and tracer, and starts `sleep`s to attach to.
//! - Overlay nodes: [`transport`] makes a transport and the address to bind it on,
//!   [`bind_servers`] binds every server's listener, [`Net::spawn_server`] runs a server,
//!   [`Net::start_master`] runs the master and accepts it at a front-end; [`tree_over`] is all
//!   of them at once. [`Procs`] runs `sdm-testnode` processes instead of in-process servers
//!   and kills them (SIGKILL) when dropped.
//! - Filters without a network: [`through_tree`] folds leaf payloads through a tree shape.
//! - Checks: [`ids_with`], [`assert_partition`].
//! - Hosts on one machine: [`netns::Hosts`] makes network namespaces joined by a bridge;
//!   [`netns::one_at_a_time`] runs the multi-host tests of a test binary one by one;
//!   [`sshhosts::SshHosts`] gives each an sshd, [`slurmhosts::SlurmHosts`] a Slurm node;
//!   [`daemons`] sees the `sdm` daemons inside each host and drives a held `sdm launch`;
//!   [`hungjob::HungJobAcross`] is a hung MPI job across them for `sdm attach`
//!   ([`hungjob::HungJob`] one on this host).
//! - A browser: [`browser`] loads a page in headless chromium (its DOM, its errors) and
//!   takes screenshots.

pub mod browser;
pub mod daemons;
mod harness;
pub mod hungjob;
pub mod netns;
pub mod procs;
mod runs;
pub mod slurmhosts;
pub mod sshhosts;

pub use harness::*;
pub use runs::*;
