//! Link set-up: parents connect to children (probing successive ports), the master connects
//! to the front-end, and every link runs the challenge-response of the [`SessionKey`] and
//! checks the peer's id before it carries a frame.
//!
//! Also what setting up a tree needs besides links: the [`InitSpec`] the front-end sends
//! first (routing table, shape, policy), the address a host is reached at ([`source_for`],
//! [`check_advertised`]), and a node's [`recovery`] from lost links.

use std::io;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{SinkExt, StreamExt};
use sdm_proto::{Control, Kind};
use sdm_topology::{NodeId, Topology};

use crate::auth::nonce;
use crate::error::{LinkError, LinkErrorKind};
use crate::logging::Refusals;
use crate::transport::{Address, Link, Listener, Transport};

pub use crate::auth::{KeyError, SESSION_KEY_ENV, SessionKey, hex_decode, hex_encode};
pub use crate::init::{INIT_SERVICE, InitError, InitSpec, Table};
pub use crate::recover::{DEFAULT_PATIENCE, PATIENCE_ENV, REATTACH_ENV, recovery};
pub use crate::route::{
    RouteError, bracketed, check_advertised, host_text, resolve, source_for, unbracketed,
};

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

async fn next_control(link: &mut Link) -> Result<Control, LinkError> {
    let peer = &link.peer;
    match link.reader.next().await {
        Some(Ok(m)) if m.kind == Kind::Control => Control::from_message(&m).map_err(|e| {
            LinkError::protocol(peer, format!("bad handshake frame from {peer}: {e}"), e)
        }),
        Some(Ok(m)) => Err(LinkError::new(
            LinkErrorKind::Protocol,
            peer,
            format!("expected a handshake frame from {peer}, got {:?}", m.kind),
        )),
        Some(Err(e)) => Err(LinkError::protocol(
            peer,
            format!("bad frame from {peer}: {e}"),
            e,
        )),
        None => Err(LinkError::new(
            LinkErrorKind::Closed,
            peer,
            format!("{peer} closed the connection during the handshake"),
        )),
    }
}

async fn send_control(link: &mut Link, c: Control) -> Result<(), LinkError> {
    let what = c.name();
    link.writer.send(&c.to_message()).await.map_err(|e| {
        let peer = &link.peer;
        LinkError::io(
            peer,
            format!("sending {what} to {peer}: {e}"),
            io::Error::other(e),
        )
    })
}

/// Connector side of the handshake on an open link.
async fn handshake_connect(
    link: &mut Link,
    key: &SessionKey,
    me: &str,
    to: &str,
) -> Result<(), LinkError> {
    let nc = nonce();
    let hello = Control::Hello {
        to: to.to_owned(),
        from: me.to_owned(),
        nonce: nc.clone(),
    };
    send_control(link, hello).await?;
    let answer = next_control(link).await?;
    match answer {
        Control::Welcome {
            to: who,
            nonce: ns,
            mac,
        } if who == to => {
            let peer = &link.peer;
            if !key.check_acceptor(to, me, &nc, &ns, &mac) {
                return Err(LinkError::new(
                    LinkErrorKind::AuthFailed,
                    peer,
                    format!("{peer} could not prove the session key: not part of this session"),
                ));
            }
            let mac = key.connector_mac(to, me, &nc, &ns);
            send_control(link, Control::Proof { mac }).await?;
            let peer = &link.peer.clone();
            match next_control(link).await {
                Ok(Control::Ready) => Ok(()),
                Ok(t) => Err(LinkError::new(
                    LinkErrorKind::Protocol,
                    peer,
                    format!("{peer} sent {} instead of ready", t.name()),
                )),
                // The acceptor closes a link whose proof it does not accept.
                Err(e) => {
                    let message = format!("{e} (did {to} refuse our session key?)");
                    Err(e.context(peer, message))
                }
            }
        }
        Control::Refuse { me: who } => Err(LinkError::new(
            LinkErrorKind::WrongPeer,
            &link.peer,
            format!("{} is {who}, not {to}", link.peer),
        )),
        other => Err(LinkError::new(
            LinkErrorKind::Protocol,
            &link.peer,
            format!("{} answered the hello with {other:?}", link.peer),
        )),
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
) -> Result<Link, LinkError> {
    let mut last: Option<LinkError> = None;
    for round in 0..policy.attempts.max(1) {
        if round > 0 {
            tokio::time::sleep(policy.delay).await;
        }
        for k in 0..policy.probe_span.max(1) {
            let Some(a) = port_plus(addr, k) else { break };
            let tried = tokio::time::timeout(policy.handshake_timeout, async {
                let mut link = transport
                    .connect(&a)
                    .await
                    .map_err(|e| LinkError::io(&a, e.to_string(), e))?;
                let session_max = link.reader.decoder().max_frame();
                let small = HANDSHAKE_MAX_FRAME.min(session_max);
                link.reader.decoder_mut().set_max_frame(small);
                handshake_connect(&mut link, &policy.key, me, to).await?;
                link.reader.decoder_mut().set_max_frame(session_max);
                Ok::<_, LinkError>(link)
            })
            .await;
            match tried {
                Ok(Ok(link)) => return Ok(link),
                Ok(Err(e)) => last = Some(e),
                Err(_) => {
                    last = Some(LinkError::new(
                        LinkErrorKind::Timeout,
                        &a,
                        format!("handshake with {a} timed out"),
                    ))
                }
            }
        }
    }
    let e = last.unwrap_or_else(|| {
        LinkError::new(LinkErrorKind::NoAddress, addr, "no address to try".into())
    });
    let message = format!(
        "{to} at {addr}: {e} (after {} rounds)",
        policy.attempts.max(1)
    );
    Err(e.context(addr, message))
}

/// Connects to child `child` at `addr` and proves both ends hold the session key.
pub async fn connect_child(
    transport: &dyn Transport,
    addr: &Address,
    me: NodeId,
    child: NodeId,
    policy: &ConnectPolicy,
) -> Result<Link, LinkError> {
    connect_named(transport, addr, &me.to_string(), &child.to_string(), policy).await
}

/// Connects the master to the front-end listening at `addr`.
pub async fn connect_frontend(
    transport: &dyn Transport,
    addr: &Address,
    policy: &ConnectPolicy,
) -> Result<Link, LinkError> {
    connect_named(transport, addr, "master", FRONTEND, policy).await
}

/// Connects to every child of `me`; `table[s]` is server `s`'s address (`None`: unknown,
/// reported as a failed link of kind [`LinkErrorKind::NoAddress`]).
pub async fn connect_children(
    transport: &dyn Transport,
    topo: &dyn Topology,
    me: NodeId,
    table: &[Option<Address>],
    policy: &ConnectPolicy,
) -> Vec<(NodeId, Result<Link, LinkError>)> {
    let kids = topo.children(me);
    let futs = kids.iter().map(|&c| async move {
        let s = c.server().expect("children are servers") as usize;
        let res = match table.get(s) {
            Some(Some(addr)) => connect_child(transport, addr, me, c, policy).await,
            Some(None) => Err(LinkError::new(
                LinkErrorKind::NoAddress,
                c,
                format!("server {c} did not start"),
            )),
            None => Err(LinkError::new(
                LinkErrorKind::NoAddress,
                c,
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
) -> Result<Link, LinkError> {
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
/// refused connection is logged with its peer and reason (through `Refusals`, so a
/// flood of them is summarized). The returned link has the session's frame limit back; the
/// other pending handshakes are dropped (their connections close).
pub async fn accept_named(
    listener: &mut dyn Listener,
    me: &str,
    policy: &ConnectPolicy,
) -> Result<Link, LinkError> {
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
                    Err(e) => {
                        let at = listener.local_addr();
                        return Err(LinkError::io(&at, format!("accepting on {at}: {e}"), e));
                    }
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
) -> Result<String, LinkError> {
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
        Err(LinkError::new(
            LinkErrorKind::Timeout,
            &link.peer,
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
async fn handshake_accept(
    link: &mut Link,
    key: &SessionKey,
    me: &str,
) -> Result<String, LinkError> {
    let hello = next_control(link).await?;
    let Control::Hello {
        to,
        from,
        nonce: nc,
    } = hello
    else {
        return Err(LinkError::new(
            LinkErrorKind::Protocol,
            &link.peer,
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
        return Err(LinkError::new(
            LinkErrorKind::WrongPeer,
            &link.peer,
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
        _ => Err(LinkError::new(
            LinkErrorKind::AuthFailed,
            &link.peer,
            format!("{from} did not prove the session key"),
        )),
    }
}
