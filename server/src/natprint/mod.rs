//! Native `print`: evaluates the common expressions (a variable, then `.member`, `->member`,
//! `[n]`, prefix `*`) from the executable's DWARF and the stopped process's memory, and
//! prints the value exactly as gdb's MI `-data-evaluate-expression` would, so the first
//! `print` on a rank needs no gdb. What this does not support gives a typed
//! [`NotNative`], and the monitor hands the expression to gdb as before.
//!
//! The DWARF of a file is read once per server ([`Debug`], kept with the file's other
//! tables in `crate::unwind::Files`) and shared by every local rank's monitor.

mod debug;
mod expr;
mod float;
mod format;
mod locate;
mod types;

use std::ops::Range;
use std::path::PathBuf;

pub(crate) use debug::Debug;

/// Why an expression is not evaluated natively (it goes to gdb).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotNative {
    /// Not an identifier with `.`, `->`, `[n]` and `*` (casts, arithmetic, calls, `$reg`).
    Syntax,
    /// No DWARF here, or a name this cannot be sure of (a function, a type, a symbol of a
    /// file without DWARF, a separate debug file gdb may read).
    Symbols,
    /// Not C (C++, Rust, Fortran print otherwise).
    Language,
    /// A type this does not print exactly as gdb (NaNs, long double, bit fields, functions,
    /// a pointer gdb may name with a symbol, bytes beyond ASCII…).
    Type,
    /// A location this does not evaluate (registers, location lists, inlined frames).
    Location,
    /// Something gdb would report as an error (bad member, unreadable memory): gdb's words.
    Error,
    /// The process is not in a state to read (running, gone, held by gdb).
    State,
}

/// How a native evaluation ended, when it gave no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The name exists nowhere: gdb's `No symbol "NAME" in current context.`
    NoSymbol(String),
    /// Hand the expression to gdb.
    NotNative(NotNative),
}

impl From<NotNative> for Failure {
    fn from(n: NotNative) -> Self {
        Failure::NotNative(n)
    }
}

/// A file mapped in the process, as the evaluator sees it.
pub(crate) struct Mapped {
    /// Its path.
    pub(crate) path: PathBuf,
    /// Where it is mapped: its mappings and its loadable segments (with `.bss`).
    pub(crate) avma: Vec<Range<u64>>,
    /// Actual address minus the address the file states.
    pub(crate) bias: u64,
    /// Its DWARF and names, read when first needed.
    pub(crate) debug: crate::unwind::DebugSource,
}

/// The stopped process at its innermost frame.
pub(crate) struct Process<'a> {
    /// Its memory (`/proc/PID/mem`).
    pub(crate) mem: &'a std::fs::File,
    /// Frame 0's registers in DWARF order (rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp,
    /// r8..r15, rip).
    pub(crate) regs: [u64; 17],
    /// Frame 0's canonical frame address, if its call-frame information gave one.
    pub(crate) cfa: Option<u64>,
    /// The files it maps.
    pub(crate) files: &'a [Mapped],
    /// Which of them is the executable.
    pub(crate) exe: usize,
}

impl Process<'_> {
    /// Reads `len` bytes at `addr`; unreadable memory is gdb's error to report.
    fn read(&self, addr: u64, len: u64) -> Result<Vec<u8>, NotNative> {
        use std::os::unix::fs::FileExt;
        // gdb's max-value-size: bigger values are an error gdb words.
        if len > 65536 {
            return Err(NotNative::Error);
        }
        let mut buf = vec![0u8; len as usize];
        self.mem
            .read_exact_at(&mut buf, addr)
            .map_err(|_| NotNative::Error)?;
        Ok(buf)
    }

    /// Which file holds code address `pc`.
    fn file_at(&self, pc: u64) -> Option<usize> {
        self.files
            .iter()
            .position(|f| f.avma.iter().any(|r| r.contains(&pc)))
    }

    /// Whether `addr` is inside a mapped file (gdb may print `<symbol+offset>` after it).
    fn in_file(&self, addr: u64) -> bool {
        self.files
            .iter()
            .any(|f| f.avma.iter().any(|r| r.contains(&addr)))
    }

    /// The value of `text` as gdb prints it.
    pub(crate) fn evaluate(&self, text: &str) -> Result<String, Failure> {
        let e = expr::parse(text)?;
        let exe = &self.files[self.exe];
        let debug = exe.debug.get().ok_or(NotNative::Symbols)?;
        let place = match debug.find(&e.name, self)? {
            Some(p) => p,
            None if self.unknown_everywhere(&e.name) => {
                return Err(Failure::NoSymbol(format!(
                    "No symbol \"{}\" in current context.",
                    e.name
                )));
            }
            None => return Err(NotNative::Symbols.into()),
        };
        let value = debug.apply(place, &e.steps, self)?;
        let mut out = String::new();
        debug.format(&value, self, &mut out)?;
        Ok(out)
    }

    /// Whether no mapped file knows `name` at all (gdb would say there is no such symbol).
    fn unknown_everywhere(&self, name: &str) -> bool {
        self.files
            .iter()
            .all(|f| f.debug.get().is_some_and(|d| d.certainly_lacks(name)))
    }
}
