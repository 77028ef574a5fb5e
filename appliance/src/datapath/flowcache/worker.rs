//! A worker's side of the flow cache: the entries its engine decisions describe, installed
//! after the pass's frames are sent, evicted when their flow closes or leaves the connection
//! table, and the periodic walk that carries the kernel's last-seen times into the
//! connection table (ageing).
//!
//! Every removal from the connection table (expiry, eviction, a table swap that drops the
//! VIP) reaches [`WorkerCache::forget`] through the table's journal, drained by the engine
//! after each frame and tick, before any frame of the pass is sent: the flow's kernel
//! entries go at once, and only then does the table let its FullNAT port serve a new flow.
//! Waiting for the walk instead would leave the old flow's reply entry in the kernel for up
//! to a sweep while the port served a new flow to the same backend, whose replies the
//! kernel would then rewrite toward the old client.

use std::collections::HashMap;
use std::sync::Arc;

use super::{CacheEntry, FlowCache, cacheable, entry_for};
use crate::lb::BackendId;
use crate::lb::hash::FlowKey;
use crate::lb::process::Decision;
use crate::lb::{ConnTable, Tables};

/// An entry a worker decided and installs after its pass's tx kick.
#[derive(Debug, Clone, Copy)]
struct Pending {
    key: FlowKey,
    flow: FlowKey,
    reverse: bool,
    entry: CacheEntry,
    version: u64,
}

/// How often a worker walks its installed entries to carry the kernel's last-seen times into
/// its connection table. Far below the shortest cached timeout (TCP established 900 s and
/// UDP 300 s by default; a flow whose timeout is shorter than this would be aged out by the
/// engine while the kernel still forwards it, then evicted on the next walk).
pub const SWEEP_NS: u64 = 1_000_000_000;

/// Flows a walk visits per tick at most, unless the shortest cached timeout needs more:
/// each visit costs up to two map lookups (syscalls, about a microsecond each), so this
/// keeps the walk near half a millisecond of every 10 ms tick however many flows there
/// are; with more flows the walk takes longer instead (65,536 flows: about 2.6 s).
const WALK_PER_TICK: usize = 256;

/// Flows to visit this tick, out of `flows`: a walk over about 50 ticks (half a second)
/// while that stays within [`WALK_PER_TICK`], but always fast enough to end within a
/// quarter of `timeout_ns`: a flow the kernel forwards must be refreshed in the connection
/// table before the engine would expire it there.
fn walk_budget(flows: usize, timeout_ns: u64) -> usize {
    let ticks = (timeout_ns / 4 / crate::datapath::worker::TICK_NS).max(1) as usize;
    (flows / 50)
        .clamp(64, WALK_PER_TICK)
        .max(flows.div_ceil(ticks))
}

/// The backend's FIN (no RST) of a NAT or FullNAT flow the client has not closed yet
/// (the flow stays established, half closed): only its return entry goes, and the client's
/// entry stays until the client's own FIN or RST (or the flow leaving the table). A server that closes first (HTTP with `Connection: close`) is the common case:
/// the client's ACKs of the response and of that FIN still go through the kernel, and its
/// FIN still finds the flow's entry, which is what pays its source back in flood mode
/// (`flood_cached_teardown` in the XDP program); with both entries gone at the backend's
/// FIN, most short connections of a busy client address never would. The engine still
/// sees every FIN and RST (the program hands them over), so the flow's closing is its own.
fn backend_closes_first(d: &Decision) -> bool {
    use crate::config::Mode;
    use crate::lb::conntrack::tcp_flags;
    d.reverse
        && d.teardown
        && matches!(d.mode, Mode::Nat | Mode::FullNat)
        && d.tcp_flags & (tcp_flags::FIN | tcp_flags::RST | tcp_flags::SYN) == tcp_flags::FIN
        && matches!(
            d.flow,
            Some((
                _,
                crate::lb::FlowState::TcpEstablished | crate::lb::FlowState::TcpSyn
            ))
        )
}

/// A FIN or RST off its sender's sequence space (a spoofer's): the engine forwarded it and
/// it changed nothing, so the flow's kernel entries stay too.
fn ignored_teardown(d: &Decision) -> bool {
    use crate::lb::conntrack::tcp_flags;
    d.tcp_flags & (tcp_flags::FIN | tcp_flags::RST) != 0
        && !d.teardown
        && d.tcp_flags & tcp_flags::SYN == 0
}

/// The shortest idle timeout of a state whose flows the kernel may forward.
fn shortest_cached_timeout(ct: &ConnTable) -> u64 {
    use crate::lb::FlowState;
    ct.timeout_ns(FlowState::TcpEstablished)
        .min(ct.timeout_ns(FlowState::Udp))
}

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
    /// Connection-table removals handed to [`WorkerCache::forget`].
    pub forgotten: u64,
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
            forgotten: 0,
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

    /// Evicts one direction's entry of `flow` (and drops what is queued for it), keeping
    /// the other.
    fn forget_direction(&mut self, flow: &FlowKey, reverse: bool) {
        self.pending
            .retain(|p| p.flow != *flow || p.reverse != reverse);
        let Some(dirs) = self.flows.get_mut(flow) else {
            return;
        };
        if let Some(k) = dirs[usize::from(reverse)].take() {
            self.entries.remove(&k);
            self.cache.evict(&k);
        }
        if *dirs == [None, None] {
            self.flows.remove(flow);
        }
    }

    /// Registers the kernel entries a run before this one installed for `flow` (the map
    /// keys of its directions: client → VIP, and backend → client for NAT and FullNAT),
    /// where the kernel still holds them: this worker's walk refreshes the flow from them
    /// and the flow's end evicts them, as if it had installed them itself. Returns how many
    /// it found.
    pub fn adopt(&mut self, flow: &FlowKey, keys: [Option<FlowKey>; 2]) -> usize {
        let mut dirs = [None, None];
        for (dir, key) in keys.iter().enumerate() {
            if let Some(k) = key
                && let Some(e) = self.cache.get(k)
            {
                self.entries.insert(*k, (*flow, e));
                dirs[dir] = Some(*k);
            }
        }
        let found = dirs.iter().flatten().count();
        if found > 0 {
            self.flows.insert(*flow, dirs);
        }
        found
    }

    /// Moves `t`, where the connection table says flow `flow`'s sequence spaces stand, on
    /// to where its installed entries say they stand: the program moved them on as it
    /// forwarded the flow's segments (two map lookups; only for a FIN or RST the engine is
    /// about to judge).
    pub fn catch_up(&self, flow: &FlowKey, t: &mut crate::lb::conntrack::Track) {
        let Some(dirs) = self.flows.get(flow) else {
            return;
        };
        for (reverse, key) in dirs.iter().enumerate() {
            if let Some(k) = key
                && let Some(e) = self.cache.get(k)
            {
                t.caught_up(reverse == 0, e.seq_next, e.ack_max);
            }
        }
    }

    /// A flow left the connection table: evicts its kernel entries now and drops what is
    /// queued for it (see the module docs).
    #[inline]
    pub fn forget(&mut self, flow: &FlowKey) {
        if self.flows.contains_key(flow) || !self.pending.is_empty() {
            self.forget_flow(flow, true);
        }
        self.forgotten += 1;
    }

    /// Acts on one decision of the engine, made with `tables`: when the flow is cacheable,
    /// queues the entry that repeats it for [`WorkerCache::install_pending`]; when it is
    /// closing, evicts the flow's entries (and drops what is queued for it): both, or only
    /// the return entry at a NAT backend's FIN (`backend_closes_first`).
    pub fn after_decision(&mut self, d: &Decision, tables: &Tables) {
        let Some((flow, _)) = d.flow else {
            return;
        };
        if !cacheable(d) {
            if ignored_teardown(d) {
                return;
            }
            if backend_closes_first(d) {
                self.forget_direction(&flow, true);
            } else {
                self.forget_flow(&flow, true);
            }
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
            .is_some_and(|(f, e)| *f == flow && e.rewrite() == entry.rewrite())
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

    /// When the walk needs the worker's next tick: as soon as it can while a walk is under
    /// way, else when the next walk starts; `None` with nothing installed.
    pub fn next_due(&self, now: u64) -> Option<u64> {
        if !self.sweep.is_empty() {
            Some(now)
        } else if self.flows.is_empty() {
            None
        } else {
            Some(self.sweep_started.saturating_add(SWEEP_NS))
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
        let budget = walk_budget(self.flows.len(), shortest_cached_timeout(ct));
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
    use super::walk_budget;

    const S: u64 = 1_000_000_000;

    /// Small tables walk in about half a second; big ones are capped per tick and take
    /// longer; a short timeout raises the cap so that every flow is visited within a
    /// quarter of it.
    #[test]
    fn the_walk_is_bounded_per_tick_and_still_beats_the_timeout() {
        assert_eq!(walk_budget(0, 300 * S), 64);
        assert_eq!(walk_budget(10_000, 300 * S), 200);
        assert_eq!(walk_budget(65_536, 300 * S), 256);
        assert_eq!(walk_budget(1_000_000, 300 * S), 256);
        // 300 s / 4 = 7,500 ticks: 10,000,000 flows need 1,334 a tick.
        assert_eq!(walk_budget(10_000_000, 300 * S), 1_334);
        // A 2 s UDP timeout: 50 ticks for the whole walk.
        assert_eq!(walk_budget(65_536, 2 * S), 1_311);
        for flows in [1usize, 999, 65_536, 1 << 20, 5_000_000] {
            for timeout in [S, 30 * S, 300 * S, 900 * S] {
                let per_tick = walk_budget(flows, timeout);
                let ticks = flows.div_ceil(per_tick) as u64;
                assert!(
                    ticks * 10_000_000 <= timeout / 4 + 10_000_000,
                    "{flows} flows, {timeout} ns"
                );
            }
        }
    }
}
