//! Where a native breakpoint hit stands, in words that are the same for every process of
//! one program, so the hits of many ranks merge into one line: `work() at prog.c:20`, or
//! `work() in prog+0x1139` without line information (module and offset, never the
//! absolute address, which each process's load address makes different).

use nix::unistd::Pid;

use super::Monitor;
use crate::unwind::read_maps;

impl Monitor {
    /// The place of the hit at `addr` in the stopped process `pid` (see the module doc).
    pub(super) fn hit_place(&mut self, pid: Pid, addr: u64) -> String {
        // The innermost frame, where it has a name (not just its address).
        let top = self
            .stacks
            .backtrace(pid)
            .ok()
            .and_then(|f| f.into_iter().next())
            .filter(|f| !f.function.starts_with("0x"));
        let module = module_offset(pid, addr);
        match (top, module) {
            (Some(f), module) => match (f.location, module) {
                (Some(loc), _) => format!("{}() at {loc}", f.function),
                (None, Some(m)) => format!("{}() in {m}", f.function),
                (None, None) => format!("{}()", f.function),
            },
            (None, Some(m)) => m,
            (None, None) => "an unknown place".into(),
        }
    }
}

/// `module+0xOFFSET` of `addr` in `pid`'s mappings (the offset in the file).
fn module_offset(pid: Pid, addr: u64) -> Option<String> {
    let m = read_maps(pid)
        .into_iter()
        .find(|m| m.start <= addr && addr < m.end)?;
    let name = m.path.file_name()?.to_string_lossy().into_owned();
    Some(format!("{name}+{:#x}", addr - m.start + m.offset))
}
