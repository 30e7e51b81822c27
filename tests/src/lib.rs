//! sdm-e2e: the end-to-end tests of sdm (in tests/: real daemons, real launchers, real
//! hosts in network namespaces, SIGKILL), and the one harness they share (this library).
//!
//! The programs the tests run are binaries of this package, so `cargo test -p sdm-e2e` (and
//! `cargo test --workspace`) builds them before the tests: `sdm-e2e-cli` (the `sdm` command:
//! `sdm::cli::main`), `sdm-testnode` (a bare overlay node) and `sdm-counters-demo` (a
//! program using the counters client). Cargo puts them in target/<profile>/, the directory
//! above the test executables (target/<profile>/deps/); [`sdm`], [`testnode`] and
//! [`counters_demo`] find them there.

use std::path::PathBuf;

/// The binary `name` of this package, next to the running test's directory.
///
/// # Panics
///
/// If it is not there (a test run without cargo building this package's binaries first).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("tests run from target/<profile>/deps");
    let path = profile.join(name);
    assert!(
        path.is_file(),
        "{} is missing: run the tests through `cargo test -p sdm-e2e`",
        path.display()
    );
    path
}

/// The `sdm` command under test (the daemons too: `sdm master`, `sdm server`).
pub fn sdm() -> PathBuf {
    binary("sdm-e2e-cli")
}

/// The bare overlay node (see src/bin/sdm-testnode.rs).
pub fn testnode() -> PathBuf {
    binary("sdm-testnode")
}

/// The program that feeds its counters through `sdm_client::counters::Client`.
pub fn counters_demo() -> PathBuf {
    binary("sdm-counters-demo")
}
