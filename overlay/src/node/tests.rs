//! Node state-machine tests over the in-memory [`SimNet`]: merging, loss, timeouts, and
//! the invariant that the groups reaching the front-end partition the destination exactly.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;
use sdm_filters::{ErrorKind, Filter, FilterError, Registry};
use sdm_proto::{IdSet, Kind, Message, Status, SyncMode};
use sdm_topology::{NodeId, Shape};

use crate::node::{Node, Output};
use crate::sim::{Group, SimNet};

const MS: Duration = Duration::from_millis(1);

fn same_reply() -> crate::sim::Responder {
    Box::new(|_, _| Some((MS, Bytes::from_static(b"ok"))))
}

fn net(shape: &Shape, n: u32, responder: crate::sim::Responder) -> SimNet {
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
        let mut net = net(&shape, 64, same_reply());
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
fn the_simulator_holds_a_node_only_while_it_has_state() {
    let mut net = net(&Shape::KAry(4), 100, same_reply());
    net.command(1, IdSet::all(100), SyncMode::WaitAll, "x");
    // Half-way the ops are in flight: the nodes holding them exist.
    net.run_until(MS * 3);
    assert!((0..100).any(|s| net.node(NodeId::Server(s)).is_some()));
    net.run();
    assert_partition(&net.groups(1), &IdSet::all(100));
    // Done: every server's node was idle, so dropped; the master stays.
    assert!((0..100).all(|s| net.node(NodeId::Server(s)).is_none()));
    assert_eq!(net.node(NodeId::Master).unwrap().pending_ops(), 0);
    // A dropped node is made again for the next command, which is answered the same way.
    net.command(2, IdSet::all(100), SyncMode::WaitAll, "y");
    net.run();
    assert_partition(&net.groups(2), &IdSet::all(100));
    assert_eq!(net.groups(2).len(), 1);
}

#[test]
fn distinct_replies_stay_apart() {
    let mut net = net(
        &Shape::Binomial,
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

/// The master of a flat tree of `n` servers.
fn flat_master(n: u32) -> Node {
    let topo: Arc<dyn sdm_topology::Topology> = Arc::from(Shape::Flat.build(n));
    Node::new(NodeId::Master, topo)
}

/// Command `op` ("q") to all `n` servers, waiting for every one.
fn ask_all(op: u64, n: u32) -> Message {
    Message::command(op, IdSet::all(n), SyncMode::WaitAll, "q")
}

#[test]
fn forged_hash_never_merges_different_payloads() {
    let (mut master, now) = (flat_master(2), Instant::now());
    master.handle_from_parent(now, ask_all(1, 2));
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
        &Shape::Binomial,
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
        &Shape::Binomial,
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
        &Shape::Binomial,
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
    let mut net = net(&Shape::Binomial, 8, same_reply());
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

#[test]
fn a_servers_lines_are_numbered_per_stream_and_merge_only_at_equal_indices() {
    let topo: Arc<dyn sdm_topology::Topology> = Arc::from(Shape::Binomial.build(4));
    let mut n = Node::new(NodeId::Server(1), topo.clone());
    // (`\x00` alone: the program went idle; a marker per stream with its count follows.)
    for payload in [
        &b"\x01a"[..],
        b"\x02e",
        b"\x01b",
        b"\x01c",
        b"\x02f",
        b"\x00",
    ] {
        n.handle_local_event(Instant::now(), Kind::Stdio, 1, Bytes::from_static(payload));
    }
    n.handle_local_event(
        Instant::now(),
        Kind::Event,
        1,
        Bytes::from_static(b"exited"),
    );
    let mut sent = Vec::new();
    while let Some(Output::ToParent(m)) = n.poll_output() {
        sent.push((m.kind, m.op, m.payload));
    }
    let want: Vec<(Kind, u64, Bytes)> = [
        (Kind::Stdio, 0, &b"\x01a"[..]),
        (Kind::Stdio, 0, b"\x02e"),
        (Kind::Stdio, 1, b"\x01b"),
        (Kind::Stdio, 2, b"\x01c"),
        (Kind::Stdio, 1, b"\x02f"),
        (Kind::Stdio, 3, b"\x00\x01"),
        (Kind::Stdio, 2, b"\x00\x02"),
        (Kind::Event, 0, b"exited"),
    ]
    .into_iter()
    .map(|(k, i, p)| (k, i, Bytes::from_static(p)))
    .collect();
    assert_eq!(sent, want);

    // An interior node (0 is the parent of 1 in a binomial tree of 4) merges the same
    // text only at the same index.
    let mut parent = Node::new(NodeId::Server(0), topo);
    parent.set_stdio_window(Duration::from_millis(20));
    let now = Instant::now();
    let line = |op: u64, id: u32| {
        let mut m = Message::reply(
            op,
            IdSet::single(id),
            Status::Replied,
            Bytes::from_static(b"\x01y"),
        );
        m.kind = Kind::Stdio;
        m.aggregate.status = None;
        m
    };
    parent.handle_from_child(now, NodeId::Server(1), line(0, 1));
    parent.handle_from_child(now, NodeId::Server(1), line(1, 1));
    parent.handle_from_child(now, NodeId::Server(2), line(1, 2));
    parent.set_stdio_window(Duration::ZERO);
    let mut up = Vec::new();
    while let Some(Output::ToParent(m)) = parent.poll_output() {
        up.push((m.op, m.source.to_string()));
    }
    assert_eq!(up, [(0, "[1]".to_owned()), (1, "[1-2]".to_owned())]);
}

#[test]
fn a_hung_server_is_found_by_keepalive_in_virtual_time() {
    let mut net = net(&Shape::Binomial, 16, same_reply());
    net.set_liveness(crate::liveness::Liveness {
        interval: Duration::from_millis(100),
        dead_after: Duration::from_secs(1),
    });
    // Keepalives alone keep every link up, however long nothing else happens.
    net.run_until(Duration::from_secs(30));
    net.command(1, IdSet::all(16), SyncMode::WaitAll, "ping");
    net.run_until(Duration::from_secs(31));
    let g = net.groups(1);
    assert_partition(&g, &IdSet::all(16));
    assert_eq!(ids_with(&g, Status::Replied), IdSet::all(16), "{g:?}");

    // Server 8 hangs (its links stay open, it says nothing): a command waiting for all
    // completes once its parent has heard nothing for dead-after, with 8's subtree lost.
    net.hang(8);
    net.command(2, IdSet::all(16), SyncMode::WaitAll, "ping");
    net.run_until(Duration::from_secs(40));
    let g = net.groups(2);
    assert_partition(&g, &IdSet::all(16));
    let subtree = Shape::Binomial.build(16).subtree(NodeId::Server(8));
    assert_eq!(ids_with(&g, Status::Lost), subtree, "{g:?}");
    let lost = g.iter().find(|g| g.status == Status::Lost).unwrap();
    assert!(
        String::from_utf8_lossy(&lost.payload).contains("keepalive"),
        "{lost:?}"
    );
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
        filter in prop_oneof![Just(""), Just("sum"), Just("count"), Just("no-such-filter")],
    ) {
        let mut dest = IdSet::new();
        for (a, l) in dest_ranges { dest.insert_range(a..=a + l); }
        let silent: HashSet<u32> = if timeout { silent.into_iter().map(|s| s % n).collect() } else { HashSet::new() };
        let silent2 = silent.clone();
        let topo = shape.build(n);
        let mut net = net(&shape, n, Box::new(move |id, _| {
            let s = id.server().unwrap();
            (!silent2.contains(&s)).then(|| (MS * 3, Bytes::from(format!("{}", s % distinct))))
        }));
        let kills: Vec<u32> = kills.into_iter().map(|k| k % n).collect();
        if !kill_late { for &k in &kills { net.kill(k); } }
        let sync = if timeout { SyncMode::Timeout(10_000) } else { SyncMode::WaitAll };
        let mut cmd = Message::command(1, dest.clone(), sync, "go");
        cmd.aggregate.filter = filter.into();
        net.command_message(cmd);
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
        let mut replied = &(&dest - &lost) - &timed;
        let mut refused = IdSet::new();
        if filter == "no-such-filter" {
            // An unknown filter: every reply is accounted as an error (not lost), naming
            // the filter.
            refused = std::mem::take(&mut replied);
        }
        prop_assert_eq!(ids_with(&g, Status::Error), refused);
        prop_assert_eq!(ids_with(&g, Status::Lost), lost.clone());
        prop_assert_eq!(ids_with(&g, Status::TimedOut), timed.clone());
        prop_assert_eq!(ids_with(&g, Status::Replied), replied.clone());
        let replied_groups = g.iter().filter(|x| x.status == Status::Replied).count() as u32;
        match filter {
            // Identical replies merged: at most one replied group per distinct payload.
            "" => prop_assert!(replied_groups <= distinct),
            // Reducing filters: the master sends one replied group, the exact total.
            "sum" | "count" => {
                prop_assert!(replied_groups <= 1);
                let want = if filter == "sum" {
                    replied.iter().map(|s| u64::from(s % distinct)).sum::<u64>()
                } else {
                    replied.len()
                };
                if let Some(r) = g.iter().find(|x| x.status == Status::Replied) {
                    prop_assert_eq!(String::from_utf8_lossy(&r.payload), want.to_string());
                }
            }
            _ => prop_assert_eq!(replied_groups, 0),
        }
    }
}

#[test]
fn sum_filter_adds_up_integer_replies_shape_independently() {
    for shape in [Shape::Binomial, Shape::KAry(3), Shape::Flat] {
        let mut net = net(
            &shape,
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

/// A registry with the built-ins and `flaky`, a sum whose flush fails at `[3]`'s parent
/// (having flushed its sum first: a node must not send it).
fn flaky_registry() -> Arc<Registry> {
    #[derive(Debug, Default)]
    struct Flaky {
        inner: sdm_filters::builtin::Sum,
        failing: bool,
    }
    impl Filter for Flaky {
        fn name(&self) -> &str {
            "flaky"
        }
        fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
            self.failing |= sources.contains(3);
            self.inner.fold(payload, sources)
        }
        fn flush(&mut self) -> Result<Vec<sdm_filters::Group>, FilterError> {
            let groups = self.inner.flush()?;
            if std::mem::take(&mut self.failing) {
                return Err(FilterError::new(
                    "flaky",
                    ErrorKind::Plugin,
                    "flush failed on purpose",
                ));
            }
            Ok(groups)
        }
    }
    let mut r = Registry::new();
    r.register("flaky", |_| {
        Ok(Box::new(Flaky::default()) as Box<dyn Filter>)
    })
    .unwrap();
    Arc::new(r)
}

fn with_filter(dest: IdSet, sync: SyncMode, filter: &str, payload: &str) -> Message {
    let mut cmd = Message::command(1, dest, sync, payload.to_owned());
    cmd.aggregate.filter = filter.into();
    cmd
}

#[test]
fn a_payload_the_filter_refuses_is_an_error_not_lost_and_the_rest_merge() {
    for shape in [Shape::Binomial, Shape::Flat] {
        let mut net = net(
            &shape,
            16,
            Box::new(|id, _| {
                let s = id.server().unwrap();
                let body = if s == 7 {
                    "seven".into()
                } else {
                    s.to_string()
                };
                Some((MS, Bytes::from(body)))
            }),
        );
        net.command_message(with_filter(IdSet::all(16), SyncMode::WaitAll, "sum", "v"));
        net.run();
        let g = net.groups(1);
        assert_partition(&g, &IdSet::all(16));
        let replied: Vec<_> = g.iter().filter(|g| g.status == Status::Replied).collect();
        assert_eq!(replied.len(), 1, "{shape}: {g:?}");
        assert_eq!(&replied[0].payload[..], b"113"); // 0+…+15 - 7
        assert_eq!(replied[0].sources, &IdSet::all(16) - &IdSet::single(7));
        // Server 7 answered: its reply is an error of the filter, not a lost server.
        assert!(ids_with(&g, Status::Lost).is_empty(), "{shape}: {g:?}");
        assert_eq!(ids_with(&g, Status::Error), IdSet::single(7));
        let refused = g.iter().find(|g| g.status == Status::Error).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&refused.payload),
            r#"filter "sum": payload from [7] is not a decimal number: "seven""#
        );
    }
}

#[test]
fn an_unknown_filter_fails_every_reply_and_says_why() {
    let mut net = net(&Shape::Binomial, 8, same_reply());
    net.command_message(with_filter(IdSet::all(8), SyncMode::WaitAll, "nope:1", "v"));
    net.run();
    let g = net.groups(1);
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(
        (g[0].status, &g[0].sources),
        (Status::Error, &IdSet::all(8))
    );
    let why = String::from_utf8_lossy(&g[0].payload);
    assert!(
        why.starts_with(r#"filter "nope:1": no such filter; known: "#),
        "{why}"
    );
    assert_eq!(net.node(NodeId::Master).unwrap().pending_ops(), 0);
}

#[test]
fn a_failed_flush_fails_exactly_the_ids_it_held() {
    let mut net = net(
        &Shape::Binomial,
        16,
        Box::new(|id, _| Some((MS, Bytes::from(id.server().unwrap().to_string())))),
    );
    net.set_registry(flaky_registry());
    net.command_message(with_filter(IdSet::all(16), SyncMode::WaitAll, "flaky", "v"));
    net.run();
    let g = net.groups(1);
    assert_partition(&g, &IdSet::all(16));
    // Server 3 (a child of the master, subtree [3-6]) fails its flush: the ids it held go up
    // as an error (not lost), the master never folds 3 and sums the rest.
    assert!(ids_with(&g, Status::Lost).is_empty(), "{g:?}");
    assert_eq!(ids_with(&g, Status::Error).to_string(), "[3-6]", "{g:?}");
    let refused = g.iter().find(|g| g.status == Status::Error).unwrap();
    assert!(
        String::from_utf8_lossy(&refused.payload).contains("flush failed on purpose"),
        "{refused:?}"
    );
    let replied = g.iter().find(|g| g.status == Status::Replied).unwrap();
    assert_eq!(&replied.payload[..], b"102"); // 120 - (3+4+5+6)
    // The same filter without id 3 works.
    net.command_message(Message {
        op: 2,
        ..with_filter(IdSet::range(4..=15), SyncMode::WaitAll, "flaky", "v")
    });
    net.run();
    let g = net.groups(2);
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(&g[0].payload[..], b"114"); // 4+…+15
}

#[test]
fn dont_wait_flushes_partial_sums_that_add_up() {
    let mut net = net(
        &Shape::Binomial,
        16,
        Box::new(|id, _| {
            let s = id.server().unwrap();
            Some((MS * (1 + s * 10), Bytes::from(s.to_string())))
        }),
    );
    net.command_message(with_filter(IdSet::all(16), SyncMode::DontWait, "sum", "v"));
    net.run();
    let g = net.groups(1);
    assert!(g.len() > 1, "{g:?}");
    assert_partition(&g, &IdSet::all(16));
    let total: u64 = g
        .iter()
        .map(|g| String::from_utf8_lossy(&g.payload).parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 120);
}

#[test]
fn mean_sends_records_up_and_finishes_at_the_front_end() {
    for shape in [Shape::Binomial, Shape::KAry(3), Shape::Flat] {
        let mut net = net(
            &shape,
            16,
            Box::new(|id, _| Some((MS, Bytes::from(id.server().unwrap().to_string())))),
        );
        net.command_message(with_filter(IdSet::all(16), SyncMode::WaitAll, "mean", "v"));
        net.run();
        let g = net.groups(1);
        assert_eq!(g.len(), 1, "{shape}: {g:?}");
        assert_eq!(
            &g[0].payload[..],
            br#"{"sdm":1,"type":"mean","sum":"120","count":16}"#
        );
        // The front-end folds the record into a fresh `mean` and finishes it.
        let mut mean = Registry::new().create("mean").unwrap();
        mean.fold(&g[0].payload, &g[0].sources).unwrap();
        let fin = mean.finish().unwrap();
        assert_eq!(fin.len(), 1);
        assert_eq!(
            (&fin[0].payload[..], &fin[0].sources),
            (&b"7.5"[..], &IdSet::all(16))
        );
    }
}

#[test]
fn an_adopted_descendant_keeps_its_share_after_its_old_parent_returns() {
    // Binomial over 16: server 3's children are 4 and 5, and 6 is 5's child.
    let topo: Arc<dyn sdm_topology::Topology> = Arc::from(Shape::Binomial.build(16));
    let mut node = Node::new(NodeId::Server(3), topo);
    let now = Instant::now();
    // 5's link is cut; its child 6 re-attaches here; then 5 itself comes back (a healed
    // cut), while 6 stays linked here, not under 5.
    node.handle_link_down(now, NodeId::Server(5), crate::LinkEnd::Closed);
    assert!(node.handle_adopt(NodeId::Server(6)));
    assert!(!node.handle_adopt(NodeId::Server(4)), "4 is a live child");
    assert!(node.handle_adopt(NodeId::Server(5)));
    let dest: IdSet = "[3-6]".parse().unwrap();
    node.handle_from_parent(now, Message::command(1, dest, SyncMode::WaitAll, "ping"));
    let mut sent = Vec::new();
    let mut local = false;
    while let Some(out) = node.poll_output() {
        match out {
            Output::ToChild(c, m) => sent.push((c, m.dest.to_string())),
            Output::Deliver { .. } => local = true,
            Output::ToParent(m) => panic!("nothing is lost: {m:?}"),
            Output::LinkDead(p, why) => panic!("no link dies: {p} {why}"),
            Output::PauseLocal | Output::ResumeLocal => panic!("no output flows"),
        }
    }
    sent.sort();
    assert!(local);
    assert_eq!(
        sent,
        vec![
            (NodeId::Server(4), "[4]".to_owned()),
            (NodeId::Server(5), "[5]".to_owned()),
            (NodeId::Server(6), "[6]".to_owned()),
        ]
    );
}

/// A node's losses are kept only while it has some: a child lost makes the node hold state
/// (the simulator keeps it), the child's return or adoption gives it up again (the node is
/// idle, and the simulator drops it); an adopted descendant is state to keep.
#[test]
fn losses_are_kept_only_while_there_are_some() {
    let topo: Arc<dyn sdm_topology::Topology> = Arc::from(Shape::Binomial.build(16));
    let now = Instant::now();
    let mut node = Node::new(NodeId::Server(3), Arc::clone(&topo));
    assert!(node.is_idle());
    node.handle_link_down(now, NodeId::Server(5), crate::LinkEnd::Closed);
    assert!(!node.is_idle(), "a dead child is state");
    assert_eq!(node.dead_children().count(), 1);
    node.handle_link_up(NodeId::Server(5));
    assert!(node.is_idle(), "the child is back: nothing is kept");
    assert_eq!(node.dead_children().count(), 0);

    node.handle_link_down(now, NodeId::Server(5), crate::LinkEnd::Closed);
    assert!(node.handle_adopt(NodeId::Server(5)));
    assert!(
        node.is_idle(),
        "the dead child re-attached: nothing is kept"
    );

    let mut node = Node::new(NodeId::Server(3), topo);
    assert!(node.handle_adopt(NodeId::Server(6)));
    assert!(!node.is_idle(), "an adopted grandchild is state");
}

// ---- output flow control ------------------------------------------------------------------

/// The stdio payloads server `s`'s program prints: `n` numbered lines on stdout.
fn numbered_lines(s: u32, n: usize) -> Vec<Bytes> {
    (0..n)
        .map(|k| Bytes::from(format!("\x01rank {s} prints line {k} of its flood\n")))
        .collect()
}

/// The lines of each server that reached the front-end, with their indexes, in arrival
/// order.
fn lines_by_rank(net: &SimNet) -> std::collections::BTreeMap<u32, Vec<(u64, Bytes)>> {
    let mut by = std::collections::BTreeMap::<u32, Vec<(u64, Bytes)>>::new();
    for m in net.output() {
        for r in m.source.iter() {
            by.entry(r).or_default().push((m.op, m.payload.clone()));
        }
    }
    by
}

/// Every server of `ranks` got all its `n` lines to the front-end, once each, in order.
fn assert_every_line_in_order(net: &SimNet, ranks: impl IntoIterator<Item = u32>, n: usize) {
    let by = lines_by_rank(net);
    for r in ranks {
        let want: Vec<(u64, Bytes)> = numbered_lines(r, n)
            .into_iter()
            .enumerate()
            .map(|(k, l)| (k as u64, l))
            .collect();
        let got = by.get(&r).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(got.len(), n, "rank {r}: lines lost or duplicated");
        assert!(got == want, "rank {r}: lines out of order");
    }
}

/// What a node may hold for its parent at most: its own program's output up to the queue
/// limit, a window from each child, and one frame of overdraw.
fn queue_bound(topo: &dyn sdm_topology::Topology, id: NodeId, largest: i64) -> i64 {
    let windows: i64 = topo
        .children(id)
        .into_iter()
        .map(|c| {
            crate::flow::RecvWindow::weighted(topo.subtree(c).len())
                .0
                .window()
        })
        .sum();
    crate::flow::QUEUE_LIMIT + windows + largest
}

#[test]
fn a_front_end_that_stops_reading_stops_the_printer_at_the_window_and_loses_nothing() {
    let n = 16;
    let topo = Shape::Binomial.build(n);
    let depth = |s: u32| {
        let mut d = 0;
        let mut at = NodeId::Server(s);
        while let Some(p) = topo.parent(at) {
            d += 1;
            at = p;
        }
        d
    };
    let deep = (0..n).max_by_key(|&s| depth(s)).unwrap();
    assert!(depth(deep) >= 3, "the flood crosses interior servers");
    let mut net = net(&Shape::Binomial, n, same_reply());
    net.set_frontend_reading(false);
    let count = 60_000;
    let lines = numbered_lines(deep, count);
    let largest = lines.iter().map(|l| l.len() as i64 + 32).max().unwrap();
    let total: i64 = lines.iter().map(|l| l.len() as i64 + 32).sum();
    assert!(
        total > 32 * crate::flow::WINDOW,
        "the flood exceeds every window"
    );
    net.print(deep, lines);
    net.run();
    // The printer waits: its node paused it with most of the flood still unprinted.
    assert!(net.paused(NodeId::Server(deep)));
    assert!(net.unprinted(deep) > count / 2, "{}", net.unprinted(deep));
    // The front-end holds at most one window (one frame of overdraw), every node a
    // bounded queue.
    let unread: i64 = net.output().map(crate::flow::cost).sum();
    assert!(
        unread > 0 && unread < crate::flow::WINDOW + largest,
        "{unread}"
    );
    for p in 0..topo.positions() {
        let id = NodeId::from_position(p);
        let bound = queue_bound(&*topo, id, largest);
        assert!(
            net.max_queued_output(id) <= bound,
            "{id} queued {} > {bound}",
            net.max_queued_output(id)
        );
    }
    // Commands are not held by the output: one to everybody comes back whole.
    net.command(1, IdSet::all(n), SyncMode::WaitAll, "ping");
    net.run();
    let g = net.groups(1);
    assert_eq!(ids_with(&g, Status::Replied), IdSet::all(n), "{g:?}");
    // The front-end reads again: every line arrives, in order, and the printer is done.
    net.set_frontend_reading(true);
    net.run();
    assert_eq!(net.unprinted(deep), 0);
    assert!(!net.paused(NodeId::Server(deep)));
    assert_every_line_in_order(&net, [deep], count);
}

/// Lines of each rank that reached the front-end after `ms` of virtual time while all 16
/// ranks of a binomial tree flood, with links opened (children's windows weighted by
/// their subtrees) or not (one window per child, as before weights).
fn flood_shares(weighted: bool, ms: u64) -> Vec<usize> {
    let n = 16;
    let mut net = net(&Shape::Binomial, n, same_reply());
    if weighted {
        net.open_links();
    }
    let count = 50_000;
    for s in 0..n {
        net.print(s, numbered_lines(s, count));
    }
    net.run_until(Duration::from_millis(ms));
    let by = lines_by_rank(&net);
    (0..n).map(|r| by.get(&r).map_or(0, Vec::len)).collect()
}

/// Output going up is shared by the ranks, not by the links: with windows weighted by
/// subtree size and each node's credit shared by the servers behind each origin, every
/// rank of a 16-rank binomial tree gets about the same through the master's link while all
/// flood, however deep it sits: the rank that got the most got less than twice what the
/// one that got the least did (1.6x in this simulation; with one window per link and the
/// node's queue in arrival order it was 53x, and 18x with weighted windows alone). With
/// one window per link the credit is shared by link, and the spread is larger.
#[test]
fn a_flood_is_shared_by_ranks_not_only_by_links() {
    let spread = |got: &[usize]| {
        let lo = *got.iter().min().unwrap();
        assert!(lo > 0, "a rank got nothing through: {got:?}");
        *got.iter().max().unwrap() as f64 / lo as f64
    };
    let equal = flood_shares(false, 400);
    let weighted = flood_shares(true, 400);
    assert!(spread(&weighted) < 2.0, "weighted {weighted:?}");
    assert!(
        2.0 * spread(&weighted) < spread(&equal),
        "weighted {weighted:?} against equal {equal:?}"
    );
}

#[test]
fn a_stalled_reader_holds_back_only_its_subtree() {
    let n = 16;
    let topo = Shape::Binomial.build(n);
    // An interior server under the master whose children have children.
    let mid = topo
        .children(NodeId::Master)
        .into_iter()
        .max_by_key(|&c| topo.subtree(c).len())
        .unwrap();
    let below = topo.subtree(mid);
    assert!(below.len() >= 4, "{mid} has a subtree: {below}");
    let others = &IdSet::all(n) - &below;
    let mut net = net(&Shape::Binomial, n, same_reply());
    net.stall(mid);
    let count = 4_000;
    for s in 0..n {
        net.print(s, numbered_lines(s, count));
    }
    net.command(1, others.clone(), SyncMode::WaitAll, "ping");
    net.command(2, below.clone(), SyncMode::WaitAll, "ping");
    net.run();
    // Everything outside the stalled subtree went on: commands and every line.
    let g = net.groups(1);
    assert_eq!(ids_with(&g, Status::Replied), others, "{g:?}");
    assert_every_line_in_order(&net, others.iter(), count);
    // The subtree is held: its command waits, no line of it arrived, and the stalled
    // node's children were paused at their windows.
    assert!(net.groups(2).is_empty());
    let by = lines_by_rank(&net);
    assert!(below.iter().all(|r| !by.contains_key(&r)));
    for c in topo.children(mid) {
        let s = c.server().unwrap();
        assert!(net.paused(c), "{c} printed on");
        assert!(net.unprinted(s) > 0);
    }
    // The reader goes on: the rest arrives, in order, and the command completes.
    net.resume(mid);
    net.run();
    let g = net.groups(2);
    assert_eq!(ids_with(&g, Status::Replied), below, "{g:?}");
    assert_every_line_in_order(&net, 0..n, count);
}

#[test]
fn a_child_that_ignores_its_window_loses_its_link_and_only_its_ids() {
    let topo: Arc<dyn sdm_topology::Topology> = Arc::from(Shape::Flat.build(3));
    let mut node = Node::new(NodeId::Master, topo);
    let t = Instant::now();
    node.handle_from_parent(
        t,
        Message::command(7, IdSet::all(3), SyncMode::WaitAll, "x"),
    );
    while node.poll_output().is_some() {}
    let mut line = Message::reply(0, IdSet::single(1), Status::Replied, "y\n".into());
    line.kind = Kind::Stdio;
    line.aggregate.status = None;
    // The front-end grants nothing: once the master's window is spent, the child's credit
    // stops, and a child going on regardless is cut off.
    let mut dead = None;
    for _ in 0..(4 * crate::flow::WINDOW / crate::flow::cost(&line)) {
        node.handle_from_child(t, NodeId::Server(1), line.clone());
        while let Some(out) = node.poll_output() {
            if let Output::LinkDead(p, why) = out {
                dead = Some((p, why));
            }
        }
        if dead.is_some() {
            break;
        }
    }
    let (peer, why) = dead.expect("the window is enforced");
    assert_eq!(peer, crate::liveness::Peer::Child(NodeId::Server(1)));
    assert!(
        matches!(&why, crate::LinkEnd::Protocol(d) if d.contains("flow-control window")),
        "{why}"
    );
    assert!(node.queued_output() <= crate::flow::WINDOW + crate::flow::cost(&line));
    // The op goes on for the others; the cut-off child's id is lost.
    for s in [0, 2] {
        let r = Message::reply(7, IdSet::single(s), Status::Replied, "ok".into());
        node.handle_from_child(t, NodeId::Server(s), r);
    }
    let replies: Vec<Message> = std::iter::from_fn(|| node.poll_output())
        .filter_map(|o| match o {
            Output::ToParent(m) if m.kind == Kind::Reply => Some(m),
            _ => None,
        })
        .collect();
    let lost = replies
        .iter()
        .find(|m| m.aggregate.status == Some(Status::Lost))
        .expect("a lost group");
    assert_eq!(lost.source, IdSet::single(1));
}

/// A command still queued at a server is narrowed copy by copy: each child's copy gets the
/// payload made from its share, the server's own from its id alone; another op's copies
/// are left as they were.
#[test]
fn queued_copies_of_a_command_are_tailored_to_whom_they_go() {
    let topo = Shape::Binomial.build(8);
    // The server with the most children, and the ids it forwards to.
    let me = (0..8)
        .map(NodeId::Server)
        .max_by_key(|&s| topo.children(s).len())
        .unwrap();
    let kids = topo.children(me);
    assert!(kids.len() >= 2, "{kids:?}");
    let all = topo.subtree(me);
    let topo: Arc<dyn sdm_topology::Topology> = Arc::from(topo);
    let mut node = Node::new(me, topo.clone());
    let now = Instant::now();
    node.handle_from_parent(
        now,
        Message::command(7, all.clone(), SyncMode::WaitAll, "all"),
    );
    node.handle_from_parent(now, Message::command(8, all, SyncMode::WaitAll, "other"));
    // Each copy gets the subtree of the node it is for.
    node.tailor_queued(7, |to| Bytes::from(topo.subtree(to).to_string()));
    let mine = topo.subtree(me).to_string();
    let (mut children, mut local) = (0, 0);
    while let Some(o) = node.poll_output() {
        match o {
            Output::ToChild(c, m) if m.op == 7 => {
                assert_eq!(m.payload, Bytes::from(topo.subtree(c).to_string()));
                children += 1;
            }
            Output::Deliver { op: 7, payload, .. } => {
                assert_eq!(payload, Bytes::from(mine.clone()));
                local += 1;
            }
            Output::ToChild(_, m) => assert_eq!(&m.payload[..], b"other"),
            Output::Deliver { payload, .. } => assert_eq!(&payload[..], b"other"),
            _ => {}
        }
    }
    assert_eq!((children, local), (kids.len(), 1));
}

/// An op fits mimalloc's 160-byte class: every node of the simulator's million has one in
/// flight at the peak of a broadcast (32 bytes more is 32 MB more).
#[cfg(target_pointer_width = "64")]
#[test]
fn an_op_is_small() {
    let size = std::mem::size_of::<crate::node::PendingOp>();
    assert!(size <= 160, "PendingOp is {size} bytes");
}

/// A node fits mimalloc's 256-byte class, which keeps a simulated tree of a million nodes
/// within memory: state most nodes never use is boxed and made on first use.
#[cfg(target_pointer_width = "64")]
#[test]
fn a_node_is_small() {
    let size = std::mem::size_of::<Node>();
    assert!(size <= 256, "Node is {size} bytes");
}

/// Ids lost with a link go up with how the link ended, and a lost group relayed from a
/// child keeps its end: a flat master whose child 1 falls silent while child 0 reports
/// its own ids lost to a link that never came up sends both groups up, each with its end.
#[test]
fn lost_ids_go_up_with_how_their_link_ended() {
    use sdm_proto::LinkEndKind;
    let (mut master, now) = (flat_master(2), Instant::now());
    master.handle_from_parent(now, ask_all(1, 2));
    let silent = crate::LinkEnd::Silent(std::time::Duration::from_secs(10));
    master.handle_link_down(now, NodeId::Server(1), silent);
    let mut lost = Message::reply(1, IdSet::single(0), Status::Lost, "below 0".into());
    lost.aggregate.link_end = Some(LinkEndKind::Unreachable);
    master.handle_from_child(now, NodeId::Server(0), lost);
    let mut ends = Vec::new();
    while let Some(out) = master.poll_output() {
        if let Output::ToParent(m) = out
            && m.kind == Kind::Reply
        {
            assert_eq!(m.aggregate.status, Some(Status::Lost), "{m:?}");
            ends.push((m.source.to_string(), m.aggregate.link_end));
        }
    }
    ends.sort();
    assert_eq!(
        ends,
        [
            ("[0]".to_owned(), Some(LinkEndKind::Unreachable)),
            ("[1]".to_owned(), Some(LinkEndKind::Silent)),
        ]
    );
}

/// A child that never connected stays unreachable: the driver later finds no link for a
/// command to it and reports it down again, which must not turn it into "closed".
#[test]
fn a_child_that_never_connected_stays_unreachable() {
    use sdm_proto::LinkEndKind;
    let (mut master, now) = (flat_master(2), Instant::now());
    let unreachable = crate::LinkEnd::Unreachable {
        kind: crate::LinkErrorKind::Timeout,
        detail: "no answer".into(),
    };
    master.handle_link_down(now, NodeId::Server(1), unreachable);
    master.handle_link_down(now, NodeId::Server(1), crate::LinkEnd::Closed);
    master.handle_from_parent(now, ask_all(1, 2));
    let ok = Message::reply(1, IdSet::single(0), Status::Replied, "ok".into());
    master.handle_from_child(now, NodeId::Server(0), ok);
    let mut ends = Vec::new();
    while let Some(out) = master.poll_output() {
        if let Output::ToParent(m) = out
            && m.kind == Kind::Reply
            && m.aggregate.status == Some(Status::Lost)
        {
            ends.push((m.source.to_string(), m.aggregate.link_end));
        }
    }
    assert_eq!(ends, [("[1]".to_owned(), Some(LinkEndKind::Unreachable))]);
}
