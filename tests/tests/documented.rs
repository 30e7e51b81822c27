//! What the documentation says is what the command does: README's examples run as written
//! (those that need nothing but this machine); the servers' ports lie in the range README
//! and `--help` state; a `--service-plugin` that does not load is fatal, naming the path and
//! why, as a `--filter-plugin`'s is; an option out of its range is an error naming the
//! range; more servers than one host's ports hold fail at once, in one line.

use sdm_e2e as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sdm_client::session::{Session, SessionOptions};
use sdm_proto::IdSet;

/// The invocation README's examples use for the command under test.
const CARGO_RUN: &str = "cargo run --release -p sdm -- ";

/// Runs `sdm ARGS`: its output.
fn sdm(args: &[&str]) -> Output {
    Command::new(support::sdm())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running sdm")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Why an example of README does not run here, or `None` when it does.
fn not_here(line: &str) -> Option<&'static str> {
    let needs = [
        ("./", "a program of the reader's own"),
        (
            "--launcher",
            "another launcher (tests/launch.rs, multihost.rs)",
        ),
        ("--hosts", "other hosts (tests/multihost.rs)"),
        ("$!", "a running MPI job (tests/mpi.rs)"),
        ("--attach", "running processes (tests/console.rs)"),
        ("--pids", "running processes (tests/console.rs)"),
        (" status", "a running `sdm run` (tests/status.rs)"),
        ("/dev/tty", "a terminal"),
        ("~/", "writes into the reader's home (tests/manual.rs)"),
        ("| man", "man"),
    ];
    needs
        .iter()
        .find(|(w, _)| line.contains(w))
        .map(|(_, why)| *why)
}

/// The commands of README's code blocks that run the `sdm` command (or build a plugin it
/// loads), in order.
fn readme_examples() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let mut inside = false;
    let mut out = Vec::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            inside = !inside;
            continue;
        }
        let line = line.trim();
        let runs_sdm = line.contains(CARGO_RUN) || line.starts_with("cc -shared");
        if inside && runs_sdm {
            out.push(line.to_owned());
        }
    }
    out
}

/// What README's comment says the example prints: from the comment's first `[` to a
/// ` ...`, e.g. `# one merged line: [0-7] 28` -> `[0-7] 28`.
fn promised(line: &str) -> Option<String> {
    let (_, comment) = line.split_once(" # ")?;
    let from = &comment[comment.find('[')?..];
    Some(from.split(" ...").next().unwrap_or(from).trim().to_owned())
}

#[test]
fn readme_examples_run_as_written() {
    let examples = readme_examples();
    let mut ran = 0;
    for line in &examples {
        if let Some(why) = not_here(line) {
            eprintln!("not run here ({why}): {line}");
            continue;
        }
        // The one change: the command under test instead of a release build of it.
        let cmd = line.replace(CARGO_RUN, &format!("{} ", support::sdm()));
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let out = Command::new("sh")
            .args(["-c", &cmd])
            .current_dir(root)
            .output()
            .expect("sh");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{line}\n{stdout}\n{stderr}");
        // No id-set answered with an error group (printed `[IDS] error: ...`).
        assert!(
            !stdout
                .lines()
                .any(|l| l.starts_with('[') && l.contains("] error:")),
            "{line}\n{stdout}"
        );
        if let Some(want) = promised(line) {
            assert!(stdout.contains(&want), "{line}: no {want:?} in\n{stdout}");
        }
        ran += 1;
    }
    // The demo, the filter and service plugin examples, the console's merged output.
    assert!(ran >= 10, "only {ran} of {} examples ran", examples.len());
}

/// The first port of the system's ephemeral range.
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// The tcp ports process `pid` listens on (its sockets in LISTEN state, from /proc).
fn listening_ports(pid: u32) -> Vec<u16> {
    let mut inodes = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let link = std::fs::read_link(fd.path()).unwrap_or_default();
        let link = link.to_string_lossy();
        if let Some(i) = link
            .strip_prefix("socket:[")
            .and_then(|l| l.strip_suffix(']'))
        {
            inodes.push(i.to_owned());
        }
    }
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let t = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for row in t.lines().skip(1) {
            let f: Vec<&str> = row.split_whitespace().collect();
            // local_address is ADDR:PORT in hex; state 0A is LISTEN; the inode is field 9.
            if f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]) {
                let port = f[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_listen_in_the_documented_port_range() {
    let top = ephemeral_start();
    // What README and --help say: 10000 up to the ephemeral range, 10000-32767 by default.
    let help = text(&sdm(&["run", "--help"]).stdout);
    assert!(help.contains("10000-32767"), "{help}");
    assert!(!help.contains("20000-49999"), "{help}");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .unwrap()
        .replace('\n', " ");
    assert!(readme.contains("servers listen in 10000-32767"), "README");
    // Each session picks its start at random: a few sessions, every server's port.
    for _ in 0..3 {
        let opts = SessionOptions {
            n: 4,
            ranks_per_server: Some(1),
            program: Some(support::sdm().into()),
            ..SessionOptions::default()
        };
        let s = Session::launch(&opts, |_| {}).await.unwrap();
        assert_eq!(s.report().ready, IdSet::all(4));
        let mut seen = 0;
        for &(id, _, pid) in &s.report().processes {
            for port in listening_ports(pid) {
                assert!((10000..top).contains(&port), "server {id}: port {port}");
                seen += 1;
            }
        }
        assert!(seen >= 4, "{:?}", s.report().processes);
        s.shutdown(Duration::from_secs(10)).await;
    }
}

/// A scratch file path of this test process.
fn scratch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sdm-documented-{}-{name}", std::process::id()))
}

#[test]
fn a_service_plugin_that_does_not_load_is_fatal_naming_path_and_reason() {
    let missing = scratch("nosuch.so");
    let not_a_plugin = scratch("empty.so");
    let src = scratch("empty.c");
    std::fs::write(&src, "int nothing_here;\n").unwrap();
    support::build_c_plugin(&src, &[], &not_a_plugin);
    for (plugin, reason) in [
        (&missing, "No such file"),
        (&not_a_plugin, "sdm_service_entry"),
    ] {
        let p = plugin.to_str().unwrap();
        for cmd in [
            &["launch", "-n", "2"][..],
            &["run", "-n", "2", "-c", "status", "--", "true"],
        ] {
            let started = Instant::now();
            let mut args = vec!["--service-plugin", p];
            args.splice(0..0, cmd.iter().copied());
            // `run`'s program comes last.
            if let Some(i) = args.iter().position(|a| *a == "--") {
                let tail: Vec<&str> = args.drain(i..i + 2).collect();
                args.extend(tail);
            }
            let out = sdm(&args);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.starts_with("sdm: --service-plugin"), "{args:?}: {err}");
            assert!(err.contains(p) && err.contains(reason), "{args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            // Nothing started: the check comes before the servers.
            assert!(started.elapsed() < Duration::from_secs(60), "hang guard");
        }
    }
}

#[test]
fn options_out_of_range_are_errors_naming_the_range() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["run", "-n", "2", "--stdin", "9", "--", "true"],
            "ranks are 0 to 1",
        ),
        (
            &["run", "-n", "2", "--stdin", "0-5", "--", "true"],
            "ranks are 0 to 1",
        ),
        (
            &["run", "-n", "2", "--merge-lag", "99999999999", "--", "true"],
            "0..=86400000",
        ),
        (
            &[
                "run",
                "-n",
                "2",
                "--coalesce-ms",
                "99999999999",
                "--",
                "true",
            ],
            "0..=86400000",
        ),
        (&["launch", "-n", "2", "--timeout", "0"], "1..=86400"),
        (
            &["top", "-n", "2", "--period", "1e30", "--", "true"],
            "to 86400",
        ),
    ];
    for (args, limit) in cases {
        let out = sdm(args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains(limit), "{args:?}: no {limit:?} in {err}");
    }
    // In range: accepted.
    let out = sdm(&["run", "-n", "2", "--stdin", "1", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn more_servers_than_a_hosts_ports_fail_at_once_in_one_line() {
    for (args, ports) in [
        (
            &["launch", "--ranks-per-server", "1", "-n", "5000"][..],
            "2048",
        ),
        (
            &[
                "launch",
                "--ranks-per-server",
                "1",
                "-n",
                "11",
                "--port-range",
                "40000-40009",
            ][..],
            "10",
        ),
    ] {
        let started = Instant::now();
        let out = sdm(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(&format!("at most {ports}")), "{args:?}: {err}");
        // No server was started: nothing to wait for (a hang guard, not a timing claim).
        assert!(started.elapsed() < Duration::from_secs(20), "{args:?}");
        assert!(text(&out.stdout).is_empty(), "{args:?}");
    }
}
