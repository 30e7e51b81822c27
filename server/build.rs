//! Sets `sdm_have_gdb` when gdb runs here, so the unit tests that drive a real gdb run where
//! it exists and are shown as ignored where not. Under CI (`CI` set) the cfg is always set:
//! a missing gdb there fails those tests instead of hiding them (as in tests/build.rs).

use std::process::{Command, Stdio};

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rustc-check-cfg=cfg(sdm_have_gdb)");
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    let gdb = Command::new("gdb")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ci || gdb {
        println!("cargo::rustc-cfg=sdm_have_gdb");
    }
}
