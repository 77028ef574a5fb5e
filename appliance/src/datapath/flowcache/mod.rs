//! The XDP flow cache: established flows forwarded in the kernel, decided by the engine.
//!
//! The AF_XDP engine (`lb::process`) stays the authority. After it forwards a frame of an
//! established flow it describes what it did ([`Decision`]); [`entry_for`] turns that into
//! a rewrite the XDP program (bpf/steer.bpf.c, `cache_forward`) repeats for the flow's next
//! frames without waking a worker: NAT and FullNAT in both directions (each direction has
//! its own entry, keyed by the 5-tuple the frame carries) and DR, over IPv4 and IPv6, TCP
//! and UDP. Tunnel modes are not cached (their frames keep going to the engine).
//!
//! The maps are created here, before the program is loaded, and the program reuses them
//! (`Steer::load_with_cache`): the control plane and every worker hold this handle from
//! the start, whatever order the datapath comes up in.
//!
//! ```text
//! rx -> steer.bpf.c: cache hit? --yes--> rewrite, counters, XDP_TX | redirect(tx_ports)
//!                             \--no---> steering as before -> AF_XDP -> lb::process
//!                                                                  \-> LbHandler installs
//! control commit -> control::cache::after_commit -> evict what the new tables change
//! worker tick    -> a last_seen that moved refreshes the connection table (ageing)
//! ```

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex, RwLock};

use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use super::DatapathError;
use crate::config::Mode;
use crate::engine::BackendId;
use crate::lb::conntrack::tcp_flags;
use crate::lb::hash::FlowKey;
use crate::lb::process::Decision;
use crate::lb::{ConnTable, FlowState, Tables};

/// Entries the cache holds per address family (an LRU each: the least recently used entry
/// makes room). The kernel allocates them up front: about 140 bytes an IPv4 entry and 160 an
/// IPv6 one, 39 MiB for both maps.
pub const CACHE_ENTRIES: u32 = 131_072;

/// Counter slots per (VIP, backend) (steer.bpf.c STAT_SLOTS); slot 0 is "other".
pub const STAT_SLOTS: u32 = 4096;
/// Key bytes of an IPv4 flow (steer.bpf.c `struct cache_key4`).
pub const KEY4_LEN: usize = 16;
/// Key bytes of an IPv6 flow (steer.bpf.c `struct cache_key6`).
pub const KEY6_LEN: usize = 40;
/// Value bytes (steer.bpf.c `struct cache_val`).
pub const ENTRY_LEN: usize = 72;
/// Offset of `cache_val.tx`: how a hit leaving through its ingress interface is sent.
const TX_OFFSET: usize = 66;
/// Offset of `cache_val.tx_port`: the egress interface's slot in `tx_ports`.
const TX_PORT_OFFSET: usize = 67;
/// `cache_val.tx`: send with a DEVMAP redirect instead of XDP_TX (see [`Hairpin`]).
const TX_REDIRECT: u8 = 1;

const ACT_NAT: u8 = 1;
const ACT_DR: u8 = 2;
const SET_SRC: u8 = 1;
const SET_DST: u8 = 2;

const CC_MISS: u32 = 1;
const CC_NO_EGRESS: u32 = 2;

/// Map names the steering program declares and reuses from a [`FlowCache`].
pub(crate) const MAP_CACHE4: &str = "flow_cache4";
pub(crate) const MAP_CACHE6: &str = "flow_cache6";
pub(crate) const MAP_STATS: &str = "cache_stats";
pub(crate) const MAP_COUNTERS: &str = "cache_counters";
pub(crate) const MAP_TX_PORTS: &str = "tx_ports";

/// The map key of a frame: its 5-tuple as carried, laid out for its family's map
/// ([`KEY4_LEN`] or [`KEY6_LEN`] bytes).
pub fn key_bytes(k: &FlowKey) -> Vec<u8> {
    let (alen, len) = if k.v6 { (16, KEY6_LEN) } else { (4, KEY4_LEN) };
    let mut b = vec![0u8; len];
    let put = |b: &mut [u8], a: u128| {
        if k.v6 {
            b.copy_from_slice(&a.to_be_bytes());
        } else {
            b.copy_from_slice(&(a as u32).to_be_bytes());
        }
    };
    put(&mut b[..alen], k.src);
    put(&mut b[alen..2 * alen], k.dst);
    let p = 2 * alen;
    b[p..p + 2].copy_from_slice(&k.sport.to_be_bytes());
    b[p + 2..p + 4].copy_from_slice(&k.dport.to_be_bytes());
    b[p + 4] = k.proto;
    b
}

/// The inverse of [`key_bytes`]: the family follows from the length.
pub fn key_from_bytes(b: &[u8]) -> Option<FlowKey> {
    let (v6, alen) = match b.len() {
        KEY4_LEN => (false, 4),
        KEY6_LEN => (true, 16),
        _ => return None,
    };
    let addr = |o: usize| -> u128 {
        if v6 {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[o..o + 16]);
            u128::from_be_bytes(a)
        } else {
            0xffff_0000_0000 | u128::from(u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]))
        }
    };
    let p = 2 * alen;
    Some(FlowKey {
        src: addr(0),
        dst: addr(alen),
        sport: u16::from_be_bytes([b[p], b[p + 1]]),
        dport: u16::from_be_bytes([b[p + 2], b[p + 3]]),
        proto: b[p + 4],
        v6,
    })
}

/// How the kernel sends a hit that leaves through the interface it arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hairpin {
    /// XDP_TX: the NIC's own transmit ring (real NICs).
    XdpTx,
    /// A DEVMAP redirect back to the same interface. For veth: after an XDP_TX, veth only
    /// wakes its peer's NAPI when the peer runs an XDP program, not when NAPI is on for GRO
    /// (`veth_xdp_flush` checks the peer queue's XDP program; seen on Linux 6.18); the
    /// frames then sat in the peer's ring until the next frame the kernel sent that way,
    /// 10-130 ms per HTTP request in the lab, or for good once the ring filled. A redirect
    /// wakes it either way.
    Redirect,
}

impl Hairpin {
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

/// One cache entry: the rewrite, the MACs and egress, the counter slot, last-seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheEntry {
    /// The rewrite.
    pub action: CacheAction,
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
}

impl CacheEntry {
    /// The map value (steer.bpf.c `struct cache_val`).
    pub fn bytes(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        b[0..8].copy_from_slice(&self.last_seen.to_ne_bytes());
        let v6 = self.v6;
        let put = |b: &mut [u8], a: u128| {
            if v6 {
                b[..16].copy_from_slice(&a.to_be_bytes());
            } else {
                b[..4].copy_from_slice(&(a as u32).to_be_bytes());
            }
        };
        match self.action {
            CacheAction::Nat { src, dst } => {
                let mut flags = 0;
                if let Some((a, p)) = src {
                    put(&mut b[8..24], a);
                    b[40..42].copy_from_slice(&p.to_be_bytes());
                    flags |= SET_SRC;
                }
                if let Some((a, p)) = dst {
                    put(&mut b[24..40], a);
                    b[42..44].copy_from_slice(&p.to_be_bytes());
                    flags |= SET_DST;
                }
                b[64] = ACT_NAT;
                b[65] = flags;
            }
            CacheAction::Dr => b[64] = ACT_DR,
        }
        b[44..50].copy_from_slice(&self.dst_mac);
        b[50..56].copy_from_slice(&self.src_mac);
        b[56..60].copy_from_slice(&self.ifindex.to_ne_bytes());
        b[60..64].copy_from_slice(&self.stat.to_ne_bytes());
        b
    }

    /// The inverse of [`CacheEntry::bytes`] (for a key of family `v6`).
    pub fn from_bytes(b: &[u8], v6: bool) -> Option<CacheEntry> {
        if b.len() < ENTRY_LEN {
            return None;
        }
        let addr = |o: usize| -> u128 {
            if v6 {
                let mut a = [0u8; 16];
                a.copy_from_slice(&b[o..o + 16]);
                u128::from_be_bytes(a)
            } else {
                0xffff_0000_0000
                    | u128::from(u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]))
            }
        };
        let port = |o: usize| u16::from_be_bytes([b[o], b[o + 1]]);
        let action = match b[64] {
            ACT_NAT => CacheAction::Nat {
                src: (b[65] & SET_SRC != 0).then(|| (addr(8), port(40))),
                dst: (b[65] & SET_DST != 0).then(|| (addr(24), port(42))),
            },
            ACT_DR => CacheAction::Dr,
            _ => return None,
        };
        let mac = |o: usize| {
            let mut m = [0u8; 6];
            m.copy_from_slice(&b[o..o + 6]);
            m
        };
        Some(CacheEntry {
            action,
            v6,
            dst_mac: mac(44),
            src_mac: mac(50),
            ifindex: u32::from_ne_bytes([b[56], b[57], b[58], b[59]]),
            stat: u32::from_ne_bytes([b[60], b[61], b[62], b[63]]),
            last_seen: u64::from_ne_bytes(b[0..8].try_into().ok()?),
        })
    }
}

/// Whether the kernel may forward the rest of this decision's flow: the engine holds the
/// flow in its connection table, TCP has finished its handshake and this frame neither
/// opens nor closes it (the XDP program hands every SYN, FIN and RST to the engine anyway).
pub fn cacheable(d: &Decision) -> bool {
    const SYN_ACK: u8 = tcp_flags::SYN | tcp_flags::ACK;
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
        Some((_, FlowState::Udp)) => true,
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
    Some(CacheEntry {
        action,
        v6: d.key.v6,
        dst_mac: d.next_hop.dst_mac.0,
        src_mac: d.next_hop.src_mac.0,
        ifindex: d.next_hop.ifindex,
        stat,
        last_seen: 0,
    })
}

/// An entry a worker decided and installs after its pass's tx kick.
#[derive(Debug, Clone, Copy)]
struct Pending {
    key: FlowKey,
    flow: FlowKey,
    reverse: bool,
    entry: CacheEntry,
    version: u64,
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

fn map_err(what: &str, e: libbpf_rs::Error) -> DatapathError {
    let msg = e.to_string();
    if matches!(e.kind(), libbpf_rs::ErrorKind::PermissionDenied)
        || msg.contains("Operation not permitted")
    {
        return DatapathError::NotPermitted(format!("{what}: {msg}"));
    }
    DatapathError::Bpf(format!("{what}: {msg}"))
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
    slots: Mutex<HashMap<BackendId, u32>>,
    /// Egress interfaces by ifindex: their slot in `tx_ports` and how hairpins are sent.
    egress: RwLock<HashMap<u32, (u8, Hairpin)>>,
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
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    MapHandle::create(ty, Some(name), key, value, entries, &opts)
        .map_err(|e| map_err(&format!("creating the flow cache map {name}"), e))
}

impl FlowCache {
    /// Creates the cache's maps (empty) with room for `entries` flows of each family.
    pub fn create(entries: u32) -> Result<FlowCache, DatapathError> {
        let lru = |name: &str, key: usize| {
            create(
                MapType::LruHash,
                name,
                key as u32,
                ENTRY_LEN as u32,
                entries.max(1),
            )
        };
        Ok(FlowCache {
            cache4: lru(MAP_CACHE4, KEY4_LEN)?,
            cache6: lru(MAP_CACHE6, KEY6_LEN)?,
            stats: create(MapType::PercpuArray, MAP_STATS, 4, 16, STAT_SLOTS)?,
            counters: create(MapType::PercpuArray, MAP_COUNTERS, 4, 8, 3)?,
            tx_ports: create(
                MapType::Devmap,
                MAP_TX_PORTS,
                4,
                4,
                super::steer::MAX_INTERFACES,
            )?,
            slots: Mutex::new(HashMap::new()),
            egress: RwLock::new(HashMap::new()),
        })
    }

    fn map(&self, v6: bool) -> &MapHandle {
        if v6 { &self.cache6 } else { &self.cache4 }
    }

    /// The map the program must reuse for its map `name`.
    pub(crate) fn map_fd(&self, name: &str) -> Option<BorrowedFd<'_>> {
        match name {
            MAP_CACHE4 => Some(self.cache4.as_fd()),
            MAP_CACHE6 => Some(self.cache6.as_fd()),
            MAP_STATS => Some(self.stats.as_fd()),
            MAP_COUNTERS => Some(self.counters.as_fd()),
            MAP_TX_PORTS => Some(self.tx_ports.as_fd()),
            _ => None,
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
            .ok_or_else(|| {
                DatapathError::Bpf(format!("flow cache egress slot {slot} out of range"))
            })?;
        self.tx_ports
            .update(&slot.to_ne_bytes(), &ifindex.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| map_err("adding an egress interface to the flow cache", e))?;
        self.egress
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ifindex, (port, hairpin));
        Ok(())
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
        let mut value = entry.bytes();
        let Some((port, hairpin)) = self
            .egress
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&entry.ifindex)
            .copied()
        else {
            return Err(DatapathError::Bpf(format!(
                "flow cache entry toward ifindex {}, not a datapath interface",
                entry.ifindex
            )));
        };
        value[TX_PORT_OFFSET] = port;
        if hairpin == Hairpin::Redirect {
            value[TX_OFFSET] = TX_REDIRECT;
        }
        self.map(key.v6)
            .update(&key_bytes(key), &value, MapFlags::ANY)
            .map_err(|e| map_err("installing a flow cache entry", e))
    }

    /// Removes the entry of `key` (absent is fine).
    pub fn evict(&self, key: &FlowKey) {
        let _ = self.map(key.v6).delete(&key_bytes(key));
    }

    /// The entry of `key`, if the kernel still holds it.
    pub fn get(&self, key: &FlowKey) -> Option<CacheEntry> {
        let v = self
            .map(key.v6)
            .lookup(&key_bytes(key), MapFlags::ANY)
            .ok()??;
        CacheEntry::from_bytes(&v, key.v6)
    }

    /// Every entry (a walk over both maps: for commits and listings, not per frame).
    pub fn entries(&self) -> Vec<(FlowKey, CacheEntry)> {
        [&self.cache4, &self.cache6]
            .into_iter()
            .flat_map(|m| {
                m.keys().filter_map(|k| {
                    let key = key_from_bytes(&k)?;
                    let v = m.lookup(&k, MapFlags::ANY).ok()??;
                    Some((key, CacheEntry::from_bytes(&v, key.v6)?))
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

    fn percpu_sum(map: &MapHandle, idx: u32, words: usize) -> [u64; 2] {
        let mut out = [0u64; 2];
        let Ok(Some(per_cpu)) = map.lookup_percpu(&idx.to_ne_bytes(), MapFlags::ANY) else {
            return out;
        };
        for v in per_cpu {
            for (w, o) in out.iter_mut().enumerate().take(words) {
                if let Some(b) = v.get(w * 8..w * 8 + 8).and_then(|b| b.try_into().ok()) {
                    *o += u64::from_ne_bytes(b);
                }
            }
        }
        out
    }

    /// Hits, misses and egress failures, summed over CPUs (hits: over the counter slots
    /// in use, which is every hit).
    pub fn counters(&self) -> CacheCounters {
        CacheCounters {
            hits: self.slot_totals().values().map(|t| t.packets).sum(),
            misses: Self::percpu_sum(&self.counters, CC_MISS, 1)[0],
            no_egress: Self::percpu_sum(&self.counters, CC_NO_EGRESS, 1)[0],
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
            let [packets, bytes] = Self::percpu_sum(&self.stats, slot, 2);
            if packets != 0 || slot != 0 {
                out.insert(id, SlotTotals { packets, bytes });
            }
        }
        out
    }
}

/// How often a worker walks its installed entries to carry the kernel's last-seen times into
/// its connection table. Far below the shortest cached timeout (TCP established 900 s and
/// UDP 300 s by default; a flow whose timeout is shorter than this would be aged out by the
/// engine while the kernel still forwards it, then evicted on the next walk).
pub const SWEEP_NS: u64 = 1_000_000_000;

/// A worker's side of the cache: installs the entries its decisions describe, evicts them
/// when the flow closes or leaves the connection table, and refreshes the connection table
/// from the kernel's last-seen times (the kernel forwards the flow, so the engine no longer
/// sees its packets and would otherwise expire it).
///
/// Chosen over the kernel reporting activity: a periodic walk costs one map lookup per
/// installed entry per [`SWEEP_NS`], off the per-frame path, and needs nothing from the
/// program beyond the `last_seen` store it does anyway.
pub struct WorkerCache {
    cache: Arc<FlowCache>,
    /// Installed map key → (its connection-table flow key, entry as installed).
    entries: HashMap<FlowKey, (FlowKey, CacheEntry)>,
    /// Connection-table flow key → the map keys of its directions.
    flows: HashMap<FlowKey, [Option<FlowKey>; 2]>,
    sweep: Vec<FlowKey>,
    sweep_started: u64,
    /// Entries decided in this pass, installed once its frames are sent (see
    /// [`WorkerCache::install_pending`]).
    pending: Vec<Pending>,
    /// Entries installed (counted for tests and the console).
    pub installs: u64,
    /// Installs the kernel refused (map errors); the flow stays with the engine.
    pub install_errors: u64,
}

impl std::fmt::Debug for WorkerCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerCache")
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl WorkerCache {
    /// A worker's view of the shared cache.
    pub fn new(cache: Arc<FlowCache>) -> WorkerCache {
        WorkerCache {
            cache,
            entries: HashMap::new(),
            flows: HashMap::new(),
            sweep: Vec::new(),
            sweep_started: 0,
            pending: Vec::new(),
            installs: 0,
            install_errors: 0,
        }
    }

    /// Entries this worker installed and still tracks.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when this worker tracks no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn forget_flow(&mut self, flow: &FlowKey, evict: bool) {
        self.pending.retain(|p| p.flow != *flow);
        if let Some(keys) = self.flows.remove(flow) {
            for k in keys.iter().flatten() {
                self.entries.remove(k);
                if evict {
                    self.cache.evict(k);
                }
            }
        }
    }

    /// Acts on one decision of the engine, made with `tables`: when the flow is cacheable,
    /// queues the entry that repeats it for [`WorkerCache::install_pending`]; when it is
    /// closing, evicts the flow's entries (and drops what is queued for it).
    pub fn after_decision(&mut self, d: &Decision, tables: &Tables) {
        let Some((flow, _)) = d.flow else {
            return;
        };
        if !cacheable(d) {
            self.forget_flow(&flow, true);
            return;
        }
        let Some(id) = BackendId::of_slot(tables, d.backend as usize) else {
            return;
        };
        let slot = self.cache.stat_slot(&id);
        let Some(entry) = entry_for(d, slot) else {
            return;
        };
        // The frame reached the engine though the entry is installed: the program declines
        // such frames (VLAN tag, IP options...); installing again would cost a syscall per
        // frame for nothing.
        if self
            .entries
            .get(&d.key)
            .is_some_and(|(f, e)| *f == flow && CacheEntry { last_seen: 0, ..*e } == entry)
        {
            return;
        }
        if let Some(p) = self.pending.iter_mut().find(|p| p.key == d.key) {
            *p = Pending {
                key: d.key,
                flow,
                reverse: d.reverse,
                entry,
                version: tables.version,
            };
            return;
        }
        self.pending.push(Pending {
            key: d.key,
            flow,
            reverse: d.reverse,
            entry,
            version: tables.version,
        });
    }

    /// True when entries wait for [`WorkerCache::install_pending`].
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Installs the entries decided since the last call. Call it once the pass's frames
    /// have been handed to the kernel (the worker's tx kick): an entry installed while the
    /// frame that caused it still waited in a tx ring would let the flow's next frame,
    /// forwarded by the kernel at once, overtake it. `still_current(version)` says whether
    /// the tables of that version are still the published ones; an entry decided with older
    /// tables is dropped (the engine decides again), and one whose tables were replaced
    /// during the install is taken back, since the commit's eviction walk may have run
    /// before it.
    pub fn install_pending(&mut self, still_current: impl Fn(u64) -> bool) {
        for p in std::mem::take(&mut self.pending) {
            if !still_current(p.version) {
                continue;
            }
            if self.cache.install(&p.key, &p.entry).is_err() {
                self.install_errors += 1;
                continue;
            }
            if !still_current(p.version) {
                self.cache.evict(&p.key);
                continue;
            }
            self.installs += 1;
            self.entries.insert(p.key, (p.flow, p.entry));
            let dirs = self.flows.entry(p.flow).or_insert([None, None]);
            dirs[usize::from(p.reverse)] = Some(p.key);
        }
    }

    /// Part of the periodic walk (call it from the worker's tick): for each flow visited,
    /// an entry whose last-seen moved since the previous walk (the kernel forwarded the
    /// flow) refreshes the flow in the connection table; a flow idle past its timeout or
    /// gone from the table has its entries evicted; entries the kernel dropped (LRU, a
    /// commit's eviction) are forgotten, so the engine's next decision installs them again.
    pub fn tick(&mut self, ct: &mut ConnTable, now: u64) {
        if self.sweep.is_empty() {
            if now.saturating_sub(self.sweep_started) < SWEEP_NS || self.flows.is_empty() {
                return;
            }
            self.sweep = self.flows.keys().copied().collect();
            self.sweep_started = now;
        }
        // A walk spreads over about half the sweep period's ticks (one per 10 ms): a map
        // lookup is a syscall, and a long burst of them would stall the worker's rings.
        let budget = (self.flows.len() / 50).max(64);
        for _ in 0..budget {
            let Some(flow) = self.sweep.pop() else {
                break;
            };
            let Some(keys) = self.flows.get(&flow).copied() else {
                continue;
            };
            let mut active = false;
            let mut present = [None, None];
            for (i, k) in keys.iter().enumerate() {
                let Some(k) = k else {
                    continue;
                };
                match self.cache.get(k) {
                    Some(e) => {
                        present[i] = Some(*k);
                        if let Some((_, mine)) = self.entries.get_mut(k)
                            && mine.last_seen != e.last_seen
                        {
                            mine.last_seen = e.last_seen;
                            active = true;
                        }
                    }
                    None => {
                        self.entries.remove(k);
                    }
                }
            }
            if present == [None, None] {
                self.flows.remove(&flow);
                continue;
            }
            self.flows.insert(flow, present);
            if active {
                // The kernel forwarded the flow since the last walk: it lives (however stale
                // the engine's own view of it), and its last-seen is now, to within a walk.
                if let Some(id) = ct.lookup(&flow, 0) {
                    let f = *ct.flow(id);
                    ct.touch(id, now, f.state);
                    continue;
                }
            } else if ct.lookup(&flow, now).is_some() {
                continue;
            }
            // Idle past its timeout, or gone from the table: the kernel stops too.
            self.forget_flow(&flow, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::NextHop;
    use wire::MacAddr;

    fn v4(a: [u8; 4]) -> u128 {
        0xffff_0000_0000 | u128::from(u32::from_be_bytes(a))
    }

    fn decision(mode: Mode, state: FlowState, flags: u8) -> Decision {
        let key = FlowKey {
            src: v4([198, 51, 100, 7]),
            dst: v4([192, 0, 2, 10]),
            sport: 40000,
            dport: 80,
            proto: 6,
            v6: false,
        };
        Decision {
            key,
            reverse: false,
            mode,
            vip: 0,
            backend: 0,
            src: None,
            dst: Some((v4([10, 0, 0, 1]), 8080)),
            next_hop: NextHop {
                ifindex: 2,
                src_mac: MacAddr([2, 0, 0, 0, 0, 0xaa]),
                dst_mac: MacAddr([2, 0, 0, 0, 1, 1]),
            },
            flow: Some((key, state)),
            tcp_flags: flags,
        }
    }

    #[test]
    fn keys_match_the_c_layout_and_round_trip() {
        let d = decision(Mode::Nat, FlowState::TcpEstablished, 0x10);
        let b = key_bytes(&d.key);
        // struct cache_key4: src, dst, sport, dport, proto, 3 bytes of padding.
        assert_eq!(
            b,
            [
                198, 51, 100, 7, 192, 0, 2, 10, 0x9c, 0x40, 0, 80, 6, 0, 0, 0
            ]
        );
        assert_eq!(key_from_bytes(&b), Some(d.key));
        let k6 = FlowKey {
            src: 0x2001_0db8_0000_0000_0000_0000_0000_0007,
            dst: 0x2001_0db8_0000_0000_0000_0000_0000_0010,
            sport: 1,
            dport: 2,
            proto: 17,
            v6: true,
        };
        let b = key_bytes(&k6);
        // struct cache_key6: src, dst, sport, dport, proto, 3 bytes of padding.
        assert_eq!(b.len(), KEY6_LEN);
        assert_eq!(&b[15..17], &[7, 0x20]);
        assert_eq!(&b[31..40], &[0x10, 0, 1, 0, 2, 17, 0, 0, 0]);
        assert_eq!(key_from_bytes(&b), Some(k6));
        assert_eq!(
            key_from_bytes(&b[..39]),
            None,
            "a key of no family's length"
        );
    }

    #[test]
    fn entries_match_the_c_layout_and_round_trip() {
        let d = decision(Mode::FullNat, FlowState::TcpEstablished, 0x10);
        let d = Decision {
            src: Some((v4([10, 1, 0, 1]), 1025)),
            ..d
        };
        let e = entry_for(&d, 7).expect("fullnat is cached");
        let b = e.bytes();
        assert_eq!(&b[8..12], &[10, 1, 0, 1]);
        assert_eq!(&b[24..28], &[10, 0, 0, 1]);
        assert_eq!(&b[40..44], &[4, 1, 0x1f, 0x90]);
        assert_eq!(&b[44..50], &[2, 0, 0, 0, 1, 1]);
        assert_eq!((b[64], b[65]), (ACT_NAT, SET_SRC | SET_DST));
        assert_eq!(
            b[TX_OFFSET], 0,
            "XDP_TX unless the cache says otherwise at install"
        );
        assert_eq!(CacheEntry::from_bytes(&b, false), Some(e));
        let dr = entry_for(&decision(Mode::Dr, FlowState::Udp, 0), 1).expect("dr");
        assert_eq!(dr.action, CacheAction::Dr);
        assert_eq!(CacheEntry::from_bytes(&dr.bytes(), false), Some(dr));
    }

    #[test]
    fn only_established_flows_without_handshake_flags_are_cached() {
        let est = FlowState::TcpEstablished;
        assert!(cacheable(&decision(Mode::Nat, est, 0x18)));
        assert!(!cacheable(&decision(Mode::Nat, est, 0x11)), "fin");
        assert!(!cacheable(&decision(Mode::Nat, est, 0x14)), "rst");
        assert!(!cacheable(&decision(Mode::Nat, FlowState::TcpSyn, 0x10)));
        assert!(!cacheable(&decision(
            Mode::Nat,
            FlowState::TcpClosing,
            0x10
        )));
        assert!(cacheable(&decision(Mode::Nat, FlowState::Udp, 0)));
        let stateless = Decision {
            flow: None,
            ..decision(Mode::Nat, FlowState::Udp, 0)
        };
        assert!(!cacheable(&stateless));
    }

    #[test]
    fn tunnels_and_dr_return_are_not_cached() {
        let t = decision(Mode::Tunnel(crate::config::Encap::Ipip), FlowState::Udp, 0);
        assert_eq!(entry_for(&t, 0), None);
        let r = Decision {
            reverse: true,
            ..decision(Mode::Dr, FlowState::Udp, 0)
        };
        assert_eq!(entry_for(&r, 0), None);
    }
}
