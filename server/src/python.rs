//! Python frames in the stacks of CPython ranks: each native frame of the interpreter's
//! eval loop (`_PyEval_EvalFrameDefault`, `PyEval_EvalFrameEx` before 3.6) becomes the
//! Python frames (`function` at `file.py:LINE`) it runs, so a Python call into a C
//! extension into libmpi reads as one path; each thread's name is its Python name, and the
//! thread holding the GIL gets an innermost [`GIL_FRAME`].
//!
//! The interpreter's state is read with py-spy's library (`py_spy::PythonSpy`), not a
//! reader of our own: it knows the layout of every CPython from 2.7 to 3.15 (thread states,
//! frames, code objects, line tables, the GIL holder) and is kept up with new releases,
//! which a hand-written reader would have to follow; remoteprocess alone (what py-spy is
//! built on) only reads memory. py-spy never attaches or locks here
//! ([`LockingStrategy::NonBlocking`]): the monitor has the process stopped already, and
//! its native unwinder walked every thread; py-spy only reads memory. Its native merging
//! (behind its `unwind` feature, with libunwind) is not used: the frames merged are ours.
//!
//! Each Python thread is matched to its OS thread by the id 3.11+ keeps in its state, or,
//! in older ones, by its `pthread_t`, which is the thread pointer the monitor read of each
//! thread (py-spy finds the OS id of those only with its `unwind` feature). Where gdb holds
//! the process, threads of Pythons before 3.11 get no Python frames.
//!
//! A [`PythonSpy`] parses the interpreter binary once, so `Python` keeps one per process;
//! whether a process is Python at all is decided once from its maps (a `python*` or
//! `libpython*` file mapped), so other processes cost one read of /proc/PID/maps.

use std::collections::HashMap;
use std::path::Path;

use nix::unistd::Pid;
use py_spy::config::LockingStrategy;
use py_spy::{Config, PythonSpy, StackTrace};

use crate::monitor::{Frame, ThreadStack};

/// The module of a frame made from Python (a Python function, or a mark of the reader):
/// no mapped file holds it.
pub const PYTHON_MODULE: &str = "<python>";

/// The innermost frame of the thread holding the GIL.
pub const GIL_FRAME: &str = "<holding the GIL>";

/// The prefix of the outermost frame added to every thread of a Python process whose
/// interpreter could not be read (then followed by what failed).
pub const UNREAD_FRAME: &str = "<no Python frames: ";

/// Interpreter functions kept in a stack: the builtin modules Python code calls (`time.sleep`
/// is `time_sleep`), locks and the GIL; other interpreter frames are its call machinery.
const KEPT_PREFIXES: &[&str] = &[
    "time_",
    "os_",
    "posix_",
    "select_",
    "sys_",
    "gc_",
    "signal_",
    "lock_",
    "rlock_",
    "thread_",
    "PyThread_",
    "PyGILState_",
    "take_gil",
    "drop_gil",
];

/// What is known of one process.
enum State {
    /// No interpreter mapped: no Python frames, nothing more read.
    Native,
    /// Its interpreter, read once.
    Spy(Box<PythonSpy>),
}

/// The Python readers of a monitor's processes, by pid.
#[derive(Default)]
pub(crate) struct Python {
    states: HashMap<Pid, State>,
}

impl Python {
    /// Merges the Python frames of process `pid` (stopped) into its threads' native
    /// stacks; a process without an interpreter is left as it is, one whose interpreter
    /// cannot be read keeps its native stacks with an outermost [`UNREAD_FRAME`] note.
    pub(crate) fn merge_into(&mut self, pid: Pid, threads: &mut [ThreadStack]) {
        // A pid this monitor watched before may be another process now: one entry only.
        self.states.retain(|p, _| *p == pid);
        let traces = match self.read(pid) {
            Ok(None) => return,
            Ok(Some(traces)) => traces,
            Err(why) => {
                for t in threads.iter_mut() {
                    t.frames.push(note(&why));
                }
                return;
            }
        };
        for t in threads.iter_mut() {
            // 3.11+ gives each thread's OS id; older ones only its `pthread_t`.
            let Some(trace) = traces.iter().find(|tr| match tr.os_thread_id {
                Some(os) => os == u64::from(t.tid),
                None => t.pthread == Some(tr.thread_id),
            }) else {
                continue;
            };
            t.frames = merge(&t.frames, &trace.frames);
            if trace.owns_gil {
                t.frames.insert(0, marker(GIL_FRAME));
            }
            if let Some(name) = &trace.thread_name {
                t.name.clone_from(name);
            }
        }
    }

    /// The Python threads of `pid`; `None` where it runs no interpreter. The error says
    /// why the interpreter could not be read (without the pid: ranks merge by it).
    fn read(&mut self, pid: Pid) -> Result<Option<Vec<StackTrace>>, String> {
        if !self.states.contains_key(&pid) {
            if !maps_python(pid) {
                self.states.insert(pid, State::Native);
                return Ok(None);
            }
            let config = Config {
                blocking: LockingStrategy::NonBlocking,
                native: false,
                ..Config::default()
            };
            // Not kept on failure: an interpreter not yet initialised is read next time.
            let spy = PythonSpy::new(pid.as_raw(), &config).map_err(first_line)?;
            self.states.insert(pid, State::Spy(Box::new(spy)));
        }
        match self.states.get_mut(&pid) {
            Some(State::Spy(spy)) => spy.get_stack_traces().map(Some).map_err(first_line),
            _ => Ok(None),
        }
    }
}

/// Whether `pid` maps a CPython interpreter (a `python*` executable or `libpython*`).
fn maps_python(pid: Pid) -> bool {
    crate::unwind::read_maps(pid)
        .iter()
        .any(|m| is_interpreter(file_name(&m.path)))
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// Whether the mapped file named `module` is the interpreter (its executable or library).
fn is_interpreter(module: &str) -> bool {
    module.starts_with("python") || module.starts_with("libpython")
}

/// py-spy's error with its causes, on one line.
fn first_line(e: impl std::fmt::Display) -> String {
    format!("{e:#}")
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// A frame of the reader's own (no code): the GIL mark or a note.
fn marker(text: &str) -> Frame {
    Frame {
        pc: 0,
        fp: 0,
        function: text.to_owned(),
        location: None,
        inlined: false,
        module: PYTHON_MODULE.to_owned(),
        offset: 0,
    }
}

/// The outermost note of a thread whose Python frames could not be read.
fn note(why: &str) -> Frame {
    marker(&format!("{UNREAD_FRAME}{why}>"))
}

/// A Python frame as a stack frame: `function` at `file.py:LINE` (no directory).
fn python_frame(f: &py_spy::Frame) -> Frame {
    let file = f.filename.rsplit('/').next().unwrap_or(&f.filename);
    Frame {
        location: Some(match f.line {
            l if l > 0 => format!("{file}:{l}"),
            _ => file.to_owned(),
        }),
        function: f.name.clone(),
        ..marker("")
    }
}

/// What a native frame of a Python process is to the merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A call of the eval loop: replaced by the Python frames it runs.
    Eval,
    /// The interpreter's call machinery: left out.
    Machinery,
    /// A builtin module's function, or code outside the interpreter: kept.
    Kept,
}

fn kind(f: &Frame) -> Kind {
    // Cython's runtime helpers are call machinery too, and so is the dynamic loader
    // (thread-local storage, lazy binding) wherever it was called from.
    if f.function.starts_with("__Pyx_") || f.module.starts_with("ld-linux") {
        return Kind::Machinery;
    }
    if !is_interpreter(&f.module) {
        return Kind::Kept;
    }
    let name = f.function.trim_start_matches('_');
    if name.starts_with("PyEval_EvalFrameDefault") || name.starts_with("PyEval_EvalFrameEx") {
        Kind::Eval
    } else if KEPT_PREFIXES.iter().any(|p| f.function.starts_with(p)) {
        Kind::Kept
    } else {
        Kind::Machinery
    }
}

/// Merges a thread's Python frames `py` (innermost first; in 3.11+ one eval call runs
/// the frames up to one marked `is_entry`, in 3.12+ also `is_shim_entry`) into its
/// native frames (innermost first). Above the innermost eval call the interpreter frames
/// the thread is in are kept from the outermost kept one inwards (`time_sleep >
/// pysleep`); outside it only [`Kind::Kept`] frames stay. Python frames no eval call took
/// (the native walk stopped early) go outside the last merged ones. Without Python frames
/// the native stack stays whole.
pub(crate) fn merge(native: &[Frame], py: &[py_spy::Frame]) -> Vec<Frame> {
    // A thread running no Python (yet): its native stack as it is.
    if py.is_empty() {
        return native.to_vec();
    }
    let mut groups = py
        .split_inclusive(|f| f.is_entry || f.is_shim_entry)
        .peekable();
    let kinds: Vec<Kind> = native.iter().map(kind).collect();
    let first_eval = kinds.iter().position(|k| *k == Kind::Eval);
    // Within the inner segment, all from the outermost kept frame inwards.
    let inner_end = first_eval.unwrap_or(native.len());
    let keep_inner = kinds[..inner_end]
        .iter()
        .rposition(|k| *k == Kind::Kept)
        .map_or(0, |k| k + 1);
    let mut out: Vec<Frame> = native[..keep_inner].to_vec();
    let mut after_python = out.len();
    for (f, k) in native[inner_end..].iter().zip(&kinds[inner_end..]) {
        match k {
            Kind::Eval => match groups.next() {
                Some(g) => {
                    out.extend(g.iter().map(python_frame));
                    after_python = out.len();
                }
                None => out.push(f.clone()),
            },
            Kind::Machinery => {}
            Kind::Kept => out.push(f.clone()),
        }
    }
    let rest: Vec<Frame> = groups.flatten().map(python_frame).collect();
    out.splice(after_python..after_python, rest);
    cython_names(&mut out);
    out
}

/// Names Cython's wrapper functions as Python does (`__pyx_pw_6mpi4py_3MPI_4Comm_119Barrier`
/// is `mpi4py.MPI.Comm.Barrier`), one frame per call where the wrapper and the function it
/// wraps are both on the stack.
fn cython_names(frames: &mut Vec<Frame>) {
    for f in frames.iter_mut() {
        if let Some(name) = cython_name(&f.function) {
            f.function = name;
        }
    }
    frames.dedup_by(|inner, outer| {
        inner.function == outer.function && inner.module == outer.module && inner.location.is_none()
    });
}

/// The Python name of a Cython function symbol: after `__pyx_pw_`/`__pyx_pf_`, names
/// each prefixed by their length and followed by `_`, then the function's number and name.
fn cython_name(symbol: &str) -> Option<String> {
    let mut rest = symbol
        .strip_prefix("__pyx_pw_")
        .or_else(|| symbol.strip_prefix("__pyx_pf_"))?;
    let mut parts = Vec::new();
    loop {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let len: usize = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        match (tail.get(..len), tail.as_bytes().get(len)) {
            (Some(name), Some(b'_')) if !name.is_empty() => {
                parts.push(name);
                rest = &tail[len + 1..];
            }
            // The last part: the function's number, then its name.
            _ => {
                parts.push(tail);
                break;
            }
        }
    }
    (parts.len() > 1 && !parts.last()?.is_empty()).then(|| parts.join("."))
}

#[cfg(test)]
mod tests;
