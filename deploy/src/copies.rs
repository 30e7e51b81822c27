//! Local servers forked from one process: the receiving side of [`COPIES_ENV`].
//!
//! A thousand `sdm server` processes started one by one on one machine each pay for an
//! `exec` (mapping the binary, relocations, first-touch page faults) and a pipe of the
//! front-end's. Instead the front-end starts one server process with `SDM_COPIES=N`; it
//! forks N copies of itself, each a server with its own id, and stays as their
//! supervisor. The copies share the one stdout pipe (their `SDM-LISTEN` lines name their
//! ids, as with `srun` or `mpirun`) and each dies with the supervisor.

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
/// Call it before the process starts a thread (a runtime, a logging worker): a forked copy
/// has only the thread that forked, and the environment is changed. With another thread
/// running it forks nothing and returns an error.
pub fn fork_copies() -> Result<Copies, LaunchError> {
    let Ok(v) = std::env::var(COPIES_ENV) else {
        return Ok(Copies::Serve);
    };
    alone()?;
    let n: u32 = v.trim().parse().map_err(|e| LaunchError::Invalid {
        launcher: "local",
        what: format!("{COPIES_ENV}={v:?} is not a number of servers"),
        source: Some(Box::new(e)),
    })?;
    // SAFETY: the process has one thread (checked by `alone` above; only this thread could
    // start another), so nothing reads the environment while it changes.
    unsafe { std::env::remove_var(COPIES_ENV) };
    let supervisor = getpid();
    let mut started = 0u32;
    for id in 0..n {
        // SAFETY: one thread (checked above), so the child is a whole copy of the
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
                    source: Some(Box::new(e)),
                });
            }
        }
    }
    Ok(Copies::Done { copies: n, failed })
}

/// Ok if this process runs one thread (the entries of `/proc/self/task`); forking or
/// changing the environment with others running is unsound.
fn alone() -> Result<(), LaunchError> {
    let threads = std::fs::read_dir("/proc/self/task")
        .map_err(|e| LaunchError::Invalid {
            launcher: "local",
            what: format!("cannot count this process's threads: {e}"),
            source: Some(Box::new(e)),
        })?
        .count();
    if threads != 1 {
        return Err(LaunchError::Invalid {
            launcher: "local",
            source: None,
            what: format!(
                "cannot fork local servers from a process running {threads} threads: \
             {COPIES_ENV} is read before any thread starts"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test harness runs this test on a thread of its own, so the process has two
    /// at least: forking copies is refused, by name.
    #[test]
    fn copies_are_not_forked_beside_other_threads() {
        let e = alone().unwrap_err();
        assert!(
            matches!(&e, LaunchError::Invalid { launcher: "local", what, .. } if what.contains("threads")),
            "{e}"
        );
    }
}
