//! Which environment-dependent end-to-end tests can run on this machine; the others are
//! ignored (shown as such by `cargo test`). Under CI (`CI` set) every cfg is set whatever the
//! machine says, so there a missing launcher or capability fails its test instead of hiding
//! it.
//!
//! - Launchers (tests/launch.rs): a launcher is set up when `deploy/ci-setup.sh` has left its
//!   marker in /run/sdmci; then `sdm_have_mpirun`, `sdm_have_slurm` or `sdm_have_ssh` is set,
//!   and `sdm_have_ompi5` (Open MPI 5 in /opt/sdm-venv), `sdm_have_mpich` (Debian's MPICH) or
//!   `sdm_have_mpi4py` (mpi4py over Open MPI 5, same venv).
//! - Headless chromium (tests/report.rs, the HTML report in a browser): `sdm_have_chromium`
//!   when deploy/ci-setup.sh left its marker chromium.ok.
//! - Network namespaces (tests/netns.rs): `sdm_have_netns` when this process has the
//!   capabilities to make namespaces and links (root's CAP_SYS_ADMIN and CAP_NET_ADMIN; a
//!   container may withhold them from root) and iproute2's `ip netns` works.
//! - gdb (tests/stacks.rs): `sdm_have_gdb` when `gdb --version` runs.
//! - pyenv's CPython 3.13 and 3.10 (tests/python.rs): `sdm_have_pyenv` when installed.
//! - tmux (tests/terminal.rs, a real terminal for the interactive console): `sdm_have_tmux`
//!   when `tmux -V` runs.

use std::path::Path;
use std::process::{Command, Stdio};

/// Where deploy/ci-setup.sh writes its markers.
const MARKER_DIR: &str = "/run/sdmci";

/// pyenv's CPythons the Python tests run (cfg `sdm_have_pyenv`): the newest, and one
/// before 3.11 (whose threads carry no OS thread id).
const PYENV: [&str; 2] = [
    "/root/.pyenv/versions/3.13.0/bin/python3",
    "/root/.pyenv/versions/3.10.13/bin/python3",
];

/// (cfg, marker file) per launcher.
const LAUNCHERS: [(&str, &str); 7] = [
    ("sdm_have_mpirun", "mpirun.ok"),
    ("sdm_have_slurm", "slurm.ok"),
    ("sdm_have_ssh", "ssh.ok"),
    ("sdm_have_ompi5", "ompi5.ok"),
    ("sdm_have_mpich", "mpich.ok"),
    ("sdm_have_mpi4py", "mpi4py.ok"),
    // Not a launcher: headless chromium, the HTML report's browser (tests/report.rs).
    ("sdm_have_chromium", "chromium.ok"),
];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CI");
    let dir = Path::new(MARKER_DIR);
    // Markers come and go inside the directory. (A path that does not exist would make
    // cargo re-run this script, and rebuild the crate, on every build: without the
    // directory, `touch tests/build.rs` after deploy/ci-setup.sh.)
    if dir.is_dir() {
        println!("cargo::rerun-if-changed={MARKER_DIR}");
    }
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    for (cfg, marker) in LAUNCHERS {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if ci || dir.join(marker).is_file() {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
    println!("cargo::rustc-check-cfg=cfg(sdm_have_gdb)");
    if ci || runs("gdb", &["--version"]) {
        println!("cargo::rustc-cfg=sdm_have_gdb");
    }
    // pyenv's CPythons (tests/python.rs).
    println!("cargo::rustc-check-cfg=cfg(sdm_have_pyenv)");
    if ci || PYENV.iter().all(|p| Path::new(p).is_file()) {
        println!("cargo::rustc-cfg=sdm_have_pyenv");
    }
    println!("cargo::rustc-check-cfg=cfg(sdm_have_tmux)");
    if ci || runs("tmux", &["-V"]) {
        println!("cargo::rustc-cfg=sdm_have_tmux");
    }
    println!("cargo::rustc-check-cfg=cfg(sdm_have_netns)");
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
    runs("ip", &["netns", "list"])
}

/// Whether `program args` runs and succeeds.
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
