//! The XDP flow cache: established flows forwarded in the kernel, decided by the engine.
//!
//! The AF_XDP engine (`lb::process`) stays the authority. After it forwards a frame of an
//! established flow it describes what it did ([`Decision`]); [`entry_for`] turns that into
//! a rewrite the XDP program (bpf/flowcache.h, `cache_forward`) repeats for the flow's next
//! frames without waking a worker: NAT and FullNAT in both directions (each direction has
//! its own entry, keyed by the 5-tuple the frame carries) and DR, over IPv4 and IPv6, TCP
//! and UDP. Tunnel modes are not cached (their frames keep going to the engine).
//!
//! The maps are created here, before the program is loaded, and the program reuses them
//! (`Steer::load_with_cache`): the control plane and every worker hold this handle from
//! the start, whatever order the datapath comes up in.
//!
//! ```text
//! rx -> XDP program: cache hit? --yes--> rewrite, counters, XDP_TX | redirect(tx_ports)
//!                             \--no---> steering -> AF_XDP -> lb::process
//!                                                                  \-> LbHandler installs
//! control commit -> control::cache::after_commit -> evict what the new tables change
//! worker tick    -> a last_seen that moved refreshes the connection table (ageing)
//! ```
//!
//! The program looks an entry up in each CPU's front table first (bpf/front.h, "the cache's
//! front table"): a copy of the entries that CPU hit, valid for the jiffy it was made in,
//! at a slot of our own hash (`layout::front_index`). Every [`FlowCache::install`] and
//! [`FlowCache::evict`] writes a new number at the key's slot of `front_gen` (mapped into
//! our memory: one store, no syscall), which makes every CPU's copy of that key stale
//! before the call returns; so a copy never serves an entry the map no longer holds.

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

mod adopt;
mod layout;
mod worker;

pub use worker::{SWEEP_NS, WorkerCache};

use super::DatapathError;
use super::abi::{
    MapDef, cache_counter, cache_key4, cache_key6, cache_stat, cache_val, hairpin_tx, maps,
};
use super::steer::bpf_err;
use crate::config::{ClientAddress, Mode};
use crate::lb::BackendId;
use crate::lb::FlowState;
use crate::lb::conntrack::{Proxied, Rescale, tcp_flags};
use crate::lb::hash::FlowKey;
use crate::lb::process::Decision;
use layout::{FRONT_SLOTS, front_index, key_bytes, key_from_bytes};
use sys::bpfmem::MappedWords;

/// Entries the cache holds per address family (an LRU each: the least recently used entry
/// makes room). The kernel allocates them up front: about 140 bytes an IPv4 entry and 160 an
/// IPv6 one, 39 MiB for both maps. (The program's front tables add a fixed 0.5 MiB per CPU:
/// 2,048 copies of 112 and 136 bytes.)
pub const CACHE_ENTRIES: u32 = 131_072;

/// Counter slots per (VIP, backend) (the program's `cache_stats`); slot 0 is "other".
pub const STAT_SLOTS: u32 = maps::CACHE_STATS.entries;

/// `cache_counters` index of frames steered to the engine while the cache is on.
const CC_MISS: u32 = cache_counter::CC_MISS.0;
/// `cache_counters` index of hits without a `tx_ports` entry.
const CC_NO_EGRESS: u32 = cache_counter::CC_NO_EGRESS.0;
const _: () = assert!(maps::CACHE_COUNTERS.entries == cache_counter::CC_MAX.0);

/// `BPF_F_MMAPABLE`: an array userspace may mmap (front_gen).
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// How the kernel sends a hit that leaves through the interface it arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hairpin {
    /// XDP_TX: the NIC's own transmit ring (real NICs).
    XdpTx,
    /// A DEVMAP redirect back to the same interface. For veth: after an XDP_TX, veth wakes
    /// its peer's NAPI only when the peer runs an XDP program, not when NAPI is on for GRO
    /// (`veth_xdp_flush` checks the peer queue's XDP program), so XDP_TX'd frames wait in
    /// the peer's ring until the kernel next sends that way, or for good once the ring
    /// fills. A redirect wakes the peer either way.
    Redirect,
}

impl Hairpin {
    /// The program's code for it (`cache_val.tx`, `stateless_hop.tx`).
    pub(crate) fn tx(self) -> hairpin_tx {
        match self {
            Hairpin::XdpTx => hairpin_tx::TX_XDP_TX,
            Hairpin::Redirect => hairpin_tx::TX_REDIRECT,
        }
    }

    /// The choice for an interface whose driver is `driver` (ethtool's name).
    pub fn for_driver(driver: Option<&str>) -> Hairpin {
        match driver {
            Some("veth") => Hairpin::Redirect,
            _ => Hairpin::XdpTx,
        }
    }
}

/// What the kernel does on a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheAction {
    /// TTL / hop limit down by one, then the addresses and ports given replaced (NAT,
    /// FullNAT, either direction), checksums patched as `lb::process` patches them.
    Nat {
        /// New source address and port.
        src: Option<(u128, u16)>,
        /// New destination address and port.
        dst: Option<(u128, u16)>,
    },
    /// Direct routing: only the MACs change.
    Dr,
}

/// What the kernel repeats of a flow's client-address rewrite (`client_address`, see
/// `lb::process` proxyhdr and toa), and which of its frames it leaves to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheCarry {
    /// Nothing.
    #[default]
    None,
    /// proxy-v2, client → backend: sequence numbers `delta` ahead; the first data segment
    /// (sequence number `base`) goes to the engine, which puts the header in again.
    Seq {
        /// The client's first sequence number after its SYN.
        base: u32,
        /// The header's length.
        delta: u8,
    },
    /// proxy-v2, backend → client: the acknowledgement and SACK edges beyond `base` moved
    /// back by `delta`; a header whose options are not in one of the two layouts stacks
    /// send (bpf/carry.h `carry_find_sack`) goes to the engine.
    Ack {
        /// The client's first sequence number after its SYN.
        base: u32,
        /// The header's length.
        delta: u8,
    },
    /// toa, client → backend: segments acknowledging exactly `base` go to the engine,
    /// which adds the option.
    Toa {
        /// The backend's first sequence number after its SYN-ACK.
        base: u32,
    },
}

/// What the kernel repeats of the SYN proxy's rewrite on a flow it opened
/// (`lb::process::synproxy` `shift_forward`, `shift_reverse`): the sequence space the
/// backend chose against the cookie's, and the window scales the two handshakes agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheShift {
    /// Not a proxied flow.
    #[default]
    None,
    /// Client → backend: a segment with ACK has its acknowledgement and SACK edges
    /// `shift` on (a SACK option in neither layout of bpf/carry.h `carry_find_sack` goes to
    /// the engine); the window field is rescaled.
    Ack {
        /// The backend's initial sequence number less the cookie.
        shift: u32,
        /// The client's window field for the backend.
        window: Rescale,
    },
    /// Backend → client: the sequence number `shift` back; the window field rescaled.
    Seq {
        /// The backend's initial sequence number less the cookie.
        shift: u32,
        /// The backend's window field for the client.
        window: Rescale,
    },
}

/// One cache entry: the rewrite, the MACs and egress, the counter slot, last-seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheEntry {
    /// The rewrite.
    pub action: CacheAction,
    /// The client-address part of the rewrite.
    pub carry: CacheCarry,
    /// The SYN proxy's part of the rewrite (never with a client-address part).
    pub shift: CacheShift,
    /// Addresses are IPv6.
    pub v6: bool,
    /// Destination MAC written.
    pub dst_mac: [u8; 6],
    /// Source MAC written.
    pub src_mac: [u8; 6],
    /// Egress interface.
    pub ifindex: u32,
    /// Counter slot ([`FlowCache::stat_slot`]).
    pub stat: u32,
    /// The kernel's tick count (jiffies) at the last hit; 0 as installed. Only compared with
    /// itself: a change between two walks means the flow was forwarded meanwhile.
    pub last_seen: u64,
    /// TCP: the end of this direction's furthest segment, as installed, then as the program
    /// moved it on (`None`: not tracked).
    pub seq_next: Option<u32>,
    /// TCP: this direction's highest acknowledgement, the same way.
    pub ack_max: Option<u32>,
}

impl CacheEntry {
    /// The entry with its moving parts (activity and sequence fields) cleared: what tells
    /// whether an installed entry still repeats a decision.
    pub fn rewrite(&self) -> CacheEntry {
        CacheEntry {
            last_seen: 0,
            seq_next: None,
            ack_max: None,
            ..*self
        }
    }
}

/// Whether the kernel may forward the rest of this decision's flow: the engine holds the
/// flow in its connection table, TCP has finished its handshake and this frame neither
/// opens nor closes it (the XDP program hands every SYN, FIN and RST to the engine anyway).
pub fn cacheable(d: &Decision) -> bool {
    const SYN_ACK: u8 = tcp_flags::SYN | tcp_flags::ACK;
    // A proxy-v2 flow before its header went out: the next client segment gets the header
    // and every later one a shift the entry could not know yet. A toa flow before its
    // SYN-ACK: the entry would not know which segments carry the option.
    if d.carry.kind != ClientAddress::None && !d.carry.armed {
        return false;
    }
    // A flow the SYN proxy opened: the program repeats its shift once the backend answered
    // (the shift is known), and not beside a client-address carry, whose checks read the
    // numbers the shift moves (the engine keeps those flows).
    let established = matches!(d.flow, Some((_, FlowState::TcpEstablished)));
    match d.carry.proxy {
        Proxied::No => {}
        Proxied::Open { .. } if established && d.carry.kind == ClientAddress::None => {}
        _ => return false,
    }
    match d.flow {
        Some((_, FlowState::TcpEstablished)) => {
            d.tcp_flags & (tcp_flags::SYN | tcp_flags::FIN | tcp_flags::RST) == 0
        }
        // The backend's SYN-ACK: the reply direction is cached now, before the response, so
        // every segment of the response takes the same path. Installed at the first reply
        // segment instead, that segment could still wait for the engine's tx while the next
        // one, forwarded by the kernel, went past it. The SYN-ACK itself (and any
        // retransmission of it) still goes to the engine: the program declines SYN frames.
        Some((_, FlowState::TcpSyn)) => {
            d.reverse
                && d.tcp_flags & SYN_ACK == SYN_ACK
                && d.tcp_flags & (tcp_flags::FIN | tcp_flags::RST) == 0
        }
        Some((_, FlowState::Udp | FlowState::UdpOneWay)) => true,
        _ => false,
    }
}

/// The entry that repeats `d`, or `None` for what the cache does not cover (tunnel modes).
pub fn entry_for(d: &Decision, stat: u32) -> Option<CacheEntry> {
    let action = match d.mode {
        Mode::Nat | Mode::FullNat => CacheAction::Nat {
            src: d.src,
            dst: d.dst,
        },
        Mode::Dr if !d.reverse => CacheAction::Dr,
        _ => return None,
    };
    let c = d.carry;
    let carry = match (c.kind, d.reverse) {
        (ClientAddress::ProxyV2, false) => CacheCarry::Seq {
            base: c.base,
            delta: c.delta,
        },
        (ClientAddress::ProxyV2, true) => CacheCarry::Ack {
            base: c.base,
            delta: c.delta,
        },
        (ClientAddress::Toa, false) => CacheCarry::Toa { base: c.base },
        (ClientAddress::Toa, true) | (ClientAddress::None, _) => CacheCarry::None,
    };
    let shift = match (c.proxy, d.reverse) {
        (Proxied::Open { shift, fwd, .. }, false) => CacheShift::Ack { shift, window: fwd },
        (Proxied::Open { shift, rev, .. }, true) => CacheShift::Seq {
            shift: shift.wrapping_neg(),
            window: rev,
        },
        _ => CacheShift::None,
    };
    let (seq_next, ack_max) = tracked(d);
    Some(CacheEntry {
        action,
        carry,
        shift,
        v6: d.key.v6,
        dst_mac: d.next_hop.dst_mac.0,
        src_mac: d.next_hop.src_mac.0,
        ifindex: d.next_hop.ifindex,
        stat,
        last_seen: 0,
        seq_next,
        ack_max,
    })
}

/// Where the decision's direction of a TCP flow stands (its sender's next sequence number
/// and highest acknowledgement), for the entry to start from.
fn tracked(d: &Decision) -> (Option<u32>, Option<u32>) {
    use crate::lb::conntrack::track::seen;
    if d.key.proto != 6 {
        return (None, None);
    }
    let t = &d.track;
    let (next, acked, nk, ak) = if d.reverse {
        (
            t.backend_next,
            t.backend_acked,
            seen::BACKEND,
            seen::BACKEND_ACK,
        )
    } else {
        (
            t.client_next,
            t.client_acked,
            seen::CLIENT,
            seen::CLIENT_ACK,
        )
    };
    (
        (t.seen & nk != 0).then_some(next),
        (t.seen & ak != 0).then_some(acked),
    )
}

/// Cache-wide counters, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheCounters {
    /// Frames the kernel forwarded from the cache.
    pub hits: u64,
    /// Frames the steering handed to the engine while the cache was on.
    pub misses: u64,
    /// Hits dropped because their egress interface had no tx_ports entry.
    pub no_egress: u64,
}

/// Packets and bytes the cache forwarded for one (VIP, backend).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotTotals {
    /// Frames.
    pub packets: u64,
    /// Bytes (whole frames, as the engine counts them).
    pub bytes: u64,
}

/// The cache's maps and the registry of counter slots. Shared (`Arc`) by the control plane
/// and every worker; every method is a map syscall or a short lock, none on the per-frame
/// path of a hit (that is the kernel's).
pub struct FlowCache {
    cache4: MapHandle,
    cache6: MapHandle,
    stats: MapHandle,
    counters: MapHandle,
    tx_ports: MapHandle,
    /// The program's front-table numbers (bpf/maps.h `front_gen`), mapped: a new number at
    /// a key's slot makes every CPU's copy of that key's entry stale.
    front_gen: MapHandle,
    gens: MappedWords,
    next_gen: AtomicU64,
    slots: Mutex<HashMap<BackendId, u32>>,
    /// Egress interfaces by ifindex: their slot in `tx_ports` and how hairpins are sent.
    egress: RwLock<HashMap<u32, (u8, Hairpin)>>,
    /// The program's own maps (beside the cache's) that the program attached before this
    /// run hands to the next one, when their geometry is this build's: flood mode's
    /// per-source buckets, its CPUs' state and its counters. A takeover in a flood then
    /// neither lets every source's burst through again nor waits for the mode to switch
    /// on. Empty for a new cache.
    carried: HashMap<String, MapHandle>,
}

impl std::fmt::Debug for FlowCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowCache").finish_non_exhaustive()
    }
}

fn create(
    ty: MapType,
    name: &str,
    key: u32,
    value: u32,
    entries: u32,
) -> Result<MapHandle, DatapathError> {
    create_with(ty, name, key, value, entries, 0)
}

fn create_with(
    ty: MapType,
    name: &str,
    key: u32,
    value: u32,
    entries: u32,
    map_flags: u32,
) -> Result<MapHandle, DatapathError> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags,
        ..Default::default()
    };
    MapHandle::create(ty, Some(name), key, value, entries, &opts)
        .map_err(|e| bpf_err("creating the flow cache maps", e))
}

impl FlowCache {
    /// Creates the cache's maps (empty) with room for `entries` flows of each family.
    pub fn create(entries: u32) -> Result<FlowCache, DatapathError> {
        const U32: u32 = size_of::<u32>() as u32;
        let lru = |name: &str, key: usize| {
            create(
                MapType::LruHash,
                name,
                key as u32,
                cache_val::LEN as u32,
                entries.max(1),
            )
        };
        let front_gen = create_with(
            MapType::Array,
            maps::FRONT_GEN.name,
            U32,
            size_of::<u64>() as u32,
            maps::FRONT_GEN.entries,
            BPF_F_MMAPABLE,
        )?;
        let gens = MappedWords::map(front_gen.as_fd(), 2 * FRONT_SLOTS)
            .map_err(DatapathError::FrontTable)?;
        Ok(FlowCache {
            cache4: lru(maps::FLOW_CACHE4.name, cache_key4::LEN)?,
            cache6: lru(maps::FLOW_CACHE6.name, cache_key6::LEN)?,
            stats: create(
                MapType::PercpuArray,
                maps::CACHE_STATS.name,
                U32,
                cache_stat::LEN as u32,
                maps::CACHE_STATS.entries,
            )?,
            counters: create(
                MapType::PercpuArray,
                maps::CACHE_COUNTERS.name,
                U32,
                size_of::<u64>() as u32,
                maps::CACHE_COUNTERS.entries,
            )?,
            tx_ports: create(
                MapType::Devmap,
                maps::TX_PORTS.name,
                U32,
                U32,
                maps::TX_PORTS.entries,
            )?,
            front_gen,
            gens,
            next_gen: AtomicU64::new(0),
            slots: Mutex::new(HashMap::new()),
            egress: RwLock::new(HashMap::new()),
            carried: HashMap::new(),
        })
    }

    fn map(&self, v6: bool) -> &MapHandle {
        if v6 { &self.cache6 } else { &self.cache4 }
    }

    /// The map the program must reuse for its map `name`, if the map is one of the cache's.
    pub(crate) fn map_fd(&self, name: &str) -> Option<BorrowedFd<'_>> {
        let own: [(MapDef, &MapHandle); 6] = [
            (maps::FLOW_CACHE4, &self.cache4),
            (maps::FLOW_CACHE6, &self.cache6),
            (maps::CACHE_STATS, &self.stats),
            (maps::CACHE_COUNTERS, &self.counters),
            (maps::TX_PORTS, &self.tx_ports),
            (maps::FRONT_GEN, &self.front_gen),
        ];
        match own.into_iter().find(|(m, _)| m.name == name) {
            Some((_, map)) => Some(map.as_fd()),
            None => self.carried.get(name).map(|m| m.as_fd()),
        }
    }

    /// Lets hits leave through `ifindex` (a datapath interface), the interface of `slot`
    /// (below [`super::steer::MAX_INTERFACES`]); `hairpin` says how the ones that arrived
    /// there too are sent.
    pub fn add_egress(
        &self,
        slot: u32,
        ifindex: u32,
        hairpin: Hairpin,
    ) -> Result<(), DatapathError> {
        let port = u8::try_from(slot)
            .ok()
            .filter(|s| u32::from(*s) < super::steer::MAX_INTERFACES)
            .ok_or(DatapathError::EgressSlot(slot))?;
        self.tx_ports
            .update(&slot.to_ne_bytes(), &ifindex.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| bpf_err("adding an egress interface to the flow cache", e))?;
        self.egress
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ifindex, (port, hairpin));
        Ok(())
    }

    /// The tx_ports slot of egress `ifindex` and how a hairpin leaves it, if it is one.
    pub(crate) fn egress_port(&self, ifindex: u32) -> Option<(u8, Hairpin)> {
        self.egress
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&ifindex)
            .copied()
    }

    /// The counter slot of (VIP name, backend address, port); slot 0 when all are taken.
    pub fn stat_slot(&self, id: &BackendId) -> u32 {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slots.get(id) {
            return *s;
        }
        let next = slots.len() as u32 + 1;
        if next >= STAT_SLOTS {
            return 0;
        }
        slots.insert(id.clone(), next);
        next
    }

    /// Every counter slot handed out, by slot.
    pub fn slot_ids(&self) -> HashMap<u32, BackendId> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.iter().map(|(k, v)| (*v, k.clone())).collect()
    }

    /// Installs (or replaces) the entry of the frames carrying `key`.
    ///
    /// Refuses an entry whose egress was never added ([`FlowCache::add_egress`]): the
    /// kernel could not send its hits.
    pub fn install(&self, key: &FlowKey, entry: &CacheEntry) -> Result<(), DatapathError> {
        let mut value = entry.value();
        let Some((port, hairpin)) = self
            .egress
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&entry.ifindex)
            .copied()
        else {
            return Err(DatapathError::NotAnEgress(entry.ifindex));
        };
        value.tx_port = port;
        value.tx = hairpin.tx();
        let done = self
            .map(key.v6)
            .update(&key_bytes(key), &value.to_bytes(), MapFlags::ANY)
            .map_err(|e| bpf_err("installing a flow cache entry", e));
        self.stale_front(key);
        done
    }

    /// Removes the entry of `key` (absent is fine).
    pub fn evict(&self, key: &FlowKey) {
        let _ = self.map(key.v6).delete(&key_bytes(key));
        self.stale_front(key);
    }

    /// Makes every CPU's front-table copy of `key`'s entry stale (bpf/front.h, the front
    /// table): after the map changed, a new number at its slot. Numbers never repeat
    /// within 2^32 installs and evictions, and a copy lives one jiffy.
    fn stale_front(&self, key: &FlowKey) {
        let n = self
            .next_gen
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        self.gens.store(front_index(key), n);
    }

    /// The entry of `key`, if the kernel still holds it.
    pub fn get(&self, key: &FlowKey) -> Option<CacheEntry> {
        let v = self
            .map(key.v6)
            .lookup(&key_bytes(key), MapFlags::ANY)
            .ok()??;
        CacheEntry::from_value(&cache_val::from_bytes(&v)?, key.v6)
    }

    /// Every entry (a walk over both maps: for commits and listings, not per frame).
    pub fn entries(&self) -> Vec<(FlowKey, CacheEntry)> {
        [&self.cache4, &self.cache6]
            .into_iter()
            .flat_map(|m| {
                m.keys().filter_map(|k| {
                    let key = key_from_bytes(&k)?;
                    let v = m.lookup(&k, MapFlags::ANY).ok()??;
                    let v = cache_val::from_bytes(&v)?;
                    Some((key, CacheEntry::from_value(&v, key.v6)?))
                })
            })
            .collect()
    }

    /// Number of entries (a walk over the keys).
    pub fn len(&self) -> usize {
        self.cache4.keys().count() + self.cache6.keys().count()
    }

    /// True when no entry is installed.
    pub fn is_empty(&self) -> bool {
        self.cache4.keys().next().is_none() && self.cache6.keys().next().is_none()
    }

    /// The per-CPU values of `idx` in a per-CPU array (none when the lookup fails).
    fn per_cpu(map: &MapHandle, idx: u32) -> Vec<Vec<u8>> {
        match map.lookup_percpu(&idx.to_ne_bytes(), MapFlags::ANY) {
            Ok(Some(values)) => values,
            _ => Vec::new(),
        }
    }

    /// A `cache_counters` counter summed over CPUs.
    fn counter(&self, idx: u32) -> u64 {
        Self::per_cpu(&self.counters, idx)
            .iter()
            .filter_map(|v| v.get(..size_of::<u64>())?.try_into().ok())
            .map(u64::from_ne_bytes)
            .sum()
    }

    /// A `cache_stats` slot summed over CPUs.
    fn slot_sum(&self, slot: u32) -> SlotTotals {
        let mut t = SlotTotals::default();
        for v in Self::per_cpu(&self.stats, slot) {
            if let Some(s) = cache_stat::from_bytes(&v) {
                t.packets += s.packets;
                t.bytes += s.bytes;
            }
        }
        t
    }

    /// Hits, misses and egress failures, summed over CPUs (hits: over the counter slots
    /// in use, which is every hit).
    pub fn counters(&self) -> CacheCounters {
        CacheCounters {
            hits: self.slot_totals().values().map(|t| t.packets).sum(),
            misses: self.counter(CC_MISS),
            no_egress: self.counter(CC_NO_EGRESS),
        }
    }

    /// Packets and bytes per (VIP, backend) the kernel forwarded; hits on slot 0 (every
    /// slot taken) are under the empty VIP name.
    pub fn slot_totals(&self) -> HashMap<BackendId, SlotTotals> {
        let slots: Vec<(BackendId, u32)> = {
            let s = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            s.iter().map(|(k, v)| (k.clone(), *v)).collect()
        };
        let mut out = HashMap::new();
        for (id, slot) in slots.into_iter().chain(std::iter::once((
            BackendId::new("", IpAddr::from([0, 0, 0, 0]), 0),
            0,
        ))) {
            let totals = self.slot_sum(slot);
            if totals.packets != 0 || slot != 0 {
                out.insert(id, totals);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
