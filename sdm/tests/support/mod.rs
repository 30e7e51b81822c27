//! What several sdm test files share: running the real `sdm` command.

use std::ffi::OsStr;
use std::process::Command;

/// Runs `sdm ARGS…`, asserts it succeeded (showing its output if not), and returns what
/// it printed on stdout.
pub(crate) fn sdm_ok<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sdm"))
        .args(args)
        .output()
        .expect("running sdm");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}
