//! `stacktrace`: merges stack traces into a call-prefix tree (STAT's 2D trace-space view);
//! each node carries the ids of the ranks whose traces pass through it.
//!
//! Leaf input: UTF-8 text, one trace per line (a thread, or a sample), frames outermost first
//! separated by `;`, optionally followed by a space and a count (the "folded" format:
//! `main;solve;MPI_Wait` or `main;solve;MPI_Wait 3` for a trace seen in 3 samples). Each
//! node counts the traces through it (STAT's 3D view: trace x space x time): a line counts
//! its count once for every id it came from. Record: the tree in pre-order, each node with
//! its depth and count, `{"sdm":1,"type":"stacktrace","nodes":[{"d":0,"f":"main",
//! "ids":"[0-3]","n":4},...]}`, siblings sorted by frame (flat, so deep stacks do not hit a
//! JSON nesting limit). `finish` renders the tree as indented text, `frame [ids]` per line;
//! use [`StackTree::decode`] on a flushed record for the tree itself, and its views
//! ([`StackTree::classes`], [`StackTree::to_dot`], [`StackTree::to_json`]).

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
    /// Traces through this node (one per rank and thread and sample).
    pub count: u64,
    /// Callees, by frame name.
    pub children: BTreeMap<String, StackNode>,
}

impl StackNode {
    /// `count` more traces through this node, from `ids`. The count stops at `u64::MAX`,
    /// which only a forged record reaches.
    fn add(&mut self, ids: &IdSet, count: u64) {
        self.ids.union_with(ids);
        self.count = self.count.saturating_add(count);
    }
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
    /// Traces through the node; absent in records of older builds (then one per id).
    #[serde(default)]
    n: u64,
}

/// An equivalence class of ranks (STAT's): the ranks whose traces end at the same leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackClass {
    /// The ranks.
    pub ids: IdSet,
    /// The frames from the outermost to the leaf.
    pub path: Vec<String>,
    /// Traces that end there.
    pub count: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StackRecord {
    nodes: Vec<FlatNode>,
}

impl StackTree {
    /// Adds the path `frames` for `ids`, counted once per id.
    pub fn insert<'a>(&mut self, frames: impl IntoIterator<Item = &'a str>, ids: &IdSet) {
        self.insert_counted(frames, ids, ids.len());
    }

    /// Adds the path `frames` for `ids`, `count` traces in all.
    pub fn insert_counted<'a>(
        &mut self,
        frames: impl IntoIterator<Item = &'a str>,
        ids: &IdSet,
        count: u64,
    ) {
        let mut level = &mut self.roots;
        for f in frames {
            let n = level.entry(f.to_owned()).or_default();
            n.add(ids, count);
            level = &mut n.children;
        }
    }

    /// Adds one line of folded text (`a;b;c` or `a;b;c N`) from `ids`; `Err` if the count
    /// is not a number.
    fn insert_folded(&mut self, line: &str, ids: &IdSet) -> Result<(), String> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(());
        }
        // A count is the last space-separated word, after the last frame separator.
        let (frames, count) = match line.rsplit_once(' ') {
            Some((f, n)) if !n.contains(';') && n.bytes().all(|b| b.is_ascii_digit()) => {
                match n.parse::<u64>() {
                    Ok(0) => return Err("count 0: a trace is seen at least once".into()),
                    Ok(c) => (f, c),
                    Err(e) => return Err(format!("count {n:?}: {e}")),
                }
            }
            _ => (line, 1),
        };
        let frames = frames.split(';').map(str::trim).filter(|f| !f.is_empty());
        self.insert_counted(frames, ids, count.saturating_mul(ids.len()));
        Ok(())
    }

    /// The equivalence classes: for every node where some traces end, the ranks whose
    /// traces end there, sorted by their lowest rank. With one trace per rank (one thread,
    /// one sample) every rank is in exactly one class. With several (threads, samples that
    /// differ) a rank is in one class per distinct trace, and where traces end at a frame
    /// that others continue below, the class names every rank through that frame (the tree
    /// does not keep which of them ended there).
    pub fn classes(&self) -> Vec<StackClass> {
        fn walk(
            level: &BTreeMap<String, StackNode>,
            path: &mut Vec<String>,
            out: &mut Vec<StackClass>,
        ) {
            for (f, n) in level {
                path.push(f.clone());
                let mut below = IdSet::new();
                let mut below_count = 0;
                for c in n.children.values() {
                    below.union_with(&c.ids);
                    below_count = c.count.saturating_add(below_count);
                }
                let here = &n.ids - &below;
                let ending = n.count.saturating_sub(below_count);
                // Ranks whose traces end here, and ranks (already below) with more traces
                // through here than below: a thread or sample that ends at this frame.
                if !here.is_empty() || ending > 0 {
                    let ids = if here.is_empty() { n.ids.clone() } else { here };
                    out.push(StackClass {
                        ids,
                        path: path.clone(),
                        count: ending,
                    });
                }
                walk(&n.children, path, out);
                path.pop();
            }
        }
        let mut out = Vec::new();
        walk(&self.roots, &mut Vec::new(), &mut out);
        out.sort_by(|a, b| a.ids.first().cmp(&b.ids.first()).then(a.path.cmp(&b.path)));
        out
    }

    /// The tree in Graphviz DOT (STAT's layout): a root node, one node per frame, edges
    /// labelled `count:[ranks]`.
    pub fn to_dot(&self) -> String {
        fn quote(s: &str) -> String {
            let mut q = String::with_capacity(s.len() + 2);
            q.push('"');
            for c in s.chars() {
                match c {
                    '"' | '\\' => {
                        q.push('\\');
                        q.push(c);
                    }
                    '\n' => q.push_str("\\n"),
                    c => q.push(c),
                }
            }
            q.push('"');
            q
        }
        fn walk(
            level: &BTreeMap<String, StackNode>,
            parent: usize,
            next: &mut usize,
            out: &mut String,
        ) {
            for (f, n) in level {
                *next += 1;
                let me = *next;
                let _ = writeln!(out, "  n{me} [label={}];", quote(f));
                let _ = writeln!(
                    out,
                    "  n{parent} -> n{me} [label={}];",
                    quote(&format!("{}:{}", n.count, n.ids))
                );
                walk(&n.children, me, next, out);
            }
        }
        let mut out = String::from(
            "digraph stacks {\n  node [shape=box, fontname=\"monospace\"];\n  n0 [label=\"/\"];\n",
        );
        walk(&self.roots, 0, &mut 0, &mut out);
        out.push_str("}\n");
        out
    }

    /// The tree as nested JSON: `[{"function", "ranks", "count", "children": [...]}]`.
    pub fn to_json(&self) -> serde_json::Value {
        fn walk(level: &BTreeMap<String, StackNode>) -> serde_json::Value {
            serde_json::Value::Array(
                level
                    .iter()
                    .map(|(f, n)| {
                        serde_json::json!({
                            "function": f,
                            "ranks": n.ids.to_string(),
                            "count": n.count,
                            "children": walk(&n.children),
                        })
                    })
                    .collect(),
            )
        }
        walk(&self.roots)
    }

    /// Merges `other` in (ids united, counts added, up to `u64::MAX`).
    pub fn merge(&mut self, other: &StackTree) {
        fn walk(into: &mut BTreeMap<String, StackNode>, from: &BTreeMap<String, StackNode>) {
            for (f, n) in from {
                let m = into.entry(f.clone()).or_default();
                m.add(&n.ids, n.count);
                walk(&mut m.children, &n.children);
            }
        }
        walk(&mut self.roots, &other.roots);
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
                    n: n.count,
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
            let node = level.entry(last.clone()).or_default();
            node.add(&n.ids, if n.n == 0 { n.ids.len() } else { n.n });
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

    /// Indented text, two spaces per level: `frame [ids]` per line, and the count of traces
    /// (`x7`) where it is not one per rank (threads, samples).
    pub fn render(&self) -> String {
        fn walk(level: &BTreeMap<String, StackNode>, d: usize, out: &mut String) {
            for (f, n) in level {
                let _ = write!(out, "{:indent$}{f} {}", "", n.ids, indent = 2 * d);
                if n.count != n.ids.len() {
                    let _ = write!(out, " x{}", n.count);
                }
                out.push('\n');
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
            // Check every line first, so a bad payload leaves the tree untouched.
            let mut add = StackTree::default();
            for line in text.lines() {
                add.insert_folded(line, sources).map_err(|e| {
                    FilterError::bad_input(
                        "stacktrace",
                        sources,
                        format_args!("has a bad trace line {}: {e}", excerpt(line.as_bytes())),
                    )
                })?;
            }
            self.tree.merge(&add);
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
            // Rank 2 has two threads (traces): five through main.
            "main [0-3] x5\n  io [2]\n  solve [0-3]\n    MPI_Wait [0-1,3]\n    compute [2]\n"
        );
        let t = StackTree::decode(&up[0].payload).unwrap();
        assert_eq!(t.roots["main"].children["solve"].ids.to_string(), "[0-2]");
        let bad = br#"{"sdm":1,"type":"stacktrace","nodes":[{"d":1,"f":"x","ids":"[0]"}]}"#;
        assert!(root.fold(bad, &IdSet::single(9)).is_err());
    }

    fn tree_of(parts: &[(&str, &str)]) -> StackTree {
        let mut f = StackTrace::new();
        for (text, ids) in parts {
            f.fold(text.as_bytes(), &ids.parse().unwrap()).unwrap();
        }
        let up = f.flush().unwrap();
        StackTree::decode(&up[0].payload).unwrap()
    }

    #[test]
    fn classes_are_the_ranks_ending_at_each_leaf() {
        let t = tree_of(&[
            ("main;step;PMPI_Barrier;poll", "[0-2,4-6]"),
            ("main;step;compute", "[3,7]"),
            ("main;init", "[8]"),
            ("main", "[9]"),
        ]);
        let c = t.classes();
        let got: Vec<(String, String, u64)> = c
            .iter()
            .map(|c| (c.ids.to_string(), c.path.join(" > "), c.count))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "[0-2,4-6]".into(),
                    "main > step > PMPI_Barrier > poll".into(),
                    6
                ),
                ("[3,7]".into(), "main > step > compute".into(), 2),
                ("[8]".into(), "main > init".into(), 1),
                ("[9]".into(), "main".into(), 1),
            ]
        );
        // Every rank in exactly one class.
        let mut all = IdSet::new();
        for c in &c {
            assert!(all.is_disjoint(&c.ids));
            all.union_with(&c.ids);
        }
        assert_eq!(all, IdSet::range(0..=9));
    }

    #[test]
    fn counts_past_u64_max_stay_at_the_maximum() {
        // Only a forged record carries such counts; merging it must not overflow.
        let ids = IdSet::range(0..=1);
        let mut a = StackTree::default();
        a.insert_counted(["main", "poll"], &ids, u64::MAX - 1);
        let b = a.clone();
        a.merge(&b);
        a.insert_counted(["main"], &ids, 5);
        assert_eq!(a.roots["main"].count, u64::MAX);
        assert_eq!(a.roots["main"].children["poll"].count, u64::MAX);
        // And through a record, as a parent merges a child's flushed tree.
        let mut c = StackTree::default();
        c.merge_flat(a.flatten().nodes).unwrap();
        c.merge_flat(a.flatten().nodes).unwrap();
        assert_eq!(c, a);
    }

    #[test]
    fn samples_count_per_edge_through_the_tree() {
        // Rank 0: 3 samples in poll, 1 in compute; ranks 1-2: 4 samples in poll each.
        let t = tree_of(&[
            ("main;step;poll 3\nmain;step;compute 1", "[0]"),
            ("main;step;poll 4", "[1-2]"),
        ]);
        let step = &t.roots["main"].children["step"];
        assert_eq!(t.roots["main"].count, 12);
        assert_eq!(step.children["poll"].count, 11);
        assert_eq!(step.children["poll"].ids.to_string(), "[0-2]");
        assert_eq!(step.children["compute"].count, 1);
        assert!(t.render().contains("poll [0-2] x11"), "{}", t.render());
        // A record of an older build (no counts) counts one per id.
        let old = br#"{"sdm":1,"type":"stacktrace","nodes":[{"d":0,"f":"main","ids":"[0-3]"}]}"#;
        assert_eq!(StackTree::decode(old).unwrap().roots["main"].count, 4);
        let mut f = StackTrace::new();
        assert!(
            f.fold(b"main;x 99999999999999999999999", &IdSet::single(0))
                .is_err()
        );
        // A count of 0 is refused (it would read back as an older record's "one per id").
        assert!(f.fold(b"main;x 0", &IdSet::single(0)).is_err());
    }

    #[test]
    fn dot_and_json_views() {
        let t = tree_of(&[("main;a\"q", "[0-1]"), ("main;b", "[2]")]);
        let dot = t.to_dot();
        assert!(dot.starts_with("digraph stacks {\n"));
        assert!(dot.contains(r#"n1 [label="main"];"#), "{dot}");
        assert!(dot.contains(r#"n0 -> n1 [label="3:[0-2]"];"#), "{dot}");
        assert!(dot.contains(r#"[label="a\"q"];"#), "{dot}");
        assert!(dot.contains(r#"n1 -> n2 [label="2:[0-1]"];"#), "{dot}");
        assert!(dot.ends_with("}\n"));
        let j = t.to_json();
        assert_eq!(j[0]["function"], "main");
        assert_eq!(j[0]["ranks"], "[0-2]");
        assert_eq!(j[0]["count"], 3);
        assert_eq!(j[0]["children"][1]["function"], "b");
    }
}
