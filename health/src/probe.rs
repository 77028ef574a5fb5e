//! The probes themselves: every socket this crate opens is opened here, except those of
//! plain TCP connect checks run by the prober's loop (`crate::connect`). A target's VIP
//! probe goes through the [`VipProber`] the appliance supplies (see [`crate::vip`]).
//!
//! One async function per check kind turns a [`ProbeKey`] into an [`Outcome`] whose
//! failure names the cause. The caller ([`crate::tasks`]) bounds each probe with the
//! check's timeout, so the functions here simply wait; dropping the future closes its
//! sockets. TCP-based probes close with RST (zero linger) as HAProxy does: a prober that
//! left a TIME_WAIT socket per probe would pile up hundreds of thousands of them at ten
//! thousand probes a second.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};

use crate::check::{CheckKind, HttpCheck, HttpMethod, ProbeKey};
use crate::outcome::{Failure, Outcome, Pass};
use crate::vip::{ViaVip, VipFailure, VipProbe, VipProber, VipProtocol};

/// The most of a TCP/UDP reply searched for `expect`.
const MAX_REPLY: usize = 64 * 1024;
/// The largest HTTP response head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// The most of an HTTP body searched for `expect_body`.
pub(crate) const MAX_BODY: usize = 1024 * 1024;
/// Headers parsed in an HTTP response head.
const MAX_HEADERS: usize = 64;
/// How much earlier than the check's timeout a VIP probe gives up (at most a tenth of it).
const VIP_MARGIN: std::time::Duration = std::time::Duration::from_millis(50);

/// Shared state for probes: TLS client configurations and ICMP sockets, built once
/// and reused by every probe.
#[derive(Debug, Default)]
pub struct ProbeContext {
    vip: Option<Arc<dyn VipProber>>,
    tls_verify: OnceLock<Result<Arc<ClientConfig>, TlsSetupError>>,
    tls_insecure: OnceLock<Result<Arc<ClientConfig>, TlsSetupError>>,
    /// The same for HTTP/2 (ALPN h2, gRPC checks): verified, not verified.
    tls_h2: [OnceLock<Result<Arc<ClientConfig>, TlsSetupError>>; 2],
    icmp: Mutex<Vec<IcmpClient>>,
    icmp_seq: AtomicU16,
}

struct IcmpClient {
    v6: bool,
    source: Option<IpAddr>,
    client: surge_ping::Client,
}

impl std::fmt::Debug for IcmpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcmpClient")
            .field("v6", &self.v6)
            .field("source", &self.source)
            .finish()
    }
}

impl ProbeContext {
    /// A context with nothing built yet; TLS roots and ICMP sockets are made on first use.
    pub fn new() -> ProbeContext {
        ProbeContext::default()
    }

    /// This context, sending the VIP probes of DR and tunnel targets through `prober`.
    pub fn with_vip_prober(mut self, prober: Arc<dyn VipProber>) -> ProbeContext {
        self.vip = Some(prober);
        self
    }

    /// Runs one probe to completion, without a timeout (the caller bounds it).
    /// Must be called inside a tokio runtime (ICMP sockets spawn their receive task).
    ///
    /// A target with a VIP passes when both its check on the backend's address and the VIP
    /// probe pass; they run at once, so the VIP adds nothing to the time a probe takes. The
    /// check's failure is reported first: a backend that is down also fails for its VIP,
    /// and "connection refused" is the more useful word then.
    pub async fn probe(&self, key: &ProbeKey) -> Outcome {
        let Some(via) = key.via_vip else {
            return self.probe_backend(key).await;
        };
        let (app, vip) =
            Box::pin(async { tokio::join!(self.probe_backend(key), self.probe_vip(key, via)) })
                .await;
        let pass = app?;
        vip?;
        Ok(pass)
    }

    async fn probe_vip(&self, key: &ProbeKey, via: ViaVip) -> Result<(), Failure> {
        let Some(prober) = &self.vip else {
            return Err(VipFailure::Unavailable.into());
        };
        // Ends just before the caller's deadline, so a missing answer is reported as what
        // it means rather than as a bare timeout.
        let timeout = key
            .check
            .timeout
            .saturating_sub(VIP_MARGIN.min(key.check.timeout / 10));
        let udp = match (&key.check.kind, via.protocol) {
            (_, VipProtocol::Tcp) => None,
            (CheckKind::Udp { payload, expect }, VipProtocol::Udp) => Some((
                payload.as_bytes().to_vec(),
                expect.as_ref().map(|e| e.as_bytes().to_vec()),
            )),
            (_, VipProtocol::Udp) => Some((Vec::new(), None)),
        };
        let probe = VipProbe {
            backend: key.address,
            via,
            udp,
            timeout,
        };
        match tokio::time::timeout(timeout, prober.probe(probe)).await {
            Ok(r) => r.map_err(Failure::Vip),
            Err(_) => Err(VipFailure::NoAnswer(via.vip).into()),
        }
    }

    /// The check itself, on the backend's own address.
    async fn probe_backend(&self, key: &ProbeKey) -> Outcome {
        let addr = SocketAddr::new(key.address, key.port);
        let source = key.check.source;
        // The TLS, HTTP and ICMP futures are large (a TLS session alone is kilobytes);
        // boxing them keeps the future of the common TCP probe small, which is copied
        // into every task the prober spawns.
        match &key.check.kind {
            CheckKind::Tcp { send, expect } => {
                tcp(addr, source, send.as_deref(), expect.as_deref()).await
            }
            CheckKind::Udp { payload, expect } => {
                udp(addr, source, payload.as_bytes(), expect.as_deref()).await
            }
            CheckKind::Http(http) => Box::pin(plain_http(addr, source, http)).await,
            CheckKind::Https {
                http,
                verify_tls,
                server_name,
            } => {
                let config = self.tls_config(*verify_tls)?;
                let name = sni_name(server_name.as_deref(), http.host.as_deref(), key.address);
                let sni =
                    ServerName::try_from(name.clone()).map_err(|_| Failure::ServerName(name))?;
                Box::pin(https(addr, source, http, config, sni)).await
            }
            CheckKind::Icmp => Box::pin(self.icmp(key)).await,
            CheckKind::Agent { send } => {
                Box::pin(crate::agent::probe(addr, source, send.as_deref())).await
            }
            CheckKind::Grpc(g) => {
                let tls = match g.tls {
                    false => None,
                    true => {
                        let config = self.tls_h2_config(g.verify_tls)?;
                        let name = sni_name(g.server_name.as_deref(), None, key.address);
                        let sni = ServerName::try_from(name.clone())
                            .map_err(|_| Failure::ServerName(name))?;
                        Some((config, sni))
                    }
                };
                Box::pin(crate::grpc::probe(addr, source, g, tls)).await
            }
        }
    }

    fn tls_config(&self, verify: bool) -> Result<Arc<ClientConfig>, Failure> {
        let cell = if verify {
            &self.tls_verify
        } else {
            &self.tls_insecure
        };
        cell.get_or_init(|| build_tls(verify, b"http/1.1").map(Arc::new))
            .clone()
            .map_err(|e| Failure::Tls(e.to_string()))
    }

    fn tls_h2_config(&self, verify: bool) -> Result<Arc<ClientConfig>, Failure> {
        self.tls_h2[usize::from(verify)]
            .get_or_init(|| build_tls(verify, b"h2").map(Arc::new))
            .clone()
            .map_err(|e| Failure::Tls(e.to_string()))
    }

    async fn icmp(&self, key: &ProbeKey) -> Outcome {
        let client = self.icmp_client(key.address.is_ipv6(), key.check.source)?;
        // Distinct identifiers and sequence numbers keep concurrent echoes to one host
        // (two icmp checks with different settings) from claiming each other's replies.
        let seq = self.icmp_seq.fetch_add(1, Ordering::Relaxed);
        let ident = surge_ping::PingIdentifier(seq.rotate_left(8) ^ 0x5a5a);
        let mut pinger = client.pinger(key.address, ident).await;
        // The caller's deadline is the real bound; this only frees the waiter after it.
        pinger.timeout(
            key.check
                .timeout
                .saturating_add(std::time::Duration::from_secs(1)),
        );
        match pinger
            .ping(surge_ping::PingSequence(seq), &[0x5a; 16])
            .await
        {
            Ok((_, rtt)) => Ok(Pass::Echo(rtt)),
            Err(surge_ping::SurgeError::Timeout { .. }) => Err(Failure::Timeout),
            Err(surge_ping::SurgeError::IOError(e)) => Err(io_failure(e)),
            Err(e @ surge_ping::SurgeError::ClientDestroyed) => {
                // The shared socket's receive task is gone: open a fresh one next time.
                self.icmp
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|c| !(c.v6 == key.address.is_ipv6() && c.source == key.check.source));
                Err(Failure::Io(format!("icmp: {e}")))
            }
            Err(e) => Err(Failure::Io(format!("icmp: {e}"))),
        }
    }

    fn icmp_client(&self, v6: bool, source: Option<IpAddr>) -> Result<surge_ping::Client, Failure> {
        let mut clients = self.icmp.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.iter().find(|c| c.v6 == v6 && c.source == source) {
            return Ok(c.client.clone());
        }
        let mut config = surge_ping::Config::builder().kind(if v6 {
            surge_ping::ICMP::V6
        } else {
            surge_ping::ICMP::V4
        });
        if let Some(src) = source {
            config = config.bind(SocketAddr::new(src, 0));
        }
        // DGRAM ("ping") sockets first; surge-ping falls back to RAW, which root may open
        // even where net.ipv4.ping_group_range excludes it (the default in new namespaces).
        let client = surge_ping::Client::new(&config.build()).map_err(|e| match source {
            Some(src) => Failure::Bind(format!("{src} (icmp): {e}")),
            None => Failure::Io(format!("cannot open ICMP socket: {e}")),
        })?;
        clients.push(IcmpClient {
            v6,
            source,
            client: client.clone(),
        });
        Ok(client)
    }
}

/// Maps a socket error to the failure an operator recognises.
pub(crate) fn io_failure(e: io::Error) -> Failure {
    if crate::outcome::is_local(&e) {
        return Failure::Local(e.to_string());
    }
    match e.kind() {
        io::ErrorKind::ConnectionRefused => Failure::Refused,
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => Failure::Reset,
        io::ErrorKind::TimedOut => Failure::Timeout,
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            Failure::Unreachable(e.to_string())
        }
        _ => Failure::Io(e.to_string()),
    }
}

/// Connects from `source`; `nodelay` for probes that write (a plain connect check saves
/// the syscall).
pub(crate) async fn connect(
    addr: SocketAddr,
    source: Option<IpAddr>,
    nodelay: bool,
) -> Result<TcpStream, Failure> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(|e| {
        crate::outcome::local_or(e, |e| Failure::Io(format!("cannot create socket: {e}")))
    })?;
    if let Some(src) = source {
        socket
            .bind(SocketAddr::new(src, 0))
            .map_err(|e| Failure::Bind(format!("{src}: {e}")))?;
    }
    if nodelay {
        socket.set_nodelay(true).map_err(io_failure)?;
    }
    socket.set_zero_linger().map_err(io_failure)?;
    socket.connect(addr).await.map_err(io_failure)
}

async fn plain_http(addr: SocketAddr, source: Option<IpAddr>, http: &HttpCheck) -> Outcome {
    let stream = connect(addr, source, true).await?;
    let host = host_header(http, addr, 80);
    http_exchange(stream, http, &host).await
}

async fn https(
    addr: SocketAddr,
    source: Option<IpAddr>,
    http: &HttpCheck,
    config: Arc<ClientConfig>,
    sni: ServerName<'static>,
) -> Outcome {
    let stream = connect(addr, source, true).await?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(sni, stream)
        .await
        .map_err(tls_failure)?;
    let host = host_header(http, addr, 443);
    http_exchange(tls, http, &host).await
}

async fn tcp(
    addr: SocketAddr,
    source: Option<IpAddr>,
    send: Option<&str>,
    expect: Option<&str>,
) -> Outcome {
    let mut stream = connect(addr, source, send.is_some()).await?;
    if let Some(send) = send {
        stream
            .write_all(send.as_bytes())
            .await
            .map_err(io_failure)?;
    }
    if let Some(expect) = expect {
        let mut buf = Vec::new();
        read_until_found(&mut stream, &mut buf, expect.as_bytes()).await?;
    }
    Ok(Pass::Connected)
}

/// Reads until `buf` contains `needle`, failing on EOF or once `MAX_REPLY` bytes
/// arrived without it.
async fn read_until_found<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut Vec<u8>,
    needle: &[u8],
) -> Result<(), Failure> {
    let mut chunk = vec![0u8; 4096];
    loop {
        if contains(buf, needle) {
            return Ok(());
        }
        if buf.len() >= MAX_REPLY {
            return Err(Failure::ReplyMismatch(
                String::from_utf8_lossy(needle).into_owned(),
            ));
        }
        let n = s.read(&mut chunk).await.map_err(io_failure)?;
        if n == 0 {
            return Err(if buf.is_empty() {
                Failure::NoReply
            } else {
                Failure::ReplyMismatch(String::from_utf8_lossy(needle).into_owned())
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

async fn udp(
    addr: SocketAddr,
    source: Option<IpAddr>,
    payload: &[u8],
    expect: Option<&str>,
) -> Outcome {
    let local = match (source, addr) {
        (Some(src), _) => SocketAddr::new(src, 0),
        (None, SocketAddr::V4(_)) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        (None, SocketAddr::V6(_)) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    };
    let socket = UdpSocket::bind(local)
        .await
        .map_err(|e| Failure::Bind(format!("{}: {e}", local.ip())))?;
    // A connected socket is what turns an ICMP port unreachable into ECONNREFUSED.
    socket.connect(addr).await.map_err(io_failure)?;
    let udp_failure = |e: io::Error| match e.kind() {
        io::ErrorKind::ConnectionRefused => Failure::PortUnreachable,
        _ => io_failure(e),
    };
    socket.send(payload).await.map_err(udp_failure)?;
    let mut buf = vec![0u8; MAX_REPLY];
    let n = socket.recv(&mut buf).await.map_err(udp_failure)?;
    match expect {
        Some(e) if !contains(&buf[..n], e.as_bytes()) => Err(Failure::ReplyMismatch(e.to_string())),
        _ => Ok(Pass::Reply),
    }
}

/// The `Host` header: the configured one, else the address (with the port unless it is
/// the scheme's default).
fn host_header(http: &HttpCheck, addr: SocketAddr, default_port: u16) -> String {
    if let Some(h) = &http.host {
        return h.clone();
    }
    let ip = match addr.ip() {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    if addr.port() == default_port {
        ip
    } else {
        format!("{ip}:{}", addr.port())
    }
}

/// The TLS server name: `server_name`, else the `Host` header without its port, else the
/// backend address.
fn sni_name(server_name: Option<&str>, host: Option<&str>, address: IpAddr) -> String {
    if let Some(n) = server_name {
        return n.to_string();
    }
    if let Some(h) = host {
        if let Some(rest) = h.strip_prefix('[')
            && let Some((ip, _)) = rest.split_once(']')
        {
            return ip.to_string();
        }
        if let Some((name, port)) = h.rsplit_once(':')
            && !name.contains(':')
            && port.bytes().all(|b| b.is_ascii_digit())
        {
            return name.to_string();
        }
        return h.to_string();
    }
    address.to_string()
}

pub(crate) fn tls_failure(e: io::Error) -> Failure {
    // tokio-rustls carries rustls's own error inside; its words ("invalid peer
    // certificate: UnknownIssuer") are what the operator needs.
    if let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return Failure::Tls(inner.to_string());
    }
    match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            Failure::Tls("peer closed the connection during the handshake".into())
        }
        io::ErrorKind::ConnectionReset => {
            Failure::Tls("connection reset during the handshake".into())
        }
        _ => Failure::Tls(e.to_string()),
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why the TLS client configuration could not be built; kept, like the configuration, for
/// every later https probe.
#[derive(Debug, Clone, thiserror::Error)]
enum TlsSetupError {
    /// rustls refused the protocol versions for the crypto provider.
    #[error("TLS client setup: {0}")]
    Protocols(#[from] rustls::Error),
}

fn build_tls(verify: bool, alpn: &[u8]) -> Result<ClientConfig, TlsSetupError> {
    let provider = provider();
    // The explicit provider avoids depending on a process-wide default, which is
    // ambiguous (and panics) when another crate in the binary enables aws-lc-rs too.
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?;
    let mut config = if verify {
        let mut roots = RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::warn!("loading system CA certificates: {e}");
        }
        let (added, ignored) = roots.add_parsable_certificates(found.certs);
        tracing::debug!(added, ignored, "https checks trust the system CA store");
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

/// Accepts any certificate (the check's `verify_tls = false`) but still checks the
/// handshake signatures, so the session is a real TLS session with that key.
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Reads from a stream, treating a TLS peer that closes without close_notify as EOF
/// (many servers do; the response is complete by its own framing or by EOF).
pub(crate) async fn read_some<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut [u8],
) -> Result<usize, Failure> {
    match s.read(buf).await {
        Ok(n) => Ok(n),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
        Err(e) => Err(
            match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                Some(t) => Failure::Tls(t.to_string()),
                None => io_failure(e),
            },
        ),
    }
}

/// Sends the request and judges the response: status first, then the body if the
/// check looks for a substring.
async fn http_exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    http: &HttpCheck,
    host: &str,
) -> Outcome {
    let request = format!(
        "{} {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: sluice-health\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        http.method.as_str(),
        if http.path.is_empty() {
            "/"
        } else {
            &http.path
        },
    );
    s.write_all(request.as_bytes()).await.map_err(io_failure)?;
    s.flush().await.map_err(io_failure)?;

    let mut buf = Vec::with_capacity(4096);
    // On the heap: a buffer in the future itself would be copied on every spawn.
    let mut chunk = vec![0u8; 8192];
    let head = read_head(&mut s, &mut buf, &mut chunk).await?;
    if !http.accepts(head.status) {
        return Err(Failure::Status(head.status));
    }
    if http.expect_body.is_none() && http.expect_digest.is_none() {
        return Ok(Pass::Status(head.status));
    }
    let bodiless = http.method == HttpMethod::Head || head.status == 204 || head.status == 304;
    let raw = buf.split_off(head.len);
    match (&http.expect_digest, &http.expect_body) {
        (None, Some(expect)) if bodiless => Err(Failure::BodyMismatch(expect.clone())),
        (None, Some(expect)) => find_in_body(&mut s, &head, raw, &mut chunk, expect).await,
        (Some(want), expect) => {
            let body = if bodiless {
                Vec::new()
            } else {
                crate::digest::whole_body(&mut s, &head, raw, &mut chunk).await?
            };
            crate::digest::judge(&body, expect.as_deref(), want)?;
            Ok(Pass::Status(head.status))
        }
        (None, None) => Ok(Pass::Status(head.status)),
    }
}

/// Reads until `buf` holds a final (non-1xx) response head; interim responses
/// (100 Continue, 103 Early Hints) are dropped from `buf`, the head stays at its start.
async fn read_head<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut Vec<u8>,
    chunk: &mut [u8],
) -> Result<Head, Failure> {
    loop {
        match parse_head(buf)? {
            Some(head) if (100..200).contains(&head.status) => {
                buf.drain(..head.len);
                continue;
            }
            Some(head) => return Ok(head),
            None => {}
        }
        if buf.len() > MAX_HEAD {
            return Err(Failure::BadResponse(format!(
                "response head over {MAX_HEAD} bytes"
            )));
        }
        let n = read_some(s, chunk).await?;
        if n == 0 {
            return Err(if buf.is_empty() {
                Failure::NoReply
            } else {
                Failure::BadResponse("connection closed inside the response head".into())
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads the body (starting with `raw`, what came after the head) until it contains
/// `expect`, ends, or reaches [`MAX_BODY`].
async fn find_in_body<S: AsyncRead + Unpin>(
    s: &mut S,
    head: &Head,
    mut raw: Vec<u8>,
    chunk: &mut [u8],
    expect: &str,
) -> Outcome {
    let mismatch = || Failure::BodyMismatch(expect.to_string());
    loop {
        let (body, complete) = match head.framing {
            Framing::Chunked => dechunk(&raw)?,
            Framing::Length(n) => {
                let take = raw.len().min(n);
                (raw[..take].to_vec(), raw.len() >= n)
            }
            Framing::Eof => (raw.clone(), false),
        };
        if contains(&body, expect.as_bytes()) {
            return Ok(Pass::Status(head.status));
        }
        if complete || raw.len() >= MAX_BODY {
            return Err(mismatch());
        }
        let n = read_some(s, chunk).await?;
        if n == 0 {
            return match head.framing {
                Framing::Eof => Err(mismatch()),
                _ => Err(Failure::BadResponse(
                    "connection closed inside the body".into(),
                )),
            };
        }
        raw.extend_from_slice(&chunk[..n]);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    Chunked,
    Length(usize),
    Eof,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) status: u16,
    pub(crate) len: usize,
    pub(crate) framing: Framing,
}

fn parse_head(buf: &[u8]) -> Result<Option<Head>, Failure> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(Failure::BadResponse(e.to_string())),
    };
    let status = resp.code.unwrap_or(0);
    let mut framing = Framing::Eof;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let v = String::from_utf8_lossy(h.value);
            if v.rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
            {
                framing = Framing::Chunked;
            }
        } else if h.name.eq_ignore_ascii_case("content-length") && framing != Framing::Chunked {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or_else(|| Failure::BadResponse("invalid Content-Length".into()))?;
            framing = Framing::Length(n);
        }
    }
    Ok(Some(Head {
        status,
        len,
        framing,
    }))
}

/// Decodes as much of a chunked body as `raw` holds; true once the last chunk is seen.
pub(crate) fn dechunk(raw: &[u8]) -> Result<(Vec<u8>, bool), Failure> {
    let bad = |what: &str| Failure::BadResponse(format!("bad chunked body: {what}"));
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let Some(eol) = raw[pos..].windows(2).position(|w| w == b"\r\n") else {
            return Ok((body, false));
        };
        let line = std::str::from_utf8(&raw[pos..pos + eol]).map_err(|_| bad("size line"))?;
        let size_hex = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|_| bad("chunk size"))?;
        pos += eol + 2;
        if size == 0 {
            return Ok((body, true));
        }
        let available = raw.len() - pos;
        if available < size {
            body.extend_from_slice(&raw[pos..]);
            return Ok((body, false));
        }
        body.extend_from_slice(&raw[pos..pos + size]);
        pos += size;
        if raw.len() < pos + 2 {
            return Ok((body, false));
        }
        if &raw[pos..pos + 2] != b"\r\n" {
            return Err(bad("missing CRLF after chunk"));
        }
        pos += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_framing() {
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            .unwrap()
            .unwrap();
        assert_eq!((h.status, h.framing), (200, Framing::Length(5)));
        assert_eq!(h.len, 38);
        let h = parse_head(
            b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 9\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!((h.status, h.framing), (503, Framing::Chunked));
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nConte").unwrap(), None);
        assert!(matches!(
            parse_head(b"SSH-2.0-OpenSSH\r\n\r\n"),
            Err(Failure::BadResponse(_))
        ));
        assert!(matches!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"),
            Err(Failure::BadResponse(_))
        ));
    }

    #[test]
    fn dechunk_partial_and_complete() {
        let raw = b"4\r\nheal\r\n3;ext=1\r\nthy\r\n0\r\n\r\n";
        assert_eq!(dechunk(raw).unwrap(), (b"healthy".to_vec(), true));
        // Split inside the second chunk: the partial data is still searchable.
        assert_eq!(dechunk(&raw[..19]).unwrap(), (b"healt".to_vec(), false));
        assert_eq!(dechunk(b"4\r").unwrap(), (Vec::new(), false));
        assert!(dechunk(b"zz\r\n").is_err());
        assert!(dechunk(b"2\r\nabXY").is_err());
    }

    #[test]
    fn names_for_host_and_sni() {
        let http = HttpCheck {
            method: HttpMethod::Get,
            path: "/".into(),
            host: None,
            expect_status: vec![(200, 299)],
            expect_body: None,
            expect_digest: None,
        };
        assert_eq!(
            host_header(&http, "10.0.0.1:80".parse().unwrap(), 80),
            "10.0.0.1"
        );
        assert_eq!(
            host_header(&http, "[fd00::1]:8080".parse().unwrap(), 80),
            "[fd00::1]:8080"
        );
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(
            sni_name(Some("a.example"), Some("b.example"), ip),
            "a.example"
        );
        assert_eq!(sni_name(None, Some("b.example:8443"), ip), "b.example");
        assert_eq!(sni_name(None, Some("[fd00::2]:443"), ip), "fd00::2");
        assert_eq!(sni_name(None, None, ip), "10.0.0.1");
    }

    /// A VIP prober that answers as told, or never.
    #[derive(Debug)]
    struct Fake(Option<Result<(), VipFailure>>);

    impl VipProber for Fake {
        fn probe(&self, _probe: VipProbe) -> crate::vip::VipFuture {
            let answer = self.0.clone();
            Box::pin(async move {
                match answer {
                    Some(a) => a,
                    None => std::future::pending().await,
                }
            })
        }
    }

    fn vip_key(port: u16) -> ProbeKey {
        let check = crate::check::HealthCheck {
            name: "c".into(),
            kind: CheckKind::Tcp {
                send: None,
                expect: None,
            },
            port: None,
            interval: std::time::Duration::from_secs(1),
            timeout: std::time::Duration::from_millis(400),
            rise: 1,
            fall: 1,
            jitter: std::time::Duration::ZERO,
            initial: crate::check::InitialHealth::Down,
            source: None,
            address: None,
        };
        ProbeKey {
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port,
            check: Arc::new(check),
            via_vip: Some(ViaVip {
                vip: "192.0.2.12:80".parse().unwrap(),
                protocol: VipProtocol::Tcp,
                backend_port: port,
                tenant_vni: None,
            }),
        }
    }

    #[tokio::test]
    async fn a_vip_target_needs_both_the_check_and_the_vip_probe() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().port();
        let ctx = |a| ProbeContext::new().with_vip_prober(Arc::new(Fake(a)));
        let vip = "192.0.2.12:80".parse().unwrap();

        // Without a VIP prober (outside the appliance) the VIP cannot be proven.
        let bare = ProbeContext::new().probe(&vip_key(open)).await;
        assert_eq!(bare, Err(Failure::Vip(VipFailure::Unavailable)));
        let both = ctx(Some(Ok(()))).probe(&vip_key(open)).await;
        assert_eq!(both, Ok(Pass::Connected));
        let closed = ctx(Some(Err(VipFailure::Closed(vip))))
            .probe(&vip_key(open))
            .await;
        assert_eq!(closed, Err(Failure::Vip(VipFailure::Closed(vip))));
        // Silence ends as "did not answer for the VIP", before the caller's deadline.
        let started = std::time::Instant::now();
        let silent = ctx(None).probe(&vip_key(open)).await;
        assert_eq!(silent, Err(Failure::Vip(VipFailure::NoAnswer(vip))));
        assert!(started.elapsed() < std::time::Duration::from_millis(400));
        assert!(
            silent
                .unwrap_err()
                .to_string()
                .contains("did not answer for VIP")
        );
        // The check's own failure comes first: the backend is down, not just the VIP.
        drop(listener);
        let down = ctx(None).probe(&vip_key(open)).await;
        assert_eq!(down, Err(Failure::Refused));
    }

    #[test]
    fn io_errors_map_to_operator_words() {
        assert_eq!(
            io_failure(io::ErrorKind::ConnectionRefused.into()),
            Failure::Refused
        );
        assert_eq!(
            io_failure(io::ErrorKind::ConnectionReset.into()),
            Failure::Reset
        );
        assert!(matches!(
            io_failure(io::ErrorKind::HostUnreachable.into()),
            Failure::Unreachable(_)
        ));
    }
}
