//! Explicit trees: a tree given node by node, so a site can put interior nodes where it
//! wants them (`--topology file:PATH`).
//!
//! Two file forms are read (comments start with `#`):
//!
//! * sdm's form, one line per interior node, `PARENT: CHILD...`, where `PARENT` is `master`
//!   or a server id and the children are server ids or ranges (`4-7`, `[8-11,13]`); every
//!   server `0..N` is the child of exactly one node, and `N` is one more than the largest id:
//!
//!   ```text
//!   master: 0 8
//!   0: 1-7
//!   8: 9-15
//!   ```
//!
//! * MRNet's topology-file form, `host:instance => host:instance ... ;`: the parent of the
//!   first statement is the root (the master, on the front-end's host); every other node is
//!   a server, numbered in the order the nodes first appear as children, and placed on the
//!   host it names ([`Explicit::hosts`]):
//!
//!   ```text
//!   fe:0 => h1:0 h2:0 ;
//!   h1:0 => h1:1 h1:2 ;
//!   h2:0 => h2:1 h2:2 ;
//!   ```
//!
//! The tree travels to the daemons by name, like every shape: `tree:` and each server's
//! parent in server order, `m` for the master, `P*K` for `K` servers in a row under `P`
//! (`tree:m*2,0*2,1*2` is the MRNet example above). Subtrees need not be ranges of ids: routing
//! narrows a destination to each child's subtree range by range.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use crate::{ShapeError, Topology};

/// A tree given parent by parent.
#[derive(Debug, Clone)]
pub struct Explicit {
    /// Parent position of each server (index `s` is server `s`; position 0 is the master).
    parents: Vec<u64>,
    /// Children of each position, largest subtree first.
    children: Vec<Vec<u64>>,
    /// Each position's subtree as disjoint, sorted half-open ranges of positions.
    subtrees: Vec<Vec<(u64, u64)>>,
    /// The host of each server, when the file names them (MRNet's form).
    hosts: Option<Vec<String>>,
}

/// Two explicit trees are equal when they have the same parents (hosts are placement, not
/// shape: the name the daemons receive does not carry them).
impl PartialEq for Explicit {
    fn eq(&self, other: &Self) -> bool {
        self.parents == other.parents
    }
}

impl Eq for Explicit {}

impl Explicit {
    /// The most servers an explicit tree may name (4,194,304): more than any machine's
    /// hosts, and small enough that a name like `tree:m*4000000000` is refused before it
    /// allocates.
    pub const MAX_SERVERS: u64 = 1 << 22;

    /// The tree where server `s`'s parent is at position `parents[s]` (0: the master,
    /// `p + 1`: server `p`). `what` names the source in errors. Refused: no servers, a
    /// parent that is not a node, a server that is its own parent, and servers not
    /// connected to the master (a cycle).
    pub fn from_parents(parents: Vec<u64>, what: &str) -> Result<Self, ShapeError> {
        let tree = |message: String| ShapeError::Tree {
            origin: what.to_owned(),
            message,
        };
        let n = parents.len() as u64;
        if n == 0 || n > Self::MAX_SERVERS {
            return Err(tree(format!(
                "{n} servers; an explicit tree has 1 to {}",
                Self::MAX_SERVERS
            )));
        }
        let mut children = vec![Vec::new(); n as usize + 1];
        for (s, &p) in parents.iter().enumerate() {
            if p > n {
                return Err(tree(format!(
                    "server {s}: parent {} is not a server of this tree (0-{})",
                    p - 1,
                    n - 1
                )));
            }
            if p == s as u64 + 1 {
                return Err(tree(format!("server {s} is its own parent")));
            }
            children[p as usize].push(s as u64 + 1);
        }
        // Breadth first from the master: every position reached once, since each has one
        // parent; a position not reached sits on a cycle or hangs below one.
        let mut order = Vec::with_capacity(n as usize + 1);
        let mut queue = VecDeque::from([0u64]);
        while let Some(p) = queue.pop_front() {
            order.push(p);
            queue.extend(children[p as usize].iter().copied());
        }
        if order.len() as u64 != n + 1 {
            let mut reached = vec![false; n as usize + 1];
            for &p in &order {
                reached[p as usize] = true;
            }
            let lost: Vec<String> = (1..=n)
                .filter(|&p| !reached[p as usize])
                .map(|p| (p - 1).to_string())
                .take(8)
                .collect();
            return Err(tree(format!(
                "server(s) {} not connected to the master (a cycle of parents)",
                lost.join(",")
            )));
        }
        // Subtrees bottom-up: a node's ranges are itself and its children's, coalesced.
        let mut subtrees: Vec<Vec<(u64, u64)>> = vec![Vec::new(); n as usize + 1];
        let mut sizes = vec![1u64; n as usize + 1];
        for &p in order.iter().rev() {
            let mut ranges = vec![(p, p + 1)];
            for &c in &children[p as usize] {
                ranges.extend_from_slice(&subtrees[c as usize]);
                sizes[p as usize] += sizes[c as usize];
            }
            ranges.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
            for (a, b) in ranges {
                match merged.last_mut() {
                    Some(last) if last.1 == a => last.1 = b,
                    _ => merged.push((a, b)),
                }
            }
            subtrees[p as usize] = merged;
        }
        for c in &mut children {
            c.sort_by_key(|&p| (std::cmp::Reverse(sizes[p as usize]), p));
        }
        Ok(Self {
            parents,
            children,
            subtrees,
            hosts: None,
        })
    }

    /// Reads a topology file's text in either form (MRNet's when it has `=>`); `path`
    /// names it in errors, which give the line.
    pub fn parse_file(text: &str, path: &str) -> Result<Self, ShapeError> {
        if text.contains("=>") {
            parse_mrnet(text, path)
        } else {
            parse_sdm(text, path)
        }
    }

    /// The host each server is placed on, when the file names hosts (MRNet's form).
    pub fn hosts(&self) -> Option<&[String]> {
        self.hosts.as_deref()
    }

    /// Number of servers.
    pub fn servers(&self) -> u32 {
        self.parents.len() as u32
    }

    /// The parents in the `tree:` name's form (without the prefix).
    fn encode(&self) -> String {
        let mut out = String::new();
        let mut i = 0;
        while i < self.parents.len() {
            let p = self.parents[i];
            let run = self.parents[i..].iter().take_while(|&&q| q == p).count();
            if !out.is_empty() {
                out.push(',');
            }
            if p == 0 {
                out.push('m');
            } else {
                out.push_str(&(p - 1).to_string());
            }
            if run > 1 {
                out.push_str(&format!("*{run}"));
            }
            i += run;
        }
        out
    }

    /// Parses the `tree:` name's parent list (without the prefix).
    pub(crate) fn decode(list: &str) -> Result<Self, ShapeError> {
        let bad = |item: &str| ShapeError::Tree {
            origin: format!("tree:{list}"),
            message: format!("{item:?} is not PARENT or PARENT*COUNT (PARENT: m or a server id)"),
        };
        let mut parents = Vec::new();
        for item in list.split(',') {
            let (p, count) = match item.split_once('*') {
                Some((p, k)) => (p, k.parse::<u32>().map_err(|_| bad(item))?),
                None => (item, 1),
            };
            let p = if p == "m" {
                0
            } else {
                p.parse::<u32>().map_err(|_| bad(item))? as u64 + 1
            };
            if parents.len() as u64 + u64::from(count) > Self::MAX_SERVERS {
                return Err(ShapeError::Tree {
                    origin: format!("tree:{list}"),
                    message: format!(
                        "{item:?} makes more than {} servers, the most a tree may name",
                        Self::MAX_SERVERS
                    ),
                });
            }
            parents.extend(std::iter::repeat_n(p, count as usize));
        }
        Self::from_parents(parents, &format!("tree:{list}"))
    }
}

impl fmt::Display for Explicit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tree:{}", self.encode())
    }
}

impl Topology for std::sync::Arc<Explicit> {
    fn size(&self) -> u32 {
        self.servers()
    }
    fn name(&self) -> String {
        self.to_string()
    }
    fn parent_position(&self, p: u64) -> Option<u64> {
        if p == 0 {
            None
        } else {
            self.parents.get(p as usize - 1).copied()
        }
    }
    fn child_positions(&self, p: u64) -> Vec<u64> {
        self.children.get(p as usize).cloned().unwrap_or_default()
    }
    fn subtree_positions(&self, p: u64) -> Vec<(u64, u64)> {
        self.subtrees.get(p as usize).cloned().unwrap_or_default()
    }
}

/// The text without its `#` comment.
fn strip_comment(line: &str) -> &str {
    line.split_once('#').map_or(line, |(a, _)| a)
}

/// sdm's form: `PARENT: CHILD...` per line.
fn parse_sdm(text: &str, path: &str) -> Result<Explicit, ShapeError> {
    let syntax = |line: usize, message: String| ShapeError::Syntax {
        path: path.to_owned(),
        line,
        message,
    };
    // Parent position of each server, with the line that gave it.
    let mut given: HashMap<u32, (u64, usize)> = HashMap::new();
    let mut max: Option<u32> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let body = strip_comment(raw).trim();
        if body.is_empty() {
            continue;
        }
        let (head, rest) = match body.split_once(':') {
            Some((h, r)) => (h.trim(), r),
            None => body.split_once(char::is_whitespace).unwrap_or((body, "")),
        };
        let parent = match head {
            "master" | "m" => 0u64,
            id => {
                let s = id.parse::<u32>().map_err(|_| {
                    syntax(
                        line,
                        format!(
                            "{id:?} is not `master` or a server id (expected PARENT: CHILD...)"
                        ),
                    )
                })?;
                max = max.max(Some(s));
                u64::from(s) + 1
            }
        };
        let mut any = false;
        for tok in rest
            .split(|c: char| c.is_whitespace() || c == ',')
            .map(|t| t.trim_matches(|c| c == '[' || c == ']'))
            .filter(|t| !t.is_empty())
        {
            let bad = || syntax(line, format!("{tok:?} is not a server id or range (A-B)"));
            let (a, b) = match tok.split_once('-') {
                Some((a, b)) => (
                    a.parse::<u32>().map_err(|_| bad())?,
                    b.parse::<u32>().map_err(|_| bad())?,
                ),
                None => {
                    let a = tok.parse::<u32>().map_err(|_| bad())?;
                    (a, a)
                }
            };
            if a > b {
                return Err(syntax(line, format!("range {tok:?} runs backwards")));
            }
            for s in a..=b {
                if let Some((_, first)) = given.insert(s, (parent, line)) {
                    return Err(syntax(
                        line,
                        format!("server {s} already has a parent (line {first})"),
                    ));
                }
            }
            max = max.max(Some(b));
            any = true;
        }
        if !any {
            return Err(syntax(line, format!("{head} has no children listed")));
        }
    }
    let Some(max) = max else {
        return Err(syntax(
            0,
            "no tree in the file (expected PARENT: CHILD... lines)".into(),
        ));
    };
    let mut parents = Vec::with_capacity(max as usize + 1);
    for s in 0..=max {
        match given.get(&s) {
            Some(&(p, _)) => parents.push(p),
            None => {
                return Err(ShapeError::Tree {
                    origin: path.to_owned(),
                    message: format!(
                        "server {s} has no parent: every server 0-{max} must be listed as a child"
                    ),
                });
            }
        }
    }
    Explicit::from_parents(parents, path)
}

/// MRNet's form: `host:instance => host:instance ... ;`.
fn parse_mrnet(text: &str, path: &str) -> Result<Explicit, ShapeError> {
    let syntax = |line: usize, message: String| ShapeError::Syntax {
        path: path.to_owned(),
        line,
        message,
    };
    // Tokens with their line numbers, comments removed; `;` and `=>` are their own tokens.
    let mut toks: Vec<(String, usize)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let spaced = strip_comment(raw).replace(';', " ; ").replace("=>", " => ");
        toks.extend(spaced.split_whitespace().map(|t| (t.to_owned(), i + 1)));
    }
    let node = |tok: &str, line: usize| -> Result<(String, String), ShapeError> {
        match tok.rsplit_once(':') {
            Some((h, k)) if !h.is_empty() && k.parse::<u32>().is_ok() => {
                Ok((tok.to_owned(), h.to_owned()))
            }
            _ => Err(syntax(line, format!("{tok:?} is not HOST:INSTANCE"))),
        }
    };
    let mut root: Option<String> = None;
    // Server id of each node name, its host, its parent's name, and where it was listed.
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut hosts: Vec<String> = Vec::new();
    let mut parent_names: Vec<(String, usize)> = Vec::new();
    let mut it = toks.into_iter().peekable();
    while let Some((tok, line)) = it.next() {
        let (parent, _) = node(&tok, line)?;
        match it.next() {
            Some((arrow, _)) if arrow == "=>" => {}
            Some((other, l)) => {
                return Err(syntax(
                    l,
                    format!("expected `=>` after {tok}, found {other:?}"),
                ));
            }
            None => return Err(syntax(line, format!("expected `=>` after {tok}"))),
        }
        if root.is_none() {
            root = Some(parent.clone());
        }
        let mut any = false;
        loop {
            match it.next() {
                Some((t, _)) if t == ";" => break,
                Some((t, l)) => {
                    let (child, host) = node(&t, l)?;
                    if Some(&child) == root.as_ref() {
                        return Err(syntax(l, format!("{child} is the root; it has no parent")));
                    }
                    if ids.contains_key(&child) {
                        return Err(syntax(l, format!("{child} already has a parent")));
                    }
                    ids.insert(child, hosts.len() as u32);
                    hosts.push(host);
                    parent_names.push((parent.clone(), l));
                    any = true;
                }
                None => {
                    return Err(syntax(
                        line,
                        format!("the statement of {parent} has no `;`"),
                    ));
                }
            }
        }
        if !any {
            return Err(syntax(line, format!("{parent} has no children listed")));
        }
    }
    let Some(root) = root else {
        return Err(syntax(
            0,
            "no tree in the file (expected HOST:N => HOST:N ... ;)".into(),
        ));
    };
    let mut parents = Vec::with_capacity(hosts.len());
    for (name, line) in parent_names {
        if name == root {
            parents.push(0);
        } else {
            match ids.get(&name) {
                Some(&s) => parents.push(u64::from(s) + 1),
                None => {
                    return Err(syntax(
                        line,
                        format!("{name} has children but is not the root nor anyone's child"),
                    ));
                }
            }
        }
    }
    let mut tree = Explicit::from_parents(parents, path)?;
    tree.hosts = Some(hosts);
    Ok(tree)
}
