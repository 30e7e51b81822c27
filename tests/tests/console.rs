//! The debugger console over real processes: a global stop leaves every program process in
//! state T (read from /proc, as ps does) and cont resumes them; stop and cont sent back to
//! back never leave a mix; bt merges stacks into one call-prefix tree; a breakpoint stops
//! exactly the ranks that reach it; bad OMIS gets an error naming the position. The console
//! explains itself (`help`), numbers, lists and deletes breakpoints (set while running or
//! stopped), samples running programs for `bt`, says events in plain words, sums and groups
//! counters, and reports failed commands (a scripted run exits 1).

use sdm_e2e as support;

use std::process::Command;
use std::time::Duration;

use sdm::console::{Console, Flow};
use sdm_client::session::{Session, SessionOptions};
use sdm_omis::Value;
use sdm_proto::{IdSet, Status, SyncMode};
use support::console_command as run;
use support::procs::{alive, state};
use support::{sdm_ok, spinner};

async fn console(n: u32, mode: &str) -> (Console, Vec<u32>) {
    let prog = spinner();
    started(n, prog.to_str().unwrap(), &[mode]).await
}

/// A console over `n` servers, each running `program` with `args`; and their pids.
async fn started(n: u32, program: &str, args: &[&str]) -> (Console, Vec<u32>) {
    let opts = SessionOptions {
        n,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(n));
    let mut c = Console::new(s, false);
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let lines = c.start_program(program, &args, "pty").await.unwrap();
    let mut pids = Vec::new();
    for l in &lines {
        assert_eq!(l.status, Status::Replied, "{l:?}");
        match l.reply.as_ref().and_then(|r| r.results.first()) {
            Some(Value::Int(pid)) => pids.push(*pid as u32),
            other => panic!("start failed on {}: {other:?} {}", l.ids, l.text),
        }
    }
    assert_eq!(pids.len(), n as usize);
    (c, pids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_stop_and_continue() {
    let (mut c, pids) = console(8, "spin").await;
    // Let every rank get past the dynamic loader into spin() (a busy machine is slow).
    for _ in 0..100 {
        run(&mut c, "stop").await;
        let settled = run(&mut c, "status")
            .await
            .contains("[0-7] stopped in spin");
        run(&mut c, "cont").await;
        if settled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(run(&mut c, "stop").await.trim(), "[0-7] stopped");
    // Stopped: in a job-control stop (T), or a ptrace stop (t) once a stack walk has
    // traced the process.
    for &p in &pids {
        assert!(
            matches!(state(p), Some('T' | 't')),
            "pid {p} after stop: {:?}",
            state(p)
        );
    }
    let status = run(&mut c, "status").await;
    assert_eq!(
        status.trim(),
        "[0-7] stopped in spin at spinner.c:9",
        "{status}"
    );
    assert_eq!(run(&mut c, "cont").await.trim(), "[0-7] running");
    for &p in &pids {
        assert!(!matches!(state(p), Some('T' | 't')), "pid {p} after cont");
    }
    // Part of the job only.
    assert_eq!(run(&mut c, "stop 2-3").await.trim(), "[2-3] stopped");
    let status = run(&mut c, "status").await;
    assert!(
        status.contains("[0-1,4-7] running") && status.contains("[2-3] stopped"),
        "{status}"
    );
    run(&mut c, "kill").await;
    c.shutdown().await;
    for &p in &pids {
        assert!(!alive(p), "pid {p} survived");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_cont_back_to_back_never_mix() {
    let (mut c, pids) = console(8, "spin").await;
    let all = IdSet::all(8);
    for round in 0..5 {
        let s = c.session();
        let a = s
            .send_command(sdm_client::service::omis(
                &all,
                SyncMode::WaitAll,
                "1 [] stop()",
            ))
            .await
            .unwrap();
        let b = s
            .send_command(sdm_client::service::omis(
                &all,
                SyncMode::WaitAll,
                "2 [] cont()",
            ))
            .await
            .unwrap();
        s.collect(a, &all).await.unwrap();
        s.collect(b, &all).await.unwrap();
        let states: Vec<_> = pids.iter().map(|&p| state(p)).collect();
        assert!(
            states.iter().all(|s| !matches!(s, Some('T' | 't'))),
            "round {round}: after stop;cont {states:?}"
        );
        let a = s
            .send_command(sdm_client::service::omis(
                &all,
                SyncMode::WaitAll,
                "3 [] cont()",
            ))
            .await
            .unwrap();
        let b = s
            .send_command(sdm_client::service::omis(
                &all,
                SyncMode::WaitAll,
                "4 [] stop()",
            ))
            .await
            .unwrap();
        s.collect(a, &all).await.unwrap();
        s.collect(b, &all).await.unwrap();
        let states: Vec<_> = pids.iter().map(|&p| state(p)).collect();
        assert!(
            states.iter().all(|s| matches!(s, Some('T' | 't'))),
            "round {round}: after cont;stop {states:?}"
        );
        s.send_command(sdm_client::service::omis(
            &all,
            SyncMode::WaitAll,
            "5 [] cont()",
        ))
        .await
        .unwrap();
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bt_merges_stacks_into_one_tree() {
    let (mut c, _) = console(8, "funcs").await;
    // A rank stopped before it got past the dynamic loader has no main on its stack yet:
    // let the programs run until every rank is in its function (a busy machine is slow).
    let mut tree = String::new();
    for _ in 0..100 {
        run(&mut c, "stop").await;
        tree = run(&mut c, "bt --functions").await;
        if tree.contains("[0-7] main") {
            break;
        }
        run(&mut c, "cont").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every rank passes main; ranks split by the function they block in.
    assert!(tree.contains("[0-7] main"), "{tree}");
    for (ranks, f) in [
        ("[0,3,6]", "func_a"),
        ("[1,4,7]", "func_b"),
        ("[2,5]", "func_c"),
    ] {
        assert!(tree.contains(&format!("{ranks} {f}\n")), "{f}: {tree}");
        assert!(tree.contains(&format!("{ranks} spin\n")), "{f}: {tree}");
    }
    assert_eq!(
        tree.matches(" main\n").count(),
        1,
        "one merged tree: {tree}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakpoint_stops_exactly_the_ranks_that_reach_it() {
    let (mut c, _) = console(6, "odd").await;
    let out = run(&mut c, "break reached_by_odd").await;
    assert!(
        out.starts_with("[0-5] breakpoint 1 at reached_by_odd\n"),
        "{out}"
    );
    // Wait for the three odd ranks to report the hit (some may have been printed with
    // the break command's own output already).
    let mut hit = IdSet::new();
    for l in out
        .lines()
        .filter(|l| l.contains(" breakpoint 1 hit in reached_by_odd() at spinner.c:"))
    {
        let ids: IdSet = l.split_whitespace().next().unwrap().parse().unwrap();
        hit.union_with(&ids);
    }
    while hit.len() < 3 {
        let ev = tokio::time::timeout(Duration::from_secs(30), c.session().next_event())
            .await
            .expect("breakpoint events")
            .unwrap();
        if ev.kind == sdm_proto::Kind::Stdio {
            continue; // an idle marker of a rank waiting at the breakpoint
        }
        assert!(String::from_utf8_lossy(&ev.payload).starts_with("breakpoint(\"reached_by_odd\""));
        hit.union_with(&ev.source);
    }
    assert_eq!(hit.to_string(), "[1,3,5]");
    let status = run(&mut c, "status").await;
    assert!(status.contains("[0,2,4] running"), "{status}");
    assert!(
        status.contains("[1,3,5] stopped at breakpoint in reached_by_odd"),
        "{status}"
    );
    // Continuing steps over the breakpoint; they reach it again.
    assert_eq!(run(&mut c, "cont 1").await.trim(), "[1] running");
    c.shutdown().await;
}

/// Each rank loads the program elsewhere (ASLR): a hit said by function and line, not by
/// address, reads the same on every rank, and the hits of the four odd ranks of eight
/// print as exactly one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakpoint_hits_of_many_ranks_merge_into_one_line() {
    let (mut c, _) = console(8, "odd").await;
    let mut out = run(&mut c, "break reached_by_odd").await;
    assert!(
        out.starts_with("[0-7] breakpoint 1 at reached_by_odd\n"),
        "{out}"
    );
    let line = support::source_line("spinner", "void reached_by_odd(void)");
    let want = format!("[1,3,5,7] breakpoint 1 hit in reached_by_odd() at spinner.c:{line}");
    // Every odd rank stops at the hit: the output holds all four, however they merged.
    let hit = |out: &str| -> IdSet {
        let mut ids = IdSet::new();
        for l in out.lines().filter(|l| l.contains(" breakpoint 1 hit")) {
            ids.union_with(&l.split_whitespace().next().unwrap().parse().unwrap());
        }
        ids
    };
    for _ in 0..300 {
        if hit(&out).len() >= 4 {
            break;
        }
        out += &run(&mut c, "sleep 0.1").await;
    }
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(" hit")).collect();
    assert_eq!(lines, vec![want.as_str()], "{out}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_omis_and_errors() {
    let (mut c, _) = console(4, "spin").await;
    let out = run(
        &mut c,
        "omis 7 [0-1] number_of_nodes(); 8 [2-3] print(\"hi\")",
    )
    .await;
    assert!(out.contains("7 [0-1] number_of_nodes(4)"), "{out}");
    assert!(out.contains("8 [2-3] print(\"hi\")"), "{out}");
    let s = c.session();
    let g = s
        .request_command(sdm_client::service::omis(
            &IdSet::all(4),
            SyncMode::WaitAll,
            "1 [] stop(",
        ))
        .await
        .unwrap();
    assert_eq!(g.len(), 1);
    let text = String::from_utf8_lossy(&g[0].payload);
    assert!(
        text.contains("bad request") && text.contains("column"),
        "{text}"
    );
    let mut out = Vec::new();
    let e = c.command("omis 1 [] stop(", &mut out).await.unwrap_err();
    assert!(e.to_string().contains("column"), "{e}");
    c.shutdown().await;
}

#[test]
fn cli_run_stop_sleep_cont_status() {
    let prog = spinner();
    let args = [
        "run",
        "-n",
        "4",
        "-c",
        "stop",
        "-c",
        "sleep 0.5",
        "-c",
        "cont",
        "-c",
        "status",
        "--",
    ];
    let mut all: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    all.push(prog.as_os_str());
    let text = sdm_ok(all);
    // The programs still running at the end are killed, and their ends are printed
    // before sdm exits (nothing in flight is dropped).
    assert_eq!(
        text,
        "[0-3] stopped\n[0-3] running\n[0-3] running\n[0-3] killed by signal SIGTERM\n"
    );
}

/// The ranks that sent an event (or event-action reply) containing `needle`: from what
/// was already printed (`printed`), then from what the console prints while it sleeps,
/// until `want` ranks are seen (or 30 s pass).
async fn ranks_with(c: &mut Console, printed: &str, needle: &str, want: u64) -> IdSet {
    let mut text = printed.to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut seen = IdSet::new();
        for l in text.lines().filter(|l| l.contains(needle)) {
            seen.union_with(&l.split_whitespace().next().unwrap().parse().unwrap());
        }
        if seen.len() >= want || std::time::Instant::now() > deadline {
            if seen.len() < want {
                eprintln!("looked for {needle:?} in:\n{text}");
            }
            return seen;
        }
        text += &run(c, "sleep 0.3").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_actions_run_where_the_breakpoint_is_hit() {
    let (mut c, _) = console(4, "odd").await;
    let out = run(
        &mut c,
        r#"omis 1 [] breakpoint("reached_by_odd"): 2 [$0] node_info(); 3 [$0] print($1)"#,
    )
    .await;
    assert_eq!(
        out.trim(),
        "[0-3] 1 [0-3] breakpoint(0)",
        "stored, disabled"
    );
    // Stored requests start disabled: nothing runs until enable.
    let out = run(&mut c, "omis 4 [] enable(1)").await;
    assert!(out.contains("[0-3] 4 [0-3] enable(0)"), "{out}");
    let hit = ranks_with(&mut c, &out, "3 [] print(\"reached_by_odd\")", 2).await;
    assert_eq!(
        hit.to_string(),
        "[1,3]",
        "the actions ran exactly where it was hit"
    );
    // Actions must run where the event occurs; other receivers are refused clearly.
    let out = run(&mut c, r#"omis 5 [] breakpoint("main"): 6 [] stop()"#).await;
    assert!(out.contains("must run where the event occurs"), "{out}");
    let out = run(&mut c, "omis 7 [] nosuch(1): 8 [$0] stop()").await;
    assert!(out.contains("nosuch is not an event"), "{out}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_disable_delete_and_process_stopped_events() {
    let (mut c, _) = console(2, "spin").await;
    run(
        &mut c,
        r#"omis 1 [] process_stopped([]): 2 [$0] print("saw stop")"#,
    )
    .await;
    run(
        &mut c,
        r#"omis 3 [] process_continued([]): 4 [$0] print("saw cont")"#,
    )
    .await;
    // Disabled: a stop raises nothing.
    let out = run(&mut c, "stop").await + &run(&mut c, "cont").await;
    run(&mut c, "omis 5 [] enable(1), 6 [] enable(3)").await;
    let out = out + &run(&mut c, "stop").await;
    let out = out + &run(&mut c, "cont").await + &run(&mut c, "sleep 1").await;
    let stops = ranks_with(&mut c, &out, "2 [] print(\"saw stop\")", 2).await;
    assert_eq!(stops, IdSet::all(2));
    let conts = ranks_with(&mut c, &out, "4 [] print(\"saw cont\")", 2).await;
    assert_eq!(conts, IdSet::all(2));
    run(&mut c, "omis 7 [] disable(1)").await;
    let out = run(&mut c, "stop").await + &run(&mut c, "sleep 0.5").await;
    assert!(!out.contains("saw stop"), "disabled again: {out}");
    let out = run(&mut c, "omis 8 [] delete(1)").await + &run(&mut c, "omis 9 [] enable(1)").await;
    assert!(out.contains("no request 1 on this node"), "{out}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_defined_events() {
    let (mut c, _) = console(4, "spin").await;
    let out = run(&mut c, "omis 1 [] raise_event(5, [1])").await;
    assert!(out.contains("event 5 is not defined"), "{out}");
    run(&mut c, "omis 2 [] define_user_event(5)").await;
    run(&mut c, "omis 3 [] user_event(5): 4 [$0] print($2)").await;
    run(&mut c, "omis 5 [] enable(3)").await;
    let out = run(&mut c, r#"omis 6 [2] raise_event(5, [7, "from two"])"#).await;
    assert_eq!(
        out.lines().next(),
        Some("[2] 6 [2] raise_event(0)"),
        "{out}"
    );
    let got = ranks_with(&mut c, &out, "4 [] print(\"from two\")", 1).await;
    assert_eq!(got.to_string(), "[2]", "raised on node 2 only");
    // Destroying the event deletes the requests that wait for it.
    run(&mut c, "omis 7 [] destroy_user_event(5)").await;
    let out = run(&mut c, "omis 8 [] enable(3)").await;
    assert!(out.contains("no request 3"), "{out}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_to_running_processes_and_leave_them_running() {
    let prog = spinner();
    let mut procs: Vec<std::process::Child> = (0..2)
        .map(|rank| {
            Command::new(&prog)
                .arg("funcs")
                .env("SDM_RANK", rank.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let pids: Vec<u32> = procs.iter().map(|p| p.id()).collect();
    let opts = SessionOptions {
        n: 2,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    let mut c = Console::new(s, false);
    let lines = c.attach(&pids).await.unwrap();
    for l in &lines {
        assert_eq!(l.status, Status::Replied, "{l:?}");
        assert!(!l.text.contains("error"), "{}", l.text);
    }
    assert_eq!(run(&mut c, "stop").await.trim(), "[0-1] stopped");
    let bt = run(&mut c, "bt").await;
    assert!(
        bt.contains("[0] func_a") && bt.contains("[1] func_b"),
        "{bt}"
    );
    assert_eq!(run(&mut c, "cont").await.trim(), "[0-1] running");
    c.shutdown().await;
    // Not started by the tree: detached and still running, not killed.
    std::thread::sleep(Duration::from_millis(200));
    for (p, pid) in procs.iter_mut().zip(&pids) {
        assert!(p.try_wait().unwrap().is_none(), "process {pid} was killed");
        let st = state(*pid);
        assert!(
            matches!(st, Some('R' | 'S')),
            "process {pid} in state {st:?}"
        );
    }
    for mut p in procs {
        let _ = p.kill();
        let _ = p.wait();
    }
}

/// Runs `sdm run ARGS -- spinner spin` and returns its exit code, stdout and stderr.
fn sdm_run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(sdm_e2e::sdm())
        .args(args)
        .arg("--")
        .arg(spinner())
        .arg("spin")
        .output()
        .expect("running sdm");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_lists_every_command_and_explains_one() {
    let (code, out, err) = sdm_run(&["run", "-n", "2", "-c", "help", "-c", "help break"]);
    assert_eq!(code, Some(0), "{out} {err}");
    for c in sdm::commands::COMMANDS {
        assert!(out.contains(&format!("  {} ", c.name)), "{}: {out}", c.name);
    }
    assert!(
        out.contains("usage: break FUNCTION|0xADDRESS|FILE:LINE [IDS] [if COND]\n"),
        "{out}"
    );
}

#[test]
fn failed_commands_make_a_scripted_run_exit_1() {
    // An id the tree does not have: an error naming the tree's size, not a lost id.
    let (code, out, err) = sdm_run(&["run", "-n", "4", "-c", "stop [99]", "-c", "status"]);
    assert_eq!(code, Some(1), "{out} {err}");
    assert!(
        err.contains("no server 99: the tree has servers [0-3]"),
        "{err}"
    );
    assert!(
        !out.contains("lost") && !err.contains("lost"),
        "{out} {err}"
    );
    // The commands after it still ran.
    assert!(out.contains("[0-3] running"), "{out}");
    // A reply that is an error; an unknown command.
    for cmd in ["omis 1 [] nosuch()", "frobnicate"] {
        let (code, out, err) = sdm_run(&["run", "-n", "2", "-c", cmd]);
        assert_eq!(code, Some(1), "{cmd}: {out} {err}");
    }
    // Commands that worked.
    let (code, out, err) = sdm_run(&["run", "-n", "2", "-c", "stop", "-c", "continue"]);
    assert_eq!(code, Some(0), "{out} {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_and_unknown_ids_reach_the_caller() {
    let (mut c, _) = console(4, "spin").await;
    let mut out = Vec::new();
    let e = c.command("stop 2,7-9", &mut out).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "no servers [7-9]: the tree has servers [0-3]"
    );
    let e = c.command("omis 1 [4] stop()", &mut out).await.unwrap_err();
    assert_eq!(e.to_string(), "no server 4: the tree has servers [0-3]");
    let e = c.command("frobnicate", &mut out).await.unwrap_err();
    assert!(e.to_string().contains("`help`"), "{e}");
    let f = c.command("omis 1 [] nosuch()", &mut out).await.unwrap();
    assert_eq!(f, Flow::Continue { failed: true });
    let f = c.command("stop", &mut out).await.unwrap();
    assert_eq!(f, Flow::Continue { failed: false });
    assert_eq!(c.command("quit", &mut out).await.unwrap(), Flow::Quit);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_is_accepted_by_the_console_and_in_omis() {
    let (mut c, pids) = console(4, "spin").await;
    assert_eq!(run(&mut c, "stop").await.trim(), "[0-3] stopped");
    assert_eq!(run(&mut c, "continue").await.trim(), "[0-3] running");
    for &p in &pids {
        assert_ne!(state(p), Some('T'), "pid {p} after continue");
    }
    let out = run(&mut c, "omis 1 [] stop(); 2 [] continue()").await;
    assert!(out.contains("2 [0-3] continue(0)"), "{out}");
    for &p in &pids {
        assert_ne!(state(p), Some('T'), "pid {p} after omis continue");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakpoints_numbered_listed_deleted_and_set_while_stopped() {
    let (mut c, pids) = console(4, "odd").await;
    assert_eq!(run(&mut c, "stop").await.trim(), "[0-3] stopped");
    // Set while every process is stopped.
    let out = run(&mut c, "break reached_by_odd").await;
    assert_eq!(out.trim(), "[0-3] breakpoint 1 at reached_by_odd");
    let out = run(&mut c, "break func_a 1-2").await;
    assert_eq!(out.trim(), "[1-2] breakpoint 2 at func_a");
    let info = run(&mut c, "info break").await;
    assert_eq!(
        info,
        "Num  Location        Ranks\n\
         1    reached_by_odd  [0-3]\n\
         2    func_a          [1-2]\n"
    );
    let out = run(&mut c, "cont").await;
    let hit = ranks_with(&mut c, &out, "breakpoint 1 hit in reached_by_odd()", 2).await;
    assert_eq!(hit.to_string(), "[1,3]");
    // Deleted everywhere, also where a process is stopped at it.
    assert_eq!(
        run(&mut c, "delete 1").await.trim(),
        "[0-3] deleted breakpoint 1"
    );
    let info = run(&mut c, "info break").await;
    assert!(
        !info.contains("reached_by_odd") && info.contains("func_a"),
        "{info}"
    );
    assert_eq!(run(&mut c, "cont 1,3").await.trim(), "[1,3] running");
    let later = run(&mut c, "sleep 0.5").await;
    assert!(!later.contains("hit"), "deleted, yet hit: {later}");
    assert_eq!(run(&mut c, "status").await.trim(), "[0-3] running");
    for &p in &pids {
        let st = state(p);
        assert!(!matches!(st, Some('T' | 't')), "pid {p} in state {st:?}");
    }
    let mut out = Vec::new();
    let e = c.command("delete 9", &mut out).await.unwrap_err();
    assert!(e.to_string().contains("no breakpoint 9"), "{e}");
    assert_eq!(
        run(&mut c, "delete").await.trim(),
        "[1-2] deleted breakpoint 2"
    );
    assert_eq!(run(&mut c, "info break").await, "No breakpoints.\n");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bt_samples_running_programs_and_continues_only_those() {
    let (mut c, pids) = console(6, "funcs").await;
    assert_eq!(run(&mut c, "stop 1").await.trim(), "[1] stopped");
    // A rank sampled before it got past the dynamic loader has no main on its stack yet.
    let mut tree = String::new();
    for _ in 0..100 {
        tree = run(&mut c, "bt --functions").await;
        if tree.contains("[0-5] main") {
            break;
        }
        run(&mut c, "cont 1").await;
        run(&mut c, "stop 1").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(tree.contains("[0,3] func_a\n"), "{tree}");
    assert!(tree.contains("[1,4] func_b\n"), "{tree}");
    assert!(!tree.contains("error"), "{tree}");
    // The ranks bt stopped run again; the one stopped before stays stopped.
    let status = run(&mut c, "status").await;
    assert!(status.contains("[0,2-5] running"), "{status}");
    assert!(status.contains("[1] stopped"), "{status}");
    for (rank, &p) in pids.iter().enumerate() {
        let st = state(p);
        assert_eq!(
            matches!(st, Some('T' | 't')),
            rank == 1,
            "rank {rank} in state {st:?}"
        );
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_in_plain_words() {
    let (mut c, _) = started(4, "/bin/sh", &["-c", "sleep 0.2; exit 3"]).await;
    let exited = ranks_with(&mut c, "", "exited with status 3", 4).await;
    assert_eq!(exited, IdSet::all(4));
    c.shutdown().await;
    let (mut c, _) = console(4, "spin").await;
    let out = run(&mut c, "kill").await;
    let killed = ranks_with(&mut c, &out, "killed by signal SIGTERM", 4).await;
    assert_eq!(killed, IdSet::all(4));
    // Errors in plain words, not OMIS.
    let out = run(&mut c, "omis 1 [] nosuch()").await;
    assert!(out.contains("nosuch"), "raw for omis: {out}");
    let out = run(&mut c, "status").await;
    assert_eq!(out.trim(), "[0-3] killed by SIGTERM");
    // Asked about programs that have ended: how they ended, in words, not OMIS.
    let out = run(&mut c, "bt").await;
    assert_eq!(out, "[0-3] killed by signal SIGTERM\n");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_print_sums_and_groups() {
    let (mut c, _) = started(4, sdm_e2e::counters_demo(), &[]).await;
    // The programs set their counters once started: wait until every rank has.
    let mut table = String::new();
    for _ in 0..100 {
        table = run(&mut c, "counters").await;
        let line = |k: &str| {
            table
                .lines()
                .find(|l| l.starts_with(k))
                .unwrap_or("")
                .to_owned()
        };
        if line("bytes_received").contains("[0-3]") && line("ops").contains("[3]") {
            break;
        }
        run(&mut c, "sleep 0.1").await;
    }
    let header = table.lines().next().unwrap();
    assert!(header.trim_end().ends_with("sum"), "{table}");
    let ops = table.lines().find(|l| l.starts_with("ops")).unwrap();
    assert_eq!(ops.split_whitespace().last(), Some("6"), "0+1+2+3: {table}");
    let bytes = table
        .lines()
        .find(|l| l.starts_with("bytes_received"))
        .unwrap();
    assert_eq!(bytes.split_whitespace().last(), Some("6000"), "{table}");
    let groups = run(&mut c, "counters --groups").await;
    let rows: Vec<Vec<&str>> = groups
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["ranks", "bytes_received", "ops"], "{groups}");
    assert_eq!(rows[1], ["sum", "6000", "6"], "{groups}");
    for rank in 0..4 {
        let label = format!("[{rank}]");
        let rank = rank.to_string();
        assert_eq!(
            rows[2 + rank.parse::<usize>().unwrap()],
            [label.as_str(), "1500", rank.as_str()],
            "{groups}"
        );
    }
    let groups = run(&mut c, "counters --groups 0-1").await;
    assert!(groups.contains("sum"), "{groups}");
    assert!(!groups.contains("[2]"), "{groups}");
    c.shutdown().await;
}
