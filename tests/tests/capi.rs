//! The C API end to end: the C examples (capi/examples/*.c) are compiled with `cc` against
//! capi/include/sdm.h and the libsdm.so cargo built for these tests, then run against real
//! daemons: Jobsnap must account every rank in its table; several threads sharing one
//! session must each get exactly their own replies.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// libsdm.so as cargo built it for this test run (sdm-capi is a dev-dependency): in
/// target/<profile>/deps/ next to the test binary, or one directory up.
fn libsdm_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .into_iter()
        .find(|d| d.join("libsdm.so").is_file())
        .unwrap_or_else(|| panic!("no libsdm.so near {}: build sdm-capi", exe.display()))
        .to_path_buf()
}

fn capi_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi")
}

/// Compiles capi/examples/`name`.c (with extra `flags`) against sdm.h and libsdm.so into an
/// executable of its own (tests run in parallel: none may rewrite another's program).
fn build(name: &str, flags: &[&str]) -> PathBuf {
    build_source(name, &capi_dir().join(format!("examples/{name}.c")), flags)
}

/// [`build`] for the C source `src`.
fn build_source(name: &str, src: &Path, flags: &[&str]) -> PathBuf {
    static BUILT: AtomicUsize = AtomicUsize::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(format!("{name}-{}", BUILT.fetch_add(1, Ordering::Relaxed)));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    sdm_e2e::run_ok(
        Command::new(cc)
            .args(["-Wall", "-Werror", "-std=c11", "-I"])
            .arg(capi_dir().join("include"))
            .args(flags)
            .arg(src)
            .arg("-o")
            .arg(&exe)
            .arg("-L")
            .arg(libsdm_dir())
            .arg("-lsdm"),
    );
    exe
}

/// Runs the C program `exe` with `args` over real daemons.
fn run(exe: &Path, args: &[String]) -> std::process::Output {
    Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", libsdm_dir())
        .env("SDM_BIN", sdm_e2e::sdm())
        .output()
        .unwrap()
}

/// [`build`] and [`run`]; its standard output once it succeeded.
fn build_and_run(name: &str, flags: &[&str], args: &[String]) -> String {
    let out = run(&build(name, flags), args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn jobsnap_in_c_accounts_every_rank() {
    const N: u32 = 6;
    let stdout = build_and_run("jobsnap", &[], &[N.to_string()]);
    assert!(
        stdout.contains(&format!("{N} of {N} servers ready")),
        "{stdout}"
    );
    for rank in 0..N {
        let row = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&rank.to_string()))
            .unwrap_or_else(|| panic!("no row for rank {rank}:\n{stdout}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols.last(), Some(&"replied"), "{row}");
        assert!(cols[2].parse::<u32>().is_ok(), "pid of rank {rank}: {row}");
    }
    assert!(
        stdout
            .lines()
            .any(|l| l == format!("accounted: [0-{}]", N - 1)),
        "{stdout}"
    );
}

#[test]
fn c_threads_share_one_session_and_each_gets_its_own_replies() {
    let args = ["8", "4", "30"].map(String::from);
    let stdout = build_and_run("threads", &["-pthread", "-D_POSIX_C_SOURCE=200809L"], &args);
    assert!(
        stdout
            .lines()
            .any(|l| l == "threads ok: 4 threads x 30 requests"),
        "{stdout}"
    );
}

#[test]
fn c_program_output_comes_through_the_iof_handlers() {
    let args = ["4", "sh", "-c", "echo hello; echo oops >&2"].map(String::from);
    let stdout = build_and_run("prun", &[], &args);
    for want in ["[0-3] out: hello", "[0-3] err: oops"] {
        assert!(
            stdout.lines().any(|l| l == want),
            "{want:?} not in:\n{stdout}"
        );
    }
    let ended = stdout
        .lines()
        .filter_map(|l| l.strip_suffix(" event: process_terminated(\"exited\",0)"))
        .fold(sdm_proto::IdSet::new(), |acc, ids| {
            &acc | &ids.parse::<sdm_proto::IdSet>().unwrap()
        });
    assert_eq!(ended, sdm_proto::IdSet::all(4), "{stdout}");
}

#[test]
fn a_c_program_that_cannot_start_fails_sdm_init_naming_it() {
    let exe = build("prun", &[]);
    let out = run(&exe, &["3", "/nonexistent/prog"].map(String::from));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("prun: launch: /nonexistent/prog did not start on [0-2]"),
        "{stderr}"
    );
}

/// The C quick-start of capi/src/lib.rs's crate docs, as a tool author would copy it.
#[test]
fn the_c_quick_start_in_the_crate_docs_builds_and_runs() {
    let docs = std::fs::read_to_string(capi_dir().join("src/lib.rs")).unwrap();
    let code: Vec<&str> = docs
        .lines()
        .skip_while(|l| *l != "//! ```c")
        .skip(1)
        .take_while(|l| *l != "//! ```")
        .map(|l| {
            l.strip_prefix("//! ")
                .unwrap_or(l.trim_start_matches("//!"))
        })
        .collect();
    assert!(code.len() > 10, "no C quick-start in the crate docs");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("quickstart.c");
    std::fs::write(&src, code.join("\n")).unwrap();
    let out = run(&build_source("quickstart", &src, &[]), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One group per server (their pids differ), each replied (status 0) with its info line.
    for rank in 0..8 {
        let want = format!("[{rank}] 0 host=");
        assert!(
            stdout.lines().any(|l| l.starts_with(&want)),
            "{want:?} not in:\n{stdout}"
        );
    }
}
