//! Link set-up: parents connect to children (probing successive ports), the master connects
//! to the front-end, and every link runs the session-key challenge-response of
//! [`crate::auth`] and checks the peer's id before it carries a frame.

use std::io;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{SinkExt, StreamExt};
use sdm_proto::{Control, Kind};
use sdm_topology::{NodeId, Topology};

use crate::auth::{SessionKey, nonce};
use crate::logging::Refusals;
use crate::transport::{Address, Link, Listener, Transport};

/// The name the front-end answers to in the handshake.
pub const FRONTEND: &str = "frontend";

/// How to connect: the session key, and how hard to try.
#[derive(Debug, Clone)]
pub struct ConnectPolicy {
    /// The session key both ends must prove.
    pub key: SessionKey,
    /// Rounds of attempts before giving up.
    pub attempts: u32,
    /// Delay between rounds.
    pub delay: Duration,
    /// Ports tried per round: the given port, then the next `probe_span - 1`.
    pub probe_span: u16,
    /// Limit for one connect plus handshake.
    pub handshake_timeout: Duration,
}

impl ConnectPolicy {
    /// Defaults (20 rounds, 100 ms apart, one port, 5 s handshakes) with `key`.
    pub fn new(key: SessionKey) -> Self {
        Self {
            key,
            attempts: 20,
            delay: Duration::from_millis(100),
            probe_span: 1,
            handshake_timeout: Duration::from_secs(5),
        }
    }

    /// The longest [`connect_child`] can take before it reports failure.
    pub fn deadline(&self) -> Duration {
        (self.delay + self.handshake_timeout * u32::from(self.probe_span.max(1)))
            * self.attempts.max(1)
    }
}

fn bad(kind: io::ErrorKind, text: String) -> io::Error {
    io::Error::new(kind, text)
}

async fn next_control(link: &mut Link) -> io::Result<Control> {
    match link.reader.next().await {
        Some(Ok(m)) if m.kind == Kind::Control => Control::from_message(&m).map_err(|e| {
            bad(
                io::ErrorKind::InvalidData,
                format!("bad handshake frame from {}: {e}", link.peer),
            )
        }),
        Some(Ok(m)) => Err(bad(
            io::ErrorKind::InvalidData,
            format!(
                "expected a handshake frame from {}, got {:?}",
                link.peer, m.kind
            ),
        )),
        Some(Err(e)) => Err(bad(
            io::ErrorKind::InvalidData,
            format!("bad frame from {}: {e}", link.peer),
        )),
        None => Err(bad(
            io::ErrorKind::ConnectionAborted,
            format!("{} closed the connection during the handshake", link.peer),
        )),
    }
}

async fn send_control(link: &mut Link, c: Control) -> io::Result<()> {
    link.writer
        .send(&c.to_message())
        .await
        .map_err(io::Error::other)
}

/// Why one handshake attempt failed: `Refused` means a live peer that is not `to`.
enum Attempt {
    Refused(io::Error),
    Failed(io::Error),
}

/// Connector side of the handshake on an open link.
async fn handshake_connect(
    link: &mut Link,
    key: &SessionKey,
    me: &str,
    to: &str,
) -> Result<(), Attempt> {
    let nc = nonce();
    let hello = Control::Hello {
        to: to.to_owned(),
        from: me.to_owned(),
        nonce: nc.clone(),
    };
    send_control(link, hello).await.map_err(Attempt::Failed)?;
    let answer = next_control(link).await.map_err(Attempt::Failed)?;
    match answer {
        Control::Welcome {
            to: who,
            nonce: ns,
            mac,
        } if who == to => {
            if !key.check_acceptor(to, me, &nc, &ns, &mac) {
                return Err(Attempt::Failed(bad(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{} could not prove the session key: not part of this session",
                        link.peer
                    ),
                )));
            }
            let mac = key.connector_mac(to, me, &nc, &ns);
            send_control(link, Control::Proof { mac })
                .await
                .map_err(Attempt::Failed)?;
            match next_control(link).await {
                Ok(Control::Ready) => Ok(()),
                Ok(t) => Err(Attempt::Failed(bad(
                    io::ErrorKind::InvalidData,
                    format!("{} sent {} instead of ready", link.peer, t.name()),
                ))),
                Err(e) => Err(Attempt::Failed(bad(
                    e.kind(),
                    format!("{e} (did {to} refuse our session key?)"),
                ))),
            }
        }
        Control::Refuse { me: who } => Err(Attempt::Refused(bad(
            io::ErrorKind::ConnectionRefused,
            format!("{} is {who}, not {to}", link.peer),
        ))),
        other => Err(Attempt::Failed(bad(
            io::ErrorKind::InvalidData,
            format!("{} answered the hello with {other:?}", link.peer),
        ))),
    }
}

/// `addr` with its port moved up by `k` (mem addresses are returned unchanged).
fn port_plus(addr: &Address, k: u16) -> Option<Address> {
    if k == 0 {
        return Some(addr.clone());
    }
    let (host, port) = addr.target().rsplit_once(':')?;
    let port: u16 = port.parse::<u16>().ok()?.checked_add(k)?;
    let t = format!("{host}:{port}");
    match addr {
        Address::Tcp(_) => Some(Address::Tcp(t)),
        Address::Quic(_) => Some(Address::Quic(t)),
        Address::Mem(_) => None,
    }
}

/// Connects to the node named `to` at `addr` (probing `probe_span` ports per round, with a
/// delay between rounds) and runs the handshake.
async fn connect_named(
    transport: &dyn Transport,
    addr: &Address,
    me: &str,
    to: &str,
    policy: &ConnectPolicy,
) -> io::Result<Link> {
    let mut last: Option<io::Error> = None;
    for round in 0..policy.attempts.max(1) {
        if round > 0 {
            tokio::time::sleep(policy.delay).await;
        }
        for k in 0..policy.probe_span.max(1) {
            let Some(a) = port_plus(addr, k) else { break };
            let tried = tokio::time::timeout(policy.handshake_timeout, async {
                let mut link = transport.connect(&a).await.map_err(Attempt::Failed)?;
                let session_max = link.reader.decoder().max_frame();
                let small = HANDSHAKE_MAX_FRAME.min(session_max);
                link.reader.decoder_mut().set_max_frame(small);
                handshake_connect(&mut link, &policy.key, me, to).await?;
                link.reader.decoder_mut().set_max_frame(session_max);
                Ok::<_, Attempt>(link)
            })
            .await;
            match tried {
                Ok(Ok(link)) => return Ok(link),
                Ok(Err(Attempt::Refused(e) | Attempt::Failed(e))) => last = Some(e),
                Err(_) => {
                    last = Some(bad(
                        io::ErrorKind::TimedOut,
                        format!("handshake with {a} timed out"),
                    ))
                }
            }
        }
    }
    let e = last.unwrap_or_else(|| bad(io::ErrorKind::NotFound, "no address to try".into()));
    Err(bad(
        e.kind(),
        format!(
            "{to} at {addr}: {e} (after {} rounds)",
            policy.attempts.max(1)
        ),
    ))
}

/// Connects to child `child` at `addr` and proves both ends hold the session key.
pub async fn connect_child(
    transport: &dyn Transport,
    addr: &Address,
    me: NodeId,
    child: NodeId,
    policy: &ConnectPolicy,
) -> io::Result<Link> {
    connect_named(transport, addr, &me.to_string(), &child.to_string(), policy).await
}

/// Connects the master to the front-end listening at `addr`.
pub async fn connect_frontend(
    transport: &dyn Transport,
    addr: &Address,
    policy: &ConnectPolicy,
) -> io::Result<Link> {
    connect_named(transport, addr, "master", FRONTEND, policy).await
}

/// Connects to every child of `me`; `table[s]` is server `s`'s address (`None`: unknown,
/// reported as a failed link with `why`).
pub async fn connect_children(
    transport: &dyn Transport,
    topo: &dyn Topology,
    me: NodeId,
    table: &[Option<Address>],
    policy: &ConnectPolicy,
) -> Vec<(NodeId, io::Result<Link>)> {
    let kids = topo.children(me);
    let futs = kids.iter().map(|&c| async move {
        let s = c.server().expect("children are servers") as usize;
        let res = match table.get(s) {
            Some(Some(addr)) => connect_child(transport, addr, me, c, policy).await,
            Some(None) => Err(bad(
                io::ErrorKind::NotFound,
                format!("server {c} did not start"),
            )),
            None => Err(bad(
                io::ErrorKind::NotFound,
                format!("routing table has no entry for server {c}"),
            )),
        };
        (c, res)
    });
    futures::future::join_all(futs).await
}

/// Accepts connections on `listener` until one proves the session key and names `me`
/// (our parent). Every other connection is refused and logged, costing only itself.
pub async fn accept_parent(
    listener: &mut dyn Listener,
    me: NodeId,
    policy: &ConnectPolicy,
) -> io::Result<Link> {
    accept_named(listener, &me.to_string(), policy).await
}

/// Most handshakes [`accept_named`] runs at once; connections beyond it are closed at once
/// (and logged) until one of the running handshakes ends.
pub const MAX_PENDING_HANDSHAKES: usize = 1024;

/// Largest frame an unauthenticated peer may send: handshake lines are under 300 bytes, so
/// a stranger can never make the acceptor buffer a session-sized frame.
pub const HANDSHAKE_MAX_FRAME: usize = 4096;

/// Accepts connections until one hands over a valid hello addressed to `me` and proves the
/// session key.
///
/// Handshakes run concurrently, each under its own `policy.handshake_timeout`: a silent,
/// slow or hostile connection costs only itself and never delays a legitimate peer. Every
/// refused connection is logged with its peer and reason (through [`Refusals`], so a
/// flood of them is summarized). The returned link has the session's frame limit back; the
/// other pending handshakes are dropped (their connections close).
pub async fn accept_named(
    listener: &mut dyn Listener,
    me: &str,
    policy: &ConnectPolicy,
) -> io::Result<Link> {
    let mut pending = FuturesUnordered::new();
    let refusals = Refusals::new(me);
    let reporting = refusals.keep_reporting();
    tokio::pin!(reporting);
    loop {
        tokio::select! {
            () = &mut reporting => {}
            accepted = listener.accept() => {
                let mut link = match accepted {
                    Ok(link) => link,
                    Err(e) if transient_accept_error(&e) => {
                        tracing::warn!(node = me, "accept failed, still listening: {e}");
                        // Out of descriptors or memory: let pending handshakes end first.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if pending.len() >= MAX_PENDING_HANDSHAKES {
                    let why = format!("{MAX_PENDING_HANDSHAKES} handshakes already running");
                    refusals.refused(&link.peer, &why);
                    continue;
                }
                pending.push(async move {
                    let r = handshake_accepted(&mut link, me, policy).await;
                    (link, r)
                });
            }
            Some((link, r)) = pending.next(), if !pending.is_empty() => match r {
                Ok(_) => return Ok(link),
                Err(e) => refusals.refused(&link.peer, &e),
            },
        }
    }
}

/// Runs the acceptor's side of the handshake on one accepted link (limited frames, within
/// `policy.handshake_timeout`): for listeners that keep accepting, one task per connection.
/// Returns the name the peer gave once it proved the session key.
pub async fn handshake_accepted(
    link: &mut Link,
    me: &str,
    policy: &ConnectPolicy,
) -> io::Result<String> {
    let session_max = link.reader.decoder().max_frame();
    link.reader
        .decoder_mut()
        .set_max_frame(HANDSHAKE_MAX_FRAME.min(session_max));
    let r = tokio::time::timeout(
        policy.handshake_timeout,
        handshake_accept(link, &policy.key, me),
    )
    .await;
    link.reader.decoder_mut().set_max_frame(session_max);
    r.unwrap_or_else(|_| {
        Err(bad(
            io::ErrorKind::TimedOut,
            format!("no handshake within {:?}", policy.handshake_timeout),
        ))
    })
}

/// Accept errors that concern one connection or a passing shortage, not the listener.
fn transient_accept_error(e: &io::Error) -> bool {
    // Linux: ENOMEM, ENFILE, EMFILE, ENOBUFS.
    const SHORTAGE: [i32; 4] = [12, 23, 24, 105];
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || e.raw_os_error().is_some_and(|n| SHORTAGE.contains(&n))
}

/// Acceptor side of the handshake on an open link; returns the peer's name.
async fn handshake_accept(link: &mut Link, key: &SessionKey, me: &str) -> io::Result<String> {
    let hello = next_control(link).await?;
    let Control::Hello {
        to,
        from,
        nonce: nc,
    } = hello
    else {
        return Err(bad(
            io::ErrorKind::InvalidData,
            format!(
                "first frame from {} is {}, not hello",
                link.peer,
                hello.name()
            ),
        ));
    };
    let (to, from, nc) = (to.as_str(), from.as_str(), nc.as_str());
    if to != me {
        let refuse = Control::Refuse { me: me.to_owned() };
        send_control(link, refuse).await?;
        return Err(bad(
            io::ErrorKind::ConnectionRefused,
            format!("hello is for {to}, not {me}"),
        ));
    }
    let ns = nonce();
    let mac = key.acceptor_mac(to, from, nc, &ns);
    let welcome = Control::Welcome {
        to: me.to_owned(),
        nonce: ns.clone(),
        mac,
    };
    send_control(link, welcome).await?;
    match next_control(link).await? {
        Control::Proof { mac } if key.check_connector(to, from, nc, &ns, &mac) => {
            send_control(link, Control::Ready).await?;
            Ok(from.to_owned())
        }
        _ => Err(bad(
            io::ErrorKind::PermissionDenied,
            format!("{from} did not prove the session key"),
        )),
    }
}
