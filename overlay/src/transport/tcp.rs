//! `tcp://host:port`: the default transport, plain TCP with `TCP_NODELAY`, a TCP user timeout
//! and keepalive on every stream. Each link is one stream split into owned halves; dropping
//! the writer sends FIN.

use std::io;
use std::time::Duration;

use futures::future::BoxFuture;
use socket2::{SockRef, TcpKeepalive};
use tokio::net::{TcpListener, TcpStream};

use super::{
    Address, Link, Listener, TCP_KEEPALIVE_RETRIES, Transport, TransportConfig, context,
    wrong_scheme,
};

/// Links over TCP. Stateless apart from the frame limit and socket options; cheap to create.
#[derive(Debug, Clone)]
pub struct TcpTransport {
    opts: TcpOptions,
}

/// What is set on every stream, from [`TransportConfig`].
#[derive(Debug, Clone, Copy)]
struct TcpOptions {
    max_frame: usize,
    user_timeout: Option<Duration>,
    keepalive: Option<Duration>,
}

impl TcpTransport {
    /// A TCP transport with `cfg`'s frame limit, user timeout and keepalive.
    pub fn new(cfg: &TransportConfig) -> Self {
        Self {
            opts: TcpOptions {
                max_frame: cfg.max_frame,
                user_timeout: cfg.tcp_user_timeout,
                keepalive: cfg.tcp_keepalive,
            },
        }
    }
}

/// Kernel buffer per direction of a link (`SO_RCVBUF`, `SO_SNDBUF`).
const LINK_SOCKET_BUFFER: usize = 64 << 10;

/// Unsent bytes the kernel keeps queued before the writer waits (`TCP_NOTSENT_LOWAT`).
const LINK_NOTSENT_LOWAT: u32 = 16 << 10;

/// Sets `TCP_NODELAY`, bounded buffers, `TCP_USER_TIMEOUT` and keepalive on a connected
/// stream.
fn tune(stream: &TcpStream, opts: &TcpOptions) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let sock = SockRef::from(stream);
    if let Some(t) = opts.user_timeout {
        sock.set_tcp_user_timeout(Some(t))?;
    }
    // Bounded socket buffers: what a link holds in the kernel is what a reply may have to
    // wait behind when output floods the same link (autotuning grows them to megabytes).
    // The writer's own queue puts control first; the kernel cannot.
    sock.set_recv_buffer_size(LINK_SOCKET_BUFFER)?;
    sock.set_send_buffer_size(LINK_SOCKET_BUFFER)?;
    sock.set_tcp_notsent_lowat(LINK_NOTSENT_LOWAT)?;
    if let Some(idle) = opts.keepalive {
        let ka = TcpKeepalive::new()
            .with_time(idle)
            .with_interval(idle)
            .with_retries(TCP_KEEPALIVE_RETRIES);
        sock.set_tcp_keepalive(&ka)?;
    }
    Ok(())
}

/// Tunes and frames the stream.
fn link(stream: TcpStream, peer: String, opts: &TcpOptions) -> io::Result<Link> {
    tune(&stream, opts).map_err(|e| {
        context(
            e,
            &peer,
            format!("setting socket options on the link to {peer}"),
        )
    })?;
    let (r, w) = stream.into_split();
    Ok(Link::new(Box::new(r), Box::new(w), peer, opts.max_frame))
}

impl Transport for TcpTransport {
    fn connect(&self, addr: &Address) -> BoxFuture<'_, io::Result<Link>> {
        let addr = addr.clone();
        Box::pin(async move {
            let Address::Tcp(hp) = &addr else {
                return Err(wrong_scheme("tcp", &addr));
            };
            let stream = TcpStream::connect(hp.as_str())
                .await
                .map_err(|e| context(e, &addr, format!("connecting to {addr}")))?;
            let peer = match stream.peer_addr() {
                Ok(sa) => format!("tcp://{sa}"),
                Err(_) => addr.to_string(),
            };
            link(stream, peer, &self.opts)
        })
    }

    fn bind(&self, addr: &Address) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        let addr = addr.clone();
        Box::pin(async move {
            let Address::Tcp(hp) = &addr else {
                return Err(wrong_scheme("tcp", &addr));
            };
            let listener = TcpListener::bind(hp.as_str())
                .await
                .map_err(|e| context(e, &addr, format!("binding {addr}")))?;
            let local = listener
                .local_addr()
                .map_err(|e| context(e, &addr, format!("reading the bound address of {addr}")))?;
            Ok(Box::new(TcpAcceptor {
                listener,
                local: Address::Tcp(local.to_string()),
                opts: self.opts,
            }) as Box<dyn Listener>)
        })
    }
}

/// A bound TCP listener.
struct TcpAcceptor {
    listener: TcpListener,
    local: Address,
    opts: TcpOptions,
}

impl Listener for TcpAcceptor {
    fn local_addr(&self) -> Address {
        self.local.clone()
    }

    fn accept(&mut self) -> BoxFuture<'_, io::Result<Link>> {
        Box::pin(async move {
            let (stream, peer) = self
                .listener
                .accept()
                .await
                .map_err(|e| context(e, &self.local, format!("accepting on {}", self.local)))?;
            link(stream, format!("tcp://{peer}"), &self.opts)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::Socket;

    /// A connected pair of streams, and a duplicate of the first's socket to read options
    /// back from after the stream itself has been handed to [`link`].
    async fn pair() -> (TcpStream, TcpStream, Socket) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = l.local_addr().unwrap();
        let (a, b) = tokio::join!(TcpStream::connect(at), l.accept());
        let a = a.unwrap();
        let probe = SockRef::from(&a).try_clone().unwrap();
        (a, b.unwrap().0, probe)
    }

    #[tokio::test]
    async fn links_carry_user_timeout_and_keepalive() {
        let cfg = TransportConfig {
            tcp_user_timeout: Some(Duration::from_millis(7500)),
            tcp_keepalive: Some(Duration::from_secs(3)),
            ..TransportConfig::default()
        };
        let t = TcpTransport::new(&cfg);
        let (a, _b, probe) = pair().await;
        let _link = link(a, "test".into(), &t.opts).unwrap();
        // getsockopt on the live socket the link now owns.
        assert_eq!(
            probe.tcp_user_timeout().unwrap(),
            Some(Duration::from_millis(7500))
        );
        assert!(probe.keepalive().unwrap());
        assert_eq!(probe.tcp_keepalive_time().unwrap(), Duration::from_secs(3));
        assert_eq!(
            probe.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(3)
        );
        assert_eq!(
            probe.tcp_keepalive_retries().unwrap(),
            TCP_KEEPALIVE_RETRIES
        );
        assert!(probe.tcp_nodelay().unwrap());
    }

    #[tokio::test]
    async fn defaults_are_on_and_none_leaves_the_system_values() {
        let d = TransportConfig::default();
        assert_eq!(
            d.tcp_user_timeout,
            Some(super::super::DEFAULT_TCP_USER_TIMEOUT)
        );
        assert_eq!(d.tcp_keepalive, Some(super::super::DEFAULT_TCP_KEEPALIVE));
        let (a, _b, probe) = pair().await;
        let _link = link(a, "test".into(), &TcpTransport::new(&d).opts).unwrap();
        assert_eq!(
            probe.tcp_user_timeout().unwrap(),
            Some(super::super::DEFAULT_TCP_USER_TIMEOUT)
        );
        assert!(probe.keepalive().unwrap());

        let off = TransportConfig {
            tcp_user_timeout: None,
            tcp_keepalive: None,
            ..TransportConfig::default()
        };
        let (a, _b, probe) = pair().await;
        let _link = link(a, "test".into(), &TcpTransport::new(&off).opts).unwrap();
        assert_eq!(probe.tcp_user_timeout().unwrap(), None);
        assert!(!probe.keepalive().unwrap());
    }

    /// This process's tcp socket whose local and remote ports are `(local, remote)`, found
    /// through /proc/self/fd, with its user timeout read by getsockopt.
    fn user_timeout_of(local: u16, remote: u16) -> Option<Option<Duration>> {
        use std::os::fd::BorrowedFd;
        for e in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
            let Ok(fd) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let is_socket = std::fs::read_link(e.path())
                .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"));
            if !is_socket {
                continue;
            }
            // SAFETY: the fd is open (listed just now) and only borrowed for getsockopt and
            // getsockname; nothing here closes it.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            let sock = SockRef::from(&fd);
            let ports = (
                sock.local_addr().ok().and_then(|a| a.as_socket()),
                sock.peer_addr().ok().and_then(|a| a.as_socket()),
            );
            if let (Some(l), Some(r)) = ports
                && l.port() == local
                && r.port() == remote
            {
                return sock.tcp_user_timeout().ok();
            }
        }
        None
    }

    #[tokio::test]
    async fn accepted_and_connected_links_are_both_tuned() {
        let cfg = TransportConfig {
            tcp_user_timeout: Some(Duration::from_millis(9100)),
            ..TransportConfig::default()
        };
        let t = TcpTransport::new(&cfg);
        let mut l = t.bind(&"tcp://127.0.0.1:0".parse().unwrap()).await.unwrap();
        let at = l.local_addr();
        let listen_port: u16 = at.target().rsplit_once(':').unwrap().1.parse().unwrap();
        let (c, a) = tokio::join!(t.connect(&at), l.accept());
        let (_c, a) = (c.unwrap(), a.unwrap());
        let connector_port: u16 = a.peer.rsplit_once(':').unwrap().1.parse().unwrap();
        let want = Some(Some(Duration::from_millis(9100)));
        assert_eq!(
            user_timeout_of(connector_port, listen_port),
            want,
            "connected side"
        );
        assert_eq!(
            user_timeout_of(listen_port, connector_port),
            want,
            "accepted side"
        );
    }
}
