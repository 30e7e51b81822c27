//! The parallel debugger console of `sdm run`: commands (`stop`, `cont`, `status`, `bt`,
//! `break`, `info break`, `delete`, `kill`, `omis`, `sleep`, `help`, `quit`, and the
//! symbolic ones of `debug`: `print`, `step`, `next`, groups…; the table is in
//! [`crate::commands`]) become OMIS requests to id-sets; merged replies print with their
//! sender nodes in plain words ([`crate::words`]), stack traces as a STAT-like call-prefix
//! tree.
//!
//! This file holds the console's state and the dispatch of a command line; printing, the
//! programs' lifetime, breakpoints, stacks, threads and the symbolic commands each have a
//! submodule.

use std::io::Write;
use std::time::Duration;

use anyhow::anyhow;
use sdm_client::ReplyGroup;
use sdm_proto::{IdSet, Message, Status, SyncMode};

use sdm_client::align::Aligner;

use sdm_client::service;
use sdm_client::session::Session;
use sdm_omis::{ActionList, BasicReply, Nodes, Value, parse_reply, parse_request};

mod breakpoints;
mod debug;
mod flame;
mod printing;
pub(crate) use printing::link_end_name;
mod programs;
mod report;
mod stacks;
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
    /// The `sdm` command line of this front-end, named in `bt --html`'s report.
    invocation: Option<Vec<String>>,
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
    /// How the link that lost the servers ended (lost groups the tree reported).
    pub link_end: Option<sdm_client::LinkEndKind>,
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
            invocation: None,
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
                .health(q.json, q.verbose, &mut out)
                .await
                .map(|healthy| (healthy, String::from_utf8_lossy(&out).into_owned())),
            other => Err(anyhow!("unknown request {other:?}")),
        };
        let _ = q.reply.send(res);
    }

    /// Prints the tree's health per subtree (`verbose`: and every link's figures); returns
    /// whether every subtree is full.
    async fn health(
        &mut self,
        json: bool,
        verbose: bool,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let lines = sdm_client::health::report(&self.session, Duration::from_secs(5)).await?;
        let links = if verbose {
            sdm_client::telemetry::gather(&self.session, Duration::from_secs(5))
                .await?
                .links
        } else {
            Vec::new()
        };
        if json {
            for l in &lines {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"root": l.root, "ids": l.ids.to_string(), "depth": l.depth,
                        "health": l.health.name(), "replied": l.replied, "why": l.why})
                )?;
            }
            for l in &links {
                writeln!(out, "{}", crate::links::json(l))?;
            }
        } else {
            write!(out, "{}", sdm_client::health::text(&lines))?;
            if verbose {
                write!(
                    out,
                    "{}",
                    crate::links::table(&links, crate::links::Order::Tree)
                )?;
            }
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

    /// The `sdm` command line that made this console (`bt --html` names it in its report).
    pub fn set_invocation(&mut self, argv: Vec<String>) {
        self.invocation = Some(argv);
    }

    /// Ranks whose program has ended.
    pub fn terminated(&self) -> &IdSet {
        &self.terminated
    }

    /// The session underneath.
    pub fn session(&mut self) -> &mut Session {
        &mut self.session
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
        let health_v = verb == "health" && rest == "-v";
        if verb == "health" && !rest.is_empty() && !health_v {
            anyhow::bail!("health takes only -v (`help health`), not {rest:?}");
        }
        if matches!(verb, "quit" | "exit" | "history") && !rest.is_empty() {
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
                failed = self.process_command(verb, rest, out).await?
            }
            "detach" => failed = self.detach(rest, out).await?,
            "break" | "b" => {
                let location = rest.split_whitespace().next().unwrap_or("");
                failed = if location.contains(':') || rest.contains(" if ") {
                    self.source_breakpoint(rest, false, out).await?
                } else {
                    self.set_breakpoint(rest, out).await?
                }
            }
            "info" => failed = self.info(rest, out).await?,
            "group" => self.group(rest, out)?,
            "focus" => self.focus(rest, out)?,
            "delete" => failed = self.delete_breakpoints(rest, out).await?,
            // `where` is gdb's name for `bt`.
            "bt" | "where" => failed = self.sampled_backtrace(rest, out).await?,
            "thread" => self.select_thread(rest, out)?,
            "health" => {
                failed = !self.health(self.json, health_v, out).await?;
            }
            "counters" if rest.starts_with("--groups") => {
                let dest = self.ranks(rest["--groups".len()..].trim())?;
                failed = self.counter_groups(&dest, out).await?;
            }
            "top" | "counters" => failed = self.sample(verb, rest, out).await?,
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

    /// `stop`, `cont`, `kill`, `status` on the ranks `rest` names; returns whether one
    /// failed.
    async fn process_command(
        &mut self,
        verb: &str,
        rest: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
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
        self.print_lines(verb, &lines, out, |r| match (service, r.results.first()) {
            _ if crate::words::is_error(r) => crate::words::reply(r),
            (_, Some(Value::Str(s))) => s.clone(),
            ("stop", Some(Value::Int(0))) => "stopped".into(),
            ("cont", Some(Value::Int(0))) => "running".into(),
            ("kill", Some(Value::Int(0))) => "killed".into(),
            _ => crate::words::reply(r),
        })
    }

    /// `detach [--stopped] [IDS]`; returns whether one failed.
    async fn detach(&mut self, rest: &str, out: &mut dyn Write) -> anyhow::Result<bool> {
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
        self.print_lines("detach", &lines, out, |r| match r.results.first() {
            Some(Value::Int(_)) => "detached".into(),
            _ => crate::words::reply(r),
        })
    }

    /// `info TOPIC [IDS]`: breakpoints, locals, threads, or a gdb topic; returns whether
    /// one failed.
    async fn info(&mut self, rest: &str, out: &mut dyn Write) -> anyhow::Result<bool> {
        Ok(
            match rest.split_once(char::is_whitespace).unwrap_or((rest, "")) {
                ("break" | "breakpoints" | "b", _) => {
                    self.info_break(out)?;
                    false
                }
                ("locals", ids) => self
                    .debug_command("locals", ids, out)
                    .await?
                    .unwrap_or(false),
                ("threads", ids) => self.info_threads(ids, out).await?,
                ("", _) => {
                    anyhow::bail!(
                        "info: expected `info break`, `info locals`, `info threads` or a gdb topic"
                    )
                }
                // `info args`, `info frame`, `info registers`...: gdb's answer.
                (topic, ids) => self.gdb_info(topic, ids, out).await?,
            },
        )
    }

    /// `top` or `counters` of the ranks `rest` names, as a table or JSON; returns whether
    /// a rank gave no sample.
    async fn sample(
        &mut self,
        verb: &str,
        rest: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let dest = self.ranks(rest)?;
        let request = if verb == "top" {
            service::PROCSTAT
        } else {
            service::COUNTERS
        };
        let timeout = Duration::from_millis(u64::from(COMMAND_TIMEOUT_MS));
        let sample = sdm_client::top::sample_of(&self.session, &dest, timeout, request).await?;
        if self.json {
            writeln!(out, "{}", crate::top::json(&sample, 0.0))?;
        } else {
            write!(out, "{}", crate::top::table(&sample))?;
        }
        Ok(!sample.missing.is_empty())
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
                link_end: g.link_end,
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

/// Whether a result line is a failure: an error reply or a filter's error, a lost or
/// timed-out server.
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
