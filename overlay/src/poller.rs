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
//!
//! A socket's reads can be muted (`SocketRef::set_muted`): its arriving bytes no longer
//! end the wait, and it is read whenever the loop wakes for anything else, or after
//! [`MUTE_POLL`] at the latest. A node waiting for all its children's replies mutes all but
//! the child it expects last, as a blocking relay reads its children in turn: one wake-up
//! where there was one per child (BENCHMARKS.md, "Per-hop cost, ninth pass"). Closes and
//! errors still end the wait.

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

use bytes::{Buf, Bytes, BytesMut};
use futures::task::AtomicWaker;
use sdm_proto::{FrameCodec, Message, WireError};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::codec::{Decoder, FramedRead, FramedWrite};

use crate::epoll::{self, Epoll, Event as EpollEvent, EventFd};
use crate::transport::Link;

/// The eventfd's token in the epoll set; a socket's is its slot plus one.
const WAKE_TOKEN: u64 = 0;

/// Events taken per `epoll_wait`.
const EVENTS: usize = 256;

/// How long a wait lasts at most while a socket is muted: a muted socket is read at least
/// this often, so what it carries besides the replies it was muted for (a child's output,
/// its keepalives) is late by at most this much, no more than an interior node's usual
/// output merge window holds a line anyway. Longer than most round trips, so a wait
/// seldom runs out in the middle of one.
pub const MUTE_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// What every socket's interest holds: its close or failure ends a wait, muted or not.
const ALWAYS: u32 = epoll::RDHUP | epoll::ET;

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
    /// The sockets whose reads are muted: read after every wait that ended for a reason.
    muted: RefCell<Vec<Arc<Source>>>,
    /// The last wait ended because [`MUTE_POLL`] ran out, with nothing else to report.
    lapsed: Cell<bool>,
    /// When the muted sockets were last read.
    swept: Cell<Instant>,
    /// When the last wait ended: the time of the turn that follows ([`loop_time`]).
    woke: Cell<Option<Instant>>,
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

/// Whether the last wait of this thread's loop ended only because a muted socket was due
/// to be read ([`MUTE_POLL`]); clears it.
pub(crate) fn take_mute_lapsed() -> bool {
    current().is_some_and(|r| r.lapsed.replace(false))
}

/// When this thread's loop last stopped waiting (`None` off a node's own loop, or before
/// its first wait): the time of the turn its task runs now, read once per wake-up instead
/// of at every frame (the clock costs as much as a small frame's routing on this VM).
pub fn loop_time() -> Option<Instant> {
    REACTOR.with(|r| r.borrow().as_ref().and_then(|r| r.woke.get()))
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
    let fd = EventFd::new()?;
    let epoll = Epoll::new()?;
    epoll.add(
        fd.as_fd(),
        EpollEvent::new(epoll::IN | epoll::ET, WAKE_TOKEN),
    )?;
    static LOOPS: AtomicU64 = AtomicU64::new(0);
    let reactor = Rc::new(Reactor {
        id: LOOPS.fetch_add(1, Ordering::Relaxed),
        epoll,
        sources: RefCell::default(),
        free: RefCell::default(),
        deadline: Cell::new(None),
        yielded: Cell::new(false),
        muted: RefCell::default(),
        lapsed: Cell::new(false),
        swept: Cell::new(Instant::now()),
        woke: Cell::new(None),
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
        // Milliseconds (`None`: no end), rounded up: waking before the deadline would only
        // wait again.
        let mut ms = match self.deadline.get() {
            _ if self.yielded.replace(false) => Some(0),
            None => None,
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                Some(left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as u32)
            }
        };
        let poll = MUTE_POLL.as_millis() as u32;
        let muting = !self.muted.borrow().is_empty();
        let for_muted = muting && ms.is_none_or(|ms| ms > poll);
        if for_muted {
            ms = Some(poll);
        }
        task.waiting.store(true, Ordering::SeqCst);
        if task.woken.load(Ordering::SeqCst) {
            ms = Some(0);
        }
        let waited = self.epoll.wait(events, ms);
        task.waiting.store(false, Ordering::SeqCst);
        let now = Instant::now();
        self.woke.set(Some(now));
        let n = waited?;
        // Whatever woke the loop, the muted sockets are read too: their bytes did not end
        // the wait, and may be there. (Not after a look without waiting that found
        // nothing, unless they are due: a task that keeps yielding still reads them.)
        let due = || now.saturating_duration_since(self.swept.get()) >= MUTE_POLL;
        if muting && (n > 0 || ms != Some(0) || due()) {
            self.swept.set(now);
            self.lapsed.set(n == 0 && for_muted);
            for source in self.muted.borrow().iter() {
                source.readable.store(true, Ordering::Relaxed);
                source.read.wake();
            }
        }
        for ev in &events[..n] {
            let token = ev.data();
            if token == WAKE_TOKEN {
                let _ = task.fd.read();
                continue;
            }
            let source = self.sources.borrow()[(token - 1) as usize].clone();
            let Some(source) = source else { continue };
            let flags = ev.events();
            let gone = epoll::HUP | epoll::ERR;
            if flags & (epoll::RDHUP | gone) != 0 {
                source.closed.store(true, Ordering::Relaxed);
            }
            if flags & (epoll::IN | epoll::RDHUP | gone) != 0 {
                source.readable.store(true, Ordering::Relaxed);
                source.read.wake();
            }
            if flags & (epoll::OUT | gone) != 0 {
                source.writable.store(true, Ordering::Relaxed);
                source.write.wake();
            }
        }
        if let Some(at) = self.deadline.get()
            && now >= at
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
        let heard = ALWAYS | epoll::IN;
        if let Err(e) = self.epoll.add(fd, EpollEvent::new(heard, slot as u64 + 1)) {
            self.free.borrow_mut().push(slot);
            return Err(e);
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
    /// Its reads are muted ([`SocketRef::set_muted`]).
    muted: AtomicBool,
    /// A write would have blocked once: room to write is in its interest from then on.
    /// (Not before: a change of interest, muting or hearing, reports what is ready at
    /// once, and an idle socket always has room, so each change would end the next wait
    /// for nothing.)
    write_blocked: AtomicBool,
}

impl Socket {
    /// Receives into the `len` bytes at `at` while the socket is readable: how many came
    /// (0 at the end of the stream).
    ///
    /// # Safety
    ///
    /// `at` must be valid for writes of `len` bytes for the duration of the call.
    unsafe fn poll_recv_into(
        &self,
        cx: &Context<'_>,
        at: *mut u8,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        let fd = self.fd.as_raw_fd();
        self.source
            .reading()
            // SAFETY: the caller lends `len` writable bytes at `at` for the call.
            .poll(cx, len, || unsafe { libc::recv(fd, at.cast(), len, 0) })
    }

    /// What its events are for now.
    fn interest(&self) -> u32 {
        let mut flags = ALWAYS;
        if !self.muted.load(Ordering::Relaxed) {
            flags |= epoll::IN;
        }
        if self.write_blocked.load(Ordering::Relaxed) {
            flags |= epoll::OUT;
        }
        flags
    }

    /// Gives the loop's epoll set the socket's interest; whether it took it. Only on the
    /// loop's own thread.
    fn reinterest(&self) -> bool {
        let Some(r) = current().filter(|r| r.id == self.reactor) else {
            return false;
        };
        let ev = EpollEvent::new(self.interest(), self.slot as u64 + 1);
        r.epoll.modify(self.fd.as_fd(), ev).is_ok()
    }

    /// After a write that would block: room to write is reported from now on.
    fn write_would_block(&self) {
        if !self.write_blocked.swap(true, Ordering::Relaxed) && !self.reinterest() {
            // Without the interest nothing would say when it can write: it is tried
            // again at once (as if it had room), which can only spin, never hang.
            self.write_blocked.store(false, Ordering::Relaxed);
            self.source.writable.store(true, Ordering::Relaxed);
            self.source.write.wake();
        }
    }
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
            if self.muted.load(Ordering::Relaxed) {
                r.muted
                    .borrow_mut()
                    .retain(|s| !Arc::ptr_eq(s, &self.source));
            }
        }
    }
}

/// A link's socket on a node's own loop ([`take_over_socket`]), to mute its reads.
#[derive(Clone)]
pub(crate) struct SocketRef(Arc<Socket>);

impl SocketRef {
    /// Mutes (or hears again) the socket's reads: while muted, bytes arriving on it do not
    /// end the loop's wait; it is read whenever the loop wakes for anything else, and after
    /// [`MUTE_POLL`] at the latest. Heard again, what arrived while it was muted is
    /// reported by the next wait, at once. Only on the loop's own thread; elsewhere, or if
    /// the epoll set refuses the change, nothing changes.
    pub(crate) fn set_muted(&self, on: bool) {
        let s = &self.0;
        if s.muted.swap(on, Ordering::Relaxed) == on {
            return;
        }
        if !s.reinterest() {
            s.muted.store(!on, Ordering::Relaxed);
            return;
        }
        let Some(r) = current() else { return };
        let mut muted = r.muted.borrow_mut();
        if on {
            muted.push(s.source.clone());
        } else {
            muted.retain(|m| !Arc::ptr_eq(m, &s.source));
        }
    }

    /// Whether its reads are muted.
    pub(crate) fn muted(&self) -> bool {
        self.0.muted.load(Ordering::Relaxed)
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
        // SAFETY: `recv` writes at most `len` bytes into the unfilled part of `buf`, which
        // are then marked initialized and filled.
        let unfilled = unsafe { buf.unfilled_mut() };
        let (at, len) = (unfilled.as_mut_ptr(), unfilled.len());
        // SAFETY: `at` is the unfilled part of `buf`, `len` bytes, borrowed for the call.
        let n = ready!(unsafe { self.socket.poll_recv_into(cx, at.cast(), len) })?;
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

/// A link's frames, read straight from its socket on the node's own loop into the link's
/// buffer and cut there by its codec: what a `FramedRead` over the socket's [`Reader`]
/// gives, frame for frame and error for error, up to its first error or the end of the
/// stream (after which it stays ended, where a `FramedRead` would read on), without the
/// `AsyncRead` and `FramedRead` layers in between (their state, a call through a `dyn`
/// reader and a `ReadBuf` per read: BENCHMARKS.md, "Per-hop cost, fifteenth pass").
pub(crate) struct FrameReader {
    socket: Arc<Socket>,
    /// Bytes read and not framed yet (the frames cut from it share its allocation).
    buf: BytesMut,
    codec: FrameCodec,
    /// The socket reported the end of the stream: what is left is framed by `decode_eof`.
    eof: bool,
    /// The stream ended, a frame was bad or a read failed: nothing more comes.
    done: bool,
}

/// Room a link's read buffer starts with (a `FramedRead`'s).
const READ_BUFFER: usize = 8 * 1024;

impl FrameReader {
    /// The next frame, `None` once the stream ended; an error (a bad frame, a failed read,
    /// a frame cut short by the end of the stream) is the last thing it gives. (The
    /// decoder's own result type, so a frame is decoded where the caller takes it, not
    /// moved once more on the way.)
    #[inline(always)]
    pub(crate) fn poll_frame(
        &mut self,
        cx: &Context<'_>,
    ) -> Poll<Result<Option<Message>, WireError>> {
        loop {
            if self.done {
                return Poll::Ready(Ok(None));
            }
            let next = if self.eof {
                self.codec.decode_eof(&mut self.buf)
            } else {
                self.codec.decode(&mut self.buf)
            };
            match &next {
                Ok(Some(_)) => return Poll::Ready(next),
                Ok(None) if !self.eof => {}
                Ok(None) | Err(_) => {
                    self.done = true;
                    return Poll::Ready(next);
                }
            }
            self.buf.reserve(1);
            let spare = self.buf.spare_capacity_mut();
            let (at, len) = (spare.as_mut_ptr(), spare.len());
            // SAFETY: `at` is `buf`'s spare room, `len` bytes (at least one: reserved
            // above), untouched until the call returns.
            match ready!(unsafe { self.socket.poll_recv_into(cx, at.cast(), len) }) {
                Ok(0) => self.eof = true,
                // SAFETY: `recv` initialized the first `n` spare bytes.
                Ok(n) => unsafe { self.buf.set_len(self.buf.len() + n) },
                Err(e) => {
                    self.done = true;
                    return Poll::Ready(Err(e.into()));
                }
            }
        }
    }

    /// A `FramedRead` over the same socket, where the rest of the stream continues (made
    /// right after the take-over, before anything was read: nothing has ended).
    fn into_framed(self) -> FramedRead<crate::transport::BoxReader, FrameCodec> {
        debug_assert!(!self.eof && !self.done, "a frame reader already read from");
        let reader = Reader {
            socket: self.socket,
            leftover: self.buf.freeze(),
        };
        FramedRead::new(Box::new(reader), self.codec)
    }
}

/// The write half.
struct Writer {
    socket: Arc<Socket>,
}

impl Writer {
    /// A write that would block makes room to write part of the socket's interest.
    fn waits_if_pending(&self, sent: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if sent.is_pending() {
            self.socket.write_would_block();
        }
        sent
    }
}

impl AsyncWrite for Writer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let fd = self.socket.fd.as_raw_fd();
        let sent = self.socket.source.writing().poll(cx, buf.len(), || {
            // SAFETY: `buf` is valid for `buf.len()` bytes.
            unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) }
        });
        self.waits_if_pending(sent)
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
        let sent = self.socket.source.writing().poll(cx, want, || {
            // SAFETY: `IoSlice` is ABI-compatible with `iovec`, and `count` of them are valid.
            unsafe { libc::writev(fd, bufs.as_ptr().cast(), count) }
        });
        self.waits_if_pending(sent)
    }

    /// No: what a link writes is one buffer (a `FramedWrite`'s), and `tokio_util`'s
    /// `poll_write_buf` asks a vectored writer for its chunks through 64 empty slices on
    /// the stack (a kilobyte zeroed at every flush, 16 cache lines a wake-up touches).
    fn is_write_vectored(&self) -> bool {
        false
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
    take_over_socket(link).0
}

/// [`take_over`], with the socket the link now runs on (`None` if it stayed as it was).
pub(crate) fn take_over_socket(link: Link) -> (Link, Option<SocketRef>) {
    match take_over_parts(link) {
        Ok(p) => {
            let link = Link {
                reader: p.frames.into_framed(),
                writer: p.writer,
                peer: p.peer,
                tcp: None,
            };
            (link, Some(p.socket))
        }
        Err(link) => (link, None),
    }
}

/// A link moved onto a node's own loop ([`take_over_parts`]).
pub(crate) struct TakenOver {
    /// Its frames, read straight from the socket.
    pub(crate) frames: FrameReader,
    pub(crate) writer: FramedWrite<crate::transport::BoxWriter, FrameCodec>,
    /// The peer, as the link named it.
    pub(crate) peer: String,
    /// Its socket, to mute its reads.
    pub(crate) socket: SocketRef,
}

/// [`take_over`], keeping the link's read side as a [`FrameReader`] (what a node's driver
/// reads its links with); the link as it was if it stays on the runtime.
#[allow(
    clippy::result_large_err,
    reason = "once per link; the link given back is the caller's to use"
)]
pub(crate) fn take_over_parts(link: Link) -> Result<TakenOver, Link> {
    let Some(handover) = link.tcp.clone() else {
        return Err(link);
    };
    let raw = handover.fd;
    let Some(reactor) = current() else {
        return Err(link);
    };
    // SAFETY: `raw` is the socket under the link's halves, open while they are alive.
    let fd = match unsafe { BorrowedFd::borrow_raw(raw) }.try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => {
            tracing::debug!("keeping the link to {} on the runtime: {e}", link.peer);
            return Err(link);
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
            return Err(link);
        }
    };
    let socket = Arc::new(Socket {
        fd,
        source,
        slot,
        reactor: reactor.id,
        muted: AtomicBool::new(false),
        write_blocked: AtomicBool::new(false),
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
    let codec = std::mem::take(reader.decoder_mut());
    let encoder = std::mem::take(writer.encoder_mut());
    let ahead = reader.read_buffer_mut().split();
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
    let mut buf = BytesMut::with_capacity(READ_BUFFER.max(ahead.len()));
    buf.extend_from_slice(&ahead);
    let frames = FrameReader {
        socket: socket.clone(),
        buf,
        codec,
        eof: false,
        done: false,
    };
    Ok(TakenOver {
        frames,
        writer,
        peer,
        socket: SocketRef(socket),
    })
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

    /// A runtime for the far ends of the links (and for the loop's thread to enter).
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Runs the future `make` returns on a node's own loop, on a thread of its own that
    /// has `rt` entered (as a daemon's node thread has its process's runtime).
    fn on_own_loop<F: Future + 'static>(
        rt: &tokio::runtime::Runtime,
        make: impl FnOnce() -> F + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        let runtime = rt.handle().clone();
        std::thread::spawn(move || {
            let _entered = runtime.enter();
            block_on(make()).unwrap();
        })
    }

    /// Waits until everything written on tcp link `l` was acknowledged by its peer (is in
    /// the peer's socket).
    fn acknowledged(l: &Link) {
        let fd = l.tcp.as_ref().expect("a tcp link").fd;
        loop {
            let mut unacked: libc::c_int = 0;
            // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int.
            let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut unacked) };
            assert_eq!(r, 0, "SIOCOUTQ: {}", io::Error::last_os_error());
            if unacked == 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Runs `f` on a thread of its own and fails if it has not returned within 60 s (a
    /// wake-up the loop missed would otherwise hang the test).
    pub(crate) fn within_a_minute(f: impl FnOnce() + Send + 'static) {
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
        for own in [false, true] {
            taken_over_link_keeps_its_stream(own);
        }
    }

    /// The next frame of a [`FrameReader`], as a stream gives it.
    async fn next_frame(r: &mut FrameReader) -> Option<Result<Message, WireError>> {
        std::future::poll_fn(|cx| r.poll_frame(cx))
            .await
            .transpose()
    }

    /// A taken-over link, read through a `FramedRead` ([`take_over`]) or through the
    /// [`FrameReader`] a driver reads with ([`take_over_parts`]): the tests hold the two to
    /// the same frames, errors and ends.
    enum ReadSide {
        Framed(Link),
        Own(TakenOver),
    }

    impl ReadSide {
        fn take(link: Link, own: bool) -> Self {
            if own {
                match take_over_parts(link) {
                    Ok(t) => ReadSide::Own(t),
                    Err(_) => panic!("not taken over"),
                }
            } else {
                let l = take_over(link);
                assert!(l.tcp.is_none(), "taken over twice");
                ReadSide::Framed(l)
            }
        }

        fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Message, WireError>>> {
            match self {
                ReadSide::Framed(l) => l.reader.poll_next_unpin(cx),
                ReadSide::Own(t) => t.frames.poll_frame(cx).map(Result::transpose),
            }
        }

        async fn next(&mut self) -> Option<Result<Message, WireError>> {
            std::future::poll_fn(|cx| self.poll(cx)).await
        }

        fn writer(&mut self) -> &mut FramedWrite<crate::transport::BoxWriter, FrameCodec> {
            match self {
                ReadSide::Framed(l) => &mut l.writer,
                ReadSide::Own(t) => &mut t.writer,
            }
        }
    }

    /// [`a_taken_over_link_keeps_its_stream_and_what_was_read_ahead`], read through a
    /// `FramedRead` or, `own`, through a [`FrameReader`].
    fn taken_over_link_keeps_its_stream(own: bool) {
        let rt = runtime();
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
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let node = on_own_loop(&rt, move || async move {
            let mut b = ReadSide::take(b, own);
            started_tx.send(()).unwrap();
            for op in 1..4 {
                let m = b.next().await.unwrap().unwrap();
                assert_eq!(m.op, op);
            }
            b.writer().send(&frame(100)).await.unwrap();
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
        for own in [false, true] {
            within_a_minute(move || last_frame_and_close_in_one_event(own));
        }
    }

    /// [`a_last_frame_and_the_close_in_one_event_both_come_up`], through a `FramedRead` or,
    /// `own`, a [`FrameReader`].
    fn last_frame_and_close_in_one_event(own: bool) {
        let rt = runtime();
        let (mut a, b) = rt.block_on(tcp_pair());
        let (go_tx, go_rx) = tokio::sync::oneshot::channel();
        let (sent_tx, sent_rx) = std::sync::mpsc::channel();
        let node = on_own_loop(&rt, move || async move {
            let mut b = ReadSide::take(b, own);
            // Nothing to read yet: the socket's readiness is cleared.
            let first = std::future::poll_fn(|cx| Poll::Ready(b.poll(cx)));
            assert!(first.await.is_pending());
            go_tx.send(()).unwrap();
            // The loop is busy while the frame and the close arrive.
            sent_rx.recv().unwrap();
            let m = b.next().await.unwrap().unwrap();
            assert_eq!(m.op, 1);
            assert!(b.next().await.is_none(), "the end was not seen");
        });
        rt.block_on(async move {
            go_rx.await.unwrap();
            a.writer.send(&frame(1)).await.unwrap();
            drop(a);
        });
        sent_tx.send(()).unwrap();
        node.join().unwrap();
    }

    /// At a bad end both give the same: a frame cut short by the close is an error naming
    /// the bytes that came, and so is a frame that does not decode; after either, the
    /// stream has ended.
    #[test]
    fn a_cut_or_bad_last_frame_is_an_error_then_the_end() {
        // (bytes after a good frame, whether they are a frame cut short)
        let ends = [
            (&b"\0\0\0\x10abc"[..], true),
            (&b"\0\0\0\x03\xff\xff\xff"[..], false),
        ];
        for (bad, cut) in ends {
            for own in [false, true] {
                within_a_minute(move || {
                    let rt = runtime();
                    let (a, b) = rt.block_on(tcp_pair());
                    let node = on_own_loop(&rt, move || async move {
                        let mut r = ReadSide::take(b, own);
                        assert_eq!(r.next().await.unwrap().unwrap().op, 7);
                        let e = r.next().await.unwrap().unwrap_err();
                        if cut {
                            assert!(matches!(e, WireError::Truncated(3)), "{e}");
                        } else {
                            assert!(!matches!(e, WireError::Truncated(_)), "{e}");
                        }
                        assert!(r.next().await.is_none(), "more after the error");
                    });
                    rt.block_on(async move {
                        let mut a = a;
                        a.writer.send(&frame(7)).await.unwrap();
                        a.writer.write_buffer_mut().extend_from_slice(bad);
                        a.writer.flush().await.unwrap();
                        drop(a);
                    });
                    node.join().unwrap();
                });
            }
        }
    }

    /// After a frame that does not decode, a [`FrameReader`] gives nothing more, though
    /// good frames follow and the peer is still there (the driver drops a link at its first
    /// error; a `FramedRead` would read on).
    #[test]
    fn a_frame_reader_gives_nothing_after_a_bad_frame() {
        within_a_minute(|| {
            let rt = runtime();
            let (a, b) = rt.block_on(tcp_pair());
            let (checked_tx, checked_rx) = tokio::sync::oneshot::channel::<()>();
            let node = on_own_loop(&rt, move || async move {
                let Ok(mut t) = take_over_parts(b) else {
                    panic!("not taken over")
                };
                assert_eq!(next_frame(&mut t.frames).await.unwrap().unwrap().op, 7);
                assert!(next_frame(&mut t.frames).await.unwrap().is_err());
                for _ in 0..3 {
                    let cx = Context::from_waker(Waker::noop());
                    assert!(
                        matches!(t.frames.poll_frame(&cx), Poll::Ready(Ok(None))),
                        "more after the error"
                    );
                }
                checked_tx.send(()).unwrap();
            });
            rt.block_on(async move {
                let mut a = a;
                a.writer.feed(&frame(7)).await.unwrap();
                a.writer
                    .write_buffer_mut()
                    .extend_from_slice(b"\0\0\0\x03\xff\xff\xff");
                a.writer.feed(&frame(8)).await.unwrap();
                a.writer.flush().await.unwrap();
                acknowledged(&a);
                checked_rx.await.unwrap();
                drop(a);
            });
            node.join().unwrap();
        });
    }

    /// A reply whose frame, length prefix included, is `total` bytes.
    fn frame_of(op: u64, total: usize) -> Message {
        (0..total)
            .map(|n| Message::reply(op, IdSet::single(0), Status::Replied, vec![7u8; n].into()))
            .find(|m| 4 + m.encoded_len() == total)
            .expect("a payload gives that size")
    }

    /// A first frame exactly the size of the read buffer (cut from it, it leaves the
    /// buffer no room, so the next read must make some, or it would read nothing and
    /// take that for the end), then frames small and larger than the buffer, then the
    /// end: every frame comes up, in order, then the end, through either reader.
    #[test]
    fn frames_filling_the_read_buffer_and_larger_ones_all_come_up() {
        for own in [false, true] {
            within_a_minute(move || {
                let rt = runtime();
                let (mut a, b) = rt.block_on(tcp_pair());
                let mut sent = vec![frame_of(0, READ_BUFFER)];
                for op in 1..200u64 {
                    let n = match op % 7 {
                        0 => 70_000,
                        3 => 8188,
                        _ => 10,
                    };
                    let payload = vec![op as u8; n].into();
                    sent.push(Message::reply(
                        op,
                        IdSet::single(0),
                        Status::Replied,
                        payload,
                    ));
                }
                let expect = sent.clone();
                rt.block_on(a.writer.send(&sent[0])).unwrap();
                acknowledged(&a);
                let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
                let node = on_own_loop(&rt, move || async move {
                    let mut r = ReadSide::take(b, own);
                    let mut first_tx = Some(first_tx);
                    for m in &expect {
                        assert_eq!(&r.next().await.unwrap().unwrap(), m);
                        if let Some(tx) = first_tx.take() {
                            tx.send(()).unwrap();
                        }
                    }
                    assert!(r.next().await.is_none(), "the end was not seen");
                });
                rt.block_on(async move {
                    // The rest goes once the first frame was read alone.
                    first_rx.await.unwrap();
                    for m in &sent[1..] {
                        a.writer.feed(m).await.unwrap();
                    }
                    a.writer.flush().await.unwrap();
                    drop(a);
                });
                node.join().unwrap();
            });
        }
    }

    /// A link taken over while its codec is inside a frame (its length prefix read): the
    /// frame is finished from the socket, or, cut by the close, is an error counting the
    /// bytes that came before and after the take-over, through either reader.
    #[test]
    fn a_link_taken_over_inside_a_frame_finishes_it_or_reports_it_cut() {
        for own in [false, true] {
            for close in [false, true] {
                within_a_minute(move || {
                    let rt = runtime();
                    let (mut a, mut b) = rt.block_on(tcp_pair());
                    let mut whole = BytesMut::new();
                    tokio_util::codec::Encoder::encode(
                        &mut FrameCodec::default(),
                        &frame(1),
                        &mut whole,
                    )
                    .unwrap();
                    let (head, tail) = whole.split_at(9);
                    let (head, tail) = (head.to_vec(), tail.to_vec());
                    rt.block_on(async {
                        a.writer.feed(&frame(0)).await.unwrap();
                        a.writer.write_buffer_mut().extend_from_slice(&head);
                        a.writer.flush().await.unwrap();
                        acknowledged(&a);
                        assert_eq!(b.reader.next().await.unwrap().unwrap().op, 0);
                        let p =
                            std::future::poll_fn(|cx| Poll::Ready(b.reader.poll_next_unpin(cx)))
                                .await;
                        assert!(p.is_pending(), "frame 1 came whole");
                    });
                    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
                    let node = on_own_loop(&rt, move || async move {
                        let mut r = ReadSide::take(b, own);
                        go_tx.send(()).unwrap();
                        let got = r.next().await;
                        if close {
                            let e = got.unwrap().unwrap_err();
                            assert!(matches!(e, WireError::Truncated(7)), "{e}");
                        } else {
                            assert_eq!(got.unwrap().unwrap().op, 1);
                        }
                    });
                    rt.block_on(async move {
                        go_rx.await.unwrap();
                        let rest = if close { &tail[..2] } else { &tail[..] };
                        a.writer.write_buffer_mut().extend_from_slice(rest);
                        a.writer.flush().await.unwrap();
                        acknowledged(&a);
                        drop(a);
                    });
                    node.join().unwrap();
                });
            }
        }
    }

    /// A muted socket's bytes do not end the loop's wait: it is read when the wait runs
    /// out ([`MUTE_POLL`], a lapse) or when the loop wakes for another socket; its close
    /// still comes up; heard again, what arrived while it was muted ends the next wait.
    #[test]
    fn a_muted_socket_is_read_when_the_loop_wakes_for_something_else() {
        within_a_minute(|| {
            let rt = runtime();
            let (a, b) = rt.block_on(tcp_pair());
            let (mut c, d) = rt.block_on(tcp_pair());
            // Steps: the loop says it is ready for step k, the test then sends.
            let (step_tx, step_rx) = std::sync::mpsc::channel::<u32>();
            let (sent_tx, sent_rx) = std::sync::mpsc::channel::<u32>();
            let node = on_own_loop(&rt, move || async move {
                let (mut b, sb) = take_over_socket(b);
                let (mut d, sd) = take_over_socket(d);
                let (sb, sd) = (sb.unwrap(), sd.unwrap());
                let once = |r: &mut Link| {
                    let mut cx = Context::from_waker(Waker::noop());
                    match r.reader.poll_next_unpin(&mut cx) {
                        Poll::Ready(Some(m)) => Some(m.unwrap().op),
                        Poll::Ready(None) => panic!("the stream ended"),
                        Poll::Pending => None,
                    }
                };
                assert_eq!(once(&mut b), None);
                sb.set_muted(true);
                assert!(sb.muted());
                // 1: a frame on the muted socket alone. The wait that brings it in ran
                // out: the bytes did not end it.
                step_tx.send(1).unwrap();
                assert_eq!(b.reader.next().await.unwrap().unwrap().op, 1);
                assert!(
                    take_mute_lapsed(),
                    "the muted socket's bytes ended the wait"
                );
                // 2: a frame on the muted socket, then one on the heard one: the wake
                // for the second reads the first. (The heard socket is read dry first: a
                // new socket is read before any wait, and frame 3 may be there already,
                // on a loaded machine, with no wake to read the muted one.)
                assert_eq!(once(&mut b), None);
                assert_eq!(once(&mut d), None);
                step_tx.send(2).unwrap();
                assert_eq!(d.reader.next().await.unwrap().unwrap().op, 3);
                assert_eq!(once(&mut b), Some(2), "the muted socket was not read");
                // 3: hearing a socket again reads what came while it was muted.
                assert_eq!(once(&mut d), None);
                sd.set_muted(true);
                step_tx.send(3).unwrap();
                while sent_rx.recv().unwrap() != 3 {}
                sd.set_muted(false);
                assert!(!sd.muted());
                assert_eq!(d.reader.next().await.unwrap().unwrap().op, 4);
                assert!(
                    !take_mute_lapsed(),
                    "unmuted, the socket waited for the poll"
                );
                // 4: the muted socket's close comes up.
                step_tx.send(4).unwrap();
                assert!(b.reader.next().await.is_none());
            });
            rt.block_on(async move {
                let mut a = Some(a);
                while let Ok(step) = step_rx.recv() {
                    match step {
                        1 => a.as_mut().unwrap().writer.send(&frame(1)).await.unwrap(),
                        2 => {
                            let a = a.as_mut().unwrap();
                            a.writer.send(&frame(2)).await.unwrap();
                            // Frame 2 is in the muted socket before frame 3 is sent: the
                            // peer acknowledged it (two connections keep no order).
                            acknowledged(a);
                            c.writer.send(&frame(3)).await.unwrap();
                        }
                        3 => c.writer.send(&frame(4)).await.unwrap(),
                        _ => drop(a.take()),
                    }
                    let _ = sent_tx.send(step);
                }
            });
            node.join().unwrap();
        });
    }

    /// Room to write is in a socket's interest only once a write would have blocked: a
    /// writer that filled the socket (the peer reads nothing yet) goes on when the peer
    /// reads, and every frame arrives, in order.
    #[test]
    fn a_write_that_would_block_goes_on_when_the_peer_reads() {
        within_a_minute(|| {
            let rt = runtime();
            let (mut a, b) = rt.block_on(tcp_pair());
            let (blocked_tx, blocked_rx) = std::sync::mpsc::channel();
            let big = |op: u64| {
                let payload = Bytes::from(vec![op as u8; 64 * 1024]);
                Message::reply(op, IdSet::single(0), Status::Replied, payload)
            };
            let node = on_own_loop(&rt, move || async move {
                let (mut b, sb) = take_over_socket(b);
                let sb = sb.unwrap();
                assert!(!sb.0.write_blocked.load(Ordering::Relaxed));
                // Frames until the socket takes no more.
                let mut n = 0;
                loop {
                    let ready =
                        std::future::poll_fn(|cx| Poll::Ready(b.writer.poll_ready_unpin(cx)));
                    match ready.await {
                        Poll::Ready(r) => r.unwrap(),
                        Poll::Pending => break,
                    }
                    b.writer.start_send_unpin(&big(n)).unwrap();
                    n += 1;
                }
                assert!(sb.0.write_blocked.load(Ordering::Relaxed));
                blocked_tx.send(n).unwrap();
                b.writer.flush().await.unwrap();
                b.writer.send(&frame(u64::MAX)).await.unwrap();
            });
            let n = blocked_rx.recv().unwrap();
            rt.block_on(async move {
                for op in 0..n {
                    let m = a.reader.next().await.unwrap().unwrap();
                    assert_eq!(m.op, op);
                    assert_eq!(m.payload, big(op).payload);
                }
                assert_eq!(a.reader.next().await.unwrap().unwrap().op, u64::MAX);
            });
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
