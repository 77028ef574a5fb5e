//! The control plane's side of the XDP flow cache: after every commit, evict each entry the
//! new tables would not forward the same way; and the cache's counters for the API and
//! metrics.
//!
//! The engine stays the authority. [`after_commit`] mirrors what `lb::process` does with an
//! established flow after a table swap (`WorkerState::adopt`, then `flow_for`): the flow
//! keeps its backend while its VIP still exists (same address, port, protocol and name),
//! the backend is still in the VIP's pool and `keeps_flows()` (drained backends do, disabled
//! and unhealthy ones do not), the egress (route lookup: interface and MACs) is unchanged
//! and the mode still rewrites the same way. Anything else is evicted, so the next frame goes to the engine,
//! which re-chooses. Evicting more than needed only costs speed; keeping one entry too many
//! would forward a flow the engine would not, so every doubt evicts.
//!
//! Call order matters: publish the new tables first, then call [`after_commit`]. A worker
//! that decided with the old tables re-checks the published version after installing and
//! takes its entry back (`WorkerCache::install_pending`), so no stale entry survives the walk.

use std::collections::HashMap;

use crate::datapath::flowcache::{CacheAction, CacheEntry, FlowCache};
use crate::lb::Tables;
use crate::lb::egress::return_hash;
use crate::lb::hash::{FlowKey, addr_to_u128};

use crate::engine::{BackendId, BackendTotals, VipTotals};

/// Evicts every entry `new` would not forward the same way (see the module docs); returns
/// how many went. `old` is the version the entries were installed under; the decision only
/// needs `new`, since every entry carries what it does.
pub fn after_commit(cache: &FlowCache, old: &Tables, new: &Tables) -> usize {
    let _ = old;
    let ids = cache.slot_ids();
    let mut evicted = 0;
    for (key, e) in cache.entries() {
        let keep = ids
            .get(&e.stat)
            .is_some_and(|id| still_forwarded(new, id, &key, &e));
        if !keep {
            cache.evict(&key);
            evicted += 1;
        }
    }
    evicted
}

/// Whether `t` forwards the frames of `key` exactly as entry `e` (counted for backend `id`)
/// does.
pub fn still_forwarded(t: &Tables, id: &BackendId, key: &FlowKey, e: &CacheEntry) -> bool {
    let (vip_name, baddr, bport) = (id.vip.as_str(), addr_to_u128(id.address), id.port);
    // Client → VIP: the key's destination is the VIP.
    if let Some(vi) = t.vip_lookup(key.dst, key.dport, key.proto) {
        let v = &t.vips[vi as usize];
        if v.name != vip_name {
            return false;
        }
        let Some(slot) = t.backend_slot(vi, baddr, bport) else {
            return false;
        };
        let b = &t.backends[slot as usize];
        if !b.keeps_flows() || b.v6 != key.v6 {
            return false;
        }
        let Ok(n) = t.backend_egress(slot) else {
            return false;
        };
        if (n.dst_mac.0, n.src_mac.0, n.ifindex) != (e.dst_mac, e.src_mac, e.ifindex) {
            return false;
        }
        return match (v.mode, e.action) {
            (crate::config::Mode::Nat, CacheAction::Nat { src: None, dst }) => {
                dst == Some((b.address, b.port))
            }
            (crate::config::Mode::FullNat, CacheAction::Nat { src: Some(s), dst }) => {
                dst == Some((b.address, b.port)) && v.snat.contains(&s.0)
            }
            (crate::config::Mode::Dr, CacheAction::Dr) => true,
            _ => false,
        };
    }
    // Backend → client: the entry gives the frame the VIP as its source.
    let CacheAction::Nat {
        src: Some((vaddr, vport)),
        dst,
    } = e.action
    else {
        return false;
    };
    let Some(vi) = t.vip_lookup(vaddr, vport, key.proto) else {
        return false;
    };
    let v = &t.vips[vi as usize];
    if v.name != vip_name || (key.src, key.sport) != (baddr, bport) {
        return false;
    }
    let Some(slot) = t.backend_slot(vi, baddr, bport) else {
        return false;
    };
    if !t.backends[slot as usize].keeps_flows() {
        return false;
    }
    // The client: the frame's destination for NAT, the rewritten one for FullNAT; the next
    // hop picked by the same hash the engine used (`lb::egress::return_hash`).
    let client = dst.map_or(key.dst, |d| d.0);
    let Ok(gw) = t.route(client, key.v6, return_hash(key)) else {
        return false;
    };
    if (gw.dst_mac.0, gw.src_mac.0, gw.ifindex) != (e.dst_mac, e.src_mac, e.ifindex) {
        return false;
    }
    match v.mode {
        crate::config::Mode::Nat => dst.is_none(),
        crate::config::Mode::FullNat => dst.is_some() && v.snat.contains(&key.dst),
        _ => false,
    }
}

/// The cache's counters for the API and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Frames the kernel forwarded from the cache.
    pub hits: u64,
    /// Frames the steering handed to the engine while the cache was on.
    pub misses: u64,
    /// Hits dropped for want of an egress interface (should stay 0).
    pub no_egress: u64,
    /// Entries in the cache now.
    pub entries: usize,
    /// Per VIP name, what the kernel forwarded (`new_flows` stays 0: new flows are the
    /// engine's). Add to `CounterSnapshot::totals` for a VIP's whole traffic.
    pub vips: HashMap<String, VipTotals>,
    /// Per backend, what the kernel forwarded. Add to `CounterSnapshot::totals`.
    pub backends: HashMap<BackendId, BackendTotals>,
}

/// Reads the cache's counters, with a walk over both maps for `entries` (the once-a-second
/// view calls it; readers want [`counters`]).
pub fn stats(cache: &FlowCache) -> CacheStats {
    counters(cache, cache.len())
}

/// Reads the cache's hit, miss and per-backend counters now (one per-CPU lookup per counter
/// slot, no walk over the entries); `entries` is the count the caller last walked. Readers
/// (status, VIP and backend counters, metrics) call this so what they report does not wait
/// for the control loop's next tick.
pub fn counters(cache: &FlowCache, entries: usize) -> CacheStats {
    let c = cache.counters();
    let mut vips: HashMap<String, VipTotals> = HashMap::new();
    let mut backends = HashMap::new();
    for (id, t) in cache.slot_totals() {
        let t = BackendTotals {
            packets: t.packets,
            bytes: t.bytes,
        };
        *vips.entry(id.vip.clone()).or_default() += VipTotals {
            packets: t.packets,
            bytes: t.bytes,
            new_flows: 0,
        };
        backends.insert(id, t);
    }
    CacheStats {
        hits: c.hits,
        misses: c.misses,
        no_egress: c.no_egress,
        entries,
        vips,
        backends,
    }
}
