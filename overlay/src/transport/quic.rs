//! `quic://host:port`: links over QUIC (quinn, rustls on ring, TLS 1.3 only, ALPN `sdm/1`).
//! The server shows a per-session self-signed certificate; clients pin its SHA-256 fingerprint.
//!
//! One link is one QUIC connection carrying one bidirectional stream. The client opens the
//! stream and writes [`PREAMBLE`] (QUIC announces a stream only once data flows on it); the
//! listener checks it before handing out the link. Handshakes run in background tasks, so a
//! slow or hostile client never holds up `accept`.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use quinn::{ConnectionError, Endpoint, IdleTimeout, VarInt};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Address, Link, Listener, Transport, TransportConfig, context, failure, wrong_scheme};
use crate::logging::Refusals;

/// The ALPN protocol both ends insist on.
const ALPN: &[u8] = b"sdm/1";
/// The TLS server name clients ask for; the pin, not the name, authenticates the server.
const SERVER_NAME: &str = "sdm";
/// The first bytes a client writes on its stream; anything else is refused.
const PREAMBLE: &[u8; 4] = b"SDM1";
/// Application close code for a connection refused during set-up.
const REFUSED: u32 = 1;

const IDLE_TIMEOUT_MS: u32 = 10_000;
/// A QUIC link whose peer sends nothing (not even keep-alives) for this long is dead.
pub const QUIC_IDLE_TIMEOUT: Duration = Duration::from_millis(IDLE_TIMEOUT_MS as u64);
/// Keep-alive interval on QUIC links, well under [`QUIC_IDLE_TIMEOUT`].
pub const QUIC_KEEP_ALIVE: Duration = Duration::from_secs(2);
/// Longest wait for a handshake plus preamble on the listening side.
const HANDSHAKE_TIMEOUT: Duration = QUIC_IDLE_TIMEOUT;
/// After a writer is dropped, how long its connection stays up to deliver what was written.
const LINGER: Duration = Duration::from_secs(5);
/// Established links waiting for `accept`.
const BACKLOG: usize = 64;

/// Why a session certificate could not be made, loaded or turned into a TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen could not make the key or the certificate.
    #[error("generating the session certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The PEM text is not exactly one certificate and one private key.
    #[error("reading the session certificate PEM: {what}")]
    Pem {
        /// What was wrong.
        what: String,
        /// The PEM parser's error, when it refused a block.
        #[source]
        source: Option<rustls::pki_types::pem::Error>,
    },
    /// rustls refused the certificate, the key or the protocol settings.
    #[error("building the TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// quinn refused the TLS configuration.
    #[error("building the QUIC configuration: {0}")]
    Quic(#[source] quinn::crypto::rustls::NoInitialCipherSuite),
}

impl TlsError {
    fn pem(what: &str) -> Self {
        Self::Pem {
            what: what.to_owned(),
            source: None,
        }
    }
}

impl From<TlsError> for io::Error {
    fn from(e: TlsError) -> Self {
        io::Error::new(io::ErrorKind::InvalidInput, e)
    }
}

/// A session's TLS identity: a self-signed certificate, its private key and the certificate's
/// SHA-256 fingerprint. Servers present it; clients accept exactly this certificate.
///
/// The front-end makes one per session with [`SessionTls::generate`] and hands
/// [`SessionTls::to_pem`] to its daemons, which load it with [`SessionTls::from_pem`].
#[derive(Clone)]
pub struct SessionTls {
    cert: CertificateDer<'static>,
    key: Arc<PrivateKeyDer<'static>>,
    fingerprint: [u8; 32],
    pem: String,
}

impl SessionTls {
    /// A fresh ECDSA P-256 key and a self-signed certificate for `sdm`, `localhost` and
    /// `127.0.0.1`.
    ///
    /// # Panics
    /// If the system random number generator fails; see [`SessionTls::try_generate`].
    pub fn generate() -> Self {
        Self::try_generate().expect("the system random number generator failed")
    }

    /// [`SessionTls::generate`], returning rcgen's error instead of panicking.
    pub fn try_generate() -> Result<Self, TlsError> {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(vec![
            "sdm".to_owned(),
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ])?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "sdm session");
        let cert = params.self_signed(&key)?;
        let pem = format!("{}{}", cert.pem(), key.serialize_pem());
        let key_der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
        Ok(Self::assemble(cert.der().clone(), key_der, pem))
    }

    /// Loads the text written by [`SessionTls::to_pem`]: one `CERTIFICATE` block and one
    /// private key block, in any order. The key must belong to the certificate.
    pub fn from_pem(pem: &str) -> Result<Self, TlsError> {
        let mut certs = CertificateDer::pem_slice_iter(pem.as_bytes());
        let cert = match certs.next() {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                return Err(TlsError::Pem {
                    what: format!("bad CERTIFICATE block: {e}"),
                    source: Some(e),
                });
            }
            None => return Err(TlsError::pem("no CERTIFICATE block")),
        };
        if certs.next().is_some() {
            return Err(TlsError::pem(
                "more than one CERTIFICATE block (a session has one self-signed certificate)",
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| TlsError::Pem {
            what: format!("no usable PRIVATE KEY block: {e}"),
            source: Some(e),
        })?;
        let tls = Self::assemble(cert, key, pem.trim().to_owned() + "\n");
        // rustls checks that the key is usable and matches the certificate.
        tls.server_config()?;
        Ok(tls)
    }

    fn assemble(cert: CertificateDer<'static>, key: PrivateKeyDer<'static>, pem: String) -> Self {
        let fingerprint = sha256(&cert);
        Self {
            cert,
            key: Arc::new(key),
            fingerprint,
            pem,
        }
    }

    /// SHA-256 of the certificate (DER): what clients pin.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }

    /// The certificate and the private key as PEM, in one string. It holds the key: pass it
    /// to daemons through the environment or a private file, never on a command line.
    pub fn to_pem(&self) -> String {
        self.pem.clone()
    }

    /// TLS 1.3 server configuration presenting this certificate, with ALPN `sdm/1`.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], self.key.clone_key())?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        Ok(cfg)
    }

    /// TLS 1.3 client configuration, with ALPN `sdm/1`, that accepts only a server presenting
    /// exactly this certificate (same SHA-256 fingerprint) and refuses every other.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let provider = provider();
        let verifier = Arc::new(PinnedCert {
            fingerprint: self.fingerprint,
            algorithms: provider.signature_verification_algorithms,
        });
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        Ok(cfg)
    }
}

impl fmt::Debug for SessionTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionTls")
            .field("fingerprint", &crate::auth::hex_encode(&self.fingerprint))
            .finish_non_exhaustive()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Accepts exactly the server certificate with the session's fingerprint.
#[derive(Debug)]
struct PinnedCert {
    fingerprint: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

/// The server showed a certificate other than the session's.
#[derive(Debug, thiserror::Error)]
#[error(
    "the server certificate (SHA-256 {got}) is not this session's certificate (SHA-256 {want}): \
     the server belongs to another session or is an impostor"
)]
struct PinMismatch {
    got: String,
    want: String,
}

impl ServerCertVerifier for PinnedCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = sha256(end_entity);
        if got == self.fingerprint {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                OtherError(Arc::new(PinMismatch {
                    got: crate::auth::hex_encode(&got),
                    want: crate::auth::hex_encode(&self.fingerprint),
                })),
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General(
            "sdm links speak TLS 1.3 only".into(),
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// quinn transport parameters: idle timeout, keep-alive, and the one stream a link uses.
fn quinn_transport(server: bool) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(Some(IdleTimeout::from(VarInt::from_u32(IDLE_TIMEOUT_MS))))
        .keep_alive_interval(Some(QUIC_KEEP_ALIVE))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        // Only the client opens a stream, and only one.
        .max_concurrent_bidi_streams(VarInt::from_u32(u32::from(server)));
    Arc::new(t)
}

/// Links over QUIC. Holds the session's client and server configurations, and one client
/// endpoint per address family, made on first use and shared by all its connections.
pub struct QuicTransport {
    max_frame: usize,
    fingerprint: [u8; 32],
    client: quinn::ClientConfig,
    server: quinn::ServerConfig,
    /// Client endpoints: `[IPv4, IPv6]`.
    endpoints: Mutex<[Option<Endpoint>; 2]>,
}

impl QuicTransport {
    /// A QUIC transport for the session certificate in `cfg.tls`; an error if there is none.
    pub fn new(cfg: &TransportConfig) -> io::Result<Self> {
        let tls = cfg.tls.as_ref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "quic:// needs the session certificate: set TransportConfig::tls \
                 (SessionTls::generate() in the front-end, SessionTls::from_pem() in daemons)",
            )
        })?;
        let client_crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls.client_config()?)
            .map_err(TlsError::Quic)?;
        let mut client = quinn::ClientConfig::new(Arc::new(client_crypto));
        client.transport_config(quinn_transport(false));
        let server_crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls.server_config()?)
            .map_err(TlsError::Quic)?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(server_crypto));
        server.transport_config(quinn_transport(true));
        Ok(Self {
            max_frame: cfg.max_frame,
            fingerprint: tls.fingerprint,
            client,
            server,
            endpoints: Mutex::new([None, None]),
        })
    }

    /// The client endpoint for `target`'s address family, made on first use.
    fn client_endpoint(&self, target: SocketAddr) -> io::Result<Endpoint> {
        let (slot, bind): (usize, SocketAddr) = if target.is_ipv4() {
            (0, (std::net::Ipv4Addr::UNSPECIFIED, 0).into())
        } else {
            (1, (std::net::Ipv6Addr::UNSPECIFIED, 0).into())
        };
        let mut endpoints = self
            .endpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(ep) = &endpoints[slot] {
            return Ok(ep.clone());
        }
        let ep = Endpoint::client(bind)
            .map_err(|e| context(e, bind, format!("opening a QUIC client endpoint on {bind}")))?;
        endpoints[slot] = Some(ep.clone());
        Ok(ep)
    }
}

impl fmt::Debug for QuicTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuicTransport")
            .field("max_frame", &self.max_frame)
            .field("fingerprint", &crate::auth::hex_encode(&self.fingerprint))
            .finish_non_exhaustive()
    }
}

/// The first socket address `host:port` resolves to.
async fn resolve(addr: &Address, hp: &str) -> io::Result<SocketAddr> {
    tokio::net::lookup_host(hp)
        .await
        .map_err(|e| context(e, addr, format!("resolving {addr}")))?
        .next()
        .ok_or_else(|| {
            failure(
                io::ErrorKind::NotFound,
                addr,
                format!("resolving {addr}: the host has no address"),
            )
        })
}

fn connection_error(
    e: ConnectionError,
    address: impl fmt::Display,
    what: impl fmt::Display,
) -> io::Error {
    let kind = match e {
        ConnectionError::TimedOut => io::ErrorKind::TimedOut,
        ConnectionError::LocallyClosed => io::ErrorKind::NotConnected,
        _ => io::ErrorKind::ConnectionRefused,
    };
    failure(kind, address, format!("{what}: {e}"))
}

impl Transport for QuicTransport {
    fn connect(&self, addr: &Address) -> BoxFuture<'_, io::Result<Link>> {
        let addr = addr.clone();
        Box::pin(async move {
            let Address::Quic(hp) = &addr else {
                return Err(wrong_scheme("quic", &addr));
            };
            let target = resolve(&addr, hp).await?;
            let endpoint = self.client_endpoint(target)?;
            let conn = endpoint
                .connect_with(self.client.clone(), target, SERVER_NAME)
                .map_err(|e| {
                    failure(
                        io::ErrorKind::InvalidInput,
                        &addr,
                        format!("connecting to {addr}: {e}"),
                    )
                })?
                .await
                .map_err(|e| connection_error(e, &addr, format!("connecting to {addr}")))?;
            let (mut send, recv) = conn
                .open_bi()
                .await
                .map_err(|e| connection_error(e, &addr, format!("opening a stream to {addr}")))?;
            send.write_all(PREAMBLE)
                .await
                .map_err(|e| context(e.into(), &addr, format!("greeting {addr}")))?;
            Ok(quic_link(
                conn,
                endpoint,
                send,
                recv,
                addr.to_string(),
                self.max_frame,
            ))
        })
    }

    fn bind(&self, addr: &Address) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        let addr = addr.clone();
        Box::pin(async move {
            let Address::Quic(hp) = &addr else {
                return Err(wrong_scheme("quic", &addr));
            };
            let at = resolve(&addr, hp).await?;
            let endpoint = Endpoint::server(self.server.clone(), at)
                .map_err(|e| context(e, &addr, format!("binding {addr}")))?;
            let local = endpoint
                .local_addr()
                .map_err(|e| context(e, &addr, format!("reading the bound address of {addr}")))?;
            let local = Address::Quic(local.to_string());
            let (tx, rx) = mpsc::channel(BACKLOG);
            let task = tokio::spawn(accept_loop(
                endpoint.clone(),
                local.clone(),
                tx,
                self.max_frame,
            ));
            Ok(Box::new(QuicAcceptor {
                endpoint,
                local,
                links: rx,
                task,
            }) as Box<dyn Listener>)
        })
    }
}

/// Accepts connections until the listener goes away, each handshake in its own task.
async fn accept_loop(endpoint: Endpoint, local: Address, tx: mpsc::Sender<Link>, max_frame: usize) {
    let refusals = Arc::new(Refusals::new(local.to_string()));
    let reporting = refusals.keep_reporting();
    tokio::pin!(reporting);
    loop {
        let incoming = tokio::select! {
            () = &mut reporting => continue,
            () = tx.closed() => return,
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => incoming,
                None => return,
            },
        };
        let (endpoint, tx, refusals) = (endpoint.clone(), tx.clone(), refusals.clone());
        tokio::spawn(async move {
            let from = incoming.remote_address();
            let result =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, establish(incoming, endpoint, max_frame))
                    .await;
            match result {
                Ok(Ok(link)) => {
                    // If the listener is gone the link is dropped, which closes it.
                    let _ = tx.send(link).await;
                }
                Ok(Err(e)) => refusals.refused(&from, &format_args!("QUIC: {e}")),
                Err(_) => refusals.refused(
                    &from,
                    &format_args!("QUIC: no handshake and preamble within {HANDSHAKE_TIMEOUT:?}"),
                ),
            }
        });
    }
}

/// Completes the handshake, accepts the stream and checks the preamble.
async fn establish(
    incoming: quinn::Incoming,
    endpoint: Endpoint,
    max_frame: usize,
) -> io::Result<Link> {
    let from = incoming.remote_address();
    let conn = incoming.await.map_err(|e| {
        connection_error(
            e,
            format_args!("quic://{from}"),
            format!("handshake with quic://{from}"),
        )
    })?;
    let (send, mut recv) = conn.accept_bi().await.map_err(|e| {
        connection_error(
            e,
            format_args!("quic://{from}"),
            format!("waiting for a stream from quic://{from}"),
        )
    })?;
    let mut preamble = [0; PREAMBLE.len()];
    if let Err(e) = recv.read_exact(&mut preamble).await {
        conn.close(VarInt::from_u32(REFUSED), b"no preamble");
        return Err(failure(
            io::ErrorKind::InvalidData,
            format_args!("quic://{from}"),
            format!("reading the preamble from quic://{from}: {e}"),
        ));
    }
    if &preamble != PREAMBLE {
        conn.close(VarInt::from_u32(REFUSED), b"bad preamble");
        return Err(failure(
            io::ErrorKind::InvalidData,
            format_args!("quic://{from}"),
            format!(
                "quic://{from} sent {preamble:02x?} instead of the sdm preamble {:02x?}",
                PREAMBLE
            ),
        ));
    }
    Ok(quic_link(
        conn,
        endpoint,
        send,
        recv,
        format!("quic://{from}"),
        max_frame,
    ))
}

fn quic_link(
    conn: quinn::Connection,
    endpoint: Endpoint,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    peer: String,
    max_frame: usize,
) -> Link {
    let reader = QuicReader {
        recv,
        _conn: conn.clone(),
        _endpoint: endpoint.clone(),
    };
    let writer = QuicWriter {
        send: Some(send),
        conn,
        endpoint,
        closing: None,
    };
    Link::new(Box::new(reader), Box::new(writer), peer, max_frame)
}

/// The receiving half of a link's stream; keeps the connection and endpoint alive.
struct QuicReader {
    recv: quinn::RecvStream,
    _conn: quinn::Connection,
    _endpoint: Endpoint,
}

impl AsyncRead for QuicReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        AsyncRead::poll_read(Pin::new(&mut self.recv), cx, buf)
    }
}

/// The sending half of a link's stream; keeps the connection and endpoint alive. Dropping it
/// finishes the stream and keeps the connection up (at most [`LINGER`]) until the peer has
/// acknowledged everything written, so a final message is not lost to the connection close.
struct QuicWriter {
    send: Option<quinn::SendStream>,
    conn: quinn::Connection,
    endpoint: Endpoint,
    /// Once shut down: resolves when the peer has everything written (or after
    /// [`LINGER`]), so a caller that closes its link and then ends knows the last frame
    /// (a goodbye) went.
    closing: Option<BoxFuture<'static, ()>>,
}

impl QuicWriter {
    fn stream(&mut self) -> io::Result<&mut quinn::SendStream> {
        self.send.as_mut().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, "QUIC stream already closed")
        })
    }
}

impl AsyncWrite for QuicWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.stream() {
            Ok(s) => AsyncWrite::poll_write(Pin::new(s), cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.stream() {
            Ok(s) => AsyncWrite::poll_flush(Pin::new(s), cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.closing.is_none() {
            let s = self.stream()?;
            // Already finished or reset is fine.
            let _ = s.finish();
            let delivered = s.stopped();
            self.closing = Some(Box::pin(async move {
                let _ = tokio::time::timeout(LINGER, delivered).await;
            }));
        }
        let closing = self.closing.as_mut().expect("set above");
        closing.as_mut().poll(cx).map(Ok)
    }
}

impl Drop for QuicWriter {
    fn drop(&mut self) {
        let Some(mut send) = self.send.take() else {
            return;
        };
        // Already finished or reset is fine.
        let _ = send.finish();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let delivered = send.stopped();
        let (conn, endpoint) = (self.conn.clone(), self.endpoint.clone());
        runtime.spawn(async move {
            let _ = tokio::time::timeout(LINGER, delivered).await;
            drop((send, conn, endpoint));
        });
    }
}

/// The listening side: a quinn server endpoint and the links its handshake tasks produced.
struct QuicAcceptor {
    endpoint: Endpoint,
    local: Address,
    links: mpsc::Receiver<Link>,
    task: JoinHandle<()>,
}

impl Listener for QuicAcceptor {
    fn local_addr(&self) -> Address {
        self.local.clone()
    }

    fn accept(&mut self) -> BoxFuture<'_, io::Result<Link>> {
        Box::pin(async move {
            self.links.recv().await.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotConnected,
                    format!(
                        "accepting on {}: the QUIC endpoint has shut down",
                        self.local
                    ),
                )
            })
        })
    }
}

impl Drop for QuicAcceptor {
    fn drop(&mut self) {
        // Refuse new connections; links already accepted keep the endpoint alive.
        self.endpoint.set_server_config(None);
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_round_trips_and_keeps_the_fingerprint() {
        let a = SessionTls::generate();
        let b = SessionTls::from_pem(&a.to_pem()).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.to_pem(), b.to_pem());
        assert_ne!(a.fingerprint(), SessionTls::generate().fingerprint());
        assert!(!format!("{a:?}").contains("PRIVATE"));
    }

    #[test]
    fn pem_with_a_foreign_key_or_missing_parts_is_refused() {
        let a = SessionTls::generate().to_pem();
        let b = SessionTls::generate().to_pem();
        let cert_a = &a[..a.find("-----BEGIN PRIVATE KEY").unwrap()];
        let key_b = &b[b.find("-----BEGIN PRIVATE KEY").unwrap()..];
        assert!(SessionTls::from_pem(&format!("{cert_a}{key_b}")).is_err());
        // The PEM parser's error is the source.
        let e = SessionTls::from_pem(cert_a).unwrap_err();
        let source = std::error::Error::source(&e);
        assert!(
            source.is_some_and(|s| s.is::<rustls::pki_types::pem::Error>()),
            "{e:?}"
        );
        assert!(SessionTls::from_pem(key_b).is_err());
        assert!(SessionTls::from_pem("").is_err());
    }

    #[test]
    fn quic_without_a_certificate_is_an_error() {
        let e = QuicTransport::new(&TransportConfig::default()).unwrap_err();
        assert!(e.to_string().contains("session certificate"), "{e}");
    }

    #[tokio::test]
    async fn a_stream_without_the_preamble_is_refused() {
        let tls = SessionTls::generate();
        let cfg = TransportConfig {
            tls: Some(tls.clone()),
            ..Default::default()
        };
        let t = QuicTransport::new(&cfg).unwrap();
        let mut l = t
            .bind(&"quic://127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let Address::Quic(hp) = l.local_addr() else {
            unreachable!()
        };
        let target: SocketAddr = hp.parse().unwrap();
        let ep = t.client_endpoint(target).unwrap();
        let conn = ep
            .connect_with(t.client.clone(), target, SERVER_NAME)
            .unwrap()
            .await
            .unwrap();
        let (mut send, _recv) = conn.open_bi().await.unwrap();
        send.write_all(b"HTTP").await.unwrap();
        let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed())
            .await
            .unwrap();
        assert!(
            matches!(&closed, ConnectionError::ApplicationClosed(c) if c.error_code == VarInt::from_u32(REFUSED)),
            "{closed}"
        );
        // Nothing reached accept.
        assert!(
            tokio::time::timeout(Duration::from_millis(200), l.accept())
                .await
                .is_err()
        );
    }
}
