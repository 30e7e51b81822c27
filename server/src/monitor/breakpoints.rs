//! Native breakpoints: a function name or address resolved in the process's executable,
//! an `int3` byte poked over the instruction (the process stays ptrace-attached from then
//! on) and the original byte restored when the breakpoint is cleared. Hits are noticed by
//! the event poll (`super::events`).

use std::path::Path;

use nix::sys::ptrace;
use nix::unistd::Pid;

use super::control::{wait_interrupted, wait_trace_stop};
use super::{MonResult, Monitor, ProcState, errno, state, symbol};
use crate::unwind::read_maps;

impl Monitor {
    /// Sets a breakpoint on a function name or `0x` address; returns the address. The
    /// process stays ptrace-attached from now on.
    pub fn set_breakpoint(&mut self, target: &str) -> MonResult<u64> {
        let addr = self.resolve(target)?;
        if self.symbolic() {
            self.break_native(addr, target)?;
            return Ok(addr);
        }
        let p = self.proc()?;
        if p.breakpoints.contains_key(&addr) {
            return Ok(addr);
        }
        let was_running = p.state == ProcState::Running;
        if matches!(p.state, ProcState::Exited(_) | ProcState::Signaled(_)) {
            return Err(state(format!("process {} has ended", p.pid)));
        }
        if !p.traced {
            ptrace::seize(p.pid, ptrace::Options::PTRACE_O_EXITKILL)
                .map_err(|e| errno(p.pid, "ptrace seize", e))?;
            p.traced = true;
            if !was_running {
                // Stopped by SIGSTOP: from now on held in a ptrace stop instead (state
                // `t`), which `cont` ends with PTRACE_CONT like any traced stop. Seizing a
                // process in group-stop re-traps it at once: no interrupt (it would stay
                // pending and stop the process again after the next `cont`).
                wait_trace_stop(p)?;
            }
        }
        if was_running {
            ptrace::interrupt(p.pid).map_err(|e| errno(p.pid, "ptrace interrupt", e))?;
            wait_interrupted(p)?;
        }
        let word = ptrace::read(p.pid, addr as ptrace::AddressType)
            .map_err(|e| errno(p.pid, &format!("reading {addr:#x}"), e))?;
        let orig = (word & 0xff) as u8;
        poke_byte(p.pid, addr, 0xcc)?;
        p.breakpoints.insert(addr, (orig, target.to_owned()));
        if was_running {
            ptrace::cont(p.pid, None).map_err(|e| errno(p.pid, "ptrace cont", e))?;
        }
        Ok(addr)
    }

    /// The address of a function name (or a `0x` address) in the process.
    pub(super) fn resolve(&mut self, target: &str) -> MonResult<u64> {
        let (pid, exe) = {
            let p = self.proc()?;
            (p.pid, p.exe.clone())
        };
        Ok(match target.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16)
                .map_err(|_| symbol(format!("bad address {target:?}")))?,
            None => {
                let svma = symbol_address(&exe, target)?;
                let bias = read_maps(pid)
                    .iter()
                    .find(|m| m.path == exe)
                    .map(|m| m.start - m.offset)
                    .ok_or_else(|| {
                        symbol(format!("{} is not mapped in process {pid}", exe.display()))
                    })?;
                if is_pie(&exe)? { bias + svma } else { svma }
            }
        })
    }

    /// Removes the breakpoint at `target` (restoring the original byte); a process stopped
    /// at it stays stopped there, and continues from it with `cont`.
    pub fn clear_breakpoint(&mut self, target: &str) -> MonResult<()> {
        if self.symbolic() {
            return self.delete_break(target);
        }
        let addr = self.resolve(target)?;
        let p = self.proc()?;
        let Some(&(orig, _)) = p.breakpoints.get(&addr) else {
            return Ok(());
        };
        match p.state {
            ProcState::AtBreakpoint(a) if a == addr => {
                // Stopped on it (the pc already back on the breakpoint's instruction):
                // restored, it is a plain traced stop that `cont` resumes.
                poke_byte(p.pid, addr, orig)?;
                p.breakpoints.remove(&addr);
                p.state = ProcState::Stopped;
                return Ok(());
            }
            ProcState::Exited(_) | ProcState::Signaled(_) => {
                p.breakpoints.remove(&addr);
                return Ok(());
            }
            _ => {}
        }
        let was_running = p.state == ProcState::Running;
        if was_running {
            ptrace::interrupt(p.pid).map_err(|e| errno(p.pid, "ptrace interrupt", e))?;
            wait_interrupted(p)?;
        }
        poke_byte(p.pid, addr, orig)?;
        p.breakpoints.remove(&addr);
        if was_running {
            ptrace::cont(p.pid, None).map_err(|e| errno(p.pid, "ptrace cont", e))?;
        }
        Ok(())
    }
}

pub(super) fn poke_byte(pid: Pid, addr: u64, byte: u8) -> MonResult<()> {
    let word = ptrace::read(pid, addr as ptrace::AddressType)
        .map_err(|e| errno(pid, &format!("reading {addr:#x}"), e))?;
    let new = (word & !0xff) | i64::from(byte);
    ptrace::write(pid, addr as ptrace::AddressType, new)
        .map_err(|e| errno(pid, &format!("writing {addr:#x}"), e))
}

fn symbol_address(exe: &Path, name: &str) -> MonResult<u64> {
    use object::{Object, ObjectSymbol};
    let data =
        std::fs::read(exe).map_err(|e| symbol(format!("{}: {e}", exe.display())).caused_by(e))?;
    let file = object::File::parse(&*data)
        .map_err(|e| symbol(format!("{}: {e}", exe.display())).caused_by(e))?;
    file.symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name() == Ok(name) && s.address() != 0)
        .map(|s| s.address())
        .ok_or_else(|| symbol(format!("no function {name:?} in {}", exe.display())))
}

fn is_pie(exe: &Path) -> MonResult<bool> {
    use object::Object;
    let data =
        std::fs::read(exe).map_err(|e| symbol(format!("{}: {e}", exe.display())).caused_by(e))?;
    let file = object::File::parse(&*data)
        .map_err(|e| symbol(format!("{}: {e}", exe.display())).caused_by(e))?;
    Ok(file.kind() == object::ObjectKind::Dynamic)
}
