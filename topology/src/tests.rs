//! Property tests: every shape is a tree, and routing splits a destination into disjoint
//! shares that, with the local part, cover exactly `dest ∩ subtree`.

use super::*;
use petgraph::algo::is_cyclic_directed;
use proptest::prelude::*;

fn shapes() -> Vec<Shape> {
    vec![
        Shape::Binomial,
        Shape::KAry(2),
        Shape::KAry(3),
        Shape::KNomial(3),
        Shape::KNomial(4),
        Shape::Flat,
    ]
}

fn arb_shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Binomial),
        (2u32..9).prop_map(Shape::KAry),
        (2u32..9).prop_map(Shape::KNomial),
        Just(Shape::Flat),
    ]
}

/// A destination: a few random ranges plus a few single ids, some beyond `n`.
fn arb_dest(n: u32) -> impl Strategy<Value = IdSet> {
    let hi = n.saturating_add(5);
    (
        proptest::collection::vec((0..hi, 0u32..50_000), 0..4),
        proptest::collection::vec(0..hi, 0..20),
        any::<bool>(),
    )
        .prop_map(move |(ranges, ids, all)| {
            if all {
                return IdSet::all(n);
            }
            let mut s: IdSet = ids.into_iter().collect();
            for (a, l) in ranges {
                s.insert_range(a..=a.saturating_add(l));
            }
            s
        })
}

fn check_route(t: &dyn Topology, node: NodeId, dest: &IdSet) -> Result<(), TestCaseError> {
    let r = t.route(node, dest);
    let mut seen = IdSet::new();
    if r.local {
        seen.insert(node.server().unwrap());
    }
    for (child, share) in &r.shares {
        prop_assert_eq!(t.parent(*child), Some(node), "child {} of {}", child, node);
        prop_assert!(!share.is_empty());
        prop_assert!(share.is_subset(&t.subtree(*child)));
        prop_assert!(share.is_disjoint(&seen), "shares overlap at {}", child);
        seen.union_with(share);
    }
    prop_assert_eq!(&seen, &(dest & &t.subtree(node)));
    prop_assert_eq!(t.reachable(node, dest), seen);
    // Into a vector that held another route: the same.
    let mut shares = vec![(NodeId::Master, IdSet::single(7)); 3];
    prop_assert_eq!(t.route_into(node, dest, &mut shares), r.local);
    prop_assert_eq!(&shares, &r.shares);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn routing_partitions_dest(
        shape in arb_shape(),
        (n, dest, pick) in (1u32..=1_000_000).prop_flat_map(|n| (Just(n), arb_dest(n), any::<u32>())),
    ) {
        let t = shape.build(n);
        // The root, a random server, and that server's parent.
        let s = NodeId::Server(pick % n);
        for node in [NodeId::Master, s, t.parent(s).unwrap()] {
            check_route(&*t, node, &dest)?;
        }
    }

    #[test]
    fn subtree_is_self_plus_children(shape in arb_shape(), n in 1u32..=1_000_000, pick in any::<u32>()) {
        let t = shape.build(n);
        let node = NodeId::Server(pick % n);
        let mut expect = IdSet::single(pick % n);
        for c in t.children(node) {
            let sub = t.subtree(c);
            prop_assert!(sub.is_disjoint(&expect));
            expect.union_with(&sub);
        }
        prop_assert_eq!(t.subtree(node), expect);
        prop_assert_eq!(t.subtree(NodeId::Master), IdSet::all(n));
    }

    /// The shortcuts routing takes say what the lists say: a shape's one-range subtree is
    /// its only range (and every binomial, k-nomial and flat subtree has one), and walking
    /// the children visits `child_positions` in order, stopping where it is told to.
    #[test]
    fn subtree_range_and_for_each_child_agree_with_the_lists(
        shape in arb_shape(),
        n in 1u32..=1_000_000,
        pick in any::<u32>(),
        stop in 0usize..4,
    ) {
        let t = shape.build(n);
        for p in [0, u64::from(pick % n) + 1] {
            let ranges = t.subtree_positions(p);
            match t.subtree_range(p) {
                Some(r) => prop_assert_eq!(vec![r], ranges),
                None => prop_assert!(matches!(shape, Shape::KAry(_))),
            }
            let all = t.child_positions(p);
            let mut seen = Vec::new();
            t.for_each_child(p, &mut |c| {
                seen.push(c);
                seen.len() <= stop
            });
            prop_assert_eq!(&seen[..], &all[..all.len().min(stop + 1)]);
        }
    }
}

#[test]
fn every_shape_is_a_spanning_tree() {
    for shape in shapes() {
        for n in [1u32, 2, 3, 7, 8, 9, 63, 64, 65, 100] {
            let t = shape.build(n);
            let g = to_graph(&*t);
            assert_eq!(g.edge_count(), n as usize, "{shape} n={n}");
            assert!(!is_cyclic_directed(&g));
            for s in 0..n {
                let node = NodeId::Server(s);
                let parent = t.parent(node).unwrap();
                assert!(t.children(parent).contains(&node), "{shape} n={n} s={s}");
                assert!(t.subtree(parent).is_superset_of(&t.subtree(node)));
                for dest in [IdSet::all(n), IdSet::single(s), IdSet::range(0..=s)] {
                    check_route(&*t, node, &dest).unwrap();
                }
            }
            check_route(&*t, NodeId::Master, &IdSet::all(n)).unwrap();
        }
    }
}

trait Superset {
    fn is_superset_of(&self, other: &IdSet) -> bool;
}
impl Superset for IdSet {
    fn is_superset_of(&self, other: &IdSet) -> bool {
        other.is_subset(self)
    }
}

#[test]
fn binomial_matches_the_seed() {
    let t = Shape::Binomial.build(15);
    // Master (position 0) has children at positions 8, 4, 2, 1 = servers 7, 3, 1, 0.
    let kids: Vec<_> = t.children(NodeId::Master);
    assert_eq!(
        kids,
        [7, 3, 1, 0].map(NodeId::Server).to_vec(),
        "largest subtree first"
    );
    assert_eq!(t.subtree(NodeId::Server(7)).to_string(), "[7-14]");
    assert_eq!(t.subtree(NodeId::Server(3)).to_string(), "[3-6]");
    assert_eq!(t.depth(NodeId::Server(14)), 4);
    let r = t.route(NodeId::Master, &"[2,5-9]".parse().unwrap());
    let shares: Vec<String> = r.shares.iter().map(|(c, s)| format!("{c}:{s}")).collect();
    assert_eq!(shares, ["7:[7-9]", "3:[5-6]", "1:[2]"]);
}

#[test]
fn kary_subtree_is_per_level_ranges() {
    let t = Shape::KAry(2).build(14);
    // Position 1 (server 0) has descendants 3,4 then 7..10 then 15 (absent).
    assert_eq!(t.subtree(NodeId::Server(0)).to_string(), "[0,2-3,6-9]");
}

#[test]
fn shape_names_round_trip() {
    for s in ["binomial", "kary:4", "knomial:3", "flat"] {
        assert_eq!(s.parse::<Shape>().unwrap().to_string(), s);
    }
    for bad in [
        "",
        "kary",
        "kary:1",
        "knomial:x",
        "tree",
        "binomial:2",
        "file:",
        "tree:",
    ] {
        assert!(bad.parse::<Shape>().is_err(), "{bad}");
    }
    assert!(to_dot(&*Shape::Binomial.build(3)).contains("master"));
}

/// A random tree over `n` servers with arbitrary numbering: servers join in a random order,
/// each under the master or a server that joined before it.
fn arb_explicit() -> impl Strategy<Value = Explicit> {
    (1usize..200)
        .prop_flat_map(|n| {
            (
                Just(n).prop_shuffle_indices(),
                proptest::collection::vec(any::<u32>(), n),
            )
        })
        .prop_map(|(order, picks)| {
            let mut parents = vec![0u64; order.len()];
            for (i, &s) in order.iter().enumerate() {
                let pick = picks[i] as usize % (i + 1);
                parents[s] = if pick == i { 0 } else { order[pick] as u64 + 1 };
            }
            Explicit::from_parents(parents, "test").unwrap()
        })
}

trait ShuffleIndices {
    fn prop_shuffle_indices(self) -> BoxedStrategy<Vec<usize>>;
}
impl ShuffleIndices for Just<usize> {
    fn prop_shuffle_indices(self) -> BoxedStrategy<Vec<usize>> {
        Just((0..self.0).collect::<Vec<_>>()).prop_shuffle().boxed()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn explicit_trees_span_route_and_round_trip(tree in arb_explicit(), pick in any::<u32>()) {
        let shape = Shape::Explicit(Arc::new(tree));
        let n = shape.servers().unwrap();
        let t = shape.build(n);
        let g = to_graph(&*t);
        prop_assert_eq!(g.edge_count(), n as usize);
        prop_assert!(!is_cyclic_directed(&g));
        prop_assert_eq!(t.subtree(NodeId::Master), IdSet::all(n));
        let s = NodeId::Server(pick % n);
        let parent = t.parent(s).unwrap();
        prop_assert!(t.children(parent).contains(&s));
        let mut expect = IdSet::single(pick % n);
        for c in t.children(s) {
            prop_assert!(t.subtree(c).is_disjoint(&expect));
            expect.union_with(&t.subtree(c));
        }
        prop_assert_eq!(t.subtree(s), expect);
        for dest in [IdSet::all(n), IdSet::single(pick % n), IdSet::range(0..=(pick % n))] {
            for node in [NodeId::Master, s, parent] {
                check_route(&*t, node, &dest)?;
            }
        }
        // The name the daemons receive rebuilds the same tree.
        let back: Shape = shape.to_string().parse().unwrap();
        prop_assert_eq!(&back, &shape);
        prop_assert_eq!(back.build(n).name(), t.name());
    }
}

#[test]
fn topology_file_in_sdm_form() {
    let text =
        "# two interior nodes under the master\nmaster: 0 8\n0: 1-7\n8: [9-11,13] 12 14-15\n";
    let t = Explicit::parse_file(text, "t.txt").unwrap();
    assert_eq!(t.to_string(), "tree:m,0*7,m,8*7");
    assert!(t.hosts().is_none());
    let shape = Shape::Explicit(Arc::new(t));
    let topo = shape.build(16);
    assert_eq!(
        topo.children(NodeId::Master),
        [0, 8].map(NodeId::Server).to_vec()
    );
    assert_eq!(topo.subtree(NodeId::Server(8)).to_string(), "[8-15]");
    assert_eq!(topo.depth(NodeId::Server(13)), 2);
}

#[test]
fn topology_file_in_mrnet_form_places_servers_on_hosts() {
    let text = "fe:0 => h1:0 h2:0 ;\nh1:0 => h1:1\n  h1:2 ;   # comment\nh2:0 => h2:1 h2:2;\n";
    let t = Explicit::parse_file(text, "t.top").unwrap();
    assert_eq!(t.to_string(), "tree:m*2,0*2,1*2");
    assert_eq!(
        t.hosts().unwrap(),
        ["h1", "h2", "h1", "h1", "h2", "h2"].map(String::from)
    );
    // Hosts are placement, not shape: the name does not carry them.
    let shape = Shape::Explicit(Arc::new(t));
    assert_eq!(shape.to_string().parse::<Shape>().unwrap(), shape);
}

#[test]
fn bad_topology_files_name_the_line_and_the_server() {
    let err = |text: &str| Explicit::parse_file(text, "t").unwrap_err().to_string();
    assert_eq!(
        err("master: 0 1\n0: 2 x\n"),
        "topology file t, line 2: \"x\" is not a server id or range (A-B)"
    );
    assert_eq!(
        err("master: 0 1\n0: 1\n"),
        "topology file t, line 2: server 1 already has a parent (line 1)"
    );
    assert_eq!(
        err("master: 0 2\n"),
        "topology t: server 1 has no parent: every server 0-2 must be listed as a child"
    );
    assert_eq!(
        err("master: 0\n1: 2\n2: 1\n"),
        "topology t: server(s) 1,2 not connected to the master (a cycle of parents)"
    );
    assert_eq!(
        err("node7: 1\n"),
        "topology file t, line 1: \"node7\" is not `master` or a server id (expected PARENT: CHILD...)"
    );
    assert_eq!(
        err("fe:0 => a:0 ;\nb:0 => c:0 ;\n"),
        "topology file t, line 2: b:0 has children but is not the root nor anyone's child"
    );
    assert_eq!(
        err("fe:0 => a:0 a:0 ;\n"),
        "topology file t, line 1: a:0 already has a parent"
    );
    assert_eq!(
        err("fe:0 => a:0\n"),
        "topology file t, line 1: the statement of fe:0 has no `;`"
    );
    assert_eq!(
        err("fe => a:0 ;"),
        "topology file t, line 1: \"fe\" is not HOST:INSTANCE"
    );
    let e = "file:/nonexistent/t".parse::<Shape>().unwrap_err();
    assert!(matches!(e, ShapeError::Read { .. }), "{e}");
    // The system's error is the source, not only text in the message.
    let io = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<Arc<std::io::Error>>());
    assert_eq!(
        io.map(|e| e.kind()),
        Some(std::io::ErrorKind::NotFound),
        "{e:?}"
    );
    assert!("tree:m,5".parse::<Shape>().is_err());
    assert!("tree:m,q".parse::<Shape>().is_err());
    // A count past the bound is refused by name, before anything is allocated for it (the
    // fuzzer found `tree:m*888888888` taking gigabytes).
    let e = "tree:m*888888888".parse::<Shape>().unwrap_err();
    assert!(
        matches!(&e, ShapeError::Tree { message, .. } if message.contains("m*888888888")),
        "{e}"
    );
    assert!("tree:m*4194305".parse::<Shape>().is_err());
}
