//! The hang report of `bt --html FILE` and `sdm attach ... --report FILE`: one
//! self-contained HTML page (inline CSS and a few lines of inline script, no network, no
//! other file) a person can open in a browser or mail on. It holds a header (when, the job's
//! size, how many classes), the classes with each one's representative stack and the source
//! lines around its frames ([`source`]), the merged call tree (collapsible `<details>`, each
//! node with its count and rank set, the classes coloured alike everywhere), the per-rank
//! table ([`table`]) and the commands that reproduce it.
//!
//! Everything that comes from the programs (function names, paths, source text, host names,
//! states) is HTML-escaped ([`escape`]); the page's Content-Security-Policy forbids every
//! fetch, so a report can never reach the network.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::SystemTime;

use anyhow::Context;
use sdm_overlay::filters::builtin::{StackClass, StackNode};
use sdm_proto::IdSet;

use crate::stacks::Stacks;

pub mod source;
pub mod table;

pub use source::{Excerpt, Sources};
pub use table::RankRow;

/// The page's style sheet, inlined.
const STYLE: &str = include_str!("report/report.css");

/// The page's script (expand and collapse the tree, pick a class), inlined.
const SCRIPT: &str = include_str!("report/report.js");

/// The classes' colours, in class order (then again, the class number tells them apart).
const PALETTE: [&str; 10] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f",
];

/// What a report shows.
pub struct Report<'a> {
    /// The merged stacks (`bt`'s, collapsed as its `--classes` are unless `--full`).
    pub stacks: &'a Stacks,
    /// One row per rank asked, in rank order.
    pub ranks: Vec<RankRow>,
    /// Ranks without a stack, and why (an error, lost, timed out).
    pub missing: Vec<(IdSet, String)>,
    /// The job's size (its ranks).
    pub job_size: u64,
    /// Samples per rank.
    pub samples: u32,
    /// When the stacks were taken.
    pub when: SystemTime,
    /// The `sdm` command line of this front-end (its arguments), if known.
    pub command_line: Option<Vec<String>>,
    /// The console commands run before the report, the `bt` that made it last.
    pub console_commands: Vec<String>,
    /// Where source files are found on this host.
    pub sources: &'a Sources,
}

/// The colour of class `k` (numbered from 0).
pub fn colour(k: usize) -> &'static str {
    PALETTE[k % PALETTE.len()]
}

/// `s` with `&`, `<`, `>`, `"` and `'` escaped: safe in text and in quoted attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Writes the report of `r` to `path`; the error names the file.
pub fn write(path: &Path, r: &Report<'_>) -> anyhow::Result<()> {
    std::fs::write(path, render(r))
        .with_context(|| format!("bt --html: cannot write the report {}", path.display()))
}

/// The console commands of `sdm attach --report FILE`: `bt --html FILE`, then `detach`;
/// the error names FILE when it cannot be written (checked now, before anything is
/// attached: an existing file is left as it is, a new one is not left behind).
pub fn one_shot(path: &Path) -> anyhow::Result<Vec<String>> {
    let shown = path.display();
    let text = path
        .to_str()
        .filter(|t| !t.is_empty() && !t.contains(char::is_whitespace))
        .ok_or_else(|| {
            anyhow::anyhow!("--report {shown:?}: give a path without spaces (the console's `bt --html` takes one word)")
        })?;
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("--report: cannot write the report {shown}"))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(vec![format!("bt --html {text}"), "detach".to_owned()])
}

/// The page.
pub fn render(r: &Report<'_>) -> String {
    let classes = r.stacks.tree.classes();
    let mut h = String::new();
    h.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n\
         <meta name=\"viewport\" content=\"width=device-width\">\n",
    );
    let _ = writeln!(
        h,
        "<title>sdm hang report: {} ranks, {} classes</title>",
        r.job_size,
        classes.len()
    );
    let _ = writeln!(h, "<style>{STYLE}</style></head><body>");
    header(&mut h, r, &classes);
    tree(&mut h, r.stacks, &classes);
    class_list(&mut h, r, &classes);
    table::write(&mut h, &r.ranks, &classes);
    commands(&mut h, r);
    let _ = writeln!(h, "<script>{SCRIPT}</script>\n</body></html>");
    h
}

/// The swatch of class `k`: its colour and its name (`C1`), linking to its entry.
fn swatch(k: usize) -> String {
    format!(
        "<a class=\"sw\" href=\"#class-{n}\" data-class=\"{k}\" style=\"background:{c}\">C{n}</a>",
        n = k + 1,
        c = colour(k)
    )
}

/// The title and the facts of the job.
fn header(h: &mut String, r: &Report<'_>, classes: &[StackClass]) {
    let hosts: std::collections::BTreeSet<&str> = r.ranks.iter().map(|x| x.host.as_str()).collect();
    let _ = writeln!(h, "<header><h1>sdm hang report</h1><dl class=\"facts\">");
    let mut fact = |name: &str, value: String| {
        let _ = writeln!(h, "<dt>{name}</dt><dd>{value}</dd>");
    };
    fact("taken", escape(&utc(r.when)));
    fact(
        "job",
        format!(
            "{} on {} ({} in this report)",
            plural(r.job_size, "rank"),
            plural(hosts.len() as u64, "host"),
            r.ranks.len()
        ),
    );
    fact(
        "classes",
        format!(
            "<span id=\"class-count\">{}</span> (ranks whose stacks end at the same frame)",
            classes.len()
        ),
    );
    fact("samples", format!("{} per rank", r.samples));
    for (ids, why) in &r.missing {
        fact(
            "no stack",
            format!("{} {}", escape(&ids.to_string()), escape(why)),
        );
    }
    h.push_str("</dl></header>\n");
}

/// The classes, each with its ranks and its representative's stack, innermost frame first,
/// and the source lines around the frames that have them.
fn class_list(h: &mut String, r: &Report<'_>, classes: &[StackClass]) {
    h.push_str("<section id=\"classes\"><h2>Classes</h2>\n");
    if classes.is_empty() {
        h.push_str("<p>No stacks.</p>\n");
    }
    for (k, c) in classes.iter().enumerate() {
        let rep = c.ids.first().map_or(String::new(), |x| x.to_string());
        let _ = writeln!(
            h,
            "<article class=\"class\" id=\"class-{n}\" data-class=\"{k}\" data-ranks=\"{ranks}\" \
             style=\"border-color:{col}\">\n<h3>{sw} <span class=\"ranks\">{ranks}</span> \
             <span class=\"muted\">{count}, representative rank {rep}</span> \
             <code class=\"leaf\">{leaf}</code></h3>",
            n = k + 1,
            sw = swatch(k),
            col = colour(k),
            ranks = escape(&c.ids.to_string()),
            count = plural(c.count, "trace"),
            leaf = escape(c.path.last().map_or("", String::as_str)),
        );
        h.push_str("<ol class=\"stack\" start=\"0\">\n");
        for label in c.path.iter().rev() {
            frame(h, r, label);
        }
        h.push_str("</ol></article>\n");
    }
    h.push_str("</section>\n");
}

/// One frame of a representative stack: its name, its module, and its source lines.
fn frame(h: &mut String, r: &Report<'_>, label: &str) {
    let fields = r.stacks.frame(label);
    let module = fields
        .map(|f| f.module.as_str())
        .filter(|m| !m.is_empty())
        .map(|m| format!(" <span class=\"muted\">in {}</span>", escape(m)))
        .unwrap_or_default();
    let _ = write!(h, "<li><code>{}</code>{module}", escape(label));
    match fields.and_then(|f| r.sources.excerpt(f)) {
        Some(Excerpt::Lines {
            path,
            first,
            lines,
            marked,
        }) => {
            let _ = writeln!(
                h,
                "<div class=\"src\"><div class=\"path\">{}</div><pre>",
                escape(&path.display().to_string())
            );
            for (i, text) in lines.iter().enumerate() {
                let n = first + i as u32;
                let mark = if n == marked { " class=\"here\"" } else { "" };
                // Each line a block of its own: no newline between them in the <pre>.
                let _ = write!(
                    h,
                    "<span{mark}><span class=\"ln\">{n:>5}</span> {}</span>",
                    escape(text)
                );
            }
            h.push_str("</pre></div>");
        }
        Some(Excerpt::NotReadable { file, why }) => {
            let _ = write!(
                h,
                " <span class=\"unread\">source not readable: {} ({})</span>",
                escape(&file),
                escape(&why)
            );
        }
        None => {}
    }
    h.push_str("</li>\n");
}

/// The merged call tree: a `<details>` per node with callees, open, each node with its rank
/// set, its count, and the swatches of the classes through it; a class's last node in its
/// colour.
fn tree(h: &mut String, stacks: &Stacks, classes: &[StackClass]) {
    h.push_str(
        "<section id=\"tree\"><h2>Call tree</h2>\n<p class=\"tools\">\
         <button type=\"button\" id=\"expand\">expand all</button> \
         <button type=\"button\" id=\"collapse\">collapse all</button> \
         <span class=\"muted\">[ranks] xN traces where not one per rank; \
         outermost frame first</span></p>\n<ul class=\"tree\">\n",
    );
    let mut path = Vec::new();
    walk(h, &stacks.tree.roots, &mut path, classes);
    h.push_str("</ul></section>\n");
}

/// The nodes of one level of the tree, `path` the labels above them.
fn walk(
    h: &mut String,
    level: &BTreeMap<String, StackNode>,
    path: &mut Vec<String>,
    classes: &[StackClass],
) {
    // Children in rank order, as the console prints them.
    let mut nodes: Vec<_> = level.iter().collect();
    nodes.sort_by_key(|(_, n)| n.ids.first());
    for (label, n) in nodes {
        path.push(label.clone());
        let through: Vec<usize> = (0..classes.len())
            .filter(|&k| classes[k].path.starts_with(path))
            .collect();
        let ends: Vec<usize> = through
            .iter()
            .copied()
            .filter(|&k| classes[k].path == *path)
            .collect();
        let style = match ends.first() {
            Some(&k) => format!(" class=\"end\" style=\"--k:{}\"", colour(k)),
            None => String::new(),
        };
        let count = if n.count == n.ids.len() {
            String::new()
        } else {
            format!(" <span class=\"count\">x{}</span>", n.count)
        };
        let swatches: String = through.iter().map(|&k| swatch(k)).collect();
        let node = format!(
            "<span class=\"ranks\">{}</span>{count} <code>{}</code> {swatches}",
            escape(&n.ids.to_string()),
            escape(label)
        );
        if n.children.is_empty() {
            let _ = writeln!(h, "<li{style}><span class=\"node\">{node}</span></li>");
        } else {
            let _ = writeln!(h, "<li{style}><details open><summary>{node}</summary><ul>");
            walk(h, &n.children, path, classes);
            h.push_str("</ul></details></li>\n");
        }
        path.pop();
    }
}

/// The commands that made the report: the `sdm` command line and the console's commands.
fn commands(h: &mut String, r: &Report<'_>) {
    h.push_str("<section id=\"commands\"><h2>Reproduce</h2>\n");
    if let Some(argv) = &r.command_line {
        let line: Vec<String> = argv.iter().map(|a| shell_word(a)).collect();
        let _ = writeln!(
            h,
            "<p>The sdm command line:</p><pre class=\"cmd\">{}</pre>",
            escape(&line.join(" "))
        );
    }
    if !r.console_commands.is_empty() {
        let _ = writeln!(
            h,
            "<p>The console's commands, in order (the last made this report):</p>\
             <pre class=\"cmd\">{}</pre>",
            escape(&r.console_commands.join("\n"))
        );
    }
    h.push_str(
        "<p class=\"muted\">One-shot, as STAT's: <code>sdm attach LAUNCHER_PID --report \
         FILE</code> attaches, takes the stacks, writes the report and detaches.</p></section>\n",
    );
}

/// `word` as a POSIX shell reads it back: bare when it holds only safe characters, else in
/// single quotes.
pub fn shell_word(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%[]".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// `n thing` or `n things`.
fn plural(n: u64, thing: &str) -> String {
    match n {
        1 => format!("1 {thing}"),
        n => format!("{n} {thing}s"),
    }
}

/// `t` as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests;
