//! The interactive console's terminal output, written on a thread of its own, so printing
//! never blocks the command loop.
//!
//! The console queues its output here ([`Screen::writer`]) and goes on at once; a writer
//! thread hands it to the terminal in order: through the line editor's external printer
//! (output above the prompt), else straight to stdout or stderr. rustyline's printer
//! hands a line to the editor through a one-slot channel that only a running `readline`
//! drains, so a print made as `readline` returns waits until the next `readline`: it
//! is this thread that waits then, while the command loop runs the command that was typed
//! (whose end starts the next `readline`). What the terminal cannot take is held, not
//! dropped: the console stops taking output from the tree while more than [`LIMIT`] bytes
//! wait here ([`Room`]), the tree's output credit stops, and the programs block
//! in `write`. A command's answer is queued whatever waits, never held.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Bytes of output waiting for the terminal past which the console takes no more output
/// from the tree; an answer waits behind at most about this much.
pub const LIMIT: usize = 128 * 1024;

/// The most bytes handed to the terminal at once (one message for the line editor, which
/// repaints its prompt once per message).
const BATCH: usize = 32 * 1024;

/// The line editor's printer: prints above the prompt while `readline` runs, straight to
/// the terminal otherwise.
pub type Printer = Box<dyn rustyline::ExternalPrinter + Send>;

/// Which stream a piece of output belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output: the programs' stdout, events, answers.
    Out,
    /// Standard error: the programs' stderr, the console's errors.
    Err,
}

/// What waits for the terminal.
#[derive(Default)]
struct Queue {
    chunks: VecDeque<(Stream, Vec<u8>)>,
    bytes: usize,
    /// No more output comes: the writer thread ends once the queue is empty.
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Output was queued, or the queue closed (for the writer thread).
    queued: Condvar,
    /// Output went to the terminal (for [`Screen::room`]).
    taken: tokio::sync::Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic elsewhere while holding the lock leaves the queue as it was: go on.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, stream: Stream, bytes: Vec<u8>) {
        if bytes.is_empty() {
            return;
        }
        let mut q = self.lock();
        q.bytes += bytes.len();
        match q.chunks.back_mut() {
            Some((s, last)) if *s == stream && last.len() + bytes.len() <= BATCH => {
                last.extend_from_slice(&bytes)
            }
            _ => q.chunks.push_back((stream, bytes)),
        }
        drop(q);
        self.queued.notify_one();
    }
}

/// The terminal's output queue and the thread writing it.
pub struct Screen {
    shared: Arc<Shared>,
    /// Says the writer thread has ended.
    ended: std::sync::mpsc::Receiver<()>,
}

impl Screen {
    /// Starts the writer thread, printing through `printer` where there is one (a line
    /// editor on a terminal), else straight to stdout and stderr.
    pub fn start(printer: Option<Printer>) -> Screen {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            queued: Condvar::new(),
            taken: tokio::sync::Notify::new(),
        });
        let (ended_tx, ended) = std::sync::mpsc::channel();
        let s = shared.clone();
        std::thread::spawn(move || {
            write_out(&s, printer);
            let _ = ended_tx.send(());
        });
        Screen { shared, ended }
    }

    /// A writer queuing whole lines for `stream` (a partial line waits for its end, or
    /// for `flush`). Writing never blocks.
    pub fn writer(&self, stream: Stream) -> ScreenWriter {
        ScreenWriter {
            shared: self.shared.clone(),
            stream,
            partial: Vec::new(),
        }
    }

    /// A handle to wait for room on this screen (see [`Room::wait`]).
    pub fn room(&self) -> Room {
        Room(self.shared.clone())
    }

    /// Closes the queue and waits, at most `patience`, for the writer thread to print what
    /// is left; whatever it has not taken by then is written straight out here.
    pub fn finish(self, patience: Duration) {
        self.shared.lock().closed = true;
        self.shared.queued.notify_one();
        if self.ended.recv_timeout(patience).is_ok() {
            return;
        }
        let left: Vec<(Stream, Vec<u8>)> = {
            let mut q = self.shared.lock();
            q.bytes = 0;
            q.chunks.drain(..).collect()
        };
        for (stream, bytes) in left {
            write_direct(stream, &bytes);
        }
    }
}

/// Waits for the terminal to take output: held by whatever takes output from the tree.
#[derive(Clone)]
pub struct Room(Arc<Shared>);

impl Room {
    /// Waits until less than [`LIMIT`] bytes wait for the terminal. Cancel-safe.
    pub async fn wait(&self) {
        loop {
            let taken = self.0.taken.notified();
            tokio::pin!(taken);
            // Registered before the check, so a batch taken in between still wakes us.
            taken.as_mut().enable();
            if self.0.lock().bytes < LIMIT {
                return;
            }
            taken.await;
        }
    }
}

/// The writer thread: takes what is queued, a batch of one stream at a time, and writes
/// it, until the queue is closed and empty.
fn write_out(shared: &Shared, mut printer: Option<Printer>) {
    use std::io::IsTerminal;
    // Errors go above the prompt too, unless they go elsewhere than the terminal.
    let err_to_printer = std::io::stderr().is_terminal();
    loop {
        let (stream, bytes) = {
            let mut q = shared.lock();
            loop {
                if let Some(c) = q.chunks.pop_front() {
                    q.bytes -= c.1.len();
                    break c;
                }
                if q.closed {
                    return;
                }
                q = shared.queued.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        shared.taken.notify_waiters();
        let printed = match printer.as_mut() {
            Some(p) if stream == Stream::Out || err_to_printer => {
                // Waits here while a `readline` that has returned leaves the message
                // undrained; fails once the editor is gone, and then the text goes out
                // straight.
                p.print(String::from_utf8_lossy(&bytes).into_owned())
                    .is_ok()
            }
            _ => false,
        };
        if !printed {
            write_direct(stream, &bytes);
        }
    }
}

/// Writes `bytes` to stdout or stderr and flushes it; a terminal or pipe that fails loses
/// it (there is nowhere to say so).
fn write_direct(stream: Stream, bytes: &[u8]) {
    let _ = match stream {
        Stream::Out => {
            let mut o = std::io::stdout().lock();
            o.write_all(bytes).and_then(|()| o.flush())
        }
        Stream::Err => std::io::stderr().write_all(bytes),
    };
}

/// A [`Write`] that queues whole lines on a [`Screen`].
pub struct ScreenWriter {
    shared: Arc<Shared>,
    stream: Stream,
    partial: Vec<u8>,
}

impl Write for ScreenWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match buf.iter().rposition(|&b| b == b'\n') {
            Some(i) => {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&buf[..=i]);
                self.shared.push(self.stream, line);
                self.partial.extend_from_slice(&buf[i + 1..]);
            }
            None => self.partial.extend_from_slice(buf),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let rest = std::mem::take(&mut self.partial);
        self.shared.push(self.stream, rest);
        Ok(())
    }
}

impl Drop for ScreenWriter {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A printer that records what it was given.
    struct Record(Arc<Mutex<Vec<String>>>);

    impl rustyline::ExternalPrinter for Record {
        fn print(&mut self, msg: String) -> rustyline::Result<()> {
            self.0.lock().unwrap().push(msg);
            Ok(())
        }
    }

    #[test]
    fn lines_reach_the_printer_whole_and_in_order() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let screen = Screen::start(Some(Box::new(Record(got.clone()))));
        let mut w = screen.writer(Stream::Out);
        for i in 0..1000 {
            write!(w, "line {i}").unwrap();
            writeln!(w).unwrap();
        }
        write!(w, "no newline").unwrap();
        drop(w);
        screen.finish(Duration::from_secs(60));
        let text: String = got.lock().unwrap().concat();
        let want: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text, format!("{want}no newline"));
        assert!(got.lock().unwrap().iter().all(|m| m.len() <= BATCH));
    }

    #[tokio::test]
    async fn room_waits_while_the_terminal_is_behind() {
        // A printer that blocks until released, as rustyline's does once readline returned.
        let (release, gate) = std::sync::mpsc::channel::<()>();
        struct Gate(std::sync::mpsc::Receiver<()>);
        impl rustyline::ExternalPrinter for Gate {
            fn print(&mut self, _: String) -> rustyline::Result<()> {
                let _ = self.0.recv();
                Ok(())
            }
        }
        let screen = Screen::start(Some(Box::new(Gate(gate))));
        let mut w = screen.writer(Stream::Out);
        let line = vec![b'x'; 1023];
        for _ in 0..(2 * LIMIT / 1024) {
            w.write_all(&line).unwrap();
            w.write_all(b"\n").unwrap();
        }
        // Writing did not block; the queue is over its limit until the printer moves.
        let room = screen.room();
        let waiting = tokio::time::timeout(Duration::from_millis(50), room.wait()).await;
        assert!(waiting.is_err(), "room while the terminal takes nothing");
        drop(release);
        room.wait().await;
        drop(w);
        screen.finish(Duration::from_secs(60));
    }
}
