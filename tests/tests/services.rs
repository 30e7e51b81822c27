//! Server-side extensions end to end, with real daemons: commands reach the service their
//! tag names with their bytes unchanged. The example C plugin
//! (`server/examples/c/checksum_service.c`, built here with `cc`) loaded by the stock
//! `sdm server` (through `SessionOptions::service_plugins` and `--service-plugin`), and the
//! Rust example server built with `Server::builder` (`server/examples/checksum_server.rs`),
//! answer a foreign binary protocol; identical answers merge into one group; a plugin that
//! does not load and an unknown tag get error replies naming them, and the rest still works.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sdm_client::ReplyGroup;
use sdm_client::service::{self, OMIS, SDM};
use sdm_client::session::{Session, SessionOptions};
use sdm_proto::{IdSet, Status, SyncMode};

const N: u32 = 8;

/// Bytes no text protocol would send: a NUL, invalid UTF-8, then ASCII.
const RAW: &[u8] = b"\x00\xff\xfe\x20\x72\x61\x77";

/// The scratch directory of this test process.
fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sdm-e2e-services-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Builds a C service plugin from `src` into `out` against `sdm_service.h`.
fn build(src: &Path, out: &Path) {
    let include = sdm_e2e::server_dir().join("include");
    let include = format!("-I{}", include.display());
    sdm_e2e::build_c_plugin(src, &[&include], out);
}

/// The example C checksum plugin, built once for all the tests of this process.
fn checksum_plugin() -> PathBuf {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let out = scratch().join("libchecksum_service.so");
        build(
            &sdm_e2e::server_dir().join("examples/c/checksum_service.c"),
            &out,
        );
        out
    })
    .clone()
}

/// A plugin that declares ABI version 99.
fn wrong_abi_plugin() -> PathBuf {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let src = scratch().join("abi99.c");
        std::fs::write(
            &src,
            "#include \"sdm_service.h\"\n\
             static const sdm_service_vtable V = {99u, 0, \"checksum\", 0, 0, 0};\n\
             const sdm_service_vtable *sdm_service_entry(void) { return &V; }\n",
        )
        .unwrap();
        let out = scratch().join("libabi99.so");
        build(&src, &out);
        out
    })
    .clone()
}

async fn launch(o: SessionOptions) -> Session {
    let s = Session::launch(&SessionOptions { n: N, ..o }, |_| {})
        .await
        .unwrap();
    assert_eq!(s.report().ready, IdSet::all(N), "{:?}", s.report().failed);
    s
}

fn stock() -> SessionOptions {
    SessionOptions {
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    }
}

/// Sends `payload` tagged `tag` to every server and collects the groups.
async fn ask(s: &mut Session, tag: &str, payload: &[u8]) -> Vec<ReplyGroup> {
    let all = s.all();
    let m = service::command(tag, &all, SyncMode::Timeout(30_000), payload.to_vec());
    s.request_command(m).await.unwrap()
}

/// The one replied group holding every server; its payload.
fn one_group(groups: &[ReplyGroup]) -> Vec<u8> {
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].status, Status::Replied, "{groups:?}");
    assert_eq!(groups[0].sources, IdSet::all(N), "{groups:?}");
    groups[0].payload.to_vec()
}

/// The one replied group as text.
fn one_text(groups: &[ReplyGroup]) -> String {
    String::from_utf8(one_group(groups)).unwrap()
}

/// The text of the one error group every server answered (a refused request).
fn one_error(groups: &[ReplyGroup]) -> String {
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].status, Status::Error, "{groups:?}");
    assert_eq!(groups[0].sources, IdSet::all(N), "{groups:?}");
    String::from_utf8_lossy(&groups[0].payload).into_owned()
}

/// Starts `sleep 60` under every server; returns the pid rank 0's started.
async fn start_sleepers(s: &mut Session) -> u32 {
    let all = s.all();
    let m = service::omis(
        &all,
        SyncMode::Timeout(30_000),
        "1 [] sdm_start(\"/bin/sleep\", [\"60\"], \"pipes\")",
    );
    let mut pid0 = None;
    for g in s.request_command(m).await.unwrap() {
        assert_eq!(g.status, Status::Replied, "{g:?}");
        let text = String::from_utf8_lossy(&g.payload);
        let pid: u32 = text
            .rsplit_once('(')
            .and_then(|(_, p)| p.trim_end_matches(')').parse().ok())
            .unwrap_or_else(|| panic!("not a pid: {text}"));
        if g.sources.contains(0) {
            pid0 = Some(pid);
        }
    }
    pid0.expect("rank 0 started its program")
}

/// FNV-1a 64 of `len` bytes at the start of process `pid`'s executable's first mapping,
/// computed here, from /proc, as the service is specified to.
fn fnv_of_exe_start(pid: u32, len: usize) -> u64 {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let start = sdm_deploy::maps::read(pid)
        .unwrap()
        .into_iter()
        .find(|m| m.path == exe)
        .expect("the executable is mapped")
        .start;
    let mut buf = vec![0u8; len];
    std::fs::File::open(format!("/proc/{pid}/mem"))
        .unwrap()
        .read_exact_at(&mut buf, start)
        .unwrap();
    buf.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A checksum request: opcode 1, address (0: the executable's start), length.
fn checksum_request(addr: u64, len: u32) -> Vec<u8> {
    let mut req = vec![0x01];
    req.extend_from_slice(&addr.to_le_bytes());
    req.extend_from_slice(&len.to_le_bytes());
    req
}

/// Echo of foreign bytes and a checksum of the programs' code, both one merged group; the
/// checksum is the one computed here from rank 0's memory.
async fn checksum_service_answers(s: &mut Session) {
    assert_eq!(one_group(&ask(s, "checksum", RAW).await), RAW);
    // No program yet: every server says so, in one group.
    let text = one_error(&ask(s, "checksum", &checksum_request(0, 4096)).await);
    assert!(text.starts_with("service \"checksum\""), "{text}");
    assert!(text.contains("controls no program"), "{text}");
    let pid0 = start_sleepers(s).await;
    let sum = one_group(&ask(s, "checksum", &checksum_request(0, 4096)).await);
    assert_eq!(sum, fnv_of_exe_start(pid0, 4096).to_le_bytes());
    // An address that is not mapped: every server's error names it and its own pid.
    let groups = ask(s, "checksum", &checksum_request(8, 16)).await;
    let mut seen = IdSet::new();
    for g in &groups {
        let text = String::from_utf8_lossy(&g.payload);
        assert_eq!(g.status, Status::Error, "{groups:?}");
        assert!(text.starts_with("service \"checksum\""), "{text}");
        assert!(text.contains("at 0x8"), "{text}");
        assert!(text.contains("process "), "{text}");
        seen.union_with(&g.sources);
    }
    assert_eq!(seen, IdSet::all(N));
    let kill = service::omis(&s.all(), SyncMode::Timeout(30_000), "2 [] kill()");
    s.request_command(kill).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c_checksum_plugin_in_the_stock_server_answers_foreign_bytes_in_one_group() {
    let mut s = launch(SessionOptions {
        service_plugins: vec![checksum_plugin()],
        ..stock()
    })
    .await;
    checksum_service_answers(&mut s).await;
    // The stock services are still there, by their tags.
    assert_eq!(one_text(&ask(&mut s, SDM, b"ping").await), "pong");
    assert_eq!(one_text(&ask(&mut s, "", b"ping").await), "pong");
    let nodes = one_text(&ask(&mut s, OMIS, b"1 [] number_of_nodes()").await);
    assert_eq!(nodes, "1 [] number_of_nodes(8)");
    s.shutdown(Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_builder_example_server_answers_the_same_requests() {
    let mut s = launch(SessionOptions {
        program: Some(sdm_e2e::checksum_server().into()),
        ..SessionOptions::default()
    })
    .await;
    checksum_service_answers(&mut s).await;
    assert_eq!(one_text(&ask(&mut s, SDM, b"ping").await), "pong");
    s.shutdown(Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_that_do_not_load_are_named_and_the_rest_works() {
    let missing = scratch().join("libno-such-service.so");
    let wrong = wrong_abi_plugin();
    let mut s = launch(SessionOptions {
        service_plugins: vec![missing.clone(), wrong.clone()],
        ..stock()
    })
    .await;
    let text = one_error(&ask(&mut s, "checksum", RAW).await);
    assert!(
        text.starts_with("service \"checksum\": no such service"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{} did not load", missing.display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("{} did not load", wrong.display())),
        "{text}"
    );
    assert!(text.contains("ABI version 99"), "{text}");
    // Every server answers its own id: eight groups.
    let g = ask(&mut s, SDM, b"value").await;
    assert_eq!(g.len(), N as usize, "{g:?}");
    assert!(g.iter().all(|g| g.status == Status::Replied), "{g:?}");
    assert_eq!(one_text(&ask(&mut s, SDM, b"ping").await), "pong");
    s.shutdown(Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tag_gets_an_error_naming_it_and_the_services() {
    let mut s = launch(stock()).await;
    let text = one_error(&ask(&mut s, "nosuch", b"ping").await);
    assert!(
        text.starts_with("service \"nosuch\": no such service"),
        "{text}"
    );
    for name in ["sdm", "omis", "counters", "procstat"] {
        assert!(text.contains(name), "{text}");
    }
    // OMIS text tagged for the sdm service is not OMIS.
    let text = one_error(&ask(&mut s, SDM, b"1 [] number_of_nodes()").await);
    assert!(text.starts_with("unknown request"), "{text}");
    s.shutdown(Duration::from_secs(20)).await;
}

/// `--service-plugin` on the command line does what `SessionOptions::service_plugins`
/// does, and `--service` tags `--send`.
#[test]
fn cli_service_plugin_and_service_tag_launch_requests() {
    let plugin = checksum_plugin();
    let plugin = plugin.to_str().unwrap();
    // Opcode 0x41 is not one the plugin knows: its own error, from every server, merged,
    // and the run fails.
    let out = refused([
        "launch",
        "-n",
        "8",
        "--service-plugin",
        plugin,
        "--service",
        "checksum",
        "--send",
        "A",
    ]);
    let want = format!(
        "[0-7] error: service \"checksum\": plugin {plugin}: handle failed (code 1): unknown opcode 0x41 (0 echo, 1 checksum, `echo WORDS`)"
    );
    assert!(out.lines().any(|l| l == want), "{out}");
    // A request the built-in service does not know fails the run too.
    let out = refused(["launch", "-n", "2", "--send", "nosuch"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("[0-1] error: unknown request \"nosuch\"")),
        "{out}"
    );
    let out = sdm_e2e::sdm_ok([
        "launch",
        "-n",
        "2",
        "--service",
        "omis",
        "--send",
        "1 [] number_of_nodes()",
    ]);
    assert!(
        out.lines().any(|l| l == "[0-1] 1 [] number_of_nodes(2)"),
        "{out}"
    );
}

/// Runs `sdm ARGS…`, asserts it exited with status 1 (a refused request), and returns
/// what it printed on stdout.
fn refused<const K: usize>(args: [&str; K]) -> String {
    let out = std::process::Command::new(sdm_e2e::sdm())
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text} {out:?}");
    text
}
