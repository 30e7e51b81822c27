//! `sdm status`: the health of a running tree per subtree (full, degraded, partial, lost),
//! asked from another terminal while `sdm run` holds the tree.
//!
//! A tree lives as long as its front-end, so the front-end answers: `sdm run` listens on a
//! Unix socket, `<dir>/<pid>.sock`, where `<dir>` is `$XDG_RUNTIME_DIR/sdm`, else
//! `/tmp/sdm-<uid>`, a directory only its owner may enter (it is refused otherwise). The
//! console takes the question between its own commands, runs the same `ping` wave as its
//! `health` command, and answers.
//!
//! The protocol is one request line (`health`, with `--json` and `-v` if asked) and one
//! JSON answer: `{"healthy": bool, "text": "..."}` or `{"error": "..."}`. With `-v` the
//! report adds every link's figures ([`sdm_client::telemetry`]). Stale sockets (their
//! front-end died without removing them) are noticed when nothing answers, reported and
//! removed.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

/// A question for the console, and where its answer goes.
#[derive(Debug)]
pub struct Query {
    /// The request word (`health`).
    pub command: String,
    /// JSON lines instead of text.
    pub json: bool,
    /// Every link's figures too (`-v`).
    pub verbose: bool,
    /// The answer: whether the tree is fully healthy, and the report (or an error).
    pub reply: oneshot::Sender<anyhow::Result<(bool, String)>>,
}

/// Where this user's front-ends listen.
pub fn socket_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("sdm"),
        _ => PathBuf::from(format!("/tmp/sdm-{}", nix::unistd::getuid())),
    }
}

/// Creates `dir` (mode 0700) or checks that an existing one is ours and private.
fn private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let uid = nix::unistd::getuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a private directory of uid {uid} (mode {:o}, owner {})",
                dir.display(),
                meta.permissions().mode() & 0o7777,
                meta.uid()
            ),
        ));
    }
    Ok(())
}

/// The socket of the front-end with process id `pid`.
pub fn socket_path(pid: u32) -> PathBuf {
    socket_dir().join(format!("{pid}.sock"))
}

/// While alive, this front-end answers `sdm status` (the socket is removed on drop).
#[derive(Debug)]
pub struct Served {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The longest request line accepted.
const MAX_REQUEST: u64 = 256;

/// Listens for `sdm status` on this process's socket; questions come out of the receiver.
pub fn serve() -> io::Result<(Served, mpsc::Receiver<Query>)> {
    let dir = socket_dir();
    private_dir(&dir)?;
    let path = socket_path(std::process::id());
    // A socket left by an earlier process with our pid is stale.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let (tx, rx) = mpsc::channel(16);
    let task = tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                if let Err(e) = answer_one(conn, tx).await {
                    tracing::info!("sdm status connection: {e}");
                }
            });
        }
    });
    Ok((Served { path, task }, rx))
}

/// Reads one request, hands it to the console, writes its answer.
async fn answer_one(conn: UnixStream, tx: mpsc::Sender<Query>) -> io::Result<()> {
    let (rd, mut wr) = conn.into_split();
    let mut line = String::new();
    let mut rd = BufReader::new(rd.take(MAX_REQUEST));
    let read = rd.read_line(&mut line);
    let answer = match tokio::time::timeout(Duration::from_secs(5), read).await {
        Err(_) => Err(anyhow::anyhow!("no request within 5 s")),
        Ok(Err(e)) => Err(anyhow::Error::new(e).context("reading the request")),
        Ok(Ok(_)) if !line.ends_with('\n') => Err(anyhow::anyhow!(
            "the request must be one line of at most {MAX_REQUEST} bytes"
        )),
        Ok(Ok(_)) => ask_console(line.trim(), &tx).await,
    };
    let body = match answer {
        Ok((healthy, text)) => serde_json::json!({"healthy": healthy, "text": text}),
        Err(e) => serde_json::json!({"error": crate::cli::error_text(&e)}),
    };
    wr.write_all(format!("{body}\n").as_bytes()).await?;
    wr.shutdown().await
}

async fn ask_console(request: &str, tx: &mpsc::Sender<Query>) -> anyhow::Result<(bool, String)> {
    let mut words = request.split_whitespace();
    let command = words.next().unwrap_or_default().to_owned();
    let (mut json, mut verbose) = (false, false);
    for w in words {
        match w {
            "--json" => json = true,
            "-v" => verbose = true,
            _ => anyhow::bail!("unknown option {w:?} in request {request:?}"),
        }
    }
    if command != "health" {
        anyhow::bail!("unknown request {command:?} (known: health)");
    }
    let (reply, answer) = oneshot::channel();
    tx.try_send(Query {
        command,
        json,
        verbose,
        reply,
    })
    .map_err(|e| match e {
        mpsc::error::TrySendError::Full(_) => {
            anyhow::anyhow!("the console is busy with 16 questions")
        }
        mpsc::error::TrySendError::Closed(_) => anyhow::anyhow!("the console has ended"),
    })?;
    answer
        .await
        .map_err(|_| anyhow::anyhow!("the console ended before answering"))?
}

/// The front-ends of this user with a socket, by pid.
pub fn sessions() -> Vec<(u32, PathBuf)> {
    let mut out: Vec<(u32, PathBuf)> = std::fs::read_dir(socket_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let pid = name.strip_suffix(".sock")?.parse().ok()?;
            Some((pid, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// Asks the front-end listening at `path` (`verbose`: every link's figures too); returns
/// whether the tree is fully healthy and the report.
pub async fn ask(path: &Path, json: bool, verbose: bool) -> anyhow::Result<(bool, String)> {
    let mut conn = UnixStream::connect(path)
        .await
        .with_context(|| format!("connecting to {}", path.display()))?;
    let mut request = "health".to_owned();
    if json {
        request += " --json";
    }
    if verbose {
        request += " -v";
    }
    conn.write_all(format!("{request}\n").as_bytes()).await?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await?;
    let v: serde_json::Value = serde_json::from_str(answer.trim())
        .with_context(|| format!("answer from {}: {answer:?}", path.display()))?;
    if let Some(e) = v.get("error") {
        bail!("{}: {}", path.display(), e.as_str().unwrap_or_default());
    }
    let healthy = v["healthy"]
        .as_bool()
        .ok_or_else(|| anyhow!("answer from {}: no \"healthy\"", path.display()))?;
    Ok((healthy, v["text"].as_str().unwrap_or_default().to_owned()))
}

/// `sdm status [PID]`: the front-end to ask is `pid`'s, or the only one running. Stale
/// sockets met on the way are removed.
pub async fn status(pid: Option<u32>, json: bool, verbose: bool) -> anyhow::Result<(bool, String)> {
    if let Some(pid) = pid {
        let path = socket_path(pid);
        if !path.exists() {
            bail!(
                "no sdm front-end with pid {pid} is listening ({} does not exist)",
                path.display()
            );
        }
        return ask(&path, json, verbose).await;
    }
    let mut live = Vec::new();
    for (pid, path) in sessions() {
        match UnixStream::connect(&path).await {
            Ok(_) => live.push((pid, path)),
            Err(e) => {
                eprintln!(
                    "sdm status: removing stale {} ({e}: its front-end is gone)",
                    path.display()
                );
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    match live.as_slice() {
        [] => bail!(
            "no sdm front-end of this user is running (none listens in {})",
            socket_dir().display()
        ),
        [(_, path)] => ask(path, json, verbose).await,
        many => bail!(
            "{} sdm front-ends are running (pids {}): give one",
            many.len(),
            many.iter()
                .map(|(p, _)| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
