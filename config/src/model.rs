//! The validated configuration model.
//!
//! Everything here has passed validation: cross-references resolve, address families agree,
//! ranges hold. The control plane builds tables from a `Config` and never re-checks it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// A whole, validated configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub appliance: Appliance,
    pub api: Api,
    /// `None` when the file has no `[bgp]` section: the appliance then announces nothing.
    pub bgp: Option<Bgp>,
    pub health_checks: Vec<HealthCheck>,
    pub vips: Vec<Vip>,
    /// `[flood]`: shedding spoofed-source floods in the XDP program.
    pub flood: Flood,
    /// `[metrics]`: how much of the scrape is per backend.
    pub metrics: Metrics,
    /// `[fleet]`: the etcd cluster the VIPs come from; `None` runs alone on the file.
    pub fleet: Option<Fleet>,
    /// `[sync]`: connection sync with the other appliances; `None` keeps flows to itself.
    pub sync: Option<Sync>,
}

impl Config {
    /// The health check with this name.
    pub fn health_check(&self, name: &str) -> Option<&HealthCheck> {
        self.health_checks.iter().find(|c| c.name == name)
    }

    /// The VIP with this name.
    pub fn vip(&self, name: &str) -> Option<&Vip> {
        self.vips.iter().find(|v| v.name == name)
    }
}

/// `[appliance]`: identity and datapath settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appliance {
    pub name: String,
    /// Datapath interfaces: one (one-arm) or more (two-arm: uplink first).
    pub interfaces: Vec<String>,
    pub xdp_mode: XdpMode,
    /// Spin on the rings instead of sleeping in `poll` (burns a core per queue).
    pub busy_poll: bool,
    /// Forward established flows in the kernel from the XDP flow cache (the engine still
    /// decides every flow); false is pure AF_XDP. On by default.
    pub flow_cache: bool,
    /// Pin worker threads to CPUs (worker i to CPU i modulo the CPU count).
    pub pin_workers: bool,
    /// Frames in each socket's UMEM.
    pub umem_frames: u32,
    /// Descriptors in each rx/tx/fill/completion ring (power of two).
    pub ring_size: u32,
    /// Connection-table entries per worker.
    pub conntrack_capacity: u32,
    /// Embryonic entries one client address may hold in a worker's table (0: no budget).
    pub embryonic_per_source: u16,
    /// Maglev ring size (a prime) of every VIP that does not set its own; `None`: each
    /// such VIP's is the default for its pool's size (`config::default_table_size`).
    pub maglev_table_size: Option<u32>,
    /// The least time between the starts of two health commits (`health_batch`): the
    /// transitions arriving meanwhile wait and are committed as one version; zero commits
    /// each on its own.
    pub health_batch: Duration,
    /// How long the first transition after a quiet spell (no health commit within
    /// `health_batch`) waits for others before it commits (`health_batch_delay`).
    pub health_batch_delay: Duration,
    pub timeouts: Timeouts,
    /// `[appliance.icmp_limits]`: how many ICMP messages the engine originates.
    pub icmp_limits: IcmpLimits,
    /// Where the operator's overrides are kept across restarts (`state_dir`); `None` uses
    /// systemd's `$STATE_DIRECTORY`, or keeps them in memory only without it.
    pub state_dir: Option<PathBuf>,
}

/// Rate limits on the ICMP and ICMPv6 messages the engine originates (echo replies for VIPs
/// and the errors it generates, RFC 4443 section 2.4(f)): a token bucket per VIP address and
/// one per address family, each message taking a token from both. Rates are messages a
/// second for the whole appliance (each worker gets its share); 0 turns a limit off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpLimits {
    /// Per VIP address.
    pub per_vip: u32,
    /// Per address family, over all VIPs.
    pub per_family: u32,
    /// Messages a bucket may send at once after being idle.
    pub burst: u32,
}

impl Default for IcmpLimits {
    fn default() -> Self {
        // Linux's defaults for its own ICMP (icmp_msgs_per_sec 1000, burst 50) per family;
        // one VIP gets a tenth of it, so one reflected flood cannot use it all.
        Self {
            per_vip: 100,
            per_family: 1000,
            burst: 50,
        }
    }
}

/// `[flood]`: flood mode. Each CPU that runs the XDP program counts the VIP frames that may
/// open a flow; above `threshold` a second the mode switches on, and every source address
/// may then send `per_source_rate` of them a second (`per_source_burst` at once): the rest
/// is dropped in XDP, before the AF_XDP rings, so a flood's frames do not crowd out other
/// clients' first packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flood {
    /// False: the mode never switches on (`threshold` is then ignored).
    pub enabled: bool,
    /// First frames a second, per CPU, above which the mode switches on.
    pub threshold: u32,
    /// First frames a second one source address may send while the mode is on.
    pub per_source_rate: u32,
    /// How many of them it may send at once (the token bucket's depth).
    pub per_source_burst: u32,
}

impl Default for Flood {
    fn default() -> Self {
        Flood {
            enabled: true,
            threshold: 20_000,
            per_source_rate: 200,
            per_source_burst: 400,
        }
    }
}

/// How the XDP steering program attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// Native where the driver supports it, generic otherwise.
    Auto,
    Native,
    Generic,
}

/// Connection-table idle timeouts by flow state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Embryonic TCP: a SYN seen, the flow not yet established.
    pub tcp_syn: Duration,
    pub tcp_established: Duration,
    pub tcp_closing: Duration,
    /// Established UDP (an answer, or a second datagram for DR and tunnel).
    pub udp: Duration,
    /// Embryonic UDP: one datagram so far (a one-shot query, or a spoofed source).
    pub udp_new: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        // The LVS defaults (ip_vs_proto_tcp.c), shortened for SYN so a SYN flood ages fast.
        Self {
            tcp_syn: Duration::from_secs(30),
            tcp_established: Duration::from_secs(900),
            tcp_closing: Duration::from_secs(10),
            udp: Duration::from_secs(300),
            // Long enough for a slow answer or a client's retry, short enough that one-shot
            // datagrams (and floods of them) leave quickly.
            udp_new: Duration::from_secs(30),
        }
    }
}

/// `[api]`: the local API the console and `sluice ctl` use, and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Api {
    pub socket: PathBuf,
    /// Prometheus exposition address.
    pub metrics: Option<SocketAddr>,
    /// Optional TCP listener for the API, guarded by `token_file`.
    pub listen: Option<SocketAddr>,
    pub token_file: Option<PathBuf>,
    /// The TCP listener's certificate and key; `None` with `listen` set means the file said
    /// `plain_tcp = true` (the token then crosses the network in clear text).
    pub tls: Option<ApiTls>,
}

/// `[api] tls_cert` and `tls_key`: the TCP API's certificate chain and private key (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiTls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `[bgp]`: the embedded speaker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bgp {
    pub asn: u32,
    pub router_id: Ipv4Addr,
    /// How long drain and shutdown advertise GRACEFUL_SHUTDOWN before withdrawing.
    pub graceful_shutdown_wait: Duration,
    /// Communities attached to every VIP announcement.
    pub communities: Vec<Community>,
    /// `[bgp.standby]`: how standby VIPs are announced.
    pub standby: Standby,
    /// `graceful_restart = { enabled = true, restart_time = "30s" }`: RFC 4724 restart time
    /// to advertise, `None` when off (the default). While the appliance is away, routers
    /// keep its routes for this long: a restart causes no route churn, but a crashed
    /// appliance also stays in ECMP (and blackholes its share) for this long.
    pub graceful_restart: Option<Duration>,
    pub peers: Vec<Peer>,
}

/// `bfd = { enabled = true, interval = "100ms", multiplier = 3 }` in `[bgp]` (the default
/// for every peer) or in a `[[bgp.peer]]` (overrides it, key by key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bfd {
    /// Desired min TX and required min RX interval (10ms..=10s).
    pub interval: Duration,
    /// Detect multiplier (1..=255): the peer is dead after `interval * multiplier`.
    pub multiplier: u8,
}

/// `[[bgp.peer]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub address: IpAddr,
    pub asn: u32,
    pub port: u16,
    /// Proposed hold time: zero (no keepalives) or at least 3 s.
    pub hold_time: Duration,
    pub connect_retry: Duration,
    /// Local address to connect from (and to use as next hop unless `next_hop` is set).
    pub source: Option<IpAddr>,
    pub next_hop: Option<IpAddr>,
    /// Wait for the peer to connect; never connect out.
    pub passive: bool,
    /// RFC 2385 TCP MD5 signature key.
    pub password: Option<String>,
    /// RFC 5082 GTSM: require TTL 255 from the peer, send with TTL 255. Without it the
    /// session uses the system's default TTL, which also reaches multihop eBGP peers.
    pub ttl_security: bool,
    /// `max_prefixes`: the most prefixes the peer may announce; one more ends the session
    /// with Cease subcode 1 (RFC 4486). `None`: no limit (Sluice tracks at most
    /// `bgp::TRACKED_PREFIXES` of them).
    pub max_prefixes: Option<u32>,
    /// BFD for this session (RFC 5880/5881, single hop), after applying the `[bgp]`
    /// default; `None` when off.
    pub bfd: Option<Bfd>,
    /// What every route to this peer carries besides the VIP's own attributes.
    pub export: PeerExport,
}

/// A BGP community: standard (RFC 1997) or large (RFC 8092).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Community {
    Standard(u16, u16),
    Large(u32, u32, u32),
}

impl std::fmt::Display for Community {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Community::Standard(a, b) => write!(f, "{a}:{b}"),
            Community::Large(a, b, c) => write!(f, "{a}:{b}:{c}"),
        }
    }
}

pub use crate::policy::*;

/// `[[health_check]]` and its parts are the prober's own types: the health crate knows
/// nothing of this config, and the appliance hands it checks without a translation layer.
pub use checks::{CheckKind, GrpcCheck, HealthCheck, HttpCheck, HttpMethod, InitialHealth};

/// `[[vip]]`: one virtual service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vip {
    pub name: String,
    pub address: IpAddr,
    /// Zero means every port (only with `dr` or `tunnel`, which do not rewrite ports).
    pub port: u16,
    pub protocol: Protocol,
    pub mode: Mode,
    pub scheduler: Scheduler,
    pub hash: HashFields,
    /// Maglev ring size (a prime): the VIP's own `maglev_table_size`, else the appliance's,
    /// else the default for its pool's size.
    pub maglev_table_size: u32,
    /// `health_check`: the `[[health_check]]`s that decide a backend's health (one name or a
    /// list); empty treats every backend as healthy. A backend may name its own.
    pub health_checks: Vec<String>,
    /// `health_combine`: with several checks, whether a backend is up when all of them pass
    /// (keepalived's several checkers) or when any does.
    pub health_combine: Combine,
    /// `inhibit_on_failure` (backends may override it): a backend whose checks fail keeps
    /// its flows and takes no new ones, as with weight 0 in keepalived, instead of leaving.
    pub inhibit_on_failure: bool,
    /// The quorum of primary backends and what serves when it is lost (sorry backends or
    /// withdrawal; see [`Fallback`]).
    pub fallback: Fallback,
    /// How the VIP is announced besides its communities: MED, AS-path prepends, local
    /// preference, to which peers, and as the active or the standby appliance.
    pub announce: Announce,
    /// DR and tunnel: a backend is healthy only when it also answers a probe sent to the
    /// VIP the way the datapath forwards (it holds the VIP and serves the port on it).
    pub health_via_vip: bool,
    /// Local source pool for `fullnat` (same family as the VIP).
    pub snat: Vec<IpAddr>,
    /// How a FullNAT TCP VIP tells its backends the client's address.
    pub client_address: ClientAddress,
    /// `syn_proxy`: when the appliance answers the VIP's SYNs itself (NAT and FullNAT TCP
    /// VIPs; `Off` for the others).
    pub syn_proxy: SynProxy,
    /// Communities added to this VIP's announcement.
    pub communities: Vec<Community>,
    pub backends: Vec<Backend>,
    /// `scheduler_flags`: LVS scheduler flags; only `sh-port` (with `sh`) and `dh-port`
    /// (with `dh`), which add the client's (sh) or the VIP's (dh) port to the hashed address.
    pub scheduler_flags: Vec<SchedulerFlag>,
    /// `persistence`: how long after a client's last new connection its next ones still go
    /// to the same backend (like `ipvsadm -p`); `None` when off.
    pub persistence: Option<Duration>,
    /// `persistence_netmask`: the prefix length that groups clients for persistence (like
    /// `ipvsadm -M`, written as a length: 24, or 64 for IPv6); the full address by default.
    pub persistence_netmask: u8,
    /// `overflow`: what a new flow gets when every eligible backend is at its
    /// `max_connections`.
    pub overflow: Overflow,
    /// `slow_start`: how long a backend that is added or becomes healthy takes to ramp from a
    /// small share to its full weight; `None` when off (backends may override it).
    pub slow_start: Option<Duration>,
    /// `udp_one_packet`: each datagram is scheduled on its own and makes no connection-table
    /// entry (like `ipvsadm -o`); UDP VIPs only.
    pub udp_one_packet: bool,
    /// `outbound` (DR and tunnel VIPs): the source ports the backends' own connections to the
    /// outside use on the VIP address, split among them (see `lb::outbound`).
    pub outbound: Option<OutboundPorts>,
    /// `tenant_vni`: the VIP lives in a tenant's virtual network: its traffic arrives
    /// VXLAN-encapsulated with this VNI and is matched on (VNI, address, port, protocol), so
    /// tenants may reuse each other's addresses (see `lb::tenant`). Mode "tunnel" with
    /// tunnel "vxlan" only; its backends name their `vtep`.
    pub tenant_vni: Option<u32>,
    /// `[vip.quic_lb]` (UDP VIPs): route QUIC packets by the server ID in their connection
    /// IDs, so a client that changes address stays on its backend (see `crate::quic`).
    pub quic_lb: Option<crate::quic::QuicLb>,
    /// `allow` and `deny`: the sources that may reach the VIP (see [`crate::acl`]).
    pub acl: crate::acl::SourceAcl,
}

impl Vip {
    /// The connection-table zone of the VIP's flows: 0 for an ordinary VIP, the tenant's
    /// VNI with bit 24 set for a tenant VIP (VNI 0 is a valid VNI).
    pub fn zone(&self) -> u32 {
        crate::zone_of(self.tenant_vni)
    }

    /// The checks that decide backend `b`'s health: its own, else the VIP's.
    pub fn checks_of<'a>(&'a self, b: &'a Backend) -> &'a [String] {
        b.health_checks.as_deref().unwrap_or(&self.health_checks)
    }

    /// Whether backend `b` keeps its flows when its checks fail.
    pub fn inhibits(&self, b: &Backend) -> bool {
        b.inhibit_on_failure.unwrap_or(self.inhibit_on_failure)
    }
}

/// A VIP's `outbound` range and `outbound_drain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboundPorts {
    /// The ports, split among the backends that are not `disabled`.
    pub range: crate::PortRange,
    /// After a pool change, how long the old shares still receive the answers to their
    /// ports (and the ports that move are not given out).
    pub drain: Duration,
}

impl Vip {
    /// Whether `sh` or `dh` hashes a port with the address (`sh-port` / `dh-port`).
    pub fn hashes_port(&self) -> bool {
        self.scheduler_flags
            .iter()
            .any(|f| matches!(f, SchedulerFlag::ShPort | SchedulerFlag::DhPort))
    }
}

/// A `scheduler_flags` word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchedulerFlag {
    /// `sh-port`: `sh` hashes the client's address and port (ipvsadm `-b sh-port`).
    ShPort,
    /// `dh-port`: `dh` hashes the VIP's address and the destination port.
    DhPort,
}

impl SchedulerFlag {
    /// Every flag with its config spelling.
    pub const ALL: [(&'static str, SchedulerFlag); 2] = [
        ("sh-port", SchedulerFlag::ShPort),
        ("dh-port", SchedulerFlag::DhPort),
    ];

    pub fn name(self) -> &'static str {
        match self {
            SchedulerFlag::ShPort => "sh-port",
            SchedulerFlag::DhPort => "dh-port",
        }
    }
}

/// `overflow`: a new flow when every eligible backend is at its connection limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Overflow {
    /// Drop the first packet (the client's SYN retry comes back when a slot may be free).
    Drop,
    /// Answer a TCP SYN with a RST from the VIP (the client fails at once); UDP datagrams are
    /// dropped.
    Reset,
    /// Ignore the limits: schedule as if no backend had one.
    Ignore,
}

impl Overflow {
    /// Every policy with its config spelling.
    pub const ALL: [(&'static str, Overflow); 3] = [
        ("drop", Overflow::Drop),
        ("reset", Overflow::Reset),
        ("ignore", Overflow::Ignore),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Overflow::Drop => "drop",
            Overflow::Reset => "reset",
            Overflow::Ignore => "ignore",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    /// IANA protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// `client_address`: how a FullNAT TCP VIP passes the client's address to its backends,
/// which otherwise see only the SNAT address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAddress {
    /// Nothing is added.
    #[default]
    None,
    /// A PROXY protocol version 2 header (HAProxy's specification) before the client's
    /// first byte; nginx, HAProxy and Envoy read it.
    ProxyV2,
    /// The TOA TCP option (kind 254, the LVS/DPVS layout) on the client's first segments;
    /// a kernel module on the backend reads it.
    Toa,
}

impl ClientAddress {
    /// The name as written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            ClientAddress::None => "none",
            ClientAddress::ProxyV2 => "proxy-v2",
            ClientAddress::Toa => "toa",
        }
    }
}

/// `syn_proxy`: when a NAT or FullNAT TCP VIP's SYNs are answered by the appliance with a
/// SYN cookie, so that a backend (and a FullNAT port, and a connection-table entry) is
/// spent only on a client that answered the cookie (`lb::process::synproxy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SynProxy {
    /// Never: every SYN goes to a backend (what VIPs the proxy cannot serve get).
    Off,
    /// While flood mode is on (`[flood]`): the default of NAT and FullNAT TCP VIPs.
    #[default]
    Flood,
    /// Every SYN.
    Always,
}

impl SynProxy {
    /// Every setting with its config spelling.
    pub const ALL: [(&'static str, SynProxy); 3] = [
        ("off", SynProxy::Off),
        ("flood", SynProxy::Flood),
        ("always", SynProxy::Always),
    ];

    /// The name as written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            SynProxy::Off => "off",
            SynProxy::Flood => "flood",
            SynProxy::Always => "always",
        }
    }
}

/// Forwarding mode of a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// DNAT to the backend; the return path comes back through the appliance.
    Nat,
    /// DNAT plus SNAT to a local address from the VIP's `snat` pool.
    FullNat,
    /// Rewrite MAC addresses only; backends hold the VIP on a loopback.
    Dr,
    /// Encapsulate toward the backend; it answers the client directly.
    Tunnel(Encap),
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Nat => "nat",
            Mode::FullNat => "fullnat",
            Mode::Dr => "dr",
            Mode::Tunnel(_) => "tunnel",
        }
    }
}

/// Tunnel encapsulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    /// IP in IP (RFC 2003), or IPv6 in IPv6 (RFC 2473) for IPv6 backends.
    Ipip,
    /// Generic UDP Encapsulation (draft-ietf-intarea-gue), variant 1 (direct IP).
    Gue { port: u16 },
    /// VXLAN (RFC 7348).
    Vxlan { port: u16, vni: u32 },
}

impl Encap {
    pub fn name(self) -> &'static str {
        match self {
            Encap::Ipip => "ipip",
            Encap::Gue { .. } => "gue",
            Encap::Vxlan { .. } => "vxlan",
        }
    }
}

/// Backend scheduler of a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    Maglev,
    Rr,
    Wrr,
    Sh,
    Dh,
    Lc,
    Wlc,
    Sed,
    Nq,
    Lblc,
    Lblcr,
}

impl Scheduler {
    pub const ALL: [(&'static str, Scheduler); 11] = [
        ("maglev", Scheduler::Maglev),
        ("rr", Scheduler::Rr),
        ("wrr", Scheduler::Wrr),
        ("sh", Scheduler::Sh),
        ("dh", Scheduler::Dh),
        ("lc", Scheduler::Lc),
        ("wlc", Scheduler::Wlc),
        ("sed", Scheduler::Sed),
        ("nq", Scheduler::Nq),
        ("lblc", Scheduler::Lblc),
        ("lblcr", Scheduler::Lblcr),
    ];

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, s)| *s == self)
            .map(|(n, _)| *n)
            .unwrap_or("maglev")
    }
}

/// Which header fields feed the flow hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashFields {
    /// src ip, dst ip, protocol, src port, dst port.
    FiveTuple,
    /// src ip, dst ip, protocol.
    ThreeTuple,
    /// src ip, dst ip.
    TwoTuple,
}

impl HashFields {
    pub fn name(self) -> &'static str {
        match self {
            HashFields::FiveTuple => "5-tuple",
            HashFields::ThreeTuple => "3-tuple",
            HashFields::TwoTuple => "2-tuple",
        }
    }
}

/// `[[vip.backend]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub address: IpAddr,
    /// Destination port after NAT; equals the VIP port unless mapped.
    pub port: u16,
    pub weight: u32,
    pub state: BackendState,
    /// `max_connections`: connections (established and not) above which the backend takes
    /// no new flows (ipvsadm `-x`); `None`: no limit.
    pub max_connections: Option<u32>,
    /// `resume_connections`: once at the limit, the backend takes new flows again when its
    /// connections fall below this (ipvsadm `-y`); equals `max_connections` when not given.
    pub resume_connections: Option<u32>,
    /// `slow_start` for this backend, overriding the VIP's (`Some(ZERO)` turns it off).
    pub slow_start: Option<Duration>,
    /// `vtep` (backends of tenant VIPs): the underlay address of the host the backend is
    /// on, where the appliance sends its VXLAN frames and health probes; `address` is then
    /// the backend's address in the tenant's network (it may repeat in other tenants).
    pub vtep: Option<IpAddr>,
    /// `health_check` for this backend alone, replacing the VIP's (`[]`: unchecked).
    pub health_checks: Option<Vec<String>>,
    /// `inhibit_on_failure` for this backend, overriding the VIP's.
    pub inhibit_on_failure: Option<bool>,
    /// `role = "sorry"`: takes new flows only while the VIP has lost its quorum (a sorry
    /// server, or a backup pool of several).
    pub sorry: bool,
}

impl Backend {
    /// Where the datapath sends this backend's frames: its `vtep`, else its address.
    pub fn underlay(&self) -> IpAddr {
        self.vtep.unwrap_or(self.address)
    }

    /// The slow-start period that applies to this backend of `vip`, if any.
    pub fn slow_start(&self, vip: &Vip) -> Option<Duration> {
        self.slow_start.or(vip.slow_start).filter(|d| !d.is_zero())
    }
}

/// Operator-set backend state (health is separate and comes from the prober).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendState {
    /// Takes new flows.
    Active,
    /// Keeps its flows, takes no new ones.
    Drain,
    /// Takes nothing; its flows are re-chosen.
    Disabled,
}

impl BackendState {
    pub fn name(self) -> &'static str {
        match self {
            BackendState::Active => "active",
            BackendState::Drain => "drain",
            BackendState::Disabled => "disabled",
        }
    }
}

/// `[metrics]`: limits on the scrape's size. Per-VIP series are always there; per-backend
/// series (a dozen per backend) are what grows with the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Metrics {
    /// Which backends get their own series (`per_backend`).
    pub per_backend: PerBackend,
}

/// `[metrics] per_backend`: `"all"`, `"none"` (per VIP only) or a number N (the N backends
/// with the most packets get their own series; the VIP series count every backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PerBackend {
    /// Every backend.
    #[default]
    All,
    /// None: per-VIP series only.
    None,
    /// The N backends with the most packets, over all VIPs.
    Top(u32),
}

/// `[fleet]`: this appliance is a member of fleet `name`, whose configuration, versions and
/// health live in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    pub name: String,
    /// etcd client URLs.
    pub endpoints: Vec<String>,
    /// The fleet's keys are under `{prefix}/{name}/`.
    pub prefix: String,
    /// Live members that must see a backend up for the fleet to use it (capped at the
    /// members reporting); `None`: half of them rounded up (a backend goes down only when
    /// a strict majority sees it down).
    pub quorum: Option<u32>,
    /// How long a version waits for every live member to be ready before it is activated
    /// with those that are.
    pub activation_timeout: Duration,
    /// The member's etcd lease: how long after it went silent the others stop waiting for it.
    pub lease_ttl: Duration,
    /// etcd authentication: the user, and a file holding its password.
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    pub tls: Option<FleetTls>,
    /// Where the last revision this member activated is kept, for a start without etcd.
    pub state_dir: PathBuf,
}

/// `[fleet] tls_*`: PEM files for TLS to etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetTls {
    pub ca: PathBuf,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// `[sync]`: connection sync with the other appliances of an ECMP group (see the README's
/// "Connection sync"): this appliance sends the flows it establishes and ends to `peers`,
/// and keeps theirs as standby entries for the frames ECMP moves to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sync {
    /// The address and UDP port this appliance receives on and sends from.
    pub listen: std::net::SocketAddr,
    /// The other appliances' `listen` addresses.
    pub peers: Vec<std::net::SocketAddr>,
    /// A file holding the shared key (every appliance of the group has the same one): each
    /// datagram carries an HMAC-SHA256 over it with this key.
    pub key_file: PathBuf,
    /// Records a second this appliance sends at most (beyond: left out, counted).
    pub rate: u32,
    /// Standby entries kept at most (beyond: refused, counted).
    pub standby: u32,
    /// How long a starting appliance waits for its peers' bulk transfer before it announces
    /// its VIPs anyway (a peer that does not answer is not waited for forever).
    pub catch_up_timeout: Duration,
    /// This appliance's own FullNAT source addresses among the VIPs' `snat` pools: it takes
    /// ports only on these, and with `[bgp]` announces them, and the pools' other addresses
    /// with `[bgp.standby]`'s worse path, so the replies to a lost appliance's flows reach a
    /// survivor. Empty: the whole pools are this appliance's (no SNAT route announced).
    pub snat: Vec<IpAddr>,
}
