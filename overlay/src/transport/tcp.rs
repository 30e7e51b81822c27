//! `tcp://host:port`: the default transport, plain TCP with `TCP_NODELAY` on every stream.
//! Each link is one stream split into owned halves; dropping the writer sends FIN.

use std::io;

use futures::future::BoxFuture;
use tokio::net::{TcpListener, TcpStream};

use super::{Address, Link, Listener, Transport, TransportConfig, context, wrong_scheme};

/// Links over TCP. Stateless apart from the frame limit; cheap to create.
#[derive(Debug, Clone)]
pub struct TcpTransport {
    max_frame: usize,
}

impl TcpTransport {
    /// A TCP transport with `cfg`'s frame limit.
    pub fn new(cfg: &TransportConfig) -> Self {
        Self {
            max_frame: cfg.max_frame,
        }
    }
}

/// Sets `TCP_NODELAY` and frames the stream.
fn link(stream: TcpStream, peer: String, max_frame: usize) -> io::Result<Link> {
    stream
        .set_nodelay(true)
        .map_err(|e| context(e, format!("setting TCP_NODELAY on the link to {peer}")))?;
    let (r, w) = stream.into_split();
    Ok(Link::new(Box::new(r), Box::new(w), peer, max_frame))
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
                .map_err(|e| context(e, format!("connecting to {addr}")))?;
            let peer = match stream.peer_addr() {
                Ok(sa) => format!("tcp://{sa}"),
                Err(_) => addr.to_string(),
            };
            link(stream, peer, self.max_frame)
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
                .map_err(|e| context(e, format!("binding {addr}")))?;
            let local = listener
                .local_addr()
                .map_err(|e| context(e, format!("reading the bound address of {addr}")))?;
            Ok(Box::new(TcpAcceptor {
                listener,
                local: Address::Tcp(local.to_string()),
                max_frame: self.max_frame,
            }) as Box<dyn Listener>)
        })
    }
}

/// A bound TCP listener.
struct TcpAcceptor {
    listener: TcpListener,
    local: Address,
    max_frame: usize,
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
                .map_err(|e| context(e, format!("accepting on {}", self.local)))?;
            link(stream, format!("tcp://{peer}"), self.max_frame)
        })
    }
}
