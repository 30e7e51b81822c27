//! Application counters: a program under a server feeds its own metrics (operation counts,
//! bytes sent and received, …) to that server, which answers the `counters` request with
//! them so the tree can merge them (the `stats` filter for min/mean/max and the ranks at the
//! extremes, `counters` for MTF-style per-rank rows grouped by identical ranks).
//!
//! Protocol: the server listens on a Unix socket whose path it gives the program in
//! `SDM_COUNTERS`; the program writes lines `key value` (value a decimal number), each
//! setting that counter (the latest value wins). A bad line is logged and skipped; it costs
//! only itself. Clients: `sdm_client::counters::Client` (Rust), and the header-only C
//! client `sdm_counters.h` (in sdm-client's include/).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::UnixListener;

pub use sdm_deploy::COUNTERS_ENV;

use crate::error::{Error, ErrorKind};

fn bad(what: String) -> Error {
    Error::new(ErrorKind::BadInput, format!("counters: {what}"))
}

/// Longest key accepted.
const MAX_KEY: usize = 128;

/// The latest value of every counter the program set (decimal text, as written).
#[derive(Debug, Clone, Default)]
pub struct Store(Arc<Mutex<BTreeMap<String, String>>>);

impl Store {
    /// Applies one `key value` line; an error names what is wrong with it.
    pub fn apply(&self, line: &str) -> Result<(), Error> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(());
        }
        let (key, value) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| bad(format!("{line:?}: expected `key value`")))?;
        let value = value.trim();
        if key.len() > MAX_KEY
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        {
            return Err(bad(format!(
                "{key:?}: keys are up to {MAX_KEY} of [A-Za-z0-9_.-]"
            )));
        }
        if key == "sdm" {
            return Err(bad("\"sdm\" is a reserved key".into()));
        }
        if value.parse::<f64>().map_or(true, |v| !v.is_finite()) {
            return Err(bad(format!("{key}: {value:?} is not a number")));
        }
        self.0
            .lock()
            .expect("not poisoned")
            .insert(key.to_owned(), value.to_owned());
        Ok(())
    }

    /// The counters as a JSON object of decimal strings (the filters' leaf form).
    pub fn json(&self) -> String {
        let map = self.0.lock().expect("not poisoned");
        serde_json::to_string(&*map).expect("strings serialize")
    }
}

/// The counters socket of one server: bound on first use ([`Socket::path`], when the server
/// starts a program), so a server that never starts one never creates a file (binding a
/// Unix socket creates an inode: a thousand servers starting at once spent a third of the
/// tree's set-up in the file system doing that).
#[derive(Debug)]
pub struct Socket {
    path: PathBuf,
    store: Store,
    runtime: tokio::runtime::Handle,
    /// The accepting task once bound; `Err` once binding failed (not tried again).
    bound: Mutex<Option<Result<tokio::task::JoinHandle<()>, ()>>>,
}

impl Socket {
    /// A socket at `path` feeding `store`, served on the current tokio runtime once bound.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(path: PathBuf, store: Store) -> Self {
        Self {
            path,
            store,
            runtime: tokio::runtime::Handle::current(),
            bound: Mutex::new(None),
        }
    }

    /// The socket's path, binding it first if needed (from any thread); `None` (logged
    /// once) if it cannot be bound.
    pub fn path(&self) -> Option<&Path> {
        let mut bound = self.bound.lock().expect("not poisoned");
        if bound.is_none() {
            *bound = Some(match self.bind() {
                Ok(task) => Ok(task),
                Err(e) => {
                    tracing::warn!("no counters socket at {}: {e}", self.path.display());
                    Err(())
                }
            });
        }
        matches!(*bound, Some(Ok(_))).then_some(&*self.path)
    }

    /// Listens on the path (replacing a stale socket) and feeds every connection's lines
    /// into the store.
    fn bind(&self) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let _ = std::fs::remove_file(&self.path);
        let std_listener = std::os::unix::net::UnixListener::bind(&self.path)?;
        std_listener.set_nonblocking(true)?;
        let _enter = self.runtime.enter();
        let listener = UnixListener::from_std(std_listener)?;
        let store = self.store.clone();
        Ok(self.runtime.spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    continue;
                };
                let store = store.clone();
                tokio::spawn(async move {
                    let mut lines = BufReader::new(conn).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        if let Err(e) = store.apply(&line) {
                            tracing::warn!("counters: bad line skipped: {e}");
                        }
                    }
                });
            }
        }))
    }

    /// Stops serving and removes the socket, if it was bound.
    pub fn close(&self) {
        if let Some(Ok(task)) = self.bound.lock().expect("not poisoned").take() {
            task.abort();
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Where server `id` (process `pid`) puts its counters socket.
pub fn socket_path(pid: u32) -> PathBuf {
    let dir = std::env::var_os("XDG_RUNTIME_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    dir.join(format!("sdm-counters-{pid}.sock"))
}

/// The counters socket of rank `rank` of the server with pid `pid` (each local rank's
/// program feeds its own).
pub fn rank_socket_path(pid: u32, rank: u32) -> PathBuf {
    let dir = std::env::var_os("XDG_RUNTIME_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    dir.join(format!("sdm-counters-{pid}-{rank}.sock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_set_counters_and_bad_ones_are_refused() {
        let s = Store::default();
        s.apply("ops 3").unwrap();
        s.apply("bytes_sent   1.5e3").unwrap();
        s.apply("ops 4").unwrap();
        for bad in ["novalue", "x NaN", "bad/key 1", "sdm 1"] {
            assert_eq!(
                s.apply(bad).unwrap_err().kind(),
                ErrorKind::BadInput,
                "{bad}"
            );
        }
        assert_eq!(s.json(), r#"{"bytes_sent":"1.5e3","ops":"4"}"#);
    }

    /// No file until a program needs the socket; then lines written there set counters;
    /// closing removes the file.
    #[tokio::test]
    async fn the_socket_is_made_when_first_asked_for_and_removed_on_close() {
        let dir = std::env::temp_dir().join(format!("sdm-counters-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.sock");
        let store = Store::default();
        let socket = Socket::new(path.clone(), store.clone());
        assert!(!path.exists(), "bound before anyone asked");
        assert_eq!(socket.path(), Some(path.as_path()));
        assert!(path.exists());
        let mut conn = tokio::net::UnixStream::connect(&path).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut conn, b"ops 3\n")
            .await
            .unwrap();
        drop(conn);
        while store.json() != r#"{"ops":"3"}"# {
            tokio::task::yield_now().await;
        }
        socket.close();
        assert!(!path.exists(), "left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
