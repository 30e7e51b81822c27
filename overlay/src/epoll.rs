//! The few epoll and eventfd calls the node's own loop ([`crate::poller`]) makes, over
//! libc: the overlay stays free of nix, so a front-end linking the client library gets no
//! ptrace or terminal code through it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Readable.
pub(crate) const IN: u32 = libc::EPOLLIN as u32;
/// Writable.
pub(crate) const OUT: u32 = libc::EPOLLOUT as u32;
/// The peer shut its side down.
pub(crate) const RDHUP: u32 = libc::EPOLLRDHUP as u32;
/// Hung up.
pub(crate) const HUP: u32 = libc::EPOLLHUP as u32;
/// An error on the descriptor.
pub(crate) const ERR: u32 = libc::EPOLLERR as u32;
/// Edge-triggered.
pub(crate) const ET: u32 = libc::EPOLLET as u32;

/// A return value of -1 as the system's error.
fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// One event from [`Epoll::wait`] (or an interest for [`Epoll::add`]).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct Event(libc::epoll_event);

impl Event {
    /// An interest in `events` for the descriptor known by `token`.
    pub(crate) fn new(events: u32, token: u64) -> Self {
        Event(libc::epoll_event { events, u64: token })
    }

    /// A slot for [`Epoll::wait`] to fill.
    pub(crate) fn empty() -> Self {
        Self::new(0, 0)
    }

    /// The token given with the descriptor's interest.
    pub(crate) fn data(&self) -> u64 {
        self.0.u64
    }

    /// What happened (the `IN`, `OUT`, ... bits).
    pub(crate) fn events(&self) -> u32 {
        self.0.events
    }
}

/// An epoll instance (closed on exec).
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    /// A new, empty epoll set.
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: no pointers; a descriptor returned is ours alone.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: libc::c_int, fd: BorrowedFd<'_>, ev: Option<Event>) -> io::Result<()> {
        let mut ev = ev.unwrap_or_else(Event::empty);
        // SAFETY: both descriptors are open; `ev` lives across the call.
        check(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd.as_raw_fd(), &mut ev.0) })?;
        Ok(())
    }

    /// Adds `fd` with the interest `ev`.
    pub(crate) fn add(&self, fd: BorrowedFd<'_>, ev: Event) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, Some(ev))
    }

    /// Changes the interest of `fd`, already in the set.
    pub(crate) fn modify(&self, fd: BorrowedFd<'_>, ev: Event) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, Some(ev))
    }

    /// Takes `fd` out of the set.
    pub(crate) fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, None)
    }

    /// Waits up to `ms` milliseconds (`None`: no end) and fills `events`; how many it
    /// filled. A wait a signal interrupted filled none.
    pub(crate) fn wait(&self, events: &mut [Event], ms: Option<u32>) -> io::Result<usize> {
        let timeout = ms.map_or(-1, |ms| ms.min(i32::MAX as u32) as libc::c_int);
        let max = events.len().min(i32::MAX as usize) as libc::c_int;
        // SAFETY: `Event` is a transparent `epoll_event`; the kernel writes at most `max`.
        let r = unsafe {
            libc::epoll_wait(self.0.as_raw_fd(), events.as_mut_ptr().cast(), max, timeout)
        };
        match check(r) {
            Ok(n) => Ok(n as usize),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }
}

/// A non-blocking eventfd (closed on exec): one thread writes to wake another's wait.
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd with count 0.
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: no pointers; a descriptor returned is ours alone.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds `n` to the count (makes the descriptor readable).
    pub(crate) fn write(&self, n: u64) -> io::Result<()> {
        let bytes = n.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to an open descriptor.
        let r = unsafe { libc::write(self.0.as_raw_fd(), bytes.as_ptr().cast(), 8) };
        check(r as libc::c_int).map(drop)
    }

    /// Takes the count (and clears the readiness); an error if it was 0.
    pub(crate) fn read(&self) -> io::Result<u64> {
        let mut bytes = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer from an open descriptor.
        let r = unsafe { libc::read(self.0.as_raw_fd(), bytes.as_mut_ptr().cast(), 8) };
        check(r as libc::c_int).map(|_| u64::from_ne_bytes(bytes))
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}
