//! The hang report (issue 40, item 3): `bt --html FILE` in the console and `sdm attach
//! LAUNCHER --report FILE`, through real daemons.
//!
//! - A hung MPI job (tests/programs/mpi_hang.c under mpirun: every rank but the last in a
//!   barrier, the last computing) reported in one shot by `sdm attach --report`, the page
//!   loaded in headless chromium: no error of any kind (script errors, console errors,
//!   policy violations), its script works, a screenshot of the asked size; the DOM holds
//!   every class the printed tree ends in (ranks and leaf frame), the two the program makes,
//!   the source line of the computing rank marked, and one row per rank with its host,
//!   pid, state, class and leaf frame. The job is left running and untraced.
//! - tests/programs/threads.c under `sdm run`'s console: `bt --html` shows the lines of
//!   both call sites around their marked line, every rank's row, and names a file it
//!   cannot write.
//! - An unwritable `--report FILE` is refused before anything is attached, naming it.

use std::path::{Path, PathBuf};
use std::process::Command;

use sdm_e2e::browser;
use sdm_e2e::hungjob::HungJob;
use sdm_e2e::procs::state_and_tracer;

/// A fresh directory for this test's files.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sdm-report-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `text` as the report escapes it (and chromium serializes text nodes).
fn escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The text between `from` and the next `to` after each `from` in `s`.
fn between<'a>(s: &'a str, from: &str, to: &str) -> Vec<&'a str> {
    s.match_indices(from)
        .filter_map(|(i, _)| {
            let rest = &s[i + from.len()..];
            rest.find(to).map(|end| &rest[..end])
        })
        .collect()
}

/// `html` without its tags.
fn text_of(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// The classes of a page: (ranks, leaf frame) of each class's entry, in page order.
fn classes_of(page: &str) -> Vec<(String, String)> {
    between(page, "<article class=\"class\"", "</h3>")
        .into_iter()
        .map(|head| {
            let ranks = between(head, "data-ranks=\"", "\"")[0].to_owned();
            let leaf = between(head, "<code class=\"leaf\">", "</code>")[0].to_owned();
            (ranks, leaf)
        })
        .collect()
}

/// The rows of the page's rank table, each a list of its cells' texts.
fn rows_of(page: &str) -> Vec<Vec<String>> {
    let body = between(page, "<tbody>", "</tbody>")[0];
    between(body, "<tr", "</tr>")
        .into_iter()
        .map(|row| {
            between(row, "<td>", "</td>")
                .into_iter()
                .map(text_of)
                .collect()
        })
        .collect()
}

/// The leaves of `bt`'s printed tree (`[ranks] [xN] frame`, two spaces a level): the
/// classes' ranks and leaf frames, sorted.
fn tree_leaves(tree: &str) -> Vec<(String, String)> {
    let nodes: Vec<(usize, &str)> = tree
        .lines()
        .filter(|l| l.trim_start().starts_with('['))
        .map(|l| (l.len() - l.trim_start().len(), l.trim_start()))
        .collect();
    let mut leaves: Vec<(String, String)> = nodes
        .iter()
        .enumerate()
        .filter(|(i, (depth, _))| nodes.get(i + 1).is_none_or(|(next, _)| next <= depth))
        .map(|(_, (_, node))| {
            let (ranks, rest) = node.split_once(' ').unwrap();
            let frame = match rest.split_once(' ') {
                Some((count, frame))
                    if count.starts_with('x') && count[1..].parse::<u64>().is_ok() =>
                {
                    frame
                }
                _ => rest,
            };
            (ranks.to_owned(), frame.to_owned())
        })
        .collect();
    leaves.sort();
    leaves
}

/// Every node of `bt`'s printed tree (`[ranks] [xN] frame`): its ranks and frame, sorted.
fn printed_nodes(tree: &str) -> Vec<(String, String)> {
    let mut nodes: Vec<(String, String)> = tree
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('['))
        .map(|node| {
            let (ranks, rest) = node.split_once(' ').unwrap();
            let frame = match rest.split_once(' ') {
                Some((count, frame))
                    if count.starts_with('x') && count[1..].parse::<u64>().is_ok() =>
                {
                    frame
                }
                _ => rest,
            };
            (ranks.to_owned(), frame.to_owned())
        })
        .collect();
    nodes.sort();
    nodes
}

/// Every node of the page's call tree section (`<section id="tree">`): its ranks and
/// frame, sorted; panics if the page has no such section.
fn page_tree_nodes(page: &str) -> Vec<(String, String)> {
    let section = between(page, "<section id=\"tree\">", "</section>");
    assert_eq!(section.len(), 1, "the page has one call tree section");
    let unescape = |s: &str| {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    };
    let mut nodes: Vec<(String, String)> = between(section[0], "<span class=\"ranks\">", "</code>")
        .into_iter()
        .map(|node| {
            let ranks = node.split("</span>").next().unwrap();
            let label = node.split("<code>").nth(1).expect("a node's frame");
            (unescape(ranks), unescape(label))
        })
        .collect();
    nodes.sort();
    nodes
}

/// The marked line of a source excerpt: line `n` holding `text`.
fn marked_line(n: u32, text: &str) -> String {
    format!(
        "<span class=\"here\"><span class=\"ln\">{n:>5}</span> {}</span>",
        escaped(text)
    )
}

/// Line `n` (from 1) of tests/programs/NAME.c.
fn source_text(name: &str, n: u32) -> String {
    let src = std::fs::read_to_string(sdm_e2e::program_source(name)).unwrap();
    src.lines().nth(n as usize - 1).unwrap().to_owned()
}

#[test]
#[cfg_attr(
    not(sdm_have_mpirun),
    ignore = "needs mpirun and mpicc (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
#[cfg_attr(
    not(sdm_have_chromium),
    ignore = "needs chromium (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn a_hang_report_opens_in_a_browser_with_every_class_and_rank() {
    let n = 4;
    let last = n - 1;
    let dir = scratch("attach");
    let html = dir.join("report.html");
    let job = HungJob::start("mpirun", n);
    let pids = job.ranks();
    assert_eq!(pids.len(), n as usize);
    let out = Command::new(sdm_e2e::sdm())
        .args(["attach", &job.pid().to_string(), "--report"])
        .arg(&html)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let context = format!("{stdout}{stderr}");
    assert!(out.status.success(), "{:?}: {context}", out.status);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.contains(&format!("report written to {}", html.display()).as_str()),
        "{context}"
    );
    assert_eq!(
        lines.last().copied(),
        Some(format!("[0-{last}] detached").as_str()),
        "{context}"
    );
    // Detached: every rank runs on, untraced.
    for &pid in &pids {
        assert_eq!(state_and_tracer(pid).1, 0, "rank pid {pid} still traced");
    }

    // In the browser: loaded without any error, its script working.
    let loaded = browser::load(&html);
    assert_eq!(
        loaded.errors(),
        0,
        "errors in the page: {:?}",
        loaded.root_attribute("data-sdm-error-log")
    );
    assert_eq!(loaded.root_attribute("data-sdm-loaded"), Some("1"));
    let dom = &loaded.dom;

    // Every class the printed tree ends in, with its ranks and leaf frame; the program's
    // two among them (MPI's own threads are classes of their own).
    let classes = classes_of(dom);
    let mut sorted = classes.clone();
    sorted.sort();
    let tree = stdout.split("report written to").next().unwrap();
    assert_eq!(sorted, tree_leaves(tree), "{context}");
    assert!(
        between(dom, "<span id=\"class-count\">", "<")[0] == classes.len().to_string(),
        "the header's count"
    );
    let waiting = classes
        .iter()
        .position(|(r, leaf)| *r == format!("[0-{}]", last - 1) && leaf.contains("Barrier"))
        .unwrap_or_else(|| panic!("no class of the waiting ranks: {classes:?}"));
    let computing = classes
        .iter()
        .position(|(r, leaf)| *r == format!("[{last}]") && leaf == "compute at mpi_hang.c:11")
        .unwrap_or_else(|| panic!("no class of the computing rank: {classes:?}"));
    // The computing rank's line, marked, from the program's source.
    assert!(
        dom.contains(&marked_line(11, &source_text("mpi_hang", 11))),
        "no marked line 11"
    );

    // One row per rank: host, pid, state, class, leaf.
    let rows = rows_of(dom);
    assert_eq!(rows.len(), n as usize, "{rows:?}");
    let host = sdm_server::monitor::hostname();
    for (rank, row) in rows.iter().enumerate() {
        let class = if rank as u32 == last {
            computing
        } else {
            waiting
        };
        assert_eq!(row.len(), 6, "{row:?}");
        assert_eq!(row[0], rank.to_string(), "{row:?}");
        assert_eq!(row[1], host, "{row:?}");
        assert_eq!(row[2], pids[rank].to_string(), "{row:?}");
        assert!(row[3].starts_with("running ("), "{row:?}");
        assert_eq!(row[4], format!("C{}", class + 1), "{row:?}");
        assert_eq!(row[5], classes[class].1, "{row:?}");
    }

    // The page's script, the first class's swatch clicked: every row of another class
    // dimmed.
    let dimmed: usize = loaded
        .root_attribute("data-sdm-dimmed")
        .and_then(|d| d.parse().ok())
        .expect("the page's script ran");
    assert_eq!(dimmed, rows.iter().filter(|r| r[4] != "C1").count());

    // A picture of the page, the tree at its top: first the tree is in the DOM, every
    // node of the printed tree (a blank page would make a picture of the right size too).
    let nodes = page_tree_nodes(dom);
    assert!(nodes.len() > classes.len(), "{nodes:?}");
    assert_eq!(nodes, printed_nodes(tree), "{context}");
    let png = dir.join("report.png");
    assert_eq!(browser::screenshot(&html, &png, 1200, 900), (1200, 900));
    assert!(std::fs::metadata(&png).unwrap().len() > 1000);
    let (state, _) = state_and_tracer(job.pid());
    assert_ne!(state, 'Z', "the launcher ended");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_report_is_refused_naming_it() {
    let bad = "/no/such/dir/report.html";
    // Refused before the launcher is even looked at.
    let out = Command::new(sdm_e2e::sdm())
        .args(["attach", "1", "--report", bad])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot write the report {bad}")),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!Path::new(bad).exists());
}

/// tests/programs/threads.c, four ranks under a console, their pids.
async fn threads_console() -> (sdm::console::Console, Vec<u32>) {
    let program = sdm_e2e::c_program("threads", &["-O0", "-g", "-pthread"]);
    sdm_e2e::running_console(4, &program).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bt_html_shows_the_source_of_each_call_site_and_every_rank() {
    let even = sdm_e2e::source_line("threads", "LINE_SITE_EVEN");
    let odd = sdm_e2e::source_line("threads", "LINE_SITE_ODD");
    let pause = sdm_e2e::source_line("threads", "LINE_PAUSE");
    let (mut c, pids) = threads_console().await;
    // Until every rank's threads wait where the program leaves them.
    for _ in 0..600 {
        let out = sdm_e2e::console_command(&mut c, "bt --classes").await;
        if out
            .lines()
            .filter(|l| l.contains("(representative"))
            .count()
            == 3
            && out.contains(&format!("wait_here at threads.c:{pause} > pause"))
            && out.contains("helper_wait")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let dir = scratch("console");
    let html = dir.join("r.html");
    let out = sdm_e2e::console_command(&mut c, &format!("bt --html {}", html.display())).await;
    assert!(
        out.ends_with(&format!("report written to {}\n", html.display())),
        "{out}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    let classes = classes_of(&page);
    assert_eq!(classes.len(), 3, "{classes:?}");
    for ranks in ["[0,2]", "[1,3]", "[0-3]"] {
        assert!(
            classes.iter().any(|(r, _)| r == ranks),
            "{ranks}: {classes:?}"
        );
    }
    // Both call sites' lines, marked, and the line both wait at.
    for n in [even, odd, pause] {
        assert!(
            page.contains(&marked_line(n, &source_text("threads", n))),
            "line {n} not marked"
        );
    }
    let rows = rows_of(&page);
    assert_eq!(rows.len(), 4, "{rows:?}");
    for (rank, row) in rows.iter().enumerate() {
        assert_eq!(row[0], rank.to_string(), "{row:?}");
        assert_eq!(row[2], pids[rank].to_string(), "{row:?}");
        assert_eq!(row[5], "pause", "{row:?}");
    }
    // The command that made it is named.
    assert!(page.contains(&escaped(&format!("bt --html {}", html.display()))));
    // In JSON, a line of its own after the view's.
    let again = dir.join("again.html");
    let json =
        sdm_e2e::console_command(&mut c, &format!("bt --json --html {}", again.display())).await;
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{json}");
    assert!(lines[0]["tree"].is_array(), "{json}");
    assert_eq!(
        lines[1],
        serde_json::json!({"command": "bt", "report": again.display().to_string()})
    );
    assert!(again.is_file());
    // A file that cannot be written is an error naming it; the console goes on.
    let bad = dir.join("no/such/dir/r.html");
    let mut sink = Vec::new();
    let err = c
        .command(&format!("bt --html {}", bad.display()), &mut sink)
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains(&format!("cannot write the report {}", bad.display())),
        "{err:#}"
    );
    assert_eq!(
        sdm_e2e::console_command(&mut c, "status").await,
        "[0-3] running\n"
    );
    c.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
