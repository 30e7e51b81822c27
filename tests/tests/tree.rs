//! The same end-to-end test over all three transports (tcp, quic, mem): an in-process tree
//! of real nodes and links; a broadcast merges into one group; a killed interior node
//! comes back as a lost group of exactly its subtree.

use sdm_e2e as support;

use std::time::Duration;

use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::{NodeId, Shape};
use support::{assert_partition, ids_with, tree};

async fn broadcast_and_kill(scheme: &str) {
    let n = 16;
    let mut t = tree(scheme, n, Shape::Binomial).await;
    let all = IdSet::all(n);
    let g = t
        .frontend
        .request(&all, SyncMode::WaitAll, "ping")
        .await
        .unwrap();
    assert_eq!(g.len(), 1, "{scheme}: {g:?}");
    assert_eq!(g[0].sources.to_string(), "[0-15]");
    assert_eq!(&g[0].payload[..], b"ok");

    // Distinct answers stay apart and still partition the destination.
    let g = t
        .frontend
        .request(&all, SyncMode::WaitAll, "id")
        .await
        .unwrap();
    assert_eq!(g.len(), 16, "{scheme}");
    assert_partition(&g, &all);

    // Kill interior server 7 (subtree [7-14] of 16) in the middle of a slow command.
    let victim = NodeId::Server(7);
    let sub = t.topo.subtree(victim);
    assert_eq!(sub.to_string(), "[7-14]");
    let op = t
        .frontend
        .send(&all, SyncMode::WaitAll, "sleep 400")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    t.servers[7].abort();
    let g = t.frontend.collect(op, &all).await.unwrap();
    assert_partition(&g, &all);
    assert_eq!(ids_with(&g, Status::Lost), sub, "{scheme}: {g:?}");
    assert_eq!(ids_with(&g, Status::Replied).to_string(), "[0-6,15]");

    // A timeout bounds a command whose servers are slow.
    let g = t
        .frontend
        .request(
            &"[0-6,15]".parse().unwrap(),
            SyncMode::Timeout(300),
            "sleep 5000",
        )
        .await
        .unwrap();
    assert_eq!(ids_with(&g, Status::TimedOut).to_string(), "[0-6,15]");
    t.master.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_tree() {
    broadcast_and_kill("tcp").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_tree() {
    broadcast_and_kill("quic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_tree() {
    broadcast_and_kill("mem").await;
}
