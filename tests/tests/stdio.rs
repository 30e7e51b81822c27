//! End-to-end tests of stdio forwarding through the real `sdm run` CLI: programs on
//! pseudo-terminals (or pipes) under real servers, their output up the tree with each
//! rank's order kept, identical lines coalesced, standard input down to an id-set, and a
//! global stop that completes while every rank floods its output.
//!
//! The tests run one at a time (each starts up to 16 servers and a flood of output).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use sdm_e2e::{labelled_lines, sdm_run, sdm_run_status};
use sdm_proto::IdSet;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Checks `--label` output of programs printing `RANK N` lines (N = 1, 2, … on each rank):
/// every such line comes from its own rank, none lost or out of order. Returns the last N
/// of each rank, and the other lines.
fn numbered_lines(text: &str) -> (BTreeMap<u32, u64>, Vec<String>) {
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    let mut others = Vec::new();
    for line in text.lines() {
        let (id, rest) = line.split_once(' ').unwrap();
        let id: IdSet = id.parse().unwrap_or_else(|e| panic!("{line:?}: {e}"));
        match rest
            .split_once(' ')
            .map(|(r, n)| (r.parse::<u32>(), n.parse::<u64>()))
        {
            Some((Ok(rank), Ok(n))) => {
                assert_eq!(id, IdSet::single(rank), "{line}");
                let prev = last.insert(rank, n).unwrap_or(0);
                assert_eq!(n, prev + 1, "rank {rank}: a line lost or out of order");
            }
            _ => others.push(line.to_owned()),
        }
    }
    (last, others)
}

/// Per rank, the numbers it printed (from lines that are numbers), in order.
fn numbers_per_rank(lines: &[(IdSet, String)]) -> BTreeMap<u32, Vec<u64>> {
    let mut per: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for (ids, text) in lines {
        if let Ok(n) = text.parse::<u64>() {
            for id in ids.iter() {
                per.entry(id).or_default().push(n);
            }
        }
    }
    per
}

#[test]
fn label_prints_every_line_of_every_rank_in_order() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = sdm_run(
        &["-n", "16", "--label", "--", "sh", "-c", "seq 1 10000"],
        b"",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines = labelled_lines(&text);
    for (ids, _) in &lines {
        assert_eq!(ids.len(), 1, "--label prints one rank per line");
    }
    let per = numbers_per_rank(&lines);
    assert_eq!(per.len(), 16);
    let want: Vec<u64> = (1..=10000).collect();
    for (rank, got) in &per {
        assert!(
            got == &want,
            "rank {rank}: {} lines, not 1..=10000 in order",
            got.len()
        );
    }
    let numbers = lines
        .iter()
        .filter(|(_, t)| t.parse::<u64>().is_ok())
        .count();
    assert_eq!(numbers, 160_000);
    let exits = lines
        .iter()
        .filter(|(_, t)| t == "exited with status 0")
        .count();
    assert_eq!(exits, 16, "one exit event per rank");
    assert_eq!(lines.len(), 160_016);
}

#[test]
fn identical_lines_of_all_ranks_coalesce() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = sdm_run(&["-n", "16", "--", "sh", "-c", "seq 1 3000"], b"");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines = labelled_lines(&text);
    // Nothing lost, nothing doubled, each rank in order...
    let per = numbers_per_rank(&lines);
    let want: Vec<u64> = (1..=3000).collect();
    assert_eq!(per.len(), 16);
    for (rank, got) in &per {
        assert!(
            got == &want,
            "rank {rank}: {} numbers, not 1..=3000 in order",
            got.len()
        );
    }
    // ...and merged: each number is printed once for all sixteen ranks.
    let numbers: Vec<&(IdSet, String)> = lines
        .iter()
        .filter(|(_, t)| t.parse::<u64>().is_ok())
        .collect();
    let whole = numbers
        .iter()
        .filter(|(ids, _)| ids == &IdSet::all(16))
        .count();
    assert_eq!(
        numbers.len(),
        3000,
        "{} of 3000 lines merged for [0-15]",
        whole
    );
    assert_eq!(whole, 3000);
}

#[test]
fn every_line_of_sixteen_ranks_merges_exactly() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Lines are aligned by their index in each rank's output, and a rank is awaited while
    // its server has not seen it idle (a rank starved of CPU never is), so the result is
    // the same as on an idle machine: every number once for all sixteen ranks, then one
    // line for their sixteen exits.
    let out = sdm_run(&["-n", "16", "--", "sh", "-c", "seq 1 10000"], b"");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines = labelled_lines(&text);
    let all = IdSet::all(16);
    assert_eq!(lines.len(), 10_001, "10000 numbers and one exit line");
    for (k, (ids, t)) in lines[..10_000].iter().enumerate() {
        assert_eq!(
            (ids, t.as_str()),
            (&all, (k + 1).to_string().as_str()),
            "line {k}"
        );
    }
    let (ids, last) = &lines[10_000];
    assert_eq!(ids, &all, "the exits of all ranks merge: {last}");
    assert!(last.contains("exited"), "{last}");
}

#[test]
fn a_rank_that_pauses_is_not_awaited_and_loses_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Rank 5 sleeps two seconds half-way: the lines before its pause merge for all
    // sixteen ranks; after it, the others' lines need not wait for it (it is idle), and
    // every rank's numbers still all come, in order.
    let script = "seq 1 5000; [ \"$SDM_RANK\" = 5 ] && sleep 2; seq 5001 10000";
    let out = sdm_run(&["-n", "16", "--", "sh", "-c", script], b"");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines = labelled_lines(&text);
    let all = IdSet::all(16);
    for (k, (ids, t)) in lines[..5_000].iter().enumerate() {
        assert_eq!(
            (ids, t.as_str()),
            (&all, (k + 1).to_string().as_str()),
            "line {k}"
        );
    }
    let per = numbers_per_rank(&lines);
    let want: Vec<u64> = (1..=10_000).collect();
    assert_eq!(per.len(), 16);
    for (rank, got) in &per {
        assert!(got == &want, "rank {rank}: {} numbers", got.len());
    }
}

#[test]
fn a_line_of_rank_0_alone_is_not_held_for_silent_ranks() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Rank 0 prints one progress line, then every rank sleeps without printing. With a
    // lag far longer than the run, the line must reach the console while the programs
    // still sleep: the test marks its arrival in a file, and each program fails unless
    // the mark is there when it wakes (so no figure of time is asserted; the sleep only
    // bounds the run).
    let dir = std::env::temp_dir().join(format!("sdm-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seen = dir.join("seen");
    let _ = std::fs::remove_file(&seen);
    let script = format!(
        "if [ \"$SDM_RANK\" = 0 ]; then echo progress-line; fi; sleep 30; [ -e '{}' ]",
        seen.display()
    );
    let mut child = Command::new(sdm_e2e::sdm())
        .args(["run", "--merge-lag", "60000", "-n", "8", "--", "sh", "-c"])
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting sdm run");
    let stdout = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut lines = Vec::new();
    for line in std::io::BufRead::lines(stdout) {
        let line = line.expect("reading sdm's output");
        if line.ends_with(" progress-line") {
            std::fs::write(&seen, b"").unwrap();
        }
        lines.push(line);
    }
    let out = child.wait_with_output().expect("waiting for sdm run");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(lines.first().map(String::as_str), Some("[0] progress-line"));
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[1].starts_with("[0-7] ") && lines[1].contains("exited"),
        "the exits merge: {lines:?}"
    );
    assert!(
        out.status.success(),
        "the line came only after the programs woke up ({}): {lines:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn exit_status_is_the_largest_of_the_programs_like_srun() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = sdm_run_status(&["-n", "4", "--", "sh", "-c", "exit 3"], b"");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let out = sdm_run_status(
        &["-n", "4", "--", "sh", "-c", "exit $((SDM_RANK * 2))"],
        b"",
    );
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    // Killed by a signal: 128 + its number, as a shell reports it.
    let out = sdm_run_status(
        &[
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            "[ $SDM_RANK = 1 ] && kill -SEGV $$; exit 0",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(128 + 11), "{out:?}");
    let out = sdm_run_status(&["-n", "4", "--", "sh", "-c", "exit 0"], b"");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn a_program_that_cannot_start_fails_the_run_at_once() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = sdm_run_status(&["-n", "4", "--", "/nonexistent/program"], b"");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[0-3] could not start /nonexistent/program")
            && stderr.contains("No such file"),
        "{stderr}"
    );
    // Scripted: the script stops there (its commands would all fail), and the run fails.
    let out = sdm_run_status(
        &[
            "-n",
            "4",
            "-c",
            "status",
            "-c",
            "bt",
            "--",
            "/nonexistent/program",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the script is not run: a program could not start"),
        "{stderr}"
    );
    // No command ran: none answered, none failed.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{out:?}");
    assert!(
        !stderr.contains("sdm: status") && !stderr.contains("sdm: bt"),
        "{stderr}"
    );
}

#[test]
fn nothing_is_lost_when_a_script_ends_with_kill() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Sixteen ranks print 5000 numbered lines each, mark that they are done and wait; the
    // script kills them. Every line a program wrote before the kill, and every exit, must
    // be printed before sdm exits.
    let dir = std::env::temp_dir().join(format!("sdm-drain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!(
        "seq 1 5000 | sed \"s/^/$SDM_RANK /\"; touch {}/$SDM_RANK; exec sleep 1000",
        dir.display()
    );
    let out = sdm_run(
        &[
            "-n", "16", "--label", "-c", "sleep 3", "-c", "kill", "--", "sh", "-c", &script,
        ],
        b"",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (last, others) = numbered_lines(&text);
    let mut exits = IdSet::new();
    // The exit events (the `kill` command's own reply says only "killed").
    for line in others.iter().filter(|l| l.contains("killed by signal")) {
        let (id, _) = line.split_once(' ').unwrap();
        let id: IdSet = id.parse().unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert!(exits.is_disjoint(&id), "{line}: a second exit");
        exits.union_with(&id);
    }
    assert_eq!(exits, IdSet::all(16), "every exit printed: {text:.2000}");
    // A rank that had written everything before the kill lost nothing; the others lost
    // nothing of what came before (checked above, line by line).
    let mut done = 0;
    for rank in 0..16u32 {
        if dir.join(rank.to_string()).exists() {
            done += 1;
            assert_eq!(last.get(&rank), Some(&5000), "rank {rank} wrote 5000 lines");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(done > 0, "no rank finished its output within three seconds");
}

#[test]
fn no_coalesce_prints_each_rank_apart() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = sdm_run(&["-n", "4", "--no-coalesce", "--", "echo", "same"], b"");
    let lines = labelled_lines(&String::from_utf8(out.stdout).unwrap());
    let same: Vec<&IdSet> = lines
        .iter()
        .filter(|(_, t)| t == "same")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(same.len(), 4, "{lines:?}");
    assert!(same.iter().all(|ids| ids.len() == 1));
}

#[test]
fn stdin_goes_to_every_program_and_ends() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = sdm_run(&["-n", "4", "--", "cat"], b"hi\n");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().next(),
        Some("[0-3] hi"),
        "cat echoes the input once per rank, merged: {text}"
    );
    assert!(text.contains("[0-3] exited with status 0"), "{text}");
}

#[test]
fn stdin_goes_only_to_the_chosen_ranks() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let script = "while read x; do echo \"got $x\"; done; echo done";
    let out = sdm_run(
        &["-n", "4", "--stdin", "1-2", "--", "sh", "-c", script],
        b"a\nb\n",
    );
    let lines = labelled_lines(&String::from_utf8(out.stdout).unwrap());
    let who = |t: &str| -> IdSet {
        lines
            .iter()
            .filter(|(_, x)| x == t)
            .fold(IdSet::new(), |acc, (ids, _)| &acc | ids)
    };
    assert_eq!(who("got a"), "[1-2]".parse().unwrap(), "{lines:?}");
    assert_eq!(who("got b"), "[1-2]".parse().unwrap(), "{lines:?}");
    assert_eq!(
        who("done"),
        IdSet::all(4),
        "the others see end of input at once"
    );
}

#[test]
fn pipes_keep_stderr_apart() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = sdm_run(
        &[
            "-n",
            "2",
            "--iof",
            "pipes",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2",
        ],
        b"",
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stdout.lines().any(|l| l == "[0-1] out"), "{stdout}");
    assert!(!stdout.contains("err"), "{stdout}");
    assert!(stderr.lines().any(|l| l == "[0-1] err"), "{stderr}");
}

#[test]
fn runtime_leaves_stdio_to_the_launcher() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = sdm_run(&["-n", "2", "--iof", "runtime", "--", "echo", "plain"], b"");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        !stdout.contains("plain"),
        "not forwarded by the tree: {stdout}"
    );
    assert_eq!(
        stderr.lines().filter(|l| l.trim_end() == "plain").count(),
        2,
        "the launcher passes each program's output through: {stderr}"
    );
}

#[test]
fn a_global_stop_completes_under_an_output_flood() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Eight ranks print numbered lines as fast as they can (different on every rank, so
    // nothing merges); the stop must still reach all of them, and no line may be lost.
    let flood = "i=0; while :; do i=$((i+1)); echo \"$SDM_RANK $i\"; done";
    let out = sdm_run(
        &[
            "-n",
            "8",
            "--label",
            "-c",
            "sleep 0.5",
            "-c",
            "stop",
            "-c",
            "status",
            "-c",
            "kill",
            "--",
            "sh",
            "-c",
            flood,
        ],
        b"",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (last, status) = numbered_lines(&text);
    assert_eq!(last.len(), 8, "every rank printed: {status:?}");
    // Every rank is stopped (where each one stopped may differ: in write, or elsewhere
    // in the shell).
    assert!(status.iter().any(|l| l == "[0-7] stopped"), "{status:?}");
    let stopped = status
        .iter()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, rest)| rest.starts_with("stopped in"))
        .fold(IdSet::new(), |acc, (ids, _)| {
            &acc | &ids.parse::<IdSet>().unwrap()
        });
    assert_eq!(stopped, IdSet::all(8), "status after the stop: {status:?}");
    assert!(status.iter().any(|l| l == "[0-7] killed"), "{status:?}");
}

/// Runs a library test (one at a time, like the others) on a two-thread runtime.
fn library_test(test: impl std::future::Future<Output = ()>) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(test);
}

/// A session of `n` real servers, started from this build's `sdm`.
async fn session(n: u32) -> sdm_client::session::Session {
    let opts = sdm_client::session::SessionOptions {
        n,
        program: Some(sdm_e2e::sdm().into()),
        ..sdm_client::session::SessionOptions::default()
    };
    sdm_client::session::Session::launch(&opts, |_| {})
        .await
        .unwrap()
}

#[test]
fn library_stdio_handlers_and_stdin() {
    library_test(library_stdio());
}

async fn library_stdio() {
    use std::sync::Arc;
    use std::time::Duration;

    use sdm_client::iof::Iof;
    use sdm_proto::{Status, SyncMode};

    let s = session(4).await;
    let all = s.all();
    let script = r#"0 [] sdm_start("/bin/sh", ["-c", "read x; echo \"out $x\"; echo \"err $x\" >&2"], "pipes")"#;
    for g in s
        .request_command(sdm_client::service::omis(&all, SyncMode::WaitAll, script))
        .await
        .unwrap()
    {
        assert_eq!(g.status, Status::Replied, "{g:?}");
    }
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut iof = Iof::new(all.clone(), Duration::from_secs(5));
    let (o, e, v) = (got.clone(), got.clone(), got.clone());
    iof.set_stdout_handler(move |ids, l| {
        o.lock()
            .unwrap()
            .push(format!("stdout {ids} {}", String::from_utf8_lossy(l)))
    })
    .set_stderr_handler(move |ids, l| {
        e.lock()
            .unwrap()
            .push(format!("stderr {ids} {}", String::from_utf8_lossy(l)))
    })
    .set_event_handler(move |ids, t| v.lock().unwrap().push(format!("event {ids} {t}")));
    let odd: IdSet = "[1,3]".parse().unwrap();
    let even: IdSet = "[0,2]".parse().unwrap();
    s.write_stdin(&odd, b"odd\n", true).await.unwrap();
    s.write_stdin(&even, b"even\n", true).await.unwrap();
    let exited = |got: &[String]| -> IdSet {
        got.iter()
            .filter_map(|l| l.strip_prefix("event "))
            .filter_map(|l| l.strip_suffix(" process_terminated(\"exited\",0)"))
            .fold(IdSet::new(), |acc, ids| {
                &acc | &ids.parse::<IdSet>().unwrap()
            })
    };
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    while exited(&got.lock().unwrap()) != IdSet::all(4) && tokio::time::Instant::now() < until {
        let step = tokio::time::Instant::now() + Duration::from_millis(200);
        s.pump_stdio(&mut iof, step).await.unwrap();
    }
    iof.flush();
    let got = got.lock().unwrap().clone();
    for want in [
        "stdout [1,3] out odd",
        "stderr [1,3] err odd",
        "stdout [0,2] out even",
        "stderr [0,2] err even",
    ] {
        assert!(got.iter().any(|l| l == want), "{want:?} not in {got:?}");
    }
    // Every program's exit arrived (merged or not, depending on timing).
    assert_eq!(exited(&got), IdSet::all(4), "{got:?}");
    s.shutdown(Duration::from_secs(10)).await;
}

#[test]
fn output_the_tool_does_not_take_holds_the_printers_not_the_commands() {
    library_test(unread_output());
}

/// Eight programs print numbered lines as fast as they can while the tool takes none of
/// them: commands still come back from every rank, the front-end holds at most one
/// flow-control window of output (the rest waits in the printers, blocked in `write`), and
/// once the tool reads again every line arrives, each rank's in order.
async fn unread_output() {
    use std::sync::Arc;
    use std::time::Duration;

    use sdm_client::iof::Iof;
    use sdm_overlay::stdio;
    use sdm_proto::{Status, SyncMode};

    let s = session(8).await;
    let all = s.all();
    let flood = r#"0 [] sdm_start("/bin/sh", ["-c", "i=0; while :; do i=$((i+1)); echo $i; done"], "pipes")"#;
    let replied = |groups: &[sdm_client::ReplyGroup]| {
        groups
            .iter()
            .filter(|g| g.status == Status::Replied)
            .fold(IdSet::new(), |acc, g| &acc | &g.sources)
    };
    let g = s
        .request_command(sdm_client::service::omis(&all, SyncMode::WaitAll, flood))
        .await
        .unwrap();
    assert_eq!(replied(&g), all, "{g:?}");
    // The tool reads nothing for a while; commands meanwhile reach every rank and come
    // back (a status, three times over).
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let g = s
            .request_command(sdm_client::service::omis(
                &all,
                SyncMode::Timeout(60_000),
                "1 [] sdm_status()",
            ))
            .await
            .unwrap();
        assert_eq!(replied(&g), all, "status under unread output: {g:?}");
    }
    // What the front-end holds unread is at most one window (the master may overdraw
    // it by one frame), however long the programs have been printing.
    let mut held = Vec::new();
    while let Some(m) = s.queued_event() {
        held.push(m);
    }
    let bytes: i64 = held.iter().map(stdio::cost).sum();
    let largest = held.iter().map(stdio::cost).max().unwrap_or(0);
    assert!(!held.is_empty(), "some output reached the front-end");
    assert!(
        bytes < stdio::WINDOW + largest,
        "the front-end holds {bytes} bytes of unread output in {} frames, beyond the window {}",
        held.len(),
        stdio::WINDOW
    );
    // Read again, end the programs, and check that no line was lost on the way.
    let numbers: Arc<Mutex<BTreeMap<u32, Vec<u64>>>> = Arc::default();
    let exits: Arc<Mutex<IdSet>> = Arc::default();
    let mut iof = Iof::new(all.clone(), Duration::from_secs(5));
    let (nums, ends) = (numbers.clone(), exits.clone());
    iof.set_stdout_handler(move |ids, l| {
        let n: u64 = String::from_utf8_lossy(l).trim().parse().expect("a number");
        let mut nums = nums.lock().unwrap();
        for rank in ids.iter() {
            nums.entry(rank).or_default().push(n);
        }
    })
    .set_event_handler(move |ids, t| {
        if t.starts_with("process_terminated") {
            ends.lock().unwrap().union_with(ids);
        }
    });
    for m in held {
        if let Some(other) = iof.handle(m) {
            panic!("not stdio: {other:?}");
        }
    }
    let g = s
        .request_command(sdm_client::service::omis(
            &all,
            SyncMode::WaitAll,
            "2 [] kill()",
        ))
        .await
        .unwrap();
    assert_eq!(replied(&g), all, "{g:?}");
    let until = tokio::time::Instant::now() + Duration::from_secs(120);
    while *exits.lock().unwrap() != all && tokio::time::Instant::now() < until {
        let step = tokio::time::Instant::now() + Duration::from_millis(200);
        s.pump_stdio(&mut iof, step).await.unwrap();
    }
    iof.flush();
    assert_eq!(*exits.lock().unwrap(), all, "every program's end arrived");
    let numbers = std::mem::take(&mut *numbers.lock().unwrap());
    assert_eq!(numbers.len(), 8, "every rank printed");
    for (rank, seq) in numbers.iter() {
        let want: Vec<u64> = (1..=seq.len() as u64).collect();
        assert!(
            *seq == want,
            "rank {rank}: {} lines, not 1..={} in order",
            seq.len(),
            seq.len()
        );
    }
    s.shutdown(Duration::from_secs(10)).await;
}
