//! Concurrent senders on one `sdm_client` session over real daemons: many tasks with
//! requests in flight at once each get exactly their own op's replies, covering its
//! destination; a master killed mid-flight answers every pending op with its missing ids
//! lost, and later sends fail as closed (an error kind, not a text).

use std::process::Command;
use std::time::Duration;

use sdm_client::ReplyGroup;
use sdm_client::session::{Session, SessionOptions};
use sdm_proto::{IdSet, Status, SyncMode};

const N: u32 = 8;

async fn launch(n: u32) -> Session {
    let o = SessionOptions {
        n,
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&o, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(n), "{:?}", s.report().failed);
    s
}

/// Groups that partition `dest` exactly (each id once, no id outside it).
fn covers_exactly(groups: &[ReplyGroup], dest: &IdSet) {
    let mut seen = IdSet::new();
    for g in groups {
        assert!(
            (&seen & &g.sources).is_empty(),
            "{} accounted twice in {groups:?}",
            g.sources
        );
        seen.union_with(&g.sources);
    }
    assert_eq!(&seen, dest, "{groups:?}");
}

/// A non-empty subset of `0..N` picked by `seed`.
fn subset(seed: u64) -> IdSet {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    x ^= x >> 29;
    let bits = (x % ((1 << N) - 1)) + 1;
    (0..N).filter(|i| bits & (1 << i) != 0).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_tasks_share_one_session_and_each_gets_its_own_replies() {
    let s = launch(N).await;
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let h = s.handle();
        tasks.push(tokio::spawn(async move {
            for k in 0..50u64 {
                let dest = subset(t * 1000 + k);
                let sync = if k % 2 == 0 {
                    SyncMode::WaitAll
                } else {
                    SyncMode::DontWait
                };
                match k % 3 {
                    // `value`: server i answers i, so each group is one id naming itself.
                    0 => {
                        let groups = h.request(&dest, sync, "value").await.unwrap();
                        covers_exactly(&groups, &dest);
                        for g in &groups {
                            assert_eq!(g.status, Status::Replied, "{g:?}");
                            assert_eq!(g.sources.len(), 1, "{g:?}");
                            assert_eq!(g.payload, g.sources.first().unwrap().to_string());
                        }
                    }
                    // A request no server knows comes back naming itself: a token only
                    // this task and request use, so a reply of another op would show.
                    1 => {
                        let token = format!("task{t}req{k}");
                        let op = h.send(&dest, sync, token.clone()).await.unwrap();
                        let groups = h.collect(op, &dest).await.unwrap();
                        covers_exactly(&groups, &dest);
                        for g in &groups {
                            let text = String::from_utf8_lossy(&g.payload);
                            assert!(text.contains(&format!("\"{token}\"")), "{token}: {g:?}");
                        }
                    }
                    // Streamed one group at a time, with a short sleep on the servers.
                    _ => {
                        let op = h
                            .send(&dest, sync, format!("sleep {}", k % 7))
                            .await
                            .unwrap();
                        let mut seen = IdSet::new();
                        let mut groups = Vec::new();
                        while let Some(g) = h.next_group(op, &dest, &mut seen).await.unwrap() {
                            assert_eq!(&g.payload[..], b"ok", "{g:?}");
                            groups.push(g);
                        }
                        covers_exactly(&groups, &dest);
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(s.pending_ops(), 0, "every op was collected and forgotten");
    s.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_killed_mid_flight_answers_every_pending_op_lost() {
    let s = launch(4).await;
    let all = s.all();
    // Ops that cannot finish before the kill: every server sleeps a minute.
    let mut ops = Vec::new();
    for k in 0..20u64 {
        let dest = if k % 2 == 0 {
            all.clone()
        } else {
            IdSet::single((k % 4) as u32)
        };
        ops.push((
            s.send(&dest, SyncMode::WaitAll, "sleep 60000")
                .await
                .unwrap(),
            dest,
        ));
    }
    // One op finishes before the kill, so the table holds only the sleeping ones.
    let done = s.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(s.pending_ops(), ops.len());
    let master = s.launched_pids()[0];
    let killed = Command::new("kill")
        .args(["-9", &master.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Collected from several tasks at once, every op comes back whole and lost.
    let mut waiting = Vec::new();
    for (op, dest) in ops {
        let h = s.handle();
        waiting.push(tokio::spawn(async move {
            let groups = h.collect(op, &dest).await.unwrap();
            covers_exactly(&groups, &dest);
            for g in &groups {
                assert_eq!(g.status, Status::Lost, "{g:?}");
                assert!(g.payload.starts_with(b"master link lost: "), "{g:?}");
            }
        }));
    }
    for w in waiting {
        w.await.unwrap();
    }
    assert_eq!(s.pending_ops(), 0);
    assert!(s.handle().closed_reason().is_some());
    // Events end, and a new send fails as closed.
    assert!(s.next_event().await.is_none());
    let err = s.request(&all, SyncMode::WaitAll, "ping").await;
    match err {
        Err(e) => assert!(e.is_closed(), "{e:?}"),
        // The write may still reach a dying socket: then the op is answered lost.
        Ok(groups) => {
            covers_exactly(&groups, &all);
            assert!(
                groups.iter().all(|g| g.status == Status::Lost),
                "{groups:?}"
            );
        }
    }
    s.shutdown(Duration::from_secs(10)).await;
}
