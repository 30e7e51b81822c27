//! The front-end's own answer to SIGINT, SIGTERM and SIGHUP.
//!
//! The daemons run in sessions of their own (see `sdm_deploy`), so a Ctrl-C at the
//! terminal reaches the front-end alone; here it decides what follows, as srun does: the
//! programs are killed through the tree and the tree is shut down, then sdm exits with
//! 128 + the signal's number. A second signal while that runs ends the front-end at once
//! (its daemons exit as they lose it, and take their programs with them).

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

/// The three signals that ask the front-end to end, caught from its creation on.
pub struct Interrupts {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Interrupts {
    /// Catches SIGINT, SIGTERM and SIGHUP from now on (they no longer end the process).
    pub fn catch() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next of the three signals to arrive.
    pub async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
        }
    }

    /// From now on, the next signal ends the process at once with 128 + its number: the
    /// user asked twice, and the clean ending under way is not waited for.
    pub fn exit_on_next(mut self) {
        tokio::spawn(async move {
            let sig = self.next().await;
            eprintln!("sdm: {sig} again: exiting now");
            std::process::exit(exit_status(sig));
        });
    }
}

/// The shell's status for a process ended by `sig`: 128 + its number (130 for SIGINT).
pub fn exit_status(sig: Signal) -> i32 {
    128 + sig as i32
}
