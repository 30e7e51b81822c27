//! The one tracing set-up every sdm binary installs (the daemons, `sdm`, the test and bench
//! programs): to standard error, filtered by `RUST_LOG`, colour only on a terminal.
//! Libraries only log through `tracing`; this is where the subscriber comes from.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the process's tracing subscriber: to standard error, filtered by `RUST_LOG`,
/// else by `default_filter` (e.g. `"warn"`), with ANSI colours only when standard error is
/// a terminal (never in pipes and files).
pub fn init(default_filter: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
