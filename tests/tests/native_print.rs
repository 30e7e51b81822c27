//! Native `print` (issue 37 item 7): while the native monitor holds a process, the
//! expressions the server evaluates from DWARF itself (a variable, `.member`, `->member`,
//! `[n]`, `*`) print without any gdb, exactly as gdb prints them. 4 ranks of
//! tests/programs/printing.c (-O0 -g) stopped in `visit`: every supported expression is
//! printed natively (no gdb appears among the test's descendants), then an unsupported
//! one (`rank + 1`) hands the ranks to gdb as before, and gdb, on the very same processes
//! at the very same stop, must print every one of them identically.

use std::collections::BTreeSet;
use std::path::Path;

use sdm::console::Console;
use sdm::words::is_error;
use sdm_client::session::{Session, SessionOptions};
use sdm_e2e::console_command as run;
use sdm_e2e::procs::parent_of;
use sdm_omis::Value;
use sdm_proto::{IdSet, Status};

const RANKS: u32 = 4;

/// Every expression the native evaluator supports, of every type it prints (integers,
/// characters, booleans, enums, floating point, pointers, arrays, structs): globals,
/// a file static, a function's static, a parameter, a local and an inner block's local,
/// members, elements, pointers followed.
const SUPPORTED: &[&str] = &[
    "rank",
    "total",
    "file_static",
    "cv",
    "typed",
    "unnamed_value",
    "yes",
    "message",
    "zeros",
    "runs",
    "grid",
    "grid[1]",
    "reps",
    "exact",
    "rec",
    "rec.in",
    "rec.in.pair",
    "rec.in.pair[1]",
    "rec.values",
    "rec.values[11]",
    "rec.letter",
    "rec.on",
    "rec.hue",
    "rec.flags",
    "rec.negative",
    "rec.tag",
    "rec.name",
    "*rec.name",
    "rec.name[5]",
    "rec.heap",
    "*rec.heap",
    "rec.heap[3]",
    "rec.next",
    "rec.next->id",
    "*rec.next",
    "rec.small",
    "rec.byte",
    "rec.sbyte",
    "rec.big",
    "rec.ubig",
    "rec.ratio",
    "rec.weight",
    "darr",
    "third",
    "recp->id",
    "recp->in.a",
    "*recp",
    "depth",
    "local",
    "inner_local",
    "calls",
    "r->in",
    "*r",
    "r->values[0]",
];

/// The gdbs below the servers running `program` (the parents of its processes): tests
/// running at once each count their own.
fn gdbs_of(program: &Path) -> Vec<u32> {
    let below = sdm_e2e::descendants_of(std::process::id());
    let servers: BTreeSet<u32> = below
        .iter()
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == program))
        .filter_map(|&pid| parent_of(pid))
        .collect();
    servers
        .iter()
        .flat_map(|s| sdm_e2e::descendants_of(*s))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "gdb")
        })
        .collect()
}

/// The lines of a `print EXPR` reply that answer it (program output lines may come along).
fn answer(out: &str, expr: &str) -> String {
    out.lines()
        .filter(|l| l.contains(&format!("] {expr} = ")) || l.contains("] error: "))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `sdm_print(e)` on every rank: each replied with a value, none with an error reply.
async fn assert_values_everywhere(c: &mut Console, e: &str) {
    let request = format!("1 [] sdm_print({})", Value::Str(e.to_owned()));
    let lines = c.request(&IdSet::all(RANKS), &request).await.unwrap();
    let answered = lines.iter().fold(IdSet::new(), |acc, l| &acc | &l.ids);
    assert_eq!(answered, IdSet::all(RANKS), "print {e}: {lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.status == Status::Replied && l.reply.as_ref().is_some_and(|r| !is_error(r))),
        "print {e}: {lines:?}"
    );
}

/// Stops the ranks until every one stands in `visit`'s spin (a stop may land while one
/// still returns from its `printf`); returns the status line.
async fn stop_in_visit(c: &mut Console) -> String {
    let mut status = String::new();
    for _ in 0..300 {
        run(c, "stop").await;
        status = run(c, "status").await;
        if status.starts_with(&format!(
            "[0-{}] stopped in visit at printing.c:",
            RANKS - 1
        )) && status.lines().count() == 1
        {
            return status;
        }
        run(c, "cont").await;
        run(c, "sleep 0.2").await;
    }
    panic!("the ranks never all stopped in visit: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn print_natively_as_gdb_prints_without_starting_gdb() {
    let program = sdm_e2e::c_program("printing", &["-O0", "-g"]);
    let opts = SessionOptions {
        n: RANKS,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(RANKS));
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
    run(&mut c, "cont").await;
    stop_in_visit(&mut c).await;

    // Native: every supported expression, and a name that exists nowhere.
    let mut native = Vec::new();
    for e in SUPPORTED {
        let out = answer(&run(&mut c, &format!("print {e}")).await, e);
        assert_values_everywhere(&mut c, e).await;
        assert_eq!(
            gdbs_of(&program),
            Vec::<u32>::new(),
            "print {e} started a gdb: {out}"
        );
        native.push(out);
    }
    let none = answer(&run(&mut c, "print nosuch").await, "nosuch");
    assert_eq!(
        none,
        format!(
            "[0-{}] error: No symbol \"nosuch\" in current context.\n",
            RANKS - 1
        )
    );
    assert_eq!(
        gdbs_of(&program),
        Vec::<u32>::new(),
        "native prints started a gdb"
    );
    // Per-rank values still print one line per rank, equal ones merge.
    let ranks: String = (0..RANKS).map(|r| format!("[{r}] rank = {r}\n")).collect();
    assert_eq!(native[0], ranks);
    let depth = SUPPORTED.iter().position(|e| *e == "depth").unwrap();
    assert_eq!(native[depth], format!("[0-{}] depth = 3\n", RANKS - 1));
    let local = SUPPORTED.iter().position(|e| *e == "local").unwrap();
    let locals: String = (0..RANKS)
        .map(|r| format!("[{r}] local = {}\n", 30 + r))
        .collect();
    assert_eq!(native[local], locals);

    // Not native: gdb answers (and from now on holds the ranks).
    let sums: String = (0..RANKS)
        .map(|r| format!("[{r}] rank + 1 = {}\n", r + 1))
        .collect();
    assert_eq!(
        answer(&run(&mut c, "print rank + 1").await, "rank + 1"),
        sums
    );
    assert_eq!(
        gdbs_of(&program).len(),
        RANKS as usize,
        "one gdb per rank now"
    );

    // gdb on the same processes at the same stop says exactly the same.
    for (e, mine) in SUPPORTED.iter().zip(&native) {
        let theirs = answer(&run(&mut c, &format!("print {e}")).await, e);
        assert_eq!(&theirs, mine, "print {e}");
    }
    assert_eq!(answer(&run(&mut c, "print nosuch").await, "nosuch"), none);
    run(&mut c, "kill").await;
    c.shutdown().await;
}

/// Frame 0 in the C library (the ranks of tests/programs/ranks.c sleep in their last loop):
/// the program's globals print natively as gdb prints them there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn print_natively_from_a_frame_in_the_c_library() {
    let program = sdm_e2e::c_program("ranks", &["-O0", "-g"]);
    let opts = SessionOptions {
        n: RANKS,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    let mut c = Console::new(s, false);
    let started = c
        .start_program(program.to_str().unwrap(), &[], "pipes")
        .await
        .unwrap();
    assert!(started.iter().all(|l| l.started()), "{started:?}");
    let mut status = String::new();
    for _ in 0..300 {
        run(&mut c, "stop").await;
        status = run(&mut c, "status").await;
        if status.lines().count() == 1 && status.contains("sleep") {
            break;
        }
        run(&mut c, "cont").await;
        run(&mut c, "sleep 0.2").await;
    }
    assert!(status.contains("sleep"), "{status}");
    let exprs = ["rank", "a", "a[2]", "total", "nosuch"];
    let mut native = Vec::new();
    for e in exprs {
        native.push(answer(&run(&mut c, &format!("print {e}")).await, e));
        assert_eq!(
            gdbs_of(&program),
            Vec::<u32>::new(),
            "print {e} started a gdb"
        );
    }
    let a: String = (0..RANKS)
        .map(|r| format!("[{r}] a[2] = {}\n", 100 * r + 2))
        .collect();
    assert_eq!(native[2], a);
    assert_eq!(
        native[4],
        format!(
            "[0-{}] error: No symbol \"nosuch\" in current context.\n",
            RANKS - 1
        )
    );
    answer(&run(&mut c, "print rank + 0").await, "rank + 0");
    assert_eq!(
        gdbs_of(&program).len(),
        RANKS as usize,
        "one gdb per rank now"
    );
    for (e, mine) in exprs.iter().zip(&native) {
        let theirs = answer(&run(&mut c, &format!("print {e}")).await, e);
        assert_eq!(&theirs, mine, "print {e}");
    }
    run(&mut c, "kill").await;
    c.shutdown().await;
}
