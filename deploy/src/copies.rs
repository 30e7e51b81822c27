//! Local servers forked from one process: the receiving side of [`COPIES_ENV`].
//!
//! Started one by one, a thousand `sdm server` processes on one machine each pay for an
//! `exec`: mapping a 9 MB binary, the dynamic loader's relocations and symbol lookups, the
//! page faults of first touching all that, and the front-end's own `fork`, pipe and reader
//! per process. That was most of the start-up of a large local tree. Instead the front-end
//! starts one server process with `SDM_COPIES=N`; before it starts a thread it forks N
//! copies of itself, each a server with its own id, and stays as their supervisor. The
//! copies share the one stdout pipe to the front-end (their `SDM-LISTEN` lines name their
//! ids, as with `srun` or `mpirun`), and each dies with the supervisor, as a server the
//! front-end started itself dies with the front-end.

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork, getpid, getppid};

use crate::{COPIES_ENV, LaunchError};

/// What [`fork_copies`] made of this process.
#[derive(Debug, PartialEq, Eq)]
pub enum Copies {
    /// Run as a server: no copies were asked for, or this process is one of them (its
    /// `SDM_ID` and `SDM_LOCAL_ID` say which).
    Serve,
    /// This process was the supervisor and every copy has ended; `failed` of the `copies`
    /// could not be forked, exited with a failure or were killed.
    Done {
        /// Copies asked for.
        copies: u32,
        /// Copies that failed.
        failed: u32,
    },
}

/// With `SDM_COPIES=N` in the environment, forks N copies of this process with `SDM_ID`
/// and `SDM_LOCAL_ID` 0..N-1 (what the local launcher sets for N processes of its own) and
/// returns [`Copies::Serve`] in each of them; in this process, waits until every copy has
/// ended and returns [`Copies::Done`] with how many failed. A copy
/// that cannot be forked is reported on stdout as `SDM-ERROR ID WHY`, the line a launcher
/// uses for a server that cannot start; the others still run. Without the variable,
/// returns [`Copies::Serve`] at once.
///
/// Before forking two or more, the process moves its code onto transparent huge pages,
/// which the copies then share (`SDM_HUGE_TEXT=0` keeps the file's pages).
///
/// Call it before the process starts a thread (a runtime, a logging worker): a forked copy
/// has only the thread that forked.
pub fn fork_copies() -> Result<Copies, LaunchError> {
    let Ok(v) = std::env::var(COPIES_ENV) else {
        return Ok(Copies::Serve);
    };
    let n: u32 = v.trim().parse().map_err(|_| LaunchError::Invalid {
        launcher: "local",
        what: format!("{COPIES_ENV}={v:?} is not a number of servers"),
    })?;
    // SAFETY: the process has one thread (this function's precondition), so nothing reads
    // the environment while it changes.
    unsafe { std::env::remove_var(COPIES_ENV) };
    // Two or more copies share the code on huge pages.
    if n >= 2 {
        // SAFETY: one thread (this function's precondition), and nothing writes the code.
        match unsafe { crate::hugetext::text_on_huge_pages() } {
            crate::hugetext::HugeText::Moved { bytes, error: None } => {
                tracing::debug!(bytes, "the copies' code is on huge pages")
            }
            crate::hugetext::HugeText::Moved {
                bytes,
                error: Some(e),
            } => tracing::info!(bytes, "part of the copies' code stays on 4 KiB pages: {e}"),
            crate::hugetext::HugeText::Off(why) => {
                tracing::debug!("the copies' code stays on 4 KiB pages: {why}")
            }
        }
    }
    let supervisor = getpid();
    let mut started = 0u32;
    for id in 0..n {
        // SAFETY: one thread (the precondition), so the child is a whole copy of the
        // process; it sets its environment and returns to run as a server.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                // Die with the supervisor. If it died before this took hold, the parent
                // is already someone else: end now rather than live on unsupervised.
                if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err()
                    || getppid() != supervisor
                {
                    std::process::exit(1);
                }
                // SAFETY: this copy has one thread.
                unsafe {
                    std::env::set_var("SDM_ID", id.to_string());
                    std::env::set_var("SDM_LOCAL_ID", id.to_string());
                }
                return Ok(Copies::Serve);
            }
            Ok(ForkResult::Parent { .. }) => started += 1,
            Err(e) => println!("SDM-ERROR {id} cannot fork a local server: {e}"),
        }
    }
    let mut failed = n - started;
    while started > 0 {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(_, 0)) => started -= 1,
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => {
                started -= 1;
                failed += 1;
            }
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                return Err(LaunchError::Invalid {
                    launcher: "local",
                    what: format!("waiting for the local servers: {e}"),
                });
            }
        }
    }
    Ok(Copies::Done { copies: n, failed })
}
