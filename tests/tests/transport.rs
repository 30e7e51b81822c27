//! Transport integration tests: one exchange body run over tcp://, quic:// and mem://, the
//! quic certificate pin, and Address parsing and printing.

use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use sdm_overlay::transport::{
    Address, Link, SessionTls, Transport, TransportConfig, TransportError, transport_for,
};
use sdm_proto::{IdSet, Kind, Message, Status, SyncMode};
use tokio::time::timeout;
use tokio_util::codec::{FramedRead, FramedWrite};

/// How long a reader may take to notice that its peer went away.
const END_WITHIN: Duration = Duration::from_secs(5);
/// Upper bound for any single step, so a broken transport fails instead of hanging.
const STEP: Duration = Duration::from_secs(20);

type Reader = FramedRead<Box<dyn tokio::io::AsyncRead + Send + Unpin>, sdm_proto::FrameCodec>;
type Writer = FramedWrite<Box<dyn tokio::io::AsyncWrite + Send + Unpin>, sdm_proto::FrameCodec>;

fn config(scheme: &str) -> TransportConfig {
    TransportConfig {
        tls: (scheme == "quic").then(SessionTls::generate),
        ..Default::default()
    }
}

/// A deterministic 1 MiB payload, different per `seed`.
fn big(seed: u8) -> Bytes {
    (0..1usize << 20)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

/// A mix of kinds, sync modes, id-sets and sizes (empty to 1 MiB).
fn messages(side: u8) -> Vec<Message> {
    let mut event = Message::command(9, IdSet::new(), SyncMode::WaitAll, Bytes::new());
    event.kind = Kind::Event;
    event.source = IdSet::range(0..=1_000_000);
    vec![
        Message::command(
            1,
            IdSet::all(1024),
            SyncMode::WaitAll,
            format!("hello from {side}"),
        ),
        Message::command(2, IdSet::single(7), SyncMode::DontWait, vec![side; 10]),
        Message::reply(3, IdSet::range(5..=9), Status::Replied, big(side)),
        event,
        Message::command(
            4,
            IdSet::all(3),
            SyncMode::Timeout(250),
            big(side.wrapping_add(1)),
        ),
        Message::reply(
            5,
            IdSet::single(2),
            Status::Lost,
            Bytes::from_static(b"link died"),
        ),
    ]
}

async fn send_all(w: &mut Writer, msgs: &[Message]) {
    for m in msgs {
        w.send(m).await.expect("send");
    }
}

async fn expect_all(r: &mut Reader, want: &[Message], who: &str) {
    for (i, m) in want.iter().enumerate() {
        let got = r
            .next()
            .await
            .unwrap_or_else(|| panic!("{who}: stream ended before message {i}"))
            .unwrap_or_else(|e| panic!("{who}: message {i}: {e}"));
        assert!(got == *m, "{who}: message {i} (op {}) differs", m.op);
    }
}

/// The reader must end (None or an error), and soon.
async fn expect_end(r: &mut Reader, who: &str) {
    match timeout(END_WITHIN, r.next()).await {
        Err(_) => panic!("{who}: reader still open {END_WITHIN:?} after the peer dropped"),
        Ok(Some(Ok(m))) => panic!("{who}: unexpected message op {}", m.op),
        Ok(None | Some(Err(_))) => {}
    }
}

/// Connects to `at`, returning (client, server) links.
async fn pair(
    t: &dyn Transport,
    l: &mut Box<dyn sdm_overlay::transport::Listener>,
    at: &Address,
) -> (Link, Link) {
    let (c, s) = timeout(STEP, async { tokio::join!(t.connect(at), l.accept()) })
        .await
        .expect("connect/accept timed out");
    (
        c.unwrap_or_else(|e| panic!("connect {at}: {e}")),
        s.unwrap_or_else(|e| panic!("accept on {at}: {e}")),
    )
}

/// The same body for every transport: bind, connect, exchange both ways, drop each side.
async fn exchange(bind: &str) {
    let addr: Address = bind.parse().unwrap();
    let cfg = config(addr.scheme());
    let t = transport_for(&addr, &cfg).unwrap();
    let mut l = t
        .bind(&addr)
        .await
        .unwrap_or_else(|e| panic!("bind {addr}: {e}"));

    let at = l.local_addr();
    assert_eq!(at.scheme(), addr.scheme());
    match &at {
        Address::Tcp(hp) | Address::Quic(hp) => {
            let port: u16 = hp.rsplit_once(':').unwrap().1.parse().unwrap();
            assert_ne!(port, 0, "{at} does not report the real port");
        }
        Address::Mem(name) => assert!(!name.is_empty() && name != "auto", "{at}"),
    }
    assert_eq!(at.to_string().parse::<Address>().unwrap(), at);

    // Several messages both ways at once, including 1 MiB payloads, in order and intact.
    let (mut client, mut server) = pair(&*t, &mut l, &at).await;
    assert!(!client.peer.is_empty() && !server.peer.is_empty());
    let (up, down) = (messages(1), messages(2));
    timeout(STEP, async {
        tokio::join!(
            send_all(&mut client.writer, &up),
            send_all(&mut server.writer, &down),
            expect_all(&mut server.reader, &up, "server"),
            expect_all(&mut client.reader, &down, "client"),
        )
    })
    .await
    .expect("exchange timed out");

    // Dropping the client right after a send: the server gets the message, then the end.
    // (The send runs beside the read: a 1 MiB frame does not fit in a mem pipe's buffer.)
    let last = Message::command(99, IdSet::single(0), SyncMode::WaitAll, big(3));
    let sent = last.clone();
    let sender = tokio::spawn(async move {
        client.writer.send(&sent).await.expect("send last");
        drop(client);
    });
    timeout(
        STEP,
        expect_all(&mut server.reader, std::slice::from_ref(&last), "server"),
    )
    .await
    .expect("last message timed out");
    timeout(STEP, sender)
        .await
        .expect("sender timed out")
        .unwrap();
    expect_end(&mut server.reader, "server").await;
    drop(server);

    // A second connection on the same listener; this time the server side goes away.
    let (mut client, server) = pair(&*t, &mut l, &at).await;
    drop(server);
    expect_end(&mut client.reader, "client").await;
}

#[tokio::test]
async fn tcp_exchange() {
    exchange("tcp://127.0.0.1:0").await;
}

#[tokio::test]
async fn quic_exchange() {
    exchange("quic://127.0.0.1:0").await;
}

#[tokio::test]
async fn mem_exchange() {
    exchange("mem://").await;
}

#[tokio::test]
async fn bare_host_port_is_tcp() {
    exchange("127.0.0.1:0").await;
}

#[tokio::test]
async fn quic_client_pinned_to_another_certificate_is_refused() {
    let addr: Address = "quic://127.0.0.1:0".parse().unwrap();
    let session = TransportConfig {
        tls: Some(SessionTls::generate()),
        ..Default::default()
    };
    let other = TransportConfig {
        tls: Some(SessionTls::generate()),
        ..Default::default()
    };
    let server = transport_for(&addr, &session).unwrap();
    let mut l = server.bind(&addr).await.unwrap();
    let at = l.local_addr();

    let impostor = transport_for(&at, &other).unwrap();
    let e = timeout(STEP, impostor.connect(&at))
        .await
        .expect("refusal timed out")
        .expect_err("a client pinned to another certificate connected");
    let msg = e.to_string();
    eprintln!("refused as expected: {msg}");
    assert!(msg.contains(&at.to_string()), "{msg}");
    assert!(msg.contains("certificate"), "{msg}");

    // Nothing reached accept; a client of the right session still gets through.
    assert!(
        timeout(Duration::from_millis(300), l.accept())
            .await
            .is_err()
    );
    let client = transport_for(&at, &session).unwrap();
    let (mut c, mut s) = pair(&*client, &mut l, &at).await;
    let m = Message::command(1, IdSet::all(2), SyncMode::WaitAll, "ok");
    c.writer.send(&m).await.unwrap();
    expect_all(&mut s.reader, std::slice::from_ref(&m), "server").await;

    // The same session, passed to a daemon as PEM, pins the same certificate.
    let pem = session.tls.as_ref().unwrap().to_pem();
    let daemon = TransportConfig {
        tls: Some(SessionTls::from_pem(&pem).unwrap()),
        ..Default::default()
    };
    let client = transport_for(&at, &daemon).unwrap();
    let (_c, _s) = pair(&*client, &mut l, &at).await;
}

#[tokio::test]
async fn quic_needs_the_session_certificate() {
    let addr: Address = "quic://127.0.0.1:0".parse().unwrap();
    let e = transport_for(&addr, &TransportConfig::default()).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    let t = TransportError::of(&e).expect("a transport error");
    assert_eq!(t.address(), addr.to_string(), "{e}");
}

#[tokio::test]
async fn errors_name_the_address() {
    let cfg = TransportConfig::default();
    for text in ["mem://nobody-listens-here", "tcp://127.0.0.1:1"] {
        let addr: Address = text.parse().unwrap();
        let e = transport_for(&addr, &cfg)
            .unwrap()
            .connect(&addr)
            .await
            .unwrap_err();
        let t = TransportError::of(&e).expect("a transport error");
        assert_eq!(t.address(), text, "{e}");
    }
    // A taken port or name is AddrInUse, naming the address.
    for text in ["tcp://127.0.0.1:0", "mem://"] {
        let addr: Address = text.parse().unwrap();
        let t = transport_for(&addr, &cfg).unwrap();
        let l = t.bind(&addr).await.unwrap();
        let taken = l.local_addr();
        let e = t.bind(&taken).await.err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
        let t = TransportError::of(&e).expect("a transport error");
        assert_eq!(t.address(), taken.to_string(), "{e}");
    }
}

#[test]
fn address_parse_and_print() {
    let good = [
        (
            "tcp://127.0.0.1:5000",
            Address::Tcp("127.0.0.1:5000".into()),
            "tcp://127.0.0.1:5000",
        ),
        (
            "127.0.0.1:5000",
            Address::Tcp("127.0.0.1:5000".into()),
            "tcp://127.0.0.1:5000",
        ),
        (
            "node7.cluster:7000",
            Address::Tcp("node7.cluster:7000".into()),
            "tcp://node7.cluster:7000",
        ),
        (
            "quic://localhost:0",
            Address::Quic("localhost:0".into()),
            "quic://localhost:0",
        ),
        (
            "quic://[::1]:443",
            Address::Quic("[::1]:443".into()),
            "quic://[::1]:443",
        ),
        (
            "mem://master",
            Address::Mem("master".into()),
            "mem://master",
        ),
        ("mem://auto", Address::Mem("auto".into()), "mem://auto"),
        ("mem://", Address::Mem(String::new()), "mem://"),
    ];
    for (text, want, shown) in good {
        let got: Address = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(got, want);
        assert_eq!(got.to_string(), shown);
        assert_eq!(
            shown.parse::<Address>().unwrap(),
            got,
            "round trip of {shown}"
        );
    }
    assert_eq!(Address::Quic("h:1".into()).scheme(), "quic");

    let bad = [
        "",
        "udp://x:1",
        "http://host:80",
        "tcp://host",
        "tcp://:5000",
        "tcp://host:",
        "tcp://host:65536",
        "tcp://host:port",
        "quic://::1:443",
        "quic://[::1:443",
        "tcp://host:80/path",
        "mem://a/b",
    ];
    for text in bad {
        let e = text
            .parse::<Address>()
            .expect_err(&format!("'{text}' should not parse"));
        let msg = e.to_string();
        assert!(msg.contains(&format!("'{text}'")), "{msg}");
        assert!(msg.contains("expected tcp://"), "{msg}");
    }
    let msg = "udp://x:1".parse::<Address>().unwrap_err().to_string();
    assert!(msg.contains("unknown scheme 'udp'"), "{msg}");
}
