//! sdm-link-bench: what one sdm link costs against plain TCP, and how round trips grow with
//! tree depth under the transport's delay layer.
//!
//! One invocation runs three sections, each printing JSON lines (one per measurement, with
//! the load average read before and after it):
//!
//! 1. `setup`: connect plus one 64-byte round trip, repeated `--setups` times, for
//!    - `plain-tcp`: a tokio `TcpStream` echoing a 4-byte length and the payload, no
//!      authentication;
//!    - `tcp-noauth` / `quic-noauth`: sdm's transport (`transport_for`, socket options,
//!      TLS 1.3 for quic) and one frame round trip, without the session-key handshake;
//!    - `tcp-auth` / `quic-auth`: what the tree does, `setup::connect_child` against
//!      `setup::accept_parent` (HMAC challenge-response), then one frame round trip.
//!
//!    Ratios are against `plain-tcp` of the same run.
//! 2. `steady`: over one established link, `--rtts` sequential round trips of a 64-byte
//!    payload (plain tcp echoes a 4-byte length and the payload; sdm links echo a
//!    `Message` through the frame codec) and one-way throughput of `--frames` frames of
//!    `--frame-bytes` payload, sent in ten bursts after a warm-up one (the receiver
//!    acknowledges the last frame of each burst; the timed span ends there). `plain-tcp-bounded`
//!    is plain tcp with the kernel buffers sdm's tcp links use (64 KiB, `TCP_NOTSENT_LOWAT`
//!    16 KiB), to tell buffer sizing apart from the codec.
//! 3. `tree`: in-process trees (every node a task with its own tcp links, all on loopback)
//!    with `TransportConfig::delay` on every link, front-end link included: a broadcast
//!    `ping` to all servers, `WaitAll`, timed until the one merged group is back; compared
//!    with the floor `2 × (depth + 1) × delay`, and with the same tree without delay; what
//!    is left over, per one-way hop, is the delay layer's own overshoot (timer rounding).
//!
//! In the first two sections the variants take turns (one set-up each, or a block of round
//! trips or a burst of frames each, the order rotating), so a change in the machine's load
//! meets them all alike. Everything runs in one process, on one thread by default
//! (`--runtime current`: client and server of a link take turns, so the figures count CPU
//! work and not wake-ups across cores) or on a worker per core (`--runtime multi`).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Parser;
use futures::{SinkExt, StreamExt};
use sdm_bench::stats::{Summary, summarize};
use sdm_client::Frontend;
use sdm_overlay::Node;
use sdm_overlay::driver::{self, Delivery};
use sdm_overlay::setup::SessionKey;
use sdm_overlay::setup::{self, ConnectPolicy};
use sdm_overlay::transport::{
    Address, Link, Listener, SessionTls, Transport, TransportConfig, transport_for,
};
use sdm_proto::{IdSet, Message, Status, SyncMode};
use sdm_topology::{NodeId, Shape, Topology};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Link and tree-depth benchmarks.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Link set-ups timed per variant.
    #[arg(long, default_value_t = 200)]
    setups: u32,
    /// Sequential round trips timed per link kind.
    #[arg(long, default_value_t = 5000)]
    rtts: u32,
    /// Frames sent one way for throughput, per link kind.
    #[arg(long, default_value_t = 100_000)]
    frames: u32,
    /// Payload bytes of a throughput frame.
    #[arg(long, default_value_t = 1024)]
    frame_bytes: usize,
    /// One-way delay per link in the tree section, in milliseconds.
    #[arg(long, default_value_t = 10)]
    delay_ms: u64,
    /// Tree sizes (servers), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    servers: Vec<u32>,
    /// Tree shapes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "flat,binomial,kary:2")]
    shapes: Vec<Shape>,
    /// Broadcasts timed per tree with the delay (after 3 warm-up).
    #[arg(long, default_value_t = 30)]
    tree_iters: u32,
    /// Broadcasts timed per tree without delay (after 20 warm-up).
    #[arg(long, default_value_t = 500)]
    tree_iters_nodelay: u32,
    /// The tokio runtime everything runs on: `current` (one thread: client and server of a
    /// link take turns, so only CPU work counts) or `multi` (a worker per core: wake-ups
    /// cross cores, as between processes).
    #[arg(long, default_value = "current")]
    runtime: String,
    /// Sections to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "setup,steady,tree")]
    only: Vec<String>,
}

/// Payload bytes of a round-trip probe.
const PROBE: usize = 64;

/// Kernel buffer per direction of sdm's tcp links (as in `overlay/src/transport/tcp.rs`).
const LINK_SOCKET_BUFFER: usize = 64 << 10;

/// `TCP_NOTSENT_LOWAT` of sdm's tcp links.
const LINK_NOTSENT_LOWAT: u32 = 16 << 10;

/// The 1-, 5- and 15-minute load averages.
fn loadavg() -> Value {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let v: Vec<f64> = s
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    json!(v)
}

/// A latency summary (µs) as JSON.
fn summary_json(s: &Summary) -> Value {
    json!({"count": s.count, "p50_us": s.p50, "p99_us": s.p99, "mean_us": s.mean,
           "min_us": s.min, "max_us": s.max})
}

/// Microseconds since `t`.
fn us_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// The transport configuration of a session: a fresh certificate (for quic) and `delay`.
fn config(delay: Duration) -> TransportConfig {
    TransportConfig {
        tls: Some(SessionTls::generate()),
        delay,
        ..TransportConfig::default()
    }
}

/// A transport for `scheme` and the loopback address to bind its listeners on.
fn transport(scheme: &str, cfg: &TransportConfig) -> anyhow::Result<(Arc<dyn Transport>, Address)> {
    let addr: Address = format!("{scheme}://127.0.0.1:0").parse()?;
    Ok((Arc::from(transport_for(&addr, cfg)?), addr))
}

/// The probe frame: a command carrying `bytes` bytes.
fn probe(op: u64, bytes: usize) -> Message {
    Message::command(op, IdSet::single(0), SyncMode::WaitAll, vec![7u8; bytes])
}

/// Reads the next frame of `link`, as an error if the link ended.
async fn next_frame(link: &mut Link) -> io::Result<Message> {
    match link.reader.next().await {
        Some(Ok(m)) => Ok(m),
        Some(Err(e)) => Err(io::Error::other(e)),
        None => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{} closed the link", link.peer),
        )),
    }
}

/// Echoes every frame of `link` until the peer closes it.
async fn echo_frames(mut link: Link) {
    while let Some(Ok(m)) = link.reader.next().await {
        if link.writer.send(&m).await.is_err() {
            return;
        }
    }
}

/// Sends one probe frame and waits for it to come back.
async fn frame_round_trip(link: &mut Link, op: u64) -> anyhow::Result<()> {
    let m = probe(op, PROBE);
    link.writer.send(&m).await?;
    let back = next_frame(link).await?;
    ensure!(back == m, "echo differs");
    Ok(())
}

/// Accepts plain tcp connections on `listener` for ever, each tuned ([`tune`]) and served
/// by `serve` on its own task until it ends.
fn spawn_plain<F, Fut>(listener: TcpListener, bounded: bool, serve: F) -> JoinHandle<()>
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            if tune(&s, bounded).is_ok() {
                tokio::spawn(serve(s));
            }
        }
    })
}

/// Plain tcp echo: every accepted connection gets back each length-prefixed frame it sends,
/// until it ends.
fn spawn_plain_echo(listener: TcpListener, bounded: bool) -> JoinHandle<()> {
    spawn_plain(listener, bounded, |s| async move {
        let (r, mut w) = s.into_split();
        let mut r = BufReader::new(r);
        let mut buf = Vec::new();
        while let Ok(len) = r.read_u32().await {
            buf.resize(len as usize + 4, 0);
            buf[..4].copy_from_slice(&len.to_be_bytes());
            if r.read_exact(&mut buf[4..]).await.is_err() || w.write_all(&buf).await.is_err() {
                return;
            }
        }
    })
}

/// Plain tcp sink: reads the length-prefixed frames of every accepted connection and writes
/// one byte back after each `burst` of them, until the connection ends.
fn spawn_plain_sink(listener: TcpListener, bounded: bool, burst: u32) -> JoinHandle<()> {
    spawn_plain(listener, bounded, move |s| async move {
        let (r, mut w) = s.into_split();
        let mut r = BufReader::with_capacity(64 << 10, r);
        let mut buf = Vec::new();
        loop {
            for _ in 0..burst {
                let Ok(len) = r.read_u32().await else { return };
                buf.resize(len as usize, 0);
                if r.read_exact(&mut buf).await.is_err() {
                    return;
                }
            }
            if w.write_all(&[1]).await.is_err() {
                return;
            }
        }
    })
}

/// `TCP_NODELAY`, and with `bounded` the kernel buffers of sdm's tcp links.
fn tune(s: &TcpStream, bounded: bool) -> io::Result<()> {
    s.set_nodelay(true)?;
    if bounded {
        let sock = socket2::SockRef::from(s);
        sock.set_recv_buffer_size(LINK_SOCKET_BUFFER)?;
        sock.set_send_buffer_size(LINK_SOCKET_BUFFER)?;
        sock.set_tcp_notsent_lowat(LINK_NOTSENT_LOWAT)?;
    }
    Ok(())
}

/// Connects a plain tcp stream to `at`, tuned like the server end.
async fn plain_connect(at: SocketAddr, bounded: bool) -> io::Result<TcpStream> {
    let s = TcpStream::connect(at).await?;
    tune(&s, bounded)?;
    Ok(s)
}

/// One plain round trip: writes `out` (a length-prefixed frame), reads it back.
async fn plain_round_trip(s: &mut TcpStream, out: &[u8], back: &mut [u8]) -> anyhow::Result<()> {
    s.write_all(out).await?;
    s.read_exact(back).await?;
    ensure!(back == out, "echo differs");
    Ok(())
}

/// A length-prefixed plain probe of `PROBE` bytes, marked with `i`.
fn plain_probe(i: u32) -> Vec<u8> {
    let mut out = vec![0u8; 4 + PROBE];
    out[..4].copy_from_slice(&(PROBE as u32).to_be_bytes());
    out[4..8].copy_from_slice(&i.to_be_bytes());
    out
}

/// An sdm listener that accepts links (after the session-key handshake if `policy` is set)
/// and echoes frames on each until it ends.
fn spawn_link_echo(
    mut listener: Box<dyn Listener>,
    policy: Option<ConnectPolicy>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let link = match &policy {
                Some(p) => setup::accept_parent(&mut *listener, NodeId::Server(0), p)
                    .await
                    .map_err(std::io::Error::from),
                None => listener.accept().await,
            };
            match link {
                Ok(link) => {
                    tokio::spawn(echo_frames(link));
                }
                Err(_) => return,
            }
        }
    })
}

/// An sdm listener that reads the frames of every accepted link and sends one small frame
/// back after each `burst` of them, until the link ends.
fn spawn_link_sink(mut listener: Box<dyn Listener>, burst: u32) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok(mut link) = listener.accept().await {
            tokio::spawn(async move {
                loop {
                    for _ in 0..burst {
                        if next_frame(&mut link).await.is_err() {
                            return;
                        }
                    }
                    if link.writer.send(&probe(u64::MAX, 1)).await.is_err() {
                        return;
                    }
                }
            });
        }
    })
}

/// The set-up variants, `plain-tcp` (the baseline) first.
const SETUP_KINDS: [&str; 5] = [
    "plain-tcp",
    "tcp-noauth",
    "tcp-auth",
    "quic-noauth",
    "quic-auth",
];

/// Where one set-up variant connects to.
enum Target {
    /// A plain tcp echo server.
    Plain(SocketAddr),
    /// An sdm listener echoing frames.
    Link {
        /// The client side's transport.
        transport: Arc<dyn Transport>,
        /// The listener's address.
        at: Address,
        /// The session key both ends prove, if the variant runs the handshake.
        policy: Option<ConnectPolicy>,
    },
}

impl Target {
    /// Starts the server of set-up variant `kind` (one of [`SETUP_KINDS`]).
    async fn start(kind: &str) -> anyhow::Result<(Target, JoinHandle<()>)> {
        if kind == "plain-tcp" {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let at = listener.local_addr()?;
            return Ok((Target::Plain(at), spawn_plain_echo(listener, false)));
        }
        let (scheme, auth) = kind.split_once('-').context("kind is scheme-auth")?;
        let (transport, addr) = transport(scheme, &config(Duration::ZERO))?;
        let listener = transport.bind(&addr).await?;
        let at = listener.local_addr();
        let policy = (auth == "auth").then(|| ConnectPolicy::new(SessionKey::generate()));
        let server = spawn_link_echo(listener, policy.clone());
        Ok((
            Target::Link {
                transport,
                at,
                policy,
            },
            server,
        ))
    }

    /// Times one set-up: connect (and handshake), one probe round trip; in µs.
    async fn set_up(&self, i: u32) -> anyhow::Result<f64> {
        let start = Instant::now();
        match self {
            Target::Plain(at) => {
                let mut s = plain_connect(*at, false).await?;
                let out = plain_probe(i);
                let mut back = vec![0u8; out.len()];
                plain_round_trip(&mut s, &out, &mut back).await?;
                Ok(us_since(start))
            }
            Target::Link {
                transport,
                at,
                policy,
            } => {
                let mut link = match policy {
                    Some(p) => {
                        let (me, child) = (NodeId::Master, NodeId::Server(0));
                        setup::connect_child(&**transport, at, me, child, p).await?
                    }
                    None => transport.connect(at).await?,
                };
                frame_round_trip(&mut link, u64::from(i)).await?;
                Ok(us_since(start))
            }
        }
    }
}

/// Section 1: link set-up cost. The variants take turns (one set-up each per round, the
/// order rotating), so a change of load meets them all alike; the first tenth of the
/// rounds is warm-up.
async fn bench_setup(cli: &Cli) -> anyhow::Result<()> {
    let load_before = loadavg();
    let mut targets = Vec::new();
    let mut servers = Vec::new();
    for kind in SETUP_KINDS {
        let (t, s) = Target::start(kind).await.context(kind)?;
        targets.push(t);
        servers.push(s);
    }
    let k = targets.len();
    let warm = cli.setups / 10;
    let mut samples = vec![Vec::with_capacity(cli.setups as usize); k];
    for i in 0..warm + cli.setups {
        for j in 0..k {
            let v = (i as usize + j) % k;
            let took = targets[v].set_up(i).await.context(SETUP_KINDS[v])?;
            if i >= warm {
                samples[v].push(took);
            }
        }
    }
    servers.iter().for_each(JoinHandle::abort);
    let load_after = loadavg();
    let base = summarize(&samples[0]);
    for (kind, s) in SETUP_KINDS.iter().zip(&samples) {
        let s = summarize(s);
        println!(
            "{}",
            json!({"bench": "setup", "kind": kind, "latency": summary_json(&s),
                   "ratio_p50": s.p50 / base.p50, "ratio_p99": s.p99 / base.p99,
                   "load_before": load_before, "load_after": load_after})
        );
    }
    Ok(())
}

/// The steady-state link kinds, `plain-tcp` (the baseline) first.
const STEADY_KINDS: [&str; 4] = ["plain-tcp", "plain-tcp-bounded", "tcp", "quic"];

/// Two established connections of one kind: one for round trips, one for throughput.
enum Conn {
    /// Plain tcp streams.
    Plain {
        /// Round trips.
        rtt: TcpStream,
        /// Acknowledgements of the throughput bursts.
        bulk_r: OwnedReadHalf,
        /// Throughput frames.
        bulk_w: BufWriter<OwnedWriteHalf>,
        /// A throughput frame's payload.
        payload: Vec<u8>,
    },
    /// sdm links (no handshake: it costs nothing once connected).
    Link {
        /// Round trips.
        rtt: Box<Link>,
        /// Throughput frames and their acknowledgements.
        bulk: Box<Link>,
        /// A throughput frame.
        frame: Message,
    },
}

impl Conn {
    /// Opens both connections of `kind` (one of [`STEADY_KINDS`]) to fresh servers whose
    /// sink acknowledges every `burst` frames of `bytes` payload.
    async fn open(
        kind: &str,
        burst: u32,
        bytes: usize,
    ) -> anyhow::Result<(Conn, [JoinHandle<()>; 2])> {
        if let Some(rest) = kind.strip_prefix("plain-tcp") {
            let bounded = rest == "-bounded";
            let (echo, sink) = (
                TcpListener::bind("127.0.0.1:0").await?,
                TcpListener::bind("127.0.0.1:0").await?,
            );
            let (echo_at, sink_at) = (echo.local_addr()?, sink.local_addr()?);
            let servers = [
                spawn_plain_echo(echo, bounded),
                spawn_plain_sink(sink, bounded, burst),
            ];
            let rtt = plain_connect(echo_at, bounded).await?;
            let (bulk_r, w) = plain_connect(sink_at, bounded).await?.into_split();
            let conn = Conn::Plain {
                rtt,
                bulk_r,
                bulk_w: BufWriter::with_capacity(64 << 10, w),
                payload: vec![7u8; bytes],
            };
            return Ok((conn, servers));
        }
        let (t, addr) = transport(kind, &config(Duration::ZERO))?;
        let (echo, sink) = (t.bind(&addr).await?, t.bind(&addr).await?);
        let (echo_at, sink_at) = (echo.local_addr(), sink.local_addr());
        let servers = [spawn_link_echo(echo, None), spawn_link_sink(sink, burst)];
        let conn = Conn::Link {
            rtt: Box::new(t.connect(&echo_at).await?),
            bulk: Box::new(t.connect(&sink_at).await?),
            frame: probe(1, bytes),
        };
        Ok((conn, servers))
    }

    /// Times one probe round trip, in µs.
    async fn round_trip(&mut self, i: u32) -> anyhow::Result<f64> {
        let start = Instant::now();
        match self {
            Conn::Plain { rtt, .. } => {
                let out = plain_probe(i);
                let mut back = vec![0u8; out.len()];
                plain_round_trip(rtt, &out, &mut back).await?;
            }
            Conn::Link { rtt, .. } => frame_round_trip(rtt, u64::from(i)).await?,
        }
        Ok(us_since(start))
    }

    /// Times one burst of `burst` frames until the sink acknowledges it, in seconds.
    async fn burst(&mut self, burst: u32) -> anyhow::Result<f64> {
        let start = Instant::now();
        match self {
            Conn::Plain {
                bulk_r,
                bulk_w,
                payload,
                ..
            } => {
                for _ in 0..burst {
                    bulk_w.write_u32(payload.len() as u32).await?;
                    bulk_w.write_all(payload).await?;
                }
                bulk_w.flush().await?;
                let mut ack = [0u8; 1];
                bulk_r.read_exact(&mut ack).await?;
            }
            Conn::Link { bulk, frame, .. } => {
                for _ in 0..burst {
                    bulk.writer.feed(&*frame).await?;
                }
                bulk.writer.flush().await?;
                let ack = next_frame(bulk).await?;
                ensure!(ack.op == u64::MAX, "unexpected acknowledgement");
            }
        }
        Ok(start.elapsed().as_secs_f64())
    }
}

/// Round-trip blocks per kind in the steady section (the first tenth are warm-up).
const RTT_BLOCKS: u32 = 50;

/// Throughput bursts per kind in the steady section (plus one warm-up burst).
const BURSTS: u32 = 10;

/// Section 2: steady-state round trips and throughput over established links. The kinds
/// take turns (blocks of round trips, then bursts of frames, the order rotating), so a
/// change of load meets them all alike.
async fn bench_steady(cli: &Cli) -> anyhow::Result<()> {
    let load_before = loadavg();
    let burst = (cli.frames / BURSTS).max(1);
    let mut conns = Vec::new();
    let mut servers = Vec::new();
    for kind in STEADY_KINDS {
        let (c, s) = Conn::open(kind, burst, cli.frame_bytes)
            .await
            .context(kind)?;
        conns.push(c);
        servers.extend(s);
    }
    let k = conns.len();
    let per_block = (cli.rtts / RTT_BLOCKS).max(1);
    let warm = RTT_BLOCKS / 10;
    let mut rtts = vec![Vec::with_capacity(cli.rtts as usize); k];
    for b in 0..warm + RTT_BLOCKS {
        for j in 0..k {
            let v = (b as usize + j) % k;
            for i in 0..per_block {
                let took = conns[v]
                    .round_trip(b * per_block + i)
                    .await
                    .context(STEADY_KINDS[v])?;
                if b >= warm {
                    rtts[v].push(took);
                }
            }
        }
    }
    let mut secs = vec![0.0f64; k];
    for b in 0..=BURSTS {
        for j in 0..k {
            let v = (b as usize + j) % k;
            let took = conns[v].burst(burst).await.context(STEADY_KINDS[v])?;
            if b > 0 {
                secs[v] += took;
            }
        }
    }
    drop(conns);
    servers.iter().for_each(JoinHandle::abort);
    let load_after = loadavg();
    let frames = f64::from(burst * BURSTS);
    let base = (summarize(&rtts[0]), frames / secs[0]);
    for v in 0..k {
        let s = summarize(&rtts[v]);
        let fps = frames / secs[v];
        println!(
            "{}",
            json!({"bench": "steady", "kind": STEADY_KINDS[v], "rtt": summary_json(&s),
                   "rtt_ratio_p50": s.p50 / base.0.p50, "rtt_ratio_p99": s.p99 / base.0.p99,
                   "frames": burst * BURSTS, "frame_bytes": cli.frame_bytes,
                   "frames_per_s": fps,
                   "mib_per_s": fps * cli.frame_bytes as f64 / f64::from(1u32 << 20),
                   "throughput_ratio": fps / base.1,
                   "load_before": load_before, "load_after": load_after})
        );
    }
    Ok(())
}

/// Servers answer every command with `pong`.
fn pong(_id: u32, d: Delivery) {
    d.reply.send("pong");
}

/// An in-process tree: the front-end, and the tasks of the master and every server.
struct Tree {
    /// The front-end's link to the master.
    frontend: Frontend,
    /// The master's and every server's task.
    tasks: Vec<JoinHandle<()>>,
    /// The depth of the deepest server (the master's children are at depth 1).
    depth: u32,
}

/// Builds a tree of `n` servers of `shape` over tcp, every link (front-end included)
/// delayed by `delay` one way, with the library's public set-up API.
async fn build_tree(n: u32, shape: Shape, delay: Duration) -> anyhow::Result<Tree> {
    let (t, addr) = transport("tcp", &config(delay))?;
    let topo: Arc<dyn Topology> = Arc::from(shape.build(n));
    let depth = (0..n)
        .map(|i| topo.depth(NodeId::Server(i)))
        .max()
        .unwrap_or(0);
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(t.bind(&addr).await?);
    }
    let table: Arc<Vec<Option<Address>>> =
        Arc::new(listeners.iter().map(|l| Some(l.local_addr())).collect());
    let policy = ConnectPolicy::new(SessionKey::generate());
    let mut tasks = Vec::new();
    for (id, mut listener) in (0..n).zip(listeners) {
        let (t, topo, table, policy) = (t.clone(), topo.clone(), table.clone(), policy.clone());
        tasks.push(tokio::spawn(async move {
            let me = NodeId::Server(id);
            let (children, parent) = tokio::join!(
                setup::connect_children(&*t, &*topo, me, &table, &policy),
                setup::accept_parent(&mut *listener, me, &policy),
            );
            let Ok(parent) = parent else { return };
            let handler = Box::new(move |d| pong(id, d));
            let options = driver::Options::default();
            driver::run_node(Node::new(me, topo), parent, children, handler, options).await;
        }));
    }
    let mut fe_listener = t.bind(&addr).await?;
    let fe_addr = fe_listener.local_addr();
    {
        let (topo, policy) = (topo.clone(), policy.clone());
        tasks.push(tokio::spawn(async move {
            let children =
                setup::connect_children(&*t, &*topo, NodeId::Master, &table, &policy).await;
            let Ok(up) = setup::connect_frontend(&*t, &fe_addr, &policy).await else {
                return;
            };
            let handler = Box::new(|_d: Delivery| {});
            let node = Node::new(NodeId::Master, topo);
            driver::run_node(node, up, children, handler, driver::Options::default()).await;
        }));
    }
    let frontend = Frontend::accept_master(&mut *fe_listener, &policy).await?;
    Ok(Tree {
        frontend,
        tasks,
        depth,
    })
}

/// Times `iters` broadcast pings (after `warm` untimed) through `tree`, in µs; every one
/// must come back as a single replied group covering all `n` servers.
async fn broadcasts(tree: &mut Tree, n: u32, warm: u32, iters: u32) -> anyhow::Result<Vec<f64>> {
    let all = IdSet::all(n);
    let mut samples = Vec::with_capacity(iters as usize);
    for i in 0..warm + iters {
        let t = Instant::now();
        let g = tree
            .frontend
            .request(&all, SyncMode::WaitAll, "ping")
            .await?;
        let took = us_since(t);
        if g.len() != 1 || g[0].status != Status::Replied || g[0].sources != all {
            bail!("broadcast {i}: unexpected groups {g:?}");
        }
        if i >= warm {
            samples.push(took);
        }
    }
    Ok(samples)
}

/// Section 3: broadcast round trips against tree depth, with and without the delay layer.
async fn bench_tree(cli: &Cli) -> anyhow::Result<()> {
    let delay = Duration::from_millis(cli.delay_ms);
    for &n in &cli.servers {
        for shape in &cli.shapes {
            let load_before = loadavg();
            let mut plain = build_tree(n, shape.clone(), Duration::ZERO).await?;
            let p = summarize(&broadcasts(&mut plain, n, 20, cli.tree_iters_nodelay).await?);
            drop(plain.frontend);
            plain.tasks.iter().for_each(JoinHandle::abort);
            let mut tree = build_tree(n, shape.clone(), delay).await?;
            let d = summarize(&broadcasts(&mut tree, n, 3, cli.tree_iters).await?);
            let depth = tree.depth;
            drop(tree.frontend);
            tree.tasks.iter().for_each(JoinHandle::abort);
            // One-way hops of a broadcast: down and up through every level, plus the
            // front-end's own link.
            let hops = 2.0 * f64::from(depth + 1);
            let floor_us = hops * delay.as_secs_f64() * 1e6;
            println!(
                "{}",
                json!({"bench": "tree", "servers": n, "shape": shape.to_string(), "depth": depth,
                       "delay_ms": cli.delay_ms, "floor_us": floor_us,
                       "delayed": summary_json(&d), "nodelay": summary_json(&p),
                       "p50_over_floor": d.p50 / floor_us,
                       "p50_minus_floor_us": d.p50 - floor_us,
                       "excess_per_one_way_hop_us": (d.p50 - floor_us - p.p50) / hops,
                       "load_before": load_before, "load_after": loadavg()})
            );
        }
    }
    Ok(())
}

/// Runs the sections named by `--only`, in order, printing one JSON line per measurement.
fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = match cli.runtime.as_str() {
        "current" => tokio::runtime::Builder::new_current_thread(),
        "multi" => tokio::runtime::Builder::new_multi_thread(),
        other => bail!("unknown runtime {other:?}: expected current or multi"),
    }
    .enable_all()
    .build()?;
    rt.block_on(run(&cli))
}

/// The sections of `cli`, in order.
async fn run(cli: &Cli) -> anyhow::Result<()> {
    println!(
        "{}",
        json!({"bench": "info", "runtime": cli.runtime,
               "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
               "args": std::env::args().skip(1).collect::<Vec<_>>(), "load": loadavg()})
    );
    for section in &cli.only {
        match section.as_str() {
            "setup" => bench_setup(cli).await?,
            "steady" => bench_steady(cli).await?,
            "tree" => bench_tree(cli).await?,
            other => bail!("unknown section {other:?}: expected setup, steady or tree"),
        }
    }
    Ok(())
}
