//! `bt`'s views through real daemons (issue 36, item 6), on tests/programs/threads.c: four
//! ranks, each with a helper thread asleep in `helper_wait`, the main threads waiting in
//! `wait_here` called from two call sites (even ranks from one, odd from the other).
//!
//! Checked: frames name their file:line in the tree, in `--classes` and in `--json` (file,
//! line, function, module and offset as fields); the two call sites are two classes
//! (`--functions` makes them one); every thread is walked (the helpers are a branch of
//! their own, counted per thread), `thread N` and `info threads` show them; and once gdb
//! holds the ranks (after a `print`), `bt` prints the very same tree as the native walk, and
//! `status` the same place. After `stop`, `bt` and `cont`, every thread runs again.

use std::path::PathBuf;
use std::time::Duration;

use sdm::console::Console;
use sdm_e2e::console_command as run;

/// The line of the source holding `marker`.
fn line_of(marker: &str) -> u32 {
    sdm_e2e::source_line("threads", marker)
}

fn build() -> PathBuf {
    sdm_e2e::c_program("threads", &["-O0", "-g", "-pthread"])
}

/// The lines `bt --classes` printed that are classes.
fn classes(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.contains("(representative"))
        .collect()
}

/// Four ranks of the program, started (running) under a console.
async fn console() -> Console {
    started().await.0
}

/// Four ranks of the program, started (running) under a console; and their pids.
async fn started() -> (Console, Vec<u32>) {
    sdm_e2e::running_console(4, &build()).await
}

/// The state letter of each thread of `pid` (/proc/PID/task/*/stat).
fn thread_states(pid: u32) -> Vec<char> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.ok()?.path().join("stat")).ok()?;
            stat.rsplit_once(") ")?.1.chars().next()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cont_after_bt_lets_every_thread_run() {
    let (mut c, pids) = started().await;
    // Until every rank has its helper thread.
    for _ in 0..600 {
        if pids.iter().all(|&p| thread_states(p).len() == 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(run(&mut c, "stop").await, "[0-3] stopped\n");
    for &p in &pids {
        let states = thread_states(p);
        assert_eq!(states.len(), 2, "pid {p}");
        assert!(
            states.iter().all(|&s| s == 'T' || s == 't'),
            "pid {p}: {states:?}"
        );
    }
    run(&mut c, "bt").await;
    assert_eq!(run(&mut c, "cont").await, "[0-3] running\n");
    // No thread left stopped: each runs (or sleeps) again once continued.
    for &p in &pids {
        let mut states = thread_states(p);
        for _ in 0..500 {
            if states.iter().all(|&s| s != 'T' && s != 't') {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            states = thread_states(p);
        }
        assert!(
            states.iter().all(|&s| s != 'T' && s != 't'),
            "pid {p}: {states:?}"
        );
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bt_names_lines_splits_call_sites_and_walks_every_thread() {
    let even = line_of("LINE_SITE_EVEN");
    let odd = line_of("LINE_SITE_ODD");
    let pause = line_of("LINE_PAUSE");
    let helper = line_of("LINE_HELPER");
    let mut c = console().await;
    let main_even = format!("main at threads.c:{even} > wait_here at threads.c:{pause} > pause");
    let main_odd = format!("main at threads.c:{odd} > wait_here at threads.c:{pause} > pause");
    let helper_path = format!("helper_wait at threads.c:{helper} > sleep");
    // Until every rank's threads wait where the program leaves them (past start-up, the
    // helper started): bt stops the running ranks itself, and continues them.
    let mut out = String::new();
    for _ in 0..600 {
        out = run(&mut c, "bt --classes").await;
        let cl = classes(&out);
        let done = cl.len() == 3
            && cl
                .iter()
                .any(|l| l.starts_with("[0,2] ") && l.ends_with(&main_even))
            && cl
                .iter()
                .any(|l| l.starts_with("[1,3] ") && l.ends_with(&main_odd))
            && cl
                .iter()
                .any(|l| l.starts_with("[0-3] ") && l.contains(&helper_path));
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Two call sites of wait_here: two classes; the helpers a class of their own.
    let cl = classes(&out);
    assert_eq!(cl.len(), 3, "{out}");
    assert!(
        cl[0].starts_with("[0,2] (representative 0) ") && cl[0].ends_with(&main_even),
        "{out}"
    );
    assert!(
        cl[1].starts_with("[0-3] (representative 0) ") && cl[1].contains(&helper_path),
        "{out}"
    );
    assert!(
        cl[2].starts_with("[1,3] (representative 1) ") && cl[2].ends_with(&main_odd),
        "{out}"
    );

    // By function only: one class for the main threads.
    run(&mut c, "stop").await;
    let coarse = run(&mut c, "bt --classes --functions").await;
    let cl = classes(&coarse);
    assert_eq!(cl.len(), 2, "{coarse}");
    assert!(
        cl.iter()
            .any(|l| l.starts_with("[0-3] ") && l.ends_with("main > wait_here > pause")),
        "{coarse}"
    );

    // The tree: file:line on every frame that has one, each thread a branch, the helper's
    // frames once per rank (one helper each).
    let tree = run(&mut c, "bt").await;
    for node in [
        format!("[0,2] main at threads.c:{even}"),
        format!("[1,3] main at threads.c:{odd}"),
        format!("[0-3] helper_wait at threads.c:{helper}"),
    ] {
        assert!(
            tree.lines().any(|l| l.trim_start() == node),
            "no {node:?} in\n{tree}"
        );
    }
    assert!(!tree.contains(" 0x"), "a bare address in\n{tree}");

    // JSON: the fields of each frame.
    let json = run(&mut c, "bt --classes --json").await;
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    let class = v["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["ranks"] == "[1,3]")
        .unwrap_or_else(|| panic!("no class [1,3] in {json}"));
    let frames = class["frames"].as_array().unwrap();
    let main = frames
        .iter()
        .find(|f| f["function"] == "main")
        .unwrap_or_else(|| panic!("no main in {class}"));
    assert_eq!(main["file"], "threads.c", "{main}");
    assert_eq!(main["line"], odd, "{main}");
    let exe = build();
    assert_eq!(
        main["module"].as_str(),
        exe.file_name().and_then(|f| f.to_str()),
        "{main}"
    );
    assert!(main["offset"].is_u64(), "{main}");
    let libc = frames.last().unwrap();
    assert_eq!(libc["function"], "pause", "{class}");
    assert_eq!(libc["line"], serde_json::Value::Null, "{class}");
    assert!(
        libc["module"]
            .as_str()
            .is_some_and(|m| m.starts_with("libc")),
        "{class}"
    );

    // Threads: listed, and one at a time.
    let threads = run(&mut c, "info threads").await;
    let rows: Vec<&str> = threads.lines().collect();
    assert_eq!(rows.len(), 2, "{threads}");
    assert!(
        rows[0].starts_with("[0-3] 1 \"")
            && rows[0].ends_with(&format!("called from wait_here at threads.c:{pause}")),
        "{threads}"
    );
    assert!(
        rows[1].starts_with("[0-3] 2 \"")
            && rows[1].ends_with(&format!("called from helper_wait at threads.c:{helper}")),
        "{threads}"
    );
    assert_eq!(run(&mut c, "thread 2").await, "thread 2\n");
    let only = run(&mut c, "bt --classes").await;
    let cl = classes(&only);
    assert_eq!(cl.len(), 1, "{only}");
    assert!(cl[0].contains(&helper_path), "{only}");
    let mut none = Vec::new();
    c.command("bt --thread 3", &mut none).await.unwrap();
    assert_eq!(
        String::from_utf8(none).unwrap(),
        "[0-3] no thread 3 (`info threads` lists them)\n"
    );
    assert_eq!(run(&mut c, "thread all").await, "thread all\n");

    // gdb holds the ranks once a symbolic command ran (an expression only gdb evaluates):
    // the same tree, frame for frame.
    let native = run(&mut c, "bt").await;
    let native_status = run(&mut c, "status").await;
    assert_eq!(native_status, "[0-3] stopped in pause\n");
    let printed = run(&mut c, "print rank + 0").await;
    assert_eq!(printed.lines().count(), 4, "{printed}");
    let held = run(&mut c, "bt").await;
    assert_eq!(held, native, "gdb's walk differs from the native one");
    assert_eq!(run(&mut c, "status").await, native_status, "gdb's status");
    c.shutdown().await;
}
