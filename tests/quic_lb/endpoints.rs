//! The QUIC ends of `tests/quic_lb.rs`, real quinn endpoints: the backends' servers, whose
//! connection IDs carry their QUIC-LB server ID (`lb::quic`'s codec, configured from
//! `sluice quic-lb config`), and the client that downloads a body and moves to a new
//! 5-tuple mid-transfer. They know nothing of the lab but the namespaces they run in.

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lab::netns::Netns;
use quinn::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use quinn::{ConnectionId, ConnectionIdGenerator, TransportConfig};
use sluice::config::quic::{QuicLb, hex_octets};
use sluice::lb::quic::Codec;

/// The body each server sends: 10 MiB.
pub const BODY: usize = 10 << 20;
/// The client's moves to a new 5-tuple, at 1/4, 2/4 and 3/4 of the body.
pub const REBINDS: usize = 3;
/// The header before the body: the backend's name, padded with spaces.
const HEADER: usize = 16;
/// The client reads at most this much at a time, then sleeps [`PACE`]; its stream window
/// ([`WINDOW`]) keeps the server from running ahead, so every move happens mid-transfer.
const READ: usize = 32 * 1024;
const PACE: Duration = Duration::from_millis(4);
const WINDOW: u32 = 256 * 1024;
/// The longest the client waits for its next bytes: a stalled download has failed.
const STALL: Duration = Duration::from_secs(15);
/// Both sides' idle timeout: longer than [`STALL`], so a stall is the client's verdict.
const IDLE: Duration = Duration::from_secs(30);
/// The name the servers' certificate is for.
const SERVER_NAME: &str = "quic.lab";

/// Byte `i` of every body.
fn body_byte(i: usize) -> u8 {
    (i.wrapping_mul(7) + i / 251) as u8
}

/// One server's connection-ID configuration, read from `sluice quic-lb config`.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub backend: SocketAddr,
    pub codec: Codec,
    pub server_id: Vec<u8>,
    pub nonce_len: usize,
}

/// The `backend=...` lines of `sluice quic-lb config`, each as the codec its server uses.
pub fn server_specs(text: &str) -> Vec<ServerSpec> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("backend=")) {
        let kv: std::collections::HashMap<&str, &str> = line
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .collect();
        let num = |k: &str| -> u8 {
            kv.get(k)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in {line:?}"))
        };
        let key = kv.get("key").map(|k| {
            let octets = hex_octets(k).unwrap_or_else(|| panic!("key of {line:?}"));
            <[u8; 16]>::try_from(octets).expect("a 16-octet key")
        });
        let q = QuicLb {
            config_id: num("config_id"),
            server_id_len: num("server_id_len"),
            nonce_len: num("nonce_len"),
            key,
            assigned: Vec::new(),
        };
        assert_eq!(kv.get("encoding"), Some(&q.encoding().name()), "{line}");
        out.push(ServerSpec {
            backend: kv["backend"].parse().expect("backend address"),
            codec: Codec::new(&q),
            server_id: hex_octets(kv["server_id"]).expect("server id"),
            nonce_len: usize::from(q.nonce_len),
        });
    }
    out
}

/// A server's connection IDs: its server ID encoded by the VIP's codec with a nonce drawn
/// from a SplitMix64 sequence (unique per generator; a test needs no cryptographic nonce).
struct LbCids {
    spec: ServerSpec,
    next: u64,
}

impl ConnectionIdGenerator for LbCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut nonce = Vec::with_capacity(self.spec.nonce_len);
        while nonce.len() < self.spec.nonce_len {
            self.next = self.next.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.next;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            nonce.extend_from_slice(&(z ^ (z >> 31)).to_be_bytes());
        }
        nonce.truncate(self.spec.nonce_len);
        let cid = self.spec.codec.encode(&self.spec.server_id, &nonce);
        let id = self.spec.codec.server_id(&cid).expect("decodes");
        assert_eq!(id.as_bytes(), &self.spec.server_id[..], "round trip");
        ConnectionId::new(&cid)
    }

    fn cid_len(&self) -> usize {
        self.spec.codec.cid_len()
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// The servers' self-signed certificate (DER) and its key.
#[derive(Clone)]
pub struct Cert {
    der: CertificateDer<'static>,
    key: Vec<u8>,
}

impl Cert {
    pub fn new() -> Cert {
        let c = rcgen::generate_simple_self_signed(vec![SERVER_NAME.into()]).expect("cert");
        Cert {
            der: c.cert.der().clone(),
            key: c.signing_key.serialize_der(),
        }
    }

    fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()))
    }
}

fn transport(client: bool) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.max_idle_timeout(Some(IDLE.try_into().expect("idle timeout")));
    if client {
        t.stream_receive_window(WINDOW.into());
        t.receive_window((2 * WINDOW).into());
    }
    Arc::new(t)
}

/// What a server saw of one connection.
#[derive(Debug, Clone)]
pub struct Served {
    pub vip: String,
    pub backend: String,
    pub bytes: usize,
    /// The client addresses the connection had, in order (a move shows as a new one).
    pub addresses: Vec<SocketAddr>,
    pub error: Option<String>,
}

/// One endpoint of a backend: the VIP it serves, where it listens, its connection IDs.
pub struct Listen {
    pub vip: String,
    pub at: SocketAddr,
    pub spec: ServerSpec,
}

/// The QUIC servers, one thread per backend namespace; stopped and joined on drop.
pub struct Servers {
    stop: tokio::sync::watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    log: Arc<Mutex<Vec<Served>>>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Servers {
    /// Starts each backend's endpoints in its namespace (`listen[i]`: backend `i`'s, one
    /// per VIP); returns once all are bound.
    pub fn start(backends: &[Netns], listen: Vec<Vec<Listen>>, cert: &Cert) -> Servers {
        let (stop, watch) = tokio::sync::watch::channel(false);
        let log = Arc::new(Mutex::new(Vec::new()));
        let body: Arc<Vec<u8>> = Arc::new((0..BODY).map(body_byte).collect());
        let (ready, bound) = std::sync::mpsc::channel();
        let mut threads = Vec::new();
        for (i, (ns, mine)) in backends.iter().zip(listen).enumerate() {
            let name = format!("be{}", i + 1);
            let (cert, log, body, watch, ready) = (
                cert.clone(),
                log.clone(),
                body.clone(),
                watch.clone(),
                ready.clone(),
            );
            let run = move || serve_backend(name, mine, cert, body, log, watch, ready);
            threads.push(ns.in_thread(run).expect("server thread"));
        }
        drop(ready);
        for _ in 0..threads.len() {
            bound
                .recv_timeout(Duration::from_secs(20))
                .expect("a backend's QUIC servers never bound")
                .unwrap_or_else(|e| panic!("{e}"));
        }
        Servers { stop, threads, log }
    }

    pub fn served(&self) -> Vec<Served> {
        self.log.lock().expect("log").clone()
    }
}

/// One backend's thread: its endpoints on one runtime until `stop`.
fn serve_backend(
    name: String,
    vips: Vec<Listen>,
    cert: Cert,
    body: Arc<Vec<u8>>,
    log: Arc<Mutex<Vec<Served>>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let mut endpoints = Vec::new();
        for Listen { vip, at, spec } in vips {
            match server_endpoint(at, spec, &cert) {
                Ok(ep) => endpoints.push((vip, ep)),
                Err(e) => {
                    let _ = ready.send(Err(format!("{name}: bind {at}: {e}")));
                    return;
                }
            }
        }
        let _ = ready.send(Ok(()));
        for (vip, ep) in &endpoints {
            let (vip, ep, name) = (vip.clone(), ep.clone(), name.clone());
            let (body, log) = (body.clone(), log.clone());
            tokio::spawn(async move {
                while let Some(incoming) = ep.accept().await {
                    let c = (vip.clone(), name.clone(), body.clone(), log.clone());
                    tokio::spawn(serve_connection(incoming, c.0, c.1, c.2, c.3));
                }
            });
        }
        let _ = stop.wait_for(|s| *s).await;
        for (_, ep) in &endpoints {
            ep.close(0u32.into(), b"test over");
        }
    });
}

fn server_endpoint(
    at: SocketAddr,
    spec: ServerSpec,
    cert: &Cert,
) -> std::io::Result<quinn::Endpoint> {
    let mut ec = quinn::EndpointConfig::default();
    ec.cid_generator(move || {
        // Random per generator, so no two endpoints count through the same nonces.
        let salt = std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), at);
        Box::new(LbCids {
            spec: spec.clone(),
            next: salt,
        })
    });
    let mut sc = quinn::ServerConfig::with_single_cert(vec![cert.der.clone()], cert.key())
        .map_err(std::io::Error::other)?;
    sc.transport_config(transport(false));
    let socket = UdpSocket::bind(at)?;
    quinn::Endpoint::new(ec, Some(sc), socket, Arc::new(quinn::TokioRuntime))
}

/// Serves one connection: on its first bidirectional stream, the header (this backend's
/// name) and the body; noting each new client address. Logged when the client has closed.
async fn serve_connection(
    incoming: quinn::Incoming,
    vip: String,
    backend: String,
    body: Arc<Vec<u8>>,
    log: Arc<Mutex<Vec<Served>>>,
) {
    let mut served = Served {
        vip,
        backend: backend.clone(),
        bytes: 0,
        addresses: vec![incoming.remote_address()],
        error: None,
    };
    let result = async {
        let conn = incoming.await?;
        let (mut send, mut recv) = conn.accept_bi().await?;
        recv.read_to_end(64).await?;
        send.write_all(format!("{backend:<HEADER$}").as_bytes())
            .await?;
        for chunk in body.chunks(64 * 1024) {
            send.write_all(chunk).await?;
            served.bytes += chunk.len();
            let now = conn.remote_address();
            if served.addresses.last() != Some(&now) {
                served.addresses.push(now);
            }
        }
        send.finish()?;
        conn.closed().await;
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    }
    .await;
    served.error = result.err().map(|e| e.to_string());
    log.lock().expect("log").push(served);
}

/// Where a client starts and where it may move: candidate 5-tuples with the backend index
/// Maglev maps each to (the engine's own choice, through `sluice::trace`).
#[derive(Debug, Clone)]
pub struct Plan {
    /// The VIP's name and address.
    pub name: String,
    pub vip: SocketAddr,
    /// The client's first address, and the backend index it maps to.
    pub first: SocketAddr,
    pub first_maps_to: usize,
    /// Where it may move to, each with the backend index it maps to.
    pub moves: Vec<(SocketAddr, usize)>,
}

/// What one client's download saw.
#[derive(Debug, Default)]
pub struct Download {
    pub vip: String,
    pub backend: String,
    pub bytes: usize,
    /// The first byte that differed from the body, if one did.
    pub bad: Option<usize>,
    /// Each move: the new client address and the backend Maglev maps it to.
    pub moved: Vec<(SocketAddr, usize)>,
    pub error: Option<String>,
    pub took: Duration,
}

/// The body's header names backend `beN`: its index N - 1.
pub fn backend_index(name: &str) -> Option<usize> {
    name.strip_prefix("be")?
        .parse::<usize>()
        .ok()?
        .checked_sub(1)
}

fn client_config(cert: &Cert) -> quinn::ClientConfig {
    let mut roots = quinn::rustls::RootCertStore::empty();
    roots.add(cert.der.clone()).expect("root");
    let mut c = quinn::ClientConfig::with_root_certificates(Arc::new(roots)).expect("client");
    c.transport_config(transport(true));
    c
}

/// Downloads the body through the plan's VIP, moving [`REBINDS`] times mid-transfer.
pub async fn download(plan: Plan, cert: Cert) -> Download {
    let t0 = Instant::now();
    let mut d = Download {
        vip: plan.name.clone(),
        ..Download::default()
    };
    let result = async {
        let socket =
            UdpSocket::bind(plan.first).map_err(|e| format!("bind {}: {e}", plan.first))?;
        let runtime = Arc::new(quinn::TokioRuntime);
        let ec = quinn::EndpointConfig::default();
        let ep = quinn::Endpoint::new(ec, None, socket, runtime).map_err(|e| e.to_string())?;
        let connecting = ep
            .connect_with(client_config(&cert), plan.vip, SERVER_NAME)
            .map_err(|e| e.to_string())?;
        let conn = tokio::time::timeout(STALL, connecting)
            .await
            .map_err(|_| "no handshake".to_string())?
            .map_err(|e| format!("handshake: {e}"))?;
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
        send.write_all(b"body please")
            .await
            .map_err(|e| e.to_string())?;
        send.finish().map_err(|e| e.to_string())?;
        let mut header = [0u8; HEADER];
        tokio::time::timeout(STALL, recv.read_exact(&mut header))
            .await
            .map_err(|_| "no header".to_string())?
            .map_err(|e| format!("header: {e}"))?;
        d.backend = String::from_utf8_lossy(&header).trim().to_string();
        let serving = backend_index(&d.backend).ok_or("a header without a backend")?;
        read_body(&mut recv, &ep, &plan, serving, &mut d).await?;
        conn.close(0u32.into(), b"done");
        ep.wait_idle().await;
        Ok::<(), String>(())
    }
    .await;
    d.error = result.err();
    d.took = t0.elapsed();
    d
}

/// Reads the body, checking every byte, and moves to the plan's next 5-tuple that Maglev
/// maps away from `serving` at each quarter.
async fn read_body(
    recv: &mut quinn::RecvStream,
    ep: &quinn::Endpoint,
    plan: &Plan,
    serving: usize,
    d: &mut Download,
) -> Result<(), String> {
    let mut moves = plan.moves.iter().filter(|(_, m)| *m != serving);
    let mut buf = vec![0u8; READ];
    loop {
        let n = match tokio::time::timeout(STALL, recv.read(&mut buf)).await {
            Err(_) => return Err(format!("no data for {STALL:?} after {} bytes", d.bytes)),
            Ok(Err(e)) => return Err(format!("after {} bytes: {e}", d.bytes)),
            Ok(Ok(None)) => return Ok(()),
            Ok(Ok(Some(n))) => n,
        };
        if d.bad.is_none() {
            let off = buf[..n]
                .iter()
                .enumerate()
                .position(|(j, b)| *b != body_byte(d.bytes + j));
            d.bad = off.map(|j| d.bytes + j);
        }
        d.bytes += n;
        if d.moved.len() < REBINDS && d.bytes >= (d.moved.len() + 1) * BODY / (REBINDS + 1) {
            let &(to, maps) = moves.next().ok_or("no candidate 5-tuple left")?;
            let socket = UdpSocket::bind(to).map_err(|e| format!("bind {to}: {e}"))?;
            ep.rebind(socket).map_err(|e| format!("rebind {to}: {e}"))?;
            d.moved.push((to, maps));
        }
        tokio::time::sleep(PACE).await;
    }
}
