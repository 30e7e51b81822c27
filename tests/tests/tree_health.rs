//! The tree's own health per link over real daemons: `sdm status -v --json` lists every
//! link of the tree once (the edges of the topology), each with a keepalive round trip
//! measured, and frame and byte counts that only grow and that count at least the output a
//! flood sent through each link; after an interior server is SIGKILLed, its orphans
//! re-attach and the adopter counts them; `sdm top --tree` streams every link each wave.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sdm::console::Console;
use sdm_proto::IdSet;
use sdm_topology::{NodeId, Shape};

/// Keepalives every 50 ms (so round trips are measured soon), dead after 10 s.
const KEEPALIVE: &str = "50,10000";

/// A private runtime directory for this test (so it sees no other front-end).
fn runtime_dir() -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let d = std::env::temp_dir().join(format!("sdm-tree-health-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
    d
}

fn status(runtime: &Path, args: &[&str]) -> Output {
    Command::new(sdm_e2e::sdm())
        .arg("status")
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime)
        .output()
        .expect("running sdm status")
}

/// The link rows of `sdm status -v --json` (those naming a child), by child, once every
/// server answered: a wave that timed out on a loaded machine is asked again (the 120 s
/// guard is only against a hang).
fn links(runtime: &Path) -> BTreeMap<u64, serde_json::Value> {
    let guard = Instant::now() + Duration::from_secs(120);
    loop {
        let rows = links_once(runtime);
        let answered = rows
            .as_ref()
            .is_some_and(|r| r.values().all(|v| v["state"] == "answered"));
        match rows {
            Some(rows) if answered || Instant::now() > guard => return rows,
            None if Instant::now() > guard => panic!("sdm status -v kept failing"),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// One `sdm status -v --json` (`None`: it failed, as when its answer took over 5 s).
fn links_once(runtime: &Path) -> Option<BTreeMap<u64, serde_json::Value>> {
    let o = status(runtime, &["-v", "--json"]);
    if o.status.code() != Some(0) {
        return None;
    }
    let mut rows = BTreeMap::new();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        if let Some(c) = v["child"].as_u64() {
            assert!(
                rows.insert(c, v).is_none(),
                "link to {c} listed twice: {o:?}"
            );
        }
    }
    Some(rows)
}

/// The tree's edges, child -> parent (`None`: the master), from the topology.
fn edges(shape: &Shape, n: u32) -> BTreeMap<u64, Option<u64>> {
    let t = shape.build(n);
    (0..n)
        .map(|s| {
            let p = t.parent(NodeId::Server(s)).and_then(|p| p.server());
            (u64::from(s), p.map(u64::from))
        })
        .collect()
}

/// Frames and bytes each way of a link row.
fn counts(v: &serde_json::Value) -> [u64; 4] {
    let n = |dir: &str, k: &str| {
        v[dir][k]
            .as_u64()
            .unwrap_or_else(|| panic!("{dir}.{k}: {v}"))
    };
    [
        n("up", "frames"),
        n("up", "bytes"),
        n("down", "frames"),
        n("down", "bytes"),
    ]
}

struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Rank R's flood line: letters only (no digit a merge could template), distinct per rank.
fn flood_line(rank: u64) -> String {
    let letters: String = rank
        .to_string()
        .chars()
        .map(|c| (b'a' + c.to_digit(10).unwrap() as u8) as char)
        .collect();
    format!("flood-{letters}")
}

const LINES: u64 = 2000;

#[test]
fn status_v_lists_every_link_once_with_rtt_and_counts_that_grow() {
    let n = 12u32;
    let runtime = runtime_dir();
    let go = runtime.join("go");
    // Each rank waits for the go file, prints LINES lines of its own, then waits for input.
    let script = format!(
        "L=$(echo $SDM_RANK | tr 0-9 a-j); while [ ! -e {go} ]; do sleep 0.1; done; \
         yes flood-$L | head -n {LINES}; read x",
        go = go.display()
    );
    let mut run = Run(Command::new(sdm_e2e::sdm())
        .args(["run", "--ranks-per-server", "1", "-n", &n.to_string()])
        .args(["--", "sh", "-c", &script])
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("SDM_KEEPALIVE_MS", KEEPALIVE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    // The run's output is read as it comes (a full pipe would hold the flood back).
    let seen = Arc::new(AtomicU64::new(0));
    let out = run.0.stdout.take().unwrap();
    let counter = seen.clone();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            if l.unwrap_or_default().contains("flood-") {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let sock = runtime.join("sdm").join(format!("{}.sock", run.0.id()));
    assert!(
        sdm_e2e::daemons::wait_for(|| sock.exists()),
        "no socket at {}",
        sock.display()
    );

    // Every link of the tree once, with its round trip measured after a few keepalives.
    let want = edges(&Shape::Binomial, n);
    let guard = Instant::now() + Duration::from_secs(60);
    let first = loop {
        let rows = links(&runtime);
        let timed = rows
            .values()
            .all(|v| v["rtt_ns"]["samples"].as_u64() > Some(0));
        if timed || Instant::now() > guard {
            break rows;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let got: BTreeMap<u64, Option<u64>> = first
        .iter()
        .map(|(&c, v)| (c, v["parent"].as_u64()))
        .collect();
    assert_eq!(got, want, "the links are the tree's edges: {first:?}");
    for (c, v) in &first {
        assert!(v.get("error").is_none(), "link to {c}: {v}");
        let rtt = &v["rtt_ns"];
        assert!(rtt["samples"].as_u64() > Some(0), "link to {c}: {v}");
        assert!(rtt["min"].as_u64() > Some(0), "link to {c}: {v}");
        assert!(
            rtt["min"].as_u64() <= rtt["max"].as_u64(),
            "link to {c}: {v}"
        );
        assert!(counts(v).iter().all(|&x| x > 0), "link to {c}: {v}");
    }

    // The flood: every rank's lines go up every link between it and the master.
    std::fs::write(&go, "").unwrap();
    assert!(
        sdm_e2e::daemons::wait_for(|| seen.load(Ordering::SeqCst) >= u64::from(n) * LINES),
        "the flood reached the front-end: {} lines",
        seen.load(Ordering::SeqCst)
    );
    let after = links(&runtime);
    let tree = Shape::Binomial.build(n);
    for (c, v) in &after {
        let (a, b) = (counts(&first[c]), counts(v));
        assert!(
            a.iter().zip(&b).all(|(x, y)| x <= y),
            "link to {c} counts only grow: {a:?} then {b:?}"
        );
        let flood: u64 = tree
            .subtree(NodeId::Server(*c as u32))
            .iter()
            .map(|r| LINES * flood_line(u64::from(r)).len() as u64)
            .sum();
        assert!(
            b[1] - a[1] >= flood,
            "link to {c} carried its subtree's flood ({flood} bytes): {a:?} then {b:?}"
        );
        // The flood has drained: nothing waits for credit on any link.
        assert_eq!(v["queue"]["bytes"], 0, "link to {c}: {v}");
        assert_eq!(v["queue"]["frames"], 0, "link to {c}: {v}");
        // Every server merged the earlier telemetry waves' replies with `identical`.
        let identical = v["filters"]
            .as_array()
            .and_then(|f| f.iter().find(|f| f["filter"] == "identical"))
            .and_then(|f| f["calls"].as_u64());
        assert!(identical >= Some(1), "link to {c}: {v}");
    }
    drop(run.0.stdin.take());
    let _ = run.0.wait();
    reader.join().unwrap();
    let _ = std::fs::remove_dir_all(&runtime);
}

/// The console's `health -v` in JSON: the link rows, by child.
async fn health_links(c: &mut Console) -> BTreeMap<u64, serde_json::Value> {
    let mut out = Vec::new();
    let _ = c.command("health -v", &mut out).await.unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter_map(|v| Some((v["child"].as_u64()?, v)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reattachment_shows_in_the_adopters_count() {
    let s = sdm_e2e::sixteen_servers().await;
    let mut c = Console::new(s, true);
    let before = health_links(&mut c).await;
    assert_eq!(before.len(), 16, "{before:?}");
    assert!(
        before
            .values()
            .all(|v| v["adopted"] == 0 && v["reattached"] == 0)
    );
    // One telemetry request carrying a 1 MiB payload: every link's down bytes pass 1 MiB,
    // more than the health waves and keepalives of this test could ever add.
    const PAD: u64 = 1 << 20;
    let m = sdm_client::service::command(
        sdm_client::telemetry::SERVICE,
        &IdSet::all(16),
        sdm_proto::SyncMode::WaitAll,
        vec![b'x'; PAD as usize],
    );
    c.session().request_command(m).await.unwrap();
    let padded = health_links(&mut c).await;
    for orphan in [4, 5, 12, 13] {
        let down = padded[&orphan]["down"]["bytes"]
            .as_u64()
            .expect("down bytes");
        assert!(down >= PAD, "{:?}", padded[&orphan]);
    }
    // Binomial over 16: interior server 11 (under 7) has children 12 and 13, which
    // re-attach to 7, their nearest live ancestor; interior server 3 (under the master) has
    // children 4 and 5, which re-attach to the master.
    sdm_e2e::kill9(c.session(), 11);
    sdm_e2e::kill9(c.session(), 3);
    let guard = Instant::now() + Duration::from_secs(60);
    let rows = loop {
        let rows = health_links(&mut c).await;
        let settled = [4, 5, 12, 13]
            .iter()
            .all(|o| rows[o]["state"] == "answered" && rows[o]["reattached"] == 1);
        if settled || Instant::now() > guard {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // 12 and 13 re-attach to 7, their nearest live ancestor, or to the master if 7 was
    // too slow to take them (recover.rs falls back); 4 and 5 to the master (a null
    // parent). 7 counts exactly the orphans that say it is their parent.
    let (seven, master) = (serde_json::json!(7), serde_json::Value::Null);
    let mut under_seven = BTreeSet::new();
    for orphan in [12u64, 13, 4, 5] {
        let v = &rows[&orphan];
        let to_seven = v["parent"] == seven;
        assert!(to_seven && orphan > 5 || v["parent"] == master, "{v}");
        if to_seven {
            under_seven.insert(orphan);
        }
        assert_eq!(v["reattached"], 1, "{v}");
        // The re-attached link's figures are its own, not the dead link's too.
        let down = v["down"]["bytes"].as_u64().expect("down bytes");
        assert!(down < PAD, "{v}");
    }
    assert_eq!(rows[&7]["adopted"], under_seven.len(), "{:?}", rows[&7]);
    let adopted_now: BTreeSet<u64> = rows[&7]["adopted_now"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(adopted_now, under_seven, "{:?}", rows[&7]);
    // The dead servers are listed, with why, not left out.
    assert_eq!(rows.len(), 16, "{rows:?}");
    for dead in [3, 11] {
        assert_eq!(rows[&dead]["state"], "lost", "{:?}", rows[&dead]);
    }
    let others: Vec<u64> = (0..16)
        .filter(|s| ![3, 4, 5, 7, 11, 12, 13].contains(s))
        .collect();
    for s in others {
        assert_eq!(rows[&s]["adopted"], 0, "{}", rows[&s]);
        assert_eq!(rows[&s]["reattached"], 0, "{}", rows[&s]);
    }
    c.shutdown().await;
}

/// Two waves of `sdm top --tree --json` over 8 servers, and its whole output.
fn top_tree_waves() -> (Vec<serde_json::Value>, String) {
    let text = sdm_e2e::sdm_ok([
        "top",
        "--tree",
        "-n",
        "8",
        "--ranks-per-server",
        "1",
        "--period",
        "3",
        "--count",
        "2",
        "--json",
        "--",
        "sleep",
        "1000",
    ]);
    let waves = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("links").is_some())
        .collect();
    (waves, text)
}

#[test]
fn top_tree_streams_every_link_each_wave() {
    // A server too slow to answer within the wave's wait (3 s) on a loaded machine gives
    // an error row: such a run is made again (the guard is only against a hang).
    let guard = Instant::now() + Duration::from_secs(180);
    let (waves, text) = loop {
        let (waves, text) = top_tree_waves();
        let answered = waves.iter().all(|w| {
            w["links"]
                .as_array()
                .is_some_and(|r| r.iter().all(|v| v["state"] == "answered"))
        });
        if answered || Instant::now() > guard {
            break (waves, text);
        }
    };
    assert_eq!(waves.len(), 2, "{text}");
    let want = edges(&Shape::Binomial, 8);
    let mut last: BTreeMap<u64, [u64; 4]> = BTreeMap::new();
    for (k, w) in waves.iter().enumerate() {
        assert_eq!(w["wave"], k as u64 + 1, "{w}");
        assert!(w["wave_bytes"].as_u64() > Some(0), "{w}");
        let rows = w["links"].as_array().unwrap();
        let got: BTreeMap<u64, Option<u64>> = rows
            .iter()
            .map(|v| (v["child"].as_u64().unwrap(), v["parent"].as_u64()))
            .collect();
        assert_eq!(got, want, "every link once: {w}");
        for v in rows {
            let c = v["child"].as_u64().unwrap();
            let now = counts(v);
            if let Some(before) = last.get(&c) {
                assert!(before.iter().zip(&now).all(|(x, y)| x <= y), "{c}: {w}");
            }
            last.insert(c, now);
        }
    }
}
