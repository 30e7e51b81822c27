//! A program's own counters, fed to the sdm server that started it (the server answers the
//! `counters` request with them, so the tree merges them like `procstat`).
//!
//! Protocol: the server listens on a Unix socket whose path it gives the program in
//! [`COUNTERS_ENV`]; the program writes lines `key value` (value a decimal number), each
//! setting that counter (the latest value wins). [`Client`] is the Rust client; C programs
//! include the header-only `include/sdm_counters.h` of this crate.

use std::io::Write;

pub use sdm_deploy::COUNTERS_ENV;

/// The Rust client: a program's connection to its server's counters socket.
///
/// ```no_run
/// let mut c = sdm_client::counters::Client::from_env()?;
/// c.set("iterations", 42)?;
/// c.set("bytes_sent", 1.5e6)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Client {
    conn: std::os::unix::net::UnixStream,
}

impl Client {
    /// Connects to the socket named by `SDM_COUNTERS` (set by the server that started the
    /// program).
    pub fn from_env() -> std::io::Result<Self> {
        let path = std::env::var_os(COUNTERS_ENV).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{COUNTERS_ENV} is not set: not started by an sdm server"),
            )
        })?;
        Ok(Self {
            conn: std::os::unix::net::UnixStream::connect(path)?,
        })
    }

    /// Sets counter `key` to `value`.
    pub fn set(&mut self, key: &str, value: impl std::fmt::Display) -> std::io::Result<()> {
        writeln!(self.conn, "{key} {value}")
    }
}
