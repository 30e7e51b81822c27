//! Export of a tree to a petgraph graph and to Graphviz DOT (for `sdm topology --dot`,
//! and for checking in tests that a shape is a tree).

use petgraph::dot::{Config, Dot};
use petgraph::graph::{DiGraph, NodeIndex};

use crate::{NodeId, Topology};

/// The tree as a directed graph, edges from parent to child; node `i` is position `i`.
pub fn to_graph(t: &dyn Topology) -> DiGraph<NodeId, ()> {
    let m = t.positions() as usize;
    let mut g = DiGraph::with_capacity(m, m.saturating_sub(1));
    for p in 0..m {
        g.add_node(NodeId::from_position(p as u64));
    }
    for p in 0..m {
        for c in t.child_positions(p as u64) {
            g.add_edge(NodeIndex::new(p), NodeIndex::new(c as usize), ());
        }
    }
    g
}

/// The tree in Graphviz DOT, nodes labelled `master` and server ids.
pub fn to_dot(t: &dyn Topology) -> String {
    let g = to_graph(t).map(|_, n| n.to_string(), |_, _| "");
    format!("{}", Dot::with_config(&g, &[Config::EdgeNoLabel]))
}
