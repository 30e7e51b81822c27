//! Whether the multi-host test (tests/netns.rs) can run on this machine: it needs the
//! capabilities to make network namespaces and links (root's CAP_SYS_ADMIN and
//! CAP_NET_ADMIN; a container may withhold them from root) and iproute2's `ip netns`. Then `sdm_have_netns` is set; without it the
//! test is ignored (shown as such by `cargo test`). Under CI (`CI` set) it is always set, so
//! there a machine that cannot make namespaces fails the test instead of hiding it.

use std::process::{Command, Stdio};

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rustc-check-cfg=cfg(sdm_have_netns)");
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    if ci || (has_capabilities() && ip_netns_works()) {
        println!("cargo::rustc-cfg=sdm_have_netns");
    }
}

/// Whether this (build) process, run by the user who runs the tests, has CAP_NET_ADMIN
/// (12) and CAP_SYS_ADMIN (21) in effect.
fn has_capabilities() -> bool {
    const NEEDED: u64 = (1 << 12) | (1 << 21);
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & NEEDED == NEEDED)
}

/// Whether iproute2 is there and can list network namespaces.
fn ip_netns_works() -> bool {
    Command::new("ip")
        .args(["netns", "list"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
