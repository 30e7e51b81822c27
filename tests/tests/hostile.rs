//! Hostile peers against real tcp listeners, real `sdm-testnode` processes and a running
//! tree: a 4 GiB length prefix, a frame cut in half, a handshake that never ends, a flood of
//! idle connections, a wrong key, a replayed handshake and no handshake. Each costs only its
//! own connection (as does a server that sends output beyond its flow-control window): the listener still authenticates the rightful parent (no handshake waits
//! for another), and a running tree still answers. Refusals are logged with the peer.

use sdm_e2e as support;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use ring::hmac;
use sdm_client::Frontend;
use sdm_overlay::setup::{self, ConnectPolicy};
use sdm_overlay::setup::{SessionKey, hex_decode, hex_encode};
use sdm_overlay::stdio;
use sdm_overlay::transport::{Address, Link, Listener, Transport, TransportConfig};
use sdm_proto::{Control, FrameCodec, IdSet, Kind, Message, Status, SyncMode};
use sdm_topology::{NodeId, Shape, Topology};
use support::{
    Dial, Net, Procs, answer, assert_partition, bind_servers, ids_with, master_for_processes,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::codec::Encoder;

/// A guard against a hang, far above anything a passing run takes (not a timing assertion).
const GUARD: Duration = Duration::from_secs(60);

// ---- log capture -------------------------------------------------------------------------

/// Everything the overlay logged in this test binary.
fn log_buffer() -> &'static Mutex<Vec<u8>> {
    static LOGS: OnceLock<Mutex<Vec<u8>>> = OnceLock::new();
    LOGS.get_or_init(|| Mutex::new(Vec::new()))
}

struct Capture;

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        log_buffer().lock().unwrap().extend_from_slice(b);
        std::io::stderr().write_all(b)?;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        // Debug for the overlay: a listener logs the first refusal in a while as a warning
        // and the ones after it at debug level (the listener rate-limits its refusal warnings).
        tracing_subscriber::fmt()
            .with_writer(|| Capture)
            .with_ansi(false)
            .with_env_filter(tracing_subscriber::EnvFilter::new("warn,sdm_overlay=debug"))
            .init();
    });
}

/// Waits until one logged line holds every one of `needles`; returns that line.
async fn logged(needles: &[&str]) -> String {
    let found = tokio::time::timeout(GUARD, async {
        loop {
            let text = String::from_utf8_lossy(&log_buffer().lock().unwrap()).into_owned();
            if let Some(l) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
                return l.to_owned();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no log line holds all of {needles:?}"))
}

/// Waits until a logged line says the connection from `peer` was refused for `why`.
async fn refused(peer: &str, why: &str) {
    logged(&["refused connection", peer, why]).await;
}

// ---- raw peers ---------------------------------------------------------------------------

fn tcp() -> (Arc<dyn Transport>, Address) {
    support::transport("tcp", &TransportConfig::default())
}

fn socket_addr(a: &Address) -> String {
    a.target().to_owned()
}

/// A control message (as the handshake sends them), framed.
fn control_frame(c: Control) -> Vec<u8> {
    let mut b = BytesMut::new();
    FrameCodec::default()
        .encode(&c.to_message(), &mut b)
        .unwrap();
    b.to_vec()
}

/// A hello from `from` for `to` with a fixed nonce.
fn hello(to: &str, from: &str) -> Control {
    Control::Hello {
        to: to.to_owned(),
        from: from.to_owned(),
        nonce: "00112233445566778899aabbccddeeff".to_owned(),
    }
}

/// `tcp://127.0.0.1:PORT` of a raw socket's own end, as the acceptor logs its peer.
fn peer_name(s: &TcpStream) -> String {
    format!("peer=tcp://{}", s.local_addr().unwrap())
}

/// Reads one control message from a raw socket (`None`: closed, or not a control frame).
async fn read_control(s: &mut TcpStream) -> Option<Control> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.ok()?;
    let m = Message::decode(body.into()).ok()?;
    Control::from_message(&m).ok()
}

/// The connector's proof as the session key's challenge-response defines it, under any key:
/// HMAC-SHA256 over `connector, TO, FROM, NONCE_S, NONCE_C`, each followed by a NUL.
fn proof(key_hex: &str, to: &str, from: &str, nc: &str, ns: &str) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, &hex_decode(key_hex).unwrap());
    let mut msg = Vec::new();
    for p in ["connector", to, from, ns, nc] {
        msg.extend_from_slice(p.as_bytes());
        msg.push(0);
    }
    hex_encode(hmac::sign(&key, &msg).as_ref())
}

/// A hand-rolled connector: hello, read the welcome, prove with `key_hex` (which may be the
/// wrong key). Returns the frames it sent and the acceptor's last answer (`None`: closed,
/// also when it closed before any welcome: a daemon that got its parent in the meantime
/// stops answering strangers at all).
async fn raw_connector(
    at: &Address,
    key_hex: &str,
    to: &str,
    from: &str,
) -> (TcpStream, Vec<Vec<u8>>, Option<Control>) {
    let mut s = TcpStream::connect(socket_addr(at)).await.unwrap();
    let nc = "00112233445566778899aabbccddeeff";
    let hello = control_frame(hello(to, from));
    s.write_all(&hello).await.unwrap();
    let Some(welcome) = read_control(&mut s).await else {
        return (s, vec![hello], None);
    };
    let Control::Welcome { nonce: ns, .. } = &welcome else {
        panic!("{welcome:?} is not a welcome");
    };
    let p = control_frame(Control::Proof {
        mac: proof(key_hex, to, from, nc, ns),
    });
    s.write_all(&p).await.unwrap();
    let answer = read_control(&mut s).await;
    (s, vec![hello, p], answer)
}

/// Spawns `accept_parent` for server 5 on `listener`; gives the listener back with the link.
fn accept_5(
    mut listener: Box<dyn Listener>,
    policy: ConnectPolicy,
) -> JoinHandle<(Box<dyn Listener>, Result<Link, sdm_overlay::LinkError>)> {
    tokio::spawn(async move {
        let r = setup::accept_parent(&mut *listener, NodeId::Server(5), &policy).await;
        (listener, r)
    })
}

/// The accepted link carries frames both ways (it really is the rightful parent's).
async fn exchange(mine: &mut Link, theirs: &mut Link) {
    let m = Message::command(42, IdSet::single(5), SyncMode::WaitAll, "after the storm");
    mine.writer.send(&m).await.unwrap();
    assert_eq!(theirs.reader.next().await.unwrap().unwrap(), m);
    theirs.writer.send(&m).await.unwrap();
    assert_eq!(mine.reader.next().await.unwrap().unwrap(), m);
}

/// A tcp listener for server 5 under a fresh session key: the transport, the listener, its
/// address, and the acceptor's policy (one attempt, `handshake_timeout` per handshake).
async fn listener_for_5(
    handshake_timeout: Duration,
) -> (
    Arc<dyn Transport>,
    Box<dyn Listener>,
    Address,
    ConnectPolicy,
) {
    let (t, addr) = tcp();
    let listener = t.bind(&addr).await.unwrap();
    let at = listener.local_addr();
    let policy = ConnectPolicy {
        attempts: 1,
        handshake_timeout,
        ..ConnectPolicy::new(SessionKey::generate())
    };
    (t, listener, at, policy)
}

/// The rightful parent connects to server 5 at `at` (each handshake allowed [`GUARD`]) and
/// `accept` (see [`accept_5`]) takes it in, within [`GUARD`]; the link carries frames both
/// ways.
async fn parent_gets_in(
    t: &dyn Transport,
    at: &Address,
    policy: &ConnectPolicy,
    accept: JoinHandle<(Box<dyn Listener>, Result<Link, sdm_overlay::LinkError>)>,
) {
    let good = ConnectPolicy {
        handshake_timeout: GUARD,
        ..policy.clone()
    };
    let mut parent = tokio::time::timeout(
        GUARD,
        setup::connect_child(t, at, NodeId::Master, NodeId::Server(5), &good),
    )
    .await
    .expect("the parent was kept out by hostile connections")
    .unwrap();
    let (_listener, child) = accept.await.unwrap();
    exchange(&mut parent, &mut child.unwrap()).await;
}

// ---- at a listener -----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_connections_cost_only_themselves_at_a_listener() {
    capture_logs();
    // An hour per handshake: if handshakes ran one at a time, the first silent connection
    // would keep the rightful parent out for that hour.
    let (t, listener, at, policy) = listener_for_5(Duration::from_secs(3600)).await;
    let accept = accept_5(listener, policy.clone());
    let hello = control_frame(hello("5", "master"));
    let mut keep = Vec::new();

    // A handshake that never starts, and one that stops half way through its hello.
    let silent = TcpStream::connect(socket_addr(&at)).await.unwrap();
    let mut half_hello = TcpStream::connect(socket_addr(&at)).await.unwrap();
    half_hello
        .write_all(&hello[..hello.len() / 2])
        .await
        .unwrap();
    // A 4 GiB length prefix: refused at once, never allocated.
    let mut huge = TcpStream::connect(socket_addr(&at)).await.unwrap();
    huge.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3])
        .await
        .unwrap();
    let huge_peer = peer_name(&huge);
    // A frame a little over the handshake limit: refused as soon as its header is read.
    let mut big = TcpStream::connect(socket_addr(&at)).await.unwrap();
    big.write_all(&(1u32 << 20).to_be_bytes()).await.unwrap();
    let big_peer = peer_name(&big);
    // A frame cut in half, then the connection closed.
    let mut cut = TcpStream::connect(socket_addr(&at)).await.unwrap();
    cut.write_all(&hello[..hello.len() / 2]).await.unwrap();
    let cut_peer = peer_name(&cut);
    cut.shutdown().await.unwrap();
    drop(cut);
    // A flood of connections that do nothing.
    for _ in 0..200 {
        keep.push(TcpStream::connect(socket_addr(&at)).await.unwrap());
    }
    keep.push(silent);
    keep.push(half_hello);

    // The rightful parent still gets in, with all of the above still pending.
    parent_gets_in(&*t, &at, &policy, accept).await;

    refused(&huge_peer, "4294967295 bytes exceeds").await;
    refused(&big_peer, "exceeds the maximum of 4096").await;
    logged(&["refused connection", &cut_peer]).await;
    // None of the silent ones was refused for lack of time: they were simply outwaited.
    let text = String::from_utf8_lossy(&log_buffer().lock().unwrap()).into_owned();
    for s in &keep {
        let p = peer_name(s);
        assert!(
            !text
                .lines()
                .any(|l| l.contains(&p) && l.contains("no handshake")),
            "{p} timed out before the parent got in"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_key_replay_and_no_handshake_are_refused_and_logged() {
    capture_logs();
    let (t, listener, at, policy) = listener_for_5(Duration::from_millis(500)).await;

    // A rightful hand-rolled parent gets in; its frames are captured on the way.
    let accept = accept_5(listener, policy.clone());
    let (_s, captured, answer) = raw_connector(&at, &policy.key.to_hex(), "5", "master").await;
    assert_eq!(answer, Some(Control::Ready));
    let (listener, link) = accept.await.unwrap();
    link.unwrap();

    // The same listener, accepting again (a later parent).
    let accept = accept_5(listener, policy.clone());

    // A wrong key: the acceptor answers the hello, then refuses the proof.
    let other = SessionKey::generate();
    let (s, _, answer) = raw_connector(&at, &other.to_hex(), "5", "master").await;
    assert_eq!(answer, None, "a wrong key was let in");
    refused(&peer_name(&s), "master did not prove the session key").await;

    // A replay of the captured hello and proof: the acceptor's fresh nonce makes the old
    // proof worthless.
    let mut replay = TcpStream::connect(socket_addr(&at)).await.unwrap();
    replay.write_all(&captured.concat()).await.unwrap();
    let welcome = read_control(&mut replay).await.expect("a welcome");
    assert!(
        matches!(&welcome, Control::Welcome { to, .. } if to == "5"),
        "{welcome:?}"
    );
    assert_eq!(read_control(&mut replay).await, None, "a replay was let in");
    refused(&peer_name(&replay), "did not prove the session key").await;

    // No handshake at all: a silent connection times out, a data frame first is refused.
    let silent = TcpStream::connect(socket_addr(&at)).await.unwrap();
    refused(&peer_name(&silent), "no handshake within").await;
    let mut data = TcpStream::connect(socket_addr(&at)).await.unwrap();
    let mut b = BytesMut::new();
    FrameCodec::default()
        .encode(
            &Message::command(1, IdSet::all(8), SyncMode::WaitAll, "1 [] stop([])"),
            &mut b,
        )
        .unwrap();
    data.write_all(&b).await.unwrap();
    refused(&peer_name(&data), "expected a handshake frame").await;

    // After all that, the rightful parent still gets in.
    parent_gets_in(&*t, &at, &policy, accept).await;
}

// ---- a running tree ----------------------------------------------------------------------

/// What the fake leaf does once a command reaches it over its authenticated link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Misbehaviour {
    /// Sends a 4 GiB length prefix.
    HugeLength,
    /// Sends the first half of a valid reply frame, then closes the connection.
    HalfFrame,
    /// Sends bytes that are no envelope.
    Garbage,
    /// Sends output without waiting for credit: eight flow-control windows at once, more
    /// than the windows of every link up to a front-end that takes none of it.
    IgnoresWindow,
}

/// A tree of `n` tcp servers in this process where server `fake` is played by the test: it
/// authenticates to its parent like any server, then misbehaves on the first command.
async fn tree_with_fake_leaf(
    n: u32,
    fake: u32,
    how: Misbehaviour,
) -> (Frontend, Vec<JoinHandle<()>>) {
    let (t, addr) = tcp();
    let topo: Arc<dyn Topology> = Arc::from(Shape::Binomial.build(n));
    assert!(
        topo.children(NodeId::Server(fake)).is_empty(),
        "{fake} is no leaf"
    );
    let (listeners, table) = bind_servers(&*t, &addr, n).await;
    let net = Net {
        transport: t,
        topo,
        table,
        policy: ConnectPolicy::new(SessionKey::generate()),
    };
    let mut tasks = Vec::new();
    for (id, listener) in (0..n).zip(listeners) {
        tasks.push(if id == fake {
            tokio::spawn(fake_leaf(id, listener, net.policy.clone(), how))
        } else {
            net.spawn_server(id, listener, answer)
        });
    }
    let (fe, master) = net.start_master(&addr, Dial::Lenient).await;
    tasks.push(master);
    (fe, tasks)
}

/// Server `id` played by the test on `listener`: authenticates to its parent like any
/// server, then answers the first command as `how` says.
async fn fake_leaf(
    id: u32,
    mut listener: Box<dyn Listener>,
    policy: ConnectPolicy,
    how: Misbehaviour,
) {
    let me = NodeId::Server(id);
    let mut link = setup::accept_parent(&mut *listener, me, &policy)
        .await
        .unwrap();
    let cmd = link.reader.next().await.unwrap().unwrap();
    let raw = link.writer.get_mut();
    match how {
        Misbehaviour::HugeLength => {
            raw.write_all(&[0xff, 0xff, 0xff, 0xff, 0, 0])
                .await
                .unwrap();
            raw.flush().await.unwrap();
            // Hold the link open: the parent must end it, not us.
            let _ = link.reader.next().await;
        }
        Misbehaviour::HalfFrame => {
            let reply = Message::reply(cmd.op, IdSet::single(id), Status::Replied, "ok".into());
            let mut b = BytesMut::new();
            FrameCodec::default().encode(&reply, &mut b).unwrap();
            raw.write_all(&b[..b.len() / 2]).await.unwrap();
            raw.shutdown().await.unwrap();
        }
        Misbehaviour::Garbage => {
            let mut junk = vec![0u8, 0, 0, 12];
            junk.extend_from_slice(b"\xde\xad\xbe\xef garbage");
            raw.write_all(&junk).await.unwrap();
            raw.flush().await.unwrap();
            let _ = link.reader.next().await;
        }
        Misbehaviour::IgnoresWindow => {
            let mut line = Message::reply(0, IdSet::single(id), Status::Replied, "y\n".into());
            line.kind = Kind::Stdio;
            let frames = 8 * stdio::WINDOW / stdio::cost(&line);
            for _ in 0..frames {
                if link.writer.feed(&line).await.is_err() {
                    break;
                }
            }
            let _ = link.writer.flush().await;
            // Hold the link open (reading any credit): the parent must end it.
            while let Some(Ok(_)) = link.reader.next().await {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_tree_loses_only_the_hostile_link() {
    capture_logs();
    let n = 8;
    let all = IdSet::all(n);
    for how in [
        Misbehaviour::HugeLength,
        Misbehaviour::HalfFrame,
        Misbehaviour::Garbage,
        Misbehaviour::IgnoresWindow,
    ] {
        // A leaf under an interior server, and a leaf under the master.
        let topo = Shape::Binomial.build(n);
        let leaf_under = |master: bool| {
            (0..n)
                .find(|&i| {
                    let me = NodeId::Server(i);
                    topo.children(me).is_empty()
                        && (topo.parent(me) == Some(NodeId::Master)) == master
                })
                .unwrap()
        };
        for fake in [leaf_under(false), leaf_under(true)] {
            let (mut fe, tasks) = tree_with_fake_leaf(n, fake, how).await;
            let g = fe.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
            assert_partition(&g, &all);
            assert_eq!(
                ids_with(&g, Status::Lost),
                IdSet::single(fake),
                "{how:?}: {g:?}"
            );
            assert_eq!(ids_with(&g, Status::Replied), &all - &IdSet::single(fake));
            if how == Misbehaviour::IgnoresWindow {
                let why = g.iter().find(|g| g.status == Status::Lost).unwrap();
                let why = String::from_utf8_lossy(&why.payload);
                assert!(why.contains("beyond its flow-control window"), "{why}");
            }
            // The tree goes on answering.
            let g = fe.request(&all, SyncMode::WaitAll, "id").await.unwrap();
            assert_partition(&g, &all);
            assert_eq!(
                ids_with(&g, Status::Lost),
                IdSet::single(fake),
                "{how:?}: {g:?}"
            );
            assert_eq!(ids_with(&g, Status::Replied).len(), u64::from(n) - 1);
            drop(fe);
            for t in tasks {
                t.abort();
            }
        }
    }
}

// ---- real processes ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn testnode_processes_take_their_parent_through_a_storm() {
    let n = 4u32;
    let policy = ConnectPolicy::new(SessionKey::generate());
    let (mut procs, table) = Procs::spawn(n, &policy);
    // Every daemon's listener gets the storm before its parent comes: 50 idle connections,
    // half a hello, a 4 GiB prefix and a stranger's proof. Each default handshake timeout is
    // 5 s, so daemons that handled them one at a time would keep their parent out for minutes.
    let wrong = SessionKey::generate().to_hex();
    let mut keep = Vec::new();
    let mut strangers = Vec::new();
    for (id, at) in table.iter().enumerate() {
        for _ in 0..50 {
            keep.push(TcpStream::connect(socket_addr(at)).await.unwrap());
        }
        let hello = control_frame(hello(&id.to_string(), "master"));
        let mut half = TcpStream::connect(socket_addr(at)).await.unwrap();
        half.write_all(&hello[..hello.len() / 2]).await.unwrap();
        keep.push(half);
        let mut huge = TcpStream::connect(socket_addr(at)).await.unwrap();
        huge.write_all(&[0xff; 8]).await.unwrap();
        keep.push(huge);
        // The daemon answers only once it has its routing table: run the stranger aside.
        let (at, wrong) = (at.clone(), wrong.clone());
        strangers.push(tokio::spawn(async move {
            let (s, _, answer) = raw_connector(&at, &wrong, &id.to_string(), "master").await;
            assert_eq!(answer, None, "a stranger got into server {id}");
            s
        }));
    }
    procs.send_table(&table);
    // One round of attempts: a child that is not answering at once fails the test.
    let once = ConnectPolicy {
        attempts: 1,
        handshake_timeout: GUARD,
        ..policy.clone()
    };
    let (mut fe, master, _topo) =
        master_for_processes(&table, Shape::Binomial, &policy, once).await;
    let all = IdSet::all(n);
    let g = fe.request(&all, SyncMode::WaitAll, "ping").await.unwrap();
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(g[0].sources, all);
    assert_eq!(g[0].status, Status::Replied);
    for s in strangers {
        keep.push(s.await.unwrap());
    }
    drop(keep);
    drop(fe);
    master.await.unwrap();
}
