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
//! reads, to measure what the cache lines a wake-up touches cost (BENCHMARKS.md, "Per-hop
//! cost, sixth pass").

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
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
    let mut lines = touch_buffer();
    let mut children = Vec::new();
    for p in fields {
        let port: u16 = p
            .parse()
            .map_err(|_| invalid(format!("bad child port {p:?}")))?;
        let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| {
            io::Error::new(e.kind(), format!("connecting to child port {port}: {e}"))
        })?;
        s.set_nodelay(true)?;
        children.push(s);
    }
    let (parent, _) = listener.accept()?;
    drop(listener);
    parent.set_nodelay(true)?;
    let mut up = parent.try_clone()?;
    let mut down = BufReader::with_capacity(64 * FRAME, parent);
    let mut replies = children
        .iter()
        .map(|c| Ok(BufReader::with_capacity(64 * FRAME, c.try_clone()?)))
        .collect::<io::Result<Vec<_>>>()?;

    // Start-up: every child acknowledges once its own subtree is connected.
    let mut count = 1;
    for r in &mut replies {
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
    )?;

    if children.is_empty() {
        // A leaf answers each frame with its own value.
        let mut out = Vec::with_capacity(64 * FRAME);
        while let Some(f) = read_frame(&mut down)? {
            touch(&mut lines);
            Frame { op: f.op, value }.put(&mut out);
            if down.buffer().len() < FRAME {
                up.write_all(&out)?;
                out.clear();
            }
        }
        return Ok(());
    }

    let mut up_lines = lines.clone();
    let upward = thread::spawn(move || -> io::Result<()> {
        let mut out = Vec::with_capacity(64 * FRAME);
        loop {
            touch(&mut up_lines);
            let mut sum = value;
            let mut op = None;
            for r in &mut replies {
                let Some(f) = read_frame(r)? else {
                    return Ok(());
                };
                if op.is_some_and(|o| o != f.op) {
                    return Err(invalid(format!(
                        "children out of step: ops {op:?} and {}",
                        f.op
                    )));
                }
                op = Some(f.op);
                sum = sum.wrapping_add(f.value);
            }
            Frame {
                op: op.unwrap_or_default(),
                value: sum,
            }
            .put(&mut out);
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
