//! sdm-topology: the shape of the tree over the master and servers `0..N`, and routing of
//! destination id-sets to children (the seed's `sdm_route_*`). No I/O.
//!
//! # Quick start
//!
//! ```
//! use sdm_proto::IdSet;
//! use sdm_topology::{NodeId, Shape};
//!
//! // The default tree of 16 servers under the master.
//! let tree = "binomial".parse::<Shape>().unwrap().build(16);
//! assert_eq!(tree.size(), 16);
//! let below_master = tree.children(NodeId::Master);
//! assert!(!below_master.is_empty());
//!
//! // Routing a command: which child subtrees get which share of the destination.
//! let route = tree.route(NodeId::Master, &"[0-15]".parse::<IdSet>().unwrap());
//! let mut covered = IdSet::new();
//! for (_child, share) in &route.shares {
//!     assert!(covered.is_disjoint(share)); // every id goes down exactly one link
//!     covered.union_with(share);
//! }
//! assert_eq!(covered, IdSet::all(16));
//! ```
//!
//! Every shape numbers its nodes by *position*: position 0 is the master (the root) and
//! position `s + 1` is server `s`. Shapes are defined on positions; the [`Topology`] trait's
//! provided methods translate to [`NodeId`]s and server [`IdSet`]s.
//!
//! | shape | children of position `p` | subtree of `p` |
//! | --- | --- | --- |
//! | binomial (default) | `p + 2^i` for `2^i` below `p`'s lowest set bit | one range `[p, p + lowbit(p))` |
//! | k-nomial | `p + j·k^i`, `j < k`, below `p`'s lowest non-zero base-k digit | one range |
//! | k-ary | `k·p + 1 ..= k·p + k` | one range per level |
//! | flat | the master's children are all servers | itself |

mod dot;
mod explicit;
mod placement;
mod shapes;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

pub use dot::{to_dot, to_graph};
pub use explicit::Explicit;
pub use placement::{Placement, PlacementError, Tree};
use sdm_proto::IdSet;
pub use shapes::{Binomial, Flat, KAry, KNomial};

/// A node of the tree: the master or a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeId {
    /// The root, connected to the front-end.
    Master,
    /// Server `0..N`.
    Server(u32),
}

impl NodeId {
    /// The position of this node (master 0, server `s` at `s + 1`).
    pub fn position(self) -> u64 {
        match self {
            NodeId::Master => 0,
            NodeId::Server(s) => u64::from(s) + 1,
        }
    }

    /// The node at position `p`.
    pub fn from_position(p: u64) -> Self {
        if p == 0 {
            NodeId::Master
        } else {
            NodeId::Server((p - 1) as u32)
        }
    }

    /// The server id, if this is a server.
    pub fn server(self) -> Option<u32> {
        match self {
            NodeId::Master => None,
            NodeId::Server(s) => Some(s),
        }
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeId::Master => f.write_str("master"),
            NodeId::Server(s) => write!(f, "{s}"),
        }
    }
}

/// The result of routing a destination at one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// This node is a server in the destination: deliver locally.
    pub local: bool,
    /// Each child whose subtree meets the destination, with the destination narrowed to it.
    pub shares: Vec<(NodeId, IdSet)>,
}

/// A tree shape over the master and `size()` servers.
pub trait Topology: Send + Sync + fmt::Debug {
    /// Number of servers `N`.
    fn size(&self) -> u32;

    /// The shape's name in the form [`Shape`] parses (`binomial`, `kary:4`, …).
    fn name(&self) -> String;

    /// Parent of position `p` (`None` for the root).
    fn parent_position(&self, p: u64) -> Option<u64>;

    /// Children of position `p`, largest subtree first.
    fn child_positions(&self, p: u64) -> Vec<u64>;

    /// The positions of `p`'s subtree (including `p`) as disjoint half-open ranges.
    fn subtree_positions(&self, p: u64) -> Vec<(u64, u64)>;

    /// `p`'s subtree as one half-open range of positions, where the shape makes it one
    /// (binomial, k-nomial, flat): routing then narrows a destination without a list.
    /// `None` (the default) means: ask [`Topology::subtree_positions`].
    fn subtree_range(&self, p: u64) -> Option<(u64, u64)> {
        let _ = p;
        None
    }

    /// Calls `each` with the children of position `p` in [`Topology::child_positions`]'
    /// order until it returns `false`. Shapes that can walk their children without a list
    /// override it: routing a command calls it at every hop.
    fn for_each_child(&self, p: u64, each: &mut dyn FnMut(u64) -> bool) {
        for c in self.child_positions(p) {
            if !each(c) {
                break;
            }
        }
    }

    /// Number of positions (`N + 1`).
    fn positions(&self) -> u64 {
        u64::from(self.size()) + 1
    }

    /// The parent of `node` (`sdm_route_get_parent`); `None` for the master.
    fn parent(&self, node: NodeId) -> Option<NodeId> {
        self.parent_position(node.position())
            .map(NodeId::from_position)
    }

    /// The children of `node`, largest subtree first.
    fn children(&self, node: NodeId) -> Vec<NodeId> {
        self.child_positions(node.position())
            .into_iter()
            .map(NodeId::from_position)
            .collect()
    }

    /// The servers in `node`'s subtree, including `node` itself if it is a server.
    fn subtree(&self, node: NodeId) -> IdSet {
        let mut set = IdSet::new();
        for (a, b) in self.subtree_positions(node.position()) {
            let a = a.max(1);
            if a < b {
                set.insert_range((a - 1) as u32..=(b - 2) as u32);
            }
        }
        set
    }

    /// The ids of `dest` that `node` can reach: `dest ∩ subtree(node)`
    /// (`sdm_route_reachable`).
    fn reachable(&self, node: NodeId, dest: &IdSet) -> IdSet {
        narrow(self, node.position(), dest)
    }

    /// Splits `dest` at `node` (`sdm_route_get_route`): whether to deliver locally, and each
    /// child's share, narrowed to its subtree. Shares are disjoint, and together with the
    /// local part they equal `dest ∩ subtree(node)`.
    fn route(&self, node: NodeId, dest: &IdSet) -> Route {
        let mut shares = Vec::new();
        let local = self.route_into(node, dest, &mut shares);
        Route { local, shares }
    }

    /// [`Topology::route`] into `shares` (cleared first, its room reused: a node routing
    /// command after command allocates no vector): whether to deliver locally. Nodes route
    /// with this one: a shape with a routing of its own overrides this, not `route`.
    fn route_into(&self, node: NodeId, dest: &IdSet, shares: &mut Vec<(NodeId, IdSet)>) -> bool {
        shares.clear();
        let local = node.server().is_some_and(|s| dest.contains(s));
        let mine = self.reachable(node, dest);
        let mut left = mine.len() - u64::from(local);
        if left == 0 {
            return local;
        }
        self.for_each_child(node.position(), &mut |c| {
            let share = narrow(self, c, &mine);
            if !share.is_empty() {
                left -= share.len();
                shares.push((NodeId::from_position(c), share));
            }
            left > 0
        });
        local
    }

    /// Depth of `node` (the master is 0).
    fn depth(&self, node: NodeId) -> u32 {
        let mut p = node.position();
        let mut d = 0;
        while let Some(q) = self.parent_position(p) {
            p = q;
            d += 1;
        }
        d
    }
}

/// `dest ∩ subtree(p)`, range by range.
fn narrow<T: Topology + ?Sized>(t: &T, p: u64, dest: &IdSet) -> IdSet {
    if let Some((a, b)) = t.subtree_range(p) {
        let a = a.max(1);
        return if a < b {
            dest.intersect_range((a - 1) as u32..=(b - 2) as u32)
        } else {
            IdSet::new()
        };
    }
    let mut out = IdSet::new();
    for (a, b) in t.subtree_positions(p) {
        let a = a.max(1);
        if a < b {
            let part = dest.intersect_range((a - 1) as u32..=(b - 2) as u32);
            if out.is_empty() {
                out = part;
            } else {
                out.union_with(&part);
            }
        }
    }
    out
}

/// A tree shape by name: `binomial`, `kary:K`, `knomial:K`, `flat`, or an explicit tree
/// (`file:PATH` read from a topology file, carried to the daemons as `tree:PARENTS`; see
/// [`Explicit`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Shape {
    /// Binomial tree (the default).
    #[default]
    Binomial,
    /// Each node has up to `k` children.
    KAry(u32),
    /// Generalized binomial tree in base `k`.
    KNomial(u32),
    /// Every server is a child of the master.
    Flat,
    /// A tree given parent by parent (a topology file); its size is its own.
    Explicit(Arc<Explicit>),
}

/// A shape name that could not be parsed, or a topology file that does not describe a tree.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// Not a shape's name.
    #[error(
        "unknown tree shape {0:?}: expected binomial, kary:K, knomial:K (K >= 2), flat or \
         file:PATH"
    )]
    Unknown(String),
    /// The topology file could not be read.
    #[error("topology file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why it could not be read (shared, so the error stays `Clone`).
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A line of the topology file is not in either form.
    #[error("topology file {path}, line {line}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// The line (1-based; 0 for the file as a whole).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The nodes given do not form one tree under the master.
    #[error("topology {origin}: {message}")]
    Tree {
        /// The file or name the tree came from.
        origin: String,
        /// What is wrong (which server).
        message: String,
    },
}

/// Equal when the same variant says the same; read failures compare path and I/O kind.
impl PartialEq for ShapeError {
    fn eq(&self, other: &Self) -> bool {
        use ShapeError::*;
        match (self, other) {
            (Unknown(a), Unknown(b)) => a == b,
            (Read { path: p, source: e }, Read { path: q, source: f }) => {
                p == q && e.kind() == f.kind()
            }
            (
                Syntax {
                    path,
                    line,
                    message,
                },
                Syntax {
                    path: p,
                    line: l,
                    message: m,
                },
            ) => (path, line, message) == (p, l, m),
            (
                Tree { origin, message },
                Tree {
                    origin: o,
                    message: m,
                },
            ) => (origin, message) == (o, m),
            _ => false,
        }
    }
}

impl Eq for ShapeError {}

impl Shape {
    /// The tree of this shape over `servers` servers (an explicit tree has the size it was
    /// given: see [`Shape::servers`]).
    pub fn build(&self, servers: u32) -> Box<dyn Topology> {
        match self {
            Shape::Binomial => Box::new(Binomial::new(servers)),
            Shape::KAry(k) => Box::new(KAry::new(servers, *k)),
            Shape::KNomial(k) => Box::new(KNomial::new(servers, *k)),
            Shape::Flat => Box::new(Flat::new(servers)),
            Shape::Explicit(t) => Box::new(Arc::clone(t)),
        }
    }

    /// The number of servers the shape fixes (an explicit tree's), if any.
    pub fn servers(&self) -> Option<u32> {
        match self {
            Shape::Explicit(t) => Some(t.servers()),
            _ => None,
        }
    }

    /// Reads a topology file (see [`Explicit`] for its two forms).
    pub fn from_file(path: &std::path::Path) -> Result<Self, ShapeError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ShapeError::Read {
            path: name.clone(),
            source: Arc::new(e),
        })?;
        Ok(Shape::Explicit(Arc::new(Explicit::parse_file(
            &text, &name,
        )?)))
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Binomial => f.write_str("binomial"),
            Shape::KAry(k) => write!(f, "kary:{k}"),
            Shape::KNomial(k) => write!(f, "knomial:{k}"),
            Shape::Flat => f.write_str("flat"),
            Shape::Explicit(t) => t.fmt(f),
        }
    }
}

impl FromStr for Shape {
    type Err = ShapeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ShapeError::Unknown(s.to_owned());
        let k = |v: &str| v.parse::<u32>().ok().filter(|&k| k >= 2).ok_or_else(err);
        match s.split_once(':') {
            None if s == "binomial" => Ok(Shape::Binomial),
            None if s == "flat" => Ok(Shape::Flat),
            Some(("kary", v)) => Ok(Shape::KAry(k(v)?)),
            Some(("knomial", v)) => Ok(Shape::KNomial(k(v)?)),
            Some(("file", path)) if !path.is_empty() => Shape::from_file(path.as_ref()),
            Some(("tree", list)) => Ok(Shape::Explicit(Arc::new(Explicit::decode(list)?))),
            _ => Err(err()),
        }
    }
}

#[cfg(test)]
mod tests;
