//! The monitor's symbolic side: the first symbolic request on a process (an expression the
//! native evaluator does not support, see `super::native`; a source breakpoint, a step)
//! hands it from the native ptrace monitor to a gdb over MI.
//!
//! Handover: native breakpoints are removed (and set again in gdb by address), the process
//! is left in a SIGSTOP group-stop and detached, then gdb attaches to it. From then on its
//! stop, cont, kill, stack, status and breakpoints go through gdb, and gdb's `*stopped`
//! records become events (`stopped_at(…)`) like the native breakpoint hits.

use std::collections::BTreeMap;
use std::time::Duration;

use nix::sys::ptrace;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use sdm_omis::Value;

use super::breakpoints::poke_byte;
use super::{Frame, MonResult, Monitor, ProcState, errno, raw, state, symbol};
use crate::error::{Error, ErrorKind};
use crate::gdbmi::{Gdb, GdbError, MiValue, frame_place};

/// How long an ordinary gdb command (an expression, a breakpoint, attaching) may take:
/// long, because hundreds of gdbs may attach at once on a few cores.
pub(super) const PATIENCE: Duration = Duration::from_secs(240);

/// How long `step`, `next`, `finish` and `until` wait for the process to stop again before
/// replying `running` (the stop is then reported as an event when it comes).
const STEP_PATIENCE: Duration = Duration::from_secs(120);

/// A process held by gdb.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) gdb: Gdb,
    pub(super) running: bool,
    /// gdb's breakpoint numbers and the locations as they were asked for.
    pub(super) breaks: BTreeMap<u32, String>,
}

/// Which frame `frame` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameMove {
    /// Frame N (0 is the innermost).
    To(u32),
    /// One frame out (toward `main`).
    Up,
    /// One frame in.
    Down,
}

/// How the process moves on in source terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// To the next source line, into calls.
    Step,
    /// To the next source line, over calls.
    Next,
    /// Until the current function returns.
    Finish,
    /// Until a line greater than the current one (or the given location) is reached.
    Until(Option<String>),
}

pub(super) fn gdb_err(e: GdbError) -> Error {
    match e {
        GdbError::Command(m) => Error::new(ErrorKind::Symbol, m),
        other => Error::new(ErrorKind::Process, other.to_string()).caused_by(other),
    }
}

/// `s` as an MI c-string.
pub(super) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// An event text: `stopped_at("why","what","where")`.
fn stop_event(why: &str, what: &str, place: &str) -> String {
    format!(
        "stopped_at({},{},{})",
        Value::Str(why.into()),
        Value::Str(what.into()),
        Value::Str(place.into())
    )
}

impl Monitor {
    /// Whether gdb holds the process.
    pub fn symbolic(&self) -> bool {
        self.proc.as_ref().is_some_and(|p| p.gdb.is_some())
    }

    /// The gdb holding the process, handing the (stopped) process over to one first.
    fn held(&mut self) -> MonResult<&mut Held> {
        if !self.symbolic() {
            self.hand_over()?;
        }
        Ok(self
            .proc
            .as_mut()
            .and_then(|p| p.gdb.as_mut())
            .expect("handed over"))
    }

    /// The held process, which must be stopped.
    pub(super) fn held_stopped(&mut self) -> MonResult<&mut Held> {
        let pid = self.pid().unwrap_or(0);
        let h = self.held()?;
        if h.running {
            return Err(
                state("the process is running: stop it first (`stop`)".into()).with_pid(pid),
            );
        }
        Ok(h)
    }

    /// Hands the stopped process to a new gdb (see the module doc).
    fn hand_over(&mut self) -> MonResult<()> {
        let p = self.proc()?;
        match p.state {
            ProcState::Stopped | ProcState::AtBreakpoint(_) => {}
            ProcState::Running => {
                return Err(
                    state("the process is running: stop it first (`stop`)".into())
                        .with_pid(raw(p.pid)),
                );
            }
            ref s => return Err(state(format!("process {} has ended ({s:?})", p.pid))),
        }
        let pid = p.pid;
        let natives: Vec<(u64, String)> = p
            .breakpoints
            .iter()
            .map(|(a, (_, n))| (*a, n.clone()))
            .collect();
        if p.traced {
            for (addr, (orig, _)) in std::mem::take(&mut p.breakpoints) {
                poke_byte(pid, addr, orig)?;
            }
            // A SIGSTOP waits for the detach: the process goes from the ptrace stop
            // straight into a group-stop, without running.
            kill(pid, Signal::SIGSTOP).map_err(|e| errno(pid, "SIGSTOP", e))?;
            ptrace::detach(pid, None).map_err(|e| errno(pid, "ptrace detach", e))?;
            p.traced = false;
            // Stopped again at once, or still in the group-stop it was seized in (then no
            // new stop is reported to wait for): the state in /proc says which.
            for _ in 0..5000 {
                if proc_state(pid) == Some('T') {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let mut gdb = Gdb::start().map_err(gdb_err)?;
        gdb.command(&format!("-target-attach {pid}"), PATIENCE)
            .map_err(|e| {
                Error::new(ErrorKind::Process, format!("gdb could not attach: {e}"))
                    .caused_by(e)
                    .with_pid(raw(pid))
            })?;
        // The stop of the attach itself.
        let _ = gdb.wait_stopped(PATIENCE).map_err(gdb_err)?;
        // The group-stop's SIGSTOP, reported at the first resume, is the handover's own.
        gdb.command(
            "-interpreter-exec console \"handle SIGSTOP nostop noprint nopass\"",
            PATIENCE,
        )
        .map_err(gdb_err)?;
        let mut held = Held {
            gdb,
            running: false,
            breaks: BTreeMap::new(),
        };
        for (addr, name) in natives {
            let n = insert(&mut held, &format!("*{addr:#x}"), None, false)?.0;
            held.breaks.insert(n, name);
        }
        let p = self.proc()?;
        p.state = ProcState::Stopped;
        p.gdb = Some(held);
        Ok(())
    }

    /// Evaluates `expr` in the selected frame; the value as gdb prints it.
    /// Natively (`crate::natprint`) while no gdb holds the process and the expression is
    /// one it supports; through gdb otherwise.
    pub fn evaluate(&mut self, expr: &str) -> MonResult<String> {
        if let Ok(answer) = self.evaluate_native(expr) {
            return answer;
        }
        let h = self.held_stopped()?;
        let d = h
            .gdb
            .command(
                &format!("-data-evaluate-expression {}", quote(expr)),
                PATIENCE,
            )
            .map_err(gdb_err)?;
        Ok(d.results.str("value").unwrap_or("").to_owned())
    }

    /// The local variables of the selected frame, `name = value`, as gdb prints them.
    pub fn locals(&mut self) -> MonResult<Vec<String>> {
        let h = self.held_stopped()?;
        let d = h
            .gdb
            .command("-stack-list-locals --all-values", PATIENCE)
            .map_err(gdb_err)?;
        Ok(d.results
            .get("locals")
            .map(|l| l.items())
            .unwrap_or_default()
            .iter()
            .map(|v| {
                format!(
                    "{} = {}",
                    v.str("name").unwrap_or("?"),
                    v.str("value").unwrap_or("<no value>")
                )
            })
            .collect())
    }

    /// Selects a frame; says which, `#1 prog.c:30 in main()`.
    pub fn select_frame(&mut self, to: FrameMove) -> MonResult<String> {
        let h = self.held_stopped()?;
        let cur = current_frame(h)?;
        let level: u32 = cur.str("level").and_then(|l| l.parse().ok()).unwrap_or(0);
        let target = match to {
            FrameMove::To(n) => n,
            FrameMove::Up => level + 1,
            FrameMove::Down if level == 0 => {
                return Err(Error::new(
                    ErrorKind::BadInput,
                    "already in the innermost frame",
                ));
            }
            FrameMove::Down => level - 1,
        };
        let depth = h
            .gdb
            .command("-stack-info-depth", PATIENCE)
            .map_err(gdb_err)?;
        let depth: u32 = depth
            .results
            .str("depth")
            .and_then(|d| d.parse().ok())
            .unwrap_or(0);
        if target >= depth {
            return Err(Error::new(
                ErrorKind::BadInput,
                format!(
                    "no frame {target}: the stack has {depth} (0 to {})",
                    depth.saturating_sub(1)
                ),
            ));
        }
        h.gdb
            .command(&format!("-stack-select-frame {target}"), PATIENCE)
            .map_err(gdb_err)?;
        let f = current_frame(h)?;
        Ok(format!("#{target} {}", frame_place(&f)))
    }

    /// The source lines around the selected frame's line, as gdb's `list` prints them.
    pub fn list_source(&mut self) -> MonResult<String> {
        let h = self.held_stopped()?;
        let f = current_frame(h)?;
        let (Some(file), Some(line)) = (f.str("fullname").or(f.str("file")), f.str("line")) else {
            return Err(symbol(format!(
                "no line information for {}",
                frame_place(&f)
            )));
        };
        let d = h
            .gdb
            .command(
                &format!(
                    "-interpreter-exec console {}",
                    quote(&format!("list {file}:{line}"))
                ),
                PATIENCE,
            )
            .map_err(gdb_err)?;
        Ok(d.console.trim_end().to_owned())
    }

    /// Sets a breakpoint in gdb at `location` (`FILE:LINE`, a function, `*ADDRESS`), with
    /// a condition, temporary or not; returns where it is, `prog.c:42` (no address, so
    /// the replies of many processes merge).
    pub fn break_at(
        &mut self,
        location: &str,
        condition: Option<&str>,
        temporary: bool,
    ) -> MonResult<String> {
        let resume_after = self.pause()?;
        let h = self.held()?;
        let res = insert(h, location, condition, temporary);
        if let Ok((n, _)) = &res {
            h.breaks.insert(*n, location.to_owned());
        }
        if resume_after {
            resume(h)?;
        }
        res.map(|(_, at)| at)
    }

    /// A native breakpoint (`break FUNCTION`) set on a held process: by address in gdb,
    /// reported under `name`.
    pub(super) fn break_native(&mut self, addr: u64, name: &str) -> MonResult<()> {
        self.break_at(&format!("*{addr:#x}"), None, false)?;
        let h = self.held()?;
        if let Some(l) = h.breaks.values_mut().find(|l| **l == format!("*{addr:#x}")) {
            *l = name.to_owned();
        }
        Ok(())
    }

    /// Sets a watchpoint on `expr` (hardware where gdb can); returns gdb's number.
    pub fn watch(&mut self, expr: &str) -> MonResult<String> {
        let h = self.held_stopped()?;
        let d = h
            .gdb
            .command(&format!("-break-watch {}", quote(expr)), PATIENCE)
            .map_err(gdb_err)?;
        let wpt = d.results.get("wpt").or(d.results.get("hw-wpt"));
        let n: u32 = wpt
            .and_then(|w| w.str("number"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        h.breaks.insert(n, expr.to_owned());
        Ok(format!("watchpoint on {expr}"))
    }

    /// Removes the breakpoints set at `location` (as it was asked for).
    pub fn delete_break(&mut self, location: &str) -> MonResult<()> {
        let numbers: Vec<u32> = self
            .held()?
            .breaks
            .iter()
            .filter(|(_, l)| *l == location)
            .map(|(n, _)| *n)
            .collect();
        if numbers.is_empty() {
            return Ok(());
        }
        let resume_after = self.pause()?;
        let h = self.held()?;
        for n in numbers {
            h.gdb
                .command(&format!("-break-delete {n}"), PATIENCE)
                .map_err(gdb_err)?;
            h.breaks.remove(&n);
        }
        if resume_after {
            resume(h)?;
        }
        Ok(())
    }

    /// Stops a running held process for a moment (to change its breakpoints); says whether
    /// to resume it after: not if it stopped on its own meanwhile (a hit, reported as usual).
    fn pause(&mut self) -> MonResult<bool> {
        let h = self.held()?;
        if !h.running {
            return Ok(false);
        }
        let stop = interrupt(h)?;
        let own = stop.str("reason") != Some("signal-received")
            || stop.str("signal-name") != Some("SIGINT");
        self.stopped(&stop, true);
        if own {
            return Ok(false);
        }
        // Back to running as far as the monitor's state says.
        self.proc()?.state = ProcState::Running;
        Ok(true)
    }

    /// Moves the stopped process on in source terms and waits for it to stop; says where
    /// it now stands (`prog.c:31 in main()`, with the returned value after `finish`),
    /// `running` if it has not stopped yet, or how it ended.
    pub fn step(&mut self, how: &Step) -> MonResult<String> {
        let h = self.held_stopped()?;
        let cmd = match how {
            Step::Step => "-exec-step".to_owned(),
            Step::Next => "-exec-next".to_owned(),
            Step::Finish => "-exec-finish".to_owned(),
            Step::Until(None) => "-exec-until".to_owned(),
            Step::Until(Some(loc)) => format!("-exec-until {loc}"),
        };
        // Stops not taken yet happened before this step: reported, not taken for its end.
        let earlier = h.gdb.take_stops();
        for s in &earlier {
            self.stopped(s, false);
        }
        let h = self.held()?;
        h.gdb.command(&cmd, PATIENCE).map_err(gdb_err)?;
        h.running = true;
        self.proc()?.state = ProcState::Running;
        // The threads' states `stop` recorded are not those of the stop this step ends in.
        self.run_states.clear();
        let h = self.held()?;
        let stop = loop {
            let Some(stop) = h.gdb.wait_stopped(STEP_PATIENCE).map_err(gdb_err)? else {
                return Ok("running".into());
            };
            // Only a stop after which gdb says the thread is stopped ends the step.
            if !thread_running(h)? {
                break stop;
            }
        };
        let place = self.stopped(&stop, true);
        Ok(match (how, stop.str("return-value")) {
            (Step::Finish, Some(v)) => format!("{place}, returned {v}"),
            _ => place,
        })
    }

    /// Notes a `*stopped` record: the process stopped (or ended). Breakpoint and
    /// watchpoint hits are reported as events; other stops too unless `asked` (a stop
    /// this request waits for). Returns where the process stands, or how it ended.
    pub(super) fn stopped(&mut self, stop: &MiValue, asked: bool) -> String {
        let reason = stop.str("reason").unwrap_or("");
        if reason.starts_with("exited") {
            let how = match (reason, stop.str("exit-code")) {
                ("exited-signalled", _) => {
                    format!(
                        "killed by {}",
                        stop.str("signal-name").unwrap_or("a signal")
                    )
                }
                (_, Some(c)) => format!("exited {}", i64::from_str_radix(c, 8).unwrap_or(0)),
                _ => "exited 0".into(),
            };
            // gdb has reaped it as the tracer; the monitor reaps it as its parent and
            // reports its end as for any process.
            if let Some(p) = self.proc.as_mut() {
                p.gdb = None;
                p.state = ProcState::Running;
            }
            return how;
        }
        let place = stop.get("frame").map(frame_place).unwrap_or_default();
        let Some(p) = self.proc.as_mut() else {
            return place;
        };
        p.state = ProcState::Stopped;
        let Some(h) = p.gdb.as_mut() else {
            return place;
        };
        h.running = false;
        let number = |key: &str| -> Option<u32> { stop.str(key).and_then(|n| n.parse().ok()) };
        let event = match reason {
            "breakpoint-hit" => {
                let n = number("bkptno").unwrap_or(0);
                let loc = h.breaks.get(&n).cloned().unwrap_or_else(|| n.to_string());
                if stop.str("disp") == Some("del") {
                    h.breaks.remove(&n);
                }
                Some(("breakpoint", loc))
            }
            "watchpoint-trigger" | "read-watchpoint-trigger" | "access-watchpoint-trigger" => {
                let w = stop
                    .get("wpt")
                    .or(stop.get("hw-awpt"))
                    .or(stop.get("hw-rwpt"));
                let exp = w.and_then(|w| w.str("exp")).unwrap_or("?").to_owned();
                let value = stop.get("value");
                let change = match (
                    value.and_then(|v| v.str("old")),
                    value.and_then(|v| v.str("new")),
                ) {
                    (Some(o), Some(n)) => format!("{exp}: {o} -> {n}"),
                    (None, Some(n)) => format!("{exp} = {n}"),
                    _ => exp,
                };
                Some(("watchpoint", change))
            }
            "signal-received" if !asked => {
                Some(("signal", stop.str("signal-name").unwrap_or("?").to_owned()))
            }
            _ if !asked => Some((reason, String::new())),
            _ => None,
        };
        if let Some((why, what)) = event {
            let _ = self.events.send(stop_event(why, &what, &place));
            if why == "breakpoint" {
                self.fire(
                    "breakpoint",
                    Some(Value::Str(what.clone())),
                    vec![Value::Str(what), Value::Int(0)],
                );
            }
        }
        place
    }

    /// Polls gdb for stops of the running process (called by the monitor's loop).
    pub(super) fn poll_symbolic(&mut self) {
        let stops = match self.proc.as_mut().and_then(|p| p.gdb.as_mut()) {
            Some(h) if h.running => h.gdb.take_stops(),
            _ => return,
        };
        for s in stops {
            self.stopped(&s, false);
        }
    }

    /// `stop` of a held process: gdb interrupts it.
    pub(super) fn stop_symbolic(&mut self) -> MonResult<()> {
        let h = self.held()?;
        if !h.running {
            return Ok(());
        }
        let stop = interrupt(h)?;
        self.stopped(&stop, true);
        Ok(())
    }

    /// `cont` of a held process.
    pub(super) fn cont_symbolic(&mut self) -> MonResult<()> {
        let h = self.held()?;
        if h.running {
            return Ok(());
        }
        resume(h)?;
        self.proc()?.state = ProcState::Running;
        Ok(())
    }

    /// The stack of a held process: see [`Monitor::backtrace_held`].
    pub(super) fn backtrace_symbolic(&mut self) -> MonResult<Vec<Frame>> {
        self.backtrace_held()
    }

    /// The gdb of the held process, which must be stopped.
    pub(super) fn held_gdb(&mut self) -> MonResult<&mut Gdb> {
        Ok(&mut self.held_stopped()?.gdb)
    }

    /// The status line of a held process.
    pub(super) fn status_symbolic(&mut self) -> MonResult<String> {
        let h = self.held()?;
        if h.running {
            return Ok("running".into());
        }
        let f = current_frame(h)?;
        // At the innermost frame, named as the native walk names it: a rank's status reads
        // the same whichever backend holds it.
        if f.str("level") == Some("0")
            && let Ok(frames) = self.backtrace_held()
            && let Some(top) = frames.first()
        {
            return Ok(match &top.location {
                Some(loc) => format!("stopped in {} at {loc}", top.function),
                None => format!("stopped in {}", top.function),
            });
        }
        let func = f.str("func").unwrap_or("??");
        Ok(match (f.str("file"), f.str("line")) {
            (Some(file), Some(line)) => format!(
                "stopped in {func} at {}:{line}",
                file.rsplit('/').next().unwrap_or(file)
            ),
            _ => format!("stopped in {func}"),
        })
    }

    /// Gives a held process back to the native monitor, stopped where it stands (gdb
    /// detaches with a SIGSTOP pending, so it goes into a group-stop, as `stop` leaves a
    /// process). Returns whether gdb held it.
    pub(super) fn release(&mut self) -> MonResult<bool> {
        let Some(p) = self.proc.as_mut() else {
            return Ok(false);
        };
        let pid = p.pid;
        let Some(h) = p.gdb.as_mut() else {
            return Ok(false);
        };
        if h.running {
            interrupt(h)?;
        }
        kill(pid, Signal::SIGSTOP).map_err(|e| errno(pid, "SIGSTOP", e))?;
        h.gdb.command("-target-detach", PATIENCE).map_err(gdb_err)?;
        p.gdb = None;
        for _ in 0..5000 {
            if proc_state(pid) == Some('T') {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        p.state = ProcState::Stopped;
        Ok(true)
    }

    /// Lets gdb go (the process with it), before the process is killed or detached.
    pub(super) fn drop_symbolic(&mut self) {
        if let Some(p) = self.proc.as_mut() {
            p.gdb = None;
        }
    }

    /// Starts the program stopped before its first instruction (traced from its exec),
    /// runs it to `main` and leaves it there in a SIGSTOP stop, untraced.
    pub(super) fn run_to_main(&mut self) -> MonResult<()> {
        let p = self.proc()?;
        let pid = p.pid;
        // PTRACE_TRACEME in the child: it stops with SIGTRAP at its exec.
        match waitpid(pid, Some(WaitPidFlag::__WALL)).map_err(|e| errno(pid, "waitpid", e))? {
            WaitStatus::Stopped(_, Signal::SIGTRAP) => {}
            other => {
                return Err(
                    state(format!("the program did not stop at its start: {other:?}"))
                        .with_pid(raw(pid)),
                );
            }
        }
        p.exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_else(|_| p.exe.clone());
        let addr = self.resolve("main")?;
        self.run_into(pid, addr, false)?;
        kill(pid, Signal::SIGSTOP).map_err(|e| errno(pid, "SIGSTOP", e))?;
        ptrace::detach(pid, None).map_err(|e| errno(pid, "ptrace detach", e))?;
        let p = self.proc()?;
        super::control::wait_stopped(p, WaitPidFlag::WUNTRACED, false)?;
        p.state = ProcState::Stopped;
        Ok(())
    }
}

/// The state letter of process `pid` in /proc (`R`, `S`, `T`…).
pub(super) fn proc_state(pid: nix::unistd::Pid) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Inserts a breakpoint; returns gdb's number and where it is (`prog.c:42`).
fn insert(
    h: &mut Held,
    location: &str,
    condition: Option<&str>,
    temporary: bool,
) -> MonResult<(u32, String)> {
    let mut cmd = String::from("-break-insert");
    if temporary {
        cmd.push_str(" -t");
    }
    if let Some(c) = condition {
        cmd.push_str(" -c ");
        cmd.push_str(&quote(c));
    }
    cmd.push(' ');
    cmd.push_str(location);
    let d = h.gdb.command(&cmd, PATIENCE).map_err(gdb_err)?;
    let b = d
        .results
        .get("bkpt")
        .cloned()
        .unwrap_or(MiValue::Tuple(vec![]));
    let n = b.str("number").and_then(|n| n.parse().ok()).unwrap_or(0);
    let at = match (b.str("file"), b.str("line")) {
        (Some(file), Some(line)) => format!("{}:{line}", file.rsplit('/').next().unwrap_or(file)),
        _ => b
            .str("original-location")
            .unwrap_or(location)
            .trim_start_matches("-function ")
            .to_owned(),
    };
    Ok((n, at))
}

/// Stops a running held process; returns its `*stopped` record.
pub(super) fn interrupt(h: &mut Held) -> MonResult<MiValue> {
    h.gdb
        .command("-exec-interrupt", PATIENCE)
        .map_err(gdb_err)?;
    let stop = h
        .gdb
        .wait_stopped(PATIENCE)
        .map_err(gdb_err)?
        .ok_or_else(|| Error::new(ErrorKind::Process, "gdb did not stop the process"))?;
    h.running = false;
    Ok(stop)
}

/// Whether gdb says the process's thread is running.
fn thread_running(h: &mut Held) -> MonResult<bool> {
    let d = h.gdb.command("-thread-info", PATIENCE).map_err(gdb_err)?;
    Ok(d.results
        .get("threads")
        .map(|t| t.items())
        .unwrap_or_default()
        .iter()
        .any(|t| t.str("state") == Some("running")))
}

/// Continues a stopped held process.
pub(super) fn resume(h: &mut Held) -> MonResult<()> {
    h.gdb.command("-exec-continue", PATIENCE).map_err(gdb_err)?;
    h.running = true;
    Ok(())
}

/// The selected frame.
fn current_frame(h: &mut Held) -> MonResult<MiValue> {
    let d = h
        .gdb
        .command("-stack-info-frame", PATIENCE)
        .map_err(gdb_err)?;
    Ok(d.results
        .get("frame")
        .cloned()
        .unwrap_or(MiValue::Tuple(vec![])))
}

#[cfg(test)]
mod tests;
