//! The local API's JSON documents, shared by the appliance (which serves them), `sluice ctl`
//! and the console (which read them). They live here, not in the appliance, so the console
//! depends on the API and never on the appliance's tables.
//!
//! Every counter is a running total since the appliance started (`_total` in Prometheus
//! terms); clients compute rates from two samples. Addresses travel as strings
//! (`192.0.2.10`, `2001:db8::10`), backends as `address:port` (`[2001:db8::11]:80`).

use serde::{Deserialize, Serialize};

/// `GET /v1/status`: the appliance at a glance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// `[appliance] name`.
    pub appliance: String,
    /// The sluice release.
    pub release: String,
    /// Seconds since `sluice run` started.
    pub uptime_seconds: u64,
    /// The config file the appliance runs.
    pub config_path: String,
    /// Config (table) version: increases with every commit.
    pub config_version: u64,
    /// True when every worker runs `config_version`.
    pub synced: bool,
    /// The digest of `config_version`'s forwarding tables (VIPs, backends with weight,
    /// state and health, Maglev rings), 16 hex digits: two appliances of one release with
    /// equal fingerprints forward the same way. The same digest as the fleet document's.
    #[serde(default)]
    pub table_fingerprint: String,
    /// Milliseconds the last commit took to reach every worker (`None` while it has not).
    pub sync_lag_ms: Option<f64>,
    /// Per worker, the version it runs.
    pub workers: Vec<WorkerStatus>,
    /// Datapath interfaces.
    pub interfaces: Vec<Interface>,
    /// Sums over the workers.
    pub totals: Totals,
    /// Drops by reason (names as in `sluice trace`), sums over the workers.
    pub drops: Vec<Count>,
    /// Connection-table entries and capacity, summed over the workers.
    pub conntrack_entries: u64,
    pub conntrack_capacity: u64,
    /// New flows answered from the Maglev ring because a connection table was full.
    pub conntrack_fallbacks: u64,
    /// The connection tables by state, and what admitted, promoted and removed entries.
    #[serde(default)]
    pub conntrack: Conntrack,
    /// True when `[bgp]` is configured.
    pub bgp: bool,
    /// The XDP flow cache (`[appliance] flow_cache`), `None` when it is off.
    pub flow_cache: Option<FlowCache>,
    /// Flood mode (`[flood]`): `None` before the datapath's counters were first read.
    #[serde(default)]
    pub flood: Option<Flood>,
    /// Persistence, connection limits and one-packet UDP (the LVS features), summed over
    /// the workers.
    #[serde(default)]
    pub lvs: Lvs,
    /// How this process took over from the one before it (`sluice run --takeover`, or a
    /// restart), `None` when it started cold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takeover: Option<Takeover>,
    /// Connection sync (`[sync]`), `None` when it is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncStatus>,
}

/// Connection sync with the other appliances of an ECMP group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncStatus {
    /// True while this appliance waits for its peers' flows (it announces no VIP).
    pub catching_up: bool,
    /// Peers' flows held as standby entries.
    pub standby_entries: u64,
    /// Standby flows a worker took over.
    pub standby_taken: u64,
    /// Records sent and received (established flows), and ended flows each way.
    pub records_sent: u64,
    pub records_received: u64,
    pub ended_sent: u64,
    pub ended_received: u64,
    /// Datagrams refused: another key, garbage, replays, from no peer.
    pub auth_failures: u64,
    pub garbage: u64,
    pub replays: u64,
    pub unknown_peer: u64,
    /// Flows not synced (full queue, rate spent, send errors, standby table full).
    pub left_out: u64,
    /// Milliseconds between a peer sending its newest accepted datagram and its arrival.
    pub lag_ms: u64,
}

/// A takeover's outcome: the connections the process before this one handed over.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Takeover {
    /// The table version the process before ran.
    pub from_version: u64,
    /// Flows it handed over.
    pub flows_handed: u64,
    /// Of those, flows in this process's tables.
    pub flows_carried: u64,
    /// Flows refused (their VIP is gone or changed mode, expired, no room): lost.
    pub flows_lost: u64,
    /// Of the carried flows, those whose XDP flow-cache entries went on forwarding.
    pub flows_cached: u64,
    /// Milliseconds in which no engine ran (the tables asked for until this process's
    /// workers ran): only the flow cache forwarded, other frames were held.
    pub held_ms: u64,
    /// Milliseconds from the first question to the old process's exit.
    pub total_ms: u64,
    /// Why the state could not be used (the process started cold), if it could not.
    #[serde(default)]
    pub cold: Option<String>,
}

impl std::fmt::Display for Takeover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cold {
            Some(why) => write!(
                f,
                "took over from version {} cold: {why}",
                self.from_version
            ),
            None => write!(
                f,
                "took over from version {}: {} of {} flows carried ({} lost, {} in the flow cache), engines held {} ms, {} ms in all",
                self.from_version,
                self.flows_carried,
                self.flows_handed,
                self.flows_lost,
                self.flows_cached,
                self.held_ms,
                self.total_ms
            ),
        }
    }
}

/// The LVS features' counters: the shared persistence table, connection limits and their
/// overflow, one-packet UDP scheduling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lvs {
    /// Live entries in the persistence table (clients remembered), and its size.
    pub persistence_entries: u64,
    pub persistence_capacity: u64,
    /// New connections of persistent VIPs that went to the client's remembered backend.
    pub persistence_hits: u64,
    /// New connections of persistent VIPs scheduled afresh (no entry, or its backend was
    /// disabled, unhealthy, removed or full).
    pub persistence_misses: u64,
    /// Live entries given up for another client (the table's set was full).
    pub persistence_evictions: u64,
    /// New flows whose scheduled backend was at its `max_connections` and went to another.
    pub limit_skips: u64,
    /// New flows refused because every backend was at its limit (`overflow` "drop" or
    /// "reset"; the `overflow` drop reason).
    pub overflow_refused: u64,
    /// Of those, SYNs answered with a RST (`overflow = "reset"`).
    pub overflow_resets: u64,
    /// New flows sent past every backend's limit (`overflow = "ignore"`).
    pub overflow_ignored: u64,
    /// Datagrams of `udp_one_packet` VIPs (each scheduled on its own, no flow entry).
    pub one_packet: u64,
}

/// The connection tables, summed over the workers: entries per state (embryonic entries
/// are a SYN or one datagram that has not earned established yet) and counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conntrack {
    /// Entries now: embryonic TCP (a SYN seen).
    pub embryonic_tcp: u64,
    pub established_tcp: u64,
    /// FIN or RST seen.
    pub closing_tcp: u64,
    /// Entries now: embryonic UDP (one datagram seen).
    pub embryonic_udp: u64,
    pub established_udp: u64,
    /// Entries created.
    pub inserted: u64,
    /// Embryonic entries promoted to established.
    pub promoted: u64,
    /// Entries removed at their idle timeout.
    pub expired: u64,
    /// Live embryonic entries evicted to make room for new flows.
    pub evicted_embryonic: u64,
    /// Live closing entries evicted to make room for new flows.
    pub evicted_closing: u64,
    /// New flows refused an entry: the table was full of established flows.
    pub table_full: u64,
    /// TCP segments other than a SYN without an entry: answered from the Maglev ring with
    /// no state (FullNAT: dropped).
    pub stateless_no_entry: u64,
    /// New flows answered from the Maglev ring because the table was full (FullNAT:
    /// dropped).
    pub stateless_table_full: u64,
    /// FullNAT new flows dropped for want of a free local port.
    pub snat_exhausted: u64,
    /// FullNAT local ports held now (by live flows, and by removed ones until their kernel
    /// flow-cache entries are gone).
    #[serde(default)]
    pub snat_ports: u64,
}

/// Flood mode: the XDP program sheds first packets of sources over their rate while a
/// CPU sees more first packets than `[flood] threshold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flood {
    /// CPUs in flood mode now (0: the mode is off).
    pub active_cpus: u32,
    /// VIP frames that may open a flow, seen by the XDP program.
    pub first_packets: u64,
    /// Of those, passed on while the mode was on (their source inside its rate).
    pub admitted: u64,
    /// Dropped in XDP while the mode was on (their source over its rate).
    pub shed: u64,
    /// Times a CPU switched the mode on, and off.
    pub switched_on: u64,
    pub switched_off: u64,
    /// First packets from sources the bucket map had no room for (let through).
    pub no_room: u64,
    /// Flows that proved themselves in flood mode (their first frame forwarded by the flow
    /// cache, or their first FIN or RST while the cache held them) and gave tokens back to
    /// their source's bucket.
    #[serde(default)]
    pub refunded: u64,
    /// First packets of DR VIPs the XDP program answered itself, without state, from the
    /// VIP's Maglev ring while the mode was on.
    #[serde(default)]
    pub stateless: u64,
}

/// The XDP flow cache: established flows the kernel forwards without the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowCache {
    /// Frames the kernel forwarded from the cache.
    pub hits: u64,
    /// Frames steered to the engine while the cache was on.
    pub misses: u64,
    /// Entries now.
    pub entries: u64,
}

/// One datapath worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub id: u32,
    /// The table version it runs.
    pub version: u64,
    /// Frames it received from its sockets.
    #[serde(default)]
    pub rx_packets: u64,
    /// Frames it transmitted.
    #[serde(default)]
    pub tx_packets: u64,
    /// New flows it chose a backend for.
    #[serde(default)]
    pub new_flows: u64,
    /// Its connection-table entries.
    #[serde(default)]
    pub conntrack_entries: u64,
    /// Frames it handed to the worker owning their flow (FullNAT return traffic that
    /// arrived on its queue).
    #[serde(default)]
    pub handed_off: u64,
    /// Frames it dropped because the handoff ring toward their owner was full.
    #[serde(default)]
    pub handoff_ring_full: u64,
    /// Frames other workers handed to it.
    #[serde(default)]
    pub handoff_received: u64,
}

/// One datapath interface.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    /// `native` or `generic` XDP.
    pub xdp_mode: String,
    /// AF_XDP zero-copy (false: copy mode).
    pub zero_copy: bool,
    /// In copy mode, the kernel's reason for refusing zero-copy (e.g. the driver has no
    /// zero-copy support); absent when zero-copy is bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero_copy_refused: Option<String>,
    /// Queues served (one AF_XDP socket and worker each).
    pub queues: u32,
    /// How FullNAT return traffic reaches the worker that owns its flow: `one worker`,
    /// `ntuple (N rules)`, or `handoff: ...` with the reason the NIC does not steer it.
    #[serde(default)]
    pub return_steering: String,
    /// Whether it forwards, as the datapath watch last saw it: `forwarding`, `link_down`,
    /// `detached`, `foreign`, `unbound` or `missing`.
    #[serde(default)]
    pub state: String,
    /// The state in words (who holds the interface when another program does).
    #[serde(default)]
    pub state_detail: String,
    /// What the kernel dropped or refused at the interface's AF_XDP sockets (their
    /// `XDP_STATISTICS`, summed; they restart at zero when the sockets are bound anew).
    #[serde(default)]
    pub socket_drops: SocketDrops,
}

/// An interface's AF_XDP sockets' kernel counters (`XDP_STATISTICS`): frames the steering
/// program sent to a socket that never reached the engine, and descriptors the kernel
/// refused. Each is a frame lost before any of Sluice's own drop reasons could count it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketDrops {
    /// Frames dropped because the socket's receive ring was full (the worker fell behind).
    pub rx_ring_full: u64,
    /// Times a frame arrived while the fill ring was empty (no free frame to receive into).
    pub rx_fill_ring_empty: u64,
    /// Frames dropped for any other reason (e.g. larger than a frame).
    pub rx_dropped: u64,
    /// Receive descriptors the kernel found invalid.
    pub rx_invalid: u64,
    /// Transmit descriptors the kernel found invalid (a worker's bug).
    pub tx_invalid: u64,
}

/// Packet and byte totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Frames received by the workers.
    pub rx_packets: u64,
    /// Frames the workers transmitted.
    pub tx_packets: u64,
    /// Frames handed to the kernel (not for a VIP).
    pub passed_packets: u64,
    /// Frames dropped (all reasons).
    pub dropped_packets: u64,
    /// Bytes of VIP traffic (both directions).
    pub vip_bytes: u64,
}

/// A named counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count {
    pub name: String,
    pub value: u64,
}

/// `GET /v1/vips` (a list) and `GET /v1/vips/{vip}`. A tenant VIP (`tenant_vni`) may share
/// its address, port and protocol with another tenant's VIP or an underlay VIP: the API
/// names VIPs by `name` alone, never by address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vip {
    pub name: String,
    pub address: String,
    /// 0: every port.
    pub port: u16,
    /// `tcp` or `udp`.
    pub protocol: String,
    /// `nat`, `fullnat`, `dr`, `tunnel`.
    pub mode: String,
    /// Tunnel encapsulation (`ipip`, `gue`, `vxlan`) for `tunnel`.
    pub encap: Option<String>,
    pub scheduler: String,
    /// `5-tuple`, `3-tuple`, `2-tuple`.
    pub hash: String,
    /// The VIP's address is announced over BGP now.
    pub announced: bool,
    /// An operator withdrew the VIP (`POST /v1/vips/{vip}/withdraw`).
    pub withdrawn_by_operator: bool,
    /// Backends that may take new flows (healthy, active, weight > 0).
    pub backends_eligible: u32,
    /// Backends the prober finds up (or that have no check).
    pub backends_healthy: u32,
    pub backends_total: u32,
    pub packets: u64,
    pub bytes: u64,
    pub new_flows: u64,
    /// Connection-table entries (all workers).
    pub active_flows: u64,
    /// Largest ring share of an eligible backend divided by its ideal (weighted) share;
    /// 1.0 is perfect, `None` without eligible backends.
    pub hash_imbalance: Option<f64>,
    /// `scheduler_flags` (`sh-port`, `dh-port`).
    #[serde(default)]
    pub scheduler_flags: Vec<String>,
    /// `persistence` in seconds, `None` when off.
    #[serde(default)]
    pub persistence_seconds: Option<u64>,
    /// `persistence_netmask` (a prefix length) when persistence is on.
    #[serde(default)]
    pub persistence_netmask: Option<u8>,
    /// `udp_one_packet`: every datagram scheduled on its own.
    #[serde(default)]
    pub udp_one_packet: bool,
    /// `tenant_vni`: the VIP lives in this tenant's virtual network (its traffic arrives in
    /// VXLAN with this VNI); absent for the underlay's VIPs. Two tenants may both have a VIP
    /// on `address:port`, so a VIP is only ever named by `name` (every `{vip}` in a path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_vni: Option<u32>,
    /// Its quorum (`quorum`, `on_quorum_lost`): `up`, `sorry` (the sorry backends take the
    /// new flows), `withdrawn` (withdrawn from BGP) or `lost` (the primaries still up serve).
    #[serde(default = "up")]
    pub quorum: String,
    /// `active`, or `standby` (announced with the worse path of `[bgp.standby]`).
    #[serde(default = "active")]
    pub role: String,
}

fn up() -> String {
    "up".into()
}

fn active() -> String {
    "active".into()
}

/// `GET /v1/vips/{vip}/backends`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Backend {
    /// `address:port`, the key the write endpoints take.
    pub id: String,
    pub address: String,
    pub port: u16,
    /// Operator state: `active`, `drain`, `disabled`.
    pub state: String,
    /// True when the state comes from the API, not the config file.
    pub state_overridden: bool,
    /// `up`, `down`, `unknown` (not decided yet) or `unchecked` (the VIP has no check): this
    /// appliance's own probes (on a fleet member, see `fleet_health`).
    pub health: String,
    /// The reason of the last health transition or failure (`timeout`, `status 503`...).
    pub health_reason: Option<String>,
    pub weight: u32,
    /// True when the weight comes from the API, not the config file.
    pub weight_overridden: bool,
    /// May take new flows.
    pub eligible: bool,
    /// Share of the VIP's Maglev ring (0..1).
    pub ring_share: f64,
    /// The share its weight asks for among the eligible backends (0..1).
    pub ideal_share: f64,
    /// Connection-table entries pointing at it.
    pub active_flows: u64,
    pub packets: u64,
    pub bytes: u64,
    /// Of `active_flows`, established TCP (ipvsadm's ActiveConn) and the rest: embryonic,
    /// closing and UDP entries (InActConn).
    #[serde(default)]
    pub active_connections: u64,
    #[serde(default)]
    pub inactive_connections: u64,
    /// `max_connections` and `resume_connections`, when it has a limit.
    #[serde(default)]
    pub max_connections: Option<u32>,
    #[serde(default)]
    pub resume_connections: Option<u32>,
    /// At its connection limit now: takes no new flows until below `resume_connections`.
    #[serde(default)]
    pub full: bool,
    /// The weight the schedulers use now: `weight`, or less while slow start ramps it.
    #[serde(default)]
    pub effective_weight: u32,
    /// While slow start ramps it: when it reaches `weight` (Unix time, milliseconds).
    #[serde(default)]
    pub ramping_until_ms: Option<u64>,
    /// New flows scheduled to it since the appliance started (ipvsadm's Conns).
    #[serde(default)]
    pub new_flows: u64,
    /// A tenant VIP's backend: the underlay address of its host (`vtep`), where its VXLAN
    /// frames and health probes go; `address` is then its address in the tenant's network.
    /// Absent for the underlay's VIPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtep: Option<String>,
    /// `primary`, or `sorry` (takes new flows only while its VIP has lost its quorum).
    #[serde(default = "primary")]
    pub role: String,
    /// Its agent check's last answer (`ready 50%`, `drain`, `maint`), applied over the
    /// operator's weight and state; absent without an agent check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// On a fleet member: the fleet's verdict (`up`, `down`), the quorum over every live
    /// member's probes, which this member's tables follow; `health` is then this member's
    /// own probes. Absent off a fleet, where `health` is what the tables follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_health: Option<String>,
}

fn primary() -> String {
    "primary".into()
}

/// `GET /v1/bgp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bgp {
    /// False when `[bgp]` is not configured (then everything below is empty).
    pub enabled: bool,
    pub asn: Option<u32>,
    pub router_id: Option<String>,
    /// Prefixes announced now (`192.0.2.10/32`).
    pub announced: Vec<String>,
    pub peers: Vec<Peer>,
}

/// One BGP peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Peer {
    pub address: String,
    pub asn: u32,
    /// `Idle`, `Connect`, `Active`, `OpenSent`, `OpenConfirm`, `Established`.
    pub state: String,
    pub uptime_seconds: Option<u64>,
    pub prefixes_announced: u64,
    pub prefixes_received: u64,
    pub last_error: Option<String>,
    pub flaps: u64,
    /// BFD session state (`Up`, `Down`, `Init`, `AdminDown`), `None` without BFD.
    pub bfd: Option<String>,
}

/// `GET /v1/events`: newest last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Increases by one per event; `?since=N` returns events after N.
    pub seq: u64,
    /// Unix time, milliseconds.
    pub time_ms: u64,
    /// `health`, `bgp`, `commit`, `operator`, `reload`, `drops`.
    pub kind: String,
    pub message: String,
}

/// Reply of every write endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Commit {
    /// The version the change produced (the running one when nothing changed).
    pub version: u64,
    /// Every worker ran `version` before the reply was sent.
    pub synced: bool,
    /// What happened, for humans.
    pub message: String,
}

/// Body of `PUT /v1/vips/{vip}/backends/{backend}/weight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetWeight {
    pub weight: u32,
}

/// Every 4xx/5xx reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub error: String,
    /// The request field (path segment, query parameter or body key) at fault.
    pub field: Option<String>,
    /// Every error of a rejected config (reload), `key: message`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// Backend actions of `POST /v1/vips/{vip}/backends/{backend}/{action}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendAction {
    Drain,
    Undrain,
    Disable,
    Enable,
}

impl BackendAction {
    pub const ALL: [BackendAction; 4] = [
        BackendAction::Drain,
        BackendAction::Undrain,
        BackendAction::Disable,
        BackendAction::Enable,
    ];

    /// The path segment.
    pub fn name(self) -> &'static str {
        match self {
            BackendAction::Drain => "drain",
            BackendAction::Undrain => "undrain",
            BackendAction::Disable => "disable",
            BackendAction::Enable => "enable",
        }
    }

    pub fn parse(s: &str) -> Option<BackendAction> {
        Self::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// `GET /v1/vips/{vip}/outbound`: a DR or tunnel VIP's `outbound` range and each backend's
/// share of it, as it stands now (during a drain, only the ports a backend owns both before
/// and after the pool change).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outbound {
    pub vip: String,
    pub address: String,
    /// `tcp` or `udp`: the protocol of the connections the range serves.
    pub protocol: String,
    /// The whole range, `FIRST-LAST`.
    pub range: String,
    /// `outbound_drain`.
    pub drain_seconds: f64,
    /// Seconds until the drain under way ends; `None` when the shares are settled.
    pub drain_ends_in_seconds: Option<f64>,
    /// Every backend, in config order.
    pub backends: Vec<OutboundShare>,
}

/// One backend's outbound ports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboundShare {
    pub address: String,
    /// The ports it may open connections from now, `FIRST-LAST`; `None`: none (disabled,
    /// more backends than ports, or a newcomer waiting for a drain to end).
    pub ports: Option<String>,
    /// The nftables commands that make its new connections leave from the VIP and these
    /// ports (empty without ports).
    pub snat: Vec<String>,
}

/// Body of `POST /v1/capture`: which frames to capture and when to stop. The reply is the
/// frames as pcapng (`application/x-pcapng`), one interface per stage and direction: what the
/// XDP program received and forwarded itself (the flow cache), what the engine received and
/// sent. At least one of `vip` and `endpoints` names what to capture; a frame is captured when
/// either of its addresses (with its port, where one is given) matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureRequest {
    /// A VIP by name: its address and port, its backends (the return traffic of NAT and
    /// FullNAT) and its SNAT addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vip: Option<String>,
    /// Further endpoints, `ADDR`, `ADDR:PORT` or `[V6]:PORT`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<String>,
    /// Stop after this many frames (1..=10000).
    pub count: u32,
    /// Stop after this long, in milliseconds (1..=600000).
    pub duration_ms: u64,
    /// Bytes kept of each frame (64..=2048).
    pub snaplen: u32,
}

/// The response headers of `POST /v1/capture` beside its pcapng body.
pub mod capture_headers {
    /// Frames captured (the body's packet blocks).
    pub const FRAMES: &str = "x-sluice-capture-frames";
    /// Frames that matched but were lost: the XDP program's ring or the engine's queue was
    /// full.
    pub const LOST: &str = "x-sluice-capture-lost";
}
