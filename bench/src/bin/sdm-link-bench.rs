//! sdm-link-bench: what one sdm link costs against plain TCP, and how round trips grow with
//! tree depth under the transport's delay layer (issue 7).
//!
//! One invocation runs three sections, each printing JSON lines (one per measurement, with
//! the load average read before and after it):
//!
//! 1. `setup`: connect plus one 64-byte round trip, repeated `--setups` times, for
//!    - `plain-tcp`: a tokio `TcpStream`, no framing beyond the bytes, no authentication;
//!    - `tcp-noauth` / `quic-noauth`: sdm's transport (`transport_for`, socket options,
//!      TLS 1.3 for quic) and one frame round trip, without the session-key handshake;
//!    - `tcp-auth` / `quic-auth`: what the tree does, `setup::connect_child` against
//!      `setup::accept_parent` (HMAC challenge-response), then one frame round trip.
//!
//!    Ratios are against `plain-tcp` of the same run.
//! 2. `steady`: over one established link, `--rtts` sequential round trips of a 64-byte
//!    payload (plain tcp echoes a 4-byte length and the payload; sdm links echo a
//!    `Message` through the frame codec) and one-way throughput of `--frames` frames of
//!    `--frame-bytes` payload (the receiver acknowledges the last one). `plain-tcp-bounded`
//!    is plain tcp with the kernel buffers sdm's tcp links use (64 KiB, `TCP_NOTSENT_LOWAT`
//!    16 KiB), to tell buffer sizing apart from the codec.
//! 3. `tree`: in-process trees (every node a task with its own tcp links, all on loopback)
//!    with `TransportConfig::delay` on every link, front-end link included: a broadcast
//!    `ping` to all servers, `WaitAll`, timed until the one merged group is back; compared
//!    with the floor `2 × (depth + 1) × delay`, and with the same tree without delay; what
//!    is left over, per one-way hop, is the delay layer's own overshoot (timer rounding).
//!
//! Everything runs in one process on a multi-threaded tokio runtime, so client and server
//! of a link share the machine's cores.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Parser;
use futures::{SinkExt, StreamExt};
use sdm_bench::stats::{Summary, summarize};
use sdm_overlay::Node;
use sdm_overlay::auth::SessionKey;
use sdm_overlay::driver::{self, Delivery};
use sdm_overlay::frontend::Frontend;
use sdm_overlay::setup::{self, ConnectPolicy};
use sdm_overlay::transport::{
    Address, Link, Listener, SessionTls, Transport, TransportConfig, transport_for,
};
use sdm_proto::{IdSet, Message, Status, SyncMode};
use sdm_topology::{NodeId, Shape, Topology};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
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

/// Plain tcp: echoes 64-byte blocks on every accepted connection until it ends.
fn spawn_plain_echo(listener: TcpListener, bounded: bool) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                if tune(&s, bounded).is_err() {
                    return;
                }
                let mut buf = [0u8; PROBE];
                while s.read_exact(&mut buf).await.is_ok() {
                    if s.write_all(&buf).await.is_err() {
                        return;
                    }
                }
            });
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

/// An sdm listener that accepts links (after the session-key handshake if `policy` is set)
/// and echoes frames on each until it ends.
fn spawn_link_echo(
    mut listener: Box<dyn Listener>,
    policy: Option<ConnectPolicy>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let link = match &policy {
                Some(p) => setup::accept_parent(&mut *listener, NodeId::Server(0), p).await,
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

/// One set-up variant: how a client connects, given the listener's address.
#[derive(Clone, Copy, Debug)]
enum SetupKind {
    PlainTcp,
    Link { scheme: &'static str, auth: bool },
}

impl SetupKind {
    fn name(self) -> String {
        match self {
            SetupKind::PlainTcp => "plain-tcp".into(),
            SetupKind::Link { scheme, auth } => {
                format!("{scheme}-{}", if auth { "auth" } else { "noauth" })
            }
        }
    }
}

/// Times `n` set-ups (connect, handshake if any, one 64-byte round trip) of `kind`, in µs.
async fn setup_series(kind: SetupKind, n: u32) -> anyhow::Result<Vec<f64>> {
    let mut samples = Vec::with_capacity(n as usize);
    match kind {
        SetupKind::PlainTcp => {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let at = listener.local_addr()?;
            let server = spawn_plain_echo(listener, false);
            for i in 0..n + n / 10 {
                let t = Instant::now();
                let mut s = TcpStream::connect(at).await?;
                s.set_nodelay(true)?;
                let out = [i as u8; PROBE];
                s.write_all(&out).await?;
                let mut back = [0u8; PROBE];
                s.read_exact(&mut back).await?;
                let took = us_since(t);
                ensure!(back == out, "echo differs");
                if i >= n / 10 {
                    samples.push(took);
                }
            }
            server.abort();
        }
        SetupKind::Link { scheme, auth } => {
            let (t, addr) = transport(scheme, &config(Duration::ZERO))?;
            let listener = t.bind(&addr).await?;
            let at = listener.local_addr();
            let policy = ConnectPolicy::new(SessionKey::generate());
            let server = spawn_link_echo(listener, auth.then(|| policy.clone()));
            for i in 0..n + n / 10 {
                let start = Instant::now();
                let mut link = if auth {
                    setup::connect_child(&*t, &at, NodeId::Master, NodeId::Server(0), &policy)
                        .await?
                } else {
                    t.connect(&at).await?
                };
                frame_round_trip(&mut link, u64::from(i)).await?;
                let took = us_since(start);
                if i >= n / 10 {
                    samples.push(took);
                }
            }
            server.abort();
        }
    }
    Ok(samples)
}

/// Section 1: link set-up cost.
async fn bench_setup(cli: &Cli) -> anyhow::Result<()> {
    let kinds = [
        SetupKind::PlainTcp,
        SetupKind::Link {
            scheme: "tcp",
            auth: false,
        },
        SetupKind::Link {
            scheme: "tcp",
            auth: true,
        },
        SetupKind::Link {
            scheme: "quic",
            auth: false,
        },
        SetupKind::Link {
            scheme: "quic",
            auth: true,
        },
    ];
    let mut base: Option<Summary> = None;
    for kind in kinds {
        let load_before = loadavg();
        let s = summarize(&setup_series(kind, cli.setups).await.context(kind.name())?);
        let b = *base.get_or_insert(s);
        println!(
            "{}",
            json!({"bench": "setup", "kind": kind.name(), "latency": summary_json(&s),
                   "ratio_p50": s.p50 / b.p50, "ratio_p99": s.p99 / b.p99,
                   "load_before": load_before, "load_after": loadavg()})
        );
    }
    Ok(())
}

/// Steady-state figures of one link kind: round trips (µs) and one-way frames per second.
struct Steady {
    rtt: Summary,
    frames_per_s: f64,
}

/// Plain tcp: `rtts` round trips of a length-prefixed 64-byte block, then `frames`
/// length-prefixed frames of `bytes` one way on a second connection.
async fn steady_plain(
    rtts: u32,
    frames: u32,
    bytes: usize,
    bounded: bool,
) -> anyhow::Result<Steady> {
    // Round trips: the echo server reads the 4-byte length and the payload, writes both.
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let at = listener.local_addr()?;
    let server = tokio::spawn(async move {
        let (s, _) = listener.accept().await?;
        tune(&s, bounded)?;
        let (r, mut w) = s.into_split();
        let mut r = BufReader::new(r);
        let mut buf = Vec::new();
        loop {
            let len = match r.read_u32().await {
                Ok(len) => len,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e),
            };
            buf.resize(len as usize + 4, 0);
            buf[..4].copy_from_slice(&len.to_be_bytes());
            r.read_exact(&mut buf[4..]).await?;
            w.write_all(&buf).await?;
        }
        let (s, _) = listener.accept().await?;
        tune(&s, bounded)?;
        let (r, mut w) = s.into_split();
        let mut r = BufReader::with_capacity(64 << 10, r);
        let mut got = 0u32;
        let mut buf = Vec::new();
        while got < frames {
            let len = r.read_u32().await?;
            buf.resize(len as usize, 0);
            r.read_exact(&mut buf).await?;
            got += 1;
        }
        w.write_all(&[1]).await?;
        Ok::<_, io::Error>(())
    });
    let mut s = TcpStream::connect(at).await?;
    tune(&s, bounded)?;
    let mut out = vec![0u8; 4 + PROBE];
    out[..4].copy_from_slice(&(PROBE as u32).to_be_bytes());
    let mut back = vec![0u8; 4 + PROBE];
    let mut samples = Vec::with_capacity(rtts as usize);
    for i in 0..rtts + rtts / 10 {
        out[4] = i as u8;
        let t = Instant::now();
        s.write_all(&out).await?;
        s.read_exact(&mut back).await?;
        let took = us_since(t);
        ensure!(back == out, "echo differs");
        if i >= rtts / 10 {
            samples.push(took);
        }
    }
    drop(s);
    // Throughput.
    let s = TcpStream::connect(at).await?;
    tune(&s, bounded)?;
    let (mut r, w) = s.into_split();
    let mut w = BufWriter::with_capacity(64 << 10, w);
    let payload = vec![7u8; bytes];
    let t = Instant::now();
    for _ in 0..frames {
        w.write_u32(bytes as u32).await?;
        w.write_all(&payload).await?;
    }
    w.flush().await?;
    let mut ack = [0u8; 1];
    r.read_exact(&mut ack).await?;
    let secs = t.elapsed().as_secs_f64();
    server.await??;
    Ok(Steady {
        rtt: summarize(&samples),
        frames_per_s: f64::from(frames) / secs,
    })
}

/// An sdm link of `scheme` (established without the handshake: it costs nothing after
/// connect): `rtts` probe round trips, then `frames` frames of `bytes` one way on a second
/// link.
async fn steady_link(scheme: &str, rtts: u32, frames: u32, bytes: usize) -> anyhow::Result<Steady> {
    let (t, addr) = transport(scheme, &config(Duration::ZERO))?;
    let mut listener = t.bind(&addr).await?;
    let at = listener.local_addr();
    let server = tokio::spawn(async move {
        let link = listener.accept().await?;
        echo_frames(link).await;
        let mut link = listener.accept().await?;
        for _ in 0..frames {
            next_frame(&mut link).await?;
        }
        link.writer.send(&probe(u64::MAX, 1)).await?;
        // Wait for the sender to close, so the acknowledgement is not cut off.
        while link.reader.next().await.is_some() {}
        Ok::<_, anyhow::Error>(())
    });
    let mut link = t.connect(&at).await?;
    let mut samples = Vec::with_capacity(rtts as usize);
    for i in 0..rtts + rtts / 10 {
        let start = Instant::now();
        frame_round_trip(&mut link, u64::from(i)).await?;
        let took = us_since(start);
        if i >= rtts / 10 {
            samples.push(took);
        }
    }
    drop(link);
    let mut link = t.connect(&at).await?;
    let m = probe(1, bytes);
    let start = Instant::now();
    for _ in 0..frames {
        link.writer.feed(&m).await?;
    }
    link.writer.flush().await?;
    let ack = next_frame(&mut link).await?;
    ensure!(ack.op == u64::MAX, "unexpected acknowledgement");
    let secs = start.elapsed().as_secs_f64();
    drop(link);
    server.await??;
    Ok(Steady {
        rtt: summarize(&samples),
        frames_per_s: f64::from(frames) / secs,
    })
}

/// Section 2: steady-state round trips and throughput over an established link.
async fn bench_steady(cli: &Cli) -> anyhow::Result<()> {
    let mut base: Option<(Summary, f64)> = None;
    for kind in ["plain-tcp", "plain-tcp-bounded", "tcp", "quic"] {
        let load_before = loadavg();
        let (rtts, frames, bytes) = (cli.rtts, cli.frames, cli.frame_bytes);
        let s = match kind {
            "plain-tcp" => steady_plain(rtts, frames, bytes, false).await,
            "plain-tcp-bounded" => steady_plain(rtts, frames, bytes, true).await,
            scheme => steady_link(scheme, rtts, frames, bytes).await,
        }
        .context(kind)?;
        let (b, bf) = *base.get_or_insert((s.rtt, s.frames_per_s));
        println!(
            "{}",
            json!({"bench": "steady", "kind": kind, "rtt": summary_json(&s.rtt),
                   "rtt_ratio_p50": s.rtt.p50 / b.p50, "rtt_ratio_p99": s.rtt.p99 / b.p99,
                   "frames": frames, "frame_bytes": bytes,
                   "frames_per_s": s.frames_per_s, "mib_per_s":
                       s.frames_per_s * bytes as f64 / f64::from(1u32 << 20),
                   "throughput_ratio": s.frames_per_s / bf,
                   "load_before": load_before, "load_after": loadavg()})
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
    frontend: Frontend,
    tasks: Vec<JoinHandle<()>>,
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
            let _ = driver::run_node(Node::new(me, topo), parent, children, handler).await;
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
            let _ = driver::run_node(Node::new(NodeId::Master, topo), up, children, handler).await;
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
        for &shape in &cli.shapes {
            let load_before = loadavg();
            let mut plain = build_tree(n, shape, Duration::ZERO).await?;
            let p = summarize(&broadcasts(&mut plain, n, 20, cli.tree_iters_nodelay).await?);
            drop(plain.frontend);
            plain.tasks.iter().for_each(JoinHandle::abort);
            let mut tree = build_tree(n, shape, delay).await?;
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    println!(
        "{}",
        json!({"bench": "info", "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
               "args": std::env::args().skip(1).collect::<Vec<_>>(), "load": loadavg()})
    );
    for section in &cli.only {
        match section.as_str() {
            "setup" => bench_setup(&cli).await?,
            "steady" => bench_steady(&cli).await?,
            "tree" => bench_tree(&cli).await?,
            other => bail!("unknown section {other:?}: expected setup, steady or tree"),
        }
    }
    Ok(())
}
