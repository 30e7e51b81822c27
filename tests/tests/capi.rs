//! The C API end to end: the C examples (capi/examples/*.c) are compiled with `cc` against
//! capi/include/sdm.h and the libsdm.so cargo built for these tests, then run against real
//! daemons: Jobsnap must account every rank in its table; several threads sharing one
//! session must each get exactly their own replies.

use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Compiles capi/examples/`name`.c (with extra `flags`) against sdm.h and libsdm.so, runs
/// it with `args` over real daemons, and returns its standard output once it succeeded.
fn build_and_run(name: &str, flags: &[&str], args: &[String]) -> String {
    let lib = libsdm_dir();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    sdm_e2e::run_ok(
        Command::new(cc)
            .args(["-Wall", "-Werror", "-std=c11", "-I"])
            .arg(capi_dir().join("include"))
            .args(flags)
            .arg(capi_dir().join(format!("examples/{name}.c")))
            .arg("-o")
            .arg(&exe)
            .arg("-L")
            .arg(&lib)
            .arg("-lsdm"),
    );
    let out = Command::new(&exe)
        .args(args)
        .env("LD_LIBRARY_PATH", &lib)
        .env("SDM_BIN", sdm_e2e::sdm())
        .output()
        .unwrap();
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
