//! Ending a started program with everything it started, as srun ends a step: the program
//! runs in a session of its own (`setsid` at its start), and its end reaches every process
//! of that session and every descendant of its processes (SIGTERM with SIGCONT, then
//! SIGKILL after a grace period). A shell's children hold the program's output open, so
//! its end could never be reported while one of them lived.

use std::collections::BTreeSet;
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long the processes of a program get to end after SIGTERM before SIGKILL.
pub(super) const GRACE: Duration = Duration::from_secs(2);

/// How long after SIGKILL the processes are waited for (they cannot refuse it; this only
/// bounds a wait on one stuck in the kernel).
const AFTER_KILL: Duration = Duration::from_secs(5);

/// How often the processes are looked for while they end.
const POLL: Duration = Duration::from_millis(10);

/// Every live process (zombies excluded: they have ended) with its parent and session.
fn processes() -> Vec<crate::proctree::ProcStat> {
    crate::proctree::all_stats()
        .into_iter()
        .filter(|s| s.state != 'Z' && s.state != 'X')
        .collect()
}

/// The live processes of session `sid` (its leader's pid) and all their descendants, those
/// that left the session (`setsid`) included; `sid` itself too while it lives.
pub(super) fn members(sid: Pid) -> Vec<Pid> {
    let all = processes();
    let mut found: BTreeSet<i32> = all
        .iter()
        .filter(|e| e.session == sid.as_raw() || e.pid == sid.as_raw())
        .map(|e| e.pid)
        .collect();
    // Descendants, to a fixed point (a child may be listed before its parent).
    loop {
        let before = found.len();
        for e in &all {
            if found.contains(&e.ppid) {
                found.insert(e.pid);
            }
        }
        if found.len() == before {
            break;
        }
    }
    found.into_iter().map(Pid::from_raw).collect()
}

/// Sends `sig` to every member of session `sid`.
fn signal_all(sid: Pid, sig: Signal) {
    for p in members(sid) {
        let _ = kill(p, sig);
    }
}

/// Waits until no member of `sid` lives (and `leader`, if given, is reaped), until
/// `deadline`; returns whether they all ended.
fn wait_gone(sid: Pid, leader: &mut Option<&mut Child>, deadline: Instant) -> bool {
    loop {
        if let Some(c) = leader
            && matches!(c.try_wait(), Ok(Some(_)) | Err(_))
        {
            *leader = None;
        }
        // A leader not reaped yet counts as a member (a zombie does not).
        if leader.is_none() && members(sid).is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Ends the processes of session `sid` whose leader has already ended: SIGTERM (and
/// SIGCONT, so stopped ones get it), then SIGKILL for those still there after `grace`.
pub(super) fn end_rest(sid: Pid, grace: Duration) {
    if members(sid).is_empty() {
        return;
    }
    signal_all(sid, Signal::SIGTERM);
    signal_all(sid, Signal::SIGCONT);
    if !wait_gone(sid, &mut None, Instant::now() + grace) {
        signal_all(sid, Signal::SIGKILL);
        wait_gone(sid, &mut None, Instant::now() + AFTER_KILL);
    }
}

/// How the leader of a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum End {
    /// It exited with this status.
    Exited(i32),
    /// A signal killed it.
    Signaled(Signal),
}

/// Ends `leader` (the program, started in a session of its own) and every process of its
/// session and their descendants: SIGTERM with SIGCONT, SIGKILL for what is left after
/// `grace`; reaps the leader and says how it ended. A `traced` leader is killed at once
/// (a ptrace stop would hold SIGTERM).
pub(super) fn end(leader: &mut Child, traced: bool, grace: Duration) -> End {
    let sid = Pid::from_raw(leader.id() as i32);
    if traced {
        let _ = kill(sid, Signal::SIGKILL);
    }
    signal_all(sid, Signal::SIGTERM);
    signal_all(sid, Signal::SIGCONT);
    let mut waiting = Some(&mut *leader);
    if !wait_gone(sid, &mut waiting, Instant::now() + grace) {
        signal_all(sid, Signal::SIGKILL);
        let _ = kill(sid, Signal::SIGKILL);
        wait_gone(sid, &mut waiting, Instant::now() + AFTER_KILL);
    }
    // Reaped by `wait_gone` (its status is kept by `Child`), or waited for here.
    let status = match leader.try_wait() {
        Ok(Some(s)) => Some(s),
        _ => leader.wait().ok(),
    };
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => End::Exited(c),
            (None, Some(sig)) => End::Signaled(Signal::try_from(sig).unwrap_or(Signal::SIGKILL)),
            (None, None) => End::Signaled(Signal::SIGKILL),
        },
        None => End::Signaled(Signal::SIGKILL),
    }
}
