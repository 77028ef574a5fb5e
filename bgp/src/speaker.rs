//! The announcer API the appliance calls: plain config structs, [`Speaker::start`],
//! `announce`/`withdraw`, `graceful_shutdown` (RFC 8326) and per-peer status for the
//! console and metrics. The heavy lifting happens in the tasks of `tasks.rs`; this file only
//! validates input and talks to them over channels.

use crate::codec::LargeCommunity;
use crate::fsm::State;
use crate::tasks::{self, PeerCmd, PeerHandle};
use ipnet::IpNet;
use std::collections::HashSet;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio::task::JoinHandle;

/// The whole speaker's configuration.
#[derive(Debug, Clone)]
pub struct SpeakerConfig {
    /// Our ASN (4-octet).
    pub asn: u32,
    /// Our BGP identifier.
    pub router_id: Ipv4Addr,
    /// Peers to keep sessions with.
    pub peers: Vec<PeerConfig>,
    /// Where to accept connections from peers (`None`: only connect out). Default `[::]:179`.
    pub listen: Option<SocketAddr>,
    /// How long routes carry GRACEFUL_SHUTDOWN before they are withdrawn (RFC 8326 §4).
    pub graceful_shutdown_wait: Duration,
    /// Text sent in the Cease NOTIFICATION on shutdown (RFC 9003).
    pub shutdown_message: String,
    /// Sets the kernel options behind `md5_key` and `ttl_security` (required by either).
    pub socket_options: Option<Arc<dyn SocketOptions>>,
}

/// The TCP socket options BGP security needs but no safe Rust API exposes (`TCP_MD5SIG`,
/// `IP_MINTTL`, `IPV6_MINHOPCOUNT`): this crate forbids `unsafe`, so the embedding program
/// supplies them (the appliance's `sockopt` module). Calls happen on sockets the speaker
/// owns, before `listen`/`connect`, so a failure stops that socket from being used.
pub trait SocketOptions: Send + Sync + fmt::Debug {
    /// Installs the RFC 2385 key for segments to and from `peer` (any port). `peer` is in
    /// the socket's family: an IPv4 peer on an IPv6 socket is passed v4-mapped.
    fn tcp_md5(&self, fd: BorrowedFd<'_>, peer: IpAddr, key: &[u8]) -> io::Result<()>;
    /// Makes the kernel drop received segments whose TTL (IPv4) or hop limit (IPv6) is below
    /// `ttl` (RFC 5082 §3). On an IPv6 socket (`v6`) both limits are set, since v4-mapped
    /// connections are checked against the IPv4 one.
    fn min_ttl(&self, fd: BorrowedFd<'_>, v6: bool, ttl: u8) -> io::Result<()>;
}

/// An RFC 2385 TCP MD5 key: 1 to 80 bytes (the kernel's `TCP_MD5SIG_MAXKEYLEN`). `Debug`
/// shows only the length so the key never reaches a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct Md5Key(Vec<u8>);

impl Md5Key {
    /// The longest key the kernel takes.
    pub const MAX_LEN: usize = 80;

    /// Checks the length; the key is used byte for byte (no terminating NUL).
    pub fn new(key: impl Into<Vec<u8>>) -> Result<Md5Key, SpeakerError> {
        let key = key.into();
        if key.is_empty() || key.len() > Md5Key::MAX_LEN {
            return Err(SpeakerError::Config(format!(
                "TCP MD5 key is {} bytes; it must be 1 to {}",
                key.len(),
                Md5Key::MAX_LEN
            )));
        }
        Ok(Md5Key(key))
    }

    /// The key bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Md5Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Md5Key(<{} bytes>)", self.0.len())
    }
}

impl SpeakerConfig {
    /// Defaults: listen on `[::]:179`, 30 s graceful-shutdown wait, no peers.
    pub fn new(asn: u32, router_id: Ipv4Addr) -> SpeakerConfig {
        SpeakerConfig {
            asn,
            router_id,
            peers: Vec::new(),
            listen: Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 179)),
            graceful_shutdown_wait: Duration::from_secs(30),
            shutdown_message: "sluice load balancer shutting down".to_string(),
            socket_options: None,
        }
    }
}

/// One peer (an upstream router).
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// The router's address (IPv4 or IPv6 transport).
    pub address: IpAddr,
    /// The router's ASN; equal to ours means iBGP.
    pub asn: u32,
    /// Destination port for outgoing connections. Default 179.
    pub port: u16,
    /// Source address of outgoing connections (and the default NEXT_HOP). Default: kernel's.
    pub local_address: Option<IpAddr>,
    /// Never connect out; wait for the router to connect.
    pub passive: bool,
    /// Hold time to propose: 0 or at least 3 s. Default 90 s.
    pub hold_time: Duration,
    /// First ConnectRetry interval (doubles per failure up to 8x). Default 5 s.
    pub connect_retry: Duration,
    /// First IdleHold interval after an error (doubles up to 64x). Default 1 s.
    pub idle_hold: Duration,
    /// GTSM (RFC 5082): send with TTL 255 and make the kernel drop segments from the peer
    /// that arrive with less (needs [`SpeakerConfig::socket_options`]).
    pub ttl_security: bool,
    /// RFC 2385 TCP MD5 key shared with the peer (needs [`SpeakerConfig::socket_options`]).
    pub md5_key: Option<Md5Key>,
    /// NEXT_HOP for IPv4 VIPs when the route has none; default: the session's local address.
    pub next_hop_v4: Option<Ipv4Addr>,
    /// Next hop for IPv6 VIPs when the route has none; default: the session's local address.
    pub next_hop_v6: Option<Ipv6Addr>,
    /// Negotiate IPv4 unicast. Default true.
    pub ipv4_unicast: bool,
    /// Negotiate IPv6 unicast. Default true.
    pub ipv6_unicast: bool,
    /// Advertise graceful restart with this restart time. Default off: a load balancer that
    /// disappears should lose its traffic after the hold time, not keep it while stale.
    pub graceful_restart: Option<Duration>,
    /// Advertise enhanced route refresh (RFC 7313). Default true.
    pub enhanced_route_refresh: bool,
}

impl PeerConfig {
    /// A peer with the defaults listed on each field.
    pub fn new(address: IpAddr, asn: u32) -> PeerConfig {
        PeerConfig {
            address,
            asn,
            port: 179,
            local_address: None,
            passive: false,
            hold_time: Duration::from_secs(90),
            connect_retry: Duration::from_secs(5),
            idle_hold: Duration::from_secs(1),
            ttl_security: false,
            md5_key: None,
            next_hop_v4: None,
            next_hop_v6: None,
            ipv4_unicast: true,
            ipv6_unicast: true,
            graceful_restart: None,
            enhanced_route_refresh: true,
        }
    }
}

/// Attributes of one announced prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteAttrs {
    /// Standard communities, each `asn << 16 | value`.
    pub communities: Vec<u32>,
    /// Large communities.
    pub large_communities: Vec<LargeCommunity>,
    /// Next hop; default per peer (its `next_hop_v4/v6`, else the session's local address).
    pub next_hop: Option<IpAddr>,
    /// MULTI_EXIT_DISC.
    pub med: Option<u32>,
    /// LOCAL_PREF on iBGP sessions (default 100; ignored on eBGP).
    pub local_pref: Option<u32>,
}

/// A snapshot of one peer for the console and metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerStatus {
    /// The router's address.
    pub address: IpAddr,
    /// The router's ASN.
    pub asn: u32,
    /// Session state.
    pub state: State,
    /// Wall-clock time the session reached Established.
    pub established_since: Option<SystemTime>,
    /// How long it has been Established.
    pub uptime: Option<Duration>,
    /// Prefixes currently advertised to the peer.
    pub prefixes_announced: usize,
    /// Prefixes the peer currently announces to us (counted, never installed).
    pub prefixes_received: usize,
    /// The last reason the session went down or a connection failed.
    pub last_error: Option<String>,
    /// Messages received.
    pub messages_in: u64,
    /// Messages sent.
    pub messages_out: u64,
    /// Malformed messages received (each ended the session with a NOTIFICATION).
    pub decode_errors: u64,
    /// UPDATEs downgraded to withdrawals by RFC 7606.
    pub treat_as_withdraw: u64,
    /// Times the session left Established.
    pub flaps: u64,
    /// Routes that could not be sent (no usable next hop or family not negotiated).
    pub unsendable_routes: u64,
}

/// Why the speaker refused to start or to take a command.
#[derive(Debug, thiserror::Error)]
pub enum SpeakerError {
    /// Configuration that cannot work.
    #[error("bgp config: {0}")]
    Config(String),
    /// The listener could not be bound.
    #[error("bgp: cannot listen on {addr}: {source}")]
    Listen {
        /// Address we tried.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A security option (TCP MD5 key, minimum TTL) could not be set on the listener.
    #[error("bgp: cannot set {option} for peer {peer} on the listener: {source}")]
    SocketOption {
        /// Which option.
        option: &'static str,
        /// The peer it was for.
        peer: IpAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The speaker was shut down.
    #[error("bgp speaker is shut down")]
    Stopped,
}

/// A running speaker. Dropping it aborts every task (sessions die without NOTIFICATION);
/// call [`Speaker::graceful_shutdown`] for an orderly exit.
#[derive(Debug)]
pub struct Speaker {
    peers: Vec<PeerHandle>,
    listener: Option<JoinHandle<()>>,
    listen_addr: Option<SocketAddr>,
    rejected: Arc<AtomicU64>,
    wait: Duration,
    message: String,
}

fn validate(cfg: &SpeakerConfig) -> Result<(), SpeakerError> {
    let err = |m: String| Err(SpeakerError::Config(m));
    if cfg.asn == 0 {
        return err("asn 0 is reserved (RFC 7607)".into());
    }
    if cfg.router_id.is_unspecified() {
        return err("router_id 0.0.0.0 is not a valid BGP identifier".into());
    }
    let mut seen = HashSet::new();
    for p in &cfg.peers {
        let a = p.address;
        if !seen.insert(a) {
            return err(format!("peer {a} listed twice"));
        }
        if p.asn == 0 {
            return err(format!("peer {a}: asn 0 is reserved"));
        }
        let h = p.hold_time;
        if h.subsec_nanos() != 0
            || h.as_secs() > u64::from(u16::MAX)
            || matches!(h.as_secs(), 1 | 2)
        {
            return err(format!(
                "peer {a}: hold time {h:?} must be 0 or whole seconds from 3 to 65535"
            ));
        }
        if !p.ipv4_unicast && !p.ipv6_unicast {
            return err(format!("peer {a}: enable ipv4_unicast or ipv6_unicast"));
        }
        if p.connect_retry.is_zero() {
            return err(format!("peer {a}: connect_retry must be positive"));
        }
        if let Some(gr) = p.graceful_restart
            && gr.as_secs() > 4095
        {
            return err(format!("peer {a}: graceful_restart {gr:?} exceeds 4095 s"));
        }
        if (p.md5_key.is_some() || p.ttl_security) && cfg.socket_options.is_none() {
            // Signing or checking nothing while the operator asked for it would leave the
            // session open to exactly what the option is meant to stop.
            return err(format!(
                "peer {a}: md5_key and ttl_security need SpeakerConfig::socket_options"
            ));
        }
        if let Some(l) = p.local_address
            && l.is_ipv4() != a.is_ipv4()
        {
            return err(format!(
                "peer {a}: local_address {l} is not of the same family"
            ));
        }
    }
    Ok(())
}

impl Speaker {
    /// Validates the config, binds the listener and starts one task per peer. Must be
    /// called inside a tokio runtime; sessions start connecting at once.
    pub async fn start(cfg: SpeakerConfig) -> Result<Speaker, SpeakerError> {
        validate(&cfg)?;
        let listener = match cfg.listen {
            Some(addr) => Some(crate::network::listen(
                addr,
                &cfg.peers,
                cfg.socket_options.as_deref(),
            )?),
            None => None,
        };
        let listen_addr = listener.as_ref().and_then(|l| l.local_addr().ok());
        let peers: Vec<PeerHandle> = cfg
            .peers
            .iter()
            .map(|p| {
                tasks::spawn_peer(
                    cfg.asn,
                    cfg.router_id,
                    p.clone(),
                    cfg.socket_options.clone(),
                )
            })
            .collect();
        let rejected = Arc::new(AtomicU64::new(0));
        let listener = listener.map(|l| tasks::spawn_listener(l, &peers, rejected.clone()));
        Ok(Speaker {
            peers,
            listener,
            listen_addr,
            rejected,
            wait: cfg.graceful_shutdown_wait,
            message: cfg.shutdown_message,
        })
    }

    fn send_all(&self, cmd: impl Fn() -> PeerCmd) -> Result<(), SpeakerError> {
        let mut ok = self.peers.is_empty();
        for p in &self.peers {
            ok |= p.send(cmd());
        }
        if ok {
            Ok(())
        } else {
            Err(SpeakerError::Stopped)
        }
    }

    /// Announces `prefix` (host bits are cleared) to every peer, now or when its session
    /// comes up; announcing it again replaces the attributes.
    pub fn announce(&self, prefix: IpNet, attrs: RouteAttrs) -> Result<(), SpeakerError> {
        let prefix = prefix.trunc();
        self.send_all(|| PeerCmd::Announce(prefix, attrs.clone()))
    }

    /// Withdraws `prefix` from every peer (a no-op if it was not announced).
    pub fn withdraw(&self, prefix: IpNet) -> Result<(), SpeakerError> {
        let prefix = prefix.trunc();
        self.send_all(|| PeerCmd::Withdraw(prefix))
    }

    /// The address the listener is bound to (useful with port 0).
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.listen_addr
    }

    /// Incoming connections refused because they came from no configured peer.
    pub fn rejected_connections(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// One status snapshot per configured peer, in configuration order.
    pub fn peers(&self) -> Vec<PeerStatus> {
        self.peers.iter().map(PeerHandle::status).collect()
    }

    /// RFC 8326 graceful shutdown: re-advertise everything with GRACEFUL_SHUTDOWN (65535:0)
    /// so routers move traffic away first, wait `graceful_shutdown_wait`, withdraw everything,
    /// send Cease/Administrative Shutdown and close. Returns when every session is closed.
    pub async fn graceful_shutdown(mut self) {
        let any_up = self.peers().iter().any(|p| p.state == State::Established);
        for p in &self.peers {
            p.send(PeerCmd::GracefulShutdown);
        }
        if any_up {
            tokio::time::sleep(self.wait).await;
        }
        if let Some(l) = self.listener.take() {
            l.abort();
        }
        let mut done = Vec::new();
        for p in &self.peers {
            let (tx, rx) = tokio::sync::oneshot::channel();
            if p.send(PeerCmd::Stop(self.message.clone(), tx)) {
                done.push(rx);
            }
        }
        for rx in done {
            let _ = rx.await;
        }
        for p in self.peers.drain(..) {
            p.join().await;
        }
    }
}

impl Drop for Speaker {
    fn drop(&mut self) {
        if let Some(l) = self.listener.take() {
            l.abort();
        }
        for p in &self.peers {
            p.abort();
        }
    }
}
