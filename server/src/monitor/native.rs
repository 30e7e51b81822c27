//! `print` without gdb: while the native monitor holds the process (no symbolic command
//! has handed it to gdb yet), an expression the native evaluator supports
//! (`crate::natprint`) is answered from the DWARF and the stopped process's memory at
//! frame 0; what it does not support goes to gdb as before.

use nix::sys::ptrace;

use super::{MonResult, Monitor, ProcState, errno, symbol};
use crate::natprint::{Failure, NotNative, Process};
use crate::unwind::ThreadRegs;

impl Monitor {
    /// The value of `expr` evaluated natively, gdb's `No symbol` error, or why gdb must
    /// answer instead.
    pub(super) fn evaluate_native(&mut self, expr: &str) -> Result<MonResult<String>, NotNative> {
        let Some(p) = self.proc.as_ref() else {
            return Err(NotNative::State);
        };
        if p.gdb.is_some() || !matches!(p.state, ProcState::Stopped | ProcState::AtBreakpoint(_)) {
            return Err(NotNative::State);
        }
        let exe = p.exe.clone();
        let pid = match self.with_traced(Ok) {
            Ok(pid) => pid,
            Err(_) => return Err(NotNative::State),
        };
        let r = match ptrace::getregs(pid) {
            Ok(r) => r,
            Err(e) => return Ok(Err(errno(pid, "ptrace getregs", e))),
        };
        let (files, cfa) = self
            .stacks
            .native_view(
                pid,
                ThreadRegs {
                    rip: r.rip,
                    rsp: r.rsp,
                    rbp: r.rbp,
                },
            )
            .map_err(|_| NotNative::State)?;
        let exe = files
            .iter()
            .position(|f| f.path == exe)
            .ok_or(NotNative::Symbols)?;
        let mem = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|_| NotNative::State)?;
        let process = Process {
            mem: &mem,
            regs: [
                r.rax, r.rdx, r.rcx, r.rbx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11,
                r.r12, r.r13, r.r14, r.r15, r.rip,
            ],
            cfa,
            files: &files,
            exe,
        };
        match process.evaluate(expr) {
            Ok(v) => Ok(Ok(v)),
            Err(Failure::NoSymbol(message)) => Ok(Err(symbol(message))),
            Err(Failure::NotNative(why)) => Err(why),
        }
    }
}
