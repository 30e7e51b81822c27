//! Which launcher tests (tests/launch.rs) can run on this machine. A launcher is set up when
//! `deploy/ci-setup.sh` has left its marker in /run/sdmci; then `sdm_have_mpirun`,
//! `sdm_have_slurm` or `sdm_have_ssh` is set, and without it the test is ignored (shown as
//! such by `cargo test`). Under CI (`CI` set) all three are set whatever the markers say,
//! so there a launcher that is missing fails its test instead of hiding it.

use std::path::Path;

/// Where deploy/ci-setup.sh writes its markers.
const MARKER_DIR: &str = "/run/sdmci";

/// (cfg, marker file) per launcher.
const LAUNCHERS: [(&str, &str); 3] = [
    ("sdm_have_mpirun", "mpirun.ok"),
    ("sdm_have_slurm", "slurm.ok"),
    ("sdm_have_ssh", "ssh.ok"),
];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CI");
    let dir = Path::new(MARKER_DIR);
    // Markers come and go inside the directory. (A path that does not exist would make
    // cargo re-run this script, and rebuild the crate, on every build: without the
    // directory, `touch sdm/build.rs` after deploy/ci-setup.sh.)
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
}
