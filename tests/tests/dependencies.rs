//! What a tool that links the client library gets with it: no ptrace, process or terminal
//! code (nix), no line editor (rustyline), no progress bars (indicatif). Those belong to
//! the daemons (sdm-server) and the `sdm` command; the crates below the client stay free of
//! them. Read from cargo's own resolution of sdm-client's normal dependencies.

use std::process::Command;

/// Crates the client library must not pull in, and where they belong instead.
const KEPT_OUT: [(&str, &str); 3] = [
    ("nix", "ptrace, processes and terminals: sdm-server and sdm"),
    ("rustyline", "the console's line editor: sdm"),
    ("indicatif", "progress bars: sdm"),
];

/// The names of the crates in `package`'s normal dependency tree (this workspace's lock
/// file, offline: nothing is fetched).
fn normal_dependencies(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = Command::new(cargo)
        .current_dir(root)
        .args([
            "tree",
            "--offline",
            "-p",
            package,
            "-e",
            "normal",
            "--prefix",
        ])
        .args(["none", "--format", "{p}"])
        .output()
        .expect("running cargo tree");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_client_library_has_no_ptrace_terminal_or_console_crates() {
    let deps = normal_dependencies("sdm-client");
    // The tree read is the real one: the client's own crates are in it.
    for own in ["sdm-client", "sdm-overlay", "sdm-deploy", "tokio"] {
        assert!(deps.iter().any(|d| d == own), "{own} missing: {deps:?}");
    }
    for (name, belongs) in KEPT_OUT {
        assert!(
            !deps.iter().any(|d| d == name),
            "sdm-client pulls in {name} (it belongs to {belongs})"
        );
    }
    // The command itself has them: the check can see them where they are.
    let sdm = normal_dependencies("sdm");
    for (name, _) in KEPT_OUT {
        assert!(sdm.iter().any(|d| d == name), "{name} not in sdm: {sdm:?}");
    }
}
