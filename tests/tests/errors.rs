//! Errors are errors, said once for all the ranks they concern: a request about programs
//! that have ended answers how they ended (`[0-3] exited with status 3`, merged, no pid),
//! not a failure of its own; `break` at a source line on running ranks stops them, inserts
//! the breakpoint and lets them run on (as `bt` does), and the breakpoint is hit; an error
//! under `print -stats` is an error, not a lost rank; a failed reply is known by the kind
//! it carries, not by the word "error" in its text.

use sdm::console::{Console, Flow};
use sdm_client::session::{Session, SessionOptions};
use sdm_e2e::console_command as run;
use sdm_e2e::spinner;
use sdm_omis::{ErrorKind, Value};
use sdm_proto::{IdSet, Status};

/// A console over `n` servers, each running `program` with `args` (on pipes).
async fn started(n: u32, program: &str, args: &[&str]) -> Console {
    let opts = SessionOptions {
        n,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(n));
    let mut c = Console::new(s, false);
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let lines = c.start_program(program, &args, "pipes").await.unwrap();
    for l in &lines {
        assert_eq!(l.status, Status::Replied, "{l:?}");
        assert!(
            matches!(
                l.reply.as_ref().and_then(|r| r.results.first()),
                Some(Value::Int(_))
            ),
            "start failed on {}: {}",
            l.ids,
            l.text
        );
    }
    c
}

/// Runs `sleep 0.1` in the console until its output holds every one of `want`.
async fn wait_for(c: &mut Console, mut out: String, want: &[&str]) -> String {
    for _ in 0..1200 {
        if want.iter().all(|w| out.contains(w)) {
            return out;
        }
        out += &run(c, "sleep 0.1").await;
    }
    panic!("never printed {want:?}; got:\n{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_about_ended_programs_say_how_they_ended() {
    let mut c = started(4, "/bin/sh", &["-c", "exit 3"]).await;
    wait_for(&mut c, String::new(), &["[0-3] exited with status 3"]).await;
    for cmd in ["bt", "stop", "cont", "print x", "info locals", "next"] {
        let out = run(&mut c, cmd).await;
        assert_eq!(out, "[0-3] exited with status 3\n", "{cmd}");
    }
    // `status` says it in its own words; `kill` has nothing to do.
    assert_eq!(run(&mut c, "status").await, "[0-3] exited 3\n");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn break_on_running_ranks_stops_them_inserts_and_continues() {
    let prog = spinner();
    // Odd ranks call reached_by_odd (line 13) every millisecond; even ranks never do.
    let mut c = started(4, prog.to_str().unwrap(), &["odd"]).await;
    assert_eq!(run(&mut c, "status").await, "[0-3] running\n");
    let out = run(&mut c, "break spinner.c:13").await;
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("[0-3] breakpoint 1 at "), "{out}");
    assert!(out.contains("spinner.c:13"), "{out}");
    // The odd ranks run into it; the even ones run on.
    let out = wait_for(&mut c, String::new(), &["[1,3] breakpoint 1"]).await;
    assert!(!out.lines().any(|l| l.contains("] error:")), "{out}");
    let status = run(&mut c, "status").await;
    assert!(status.contains("[0,2] running"), "{status}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
async fn an_error_under_print_stats_is_an_error_not_a_lost_rank() {
    let prog = spinner();
    let mut c = started(2, prog.to_str().unwrap(), &["spin"]).await;
    assert_eq!(run(&mut c, "stop").await, "[0-1] stopped\n");
    // A number: the statistics.
    let out = run(&mut c, "print -stats sizeof(counter)").await;
    assert!(
        out.starts_with("[0-1] sizeof(counter): min 8 [0-1]"),
        "{out}"
    );
    // Not an expression of the program: the same error on every rank, said once.
    for expr in ["nosuchvariable"] {
        let out = run(&mut c, &format!("print -stats {expr}")).await;
        assert!(!out.contains("lost"), "{out}");
        assert!(out.starts_with("[0-1] error: "), "{out}");
        assert_eq!(out.lines().count(), 1, "{out}");
    }
    c.shutdown().await;
}

/// Whether a command failed comes from the failure kind its replies carry, never from their
/// words: a `print` whose text says "error" succeeded; a refused parameter fails with the
/// kind `bad_argument` (raw, as the `omis` command prints it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reply_is_known_by_its_kind_not_its_words() {
    let prog = spinner();
    let mut c = started(2, prog.to_str().unwrap(), &["spin"]).await;
    let mut out = Vec::new();
    let flow = c
        .command("omis 1 [0-1] print(\"error: only words\")", &mut out)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    assert_eq!(flow, Flow::Continue { failed: false }, "{text}");
    assert_eq!(text, "[0-1] 1 [0-1] print(\"error: only words\")\n");
    let mut out = Vec::new();
    let flow = c.command("omis 2 [0-1] print(3)", &mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    assert_eq!(flow, Flow::Continue { failed: true }, "{text}");
    assert!(
        text.starts_with("[0-1] 2 [0-1] print!bad_argument("),
        "{text}"
    );
    // The failure is the kind the reply carries, read back typed.
    let raw = text
        .trim_end()
        .strip_prefix("[0-1] ")
        .expect("the ranks first");
    let reply = sdm_omis::parse_reply(raw).expect("an OMIS reply");
    assert_eq!(reply.0[0].failure, Some(ErrorKind::BadArgument), "{text}");
    c.shutdown().await;
}

/// A command-line error prints each cause once, with a non-zero status: the cause a message
/// already names (`no process N: <the system's error>`) is not repeated after it.
#[test]
fn a_cause_is_printed_once() {
    let out = std::process::Command::new(sdm_e2e::sdm())
        .args(["attach", "999999999"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let cause = "No such file or directory";
    assert!(err.starts_with("sdm: no process 999999999"), "{err}");
    assert_eq!(err.matches(cause).count(), 1, "{err}");
}
