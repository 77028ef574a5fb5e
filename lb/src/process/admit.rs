//! The LVS half of choosing a new flow's backend: persistence, connection limits and the
//! overflow policy, around the scheduler's choice ([`choose_backend`]).
//!
//! Order, as in LVS's `ip_vs_schedule`: a persistent client goes to its remembered backend
//! while that backend keeps flows (active or draining: a drained or weight-0 backend keeps
//! its persistent clients, like LVS's quiescent servers; a disabled or unhealthy one loses
//! them at once) and is not at its connection limit. Otherwise the scheduler chooses; for a
//! persistent Maglev VIP it hashes the client's masked address instead of the 5-tuple, so
//! every appliance and worker gives a new client the same first answer. A choice at its
//! connection limit gives way to the least loaded (`wlc`) eligible backend that is not;
//! when every one is full the VIP's `overflow` decides: drop (counted as the `overflow`
//! drop reason), reset (the same, and the caller answers a SYN with a RST), or ignore the
//! limits. The chosen backend is then remembered for the client until the persistence
//! timeout after this connection.

use super::flow::{Load, choose_backend};
use super::{DropReason, WorkerState};
use crate::conntrack::ConnTable;
use crate::hash::FlowKey;
use crate::persist::{Remembered, client_key};
use crate::sched::{PoolView, wlc_among};
use crate::tables::Tables;
use config::{HashFields, Overflow, Scheduler};

/// Seconds of the datapath clock (nanoseconds).
fn seconds(now: u64) -> u32 {
    (now / 1_000_000_000).min(u64::from(u32::MAX)) as u32
}

/// Whether backend slot `b` is at its connection limit now.
fn full(tables: &Tables, ct: &ConnTable, b: u32) -> bool {
    let e = &tables.backends[b as usize];
    e.limit
        .is_some_and(|l| tables.limits.is_full(e.limit_index, l, ct.workers()))
}

/// Stores this worker's connection counts of the VIP's limited backends on the board.
fn publish_counts(tables: &Tables, ct: &ConnTable, vip: u32) {
    let (active, inactive) = (ct.active_counts(), ct.inactive_counts());
    for slot in tables.pool_range(vip) {
        let e = &tables.backends[slot];
        if e.limit.is_some() {
            let n =
                active.get(slot).copied().unwrap_or(0) + inactive.get(slot).copied().unwrap_or(0);
            tables.limits.store(e.limit_index, ct.worker(), n);
        }
    }
}

/// Stores this worker's counts of every limited backend (its idle tick, and after adopting
/// a version, so removals reach the other workers without a new flow).
pub fn publish_all_counts(tables: &Tables, ct: &ConnTable) {
    let (active, inactive) = (ct.active_counts(), ct.inactive_counts());
    for &slot in &tables.limited {
        let s = slot as usize;
        let e = &tables.backends[s];
        let n = active.get(s).copied().unwrap_or(0) + inactive.get(s).copied().unwrap_or(0);
        tables.limits.store(e.limit_index, ct.worker(), n);
    }
}

/// The persistent client's remembered backend, if it may take this flow.
fn recalled(tables: &Tables, ct: &ConnTable, vip: u32, token: u32) -> Option<u32> {
    let mut found = None;
    for slot in tables.pool_range(vip) {
        if tables.backends[slot].token == token {
            if found.is_some() {
                // Two backends share the token: the entry cannot tell them apart.
                return None;
            }
            found = Some(slot as u32);
        }
    }
    let b = found?;
    (tables.backends[b as usize].keeps_flows() && !full(tables, ct, b)).then_some(b)
}

/// Chooses the backend slot of a new flow of `vip` (see the module docs). `hash` is the
/// flow's hash over the VIP's fields.
pub(super) fn admit(
    tables: &Tables,
    ct: &ConnTable,
    worker: &mut WorkerState,
    vip: u32,
    key: &FlowKey,
    hash: u32,
    now: u64,
) -> Result<u32, DropReason> {
    let v = &tables.vips[vip as usize];
    if v.has_limits {
        publish_counts(tables, ct, vip);
    }
    let now_s = seconds(now);
    let client = v
        .persistence
        .map(|p| (p, client_key(p.salt, key.src, key.v6, p.netmask)));
    if let Some((_, k)) = client {
        let table = worker.persistence();
        match table
            .recall(k, now_s)
            .and_then(|t| recalled(tables, ct, vip, t))
        {
            Some(b) => {
                worker.stats.persist_hits += 1;
                remember(worker, k, tables.backends[b as usize].token, now_s, client);
                return Ok(b);
            }
            None => worker.stats.persist_misses += 1,
        }
    }
    // A persistent Maglev VIP hashes the client's masked address: the consistent answer
    // for the client rather than for this connection.
    let (first_key, first_hash) = match client {
        Some((p, _)) if v.scheduler == Scheduler::Maglev => {
            let masked = FlowKey {
                src: mask(key.src, key.v6, p.netmask),
                sport: 0,
                dport: 0,
                ..*key
            };
            (masked, masked.hash(HashFields::TwoTuple))
        }
        _ => (*key, hash),
    };
    let load = Load {
        active: ct.active_counts(),
        inactive: ct.inactive_counts(),
    };
    let sched = &mut worker.sched[vip as usize];
    let choice =
        choose_backend(tables, vip, &first_key, first_hash, load, sched, now).map(|(b, _)| b);
    let b = match choice {
        None => return Err(DropReason::NoBackend),
        Some(b) if !v.has_limits || !full(tables, ct, b) => b,
        Some(b) => {
            worker.stats.limit_skips += 1;
            match least_loaded_not_full(tables, ct, vip) {
                Some(other) => other,
                None => overflow(worker, v.overflow, b)?,
            }
        }
    };
    if let Some((_, k)) = client {
        remember(worker, k, tables.backends[b as usize].token, now_s, client);
    }
    Ok(b)
}

/// Every eligible backend is full: the VIP's `overflow` policy.
fn overflow(worker: &mut WorkerState, policy: Overflow, choice: u32) -> Result<u32, DropReason> {
    match policy {
        Overflow::Ignore => {
            worker.stats.overflow_ignored += 1;
            Ok(choice)
        }
        Overflow::Drop | Overflow::Reset => Err(DropReason::Overflow),
    }
}

/// `wlc` over the eligible backends of `vip` that are below their limit.
fn least_loaded_not_full(tables: &Tables, ct: &ConnTable, vip: u32) -> Option<u32> {
    let r = tables.pool_range(vip);
    let (active, inactive) = (ct.active_counts(), ct.inactive_counts());
    if r.end > active.len() || r.end > inactive.len() {
        return None;
    }
    let pool = PoolView {
        weight: &tables.weights[r.clone()],
        eligible: &tables.eligible[r.clone()],
        active: &active[r.clone()],
        inactive: &inactive[r.clone()],
    };
    let start = r.start as u32;
    wlc_among(&pool, |i| !full(tables, ct, start + i as u32)).map(|i| start + i as u32)
}

/// Remembers the client's backend until the VIP's persistence timeout from now.
fn remember(
    worker: &mut WorkerState,
    key: u64,
    token: u32,
    now_s: u32,
    client: Option<(crate::tables::Persistence, u64)>,
) {
    let Some((p, _)) = client else { return };
    let deadline = now_s.saturating_add(p.timeout_s);
    if worker.persistence().remember(key, token, now_s, deadline) == Remembered::Evicted {
        worker.stats.persist_evictions += 1;
    }
}

/// `addr` with only its first `prefix` bits (of its family) kept.
fn mask(addr: u128, v6: bool, prefix: u8) -> u128 {
    let p = u32::from(prefix);
    match (v6, p) {
        (_, 0) => {
            if v6 {
                0
            } else {
                addr & !0xffff_ffff
            }
        }
        (true, p) => addr & (u128::MAX << (128 - p.min(128))),
        (false, p) => {
            (addr & !0xffff_ffff) | u128::from((addr as u32) & (u32::MAX << (32 - p.min(32))))
        }
    }
}
