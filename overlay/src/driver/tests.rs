//! Tests of the node driver over in-memory and tcp links.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use sdm_proto::{DEFAULT_MAX_FRAME, IdSet, Kind, Message, Status, SyncMode};
use sdm_topology::{NodeId, Shape, Topology};

use super::{Delivery, Options, run_node};
use crate::node::Node;
use crate::transport::{Link, TcpTransport, Transport, TransportConfig};

/// Two ends of an in-memory link.
fn pair() -> (Link, Link) {
    let (a, b) = tokio::io::duplex(1 << 20);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    (
        Link::new(Box::new(ar), Box::new(aw), "a", DEFAULT_MAX_FRAME),
        Link::new(Box::new(br), Box::new(bw), "b", DEFAULT_MAX_FRAME),
    )
}

/// Two ends of a tcp link over the loopback.
async fn tcp_pair() -> (Link, Link) {
    let t = TcpTransport::new(&TransportConfig::default());
    let mut l = t.bind(&"tcp://127.0.0.1:0".parse().unwrap()).await.unwrap();
    let at = l.local_addr();
    let (a, b) = tokio::join!(t.connect(&at), l.accept());
    (a.unwrap(), b.unwrap())
}

/// The master of a flat tree over `children` (their near ends) under the driver, with a
/// handler that answers nothing: its task and the front-end's end of its parent link.
fn run_master(children: Vec<Link>) -> (tokio::task::JoinHandle<()>, Link) {
    let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(children.len() as u32));
    let children = (0..).map(NodeId::Server).zip(children).collect();
    run_master_in(topo, children)
}

/// The master of `topo` with links to `children` under the driver (as [`run_master`]).
fn run_master_in(
    topo: Arc<dyn Topology>,
    children: Vec<(NodeId, Link)>,
) -> (tokio::task::JoinHandle<()>, Link) {
    let (parent_here, parent_there) = pair();
    let children = children.into_iter().map(|(c, l)| (c, Ok(l))).collect();
    let node = Node::new(NodeId::Master, topo);
    let task = tokio::spawn(run_node(
        node,
        parent_here,
        children,
        Box::new(|_| {}),
        Options::default(),
    ));
    (task, parent_there)
}

/// No keepalives: their timer would wake the node and hide a reply (or an output line)
/// that did not.
fn quiet() -> Options {
    Options {
        liveness: Some(super::Liveness {
            interval: Duration::from_secs(3600),
            dead_after: Duration::from_secs(7200),
        }),
        ..Default::default()
    }
}

/// Commands 1..=`n` for server 0, sent down `parent` at once.
async fn ask(parent: &mut Link, n: u64) {
    for op in 1..=n {
        let cmd = Message::command(op, IdSet::single(0), SyncMode::WaitAll, "ask");
        parent.writer.feed(&cmd).await.unwrap();
    }
    parent.writer.flush().await.unwrap();
}

/// Command `op` for servers 0 and 1 of a flat tree, down `parent`; child 0 (the far end
/// `c0`) answers it and child 1's link is gone: server 0's reply and server 1 lost go
/// up, every id once.
async fn ping_with_child_1_gone(op: u64, parent: &mut Link, c0: &mut Link) {
    let cmd = Message::command(op, IdSet::all(2), SyncMode::WaitAll, "ping");
    parent.writer.send(&cmd).await.unwrap();
    let got = c0.reader.next().await.unwrap().unwrap();
    assert_eq!((got.kind, got.op), (Kind::Command, op));
    let r = Message::reply(op, IdSet::single(0), Status::Replied, "pong".into());
    c0.writer.send(&r).await.unwrap();
    let mut seen = IdSet::new();
    while seen != IdSet::all(2) {
        let m = parent.reader.next().await.unwrap().unwrap();
        if m.kind != Kind::Reply {
            continue;
        }
        let status = m.aggregate.status.unwrap_or(Status::Replied);
        let want = if m.source.contains(0) {
            Status::Replied
        } else {
            Status::Lost
        };
        assert_eq!(status, want, "{m:?}");
        assert!(m.source.is_disjoint(&seen), "an id twice: {m:?}");
        seen.union_with(&m.source);
    }
}

/// `n` events from server `id`, queued on `link` and flushed.
async fn queue_events(link: &mut Link, id: u32, n: u64) {
    for i in 0..n {
        link.writer.feed(&event(id, i)).await.unwrap();
    }
    link.writer.flush().await.unwrap();
}

/// Event `i` of server `id` (its text says `i`).
fn event(id: u32, i: u64) -> Message {
    let mut m = Message::reply(
        i,
        IdSet::single(id),
        Status::Replied,
        format!("event {i}").into(),
    );
    m.kind = Kind::Event;
    m
}

/// A master of a flat tree over `children` under the driver with `options`, with a
/// handler that answers nothing.
fn spawn_master(
    parent: Link,
    children: Vec<(NodeId, Result<Link, crate::error::LinkError>)>,
    options: Options,
) -> tokio::task::JoinHandle<()> {
    let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(children.len() as u32));
    tokio::spawn(run_node(
        Node::new(NodeId::Master, topo),
        parent,
        children,
        Box::new(|_| {}),
        options,
    ))
}

/// A command to two children, one of whose links is gone (its far end dropped): the
/// node reports that child's id lost and sends the other's reply up with it, every id
/// accounted, with nothing else happening on the node's links.
#[tokio::test]
async fn a_child_whose_link_is_gone_is_answered_lost_and_the_rest_goes_up() {
    let (c0_here, mut c0_there) = pair();
    let (c1_here, c1_there) = pair();
    drop(c1_there);
    let (node, mut parent_there) = run_master(vec![c0_here, c1_here]);
    ping_with_child_1_gone(5, &mut parent_there, &mut c0_there).await;
    node.abort();
}

/// Many frames from a child queued before the node runs are taken several per turn:
/// every one goes up, in order (a turn once dropped the frame it fetched last).
#[tokio::test]
async fn frames_queued_past_one_turn_all_go_up_in_order() {
    let (child_here, mut child_there) = pair();
    let n = 200u64;
    queue_events(&mut child_there, 0, n).await;
    let (node, mut parent_there) = run_master(vec![child_here]);
    for i in 0..n {
        let m = parent_there.reader.next().await.unwrap().unwrap();
        assert_eq!(m.kind, Kind::Event);
        assert_eq!(&m.payload[..], format!("event {i}").as_bytes());
        assert_eq!(m.source, IdSet::single(0));
    }
    node.abort();
}

/// Two children with everything queued before the node runs, one carrying four servers
/// and one carrying one: the node reads them by weight (4 to 1), so the bigger subtree's
/// frames make most of what goes up first (with equal reads the first 160 were 96 from
/// the small child, 64 from the big one). Every frame still goes up, each child's in
/// order.
#[tokio::test]
async fn children_are_read_by_the_servers_behind_them() {
    // Server 0 under the master alone; server 1 under the master with 2, 3 and 4 below.
    let tree = sdm_topology::Explicit::from_parents(vec![0, 0, 2, 2, 2], "test").unwrap();
    let topo: Arc<dyn Topology> = Arc::from(Shape::Explicit(Arc::new(tree)).build(5));
    let (small_here, mut small_there) = pair();
    let (big_here, mut big_there) = pair();
    let n = 400u64;
    queue_events(&mut small_there, 0, n).await;
    queue_events(&mut big_there, 1, n).await;
    let (node, mut parent_there) = run_master_in(
        topo,
        vec![
            (NodeId::Server(0), small_here),
            (NodeId::Server(1), big_here),
        ],
    );
    let mut next = [0u64; 2];
    let mut first = [0u64; 2];
    for k in 0..2 * n {
        let m = parent_there.reader.next().await.unwrap().unwrap();
        assert_eq!(m.kind, Kind::Event);
        let from = usize::from(m.source == IdSet::single(1));
        assert_eq!(&m.payload[..], format!("event {}", next[from]).as_bytes());
        next[from] += 1;
        if k < 5 * super::turn::DRAIN as u64 {
            first[from] += 1;
        }
    }
    assert!(
        first[1] >= 2 * first[0],
        "the first {} frames up: {} from the small child, {} from the big one",
        5 * super::turn::DRAIN,
        first[0],
        first[1]
    );
    node.abort();
}

/// A server whose handler answers some commands at once (inside the node's turn, which
/// takes the reply without being woken) and the rest from another thread a little
/// later (which must wake the node): every command gets its one reply up, with the
/// payload its handler gave.
#[tokio::test]
async fn replies_made_at_once_and_from_other_threads_all_go_up() {
    let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(1));
    let node = Node::new(NodeId::Server(0), topo);
    let (parent_here, mut parent_there) = pair();
    let handler = Box::new(|d: Delivery| {
        let answer = format!("answer {}", d.op);
        if d.op.is_multiple_of(2) {
            d.reply.send(answer);
        } else {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(d.op % 3));
                d.reply.send(answer);
            });
        }
    });
    let task = tokio::spawn(run_node(node, parent_here, Vec::new(), handler, quiet()));
    let n = 200u64;
    ask(&mut parent_there, n).await;
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < n as usize {
        // Generous: a reply that never woke the node would otherwise hang the test.
        let next = tokio::time::timeout(Duration::from_secs(60), parent_there.reader.next());
        let Ok(m) = next.await else {
            panic!("no reply for 60 s: {} of {n} arrived", seen.len());
        };
        let m = m.unwrap().unwrap();
        assert_eq!(m.kind, Kind::Reply, "{m:?}");
        assert_eq!(m.source, IdSet::single(0));
        assert_eq!(&m.payload[..], format!("answer {}", m.op).as_bytes());
        assert!(seen.insert(m.op), "op {} answered twice", m.op);
    }
    task.abort();
}

/// A master over tcp links: a child's
/// frames queued before the node ran (read ahead by the link's first reader) all go up
/// in order; a command to both children gets every id back, the child whose far end
/// is gone as lost; when the front-end goes, the master says goodbye to its children
/// and closes their links, and ends cleanly.
#[tokio::test]
async fn a_master_relays_over_tcp_and_says_goodbye() {
    let (c0_here, mut c0_there) = tcp_pair().await;
    let (c1_here, c1_there) = tcp_pair().await;
    let (parent_here, mut parent_there) = tcp_pair().await;
    let n = 200u64;
    queue_events(&mut c0_there, 0, n).await;
    drop(c1_there);
    let children = vec![
        (NodeId::Server(0), Ok(c0_here)),
        (NodeId::Server(1), Ok(c1_here)),
    ];
    let task = spawn_master(parent_here, children, Options::default());
    let mut next = 0;
    while next < n {
        let m = parent_there.reader.next().await.unwrap().unwrap();
        if m.kind == Kind::Event {
            assert_eq!(&m.payload[..], format!("event {next}").as_bytes());
            next += 1;
        }
    }
    ping_with_child_1_gone(7, &mut parent_there, &mut c0_there).await;
    drop(parent_there);
    let mut said_goodbye = false;
    while let Some(m) = c0_there.reader.next().await {
        let m = m.unwrap();
        said_goodbye |= m.kind == Kind::Control
            && matches!(
                sdm_proto::Control::from_message(&m),
                Ok(sdm_proto::Control::Goodbye)
            );
    }
    assert!(said_goodbye, "the child's link closed without a goodbye");
    task.await.unwrap();
}

/// A server over tcp: commands answered at once and from tasks the handler spawned
/// (which wake the node's task) each get their one reply, and output sent through a
/// small channel (so the sender waits on the node) all goes up, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_takes_replies_and_output_from_other_tasks() {
    let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(1));
    let node = Node::new(NodeId::Server(0), topo);
    let (parent_here, mut parent_there) = tcp_pair().await;
    let handler = Box::new(|d: Delivery| {
        let answer = format!("answer {}", d.op);
        if d.op.is_multiple_of(2) {
            d.reply.send(answer);
        } else {
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                d.reply.send(answer);
            });
        }
    });
    let (events_tx, events) = tokio::sync::mpsc::channel(4);
    let options = Options {
        events: Some(events),
        ..quiet()
    };
    let task = tokio::spawn(run_node(node, parent_here, Vec::new(), handler, options));
    let n_events = 300u64;
    let output = tokio::spawn(async move {
        for i in 0..n_events {
            let line = bytes::Bytes::from(format!("line {i}"));
            events_tx.send((Kind::Event, 0, line)).await.unwrap();
        }
    });
    let n = 200u64;
    ask(&mut parent_there, n).await;
    let mut seen = std::collections::BTreeSet::new();
    let mut next_line = 0;
    while seen.len() < n as usize || next_line < n_events {
        let next = tokio::time::timeout(Duration::from_secs(60), parent_there.reader.next());
        let Ok(m) = next.await else {
            panic!(
                "nothing for 60 s: {} replies, {next_line} lines",
                seen.len()
            );
        };
        let m = m.unwrap().unwrap();
        match m.kind {
            Kind::Reply => {
                let want = format!("answer {}", m.op);
                assert_eq!(&m.payload[..], want.as_bytes());
                assert!(seen.insert(m.op), "op {} answered twice", m.op);
            }
            Kind::Event => {
                assert_eq!(&m.payload[..], format!("line {next_line}").as_bytes());
                next_line += 1;
            }
            _ => {}
        }
    }
    output.await.unwrap();
    drop(parent_there);
    task.await.unwrap();
}

/// A waker for a task that only counts how often it was woken (`count.0`).
fn counting_waker() -> (std::task::Waker, Arc<Count>) {
    let count = Arc::new(Count(AtomicUsize::new(0)));
    (futures::task::waker(count.clone()), count)
}

struct Count(AtomicUsize);

impl futures::task::ArcWake for Count {
    fn wake_by_ref(me: &Arc<Self>) {
        me.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The inbox wakes the node's task for a reply made outside a turn, not for one made
/// inside (the turn takes that itself), and a turn ending with replies waiting says so.
#[test]
fn the_inbox_wakes_the_task_only_outside_a_turn() {
    let (waker, count) = counting_waker();
    let cx = std::task::Context::from_waker(&waker);
    let inbox = super::wake::Inbox::default();
    inbox.enter();
    inbox.push((1, IdSet::single(0), Status::Replied, "in the turn".into()));
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
    assert!(inbox.leave(&cx), "a reply is waiting");
    assert_eq!(inbox.pop().map(|(op, ..)| op), Some(1));
    assert!(!inbox.leave(&cx));
    inbox.push((2, IdSet::single(0), Status::Replied, "between turns".into()));
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert_eq!(inbox.pop().map(|(op, ..)| op), Some(2));
    assert_eq!(inbox.pop(), None);
}

/// A reader that counts how often it is polled.
struct Counted(crate::transport::BoxReader, Arc<AtomicUsize>);

impl tokio::io::AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.1.fetch_add(1, Ordering::SeqCst);
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

/// A turn reads only the links that woke the task. Eight children, frames from one of
/// them, each waited for at the parent (a wake-up and a turn each): after the first
/// turn, which reads every link once to register its waker, the seven quiet links are
/// never polled again, and every frame of the busy one goes up, in order.
#[tokio::test]
async fn a_turn_reads_only_the_links_that_woke_it() {
    let mut near = Vec::new();
    let mut far = Vec::new();
    let mut polls = Vec::new();
    for _ in 0..8 {
        let (a, b) = tokio::io::duplex(1 << 20);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let count = Arc::new(AtomicUsize::new(0));
        let reader = Box::new(Counted(Box::new(ar), count.clone()));
        near.push(Link::new(reader, Box::new(aw), "a", DEFAULT_MAX_FRAME));
        far.push(Link::new(
            Box::new(br),
            Box::new(bw),
            "b",
            DEFAULT_MAX_FRAME,
        ));
        polls.push(count);
    }
    let (node, mut parent_there) = run_master(near);
    let mut before = Vec::new();
    let busy = 3u32;
    let n = 30;
    // Event `i` from the busy child, sent, and seen at the parent.
    for i in 0..=n as u64 {
        let mut m = Message::reply(
            i,
            IdSet::single(busy),
            Status::Replied,
            format!("event {i}").into(),
        );
        m.kind = Kind::Event;
        far[busy as usize].writer.send(&m).await.unwrap();
        let got = parent_there.reader.next().await.unwrap().unwrap();
        assert_eq!(
            (got.kind, got.source, got.payload),
            (m.kind, m.source, m.payload)
        );
        if i == 0 {
            before = polls.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        }
    }
    assert!(
        before.iter().all(|&n| n >= 1),
        "every link read once: {before:?}"
    );
    let after: Vec<usize> = polls.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    for k in 0..8 {
        if k == busy as usize {
            assert!(
                after[k] >= before[k] + n as usize,
                "busy link: {before:?} then {after:?}"
            );
        } else {
            assert_eq!(
                after[k], before[k],
                "quiet link {k} polled: {before:?} then {after:?}"
            );
        }
    }
    node.abort();
}

/// A source's waker marks that source (once, however often it fires) and wakes the
/// task; a turn takes the marks as the sources it reads; marks made during a turn make
/// its end say so; sources never marked are not wanted.
#[test]
fn readiness_marks_the_sources_that_woke_the_task() {
    let (task, count) = counting_waker();
    let cx = std::task::Context::from_waker(&task);
    let ready = Arc::new(super::wake::Readiness::default());
    let child = ready.waker(super::wake::CHILD0 + 7);
    let parent = ready.waker(super::wake::PARENT);
    assert!(!ready.leave(&cx));
    child.wake_by_ref();
    assert_eq!(count.0.load(Ordering::SeqCst), 1, "the task is woken");
    // From another thread too, and twice: still one mark.
    let c2 = child.clone();
    std::thread::spawn(move || c2.wake()).join().unwrap();
    // Sources in several words, and one beyond those with a bit of their own.
    let far = ready.waker(super::wake::CHILD0 + 200);
    let beyond = ready.waker(super::wake::MARKED_SOURCES + 5);
    far.wake_by_ref();
    beyond.wake_by_ref();
    let mut want = vec![false; super::wake::MARKED_SOURCES + 8];
    ready.take(&mut want);
    let wanted: Vec<usize> = (0..want.len()).filter(|&s| want[s]).collect();
    let mut expect = vec![super::wake::CHILD0 + 7, super::wake::CHILD0 + 200];
    expect.extend(super::wake::MARKED_SOURCES..super::wake::MARKED_SOURCES + 8);
    assert_eq!(wanted, expect);
    want.iter_mut().for_each(|w| *w = false);
    // Marked during a turn: no wake-up (the turn's end sees it).
    assert!(!ready.leave(&cx));
    ready.take(&mut want);
    parent.wake_by_ref();
    assert_eq!(count.0.load(Ordering::SeqCst), 1, "not woken in a turn");
    assert!(ready.leave(&cx));
    ready.take(&mut want);
    assert!(want[super::wake::PARENT]);
    assert!(!ready.leave(&cx));
    parent.wake_by_ref();
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        2,
        "woken again after the turn"
    );
}

/// A server whose parent link ends looks for a new parent unless the parent said goodbye:
/// closed, its re-attach is called once (and gives up, so the node ends); after a goodbye
/// the node ends without calling it.
#[tokio::test]
async fn only_a_parent_that_did_not_say_goodbye_is_replaced() {
    for goodbye in [true, false] {
        let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(1));
        let node = Node::new(NodeId::Server(0), topo);
        let (here, mut there) = pair();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let reattach: super::Reattach = Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { None })
        });
        let options = Options {
            recovery: super::Recovery {
                reattach: Some(reattach),
                ..Default::default()
            },
            ..quiet()
        };
        let task = tokio::spawn(run_node(node, here, Vec::new(), Box::new(|_| {}), options));
        if goodbye {
            let bye = sdm_proto::Control::Goodbye.to_message();
            there.writer.send(&bye).await.unwrap();
        }
        drop(there);
        // Generous: only a hang guard.
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the node ended")
            .unwrap();
        let want = usize::from(!goodbye);
        assert_eq!(calls.load(Ordering::SeqCst), want, "goodbye: {goodbye}");
    }
}
