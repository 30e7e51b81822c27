//! `bt` in the console: STAT's views of the merged stack traces. Its options, the samples
//! merged into one call-prefix tree with a count per edge, and the views: the indented
//! tree (2D), the equivalence classes, Graphviz DOT and SVG, and JSON for each.
//!
//! Every thread of every rank is a trace of its own (STAT's view: threads in the same
//! place merge, threads elsewhere are branches of their own). A frame is a node by its
//! function and source line (`step at prog.c:28`, STAT's line-granular view, so ranks
//! waiting at two call sites of one function are two branches and two classes), or by
//! its function alone with `--functions`; a frame without a symbol is named by its file and
//! offset (`libc.so.6+0x2724a`), never by its address. A Python rank's frames come with
//! its Python frames merged in (`step at main.py:12`, module `<python>`, no offset; see
//! `sdm_server::python`), so they show in every view as native frames do.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};

use sdm_omis::Value;
use sdm_overlay::filters::builtin::{StackNode, StackTree};
use sdm_proto::IdSet;

/// What `bt` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BtArgs {
    /// Samples per rank (1: one stack, STAT's 2D view).
    pub samples: u32,
    /// Time between samples.
    pub interval: Duration,
    /// Print the equivalence classes instead of the tree.
    pub classes: bool,
    /// Write the tree as DOT here.
    pub dot: Option<PathBuf>,
    /// Render the tree as SVG here (with graphviz's `dot`).
    pub svg: Option<PathBuf>,
    /// Write the hang report (one HTML page, see [`crate::report`]) here.
    pub html: Option<PathBuf>,
    /// JSON for this command (as the console's `--json` gives for every command).
    pub json: bool,
    /// Collapse each stack below the program's first call into code without source
    /// information (MPI, libc: see [`collapsed_len`]); `None`: only for `--classes`.
    pub collapse: Option<bool>,
    /// A frame is a node by its function alone (`--functions`), not by function and line.
    pub functions: bool,
    /// Only this thread of each rank (numbered from 1, the main thread first, as `info
    /// threads` lists them); `None`: every thread.
    pub thread: Option<u32>,
    /// Write the flame graph (`--flame FILE.svg`) and the folded stacks (`--folded FILE`)
    /// of the whole job, and of each class beside them (see [`crate::flame`]).
    pub flame: crate::flame::FlameFiles,
    /// Count only the threads that were running on a CPU when stopped (`sdm top`'s CPU
    /// samples, which ask the servers for each thread's state).
    pub on_cpu: bool,
    /// The ranks (the rest of the line).
    pub ids: String,
}

/// The usage line of `bt`.
pub const BT_USAGE: &str = "bt [--samples K] [--interval MS] [--classes] [--functions] \
     [--collapse|--full] [--thread N] [--dot FILE] [--svg FILE] [--flame FILE.svg] \
     [--folded FILE] [--html FILE] [--json] [IDS]";

impl BtArgs {
    /// Parses the words after `bt`; the error names the option that was wrong.
    pub fn parse(rest: &str) -> anyhow::Result<Self> {
        let mut a = BtArgs {
            samples: 1,
            interval: Duration::from_millis(100),
            classes: false,
            dot: None,
            svg: None,
            html: None,
            json: false,
            collapse: None,
            functions: false,
            thread: None,
            flame: Default::default(),
            on_cpu: false,
            ids: String::new(),
        };
        let mut words = rest.split_whitespace();
        let mut ids = Vec::new();
        while let Some(w) = words.next() {
            let mut value = |name: &str| {
                words
                    .next()
                    .ok_or_else(|| anyhow!("bt: {name} needs a value ({BT_USAGE})"))
            };
            match w {
                "--samples" => {
                    let v = value(w)?;
                    a.samples = v
                        .parse()
                        .ok()
                        .filter(|&k| (1..=10_000).contains(&k))
                        .ok_or_else(|| {
                            anyhow!("bt: --samples {v:?}: give a count from 1 to 10000")
                        })?;
                }
                "--interval" => {
                    let v = value(w)?;
                    let ms: u64 = v.parse().map_err(|_| {
                        anyhow!("bt: --interval {v:?}: give milliseconds, e.g. --interval 100")
                    })?;
                    a.interval = Duration::from_millis(ms);
                }
                "--classes" => a.classes = true,
                "--functions" => a.functions = true,
                "--thread" => {
                    let v = value(w)?;
                    a.thread = Some(parse_thread(v).map_err(|e| anyhow!("bt: --thread {e}"))?);
                }
                "--json" => a.json = true,
                "--collapse" => a.collapse = Some(true),
                "--full" => a.collapse = Some(false),
                "--dot" => a.dot = Some(PathBuf::from(value(w)?)),
                "--svg" => a.svg = Some(PathBuf::from(value(w)?)),
                "--flame" => a.flame.svg = Some(PathBuf::from(value(w)?)),
                "--folded" => a.flame.folded = Some(PathBuf::from(value(w)?)),
                "--html" => a.html = Some(PathBuf::from(value(w)?)),
                w if w.starts_with("--") => {
                    bail!("bt: unknown option {w} ({BT_USAGE})");
                }
                w => ids.push(w),
            }
        }
        a.ids = ids.join(" ");
        Ok(a)
    }

    /// Whether stacks are collapsed: `--collapse` or `--full` if given, else for
    /// `--classes` and the `--html` report (where a wait inside MPI is one place, whatever
    /// frame of the progress engine each rank was caught in) and not for the tree.
    pub fn collapsed(&self) -> bool {
        self.collapse.unwrap_or(self.classes || self.html.is_some())
    }
}

/// A thread number as `bt --thread` and `thread` take it: 1 or more.
pub fn parse_thread(v: &str) -> anyhow::Result<u32> {
    v.parse()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| anyhow!("{v:?}: give a thread number from 1 (`info threads` lists them)"))
}

/// How many frames of a stack (outermost first, each with whether it has a source
/// location) to keep when collapsing library internals: up to and including the first frame
/// without source information that the program's own code (a frame with a location) called.
/// `main > step > PMPI_Barrier > ompi_coll_... > opal_progress` keeps `main > step >
/// PMPI_Barrier`. A stack without any source location (no debug information) is kept whole.
pub fn collapsed_len(frames: &[(String, bool)]) -> usize {
    let Some(first_own) = frames.iter().position(|(_, loc)| *loc) else {
        return frames.len();
    };
    match frames[first_own..].iter().position(|(_, loc)| !*loc) {
        Some(i) => first_own + i + 1,
        None => frames.len(),
    }
}

/// The frames of one stack (innermost frame first) as `bt` merges them: outermost first,
/// collapsed as `a` asks; their fields and their names in the tree.
pub fn merged_frames(frames: &[Value], a: &BtArgs) -> (Vec<FrameFields>, Vec<String>) {
    let (fields, named) = named_frames(frames, a);
    kept_frames(fields, named, a)
}

/// Every frame of a stack as it came (innermost first), outermost first, with its label as
/// `a` names frames and whether it has a source line.
fn named_frames(frames: &[Value], a: &BtArgs) -> (Vec<FrameFields>, Vec<(String, bool)>) {
    let fields: Vec<FrameFields> = frames
        .iter()
        .rev()
        .map(|f| FrameFields::from_value(f).unwrap_or_else(FrameFields::unknown))
        .collect();
    let named = fields
        .iter()
        .map(|f| (f.label(a.functions), f.line.is_some()))
        .collect();
    (fields, named)
}

/// The frames of [`named_frames`] the tree keeps: cut where `a` collapses stacks.
fn kept_frames(
    mut fields: Vec<FrameFields>,
    named: Vec<(String, bool)>,
    a: &BtArgs,
) -> (Vec<FrameFields>, Vec<String>) {
    let keep = if a.collapsed() {
        collapsed_len(&named)
    } else {
        named.len()
    };
    fields.truncate(keep);
    let labels = named.into_iter().take(keep).map(|(l, _)| l).collect();
    (fields, labels)
}

/// The name of a frame the servers could not name (gdb's).
const UNKNOWN_FRAME: &str = "??";

/// One frame as the servers report it (`sdm_stacks`, `stack_backtrace`), or the fields a
/// merged node's frames agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameFields {
    /// The function (inlined ones are frames of their own).
    pub function: String,
    /// The source file (no directory), where debug information gives one.
    pub file: Option<String>,
    /// The source line: for an outer frame the line of the call.
    pub line: Option<u32>,
    /// The mapped file holding the code (`libc.so.6`); empty where none.
    pub module: String,
    /// The pc's address in that file; `None` in a node whose frames differ in it.
    pub offset: Option<u64>,
}

impl FrameFields {
    /// Reads a frame `[pc, fp, "function", "file:line", "module", offset]` (the last two
    /// absent in replies of older servers). A Python frame (module `<python>`) has no
    /// offset: no file maps its code.
    pub fn from_value(v: &Value) -> Option<Self> {
        let Value::List(p) = v else { return None };
        let text = |i: usize| match p.get(i) {
            Some(Value::Str(s)) => Some(s.as_str()),
            _ => None,
        };
        let (file, line) = match text(3).and_then(|l| l.rsplit_once(':')) {
            Some((f, n)) => match n.parse() {
                Ok(n) => (Some(f.to_owned()), Some(n)),
                Err(_) => (None, None),
            },
            None => (None, None),
        };
        let module = text(4).unwrap_or_default();
        Some(Self {
            function: text(2)?.to_owned(),
            file,
            line,
            module: module.to_owned(),
            offset: match p.get(5) {
                Some(Value::Int(o)) if module != sdm_server::python::PYTHON_MODULE => {
                    Some(*o as u64)
                }
                _ => None,
            },
        })
    }

    /// A frame that could not be read.
    fn unknown() -> Self {
        Self {
            function: UNKNOWN_FRAME.into(),
            file: None,
            line: None,
            module: String::new(),
            offset: None,
        }
    }

    /// The frame's node in the tree: `function at file:line`, or with `functions` (or
    /// without a line) the function; a frame without a symbol in a known file by the file
    /// and offset.
    pub fn label(&self, functions: bool) -> String {
        let function = match self.offset {
            Some(o) if self.function == UNKNOWN_FRAME && !self.module.is_empty() => {
                format!("{}+{o:#x}", self.module)
            }
            _ => self.function.clone(),
        };
        match (&self.file, self.line) {
            (Some(file), Some(line)) if !functions => format!("{function} at {file}:{line}"),
            _ => function,
        }
    }

    /// Keeps only what `other` agrees on.
    fn merge(&mut self, other: &Self) {
        if self.file != other.file {
            self.file = None;
        }
        if self.line != other.line {
            self.line = None;
        }
        if self.module != other.module {
            self.module.clear();
        }
        if self.offset != other.offset {
            self.offset = None;
        }
    }

    /// The fields as JSON: `function`, `file`, `line`, `module`, `offset` (null where
    /// unknown or where the merged frames differ).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "module": (!self.module.is_empty()).then_some(&self.module),
            "offset": self.offset,
        })
    }
}

/// Whether a thread of a reply to `sdm_stacks(1)` (`[tid, "name", [frames], "state"]`) was
/// running on a CPU (state `R`) when its process was stopped.
fn running(thread: &Value) -> bool {
    matches!(thread, Value::List(parts) if parts.get(3) == Some(&Value::Str("R".into())))
}

/// The stacks of one `bt`: the call-prefix tree of frame nodes and the fields of each.
#[derive(Debug, Default)]
pub struct Stacks {
    /// The merged tree, nodes named by [`FrameFields::label`].
    pub tree: StackTree,
    /// The fields of each node name, as its frames agree on them.
    fields: HashMap<String, FrameFields>,
    /// Ranks without the thread `bt --thread N` asked for (fewer threads).
    pub without_thread: IdSet,
    /// Every trace with its ranks, for the flame graphs (kept where `--flame` or
    /// `--folded` asks for them).
    pub traces: crate::flame::Traces,
}

impl Stacks {
    /// Adds a reply to `sdm_stacks` from `ids`: every thread `[tid, "name", [frames]]`
    /// (innermost frame first), or only thread `a.thread`. `false`: the reply holds none.
    pub fn add_threads(&mut self, result: &Value, ids: &IdSet, a: &BtArgs) -> bool {
        let Value::List(threads) = result else {
            return false;
        };
        let stacks: Vec<&[Value]> = threads
            .iter()
            .filter_map(|t| match t {
                Value::List(parts) => match parts.get(2) {
                    Some(Value::List(frames)) => Some(frames.as_slice()),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        if stacks.len() != threads.len() {
            return false;
        }
        if a.thread.is_some_and(|n| n as usize > stacks.len()) {
            self.without_thread.union_with(ids);
        }
        for (i, frames) in stacks.into_iter().enumerate() {
            if a.thread.is_none_or(|n| n as usize == i + 1) && (!a.on_cpu || running(&threads[i])) {
                self.add_stack(frames, ids, a);
            }
        }
        true
    }

    /// Adds one stack (innermost frame first) from `ids`.
    pub fn add_stack(&mut self, frames: &[Value], ids: &IdSet, a: &BtArgs) {
        let (fields, named) = named_frames(frames, a);
        if a.flame.wanted() {
            let collapse = a.collapse == Some(true);
            // Classes numbered as `bt --classes` (with the same `--full`) numbers them.
            let collapse_class = a.collapse.unwrap_or(true);
            self.traces
                .add(&named, &fields, ids, collapse, collapse_class);
        }
        let (fields, labels) = kept_frames(fields, named, a);
        for (label, f) in labels.iter().zip(&fields) {
            self.fields
                .entry(label.clone())
                .and_modify(|m| m.merge(f))
                .or_insert_with(|| f.clone());
        }
        self.tree.insert(labels.iter().map(String::as_str), ids);
    }

    /// The fields of the node named `label`, as its frames agree on them.
    pub fn frame(&self, label: &str) -> Option<&FrameFields> {
        self.fields.get(label)
    }

    /// The fields of the node named `label` as JSON, with `frame` the name itself.
    fn node_json(&self, label: &str) -> serde_json::Value {
        let mut j = self
            .fields
            .get(label)
            .map_or_else(|| FrameFields::unknown().to_json(), FrameFields::to_json);
        j["frame"] = label.into();
        j
    }

    /// The tree as nested JSON: per node `frame` (its name in the text), `function`,
    /// `file`, `line`, `module`, `offset`, `ranks`, `count` and `children`.
    pub fn tree_json(&self) -> serde_json::Value {
        fn walk(s: &Stacks, level: &BTreeMap<String, StackNode>) -> serde_json::Value {
            serde_json::Value::Array(
                level
                    .iter()
                    .map(|(f, n)| {
                        let mut j = s.node_json(f);
                        j["ranks"] = n.ids.to_string().into();
                        j["count"] = n.count.into();
                        j["children"] = walk(s, &n.children);
                        j
                    })
                    .collect(),
            )
        }
        walk(self, &self.tree.roots)
    }

    /// The classes as JSON: `[{"ranks", "representative", "path": [...], "frames": [...],
    /// "count"}]`, `frames` the fields of each frame of the path.
    pub fn classes_json(&self) -> serde_json::Value {
        serde_json::Value::Array(
            self.tree
                .classes()
                .into_iter()
                .map(|c| {
                    let frames: Vec<serde_json::Value> =
                        c.path.iter().map(|l| self.node_json(l)).collect();
                    serde_json::json!({
                        "ranks": c.ids.to_string(),
                        "representative": c.ids.first(),
                        "path": c.path,
                        "frames": frames,
                        "count": c.count,
                    })
                })
                .collect(),
        )
    }
}

/// The tree as the console prints it: `[ranks] function` per frame, outermost first, two
/// spaces per level, children by their lowest rank; `xN` after the ranks where the count
/// of traces through the frame is not one per rank (samples, threads).
pub fn print_tree(tree: &StackTree, out: &mut dyn Write) -> std::io::Result<()> {
    fn walk(
        level: &std::collections::BTreeMap<String, sdm_overlay::filters::builtin::StackNode>,
        depth: usize,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        let mut kids: Vec<_> = level.iter().collect();
        kids.sort_by_key(|(f, n)| (n.ids.first(), f.as_str()));
        for (f, n) in kids {
            write!(out, "{}{}", "  ".repeat(depth), n.ids)?;
            if n.count != n.ids.len() {
                write!(out, " x{}", n.count)?;
            }
            writeln!(out, " {f}")?;
            walk(&n.children, depth + 1, out)?;
        }
        Ok(())
    }
    walk(&tree.roots, 0, out)
}

/// The classes, one per line: `[ranks] (representative R) main > f > leaf`.
pub fn print_classes(tree: &StackTree, out: &mut dyn Write) -> std::io::Result<()> {
    for c in tree.classes() {
        let rep = c.ids.first().map_or(String::new(), |r| r.to_string());
        writeln!(
            out,
            "{} (representative {rep}) {}",
            c.ids,
            c.path.join(" > ")
        )?;
    }
    Ok(())
}

/// Writes the tree as DOT to `path`.
pub fn write_dot(tree: &StackTree, path: &Path) -> anyhow::Result<()> {
    std::fs::write(path, tree.to_dot())
        .with_context(|| format!("bt --dot: cannot write {}", path.display()))
}

/// Renders the tree as SVG into `path` with graphviz's `dot`.
pub fn write_svg(tree: &StackTree, path: &Path) -> anyhow::Result<()> {
    use std::process::{Command, Stdio};
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .arg("-o")
        .arg(path)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => anyhow!(
                "bt --svg: graphviz's `dot` is not installed \
                 (Debian: apt-get install graphviz); --dot FILE writes the DOT text instead"
            ),
            _ => anyhow::Error::new(e).context("bt --svg: cannot run dot"),
        })?;
    let dot = tree.to_dot();
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(dot.as_bytes())
            .context("bt --svg: writing to dot")?;
    }
    let out = child.wait_with_output().context("bt --svg: dot")?;
    if !out.status.success() {
        bail!(
            "bt --svg: dot failed for {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdm_proto::IdSet;

    fn tree() -> StackTree {
        let mut t = StackTree::default();
        let r = |s: &str| s.parse::<IdSet>().unwrap();
        t.insert(["main", "step", "PMPI_Barrier", "poll"], &r("[0-6]"));
        t.insert(["main", "step", "compute"], &r("[7]"));
        t
    }

    #[test]
    fn options_parse_and_errors_name_the_option() {
        let a = BtArgs::parse("--functions --thread 2").unwrap();
        assert!(a.functions);
        assert_eq!(a.thread, Some(2));
        assert!(
            BtArgs::parse("--thread 0")
                .unwrap_err()
                .to_string()
                .contains("--thread \"0\"")
        );
        let a = BtArgs::parse("--samples 5 --interval 20 --classes 0-3").unwrap();
        assert_eq!(
            (a.samples, a.interval, a.classes, a.ids.as_str()),
            (5, Duration::from_millis(20), true, "0-3")
        );
        let a = BtArgs::parse("--dot /tmp/x.dot --svg /tmp/x.svg --json").unwrap();
        assert!(a.json);
        assert_eq!(a.dot.as_deref(), Some(Path::new("/tmp/x.dot")));
        assert_eq!(a.ids, "");
        assert!(
            BtArgs::parse("--samples")
                .unwrap_err()
                .to_string()
                .contains("--samples needs a value")
        );
        assert!(
            BtArgs::parse("--samples 0")
                .unwrap_err()
                .to_string()
                .contains("--samples \"0\"")
        );
        assert!(
            BtArgs::parse("--frob")
                .unwrap_err()
                .to_string()
                .contains("unknown option --frob")
        );
    }

    #[test]
    fn collapsing_stops_at_the_programs_first_call_into_a_library() {
        let f = |spec: &[(&str, bool)]| -> Vec<(String, bool)> {
            spec.iter().map(|(n, l)| (n.to_string(), *l)).collect()
        };
        let mpi = f(&[
            ("_start", false),
            ("__libc_start_main", false),
            ("main", true),
            ("step", true),
            ("PMPI_Barrier", false),
            ("ompi_coll_base_barrier", false),
            ("opal_progress", false),
        ]);
        assert_eq!(collapsed_len(&mpi), 5);
        let own = f(&[("_start", false), ("main", true), ("compute", true)]);
        assert_eq!(collapsed_len(&own), 3);
        let stripped = f(&[("_start", false), ("main", false), ("poll", false)]);
        assert_eq!(collapsed_len(&stripped), 3);
        assert!(BtArgs::parse("--classes").unwrap().collapsed());
        assert!(!BtArgs::parse("--classes --full").unwrap().collapsed());
        assert!(!BtArgs::parse("").unwrap().collapsed());
        assert!(BtArgs::parse("--collapse").unwrap().collapsed());
    }

    #[test]
    fn tree_and_classes_print_in_rank_order() {
        let mut out = Vec::new();
        print_tree(&tree(), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[0-7] main\n  [0-7] step\n    [0-6] PMPI_Barrier\n      [0-6] poll\n    [7] compute\n"
        );
        let mut out = Vec::new();
        print_classes(&tree(), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[0-6] (representative 0) main > step > PMPI_Barrier > poll\n\
             [7] (representative 7) main > step > compute\n"
        );
    }

    /// A frame as a server reports it.
    fn frame(function: &str, location: &str, module: &str, offset: i64) -> Value {
        Value::List(vec![
            Value::Int(0x7f00_0000 + offset),
            Value::Int(0),
            Value::Str(function.into()),
            Value::Str(location.into()),
            Value::Str(module.into()),
            Value::Int(offset),
        ])
    }

    /// A reply to `sdm_stacks`: one thread per stack (innermost frame first).
    fn threads(stacks: Vec<Vec<Value>>) -> Value {
        Value::List(
            stacks
                .into_iter()
                .enumerate()
                .map(|(i, f)| {
                    Value::List(vec![
                        Value::Int(100 + i as i64),
                        Value::Str("prog".into()),
                        Value::List(f),
                    ])
                })
                .collect(),
        )
    }

    #[test]
    fn flame_classes_are_numbered_as_bt_classes_numbers_them_with_full_too() {
        let r = |s: &str| s.parse::<IdSet>().unwrap();
        // Two ranks in one library call, caught at different frames inside it.
        let stack = |inner: &str| {
            vec![
                frame(inner, "", "libmpi.so", 0x40),
                frame("PMPI_Barrier", "", "libmpi.so", 0x20),
                frame("main", "prog.c:7", "prog", 0x1107),
            ]
        };
        for opts in ["--classes --flame f.svg", "--classes --full --flame f.svg"] {
            let a = BtArgs::parse(opts).unwrap();
            let mut s = Stacks::default();
            assert!(s.add_threads(&threads(vec![stack("poll")]), &r("[0]"), &a));
            assert!(s.add_threads(&threads(vec![stack("progress")]), &r("[1]"), &a));
            let paths = |c: Vec<sdm_overlay::filters::builtin::StackClass>| -> Vec<_> {
                c.into_iter().map(|c| c.path).collect()
            };
            assert_eq!(paths(s.traces.classes()), paths(s.tree.classes()), "{opts}");
        }
    }

    #[test]
    fn call_sites_are_nodes_of_their_own_and_json_has_the_fields() {
        let r = |s: &str| s.parse::<IdSet>().unwrap();
        let main_thread = |line: u32| {
            vec![
                frame("pause", "", "libc.so.6", 0xe1234),
                frame("wait_here", "prog.c:12", "prog", 0x1139),
                frame(
                    "main",
                    &format!("prog.c:{line}"),
                    "prog",
                    0x1100 + i64::from(line),
                ),
                frame("??", "", "", 0x7f12_3456),
            ]
        };
        let helper = vec![
            frame("clock_nanosleep", "", "libc.so.6", 0xd00),
            frame("helper", "prog.c:20", "prog", 0x1200),
        ];
        let mut s = Stacks::default();
        let a = BtArgs::parse("--classes").unwrap();
        assert!(s.add_threads(
            &threads(vec![main_thread(30), helper.clone()]),
            &r("[0,2]"),
            &a
        ));
        assert!(s.add_threads(&threads(vec![main_thread(32), helper]), &r("[1,3]"), &a));
        assert!(!s.add_threads(&Value::Str("error: x".into()), &r("[4]"), &a));
        let mut out = Vec::new();
        print_classes(&s.tree, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[0,2] (representative 0) ?? > main at prog.c:30 > wait_here at prog.c:12 > pause\n\
             [0-3] (representative 0) helper at prog.c:20 > clock_nanosleep\n\
             [1,3] (representative 1) ?? > main at prog.c:32 > wait_here at prog.c:12 > pause\n"
        );
        let j = s.classes_json();
        let main = &j[0]["frames"][1];
        assert_eq!(main["function"], "main");
        assert_eq!(main["file"], "prog.c");
        assert_eq!(main["line"], 30);
        assert_eq!(main["module"], "prog");
        assert_eq!(main["offset"], 0x1100 + 30);
        assert_eq!(j[0]["frames"][3]["module"], "libc.so.6");
        assert_eq!(j[0]["frames"][3]["line"], serde_json::Value::Null);
        // Coarser: by function, one class for the main threads; the lines differ there.
        let mut one = Stacks::default();
        let a = BtArgs::parse("--thread 3").unwrap();
        one.add_threads(&threads(vec![main_thread(30), vec![]]), &r("[0-1]"), &a);
        assert_eq!(one.without_thread, r("[0-1]"));
        assert!(one.tree.is_empty());
        let mut f = Stacks::default();
        let a = BtArgs::parse("--classes --functions --thread 1").unwrap();
        f.add_threads(&threads(vec![main_thread(30)]), &r("[0,2]"), &a);
        f.add_threads(&threads(vec![main_thread(32)]), &r("[1,3]"), &a);
        let c = f.tree.classes();
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].path, ["??", "main", "wait_here", "pause"]);
        let t = f.tree_json();
        assert_eq!(t[0]["children"][0]["frame"], "main");
        assert_eq!(t[0]["children"][0]["file"], "prog.c");
        assert_eq!(t[0]["children"][0]["line"], serde_json::Value::Null);
        assert_eq!(t[0]["children"][0]["ranks"], "[0-3]");
    }

    #[test]
    fn a_frame_without_a_symbol_is_named_by_its_file_and_offset() {
        let f = FrameFields::from_value(&frame("??", "", "libfoo.so", 0x2a)).unwrap();
        assert_eq!(f.label(false), "libfoo.so+0x2a");
        let f = FrameFields::from_value(&frame("??", "", "", 0x7f00_1234)).unwrap();
        assert_eq!(f.label(false), "??");
    }

    #[test]
    fn svg_is_rendered_by_dot_or_refused_clearly() {
        let dir = std::env::temp_dir().join(format!("sdm-stacks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("t.svg");
        // Where graphviz is installed (CI installs it) the SVG must be rendered; where it is
        // not, the error must say so.
        let have_dot = std::process::Command::new("dot")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        match write_svg(&tree(), &svg) {
            Ok(()) => {
                assert!(have_dot);
                let text = std::fs::read_to_string(&svg).unwrap();
                assert!(text.contains("<svg"), "{text}");
                assert!(text.contains("compute"), "{text}");
            }
            Err(e) => {
                assert!(!have_dot, "dot is installed, yet: {e}");
                assert!(e.to_string().contains("not installed"), "{e:#}");
            }
        }
        let bad = write_dot(&tree(), &dir.join("no/such/dir/t.dot")).unwrap_err();
        assert!(format!("{bad:#}").contains("cannot write"), "{bad:#}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
