//! The VIP probe's I/O: the appliance's side of [`health::VipProber`].
//!
//! A kernel socket cannot send it: the VIP is not the backend's address to the kernel, and
//! a director that holds the VIP itself would deliver a connect to it locally. So the probe
//! is built like a client's frame ([`frames`]) and sent on an AF_PACKET socket on the
//! backend's egress interface ([`sys::packet`]), with the L2 facts (interface, MACs, mode,
//! tunnel parameters) read from the published tables when the probe runs, never stored in
//! the probe's identity, so route and neighbour changes do not reset its health state. The
//! appliance's source address is the kernel's choice toward the backend, and its port is
//! held by a kernel socket bound for the probe's life: no local connection can take it,
//! and the kernel answers the backend's SYN-ACK with a RST (after ours) instead of leaving
//! anything half-open. The answer is captured with a filter that lets only frames to that
//! address and port reach user space; the XDP program passes them to the kernel since they
//! are not addressed to a VIP.

pub mod frames;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use health::{VipFailure, VipFuture, VipProbe, VipProber, VipProtocol};
use sys::packet::{AsyncPacketSocket, PacketSocket};

use self::frames::{Answer, Path, Payload, ProbeFlow};
use crate::config::Mode;
use crate::lb::Tables;
use crate::lb::hash::addr_to_u128;

/// The tables as published now (the control plane's current version).
pub type CurrentTables = Arc<dyn Fn() -> Arc<Tables> + Send + Sync>;

/// Failure labels counted, in the order of [`VipProbeCounters::failed`].
pub const FAILURE_LABELS: [&str; 5] = [
    "vip_no_answer",
    "vip_closed",
    "vip_reply_mismatch",
    "vip_not_sent",
    "vip_io",
];

/// VIP probes sent, passed and failed by reason, for the metrics.
#[derive(Debug, Default)]
pub struct VipProbeCounters {
    /// Probe frames sent.
    pub sent: AtomicU64,
    /// Probes the backend answered from the VIP.
    pub passed: AtomicU64,
    /// Failed probes by [`FAILURE_LABELS`].
    pub failed: [AtomicU64; FAILURE_LABELS.len()],
}

impl VipProbeCounters {
    fn record(&self, r: &Result<(), VipFailure>) {
        let at = match r {
            Ok(()) => {
                self.passed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(e) => FAILURE_LABELS.iter().position(|l| *l == e.label()),
        };
        if let Some(i) = at {
            self.failed[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Sends VIP probes through the datapath's path to each backend.
pub struct VipProbes {
    tables: CurrentTables,
    counters: Arc<VipProbeCounters>,
}

impl std::fmt::Debug for VipProbes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VipProbes")
            .field("counters", &self.counters)
            .finish()
    }
}

impl VipProbes {
    /// A prober reading the tables through `tables` and counting into `counters`.
    pub fn new(tables: CurrentTables, counters: Arc<VipProbeCounters>) -> VipProbes {
        VipProbes { tables, counters }
    }
}

impl VipProber for VipProbes {
    fn probe(&self, probe: VipProbe) -> VipFuture {
        // Only what this probe needs is copied out: an old table version is not kept
        // alive for the probe's timeout.
        let path = path_of(&(self.tables)(), &probe);
        let counters = Arc::clone(&self.counters);
        Box::pin(async move {
            let r = match path {
                Ok(path) => run(&probe, &path, &counters).await,
                Err(e) => Err(e),
            };
            counters.record(&r);
            r
        })
    }
}

/// The backend's entry, mode and next hop in the current tables.
fn path_of(t: &Tables, p: &VipProbe) -> Result<Path, VipFailure> {
    let vip = p.via.vip;
    let proto = match p.via.protocol {
        VipProtocol::Tcp => 6,
        VipProtocol::Udp => 17,
    };
    let not_sent = |why: String| VipFailure::NotSent(why);
    let v = t
        .vip_in(
            crate::lb::hash::zone_of(p.via.tenant_vni),
            addr_to_u128(vip.ip()),
            vip.port(),
            proto,
        )
        .ok_or_else(|| not_sent(format!("VIP {vip} is not in the running tables")))?;
    let slot = t
        .backend_slot(v, addr_to_u128(p.backend), p.via.backend_port)
        .ok_or_else(|| not_sent(format!("backend {} is not in VIP {vip}", p.backend)))?;
    let next_hop = t.backend_egress(slot).map_err(|m| {
        not_sent(format!(
            "no egress toward backend {} yet ({m:?}: route or ARP/ND unresolved)",
            p.backend
        ))
    })?;
    let mode = t.vips[v as usize].mode;
    if !matches!(mode, Mode::Dr | Mode::Tunnel(_)) {
        return Err(not_sent(format!("VIP {vip} is mode {}", mode.name())));
    }
    Ok(Path {
        mode,
        backend: t.backends[slot as usize],
        next_hop,
        tunnel_source: t.tunnel_source,
    })
}

/// The port held for one probe: a bound kernel socket, closed when the probe ends.
enum Held {
    Tcp(#[allow(dead_code)] tokio::net::TcpSocket),
    Udp(#[allow(dead_code)] UdpSocket),
}

async fn run(p: &VipProbe, path: &Path, counters: &VipProbeCounters) -> Result<(), VipFailure> {
    let io = |what: &str, e: std::io::Error| VipFailure::Io(format!("{what}: {e}"));
    let src = source_toward(p.backend).map_err(|e| io("source address", e))?;
    let udp = p.via.protocol == VipProtocol::Udp;
    let (_held, sport) = hold_port(src, udp).map_err(|e| io("holding a source port", e))?;
    let flow = ProbeFlow {
        src,
        sport,
        vip: p.via.vip,
        seq: initial_seq(sport),
    };
    let ifindex = path.next_hop.ifindex;
    let sock = PacketSocket::open(ifindex, &frames::filter(src, sport, udp))
        .and_then(AsyncPacketSocket::new)
        .map_err(|e| io(&format!("AF_PACKET socket on ifindex {ifindex}"), e))?;
    let (payload, expect) = match &p.udp {
        Some((data, expect)) if udp => (Payload::Udp(data), expect.as_deref()),
        _ => (Payload::Syn, None),
    };
    let frame = frames::build(&flow, payload, path).map_err(|e| VipFailure::Io(e.to_string()))?;
    sock.send(&frame)
        .map_err(|e| io(&format!("send on ifindex {ifindex}"), e))?;
    counters.sent.fetch_add(1, Ordering::Relaxed);
    let answer = match tokio::time::timeout(p.timeout, answer(&sock, &flow, udp)).await {
        Ok(a) => a.map_err(|e| io("capture", e))?,
        Err(_) => return Err(VipFailure::NoAnswer(p.via.vip)),
    };
    match answer {
        Answer::SynAck => {
            // Best effort: the kernel's own RST follows anyway.
            if let Ok(rst) = frames::build(&flow, Payload::Rst, path) {
                let _ = sock.send(&rst);
            }
            Ok(())
        }
        Answer::Reset | Answer::Unreachable => Err(VipFailure::Closed(p.via.vip)),
        Answer::Reply(data) => match expect {
            Some(e) if !contains(&data, e) => Err(VipFailure::ReplyMismatch {
                vip: p.via.vip,
                expect: String::from_utf8_lossy(e).into_owned(),
            }),
            _ => Ok(()),
        },
    }
}

/// Waits for the first captured frame that answers `flow`.
async fn answer(sock: &AsyncPacketSocket, flow: &ProbeFlow, udp: bool) -> std::io::Result<Answer> {
    let mut buf = vec![0u8; 4096];
    loop {
        let n = sock.recv(&mut buf).await?;
        if let Some(a) = frames::classify(&buf[..n], flow, udp) {
            return Ok(a);
        }
    }
}

/// The address the kernel sends from toward `backend` (connecting a UDP socket sends
/// nothing; it only routes).
fn source_toward(backend: IpAddr) -> std::io::Result<IpAddr> {
    let any: SocketAddr = match backend {
        IpAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = UdpSocket::bind(any)?;
    s.connect((backend, 9))?;
    Ok(s.local_addr()?.ip())
}

/// Binds a kernel socket to an ephemeral port of `src` for the probe's life.
fn hold_port(src: IpAddr, udp: bool) -> std::io::Result<(Held, u16)> {
    let at = SocketAddr::new(src, 0);
    if udp {
        let s = UdpSocket::bind(at)?;
        let port = s.local_addr()?.port();
        return Ok((Held::Udp(s), port));
    }
    let s = match src {
        IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    s.bind(at)?;
    let port = s.local_addr()?.port();
    Ok((Held::Tcp(s), port))
}

/// An initial sequence number no one on the path can guess from the port alone.
fn initial_seq(sport: u16) -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u16(sport);
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_nanos(),
    );
    h.finish() as u32
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}
