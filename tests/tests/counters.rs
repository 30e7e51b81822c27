//! Application counters end to end: programs under real servers write counters to their
//! server (the C client in client/include/sdm_counters.h, the Rust client in sdm_client::counters),
//! and the console's `counters` merges them across ranks with the `stats` filter.

use sdm_e2e as support;

use std::path::PathBuf;
use std::process::Command;

fn console(n: &str, program: &std::path::Path, envs: &[(&str, &std::path::Path)]) -> String {
    let args = [
        "run", "-n", n, "--json", "-c", "sleep 1", "-c", "counters", "-c", "kill", "--",
    ];
    let mut all: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    all.push(program.as_os_str());
    support::sdm_ok_env(all, envs.iter().copied())
}

fn metrics(text: &str) -> serde_json::Value {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v.get("metrics").is_some())
        .unwrap_or_else(|| panic!("no counters sample in {text}"))["metrics"]
        .clone()
}

#[test]
fn c_client_counters_merge_across_ranks() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join("sdm-counters-test");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/programs/counters.c");
    let ok = Command::new("gcc")
        .args([
            "-O1",
            "-I",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../client/include"),
            "-o",
        ])
        .arg(&exe)
        .arg(src)
        .status()
        .expect("gcc (deploy/ci-setup.sh installs it)");
    assert!(ok.success());
    let m = metrics(&console("8", &exe, &[]));
    let it = &m["iterations"];
    assert_eq!(it["count"], 8, "{m}");
    assert_eq!(
        (it["min"].as_i64(), it["min_ids"].as_str()),
        (Some(100), Some("[0]")),
        "{m}"
    );
    assert_eq!(
        (it["max"].as_i64(), it["max_ids"].as_str()),
        (Some(800), Some("[7]")),
        "{m}"
    );
    assert_eq!(it["mean"], 450, "{m}");
    assert_eq!(it["sum"], 3600, "{m}");
    assert_eq!(m["bytes_sent"]["min_ids"], "[0-7]", "{m}");
    assert!(m.get("bad/key").is_none(), "a bad line is skipped: {m}");
}

#[test]
fn rust_client_counters_merge_across_ranks() {
    let app = PathBuf::from(sdm_e2e::counters_demo());
    // The servers put their sockets in XDG_RUNTIME_DIR: one of this test's own, to see
    // that each is bound when its program starts and removed when its server ends.
    let runtime = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("counters-runtime-{}", std::process::id()));
    std::fs::create_dir_all(&runtime).unwrap();
    let text = console("4", &app, &[("XDG_RUNTIME_DIR", &runtime)]);
    // (The console's status socket lives in the sdm/ directory there.)
    let left: Vec<_> = std::fs::read_dir(&runtime)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("sdm-counters-"))
        .collect();
    assert!(left.is_empty(), "sockets left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&runtime);
    let m = metrics(&text);
    assert_eq!(m["ops"]["max_ids"], "[3]", "{m}");
    assert_eq!(m["ops"]["mean"], 1.5, "{m}");
    assert_eq!(
        m["bytes_received"]["min"], m["bytes_received"]["max"],
        "{m}"
    ); // (Absent keys would compare equal above: the value itself must have arrived.)
    assert_eq!(m["bytes_received"]["max"], 1500, "{m}");
}
