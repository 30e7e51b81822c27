//! 64 real OS processes on loopback, one `sdm-testnode` each over tcp, with the master and
//! front-end in this test: a broadcast merges into one group `[0-63]`; SIGKILL of an
//! interior process during a command brings its subtree back lost and the rest replied.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use sdm_overlay::Node;
use sdm_overlay::auth::{SESSION_KEY_ENV, SessionKey};
use sdm_overlay::driver::{self, Delivery};
use sdm_overlay::frontend::Frontend;
use sdm_overlay::setup::{self, ConnectPolicy};
use sdm_overlay::transport::{Address, TransportConfig, transport_for};
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::{NodeId, Shape, Topology};
use support::{assert_partition, ids_with};

/// Kills every process it holds when dropped, so a failing test leaves no orphans.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_processes_merge_and_survive_sigkill() {
    let n = 64u32;
    let mut procs = Procs(Vec::new());
    let mut table = Vec::new();
    let policy = ConnectPolicy::new(SessionKey::generate());
    for id in 0..n {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sdm-testnode"))
            .args(["--id", &id.to_string(), "--servers", &n.to_string()])
            .env(SESSION_KEY_ENV, policy.key.to_hex())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sdm-testnode");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr: Address = line
            .trim()
            .strip_prefix("LISTEN ")
            .expect("LISTEN line")
            .parse()
            .unwrap();
        table.push(addr);
        procs.0.push(child);
    }
    let line = table
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(" ")
        + "\n";
    for c in &mut procs.0 {
        c.stdin
            .as_mut()
            .unwrap()
            .write_all(line.as_bytes())
            .unwrap();
    }

    // Master and front-end live here; the master's link up is a real tcp connection too.
    let cfg = TransportConfig::default();
    let fe_addr: Address = "tcp://127.0.0.1:0".parse().unwrap();
    let transport: Arc<dyn sdm_overlay::transport::Transport> =
        Arc::from(transport_for(&fe_addr, &cfg).unwrap());
    let mut fe_listener = transport.bind(&fe_addr).await.unwrap();
    let fe_addr = fe_listener.local_addr();
    let topo: Arc<dyn Topology> = Arc::from(Shape::Binomial.build(n));
    let master = {
        let (transport, topo, policy) = (transport.clone(), topo.clone(), policy.clone());
        let table: Vec<Option<Address>> = table.iter().cloned().map(Some).collect();
        tokio::spawn(async move {
            let children =
                setup::connect_children(&*transport, &*topo, NodeId::Master, &table, &policy).await;
            for (c, r) in &children {
                assert!(r.is_ok(), "connecting to {c}: {r:?}");
            }
            let up = setup::connect_frontend(&*transport, &fe_addr, &policy)
                .await
                .unwrap();
            let none = Box::new(|_d: Delivery| unreachable!("the master delivers nothing"));
            driver::run_node(Node::new(NodeId::Master, topo), up, children, none)
                .await
                .unwrap();
        })
    };
    let mut fe = Frontend::accept_master(&mut *fe_listener, &policy)
        .await
        .unwrap();

    let all = IdSet::all(n);
    let g = fe.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(g[0].sources.to_string(), "[0-63]");
    assert_eq!(g[0].status, Status::Replied);

    // Server 15 sits at position 16: an interior node with subtree [15-30].
    let victim = 15u32;
    let sub = topo.subtree(NodeId::Server(victim));
    assert_eq!(sub.to_string(), "[15-30]");
    assert!(!topo.children(NodeId::Server(victim)).is_empty());
    let op = fe
        .send(&all, SyncMode::WaitAll, "sleep 1500")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    procs.0[victim as usize].kill().unwrap(); // SIGKILL
    procs.0[victim as usize].wait().unwrap();
    let g = fe.collect(op, &all).await.unwrap();
    assert_partition(&g, &all);
    assert_eq!(ids_with(&g, Status::Lost), sub, "{g:?}");
    assert_eq!(ids_with(&g, Status::Replied), &all - &sub);
    assert_eq!(g.len(), 2, "one replied group and one lost group: {g:?}");

    // The survivors still answer; the dead subtree is reported lost at once.
    let g = fe.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_partition(&g, &all);
    assert_eq!(ids_with(&g, Status::Lost), sub);

    // Closing the front-end link ends the master, which ends its children: the processes
    // exit on their own (no orphans).
    drop(fe);
    master.await.unwrap();
    for (i, c) in procs.0.iter_mut().enumerate() {
        if i as u32 == victim {
            continue;
        }
        let mut waited = 0;
        while c.try_wait().unwrap().is_none() {
            assert!(
                waited < 300,
                "server {i} did not exit after its parent left"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += 1;
        }
    }
}
