//! One server serving many ranks (issue 37, items 4 and 5): `--ranks-per-server 8` puts the
//! 8 ranks of a job on one server, which runs one monitor (one thread) per rank. Each
//! rank's output comes up exact and under its own rank; stop, bt and cont reach all 8;
//! standard input to `[2,5]` reaches exactly those two; a rank killed from outside is
//! reported as ended for itself while the others answer; detach and the end of the session
//! act on every local rank.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sdm::console::Console;
use sdm_client::session::{Session, SessionOptions};
use sdm_e2e::console_command as run;
use sdm_e2e::one_server;
use sdm_e2e::procs::{Sleeps, alive, state, tracer};
use sdm_e2e::{labelled_lines, sdm_run};
use sdm_proto::IdSet;

/// Ranks in every test, all on one server.
const N: u32 = 8;

/// `sdm run` flags of every test: the `N` ranks, all on one server.
const ONE_SERVER: [&str; 4] = ["-n", "8", "--ranks-per-server", "8"];

/// Per rank, the texts of the lines it printed, in order.
fn per_rank(lines: &[(IdSet, String)]) -> BTreeMap<u32, Vec<String>> {
    let mut per: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (ids, text) in lines {
        for id in ids.iter() {
            per.entry(id).or_default().push(text.clone());
        }
    }
    per
}

/// Every rank's output, merged: each rank prints its environment and then the same 3000
/// numbers and its exit, exactly, in order, under its own rank; identical lines of the 8
/// merge into `[0-7]` groups.
#[test]
fn eight_local_ranks_print_exactly_their_own_lines() {
    let script = "echo \"rank $SDM_RANK local $SDM_LOCAL_RANK of $SDM_SIZE\"; seq 1 3000";
    let out = sdm_run(
        &[&ONE_SERVER[..], &["--", "sh", "-c", script]].concat(),
        b"",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines = labelled_lines(&text);
    let per = per_rank(&lines);
    assert_eq!(
        per.keys().copied().collect::<Vec<_>>(),
        (0..N).collect::<Vec<_>>()
    );
    for (rank, got) in &per {
        let mut want = vec![format!("rank {rank} local {rank} of {N}")];
        want.extend((1..=3000).map(|i| i.to_string()));
        want.push("exited with status 0".into());
        assert!(
            got == &want,
            "rank {rank}: {} lines, not its own exactly: {:?}",
            got.len(),
            &got[..got.len().min(5)]
        );
    }
    // Identical lines of the 8 ranks merged: far fewer groups than lines.
    let whole = lines
        .iter()
        .filter(|(ids, _)| ids.len() == u64::from(N))
        .count();
    assert!(whole > 0, "no line of all 8 merged:\n{text:.2000}");
}

/// Standard input to `[2,5]` reaches those two ranks and no other; every rank sees the end
/// of its input.
#[test]
fn stdin_reaches_exactly_the_chosen_local_ranks() {
    let script = "while read x; do echo \"got $x\"; done; echo done";
    let args = [
        &ONE_SERVER[..],
        &["--stdin", "2,5", "--", "sh", "-c", script],
    ]
    .concat();
    let out = sdm_run(&args, b"a\nb\n");
    let lines = labelled_lines(&String::from_utf8(out.stdout).unwrap());
    let who = |t: &str| -> IdSet {
        lines
            .iter()
            .filter(|(_, x)| x == t)
            .fold(IdSet::new(), |acc, (ids, _)| &acc | ids)
    };
    let chosen: IdSet = "[2,5]".parse().unwrap();
    assert_eq!(who("got a"), chosen, "{lines:?}");
    assert_eq!(who("got b"), chosen, "{lines:?}");
    assert_eq!(who("done"), IdSet::all(N), "{lines:?}");
}

/// A session of 8 ranks on one server.
async fn session() -> Session {
    let opts = SessionOptions {
        n: N,
        ranks_per_server: Some(N),
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(N));
    s
}

/// The names of the threads of process `pid`.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim_end().to_owned())
        .collect()
}

/// Waits (a hang guard of two minutes) until none of `pids` lives.
fn all_gone(pids: &[u32]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if pids.iter().all(|&p| !alive(p)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Whether `pid` waits in `clock_nanosleep` (x86-64 system call 230), past its start-up.
fn in_sleep(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/syscall"))
        .is_ok_and(|s| s.split(' ').next() == Some("230"))
}

/// Starts `sleep 1000` on every rank and waits (a hang guard of two minutes) until each
/// sleeps; returns the pids by rank.
async fn start_sleeps(c: &mut Console) -> Vec<u32> {
    let started = c
        .start_program("sleep", &["1000".into()], "pipes")
        .await
        .unwrap();
    let mut pids = BTreeMap::new();
    for l in &started {
        assert!(l.started(), "{l:?}");
        let Some(sdm_omis::Value::Int(pid)) = l.reply.as_ref().and_then(|r| r.results.first())
        else {
            panic!("no pid in {l:?}");
        };
        for r in l.ids.iter() {
            pids.insert(r, *pid as u32);
        }
    }
    assert_eq!(pids.len() as u32, N, "{started:?}");
    let pids: Vec<u32> = pids.into_values().collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pids.iter().all(|&p| in_sleep(p)) {
        assert!(
            Instant::now() < deadline,
            "the sleeps never slept: {pids:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pids
}

/// stop, bt and cont of the 8 ranks of one server: one merged answer each, every process
/// stopped (state `T`) after `stop` and running after `cont`, one monitor thread per
/// rank; the end of the session ends all 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_bt_cont_of_eight_local_ranks() {
    let s = session().await;
    let server = one_server(&s, N).await;
    let mut c = Console::new(s, false);
    let pids = start_sleeps(&mut c).await;
    let distinct: std::collections::BTreeSet<u32> = pids.iter().copied().collect();
    assert_eq!(distinct.len() as u32, N, "a process per rank: {pids:?}");
    // A thread just spawned by a monitor carries its parent's name until it names itself
    // (std names a thread from inside it), so the count settles to one per rank.
    let monitors = || {
        thread_names(server)
            .iter()
            .filter(|n| *n == "sdm-monitor")
            .count() as u32
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while monitors() != N && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(monitors(), N, "one monitor thread per rank");
    assert_eq!(run(&mut c, "stop").await, "[0-7] stopped\n");
    for &p in &pids {
        assert_eq!(state(p), Some('T'), "pid {p} after stop");
    }
    let bt = run(&mut c, "bt").await;
    assert!(
        bt.lines().all(|l| l.trim_start().starts_with("[0-7] ")),
        "one merged stack:\n{bt}"
    );
    assert!(bt.contains("clock_nanosleep"), "{bt}");
    assert_eq!(run(&mut c, "cont").await, "[0-7] running\n");
    for &p in &pids {
        assert_ne!(state(p), Some('T'), "pid {p} after cont");
    }
    c.shutdown().await;
    assert!(all_gone(&pids), "the end of the session ends every rank");
}

/// Runs console commands (`sleep`) until `want` has been printed; returns all of it.
async fn wait_for(c: &mut Console, want: &str) -> String {
    let mut out = String::new();
    for _ in 0..1200 {
        if out.contains(want) {
            return out;
        }
        out += &run(c, "sleep 0.1").await;
    }
    panic!("never printed {want:?}; got:\n{out}");
}

/// A rank whose program is killed from outside is reported as ended, for itself; the
/// other 7 of the same server still answer stop and status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_killed_from_outside_ends_alone() {
    let s = session().await;
    let mut c = Console::new(s, false);
    let pids = start_sleeps(&mut c).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pids[3] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for(&mut c, "[3] killed by signal SIGKILL\n").await;
    let stopped = run(&mut c, "stop").await;
    assert!(
        stopped.starts_with("[0-2,4-7] stopped\n[3] "),
        "the others stop, rank 3 says how it ended:\n{stopped}"
    );
    assert!(stopped.contains("SIGKILL"), "{stopped}");
    let status = run(&mut c, "status").await;
    let lines: Vec<&str> = status.lines().collect();
    assert!(
        lines.len() == 2
            && lines[0].starts_with("[0-2,4-7] stopped")
            && lines[1].starts_with("[3] ")
            && lines[1].contains("SIGKILL"),
        "{status}"
    );
    assert_eq!(
        run(&mut c, "cont").await.lines().next(),
        Some("[0-2,4-7] running")
    );
    c.shutdown().await;
    assert!(all_gone(&pids));
}

/// Attached to 8 processes by one server: `detach` of some ranks and the end of the
/// session let every one go, untraced and running, each on its own rank's monitor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detach_and_the_end_let_every_local_rank_go() {
    let sleeps = Sleeps::start(N);
    let pids = sleeps.pids();
    let s = session().await;
    let mut c = Console::new(s, false);
    for l in c.attach(&pids).await.unwrap() {
        assert!(l.started(), "{l:?}");
    }
    for &p in &pids {
        assert_ne!(tracer(p), 0, "pid {p} attached");
    }
    assert_eq!(run(&mut c, "stop").await, "[0-7] stopped\n");
    assert_eq!(run(&mut c, "detach 0-3").await, "[0-3] detached\n");
    for &p in &pids[..4] {
        assert_eq!(tracer(p), 0, "pid {p} detached");
        assert_ne!(state(p), Some('T'), "pid {p} left running");
    }
    c.shutdown().await;
    for &p in &pids {
        assert_eq!(tracer(p), 0, "pid {p} let go at the end");
        assert_ne!(state(p), Some('T'), "pid {p} left running");
        assert!(alive(p), "pid {p} not killed");
    }
    drop(sleeps);
}
