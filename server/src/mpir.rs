//! The process table of a running parallel job, read from its launcher: the MPIR interface
//! (`MPIR_proctable`, as LaunchMON and STAT read it from `srun` or `mpiexec`), or, where the
//! launcher keeps no table, its process tree.
//!
//! MPIR: the launcher is stopped with ptrace, `MPIR_proctable_size`, `MPIR_debug_state` and
//! the `MPIR_PROCDESC` array (`{ char *host_name; char *executable_name; int pid; }`) are
//! read from its memory, and it is released. The symbols are found in the ELF files it has
//! mapped (the executable for `srun`, `libopen-rte.so` for Open MPI), so no debug
//! information is needed.
//!
//! Open MPI 4.1.4's `mpirun` keeps a filled table once its job is up (seen here, with ranks
//! on one host and across four), srun always. A launcher whose table stays empty (one that
//! fills it only when a debugger started it), or that has none (Debian's MPICH 4.0 hydra),
//! is read through its process tree instead ([`crate::proctree`]): the launcher's
//! descendants carrying a rank variable in their environment; ranks running on other hosts
//! are not visible that way and are reported missing by rank. A launcher without MPIR that maps a PMIx library (Open MPI
//! 5's `prterun`) is asked as a PMIx tool instead ([`crate::pmix`]).

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use nix::sys::ptrace;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

pub use crate::proctree::{children, descendants, read_process_tree};
#[cfg(test)]
use crate::proctree::{environ, parent_map};

/// One task of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcDesc {
    /// MPI rank (the index in the table).
    pub rank: u32,
    /// Host the task runs on, as the launcher names it.
    pub host: String,
    /// Its executable.
    pub executable: String,
    /// Its process id on that host.
    pub pid: u32,
}

/// Where a [`ProcTable`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableSource {
    /// The launcher's `MPIR_proctable`.
    Mpir,
    /// The launcher's descendants on this host and their rank variables.
    ProcessTree,
    /// The launcher's PMIx server (`PMIX_QUERY_PROC_TABLE`, see [`crate::pmix`]).
    Pmix,
}

impl TableSource {
    /// Its name in `sdm attach --table --json` (`mpir`, `process-tree`, `pmix`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Mpir => "mpir",
            Self::ProcessTree => "process-tree",
            Self::Pmix => "pmix",
        }
    }
}

/// The job's tasks, by rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcTable {
    /// The launcher's pid.
    pub launcher: u32,
    /// The tasks, sorted by rank.
    pub tasks: Vec<ProcDesc>,
    /// How the table was read.
    pub source: TableSource,
}

/// Why no table could be read.
#[derive(Debug, thiserror::Error)]
pub enum MpirError {
    /// There is no such process.
    #[error("no process {pid}: {why}")]
    NoProcess {
        /// The pid asked for.
        pid: u32,
        /// What /proc said.
        why: String,
        /// The system's error, when one said it.
        #[source]
        source: Option<std::io::Error>,
    },
    /// The launcher could not be traced (another tracer, `kernel.yama.ptrace_scope`, other
    /// user).
    #[error(
        "cannot trace launcher {pid}: {errno} (is another debugger attached, or does \
         /proc/sys/kernel/yama/ptrace_scope forbid it?)"
    )]
    Trace {
        /// The launcher.
        pid: u32,
        /// The system error.
        #[source]
        errno: nix::Error,
    },
    /// Reading (or writing) the launcher's memory failed.
    #[error("launcher {pid}: cannot access {what} at {addr:#x}: {why}")]
    Memory {
        /// The launcher.
        pid: u32,
        /// What was being read.
        what: &'static str,
        /// Where.
        addr: u64,
        /// The system error.
        why: String,
        /// The system's error, when one said it.
        #[source]
        source: Option<std::io::Error>,
    },
    /// The process exports no MPIR symbols and has no ranked descendants.
    #[error(
        "process {pid} ({exe}) is not a parallel launcher: it has no MPIR_proctable and no \
         descendants with a rank variable ({vars})"
    )]
    NotALauncher {
        /// The process.
        pid: u32,
        /// Its executable.
        exe: String,
        /// The variables looked for.
        vars: String,
    },
    /// The tasks found do not make a table (a rank twice).
    #[error(transparent)]
    Ranks(#[from] crate::proctree::RankError),
    /// The launcher has a table that is not (yet) filled in.
    #[error(
        "launcher {pid} has not spawned its tasks yet (MPIR_debug_state {state}, \
         MPIR_proctable_size {size}); try again once the job runs"
    )]
    NotSpawned {
        /// The launcher.
        pid: u32,
        /// `MPIR_debug_state`.
        state: i32,
        /// `MPIR_proctable_size`.
        size: i32,
    },
    /// The table does not hold every rank.
    #[error(
        "launcher {pid}: ranks {missing} of {size} are not in its process table (they run \
         on other hosts, or exited); use --pids HOST:PID,... for them"
    )]
    Incomplete {
        /// The launcher.
        pid: u32,
        /// Ranks absent, in range form.
        missing: String,
        /// Ranks expected.
        size: u32,
    },
    /// The launcher runs a PMIx server (Open MPI 5) that could not give its table.
    #[error(transparent)]
    Pmix(#[from] crate::pmix::PmixError),
}

/// [`read_proctable`], asked again while the launcher is still spawning its tasks
/// ([`MpirError::NotSpawned`], [`MpirError::Incomplete`]), up to `patience`.
pub fn read_proctable_waiting(
    launcher: u32,
    patience: std::time::Duration,
) -> Result<ProcTable, MpirError> {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match read_proctable(launcher) {
            Err(MpirError::NotSpawned { .. } | MpirError::Incomplete { .. })
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// Reads the process table of the job launched by `launcher`: its MPIR table when it has a
/// filled one, otherwise its ranked descendants on this host.
pub fn read_proctable(launcher: u32) -> Result<ProcTable, MpirError> {
    let exe =
        std::fs::read_link(format!("/proc/{launcher}/exe")).map_err(|e| MpirError::NoProcess {
            pid: launcher,
            why: e.to_string(),
            source: Some(e),
        })?;
    let symbols = find_symbols(
        launcher,
        &["MPIR_proctable", "MPIR_proctable_size", "MPIR_debug_state"],
    );
    match (
        symbols.get("MPIR_proctable"),
        symbols.get("MPIR_proctable_size"),
    ) {
        (Some(&table), Some(&size)) => {
            let state = symbols.get("MPIR_debug_state").copied();
            match read_mpir(launcher, table, size, state) {
                Ok(t) => Ok(t),
                // A launcher with an empty table (Open MPI 4.x attached after launch).
                Err(MpirError::NotSpawned { state, size, .. }) => {
                    match read_process_tree(launcher) {
                        Ok(t) if !t.tasks.is_empty() => Ok(t),
                        Ok(_) => Err(MpirError::NotSpawned {
                            pid: launcher,
                            state,
                            size,
                        }),
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            }
        }
        // No MPIR: a PMIx launcher (Open MPI 5's prterun) gives its table as a PMIx tool.
        _ if let Some(library) = crate::pmix::server_library(launcher) => {
            Ok(crate::pmix::read_proctable(launcher, &library)?)
        }
        _ => {
            let t = read_process_tree(launcher)?;
            if t.tasks.is_empty() {
                return Err(MpirError::NotALauncher {
                    pid: launcher,
                    exe: exe.display().to_string(),
                    vars: crate::proctree::RankVars::standard().describe(),
                });
            }
            Ok(t)
        }
    }
}

/// Stops `pid` with ptrace, reads its MPIR table and lets it go.
fn read_mpir(pid: u32, table: u64, size: u64, state: Option<u64>) -> Result<ProcTable, MpirError> {
    let stopped = Stopped::attach(pid)?;
    let mem = Memory::open(pid)?;
    let t = read_table(&mem, table, size, state);
    drop(stopped);
    t
}

/// Reads the MPIR table of the (stopped) launcher whose memory is `mem`, from the addresses
/// of `MPIR_proctable`, `MPIR_proctable_size` and `MPIR_debug_state`.
pub(crate) fn read_table(
    mem: &Memory,
    table: u64,
    size: u64,
    state: Option<u64>,
) -> Result<ProcTable, MpirError> {
    let pid = mem.pid;
    let n = mem.i32_at(size, "MPIR_proctable_size")?;
    let debug_state = match state {
        Some(a) => mem.i32_at(a, "MPIR_debug_state")?,
        None => 1,
    };
    let base = mem.u64_at(table, "MPIR_proctable")?;
    if n <= 0 || base == 0 {
        return Err(MpirError::NotSpawned {
            pid,
            state: debug_state,
            size: n,
        });
    }
    let mut tasks = Vec::with_capacity(n as usize);
    for rank in 0..n as u32 {
        // struct MPIR_PROCDESC { char *host_name; char *executable_name; int pid; } (LP64)
        let at = base + u64::from(rank) * 24;
        let host = mem.u64_at(at, "MPIR_PROCDESC.host_name")?;
        let exe = mem.u64_at(at + 8, "MPIR_PROCDESC.executable_name")?;
        let task_pid = mem.i32_at(at + 16, "MPIR_PROCDESC.pid")?;
        tasks.push(ProcDesc {
            rank,
            host: mem.c_string(host, "host_name")?,
            executable: mem.c_string(exe, "executable_name")?,
            pid: task_pid.max(0) as u32,
        });
    }
    // A table whose tasks have no pid yet is still being filled (the step is launching).
    if tasks.iter().any(|t| t.pid == 0) {
        return Err(MpirError::NotSpawned {
            pid,
            state: debug_state,
            size: n,
        });
    }
    Ok(ProcTable {
        launcher: pid,
        tasks,
        source: TableSource::Mpir,
    })
}

/// Run-time addresses of symbols `names` (data or functions) in the ELF files `pid` has
/// mapped (first found wins).
pub(crate) fn find_symbols(pid: u32, names: &[&str]) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    // The lowest mapping of each file: its start minus its file offset is where the file's
    // first page is, and the ELF's first loadable segment sits there.
    let mut bases: Vec<(PathBuf, u64)> = Vec::new();
    for m in crate::unwind::read_maps(Pid::from_raw(pid as i32)) {
        if m.path.starts_with("/") && !bases.iter().any(|(p, _)| *p == m.path) {
            bases.push((m.path, m.start.saturating_sub(m.offset)));
        }
    }
    for (path, base) in bases {
        if out.len() == names.len() {
            break;
        }
        let Ok(data) = std::fs::read(&path) else {
            continue;
        };
        let Ok(file) = object::File::parse(&*data) else {
            continue;
        };
        use object::{Object, ObjectSegment, ObjectSymbol};
        let first_vaddr = file
            .segments()
            .map(|s| s.address() & !0xfff)
            .min()
            .unwrap_or(0);
        for s in file.dynamic_symbols().chain(file.symbols()) {
            let Ok(name) = s.name() else { continue };
            if s.address() != 0 && names.contains(&name) && !out.contains_key(name) {
                out.insert(name.to_owned(), base + s.address() - first_vaddr);
            }
        }
    }
    out
}

/// A launcher stopped by ptrace while its table is read; released (detached, running) on
/// drop.
struct Stopped(Pid);

impl Stopped {
    fn attach(pid: u32) -> Result<Self, MpirError> {
        let p = Pid::from_raw(pid as i32);
        ptrace::attach(p).map_err(|errno| MpirError::Trace { pid, errno })?;
        // Wait for the attach stop; other signals arriving first are passed back on detach
        // by the kernel's group-stop handling, so only the first stop matters here.
        loop {
            match waitpid(p, Some(WaitPidFlag::__WALL)) {
                Ok(WaitStatus::Stopped(_, _)) => return Ok(Self(p)),
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => {
                    return Err(MpirError::NoProcess {
                        pid,
                        why: "it exited while being attached".into(),
                        source: None,
                    });
                }
                Ok(_) => continue,
                Err(nix::Error::EINTR) => continue,
                Err(errno) => return Err(MpirError::Trace { pid, errno }),
            }
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = ptrace::detach(self.0, None);
    }
}

/// The launcher's memory, read (and, opened writable, written) through /proc/PID/mem.
pub(crate) struct Memory {
    pid: u32,
    file: std::fs::File,
}

impl Memory {
    pub(crate) fn open(pid: u32) -> Result<Self, MpirError> {
        Self::open_with(pid, false)
    }

    /// Memory its tracer may also write (a breakpoint, a flag).
    pub(crate) fn open_writable(pid: u32) -> Result<Self, MpirError> {
        Self::open_with(pid, true)
    }

    fn open_with(pid: u32, write: bool) -> Result<Self, MpirError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| MpirError::Memory {
                pid,
                what: "/proc/PID/mem",
                addr: 0,
                why: e.to_string(),
                source: Some(e),
            })?;
        Ok(Self { pid, file })
    }

    /// Writes `bytes` at `addr` (text pages too: the kernel writes them for a tracer).
    pub(crate) fn write(
        &self,
        addr: u64,
        bytes: &[u8],
        what: &'static str,
    ) -> Result<(), MpirError> {
        self.file
            .write_all_at(bytes, addr)
            .map_err(|e| MpirError::Memory {
                pid: self.pid,
                what,
                addr,
                why: e.to_string(),
                source: Some(e),
            })
    }

    pub(crate) fn read(
        &self,
        addr: u64,
        buf: &mut [u8],
        what: &'static str,
    ) -> Result<(), MpirError> {
        self.file
            .read_exact_at(buf, addr)
            .map_err(|e| MpirError::Memory {
                pid: self.pid,
                what,
                addr,
                why: e.to_string(),
                source: Some(e),
            })
    }

    pub(crate) fn u64_at(&self, addr: u64, what: &'static str) -> Result<u64, MpirError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b, what)?;
        Ok(u64::from_le_bytes(b))
    }

    pub(crate) fn i32_at(&self, addr: u64, what: &'static str) -> Result<i32, MpirError> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b, what)?;
        Ok(i32::from_le_bytes(b))
    }

    /// A NUL-terminated string of at most 4096 bytes.
    pub(crate) fn c_string(&self, addr: u64, what: &'static str) -> Result<String, MpirError> {
        if addr == 0 {
            return Ok(String::new());
        }
        let mut out = Vec::new();
        let mut chunk = [0u8; 256];
        while out.len() < 4096 {
            let at = addr + out.len() as u64;
            // Read up to the end of the page, so a short string at a page's end still reads.
            let room = (0x1000 - (at & 0xfff)) as usize;
            let n = room.min(chunk.len());
            self.read(at, &mut chunk[..n], what)?;
            match chunk[..n].iter().position(|&b| b == 0) {
                Some(end) => {
                    out.extend_from_slice(&chunk[..end]);
                    break;
                }
                None => out.extend_from_slice(&chunk[..n]),
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

#[cfg(test)]
pub(crate) mod tests;
