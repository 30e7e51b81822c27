//! `mem://name`: in-process links for tests, through a process-global registry of listeners.
//! A connect makes a `tokio::io::duplex` pair and hands one end to the named listener.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};

use futures::future::BoxFuture;
use tokio::io::{AsyncWrite, DuplexStream, WriteHalf};
use tokio::sync::mpsc;

use super::{Address, Link, Listener, Transport, TransportConfig, failure, wrong_scheme};

/// Bytes buffered in each direction of an in-process link.
const PIPE_BUFFER: usize = 256 * 1024;
/// Connections queued on a listener that has not accepted them yet.
const BACKLOG: usize = 128;

/// A connection on its way to a listener: the listener's end and a number for its peer name.
struct Incoming {
    stream: DuplexStream,
    id: u64,
}

/// A registered listener: the token of the [`MemAcceptor`] that owns the name, and its queue.
struct Entry {
    token: u64,
    queue: mpsc::Sender<Incoming>,
}

/// Unique numbers for auto names, listener tokens and connection ids.
static NEXT: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn registry() -> MutexGuard<'static, HashMap<String, Entry>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Entry>>> = OnceLock::new();
    REGISTRY
        .get_or_init(Default::default)
        .lock()
        // The map stays consistent even if a holder panicked: every update is one call.
        .unwrap_or_else(PoisonError::into_inner)
}

/// Links inside this process; listeners are found by name in a process-global registry.
#[derive(Debug, Clone)]
pub struct MemTransport {
    max_frame: usize,
}

impl MemTransport {
    /// An in-process transport with `cfg`'s frame limit.
    pub fn new(cfg: &TransportConfig) -> Self {
        Self {
            max_frame: cfg.max_frame,
        }
    }
}

impl Transport for MemTransport {
    fn connect(&self, addr: &Address) -> BoxFuture<'_, io::Result<Link>> {
        let addr = addr.clone();
        Box::pin(async move {
            let Address::Mem(name) = &addr else {
                return Err(wrong_scheme("mem", &addr));
            };
            let refused = || {
                failure(
                    io::ErrorKind::ConnectionRefused,
                    &addr,
                    format!("connecting to {addr}: no listener is bound to that name"),
                )
            };
            let queue = registry()
                .get(name)
                .map(|e| e.queue.clone())
                .ok_or_else(refused)?;
            let (mine, theirs) = tokio::io::duplex(PIPE_BUFFER);
            let id = next_id();
            queue
                .send(Incoming { stream: theirs, id })
                .await
                .map_err(|_| refused())?;
            Ok(mem_link(mine, addr.to_string(), self.max_frame))
        })
    }

    fn bind(&self, addr: &Address) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        let addr = addr.clone();
        Box::pin(async move {
            let Address::Mem(name) = &addr else {
                return Err(wrong_scheme("mem", &addr));
            };
            let (tx, rx) = mpsc::channel(BACKLOG);
            let token = next_id();
            let mut map = registry();
            let name = if name.is_empty() || name == "auto" {
                loop {
                    let candidate = format!("auto-{}", next_id());
                    if !map.contains_key(&candidate) {
                        break candidate;
                    }
                }
            } else if map.contains_key(name) {
                return Err(failure(
                    io::ErrorKind::AddrInUse,
                    &addr,
                    format!("binding {addr}: the name is already bound in this process"),
                ));
            } else {
                name.clone()
            };
            map.insert(name.clone(), Entry { token, queue: tx });
            Ok(Box::new(MemAcceptor {
                name,
                token,
                queue: rx,
                max_frame: self.max_frame,
            }) as Box<dyn Listener>)
        })
    }
}

/// Frames one end of a duplex pair.
fn mem_link(stream: DuplexStream, peer: String, max_frame: usize) -> Link {
    let (r, w) = tokio::io::split(stream);
    Link::new(
        Box::new(r),
        Box::new(MemWriter { inner: w }),
        peer,
        max_frame,
    )
}

/// The write half of a mem link. Dropping it closes the direction, as a TCP FIN does, even
/// while the read half lives on.
struct MemWriter {
    inner: WriteHalf<DuplexStream>,
}

impl AsyncWrite for MemWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Drop for MemWriter {
    fn drop(&mut self) {
        // A duplex shutdown completes at once (it sets a flag and wakes the reader), so one
        // poll with a no-op waker is enough.
        let mut cx = Context::from_waker(Waker::noop());
        let _ = Pin::new(&mut self.inner).poll_shutdown(&mut cx);
    }
}

/// A bound mem listener; dropping it frees the name.
struct MemAcceptor {
    name: String,
    token: u64,
    queue: mpsc::Receiver<Incoming>,
    max_frame: usize,
}

impl Listener for MemAcceptor {
    fn local_addr(&self) -> Address {
        Address::Mem(self.name.clone())
    }

    fn accept(&mut self) -> BoxFuture<'_, io::Result<Link>> {
        Box::pin(async move {
            // The registry holds a sender for as long as this acceptor lives, so `None` is
            // unreachable in practice; report it rather than panic.
            let Incoming { stream, id } = self.queue.recv().await.ok_or_else(|| {
                failure(
                    io::ErrorKind::NotConnected,
                    format_args!("mem://{}", self.name),
                    format!(
                        "accepting on mem://{}: the listener was unregistered",
                        self.name
                    ),
                )
            })?;
            Ok(mem_link(
                stream,
                format!("mem://{}#{id}", self.name),
                self.max_frame,
            ))
        })
    }
}

impl Drop for MemAcceptor {
    fn drop(&mut self) {
        let mut map = registry();
        if map.get(&self.name).is_some_and(|e| e.token == self.token) {
            map.remove(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_are_exclusive_and_freed_on_drop() {
        let t = MemTransport::new(&TransportConfig::default());
        let addr = Address::Mem("unit-exclusive".into());
        let l = t.bind(&addr).await.unwrap();
        assert_eq!(l.local_addr(), addr);
        let e = t.bind(&addr).await.err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains("mem://unit-exclusive"), "{e}");
        drop(l);
        let e = t.connect(&addr).await.err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
        assert!(e.to_string().contains("mem://unit-exclusive"), "{e}");
        t.bind(&addr).await.unwrap();
    }

    #[tokio::test]
    async fn auto_names_are_unique() {
        let t = MemTransport::new(&TransportConfig::default());
        let a = t.bind(&Address::Mem(String::new())).await.unwrap();
        let b = t.bind(&Address::Mem("auto".into())).await.unwrap();
        assert_ne!(a.local_addr(), b.local_addr());
    }

    #[tokio::test]
    async fn dropping_only_the_writer_ends_the_peer_reader() {
        use futures::StreamExt;
        let t = MemTransport::new(&TransportConfig::default());
        let mut l = t.bind(&Address::Mem(String::new())).await.unwrap();
        let client = t.connect(&l.local_addr()).await.unwrap();
        let mut server = l.accept().await.unwrap();
        let Link { reader, writer, .. } = client;
        drop(writer);
        assert!(server.reader.next().await.is_none());
        drop(reader);
    }
}
