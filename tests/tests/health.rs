//! The tree's health per subtree over real daemons: all full; after a leaf server is
//! SIGKILLed, its ancestors' subtrees are partial, the leaf's is lost with the reason, and
//! the sibling subtrees stay full; lost ranks come back with how their link ended, typed.

use sdm::console::Console;
use sdm_client::session::{Session, SessionOptions};
use sdm_proto::IdSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_per_subtree_after_a_kill() {
    let s = sdm_e2e::sixteen_servers().await;
    // Binomial: the master's children are servers 0, 1, 3, 7 and 15; server 3's subtree
    // is [3-6], and server 4 is a leaf under it.
    let mut c = Console::new(s, false);
    let mut out = Vec::new();
    c.command("health", &mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text,
        "server 0 subtree [0]: full (1/1 replied)\n\
         server 1 subtree [1-2]: full (2/2 replied)\n\
         server 3 subtree [3-6]: full (4/4 replied)\n\
         server 7 subtree [7-14]: full (8/8 replied)\n\
         server 15 subtree [15]: full (1/1 replied)\n"
    );
    sdm_e2e::kill9(c.session(), 4);
    let mut out = Vec::new();
    c.command("health", &mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0], "server 0 subtree [0]: full (1/1 replied)",
        "{text}"
    );
    assert_eq!(
        lines[2], "server 3 subtree [3-6]: partial (3/4 replied)",
        "{text}"
    );
    assert_eq!(
        lines[3], "  server 4 subtree [4]: lost (0/1 replied)",
        "{text}"
    );
    assert!(
        lines[4].starts_with("    [4] link to server 4 lost"),
        "{text}"
    );
    assert_eq!(
        lines[5], "  server 5 subtree [5-6]: full (2/2 replied)",
        "{text}"
    );
    assert_eq!(
        lines[6], "server 7 subtree [7-14]: full (8/8 replied)",
        "{text}"
    );
    assert_eq!(
        lines[7], "server 15 subtree [15]: full (1/1 replied)",
        "{text}"
    );
    assert_eq!(lines.len(), 8, "{text}");
    c.shutdown().await;
}

/// Pings everyone until the replies settle to `want` replied (or 30 s pass); returns the
/// replied and lost ids of the last ping.
async fn ping_until(c: &mut Console, want: &IdSet) -> (IdSet, IdSet) {
    use sdm_proto::{Status, SyncMode};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let all = c.session().all();
        let groups = c
            .session()
            .request(&all, SyncMode::Timeout(5000), "ping")
            .await
            .unwrap();
        let (mut ok, mut lost) = (IdSet::new(), IdSet::new());
        let mut why = Vec::new();
        for g in groups {
            match g.status {
                Status::Replied => ok.union_with(&g.sources),
                _ => {
                    lost.union_with(&g.sources);
                    why.push(format!(
                        "{} {}",
                        g.sources,
                        String::from_utf8_lossy(&g.payload)
                    ));
                }
            }
        }
        if &ok == want || std::time::Instant::now() > deadline {
            if &ok != want {
                eprintln!("last ping: {why:?}");
            }
            return (ok, lost);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_reattach_and_later_commands_reach_them() {
    let s = sdm_e2e::sixteen_servers().await;
    // The master's first child 0 (a leaf in the binomial tree), interior server 7
    // (subtree [7-14]: children 8, 9 and 11) and interior server 3 (children 4 and 5), all
    // children of the master, then leaf 13 (under 11, which is now adopted by the master).
    sdm_e2e::kill9(&s, 0);
    sdm_e2e::kill9(&s, 7);
    sdm_e2e::kill9(&s, 3);
    let mut c = Console::new(s, false);
    let want: IdSet = "[1-2,4-6,8-15]".parse().unwrap();
    let (ok, lost) = ping_until(&mut c, &want).await;
    assert_eq!(ok, want, "the orphans re-attached (lost: {lost})");
    assert_eq!(lost.to_string(), "[0,3,7]");
    let s = c.session();
    sdm_e2e::kill9(s, 13);
    let want: IdSet = "[1-2,4-6,8-12,14-15]".parse().unwrap();
    let (ok, lost) = ping_until(&mut c, &want).await;
    assert_eq!(ok, want, "13's child 14 re-attached too (lost: {lost})");
    assert_eq!(lost.to_string(), "[0,3,7,13]");
    let mut out = Vec::new();
    c.command("health", &mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("server 3 subtree [3-6]: partial (3/4 replied)"),
        "{text}"
    );
    assert!(
        text.contains("server 7 subtree [7-14]: partial (6/8 replied)"),
        "{text}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_a_stdio_flood_and_a_stream() {
    use sdm_proto::{Status, SyncMode};
    let s = sdm_e2e::sixteen_servers().await;
    let all = s.all();
    // Every rank floods its output; the front-end keeps reading it.
    let start = r#"0 [] sdm_start("/bin/sh", ["-c", "exec yes \"rank $SDM_RANK\""], "pty")"#;
    for g in s
        .request_command(sdm_client::service::omis(&all, SyncMode::WaitAll, start))
        .await
        .unwrap()
    {
        assert_eq!(g.status, Status::Replied, "{g:?}");
    }
    // A stream: waves of the programs' metrics merged by `stats`, with a server killed
    // between waves 1 and 2 (its subtree's programs are killed with it).
    let mut iof = sdm_client::iof::Iof::new(all.clone(), std::time::Duration::from_millis(50));
    iof.set_stdout_handler(|_, _| {});
    let mut lost_seen = IdSet::new();
    for wave in 0..3 {
        if wave == 1 {
            sdm_e2e::kill9(&s, 3);
        }
        let groups = s
            .request_command(sdm_client::service::filtered(
                sdm_client::service::PROCSTAT,
                &all,
                SyncMode::Timeout(10_000),
                "stats",
                "",
            ))
            .await
            .unwrap();
        // Every id is accounted in every wave: replied, lost or timed out.
        let mut seen = IdSet::new();
        for g in &groups {
            assert!(seen.is_disjoint(&g.sources), "{groups:?}");
            seen.union_with(&g.sources);
            if g.status != Status::Replied {
                lost_seen.union_with(&g.sources);
            }
        }
        assert_eq!(seen, all, "wave {wave}: {groups:?}");
        let until = tokio::time::Instant::now() + std::time::Duration::from_millis(200);
        s.pump_stdio(&mut iof, until).await.unwrap();
    }
    assert!(
        lost_seen.contains(3),
        "the killed server was reported: {lost_seen}"
    );
    // End the flood (replies still queue behind output under a flood: issue 5), then the
    // orphans of server 3 answer through the master.
    s.request_command(sdm_client::service::omis(
        &all,
        SyncMode::Timeout(60_000),
        "0 [] kill()",
    ))
    .await
    .unwrap();
    let mut c = Console::new(s, false);
    let want: IdSet = "[0-2,4-15]".parse().unwrap();
    let (ok, lost) = ping_until(&mut c, &want).await;
    assert_eq!(
        ok, want,
        "the flood did not keep the orphans away (lost: {lost})"
    );
    c.shutdown().await;
}

/// Servers serving four ranks each (8 servers, 32 ranks): a killed interior server loses
/// exactly its own four ranks once its children re-attach, and they answer for theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_of_four_ranks_loses_those_and_its_orphans_reattach() {
    let opts = SessionOptions {
        n: 32,
        ranks_per_server: Some(4),
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(32));
    assert_eq!(s.report().processes.len(), 8, "8 servers");
    // Server 3 (ranks 12-15) is interior in the binomial tree of 8: servers 4-6 below it.
    sdm_e2e::kill9(&s, 3);
    let mut c = Console::new(s, false);
    let want: IdSet = "[0-11,16-31]".parse().unwrap();
    let (ok, lost) = ping_until(&mut c, &want).await;
    assert_eq!(ok, want, "servers 4-6 re-attached (lost: {lost})");
    assert_eq!(lost.to_string(), "[12-15]");
    c.shutdown().await;
}

/// A SIGKILLed server's ranks come back lost with the kind of its link's end as a typed
/// value (the peer closed the connection, or reading from it failed), to the client and
/// in the console's `--json` lines; the ranks that replied carry none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_ranks_come_back_with_how_their_link_ended() {
    use sdm_client::LinkEndKind;
    use sdm_proto::{Status, SyncMode};
    let opts = SessionOptions {
        n: 4,
        ranks_per_server: Some(1),
        program: Some(sdm_e2e::sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(4));
    sdm_e2e::kill9(&s, 2);
    let all = s.all();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let lost = loop {
        let groups = s
            .request(&all, SyncMode::Timeout(10_000), "ping")
            .await
            .unwrap();
        sdm_e2e::assert_partition(&groups, &all);
        for g in &groups {
            if g.status != Status::Lost {
                assert_eq!(g.link_end, None, "{g:?}");
            }
        }
        if let Some(g) = groups.into_iter().find(|g| g.status == Status::Lost) {
            break g;
        }
        assert!(std::time::Instant::now() < deadline, "server 2 never lost");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(lost.sources, IdSet::single(2), "{lost:?}");
    assert!(
        matches!(lost.link_end, Some(LinkEndKind::Closed | LinkEndKind::Io)),
        "{lost:?}"
    );
    let mut c = Console::new(s, true);
    let mut out = Vec::new();
    c.command("status", &mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    let lost: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["status"] == "lost")
        .collect();
    assert_eq!(lost.len(), 1, "{text}");
    assert_eq!(lost[0]["ids"], "[2]", "{text}");
    assert!(
        matches!(lost[0]["link_end"].as_str(), Some("closed" | "io")),
        "{text}"
    );
    c.shutdown().await;
}
