//! I/O forwarding for tools built on [`Session`](crate::Session): handlers for the programs' standard output,
//! standard error and events, in the spirit of the SDM's `sdm_iof_set_stdout_handler` /
//! `sdm_iof_set_stderr_handler`, and standard input to an id-set
//! ([`Handle::write_stdin`]).
//!
//! Output arrives as lines tagged with the ranks that printed them and their index in each
//! rank's stream; the identical k-th lines of all ranks are merged into one (an [`Aligner`],
//! the same the console uses: each rank's order is kept, an event never passes its ranks'
//! output, and the merge does not depend on timing), then handed to the handler of their
//! stream.
//!
//! ```no_run
//! # async fn demo(session: sdm_client::session::Session) -> anyhow::Result<()> {
//! use std::time::Duration;
//! let mut iof = sdm_client::iof::Iof::new(session.all(), Duration::from_secs(5));
//! iof.set_stdout_handler(|ranks, line| println!("{ranks}: {}", String::from_utf8_lossy(line)));
//! iof.set_stderr_handler(|ranks, line| eprintln!("{ranks}! {}", String::from_utf8_lossy(line)));
//! session.write_stdin(&session.all(), b"input\n", true).await?;
//! let until = tokio::time::Instant::now() + Duration::from_secs(5);
//! session.pump_stdio(&mut iof, until).await?;
//! iof.flush();
//! # Ok(()) }
//! ```

use std::time::{Duration, Instant};

use sdm_overlay::stdio::{STDERR, STDOUT, StdioLine, idle_stream};
use sdm_overlay::template;
use sdm_proto::{IdSet, Kind, Message};

use crate::align::Aligner;
use crate::error::{Error, Result};
use crate::link::Handle;

/// Called with the ranks that printed a line and the line (without its newline).
pub type LineHandler = Box<dyn FnMut(&IdSet, &[u8]) + Send>;

/// Called with the ranks an event came from and its text.
pub type EventHandler = Box<dyn FnMut(&IdSet, &str) + Send>;

/// Stdio handlers and the aligning buffer in front of them.
pub struct Iof {
    buffer: Aligner,
    /// Output lines taken from the tree (before the aligner merges them; idle markers
    /// and events not counted) and their payloads' bytes.
    received: (u64, u64),
    stdout: LineHandler,
    stderr: LineHandler,
    event: EventHandler,
}

impl Iof {
    /// Handlers that print `[ranks] line` to this process's stdout and stderr (events to
    /// stdout), merging the identical k-th lines of `ranks`: a line waits at most `lag` for
    /// the ranks that have not printed theirs (zero: no merging).
    pub fn new(ranks: IdSet, lag: Duration) -> Self {
        Self {
            buffer: Aligner::new(ranks, lag),
            received: (0, 0),
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
            index: m.op,
            payload: m.payload,
        };
        if line.kind == Kind::Stdio && idle_stream(&line).is_none() {
            self.received.0 += 1;
            self.received.1 += line.payload.len() as u64;
        }
        let now = Instant::now();
        let due = if exit_status(&line).is_some() {
            self.buffer.push_end(now, line)
        } else {
            self.buffer.push(now, line)
        };
        self.dispatch(due);
        None
    }

    /// How many output lines came from the tree (a line merged in the tree counts once,
    /// whatever its ranks) and their payloads' bytes.
    pub fn received(&self) -> (u64, u64) {
        self.received
    }

    /// `ranks` will print nothing more (their server was lost, their program never
    /// started): output stops waiting for them.
    pub fn end(&mut self, ranks: &IdSet) {
        let due = self.buffer.end(Instant::now(), ranks);
        self.dispatch(due);
    }

    /// Hands over the lines that are due (complete, or past the lag).
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
            if l.kind == Kind::Stdio && template::is_template(&l.payload) {
                let handler = match template::stream_of(&l.payload) {
                    STDERR => &mut self.stderr,
                    _ => &mut self.stdout,
                };
                for (ids, text) in template::lines(&l.payload, &l.sources) {
                    handler(&ids, text.as_bytes());
                }
                continue;
            }
            match (l.kind, l.payload.split_first()) {
                (Kind::Stdio, Some((&STDERR, text))) => (self.stderr)(&l.sources, text),
                (Kind::Stdio, Some((&STDOUT, text))) => (self.stdout)(&l.sources, text),
                (Kind::Stdio, _) => (self.stdout)(&l.sources, &l.payload),
                _ => (self.event)(&l.sources, &String::from_utf8_lossy(&l.payload)),
            }
        }
    }
}

// Here rather than in `link`, so that `link` does not import this module: stdio
// handling is built on the session, not the other way round.
impl Handle {
    /// Hands stdio and events to `iof`'s handlers as they arrive, until `until`; an error
    /// ([`crate::Error::is_closed`]) if the tree goes away first.
    pub async fn pump_stdio(&self, iof: &mut Iof, until: tokio::time::Instant) -> Result<()> {
        loop {
            let next = iof
                .deadline()
                .map_or(until, |d| until.min(tokio::time::Instant::from_std(d)));
            tokio::select! {
                () = tokio::time::sleep_until(next) => {
                    iof.tick();
                    if tokio::time::Instant::now() >= until {
                        return Ok(());
                    }
                }
                m = self.next_event() => match m {
                    Some(m) => drop(iof.handle(m)),
                    None => return Err(Error::closed(format!(
                        "the tree went away: {}",
                        self.closed_reason().unwrap_or_default()
                    ))),
                },
            }
        }
    }
}

/// How a program ended, as its server reports it in a `process_terminated` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramEnd {
    /// `process_terminated("exited",CODE)`: it exited with this status.
    Exited(i64),
    /// `process_terminated("killed","SIGNAME")`: a signal killed it.
    Killed(String),
}

impl ProgramEnd {
    /// The end an event text reports, or `None` if it is not a program's end.
    pub fn parse(text: &str) -> Option<Self> {
        // An event is a reply without request id and nodes.
        let r = sdm_omis::parse_reply(&format!("0 [] {text}"))
            .ok()?
            .0
            .into_iter()
            .next()?;
        if r.service != "process_terminated" {
            return None;
        }
        match r.results.as_slice() {
            [sdm_omis::Value::Str(how), sdm_omis::Value::Int(code)] if how == "exited" => {
                Some(Self::Exited(*code))
            }
            [sdm_omis::Value::Str(how), sdm_omis::Value::Str(sig)] if how == "killed" => {
                Some(Self::Killed(sig.clone()))
            }
            _ => None,
        }
    }

    /// The exit status a shell would report: the code, or 128+N for signal N (137 for a
    /// signal this table does not know).
    pub fn status(&self) -> i32 {
        match self {
            Self::Exited(c) => (*c & 0xff) as i32,
            Self::Killed(sig) => signal_number(sig).map_or(128 + 9, |s| 128 + s),
        }
    }
}

/// The exit status of a program's end event (`process_terminated("exited",3)`: 3;
/// `process_terminated("killed","SIGSEGV")`: 128+11), or `None` if `l` is not one.
pub fn exit_status(l: &StdioLine) -> Option<i32> {
    if l.kind != Kind::Event {
        return None;
    }
    ProgramEnd::parse(std::str::from_utf8(&l.payload).ok()?).map(|e| e.status())
}

/// The number of a Linux signal named like `SIGSEGV` (the monitor's spelling of a killing
/// signal).
fn signal_number(name: &str) -> Option<i32> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    let i = NAMES.iter().position(|n| *n == name)?;
    i32::try_from(i + 1).ok()
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
        let mut iof = Iof::new(IdSet::all(2), Duration::from_secs(5));
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
        // Both ranks ended: nothing is awaited any more, everything leaves in order.
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "out [0-1] hello",
                "err [1] oops",
                "ev [0-1] process_terminated(\"exited\",0)"
            ]
        );
    }

    #[test]
    fn exit_statuses_are_like_srun() {
        let ev = |text: &str| StdioLine {
            kind: Kind::Event,
            sources: IdSet::single(0),
            index: 0,
            payload: Bytes::copy_from_slice(text.as_bytes()),
        };
        assert_eq!(
            exit_status(&ev("process_terminated(\"exited\",3)")),
            Some(3)
        );
        assert_eq!(
            exit_status(&ev("process_terminated(\"killed\",\"SIGSEGV\")")),
            Some(139)
        );
        assert_eq!(exit_status(&ev("breakpoint(\"f\",0x10)")), None);
    }
}
