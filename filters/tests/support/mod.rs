//! Shared test harness: folds leaf payloads bottom-up through a real tree shape, one fresh
//! filter per node, and finishes at the front-end.

use sdm_filters::{Group, IdSet, Registry};
use sdm_topology::{NodeId, Shape, Topology};

/// What `n` sends upward: its own leaf and its children's groups, folded and flushed once.
fn node(reg: &Registry, spec: &str, t: &dyn Topology, n: NodeId, leaves: &[Vec<u8>]) -> Vec<Group> {
    let mut f = reg.create(spec).unwrap();
    if let Some(s) = n.server() {
        f.fold(&leaves[s as usize], &IdSet::single(s)).unwrap();
    }
    for c in t.children(n) {
        for g in node(reg, spec, t, c, leaves) {
            f.fold(&g.payload, &g.sources).unwrap();
        }
    }
    f.flush().unwrap()
}

/// Folds `leaves` (server `i` replied `leaves[i]`) through `shape`; `finish` at the front-end
/// when `finish` is set, else `flush`.
pub(crate) fn through_tree(
    reg: &Registry,
    spec: &str,
    shape: Shape,
    leaves: &[Vec<u8>],
    finish: bool,
) -> Vec<Group> {
    let topo = shape.build(leaves.len() as u32);
    let mut fe = reg.create(spec).unwrap();
    for g in node(reg, spec, &*topo, NodeId::Master, leaves) {
        fe.fold(&g.payload, &g.sources).unwrap();
    }
    if finish {
        fe.finish().unwrap()
    } else {
        fe.flush().unwrap()
    }
}
