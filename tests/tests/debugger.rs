//! The symbolic debugger through real daemons (issue 16's "done when"): 8 ranks of
//! tests/programs/ranks.c start stopped at `main` (`--stop-at-main`); a conditional source
//! breakpoint stops rank 3 in `work`, another stops the others in their wait; `print`,
//! `next`, `finish`, groups, `focus` and set algebra give merged answers, checked line for
//! line against the program's definition and against gdb run (batch) on a process of the
//! same rank. The same script runs on a `-O0 -g` and a `-O2 -g` build.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use sdm::console::Console;
use sdm_client::session::{Session, SessionOptions};
use sdm_e2e::console_command as run;
use sdm_proto::{IdSet, Status};

/// The line of the source holding `marker`.
fn line_of(marker: &str) -> u32 {
    sdm_e2e::source_line("ranks", marker)
}

fn build(flags: &[&str]) -> PathBuf {
    sdm_e2e::c_program("ranks", flags)
}

/// What gdb says, run in batch on the program as rank 3: the values printed (`$N = V`,
/// in order), the line `next` stops at, and where `finish` returns (line) with the value.
struct Oracle {
    values: Vec<String>,
    next_line: u32,
    finish_line: u32,
    returned: String,
}

fn oracle(program: &PathBuf, break_line: u32) -> Oracle {
    let out = Command::new("gdb")
        .args(["-nx", "-batch"])
        .args(["-iex", "set debuginfod enabled off"])
        .args(["-ex", &format!("break ranks.c:{break_line} if rank == 3")])
        .args(["-ex", "run"])
        .args(["-ex", "print i"])
        .args(["-ex", "print a[rank]"])
        .args(["-ex", "next"])
        .args(["-ex", "finish"])
        .args(["-ex", "print rank"])
        .arg(program)
        .env("SDM_RANK", "3")
        .stdin(Stdio::null())
        .output()
        .expect("gdb (deploy/ci-setup.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut values = Vec::new();
    let mut returned = None;
    // The source lines gdb shows where the process stopped: at the breakpoint, after
    // `next`, after `finish`.
    let mut lines = Vec::new();
    for l in text.lines() {
        if let Some(v) = l.strip_prefix("Value returned is ") {
            returned = v.split_once(" = ").map(|(_, v)| v.to_owned());
        } else if l.starts_with('$') {
            values.push(l.split_once(" = ").unwrap().1.to_owned());
        } else if let Some((n, _)) = l.split_once('\t')
            && let Ok(n) = n.parse::<u32>()
        {
            lines.push(n);
        }
    }
    let context = format!(
        "gdb said:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(values.len(), 3, "{context}");
    assert_eq!(lines.first(), Some(&break_line), "{context}");
    Oracle {
        values,
        next_line: *lines
            .get(1)
            .unwrap_or_else(|| panic!("no line after next: {context}")),
        finish_line: *lines
            .get(2)
            .unwrap_or_else(|| panic!("no line after finish: {context}")),
        returned: returned.unwrap_or_else(|| panic!("no value returned: {context}")),
    }
}

/// Runs console commands (`sleep`) until `want` has appeared in the output; returns all of it.
async fn wait_for(c: &mut Console, want: &[String]) -> String {
    let mut out = String::new();
    for _ in 0..600 {
        if want.iter().all(|w| out.contains(w.as_str())) {
            return out;
        }
        out += &run(c, "sleep 0.1").await;
    }
    panic!("never printed {want:?}; got:\n{out}");
}

async fn script(flags: &[&str]) {
    let program = build(flags);
    let work = line_of("LINE_WORK */");
    let wait = line_of("LINE_WAIT");
    let gdb = oracle(&program, work);

    let opts = SessionOptions {
        n: 8,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(8));
    let mut c = Console::new(s, false);
    c.set_stop_at_main(true);
    let started = c
        .start_program(program.to_str().unwrap(), &[], "pipes")
        .await
        .unwrap();
    assert!(
        started
            .iter()
            .all(|l| l.status == Status::Replied && l.started()),
        "{started:?}"
    );
    let status = run(&mut c, "status").await;
    assert!(
        status.starts_with("[0-7] stopped in main at ranks.c:"),
        "{status}"
    );
    assert_eq!(status.lines().count(), 1, "{status}");

    let out = run(&mut c, &format!("break ranks.c:{work} if rank == 3")).await;
    assert_eq!(
        out,
        format!("[0-7] breakpoint 1 at ranks.c:{work} if rank == 3\n")
    );
    let out = run(&mut c, &format!("break ranks.c:{wait} all - [3]")).await;
    assert_eq!(out, format!("[0-2,4-7] breakpoint 2 at ranks.c:{wait}\n"));
    let mut out = run(&mut c, "cont").await;
    assert!(out.starts_with("[0-7] running\n"), "{out}");
    out += &wait_for(
        &mut c,
        &[
            format!("[3] breakpoint 1 at ranks.c:{work} in work()\n"),
            format!("[0-2,4-7] breakpoint 2 at ranks.c:{wait} in main()\n"),
        ],
    )
    .await;

    // `i` is work's parameter on rank 3; the others wait in main, outside its loop.
    assert_eq!(
        run(&mut c, "print i").await,
        format!(
            "[0-2,4-7] error: No symbol \"i\" in current context.\n[3] i = {}\n",
            gdb.values[0]
        )
    );
    assert_eq!(gdb.values[0], "0");
    // a[k] = 100 * rank + k: a[rank] is 101 * rank, one line per rank.
    let expected: String = (0..8)
        .map(|r| format!("[{r}] a[rank] = {}\n", 101 * r))
        .collect();
    assert_eq!(run(&mut c, "print a[rank]").await, expected);
    assert_eq!(gdb.values[1], "303");
    // The same values reduced in the tree by the `stats` filter.
    assert_eq!(
        run(&mut c, "print -stats a[rank]").await,
        "[0-7] a[rank]: min 0 [0], mean 353.5, max 707 [7]\n"
    );

    // Frames: rank 3's caller, and back.
    let up = run(&mut c, "frame 1 [3]").await;
    assert!(
        up.starts_with("[3] #1 ranks.c:") && up.ends_with(" in main()\n"),
        "{up}"
    );
    assert_eq!(
        run(&mut c, "down [3]").await,
        format!("[3] #0 ranks.c:{work} in work()\n")
    );
    assert_eq!(
        run(&mut c, "next [3]").await,
        format!("[3] ranks.c:{} in work()\n", gdb.next_line)
    );
    assert_eq!(
        run(&mut c, "finish [3]").await,
        format!(
            "[3] ranks.c:{} in main(), returned {}\n",
            gdb.finish_line, gdb.returned
        )
    );
    // work(0) returns 0.
    assert_eq!(gdb.returned, "0");

    assert_eq!(
        run(&mut c, "group odd 1,3,5,7").await,
        "group odd [1,3,5,7]\n"
    );
    assert_eq!(run(&mut c, "focus odd").await, "focus odd [1,3,5,7]\n");
    assert_eq!(c.prompt(), "sdm [odd]> ");
    assert_eq!(
        run(&mut c, "print rank").await,
        "[1] rank = 1\n[3] rank = 3\n[5] rank = 5\n[7] rank = 7\n"
    );
    assert_eq!(gdb.values[2], "3");
    // Set algebra over groups and ranks, wherever ranks are named.
    assert_eq!(
        run(&mut c, "group low = odd & 0-3").await,
        "group low [1,3]\n"
    );
    assert_eq!(
        run(&mut c, "print rank * 2 low | [6]").await,
        "[1] rank * 2 = 2\n[3] rank * 2 = 6\n[6] rank * 2 = 12\n"
    );
    // Raw OMIS node lists may name groups too.
    assert_eq!(
        run(&mut c, "omis 9 [low] sdm_print(\"rank\")").await,
        "[1] 9 [1] sdm_print(\"1\")\n[3] 9 [3] sdm_print(\"3\")\n"
    );
    assert_eq!(
        run(&mut c, "status odd - low").await,
        format!("[5,7] stopped in main at ranks.c:{wait}\n")
    );
    // The source around where rank 3 stands, and its frames.
    let list = run(&mut c, "list [3]").await;
    assert!(
        list.starts_with("[3]\n") && list.contains(&format!("    {}\t", gdb.finish_line)),
        "{list}"
    );
    assert!(
        run(&mut c, "up [3]")
            .await
            .starts_with("[3] error: no frame 1")
    );
    assert_eq!(run(&mut c, "focus").await, "focus [0-7]\n");
    // A watchpoint: rank 3's next call, work(1), adds 303 to `total`.
    assert_eq!(
        run(&mut c, "delete 1").await,
        "[0-7] deleted breakpoint 1\n"
    );
    assert_eq!(
        run(&mut c, "watch total [3]").await,
        "[3] watchpoint on total\n"
    );
    assert_eq!(run(&mut c, "cont 3").await, "[3] running\n");
    wait_for(
        &mut c,
        &["[3] watchpoint total: 0 -> 303 at ranks.c:".into()],
    )
    .await;
    // `detach` gives rank 3 back to the native monitor, stopped where it stands: its
    // status comes from the monitor's own unwinder again, and it continues natively.
    assert_eq!(run(&mut c, "detach 3").await, "[3] detached\n");
    let status = run(&mut c, "status 3").await;
    assert!(
        status.starts_with("[3] stopped in work at ranks.c:"),
        "{status}"
    );
    assert_eq!(run(&mut c, "cont 3").await, "[3] running\n");
    assert_eq!(run(&mut c, "status 3").await, "[3] running\n");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn print_step_and_groups_across_ranks_match_gdb_at_o0() {
    script(&["-O0", "-g"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn the_same_script_works_on_an_optimized_build() {
    script(&["-O2", "-g"]).await;
}
