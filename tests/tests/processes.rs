//! 64 real OS processes on loopback, one `sdm-testnode` each over tcp, with the master and
//! front-end in this test: a broadcast merges into one group `[0-63]`; SIGKILL of an
//! interior process during a command brings its subtree back lost and the rest replied; a
//! process that stops answering (SIGSTOP: no FIN, no RST) is found by keepalives.

use sdm_e2e as support;

use std::time::Duration;

use sdm_overlay::setup::ConnectPolicy;
use sdm_overlay::setup::SessionKey;
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::{NodeId, Shape};
use support::{Procs, assert_partition, ids_with, master_for_processes};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_processes_merge_and_survive_sigkill() {
    let n = 64u32;
    let policy = ConnectPolicy::new(SessionKey::generate());
    let (mut procs, table) = Procs::spawn(n, &policy);
    procs.send_table(&table);

    // Master and front-end live here; the master's link up is a real tcp connection too.
    let (mut fe, master, topo) =
        master_for_processes(&table, Shape::Binomial, &policy, policy.clone()).await;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_interior_process_is_found_by_keepalives() {
    let n = 16u32;
    let policy = ConnectPolicy::new(SessionKey::generate());
    // Keepalive every 100 ms, dead after 3 s of silence between the testnodes (the master
    // in this process keeps the default 1 s interval, so its children must wait longer).
    let (mut procs, table) = Procs::spawn_with_env(
        n,
        &policy,
        &[(sdm_overlay::driver::KEEPALIVE_ENV, "100,3000")],
    );
    procs.send_table(&table);
    let (mut fe, _master, topo) =
        master_for_processes(&table, Shape::Binomial, &policy, policy.clone()).await;
    let all = IdSet::all(n);
    // Server 5 (position 6): parent server 3, child server 6.
    let victim = 5u32;
    let sub = topo.subtree(NodeId::Server(victim));
    assert_eq!(sub.to_string(), "[5-6]");
    assert_eq!(topo.parent(NodeId::Server(victim)), Some(NodeId::Server(3)));
    // Every server has connected to its children before the victim stops: a server still
    // shaking hands with a stopped child is not running its node yet, and says nothing
    // to its own parent until the handshake gives up (the master would call it dead).
    let g = fe.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_eq!(ids_with(&g, Status::Replied), all, "{g:?}");
    // A command that outlives the failure by far (60 s): the silence must be noticed, not
    // waited out.
    let op = fe.send(&all, SyncMode::WaitAll, "sleep 200").await.unwrap();
    let pid = nix::unistd::Pid::from_raw(procs.0[victim as usize].id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let g = fe.collect(op, &all).await.unwrap();
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    assert_partition(&g, &all);
    assert_eq!(ids_with(&g, Status::Lost), sub, "{g:?}");
    let lost = g.iter().find(|x| x.status == Status::Lost).unwrap();
    let why = String::from_utf8_lossy(&lost.payload);
    assert!(why.contains("keepalive"), "{why}");
    // The others still answer.
    let g = fe.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_eq!(ids_with(&g, Status::Replied), &all - &sub, "{g:?}");
}
