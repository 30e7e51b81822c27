//! The monitor's own thread and the handle that sends it jobs: ptrace requests must come
//! from the tracing thread, so every call on a rank's [`Monitor`] runs as a job there. The
//! thread starts with the first job and, between jobs, polls its process for events.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::{Monitor, Output, ProcState};
use crate::unwind::Stacks;

/// A call to run on the monitor thread.
type Job = Box<dyn FnOnce(&mut Monitor) + Send>;

/// Sends jobs to the monitor thread, which starts with the first job: a server that never
/// touches a process (most of a big tree's start-up, every benchmark wave) never pays for a
/// thread.
#[derive(Clone)]
pub struct MonitorHandle {
    inner: Arc<LazyThread>,
}

/// The monitor thread, started at the first job.
pub(super) struct LazyThread {
    /// Where jobs go, once the thread runs.
    pub(super) tx: OnceLock<std_mpsc::Sender<Job>>,
    /// What the thread starts from, until it is started.
    start: Mutex<Option<Start>>,
}

/// What the monitor thread is made from.
struct Start {
    rank: u32,
    servers: u32,
    stdio: Output,
    events: mpsc::UnboundedSender<String>,
    /// Jobs run before any other once the thread starts ([`MonitorHandle::prepare`]).
    prepared: Vec<Job>,
}

impl MonitorHandle {
    /// A handle of the monitor thread (started on the first job); events it detects
    /// (breakpoint hits, exits) arrive on the returned receiver as OMIS-style event texts.
    pub fn new(rank: u32, servers: u32, stdio: Output) -> (Self, mpsc::UnboundedReceiver<String>) {
        let (etx, erx) = mpsc::unbounded_channel();
        let start = Start {
            rank,
            servers,
            stdio,
            events: etx,
            prepared: Vec::new(),
        };
        let inner = LazyThread {
            tx: OnceLock::new(),
            start: Mutex::new(Some(start)),
        };
        (
            Self {
                inner: Arc::new(inner),
            },
            erx,
        )
    }

    /// Whether the monitor thread has started (some job was submitted).
    pub fn started(&self) -> bool {
        self.inner.tx.get().is_some()
    }

    /// Has `f` run on the monitor before any other job, without starting the thread for it
    /// (set-up such as the services event actions use); at once if it runs already.
    pub fn prepare(&self, f: impl FnOnce(&mut Monitor) + Send + 'static) {
        let mut start = self.inner.start.lock().expect("not poisoned");
        match start.as_mut() {
            Some(s) => s.prepared.push(Box::new(f)),
            None => {
                drop(start);
                self.send(Box::new(f));
            }
        }
    }

    fn send(&self, job: Job) {
        let tx = self.inner.tx.get_or_init(|| {
            let start = self
                .inner
                .start
                .lock()
                .expect("not poisoned")
                .take()
                .expect("the monitor thread starts once");
            run_thread(start, Arc::downgrade(&self.inner))
        });
        tx.send(job)
            .expect("the monitor thread runs as long as its handle");
    }

    /// Queues `f` for the monitor thread at once (jobs run in the order they were
    /// submitted) and returns where its result will arrive.
    pub fn submit<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Monitor) -> R + Send + 'static,
    ) -> oneshot::Receiver<R> {
        let (tx, rx) = oneshot::channel();
        self.submit_then(f, move |r| {
            let _ = tx.send(r);
        });
        rx
    }

    /// Queues `f` like [`MonitorHandle::submit`], and has the monitor thread hand its result
    /// to `then`: a service's answer goes from there straight to the node (a [`Reply`]
    /// may be sent from any thread), with no task on the runtime in between. If the
    /// monitor never runs the job, `then` is dropped unrun (a reply it holds then answers
    /// with an error).
    ///
    /// [`Reply`]: crate::service::Reply
    pub fn submit_then<R>(
        &self,
        f: impl FnOnce(&mut Monitor) -> R + Send + 'static,
        then: impl FnOnce(R) + Send + 'static,
    ) {
        self.send(Box::new(move |m| then(f(m))));
    }

    /// Runs `f` on the monitor thread and returns its result.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Monitor) -> R + Send + 'static,
    ) -> R {
        self.submit(f)
            .await
            .expect("the monitor thread answers every job")
    }
}

/// Starts the monitor thread from `s`; it runs jobs until every handle is gone.
fn run_thread(s: Start, wake: Weak<LazyThread>) -> std_mpsc::Sender<Job> {
    let (tx, rx) = std_mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("sdm-monitor".into())
        .spawn(move || {
            crate::gate::lower_this_thread();
            let mut m = Monitor {
                stdio: s.stdio,
                rank: s.rank,
                local_rank: None,
                own_task: true,
                size: None,
                servers: s.servers,
                proc: None,
                events: s.events,
                stacks: Stacks::default(),
                python: Default::default(),
                registry: None,
                requests: BTreeMap::new(),
                user_events: BTreeSet::new(),
                firing: 0,
                last_cpu: None,
                run_states: Default::default(),
                counters: None,
                idle: None,
                waiter: None,
                wake,
            };
            for job in s.prepared {
                job(&mut m);
            }
            let mut polling = false;
            loop {
                // A waiter wakes the monitor on its process's exits and stops; timers are
                // left for gdb's reports and the started program's idle watch.
                let wait = match &m.proc {
                    Some(p) if p.gdb.is_some() && p.state == ProcState::Running => {
                        Duration::from_millis(10)
                    }
                    Some(p) if p.state == ProcState::Running && (polling || m.idle.is_some()) => {
                        Duration::from_millis(50)
                    }
                    _ => Duration::from_secs(3600),
                };
                match rx.recv_timeout(wait) {
                    Ok(job) => job(&mut m),
                    Err(std_mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
                }
                m.poll();
                m.check_idle();
                polling = m.arm_waiter();
            }
            m.kill_quietly();
        })
        .expect("spawning the monitor thread");
    tx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_starts_with_the_first_job_after_what_was_prepared() {
        let (tx, _rx) = mpsc::channel(16);
        let (m, _events) = MonitorHandle::new(5, 8, tx);
        m.prepare(|m| m.servers = 64);
        m.prepare(|m| m.firing = 3);
        assert!(!m.started(), "prepared set-up started the thread");
        let seen = m.submit(|m| (m.servers, m.firing)).blocking_recv().unwrap();
        assert!(m.started());
        assert_eq!(seen, (64, 3));
        // Once running, prepared set-up is just the next job.
        m.prepare(|m| m.servers = 65);
        assert_eq!(m.submit(|m| m.servers).blocking_recv().unwrap(), 65);
    }
}
