//! Flame graphs of sampled stacks: `bt --flame FILE.svg --folded FILE` and `sdm top --flame
//! FILE.svg --folded FILE` (its CPU samples). Each trace (one thread of one rank in one
//! sample) is kept with the ranks it came from, so the whole job and each class can be drawn.
//!
//! - The folded text is what flamegraph.pl, inferno and speedscope read: one line per
//!   distinct stack, `outermost;caller;callee COUNT`, COUNT the traces (samples x ranks x
//!   threads), so the counts of a file add up to every trace drawn in it.
//! - The SVG is rendered from the same lines by the `inferno` crate, colours by function name
//!   (the same function has the same colour in every graph).
//! - Layout: FILE holds the whole job; beside it one file per class, `NAME.class-N.EXT` for
//!   `NAME.EXT` (`job.svg` gives `job.class-1.svg`…), class N as `bt --classes` numbers
//!   them (by lowest rank). A class's file holds the traces that end at the class (its
//!   ranks' threads there, in every sample), with every frame the graph keeps: the classes
//!   split the whole job, their counts add up to its count, and where `--classes` collapses
//!   a class at the program's call into a library, its graph shows where in the library
//!   the samples fell.
//! - Frames are named by function (a frame without a symbol by `module+offset`, a Python
//!   frame by its Python function) as `bt --functions` names them: a flame graph's widths are
//!   per function, where line-granular frames would split one function into a box per line.
//!   The classes are `bt --classes`'s: line-granular unless `--functions`, collapsed
//!   unless `--full`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use sdm_overlay::filters::builtin::{StackClass, StackTree};
use sdm_proto::IdSet;

use crate::stacks::FrameFields;

/// At most this many classes get a file of their own (samples of busy code can make a
/// class per sampled line); the console says which were left out.
pub const MAX_CLASS_FILES: usize = 32;

/// One distinct trace: its path as `bt --classes` names it, and its frames for the graph.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Trace {
    /// The class path (labels as the tree names them, collapsed as `--classes` does).
    class: Vec<String>,
    /// The flame graph's frames, outermost first.
    frames: Vec<String>,
}

/// The traces of a `bt` or `top`, each with the ranks it came from.
#[derive(Debug, Default, Clone)]
pub struct Traces {
    /// Per distinct trace: the ranks it came from and how many times it was seen (once per
    /// rank in each sample), as the tree counts a path.
    traces: BTreeMap<Trace, (IdSet, u64)>,
}

/// A frame's name in folded text: `;` separates frames and a line is one stack, so neither
/// may appear inside a name.
fn folded_name(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

impl Traces {
    /// Adds one stack (outermost frame first) seen once on each rank of `ids`: `named` the
    /// tree's labels with whether each frame has a source line, `fields` the frames'
    /// fields, `collapse` whether the graph's stacks are collapsed as `--collapse` does,
    /// `collapse_class` whether the class path is, as `bt --classes` collapses it (not
    /// with `--full`).
    pub fn add(
        &mut self,
        named: &[(String, bool)],
        fields: &[FrameFields],
        ids: &IdSet,
        collapse: bool,
        collapse_class: bool,
    ) {
        if named.is_empty() || ids.is_empty() {
            return;
        }
        let collapsed_len = crate::stacks::collapsed_len(named);
        let class_len = if collapse_class {
            collapsed_len
        } else {
            named.len()
        };
        let flame_len = if collapse {
            collapsed_len
        } else {
            fields.len()
        };
        let trace = Trace {
            class: named[..class_len].iter().map(|(l, _)| l.clone()).collect(),
            frames: fields[..flame_len]
                .iter()
                .map(|f| folded_name(&f.label(true)))
                .collect(),
        };
        let (from, n) = self.traces.entry(trace).or_default();
        from.union_with(ids);
        *n = n.saturating_add(ids.len());
    }

    /// Whether no trace was added.
    pub fn is_empty(&self) -> bool {
        self.traces.is_empty()
    }

    /// The classes as `bt --classes` gives them for these traces.
    pub fn classes(&self) -> Vec<StackClass> {
        let mut tree = StackTree::default();
        for (t, (ids, n)) in &self.traces {
            tree.insert_counted(t.class.iter().map(String::as_str), ids, *n);
        }
        tree.classes()
    }

    /// The folded lines (`a;b;c`, count) of the traces that end at the class path `class`
    /// (every trace where `None`), sorted by stack; each trace counted once per rank.
    pub fn folded(&self, class: Option<&[String]>) -> Vec<(String, u64)> {
        let mut lines: BTreeMap<String, u64> = BTreeMap::new();
        for (t, (_, n)) in &self.traces {
            if class.is_none_or(|c| c == t.class.as_slice()) {
                *lines.entry(t.frames.join(";")).or_default() += n;
            }
        }
        lines.into_iter().collect()
    }

    /// Every rank with a trace.
    pub fn ranks(&self) -> IdSet {
        let mut all = IdSet::new();
        for (ids, _) in self.traces.values() {
            all.union_with(ids);
        }
        all
    }
}

/// Where the flame graph and the folded text go (either may be absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlameFiles {
    /// The SVG of the whole job (`--flame`).
    pub svg: Option<PathBuf>,
    /// The folded text of the whole job (`--folded`).
    pub folded: Option<PathBuf>,
}

impl FlameFiles {
    /// Whether any file was asked for.
    pub fn wanted(&self) -> bool {
        self.svg.is_some() || self.folded.is_some()
    }

    /// The files of class `n` (from 1), beside the whole job's.
    fn of_class(&self, n: usize) -> Self {
        Self {
            svg: self.svg.as_deref().map(|p| class_path(p, n)),
            folded: self.folded.as_deref().map(|p| class_path(p, n)),
        }
    }

    /// The files, in order (SVG first).
    fn paths(&self) -> Vec<PathBuf> {
        self.svg.iter().chain(&self.folded).cloned().collect()
    }
}

/// The file of class `n` beside `path`: `dir/job.svg` gives `dir/job.class-N.svg`, `dir/job`
/// gives `dir/job.class-N`.
pub fn class_path(path: &Path, n: usize) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.class-{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}.class-{n}"),
    };
    path.with_file_name(name)
}

/// One graph written: whose traces, how many, into which files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The class's number (from 1) and path; `None` for the whole job.
    pub class: Option<(usize, Vec<String>)>,
    /// The ranks drawn.
    pub ranks: IdSet,
    /// The traces drawn (the sum of the folded counts).
    pub count: u64,
    /// The files written.
    pub files: Vec<PathBuf>,
}

impl Written {
    /// The line the console prints for it: `flame: whole job [0-3], 24 samples: FILES`, or
    /// `flame: class 1 [0,2], 12 samples: FILES (main > wait_here > pause)`.
    pub fn line(&self) -> String {
        let files: Vec<String> = self.files.iter().map(|p| p.display().to_string()).collect();
        match &self.class {
            None => format!(
                "flame: whole job {}, {} samples: {}",
                self.ranks,
                self.count,
                files.join(" ")
            ),
            Some((n, path)) => format!(
                "flame: class {n} {}, {} samples: {} ({})",
                self.ranks,
                self.count,
                files.join(" "),
                path.join(" > ")
            ),
        }
    }

    /// The same as JSON: `class` (null for the whole job), `path`, `ranks`, `count`, `files`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "class": self.class.as_ref().map(|(n, _)| n),
            "path": self.class.as_ref().map(|(_, p)| p),
            "ranks": self.ranks.to_string(),
            "count": self.count,
            "files": self.files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        })
    }
}

/// Writes the whole job's graph into `files` and each class's beside it (at most
/// [`MAX_CLASS_FILES`]); `title` names what was sampled (`bt`, `sdm top CPU`). The error names
/// the file that could not be written; with no trace at all nothing is written.
pub fn write_all(traces: &Traces, files: &FlameFiles, title: &str) -> anyhow::Result<Vec<Written>> {
    let what = || {
        files
            .paths()
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if traces.is_empty() {
        bail!(
            "flame graph {}: no stacks to draw (no rank gave one; for `top`: no thread was \
             running on a CPU in any sample)",
            what()
        );
    }
    let all = traces.ranks();
    let mut out = vec![write_one(
        traces.folded(None),
        files,
        &format!("{title}: {all}"),
        None,
        all,
    )?];
    for (i, c) in traces.classes().into_iter().enumerate() {
        let n = i + 1;
        if n > MAX_CLASS_FILES {
            break;
        }
        let lines = traces.folded(Some(&c.path));
        let sub = c.path.join(" > ");
        let title = format!("{title}: class {n} {}", c.ids);
        out.push(write_one(
            lines,
            &files.of_class(n),
            &title,
            Some((n, c.path.clone(), sub)),
            c.ids,
        )?);
    }
    Ok(out)
}

/// Writes one graph: the folded `lines` and their SVG.
fn write_one(
    lines: Vec<(String, u64)>,
    files: &FlameFiles,
    title: &str,
    class: Option<(usize, Vec<String>, String)>,
    ranks: IdSet,
) -> anyhow::Result<Written> {
    let text: Vec<String> = lines.iter().map(|(s, n)| format!("{s} {n}")).collect();
    if let Some(path) = &files.folded {
        let mut body = text.join("\n");
        body.push('\n');
        std::fs::write(path, body)
            .with_context(|| format!("flame graph: cannot write {}", path.display()))?;
    }
    if let Some(path) = &files.svg {
        let svg = render(&text, title, class.as_ref().map(|(_, _, s)| s.as_str()))
            .with_context(|| format!("flame graph: cannot render {}", path.display()))?;
        std::fs::write(path, svg)
            .with_context(|| format!("flame graph: cannot write {}", path.display()))?;
    }
    Ok(Written {
        count: lines.iter().map(|(_, n)| n).sum(),
        class: class.map(|(n, p, _)| (n, p)),
        ranks,
        files: files.paths(),
    })
}

/// The SVG of folded `lines` (inferno), titled; colours by function name, the same on
/// every run.
fn render(lines: &[String], title: &str, subtitle: Option<&str>) -> std::io::Result<Vec<u8>> {
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = title.to_owned();
    opt.subtitle = subtitle.map(str::to_owned);
    opt.hash = true;
    opt.deterministic = true;
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut svg)?;
    svg.flush()?;
    Ok(svg)
}

/// Prints the graphs written, as text lines or one JSON object (`bt --json`: `flame`, the
/// graphs as [`Written::to_json`]); says which classes got no file of their own (more than
/// [`MAX_CLASS_FILES`]).
pub fn print_written(
    written: &[Written],
    traces: &Traces,
    json: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    let classes = traces.classes().len();
    let left = classes.saturating_sub(MAX_CLASS_FILES);
    if json {
        let graphs: Vec<serde_json::Value> = written.iter().map(|w| w.to_json()).collect();
        let j = serde_json::json!({"command": "bt", "flame": graphs, "classes": classes,
            "classes_without_file": left});
        writeln!(out, "{j}")?;
        return Ok(());
    }
    for w in written {
        writeln!(out, "{}", w.line())?;
    }
    if left > 0 {
        writeln!(
            out,
            "flame: {left} more classes have no file of their own (at most {}; \
             --functions or --collapse merges classes)",
            MAX_CLASS_FILES
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, line: Option<u32>) -> FrameFields {
        FrameFields {
            function: function.into(),
            file: line.map(|_| "prog.c".into()),
            line,
            module: "prog".into(),
            offset: Some(0x10),
        }
    }

    /// Adds `frames` (outermost first) from `ids`, labelled as the tree labels them.
    fn add(t: &mut Traces, frames: &[FrameFields], ids: &str) {
        let named: Vec<(String, bool)> = frames
            .iter()
            .map(|f| (f.label(false), f.line.is_some()))
            .collect();
        t.add(&named, frames, &ids.parse().unwrap(), false, true);
    }

    fn job() -> Traces {
        let mut t = Traces::default();
        let main = |l| frame("main", Some(l));
        for _ in 0..3 {
            add(
                &mut t,
                &[main(10), frame("wait", Some(3)), frame("pause", None)],
                "[0,2]",
            );
            add(
                &mut t,
                &[main(12), frame("wait", Some(3)), frame("pause", None)],
                "[1,3]",
            );
            add(
                &mut t,
                &[frame("helper", Some(20)), frame("sleep", None)],
                "[0-3]",
            );
        }
        t
    }

    #[test]
    fn counts_are_samples_times_ranks_and_classes_are_bt_classes() {
        let t = job();
        let all = t.folded(None);
        assert_eq!(
            all,
            [
                ("helper;sleep".to_owned(), 12),
                ("main;wait;pause".to_owned(), 12)
            ]
        );
        let classes = t.classes();
        let ids: Vec<String> = classes.iter().map(|c| c.ids.to_string()).collect();
        // By lowest rank, then path: the helpers' class first.
        assert_eq!(ids, ["[0-3]", "[0,2]", "[1,3]"]);
        assert_eq!(
            classes[1].path,
            ["main at prog.c:10", "wait at prog.c:3", "pause"]
        );
        let one = t.folded(Some(&classes[1].path));
        assert_eq!(
            one,
            [("main;wait;pause".to_owned(), 3 * 2)],
            "two ranks, three samples"
        );
        let sum: u64 = classes
            .iter()
            .flat_map(|c| t.folded(Some(&c.path)))
            .map(|l| l.1)
            .sum();
        assert_eq!(sum, 24, "the classes split the job");
    }

    #[test]
    fn files_sit_beside_the_whole_jobs_and_errors_name_them() {
        assert_eq!(
            class_path(Path::new("/d/job.svg"), 2),
            Path::new("/d/job.class-2.svg")
        );
        assert_eq!(class_path(Path::new("job"), 1), Path::new("job.class-1"));
        let dir = std::env::temp_dir().join(format!("sdm-flame-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = FlameFiles {
            svg: Some(dir.join("j.svg")),
            folded: Some(dir.join("j.folded")),
        };
        let w = write_all(&job(), &files, "bt").unwrap();
        assert_eq!(w.len(), 4);
        assert_eq!(w[0].count, 24);
        assert_eq!(w[1].count, 12);
        assert_eq!(w[2].count, 6);
        assert!(w[2].line().starts_with("flame: class 2 [0,2], 6 samples: "));
        let svg = std::fs::read_to_string(dir.join("j.class-3.svg")).unwrap();
        assert!(svg.contains("<svg") && svg.contains("wait"), "{svg}");
        let folded = std::fs::read_to_string(dir.join("j.class-2.folded")).unwrap();
        assert_eq!(folded, "main;wait;pause 6\n");
        let bad = FlameFiles {
            svg: Some(dir.join("no/such/j.svg")),
            folded: None,
        };
        let e = format!("{:#}", write_all(&job(), &bad, "bt").unwrap_err());
        assert!(
            e.contains("cannot write") && e.contains("no/such/j.svg"),
            "{e}"
        );
        let e = write_all(&Traces::default(), &files, "bt").unwrap_err();
        assert!(e.to_string().contains("no stacks to draw"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cpu_samples_keep_the_running_threads_only() {
        use sdm_omis::Value;
        // `[tid, "name", [frames innermost first], "state"]`, as `sdm_stacks(1)` replies.
        let thread = |f: &[&str], state: &str| {
            let frames = f
                .iter()
                .map(|n| {
                    Value::List(vec![
                        Value::Int(1),
                        Value::Int(0),
                        Value::Str((*n).into()),
                        Value::Str(String::new()),
                        Value::Str("prog".into()),
                        Value::Int(0x10),
                    ])
                })
                .collect();
            Value::List(vec![
                Value::Int(7),
                Value::Str("prog".into()),
                Value::List(frames),
                Value::Str(state.into()),
            ])
        };
        let reply = Value::List(vec![
            thread(&["burn", "main"], "R"),
            thread(&["pause", "idle"], "S"),
        ]);
        let mut a = crate::stacks::BtArgs::parse("--functions --folded x").unwrap();
        a.on_cpu = true;
        let mut s = crate::stacks::Stacks::default();
        assert!(s.add_threads(&reply, &"[0-2]".parse().unwrap(), &a));
        assert_eq!(s.traces.folded(None), [("main;burn".to_owned(), 3)]);
        a.on_cpu = false;
        let mut every = crate::stacks::Stacks::default();
        every.add_threads(&reply, &"[0-2]".parse().unwrap(), &a);
        assert_eq!(every.traces.folded(None).len(), 2);
    }

    #[test]
    fn separators_never_appear_inside_a_frame() {
        assert_eq!(folded_name("a;b\nc"), "a:b c");
    }
}
