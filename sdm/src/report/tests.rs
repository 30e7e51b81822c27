//! The report's page from stacks made here: escaping, the classes' colours, the tree, the
//! table and its compression, the dates.

use std::time::{Duration, SystemTime};

use sdm_omis::Value;
use sdm_proto::IdSet;

use super::*;
use crate::stacks::BtArgs;

fn ids(s: &str) -> IdSet {
    s.parse().unwrap()
}

/// A frame as a server reports it.
fn frame(function: &str, location: &str, module: &str) -> Value {
    Value::List(vec![
        Value::Int(0x7f00),
        Value::Int(0),
        Value::Str(function.into()),
        Value::Str(location.into()),
        Value::Str(module.into()),
        Value::Int(0x10),
    ])
}

/// Ranks [0-6] wait in a barrier called from `step<int>` (a name to escape), rank 7
/// computes.
fn stacks() -> Stacks {
    let a = BtArgs::parse("--html r.html").unwrap();
    let mut s = Stacks::default();
    let waiting = [
        frame("opal_progress", "", "libopen-pal.so"),
        frame("PMPI_Barrier", "", "libmpi.so"),
        frame("step<int>", "a<b>.c:12", "prog"),
        frame("main", "a<b>.c:30", "prog"),
    ];
    s.add_stack(&waiting, &ids("[0-6]"), &a);
    let computing = [
        frame("compute", "a<b>.c:5", "prog"),
        frame("main", "a<b>.c:30", "prog"),
    ];
    s.add_stack(&computing, &ids("[7]"), &a);
    s
}

fn row(rank: u32, path: &[&str]) -> RankRow {
    RankRow {
        rank,
        host: "node<1>".into(),
        pid: Some(1000 + rank),
        state: "running (S: sleeping)".into(),
        path: path.iter().map(|p| p.to_string()).collect(),
    }
}

fn rows(n: u32) -> Vec<RankRow> {
    (0..n)
        .map(|r| match r {
            7 => row(r, &["main at a<b>.c:30", "compute at a<b>.c:5"]),
            _ => row(
                r,
                &[
                    "main at a<b>.c:30",
                    "step<int> at a<b>.c:12",
                    "PMPI_Barrier",
                ],
            ),
        })
        .collect()
}

fn page(ranks: Vec<RankRow>) -> String {
    let s = stacks();
    let sources = Sources::default();
    render(&Report {
        stacks: &s,
        ranks,
        missing: vec![(ids("[9]"), "lost: <gone>".into())],
        job_size: 10,
        samples: 1,
        when: SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_399_600),
        command_line: Some(vec!["sdm".into(), "attach".into(), "12 34".into()]),
        console_commands: vec!["bt --html r.html".into()],
        sources: &sources,
    })
}

#[test]
fn what_comes_from_the_program_is_escaped() {
    let h = page(rows(8));
    assert!(!h.contains("step<int>"), "unescaped function");
    assert!(!h.contains("a<b>.c"), "unescaped path");
    assert!(!h.contains("node<1>"), "unescaped host");
    assert!(!h.contains("<gone>"), "unescaped reason");
    assert!(h.contains("step&lt;int&gt; at a&lt;b&gt;.c:12"));
    assert_eq!(escape("'\"&"), "&#39;&quot;&amp;");
    // The frames with a file that cannot be read here say so.
    assert!(h.contains("source not readable: a&lt;b&gt;.c"));
    // Nothing is fetched: the policy forbids it, and nothing names a URL.
    assert!(h.contains("default-src 'none'"));
    assert!(!h.contains("http://") && !h.contains("https://") && !h.contains(" src="));
}

#[test]
fn a_class_has_one_colour_in_the_list_the_tree_and_the_table() {
    let h = page(rows(8));
    let classes = stacks().tree.classes();
    assert_eq!(classes.len(), 2);
    assert_eq!(classes[0].ids, ids("[0-6]"));
    for (k, c) in classes.iter().enumerate() {
        let sw = swatch(k);
        // In its entry, on each tree node it passes through, in each of its ranks' rows.
        let uses = h.matches(&sw).count();
        let nodes = c.path.len();
        let rows = c.ids.len() as usize;
        assert_eq!(uses, 1 + nodes + rows, "class {k}: {sw}");
        assert!(h.contains(&format!("border-color:{}", colour(k))));
        // Its last node in the tree.
        assert!(h.contains(&format!("class=\"end\" style=\"--k:{}\"", colour(k))));
    }
    assert!(h.contains("<span id=\"class-count\">2</span>"));
    assert!(h.contains("2025-11-29 07:00:00 UTC"), "the date");
    assert!(h.contains("sdm attach &#39;12 34&#39;"), "the command line");
}

#[test]
fn the_tree_has_a_node_per_frame_with_its_ranks() {
    let h = page(rows(8));
    assert_eq!(
        h.matches("<details open>").count(),
        2,
        "main and step have callees"
    );
    assert!(h.contains("<span class=\"ranks\">[0-7]</span> <code>main at a&lt;b&gt;.c:30</code>"));
    assert!(h.contains("<span class=\"ranks\">[0-6]</span> <code>PMPI_Barrier</code>"));
    assert!(h.contains("<span class=\"ranks\">[7]</span> <code>compute at a&lt;b&gt;.c:5</code>"));
}

#[test]
fn every_rank_has_a_row_until_the_table_is_large() {
    let small = rows(8);
    let classes = stacks().tree.classes();
    let r = table::rows(&small, &classes);
    assert_eq!(r.len(), 8);
    assert_eq!(r[7].class, Some(1));
    assert_eq!(r[0].class, Some(0));
    // Past the limit, ranks that agree on all but rank and pid are one row.
    let mut large = rows(8);
    for rank in 8..300 {
        large.push(row(
            rank,
            &[
                "main at a<b>.c:30",
                "step<int> at a<b>.c:12",
                "PMPI_Barrier",
            ],
        ));
    }
    let r = table::rows(&large, &classes);
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!(r[0].ranks, ids("[0-6,8-299]"));
    assert_eq!(r[0].pids.len(), 299);
    assert_eq!(r[1].ranks, ids("[7]"));
    let mut h = String::new();
    table::write(&mut h, &large, &classes);
    assert!(h.contains("<td>0-6,8-299</td>"), "{h}");
    assert!(h.contains("299 pids, 1000&ndash;1299"), "{h}");
}

#[test]
fn dates_and_shell_words() {
    assert_eq!(utc(SystemTime::UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
    let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400 + 3661);
    assert_eq!(utc(leap), "2000-02-29 01:01:01 UTC");
    assert_eq!(shell_word("bt --html"), "'bt --html'");
    assert_eq!(shell_word("it's"), "'it'\\''s'");
    assert_eq!(shell_word("/tmp/r.html"), "/tmp/r.html");
    assert_eq!(shell_word(""), "''");
}
