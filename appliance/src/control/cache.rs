//! The control plane's side of the XDP flow cache: after every commit, evict each entry the
//! new tables would not forward the same way; and the cache's counters for the API and
//! metrics.
//!
//! The engine stays the authority. [`after_commit`] mirrors what `lb::process` does with an
//! established flow after a table swap (`WorkerState::adopt`, then `flow_for`): the flow
//! keeps its backend while its VIP still exists (same address, port, protocol and name),
//! the backend is still in the VIP's pool and `keeps_flows()` (drained backends do, disabled
//! and unhealthy ones do not), the egress (route lookup: interface and MACs) is unchanged
//! and the mode still rewrites the same way, and the VIP's allow and deny lists still admit
//! the client (`lb::acl`: a list change ends the flows it denies in the same commit). Anything else is evicted, so the next frame goes to the engine,
//! which re-chooses. Evicting more than needed only costs speed; keeping one entry too many
//! would forward a flow the engine would not, so every doubt evicts.
//!
//! Call order matters: publish the new tables first, then call [`after_commit`]. A worker
//! that decided with the old tables re-checks the published version after installing and
//! takes its entry back (`WorkerCache::install_pending`), so no stale entry survives the walk.
//!
//! A walk costs one syscall per key and per entry: seconds with a full cache. So the control
//! loop never walks: [`Walker`] does, on a thread of its own, against whatever version is
//! published when it starts (the decision needs only the new tables, so one walk after many
//! commits does the work of all of them). The loop asks and moves on; an operator's reply
//! waits for the walk its change asked for, on a task of its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use tokio::sync::watch;
use tracing::info;

use crate::datapath::flowcache::{CacheAction, CacheEntry, FlowCache};
use crate::lb::Tables;
use crate::lb::egress::return_hash;
use crate::lb::hash::{FlowKey, addr_to_u128};

use crate::engine::{BackendTotals, Published, VipTotals};
use crate::lb::BackendId;

/// Evicts every entry `new` would not forward the same way (see the module docs); returns
/// how many went. `old` is the version the entries were installed under; the decision only
/// needs `new`, since every entry carries what it does.
pub fn after_commit(cache: &FlowCache, old: &Tables, new: &Tables) -> usize {
    let _ = old;
    evict_for(cache, new).0
}

/// The walk of [`after_commit`]: (entries evicted, entries kept).
fn evict_for(cache: &FlowCache, new: &Tables) -> (usize, usize) {
    let ids = cache.slot_ids();
    let (mut evicted, mut kept) = (0, 0);
    for (key, e) in cache.entries() {
        let keep = ids
            .get(&e.stat)
            .is_some_and(|id| still_forwarded(new, id, &key, &e));
        if keep {
            kept += 1;
        } else {
            cache.evict(&key);
            evicted += 1;
        }
    }
    (evicted, kept)
}

/// What the loop asked the walker for and it has not started yet.
#[derive(Debug, Default)]
struct Asked {
    /// The newest eviction walk asked for (a ticket; 0: none yet).
    evict: u64,
    /// A count of the entries (for the view) is wanted.
    count: bool,
    stop: bool,
}

/// The flow cache's walks, on a thread of their own (see the module docs): eviction after
/// commits, and the entry count the view shows.
pub struct Walker {
    asked: Arc<(Mutex<Asked>, Condvar)>,
    entries: Arc<AtomicUsize>,
    /// The newest eviction walk finished.
    done: watch::Receiver<u64>,
}

impl Walker {
    /// Starts the walker's thread over `cache`, evicting for the tables in `published`.
    pub fn spawn(cache: Arc<FlowCache>, published: Arc<Published>) -> std::io::Result<Walker> {
        let asked = Arc::new((Mutex::new(Asked::default()), Condvar::new()));
        let entries = Arc::new(AtomicUsize::new(0));
        let (done_tx, done) = watch::channel(0);
        {
            let (asked, entries) = (Arc::clone(&asked), Arc::clone(&entries));
            std::thread::Builder::new()
                .name("sluice-cachewalk".into())
                .spawn(move || walk_loop(&cache, &published, &asked, &entries, &done_tx))?;
        }
        Ok(Walker {
            asked,
            entries,
            done,
        })
    }

    fn ask(&self, f: impl FnOnce(&mut Asked)) {
        let (m, cv) = &*self.asked;
        f(&mut m.lock().unwrap_or_else(|p| p.into_inner()));
        cv.notify_one();
    }

    /// Asks for an eviction walk against the tables published from now on; returns its
    /// ticket for [`Walker::evicted`]. Call after the publication.
    pub fn evict(&self) -> u64 {
        let mut ticket = 0;
        self.ask(|a| {
            a.evict += 1;
            ticket = a.evict;
        });
        ticket
    }

    /// The newest eviction walk asked for (0: none).
    pub fn latest(&self) -> u64 {
        self.asked.0.lock().unwrap_or_else(|p| p.into_inner()).evict
    }

    /// Asks for a fresh entry count (an eviction walk counts too).
    pub fn count(&self) {
        self.ask(|a| a.count = true);
    }

    /// The entries the last walk saw.
    pub fn entries(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    /// Resolves once the eviction walk `ticket` (or a later one) has finished.
    pub fn evicted(&self, ticket: u64) -> impl Future<Output = ()> + Send + 'static {
        let mut done = self.done.clone();
        async move {
            // An error means the walker is gone (shutdown): nothing left to wait for.
            let _ = done.wait_for(|d| *d >= ticket).await;
        }
    }
}

impl Drop for Walker {
    /// The thread ends after the walk it is in, if any; nobody waits for it (an exit must not
    /// wait for a walk of a full cache).
    fn drop(&mut self) {
        self.ask(|a| a.stop = true);
    }
}

/// The walker's thread: waits to be asked, walks, publishes what it saw.
fn walk_loop(
    cache: &FlowCache,
    published: &Published,
    asked: &(Mutex<Asked>, Condvar),
    entries: &AtomicUsize,
    done: &watch::Sender<u64>,
) {
    let mut walked = 0;
    loop {
        let (ticket, count) = {
            let (m, cv) = asked;
            let mut a = m.lock().unwrap_or_else(|p| p.into_inner());
            while !a.stop && a.evict == walked && !a.count {
                a = cv.wait(a).unwrap_or_else(|p| p.into_inner());
            }
            if a.stop {
                return;
            }
            (a.evict, std::mem::take(&mut a.count))
        };
        let t = Instant::now();
        if ticket > walked {
            let tables = published.current();
            let (evicted, kept) = evict_for(cache, &tables);
            entries.store(kept, Ordering::Relaxed);
            walked = ticket;
            done.send_replace(ticket);
            if evicted > 0 {
                info!(
                    version = tables.version,
                    evicted,
                    kept,
                    took = ?t.elapsed(),
                    "flow cache: evicted entries the new tables would not forward the same way"
                );
            }
        } else if count {
            entries.store(cache.len(), Ordering::Relaxed);
        }
    }
}

/// Whether `t` forwards the frames of `key` exactly as entry `e` (counted for backend `id`)
/// does.
pub fn still_forwarded(t: &Tables, id: &BackendId, key: &FlowKey, e: &CacheEntry) -> bool {
    let (vip_name, baddr, bport) = (id.vip.as_str(), addr_to_u128(id.address), id.port);
    // Client → VIP: the key's destination is the VIP.
    if let Some(vi) = t.vip_lookup(key.dst, key.dport, key.proto) {
        let v = &t.vips[vi as usize];
        if v.name != vip_name || !v.allows(key.src) {
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
    if !v.allows(client) {
        return false;
    }
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

/// Reads the cache's counters, with a walk over both maps for `entries` (for tests and
/// tools; the appliance counts on its [`Walker`], readers want [`counters`]).
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
        // New flows are the engine's: a cached flow was new there first.
        let t = BackendTotals {
            packets: t.packets,
            bytes: t.bytes,
            new_flows: 0,
        };
        *vips.entry(id.vip.clone()).or_default() += VipTotals {
            packets: t.packets,
            bytes: t.bytes,
            new_flows: 0,
            quic: Default::default(),
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
