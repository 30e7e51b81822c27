//! The symbolic backend of the monitor: a gdb driven through GDB/MI (as the PTP SDM drove it),
//! one gdb per monitored process, and a typed parser of the MI output records gdb sends.
//!
//! [`parse_record`] reads one line of MI output into a [`Record`] (result, async, stream or
//! prompt), its values as [`MiValue`] (c-strings, tuples, lists). [`Gdb`] runs `gdb
//! --interpreter=mi3` on pipes: [`Gdb::command`] sends one command and waits for its
//! result record, keeping the async records that arrive meanwhile (a `*stopped` of the
//! process) for [`Gdb::take_stops`] and [`Gdb::wait_stopped`].
//!
//! # Why gdb over MI, not native DWARF evaluation
//!
//! Expressions in C, C++, Fortran and Rust with gdb's own printing of structs and arrays,
//! conditions on breakpoints, stepping over inlined and optimized code (`-O2` location lists,
//! `<optimized out>`), `finish` with the returned value and hardware watchpoints are each a
//! large piece of a debugger; gdb has them and MI is its stable machine interface (the seed's
//! SDM drove it the same way). A gdb costs about 60 MB and a few hundred ms to attach, so it
//! is only started on a process when a symbolic command first needs it: stop, cont, kill,
//! memory, registers and stacks stay on the native ptrace monitor at any scale until then.
//! Replies carry no addresses or pids, so ranks in the same state reply the same bytes and
//! merge in the tree whichever backend answered.

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A value in MI output: a c-string, a tuple `{a="1",b={…}}` or a list `[…]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MiValue {
    /// A c-string, unescaped.
    Const(String),
    /// A tuple of named values, in order.
    Tuple(Vec<(String, MiValue)>),
    /// A list of values; a list of results `[frame={…},frame={…}]` holds each result as a
    /// one-element tuple.
    List(Vec<MiValue>),
}

impl MiValue {
    /// The value named `key`, if this is a tuple that has one (or a one-element tuple
    /// holding it, as the items of a list of results are).
    pub fn get(&self, key: &str) -> Option<&MiValue> {
        match self {
            MiValue::Tuple(items) => items.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The c-string named `key` in this tuple.
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.get(key) {
            Some(MiValue::Const(s)) => Some(s),
            _ => None,
        }
    }

    /// The items of a list (empty for anything else).
    pub fn items(&self) -> &[MiValue] {
        match self {
            MiValue::List(v) => v,
            _ => &[],
        }
    }
}

/// The kind of an async record: `*` exec, `+` status, `=` notify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncKind {
    /// `*`: the target's execution state changed (`running`, `stopped`).
    Exec,
    /// `+`: progress of a slow operation.
    Status,
    /// `=`: other notifications (threads, libraries, breakpoints).
    Notify,
}

/// One line of MI output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// `TOKEN^class,results`: the answer to the command with that token.
    Result {
        /// The command's token, if it had one.
        token: Option<u64>,
        /// `done`, `running`, `connected`, `error` or `exit`.
        class: String,
        /// The named results, as a tuple.
        results: MiValue,
    },
    /// `*stopped,…`, `=thread-created,…`…
    Async {
        /// Exec, status or notify.
        kind: AsyncKind,
        /// The token of the command that caused it, if any.
        token: Option<u64>,
        /// `stopped`, `running`, `thread-created`…
        class: String,
        /// The named results, as a tuple.
        results: MiValue,
    },
    /// `~"text"` (console), `@"text"` (target), `&"text"` (log), unescaped.
    Stream {
        /// `~`, `@` or `&`.
        kind: char,
        /// The text.
        text: String,
    },
    /// `(gdb)`: gdb waits for the next command.
    Prompt,
}

/// Why a line of MI output could not be read: where, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MI output column {column}: {what}")]
pub struct MiError {
    /// 1-based column of the problem.
    pub column: usize,
    /// What was expected there.
    pub what: String,
}

struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn fail<T>(&self, what: &str) -> Result<T, MiError> {
        Err(MiError {
            column: self.pos + 1,
            what: what.to_owned(),
        })
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), MiError> {
        if self.eat(c) {
            Ok(())
        } else {
            self.fail(&format!("expected {:?}", c as char))
        }
    }

    fn token(&mut self) -> Option<u64> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        std::str::from_utf8(&self.s[start..self.pos])
            .ok()
            .and_then(|t| t.parse().ok())
    }

    /// A variable or class name: up to `=`, `,`, or the end.
    fn name(&mut self) -> Result<String, MiError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| !matches!(c, b'=' | b',' | b'{' | b'}' | b'[' | b']' | b'"'))
        {
            self.pos += 1;
        }
        if start == self.pos {
            return self.fail("expected a name");
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.pos]).into_owned())
    }

    fn cstring(&mut self) -> Result<String, MiError> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None => return self.fail("unterminated string"),
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let c = match self.peek() {
                        Some(b'n') => b'\n',
                        Some(b't') => b'\t',
                        Some(b'r') => b'\r',
                        Some(c @ b'0'..=b'7') => {
                            // Octal escape, up to three digits.
                            let mut v: u32 = u32::from(c - b'0');
                            for _ in 0..2 {
                                match self.s.get(self.pos + 1) {
                                    Some(d @ b'0'..=b'7') => {
                                        v = v * 8 + u32::from(d - b'0');
                                        self.pos += 1;
                                    }
                                    _ => break,
                                }
                            }
                            v as u8
                        }
                        Some(c) => c,
                        None => return self.fail("unterminated escape"),
                    };
                    out.push(c);
                    self.pos += 1;
                }
                Some(c) => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    fn value(&mut self) -> Result<MiValue, MiError> {
        match self.peek() {
            Some(b'"') => Ok(MiValue::Const(self.cstring()?)),
            Some(b'{') => {
                self.pos += 1;
                let items = self.results(b'}')?;
                self.expect(b'}')?;
                Ok(MiValue::Tuple(items))
            }
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                while !self.eat(b']') {
                    if !items.is_empty() {
                        self.expect(b',')?;
                    }
                    if matches!(self.peek(), Some(b'"' | b'{' | b'[')) {
                        items.push(self.value()?);
                    } else {
                        let name = self.name()?;
                        self.expect(b'=')?;
                        items.push(MiValue::Tuple(vec![(name, self.value()?)]));
                    }
                }
                Ok(MiValue::List(items))
            }
            _ => self.fail("expected a value: \"…\", {…} or […]"),
        }
    }

    /// `name=value` pairs separated by commas, up to `end` (not consumed) or the line's end.
    fn results(&mut self, end: u8) -> Result<Vec<(String, MiValue)>, MiError> {
        let mut items = Vec::new();
        while self.peek().is_some() && self.peek() != Some(end) {
            if !items.is_empty() {
                self.expect(b',')?;
            }
            let name = self.name()?;
            self.expect(b'=')?;
            items.push((name, self.value()?));
        }
        Ok(items)
    }
}

/// Reads one line of MI output (without its line end).
pub fn parse_record(line: &str) -> Result<Record, MiError> {
    let line = line.trim_end_matches(['\r', '\n']);
    if line.trim_end() == "(gdb)" {
        return Ok(Record::Prompt);
    }
    let mut c = Cursor {
        s: line.as_bytes(),
        pos: 0,
    };
    let token = c.token();
    let kind = c.peek();
    match kind {
        Some(k @ (b'~' | b'@' | b'&')) if token.is_none() => {
            c.pos += 1;
            let text = c.cstring()?;
            Ok(Record::Stream {
                kind: k as char,
                text,
            })
        }
        Some(k @ (b'^' | b'*' | b'+' | b'=')) => {
            c.pos += 1;
            let class = c.name()?;
            let mut results = Vec::new();
            if c.eat(b',') {
                results = c.results(0)?;
            }
            if c.peek().is_some() {
                return c.fail("unexpected text after the results");
            }
            let results = MiValue::Tuple(results);
            Ok(match k {
                b'^' => Record::Result {
                    token,
                    class,
                    results,
                },
                _ => Record::Async {
                    kind: match k {
                        b'*' => AsyncKind::Exec,
                        b'+' => AsyncKind::Status,
                        _ => AsyncKind::Notify,
                    },
                    token,
                    class,
                    results,
                },
            })
        }
        _ => c.fail("expected a record: ^, *, +, =, ~, @, & or (gdb)"),
    }
}

/// What a command answered: its results and the console text gdb printed for it.
#[derive(Debug, Clone)]
pub struct Done {
    /// `done`, `running`, `connected` or `exit`.
    pub class: String,
    /// The named results, as a tuple.
    pub results: MiValue,
    /// The console stream (`~`) printed while the command ran.
    pub console: String,
}

/// Why a gdb command failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GdbError {
    /// gdb answered `^error` with this message.
    #[error("{0}")]
    Command(String),
    /// gdb could not be started, or its pipe broke (it ended).
    #[error("gdb: {0}")]
    Gone(String),
    /// No answer within the time given.
    #[error("gdb did not answer {command:?} within {secs} s")]
    Timeout {
        /// The command.
        command: String,
        /// The time waited.
        secs: u64,
    },
}

/// How long a starting gdb may take to answer (hundreds start at once when a symbolic
/// command first goes to every rank of a large job on a few cores).
const START_PATIENCE: Duration = Duration::from_secs(240);

/// One gdb in MI mode over pipes (killed when dropped).
pub struct Gdb {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    next_token: u64,
    /// Async exec records (`*stopped`, `*running`) not yet taken.
    pending: VecDeque<Record>,
}

impl std::fmt::Debug for Gdb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gdb")
            .field("pid", &self.child.id())
            .finish()
    }
}

impl Gdb {
    /// Starts `gdb --interpreter=mi3 -nx -q` (no init files), asynchronous MI (commands
    /// are read while the target runs), no debuginfod, no confirmation questions.
    pub fn start() -> Result<Self, GdbError> {
        let mut child = Command::new("gdb")
            .args(["--interpreter=mi3", "-nx", "-q"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| GdbError::Gone(format!("cannot start gdb: {e} (is gdb installed?)")))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("sdm-gdb".into())
            .spawn(move || {
                for line in std::io::BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    tracing::trace!("gdb> {line}");
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| GdbError::Gone(format!("cannot start gdb's reader: {e}")))?;
        let mut g = Self {
            child,
            stdin,
            lines: rx,
            next_token: 1,
            pending: VecDeque::new(),
        };
        for setting in [
            "-gdb-set mi-async on",
            "-gdb-set confirm off",
            "-gdb-set pagination off",
            "-gdb-set width 0",
            "-gdb-set debuginfod enabled off",
        ] {
            g.command(setting, START_PATIENCE)?;
        }
        Ok(g)
    }

    /// gdb's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `command` and waits at most `patience` for its result record; async exec
    /// records that arrive meanwhile are kept for [`Gdb::take_stops`].
    pub fn command(&mut self, command: &str, patience: Duration) -> Result<Done, GdbError> {
        let token = self.next_token;
        self.next_token += 1;
        writeln!(self.stdin, "{token}{command}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| GdbError::Gone(format!("writing to gdb: {e}")))?;
        let deadline = Instant::now() + patience;
        let mut console = String::new();
        loop {
            let rec = self
                .next_record(deadline)
                .ok_or_else(|| GdbError::Timeout {
                    command: command.to_owned(),
                    secs: patience.as_secs(),
                })??;
            match rec {
                Record::Result {
                    token: Some(t),
                    class,
                    results,
                } if t == token => {
                    if class == "error" {
                        let msg = results.str("msg").unwrap_or("error").to_owned();
                        return Err(GdbError::Command(msg));
                    }
                    return Ok(Done {
                        class,
                        results,
                        console,
                    });
                }
                Record::Stream { kind: '~', text } => console.push_str(&text),
                r @ Record::Async {
                    kind: AsyncKind::Exec,
                    ..
                } => self.pending.push_back(r),
                _ => {}
            }
        }
    }

    /// The next record, waiting until `deadline`; `None` when the deadline passed, an
    /// error when gdb ended.
    fn next_record(&mut self, deadline: Instant) -> Option<Result<Record, GdbError>> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => match parse_record(&line) {
                    Ok(r) => return Some(Ok(r)),
                    // Not MI (the target's own output on a shared terminal): skipped.
                    Err(_) => continue,
                },
                Err(mpsc::RecvTimeoutError::Timeout) => return None,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Some(Err(GdbError::Gone("gdb ended".into())));
                }
            }
        }
    }

    /// The results of the `*stopped` records received so far (oldest first), without
    /// waiting; records still unread are read first.
    pub fn take_stops(&mut self) -> Vec<MiValue> {
        while let Some(Ok(r)) = self.next_record(Instant::now()) {
            if let Record::Async {
                kind: AsyncKind::Exec,
                ..
            } = r
            {
                self.pending.push_back(r);
            }
        }
        let mut out = Vec::new();
        for r in std::mem::take(&mut self.pending) {
            if let Record::Async { class, results, .. } = r
                && class == "stopped"
            {
                out.push(results);
            }
        }
        out
    }

    /// Waits at most `patience` for the next `*stopped` record and returns its results.
    pub fn wait_stopped(&mut self, patience: Duration) -> Result<Option<MiValue>, GdbError> {
        let deadline = Instant::now() + patience;
        loop {
            while let Some(r) = self.pending.pop_front() {
                if let Record::Async { class, results, .. } = r
                    && class == "stopped"
                {
                    return Ok(Some(results));
                }
            }
            match self.next_record(deadline) {
                None => return Ok(None),
                Some(Err(e)) => return Err(e),
                Some(Ok(
                    r @ Record::Async {
                        kind: AsyncKind::Exec,
                        ..
                    },
                )) => self.pending.push_back(r),
                Some(Ok(_)) => {}
            }
        }
    }
}

impl Drop for Gdb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a stopped frame stands, `prog.c:42 in relax()`, from an MI frame tuple (the
/// file's name as compiled; the function alone, or its address, without line information).
pub fn frame_place(frame: &MiValue) -> String {
    let func = frame.str("func").unwrap_or("??");
    match (frame.str("file"), frame.str("line")) {
        (Some(file), Some(line)) => {
            let file = file.rsplit('/').next().unwrap_or(file);
            format!("{file}:{line} in {func}()")
        }
        _ => match frame.str("from") {
            Some(lib) => {
                let lib = lib.rsplit('/').next().unwrap_or(lib);
                format!("{func}() from {lib}")
            }
            None => format!("{func}()"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_records_with_tuples_and_lists_of_results() {
        let r = parse_record(
            r#"6^done,stack=[frame={level="0",addr="0x1",func="work",file="p.c",line="5"},frame={level="1",func="main",file="p.c",line="6"}]"#,
        )
        .unwrap();
        let Record::Result {
            token,
            class,
            results,
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!((token, class.as_str()), (Some(6), "done"));
        let frames = results.get("stack").unwrap().items();
        assert_eq!(frames.len(), 2);
        let f1 = frames[1].get("frame").unwrap();
        assert_eq!(f1.str("func"), Some("main"));
        assert_eq!(frame_place(f1), "p.c:6 in main()");
    }

    #[test]
    fn values_keep_gdbs_printing_and_escapes_are_undone() {
        assert_eq!(
            parse_record(r#"4^done,value="{x = 3, y = 2.5}""#).unwrap(),
            Record::Result {
                token: Some(4),
                class: "done".into(),
                results: MiValue::Tuple(vec![(
                    "value".into(),
                    MiValue::Const("{x = 3, y = 2.5}".into())
                )]),
            }
        );
        let e = parse_record(r#"8^error,msg="No symbol \"nosuch\" in current context.""#).unwrap();
        let Record::Result { results, .. } = e else {
            panic!()
        };
        assert_eq!(
            results.str("msg"),
            Some("No symbol \"nosuch\" in current context.")
        );
        assert_eq!(
            parse_record(r#"~"1\tint a;\n\101""#).unwrap(),
            Record::Stream {
                kind: '~',
                text: "1\tint a;\nA".into()
            }
        );
        assert_eq!(parse_record("(gdb) ").unwrap(), Record::Prompt);
    }

    #[test]
    fn async_records_of_a_breakpoint_hit() {
        let r = parse_record(
            r#"*stopped,reason="breakpoint-hit",disp="keep",bkptno="1",frame={addr="0x000055d10556d140",func="work",args=[{name="i",value="1"}],file="p.c",fullname="/tmp/mi/p.c",line="5",arch="i386:x86-64"},thread-id="1",stopped-threads="all",core="0""#,
        )
        .unwrap();
        let Record::Async {
            kind,
            class,
            results,
            ..
        } = r
        else {
            panic!()
        };
        assert_eq!((kind, class.as_str()), (AsyncKind::Exec, "stopped"));
        assert_eq!(results.str("bkptno"), Some("1"));
        let frame = results.get("frame").unwrap();
        assert_eq!(frame.get("args").unwrap().items().len(), 1);
        assert_eq!(frame_place(frame), "p.c:5 in work()");
        assert!(matches!(
            parse_record(r#"=thread-group-added,id="i1""#).unwrap(),
            Record::Async {
                kind: AsyncKind::Notify,
                ..
            }
        ));
        assert!(matches!(
            parse_record("9^running").unwrap(),
            Record::Result { token: Some(9), .. }
        ));
        let lib = MiValue::Tuple(vec![
            ("func".into(), MiValue::Const("__sleep".into())),
            ("from".into(), MiValue::Const("/lib/libc.so.6".into())),
        ]);
        assert_eq!(frame_place(&lib), "__sleep() from libc.so.6");
    }

    #[test]
    fn bad_lines_name_the_column() {
        let e = parse_record(r#"1^done,value="open"#).unwrap_err();
        assert_eq!(e.column, 19, "{e}");
        let e = parse_record("hello").unwrap_err();
        assert_eq!(e.column, 1);
        assert!(parse_record(r#"1^done,x={a="1""#).is_err());
        assert!(parse_record(r#"1^done,x="1"junk"#).is_err());
    }
}
