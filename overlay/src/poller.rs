//! A node's own loop: one thread that waits on epoll for the node's tcp links and polls the
//! node's task itself, with nothing between a socket's event and the node.
//!
//! Under tokio, a frame's arrival went through the runtime's I/O driver (the socket's
//! scheduled-I/O slot, its waiter list), the task's waker, the scheduler's queue and the
//! task's harness before the node saw it; with a thousand daemons on a few cores that path
//! was the largest user-side cost of a hop after the node's own work (BENCHMARKS.md, "Per-hop
//! cost, eighth pass"). Here [`block_on`] polls one future on the calling thread and, when
//! it is pending, waits in `epoll_wait` on the links it took over ([`take_over`]) and an
//! eventfd: an event marks its socket readable or writable and wakes the waker the link's
//! reader or writer left, which is the driver's own per-source waker.
//!
//! The rest of the daemon (its services, the local program's output, re-attaching) stays
//! on the tokio runtime of the process's main thread, entered by the node's thread so that
//! what a handler spawns goes there. What crosses over (a reply made later, a local output
//! line, an adopted link) wakes this thread through the eventfd.
//!
//! Sockets are registered edge-triggered: a read or write that would block clears the
//! socket's readiness, the next event sets it again. Like tokio, a read that fills less
//! than the buffer clears it too (the socket has nothing more), which saves the `recv`
//! that would only say so.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker, ready};
use std::time::Instant;

use bytes::{Buf, Bytes};
use futures::task::AtomicWaker;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::transport::Link;

/// The eventfd's token in the epoll set; a socket's is its slot plus one.
const WAKE_TOKEN: u64 = 0;

/// Events taken per `epoll_wait`.
const EVENTS: usize = 256;

/// Whether a socket can be read or written, and who waits for that.
#[derive(Default)]
struct Source {
    readable: AtomicBool,
    /// The peer ended its side, or the connection failed: reported once (edge-triggered),
    /// so never cleared; reads go on until they say so themselves.
    closed: AtomicBool,
    writable: AtomicBool,
    read: AtomicWaker,
    write: AtomicWaker,
}

/// The loop's state on its thread: the epoll set, the sockets in it, the deadline.
struct Reactor {
    /// Which loop this is (sockets remember the one they are registered with).
    id: u64,
    epoll: Epoll,
    /// Sockets by slot (token minus one).
    sources: RefCell<Vec<Option<Arc<Source>>>>,
    free: RefCell<Vec<usize>>,
    /// The node's timer: the wait ends by then.
    deadline: Cell<Option<Instant>>,
    /// The task yielded: look for events without waiting, then poll it again.
    yielded: Cell<bool>,
}

thread_local! {
    static REACTOR: RefCell<Option<Rc<Reactor>>> = const { RefCell::new(None) };
}

fn current() -> Option<Rc<Reactor>> {
    REACTOR.with(|r| r.borrow().clone())
}

/// Whether this thread runs a node's own loop ([`block_on`]).
pub fn active() -> bool {
    REACTOR.with(|r| r.borrow().is_some())
}

/// Sets the time by which the loop polls its task again (the node's timer).
pub fn set_deadline(at: Instant) {
    if let Some(r) = current() {
        r.deadline.set(Some(at));
    }
}

/// Gives the loop back for one look at the sockets (without waiting), then resumes: a task
/// with more to do than one turn lets new events in, as tokio's budget makes it do.
pub async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        if let Some(r) = current() {
            r.yielded.set(true);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// The task's waker: marks the task woken, and writes the eventfd when the loop is (or is
/// about to be) waiting, which only a wake from another thread can find.
struct TaskWake {
    woken: AtomicBool,
    waiting: AtomicBool,
    fd: EventFd,
}

impl Wake for TaskWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Dekker's handshake with the loop: it sets `waiting` then reads `woken`; this sets
        // `woken` then reads `waiting`. One of the two sees the other.
        if !self.woken.swap(true, Ordering::SeqCst) && self.waiting.load(Ordering::SeqCst) {
            let _ = self.fd.write(1);
        }
    }
}

/// Runs `fut` to completion on this thread, waiting on epoll for the sockets it takes over
/// with [`take_over`] (and on its waker, from any thread) in between. Other futures it
/// awaits (tokio's, entered from the caller's runtime handle) work as usual; their wakes
/// come through the waker.
pub fn block_on<F: Future>(fut: F) -> io::Result<F::Output> {
    let fd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?;
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    epoll.add(
        fd.as_fd(),
        EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLET, WAKE_TOKEN),
    )?;
    static LOOPS: AtomicU64 = AtomicU64::new(0);
    let reactor = Rc::new(Reactor {
        id: LOOPS.fetch_add(1, Ordering::Relaxed),
        epoll,
        sources: RefCell::default(),
        free: RefCell::default(),
        deadline: Cell::new(None),
        yielded: Cell::new(false),
    });
    REACTOR.with(|r| *r.borrow_mut() = Some(reactor.clone()));
    // Uninstalled however the future ends, so sockets dropped afterwards only close.
    struct Uninstall;
    impl Drop for Uninstall {
        fn drop(&mut self) {
            REACTOR.with(|r| r.borrow_mut().take());
        }
    }
    let _uninstall = Uninstall;
    let task = Arc::new(TaskWake {
        woken: AtomicBool::new(false),
        waiting: AtomicBool::new(false),
        fd,
    });
    let waker = Waker::from(task.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    let mut events = vec![EpollEvent::empty(); EVENTS];
    loop {
        task.woken.store(false, Ordering::SeqCst);
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Ok(v);
        }
        reactor.wait(&task, &mut events)?;
    }
}

impl Reactor {
    /// Waits for events (not at all if the task was woken or yielded, at most until the
    /// deadline), and hands them to the sockets' wakers.
    fn wait(&self, task: &TaskWake, events: &mut [EpollEvent]) -> io::Result<()> {
        let mut timeout = match self.deadline.get() {
            _ if self.yielded.replace(false) => EpollTimeout::ZERO,
            None => EpollTimeout::NONE,
            Some(at) => {
                // Rounded up: waking before the deadline would only wait again.
                let left = at.saturating_duration_since(Instant::now());
                let ms = left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
                EpollTimeout::try_from(ms).unwrap_or(EpollTimeout::NONE)
            }
        };
        task.waiting.store(true, Ordering::SeqCst);
        if task.woken.load(Ordering::SeqCst) {
            timeout = EpollTimeout::ZERO;
        }
        let waited = self.epoll.wait(events, timeout);
        task.waiting.store(false, Ordering::SeqCst);
        let n = match waited {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(e.into()),
        };
        for ev in &events[..n] {
            let token = ev.data();
            if token == WAKE_TOKEN {
                let _ = task.fd.read();
                continue;
            }
            let source = self.sources.borrow()[(token - 1) as usize].clone();
            let Some(source) = source else { continue };
            let flags = ev.events();
            let gone = EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR;
            if flags.intersects(EpollFlags::EPOLLRDHUP | gone) {
                source.closed.store(true, Ordering::Relaxed);
            }
            if flags.intersects(EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | gone) {
                source.readable.store(true, Ordering::Relaxed);
                source.read.wake();
            }
            if flags.intersects(EpollFlags::EPOLLOUT | gone) {
                source.writable.store(true, Ordering::Relaxed);
                source.write.wake();
            }
        }
        if let Some(at) = self.deadline.get()
            && Instant::now() >= at
        {
            self.deadline.set(None);
            task.woken.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    fn register(&self, fd: BorrowedFd<'_>, source: Arc<Source>) -> io::Result<usize> {
        let slot = match self.free.borrow_mut().pop() {
            Some(k) => k,
            None => {
                let mut s = self.sources.borrow_mut();
                s.push(None);
                s.len() - 1
            }
        };
        let flags = EpollFlags::EPOLLIN
            | EpollFlags::EPOLLOUT
            | EpollFlags::EPOLLRDHUP
            | EpollFlags::EPOLLET;
        if let Err(e) = self.epoll.add(fd, EpollEvent::new(flags, slot as u64 + 1)) {
            self.free.borrow_mut().push(slot);
            return Err(e.into());
        }
        self.sources.borrow_mut()[slot] = Some(source);
        Ok(slot)
    }
}

/// A socket taken over by the loop: closed (and out of the epoll set) when both halves are
/// dropped.
struct Socket {
    fd: OwnedFd,
    source: Arc<Source>,
    slot: usize,
    /// The loop whose epoll set has it.
    reactor: u64,
}

impl Drop for Socket {
    fn drop(&mut self) {
        // On the loop's thread (where the driver drops its links), the slot is freed; the
        // descriptor is taken out first, so no event can name the slot once it is reused.
        // Elsewhere closing it is all (the loop's set forgets a closed descriptor).
        if let Some(r) = current().filter(|r| r.id == self.reactor) {
            let _ = r.epoll.delete(self.fd.as_fd());
            r.sources.borrow_mut()[self.slot] = None;
            r.free.borrow_mut().push(self.slot);
        }
    }
}

/// One direction of a [`Source`]: its readiness and who waits for it.
struct Direction<'a> {
    ready: &'a AtomicBool,
    waiter: &'a AtomicWaker,
    /// A short transfer leaves the readiness set (the read side once the peer closed: the
    /// end of the stream is still to be read, and no other event will say so).
    keep_on_short: bool,
}

impl Direction<'_> {
    /// Runs `op` (a system call moving up to `want` bytes, returning how many or -1) while
    /// the socket is ready this way. Would-block clears the readiness and waits for the next
    /// event; so does a short transfer, which means the socket has nothing more (or no
    /// more room), as tokio does.
    fn poll(
        &self,
        cx: &Context<'_>,
        want: usize,
        mut op: impl FnMut() -> isize,
    ) -> Poll<io::Result<usize>> {
        loop {
            if !self.ready.load(Ordering::Relaxed) {
                self.waiter.register(cx.waker());
                if !self.ready.load(Ordering::Relaxed) {
                    return Poll::Pending;
                }
            }
            let n = op();
            if n >= 0 {
                let n = n as usize;
                if n > 0 && n < want && !self.keep_on_short {
                    self.ready.store(false, Ordering::Relaxed);
                }
                return Poll::Ready(Ok(n));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => self.ready.store(false, Ordering::Relaxed),
                io::ErrorKind::Interrupted => {}
                _ => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl Source {
    fn reading(&self) -> Direction<'_> {
        Direction {
            ready: &self.readable,
            waiter: &self.read,
            keep_on_short: self.closed.load(Ordering::Relaxed),
        }
    }

    fn writing(&self) -> Direction<'_> {
        Direction {
            ready: &self.writable,
            waiter: &self.write,
            keep_on_short: false,
        }
    }
}

/// The read half: first what the link's previous reader had read and not framed yet.
struct Reader {
    socket: Arc<Socket>,
    leftover: Bytes,
}

impl AsyncRead for Reader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.leftover.is_empty() {
            let n = self.leftover.len().min(buf.remaining());
            buf.put_slice(&self.leftover[..n]);
            self.leftover.advance(n);
            return Poll::Ready(Ok(()));
        }
        let fd = self.socket.fd.as_raw_fd();
        // SAFETY: `recv` writes at most `len` bytes into the unfilled part of `buf`, which
        // are then marked initialized and filled.
        let unfilled = unsafe { buf.unfilled_mut() };
        let (at, len) = (unfilled.as_mut_ptr(), unfilled.len());
        let n = ready!(
            self.socket
                .source
                .reading()
                .poll(cx, len, || unsafe { libc::recv(fd, at.cast(), len, 0) })
        )?;
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

/// The write half.
struct Writer {
    socket: Arc<Socket>,
}

impl AsyncWrite for Writer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let fd = self.socket.fd.as_raw_fd();
        self.socket.source.writing().poll(cx, buf.len(), || {
            // SAFETY: `buf` is valid for `buf.len()` bytes.
            unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) }
        })
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let bufs = &bufs[..bufs.len().min(libc::UIO_MAXIOV as usize)];
        let want = bufs.iter().map(|b| b.len()).sum();
        let count = bufs.len() as libc::c_int;
        let fd = self.socket.fd.as_raw_fd();
        self.socket.source.writing().poll(cx, want, || {
            // SAFETY: `IoSlice` is ABI-compatible with `iovec`, and `count` of them are valid.
            unsafe { libc::writev(fd, bufs.as_ptr().cast(), count) }
        })
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // SAFETY: a plain call on a descriptor this half keeps open.
        let r = unsafe { libc::shutdown(self.socket.fd.as_raw_fd(), libc::SHUT_WR) };
        if r == 0 {
            Poll::Ready(Ok(()))
        } else {
            let e = io::Error::last_os_error();
            // The peer already went away: nothing is left to shut down.
            if e.raw_os_error() == Some(libc::ENOTCONN) {
                Poll::Ready(Ok(()))
            } else {
                Poll::Ready(Err(e))
            }
        }
    }
}

/// On a thread running [`block_on`], moves a plain tcp link (one the tcp transport made) onto the
/// loop: a copy of its socket goes into the epoll set, the tokio halves are dropped (which
/// takes the socket out of the runtime's reactor), and bytes the old reader had already
/// read come first from the new one. Any other link, or on any other thread, is returned
/// as it is (it keeps working through the runtime, woken from its thread).
pub fn take_over(link: Link) -> Link {
    let Some(handover) = link.tcp.clone() else {
        return link;
    };
    let raw = handover.fd;
    let Some(reactor) = current() else {
        return link;
    };
    // SAFETY: `raw` is the socket under the link's halves, open while they are alive.
    let fd = match unsafe { BorrowedFd::borrow_raw(raw) }.try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => {
            tracing::debug!("keeping the link to {} on the runtime: {e}", link.peer);
            return link;
        }
    };
    let source = Arc::new(Source {
        readable: AtomicBool::new(true),
        writable: AtomicBool::new(true),
        ..Source::default()
    });
    let slot = match reactor.register(fd.as_fd(), source.clone()) {
        Ok(slot) => slot,
        Err(e) => {
            tracing::debug!("keeping the link to {} on the runtime: {e}", link.peer);
            return link;
        }
    };
    let socket = Arc::new(Socket {
        fd,
        source,
        slot,
        reactor: reactor.id,
    });
    let Link {
        mut reader,
        mut writer,
        peer,
        ..
    } = link;
    // The codecs move over (the decoder may be in the middle of a frame whose header it
    // took from the bytes read ahead), and so do those bytes and any frames the old writer
    // had buffered and not flushed.
    let decoder = std::mem::take(reader.decoder_mut());
    let encoder = std::mem::take(writer.encoder_mut());
    let leftover = reader.read_buffer_mut().split().freeze();
    let unwritten = writer.write_buffer_mut().split();
    // The old halves go (the runtime stops watching the socket, and the descriptor they
    // shared is closed) without ending the stream: the copy above carries it on.
    handover.keep_open.store(true, Ordering::SeqCst);
    drop(reader);
    drop(writer);
    let writer: crate::transport::BoxWriter = Box::new(Writer {
        socket: socket.clone(),
    });
    let mut writer = FramedWrite::new(writer, encoder);
    *writer.write_buffer_mut() = unwritten;
    Link {
        reader: FramedRead::new(Box::new(Reader { socket, leftover }), decoder),
        writer,
        peer,
        tcp: None,
    }
}

impl Drop for Writer {
    /// Dropping a link's writer ends the peer's reader, as for every transport.
    fn drop(&mut self) {
        // SAFETY: a plain call on a descriptor this half keeps open.
        unsafe { libc::shutdown(self.socket.fd.as_raw_fd(), libc::SHUT_WR) };
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use futures::{SinkExt, StreamExt};
    use sdm_proto::{IdSet, Message, Status};

    use super::*;
    use crate::transport::{TcpTransport, Transport, TransportConfig};

    /// Two ends of a tcp link over loopback, as the tcp transport makes them.
    pub(crate) async fn tcp_pair() -> (Link, Link) {
        let t = TcpTransport::new(&TransportConfig::default());
        let mut l = t.bind(&"tcp://127.0.0.1:0".parse().unwrap()).await.unwrap();
        let at = l.local_addr();
        let (a, b) = tokio::join!(t.connect(&at), l.accept());
        (a.unwrap(), b.unwrap())
    }

    fn frame(op: u64) -> Message {
        Message::reply(
            op,
            IdSet::single(0),
            Status::Replied,
            format!("frame {op}").into(),
        )
    }

    /// Runs `f` on a thread of its own and fails if it has not returned within 60 s (a
    /// wake-up the loop missed would otherwise hang the test).
    fn within_a_minute(f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(()) => t.join().unwrap(),
            // The thread panicked: its panic is the failure.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => t.join().unwrap(),
            Err(_) => panic!("the loop did not finish within 60 s"),
        }
    }

    /// A link whose reader had already read past the frame it returned is taken over: the
    /// frames read ahead come first, in order, then what arrives on the socket; dropping
    /// the tokio halves does not end the stream (the peer gets the loop's answer), and
    /// dropping the taken-over link does.
    #[test]
    fn a_taken_over_link_keeps_its_stream_and_what_was_read_ahead() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (mut a, mut b) = rt.block_on(tcp_pair());
        rt.block_on(async {
            for op in 0..3 {
                a.writer.feed(&frame(op)).await.unwrap();
            }
            a.writer.flush().await.unwrap();
            let first = b.reader.next().await.unwrap().unwrap();
            assert_eq!(first.op, 0);
        });
        assert!(
            !b.reader.read_buffer().is_empty(),
            "the reader read only one frame of the three written at once"
        );
        let runtime = rt.handle().clone();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let node = std::thread::spawn(move || {
            let _entered = runtime.enter();
            block_on(async move {
                let mut b = take_over(b);
                assert!(b.tcp.is_none(), "taken over twice");
                started_tx.send(()).unwrap();
                for op in 1..4 {
                    let m = b.reader.next().await.unwrap().unwrap();
                    assert_eq!(m.op, op);
                }
                b.writer.send(&frame(100)).await.unwrap();
            })
            .unwrap();
        });
        rt.block_on(async {
            started_rx.await.unwrap();
            a.writer.send(&frame(3)).await.unwrap();
            let m = a.reader.next().await.unwrap().unwrap();
            assert_eq!(m.op, 100);
            assert!(a.reader.next().await.is_none(), "the stream did not end");
        });
        node.join().unwrap();
    }

    /// The peer's last frame and the end of its stream arrive together while the loop is
    /// busy, so one event reports both: the frame comes up, then the end (the short read
    /// of the frame must not put the socket back to sleep, as no other event will come).
    #[test]
    fn a_last_frame_and_the_close_in_one_event_both_come_up() {
        within_a_minute(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let (mut a, b) = rt.block_on(tcp_pair());
            let (go_tx, go_rx) = tokio::sync::oneshot::channel();
            let (sent_tx, sent_rx) = std::sync::mpsc::channel();
            let runtime = rt.handle().clone();
            let node = std::thread::spawn(move || {
                let _entered = runtime.enter();
                block_on(async move {
                    let mut b = take_over(b);
                    // Nothing to read yet: the socket's readiness is cleared.
                    let first =
                        std::future::poll_fn(|cx| Poll::Ready(b.reader.poll_next_unpin(cx)));
                    assert!(first.await.is_pending());
                    go_tx.send(()).unwrap();
                    // The loop is busy while the frame and the close arrive.
                    sent_rx.recv().unwrap();
                    let m = b.reader.next().await.unwrap().unwrap();
                    assert_eq!(m.op, 1);
                    assert!(b.reader.next().await.is_none(), "the end was not seen");
                })
                .unwrap();
            });
            rt.block_on(async move {
                go_rx.await.unwrap();
                a.writer.send(&frame(1)).await.unwrap();
                drop(a);
            });
            sent_tx.send(()).unwrap();
            node.join().unwrap();
        });
    }

    /// The loop's wait ends for a wake from another thread (through the eventfd) and for
    /// the deadline, with nothing on any socket.
    #[test]
    fn a_wake_from_another_thread_and_the_deadline_end_the_wait() {
        within_a_minute(|| {
            block_on(async {
                assert!(active());
                let (tx, rx) = tokio::sync::oneshot::channel();
                let sender = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(20));
                    tx.send(7).unwrap();
                });
                assert_eq!(rx.await.unwrap(), 7);
                sender.join().unwrap();
                let at = Instant::now() + Duration::from_millis(20);
                set_deadline(at);
                std::future::poll_fn(|_| {
                    if Instant::now() >= at {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
                .await;
                yield_now().await;
            })
            .unwrap();
            assert!(!active(), "the loop stayed installed after it ended");
        });
    }
}
