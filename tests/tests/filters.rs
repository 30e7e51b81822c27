//! Filters end to end, with real daemons: the built-in `sum`, `min`, `max`, `mean` and `count`
//! over the `value` service (server `i` answers `i`) in real trees of 16 servers, finished at
//! the front-end; and the example C plugin (`filters/examples/c/sum_plugin.c`, built here with
//! `cc`) loaded by every daemon through `SessionOptions::filter_plugins`, folding in the tree.
//! A payload a filter refuses, a plugin that fails, or an unknown filter fails that op with the
//! filter's error at the front-end, as error groups (never lost: the servers answered); the
//! daemons keep serving.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sdm_client::ReplyGroup;
use sdm_client::session::{Session, SessionOptions};
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::Shape;

const N: u32 = 16;

fn opts(topology: Shape) -> SessionOptions {
    SessionOptions {
        n: N,
        topology,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    }
}

async fn launch(o: &SessionOptions) -> Session {
    let s = Session::launch(o, |_| {}).await.unwrap();
    let r = s.report();
    assert_eq!(r.ready, IdSet::all(N), "failed: {:?}", r.failed);
    s
}

/// Builds the example C plugin into a scratch directory, once for all the tests of this
/// process (tests run in parallel: a second build rewriting the library while another
/// test's daemons load it made them miss the filter); returns the library's path.
fn build_c_plugin() -> PathBuf {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("sdm-e2e-filters-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("libcsum.so");
        let src = sdm_e2e::filters_dir().join("examples/c/sum_plugin.c");
        sdm_e2e::build_c_plugin(&src, &[], &out);
        out
    })
    .clone()
}

/// The one replied group of a reduction, as text; every id of `dest` in it.
fn single(groups: &[ReplyGroup], dest: &IdSet) -> String {
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].status, Status::Replied, "{groups:?}");
    assert_eq!(&groups[0].sources, dest);
    String::from_utf8_lossy(&groups[0].payload).into_owned()
}

/// Every id of `dest` in an error group (refused by the filter, not lost), in groups whose
/// payloads all satisfy `why`.
fn all_errors(groups: &[ReplyGroup], dest: &IdSet, why: impl Fn(&str) -> bool) {
    let mut seen = IdSet::new();
    for g in groups {
        assert_eq!(g.status, Status::Error, "{groups:?}");
        assert!(g.sources.is_disjoint(&seen), "{groups:?}");
        seen.union_with(&g.sources);
        let text = String::from_utf8_lossy(&g.payload);
        assert!(why(&text), "unexpected reason: {text}");
    }
    assert_eq!(&seen, dest, "{groups:?}");
}

async fn shutdown(s: Session) {
    s.shutdown(Duration::from_secs(20)).await;
}

/// After failed ops: every daemon still answers, `filter` (a sum) still adds up `value`;
/// then shuts the tree down.
async fn still_serving(s: Session, filter: &str) {
    let all = s.all();
    let g = s
        .request_filtered(&all, SyncMode::WaitAll, filter, "value")
        .await
        .unwrap();
    assert_eq!(single(&g, &all), "120");
    let g = s.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_eq!(single(&g, &all), "pong");
    shutdown(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_reductions_over_16_servers_in_two_tree_shapes() {
    for shape in [Shape::Binomial, Shape::KAry(3)] {
        let s = launch(&opts(shape.clone())).await;
        let all = s.all();
        // value: server i answers i, so 0..=15.
        for (filter, want) in [
            ("sum", "120"),
            ("min", "0"),
            ("max", "15"),
            ("mean", "7.5"),
            ("count", "16"),
        ] {
            let g = s
                .request_filtered(&all, SyncMode::WaitAll, filter, "value")
                .await
                .unwrap();
            assert_eq!(single(&g, &all), want, "{shape}: {filter}");
        }
        // A subset: 3 + 4 + 5 + 9.
        let some: IdSet = "[3-5,9]".parse().unwrap();
        let g = s
            .request_filtered(&some, SyncMode::WaitAll, "mean", "value")
            .await
            .unwrap();
        assert_eq!(single(&g, &some), "5.25", "{shape}");
        // The same op through send_filtered + collect is finished too.
        let op = s
            .send_filtered(&all, SyncMode::Timeout(10_000), "mean", "value")
            .await
            .unwrap();
        assert_eq!(single(&s.collect(op, &all).await.unwrap(), &all), "7.5");
        shutdown(s).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_payloads_and_unknown_filters_fail_the_op_not_the_daemons() {
    let s = launch(&opts(Shape::Binomial)).await;
    let all = s.all();
    // `ping` answers `pong`: not a number. Each id is an error, naming itself and the filter.
    let g = s
        .request_filtered(&all, SyncMode::WaitAll, "sum", "ping")
        .await
        .unwrap();
    all_errors(&g, &all, |t| {
        t.starts_with(r#"filter "sum": payload from ["#)
            && t.ends_with(r#"is not a decimal number: "pong""#)
    });
    let g = s
        .request_filtered(&all, SyncMode::WaitAll, "no-such-filter", "value")
        .await
        .unwrap();
    all_errors(&g, &all, |t| {
        t.starts_with(r#"filter "no-such-filter": no such filter; known: "#)
    });
    // The daemons are still there.
    still_serving(s, "sum").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_plugin_loads_in_every_daemon_and_folds_in_the_tree() {
    let plugin = build_c_plugin();
    let s = launch(&SessionOptions {
        filter_plugins: vec![plugin.clone()],
        ..opts(Shape::Binomial)
    })
    .await;
    let all = s.all();
    let g = s
        .request_filtered(&all, SyncMode::WaitAll, "csum", "value")
        .await
        .unwrap();
    assert_eq!(single(&g, &all), "120");
    let some: IdSet = "[1,7-9]".parse().unwrap();
    let g = s
        .request_filtered(&some, SyncMode::WaitAll, "csum", "value")
        .await
        .unwrap();
    assert_eq!(single(&g, &some), "25");

    // A payload the plugin refuses fails the op with the plugin's own message.
    let g = s
        .request_filtered(&all, SyncMode::WaitAll, "csum", "ping")
        .await
        .unwrap();
    let shown = plugin.display().to_string();
    all_errors(&g, &all, |t| {
        t == format!(
            r#"filter "csum": plugin csum ({shown}): fold failed (code 1): payload of 4 bytes is not a decimal integer"#
        )
    });
    // A plugin whose init fails (csum takes no parameters) fails the op the same way.
    let g = s
        .request_filtered(&all, SyncMode::WaitAll, "csum:x", "value")
        .await
        .unwrap();
    all_errors(&g, &all, |t| {
        t.starts_with(r#"filter "csum:x": plugin csum ("#)
            && t.ends_with("init failed (code 1): csum takes no parameters")
    });
    // And the daemons keep serving, plugin included.
    still_serving(s, "csum").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_does_not_load_fails_the_launch_with_its_path() {
    let missing = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-plugin.so");
    let err = Session::launch(
        &SessionOptions {
            filter_plugins: vec![missing],
            ..opts(Shape::Binomial)
        },
        |_| {},
    )
    .await
    .err()
    .expect("the launch must fail");
    let text = format!("{err:#}");
    assert!(text.contains("no-such-plugin.so"), "{text}");
}

/// `--filter-plugin` on the command line does what `SessionOptions::filter_plugins` does: the
/// daemons load the plugin, and `--filter` names its filter for the replies of `--send`.
#[test]
fn cli_filter_plugin_and_filter_reduce_launch_replies() {
    let plugin = build_c_plugin();
    let plugin = plugin.to_str().unwrap();
    let out = sdm_e2e::sdm_ok([
        "launch",
        "-n",
        "8",
        "--filter-plugin",
        plugin,
        "--filter",
        "csum",
        "--send",
        "value",
    ]);
    // 0 + 1 + … + 7, one group holding every id.
    assert!(out.lines().any(|l| l == "[0-7] 28"), "{out}");
    // Without the plugin the filter is unknown: every id comes back as an error, and the
    // run fails.
    let (ok, out) = sdm_status(&["launch", "-n", "2", "--filter", "csum", "--send", "value"]);
    assert!(
        out.contains("[0-1] error: filter \"csum\": no such filter"),
        "{out}"
    );
    assert!(!ok && !out.contains("lost"), "{out}");
}

/// Runs `sdm ARGS`: (exit success, stdout).
fn sdm_status(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(sdm_e2e::sdm())
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success(), text)
}

/// A payload `sum` refuses (`ping` answers text) is printed `[id] error: filter "sum": ...`,
/// each id once, never as lost (the servers are alive), and the command exits non-zero.
#[test]
fn cli_a_refused_payload_is_an_error_not_lost() {
    let (ok, out) = sdm_status(&["launch", "-n", "4", "--filter", "sum", "--send", "ping"]);
    assert!(!ok, "a filter error must fail the run: {out}");
    assert!(!out.contains("lost"), "{out}");
    let mut seen = IdSet::new();
    for line in out.lines().filter(|l| l.contains(" error: ")) {
        let (ids, why) = line.split_once(" error: ").unwrap();
        let ids: IdSet = ids.parse().unwrap();
        assert!(ids.is_disjoint(&seen), "an id twice: {out}");
        seen.union_with(&ids);
        assert!(why.starts_with(r#"filter "sum": payload from ["#), "{line}");
        assert!(
            why.ends_with(r#"is not a decimal number: "pong""#),
            "{line}"
        );
    }
    assert_eq!(seen, IdSet::all(4), "{out}");
}
