//! `bt` in the console: STAT's views of the merged stack traces. Its options, the samples
//! merged into one call-prefix tree with a count per edge, and the views: the indented
//! tree (2D), the equivalence classes, Graphviz DOT and SVG, and JSON for each.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sdm_overlay::filters::builtin::StackTree;

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
    /// JSON for this command (as the console's `--json` gives for every command).
    pub json: bool,
    /// Collapse each stack below the program's first call into code without source
    /// information (MPI, libc: see [`collapsed_len`]); `None`: only for `--classes`.
    pub collapse: Option<bool>,
    /// The ranks (the rest of the line).
    pub ids: String,
}

/// The usage line of `bt`.
pub const BT_USAGE: &str = "bt [--samples K] [--interval MS] [--classes] [--collapse|--full] \
     [--dot FILE] [--svg FILE] [--json] [IDS]";

impl BtArgs {
    /// Parses the words after `bt`; the error names the option that was wrong.
    pub fn parse(rest: &str) -> Result<Self, String> {
        let mut a = BtArgs {
            samples: 1,
            interval: Duration::from_millis(100),
            classes: false,
            dot: None,
            svg: None,
            json: false,
            collapse: None,
            ids: String::new(),
        };
        let mut words = rest.split_whitespace();
        let mut ids = Vec::new();
        while let Some(w) = words.next() {
            let mut value = |name: &str| {
                words
                    .next()
                    .ok_or_else(|| format!("bt: {name} needs a value ({BT_USAGE})"))
            };
            match w {
                "--samples" => {
                    let v = value(w)?;
                    a.samples = v
                        .parse()
                        .ok()
                        .filter(|&k| (1..=10_000).contains(&k))
                        .ok_or_else(|| {
                            format!("bt: --samples {v:?}: give a count from 1 to 10000")
                        })?;
                }
                "--interval" => {
                    let v = value(w)?;
                    let ms: u64 = v.parse().map_err(|_| {
                        format!("bt: --interval {v:?}: give milliseconds, e.g. --interval 100")
                    })?;
                    a.interval = Duration::from_millis(ms);
                }
                "--classes" => a.classes = true,
                "--json" => a.json = true,
                "--collapse" => a.collapse = Some(true),
                "--full" => a.collapse = Some(false),
                "--dot" => a.dot = Some(PathBuf::from(value(w)?)),
                "--svg" => a.svg = Some(PathBuf::from(value(w)?)),
                w if w.starts_with("--") => {
                    return Err(format!("bt: unknown option {w} ({BT_USAGE})"));
                }
                w => ids.push(w),
            }
        }
        a.ids = ids.join(" ");
        Ok(a)
    }

    /// Whether stacks are collapsed: `--collapse` or `--full` if given, else for
    /// `--classes` (where a wait inside MPI is one place, whatever frame of the progress
    /// engine each rank was caught in) and not for the tree.
    pub fn collapsed(&self) -> bool {
        self.collapse.unwrap_or(self.classes)
    }
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

/// The classes as JSON: `[{"ranks", "representative", "path": [...], "count"}]`.
pub fn classes_json(tree: &StackTree) -> serde_json::Value {
    serde_json::Value::Array(
        tree.classes()
            .into_iter()
            .map(|c| {
                serde_json::json!({
                    "ranks": c.ids.to_string(),
                    "representative": c.ids.first(),
                    "path": c.path,
                    "count": c.count,
                })
            })
            .collect(),
    )
}

/// Writes the tree as DOT to `path`.
pub fn write_dot(tree: &StackTree, path: &Path) -> Result<(), String> {
    std::fs::write(path, tree.to_dot())
        .map_err(|e| format!("bt --dot: cannot write {}: {e}", path.display()))
}

/// Renders the tree as SVG into `path` with graphviz's `dot`.
pub fn write_svg(tree: &StackTree, path: &Path) -> Result<(), String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .arg("-o")
        .arg(path)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "bt --svg: graphviz's `dot` is not installed \
                 (Debian: apt-get install graphviz); --dot FILE writes the DOT text instead"
                .to_owned(),
            _ => format!("bt --svg: cannot run dot: {e}"),
        })?;
    let dot = tree.to_dot();
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(dot.as_bytes())
            .map_err(|e| format!("bt --svg: writing to dot: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("bt --svg: dot: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "bt --svg: dot failed for {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
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
                .contains("--samples needs a value")
        );
        assert!(
            BtArgs::parse("--samples 0")
                .unwrap_err()
                .contains("--samples \"0\"")
        );
        assert!(
            BtArgs::parse("--frob")
                .unwrap_err()
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
        let j = classes_json(&tree());
        assert_eq!(j[1]["ranks"], "[7]");
        assert_eq!(j[1]["representative"], 7);
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
                assert!(e.contains("not installed"), "{e}");
            }
        }
        let bad = write_dot(&tree(), &dir.join("no/such/dir/t.dot")).unwrap_err();
        assert!(bad.contains("cannot write"), "{bad}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
