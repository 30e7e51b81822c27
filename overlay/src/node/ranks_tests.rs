//! Nodes of servers that serve several ranks each (blocks, cyclic sets): every rank of a
//! destination is delivered once at the server serving it and accounted once at the
//! front-end; a lost server loses exactly its ranks; local ranks' replies and lines merge
//! at their server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sdm_proto::{IdSet, Kind, Status, SyncMode};
use sdm_topology::{NodeId, Placement, Shape, Tree};

use crate::node::{Node, Output};
use crate::sim::{Group, SimNet};

const MS: Duration = Duration::from_millis(1);

fn tree(shape: &Shape, servers: u32, placement: Placement) -> Tree {
    Tree::new(Arc::from(shape.build(servers)), placement)
}

fn cyclic(ranks: u32, servers: u32) -> Placement {
    let mut sets = vec![IdSet::new(); servers as usize];
    for r in 0..ranks {
        sets[(r % servers) as usize].insert(r);
    }
    Placement::sets(sets).unwrap()
}

/// A server answers `ok` once for all the ranks it was given; counts deliveries.
fn counting() -> (crate::sim::Responder, Arc<std::sync::Mutex<Vec<NodeId>>>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let r: crate::sim::Responder = Box::new(move |me, _| {
        s.lock().unwrap().push(me);
        Some((MS, Bytes::from_static(b"ok")))
    });
    (r, seen)
}

fn ids_with(groups: &[Group], status: Status) -> IdSet {
    let mut s = IdSet::new();
    for g in groups.iter().filter(|g| g.status == status) {
        assert!(s.is_disjoint(&g.sources), "rank reported twice: {g:?}");
        s.union_with(&g.sources);
    }
    s
}

#[test]
fn a_broadcast_is_delivered_once_per_server_and_merges_into_one_group() {
    for (shape, placement) in [
        (Shape::Binomial, Placement::blocks(16, 64)),
        (Shape::KAry(2), cyclic(64, 4)),
        (Shape::Flat, Placement::blocks(16, 60)),
    ] {
        let ranks = if matches!(placement, Placement::Blocks { ranks: 60, .. }) {
            60
        } else {
            64
        };
        let (resp, seen) = counting();
        let mut net = SimNet::with_tree(tree(&shape, 4, placement), MS, resp);
        net.command(1, IdSet::all(ranks), SyncMode::WaitAll, "ping");
        net.run();
        let groups = net.groups(1);
        assert_eq!(groups.len(), 1, "{shape}: {groups:?}");
        assert_eq!(groups[0].sources, IdSet::all(ranks));
        assert_eq!(
            seen.lock().unwrap().len(),
            4,
            "{shape}: one delivery per server"
        );
    }
}

#[test]
fn a_subset_reaches_only_the_servers_serving_it_and_unknown_ranks_are_lost() {
    let (resp, seen) = counting();
    let mut net = SimNet::with_tree(tree(&Shape::Binomial, 4, cyclic(64, 4)), MS, resp);
    let dest: IdSet = "[1,5,9,70]".parse().unwrap();
    net.command(2, dest, SyncMode::WaitAll, "ping");
    net.run();
    let groups = net.groups(2);
    assert_eq!(
        ids_with(&groups, Status::Replied),
        "[1,5,9]".parse().unwrap()
    );
    let lost = groups
        .iter()
        .find(|g| g.status == Status::Lost)
        .expect("70 lost");
    assert_eq!(lost.sources, IdSet::single(70));
    assert!(String::from_utf8_lossy(&lost.payload).contains("no such rank"));
    assert_eq!(*seen.lock().unwrap(), vec![NodeId::Server(1)]);
}

#[test]
fn a_killed_server_loses_exactly_its_ranks() {
    for placement in [Placement::blocks(16, 64), cyclic(64, 4)] {
        let (resp, _) = counting();
        let t = tree(&Shape::Binomial, 4, placement);
        let mut net = SimNet::with_tree(t.clone(), MS, resp);
        net.kill(1);
        net.run();
        net.command(3, IdSet::all(64), SyncMode::WaitAll, "ping");
        net.run();
        let groups = net.groups(3);
        // Server 1 is an interior node of the binomial tree of 4: its subtree is lost.
        let gone = t.subtree(NodeId::Server(1));
        assert_eq!(ids_with(&groups, Status::Lost), gone);
        assert_eq!(ids_with(&groups, Status::Replied), &IdSet::all(64) - &gone);
    }
}

#[test]
fn local_ranks_replies_merge_through_the_filter_at_their_server() {
    // kary:2 over 4 servers of 4 ranks: server 0 has servers 2 and 3 below it.
    let t = tree(&Shape::KAry(2), 4, Placement::blocks(4, 16));
    let mut n = Node::new(NodeId::Server(0), t);
    let now = Instant::now();
    let dest: IdSet = "[0-3,8-15]".parse().unwrap();
    let mut m = sdm_proto::Message::command(9, dest.clone(), SyncMode::WaitAll, "v");
    m.aggregate.filter = "sum".into();
    n.handle_from_parent(now, m);
    let mut delivered = Vec::new();
    while let Some(o) = n.poll_output() {
        if let Output::Deliver { ranks, .. } = o {
            delivered.push(ranks);
        }
    }
    assert_eq!(
        delivered,
        vec![IdSet::range(0..=3)],
        "one delivery for ranks 0-3"
    );
    for r in 0..4u32 {
        n.handle_local_reply(now, 9, &IdSet::single(r), Bytes::from(format!("{}", r + 1)));
    }
    // Nothing goes up for ranks 0-3 alone: the children's ranks are still out.
    assert!(!std::iter::from_fn(|| n.poll_output()).any(|o| matches!(o, Output::ToParent(_))));
    for (c, ids, v) in [(2, "[8-11]", "5"), (3, "[12-15]", "6")] {
        let ids: IdSet = ids.parse().unwrap();
        let reply = sdm_proto::Message::reply(9, ids, Status::Replied, Bytes::from(v));
        n.handle_from_child(now, NodeId::Server(c), reply);
    }
    let up: Vec<_> = std::iter::from_fn(|| n.poll_output())
        .filter_map(|o| match o {
            Output::ToParent(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0].source, dest);
    assert_eq!(&up[0].payload[..], b"21");
}

#[test]
fn lines_of_local_ranks_are_numbered_per_rank_and_merge_at_their_server() {
    let t = tree(&Shape::Binomial, 1, Placement::blocks(4, 4));
    let mut n = Node::new(NodeId::Server(0), t);
    n.set_stdio_window(Duration::from_millis(20));
    let now = Instant::now();
    for r in [2u32, 0, 3, 1] {
        n.handle_local_event(now, Kind::Stdio, r, Bytes::from_static(b"\x01same"));
    }
    n.handle_local_event(now, Kind::Stdio, 2, Bytes::from_static(b"\x01two"));
    n.handle_timeout(now + Duration::from_millis(100));
    let up: Vec<_> = std::iter::from_fn(|| n.poll_output())
        .filter_map(|o| match o {
            Output::ToParent(m) if m.kind == Kind::Stdio => Some((m.source, m.op, m.payload)),
            _ => None,
        })
        .collect();
    assert_eq!(
        up,
        vec![
            (IdSet::all(4), 0, Bytes::from_static(b"\x01same")),
            (IdSet::single(2), 1, Bytes::from_static(b"\x01two")),
        ]
    );
    // A rank this server does not serve is not taken as its own.
    n.handle_local_event(now, Kind::Stdio, 9, Bytes::from_static(b"\x01x"));
    assert!(n.poll_output().is_none());
}
