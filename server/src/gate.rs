//! Keeping a server's link alive while its ranks work: the CPU-bound part of a rank's
//! command (a stack walk) runs for at most as many ranks at once as the host has cores,
//! and the ranks' monitor threads run at a lower priority than the server's own loop. A
//! server of a thousand ranks walking every stack at once would otherwise leave its link
//! no CPU to answer keepalives, and the front-end would call every rank of the host lost.

use std::sync::{Condvar, Mutex, OnceLock};

/// How much lower than the server's loop a rank's monitor thread runs (a nice value).
const MONITOR_NICENESS: i32 = 5;

/// A counting gate: at most `limit` holders at once.
#[derive(Debug)]
pub(crate) struct Gate {
    held: Mutex<usize>,
    freed: Condvar,
    limit: usize,
}

/// Held while a walk runs; lets the next one in when dropped.
pub(crate) struct Permit<'a>(&'a Gate);

impl Gate {
    fn new(limit: usize) -> Self {
        Self {
            held: Mutex::new(0),
            freed: Condvar::new(),
            limit: limit.max(1),
        }
    }

    /// Waits until fewer than `limit` hold the gate, then holds it.
    pub(crate) fn enter(&self) -> Permit<'_> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        while *held >= self.limit {
            held = self.freed.wait(held).unwrap_or_else(|p| p.into_inner());
        }
        *held += 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut held = self.0.held.lock().unwrap_or_else(|p| p.into_inner());
        *held -= 1;
        self.0.freed.notify_one();
    }
}

/// The gate of this process's stack walks: one per core.
pub(crate) fn walks() -> &'static Gate {
    static WALKS: OnceLock<Gate> = OnceLock::new();
    WALKS.get_or_init(|| Gate::new(std::thread::available_parallelism().map_or(1, |n| n.get())))
}

/// Lowers the calling thread's priority to a rank monitor's (best effort: a thread may
/// always lower its own).
pub(crate) fn lower_this_thread() {
    // SAFETY: setpriority on the calling thread's id changes nothing but its niceness.
    let r = unsafe {
        libc::setpriority(
            libc::PRIO_PROCESS,
            libc::gettid() as libc::id_t,
            MONITOR_NICENESS,
        )
    };
    if r != 0 {
        tracing::debug!(
            "monitor thread priority unchanged: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn no_more_than_the_limit_hold_the_gate_at_once() {
        let gate = Arc::new(Gate::new(2));
        let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (gate, inside, most) = (gate.clone(), inside.clone(), most.clone());
                std::thread::spawn(move || {
                    let _p = gate.enter();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
    }
}
