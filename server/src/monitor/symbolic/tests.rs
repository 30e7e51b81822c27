//! The handover to gdb on a real process: stopped at `main`, handed over, stepped.

use super::*;
use crate::monitor::{IoMode, MonitorHandle};

type Job = Box<dyn FnOnce(&mut Monitor) -> MonResult<String> + Send>;

/// A C program built with `-O0 -g`: a function called in a loop, then a wait.
fn program() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sdm-symbolic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("loop.c");
    std::fs::write(
        &src,
        "#include <unistd.h>\nint g = 7;\n__attribute__((noinline)) int twice(int i) {\n  int r = 2 * i;\n  return r;\n}\nint main(void) {\n  for (int i = 0; i < 3; i++) g += twice(i);\n  for (;;) sleep(1);\n}\n",
    )
    .unwrap();
    let exe = dir.join("loop");
    let ok = std::process::Command::new("cc")
        .args(["-O0", "-g", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(ok.success());
    exe
}

#[test]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
fn a_process_stopped_at_main_is_handed_to_gdb_and_stepped() {
    let exe = program();
    let (tx, _rx) = tokio::sync::mpsc::channel(64);
    let (m, mut events) = MonitorHandle::new(0, 1, tx);
    let call = |f: Job| m.submit(f).blocking_recv().unwrap();
    let exe2 = exe.clone();
    call(Box::new(move |m| {
        m.start_at_main(exe2.to_str().unwrap(), &[], IoMode::Pipes)
            .map(|p| p.to_string())
    }))
    .unwrap();
    assert_eq!(
        call(Box::new(|m| m.status())).unwrap(),
        "stopped in main at loop.c:7"
    );
    assert_eq!(
        call(Box::new(|m| m.break_at("loop.c:4", Some("i == 2"), false))).unwrap(),
        "loop.c:4"
    );
    assert!(call(Box::new(|m| Ok(m.symbolic().to_string()))).unwrap() == "true");
    assert_eq!(call(Box::new(|m| m.evaluate("g"))).unwrap(), "7");
    call(Box::new(|m| m.cont().map(|()| String::new()))).unwrap();
    let ev = events.blocking_recv().unwrap();
    assert_eq!(
        ev,
        "stopped_at(\"breakpoint\",\"loop.c:4\",\"loop.c:4 in twice()\")"
    );
    assert_eq!(call(Box::new(|m| m.evaluate("i"))).unwrap(), "2");
    assert_eq!(call(Box::new(|m| m.evaluate("g"))).unwrap(), "9");
    assert_eq!(
        call(Box::new(|m| m.step(&Step::Next))).unwrap(),
        "loop.c:5 in twice()"
    );
    assert_eq!(
        call(Box::new(|m| m.step(&Step::Finish))).unwrap(),
        "loop.c:8 in main(), returned 4"
    );
    let e = call(Box::new(|m| m.evaluate("nosuch"))).unwrap_err();
    assert_eq!(e.to_string(), "No symbol \"nosuch\" in current context.");
    call(Box::new(|m| m.kill().map(|()| String::new()))).unwrap();
}

/// The states of the process's threads as `sdm_stacks` reports them.
fn run_states(m: &mut Monitor) -> MonResult<String> {
    let states: Vec<Option<char>> = m.thread_backtraces()?.iter().map(|t| t.state).collect();
    Ok(format!("{states:?}"))
}

#[test]
#[cfg_attr(not(sdm_have_gdb), ignore = "needs gdb")]
fn run_states_recorded_at_a_stop_go_with_any_resume() {
    let exe = program();
    let (tx, _rx) = tokio::sync::mpsc::channel(64);
    let (m, _events) = MonitorHandle::new(0, 1, tx);
    let call = |f: Job| m.submit(f).blocking_recv().unwrap();
    call(Box::new(move |m| {
        m.start_at_main(exe.to_str().unwrap(), &[], IoMode::Pipes)
            .map(|p| p.to_string())
    }))
    .unwrap();
    call(Box::new(|m| m.stop().map(|()| String::new()))).unwrap();
    assert_eq!(call(Box::new(run_states)).unwrap(), "[Some('T')]");
    // Stepping moves the process on and ends in a stop `stop` did not make.
    call(Box::new(|m| m.break_at("loop.c:4", None, true))).unwrap();
    assert_eq!(
        call(Box::new(|m| m.step(&Step::Next))).unwrap(),
        "loop.c:8 in main()"
    );
    assert_eq!(call(Box::new(run_states)).unwrap(), "[None]");
    // Killing (any resume on the way out) forgets them too.
    call(Box::new(|m| m.stop().map(|()| String::new()))).unwrap();
    // Stopped already (in gdb's trace stop) when `stop` recorded them.
    assert_eq!(call(Box::new(run_states)).unwrap(), "[Some('t')]");
    call(Box::new(|m| m.kill().map(|()| String::new()))).unwrap();
    let left = call(Box::new(|m| Ok(m.run_states.len().to_string()))).unwrap();
    assert_eq!(left, "0");
}
