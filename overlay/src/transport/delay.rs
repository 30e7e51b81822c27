//! A one-way delay layer for links, standing in for `netem` (absent from this kernel): every
//! byte written on a delayed link reaches the peer `delay` later, in order, per link.
//!
//! [`DelayTransport`] wraps any [`Transport`] so that every link it connects or accepts
//! delays what it writes; [`Link::delayed`] does the same to one link. Both ends delayed make
//! a round trip take at least twice the delay. For tests and benchmarks only.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::codec::FramedWrite;
use tokio_util::sync::PollSender;

use super::{Address, BoxWriter, Link, Listener, Transport};
use sdm_proto::FrameCodec;

/// Most writes held in flight on one delayed link before writers wait (backpressure).
const IN_FLIGHT: usize = 1024;

/// A writer whose bytes are handed to the inner writer `delay` after they were written.
///
/// Writes return at once (the bytes are "on the wire"); a background task releases each
/// chunk when it is due, in order. Shutdown waits until everything written has gone out,
/// then shuts the inner writer, so the peer sees the end of stream after the data, delayed
/// like the data. Dropping the writer does the same in the background.
struct DelayedWriter {
    tx: PollSender<(Instant, Bytes)>,
    delay: Duration,
    task: Option<JoinHandle<io::Result<()>>>,
    /// Shutdown has begun: the channel is closed on purpose.
    closing: bool,
}

impl DelayedWriter {
    /// Starts the releasing task (needs a tokio runtime).
    fn spawn(mut inner: BoxWriter, delay: Duration) -> Self {
        let (tx, mut rx) = mpsc::channel::<(Instant, Bytes)>(IN_FLIGHT);
        let task = tokio::spawn(async move {
            while let Some((due, bytes)) = rx.recv().await {
                tokio::time::sleep_until(due).await;
                inner.write_all(&bytes).await?;
                if rx.is_empty() {
                    inner.flush().await?;
                }
            }
            inner.shutdown().await
        });
        Self {
            tx: PollSender::new(tx),
            delay,
            task: Some(task),
            closing: false,
        }
    }

    fn broken() -> io::Error {
        io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the delayed link's writer failed or was shut down",
        )
    }
}

impl AsyncWrite for DelayedWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if ready!(self.tx.poll_reserve(cx)).is_err() {
            return Poll::Ready(Err(Self::broken()));
        }
        let due = Instant::now() + self.delay;
        match self.tx.send_item((due, Bytes::copy_from_slice(buf))) {
            Ok(()) => Poll::Ready(Ok(buf.len())),
            Err(_) => Poll::Ready(Err(Self::broken())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Written bytes are in flight: like a socket's send buffer, nothing to wait for.
        if self.tx.is_closed() && !self.closing {
            return Poll::Ready(Err(Self::broken()));
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.closing = true;
        self.tx.close();
        let Some(task) = self.task.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let done = ready!(Pin::new(task).poll(cx));
        self.task = None;
        Poll::Ready(match done {
            Ok(r) => r,
            Err(e) => Err(io::Error::other(e)),
        })
    }
}

impl Link {
    /// This link with everything it writes from now on reaching the peer `delay` later
    /// (see [`DelayTransport`]). A zero delay returns the link unchanged. Call it
    /// before the first frame is written; needs a tokio runtime.
    pub fn delayed(self, delay: Duration) -> Link {
        if delay.is_zero() {
            return self;
        }
        let max = self.writer.encoder().max_frame();
        let inner = self.writer.into_inner();
        let writer: BoxWriter = Box::new(DelayedWriter::spawn(inner, delay));
        Link {
            reader: self.reader,
            writer: FramedWrite::new(writer, FrameCodec::new(max)),
            peer: self.peer,
        }
    }
}

/// A [`Transport`] whose links delay what they write by a fixed time (both directions when
/// both ends use one). [`transport_for`](super::transport_for) wraps every transport in one
/// when [`TransportConfig::delay`](super::TransportConfig::delay) is not zero.
#[derive(Debug)]
pub struct DelayTransport {
    inner: Box<dyn Transport>,
    delay: Duration,
}

impl DelayTransport {
    /// `inner` with `delay` added to every byte its links write.
    pub fn new(inner: Box<dyn Transport>, delay: Duration) -> Self {
        Self { inner, delay }
    }

    /// The one-way delay of this transport's links.
    pub fn delay(&self) -> Duration {
        self.delay
    }
}

impl Transport for DelayTransport {
    fn connect(&self, addr: &Address) -> BoxFuture<'_, io::Result<Link>> {
        let addr = addr.clone();
        Box::pin(async move {
            let link = self.inner.connect(&addr).await?;
            Ok(link.delayed(self.delay))
        })
    }

    fn bind(&self, addr: &Address) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        let addr = addr.clone();
        Box::pin(async move {
            let inner = self.inner.bind(&addr).await?;
            Ok(Box::new(DelayListener {
                inner,
                delay: self.delay,
            }) as Box<dyn Listener>)
        })
    }
}

/// A listener whose accepted links are delayed.
struct DelayListener {
    inner: Box<dyn Listener>,
    delay: Duration,
}

impl Listener for DelayListener {
    fn local_addr(&self) -> Address {
        self.inner.local_addr()
    }

    fn accept(&mut self) -> BoxFuture<'_, io::Result<Link>> {
        Box::pin(async move {
            let link = self.inner.accept().await?;
            Ok(link.delayed(self.delay))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{MemTransport, TransportConfig};
    use futures::{SinkExt, StreamExt};
    use sdm_proto::{IdSet, Message, SyncMode};

    fn msg(op: u64) -> Message {
        Message::command(op, IdSet::single(1), SyncMode::WaitAll, vec![op as u8; 100])
    }

    #[tokio::test]
    async fn frames_arrive_late_in_order_and_the_end_after_them() {
        let delay = Duration::from_millis(60);
        let t = DelayTransport::new(
            Box::new(MemTransport::new(&TransportConfig::default())),
            delay,
        );
        let mut l = t.bind(&"mem://auto".parse().unwrap()).await.unwrap();
        let at = l.local_addr();
        let (a, b) = tokio::join!(t.connect(&at), l.accept());
        let (mut a, mut b) = (a.unwrap(), b.unwrap());
        let start = Instant::now();
        for op in 1..=50 {
            a.writer.send(&msg(op)).await.unwrap();
        }
        a.writer.close().await.unwrap();
        for op in 1..=50 {
            let m = b.reader.next().await.unwrap().unwrap();
            assert_eq!(m, msg(op));
            assert!(start.elapsed() >= delay);
        }
        assert!(b.reader.next().await.is_none());
        // The other direction is delayed too.
        let sent = Instant::now();
        b.writer.send(&msg(7)).await.unwrap();
        assert_eq!(a.reader.next().await.unwrap().unwrap(), msg(7));
        assert!(sent.elapsed() >= delay);
    }
}
