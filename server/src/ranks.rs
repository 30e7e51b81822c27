//! The ranks one server serves: a table of its local ranks, each with its own
//! [`ServerContext`] (its own monitor thread, counters and counters socket), made at the
//! first command for that rank. Stack walks, ptrace and gdb of the local ranks so run in
//! parallel threads, sharing one cache of each binary's tables (`crate::unwind::Files`).
//! Every output line and event a rank's monitor sends names that rank.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use sdm_omis::Registry;
use sdm_proto::{IdSet, Kind};

use crate::counters::{Socket, Store};
use crate::monitor::{Monitor, MonitorHandle, Output};

/// What a server knows of the job from its init command: the tree's size, how many ranks
/// there are, and which of them this server owns.
#[derive(Debug, Default)]
pub struct Job {
    /// This server's id.
    server: u32,
    facts: Mutex<JobFacts>,
}

#[derive(Debug, Clone, Default)]
struct JobFacts {
    servers: u32,
    size: Option<u32>,
    own: Option<IdSet>,
}

impl Job {
    /// This server's id (its ranks are the placement's ranks of this server).
    pub fn server(&self) -> u32 {
        self.server
    }

    /// Records what the init command said: `servers` in the tree, `size` ranks in the job,
    /// `own` the ranks of this server.
    pub fn set(&self, servers: u32, size: Option<u32>, own: IdSet) {
        *self.facts.lock().unwrap_or_else(|p| p.into_inner()) = JobFacts {
            servers,
            size,
            own: Some(own),
        };
    }

    /// Has `monitor` (of `rank`) take what is known: the tree's size, the job's, and the
    /// rank's index among this server's ranks.
    pub fn prepare(&self, rank: u32, monitor: &MonitorHandle) {
        let f = self.facts.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let local = f
            .own
            .as_ref()
            .filter(|own| own.contains(rank))
            .map(|own| own.range_len(0..=rank) as u32 - 1);
        let own_task = self.server == rank && f.own.as_ref().is_none_or(|o| o.len() == 1);
        monitor.prepare(move |m| {
            m.servers = f.servers;
            m.size = f.size;
            m.local_rank = local;
            m.own_task = own_task;
        });
    }
}

/// What one rank's services share: the rank, its monitor, the OMIS services, the
/// program's counters and what the server knows of the job.
#[derive(Clone)]
pub struct ServerContext {
    /// The rank ([`ServerContext::rank`]).
    rank: u32,
    /// The rank's node-local monitor.
    pub monitor: MonitorHandle,
    /// The OMIS services the monitor runs.
    pub omis: Arc<Registry<Monitor>>,
    /// The program's own counters (see [`crate::counters`]).
    pub counters: Store,
    /// What the init command said of the job (shared by the server's ranks).
    pub job: Arc<Job>,
    /// `rank` as decimal text, made once: what `sdm value` answers every time.
    pub(crate) rank_text: Bytes,
}

impl ServerContext {
    /// The context of rank `rank` over `monitor`.
    pub fn new(
        rank: u32,
        monitor: MonitorHandle,
        omis: Arc<Registry<Monitor>>,
        counters: Store,
    ) -> Self {
        Self {
            rank,
            monitor,
            omis,
            counters,
            job: Arc::default(),
            rank_text: Bytes::from(rank.to_string()),
        }
    }

    /// The rank this context serves.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The rank this context serves (the name from when a server served one rank, its id).
    pub fn id(&self) -> u32 {
        self.rank
    }
}

impl fmt::Debug for ServerContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerContext")
            .field("rank", &self.rank)
            .finish()
    }
}

/// The table of a server's local ranks.
pub struct Ranks {
    /// Where every rank's output lines and events go (each naming its rank).
    output: Output,
    omis: Arc<Registry<Monitor>>,
    job: Arc<Job>,
    table: Mutex<BTreeMap<u32, Arc<ServerContext>>>,
    /// The ranks' counters sockets, removed when the server ends.
    sockets: Mutex<Vec<Arc<Socket>>>,
}

impl fmt::Debug for Ranks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ranks: Vec<u32> = self.lock().keys().copied().collect();
        f.debug_struct("Ranks").field("ranks", &ranks).finish()
    }
}

impl Ranks {
    /// An empty table of server `server`, whose ranks send their output and events to
    /// `output`.
    pub fn new(server: u32, output: Output) -> Self {
        Self {
            output,
            omis: crate::services::registry(),
            job: Arc::new(Job {
                server,
                facts: Mutex::default(),
            }),
            table: Mutex::default(),
            sockets: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Arc<ServerContext>>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the server knows of the job (set by the init command).
    pub fn job(&self) -> &Arc<Job> {
        &self.job
    }

    /// The context of `rank`, made now if this is its first command: a monitor of its
    /// own (whose thread starts with its first job), its counters and their socket. Its
    /// events go to the node tagged with the rank (needs a tokio runtime).
    pub fn get(&self, rank: u32) -> Arc<ServerContext> {
        let mut table = self.lock();
        if let Some(ctx) = table.get(&rank) {
            return Arc::clone(ctx);
        }
        let (monitor, mut events) = MonitorHandle::new(rank, 0, self.output.clone());
        let counters = Store::default();
        let socket = Arc::new(Socket::new(
            crate::counters::rank_socket_path(std::process::id(), rank),
            counters.clone(),
        ));
        self.sockets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::clone(&socket));
        let reg = Arc::clone(&self.omis);
        monitor.prepare(move |m| {
            m.counters = Some(socket);
            // Event actions run on the monitor thread with the same services.
            m.registry = Some(reg);
        });
        self.job.prepare(rank, &monitor);
        let mut ctx = ServerContext::new(rank, monitor, Arc::clone(&self.omis), counters);
        ctx.job = Arc::clone(&self.job);
        let ctx = Arc::new(ctx);
        let tx = self.output.clone();
        tokio::spawn(async move {
            while let Some(e) = events.recv().await {
                if tx.send((Kind::Event, rank, Bytes::from(e))).await.is_err() {
                    break;
                }
            }
        });
        table.insert(rank, Arc::clone(&ctx));
        ctx
    }

    /// The ranks that have a context, in order.
    pub fn ranks(&self) -> Vec<u32> {
        self.lock().keys().copied().collect()
    }

    /// At the end of the session: every rank's program is killed if this server started
    /// it, detached if it attached to it (all ranks at once, each on its monitor's
    /// thread); the counters sockets are removed.
    pub async fn end(&self) {
        let monitors: Vec<MonitorHandle> = self
            .lock()
            .values()
            .map(|c| c.monitor.clone())
            .filter(MonitorHandle::started)
            .collect();
        let ends = monitors
            .iter()
            .map(|m| m.submit(|m| m.kill_quietly()))
            .collect::<Vec<_>>();
        for end in ends {
            let _ = end.await;
        }
        for s in self
            .sockets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            s.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_rank_has_its_own_monitor_made_at_its_first_command() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let ranks = Ranks::new(1, tx);
        ranks.job().set(2, Some(8), IdSet::range(4..=7));
        let (a, b) = (ranks.get(5), ranks.get(7));
        assert!(Arc::ptr_eq(&a, &ranks.get(5)));
        assert_eq!((a.rank(), b.rank()), (5, 7));
        assert_eq!(ranks.ranks(), [5, 7]);
        let seen = |c: &ServerContext| {
            c.monitor
                .submit(|m| (m.rank, m.local_rank, m.size, m.servers))
                .blocking_recv()
        };
        let (a2, b2) = (a.clone(), b.clone());
        let got = tokio::task::spawn_blocking(move || (seen(&a2), seen(&b2)))
            .await
            .unwrap();
        assert_eq!(got.0.unwrap(), (5, Some(1), Some(8), 2));
        assert_eq!(got.1.unwrap(), (7, Some(3), Some(8), 2));
        // A rank's output reaches the node naming the rank.
        b.monitor
            .call(|m| {
                m.start(
                    "sh",
                    &["-c".into(), "echo hi".into()],
                    crate::monitor::IoMode::Pipes,
                )
            })
            .await
            .unwrap();
        let (kind, rank, line) = rx.recv().await.unwrap();
        assert_eq!((kind, rank, &line[1..]), (Kind::Stdio, 7, &b"hi"[..]));
        ranks.end().await;
    }
}
