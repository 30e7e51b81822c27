//! Reading a process: facts and metrics from /proc, registers, memory, and its stack
//! (registers and stacks need a ptrace stop: the process must be stopped first).

use nix::sys::ptrace;
use nix::unistd::Pid;

use super::control::wait_trace_stop;
use super::{Frame, MonResult, Monitor, ProcState, errno, raw, state};
use crate::error::{Error, ErrorKind};

impl Monitor {
    /// Metrics of the process for `sdm top`, from /proc: CPU % since the previous sample
    /// (since the start for the first), RSS (kB), threads, bytes read and written, and
    /// context switches (voluntary + involuntary), as `name value` pairs.
    pub fn procstat(&mut self) -> MonResult<Vec<(&'static str, f64)>> {
        let pid = self.proc()?.pid;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_err(|e| errno(pid, &format!("/proc/{pid}/stat"), e))?;
        let f: Vec<&str> = stat
            .rsplit_once(") ")
            .map(|(_, r)| r)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let field = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let tick = 100.0; // USER_HZ on Linux
        let cpu = (field(11) + field(12)) / tick;
        let now = std::time::Instant::now();
        let cpu_pct = match self.last_cpu {
            Some((c, t)) if now > t => 100.0 * (cpu - c) / now.duration_since(t).as_secs_f64(),
            _ => {
                let uptime: f64 = std::fs::read_to_string("/proc/uptime")
                    .ok()
                    .and_then(|u| u.split_whitespace().next()?.parse().ok())
                    .unwrap_or(0.0);
                let age = uptime - field(19) / tick;
                if age > 0.0 { 100.0 * cpu / age } else { 0.0 }
            }
        };
        self.last_cpu = Some((cpu, now));
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let from_status = |key: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0.0)
        };
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
        let from_io = |key: &str| -> f64 {
            io.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0)
        };
        Ok(vec![
            ("cpu_pct", (cpu_pct * 10.0).round() / 10.0),
            ("rss_kb", from_status("VmRSS:")),
            ("threads", from_status("Threads:")),
            ("read_bytes", from_io("rchar:")),
            ("write_bytes", from_io("wchar:")),
            (
                "ctx_switches",
                from_status("voluntary_ctxt_switches:")
                    + from_status("nonvoluntary_ctxt_switches:"),
            ),
        ])
    }

    /// Facts from /proc: state letter, RSS (kB), user and system time (s), argv.
    pub fn process_info(&mut self) -> MonResult<(String, u64, f64, f64, Vec<String>)> {
        let pid = self.proc()?.pid;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_err(|e| errno(pid, &format!("/proc/{pid}/stat"), e))?;
        let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        let tick = 100.0; // USER_HZ on Linux
        let state = f.first().copied().unwrap_or("?").to_owned();
        let utime = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / tick;
        let stime = f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / tick;
        let rss_pages: u64 = f.get(21).and_then(|v| v.parse().ok()).unwrap_or(0);
        let argv = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_default()
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
        Ok((state, rss_pages * 4, utime, stime, argv))
    }

    /// Runs `f` with the process ptrace-stopped, seizing it (for good) if it is not traced yet.
    pub(super) fn with_traced<R>(&mut self, f: impl FnOnce(Pid) -> MonResult<R>) -> MonResult<R> {
        let p = self.proc()?;
        if p.gdb.is_some() {
            return Err(state(
                "the process is held by gdb (since a symbolic command): use the symbolic commands"
                    .into(),
            )
            .with_pid(raw(p.pid)));
        }
        if !matches!(p.state, ProcState::Stopped | ProcState::AtBreakpoint(_)) {
            return Err(state("the process must be stopped first".into()).with_pid(raw(p.pid)));
        }
        if p.traced {
            return f(p.pid);
        }
        // Stopped by SIGSTOP: from now on held in a ptrace stop instead (state `t`), which
        // `cont` ends with PTRACE_CONT like any traced stop. (Detaching again would let
        // the process run until the SIGSTOP passed on with the detach takes effect again:
        // a process the console calls stopped must not run.)
        // Seizing a process in group-stop re-traps it at once (a PTRACE_EVENT_STOP to
        // wait for); an interrupt on top would stay pending and stop it again right after
        // the next `cont`.
        ptrace::seize(p.pid, ptrace::Options::PTRACE_O_EXITKILL)
            .map_err(|e| errno(p.pid, "ptrace seize", e))?;
        p.traced = true;
        wait_trace_stop(p)?;
        f(p.pid)
    }

    /// Integer registers (x86-64), as (name, value) pairs.
    pub fn registers(&mut self) -> MonResult<Vec<(&'static str, u64)>> {
        self.with_traced(|pid| {
            let r = ptrace::getregs(pid).map_err(|e| errno(pid, "ptrace getregs", e))?;
            Ok(vec![
                ("rip", r.rip),
                ("rsp", r.rsp),
                ("rbp", r.rbp),
                ("rax", r.rax),
                ("rbx", r.rbx),
                ("rcx", r.rcx),
                ("rdx", r.rdx),
                ("rsi", r.rsi),
                ("rdi", r.rdi),
                ("r8", r.r8),
                ("r9", r.r9),
                ("r10", r.r10),
                ("r11", r.r11),
                ("r12", r.r12),
                ("r13", r.r13),
                ("r14", r.r14),
                ("r15", r.r15),
                ("eflags", r.eflags),
            ])
        })
    }

    /// Reads `len` bytes at `addr` (through /proc/PID/mem).
    pub fn read_memory(&mut self, addr: u64, len: usize) -> MonResult<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let pid = self.proc()?.pid;
        let f = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| {
            Error::new(ErrorKind::Memory, format!("/proc/{pid}/mem: {e}"))
                .caused_by(e)
                .with_pid(raw(pid))
        })?;
        let mut buf = vec![0u8; len.min(1 << 20)];
        f.read_exact_at(&mut buf, addr).map_err(|e| {
            Error::new(
                ErrorKind::Memory,
                format!("reading {len} bytes at {addr:#x}: {e}"),
            )
            .caused_by(e)
            .with_pid(raw(pid))
        })?;
        Ok(buf)
    }

    /// Writes `bytes` at `addr` (through /proc/PID/mem).
    pub fn write_memory(&mut self, addr: u64, bytes: &[u8]) -> MonResult<()> {
        use std::os::unix::fs::FileExt;
        let pid = self.proc()?.pid;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| {
                Error::new(ErrorKind::Memory, format!("/proc/{pid}/mem: {e}"))
                    .caused_by(e)
                    .with_pid(raw(pid))
            })?;
        f.write_all_at(bytes, addr).map_err(|e| {
            Error::new(
                ErrorKind::Memory,
                format!("writing {} bytes at {addr:#x}: {e}", bytes.len()),
            )
            .caused_by(e)
            .with_pid(raw(pid))
        })
    }

    /// The stack as (pc, fp) pairs, innermost first, one per real frame, unwound from
    /// DWARF call-frame information (frame pointers where none covers a pc).
    pub fn raw_backtrace(&mut self) -> MonResult<Vec<(u64, u64)>> {
        let pid = self.with_traced(Ok)?;
        self.stacks.raw_backtrace(pid).map_err(|e| {
            Error::new(ErrorKind::Process, e.to_string())
                .caused_by(e)
                .with_pid(raw(pid))
        })
    }

    /// The stack, innermost first, each frame symbolized where symbols or debug info exist;
    /// functions inlined at a frame's pc are frames of their own, innermost first.
    pub fn backtrace(&mut self) -> MonResult<Vec<Frame>> {
        if self.symbolic() {
            return self.backtrace_symbolic();
        }
        let pid = self.with_traced(Ok)?;
        self.stacks.backtrace(pid).map_err(|e| {
            Error::new(ErrorKind::Process, e.to_string())
                .caused_by(e)
                .with_pid(raw(pid))
        })
    }
}
