//! `stacktrace`: merges stack traces into a call-prefix tree (STAT's 2D trace-space view);
//! each node carries the ids of the ranks whose traces pass through it.
//!
//! Leaf input: UTF-8 text, one trace per line (a thread), frames outermost first separated by
//! `;` (the "folded" format: `main;solve;MPI_Wait`). Record: the tree in pre-order, each node
//! with its depth, `{"sdm":1,"type":"stacktrace","nodes":[{"d":0,"f":"main","ids":"[0-3]"},
//! {"d":1,"f":"solve","ids":"[0-3]"}]}`, siblings sorted by frame (flat, so deep stacks do not
//! hit a JSON nesting limit). `finish` renders the tree as indented text, `frame [ids]` per
//! line; use [`StackTree::decode`] on a flushed record for the tree itself.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sdm_proto::IdSet;
use serde::{Deserialize, Serialize};

use super::FoldedIds;
use crate::error::excerpt;
use crate::record::{self, ids_text};
use crate::{Filter, FilterError, Group};

/// A node of the prefix tree: the ranks through this frame and the frames it calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackNode {
    /// Ranks whose traces pass through this node.
    pub ids: IdSet,
    /// Callees, by frame name.
    pub children: BTreeMap<String, StackNode>,
}

/// A merged call-prefix tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackTree {
    /// Outermost frames (usually just `main` or `_start`).
    pub roots: BTreeMap<String, StackNode>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FlatNode {
    d: usize,
    f: String,
    #[serde(with = "ids_text")]
    ids: IdSet,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StackRecord {
    nodes: Vec<FlatNode>,
}

impl StackTree {
    /// Adds the path `frames` for `ids`.
    pub fn insert<'a>(&mut self, frames: impl IntoIterator<Item = &'a str>, ids: &IdSet) {
        let mut level = &mut self.roots;
        for f in frames {
            let n = level.entry(f.to_owned()).or_default();
            n.ids.union_with(ids);
            level = &mut n.children;
        }
    }

    /// Whether the tree has no nodes.
    pub fn is_empty(&self) -> bool {
        self.roots.is_empty()
    }

    fn flatten(&self) -> StackRecord {
        fn walk(level: &BTreeMap<String, StackNode>, d: usize, out: &mut Vec<FlatNode>) {
            for (f, n) in level {
                out.push(FlatNode {
                    d,
                    f: f.clone(),
                    ids: n.ids.clone(),
                });
                walk(&n.children, d + 1, out);
            }
        }
        let mut nodes = Vec::new();
        walk(&self.roots, 0, &mut nodes);
        StackRecord { nodes }
    }

    /// Merges a flattened tree in; `Err` names the first node whose depth skips a level.
    fn merge_flat(&mut self, nodes: Vec<FlatNode>) -> Result<(), usize> {
        // Check first, so a bad record leaves the tree untouched.
        let mut depth = 0;
        for (i, n) in nodes.iter().enumerate() {
            if n.d > depth {
                return Err(i);
            }
            depth = n.d + 1;
        }
        let mut path: Vec<String> = Vec::new();
        for n in nodes {
            path.truncate(n.d);
            path.push(n.f);
            let mut level = &mut self.roots;
            let (last, up) = path.split_last().expect("just pushed");
            for f in up {
                level = &mut level.entry(f.clone()).or_default().children;
            }
            level
                .entry(last.clone())
                .or_default()
                .ids
                .union_with(&n.ids);
        }
        Ok(())
    }

    /// Reads a flushed `stacktrace` record.
    pub fn decode(payload: &[u8]) -> Result<Self, FilterError> {
        let none = IdSet::new();
        let r: StackRecord = record::decode("stacktrace", "stacktrace", payload, &none)?;
        let mut t = StackTree::default();
        t.merge_flat(r.nodes).map_err(|i| {
            FilterError::bad_input(
                "stacktrace",
                &none,
                format_args!("skips a level at node {i}"),
            )
        })?;
        Ok(t)
    }

    /// Indented text, two spaces per level: `frame [ids]` per line.
    pub fn render(&self) -> String {
        fn walk(level: &BTreeMap<String, StackNode>, d: usize, out: &mut String) {
            for (f, n) in level {
                let _ = writeln!(out, "{:indent$}{f} {}", "", n.ids, indent = 2 * d);
                walk(&n.children, d + 1, out);
            }
        }
        let mut out = String::new();
        walk(&self.roots, 0, &mut out);
        out
    }
}

/// The `stacktrace` filter.
#[derive(Debug, Default)]
pub struct StackTrace {
    tree: StackTree,
    folded: FoldedIds,
}

impl StackTrace {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    fn take(&mut self) -> Option<(StackTree, IdSet)> {
        let s = std::mem::take(self);
        Some((s.tree, s.folded.take()?))
    }
}

impl Filter for StackTrace {
    fn name(&self) -> &str {
        "stacktrace"
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        if record::is_record(payload) {
            let r: StackRecord = record::decode("stacktrace", "stacktrace", payload, sources)?;
            self.tree.merge_flat(r.nodes).map_err(|i| {
                FilterError::bad_input(
                    "stacktrace",
                    sources,
                    format_args!("is a stack tree that skips a level at node {i}"),
                )
            })?;
        } else {
            let text = std::str::from_utf8(payload).map_err(|_| {
                FilterError::bad_input(
                    "stacktrace",
                    sources,
                    format_args!("is not UTF-8 text: {}", excerpt(payload)),
                )
            })?;
            for line in text.lines() {
                let frames = line.split(';').map(str::trim).filter(|f| !f.is_empty());
                self.tree.insert(frames, sources);
            }
        }
        self.folded.add(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        Ok(match self.take() {
            Some((t, ids)) => vec![Group::new(record::encode("stacktrace", &t.flatten()), ids)],
            None => Vec::new(),
        })
    }

    fn finish(&mut self) -> Result<Vec<Group>, FilterError> {
        Ok(match self.take() {
            Some((t, ids)) => vec![Group::new(t.render(), ids)],
            None => Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_tree() {
        let mut a = StackTrace::new();
        a.fold(b"main;solve;MPI_Wait\n", &"[0-1]".parse().unwrap())
            .unwrap();
        a.fold(b"main;solve;compute\nmain;io", &IdSet::single(2))
            .unwrap();
        let up = a.flush().unwrap();
        let mut root = StackTrace::new();
        root.fold(&up[0].payload, &up[0].sources).unwrap();
        root.fold(b"main;solve;MPI_Wait", &IdSet::single(3))
            .unwrap();
        let g = root.finish().unwrap();
        assert_eq!(
            std::str::from_utf8(&g[0].payload).unwrap(),
            "main [0-3]\n  io [2]\n  solve [0-3]\n    MPI_Wait [0-1,3]\n    compute [2]\n"
        );
        let t = StackTree::decode(&up[0].payload).unwrap();
        assert_eq!(t.roots["main"].children["solve"].ids.to_string(), "[0-2]");
        let bad = br#"{"sdm":1,"type":"stacktrace","nodes":[{"d":1,"f":"x","ids":"[0]"}]}"#;
        assert!(root.fold(bad, &IdSet::single(9)).is_err());
    }
}
