//! The per-packet step: classify a frame, pick or recall its backend, rewrite it in place.
//!
//! [`process`] is what every datapath worker runs on every received frame. It reads only the
//! immutable [`Tables`], the worker's own [`ConnTable`] and [`WorkerState`], and the `now`
//! it is given; it never allocates (except once after a table swap, in
//! [`WorkerState::adopt`]), never locks and never formats. This file dispatches and keeps
//! the verdicts and counters; each concept has its own file:
//! `headers` (what is read from a frame), `flow` (which backend), `nat`, `fullnat`, `dr`,
//! `tunnel` (one per mode), `tenant` (VXLAN arrivals for tenant VIPs), `icmp`, `fragment`
//! and `fragtable`.
//!
//! Policies decided here (each has a golden fixture):
//! - **Validation.** Ethernet (up to two VLAN tags, kept on output), IPv4 (version, IHL,
//!   total length, header checksum) and IPv6 (payload length, extension-header walk) are
//!   checked; TCP/UDP headers must fit. Bad input is `Drop(reason)`, never a panic. L4
//!   checksums are not verified (they are patched incrementally, so a bad one stays bad and
//!   the endpoint drops it).
//! - **Not ours.** ARP, ND, non-IP, and IP traffic that neither targets a VIP nor is return
//!   traffic of a NAT/FullNAT VIP is `Pass` (to the kernel). NAT return traffic without a
//!   flow is rewritten statelessly (the backend's VIP from the tables) unless it is
//!   addressed to one of the appliance's own addresses ([`Tables::set_local_addresses`]).
//! - **TTL.** NAT and FullNAT route, so they decrement TTL / hop limit; a packet arriving
//!   with TTL <= 1 toward a VIP is answered with ICMP time-exceeded from the VIP (counted in
//!   [`DropReason::TtlExceeded`] too); return traffic with TTL <= 1 is dropped. DR and tunnel
//!   leave the inner TTL alone: the appliance is a bump in the wire there, like Katran.
//! - **Source lists.** A VIP's `allow` and `deny` (`lb::acl`) are checked before any state:
//!   a denied client's frames (fragments and echo requests too) and the replies toward it
//!   are `Drop(Denied)`, counted per VIP and list; a swap to lists that deny a source ends
//!   its flows ([`WorkerState::adopt`]).
//! - **Fragments.** Fragments of DR and tunnel VIPs go statelessly by 3-tuple Maglev; those
//!   of NAT and FullNAT VIPs (and their replies) follow their first fragment's decision,
//!   remembered in the worker's fragment table (see `fragment` and `fragtable`).
//! - **ICMP.** Echo requests to any VIP address are answered, and time-exceeded sent,
//!   within the ICMP rate limits (`ratelimit`: per VIP address and per family); errors quoting a VIP flow go to
//!   that flow's backend (see `icmp`).
//! - **Tunnels.** Outer TTL / hop limit is 64. The outer source address varies with the flow
//!   hash (low 16 bits for IPv4, low 32 for IPv6, within [`TunnelSource`]) and GUE/VXLAN use a
//!   flow-hash source port in 49152..=65535, so the backend's RSS spreads flows. The IPv4
//!   outer header copies DF from the inner header (always DF for inner IPv6, which routers
//!   never fragment) so path-MTU discovery keeps working end to end; the appliance does not
//!   fragment the outer packet: it clamps the MSS of SYNs and answers frames that would not
//!   fit the egress MTU with ICMP too-big (see `mss`). Outer UDP checksums
//!   are zero over IPv4 (RFC 7348, draft-ietf-intarea-gue) and computed over IPv6.

#[cfg(test)]
mod acl_tests;
mod admit;
#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod ct_tests;
mod dr;
mod flow;
mod forward;
mod fragment;
mod fragtable;
mod fullnat;
mod headers;
mod icmp;
#[cfg(test)]
mod lvs_tests;
mod mss;
mod nat;
mod outbound;
mod owner;
mod proxyhdr;
mod quic;
#[cfg(test)]
mod quic_tests;
mod ratelimit;
#[cfg(test)]
mod record_tests;
mod reset;
mod standby;
#[cfg(test)]
mod standby_tests;
mod synproxy;
#[cfg(test)]
mod synproxy_tests;
mod tcpopt;
mod tenant;
#[cfg(test)]
mod tests;
mod toa;
mod tunnel;

pub use admit::publish_all_counts;
pub use flow::{Choice, Load, choose_backend};
pub use fragtable::{FragOwners, FragStats, FragTable};
pub use owner::{nat_owner, owner};
pub use ratelimit::IcmpLimiter;
pub use synproxy::{CookieKey, OUR_WSCALE as SYN_PROXY_WSCALE, cookie as syn_cookie};
pub use tenant::VXLAN_PORT as TENANT_VXLAN_PORT;
pub use tunnel::{encapsulate_probe, tunnel_source};

use crate::conntrack::{Carry, ConnTable, FlowState};
use crate::egress::Miss;
use crate::frame::Frame;
use crate::hash::FlowKey;
use crate::persist::PersistTable;
use crate::sched::SchedState;
#[cfg(doc)]
use crate::tables::TunnelSource;
use crate::tables::{NextHop, Tables};
use config::Mode;
use headers::{Ip, L4, parse_ip, parse_l4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use wire::{EthernetFrame, IpProtocol, l3_offset};

/// Bytes the datapath reserves in front of every frame for encapsulation: outer IPv6 (40) +
/// UDP (8) + VXLAN (8) + inner Ethernet (14) = 70 at most; 256 matches XDP's headroom.
pub const HEADROOM: usize = 256;

/// Outer TTL / hop limit of encapsulated packets and of packets the appliance originates.
pub const OUTER_TTL: u8 = 64;
/// A flow's backend slot when its backend left the tables.
const NONE: u32 = u32::MAX;

/// Why a frame was dropped; indexes [`WorkerState::drops`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// A header is cut short.
    Truncated,
    /// A header field is invalid (version, header length).
    Malformed,
    /// Length fields contradict each other or the frame.
    BadLength,
    /// IPv4 header checksum does not verify.
    BadChecksum,
    /// More VLAN tags or IPv6 extension headers than supported.
    TooManyHeaders,
    /// The VIP has no backend that may take the flow.
    NoBackend,
    /// TTL / hop limit would reach zero.
    TtlExceeded,
    /// The next hop's MAC is not (yet) in the kernel's neighbour table.
    NoNeighbor,
    /// No route covers the destination (or an unreachable or blackhole route does).
    NoRoute,
    /// The route toward the destination leaves by an interface the datapath does not drive.
    RouteNotDatapath,
    /// A later fragment of a NAT/FullNAT datagram whose first fragment was not seen (or
    /// came longer than the fragment table's timeout ago).
    FragmentNoFirst,
    /// Non-first fragment for an address whose VIPs differ only by port.
    FragmentAmbiguous,
    /// FullNAT found no free local port.
    SnatExhausted,
    /// FullNAT return traffic (or FullNAT new flow with a full table) without a flow.
    NoFlow,
    /// ICMP error quoting nothing we forward.
    IcmpNoFlow,
    /// Not enough headroom or tailroom to rewrite.
    NoRoom,
    /// VIP and backend families differ where the mode cannot translate.
    FamilyMismatch,
    /// An echo request over the ICMP rate limits (`[appliance.icmp_limits]`).
    IcmpRateLimited,
    /// A fragment overlapping one already forwarded (or contradicting the datagram's end).
    FragmentOverlap,
    /// A fragment past 65,535 bytes, or of a datagram in too many pieces.
    FragmentOversize,
    /// An encapsulated frame over the egress MTU (answered with ICMP too-big when the
    /// client allows no fragmentation).
    TooBig,
    /// A new flow while every eligible backend of its VIP is at its `max_connections`
    /// (`overflow = "drop"` or `"reset"`).
    Overflow,
    /// The source is not allowed to reach the VIP (its `allow` and `deny` lists, `lb::acl`).
    Denied,
    /// A client segment of a flow the SYN proxy opened, before its backend answered (the
    /// client sends it again).
    ProxyOpening,
}

impl DropReason {
    /// Number of reasons (the counter array length).
    pub const COUNT: usize = 24;

    /// All reasons in index order.
    pub const ALL: [DropReason; DropReason::COUNT] = [
        DropReason::Truncated,
        DropReason::Malformed,
        DropReason::BadLength,
        DropReason::BadChecksum,
        DropReason::TooManyHeaders,
        DropReason::NoBackend,
        DropReason::TtlExceeded,
        DropReason::NoNeighbor,
        DropReason::NoRoute,
        DropReason::RouteNotDatapath,
        DropReason::FragmentNoFirst,
        DropReason::FragmentAmbiguous,
        DropReason::SnatExhausted,
        DropReason::NoFlow,
        DropReason::IcmpNoFlow,
        DropReason::NoRoom,
        DropReason::FamilyMismatch,
        DropReason::IcmpRateLimited,
        DropReason::FragmentOverlap,
        DropReason::FragmentOversize,
        DropReason::TooBig,
        DropReason::Overflow,
        DropReason::Denied,
        DropReason::ProxyOpening,
    ];

    /// Counter index.
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }

    /// Metric label.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::Malformed => "malformed",
            DropReason::BadLength => "bad_length",
            DropReason::BadChecksum => "bad_checksum",
            DropReason::TooManyHeaders => "too_many_headers",
            DropReason::NoBackend => "no_backend",
            DropReason::TtlExceeded => "ttl_exceeded",
            DropReason::NoNeighbor => "no_neighbor",
            DropReason::NoRoute => "no_route",
            DropReason::RouteNotDatapath => "route_not_datapath",
            DropReason::FragmentNoFirst => "fragment_no_first",
            DropReason::FragmentAmbiguous => "fragment_ambiguous",
            DropReason::SnatExhausted => "snat_exhausted",
            DropReason::NoFlow => "no_flow",
            DropReason::IcmpNoFlow => "icmp_no_flow",
            DropReason::NoRoom => "no_room",
            DropReason::FamilyMismatch => "family_mismatch",
            DropReason::IcmpRateLimited => "icmp_rate_limited",
            DropReason::FragmentOverlap => "fragment_overlap",
            DropReason::FragmentOversize => "fragment_oversize",
            DropReason::TooBig => "too_big",
            DropReason::Overflow => "overflow",
            DropReason::Denied => "denied",
            DropReason::ProxyOpening => "proxy_opening",
        }
    }
}

impl From<Miss> for DropReason {
    fn from(m: Miss) -> Self {
        match m {
            Miss::NoRoute => DropReason::NoRoute,
            Miss::NotDatapath => DropReason::RouteNotDatapath,
            Miss::NoNeighbor => DropReason::NoNeighbor,
        }
    }
}

impl From<wire::Error> for DropReason {
    fn from(e: wire::Error) -> Self {
        use wire::Error as E;
        match e {
            E::Truncated | E::NoSpace => DropReason::Truncated,
            E::Malformed | E::Unsupported => DropReason::Malformed,
            E::BadChecksum => DropReason::BadChecksum,
            E::TooManyHeaders => DropReason::TooManyHeaders,
        }
    }
}

/// What to do with the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit the (rewritten) frame on this interface.
    Tx {
        /// Egress interface index.
        ifindex: u32,
    },
    /// Hand the frame to the kernel unchanged.
    Pass,
    /// Drop it, counting the reason.
    Drop(DropReason),
}

/// Worker counters that are not drops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Frames handed to the kernel.
    pub passed: u64,
    /// Frames transmitted.
    pub tx: u64,
    /// New flows answered statelessly from the Maglev ring because the table was full of
    /// established flows (FullNAT: dropped as `no_flow`).
    pub conntrack_fallback: u64,
    /// TCP segments other than a SYN without an entry, answered statelessly from the Maglev
    /// ring without creating state (FullNAT: dropped as `no_flow`).
    pub stateless_no_entry: u64,
    /// Flows whose backend went away (disabled, unhealthy, removed) and were re-chosen.
    pub rechosen: u64,
    /// SYNs that found an entry of a closed connection, or of a handshake its backend has
    /// not answered while it takes no new connections (drained, weight 0), scheduled anew.
    pub reopened: u64,
    /// NAT return packets rewritten without a connection entry.
    pub stateless_return: u64,
    /// ICMP echo replies sent for VIPs.
    pub echo_replies: u64,
    /// ICMP errors forwarded to a flow's backend.
    pub icmp_errors_forwarded: u64,
    /// ICMP time-exceeded messages sent.
    pub time_exceeded_sent: u64,
    /// ICMP messages not sent because of the rate limits (echo replies and errors).
    pub icmp_rate_limited: u64,
    /// Fragments forwarded.
    pub fragments: u64,
    /// PROXY v2 headers put in front of a flow's first data (retransmissions included).
    pub proxy_headers: u64,
    /// TOA options added.
    pub toa_options: u64,
    /// Segments that should have carried the TOA option but had no room in their header.
    pub toa_no_room: u64,
    /// The fragment table's own counters (NAT and FullNAT fragments).
    pub frag: FragStats,
    /// ICMP fragmentation-needed / packet-too-big messages sent for tunnel frames over the
    /// egress MTU.
    pub too_big_sent: u64,
    /// TCP SYNs and SYN-ACKs whose MSS option was lowered to fit a tunnel.
    pub mss_clamped: u64,
    /// Datagrams of `udp_one_packet` VIPs, each scheduled on its own with no entry.
    pub one_packet: u64,
    /// New flows whose scheduled backend was at its `max_connections` and that went to
    /// another one.
    pub limit_skips: u64,
    /// New flows sent past every backend's limit (`overflow = "ignore"`).
    pub overflow_ignored: u64,
    /// RSTs sent for SYNs refused because every backend was full (`overflow = "reset"`).
    pub overflow_resets: u64,
    /// New connections of persistent clients that went to their remembered backend.
    pub persist_hits: u64,
    /// New connections of persistent VIPs without a usable entry (scheduled afresh).
    pub persist_misses: u64,
    /// Live persistence entries given up for another client (the table's set was full).
    pub persist_evictions: u64,
    /// Answers to the backends' outbound connections forwarded to the port's owner.
    pub outbound_answers: u64,
    /// Answers to an outbound port no backend owns (the VIP has no backend), dropped as
    /// `no_backend`.
    pub outbound_unowned: u64,
    /// SYNs the SYN proxy answered with a cookie (no state kept).
    pub syn_proxy_answered: u64,
    /// ACKs whose cookie checked: flows the SYN proxy opened toward a backend.
    pub syn_proxy_opened: u64,
    /// ACKs without a flow to a proxied VIP whose acknowledgement was no cookie of ours
    /// (spoofed, too old, or of a flow whose entry is gone), handled as without the proxy.
    pub syn_proxy_bad_cookies: u64,
    /// Client data that came before the backend answered a proxied flow (dropped; the
    /// client sends it again).
    pub syn_proxy_early: u64,
    /// SYNs sent to the backend again: the client sent its kept first segment again, the
    /// backend had not answered the first SYN.
    pub syn_proxy_resent: u64,
    /// Backends' SYN-ACKs of proxied flows turned into the handshake's last ACK.
    pub syn_proxy_established: u64,
}

/// Per-worker mutable state: counters and scheduler state, sized for one table version.
#[derive(Debug, Clone)]
pub struct WorkerState {
    /// Drops by [`DropReason::index`].
    pub drops: [u64; DropReason::COUNT],
    /// Packets per VIP slot.
    pub vip_packets: Vec<u64>,
    /// Bytes per VIP slot.
    pub vip_bytes: Vec<u64>,
    /// New flows per VIP slot (backend chosen, whether or not the table had room).
    pub vip_new_flows: Vec<u64>,
    /// Packets per backend slot.
    pub backend_packets: Vec<u64>,
    /// Bytes per backend slot.
    pub backend_bytes: Vec<u64>,
    /// New flows scheduled to each backend slot (as `vip_new_flows`, per backend).
    pub backend_new_flows: Vec<u64>,
    /// Other counters.
    pub stats: WorkerStats,
    /// QUIC-LB counters per VIP slot, by [`crate::quic::Counter`] (zero for other VIPs).
    pub quic: Vec<[u64; crate::quic::COUNTERS]>,
    sched: Vec<SchedState>,
    /// Per VIP slot: a fingerprint of the pool `sched` was built for.
    sched_prints: Vec<u64>,
    /// Client MACs learned from first frames, until the tables have the kernel's entry.
    pub(crate) learned: crate::egress::LearnedMacs,
    /// Buckets for the ICMP messages this worker originates.
    icmp: IcmpLimiter,
    /// First fragments' decisions for the later fragments of NAT and FullNAT datagrams.
    frags: FragTable,
    version: Option<u64>,
    /// The `built_as` of the core `sched` and the connection table were bound to.
    core: Option<u64>,
    /// The appliance's persistence table (shared by the workers; a private one until the
    /// engine sets it).
    persist: Option<Arc<PersistTable>>,
    /// The SYN proxy's cookie secret (the appliance's, shared by its workers).
    pub(crate) cookie_key: CookieKey,
    /// Flood mode, as the control plane last saw it (the SYN proxy's `"flood"` setting).
    flood: Option<Arc<AtomicBool>>,
    /// Until when (the workers' clock, ns) a cookie this appliance made may come back in
    /// an ACK (see [`WorkerState::cookies_out`]); shared by the workers.
    cookies_until: Option<Arc<AtomicU64>>,
    /// Client data of opening proxied flows, kept for the backend's answer.
    early: synproxy::EarlyData,
    /// The appliance's standby flows (connection sync), consulted on a miss.
    standby: Option<Arc<crate::standby::Standby>>,
}

/// Identifies a VIP's pool as the schedulers see it: name, scheduler, and each backend's
/// address, port, weight and eligibility, in slot order.
fn pool_fingerprint(tables: &Tables, vip: usize) -> u64 {
    use std::hash::{Hash, Hasher};
    let v = &tables.vips[vip];
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.name.hash(&mut h);
    v.scheduler.name().hash(&mut h);
    for slot in v.backends.clone() {
        let b = &tables.backends[slot as usize];
        (b.address, b.port, b.weight, tables.eligible[slot as usize]).hash(&mut h);
    }
    h.finish()
}

impl Default for WorkerState {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerState {
    /// Empty state; the first [`process`] call adopts the tables it is given.
    pub fn new() -> WorkerState {
        WorkerState {
            drops: [0; DropReason::COUNT],
            vip_packets: Vec::new(),
            vip_bytes: Vec::new(),
            vip_new_flows: Vec::new(),
            backend_packets: Vec::new(),
            backend_bytes: Vec::new(),
            backend_new_flows: Vec::new(),
            stats: WorkerStats::default(),
            quic: Vec::new(),
            sched: Vec::new(),
            sched_prints: Vec::new(),
            learned: Default::default(),
            icmp: IcmpLimiter::default(),
            frags: FragTable::default(),
            version: None,
            core: None,
            persist: None,
            cookie_key: CookieKey::default(),
            flood: None,
            cookies_until: None,
            early: Default::default(),
            standby: None,
        }
    }

    /// Shares the appliance's persistence table with this worker.
    pub fn set_persistence(&mut self, table: Arc<PersistTable>) {
        self.persist = Some(table);
    }

    /// The persistence table (a private one is made at first use if none was set).
    pub fn persistence(&mut self) -> &PersistTable {
        self.persist.get_or_insert_with(Default::default)
    }

    /// The table version this state is sized for.
    pub fn version(&self) -> Option<u64> {
        self.version
    }

    /// Switches to a new table version: resizes counters (per-slot counters restart, the
    /// control plane has aggregated the old ones), resets scheduler state and re-binds every
    /// connection to the new slots (a flow whose VIP is gone, or whose source the VIP's
    /// lists now deny, is dropped; a flow whose backend is gone is re-chosen on its next
    /// packet). Allocates; runs once per swap. A
    /// version that shares the running core (a route or neighbour change) keeps scheduler
    /// state and bindings and only restarts the counters.
    pub fn adopt(&mut self, tables: &Tables, ct: &mut ConnTable) {
        if self.core == Some(tables.built_as) && self.vip_packets.len() == tables.vips.len() {
            // Only the egress changed: slots, pools and flows stay bound; counters restart.
            for c in [
                &mut self.vip_packets,
                &mut self.vip_bytes,
                &mut self.vip_new_flows,
                &mut self.backend_packets,
                &mut self.backend_bytes,
                &mut self.backend_new_flows,
            ] {
                c.fill(0);
            }
            self.quic.fill([0; crate::quic::COUNTERS]);
            self.version = Some(tables.version);
            return;
        }
        self.core = Some(tables.built_as);
        self.vip_packets = vec![0; tables.vips.len()];
        self.vip_bytes = vec![0; tables.vips.len()];
        self.vip_new_flows = vec![0; tables.vips.len()];
        self.backend_packets = vec![0; tables.backends.len()];
        self.backend_bytes = vec![0; tables.backends.len()];
        self.backend_new_flows = vec![0; tables.backends.len()];
        self.quic = vec![[0; crate::quic::COUNTERS]; tables.vips.len()];
        // A VIP whose pool is unchanged keeps its scheduler state (round-robin cursor, wrr
        // position, locality cache): health changes elsewhere must not reset it.
        let prints: Vec<u64> = (0..tables.vips.len())
            .map(|i| pool_fingerprint(tables, i))
            .collect();
        let mut old: Vec<(u64, SchedState)> = std::mem::take(&mut self.sched_prints)
            .into_iter()
            .zip(std::mem::take(&mut self.sched))
            .collect();
        self.sched = tables
            .vips
            .iter()
            .zip(&prints)
            .map(|(v, p)| match old.iter().position(|(q, _)| q == p) {
                Some(i) => old.swap_remove(i).1,
                None => SchedState::new(v.scheduler),
            })
            .collect();
        self.sched_prints = prints;
        self.icmp = IcmpLimiter::new(tables.icmp_limits, tables.vips.len(), ct.workers());
        ct.set_budgets(tables.embryonic_per_source, &tables.tenant_zones());
        ct.adopt(tables.version, tables.backends.len(), |f| {
            let vip = tables.vip_of_key(&f.key)?;
            // A source the VIP's lists now deny loses its flows in this swap (`lb::acl`).
            if !tables.vips[vip as usize].allows(f.key.src) {
                return None;
            }
            let backend = tables
                .backend_slot(vip, f.backend_addr, f.backend_port)
                .unwrap_or(NONE);
            Some((vip, backend))
        });
        admit::publish_all_counts(tables, ct);
        self.version = Some(tables.version);
    }

    /// The scheduler state of a VIP slot (for tests and `trace`).
    pub fn sched_state(&mut self, vip: u32) -> Option<&mut SchedState> {
        self.sched.get_mut(vip as usize)
    }

    #[inline]
    fn drop(&mut self, r: DropReason) -> Verdict {
        self.drops[r.index()] += 1;
        Verdict::Drop(r)
    }

    #[inline]
    fn pass(&mut self) -> Verdict {
        self.stats.passed += 1;
        Verdict::Pass
    }

    #[inline]
    fn tx(&mut self, ifindex: u32) -> Verdict {
        self.stats.tx += 1;
        Verdict::Tx { ifindex }
    }

    /// Counts a forwarded client → VIP frame of `len` bytes for its VIP and backend slots.
    #[inline(always)]
    fn count_forward(&mut self, vip: u32, backend: u32, len: u64) {
        self.vip_packets[vip as usize] += 1;
        self.vip_bytes[vip as usize] += len;
        self.backend_packets[backend as usize] += 1;
        self.backend_bytes[backend as usize] += len;
    }

    /// Counts a new flow of VIP slot `vip` scheduled to backend slot `backend`.
    #[inline(always)]
    fn count_new_flow(&mut self, vip: u32, backend: u32) {
        self.vip_new_flows[vip as usize] += 1;
        if let Some(c) = self.backend_new_flows.get_mut(backend as usize) {
            *c += 1;
        }
    }

    /// Sum of all drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

/// Processes one frame: see the module docs for every policy. `now` is the caller's clock in
/// nanoseconds (only compared with itself).
pub fn process(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    now: u64,
) -> Verdict {
    process_recorded(frame, tables, ct, worker, now, &mut ())
}

/// What [`process`] did with a forwarded TCP/UDP frame, described so that a flow cache in
/// front of the engine (the XDP fast path, `datapath::flowcache`) can repeat it for the
/// flow's next frames without asking the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The frame's own 5-tuple as received (client → VIP, or backend → client/SNAT address
    /// for return traffic).
    pub key: FlowKey,
    /// Return traffic (backend → client) rather than client → VIP.
    pub reverse: bool,
    /// The VIP's mode.
    pub mode: Mode,
    /// VIP slot in the tables the frame was processed with.
    pub vip: u32,
    /// Backend slot in the same tables.
    pub backend: u32,
    /// New source address and port, when rewritten.
    pub src: Option<(u128, u16)>,
    /// New destination address and port, when rewritten.
    pub dst: Option<(u128, u16)>,
    /// The MACs written and the egress interface.
    pub next_hop: NextHop,
    /// The connection-table flow this frame belongs to: its client → VIP key and state
    /// after this frame. `None` when no entry holds the flow (stateless NAT return, or a
    /// new flow answered statelessly because the table was full).
    pub flow: Option<(FlowKey, FlowState)>,
    /// The frame's TCP flags (0 for UDP).
    pub tcp_flags: u8,
    /// The flow's client-address state after this frame (`client_address`): a flow cache
    /// must shift sequence numbers as the engine does, and leave the frames that get a
    /// header or an option to the engine.
    pub carry: Carry,
    /// The frame's FIN or RST counted: it lay where its sender's sequence space says it
    /// must (a FIN or RST off it is forwarded and changes nothing, the flow cache's
    /// entries included).
    pub teardown: bool,
    /// Where the flow's sequence spaces stand after this frame (TCP): a flow cache starts
    /// its entries there and moves them on as it forwards.
    pub track: crate::conntrack::Track,
}

/// Where [`process_recorded`] puts its [`Decision`]: `()` records nothing and compiles to
/// exactly [`process`]; `Option<Decision>` keeps the last one. A flow cache in front of the
/// engine also says where the flows it forwarded stand ([`Record::catch_up`]).
pub trait Record {
    /// Whether anything is recorded (a constant, so the unrecorded build has no branch).
    const ON: bool;
    /// Stores a decision.
    fn decision(&mut self, d: Decision);
    /// A FIN or RST of `flow` is about to be judged against `t`, where the connection table
    /// says its sequence spaces stand: a flow cache that forwarded the flow's segments since
    /// moves `t` on to what it saw.
    #[inline(always)]
    fn catch_up(&mut self, _flow: &FlowKey, _t: &mut crate::conntrack::Track) {}
}

/// Before a FIN or RST of flow `id` is judged: its sequence spaces as `rec` (the flow
/// cache) last saw them.
#[inline(never)]
fn catch_up<R: Record>(ct: &mut ConnTable, id: u32, rec: &mut R) {
    let f = *ct.flow(id);
    let mut t = f.track;
    rec.catch_up(&f.key, &mut t);
    if t != f.track {
        ct.set_track(id, t);
    }
}

/// Whether `l4` is a TCP segment with FIN or RST (what the sequence tracker judges).
#[inline(always)]
fn teardown_flags(ip: &Ip, l4: &L4) -> bool {
    ip.proto == IpProtocol::TCP && l4.flags & 0x05 != 0
}

impl Record for () {
    const ON: bool = false;
    #[inline(always)]
    fn decision(&mut self, _: Decision) {}
}

impl Record for Option<Decision> {
    const ON: bool = true;
    #[inline(always)]
    fn decision(&mut self, d: Decision) {
        *self = Some(d);
    }
}

/// [`process`] that also describes a forwarded TCP/UDP frame (client → VIP in any mode,
/// NAT/FullNAT return traffic) to `rec`. Frames that are not forwarded that way leave `rec`
/// alone.
pub fn process_recorded<R: Record>(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    now: u64,
    rec: &mut R,
) -> Verdict {
    if worker.version != Some(tables.version) {
        worker.adopt(tables, ct);
    }
    let (l3, ethertype) = {
        let eth = EthernetFrame::new_unchecked(frame.data());
        match l3_offset(&eth) {
            Ok((o, t, _)) => (o, t),
            Err(e) => return worker.drop(e.into()),
        }
    };
    let ip = match parse_ip(frame.data(), l3, ethertype) {
        Ok(Some(ip)) => ip,
        Ok(None) => return worker.pass(),
        Err(r) => return worker.drop(r),
    };
    let len = frame.len() as u64;
    match ip.proto {
        IpProtocol::TCP | IpProtocol::UDP => {}
        IpProtocol::ICMP if !ip.v6 => return icmp::icmp(frame, tables, ct, worker, &ip, now),
        IpProtocol::ICMPV6 if ip.v6 => return icmp::icmp(frame, tables, ct, worker, &ip, now),
        _ => return worker.pass(),
    }
    if ip.frag {
        let v = fragment::fragment(frame, tables, ct, worker, &ip, len, now, rec);
        worker.stats.frag = worker.frags.stats;
        return v;
    }
    let l4 = match parse_l4(frame.data(), &ip) {
        Ok(l4) => l4,
        Err(r) => {
            // Malformed L4 to something that is not ours is the kernel's business.
            if tables.vip_by_address(ip.dst).is_some() || tables.snat_vip(ip.dst).is_some() {
                return worker.drop(r);
            }
            return worker.pass();
        }
    };
    if tables.has_tenants()
        && let Some(v) = tenant::arrive(frame, tables, ct, worker, &ip, &l4, now)
    {
        return v;
    }
    if let Some(vip) = tables.vip_lookup(ip.dst, l4.dport, ip.proto) {
        return forward(frame, tables, ct, worker, &ip, &l4, vip, len, now, rec);
    }
    if let Some(v) = outbound::answer(frame, tables, worker, &ip, &l4, len, now) {
        return v;
    }
    nat::reverse(frame, tables, ct, worker, &ip, &l4, len, now, rec)
}

/// Client → VIP: see `forward.rs`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn forward<R: Record>(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    vip: u32,
    len: u64,
    now: u64,
    rec: &mut R,
) -> Verdict {
    let mut cx = forward::Ctx {
        tables,
        ct,
        worker,
        now,
        rec,
    };
    let seg = forward::Seg {
        ip,
        l4,
        key: headers::flow_key(ip, l4),
        vip,
        len,
    };
    forward::forward(frame, &mut cx, &seg)
}
