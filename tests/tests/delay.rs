//! The transport's delay layer (`TransportConfig::delay`, standing in for netem): a round trip
//! over one delayed tcp link takes at least twice the delay, and a command's round trip
//! through a tree grows with the depth of the deepest destination, at least
//! `2 × (depth + 1) × delay` (front-end link included). Only lower bounds are asserted.

use sdm_e2e as support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use sdm_overlay::transport::{Address, Transport, TransportConfig};
use sdm_proto::{IdSet, Message, Status, SyncMode};
use sdm_topology::{NodeId, Shape};
use support::{Tree, answer, tree_over};

const DELAY: Duration = Duration::from_millis(20);

fn delayed(scheme: &str) -> (Arc<dyn Transport>, Address) {
    let cfg = TransportConfig {
        delay: DELAY,
        ..TransportConfig::default()
    };
    support::transport(scheme, &cfg)
}

#[tokio::test]
async fn a_round_trip_over_a_delayed_link_takes_twice_the_delay() {
    for scheme in ["tcp", "mem"] {
        let (t, addr) = delayed(scheme);
        let mut l = t.bind(&addr).await.unwrap();
        let at = l.local_addr();
        let (a, b) = tokio::join!(t.connect(&at), l.accept());
        let (mut a, mut b) = (a.unwrap(), b.unwrap());
        let echo = tokio::spawn(async move {
            while let Some(Ok(m)) = b.reader.next().await {
                if b.writer.send(&m).await.is_err() {
                    break;
                }
            }
        });
        for op in 0..5u64 {
            let m = Message::command(op, IdSet::single(0), SyncMode::WaitAll, "ping");
            let start = Instant::now();
            a.writer.send(&m).await.unwrap();
            assert_eq!(a.reader.next().await.unwrap().unwrap(), m);
            let rtt = start.elapsed();
            assert!(
                rtt >= 2 * DELAY,
                "{scheme}: round trip {rtt:?} < 2 × {DELAY:?}"
            );
        }
        // Frames written back to back keep their order, and a second link is not held up
        // by the first one's queue.
        let burst: Vec<Message> = (100..150u64)
            .map(|op| Message::command(op, IdSet::single(0), SyncMode::WaitAll, vec![7u8; 4096]))
            .collect();
        for m in &burst {
            a.writer.feed(m).await.unwrap();
        }
        a.writer.flush().await.unwrap();
        for m in &burst {
            assert_eq!(&a.reader.next().await.unwrap().unwrap(), m);
        }
        drop(a);
        echo.await.unwrap();
    }
}

/// A tree of `n` servers of `shape` whose every link (front-end included) is delayed.
async fn delayed_tree(shape: Shape, n: u32) -> Tree {
    let (t, addr) = delayed("tcp");
    tree_over(t, &addr, n, shape, answer).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_grow_with_tree_depth() {
    let n = 16;
    let all = IdSet::all(n);
    let mut report = Vec::new();
    for shape in [Shape::Flat, Shape::Binomial, Shape::KAry(2)] {
        let Tree {
            frontend: mut fe,
            servers,
            master,
            topo,
        } = delayed_tree(shape.clone(), n).await;
        let depth = (0..n).map(|i| topo.depth(NodeId::Server(i))).max().unwrap();
        let mut best = Duration::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            let g = fe.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
            let rtt = start.elapsed();
            assert_eq!(g.len(), 1, "{shape}: {g:?}");
            assert_eq!(g[0].status, Status::Replied);
            assert_eq!(g[0].sources, all);
            // Down and up through every level, plus the front-end's own link.
            let floor = 2 * (depth + 1) * DELAY;
            assert!(
                rtt >= floor,
                "{shape}: depth {depth}, round trip {rtt:?} < {floor:?}"
            );
            best = best.min(rtt);
        }
        report.push(format!(
            "{:>9}: depth {depth}, best round trip {best:?} (floor {:?})",
            shape.to_string(),
            2 * (depth + 1) * DELAY
        ));
        drop(fe);
        for t in servers.into_iter().chain([master]) {
            t.abort();
        }
    }
    eprintln!("one-way delay {DELAY:?} on every link, {n} servers:");
    for line in report {
        eprintln!("  {line}");
    }
}
