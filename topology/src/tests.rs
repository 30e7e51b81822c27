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
    for bad in ["", "kary", "kary:1", "knomial:x", "tree", "binomial:2"] {
        assert!(bad.parse::<Shape>().is_err(), "{bad}");
    }
    assert!(to_dot(&*Shape::Binomial.build(3)).contains("master"));
}
