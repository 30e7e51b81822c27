//! Every thread of the monitored process, stopped and walked: the stacks of all its tasks
//! (/proc/PID/task), not only of the thread the monitor traces, so MPI progress threads,
//! OpenMP workers and helper threads are seen (STAT walks every thread).
//!
//! Natively, each other task is seized and interrupted for its walk and let go again at
//! once (back into the process's group-stop when `stop` left it in one). Where gdb holds
//! the process, gdb gives each thread's registers and the same native unwinder walks from
//! them, so a stack reads the same whichever backend holds the rank (names, inline frames
//! and the outermost frames alike); gdb's own frames are the fallback.

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::{Frame, MonResult, Monitor, errno, raw};
use crate::error::{Error, ErrorKind};
use crate::gdbmi::Gdb;
use crate::unwind::{Stacks, ThreadRegs};

/// The stack of one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadStack {
    /// The thread's id (its LWP, as `ps -L` shows it).
    pub tid: u32,
    /// Its name (/proc/PID/task/TID/comm).
    pub name: String,
    /// Its frames, innermost first.
    pub frames: Vec<Frame>,
    /// Its `pthread_t` (x86-64's thread pointer, the fs base) where read: how a Python
    /// before 3.11 names its threads.
    pub pthread: Option<u64>,
    /// Its state letter (/proc: `R` running, `S` asleep…) just before `stop` stopped the
    /// process; `None` where the process was not stopped by `stop` or the thread is newer.
    pub state: Option<char>,
}

/// How long a gdb command for a thread's registers or frames may take.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(240);

/// The ids of the tasks of `pid`, the main thread first, then by id.
fn tasks(pid: Pid) -> Vec<Pid> {
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    tids.sort_by_key(|&t| (t != pid.as_raw(), t));
    if tids.first() != Some(&pid.as_raw()) {
        tids.insert(0, pid.as_raw());
    }
    tids.into_iter().map(Pid::from_raw).collect()
}

/// The name of thread `tid` of `pid`.
fn thread_name(pid: Pid, tid: Pid) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_default()
}

/// The state letter (/proc/PID/task/TID/stat: `R`, `S`, `T`…) of each task of `pid`.
pub(super) fn task_states(pid: Pid) -> std::collections::HashMap<u32, char> {
    tasks(pid)
        .into_iter()
        .filter_map(|tid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
            Some((raw(tid), stat.rsplit_once(") ")?.1.chars().next()?))
        })
        .collect()
}

/// Seizes the (untraced) task `tid`, stops it, walks its stack, reads its thread pointer
/// and lets it go; `None` where the task is gone or cannot be traced (it exited meanwhile).
fn walk_other(stacks: &mut Stacks, tid: Pid) -> Option<(Vec<Frame>, Option<u64>)> {
    ptrace::seize(tid, ptrace::Options::empty()).ok()?;
    // A task in the group-stop traps by itself once seized; the interrupt stops a running
    // one (and is dropped with the detach where it was not needed).
    let _ = ptrace::interrupt(tid);
    // A signal on its way to the thread is passed on when it is let go, never dropped.
    let mut pending: Option<Signal> = None;
    loop {
        match waitpid(tid, Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::PtraceEvent(..)) => break,
            Ok(WaitStatus::Stopped(_, sig)) => {
                pending = Some(sig);
                break;
            }
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
    let frames = stacks.backtrace(tid).ok();
    let pthread = thread_pointer(tid);
    let _ = ptrace::detach(tid, pending);
    Some((frames?, pthread))
}

/// The thread pointer (fs base) of the ptrace-stopped task `tid`.
fn thread_pointer(tid: Pid) -> Option<u64> {
    ptrace::getregs(tid).ok().map(|r| r.fs_base)
}

/// Ends the group-stop of the other threads of `pid` (a SIGCONT) where it has any: a
/// `stop` by SIGSTOP stops every thread, and a traced main thread is continued by ptrace
/// alone, which resumes only that thread. (A SIGCONT to threads not stopped does nothing.)
pub(super) fn end_group_stop(pid: Pid) -> MonResult<()> {
    // Any other thread, not only those seen stopped now: one a stack walk just let go
    // may not be back in the group-stop yet, and would enter it for good after the check.
    let stopped = tasks(pid).into_iter().any(|tid| tid != pid);
    if stopped {
        nix::sys::signal::kill(pid, Signal::SIGCONT).map_err(|e| errno(pid, "SIGCONT", e))?;
    }
    Ok(())
}

impl Monitor {
    /// The stacks of every thread of the stopped process, the main thread first; in a
    /// Python process with its Python frames merged in (see [`crate::python`]).
    pub fn thread_backtraces(&mut self) -> MonResult<Vec<ThreadStack>> {
        let mut threads = if self.symbolic() {
            self.thread_backtraces_symbolic()?
        } else {
            self.thread_backtraces_native()?
        };
        let pid = self.proc()?.pid;
        self.python.merge_into(pid, &mut threads);
        for t in &mut threads {
            t.state = self.run_states.get(&t.tid).copied();
        }
        Ok(threads)
    }

    /// The native stacks of every thread of the stopped process, the main thread first.
    fn thread_backtraces_native(&mut self) -> MonResult<Vec<ThreadStack>> {
        let pid = self.with_traced(Ok)?;
        let mut out = Vec::new();
        for tid in tasks(pid) {
            let (frames, pthread) = if tid == pid {
                let frames = self.stacks.backtrace(pid).map_err(|e| {
                    Error::new(ErrorKind::Process, e.to_string())
                        .caused_by(e)
                        .with_pid(raw(pid))
                })?;
                (frames, thread_pointer(pid))
            } else {
                match walk_other(&mut self.stacks, tid) {
                    Some(walked) => walked,
                    None => continue,
                }
            };
            out.push(ThreadStack {
                tid: raw(tid),
                name: thread_name(pid, tid),
                frames,
                pthread,
                state: None,
            });
        }
        Ok(out)
    }

    /// The stacks of every thread of a process gdb holds: gdb's registers of each thread,
    /// walked by the native unwinder (gdb's frames where that fails).
    fn thread_backtraces_symbolic(&mut self) -> MonResult<Vec<ThreadStack>> {
        let pid = self.proc()?.pid;
        let gdb = self.held_gdb()?;
        let d = gdb.command("-thread-info", PATIENCE).map_err(|e| {
            Error::new(ErrorKind::Process, e.to_string())
                .caused_by(e)
                .with_pid(raw(pid))
        })?;
        let threads: Vec<(String, Pid)> = d
            .results
            .get("threads")
            .map(|t| t.items())
            .unwrap_or_default()
            .iter()
            .filter_map(|t| {
                let id = t.str("id")?.to_owned();
                Some((id, lwp(t.str("target-id")?).unwrap_or(pid)))
            })
            .collect();
        let mut out = Vec::new();
        for (id, tid) in threads {
            let regs = thread_regs(self.held_gdb()?, &id);
            let native = regs.and_then(|r| self.stacks.backtrace_from(pid, r).ok());
            let frames = match native {
                Some(f) => f,
                None => gdb_frames(self.held_gdb()?, Some(&id))?,
            };
            out.push(ThreadStack {
                tid: raw(tid),
                name: thread_name(pid, tid),
                frames,
                pthread: None,
                state: None,
            });
        }
        out.sort_by_key(|t| (t.tid != raw(pid), t.tid));
        Ok(out)
    }

    /// The stack of gdb's selected thread in a process gdb holds, walked natively from
    /// gdb's registers (as [`Monitor::backtrace`] walks it without gdb), or gdb's frames.
    pub(super) fn backtrace_held(&mut self) -> MonResult<Vec<Frame>> {
        let pid = self.proc()?.pid;
        if let Some(r) = thread_regs(self.held_gdb()?, "")
            && let Ok(f) = self.stacks.backtrace_from(pid, r)
        {
            return Ok(f);
        }
        gdb_frames(self.held_gdb()?, None)
    }
}

/// The LWP in gdb's `target-id` (`Thread 0x7f… (LWP 1234)`, `process 1234`).
fn lwp(target: &str) -> Option<Pid> {
    let tail = target
        .rsplit_once("LWP ")
        .or_else(|| target.rsplit_once("process "))?
        .1;
    let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().map(Pid::from_raw)
}

/// rip, rsp and rbp of gdb's thread `id` (`""`: the selected thread), innermost frame.
fn thread_regs(gdb: &mut Gdb, id: &str) -> Option<ThreadRegs> {
    let thread = if id.is_empty() {
        String::new()
    } else {
        format!("--thread {id} --frame 0 ")
    };
    // amd64's gdb register numbers: rbp 6, rsp 7, rip 16.
    let d = gdb
        .command(
            &format!("-data-list-register-values {thread}x 6 7 16"),
            PATIENCE,
        )
        .ok()?;
    let value = |n: &str| -> Option<u64> {
        let v = d
            .results
            .get("register-values")?
            .items()
            .iter()
            .find(|r| r.str("number") == Some(n))?
            .str("value")?;
        u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
    };
    Some(ThreadRegs {
        rbp: value("6")?,
        rsp: value("7")?,
        rip: value("16")?,
    })
}

/// gdb's frames of thread `thread` (`None`: the selected one), named as the native
/// unwinder names them where gdb's names differ only by glibc's internal aliases
/// (`__GI___clock_nanosleep` is `__clock_nanosleep`).
fn gdb_frames(gdb: &mut Gdb, thread: Option<&str>) -> MonResult<Vec<Frame>> {
    let cmd = match thread {
        Some(id) => format!("-stack-list-frames --thread {id}"),
        None => "-stack-list-frames".to_owned(),
    };
    let d = gdb
        .command(&cmd, PATIENCE)
        .map_err(|e| Error::new(ErrorKind::Process, e.to_string()).caused_by(e))?;
    Ok(d.results
        .get("stack")
        .map(|s| s.items())
        .unwrap_or_default()
        .iter()
        .filter_map(|f| f.get("frame"))
        .map(|f| {
            let pc = f
                .str("addr")
                .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
                .unwrap_or(0);
            let module = f
                .str("from")
                .map(|m| m.rsplit('/').next().unwrap_or(m).to_owned())
                .unwrap_or_default();
            let func = f.str("func").unwrap_or(super::UNKNOWN_FRAME);
            Frame {
                pc,
                fp: 0,
                function: func.strip_prefix("__GI_").unwrap_or(func).to_owned(),
                location: match (f.str("file"), f.str("line")) {
                    (Some(file), Some(line)) => Some(format!(
                        "{}:{line}",
                        file.rsplit('/').next().unwrap_or(file)
                    )),
                    _ => None,
                },
                inlined: false,
                module,
                offset: pc,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lwp_is_read_from_gdbs_target_id() {
        assert_eq!(lwp("Thread 0x7f3e (LWP 4242)"), Some(Pid::from_raw(4242)));
        assert_eq!(lwp("process 77"), Some(Pid::from_raw(77)));
        assert_eq!(lwp("remote"), None);
    }

    #[test]
    fn the_main_thread_comes_first() {
        let me = nix::unistd::getpid();
        let t = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(200)));
        let all = tasks(me);
        assert_eq!(all[0], me);
        assert!(all.len() >= 2, "{all:?}");
        t.join().unwrap();
    }
}
