//! No input makes sdm panic: every console command fed malformed arguments (negative and
//! huge numbers, an unclosed bracket, a lone quote, nothing) answers with an error or a
//! plain answer and the console goes on; `sleep -1` in a script is an error (exit 1, not
//! a panic's 101); a reader that closes the pipe early (`sdm topology ... | head`, `sdm
//! completions zsh | head`, `sdm run ... | head`) ends sdm quietly, as `head` expects.

use sdm_e2e as support;
use support::spinner;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use sdm::console::{Console, Flow};
use sdm_client::session::{Session, SessionOptions};
use sdm_proto::IdSet;

/// Arguments no command takes as meant: negative, larger than any integer type, an
/// unclosed id-set, a lone quote.
const JUNK: [&str; 4] = ["-1", "99999999999999999999", "[", "'"];

/// Junk some commands take as a valid argument, so they answer without an error: an
/// expression gdb evaluates (`print -1` is -1; so for `ptype`, `whatis`, `display`), a
/// line offset (`until -1`).
const VALID: [(&str, &str); 5] = [
    ("print", "-1"),
    ("until", "-1"),
    ("ptype", "-1"),
    ("whatis", "-1"),
    ("display", "-1"),
];

/// Runs `line`; `Some(true)` when the console answered with an error (an `Err`, or a
/// failed reply), `Some(false)` for a plain answer, `None` for `quit`. What it printed
/// goes to `log`.
async fn answer(c: &mut Console, line: &str, log: &mut String) -> Option<bool> {
    let mut out = Vec::new();
    let r = c.command(line, &mut out).await;
    let printed = String::from_utf8_lossy(&out);
    log.push_str(&format!("> {line}\n{printed}"));
    match r {
        Err(e) => {
            log.push_str(&format!("error: {e:#}\n"));
            Some(true)
        }
        Ok(Flow::Continue { failed }) => Some(failed),
        Ok(Flow::Quit) => None,
    }
}

#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_console_command_survives_malformed_arguments() {
    let opts = SessionOptions {
        n: 2,
        program: Some(support::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(2));
    let mut c = Console::new(s, false);
    let prog = spinner();
    c.start_program(prog.to_str().unwrap(), &["spin".into()], "pty")
        .await
        .unwrap();
    // The commands that end the programs or the session go last.
    let last = ["kill", "detach", "quit"];
    let mut names: Vec<&str> = sdm::commands::COMMANDS
        .iter()
        .map(|c| c.name)
        .filter(|n| !last.contains(n))
        .collect();
    names.extend(last);
    names.push("exit");
    let mut log = String::new();
    let mut silent = Vec::new();
    for name in &names {
        for junk in JUNK {
            // Stopped programs, so the debugger's commands read their arguments too.
            let _ = answer(&mut c, "stop", &mut log).await;
            let line = format!("{name} {junk}");
            match answer(&mut c, &line, &mut log).await {
                Some(true) => {}
                Some(false) if VALID.contains(&(*name, junk)) => {}
                Some(false) => silent.push(line),
                None => silent.push(format!("{line} (quit)")),
            }
        }
    }
    assert!(silent.is_empty(), "no error for {silent:?}\n{log}");
    // Without arguments every command answers (most take none, or act on all ranks);
    // those that run the programs on (`finish` out of an endless loop never returns) or
    // end them are left out.
    let resume = ["cont", "continue", "step", "next", "finish", "until"];
    let skip = |n: &&&str| resume.contains(*n) || last.contains(*n) || **n == "exit";
    for name in names.iter().filter(|n| !skip(n)) {
        let _ = answer(&mut c, "stop", &mut log).await;
        assert!(answer(&mut c, name, &mut log).await.is_some(), "{log}");
    }
    for name in ["kill", "detach"] {
        assert!(answer(&mut c, name, &mut log).await.is_some(), "{log}");
    }
    assert_eq!(answer(&mut c, "quit", &mut log).await, None, "{log}");
    c.shutdown().await;
}

#[test]
fn sleep_out_of_range_is_an_error_not_a_panic() {
    let out = Command::new(support::sdm())
        .args(["run", "-n", "1", "-c", "sleep -1", "-c", "sleep 1e30"])
        .args(["-c", "sleep nan", "-c", "sleep 0.01", "--", "true"])
        .output()
        .expect("running sdm");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for arg in ["-1", "1e30", "nan"] {
        assert!(
            err.contains(&format!("sdm: sleep {arg}: sleep: ")),
            "{arg}: {err}"
        );
    }
    assert!(err.contains("0 to 86400"), "{err}");
    assert!(!err.contains("sleep 0.01"), "{err}");
}

/// Runs `sdm ARGS` with its standard output a pipe whose reader is gone before sdm writes,
/// as `sdm ... | head` after head has read enough: sdm must end as a printing tool killed
/// by SIGPIPE, or exit 141, saying nothing.
fn ends_quietly_on_a_closed_pipe(args: &[&str]) {
    // The reader is closed before sdm starts: its first write fails, however small.
    let (reader, writer) = nix::unistd::pipe().expect("a pipe");
    drop(reader);
    let mut child = Command::new(support::sdm())
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .expect("running sdm");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    let quiet = status.signal() == Some(13) || status.code() == Some(141);
    assert!(quiet, "{args:?}: {status:?} {err}");
    assert!(err.is_empty(), "{args:?}: {err}");
}

#[test]
fn printing_commands_end_quietly_when_the_reader_goes() {
    ends_quietly_on_a_closed_pipe(&["topology", "-n", "100000"]);
    ends_quietly_on_a_closed_pipe(&["topology", "-n", "100000", "--dot"]);
    ends_quietly_on_a_closed_pipe(&["completions", "zsh"]);
    ends_quietly_on_a_closed_pipe(&["man"]);
    ends_quietly_on_a_closed_pipe(&["--help"]);
    // A run whose output goes nowhere ends (its programs killed) without a word.
    ends_quietly_on_a_closed_pipe(&["run", "-n", "2", "--", "seq", "1", "100000"]);
    ends_quietly_on_a_closed_pipe(&["run", "-n", "2", "-c", "status", "--", "sleep", "60"]);
}
