//! Several hosts on one machine: three network namespaces, each joined by a veth pair to a
//! bridge in the root namespace (iproute2), with 12 `sdm-testnode` processes, 4 per
//! namespace, listening on their namespace's own address; the master and front-end live in
//! this test, in the root namespace, on the bridge's address. Links between servers on
//! different hosts cross the bridge. Cutting one host's link (`ip link set … down`) in the
//! middle of a command: every id is accounted, the servers on that host and the subtrees
//! below them come back lost with the reason (keepalives, 3 s here), the rest replied, and
//! later commands reach the rest. When the link comes back up, the cut-off servers
//! re-attach (the testnodes run with `--recover`, like the sdm daemons) and every id
//! answers again.
//!
//! Needs root and network namespaces: ignored where build.rs finds them missing, and
//! always run under CI (`CI` set), where their absence fails it. Addresses: `10.S.N.0/24` ([`Hosts`]), only on the
//! bridge and namespaces it creates, all of which are deleted at the end (panic included).
//! Latency (the transport's delay layer) is `delay.rs`'s business, not this test's.

use sdm_e2e as support;

use std::process::Command;
use std::time::Duration;

use sdm_overlay::driver::KEEPALIVE_ENV;
use sdm_overlay::setup::ConnectPolicy;
use sdm_overlay::setup::PATIENCE_ENV;
use sdm_overlay::setup::SessionKey;
use sdm_overlay::transport::Address;
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::{NodeId, Shape};
use support::netns::Hosts;
use support::{Procs, assert_partition, ids_with, master_for_processes_on};

/// Hosts (namespaces) and servers per host.
const HOSTS: u32 = 3;
const PER_HOST: u32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(sdm_have_netns),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN and iproute2 (ip netns)"
)]
async fn a_host_cut_off_mid_command_is_lost_and_the_others_answer() {
    let hosts = Hosts::create(HOSTS);
    let n = HOSTS * PER_HOST;
    let policy = ConnectPolicy::new(SessionKey::generate());
    // Keepalive every 100 ms, dead after 3 s of silence, in the testnodes. The master (this
    // process) keeps the default: a keepalive every 1 s, so its children, which watch it,
    // must allow more than 1 s of silence (with 1 s they would declare the idle master
    // dead). The cut below involves no link of the master's, so no 10 s wait either.
    // The testnodes recover like the sdm daemons, looking for a live ancestor for up to
    // 60 s (the cut below lasts a few seconds).
    let env = [(KEEPALIVE_ENV, "100,3000"), (PATIENCE_ENV, "60000")];
    let (mut procs, table) = Procs::spawn_each(n, &policy, &env, |id| {
        let mut c = Command::new("ip");
        let listen = format!("tcp://{}:0", hosts.addr(hosts.host_of(id)));
        c.args([
            "netns",
            "exec",
            &hosts.namespace(hosts.host_of(id)),
            support::testnode(),
        ])
        .args(["--listen", &listen, "--recover"]);
        c
    });
    for (id, a) in (0..n).zip(&table) {
        let ip = hosts.addr(hosts.host_of(id));
        assert!(
            a.to_string().contains(&format!("//{ip}:")),
            "server {id}: {a}"
        );
    }
    procs.send_table(&table);
    let fe_addr: Address = format!("tcp://{}:0", hosts.gateway()).parse().unwrap();
    let (mut fe, master, topo) =
        master_for_processes_on(&fe_addr, &table, Shape::Binomial, &policy, policy.clone()).await;

    let all = IdSet::all(n);
    let g = fe.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(g[0].sources, all);
    assert_eq!(g[0].status, Status::Replied);

    // Host 3 holds servers 2, 5, 8 and 11. Server 5 is interior: its child 6 (host 1) is
    // cut off with it. Every server of host 3 has a testnode for parent, so the cut is seen
    // by the testnodes' keepalives.
    let cut = 3;
    let on_cut: Vec<u32> = (0..n).filter(|&id| hosts.host_of(id) == cut).collect();
    let mut lost = IdSet::new();
    for &id in &on_cut {
        lost.union_with(&topo.subtree(NodeId::Server(id)));
        let parent = topo.parent(NodeId::Server(id)).unwrap();
        assert!(
            matches!(parent, NodeId::Server(_)),
            "server {id}'s parent is {parent}, not a testnode"
        );
    }
    assert_eq!(lost.to_string(), "[2,5-6,8,11]");
    let survivors = &all - &lost;

    // A command that outlives the cut: the silence must be noticed, not waited out.
    let op = fe
        .send(&all, SyncMode::WaitAll, "sleep 5000")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    hosts.set_link(cut, false);
    let g = fe.collect(op, &all).await.unwrap();
    assert_partition(&g, &all);
    assert_eq!(ids_with(&g, Status::Lost), lost, "{g:?}");
    assert_eq!(ids_with(&g, Status::Replied), survivors, "{g:?}");
    assert!(ids_with(&g, Status::TimedOut).is_empty(), "{g:?}");
    for lost in g.iter().filter(|x| x.status == Status::Lost) {
        let why = String::from_utf8_lossy(&lost.payload);
        assert!(why.contains("keepalive"), "{} lost: {why}", lost.sources);
    }

    // The others still answer; the cut-off hosts' ids are reported lost at once. (Server
    // 6, on a live host below cut-off 5, may already have re-attached to 5's parent.)
    let cut_hosts: IdSet = on_cut.iter().copied().collect();
    let g = fe.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_partition(&g, &all);
    let replied = ids_with(&g, Status::Replied);
    assert!(survivors.is_subset(&replied), "{g:?}");
    assert!(cut_hosts.is_subset(&ids_with(&g, Status::Lost)), "{g:?}");

    // The link comes back: the cut-off servers, whose parents dropped them, re-attach (to
    // their parents again, the nearest live ancestors) and the whole tree answers again.
    hosts.set_link(cut, true);
    let guard = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut g;
    loop {
        g = fe.request(&all, SyncMode::WaitAll, "id").await.unwrap();
        assert_partition(&g, &all);
        if ids_with(&g, Status::Replied) == all || tokio::time::Instant::now() > guard {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        ids_with(&g, Status::Replied),
        all,
        "after the link came back: {g:?}"
    );
    // Every server answered for itself (an id reply is the server's own number).
    let g = fe.request(&all, SyncMode::WaitAll, "id").await.unwrap();
    let answered: IdSet = g
        .iter()
        .filter(|g| g.status == Status::Replied)
        .map(|g| String::from_utf8_lossy(&g.payload).parse::<u32>().unwrap())
        .collect();
    assert_eq!(answered, all, "{g:?}");

    // Closing the front-end ends the master, which ends the survivors; `procs` kills and
    // reaps whatever is left.
    drop(fe);
    master.await.unwrap();
}
