//! Running the `sdm` command's daemons and reading what they answer: `sdm run` with input
//! and exact merging, its ranks' labelled lines, and the one server process a session of
//! ranks that share a server has.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use sdm_client::session::Session;
use sdm_proto::{IdSet, Status, SyncMode};

use crate::sdm;

/// Runs `sdm run ARGS` with `input` on its standard input; it must succeed.
pub fn sdm_run(args: &[&str], input: &[u8]) -> Output {
    let out = sdm_run_status(args, input);
    assert!(
        out.status.success(),
        "sdm run {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `sdm run ARGS` with `input` on its standard input, whatever its exit status.
pub fn sdm_run_status(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(sdm())
        .arg("run")
        // Output lines wait for the same line of every rank as long as it takes on a
        // loaded machine (the merge is exact up to this lag, 5 s by default); interior
        // nodes hold lines a little longer than by default, so fewer partial groups
        // reach the console.
        .args(["--coalesce-ms", "100", "--merge-lag", "120000"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting sdm run");
    let mut stdin = child.stdin.take().expect("piped");
    stdin.write_all(input).expect("writing sdm's stdin");
    drop(stdin);
    child.wait_with_output().expect("waiting for sdm run")
}

/// The distinct server pids in `omis N [] node_info()` output lines (`[ids] N [ids]
/// node_info(RANK,"HOST",PID)`).
pub fn node_info_pids(out: &str) -> std::collections::BTreeSet<u32> {
    out.lines()
        .filter(|l| l.contains("node_info("))
        .filter_map(|l| {
            let args = l.rsplit_once("node_info(")?.1.trim_end_matches(')');
            args.rsplit(',').next()?.trim().parse().ok()
        })
        .collect()
}

/// Splits `[ids] text` lines, as `sdm run` prints its ranks' merged output.
pub fn labelled_lines(text: &str) -> Vec<(IdSet, String)> {
    text.lines()
        .map(|l| {
            let (ids, rest) = l.split_once(' ').unwrap_or((l, ""));
            let ids: IdSet = ids.parse().unwrap_or_else(|e| panic!("{l:?}: {e}"));
            (ids, rest.to_owned())
        })
        .collect()
}

/// The `info` line of every rank: one group each (each names its rank), all from the
/// same server process. Returns that process's pid.
pub async fn one_server(s: &Session, n: u32) -> u32 {
    let groups = s
        .request(&IdSet::all(n), SyncMode::WaitAll, "info")
        .await
        .unwrap();
    let mut pids = Vec::new();
    let mut seen = IdSet::new();
    for g in &groups {
        assert_eq!(g.status, Status::Replied, "{g:?}");
        let text = String::from_utf8_lossy(&g.payload).into_owned();
        assert!(text.starts_with("host="), "{text}");
        let field = |name: &str| -> String {
            text.split(' ')
                .find_map(|f| f.strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {text}"))
                .to_owned()
        };
        let rank: u32 = field("rank=").parse().unwrap();
        assert_eq!(g.sources, IdSet::single(rank), "{text}");
        seen.insert(rank);
        pids.push(field("pid=").parse::<u32>().unwrap());
    }
    assert_eq!(seen, IdSet::all(n));
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 1, "one server for the {n} ranks: {pids:?}");
    pids[0]
}
