//! gdb's common spellings in the console (issue 36, item 12): `c`, `where`, `info args`,
//! `ptype`, `whatis`, `x/`, `set var`, `display` and `gdb COMMAND` go to the ranks' gdbs
//! (4 ranks of tests/programs/ranks.c stopped at a breakpoint in `work`), answers merged by
//! value; a gdb command that would run the process is refused; `help` lists them.

use std::path::PathBuf;

use sdm::console::Console;
use sdm_client::session::{Session, SessionOptions};
use sdm_e2e::console_command as run;
use sdm_proto::{IdSet, Status};

fn build() -> PathBuf {
    sdm_e2e::c_program("ranks", &["-O0", "-g"])
}

/// The line of the source holding `marker`.
fn line_of(marker: &str) -> u32 {
    sdm_e2e::source_line("ranks", marker)
}

/// The output's lines that are not events (hits printed as they come).
fn answer(out: &str) -> String {
    out.lines()
        .filter(|l| !l.contains(" breakpoint 1 at "))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn gdb_spellings_reach_the_ranks_gdbs_and_merge_by_value() {
    let program = build();
    let work = line_of("LINE_WORK */");
    let opts = SessionOptions {
        n: 4,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(4));
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
    let out = run(&mut c, &format!("break ranks.c:{work}")).await;
    assert_eq!(out, format!("[0-3] breakpoint 1 at ranks.c:{work}\n"));
    // `c` is `cont`.
    assert!(run(&mut c, "c").await.starts_with("[0-3] running\n"));
    let mut status = String::new();
    for _ in 0..600 {
        status = run(&mut c, "status").await;
        if answer(&status) == format!("[0-3] stopped in work at ranks.c:{work}\n") {
            break;
        }
        run(&mut c, "sleep 0.1").await;
    }
    assert_eq!(
        answer(&status),
        format!("[0-3] stopped in work at ranks.c:{work}\n")
    );

    assert_eq!(answer(&run(&mut c, "info args").await), "[0-3] i = 0\n");
    assert_eq!(
        answer(&run(&mut c, "ptype a").await),
        "[0-3] type = int [8]\n"
    );
    assert_eq!(
        answer(&run(&mut c, "whatis rank").await),
        "[0-3] type = int\n"
    );
    assert_eq!(
        answer(&run(&mut c, "set var total = 5 [1]").await),
        "[1] done\n"
    );
    assert_eq!(
        answer(&run(&mut c, "print total").await),
        "[0,2-3] total = 0\n[1] total = 5\n"
    );
    // a[k] = 100 * rank + k: rank 2's first two.
    let x = answer(&run(&mut c, "x/2dw &a [2]").await);
    assert!(
        x.starts_with("[2] 0x") && x.trim_end().ends_with(":\t200\t201"),
        "{x}"
    );
    let display = answer(&run(&mut c, "display rank * 0").await);
    assert_eq!(display, "[0-3] 1: rank * 0 = 0\n");
    assert_eq!(
        answer(&run(&mut c, "gdb output sizeof(a) [0-3]").await),
        "[0-3] 32\n"
    );
    // Commands that would run the process behind the monitor's back are refused.
    let refused = answer(&run(&mut c, "gdb continue").await);
    assert!(
        refused.starts_with("[0-3] error: gdb \"continue\" would move"),
        "{refused}"
    );
    // `where` is `bt`.
    let bt = answer(&run(&mut c, "where").await);
    assert!(bt.contains("work"), "{bt}");
    let help = run(&mut c, "help").await;
    for name in ["where", "ptype", "whatis", "x", "set", "display", "gdb"] {
        assert!(help.contains(&format!("  {name} ")), "{name}: {help}");
    }
    assert!(
        run(&mut c, "help gdb")
            .await
            .starts_with("usage: gdb COMMAND [IDS]\n")
    );
    let mut sink = Vec::new();
    let bad = c.command("set confirm off", &mut sink).await;
    assert!(
        bad.as_ref()
            .is_err_and(|e| e.to_string().contains("set var")),
        "{bad:?}"
    );
    c.shutdown().await;
}
