//! Node state-machine tests over the in-memory [`SimNet`]: merging, loss, timeouts, and
//! the invariant that the groups reaching the front-end partition the destination exactly.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;
use sdm_proto::{IdSet, Kind, Message, Status, SyncMode};
use sdm_topology::{NodeId, Shape};

use crate::node::{Node, Output};
use crate::sim::{Group, SimNet};

const MS: Duration = Duration::from_millis(1);

fn same_reply() -> crate::sim::Responder {
    Box::new(|_, _| Some((MS, Bytes::from_static(b"ok"))))
}

fn net(shape: Shape, n: u32, responder: crate::sim::Responder) -> SimNet {
    SimNet::new(Arc::from(shape.build(n)), MS, responder)
}

/// Groups are pairwise disjoint and cover `dest` exactly.
fn assert_partition(groups: &[Group], dest: &IdSet) {
    let mut seen = IdSet::new();
    for g in groups {
        assert!(g.sources.is_disjoint(&seen), "id reported twice: {g:?}");
        seen.union_with(&g.sources);
    }
    assert_eq!(&seen, dest, "groups do not cover the destination");
}

fn ids_with(groups: &[Group], status: Status) -> IdSet {
    let mut s = IdSet::new();
    for g in groups.iter().filter(|g| g.status == status) {
        s.union_with(&g.sources);
    }
    s
}

#[test]
fn broadcast_merges_into_one_group() {
    for shape in [
        Shape::Binomial,
        Shape::KAry(3),
        Shape::KNomial(4),
        Shape::Flat,
    ] {
        let mut net = net(shape, 64, same_reply());
        net.command(1, IdSet::all(64), SyncMode::WaitAll, "ping");
        net.run();
        let g = net.groups(1);
        assert_eq!(g.len(), 1, "{shape}: {g:?}");
        assert_eq!(g[0].sources.to_string(), "[0-63]");
        assert_eq!(g[0].status, Status::Replied);
        assert_eq!(&g[0].payload[..], b"ok");
    }
}

#[test]
fn distinct_replies_stay_apart() {
    let mut net = net(
        Shape::Binomial,
        100,
        Box::new(|id, _| {
            let s = id.server().unwrap();
            let body = if s % 10 == 3 {
                format!("odd {s}")
            } else {
                "same".into()
            };
            Some((MS, Bytes::from(body)))
        }),
    );
    net.command(9, IdSet::all(100), SyncMode::WaitAll, "x");
    net.run();
    let g = net.groups(9);
    assert_eq!(g.len(), 11);
    assert_partition(&g, &IdSet::all(100));
}

#[test]
fn forged_hash_never_merges_different_payloads() {
    let topo: Arc<dyn sdm_topology::Topology> = Arc::from(Shape::Flat.build(2));
    let mut master = Node::new(NodeId::Master, topo);
    let now = Instant::now();
    master.handle_from_parent(
        now,
        Message::command(1, IdSet::all(2), SyncMode::WaitAll, "q"),
    );
    while master.poll_output().is_some() {}
    let a = Message::reply(1, IdSet::single(0), Status::Replied, Bytes::from("aaa"));
    let mut b = Message::reply(1, IdSet::single(1), Status::Replied, Bytes::from("bbb"));
    b.aggregate.payload_hash = a.aggregate.payload_hash;
    master.handle_from_child(now, NodeId::Server(0), a);
    master.handle_from_child(now, NodeId::Server(1), b);
    let out: Vec<_> = std::iter::from_fn(|| master.poll_output()).collect();
    assert_eq!(out.len(), 2, "{out:?}");
    for o in out {
        let Output::ToParent(m) = o else {
            panic!("{o:?}")
        };
        assert_eq!(m.source.len(), 1);
        assert_eq!(
            m.aggregate.payload_hash,
            sdm_proto::payload_hash(&m.payload)
        );
    }
}

#[test]
fn killed_interior_node_loses_exactly_its_subtree() {
    let topo = Shape::Binomial.build(64);
    let victim = NodeId::Server(31); // position 32: subtree [31-62]
    let sub = topo.subtree(victim);
    assert_eq!(sub.to_string(), "[31-62]");
    let mut net = net(
        Shape::Binomial,
        64,
        Box::new(|_, _| Some((Duration::from_millis(50), Bytes::from_static(b"ok")))),
    );
    net.command(2, IdSet::all(64), SyncMode::WaitAll, "slow");
    // Let the command spread, then kill the interior node mid-command.
    while net.elapsed() < Duration::from_millis(10) && net.step() {}
    net.kill(31);
    net.run();
    let g = net.groups(2);
    assert_partition(&g, &IdSet::all(64));
    assert_eq!(ids_with(&g, Status::Lost), sub);
    assert_eq!(ids_with(&g, Status::Replied).to_string(), "[0-30,63]");
    let lost = g.iter().find(|g| g.status == Status::Lost).unwrap();
    assert!(
        String::from_utf8_lossy(&lost.payload).contains("31"),
        "{lost:?}"
    );
    // Later commands to the dead subtree are lost at once, not hung.
    net.command(3, IdSet::range(30..=40), SyncMode::WaitAll, "again");
    net.run();
    let g = net.groups(3);
    assert_partition(&g, &IdSet::range(30..=40));
    assert_eq!(ids_with(&g, Status::Lost).to_string(), "[31-40]");
}

#[test]
fn silent_servers_time_out_and_late_replies_are_dropped() {
    let mut net = net(
        Shape::Binomial,
        32,
        Box::new(|id, _| {
            let s = id.server().unwrap();
            // 5 and 20 answer far too late; 7 never answers.
            match s {
                5 | 20 => Some((Duration::from_secs(5), Bytes::from_static(b"late"))),
                7 => None,
                _ => Some((MS, Bytes::from_static(b"ok"))),
            }
        }),
    );
    net.command(4, IdSet::all(32), SyncMode::Timeout(500), "x");
    net.run();
    let g = net.groups(4);
    assert_partition(&g, &IdSet::all(32));
    assert_eq!(ids_with(&g, Status::TimedOut).to_string(), "[5,7,20]");
    // The timed-out ids time out at their own node, then merge on the way up.
    assert_eq!(g.iter().filter(|g| g.status == Status::TimedOut).count(), 1);
    assert!(
        net.elapsed() >= Duration::from_secs(5),
        "late replies were delivered"
    );
    assert_eq!(net.node(NodeId::Master).unwrap().pending_ops(), 0);
}

#[test]
fn dont_wait_forwards_early_and_still_partitions() {
    let mut net = net(
        Shape::Binomial,
        16,
        Box::new(|id, _| {
            let s = u64::from(id.server().unwrap());
            Some((MS * (1 + s as u32 * 10), Bytes::from_static(b"ok")))
        }),
    );
    net.command(5, IdSet::all(16), SyncMode::DontWait, "x");
    net.run();
    let g = net.groups(5);
    assert!(
        g.len() > 1,
        "don't-wait should not hold replies back: {g:?}"
    );
    assert_partition(&g, &IdSet::all(16));
}

#[test]
fn ids_beyond_the_tree_are_reported_lost() {
    let mut net = net(Shape::Binomial, 8, same_reply());
    let dest: IdSet = "[2,6-12]".parse().unwrap();
    net.command(6, dest.clone(), SyncMode::WaitAll, "x");
    net.run();
    let g = net.groups(6);
    assert_partition(&g, &dest);
    assert_eq!(ids_with(&g, Status::Lost).to_string(), "[8-12]");
    assert_eq!(ids_with(&g, Status::Replied).to_string(), "[2,6-7]");
}

#[test]
fn wrong_direction_frames_are_refused() {
    let topo: Arc<dyn sdm_topology::Topology> = Arc::from(Shape::Binomial.build(4));
    let mut n = Node::new(NodeId::Server(1), topo);
    let now = Instant::now();
    n.handle_from_parent(
        now,
        Message::reply(1, IdSet::single(0), Status::Replied, Bytes::new()),
    );
    let mut cmd = Message::command(1, IdSet::single(0), SyncMode::WaitAll, "x");
    cmd.kind = Kind::Control;
    n.handle_from_child(now, NodeId::Server(2), cmd);
    assert_eq!(n.stats().refused, 2);
    assert!(n.poll_output().is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For every command, the groups that reach the front-end partition the destination:
    /// every id once, none twice, none missing; and each id has the status it must have.
    #[test]
    fn groups_partition_the_destination(
        shape in prop_oneof![Just(Shape::Binomial), (2u32..5).prop_map(Shape::KAry),
                             (2u32..5).prop_map(Shape::KNomial), Just(Shape::Flat)],
        n in 1u32..300,
        dest_ranges in proptest::collection::vec((0u32..320, 0u32..80), 1..5),
        kills in proptest::collection::vec(any::<u32>(), 0..4),
        kill_late in any::<bool>(),
        silent in proptest::collection::vec(any::<u32>(), 0..4),
        timeout in any::<bool>(),
        distinct in 1u32..4,
    ) {
        let mut dest = IdSet::new();
        for (a, l) in dest_ranges { dest.insert_range(a..=a + l); }
        let silent: HashSet<u32> = if timeout { silent.into_iter().map(|s| s % n).collect() } else { HashSet::new() };
        let silent2 = silent.clone();
        let topo = shape.build(n);
        let mut net = net(shape, n, Box::new(move |id, _| {
            let s = id.server().unwrap();
            (!silent2.contains(&s)).then(|| (MS * 3, Bytes::from(format!("r{}", s % distinct))))
        }));
        let kills: Vec<u32> = kills.into_iter().map(|k| k % n).collect();
        if !kill_late { for &k in &kills { net.kill(k); } }
        let sync = if timeout { SyncMode::Timeout(10_000) } else { SyncMode::WaitAll };
        net.command(1, dest.clone(), sync, "go");
        if kill_late {
            while net.elapsed() < MS * 2 && net.step() {}
            for &k in &kills { net.kill(k); }
        }
        net.run();
        let g = net.groups(1);
        let mut seen = IdSet::new();
        for grp in &g {
            prop_assert!(grp.sources.is_disjoint(&seen), "id twice: {:?}", grp);
            seen.union_with(&grp.sources);
        }
        prop_assert_eq!(&seen, &dest);
        // Expected statuses: behind a killed server -> lost; beyond N -> lost;
        // silent -> timed out; else replied.
        let mut lost = &dest - &IdSet::all(n);
        for &k in &kills { lost.union_with(&(&dest & &topo.subtree(NodeId::Server(k)))); }
        let timed: IdSet = silent.iter().copied().filter(|s| dest.contains(*s) && !lost.contains(*s)).collect();
        prop_assert_eq!(ids_with(&g, Status::Lost), lost.clone());
        prop_assert_eq!(ids_with(&g, Status::TimedOut), timed.clone());
        prop_assert_eq!(ids_with(&g, Status::Replied), &(&dest - &lost) - &timed);
        // Identical replies merged: at most one replied group per distinct payload.
        prop_assert!(g.iter().filter(|x| x.status == Status::Replied).count() as u32 <= distinct);
    }
}

#[test]
fn sum_filter_adds_up_integer_replies_shape_independently() {
    for shape in [Shape::Binomial, Shape::KAry(3), Shape::Flat] {
        let mut net = net(
            shape,
            100,
            Box::new(|id, _| Some((MS, Bytes::from(id.server().unwrap().to_string())))),
        );
        let mut cmd = Message::command(1, IdSet::all(100), SyncMode::WaitAll, "value");
        cmd.aggregate.filter = "sum".into();
        net.command_message(cmd);
        net.run();
        let g = net.groups(1);
        assert_eq!(g.len(), 1, "{shape}: {g:?}");
        assert_eq!(&g[0].payload[..], b"4950");
        assert_eq!(g[0].sources, IdSet::all(100));
    }
}
