//! sdm-relay: one node of the minimal-relay baseline tree, blocking std TCP and threads,
//! doing nothing but relaying fixed-size frames down and summing fixed-size replies up.
//!
//! Usage: `sdm-relay POS`. Binds 127.0.0.1:0 and prints `RELAY-LISTEN POS PORT`, reads one
//! line `VALUE [CHILD_PORT...]` on stdin, connects to its children, accepts its parent,
//! acknowledges up once every child acknowledged (the ack's value counts the nodes of the
//! subtree), then relays until the parent closes. A frame going down is written to every
//! child; the k-th reply of each child (links keep order) is summed with VALUE and written
//! up as the k-th reply. Frames already buffered are batched into one write. The only thing
//! taken from the sdm-bench library is its pure-std wire format (`sdm_bench::wire`).
//!
//! An experiment, off unless asked for: `SDM_RELAY_TOUCH_KIB=K` makes the relay write one
//! byte in each 64-byte line of a private K KiB buffer (per thread) for every frame it
//! reads, to measure what the cache lines a wake-up touches cost a daemon.
//!
//! Another: `SDM_RELAY_EPOLL=1` relays on one thread waiting on `epoll` with non-blocking
//! sockets, the shape of a daemon that multiplexes its links without a runtime, instead of
//! blocking reads on a thread per direction.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::thread;

use sdm_bench::wire::{ACK_OP, FRAME, Frame, read_frame};

fn main() {
    if let Err(e) = run() {
        let pos = std::env::args().nth(1).unwrap_or_default();
        eprintln!("sdm-relay {pos}: {e}");
        std::process::exit(1);
    }
}

/// The `SDM_RELAY_TOUCH_KIB` buffer (empty unless asked for).
fn touch_buffer() -> Vec<u8> {
    let kib = std::env::var("SDM_RELAY_TOUCH_KIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    vec![0; kib * 1024]
}

/// Writes one byte in each cache line of `buf`.
fn touch(buf: &mut [u8]) {
    for line in buf.chunks_mut(64) {
        line[0] = line[0].wrapping_add(1);
    }
    std::hint::black_box(buf);
}

/// The k-th replies of all children (links keep order, so they are for the same op),
/// summed with this node's value.
struct Sum {
    op: Option<u64>,
    value: u64,
}

impl Sum {
    fn new(value: u64) -> Self {
        Self { op: None, value }
    }

    /// Adds one child's reply; an error if it is for another op than the others'.
    fn add(&mut self, f: Frame) -> io::Result<()> {
        if self.op.is_some_and(|o| o != f.op) {
            return Err(invalid(format!(
                "children out of step: ops {:?} and {}",
                self.op, f.op
            )));
        }
        self.op = Some(f.op);
        self.value = self.value.wrapping_add(f.value);
        Ok(())
    }

    /// The reply that goes up.
    fn frame(self) -> Frame {
        Frame {
            op: self.op.unwrap_or_default(),
            value: self.value,
        }
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn run() -> io::Result<()> {
    let pos = std::env::args()
        .nth(1)
        .ok_or_else(|| invalid("usage: sdm-relay POS".into()))?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    {
        let mut out = io::stdout().lock();
        writeln!(out, "RELAY-LISTEN {pos} {}", listener.local_addr()?.port())?;
        out.flush()?;
    }
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    let mut fields = line.split_whitespace();
    let value: u64 = fields
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| invalid(format!("bad table line {line:?}")))?;
    let lines = touch_buffer();
    let children = connect_children(fields)?;
    let (parent, _) = listener.accept()?;
    drop(listener);
    parent.set_nodelay(true)?;
    let mut up = parent.try_clone()?;
    let down = BufReader::with_capacity(64 * FRAME, parent);
    let mut replies = children
        .iter()
        .map(|c| Ok(BufReader::with_capacity(64 * FRAME, c.try_clone()?)))
        .collect::<io::Result<Vec<_>>>()?;
    ack_up(&mut replies, &mut up)?;

    if std::env::var_os("SDM_RELAY_EPOLL").is_some_and(|v| v == "1") {
        // The children's readers held only their acks (replies come after commands).
        if replies.iter().any(|r| !r.buffer().is_empty()) {
            return Err(invalid(
                "a child sent more than its ack before any command".into(),
            ));
        }
        drop(replies);
        return relay_epoll(down.into_inner(), up, children, value, lines);
    }
    if children.is_empty() {
        return leaf(down, up, value, lines);
    }
    relay(down, up, children, replies, value, lines)
}

/// Connects to the children at the ports the table line names.
fn connect_children<'a>(ports: impl Iterator<Item = &'a str>) -> io::Result<Vec<TcpStream>> {
    let mut children = Vec::new();
    for p in ports {
        let port: u16 = p
            .parse()
            .map_err(|_| invalid(format!("bad child port {p:?}")))?;
        let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| {
            io::Error::new(e.kind(), format!("connecting to child port {port}: {e}"))
        })?;
        s.set_nodelay(true)?;
        children.push(s);
    }
    Ok(children)
}

/// Start-up: every child acknowledges once its own subtree is connected; the sum goes up.
fn ack_up(replies: &mut [BufReader<TcpStream>], up: &mut TcpStream) -> io::Result<()> {
    let mut count = 1;
    for r in replies {
        match read_frame(r)? {
            Some(f) if f.op == ACK_OP => count += f.value,
            other => return Err(invalid(format!("expected a child's ack, got {other:?}"))),
        }
    }
    up.write_all(
        &Frame {
            op: ACK_OP,
            value: count,
        }
        .encode(),
    )
}

/// A leaf answers each frame with its own value.
fn leaf(
    mut down: BufReader<TcpStream>,
    mut up: TcpStream,
    value: u64,
    mut lines: Vec<u8>,
) -> io::Result<()> {
    let mut out = Vec::with_capacity(64 * FRAME);
    while let Some(f) = read_frame(&mut down)? {
        touch(&mut lines);
        Frame { op: f.op, value }.put(&mut out);
        if down.buffer().len() < FRAME {
            up.write_all(&out)?;
            out.clear();
        }
    }
    Ok(())
}

/// An interior relay: frames from the parent go to every child on this thread; a thread
/// of its own sums one reply of each child with this relay's value and sends it up.
fn relay(
    mut down: BufReader<TcpStream>,
    mut up: TcpStream,
    mut children: Vec<TcpStream>,
    mut replies: Vec<BufReader<TcpStream>>,
    value: u64,
    mut lines: Vec<u8>,
) -> io::Result<()> {
    let mut up_lines = lines.clone();
    let upward = thread::spawn(move || -> io::Result<()> {
        let mut out = Vec::with_capacity(64 * FRAME);
        loop {
            touch(&mut up_lines);
            let mut sum = Sum::new(value);
            for r in &mut replies {
                let Some(f) = read_frame(r)? else {
                    return Ok(());
                };
                sum.add(f)?;
            }
            sum.frame().put(&mut out);
            if replies.iter().any(|r| r.buffer().len() < FRAME) {
                up.write_all(&out)?;
                out.clear();
            }
        }
    });

    let mut batch = Vec::with_capacity(64 * FRAME);
    while let Some(f) = read_frame(&mut down)? {
        touch(&mut lines);
        f.put(&mut batch);
        if down.buffer().len() < FRAME {
            for c in &mut children {
                c.write_all(&batch)?;
            }
            batch.clear();
        }
    }
    // The parent closed: close the children's links so the tree unwinds.
    for c in &children {
        let _ = c.shutdown(Shutdown::Write);
    }
    upward
        .join()
        .map_err(|_| invalid("the upward thread panicked".into()))?
}

fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<bool> {
    let mut chunk = [0u8; 64 * FRAME];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if n < chunk.len() {
                    return Ok(true);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes all of `b` to a non-blocking socket (a full socket buffer is waited out).
fn send(s: &mut TcpStream, mut b: &[u8]) -> io::Result<()> {
    while !b.is_empty() {
        match s.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::yield_now(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Hands each whole frame at the front of `buf` to `each`, then removes them (no list of
/// them in between: this runs per wake-up).
fn take_frames(buf: &mut Vec<u8>, mut each: impl FnMut(Frame)) -> io::Result<()> {
    let whole = buf.len() / FRAME * FRAME;
    for b in buf[..whole].chunks_exact(FRAME) {
        each(Frame::decode(b.try_into().expect("chunks of FRAME bytes"))?);
    }
    buf.drain(..whole);
    Ok(())
}

/// `epoll_ctl(op)` of `fd`, with the link's index as its tag.
fn ctl(ep: i32, op: i32, fd: i32, tag: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: tag,
    };
    // SAFETY: `ev` outlives the call; the kernel copies it.
    if unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The relay loop on one thread: `epoll_wait`, then read whatever link woke it. Tag 0 is
/// the parent; tag `i + 1` is child `i`. Frames from the parent go to every child at once
/// (a leaf answers them); the k-th replies of all children go up as soon as each child's
/// has arrived.
fn relay_epoll(
    mut parent: TcpStream,
    mut up: TcpStream,
    mut children: Vec<TcpStream>,
    value: u64,
    mut lines: Vec<u8>,
) -> io::Result<()> {
    parent.set_nonblocking(true)?;
    for c in &children {
        c.set_nonblocking(true)?;
    }
    // SAFETY: no pointers; the result is checked.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(io::Error::last_os_error());
    }
    ctl(ep, libc::EPOLL_CTL_ADD, parent.as_raw_fd(), 0)?;
    for (i, c) in children.iter().enumerate() {
        ctl(ep, libc::EPOLL_CTL_ADD, c.as_raw_fd(), i as u64 + 1)?;
    }
    let mut from_parent = Vec::new();
    let mut from_child = vec![Vec::new(); children.len()];
    let mut replies = vec![VecDeque::new(); children.len()];
    let mut out = Vec::with_capacity(64 * FRAME);
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    let mut parent_open = true;
    let mut children_open = children.len();
    while parent_open || children_open > 0 {
        // SAFETY: `events` holds as many entries as the call is told.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for ev in &events[..n as usize] {
            touch(&mut lines);
            let tag = ev.u64 as usize;
            out.clear();
            if tag == 0 {
                let open = fill(&mut parent, &mut from_parent)?;
                // A leaf answers each frame; a node passes them on to every child.
                let leaf = children.is_empty();
                take_frames(&mut from_parent, |f| {
                    let f = if leaf { Frame { op: f.op, value } } else { f };
                    f.put(&mut out);
                })?;
                if leaf {
                    send(&mut up, &out)?;
                } else if !out.is_empty() {
                    for c in &mut children {
                        send(c, &out)?;
                    }
                }
                if !open {
                    parent_open = false;
                    ctl(ep, libc::EPOLL_CTL_DEL, parent.as_raw_fd(), 0)?;
                    for c in &children {
                        let _ = c.shutdown(Shutdown::Write);
                    }
                }
            } else {
                let i = tag - 1;
                let open = fill(&mut children[i], &mut from_child[i])?;
                take_frames(&mut from_child[i], |f| replies[i].push_back(f))?;
                while replies.iter().all(|q| !q.is_empty()) {
                    let mut sum = Sum::new(value);
                    for q in &mut replies {
                        sum.add(q.pop_front().expect("not empty"))?;
                    }
                    sum.frame().put(&mut out);
                }
                if !out.is_empty() && parent_open {
                    send(&mut up, &out)?;
                }
                if !open {
                    children_open -= 1;
                    ctl(ep, libc::EPOLL_CTL_DEL, children[i].as_raw_fd(), 0)?;
                }
            }
        }
    }
    // SAFETY: `ep` is this function's descriptor, closed once.
    unsafe { libc::close(ep) };
    Ok(())
}
