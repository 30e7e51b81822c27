//! One server attached to a host's worth of processes (issue 37, item 7): 256 `sleep`
//! processes attached by a single server, one rank each. Every rank is accounted through
//! attach, `status`, `stop`, a merged `bt` and `detach` (none lost, none left traced, no
//! thread left waiting for them in the server), and while they all sit idle the server's
//! rank monitors do not wake at all: a monitor waits for its process's exits and stops, it
//! does not poll them (1024 monitors polling every 2 ms took the CPU from the server's
//! link, and the front-end called the whole host lost).

use std::collections::BTreeMap;
use std::time::Duration;

use sdm::console::Console;
use sdm::words::is_error;
use sdm_client::session::{Session, SessionOptions};
use sdm_e2e::console_command as run;
use sdm_e2e::one_server;
use sdm_e2e::procs::{Sleeps, state_and_tracer};
use sdm_proto::{IdSet, Status};

/// Processes attached to, all by one server.
const N: u32 = 256;

/// How often each rank monitor thread of process `pid` was switched out so far, by
/// thread id: a thread blocked in a wait has a count that does not move.
fn monitor_switches(pid: u32) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let path = t.unwrap().path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim_end() != "sdm-monitor" {
            continue;
        }
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        let switches: u64 = status
            .lines()
            .filter_map(|l| {
                l.strip_prefix("voluntary_ctxt_switches:")
                    .or(l.strip_prefix("nonvoluntary_ctxt_switches:"))
            })
            .map(|v| v.trim().parse::<u64>().unwrap())
            .sum();
        let tid = path.file_name().unwrap().to_str().unwrap().parse().unwrap();
        out.insert(tid, switches);
    }
    out
}

/// How many threads of process `pid` are named `name`.
fn threads_named(pid: u32, name: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim_end() == name)
        .count()
}

/// The ranks of the `[ids] text` lines of `out` (indented as a tree) whose text contains
/// `word`.
fn ranks_saying(out: &str, word: &str) -> IdSet {
    out.lines()
        .map(str::trim_start)
        .filter(|l| l.contains(word))
        .filter_map(|l| l.split_once(' ')?.0.parse::<IdSet>().ok())
        .fold(IdSet::new(), |acc, ids| &acc | &ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_attached_to_256_processes_accounts_every_rank_and_idles() {
    let sleeps = Sleeps::start(N);
    let pids = sleeps.pids();
    let opts = SessionOptions {
        n: N,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(N));
    let server = one_server(&s, N).await;
    let mut c = Console::new(s, false);
    for l in c.attach(&pids).await.unwrap() {
        assert!(l.started(), "{l:?}");
    }
    let all = format!("[0-{}]", N - 1);
    assert_eq!(run(&mut c, "status").await, format!("{all} running\n"));

    // Every rank attached and idle: not one monitor thread wakes meanwhile.
    let before = monitor_switches(server);
    assert_eq!(before.len(), N as usize, "one monitor thread per rank");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = monitor_switches(server);
    let woke: Vec<_> = before
        .iter()
        .filter(|(tid, n)| after.get(tid) != Some(n))
        .collect();
    assert!(
        woke.is_empty(),
        "{} of {N} idle monitors woke within a second, e.g. {:?}",
        woke.len(),
        woke.iter().take(4).collect::<Vec<_>>()
    );

    // Stopped, one merged bt names every rank's sleep, and detach lets every one go,
    // with nothing left waiting for them in the server.
    assert_eq!(run(&mut c, "stop").await, format!("{all} stopped\n"));
    let bt = run(&mut c, "bt").await;
    assert_eq!(ranks_saying(&bt, "nanosleep"), IdSet::all(N), "{bt}");
    let stacks = c
        .request(&IdSet::all(N), "1 [] stack_backtrace()")
        .await
        .unwrap();
    assert_eq!(
        stacks.iter().fold(IdSet::new(), |acc, l| &acc | &l.ids),
        IdSet::all(N),
        "{stacks:?}"
    );
    assert!(
        stacks
            .iter()
            .all(|l| l.status == Status::Replied && l.reply.as_ref().is_some_and(|r| !is_error(r))),
        "every rank's stack, none lost or refused: {stacks:?}"
    );
    assert_eq!(run(&mut c, "detach").await, format!("{all} detached\n"));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while threads_named(server, "sdm-waiter") > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} waiter threads outlived the detach",
            threads_named(server, "sdm-waiter")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for &p in &pids {
        let (state, tracer) = state_and_tracer(p);
        assert_eq!(tracer, 0, "pid {p} still traced");
        assert!(
            state == 'S' || state == 'R',
            "pid {p} left in state {state}"
        );
    }
    c.shutdown().await;
    drop(sleeps);
}
