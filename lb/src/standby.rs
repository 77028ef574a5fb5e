//! Standby flows: the connections other appliances of the ECMP group established, as they
//! sent them (connection sync), kept for the day the routers send their frames here.
//!
//! One table for the appliance, shared by every worker, consulted only on a miss (a frame
//! whose flow the worker's own table does not hold): a record cannot be routed in advance
//! to the worker that will see its frames, since the queue is the NIC's RSS choice here
//! (another key and queue count than the sender's), and a FullNAT flow's two directions
//! land on two different workers anyway (`process::owner`). Established flows never look
//! here, so forwarding them costs nothing; a new flow pays one lookup in one shard (a
//! mutex of its own, which only another miss of that shard or the sync receiver's insert
//! of a record of it can hold).
//!
//! A worker that finds its flow here imports the record into its own table
//! ([`crate::ConnTable::import`]): the flow keeps its backend, FullNAT port, sequence
//! carry and state, so a synced entry wins over a fresh scheduling choice (ECMP reshuffles
//! and ring changes move no established flow). The entry stays until its owner says the
//! flow ended or its state's timeout passes without news, so both directions of a FullNAT
//! flow can find it (the reverse index), and the flow survives the frames moving back.
//!
//! Memory is bounded: at most `capacity` entries (spread over the shards); a record that
//! finds its shard full is refused and counted, never stored by dropping another.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::conntrack::{FlowRecord, RevKey};
use crate::hash::FlowKey;

/// Shards of the table (a power of two).
const SHARDS: usize = 16;

/// One synced flow and when it expires on the receiver's clock.
#[derive(Debug, Clone, Copy)]
struct Entry {
    record: FlowRecord,
    /// The receiver's clock when the record came.
    at: u64,
    /// The owner's nanoseconds of idle time the record may have before it is dropped.
    ttl: u64,
}

#[derive(Debug, Default)]
struct Shard {
    flows: HashMap<FlowKey, Entry>,
    /// FullNAT flows by the key their return traffic carries (backend → SNAT address and
    /// port), for return frames that reach this appliance first.
    rev: HashMap<RevKey, FlowKey>,
}

/// What [`Standby::offer`] did with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// A new entry.
    Added,
    /// The flow's entry is now this record.
    Updated,
    /// The shard was full: the record was refused.
    Full,
}

/// Counters of the standby table (read by the metrics).
#[derive(Debug, Default)]
pub struct StandbyStats {
    /// Records refused because the table was full.
    pub refused_full: AtomicU64,
    /// Flows a worker took from the table on a miss.
    pub taken: AtomicU64,
    /// Entries dropped because their timeout passed without news.
    pub expired: AtomicU64,
    /// Entries removed because their owner said the flow ended.
    pub ended: AtomicU64,
    /// Flows found here that the worker's table refused (no VIP serves them now, their
    /// FullNAT port is taken here, or the table is full): scheduled afresh.
    pub refused_import: AtomicU64,
}

/// The appliance's standby table (see the module docs).
#[derive(Debug)]
pub struct Standby {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    len: AtomicU64,
    /// Counters since start.
    pub stats: StandbyStats,
}

/// The reverse key of a FullNAT record.
fn rev_of(r: &FlowRecord) -> Option<RevKey> {
    let (local, local_port) = r.snat?;
    Some(RevKey {
        proto: r.key.proto,
        backend: r.backend.0,
        backend_port: r.backend.1,
        local,
        local_port,
    })
}

fn shard_of(k: &FlowKey) -> usize {
    let h = crate::hash::mix64(
        (k.src as u64) ^ ((k.dst as u64) << 17) ^ (u64::from(k.sport) << 32 | u64::from(k.dport)),
    );
    (h as usize) & (SHARDS - 1)
}

fn rev_shard_of(k: &RevKey) -> usize {
    let h = crate::hash::mix64(
        (k.backend as u64)
            ^ ((k.local as u64) << 13)
            ^ (u64::from(k.local_port) << 32 | u64::from(k.backend_port)),
    );
    (h as usize) & (SHARDS - 1)
}

impl Standby {
    /// A table of at most `capacity` entries.
    pub fn new(capacity: usize) -> Standby {
        Standby {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            len: AtomicU64::new(0),
            stats: StandbyStats::default(),
        }
    }

    fn shard(&self, i: usize) -> std::sync::MutexGuard<'_, Shard> {
        // A worker that panicked holding a shard left plain data behind: use it.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed) as usize
    }

    /// Whether it holds nothing (a worker's miss then skips the lookup).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps `r` (received at `now`) until `ttl_ns` of idle time beyond its age passes or
    /// its owner ends it.
    pub fn offer(&self, r: &FlowRecord, ttl_ns: u64, now: u64) -> Offered {
        let i = shard_of(&r.key);
        let entry = Entry {
            record: *r,
            at: now,
            ttl: ttl_ns,
        };
        let out = {
            let mut s = self.shard(i);
            if let Some(e) = s.flows.get_mut(&r.key) {
                *e = entry;
                Offered::Updated
            } else if s.flows.len() >= self.per_shard {
                Offered::Full
            } else {
                s.flows.insert(r.key, entry);
                self.len.fetch_add(1, Ordering::Relaxed);
                Offered::Added
            }
        };
        match (out, rev_of(r)) {
            (Offered::Full, _) => {
                self.stats.refused_full.fetch_add(1, Ordering::Relaxed);
            }
            (_, Some(rk)) => {
                self.shard(rev_shard_of(&rk)).rev.insert(rk, r.key);
            }
            (_, None) => {}
        }
        out
    }

    /// Removes the flow `key` (its owner ended it); whether it was held.
    pub fn end(&self, key: &FlowKey) -> bool {
        let gone = self.shard(shard_of(key)).flows.remove(key);
        let Some(e) = gone else {
            return false;
        };
        self.len.fetch_sub(1, Ordering::Relaxed);
        self.stats.ended.fetch_add(1, Ordering::Relaxed);
        if let Some(rk) = rev_of(&e.record) {
            let mut s = self.shard(rev_shard_of(&rk));
            if s.rev.get(&rk) == Some(key) {
                s.rev.remove(&rk);
            }
        }
        true
    }

    /// The record of flow `key` as of `now` (its age grown by the time it waited here), if
    /// it is held and not expired.
    pub fn find(&self, key: &FlowKey, now: u64) -> Option<FlowRecord> {
        if self.is_empty() {
            return None;
        }
        let s = self.shard(shard_of(key));
        let e = s.flows.get(key)?;
        let age = e.record.age_ns.saturating_add(now.saturating_sub(e.at));
        (age <= e.ttl).then_some(FlowRecord {
            age_ns: age,
            ..e.record
        })
    }

    /// The FullNAT flow whose return traffic carries `rk`, as [`Standby::find`].
    pub fn find_rev(&self, rk: &RevKey, now: u64) -> Option<FlowRecord> {
        if self.is_empty() {
            return None;
        }
        let key = *self.shard(rev_shard_of(rk)).rev.get(rk)?;
        self.find(&key, now)
    }

    /// Counts a flow a worker took (see [`Standby::find`]).
    pub fn taken(&self) {
        self.stats.taken.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a flow a worker found but could not take.
    pub fn refused(&self) {
        self.stats.refused_import.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops every entry whose timeout passed at `now`; how many.
    pub fn expire(&self, now: u64) -> usize {
        let mut dropped = Vec::new();
        for i in 0..SHARDS {
            let mut s = self.shard(i);
            s.flows.retain(|_, e| {
                let keep = e.record.age_ns.saturating_add(now.saturating_sub(e.at)) <= e.ttl;
                if !keep {
                    dropped.extend(rev_of(&e.record));
                }
                keep
            });
        }
        for rk in &dropped {
            self.shard(rev_shard_of(rk)).rev.remove(rk);
        }
        let n = self.len_recount();
        let before = self.len.swap(n as u64, Ordering::Relaxed) as usize;
        let gone = before.saturating_sub(n);
        self.stats.expired.fetch_add(gone as u64, Ordering::Relaxed);
        gone
    }

    fn len_recount(&self) -> usize {
        (0..SHARDS).map(|i| self.shard(i).flows.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::{Carry, Evidence, FlowState, Track};

    fn rec(port: u16, snat: Option<(u128, u16)>) -> FlowRecord {
        FlowRecord {
            key: FlowKey {
                src: 0xffff_0a00_0001,
                dst: 0xffff_c000_020a,
                sport: port,
                dport: 80,
                proto: 6,
                v6: false,
                zone: 0,
            },
            backend: (0xffff_0a01_000b, 80),
            state: FlowState::TcpEstablished,
            evidence: Evidence::default(),
            snat,
            carry: Carry::default(),
            track: Track::default(),
            age_ns: 1_000,
        }
    }

    #[test]
    fn offered_found_ended() {
        let t = Standby::new(100);
        let r = rec(1000, None);
        assert_eq!(t.offer(&r, 10_000, 0), Offered::Added);
        assert_eq!(t.offer(&r, 10_000, 5), Offered::Updated);
        assert_eq!(t.len(), 1);
        let found = t.find(&r.key, 105).expect("held");
        assert_eq!(found.age_ns, 1_100, "its age grew while it waited");
        assert_eq!(found.backend, r.backend);
        assert!(t.end(&r.key));
        assert!(t.find(&r.key, 106).is_none());
        assert!(t.is_empty());
    }

    #[test]
    fn fullnat_return_finds_its_flow() {
        let t = Standby::new(100);
        let r = rec(1000, Some((0xffff_c000_0264, 40_001)));
        t.offer(&r, 10_000, 0);
        let rk = rev_of(&r).unwrap();
        assert_eq!(t.find_rev(&rk, 1).map(|f| f.key), Some(r.key));
        t.end(&r.key);
        assert!(t.find_rev(&rk, 2).is_none());
    }

    #[test]
    fn expires_after_ttl() {
        let t = Standby::new(100);
        let r = rec(1000, Some((0xffff_c000_0264, 40_001)));
        t.offer(&r, 10_000, 0);
        assert!(t.find(&r.key, 9_000).is_some());
        assert!(
            t.find(&r.key, 9_001).is_none(),
            "age 1000 + 9001 waited > ttl"
        );
        assert_eq!(t.expire(9_001), 1);
        assert!(t.is_empty());
        assert_eq!(t.stats.expired.load(Ordering::Relaxed), 1);
        assert!(t.find_rev(&rev_of(&r).unwrap(), 9_001).is_none());
    }

    #[test]
    fn memory_is_bounded() {
        let t = Standby::new(64);
        let mut full = 0;
        for p in 0..10_000u16 {
            if t.offer(&rec(p, None), u64::MAX, 0) == Offered::Full {
                full += 1;
            }
        }
        assert!(t.len() <= 64, "{} entries", t.len());
        assert_eq!(full + t.len(), 10_000);
        assert_eq!(t.stats.refused_full.load(Ordering::Relaxed), full as u64);
    }
}
