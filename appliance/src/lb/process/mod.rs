//! The per-packet step: classify a frame, pick or recall its backend, rewrite it in place.
//!
//! [`process`] is what every datapath worker runs on every received frame. It reads only the
//! immutable [`Tables`], the worker's own [`ConnTable`] and [`WorkerState`], and the `now`
//! it is given; it never allocates (except once after a table swap, in
//! [`WorkerState::adopt`]), never locks and never formats.
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
//! - **Fragments.** Non-first fragments carry no ports, so fragments (all of them, first
//!   included, so one datagram stays together) of DR and tunnel VIPs are hashed on the
//!   3-tuple (2-tuple if the VIP says so) and looked up statelessly in the VIP's Maglev ring.
//!   The VIP is found by (address, protocol); when several VIPs share both, the fragment is
//!   dropped as ambiguous. NAT and FullNAT cannot rewrite ports they cannot see and would
//!   need reassembly: their fragments are dropped and counted.
//! - **ICMP.** Echo requests to any VIP address are answered here (v4 and v6). Errors
//!   (destination unreachable incl. fragmentation needed, packet too big, time exceeded)
//!   addressed to a VIP that quote a VIP flow are sent to that flow's backend, rewritten as
//!   its mode needs. Other ICMP to a VIP address goes to the kernel.
//! - **Tunnels.** IPIP picks the outer family from the backend (4in4, 6in4, 4in6, 6in6),
//!   GUE is variant 1 (UDP straight to the inner IP header), VXLAN carries an inner Ethernet
//!   header. Outer TTL / hop limit is 64. The outer source address varies with the flow hash
//!   (low 16 bits for IPv4, low 32 for IPv6, within [`TunnelSource`]) and GUE/VXLAN use a
//!   flow-hash source port in 49152..=65535, so the backend's RSS spreads flows. The IPv4
//!   outer header copies DF from the inner header (always DF for inner IPv6, which routers
//!   never fragment) so path-MTU discovery keeps working end to end; the appliance does not
//!   fragment and expects the underlay MTU to absorb the encapsulation. Outer UDP checksums
//!   are zero over IPv4 (RFC 7348, draft-ietf-intarea-gue) and computed over IPv6.

use crate::config::Encap;
use crate::config::{HashFields, Mode, Scheduler};
use crate::lb::conntrack::{
    ConnTable, Flow, FlowState, InsertError, RevKey, initial_tcp_state, next_tcp_state,
};
use crate::lb::frame::Frame;
use crate::lb::hash::FlowKey;
use crate::lb::sched::{self, PoolView, SchedState};
use crate::lb::tables::{BackendEntry, FragmentVip, Neighbor, Tables, TunnelSource, VipEntry};
use wire::checksum;
use wire::{EthernetFrame, Ipv4Packet, Ipv6Packet, l3_offset, walk_ext_headers};

/// Bytes the datapath reserves in front of every frame for encapsulation: outer IPv6 (40) +
/// UDP (8) + VXLAN (8) + inner Ethernet (14) = 70 at most; 256 matches XDP's headroom.
pub const HEADROOM: usize = 256;

const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const PROTO_ICMP: u8 = 1;
const PROTO_IPIP: u8 = 4;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_IPV6: u8 = 41;
const PROTO_ICMPV6: u8 = 58;
/// Outer TTL / hop limit of encapsulated packets and of packets the appliance originates.
pub const OUTER_TTL: u8 = 64;
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
    /// The next hop's MAC is not (yet) resolved.
    NoNeighbor,
    /// Fragment of a NAT/FullNAT VIP (needs reassembly).
    FragmentNat,
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
}

impl DropReason {
    /// Number of reasons (the counter array length).
    pub const COUNT: usize = 15;

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
        DropReason::FragmentNat,
        DropReason::FragmentAmbiguous,
        DropReason::SnatExhausted,
        DropReason::NoFlow,
        DropReason::IcmpNoFlow,
        DropReason::NoRoom,
        DropReason::FamilyMismatch,
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
            DropReason::FragmentNat => "fragment_nat",
            DropReason::FragmentAmbiguous => "fragment_ambiguous",
            DropReason::SnatExhausted => "snat_exhausted",
            DropReason::NoFlow => "no_flow",
            DropReason::IcmpNoFlow => "icmp_no_flow",
            DropReason::NoRoom => "no_room",
            DropReason::FamilyMismatch => "family_mismatch",
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
    /// New flows answered statelessly from the Maglev ring because the table was full.
    pub conntrack_fallback: u64,
    /// Flows whose backend went away (disabled, unhealthy, removed) and were re-chosen.
    pub rechosen: u64,
    /// NAT return packets rewritten without a connection entry.
    pub stateless_return: u64,
    /// ICMP echo replies sent for VIPs.
    pub echo_replies: u64,
    /// ICMP errors forwarded to a flow's backend.
    pub icmp_errors_forwarded: u64,
    /// ICMP time-exceeded messages sent.
    pub time_exceeded_sent: u64,
    /// Fragments forwarded.
    pub fragments: u64,
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
    /// Other counters.
    pub stats: WorkerStats,
    sched: Vec<SchedState>,
    /// Per VIP slot: a fingerprint of the pool `sched` was built for.
    sched_prints: Vec<u64>,
    version: Option<u64>,
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
            stats: WorkerStats::default(),
            sched: Vec::new(),
            sched_prints: Vec::new(),
            version: None,
        }
    }

    /// The table version this state is sized for.
    pub fn version(&self) -> Option<u64> {
        self.version
    }

    /// Switches to a new table version: resizes counters (per-slot counters restart, the
    /// control plane has aggregated the old ones), resets scheduler state and re-binds every
    /// connection to the new slots (a flow whose VIP is gone is dropped; a flow whose
    /// backend is gone is re-chosen on its next packet). Allocates; runs once per swap.
    pub fn adopt(&mut self, tables: &Tables, ct: &mut ConnTable) {
        self.vip_packets = vec![0; tables.vips.len()];
        self.vip_bytes = vec![0; tables.vips.len()];
        self.vip_new_flows = vec![0; tables.vips.len()];
        self.backend_packets = vec![0; tables.backends.len()];
        self.backend_bytes = vec![0; tables.backends.len()];
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
        ct.adopt(tables.version, tables.backends.len(), |f| {
            let vip = tables.vip_lookup(f.key.dst, f.key.dport, f.key.proto)?;
            let backend = tables
                .backend_slot(vip, f.backend_addr, f.backend_port)
                .unwrap_or(NONE);
            Some((vip, backend))
        });
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

    /// Sum of all drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

/// How a new flow's backend was decided (shared with `trace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Maglev ring slot `slot` holds the backend.
    Maglev {
        /// Ring slot (`hash % M`).
        slot: usize,
    },
    /// An LVS scheduler chose it.
    Scheduler(Scheduler),
}

/// A worker's connection counts for all backend slots (see [`ConnTable::active_counts`]).
#[derive(Debug, Clone, Copy)]
pub struct Load<'a> {
    /// Established connections per backend slot.
    pub active: &'a [u32],
    /// Other connections per backend slot.
    pub inactive: &'a [u32],
}

/// Chooses a backend slot for a new flow of `vip`.
pub fn choose_backend(
    tables: &Tables,
    vip: u32,
    key: &FlowKey,
    hash: u32,
    load: Load<'_>,
    st: &mut SchedState,
    now: u64,
) -> Option<(u32, Choice)> {
    let Load { active, inactive } = load;
    let v = &tables.vips[vip as usize];
    let r = tables.pool_range(vip);
    if v.scheduler == Scheduler::Maglev {
        let slot = v.ring.slot_of(hash)?;
        let pos = v.ring.slots()[slot];
        return Some((r.start as u32 + pos, Choice::Maglev { slot }));
    }
    let counts =
        |c: &[u32]| -> Option<std::ops::Range<usize>> { (r.end <= c.len()).then_some(r.clone()) };
    let zeros = [0u32; 0];
    let (a, i) = match (counts(active), counts(inactive)) {
        (Some(x), Some(y)) => (&active[x], &inactive[y]),
        _ => (&zeros[..], &zeros[..]),
    };
    if a.len() != r.len() {
        return None;
    }
    let pool = PoolView {
        weight: &tables.weights[r.clone()],
        eligible: &tables.eligible[r.clone()],
        active: a,
        inactive: i,
    };
    let pos = sched::pick(v.scheduler, v.hash, &pool, &v.buckets, st, key, now)?;
    Some((r.start as u32 + pos as u32, Choice::Scheduler(v.scheduler)))
}

// ---- byte helpers -------------------------------------------------------------------

#[inline(always)]
fn rd16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

#[inline(always)]
fn wr16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
fn rd_addr(b: &[u8], o: usize, v6: bool) -> u128 {
    if v6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[o..o + 16]);
        u128::from_be_bytes(a)
    } else {
        0xffff_0000_0000 | u128::from(u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]))
    }
}

#[inline(always)]
fn wr_addr(b: &mut [u8], o: usize, v6: bool, a: u128) {
    if v6 {
        b[o..o + 16].copy_from_slice(&a.to_be_bytes());
    } else {
        b[o..o + 4].copy_from_slice(&(a as u32).to_be_bytes());
    }
}

/// Patches a checksum for an address change (all 16-bit words of the address).
#[inline(always)]
fn csum_addr(csum: u16, old: u128, new: u128, v6: bool) -> u16 {
    if v6 {
        checksum::update_addr_v6(csum, old.into(), new.into())
    } else {
        checksum::update32(csum, old as u32, new as u32)
    }
}

/// An L4 checksum field: UDP over IPv4 may be absent (0) and must stay so.
#[derive(Debug, Clone, Copy)]
struct L4Csum {
    off: usize,
    udp: bool,
}

impl L4Csum {
    #[inline(always)]
    fn patch(&self, b: &mut [u8], f: impl FnOnce(u16) -> u16) {
        let old = rd16(b, self.off);
        if self.udp && old == 0 {
            return;
        }
        let mut new = f(old);
        if self.udp && new == 0 {
            new = 0xffff;
        }
        wr16(b, self.off, new);
    }

    /// [`L4Csum::patch`] with an RFC 1624 delta (`~old + new` terms, any grouping) instead
    /// of a closure: the closure was compiled out of line on the NAT path.
    #[inline(always)]
    fn patch_delta(&self, b: &mut [u8], delta: u64) {
        let old = rd16(b, self.off);
        if self.udp && old == 0 {
            return;
        }
        let mut new = !fold64(u64::from(!old) + delta);
        if self.udp && new == 0 {
            new = 0xffff;
        }
        wr16(b, self.off, new);
    }
}

/// Offsets and facts of one parsed IP packet inside a frame.
#[derive(Debug, Clone, Copy)]
struct Ip {
    l3: usize,
    v6: bool,
    /// IP header + payload length per the header (no Ethernet padding).
    ip_len: usize,
    l4: usize,
    proto: u8,
    src: u128,
    dst: u128,
    /// Any fragment (first included).
    frag: bool,
}

fn parse_ip(d: &[u8], l3: usize, ethertype: u16) -> Result<Option<Ip>, DropReason> {
    match ethertype {
        ETH_P_IPV4 => {
            let p = Ipv4Packet::new_checked(&d[l3..])?;
            if !p.verify_checksum() {
                return Err(DropReason::BadChecksum);
            }
            let hl = p.header_len();
            Ok(Some(Ip {
                l3,
                v6: false,
                ip_len: usize::from(p.total_len()),
                l4: l3 + hl,
                proto: p.protocol(),
                src: rd_addr(d, l3 + 12, false),
                dst: rd_addr(d, l3 + 16, false),
                frag: p.is_fragment(),
            }))
        }
        ETH_P_IPV6 => {
            let p = Ipv6Packet::new_checked(&d[l3..])?;
            let up = walk_ext_headers(&p)?;
            Ok(Some(Ip {
                l3,
                v6: true,
                ip_len: 40 + usize::from(p.payload_len()),
                l4: l3 + up.offset,
                proto: up.protocol,
                src: rd_addr(d, l3 + 8, true),
                dst: rd_addr(d, l3 + 24, true),
                frag: up.fragment.is_some(),
            }))
        }
        _ => Ok(None),
    }
}

/// TCP/UDP facts: ports, TCP flags, checksum field.
#[derive(Debug, Clone, Copy)]
struct L4 {
    sport: u16,
    dport: u16,
    flags: u8,
    csum: L4Csum,
}

fn parse_l4(d: &[u8], ip: &Ip) -> Result<L4, DropReason> {
    let end = ip.l3 + ip.ip_len;
    let avail = end.saturating_sub(ip.l4);
    match ip.proto {
        PROTO_TCP => {
            if avail < 20 {
                return Err(DropReason::Truncated);
            }
            let doff = usize::from(d[ip.l4 + 12] >> 4) * 4;
            if doff < 20 {
                return Err(DropReason::Malformed);
            }
            if doff > avail {
                return Err(DropReason::BadLength);
            }
            Ok(L4 {
                sport: rd16(d, ip.l4),
                dport: rd16(d, ip.l4 + 2),
                flags: d[ip.l4 + 13],
                csum: L4Csum {
                    off: ip.l4 + 16,
                    udp: false,
                },
            })
        }
        _ => {
            if avail < 8 {
                return Err(DropReason::Truncated);
            }
            let ulen = usize::from(rd16(d, ip.l4 + 4));
            if ulen < 8 || ulen > avail {
                return Err(DropReason::BadLength);
            }
            Ok(L4 {
                sport: rd16(d, ip.l4),
                dport: rd16(d, ip.l4 + 2),
                flags: 0,
                csum: L4Csum {
                    off: ip.l4 + 6,
                    udp: !ip.v6,
                },
            })
        }
    }
}

/// Decrements TTL / hop limit with the IPv4 checksum patched; false if it was <= 1.
#[inline(always)]
fn decrement_ttl(d: &mut [u8], ip: &Ip) -> bool {
    if ip.v6 {
        let h = &mut d[ip.l3 + 7];
        if *h <= 1 {
            return false;
        }
        *h -= 1;
    } else {
        let ttl = d[ip.l3 + 8];
        if ttl <= 1 {
            return false;
        }
        // TTL is the high byte of the TTL/protocol word; the new word is computed rather
        // than re-read (a narrow store read back wide stalls store forwarding).
        let old = rd16(d, ip.l3 + 8);
        let new = old - 0x100;
        wr16(d, ip.l3 + 8, new);
        let c = checksum::update16(rd16(d, ip.l3 + 10), old, new);
        wr16(d, ip.l3 + 10, c);
    }
    true
}

/// Rewrites the source or destination address, patching the IPv4 header checksum and the
/// L4 checksum (whose pseudo-header covers addresses).
#[inline(always)]
fn rewrite_addr(d: &mut [u8], ip: &Ip, l4: Option<L4Csum>, src: bool, new: u128) {
    let off = ip.l3
        + if ip.v6 {
            if src { 8 } else { 24 }
        } else if src {
            12
        } else {
            16
        };
    let old = rd_addr(d, off, ip.v6);
    if old == new {
        return;
    }
    wr_addr(d, off, ip.v6, new);
    if !ip.v6 {
        let c = csum_addr(rd16(d, ip.l3 + 10), old, new, false);
        wr16(d, ip.l3 + 10, c);
    }
    if let Some(c) = l4 {
        c.patch(d, |x| csum_addr(x, old, new, ip.v6));
    }
}

/// Folds a 64-bit one's-complement accumulator to 16 bits with end-around carries. Each
/// step keeps the value congruent modulo 0xffff (2^16 and 2^32 are both 1 there) and only a
/// zero input gives zero, so the result is exactly what [`checksum::fold`] gives on the
/// 16-bit-word sum of the same terms.
#[inline(always)]
fn fold64(x: u64) -> u16 {
    let (s, c) = (x as u32).overflowing_add((x >> 32) as u32);
    let x = s + u32::from(c);
    let (s, c) = (x as u16).overflowing_add((x >> 16) as u16);
    s + u16::from(c)
}

/// `~old + new` over an IPv4 address change, in 32-bit chunks (RFC 1624, eqn. 3 terms):
/// congruent to the 16-bit-word sum, without splitting into words per packet.
#[inline(always)]
fn addr_delta_v4(old: u32, new: u32) -> u64 {
    u64::from(!old) + u64::from(new)
}

/// [`addr_delta_v4`] for an IPv6 address: four 32-bit chunks each side.
#[inline(always)]
fn addr_delta_v6(old: u128, new: u128) -> u64 {
    let chunks = |a: u128| {
        let hi = (a >> 64) as u64;
        let lo = a as u64;
        (hi >> 32) + (hi & 0xffff_ffff) + (lo >> 32) + (lo & 0xffff_ffff)
    };
    chunks(!old) + chunks(new)
}

/// Replaces the port at `off` and returns its checksum delta.
#[inline(always)]
fn swap_port(d: &mut [u8], off: usize, port: u16) -> u64 {
    let old = rd16(d, off);
    wr16(d, off, port);
    u64::from(!old) + u64::from(port)
}

/// The NAT rewrite in one pass: TTL / hop limit down by one (the caller checked it is > 1),
/// source and/or destination address and port replaced, and the IPv4 header and L4
/// checksums patched once each with the summed RFC 1624 deltas.
///
/// IPv4 and IPv6 have separate bodies so IPv4 addresses stay `u32` and every header
/// access is a constant offset into one bounds-checked header array: the shared version
/// (u128 shifts in a word loop over a runtime word count) was a quarter to a third of the
/// instructions of an established NAT/FullNAT packet.
#[inline(always)]
fn nat_rewrite(d: &mut [u8], ip: &Ip, l4: &L4, src: Option<(u128, u16)>, dst: Option<(u128, u16)>) {
    let l4_acc = if ip.v6 {
        nat_rewrite_v6(d, ip, src, dst)
    } else {
        nat_rewrite_v4(d, ip, src, dst)
    };
    l4.csum.patch_delta(d, l4_acc);
}

/// IPv4 body of [`nat_rewrite`]; returns the L4 checksum delta.
#[inline(always)]
fn nat_rewrite_v4(
    d: &mut [u8],
    ip: &Ip,
    src: Option<(u128, u16)>,
    dst: Option<(u128, u16)>,
) -> u64 {
    let mut l4_acc = 0u64;
    // parse_ip checked the 20-byte header is in the frame; a miss would be a parser bug,
    // and leaving the header alone then beats a panic on the packet path.
    if let Some(h) = d.get_mut(ip.l3..).and_then(|h| h.first_chunk_mut::<20>()) {
        let old = u16::from_be_bytes([h[8], h[9]]);
        let new = old - 0x100;
        h[8..10].copy_from_slice(&new.to_be_bytes());
        let mut ip_acc = u64::from(!old) + u64::from(new);
        for (change, at) in [(src, 12), (dst, 16)] {
            if let Some((addr, _)) = change
                && let Some(a) = h[at..].first_chunk_mut::<4>()
            {
                let old = u32::from_be_bytes(*a);
                let new = addr as u32;
                *a = new.to_be_bytes();
                let delta = addr_delta_v4(old, new);
                ip_acc += delta;
                l4_acc += delta;
            }
        }
        let c = u16::from_be_bytes([h[10], h[11]]);
        let c = !fold64(u64::from(!c) + ip_acc);
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }
    if let Some((_, port)) = src {
        l4_acc += swap_port(d, ip.l4, port);
    }
    if let Some((_, port)) = dst {
        l4_acc += swap_port(d, ip.l4 + 2, port);
    }
    l4_acc
}

/// IPv6 body of [`nat_rewrite`] (no header checksum); returns the L4 checksum delta.
#[inline(always)]
fn nat_rewrite_v6(
    d: &mut [u8],
    ip: &Ip,
    src: Option<(u128, u16)>,
    dst: Option<(u128, u16)>,
) -> u64 {
    let mut l4_acc = 0u64;
    if let Some(h) = d.get_mut(ip.l3..).and_then(|h| h.first_chunk_mut::<40>()) {
        h[7] -= 1;
        for (change, at) in [(src, 8), (dst, 24)] {
            if let Some((addr, _)) = change
                && let Some(a) = h[at..].first_chunk_mut::<16>()
            {
                let old = u128::from_be_bytes(*a);
                *a = addr.to_be_bytes();
                l4_acc += addr_delta_v6(old, addr);
            }
        }
    }
    if let Some((_, port)) = src {
        l4_acc += swap_port(d, ip.l4, port);
    }
    if let Some((_, port)) = dst {
        l4_acc += swap_port(d, ip.l4 + 2, port);
    }
    l4_acc
}

#[inline(always)]
fn rewrite_port(d: &mut [u8], off: usize, csum: L4Csum, new: u16) {
    let old = rd16(d, off);
    if old == new {
        return;
    }
    wr16(d, off, new);
    csum.patch(d, |x| checksum::update16(x, old, new));
}

#[inline(always)]
fn set_macs(d: &mut [u8], n: &Neighbor) {
    d[0..6].copy_from_slice(&n.dst_mac.0);
    d[6..12].copy_from_slice(&n.src_mac.0);
}

fn swap_macs(d: &mut [u8]) {
    let mut a = [0u8; 6];
    a.copy_from_slice(&d[0..6]);
    d.copy_within(6..12, 0);
    d[6..12].copy_from_slice(&a);
}

fn v4_header_checksum(d: &mut [u8], l3: usize, hl: usize) {
    wr16(d, l3 + 10, 0);
    let c = checksum::checksum(&d[l3..l3 + hl]);
    wr16(d, l3 + 10, c);
}

/// Full TCP/UDP/ICMPv6 checksum over `d[l4..end]` with the pseudo-header of the IP packet at
/// `l3`; `csum_off` is the field's offset from `l4`.
fn l4_checksum_full(
    d: &mut [u8],
    l3: usize,
    v6: bool,
    l4: usize,
    end: usize,
    proto: u8,
    csum_off: usize,
) {
    wr16(d, l4 + csum_off, 0);
    let len = end - l4;
    let ph = if v6 {
        let s = checksum::sum(&d[l3 + 8..l3 + 40], 0);
        s + (len as u32 >> 16) + (len as u32 & 0xffff) + u32::from(proto)
    } else {
        let s = checksum::sum(&d[l3 + 12..l3 + 20], 0);
        s + len as u32 + u32::from(proto)
    };
    let mut c = checksum::finish(checksum::sum(&d[l4..end], ph));
    if proto == PROTO_UDP && c == 0 {
        c = 0xffff;
    }
    wr16(d, l4 + csum_off, c);
}

// ---- the packet step ----------------------------------------------------------------

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
    pub neighbor: Neighbor,
    /// The connection-table flow this frame belongs to: its client → VIP key and state
    /// after this frame. `None` when no entry holds the flow (stateless NAT return, or a
    /// new flow answered statelessly because the table was full).
    pub flow: Option<(FlowKey, FlowState)>,
    /// The frame's TCP flags (0 for UDP).
    pub tcp_flags: u8,
}

/// Where [`process_recorded`] puts its [`Decision`]: `()` records nothing and compiles to
/// exactly [`process`]; `Option<Decision>` keeps the last one.
pub trait Record {
    /// Whether anything is recorded (a constant, so the unrecorded build has no branch).
    const ON: bool;
    /// Stores a decision.
    fn decision(&mut self, d: Decision);
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
            Ok((o, t, _)) => (o, u16::from(t)),
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
        PROTO_TCP | PROTO_UDP => {}
        PROTO_ICMP if !ip.v6 => return icmp(frame, tables, ct, worker, &ip, now),
        PROTO_ICMPV6 if ip.v6 => return icmp(frame, tables, ct, worker, &ip, now),
        _ => return worker.pass(),
    }
    if ip.frag {
        return fragment(frame, tables, worker, &ip, len);
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
    if let Some(vip) = tables.vip_lookup(ip.dst, l4.dport, ip.proto) {
        return forward(frame, tables, ct, worker, &ip, &l4, vip, len, now, rec);
    }
    reverse(frame, tables, ct, worker, &ip, &l4, len, now, rec)
}

/// What [`flow_for`] found or created.
struct FlowHit {
    backend: u32,
    hash: u32,
    /// FullNAT local address and port.
    snat: Option<(u128, u16)>,
}

/// Finds or creates the flow for a client → VIP packet.
fn flow_for(
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    vip: u32,
    key: &FlowKey,
    flags: u8,
    now: u64,
) -> Result<FlowHit, DropReason> {
    let tcp = key.proto == PROTO_TCP;
    if let Some(id) = ct.lookup(key, now) {
        let (backend, state, hash, snat) = {
            let f = ct.flow(id);
            (f.backend, f.state, f.hash, f.snat)
        };
        let ok = backend != NONE
            && tables
                .backends
                .get(backend as usize)
                .is_some_and(|b| b.keeps_flows());
        if ok {
            let st = if tcp {
                next_tcp_state(state, flags)
            } else {
                FlowState::Udp
            };
            ct.touch(id, now, st);
            return Ok(FlowHit {
                backend,
                hash,
                snat,
            });
        }
        worker.stats.rechosen += 1;
        ct.remove(id);
    }
    new_flow(tables, ct, worker, vip, key, flags, now)
}

/// The new-flow half of [`flow_for`]: ageing, scheduling, FullNAT port allocation and the
/// insert. Kept out of line so the established path, inlined into [`forward`], does not
/// carry this code's stack frame and register spills on every packet.
#[inline(never)]
fn new_flow(
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    vip: u32,
    key: &FlowKey,
    flags: u8,
    now: u64,
) -> Result<FlowHit, DropReason> {
    let v = &tables.vips[vip as usize];
    let tcp = key.proto == PROTO_TCP;
    // New flows pay for a little ageing so expired flows leave the LVS connection counts
    // even when nothing else sweeps the table.
    ct.expire(now, 2);
    let hash = key.hash(v.hash);
    let sched = &mut worker.sched[vip as usize];
    let (backend, _) = choose_backend(
        tables,
        vip,
        key,
        hash,
        Load {
            active: ct.active_counts(),
            inactive: ct.inactive_counts(),
        },
        sched,
        now,
    )
    .ok_or(DropReason::NoBackend)?;
    worker.vip_new_flows[vip as usize] += 1;
    let b = tables.backends[backend as usize];
    let snat = if v.mode == Mode::FullNat {
        match ct.alloc_snat(key.proto, b.address, b.port, &v.snat, hash, now) {
            Some(s) => Some(s),
            None => return Err(DropReason::SnatExhausted),
        }
    } else {
        None
    };
    let state = if tcp {
        initial_tcp_state(flags)
    } else {
        FlowState::Udp
    };
    let flow = Flow {
        key: *key,
        vip,
        backend,
        backend_addr: b.address,
        backend_port: b.port,
        version: tables.version,
        state,
        last_seen: now,
        hash,
        snat,
        reverse: matches!(v.mode, Mode::Nat | Mode::FullNat),
    };
    match ct.insert(flow, now) {
        Ok(_) => Ok(FlowHit {
            backend,
            hash,
            snat,
        }),
        Err(InsertError::Full) => {
            worker.stats.conntrack_fallback += 1;
            if v.mode == Mode::FullNat {
                // Without an entry the return traffic could not be mapped back.
                return Err(DropReason::NoFlow);
            }
            // The stateless answer: the VIP's Maglev ring, whatever its scheduler.
            let pos = v.ring.lookup(hash).ok_or(DropReason::NoBackend)?;
            Ok(FlowHit {
                backend: v.backends.start + pos,
                hash,
                snat: None,
            })
        }
    }
}

#[allow(clippy::too_many_arguments)]
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
    let v = &tables.vips[vip as usize];
    let key = FlowKey {
        src: ip.src,
        dst: ip.dst,
        sport: l4.sport,
        dport: l4.dport,
        proto: ip.proto,
        v6: ip.v6,
    };
    if matches!(v.mode, Mode::Nat | Mode::FullNat) {
        let ttl = frame.data()[ip.l3 + if ip.v6 { 7 } else { 8 }];
        if ttl <= 1 {
            worker.drops[DropReason::TtlExceeded.index()] += 1;
            return time_exceeded(frame, worker, ip);
        }
    }
    let FlowHit {
        backend,
        hash,
        snat,
    } = match flow_for(tables, ct, worker, vip, &key, l4.flags, now) {
        Ok(x) => x,
        Err(r) => return worker.drop(r),
    };
    let Some(n) = tables.neighbor(backend).copied() else {
        return worker.drop(DropReason::NoNeighbor);
    };
    let b = tables.backends[backend as usize];
    worker.vip_packets[vip as usize] += 1;
    worker.vip_bytes[vip as usize] += len;
    worker.backend_packets[backend as usize] += 1;
    worker.backend_bytes[backend as usize] += len;
    let verdict = match v.mode {
        Mode::Nat | Mode::FullNat => {
            if b.v6 != ip.v6 {
                return worker.drop(DropReason::FamilyMismatch);
            }
            if v.mode == Mode::FullNat && snat.is_none() {
                return worker.drop(DropReason::NoFlow);
            }
            let d = frame.data_mut();
            nat_rewrite(d, ip, l4, snat, Some((b.address, b.port)));
            set_macs(d, &n);
            worker.tx(n.ifindex)
        }
        Mode::Dr | Mode::Tunnel(_) => {
            direct_to_backend(frame, tables, worker, ip, v.mode, &n, &b, hash)
        }
    };
    if R::ON && matches!(verdict, Verdict::Tx { .. }) {
        let nat = matches!(v.mode, Mode::Nat | Mode::FullNat);
        rec.decision(Decision {
            key,
            reverse: false,
            mode: v.mode,
            vip,
            backend,
            src: if nat { snat } else { None },
            dst: nat.then_some((b.address, b.port)),
            neighbor: n,
            flow: ct.lookup(&key, now).map(|id| (key, ct.flow(id).state)),
            tcp_flags: l4.flags,
        });
    }
    verdict
}

/// DR and tunnel: the frame goes to the backend unchanged but for its MACs, or inside an
/// outer header; the backend answers the client itself.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn direct_to_backend(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    mode: Mode,
    n: &Neighbor,
    b: &BackendEntry,
    hash: u32,
) -> Verdict {
    match mode {
        Mode::Tunnel(encap) => {
            match encapsulate(
                frame,
                ip,
                encap,
                n,
                b.address,
                b.v6,
                hash,
                &tables.tunnel_source,
            ) {
                Ok(()) => worker.tx(n.ifindex),
                Err(r) => worker.drop(r),
            }
        }
        _ => {
            set_macs(frame.data_mut(), n);
            worker.tx(n.ifindex)
        }
    }
}

/// Return traffic of NAT and FullNAT VIPs (backend → client).
#[allow(clippy::too_many_arguments)]
fn reverse<R: Record>(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    len: u64,
    now: u64,
    rec: &mut R,
) -> Verdict {
    let fullnat = tables.snat_vip(ip.dst).is_some();
    let nat_backend = if fullnat {
        None
    } else {
        tables.nat_backend(ip.src, l4.sport, ip.proto)
    };
    if !fullnat && nat_backend.is_none() {
        return worker.pass();
    }
    let rk = RevKey {
        proto: ip.proto,
        backend: ip.src,
        backend_port: l4.sport,
        local: ip.dst,
        local_port: l4.dport,
    };
    // (VIP address, VIP port, client address, client port, vip slot, backend slot)
    let (vaddr, vport, client, cport, vip, backend) = match ct.lookup_rev(&rk, now) {
        Some(id) => {
            let f = *ct.flow(id);
            let st = if ip.proto == PROTO_TCP {
                next_tcp_state(f.state, l4.flags)
            } else {
                FlowState::Udp
            };
            ct.touch(id, now, st);
            let c = if f.snat.is_some() {
                (f.key.src, f.key.sport)
            } else {
                (ip.dst, l4.dport)
            };
            (f.key.dst, f.key.dport, c.0, c.1, f.vip, f.backend)
        }
        None if fullnat => return worker.drop(DropReason::NoFlow),
        None => {
            let Some(slot) = nat_backend else {
                return worker.pass();
            };
            // To one of our own addresses (a health probe's reply), not to a client.
            if tables.is_local(ip.dst) {
                return worker.pass();
            }
            let vip = tables.backends[slot as usize].vip;
            let v = &tables.vips[vip as usize];
            worker.stats.stateless_return += 1;
            (v.address, v.port, ip.dst, l4.dport, vip, slot)
        }
    };
    let Some(gw) = tables.gateway(ip.v6).copied() else {
        return worker.drop(DropReason::NoNeighbor);
    };
    let d = frame.data_mut();
    if d[ip.l3 + if ip.v6 { 7 } else { 8 }] <= 1 {
        return worker.drop(DropReason::TtlExceeded);
    }
    let client = fullnat.then_some((client, cport));
    nat_rewrite(d, ip, l4, Some((vaddr, vport)), client);
    set_macs(d, &gw);
    if let Some(c) = worker.vip_packets.get_mut(vip as usize) {
        *c += 1;
        worker.vip_bytes[vip as usize] += len;
    }
    if let Some(c) = worker.backend_packets.get_mut(backend as usize) {
        *c += 1;
        worker.backend_bytes[backend as usize] += len;
    }
    if R::ON {
        let v = &tables.vips[vip as usize];
        rec.decision(Decision {
            key: FlowKey {
                src: ip.src,
                dst: ip.dst,
                sport: l4.sport,
                dport: l4.dport,
                proto: ip.proto,
                v6: ip.v6,
            },
            reverse: true,
            mode: v.mode,
            vip,
            backend,
            src: Some((vaddr, vport)),
            dst: client,
            neighbor: gw,
            flow: ct.lookup_rev(&rk, now).map(|id| {
                let f = ct.flow(id);
                (f.key, f.state)
            }),
            tcp_flags: l4.flags,
        });
    }
    worker.tx(gw.ifindex)
}

/// Fragments of DR/tunnel VIPs: stateless 3-tuple Maglev (see the module docs).
fn fragment(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    len: u64,
) -> Verdict {
    let vip = match tables.fragment_vip(ip.dst, ip.proto) {
        None => return worker.pass(),
        Some(FragmentVip::Ambiguous) => return worker.drop(DropReason::FragmentAmbiguous),
        Some(FragmentVip::Unique(v)) => v,
    };
    let v: &VipEntry = &tables.vips[vip as usize];
    if matches!(v.mode, Mode::Nat | Mode::FullNat) {
        return worker.drop(DropReason::FragmentNat);
    }
    let fields = if v.hash == HashFields::TwoTuple {
        HashFields::TwoTuple
    } else {
        HashFields::ThreeTuple
    };
    let key = FlowKey {
        src: ip.src,
        dst: ip.dst,
        sport: 0,
        dport: 0,
        proto: ip.proto,
        v6: ip.v6,
    };
    let hash = key.hash(fields);
    let Some(pos) = v.ring.lookup(hash) else {
        return worker.drop(DropReason::NoBackend);
    };
    let backend = v.backends.start + pos;
    let Some(n) = tables.neighbor(backend).copied() else {
        return worker.drop(DropReason::NoNeighbor);
    };
    let b = tables.backends[backend as usize];
    worker.stats.fragments += 1;
    worker.vip_packets[vip as usize] += 1;
    worker.vip_bytes[vip as usize] += len;
    worker.backend_packets[backend as usize] += 1;
    worker.backend_bytes[backend as usize] += len;
    match v.mode {
        Mode::Tunnel(encap) => {
            match encapsulate(
                frame,
                ip,
                encap,
                &n,
                b.address,
                b.v6,
                hash,
                &tables.tunnel_source,
            ) {
                Ok(()) => worker.tx(n.ifindex),
                Err(r) => worker.drop(r),
            }
        }
        _ => {
            set_macs(frame.data_mut(), &n);
            worker.tx(n.ifindex)
        }
    }
}

/// Prepends the tunnel headers. The Ethernet header (with its VLAN tags) moves to the new
/// front; Ethernet padding after the IP packet is cut.
#[allow(clippy::too_many_arguments)]
fn encapsulate(
    frame: &mut Frame<'_>,
    ip: &Ip,
    encap: Encap,
    n: &Neighbor,
    backend: u128,
    outer_v6: bool,
    hash: u32,
    src: &TunnelSource,
) -> Result<(), DropReason> {
    let l3 = ip.l3;
    if frame.set_len(l3 + ip.ip_len).is_err() {
        return Err(DropReason::BadLength);
    }
    let inner_eth = 14;
    let (udp, extra) = match encap {
        Encap::Ipip => (None, 0),
        Encap::Gue { port } => (Some(port), 8),
        Encap::Vxlan { port, .. } => (Some(port), 8 + 8 + inner_eth),
    };
    let outer_ip = if outer_v6 { 40 } else { 20 };
    let add = outer_ip + extra;
    // The outer length field must hold the result (IPv4 total length, IPv6 payload length).
    if ip.ip_len + add - if outer_v6 { 40 } else { 0 } > usize::from(u16::MAX) {
        return Err(DropReason::BadLength);
    }
    // DSCP/ECN and DF come from the inner header before anything moves.
    let (tos, df) = {
        let d = frame.data();
        if ip.v6 {
            (((rd16(d, l3) >> 4) & 0xff) as u8, true)
        } else {
            (d[l3 + 1], d[l3 + 6] & 0x40 != 0)
        }
    };
    if frame.push_front(add).is_err() {
        return Err(DropReason::NoRoom);
    }
    let d = frame.data_mut();
    // Move MACs + tags + EtherType to the new front.
    d.copy_within(add..add + l3, 0);
    wr16(d, l3 - 2, if outer_v6 { ETH_P_IPV6 } else { ETH_P_IPV4 });
    set_macs(d, n);
    let total = d.len() - l3;
    let inner_proto = match encap {
        Encap::Ipip if ip.v6 => PROTO_IPV6,
        Encap::Ipip => PROTO_IPIP,
        _ => PROTO_UDP,
    };
    let (src_addr, sport) = tunnel_source(src, outer_v6, hash);
    let o = l3;
    if outer_v6 {
        let vtcf = (6u32 << 28) | (u32::from(tos) << 20) | (hash & 0x000f_ffff);
        d[o..o + 4].copy_from_slice(&vtcf.to_be_bytes());
        wr16(d, o + 4, (total - 40) as u16);
        d[o + 6] = inner_proto;
        d[o + 7] = OUTER_TTL;
        wr_addr(d, o + 8, true, src_addr);
        wr_addr(d, o + 24, true, backend);
    } else {
        let flags = if df { 0x4000u16 } else { 0 };
        let (s, t) = (src_addr as u32, backend as u32);
        // Summed from the values, not re-read from the bytes just stored: reading them back
        // as wider words would stall on store forwarding.
        let sum = (0x4500u32 | u32::from(tos))
            + total as u32
            + u32::from(flags)
            + ((u32::from(OUTER_TTL) << 8) | u32::from(inner_proto))
            + (s >> 16)
            + (s & 0xffff)
            + (t >> 16)
            + (t & 0xffff);
        d[o] = 0x45;
        d[o + 1] = tos;
        wr16(d, o + 2, total as u16);
        wr16(d, o + 4, 0);
        wr16(d, o + 6, flags);
        d[o + 8] = OUTER_TTL;
        d[o + 9] = inner_proto;
        wr16(d, o + 10, checksum::finish(sum));
        wr_addr(d, o + 12, false, src_addr);
        wr_addr(d, o + 16, false, backend);
    }
    if let Some(port) = udp {
        let u = o + outer_ip;
        wr16(d, u, sport);
        wr16(d, u + 2, port);
        wr16(d, u + 4, (total - outer_ip) as u16);
        wr16(d, u + 6, 0);
        if let Encap::Vxlan { vni, .. } = encap {
            let x = u + 8;
            d[x..x + 4].copy_from_slice(&[0x08, 0, 0, 0]);
            d[x + 4..x + 8].copy_from_slice(&((vni & 0x00ff_ffff) << 8).to_be_bytes());
            let e = x + 8;
            d[e..e + 6].copy_from_slice(&n.dst_mac.0);
            d[e + 6..e + 12].copy_from_slice(&n.src_mac.0);
            wr16(d, e + 12, if ip.v6 { ETH_P_IPV6 } else { ETH_P_IPV4 });
        }
        if outer_v6 {
            let end = d.len();
            l4_checksum_full(d, o, true, u, end, PROTO_UDP, 6);
        }
    }
    Ok(())
}

/// Outer source address and UDP source port derived from the flow hash.
pub fn tunnel_source(src: &TunnelSource, v6: bool, hash: u32) -> (u128, u16) {
    let sport = 49152 | (hash as u16 & 0x3fff);
    if v6 {
        let base = u128::from(src.v6) & !0xffff_ffffu128;
        (base | u128::from(hash), sport)
    } else {
        let base = u32::from(src.v4) & 0xffff_0000;
        (0xffff_0000_0000 | u128::from(base | (hash & 0xffff)), sport)
    }
}

/// Replaces the frame with an ICMP time-exceeded from the VIP (the packet's destination)
/// back to its sender.
#[cold]
#[inline(never)]
fn time_exceeded(frame: &mut Frame<'_>, worker: &mut WorkerState, ip: &Ip) -> Verdict {
    let l3 = ip.l3;
    let hdr = if ip.v6 { 48 } else { 28 };
    let quote_max = if ip.v6 { 1280 - 48 } else { (ip.l4 - l3) + 8 };
    let room = frame.capacity().saturating_sub(l3 + hdr);
    let quote = ip.ip_len.min(quote_max).min(room);
    if frame.set_len(l3 + hdr + quote).is_err() {
        return worker.drop(DropReason::NoRoom);
    }
    let d = frame.data_mut();
    d.copy_within(l3..l3 + quote, l3 + hdr);
    swap_macs(d);
    let total = hdr + quote;
    if ip.v6 {
        let vtcf = 6u32 << 28;
        d[l3..l3 + 4].copy_from_slice(&vtcf.to_be_bytes());
        wr16(d, l3 + 4, (total - 40) as u16);
        d[l3 + 6] = PROTO_ICMPV6;
        d[l3 + 7] = OUTER_TTL;
        wr_addr(d, l3 + 8, true, ip.dst);
        wr_addr(d, l3 + 24, true, ip.src);
        let i = l3 + 40;
        d[i..i + 8].copy_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0]);
        let end = l3 + total;
        l4_checksum_full(d, l3, true, i, end, PROTO_ICMPV6, 2);
    } else {
        d[l3] = 0x45;
        d[l3 + 1] = 0;
        wr16(d, l3 + 2, total as u16);
        wr16(d, l3 + 4, 0);
        wr16(d, l3 + 6, 0);
        d[l3 + 8] = OUTER_TTL;
        d[l3 + 9] = PROTO_ICMP;
        wr_addr(d, l3 + 12, false, ip.dst);
        wr_addr(d, l3 + 16, false, ip.src);
        v4_header_checksum(d, l3, 20);
        let i = l3 + 20;
        d[i..i + 8].copy_from_slice(&[11, 0, 0, 0, 0, 0, 0, 0]);
        let c = checksum::checksum(&d[i..l3 + total]);
        wr16(d, i + 2, c);
    }
    worker.stats.time_exceeded_sent += 1;
    let ifindex = frame.ifindex;
    worker.tx(ifindex)
}

/// ICMP / ICMPv6 addressed to a VIP: echo replies and errors quoting a flow.
fn icmp(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    now: u64,
) -> Verdict {
    if tables.vip_by_address(ip.dst).is_none() {
        return worker.pass();
    }
    if ip.frag {
        return worker.pass();
    }
    let end = ip.l3 + ip.ip_len;
    if end < ip.l4 + 8 {
        return worker.drop(DropReason::Truncated);
    }
    let ty = frame.data()[ip.l4];
    let (echo, error) = if ip.v6 {
        (ty == 128, matches!(ty, 1..=3))
    } else {
        (ty == 8, matches!(ty, 3 | 11))
    };
    if echo {
        let d = frame.data_mut();
        let reply = if ip.v6 { 129u8 } else { 0 };
        let old = rd16(d, ip.l4);
        d[ip.l4] = reply;
        let new = rd16(d, ip.l4);
        let c = checksum::update16(rd16(d, ip.l4 + 2), old, new);
        wr16(d, ip.l4 + 2, c);
        // Swapping source and destination leaves every checksum's sum unchanged.
        let (s, t) = if ip.v6 { (8, 24) } else { (12, 16) };
        let n = if ip.v6 { 16 } else { 4 };
        for k in 0..n {
            d.swap(ip.l3 + s + k, ip.l3 + t + k);
        }
        if ip.v6 {
            d[ip.l3 + 7] = OUTER_TTL;
        } else {
            let old = rd16(d, ip.l3 + 8);
            d[ip.l3 + 8] = OUTER_TTL;
            let c = checksum::update16(rd16(d, ip.l3 + 10), old, rd16(d, ip.l3 + 8));
            wr16(d, ip.l3 + 10, c);
        }
        swap_macs(d);
        worker.stats.echo_replies += 1;
        let ifindex = frame.ifindex;
        return worker.tx(ifindex);
    }
    if !error {
        return worker.pass();
    }
    icmp_error(frame, tables, ct, worker, ip, now)
}

/// An ICMP error to a VIP quoting VIP → client: forward to the flow's backend.
fn icmp_error(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    now: u64,
) -> Verdict {
    let end = ip.l3 + ip.ip_len;
    let q = ip.l4 + 8;
    // The quoted packet: its header must be complete and 8 bytes of L4 present.
    let (ql4, qproto, qsrc, qdst) = {
        let d = &frame.data()[..end];
        if ip.v6 {
            if d.len() < q + 40 + 8 || d[q] >> 4 != 6 {
                return worker.drop(DropReason::IcmpNoFlow);
            }
            (
                q + 40,
                d[q + 6],
                rd_addr(d, q + 8, true),
                rd_addr(d, q + 24, true),
            )
        } else {
            if d.len() < q + 20 || d[q] >> 4 != 4 {
                return worker.drop(DropReason::IcmpNoFlow);
            }
            let hl = usize::from(d[q] & 0xf) * 4;
            if hl < 20 || d.len() < q + hl + 8 {
                return worker.drop(DropReason::IcmpNoFlow);
            }
            (
                q + hl,
                d[q + 9],
                rd_addr(d, q + 12, false),
                rd_addr(d, q + 16, false),
            )
        }
    };
    if !matches!(qproto, PROTO_TCP | PROTO_UDP) || qsrc != ip.dst {
        return worker.drop(DropReason::IcmpNoFlow);
    }
    let (qsport, qdport) = {
        let d = frame.data();
        (rd16(d, ql4), rd16(d, ql4 + 2))
    };
    let Some(vip) = tables.vip_lookup(qsrc, qsport, qproto) else {
        return worker.drop(DropReason::IcmpNoFlow);
    };
    let v = &tables.vips[vip as usize];
    // The quoted packet went VIP → client: the flow key is its reverse.
    let key = FlowKey {
        src: qdst,
        dst: qsrc,
        sport: qdport,
        dport: qsport,
        proto: qproto,
        v6: ip.v6,
    };
    let hash = key.hash(v.hash);
    let (backend, snat) = match ct.lookup(&key, now) {
        Some(id) => {
            let f = ct.flow(id);
            (f.backend, f.snat)
        }
        None if v.scheduler == Scheduler::Maglev && v.mode != Mode::FullNat => {
            match v.ring.lookup(hash) {
                Some(pos) => (v.backends.start + pos, None),
                None => return worker.drop(DropReason::IcmpNoFlow),
            }
        }
        None => return worker.drop(DropReason::IcmpNoFlow),
    };
    if backend == NONE {
        return worker.drop(DropReason::IcmpNoFlow);
    }
    let Some(n) = tables.neighbor(backend).copied() else {
        return worker.drop(DropReason::NoNeighbor);
    };
    let b = tables.backends[backend as usize];
    worker.stats.icmp_errors_forwarded += 1;
    match v.mode {
        Mode::Dr | Mode::Tunnel(_) => {
            direct_to_backend(frame, tables, worker, ip, v.mode, &n, &b, hash)
        }
        Mode::Nat | Mode::FullNat => {
            if b.v6 != ip.v6 {
                return worker.drop(DropReason::FamilyMismatch);
            }
            if frame.set_len(end).is_err() {
                return worker.drop(DropReason::BadLength);
            }
            let d = frame.data_mut();
            if !decrement_ttl(d, ip) {
                return worker.drop(DropReason::TtlExceeded);
            }
            // Outer: to the backend (from our SNAT address for FullNAT).
            rewrite_addr(d, ip, None, false, b.address);
            if let Some((saddr, _)) = snat {
                rewrite_addr(d, ip, None, true, saddr);
            }
            // Quoted: what the backend sent, backend:port → client or SNAT address:port.
            let qip = Ip {
                l3: q,
                v6: ip.v6,
                ip_len: end - q,
                l4: ql4,
                proto: qproto,
                src: qsrc,
                dst: qdst,
                frag: false,
            };
            // The quoted UDP checksum is inside the 8 quoted bytes; TCP's is not.
            let qcsum = (qproto == PROTO_UDP).then_some(L4Csum {
                off: ql4 + 6,
                udp: !ip.v6,
            });
            let no_csum = L4Csum {
                off: ql4 + 6,
                udp: true,
            };
            rewrite_addr(d, &qip, qcsum, true, b.address);
            let pc = qcsum.unwrap_or(no_csum);
            if qcsum.is_some() {
                rewrite_port(d, ql4, pc, b.port);
            } else {
                wr16(d, ql4, b.port);
            }
            if let Some((saddr, sport)) = snat {
                rewrite_addr(d, &qip, qcsum, false, saddr);
                if qcsum.is_some() {
                    rewrite_port(d, ql4 + 2, pc, sport);
                } else {
                    wr16(d, ql4 + 2, sport);
                }
            }
            if ip.v6 {
                l4_checksum_full(d, ip.l3, true, ip.l4, end, PROTO_ICMPV6, 2);
            } else {
                wr16(d, ip.l4 + 2, 0);
                let c = checksum::checksum(&d[ip.l4..end]);
                wr16(d, ip.l4 + 2, c);
            }
            set_macs(d, &n);
            worker.tx(n.ifindex)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Backend, BackendState, Config, Protocol};
    use crate::lb::golden::{self, Pkt, tcp, udp};
    use proptest::prelude::*;
    use wire::MacAddr;

    #[test]
    fn scheduler_state_survives_a_swap_that_leaves_the_pool_alone() {
        let cfg = Config::from_toml_str(
            "[appliance]\nname = \"t\"\ninterfaces = [\"eth0\"]\n\
             [[vip]]\nname = \"a\"\naddress = \"192.0.2.10\"\nport = 80\nscheduler = \"rr\"\n\
             [[vip.backend]]\naddress = \"10.0.0.1\"\n[[vip.backend]]\naddress = \"10.0.0.2\"\n\
             [[vip]]\nname = \"b\"\naddress = \"192.0.2.11\"\nport = 80\nscheduler = \"rr\"\n\
             [[vip.backend]]\naddress = \"10.0.0.3\"\n[[vip.backend]]\naddress = \"10.0.0.4\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut ct = ConnTable::new(64, cfg.appliance.timeouts, 4, 0, 1);
        let mut w = WorkerState::new();
        let v1 = Tables::build(&cfg, &|_, _| true, 1).expect("tables");
        w.adopt(&v1, &mut ct);
        for vip in 0..2 {
            w.sched_state(vip).expect("state").expiration_ns = 4242;
        }
        // Version 2: VIP b loses a backend to health; VIP a is untouched.
        let v2 = Tables::build(
            &cfg,
            &|v, b| v.name == "a" || b.address.to_string() != "10.0.0.4",
            2,
        )
        .expect("tables");
        w.adopt(&v2, &mut ct);
        assert_eq!(
            w.sched_state(0).expect("a").expiration_ns,
            4242,
            "a keeps its state"
        );
        assert_ne!(
            w.sched_state(1).expect("b").expiration_ns,
            4242,
            "b starts afresh"
        );
    }

    const SEC: u64 = 1_000_000_000;

    /// The golden fixtures and tables, built once for the property tests.
    fn shared() -> &'static (Vec<golden::Fixture>, Tables) {
        static SHARED: std::sync::OnceLock<(Vec<golden::Fixture>, Tables)> =
            std::sync::OnceLock::new();
        SHARED.get_or_init(|| (golden::fixtures(), golden::setup().0))
    }

    fn backends(n: u8) -> Vec<Backend> {
        (1..=n)
            .map(|i| Backend {
                address: format!("10.9.0.{i}").parse().unwrap(),
                port: 80,
                weight: 1,
                state: BackendState::Active,
            })
            .collect()
    }

    fn one_vip(mode: Mode, scheduler: Scheduler, n: u8) -> Config {
        let mut c = golden::base_config();
        c.vips = vec![crate::config::Vip {
            name: "web".into(),
            address: "192.0.2.100".parse().unwrap(),
            port: 80,
            protocol: Protocol::Tcp,
            mode,
            scheduler,
            hash: HashFields::FiveTuple,
            health_check: None,
            snat: vec!["10.1.0.1".parse().unwrap()],
            communities: Vec::new(),
            backends: backends(n),
        }];
        c
    }

    /// Tables with every backend's neighbour MAC ending in its address's last byte.
    fn tables(c: &Config, version: u64, healthy: &dyn Fn(&Backend) -> bool) -> Tables {
        let mut t = Tables::build(c, &|_, b| healthy(b), version).unwrap();
        for s in 0..t.backends.len() as u32 {
            let last = match t.backends[s as usize].ip() {
                std::net::IpAddr::V4(a) => a.octets()[3],
                std::net::IpAddr::V6(a) => a.octets()[15],
            };
            t.set_neighbor(
                s,
                Neighbor {
                    ifindex: 2,
                    src_mac: MacAddr(golden::OUR_MAC),
                    dst_mac: MacAddr([2, 0, 0, 0, 9, last]),
                },
            );
        }
        t.set_gateway(
            false,
            Neighbor {
                ifindex: 1,
                src_mac: MacAddr(golden::OUR_MAC),
                dst_mac: MacAddr(golden::ROUTER_MAC),
            },
        );
        t
    }

    /// Sends one TCP packet from client port `sport`; returns the verdict and the backend
    /// (last address byte) it went to.
    fn send(
        t: &Tables,
        ct: &mut ConnTable,
        w: &mut WorkerState,
        sport: u16,
        flags: u8,
        now: u64,
    ) -> (Verdict, Option<u8>) {
        let input = Pkt::new(
            "198.51.100.7",
            "192.0.2.100",
            6,
            tcp(sport, 80, flags, 1, b""),
        )
        .build();
        let mut buf = vec![0xa5u8; HEADROOM + input.len() + 128];
        buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
        let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
        let v = process(&mut f, t, ct, w, now);
        let b = matches!(v, Verdict::Tx { .. }).then(|| f.data()[5]);
        (v, b)
    }

    fn ct_for(t: &Tables, cap: usize) -> ConnTable {
        ConnTable::new(cap, t.timeouts, t.backends.len(), 0, 1)
    }

    #[test]
    fn drain_keeps_flows_and_takes_no_new_ones() {
        let mut c = one_vip(Mode::Dr, Scheduler::Maglev, 2);
        let t1 = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t1, 1024);
        let mut w = WorkerState::new();
        let mut on = [Vec::new(), Vec::new()];
        for sport in 1000..1040 {
            let (_, b) = send(&t1, &mut ct, &mut w, sport, 0x02, 0);
            on[usize::from(b.unwrap()) - 1].push(sport);
        }
        assert!(!on[0].is_empty() && !on[1].is_empty());
        c.vips[0].backends[0].state = BackendState::Drain;
        let t2 = tables(&c, 2, &|_| true);
        for &sport in &on[0] {
            assert_eq!(
                send(&t2, &mut ct, &mut w, sport, 0x10, SEC).1,
                Some(1),
                "kept"
            );
        }
        for sport in 2000..2040 {
            assert_eq!(
                send(&t2, &mut ct, &mut w, sport, 0x02, SEC).1,
                Some(2),
                "new"
            );
        }
        assert_eq!(w.stats.rechosen, 0);
    }

    #[test]
    fn disabled_unhealthy_and_removed_backends_rechoose() {
        let mut c = one_vip(Mode::Dr, Scheduler::Maglev, 3);
        let t1 = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t1, 1024);
        let mut w = WorkerState::new();
        let flows: Vec<(u16, u8)> = (3000..3060)
            .map(|p| (p, send(&t1, &mut ct, &mut w, p, 0x02, 0).1.unwrap()))
            .collect();
        let on = |b: u8| flows.iter().filter(move |f| f.1 == b).map(|f| f.0);
        // Disabled: backend 1's flows move, others stay.
        c.vips[0].backends[0].state = BackendState::Disabled;
        let t2 = tables(&c, 2, &|_| true);
        for p in on(1) {
            assert_ne!(send(&t2, &mut ct, &mut w, p, 0x10, SEC).1, Some(1));
        }
        for p in on(2) {
            assert_eq!(send(&t2, &mut ct, &mut w, p, 0x10, SEC).1, Some(2));
        }
        let moved = on(1).count() as u64;
        assert_eq!(w.stats.rechosen, moved);
        // Unhealthy: backend 2's flows move to 3.
        let t3 = tables(&c, 3, &|b| b.address.to_string() != "10.9.0.2");
        for p in on(2) {
            assert_eq!(send(&t3, &mut ct, &mut w, p, 0x10, 2 * SEC).1, Some(3));
        }
        // Removed: backend 3 leaves the config; everything lands on 2 (healthy again).
        c.vips[0].backends.pop();
        let t4 = tables(&c, 4, &|_| true);
        for p in on(3) {
            assert_eq!(send(&t4, &mut ct, &mut w, p, 0x10, 3 * SEC).1, Some(2));
        }
    }

    #[test]
    fn full_table_falls_back_to_maglev_and_counts() {
        let c = one_vip(Mode::Dr, Scheduler::Rr, 3);
        let t = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t, 2);
        let mut w = WorkerState::new();
        // Two established flows fill the table and cannot be evicted.
        send(&t, &mut ct, &mut w, 1, 0x10, 0);
        send(&t, &mut ct, &mut w, 2, 0x10, 0);
        for sport in 10..20u16 {
            let (v, b) = send(&t, &mut ct, &mut w, sport, 0x02, 1);
            assert!(matches!(v, Verdict::Tx { ifindex: 2 }));
            let key = FlowKey {
                src: crate::lb::hash::addr_to_u128("198.51.100.7".parse().unwrap()),
                dst: crate::lb::hash::addr_to_u128("192.0.2.100".parse().unwrap()),
                sport,
                dport: 80,
                proto: 6,
                v6: false,
            };
            let pos = t.vips[0]
                .ring
                .lookup(key.hash(HashFields::FiveTuple))
                .unwrap();
            assert_eq!(b, Some(pos as u8 + 1), "stateless maglev answer");
        }
        assert_eq!(w.stats.conntrack_fallback, 10);
        assert_eq!(ct.stats.full, 10);
        // FullNAT cannot run without an entry.
        let c = one_vip(Mode::FullNat, Scheduler::Maglev, 1);
        let t = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t, 1);
        send(&t, &mut ct, &mut w, 1, 0x10, 0);
        let (v, _) = send(&t, &mut ct, &mut w, 2, 0x10, 0);
        assert_eq!(v, Verdict::Drop(DropReason::NoFlow));
    }

    #[test]
    fn flows_expire_by_now() {
        let c = one_vip(Mode::Dr, Scheduler::Rr, 2);
        let t = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t, 16);
        let mut w = WorkerState::new();
        // rr: the first flow goes to 1; its SYN state lives 30 s.
        assert_eq!(send(&t, &mut ct, &mut w, 1, 0x02, 0).1, Some(1));
        assert_eq!(send(&t, &mut ct, &mut w, 1, 0x02, 30 * SEC).1, Some(1));
        assert_eq!(ct.stats.inserted, 1);
        // Idle past the SYN timeout: a new entry, and rr moves on to backend 2.
        assert_eq!(send(&t, &mut ct, &mut w, 1, 0x02, 60 * SEC + 1).1, Some(2));
        assert_eq!(ct.stats.expired, 1);
        assert_eq!(ct.stats.inserted, 2);
    }

    #[test]
    fn lc_follows_connection_counts_kept_by_the_table() {
        let c = one_vip(Mode::Dr, Scheduler::Lc, 2);
        let t = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t, 16);
        let mut w = WorkerState::new();
        // All idle: first wins; then the one with fewer inactive; then a tie (1, 1) -> first.
        assert_eq!(send(&t, &mut ct, &mut w, 1, 0x02, 0).1, Some(1));
        assert_eq!(send(&t, &mut ct, &mut w, 2, 0x02, 0).1, Some(2));
        assert_eq!(send(&t, &mut ct, &mut w, 3, 0x02, 0).1, Some(1));
        // Flow 1 completes its handshake: backend 1 = 1 active + 1 inactive = 257,
        // backend 2 = 1 inactive = 1.
        send(&t, &mut ct, &mut w, 1, 0x10, 1);
        assert_eq!(ct.active_counts(), &[1, 0]);
        assert_eq!(ct.inactive_counts(), &[1, 1]);
        assert_eq!(send(&t, &mut ct, &mut w, 4, 0x02, 2).1, Some(2));
        // Flow 1 closes: back to inactive.
        send(&t, &mut ct, &mut w, 1, 0x11, 3);
        assert_eq!(ct.active_counts(), &[0, 0]);
        assert_eq!(ct.inactive_counts(), &[2, 2]);
    }

    #[test]
    fn udp_nat_round_trip_through_process() {
        let mut c = one_vip(Mode::Nat, Scheduler::Maglev, 1);
        c.vips[0].protocol = Protocol::Udp;
        let t = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t, 16);
        let mut w = WorkerState::new();
        let q = Pkt::new("198.51.100.7", "192.0.2.100", 17, udp(5000, 80, b"q")).build();
        let mut buf = vec![0u8; HEADROOM + q.len()];
        buf[HEADROOM..].copy_from_slice(&q);
        let mut f = Frame::new(&mut buf, HEADROOM, q.len(), 1).unwrap();
        assert_eq!(
            process(&mut f, &t, &mut ct, &mut w, 0),
            Verdict::Tx { ifindex: 2 }
        );
        assert_eq!(w.vip_packets[0], 1);
        assert_eq!(w.backend_bytes[0], q.len() as u64);
        assert_eq!(ct.inactive_counts(), &[1]);
    }

    #[test]
    fn encapsulation_needs_headroom_and_a_representable_length() {
        let t = &shared().1;
        let mut ct = ct_for(t, 16);
        let mut w = WorkerState::new();
        // No headroom: dropped untouched.
        let input = Pkt::new("198.51.100.7", "192.0.2.40", 6, tcp(1, 80, 0x02, 1, b"")).build();
        let mut buf = input.clone();
        let mut f = Frame::new(&mut buf, 0, input.len(), 1).unwrap();
        assert_eq!(
            process(&mut f, t, &mut ct, &mut w, 0),
            Verdict::Drop(DropReason::NoRoom)
        );
        assert_eq!(f.data(), &input[..]);
        // A 65 520-byte inner packet cannot get a 20-byte outer IPv4 header.
        let big = Pkt::new(
            "198.51.100.7",
            "192.0.2.40",
            6,
            tcp(2, 80, 0x10, 1, &vec![0u8; 65480]),
        )
        .build();
        let mut buf = vec![0u8; HEADROOM + big.len()];
        buf[HEADROOM..].copy_from_slice(&big);
        let mut f = Frame::new(&mut buf, HEADROOM, big.len(), 1).unwrap();
        assert_eq!(
            process(&mut f, t, &mut ct, &mut w, 0),
            Verdict::Drop(DropReason::BadLength)
        );
        assert_eq!(f.data(), &big[..]);
    }

    /// The word-at-a-time NAT rewrite [`nat_rewrite`] replaced (kept verbatim as the
    /// reference it must match byte for byte).
    fn nat_rewrite_reference(
        d: &mut [u8],
        ip: &Ip,
        l4: &L4,
        src: Option<(u128, u16)>,
        dst: Option<(u128, u16)>,
    ) {
        fn addr_delta(old: u128, new: u128, v6: bool) -> u32 {
            let words = if v6 { 8 } else { 2 };
            let mut acc = 0u32;
            for i in 0..words {
                acc += u32::from(!((old >> (16 * i)) as u16)) + u32::from((new >> (16 * i)) as u16);
            }
            acc
        }
        let mut ip_acc = 0u32;
        let mut l4_acc = 0u32;
        if ip.v6 {
            d[ip.l3 + 7] -= 1;
        } else {
            let old = rd16(d, ip.l3 + 8);
            let new = old - 0x100;
            wr16(d, ip.l3 + 8, new);
            ip_acc += u32::from(!old) + u32::from(new);
        }
        let (so, dof) = if ip.v6 { (8, 24) } else { (12, 16) };
        for (change, aoff, poff) in [(src, so, 0), (dst, dof, 2)] {
            let Some((addr, port)) = change else {
                continue;
            };
            let old = rd_addr(d, ip.l3 + aoff, ip.v6);
            wr_addr(d, ip.l3 + aoff, ip.v6, addr);
            let delta = addr_delta(old, addr, ip.v6);
            if !ip.v6 {
                ip_acc += delta;
            }
            let old_port = rd16(d, ip.l4 + poff);
            wr16(d, ip.l4 + poff, port);
            l4_acc += delta + u32::from(!old_port) + u32::from(port);
        }
        if !ip.v6 {
            let c = rd16(d, ip.l3 + 10);
            wr16(d, ip.l3 + 10, !checksum::fold(u32::from(!c) + ip_acc));
        }
        l4.csum
            .patch(d, |c| !checksum::fold(u32::from(!c) + l4_acc));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The split IPv4/IPv6 NAT rewrite gives the same bytes as the word-at-a-time one
        /// for any header bytes, addresses, ports and checksums (UDP zero and 0xffff
        /// included, through `special`).
        #[test]
        fn nat_rewrite_matches_reference(
            v6 in any::<bool>(),
            udp in any::<bool>(),
            bytes in proptest::collection::vec(any::<u8>(), 14 + 40 + 20),
            src in proptest::option::of((any::<u128>(), any::<u16>())),
            dst in proptest::option::of((any::<u128>(), any::<u16>())),
            special in 0u8..4,
        ) {
            let mut d = bytes;
            let l3 = 14;
            let hl = if v6 { 40 } else { 20 };
            let l4off = l3 + hl;
            let csum_off = l4off + if udp { 6 } else { 16 };
            // The caller guarantees TTL / hop limit > 1.
            let ttl_at = l3 + if v6 { 7 } else { 8 };
            d[ttl_at] = d[ttl_at].max(2);
            match special {
                1 => wr16(&mut d, csum_off, 0),
                2 => wr16(&mut d, csum_off, 0xffff),
                _ => {}
            }
            // IPv4 addresses live in the low 32 bits of the u128 form.
            let narrow = |c: Option<(u128, u16)>| {
                c.map(|(a, p)| (if v6 { a } else { 0xffff_0000_0000 | (a & 0xffff_ffff) }, p))
            };
            let (src, dst) = (narrow(src), narrow(dst));
            let ip = Ip {
                l3,
                v6,
                ip_len: hl + 20,
                l4: l4off,
                proto: if udp { PROTO_UDP } else { PROTO_TCP },
                src: rd_addr(&d, l3 + if v6 { 8 } else { 12 }, v6),
                dst: rd_addr(&d, l3 + if v6 { 24 } else { 16 }, v6),
                frag: false,
            };
            let l4 = L4 {
                sport: rd16(&d, l4off),
                dport: rd16(&d, l4off + 2),
                flags: 0,
                csum: L4Csum { off: csum_off, udp: udp && !v6 },
            };
            let mut want = d.clone();
            nat_rewrite_reference(&mut want, &ip, &l4, src, dst);
            nat_rewrite(&mut d, &ip, &l4, src, dst);
            prop_assert_eq!(d, want);
        }

        /// Any corruption or truncation of any golden input gives a verdict, never a panic,
        /// and a Tx frame never leaves the buffer.
        #[test]
        fn mutated_frames_never_panic(
            which in 0usize..84,
            flips in proptest::collection::vec((any::<u16>(), any::<u8>()), 0..8),
            cut in any::<u16>(),
        ) {
            let (fixtures, t) = shared();
            let fx = &fixtures[which % fixtures.len()];
            let mut input = fx.input.clone();
            for (at, x) in flips {
                let n = input.len();
                if n > 0 {
                    input[usize::from(at) % n] ^= x;
                }
            }
            let keep = usize::from(cut) % (input.len() + 1);
            if cut % 3 == 0 {
                input.truncate(keep);
            }
            let mut ct = ct_for(t, 64);
            let mut w = WorkerState::new();
            let mut buf = vec![0xa5u8; HEADROOM + input.len() + 64];
            buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
            let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
            let _ = process(&mut f, t, &mut ct, &mut w, golden::NOW);
            prop_assert!(f.start() + f.len() <= HEADROOM + input.len() + 64);
        }

        /// Random bytes with an IPv4 or IPv6 EtherType never panic either.
        #[test]
        fn random_ip_frames_never_panic(v6 in any::<bool>(), body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let t = &shared().1;
            let mut ct = ct_for(t, 64);
            let mut w = WorkerState::new();
            let mut input = vec![2, 0, 0, 0, 0, 0xaa, 2, 0, 0, 0, 0, 1];
            input.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
            input.extend_from_slice(&body);
            if let Some(b) = input.get_mut(14) {
                *b = (*b & 0x0f) | if v6 { 0x60 } else { 0x40 };
            }
            let mut buf = vec![0u8; HEADROOM + input.len()];
            buf[HEADROOM..].copy_from_slice(&input);
            let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
            let _ = process(&mut f, t, &mut ct, &mut w, 0);
        }
    }
}
