//! The parallel debugger console of `sdm run`: commands (`stop`, `cont`, `status`, `bt`,
//! `break`, `info break`, `delete`, `kill`, `omis`, `sleep`, `help`, `quit`, and the
//! symbolic ones of `debug`: `print`, `step`, `next`, groups…; the table is in
//! [`crate::commands`]) become OMIS requests to id-sets; merged replies print with their
//! sender nodes in plain words ([`crate::words`]), stack traces as a STAT-like call-prefix
//! tree.

use std::io::Write;
use std::time::Duration;

use anyhow::anyhow;
use nix::sys::signal::Signal;
use sdm_overlay::frontend::ReplyGroup;
use sdm_proto::{IdSet, Message, Status, SyncMode};

use sdm_overlay::align::Aligner;
use sdm_overlay::coalesce::StdioLine;

use sdm_client::service;
use sdm_client::session::Session;
use sdm_omis::{ActionList, BasicReply, Nodes, Value, parse_reply, parse_request};
use sdm_overlay::coalesce::{STDERR, STDOUT};

mod debug;
mod threads;

/// How long one console command may take before its silent ids count as timed out.
const COMMAND_TIMEOUT_MS: u32 = 30_000;

/// The same for symbolic commands: the first one on a rank starts its gdb, and hundreds of
/// gdbs attaching at once on a few cores take longer than a plain command.
const SYMBOLIC_TIMEOUT_MS: u32 = 300_000;

/// While waiting for the programs' end, how often the servers of the ranks still running
/// are pinged, so a dead server cannot make the wait endless.
const LIVENESS_CHECK: Duration = Duration::from_secs(2);

/// At the end, how long the console waits for the next exit while programs are still
/// reported running (each exit that arrives starts the wait anew).
const DRAIN_PATIENCE: Duration = Duration::from_secs(10);

/// How long an output line waits for the same line of the ranks that have not printed
/// it yet, by default (see [`Aligner`]).
pub const DEFAULT_MERGE_LAG: Duration = Duration::from_secs(5);

/// The longest `sleep` (a day): longer ones are typing mistakes, and a bound keeps the
/// deadline's arithmetic from overflowing.
const MAX_SLEEP_SECS: f64 = 86_400.0;

/// `sleep SECONDS`'s duration: a number from 0 to [`MAX_SLEEP_SECS`], else an error
/// naming the bound.
fn sleep_duration(rest: &str) -> anyhow::Result<Duration> {
    let secs: f64 = rest
        .parse()
        .map_err(|_| anyhow!("sleep: {rest:?} is not a number of seconds"))?;
    if !(0.0..=MAX_SLEEP_SECS).contains(&secs) {
        anyhow::bail!("sleep: {rest} seconds is out of range: 0 to {MAX_SLEEP_SECS} (a day)");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// How a console's programs ended, for the exit status of `sdm run` (see
/// [`Console::shutdown`]).
#[derive(Debug, Clone, Default)]
pub struct Ending {
    /// The largest exit status of the programs that ended by themselves (128+N for
    /// signal N); those the console killed do not count.
    pub status: i32,
    /// Ranks whose program could not be started (or attached to).
    pub not_started: IdSet,
    /// Ranks whose server was lost.
    pub lost: IdSet,
    /// Ranks whose end was never reported (within the drain patience).
    pub undrained: IdSet,
}

impl Ending {
    /// The exit status for `sdm run`, like srun's: the largest status of the programs,
    /// and at least 1 when a program could not start, a server was lost or an end was
    /// never reported.
    pub fn exit_code(&self) -> i32 {
        let trouble =
            !(self.not_started.is_empty() && self.lost.is_empty() && self.undrained.is_empty());
        self.status.max(i32::from(trouble))
    }
}

/// A console over a running session.
pub struct Console {
    session: Session,
    next_id: i64,
    json: bool,
    history: Vec<String>,
    /// Numbered breakpoints and the program's path (see [`crate::commands`]).
    state: crate::commands::State,
    /// Print every stdio line once per rank, `[3] text`, instead of merged.
    label: bool,
    /// Line-by-line alignment of output across ranks (after the tree's own merging).
    stdio: Aligner,
    /// Ranks whose program was started (or attached to) under this console.
    started: IdSet,
    /// Of those, ranks attached to (detached, not killed, at the end).
    attached: IdSet,
    /// Ranks whose program has ended (its exit arrived), was never started, or whose
    /// server was lost.
    terminated: IdSet,
    /// Ranks whose server was found lost while waiting for the programs' end.
    lost: IdSet,
    /// Ranks whose program could not be started.
    not_started: IdSet,
    /// Ranks the console killed (their end does not count in the exit status).
    killed: IdSet,
    /// The largest exit status of the programs that ended by themselves.
    exit_status: i32,
    /// Questions from `sdm status` in other terminals, answered while the console waits.
    queries: Option<tokio::sync::mpsc::Receiver<crate::status::Query>>,
    /// Named process groups and the focus.
    groups: debug::Groups,
    /// Start programs stopped at `main` (`sdm run --stop-at-main`).
    stop_at_main: bool,
    /// Numbers of the temporary breakpoints (`tbreak`): gone from a rank once it hits one.
    temporary: std::collections::BTreeSet<u32>,
    /// Where the programs' stderr goes instead of the process's (the interactive
    /// console's [`crate::screen`]).
    stderr: Option<Box<dyn Write + Send>>,
    /// Output is taken from the tree only while this has room (the interactive console's
    /// terminal keeps up); the programs wait meanwhile.
    room: Option<crate::screen::Room>,
    /// The thread `bt` shows (`thread N`, numbered as `info threads` lists them); `None`:
    /// every thread.
    thread: Option<u32>,
}

/// One merged result line: who, what happened, and the OMIS reply (if any).
#[derive(Debug, Clone)]
pub struct Line {
    /// The servers.
    pub ids: IdSet,
    /// Replied, lost or timed out.
    pub status: Status,
    /// The reply with its sender nodes filled in (replied groups).
    pub reply: Option<BasicReply>,
    /// The raw payload text (reason, for lost groups).
    pub text: String,
}

impl Console {
    /// A console printing plain text, or JSON lines with `json`.
    pub fn new(session: Session, json: bool) -> Self {
        Self {
            next_id: 1,
            json,
            history: Vec::new(),
            state: crate::commands::State::default(),
            label: false,
            stdio: Aligner::new(session.all(), DEFAULT_MERGE_LAG),
            started: IdSet::new(),
            attached: IdSet::new(),
            terminated: IdSet::new(),
            queries: None,
            lost: IdSet::new(),
            not_started: IdSet::new(),
            killed: IdSet::new(),
            exit_status: 0,
            groups: debug::Groups::default(),
            stop_at_main: false,
            temporary: Default::default(),
            stderr: None,
            room: None,
            thread: None,
            session,
        }
    }

    /// Answers the questions of `sdm status` (see [`crate::status::serve`]) whenever the
    /// console waits: for output, for the programs' end, or at the prompt.
    pub fn serve_queries(&mut self, queries: tokio::sync::mpsc::Receiver<crate::status::Query>) {
        self.queries = Some(queries);
    }

    async fn answer(&mut self, q: crate::status::Query) {
        let mut out = Vec::new();
        let res = match q.command.as_str() {
            "health" => self
                .health(q.json, &mut out)
                .await
                .map(|healthy| (healthy, String::from_utf8_lossy(&out).into_owned())),
            other => Err(anyhow!("unknown request {other:?}")),
        };
        let _ = q.reply.send(res);
    }

    /// Prints the tree's health per subtree; returns whether every subtree is full.
    async fn health(&mut self, json: bool, out: &mut dyn Write) -> anyhow::Result<bool> {
        let lines = sdm_client::health::report(&self.session, Duration::from_secs(5)).await?;
        if json {
            for l in &lines {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"root": l.root, "ids": l.ids.to_string(), "depth": l.depth,
                        "health": l.health.name(), "replied": l.replied, "why": l.why})
                )?;
            }
        } else {
            write!(out, "{}", sdm_client::health::text(&lines))?;
        }
        Ok(lines
            .iter()
            .all(|l| l.health == sdm_client::health::Health::Full))
    }

    /// Prints stdio lines per rank (`label`), and merges the identical k-th lines of
    /// different ranks, waiting at most `lag` for a rank that has not printed its k-th
    /// line yet (zero: print each line as it comes).
    pub fn set_stdio(&mut self, label: bool, lag: Duration) {
        self.label = label;
        self.stdio = Aligner::new(self.stdio.running().clone(), lag);
    }

    /// Sends the programs' stderr lines to `w` instead of the process's stderr (`None`:
    /// back to it).
    pub fn set_stderr(&mut self, w: Option<Box<dyn Write + Send>>) {
        self.stderr = w;
    }

    /// Takes output from the tree (in [`Console::pump`]) only while `room` has room.
    pub fn set_room(&mut self, room: Option<crate::screen::Room>) {
        self.room = room;
    }

    /// Ranks whose program has ended.
    pub fn terminated(&self) -> &IdSet {
        &self.terminated
    }

    /// Handles one message that is not a reply: output is aligned across ranks and events
    /// merged (an event never passes its sources' output), then printed; a program's end
    /// is noted as it arrives.
    fn incoming(&mut self, m: Message, out: &mut dyn Write) -> anyhow::Result<()> {
        let line = StdioLine {
            kind: m.kind,
            sources: m.source,
            index: m.op,
            payload: m.payload,
        };
        let now = std::time::Instant::now();
        let due = match sdm_client::iof::exit_status(&line) {
            Some(status) => {
                if !line.sources.is_subset(&self.killed) {
                    self.exit_status = self.exit_status.max(status);
                }
                self.terminated.union_with(&line.sources);
                self.stdio.push_end(now, line)
            }
            None => self.stdio.push(now, line),
        };
        for l in due {
            self.print_line(&l, out)?;
        }
        Ok(())
    }

    /// `ranks` will print nothing more (their program never started, their server was
    /// lost): output stops waiting for them.
    fn ended_silently(&mut self, ranks: &IdSet, out: &mut dyn Write) -> anyhow::Result<()> {
        self.terminated.union_with(ranks);
        for l in self.stdio.end(std::time::Instant::now(), ranks) {
            self.print_line(&l, out)?;
        }
        Ok(())
    }

    /// Prints stdio lines whose coalescing window has passed (`all`: everything).
    fn flush_stdio(&mut self, all: bool, out: &mut dyn Write) -> anyhow::Result<()> {
        let lines = if all {
            self.stdio.drain()
        } else {
            self.stdio.expire(std::time::Instant::now())
        };
        for l in lines {
            self.print_line(&l, out)?;
        }
        Ok(())
    }

    fn print_line(&mut self, l: &StdioLine, out: &mut dyn Write) -> anyhow::Result<()> {
        if l.kind != sdm_proto::Kind::Stdio {
            self.note_hit(&l.sources, &l.payload);
            return self.print_event(&l.sources, &l.payload, out);
        }
        let (stream, text) = match l.payload.split_first() {
            Some((s, t)) => (*s, String::from_utf8_lossy(t)),
            None => (STDOUT, "".into()),
        };
        let mut err = std::io::stderr();
        let w: &mut dyn Write = match (stream == STDERR, self.stderr.as_mut()) {
            (true, Some(e)) => e,
            (true, None) => &mut err,
            (false, _) => out,
        };
        if self.json {
            let name = if stream == STDERR { "stderr" } else { "stdout" };
            writeln!(
                w,
                "{}",
                serde_json::json!({"ids": l.sources.to_string(), "stream": name, "line": text})
            )?;
        } else if self.label {
            for id in l.sources.iter() {
                writeln!(w, "[{id}] {text}")?;
            }
        } else {
            writeln!(w, "{} {text}", l.sources)?;
        }
        Ok(())
    }

    /// Prints output and events until every rank's program has ended, forwarding `input`
    /// (if any) to the programs of `stdin_ids` as it comes, end of input included.
    /// Returns early with the signal when one of `interrupts` comes first: the programs
    /// still running are left for [`Console::shutdown`] to kill.
    pub async fn wait_for_exit(
        &mut self,
        mut input: Option<tokio::sync::mpsc::Receiver<Option<String>>>,
        stdin_ids: &IdSet,
        interrupts: &mut crate::interrupt::Interrupts,
        out: &mut dyn Write,
    ) -> anyhow::Result<Option<Signal>> {
        let all = self.session.all();
        // Like srun --input: ranks that get no input see end of file at once.
        let closed = &all - stdin_ids;
        if !closed.is_empty() || input.is_none() {
            let none = if input.is_none() { all.clone() } else { closed };
            self.write_stdin(&none, "", true).await?;
        }
        let mut next_check = tokio::time::Instant::now() + LIVENESS_CHECK;
        while !all.is_subset(&self.terminated) {
            if tokio::time::Instant::now() >= next_check {
                self.check_lost(&all, out).await?;
                next_check = tokio::time::Instant::now() + LIVENESS_CHECK;
                continue;
            }
            let tick = tokio::time::sleep(Duration::from_millis(20));
            tokio::select! {
                ev = self.session.next_event() => match ev {
                    Some(m) => self.incoming(m, out)?,
                    None => {
                        let missing = &all - &self.terminated;
                        anyhow::bail!("the tree went away before {missing} ended: {}", self.session.closed_reason());
                    }
                },
                chunk = async { input.as_mut().expect("guarded").recv().await }, if input.is_some() => {
                    let (data, eof) = match chunk {
                        Some(Some(d)) => (d, false),
                        Some(None) | None => (String::new(), true),
                    };
                    if eof {
                        input = None;
                    }
                    let live = stdin_ids - &self.terminated;
                    self.write_stdin(&live, &data, eof).await?;
                }
                () = tick => {}
                Some(q) = next_query(&mut self.queries) => self.answer(q).await,
                sig = interrupts.next() => {
                    self.print_received(false, out)?;
                    return Ok(Some(sig));
                }
            }
            self.flush_stdio(false, out)?;
        }
        self.print_received(true, out)?;
        Ok(None)
    }

    /// Pings the servers of the ranks still running; those the tree reports lost count as
    /// ended (printed on stderr with the reason), so waiting for the programs cannot hang
    /// on a dead server. Slow servers (timed out) are waited for.
    async fn check_lost(&mut self, all: &IdSet, out: &mut dyn Write) -> anyhow::Result<()> {
        let running = all - &self.terminated;
        if running.is_empty() {
            return Ok(());
        }
        let groups = self
            .session
            .request(&running, SyncMode::Timeout(COMMAND_TIMEOUT_MS), "ping")
            .await?;
        for g in groups.iter().filter(|g| g.status == Status::Lost) {
            // What came before the loss is printed first.
            self.print_received(false, out)?;
            eprintln!(
                "sdm: {} lost: {}",
                g.sources,
                String::from_utf8_lossy(&g.payload)
            );
            self.lost.union_with(&g.sources);
            self.ended_silently(&g.sources, out)?;
        }
        Ok(())
    }

    /// Prints the output and events already received (without waiting), then the merged
    /// lines that are due (`all`: every one held).
    fn print_received(&mut self, all: bool, out: &mut dyn Write) -> anyhow::Result<()> {
        while let Some(m) = self.session.queued_event() {
            self.incoming(m, out)?;
        }
        self.flush_stdio(all, out)
    }

    /// Prints output and events as they come, for at most 20 ms or until `until` (taking
    /// none while the terminal's [`crate::screen::Room`] is full).
    pub async fn pump(
        &mut self,
        until: tokio::time::Instant,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let tick = tokio::time::Instant::now() + Duration::from_millis(20);
        if let Some(room) = &self.room
            && tokio::time::timeout_at(until.min(tick), room.wait())
                .await
                .is_err()
        {
            // The terminal is behind: the output waits in the tree (its programs in write).
            return Ok(());
        }
        tokio::select! {
            () = tokio::time::sleep_until(until.min(tick)) => {}
            ev = self.session.next_event() => match ev {
                Some(m) => self.incoming(m, out)?,
                None => anyhow::bail!("the tree went away: {}", self.session.closed_reason()),
            },
            Some(q) = next_query(&mut self.queries) => self.answer(q).await,
        }
        self.flush_stdio(false, out)
    }

    /// Writes `data` to the programs of `ids` still running (`eof`: then ends their input).
    pub async fn write_stdin(&mut self, ids: &IdSet, data: &str, eof: bool) -> anyhow::Result<()> {
        let live = ids - &self.terminated;
        if !live.is_empty() {
            self.session
                .write_stdin(&live, data.as_bytes(), eof)
                .await?;
        }
        Ok(())
    }

    /// The session underneath.
    pub fn session(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Ends the session without losing anything in flight: programs this console started
    /// and that still run are killed (those it attached to are detached), every rank's
    /// remaining output and every exit is received and printed (waiting as long as exits
    /// keep coming, at most 10 s for the next one; ranks whose end never
    /// came are named), then the tree is shut down. Returns how the programs ended.
    pub async fn shutdown(mut self) -> Ending {
        let mut out = std::io::stdout();
        let _ = self.print_received(false, &mut out);
        let running = &(&self.started - &self.attached) - &self.terminated;
        if !running.is_empty() {
            self.killed.union_with(&running);
            let text = format!("{} [] kill()", self.id());
            match self.request(&running, &text).await {
                Ok(lines) => {
                    for l in lines.iter().filter(|l| l.status == Status::Lost) {
                        self.lost.union_with(&l.ids);
                        let _ = self.ended_silently(&l.ids, &mut out);
                    }
                }
                Err(e) => eprintln!("sdm: could not end the programs of {running}: {e:#}"),
            }
        }
        let mut undrained = IdSet::new();
        loop {
            let missing = &(&self.started - &self.attached) - &self.terminated;
            if missing.is_empty() {
                break;
            }
            match tokio::time::timeout(DRAIN_PATIENCE, self.session.next_event()).await {
                Ok(Some(m)) => {
                    let _ = self.incoming(m, &mut out);
                }
                Ok(None) => {
                    eprintln!(
                        "sdm: {missing} did not drain: the tree went away ({})",
                        self.session.closed_reason()
                    );
                    undrained = missing;
                    break;
                }
                Err(_) => {
                    eprintln!(
                        "sdm: {missing} did not drain: no end reported within {} s",
                        DRAIN_PATIENCE.as_secs()
                    );
                    undrained = missing;
                    break;
                }
            }
        }
        // Events still on their way (replies of event actions that the last commands
        // raised) get a moment to arrive: until nothing has come for a short while.
        while let Ok(Some(m)) =
            tokio::time::timeout(Duration::from_millis(100), self.session.next_event()).await
        {
            let _ = self.incoming(m, &mut out);
        }
        let _ = self.flush_stdio(true, &mut out);
        let _ = out.flush();
        let ending = Ending {
            status: self.exit_status,
            not_started: self.not_started.clone(),
            lost: self.lost.clone(),
            undrained,
        };
        self.session.shutdown(Duration::from_secs(10)).await;
        ending
    }

    /// Sends one OMIS basic request text to `dest` and returns the merged results.
    pub async fn request(&mut self, dest: &IdSet, text: &str) -> anyhow::Result<Vec<Line>> {
        self.request_within(dest, text, COMMAND_TIMEOUT_MS).await
    }

    /// [`Console::request`], waiting at most `ms` for the slowest server.
    async fn request_within(
        &mut self,
        dest: &IdSet,
        text: &str,
        ms: u32,
    ) -> anyhow::Result<Vec<Line>> {
        let m = service::omis(dest, SyncMode::Timeout(ms), text.to_owned());
        Ok(lines(self.session.request_command(m).await?))
    }

    fn id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Starts `program` under control on every server, its stdio on a pty (`iof` "pty"),
    /// on pipes ("pipes") or left to the launcher ("runtime").
    pub async fn start_program(
        &mut self,
        program: &str,
        args: &[String],
        iof: &str,
    ) -> anyhow::Result<Vec<Line>> {
        let quoted: Vec<String> = args
            .iter()
            .map(|a| Value::Str(a.clone()).to_string())
            .collect();
        let id = self.id();
        let text = format!(
            "{id} [] sdm_start({}, [{}], {}{})",
            Value::Str(program.to_owned()),
            quoted.join(","),
            Value::Str(iof.to_owned()),
            if self.stop_at_main { ", 1" } else { "" }
        );
        self.state.program = Some(program.to_owned());
        let all = self.session.all();
        let lines = self.request(&all, &text).await?;
        self.note_started(&lines, false)?;
        Ok(lines)
    }

    /// Programs started from now on stop at `main` (`sdm run --stop-at-main`).
    pub fn set_stop_at_main(&mut self, on: bool) {
        self.stop_at_main = on;
    }

    /// Notes which ranks now run a program (replied with a pid) and which could not
    /// start one: those print nothing and are not waited for.
    fn note_started(&mut self, lines: &[Line], attached: bool) -> anyhow::Result<()> {
        for l in lines {
            if l.started() {
                self.started.union_with(&l.ids);
                if attached {
                    self.attached.union_with(&l.ids);
                }
            } else {
                self.not_started.union_with(&l.ids);
                if l.status == Status::Lost {
                    self.lost.union_with(&l.ids);
                }
                self.ended_silently(&l.ids, &mut std::io::sink())?;
            }
        }
        Ok(())
    }

    /// Attaches rank `i` to the running process `pids[i]` (processes this tree did not
    /// start: they are detached, not killed, when it ends).
    pub async fn attach(&mut self, pids: &[u32]) -> anyhow::Result<Vec<Line>> {
        self.attach_with(pids, false).await
    }

    /// [`Console::attach`]; with `to_main`, each process (held by its launcher before its
    /// first instruction) is run to `main` and stays stopped there.
    pub async fn attach_with(&mut self, pids: &[u32], to_main: bool) -> anyhow::Result<Vec<Line>> {
        let flag = if to_main { ", 1" } else { "" };
        let mut pending = Vec::new();
        for (rank, pid) in pids.iter().enumerate() {
            let id = self.id();
            let dest = IdSet::single(rank as u32);
            let op = self
                .session
                .send_command(omis(&dest, format!("{id} [] sdm_attach({pid}{flag})")))
                .await?;
            pending.push((op, dest));
        }
        let mut out = Vec::new();
        for (op, dest) in pending {
            out.extend(lines(self.session.collect(op, &dest).await?));
        }
        self.note_started(&out, true)?;
        Ok(out)
    }

    /// Runs one console command; says whether it failed (a reply that is an error, a lost
    /// or timed-out server), or that it was `quit`. A command that cannot run at all (an
    /// unknown command, ids the tree does not have) is an error.
    pub async fn command(&mut self, line: &str, out: &mut dyn Write) -> anyhow::Result<Flow> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(Flow::Continue { failed: false });
        }
        self.history.push(line.to_owned());
        let (verb, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        let mut failed = false;
        if matches!(verb, "quit" | "exit" | "history" | "health") && !rest.is_empty() {
            anyhow::bail!("{verb} takes no arguments (`help {verb}`), not {rest:?}");
        }
        match verb {
            "quit" | "exit" => return Ok(Flow::Quit),
            "help" => write!(out, "{}", crate::commands::help(rest)?)?,
            "history" => {
                for (i, h) in self.history.iter().enumerate() {
                    writeln!(out, "{:>4}  {h}", i + 1)?;
                }
            }
            "sleep" => {
                let until = tokio::time::Instant::now() + sleep_duration(rest)?;
                while tokio::time::Instant::now() < until {
                    self.pump(until, out).await?;
                }
            }
            "stop" | "cont" | "continue" | "c" | "kill" | "status" => {
                let service = match verb {
                    "status" => "sdm_status",
                    "continue" | "c" => "cont",
                    v => v,
                };
                let id = self.id();
                let dest = self.ranks(rest)?;
                if verb == "kill" {
                    // Programs the user kills do not count in the exit status.
                    self.killed.union_with(&(&dest - &self.terminated));
                }
                let lines = self.request(&dest, &format!("{id} [] {service}()")).await?;
                failed =
                    self.print_lines(verb, &lines, out, |r| match (service, r.results.first()) {
                        _ if crate::words::is_error(r) => crate::words::reply(r),
                        (_, Some(Value::Str(s))) => s.clone(),
                        ("stop", Some(Value::Int(0))) => "stopped".into(),
                        ("cont", Some(Value::Int(0))) => "running".into(),
                        ("kill", Some(Value::Int(0))) => "killed".into(),
                        _ => crate::words::reply(r),
                    })?;
            }
            "detach" => {
                let (stay, ids) = match rest.strip_prefix("--stopped") {
                    Some(ids) if ids.is_empty() || ids.starts_with(char::is_whitespace) => (1, ids),
                    _ if rest.starts_with('-') => anyhow::bail!(
                        "detach: unknown option {:?} (`detach [--stopped] [IDS]`)",
                        rest.split_whitespace().next().unwrap_or(rest)
                    ),
                    _ => (0, rest),
                };
                let dest = self.ranks(ids)?;
                let id = self.id();
                // Ranks attached to are never killed nor awaited at the end: nothing to note.
                let lines = self
                    .request(&dest, &format!("{id} [] sdm_detach({stay})"))
                    .await?;
                // Replies hold each rank's pid: one merged line says what happened.
                failed = self.print_lines(verb, &lines, out, |r| match r.results.first() {
                    Some(Value::Int(_)) => "detached".into(),
                    _ => crate::words::reply(r),
                })?;
            }
            "break" | "b" => {
                let location = rest.split_whitespace().next().unwrap_or("");
                failed = if location.contains(':') || rest.contains(" if ") {
                    self.source_breakpoint(rest, false, out).await?
                } else {
                    self.set_breakpoint(rest, out).await?
                }
            }
            "info" => match rest.split_once(char::is_whitespace).unwrap_or((rest, "")) {
                ("break" | "breakpoints" | "b", _) => self.info_break(out)?,
                ("locals", ids) => {
                    failed = self
                        .debug_command("locals", ids, out)
                        .await?
                        .unwrap_or(false)
                }
                ("threads", ids) => failed = self.info_threads(ids, out).await?,
                ("", _) => {
                    anyhow::bail!(
                        "info: expected `info break`, `info locals`, `info threads` or a gdb topic"
                    )
                }
                // `info args`, `info frame`, `info registers`...: gdb's answer.
                (topic, ids) => failed = self.gdb_info(topic, ids, out).await?,
            },
            "group" => self.group(rest, out)?,
            "focus" => self.focus(rest, out)?,
            "delete" => failed = self.delete_breakpoints(rest, out).await?,
            // `where` is gdb's name for `bt`.
            "bt" | "where" => failed = self.sampled_backtrace(rest, out).await?,
            "thread" => self.select_thread(rest, out)?,
            "health" => {
                failed = !self.health(self.json, out).await?;
            }
            "counters" if rest.starts_with("--groups") => {
                let dest = self.ranks(rest["--groups".len()..].trim())?;
                failed = self.counter_groups(&dest, out).await?;
            }
            "top" | "counters" => {
                let dest = self.ranks(rest)?;
                let request = if verb == "top" {
                    service::PROCSTAT
                } else {
                    service::COUNTERS
                };
                let timeout = Duration::from_millis(u64::from(COMMAND_TIMEOUT_MS));
                let sample =
                    sdm_client::top::sample_of(&self.session, &dest, timeout, request).await?;
                if self.json {
                    writeln!(out, "{}", crate::top::json(&sample, 0.0))?;
                } else {
                    write!(out, "{}", crate::top::table(&sample))?;
                }
                failed = !sample.missing.is_empty();
            }
            "omis" => failed = self.raw(rest, out).await?,
            v => match self.debug_command(v, rest, out).await? {
                Some(f) => failed = f,
                None => anyhow::bail!("unknown command {verb:?} (`help` lists the commands)"),
            },
        }
        // Output and events that arrived meanwhile.
        self.print_received(false, out)?;
        Ok(Flow::Continue { failed })
    }

    /// `omis REQUEST`: sends each action to its receiver nodes (in order for `;`, all at
    /// once for `,`) and prints the replies with their sender nodes; returns whether one
    /// failed.
    async fn raw(&mut self, text: &str, out: &mut dyn Write) -> anyhow::Result<bool> {
        // Node lists may name process groups: `omis 1 [odd] stop()`.
        let text = self.groups.expand(&self.session.all(), text)?;
        let req = parse_request(&text).map_err(|e| anyhow!("omis: {e}"))?;
        if let Some(ev) = &req.event {
            // Stored on the event's nodes; its actions run there at each occurrence and
            // their replies come back as events.
            let dest = if ev.nodes.is_all() {
                self.session.all()
            } else {
                known_ids(&self.session.all(), &ev.nodes.ids)?
            };
            let mut stored = req.clone();
            if let Some(e) = stored.event.as_mut() {
                e.nodes = Nodes::all();
            }
            let groups = self
                .session
                .request_command(omis(&dest, stored.to_string()))
                .await?;
            return self.print_lines("omis", &lines(groups), out, |r| r.to_string());
        }
        let (seq, actions) = match req.actions {
            ActionList::Seq(v) => (true, v),
            ActionList::Par(v) => (false, v),
        };
        let all = self.session.all();
        let mut pending = Vec::new();
        let mut failed = false;
        for a in &actions {
            if let Some(r) = a.nodes.refs.first() {
                anyhow::bail!("omis: ${r} only has a meaning inside an event's actions");
            }
            let dest = if a.nodes.all {
                all.clone()
            } else {
                known_ids(&all, &a.nodes.ids)?
            };
            let mut single = a.clone();
            single.nodes = Nodes::all();
            let op = self
                .session
                .send_command(omis(&dest, single.to_string()))
                .await?;
            if seq {
                let groups = self.session.collect(op, &dest).await?;
                failed |= self.print_lines("omis", &lines(groups), out, |r| r.to_string())?;
            } else {
                pending.push((op, dest));
            }
        }
        for (op, dest) in pending {
            let groups = self.session.collect(op, &dest).await?;
            failed |= self.print_lines("omis", &lines(groups), out, |r| r.to_string())?;
        }
        Ok(failed)
    }

    /// Prints merged result lines (`show` puts a reply in words); returns whether one of
    /// them is a failure: an error reply, a lost or timed-out server.
    fn print_lines(
        &self,
        cmd: &str,
        lines: &[Line],
        out: &mut dyn Write,
        show: impl Fn(&BasicReply) -> String,
    ) -> anyhow::Result<bool> {
        let mut failed = false;
        // Replies that differ (each rank's pid, say) but read the same merge into one line.
        // A failure never merges with a success that reads the same.
        let mut shown: Vec<(Status, bool, String, IdSet)> = Vec::new();
        for l in lines {
            let bad = line_failed(l);
            failed |= bad;
            let text = l.shown(&show);
            match shown
                .iter_mut()
                .find(|(s, f, t, _)| *s == l.status && *f == bad && *t == text)
            {
                Some((_, _, _, ids)) => ids.union_with(&l.ids),
                None => shown.push((l.status, bad, text, l.ids.clone())),
            }
        }
        shown.sort_by_key(|(_, _, _, ids)| ids.first());
        for (status, bad, text, ids) in shown {
            if self.json {
                let status = status_name(status);
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"command": cmd, "ids": ids.to_string(), "status": status, "failed": bad, "result": text})
                )?;
            } else if text.contains('\n') {
                // Source lines, locals: one per line under the ranks they hold for.
                writeln!(out, "{ids}")?;
                for l in text.lines() {
                    writeln!(out, "    {l}")?;
                }
            } else {
                writeln!(out, "{ids} {text}")?;
            }
        }
        Ok(failed)
    }

    fn print_event(
        &self,
        sources: &IdSet,
        payload: &[u8],
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let text = String::from_utf8_lossy(payload);
        if self.json {
            writeln!(
                out,
                "{}",
                serde_json::json!({"event": text, "ids": sources.to_string()})
            )?;
        } else {
            let text = crate::words::event(&text, |at| self.state.breakpoint_number(at));
            if self.label {
                for id in sources.iter() {
                    writeln!(out, "[{id}] {text}")?;
                }
            } else {
                writeln!(out, "{sources} {text}")?;
            }
        }
        Ok(())
    }

    /// Merges the stacks of `lines` (replies to `sdm_stacks`) into `stacks`, as `a` asks;
    /// returns the lines that hold no stack (an error, lost, timed out).
    fn add_stacks(
        lines: &[Line],
        stacks: &mut crate::stacks::Stacks,
        a: &crate::stacks::BtArgs,
    ) -> Vec<Line> {
        let mut other = Vec::new();
        for l in lines {
            let added = l
                .reply
                .as_ref()
                .and_then(|r| r.results.first())
                .is_some_and(|threads| stacks.add_threads(threads, &l.ids, a));
            if !added {
                other.push(l.clone());
            }
        }
        other
    }

    /// Prints `stacks` as `bt` was asked (`a`): the tree or the classes, as text or JSON,
    /// and writes its DOT or SVG file.
    fn print_stacks(
        &self,
        stacks: &crate::stacks::Stacks,
        a: &crate::stacks::BtArgs,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let tree = &stacks.tree;
        if let Some(path) = &a.dot {
            crate::stacks::write_dot(tree, path)?;
        }
        if let Some(path) = &a.svg {
            crate::stacks::write_svg(tree, path)?;
        }
        match (a.classes, self.json || a.json) {
            (true, true) => writeln!(
                out,
                "{}",
                serde_json::json!({"command": "bt", "samples": a.samples, "classes": stacks.classes_json()})
            )?,
            (true, false) => crate::stacks::print_classes(tree, out)?,
            (false, true) => writeln!(
                out,
                "{}",
                serde_json::json!({"command": "bt", "samples": a.samples, "tree": stacks.tree_json()})
            )?,
            (false, false) => crate::stacks::print_tree(tree, out)?,
        }
        Ok(())
    }
}

/// The next question for the console, or never if none can come.
async fn next_query(
    queries: &mut Option<tokio::sync::mpsc::Receiver<crate::status::Query>>,
) -> Option<crate::status::Query> {
    match queries.as_mut() {
        Some(q) => q.recv().await,
        None => std::future::pending().await,
    }
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Replied => "replied",
        Status::Lost => "lost",
        Status::TimedOut => "timed_out",
        Status::Error => "error",
    }
}

impl Line {
    /// The line's result as text: a reply through `show`, the reason a server was lost,
    /// `timed out`, or the error of a filter that refused the replies.
    pub fn shown(&self, show: impl Fn(&BasicReply) -> String) -> String {
        match (&self.status, &self.reply) {
            (Status::Replied, Some(r)) => show(r),
            (Status::Replied, None) => self.text.clone(),
            (Status::Lost, _) => format!("lost: {}", self.text),
            (Status::TimedOut, _) => "timed out".into(),
            (Status::Error, _) => format!("error: {}", self.text),
        }
    }

    /// Whether this is the reply of a successful `sdm_start` or `sdm_attach` (a pid).
    pub fn started(&self) -> bool {
        self.status == Status::Replied
            && matches!(
                self.reply.as_ref().and_then(|r| r.results.first()),
                Some(Value::Int(_))
            )
    }
}

/// Turns merged reply groups into result lines, OMIS replies getting their senders.
pub fn lines(groups: Vec<ReplyGroup>) -> Vec<Line> {
    let mut out: Vec<Line> = groups
        .into_iter()
        .map(|g| {
            let text = String::from_utf8_lossy(&g.payload).into_owned();
            let reply = (g.status == Status::Replied)
                .then(|| parse_reply(&text).ok())
                .flatten()
                .and_then(|r| r.0.into_iter().next())
                .map(|mut r| {
                    r.senders = g.sources.clone();
                    r
                });
            Line {
                ids: g.sources,
                status: g.status,
                reply,
                text,
            }
        })
        .collect();
    out.sort_by_key(|l| (l.status, l.ids.first()));
    out
}

/// What a console command leaves the caller to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on with the next command; `failed`: this one failed (an error reply, a lost or
    /// timed-out server), so a scripted run must fail.
    Continue {
        /// Whether the command failed.
        failed: bool,
    },
    /// The user asked to quit.
    Quit,
}

impl Console {
    /// The program started on every server (its path on the front-end), if any.
    pub fn program(&self) -> Option<&str> {
        self.state.program.as_deref()
    }

    /// `break LOCATION [IDS]`: sets the breakpoint, numbered by the console; returns
    /// whether it failed somewhere.
    async fn set_breakpoint(&mut self, rest: &str, out: &mut dyn Write) -> anyhow::Result<bool> {
        let (target, idtext) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        if target.is_empty() {
            anyhow::bail!("break: give a function name or a 0x address (`help break`)");
        }
        let dest = self.ranks(idtext.trim())?;
        let id = self.id();
        let lines = self
            .request(&dest, &format!("{id} [] breakpoint({})", location(target)))
            .await?;
        let set = ok_ids(&lines);
        if !set.is_empty() {
            let n = self.state.add_breakpoint(target, &set);
            if self.json {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"command": "break", "number": n, "location": target, "ids": set.to_string()})
                )?;
            } else {
                writeln!(out, "{set} breakpoint {n} at {target}")?;
            }
        }
        let bad: Vec<Line> = lines.into_iter().filter(line_failed).collect();
        self.print_lines("break", &bad, out, crate::words::reply)
    }

    /// `info break`: the breakpoints with their numbers, locations and ranks.
    fn info_break(&self, out: &mut dyn Write) -> anyhow::Result<()> {
        if self.json {
            let list: Vec<serde_json::Value> = self
                .state
                .breakpoints
                .iter()
                .map(|b| serde_json::json!({"number": b.number, "location": b.location, "ids": b.ranks.to_string()}))
                .collect();
            writeln!(
                out,
                "{}",
                serde_json::json!({"command": "info break", "breakpoints": list})
            )?;
        } else {
            write!(out, "{}", self.state.breakpoint_table())?;
        }
        Ok(())
    }

    /// `delete [N...]`: removes breakpoints (all without numbers) from their servers;
    /// returns whether one could not be removed somewhere.
    async fn delete_breakpoints(
        &mut self,
        rest: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let mut chosen = Vec::new();
        for w in rest.split_whitespace() {
            let n: u32 = w
                .parse()
                .map_err(|_| anyhow!("delete: {w:?} is not a breakpoint number"))?;
            let b = self.state.breakpoints.iter().find(|b| b.number == n);
            chosen.push(
                b.cloned().ok_or_else(|| {
                    anyhow!("delete: no breakpoint {n} (`info break` lists them)")
                })?,
            );
        }
        if rest.is_empty() {
            chosen = self.state.breakpoints.clone();
        }
        let mut failed = false;
        for b in chosen {
            let id = self.id();
            let text = format!("{id} [] sdm_delete_breakpoint({})", location(&b.location));
            let lines = self.request(&b.ranks, &text).await?;
            let gone = ok_ids(&lines);
            self.state.remove_ranks(b.number, &gone);
            if !gone.is_empty() {
                if self.json {
                    writeln!(
                        out,
                        "{}",
                        serde_json::json!({"command": "delete", "number": b.number, "ids": gone.to_string()})
                    )?;
                } else {
                    writeln!(out, "{gone} deleted breakpoint {}", b.number)?;
                }
            }
            let bad: Vec<Line> = lines.into_iter().filter(line_failed).collect();
            failed |= self.print_lines("delete", &bad, out, crate::words::reply)?;
        }
        Ok(failed)
    }

    /// `bt`: stack traces of the ranks as one call-prefix tree, sampled as STAT does:
    /// running programs are stopped, walked and continued (only those this command
    /// stopped), `--samples K` times `--interval MS` apart, every sample counted in the
    /// tree (STAT's 3D view); `--classes`, `--dot`, `--svg` and `--json` choose the view.
    async fn sampled_backtrace(&mut self, rest: &str, out: &mut dyn Write) -> anyhow::Result<bool> {
        let mut a = crate::stacks::BtArgs::parse(rest)?;
        a.thread = a.thread.or(self.thread);
        let dest = self.ranks(&a.ids)?;
        let mut stacks = crate::stacks::Stacks::default();
        let mut failed = false;
        let mut no_stack: Vec<Line> = Vec::new();
        for k in 0..a.samples {
            if k > 0 {
                let until = tokio::time::Instant::now() + a.interval;
                while tokio::time::Instant::now() < until {
                    self.pump(until, out).await?;
                }
            }
            let (replies, cont_failed) =
                self.request_stopped("bt", &dest, "sdm_stacks", out).await?;
            failed |= cont_failed;
            // A rank without a stack is reported once, from the last sample.
            no_stack = Self::add_stacks(&replies, &mut stacks, &a);
        }
        self.groups.classes = stacks.tree.classes().into_iter().map(|c| c.ids).collect();
        self.print_stacks(&stacks, &a, out)?;
        if let (Some(n), false) = (a.thread, stacks.without_thread.is_empty()) {
            writeln!(
                out,
                "{} no thread {n} (`info threads` lists them)",
                stacks.without_thread
            )?;
            failed = true;
        }
        Ok(self.print_lines("bt", &no_stack, out, crate::words::reply)? | failed)
    }

    /// `counters --groups`: the sets of ranks whose counters are identical, with the sum
    /// of every rank's (the `counters` filter merges them in the tree).
    async fn counter_groups(&mut self, dest: &IdSet, out: &mut dyn Write) -> anyhow::Result<bool> {
        let groups = self
            .session
            .request_command(service::filtered(
                service::COUNTERS,
                dest,
                SyncMode::Timeout(COMMAND_TIMEOUT_MS),
                "counters",
                "",
            ))
            .await?;
        let (replied, other): (Vec<ReplyGroup>, Vec<ReplyGroup>) = groups
            .into_iter()
            .partition(|g| g.status == Status::Replied);
        let mut failed = false;
        for g in replied {
            match sdm_overlay::filters::builtin::Counters::decode(&g.payload) {
                Ok(rec) if self.json => writeln!(out, "{}", crate::top::groups_json(&rec))?,
                Ok(rec) => write!(out, "{}", crate::top::groups_table(&rec))?,
                Err(e) => {
                    failed = true;
                    writeln!(out, "{} error: {e}", g.sources)?;
                }
            }
        }
        Ok(self.print_lines("counters", &lines(other), out, crate::words::reply)? | failed)
    }
}

/// A breakpoint location as an OMIS parameter: an address stays a number, a function
/// name becomes a string.
fn location(target: &str) -> String {
    if target.starts_with("0x") {
        target.to_owned()
    } else {
        Value::Str(target.into()).to_string()
    }
}

/// Whether a result line is a failure: a reply carrying a failure kind, a reply that is no
/// OMIS reply (the service could not answer), a filter's error, a lost or timed-out server.
fn line_failed(l: &Line) -> bool {
    match (&l.status, &l.reply) {
        (Status::Replied, Some(r)) => crate::words::is_error(r),
        (Status::Replied, None) => true,
        (Status::Lost | Status::TimedOut | Status::Error, _) => true,
    }
}

/// The ranks of the lines that did not fail.
fn ok_ids(lines: &[Line]) -> IdSet {
    lines
        .iter()
        .filter(|l| !line_failed(l))
        .fold(IdSet::new(), |acc, l| &acc | &l.ids)
}

/// `ids`, if the tree has every one of them; otherwise an error naming those it lacks.
fn known_ids(all: &IdSet, ids: &IdSet) -> anyhow::Result<IdSet> {
    let missing = ids - all;
    match missing.len() {
        0 => Ok(ids.clone()),
        1 => Err(anyhow!(
            "no server {}: the tree has servers {all}",
            missing.first().expect("one")
        )),
        _ => Err(anyhow!("no servers {missing}: the tree has servers {all}")),
    }
}

/// An OMIS request for the monitors of `dest`, given the console's time limit.
fn omis(dest: &IdSet, text: String) -> Message {
    service::omis(dest, SyncMode::Timeout(COMMAND_TIMEOUT_MS), text)
}
