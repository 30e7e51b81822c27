//! Placement: which ranks each server serves. The ids commands are addressed to are the
//! job's ranks; the tree is over servers, and each server owns a set of ranks (those on its
//! host, by default). [`Tree`] joins a shape and a placement and routes rank sets.
//!
//! | placement | server `s` owns | subtree of a range of servers |
//! | --- | --- | --- |
//! | identity (the seed's layout) | rank `s` | the same range |
//! | blocks of `k` over `r` ranks | `[s·k, min((s+1)·k, r))` | one range of ranks |
//! | sets (by host, cyclic, any) | its own set | the union of its servers' sets |

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use sdm_proto::IdSet;

/// Which ranks each server serves.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Placement {
    /// Server `s` serves rank `s` alone (`--ranks-per-server 1`, the seed's layout).
    #[default]
    Identity,
    /// Server `s` serves ranks `[s·per, min((s+1)·per, ranks))`.
    Blocks {
        /// Ranks per server (at least 1).
        per: u32,
        /// Ranks in the job.
        ranks: u32,
    },
    /// Server `s` serves `sets[s]` (disjoint sets: by host, cyclic, any).
    Sets(Arc<Vec<IdSet>>),
}

/// A placement that is not one: the text form is wrong, or sets overlap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlacementError {
    /// The text form could not be read.
    #[error("placement {0:?}: expected identity, blocks:PER:RANKS or sets:[..];[..]")]
    Syntax(String),
    /// A rank is given to two servers.
    #[error("placement: rank {rank} is given to servers {first} and {second}")]
    Overlap {
        /// The rank.
        rank: u32,
        /// The first server that has it.
        first: u32,
        /// The second.
        second: u32,
    },
}

impl Placement {
    /// `ranks` ranks in blocks of `per` (identity when `per` is 1).
    pub fn blocks(per: u32, ranks: u32) -> Self {
        if per <= 1 {
            Placement::Identity
        } else {
            Placement::Blocks { per, ranks }
        }
    }

    /// One server per entry of `sets`, each serving its set; the sets must be disjoint.
    pub fn sets(sets: Vec<IdSet>) -> Result<Self, PlacementError> {
        let mut seen = IdSet::new();
        for (s, set) in sets.iter().enumerate() {
            if !seen.is_disjoint(set) {
                let rank = (&seen & set).first().expect("not disjoint");
                let first = sets.iter().position(|o| o.contains(rank)).unwrap_or(0);
                return Err(PlacementError::Overlap {
                    rank,
                    first: first as u32,
                    second: s as u32,
                });
            }
            seen.union_with(set);
        }
        Ok(Placement::Sets(Arc::new(sets)))
    }

    /// Servers needed for `ranks` ranks (blocks), or the sets' count.
    pub fn servers_for(&self, ranks: u32) -> u32 {
        match self {
            Placement::Identity => ranks,
            Placement::Blocks { per, ranks } => ranks.div_ceil(*per),
            Placement::Sets(s) => s.len() as u32,
        }
    }

    /// The ranks server `s` serves.
    pub fn ranks_of(&self, s: u32) -> IdSet {
        self.ranks_of_servers(s, s)
    }

    /// The ranks served by servers `a..=b`, where that is one range (identity, blocks);
    /// `None` for sets.
    fn range_of_servers(&self, a: u32, b: u32) -> Option<(u32, u32)> {
        match self {
            Placement::Identity => Some((a, b)),
            Placement::Blocks { per, ranks } => {
                let lo = u64::from(a) * u64::from(*per);
                let hi = ((u64::from(b) + 1) * u64::from(*per)).min(u64::from(*ranks));
                (lo < hi).then(|| (lo as u32, (hi - 1) as u32))
            }
            Placement::Sets(_) => None,
        }
    }

    /// The ranks served by servers `a..=b`.
    pub fn ranks_of_servers(&self, a: u32, b: u32) -> IdSet {
        match self {
            Placement::Sets(sets) => {
                let mut out = IdSet::new();
                for s in a..=b.min(sets.len().saturating_sub(1) as u32) {
                    if let Some(set) = sets.get(s as usize) {
                        out.union_with(set);
                    }
                }
                out
            }
            _ => match self.range_of_servers(a, b) {
                Some((lo, hi)) => IdSet::range(lo..=hi),
                None => IdSet::new(),
            },
        }
    }

    /// The server serving `rank`, if any (a lookup table is made on the first call for sets;
    /// `index` keeps it).
    fn server_of(&self, rank: u32, index: &OnceLock<Vec<(u32, u32)>>) -> Option<u32> {
        match self {
            Placement::Identity => Some(rank),
            Placement::Blocks { per, ranks } => (rank < *ranks).then(|| rank / per),
            Placement::Sets(sets) => {
                let index = index.get_or_init(|| {
                    let mut v: Vec<(u32, u32)> = sets
                        .iter()
                        .enumerate()
                        .flat_map(|(s, set)| set.iter().map(move |r| (r, s as u32)))
                        .collect();
                    v.sort_unstable();
                    v
                });
                index
                    .binary_search_by_key(&rank, |&(r, _)| r)
                    .ok()
                    .map(|i| index[i].1)
            }
        }
    }

    /// Whether every server serves one rank, its own id.
    pub fn is_identity(&self) -> bool {
        matches!(self, Placement::Identity)
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Identity => f.write_str("identity"),
            Placement::Blocks { per, ranks } => write!(f, "blocks:{per}:{ranks}"),
            Placement::Sets(sets) => {
                f.write_str("sets:")?;
                for (i, s) in sets.iter().enumerate() {
                    if i > 0 {
                        f.write_str(";")?;
                    }
                    write!(f, "{s}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Placement {
    type Err = PlacementError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || PlacementError::Syntax(s.chars().take(80).collect());
        match s.split_once(':') {
            None if s == "identity" || s.is_empty() => Ok(Placement::Identity),
            Some(("blocks", v)) => {
                let (per, ranks) = v.split_once(':').ok_or_else(bad)?;
                let per: u32 = per.parse().ok().filter(|&p| p >= 1).ok_or_else(bad)?;
                let ranks: u32 = ranks.parse().map_err(|_| bad())?;
                Ok(Placement::blocks(per, ranks))
            }
            Some(("sets", "")) => Placement::sets(Vec::new()),
            Some(("sets", v)) => {
                let sets = v
                    .split(';')
                    .map(|t| t.parse::<IdSet>().map_err(|_| bad()))
                    .collect::<Result<Vec<_>, _>>()?;
                Placement::sets(sets)
            }
            _ => Err(bad()),
        }
    }
}

/// A tree shape over servers with the ranks each serves: routes rank sets. Cheap to clone
/// (one pointer, shared by every node of a simulated tree).
#[derive(Debug, Clone)]
pub struct Tree(Arc<TreeInner>);

#[derive(Debug)]
struct TreeInner {
    shape: Arc<dyn crate::Topology>,
    placement: Placement,
    /// Sets placement: each position's subtree ranks, made on first use.
    subtrees: OnceLock<Vec<IdSet>>,
    /// Sets placement: (rank, server) sorted by rank, made on first use.
    owners: OnceLock<Vec<(u32, u32)>>,
}

impl Tree {
    /// `shape`'s servers serving ranks as `placement` says.
    pub fn new(shape: Arc<dyn crate::Topology>, placement: Placement) -> Self {
        Self(Arc::new(TreeInner {
            shape,
            placement,
            subtrees: OnceLock::new(),
            owners: OnceLock::new(),
        }))
    }

    /// `shape` with one rank per server (the seed's layout).
    pub fn identity(shape: Arc<dyn crate::Topology>) -> Self {
        Self::new(shape, Placement::Identity)
    }

    /// The shape over the servers.
    pub fn shape(&self) -> &Arc<dyn crate::Topology> {
        &self.0.shape
    }

    /// Which ranks each server serves.
    pub fn placement(&self) -> &Placement {
        &self.0.placement
    }

    /// Number of servers.
    pub fn servers(&self) -> u32 {
        self.0.shape.size()
    }

    /// Every rank the tree's servers serve.
    pub fn all_ranks(&self) -> IdSet {
        self.subtree(crate::NodeId::Master)
    }

    /// The ranks `node` itself serves (none at the master).
    pub fn local(&self, node: crate::NodeId) -> IdSet {
        match node.server() {
            Some(s) if s < self.servers() => self.0.placement.ranks_of(s),
            _ => IdSet::new(),
        }
    }

    /// Whether `node` serves `rank`.
    pub fn serves(&self, node: crate::NodeId, rank: u32) -> bool {
        match (&self.0.placement, node.server()) {
            (Placement::Identity, Some(s)) => s == rank,
            (_, Some(_)) => self.server_of(rank) == node.server(),
            (_, None) => false,
        }
    }

    /// How many ranks `node` serves.
    pub fn local_count(&self, node: crate::NodeId) -> u64 {
        match (&self.0.placement, node.server()) {
            (Placement::Identity, Some(s)) => u64::from(s < self.servers()),
            (_, Some(_)) => self.local(node).len(),
            (_, None) => 0,
        }
    }

    /// The server serving `rank`, if one does.
    pub fn server_of(&self, rank: u32) -> Option<u32> {
        self.0
            .placement
            .server_of(rank, &self.0.owners)
            .filter(|&s| s < self.servers())
    }

    /// The ranks served in `node`'s subtree (its own included).
    pub fn subtree(&self, node: crate::NodeId) -> IdSet {
        match &self.0.placement {
            Placement::Identity => self.0.shape.subtree(node),
            Placement::Sets(_) => self.set_subtree(node.position()).clone(),
            Placement::Blocks { .. } => {
                let mut out = IdSet::new();
                for (a, b) in self.0.shape.subtree_positions(node.position()) {
                    out.union_with(&self.ranks_of_positions(a, b));
                }
                out
            }
        }
    }

    /// Sets placement: the ranks of position `p`'s subtree, all positions' made once.
    fn set_subtree(&self, p: u64) -> &IdSet {
        let all = self.0.subtrees.get_or_init(|| {
            let n = self.0.shape.positions();
            (0..n)
                .map(|p| {
                    let mut out = IdSet::new();
                    for (a, b) in self.0.shape.subtree_positions(p) {
                        out.union_with(&self.ranks_of_positions(a, b));
                    }
                    out
                })
                .collect()
        });
        &all[p as usize]
    }

    /// The ranks of the servers at positions `[a, b)`.
    fn ranks_of_positions(&self, a: u64, b: u64) -> IdSet {
        let a = a.max(1);
        if a >= b {
            return IdSet::new();
        }
        self.0
            .placement
            .ranks_of_servers((a - 1) as u32, (b - 2) as u32)
    }

    /// `dest ∩ ranks of p's subtree`.
    fn narrow(&self, p: u64, dest: &IdSet) -> IdSet {
        match &self.0.placement {
            Placement::Sets(_) => dest & self.set_subtree(p),
            _ => {
                let ranges = match self.0.shape.subtree_range(p) {
                    Some(r) => vec![r],
                    None => self.0.shape.subtree_positions(p),
                };
                let mut out = IdSet::new();
                for (a, b) in ranges {
                    let a = a.max(1);
                    if a >= b {
                        continue;
                    }
                    if let Some((lo, hi)) = self
                        .0
                        .placement
                        .range_of_servers((a - 1) as u32, (b - 2) as u32)
                    {
                        let part = dest.intersect_range(lo..=hi);
                        if out.is_empty() {
                            out = part;
                        } else {
                            out.union_with(&part);
                        }
                    }
                }
                out
            }
        }
    }

    /// Splits `dest` at `node` into `shares` (cleared first): each child whose subtree's
    /// ranks meet it, with `dest` narrowed to them. Returns the ranks to deliver at `node`
    /// itself. Shares and the local part are disjoint and together are `dest ∩
    /// subtree(node)`.
    pub fn route_into(
        &self,
        node: crate::NodeId,
        dest: &IdSet,
        shares: &mut Vec<(crate::NodeId, IdSet)>,
    ) -> IdSet {
        if self.0.placement.is_identity() {
            let local = self.0.shape.route_into(node, dest, shares);
            return match (local, node.server()) {
                (true, Some(s)) => IdSet::single(s),
                _ => IdSet::new(),
            };
        }
        shares.clear();
        let p = node.position();
        let mine = self.narrow(p, dest);
        let local = match node.server() {
            Some(_) => &mine & &self.local(node),
            None => IdSet::new(),
        };
        let mut left = mine.len() - local.len();
        if left == 0 {
            return local;
        }
        self.0.shape.for_each_child(p, &mut |c| {
            let share = self.narrow(c, &mine);
            if !share.is_empty() {
                left -= share.len();
                shares.push((crate::NodeId::from_position(c), share));
            }
            left > 0
        });
        local
    }

    /// [`Tree::route_into`] into a new vector.
    pub fn route(&self, node: crate::NodeId, dest: &IdSet) -> (IdSet, Vec<(crate::NodeId, IdSet)>) {
        let mut shares = Vec::new();
        let local = self.route_into(node, dest, &mut shares);
        (local, shares)
    }
}

impl From<Arc<dyn crate::Topology>> for Tree {
    /// The shape with one rank per server.
    fn from(shape: Arc<dyn crate::Topology>) -> Self {
        Tree::identity(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NodeId, Shape};
    use proptest::prelude::*;

    fn tree(shape: &str, servers: u32, p: Placement) -> Tree {
        Tree::new(Arc::from(shape.parse::<Shape>().unwrap().build(servers)), p)
    }

    fn cyclic(ranks: u32, servers: u32) -> Placement {
        let mut sets = vec![IdSet::new(); servers as usize];
        for r in 0..ranks {
            sets[(r % servers) as usize].insert(r);
        }
        Placement::sets(sets).unwrap()
    }

    /// Routes `dest` from the master down the whole tree: each rank reaches exactly the
    /// server that serves it, once.
    fn deliveries(t: &Tree, dest: &IdSet) -> Vec<(u32, IdSet)> {
        let mut out = Vec::new();
        let mut stack = vec![(NodeId::Master, dest.clone())];
        while let Some((node, d)) = stack.pop() {
            let (local, shares) = t.route(node, &d);
            let mut union = local.clone();
            for (_, s) in &shares {
                assert!(union.is_disjoint(s), "shares overlap at {node}");
                union.union_with(s);
            }
            assert_eq!(union, &d & &t.subtree(node), "at {node}");
            if let Some(s) = node.server().filter(|_| !local.is_empty()) {
                out.push((s, local));
            }
            stack.extend(shares);
        }
        out
    }

    #[test]
    fn blocks_route_each_rank_to_its_server() {
        let t = tree("binomial", 4, Placement::blocks(16, 64));
        assert_eq!(t.all_ranks(), IdSet::all(64));
        let got = deliveries(&t, &IdSet::all(64));
        assert_eq!(got.len(), 4);
        for (s, local) in got {
            assert_eq!(local, IdSet::range(s * 16..=s * 16 + 15));
        }
        assert_eq!(t.server_of(37), Some(2));
        assert_eq!(t.server_of(64), None);
    }

    #[test]
    fn cyclic_placement_routes_any_set() {
        let t = tree("binomial", 4, cyclic(64, 4));
        let dest: IdSet = "[1-9,33]".parse().unwrap();
        let got = deliveries(&t, &dest);
        let mut all = IdSet::new();
        for (s, local) in got {
            assert!(local.iter().all(|r| r % 4 == s));
            all.union_with(&local);
        }
        assert_eq!(all, dest);
        assert_eq!(t.server_of(33), Some(1));
    }

    #[test]
    fn the_text_form_reads_back() {
        for p in [
            Placement::Identity,
            Placement::blocks(16, 100),
            cyclic(10, 3),
        ] {
            assert_eq!(p.to_string().parse::<Placement>().unwrap(), p);
        }
        assert!(matches!(
            "sets:[0-3];[3]".parse::<Placement>(),
            Err(PlacementError::Overlap { rank: 3, .. })
        ));
        assert!("blocks:0:4".parse::<Placement>().is_err());
    }

    proptest! {
        #[test]
        fn every_rank_goes_to_one_server_exactly(
            servers in 1u32..40,
            per in 1u32..9,
            shape in prop::sample::select(vec!["binomial", "kary:3", "knomial:4", "flat"]),
            cyclic_layout in any::<bool>(),
            dest_bits in prop::collection::vec(any::<bool>(), 0..400),
        ) {
            let ranks = servers * per;
            let p = if cyclic_layout { cyclic(ranks, servers) } else { Placement::blocks(per, ranks) };
            let t = tree(shape, servers, p);
            let mut dest = IdSet::new();
            for (i, b) in dest_bits.iter().enumerate() {
                if *b && (i as u32) < ranks + 5 { dest.insert(i as u32); }
            }
            let got = deliveries(&t, &dest);
            let mut all = IdSet::new();
            for (s, local) in got {
                prop_assert!(local.is_subset(&t.local(NodeId::Server(s))));
                prop_assert!(all.is_disjoint(&local));
                all.union_with(&local);
            }
            prop_assert_eq!(all, &dest & &IdSet::all(ranks));
        }
    }
}
