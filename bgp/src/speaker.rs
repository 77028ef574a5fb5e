//! The announcer API the appliance calls: plain config structs, [`Speaker::start`],
//! `announce`/`withdraw`, `graceful_shutdown` (RFC 8326) and per-peer status for the
//! console and metrics. The heavy lifting happens in the tasks of `tasks.rs`; this file only
//! validates input and talks to them over channels.

use crate::bfd::{BfdDecodeError, Diag, State as BfdState};
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

use crate::runtime::SpeakerRuntime;

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
            return Err(SpeakerConfigError::Md5KeyLength { len: key.len() }.into());
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
    /// The most prefixes the peer may announce to us (RFC 4486): one more ends the session
    /// with Cease/Maximum Number of Prefixes Reached. `None` (the default) keeps the session
    /// whatever the peer sends, and Sluice, which only announces, then tracks at most
    /// [`TRACKED_PREFIXES`] of them (the count saturates there), so a full table costs a
    /// bounded few megabytes.
    pub max_prefixes: Option<usize>,
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
    /// Protect the session with BFD (RFC 5880/5881 single hop). Default off.
    pub bfd: Option<BfdConfig>,
    /// Attributes every route to this peer carries besides its own. Default none.
    pub export: ExportAttrs,
}

/// What a peer's routes carry on top of each route's own attributes: a MED and a local
/// preference where the route sets none, extra AS-path prepends (eBGP only) and
/// communities.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportAttrs {
    pub med: Option<u32>,
    pub as_path_prepend: u8,
    pub local_pref: Option<u32>,
    /// Standard communities, each `asn << 16 | value`.
    pub communities: Vec<u32>,
    pub large_communities: Vec<LargeCommunity>,
}

/// BFD for one peer: the interval is both bfd.DesiredMinTxInterval and
/// bfd.RequiredMinRxInterval, so the router detects a dead appliance after about
/// `interval * multiplier` (and we detect a dead router likewise, once the router's own
/// rates are taken into account).
///
/// The BFD session starts when the BGP session first reaches Established (its local
/// address is known then) and keeps running across BGP flaps until the speaker stops, when
/// it goes AdminDown. BIRD (`bfd on`) and FRR (`neighbor X bfd`) request their side as
/// soon as the neighbour is configured and leave it Down until we answer, so the order is
/// theirs to tolerate. A BFD Up→Down while BGP is Established ends the BGP session at once
/// with Cease/BFD Down (RFC 9384 subcode 10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BfdConfig {
    /// Desired min TX = required min RX. At least 1 ms (the appliance config allows 10 ms
    /// to 10 s).
    pub interval: Duration,
    /// Detect Mult: packets that may be lost in a row, 1 to 255.
    pub multiplier: u8,
}

impl Default for BfdConfig {
    /// 300 ms × 3: FRR's and BIRD's defaults.
    fn default() -> Self {
        BfdConfig {
            interval: Duration::from_millis(300),
            multiplier: 3,
        }
    }
}

/// Why received BFD packets attributed to one peer were dropped, one counter per reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BfdDiscards {
    /// Malformed packets (RFC 5880 §6.8.6), indexed by [`BfdDecodeError::index`] and named
    /// by [`BfdDecodeError::NAMES`].
    pub malformed: [u64; BfdDecodeError::COUNT],
    /// Arrived with a TTL / hop limit other than 255 (RFC 5881 §5: not from a neighbour).
    pub bad_ttl: u64,
    /// Your Discriminator named another session, or the peer sent it from a different
    /// local address.
    pub wrong_discriminator: u64,
    /// Received while our side was AdminDown.
    pub admin_down: u64,
}

impl BfdDiscards {
    /// Every counter with its metrics label, malformed reasons first.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        BfdDecodeError::NAMES
            .iter()
            .copied()
            .zip(self.malformed.iter().copied())
            .chain([
                ("bad_ttl", self.bad_ttl),
                ("wrong_discriminator", self.wrong_discriminator),
                ("admin_down", self.admin_down),
            ])
    }

    /// All discarded packets.
    pub fn total(&self) -> u64 {
        self.iter().map(|(_, n)| n).sum()
    }
}

/// BFD as one peer sees it, for the console (`bfd` column: `state`, `detect_time`) and
/// metrics (`sluice_bgp_bfd_*`). Present in [`PeerStatus::bfd`] when the peer has BFD
/// configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdStatus {
    /// Our session state (`Down` until the BFD session starts at the first Established).
    pub state: BfdState,
    /// The neighbour's state as last heard.
    pub remote_state: BfdState,
    /// Our discriminator (0 until the session starts).
    pub local_discriminator: u32,
    /// The neighbour's discriminator (0 until heard, and after a detection timeout).
    pub remote_discriminator: u32,
    /// Negotiated periodic transmit interval (before jitter), once running.
    pub tx_interval: Option<Duration>,
    /// How long the neighbour may stay silent before we declare it dead, once heard.
    pub detect_time: Option<Duration>,
    /// Why our session last changed state (also what we send).
    pub local_diag: Diag,
    /// The diagnostic in the neighbour's last packet.
    pub remote_diag: Diag,
    /// Control packets accepted from the neighbour.
    pub packets_in: u64,
    /// Control packets sent.
    pub packets_out: u64,
    /// Times the session went from Up to Down.
    pub downs: u64,
    /// BGP sessions this BFD session took down (Up→Down while Established).
    pub bgp_resets: u64,
    /// Dropped packets by reason.
    pub discards: BfdDiscards,
    /// Why the session's sockets could not be set up, if they could not.
    pub error: Option<String>,
}

impl Default for BfdStatus {
    fn default() -> Self {
        BfdStatus {
            state: BfdState::Down,
            remote_state: BfdState::Down,
            local_discriminator: 0,
            remote_discriminator: 0,
            tx_interval: None,
            detect_time: None,
            local_diag: Diag::NoDiagnostic,
            remote_diag: Diag::NoDiagnostic,
            packets_in: 0,
            packets_out: 0,
            downs: 0,
            bgp_resets: 0,
            discards: BfdDiscards::default(),
            error: None,
        }
    }
}

/// Received prefixes a peer without `max_prefixes` has tracked (for its count) at most.
pub const TRACKED_PREFIXES: usize = 100_000;

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
            max_prefixes: None,
            md5_key: None,
            next_hop_v4: None,
            next_hop_v6: None,
            ipv4_unicast: true,
            ipv6_unicast: true,
            graceful_restart: None,
            enhanced_route_refresh: true,
            bfd: None,
            export: ExportAttrs::default(),
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
    /// Extra copies of our AS in the AS_PATH on eBGP sessions (a worse path; RFC 4271
    /// 9.1.2.2 prefers the shorter). Ignored on iBGP, whose AS_PATH we leave empty.
    pub as_path_prepend: u8,
    /// The peers (by address) the prefix goes to; `None`: every peer. The others have it
    /// withdrawn.
    pub peers: Option<Vec<IpAddr>>,
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
    /// BFD state and counters; `None` when the peer has no BFD configured.
    pub bfd: Option<BfdStatus>,
}

/// Why the speaker refused to start or to take a command.
#[derive(Debug, thiserror::Error)]
pub enum SpeakerError {
    /// Configuration that cannot work.
    #[error("bgp config: {0}")]
    Config(#[from] SpeakerConfigError),
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
    /// The speaker's own runtime thread could not be started.
    #[error("bgp: cannot start the speaker's thread: {0} (out of threads or memory?)")]
    Runtime(#[source] std::io::Error),
}

/// What is wrong with a [`SpeakerConfig`] (or a key given to it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpeakerConfigError {
    /// The local ASN is 0.
    #[error("asn 0 is reserved (RFC 7607)")]
    ReservedAsn,
    /// The router id is 0.0.0.0.
    #[error("router_id 0.0.0.0 is not a valid BGP identifier")]
    UnspecifiedRouterId,
    /// Two peers with one address.
    #[error("peer {peer} listed twice")]
    PeerTwice {
        /// The address.
        peer: IpAddr,
    },
    /// A peer's ASN is 0.
    #[error("peer {peer}: asn 0 is reserved")]
    PeerReservedAsn {
        /// The peer.
        peer: IpAddr,
    },
    /// A hold time BGP cannot carry (RFC 4271: 0 or 3 to 65535 whole seconds).
    #[error("peer {peer}: hold time {hold_time:?} must be 0 or whole seconds from 3 to 65535")]
    HoldTime {
        /// The peer.
        peer: IpAddr,
        /// What was asked for.
        hold_time: Duration,
    },
    /// Neither address family is enabled.
    #[error("peer {peer}: enable ipv4_unicast or ipv6_unicast")]
    NoFamily {
        /// The peer.
        peer: IpAddr,
    },
    /// A zero connect-retry interval.
    #[error("peer {peer}: connect_retry must be positive")]
    ConnectRetry {
        /// The peer.
        peer: IpAddr,
    },
    /// A graceful-restart time over the capability's 12 bits.
    #[error("peer {peer}: graceful_restart {restart_time:?} exceeds 4095 s")]
    RestartTime {
        /// The peer.
        peer: IpAddr,
        /// What was asked for.
        restart_time: Duration,
    },
    /// A BFD detect multiplier of 0.
    #[error("peer {peer}: bfd multiplier must be 1 to 255")]
    BfdMultiplier {
        /// The peer.
        peer: IpAddr,
    },
    /// A BFD interval outside what the packet's microsecond field carries.
    #[error("peer {peer}: bfd interval {interval:?} must be 1 ms to about 71 minutes")]
    BfdInterval {
        /// The peer.
        peer: IpAddr,
        /// What was asked for.
        interval: Duration,
    },
    /// TCP MD5 or GTSM asked for without the socket options to set them.
    #[error("peer {peer}: md5_key and ttl_security need SpeakerConfig::socket_options")]
    NoSocketOptions {
        /// The peer.
        peer: IpAddr,
    },
    /// A local address of the other family than the peer's.
    #[error("peer {peer}: local_address {local} is not of the same family")]
    LocalAddressFamily {
        /// The peer.
        peer: IpAddr,
        /// The local address.
        local: IpAddr,
    },
    /// A TCP MD5 key of the wrong length.
    #[error("TCP MD5 key is {len} bytes; it must be 1 to {max}", max = Md5Key::MAX_LEN)]
    Md5KeyLength {
        /// Its length.
        len: usize,
    },
}

/// A running speaker. Its tasks run on a thread of their own (`runtime.rs`), so its timers
/// do not wait for the embedder's runtime. Dropping it aborts every task (sessions die
/// without NOTIFICATION); call [`Speaker::graceful_shutdown`] for an orderly exit.
#[derive(Debug)]
pub struct Speaker {
    /// The speaker's thread; `None` only while [`Speaker::start`] builds the speaker on it.
    /// It stops after [`Drop::drop`] aborted the tasks.
    runtime: Option<SpeakerRuntime>,
    peers: Vec<PeerHandle>,
    bfd: Option<crate::bfd::tasks::BfdHandle>,
    listener: Option<JoinHandle<()>>,
    listen_addr: Option<SocketAddr>,
    rejected: Arc<AtomicU64>,
    wait: Duration,
    message: String,
}

/// Checks `cfg` the way [`Speaker::start`] does, without opening anything: an embedder
/// prepares a change with it before it stops the running speaker.
pub fn validate(cfg: &SpeakerConfig) -> Result<(), SpeakerConfigError> {
    use SpeakerConfigError as E;
    if cfg.asn == 0 {
        return Err(E::ReservedAsn);
    }
    if cfg.router_id.is_unspecified() {
        return Err(E::UnspecifiedRouterId);
    }
    let mut seen = HashSet::new();
    for p in &cfg.peers {
        let peer = p.address;
        if !seen.insert(peer) {
            return Err(E::PeerTwice { peer });
        }
        validate_peer(cfg, p)?;
    }
    Ok(())
}

fn validate_peer(cfg: &SpeakerConfig, p: &PeerConfig) -> Result<(), SpeakerConfigError> {
    use SpeakerConfigError as E;
    let peer = p.address;
    if p.asn == 0 {
        return Err(E::PeerReservedAsn { peer });
    }
    let h = p.hold_time;
    if h.subsec_nanos() != 0 || h.as_secs() > u64::from(u16::MAX) || matches!(h.as_secs(), 1 | 2) {
        return Err(E::HoldTime { peer, hold_time: h });
    }
    if !p.ipv4_unicast && !p.ipv6_unicast {
        return Err(E::NoFamily { peer });
    }
    if p.connect_retry.is_zero() {
        return Err(E::ConnectRetry { peer });
    }
    if let Some(gr) = p.graceful_restart
        && gr.as_secs() > 4095
    {
        return Err(E::RestartTime {
            peer,
            restart_time: gr,
        });
    }
    if let Some(b) = p.bfd {
        if b.multiplier == 0 {
            return Err(E::BfdMultiplier { peer });
        }
        if b.interval < Duration::from_millis(1) || b.interval.as_micros() > u128::from(u32::MAX) {
            return Err(E::BfdInterval {
                peer,
                interval: b.interval,
            });
        }
    }
    if (p.md5_key.is_some() || p.ttl_security) && cfg.socket_options.is_none() {
        // Signing or checking nothing while the operator asked for it would leave the
        // session open to exactly what the option is meant to stop.
        return Err(E::NoSocketOptions { peer });
    }
    if let Some(local) = p.local_address
        && local.is_ipv4() != peer.is_ipv4()
    {
        return Err(E::LocalAddressFamily { peer, local });
    }
    Ok(())
}

impl Speaker {
    /// Validates the config, starts the speaker's thread, binds the listener and starts one
    /// task per peer there. Callable from any tokio runtime; sessions start connecting at
    /// once.
    pub async fn start(cfg: SpeakerConfig) -> Result<Speaker, SpeakerError> {
        validate(&cfg)?;
        let runtime = SpeakerRuntime::new()?;
        let mut speaker = runtime.run(Speaker::start_here(cfg)).await??;
        speaker.runtime = Some(runtime);
        Ok(speaker)
    }

    /// Binds the listener and spawns every task on the current runtime (the speaker's).
    async fn start_here(cfg: SpeakerConfig) -> Result<Speaker, SpeakerError> {
        let listener = match cfg.listen {
            Some(addr) => Some(crate::network::listen(
                addr,
                &cfg.peers,
                cfg.socket_options.as_deref(),
            )?),
            None => None,
        };
        let listen_addr = listener.as_ref().and_then(|l| l.local_addr().ok());
        let bfd = cfg
            .peers
            .iter()
            .any(|p| p.bfd.is_some())
            .then(crate::bfd::tasks::spawn);
        let peers: Vec<PeerHandle> = cfg
            .peers
            .iter()
            .map(|p| {
                tasks::spawn_peer(
                    cfg.asn,
                    cfg.router_id,
                    p.clone(),
                    cfg.socket_options.clone(),
                    bfd.as_ref().map(|b| b.sender()),
                )
            })
            .collect();
        let rejected = Arc::new(AtomicU64::new(0));
        let listener = listener.map(|l| tasks::spawn_listener(l, &peers, rejected.clone()));
        Ok(Speaker {
            runtime: None,
            peers,
            bfd,
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
        let Some(only) = &attrs.peers else {
            return self.send_all(|| PeerCmd::Announce(prefix, attrs.clone()));
        };
        let mut ok = self.peers.is_empty();
        for p in &self.peers {
            ok |= p.send(if only.contains(&p.address()) {
                PeerCmd::Announce(prefix, attrs.clone())
            } else {
                PeerCmd::Withdraw(prefix)
            });
        }
        if ok {
            Ok(())
        } else {
            Err(SpeakerError::Stopped)
        }
    }

    /// Withdraws `prefix` from every peer (a no-op if it was not announced).
    pub fn withdraw(&self, prefix: IpNet) -> Result<(), SpeakerError> {
        let prefix = prefix.trunc();
        self.send_all(|| PeerCmd::Withdraw(prefix))
    }

    /// Graceful restart: the routes this process had to announce are announced, so each
    /// session may send End-of-RIB (RFC 4724), telling a router in helper mode to drop
    /// what is still stale. Without graceful restart End-of-RIB goes out at once and this
    /// does nothing; with it, a session that waits longer than the restart time sends it
    /// anyway.
    pub fn initial_routes_done(&self) -> Result<(), SpeakerError> {
        self.send_all(|| PeerCmd::InitialRoutesDone)
    }

    /// BFD packets that matched no session (unknown source or discriminator), for metrics.
    pub fn bfd_unmatched(&self) -> u64 {
        self.bfd.as_ref().map_or(0, |b| b.unmatched())
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
        let stop = Stopping {
            peers: std::mem::take(&mut self.peers),
            listener: self.listener.take(),
            bfd: self.bfd.take(),
            wait: any_up.then_some(self.wait),
            message: self.message.clone(),
        };
        // On the speaker's thread, so the wait and the last messages keep their timing too.
        match &self.runtime {
            Some(rt) => {
                let _ = rt.run(stop.run()).await;
            }
            None => stop.run().await,
        }
    }
}

/// What [`Speaker::graceful_shutdown`] takes out of the speaker to stop it.
struct Stopping {
    peers: Vec<PeerHandle>,
    listener: Option<JoinHandle<()>>,
    bfd: Option<crate::bfd::tasks::BfdHandle>,
    /// The GRACEFUL_SHUTDOWN wait, when some session was up to hear it.
    wait: Option<Duration>,
    message: String,
}

impl Stopping {
    async fn run(mut self) {
        for p in &self.peers {
            p.send(PeerCmd::GracefulShutdown);
        }
        if let Some(wait) = self.wait {
            tokio::time::sleep(wait).await;
        }
        if let Some(l) = self.listener.take() {
            // Waiting for the aborted task closes the listening socket before this returns,
            // so a speaker started next (a reload) can bind the same port.
            l.abort();
            let _ = l.await;
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
        if let Some(b) = self.bfd.take() {
            b.abort();
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
        if let Some(b) = &self.bfd {
            b.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operator reads these through the appliance's log and `sluice run` errors.
    #[test]
    fn config_errors_read_as_before() {
        let peer: IpAddr = "192.0.2.1".parse().expect("addr");
        let cases = [
            (
                SpeakerError::from(SpeakerConfigError::PeerTwice { peer }),
                "bgp config: peer 192.0.2.1 listed twice",
            ),
            (
                SpeakerConfigError::HoldTime {
                    peer,
                    hold_time: Duration::from_secs(2),
                }
                .into(),
                "bgp config: peer 192.0.2.1: hold time 2s must be 0 or whole seconds from 3 to 65535",
            ),
            (
                Md5Key::new(Vec::new()).expect_err("empty key"),
                "bgp config: TCP MD5 key is 0 bytes; it must be 1 to 80",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
