//! Transports: framed, bidirectional links between overlay nodes behind one [`Transport`] trait.
//! The scheme of an [`Address`] picks the implementation: `tcp://` (default), `quic://`, `mem://`.
//!
//! Every transport hands out a [`Link`]: a [`FramedRead`] and a [`FramedWrite`] of
//! [`Message`](sdm_proto::Message)s with the session's maximum frame size. Dropping a link (or
//! only its writer) ends the peer's reader once the data already written has been delivered.
//!
//! Liveness: tcp links set `TCP_USER_TIMEOUT` and TCP keepalive ([`TransportConfig`]), so a
//! peer that vanishes without a FIN (power loss, cut cable) ends the link within a bounded
//! time; quic links have their own idle timeout and keepalive. A [`DelayTransport`] adds a
//! one-way delay to every link, for tests and benchmarks of deep trees.

mod delay;
mod mem;
mod ports;
#[cfg(feature = "quic")]
mod quic;
mod tcp;

use std::fmt;
use std::io;
use std::str::FromStr;
use std::time::Duration;

use futures::future::BoxFuture;
use sdm_proto::{DEFAULT_MAX_FRAME, FrameCodec};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{FramedRead, FramedWrite};

pub use delay::DelayTransport;
pub use mem::MemTransport;
pub use ports::{PortRange, PortRangeError, bind_in_range};
#[cfg(feature = "quic")]
pub use quic::{QUIC_IDLE_TIMEOUT, QUIC_KEEP_ALIVE, QuicTransport, SessionTls, TlsError};
pub use tcp::TcpTransport;

/// Where a node listens or connects, with the transport chosen by the scheme.
///
/// Text forms: `tcp://host:port`, `quic://host:port`, `mem://name`; text without a scheme is
/// TCP. IPv6 hosts go in brackets: `tcp://[::1]:5000`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// TCP; the string is `host:port`.
    Tcp(String),
    /// QUIC over UDP; the string is `host:port`.
    Quic(String),
    /// In-process; the string is a name (empty or `auto` binds a fresh unique name).
    Mem(String),
}

impl Address {
    /// The scheme without `://`: `"tcp"`, `"quic"` or `"mem"`.
    pub fn scheme(&self) -> &str {
        match self {
            Address::Tcp(_) => "tcp",
            Address::Quic(_) => "quic",
            Address::Mem(_) => "mem",
        }
    }

    /// The part after `scheme://`: `host:port` or a mem name.
    pub fn target(&self) -> &str {
        match self {
            Address::Tcp(s) | Address::Quic(s) | Address::Mem(s) => s,
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme(), self.target())
    }
}

/// The forms [`Address::from_str`] accepts, quoted in its errors.
const EXPECTED_FORMS: &str = "tcp://host:port, quic://host:port or mem://name";

/// Why a string is not an [`Address`]; the message names the text and the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} in '{text}': expected {EXPECTED_FORMS}")]
pub struct AddressError {
    text: String,
    reason: String,
}

impl AddressError {
    fn new(text: &str, reason: impl Into<String>) -> Self {
        Self {
            text: text.to_owned(),
            reason: reason.into(),
        }
    }

    /// The text that failed to parse.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl From<AddressError> for io::Error {
    fn from(e: AddressError) -> Self {
        io::Error::new(io::ErrorKind::InvalidInput, e)
    }
}

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(text: &str) -> Result<Self, AddressError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(AddressError::new(text, "empty address"));
        }
        let (scheme, rest) = match trimmed.split_once("://") {
            Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
            None => ("tcp".to_owned(), trimmed),
        };
        match scheme.as_str() {
            "tcp" => check_host_port(text, rest).map(|()| Address::Tcp(rest.to_owned())),
            "quic" => check_host_port(text, rest).map(|()| Address::Quic(rest.to_owned())),
            "mem" => {
                if rest.chars().any(|c| c.is_whitespace() || c == '/') {
                    Err(AddressError::new(
                        text,
                        format!("mem name '{rest}' contains whitespace or '/'"),
                    ))
                } else {
                    Ok(Address::Mem(rest.to_owned()))
                }
            }
            "" => Err(AddressError::new(text, "missing scheme before '://'")),
            other => Err(AddressError::new(text, format!("unknown scheme '{other}'"))),
        }
    }
}

/// Checks `host:port`: a non-empty host (IPv6 in brackets) and a decimal port below 65536.
fn check_host_port(text: &str, hp: &str) -> Result<(), AddressError> {
    let Some((host, port)) = hp.rsplit_once(':') else {
        return Err(AddressError::new(text, format!("missing port in '{hp}'")));
    };
    if host.is_empty() {
        return Err(AddressError::new(text, format!("missing host in '{hp}'")));
    }
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err()
    {
        return Err(AddressError::new(
            text,
            format!("port '{port}' is not a number from 0 to 65535"),
        ));
    }
    if let Some(inner) = host.strip_prefix('[') {
        let ok = inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
        if !ok {
            return Err(AddressError::new(
                text,
                format!("'{host}' is not a bracketed IPv6 address"),
            ));
        }
    } else if host.contains(':') {
        return Err(AddressError::new(
            text,
            format!("IPv6 host '{host}' must be written in brackets, as [{host}]"),
        ));
    } else if host
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '/' | '[' | ']' | '@'))
    {
        return Err(AddressError::new(
            text,
            format!("host '{host}' contains a character not allowed in a host name"),
        ));
    }
    Ok(())
}

/// A boxed byte reader: the read half of any transport's stream.
pub type BoxReader = Box<dyn AsyncRead + Send + Unpin>;
/// A boxed byte writer: the write half of any transport's stream.
pub type BoxWriter = Box<dyn AsyncWrite + Send + Unpin>;

/// One established connection, framed: a stream of [`Message`](sdm_proto::Message)s each way.
///
/// The reader yields `None` (or an error) once the peer drops its link or its process dies.
/// The halves may be moved to different tasks.
pub struct Link {
    /// Frames from the peer.
    pub reader: FramedRead<BoxReader, FrameCodec>,
    /// Frames to the peer; `send` flushes, `feed` batches.
    pub writer: FramedWrite<BoxWriter, FrameCodec>,
    /// The peer, human-readable (e.g. `tcp://10.0.0.7:40212`), for logs and errors.
    pub peer: String,
}

impl Link {
    /// Frames a reader and a writer with codecs refusing frames above `max_frame` bytes.
    pub fn new(
        reader: BoxReader,
        writer: BoxWriter,
        peer: impl Into<String>,
        max_frame: usize,
    ) -> Self {
        Self {
            reader: FramedRead::new(reader, FrameCodec::new(max_frame)),
            writer: FramedWrite::new(writer, FrameCodec::new(max_frame)),
            peer: peer.into(),
        }
    }
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

/// A bound endpoint that yields one [`Link`] per incoming connection.
///
/// Dropping the listener stops accepting; links already accepted stay up.
pub trait Listener: Send {
    /// The address actually bound: a real port for `:0`, a real name for `mem://auto`.
    fn local_addr(&self) -> Address;

    /// Waits for the next connection. Cancel-safe: dropping the future loses no connection.
    fn accept(&mut self) -> BoxFuture<'_, io::Result<Link>>;
}

/// Opens and accepts [`Link`]s of one scheme. Pick one with [`transport_for`].
pub trait Transport: Send + Sync + fmt::Debug {
    /// Connects to a listener at `addr`.
    fn connect(&self, addr: &Address) -> BoxFuture<'_, io::Result<Link>>;

    /// Binds a listener at `addr` (port 0 or `mem://auto` picks a free one).
    fn bind(&self, addr: &Address) -> BoxFuture<'_, io::Result<Box<dyn Listener>>>;
}

/// Default [`TransportConfig::tcp_user_timeout`]: written data unacknowledged this long
/// ends a tcp link. Linux also counts time spent at a zero window, which is what
/// backpressure looks like (a consumer slower than a flood of output), so this is far
/// longer than any pause a slow console causes; silent peers are found by keepalives.
pub const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(600);

/// Default [`TransportConfig::tcp_keepalive`]: idle time before the first keepalive probe,
/// and between probes.
pub const DEFAULT_TCP_KEEPALIVE: Duration = Duration::from_secs(5);

/// Keepalive probes a silent tcp peer may miss before its link ends.
pub const TCP_KEEPALIVE_RETRIES: u32 = 3;

/// What every transport of a session shares.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// Largest frame accepted or sent, in bytes (default 64 MiB).
    pub max_frame: usize,
    /// The session certificate: required by `quic://`, ignored by the others.
    #[cfg(feature = "quic")]
    pub tls: Option<SessionTls>,
    /// tcp: `TCP_USER_TIMEOUT`, how long written data may stay unacknowledged before the
    /// kernel ends the link (default [`DEFAULT_TCP_USER_TIMEOUT`]; `None` keeps the system's,
    /// which is many minutes). It also bounds how long failed keepalives take to end a link.
    pub tcp_user_timeout: Option<Duration>,
    /// tcp: keepalive probes after this much idle time, then every this much, ending the
    /// link after [`TCP_KEEPALIVE_RETRIES`] unanswered ones (default
    /// [`DEFAULT_TCP_KEEPALIVE`]; `None` turns keepalive off). A silent peer is detected
    /// within about `keepalive × (1 + retries)`, or the user timeout if it is shorter.
    pub tcp_keepalive: Option<Duration>,
    /// One-way delay added to everything each link writes (default zero: none), for tests and
    /// benchmarks; see [`DelayTransport`].
    pub delay: Duration,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            max_frame: DEFAULT_MAX_FRAME,
            #[cfg(feature = "quic")]
            tls: None,
            tcp_user_timeout: Some(DEFAULT_TCP_USER_TIMEOUT),
            tcp_keepalive: Some(DEFAULT_TCP_KEEPALIVE),
            delay: Duration::ZERO,
        }
    }
}

/// Environment variable holding the session's TLS certificate and key (PEM, hex-encoded so
/// it fits on one line) for `quic://`: the front-end sets it for the daemons it starts.
pub const SESSION_TLS_ENV: &str = "SDM_SESSION_TLS";

/// Encodes the session certificate for [`SESSION_TLS_ENV`].
#[cfg(feature = "quic")]
pub fn tls_to_env(tls: &SessionTls) -> String {
    crate::auth::hex_encode(tls.to_pem().as_bytes())
}

impl TransportConfig {
    /// The default configuration with the session certificate of [`SESSION_TLS_ENV`], if
    /// the variable is set (built without the `quic` feature, the variable is ignored: no
    /// `quic://` link can be made anyway). The error says what is wrong with the variable.
    pub fn from_env() -> io::Result<Self> {
        #[cfg_attr(not(feature = "quic"), allow(unused_mut))]
        let mut cfg = Self::default();
        #[cfg(feature = "quic")]
        if let Ok(hex) = std::env::var(SESSION_TLS_ENV) {
            let bad = |what: String| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{SESSION_TLS_ENV}: {what}"),
                )
            };
            let pem = crate::auth::hex_decode(&hex)
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| bad("not hex-encoded PEM".into()))?;
            cfg.tls = Some(SessionTls::from_pem(&pem).map_err(|e| bad(e.to_string()))?);
        }
        Ok(cfg)
    }
}

/// The transport for `addr`'s scheme. `quic://` fails unless `cfg.tls` holds the session
/// certificate (the server presents it, clients pin its fingerprint). A non-zero
/// `cfg.delay` wraps it in a [`DelayTransport`].
pub fn transport_for(addr: &Address, cfg: &TransportConfig) -> io::Result<Box<dyn Transport>> {
    let t: Box<dyn Transport> = match addr {
        Address::Tcp(_) => Box::new(TcpTransport::new(cfg)),
        #[cfg(feature = "quic")]
        Address::Quic(_) => Box::new(
            QuicTransport::new(cfg).map_err(|e| context(e, addr, format!("cannot use {addr}")))?,
        ),
        #[cfg(not(feature = "quic"))]
        Address::Quic(_) => {
            return Err(failure(
                io::ErrorKind::Unsupported,
                addr,
                format!("cannot use {addr}: sdm-overlay was built without the quic feature"),
            ));
        }
        Address::Mem(_) => Box::new(MemTransport::new(cfg)),
    };
    Ok(if cfg.delay.is_zero() {
        t
    } else {
        Box::new(DelayTransport::new(t, cfg.delay))
    })
}

/// A transport failure, carried inside the `io::Error` a [`Transport`] returns: what was
/// being done and on which address (the `io::Error`'s kind says what sort of failure it
/// was). Callers that want the address ask [`TransportError::of`] instead of reading text.
#[derive(Debug)]
pub struct TransportError {
    address: String,
    what: String,
    cause: Option<io::Error>,
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)?;
        match &self.cause {
            Some(c) => write!(f, ": {c}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for TransportError {}

impl TransportError {
    /// The transport failure `e` carries, if it is one.
    pub fn of(e: &io::Error) -> Option<&TransportError> {
        e.get_ref()?.downcast_ref()
    }

    /// The address involved (connected to, bound, accepted on, or the peer's).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// What was being done, e.g. `connecting to tcp://10.0.0.7:7000`.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The error of the operating system or library underneath, if any.
    pub fn cause(&self) -> Option<&io::Error> {
        self.cause.as_ref()
    }
}

/// `err` with the same kind, saying what was being done on `address`.
pub(crate) fn context(
    err: io::Error,
    address: impl fmt::Display,
    what: impl fmt::Display,
) -> io::Error {
    let kind = err.kind();
    let inner = TransportError {
        address: address.to_string(),
        what: what.to_string(),
        cause: Some(err),
    };
    io::Error::new(kind, inner)
}

/// A failure of kind `kind` on `address`, `what` saying what happened.
pub(crate) fn failure(
    kind: io::ErrorKind,
    address: impl fmt::Display,
    what: impl fmt::Display,
) -> io::Error {
    let inner = TransportError {
        address: address.to_string(),
        what: what.to_string(),
        cause: None,
    };
    io::Error::new(kind, inner)
}

/// The error a transport returns for an address of another scheme.
pub(crate) fn wrong_scheme(transport: &str, addr: &Address) -> io::Error {
    failure(
        io::ErrorKind::InvalidInput,
        addr,
        format!("the {transport} transport cannot use {addr}; use transport_for() to pick one"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for (text, want, shown) in [
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
            ("TCP://h:1", Address::Tcp("h:1".into()), "tcp://h:1"),
            (
                "quic://[::1]:0",
                Address::Quic("[::1]:0".into()),
                "quic://[::1]:0",
            ),
            (
                "mem://node-3",
                Address::Mem("node-3".into()),
                "mem://node-3",
            ),
            ("mem://", Address::Mem(String::new()), "mem://"),
        ] {
            let got: Address = text.parse().unwrap();
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string(), shown);
            assert_eq!(shown.parse::<Address>().unwrap(), want);
        }
    }

    #[test]
    fn bad_text_is_named_in_the_error() {
        for bad in [
            "",
            "udp://x:1",
            "://x:1",
            "tcp://x",
            "tcp://:1",
            "tcp://x:99999",
            "tcp://x:-1",
            "quic://::1:5",
            "quic://[zz]:5",
            "tcp://a/b:1",
            "mem://a b",
        ] {
            let e = bad.parse::<Address>().unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(&format!("'{bad}'")), "{msg}");
            assert!(msg.contains("tcp://host:port"), "{msg}");
            assert_eq!(e.text(), bad);
        }
        let e = "udp://x:1".parse::<Address>().unwrap_err().to_string();
        assert!(e.starts_with("unknown scheme 'udp' in 'udp://x:1'"), "{e}");
    }
}
