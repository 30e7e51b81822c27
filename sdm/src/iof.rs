//! I/O forwarding for tools built on [`Session`]: handlers for the programs' standard output,
//! standard error and events, in the spirit of the SDM's `sdm_iof_set_stdout_handler` /
//! `sdm_iof_set_stderr_handler`, and standard input to an id-set
//! ([`Session::write_stdin`]).
//!
//! Output arrives as lines tagged with the ranks that printed them; identical lines of many
//! ranks are merged within a window (the same [`Coalescer`] interior nodes use, so each
//! rank's order is kept and an event never passes its ranks' output), then handed to the
//! handler of their stream.
//!
//! ```no_run
//! # async fn demo(mut session: sdm::session::Session) -> anyhow::Result<()> {
//! use std::time::Duration;
//! let mut iof = sdm::iof::Iof::new(Duration::from_millis(200));
//! iof.set_stdout_handler(|ranks, line| println!("{ranks}: {}", String::from_utf8_lossy(line)));
//! iof.set_stderr_handler(|ranks, line| eprintln!("{ranks}! {}", String::from_utf8_lossy(line)));
//! session.write_stdin(&session.all(), b"input\n", true).await?;
//! let until = tokio::time::Instant::now() + Duration::from_secs(5);
//! session.pump_stdio(&mut iof, until).await?;
//! iof.flush();
//! # Ok(()) }
//! ```

use std::time::{Duration, Instant};

use sdm_overlay::coalesce::{Coalescer, StdioLine};
use sdm_proto::{IdSet, Kind, Message};

use crate::monitor::{STDERR, STDOUT};
#[cfg(doc)]
use crate::session::Session;

/// Called with the ranks that printed a line and the line (without its newline).
pub type LineHandler = Box<dyn FnMut(&IdSet, &[u8]) + Send>;

/// Called with the ranks an event came from and its text.
pub type EventHandler = Box<dyn FnMut(&IdSet, &str) + Send>;

/// Stdio handlers and the coalescing buffer in front of them.
pub struct Iof {
    buffer: Coalescer,
    stdout: LineHandler,
    stderr: LineHandler,
    event: EventHandler,
}

impl Iof {
    /// Handlers that print `[ranks] line` to this process's stdout and stderr (events to
    /// stdout), merging identical lines within `window` (zero: no merging).
    pub fn new(window: Duration) -> Self {
        Self {
            buffer: Coalescer::new(window),
            stdout: Box::new(|ids, l| println!("{ids} {}", String::from_utf8_lossy(l))),
            stderr: Box::new(|ids, l| eprintln!("{ids} {}", String::from_utf8_lossy(l))),
            event: Box::new(|ids, e| println!("{ids} event {e}")),
        }
    }

    /// Sets the standard output handler.
    pub fn set_stdout_handler(
        &mut self,
        f: impl FnMut(&IdSet, &[u8]) + Send + 'static,
    ) -> &mut Self {
        self.stdout = Box::new(f);
        self
    }

    /// Sets the standard error handler.
    pub fn set_stderr_handler(
        &mut self,
        f: impl FnMut(&IdSet, &[u8]) + Send + 'static,
    ) -> &mut Self {
        self.stderr = Box::new(f);
        self
    }

    /// Sets the event handler (program exits, breakpoint hits, replies of event actions).
    pub fn set_event_handler(&mut self, f: impl FnMut(&IdSet, &str) + Send + 'static) -> &mut Self {
        self.event = Box::new(f);
        self
    }

    /// Takes one message from the tree: stdio and events are buffered and whatever is due
    /// is handed to the handlers; returns the message back if it is neither.
    pub fn handle(&mut self, m: Message) -> Option<Message> {
        if !matches!(m.kind, Kind::Stdio | Kind::Event) {
            return Some(m);
        }
        let line = StdioLine {
            kind: m.kind,
            sources: m.source,
            payload: m.payload,
        };
        let now = Instant::now();
        let due = self.buffer.push(now, line);
        self.dispatch(due);
        let due = self.buffer.expire(now);
        self.dispatch(due);
        None
    }

    /// Hands over the lines whose window has passed.
    pub fn tick(&mut self) {
        let due = self.buffer.expire(Instant::now());
        self.dispatch(due);
    }

    /// Hands over everything buffered.
    pub fn flush(&mut self) {
        let all = self.buffer.drain();
        self.dispatch(all);
    }

    /// When [`Iof::tick`] next has something to hand over.
    pub fn deadline(&self) -> Option<Instant> {
        self.buffer.deadline()
    }

    fn dispatch(&mut self, lines: Vec<StdioLine>) {
        for l in lines {
            match (l.kind, l.payload.split_first()) {
                (Kind::Stdio, Some((&STDERR, text))) => (self.stderr)(&l.sources, text),
                (Kind::Stdio, Some((&STDOUT, text))) => (self.stdout)(&l.sources, text),
                (Kind::Stdio, _) => (self.stdout)(&l.sources, &l.payload),
                _ => (self.event)(&l.sources, &String::from_utf8_lossy(&l.payload)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use sdm_proto::Status;

    use super::*;

    fn msg(kind: Kind, ids: &str, payload: &[u8]) -> Message {
        let mut m = Message::reply(
            0,
            ids.parse().unwrap(),
            Status::Replied,
            Bytes::copy_from_slice(payload),
        );
        m.kind = kind;
        m
    }

    #[test]
    fn handlers_get_merged_lines_per_stream_and_events_after_output() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut iof = Iof::new(Duration::from_millis(50));
        let (a, b, c) = (seen.clone(), seen.clone(), seen.clone());
        iof.set_stdout_handler(move |ids, l| {
            a.lock()
                .unwrap()
                .push(format!("out {ids} {}", String::from_utf8_lossy(l)))
        })
        .set_stderr_handler(move |ids, l| {
            b.lock()
                .unwrap()
                .push(format!("err {ids} {}", String::from_utf8_lossy(l)))
        })
        .set_event_handler(move |ids, e| c.lock().unwrap().push(format!("ev {ids} {e}")));
        assert!(iof.handle(msg(Kind::Stdio, "[0]", b"\x01hello")).is_none());
        assert!(iof.handle(msg(Kind::Stdio, "[1]", b"\x01hello")).is_none());
        assert!(iof.handle(msg(Kind::Stdio, "[1]", b"\x02oops")).is_none());
        assert!(
            iof.handle(msg(
                Kind::Event,
                "[0-1]",
                b"process_terminated(\"exited\",0)"
            ))
            .is_none()
        );
        assert!(
            iof.handle(msg(Kind::Reply, "[0]", b"x")).is_some(),
            "replies are not stdio"
        );
        assert!(seen.lock().unwrap().is_empty(), "held for the window");
        iof.flush();
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "out [0-1] hello",
                "err [1] oops",
                "ev [0-1] process_terminated(\"exited\",0)"
            ]
        );
    }
}
