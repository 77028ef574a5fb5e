//! Persistence (`persistence = "300s"`, `persistence_netmask`, like `ipvsadm -p` / `-M`):
//! which backend a client (or its netmask) was last sent to, so that its next connections
//! go there too.
//!
//! One table for the appliance, shared by every worker, because RSS spreads one client's
//! connections over all queues: a table per worker would give a client's second connection
//! on another queue a fresh choice, and after a pool change a different one. Workers stay
//! lock-free: an entry is two atomic words, a 64-bit key (VIP and masked client address,
//! hashed; never 0) and a value (backend token, 8 check bits of the key, deadline in
//! seconds). A writer stores the value, then the key; a reader loads key, value and key
//! again and takes the value only when both keys match and the check bits agree, so a torn
//! pair (two workers writing one way at once) reads as a miss, not as another client's
//! backend. The table is 4-way set associative with a fixed size ([`PERSIST_ENTRIES`]);
//! a full set gives up the entry closest to its deadline (LRU, since every connection
//! pushes its entry's deadline out), counted as an eviction.
//!
//! The first choice for a new client is the scheduler's consistent answer (for Maglev, the
//! ring slot of the masked client address), so every appliance of an ECMP group, and every
//! worker, makes the same one.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::hash::mix64;

/// Entries in the appliance's persistence table (4 MiB).
pub const PERSIST_ENTRIES: usize = 1 << 18;
/// Entries per set.
const WAYS: usize = 4;

/// What [`PersistTable::remember`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remembered {
    /// The client's entry existed (its backend and deadline are now the new ones).
    Refreshed,
    /// A free or expired way took it.
    Inserted,
    /// A live entry of another client was given up for it.
    Evicted,
}

/// The shared persistence table (see the module docs).
#[derive(Debug)]
pub struct PersistTable {
    keys: Vec<AtomicU64>,
    vals: Vec<AtomicU64>,
    sets: usize,
}

impl Default for PersistTable {
    fn default() -> Self {
        PersistTable::new(PERSIST_ENTRIES)
    }
}

/// The persistence salt of a VIP: its address, port, protocol and, for a tenant's, its
/// zone (tenants reuse addresses: one tenant's clients must not pin or probe another's).
pub fn salt(address: u128, port: u16, proto: u8, zone: u32) -> u64 {
    let salt = mix64(address as u64 ^ ((address >> 64) as u64).rotate_left(21))
        ^ mix64(u64::from(port) << 8 | u64::from(proto));
    match zone {
        0 => salt,
        z => salt ^ mix64(u64::from(z).rotate_left(40) | 0x5a5a),
    }
}

/// The key of a client of a VIP: `salt` names the VIP, `addr` is the client's address
/// (IPv4-mapped for IPv4) and `prefix` the netmask's length within its family.
pub fn client_key(salt: u64, addr: u128, v6: bool, prefix: u8) -> u64 {
    let masked = match (v6, u32::from(prefix)) {
        (_, 0) => 0,
        (true, p) => addr & (u128::MAX << (128 - p.min(128))),
        (false, p) => u128::from((addr as u32) & (u32::MAX << (32 - p.min(32)))),
    };
    let h = mix64(salt ^ mix64(masked as u64) ^ mix64((masked >> 64) as u64).rotate_left(29));
    h | 1
}

fn check_bits(key: u64) -> u64 {
    key >> 56
}

fn pack(token: u32, key: u64, deadline_s: u32) -> u64 {
    (u64::from(token & 0x00ff_ffff) << 40) | (check_bits(key) << 32) | u64::from(deadline_s)
}

fn deadline(val: u64) -> u32 {
    val as u32
}

impl PersistTable {
    /// A table of about `entries` entries (rounded up to whole sets, a power of two).
    pub fn new(entries: usize) -> PersistTable {
        let sets = (entries / WAYS).max(1).next_power_of_two();
        PersistTable {
            keys: (0..sets * WAYS).map(|_| AtomicU64::new(0)).collect(),
            vals: (0..sets * WAYS).map(|_| AtomicU64::new(0)).collect(),
            sets,
        }
    }

    /// Entries the table can hold.
    pub fn capacity(&self) -> usize {
        self.keys.len()
    }

    fn set(&self, key: u64) -> std::ops::Range<usize> {
        let s = (mix64(key) as usize) & (self.sets - 1);
        s * WAYS..s * WAYS + WAYS
    }

    /// The backend token remembered for `key`, unless its deadline passed.
    #[inline]
    pub fn recall(&self, key: u64, now_s: u32) -> Option<u32> {
        for i in self.set(key) {
            if self.keys[i].load(Ordering::Acquire) != key {
                continue;
            }
            let v = self.vals[i].load(Ordering::Acquire);
            if self.keys[i].load(Ordering::Acquire) == key
                && (v >> 32) & 0xff == check_bits(key)
                && deadline(v) > now_s
            {
                return Some((v >> 40) as u32);
            }
            return None;
        }
        None
    }

    /// Remembers `token` for `key` until `deadline_s`.
    pub fn remember(&self, key: u64, token: u32, now_s: u32, deadline_s: u32) -> Remembered {
        let set = self.set(key);
        let val = pack(token, key, deadline_s);
        let mut victim = set.start;
        let mut soonest = u32::MAX;
        for i in set {
            let k = self.keys[i].load(Ordering::Acquire);
            if k == key {
                self.vals[i].store(val, Ordering::Release);
                return Remembered::Refreshed;
            }
            let d = deadline(self.vals[i].load(Ordering::Acquire));
            let free = k == 0 || d <= now_s;
            let d = if free { 0 } else { d };
            if d < soonest {
                soonest = d;
                victim = i;
            }
        }
        self.vals[victim].store(val, Ordering::Release);
        self.keys[victim].store(key, Ordering::Release);
        if soonest == 0 {
            Remembered::Inserted
        } else {
            Remembered::Evicted
        }
    }

    /// Forgets `key` (its backend went away).
    pub fn forget(&self, key: u64) {
        for i in self.set(key) {
            if self.keys[i]
                .compare_exchange(key, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Every live entry at `now_s` as its two words (key, value): what a hand-over carries
    /// to the next process (a scan, never on the packet path). Deadlines are on the
    /// workers' clock (`CLOCK_MONOTONIC` seconds), which the next process shares.
    pub fn export(&self, now_s: u32) -> Vec<(u64, u64)> {
        (0..self.keys.len())
            .filter_map(|i| {
                let k = self.keys[i].load(Ordering::Acquire);
                let v = self.vals[i].load(Ordering::Acquire);
                (k != 0 && self.keys[i].load(Ordering::Acquire) == k && deadline(v) > now_s)
                    .then_some((k, v))
            })
            .collect()
    }

    /// Takes in entries [`PersistTable::export`] gave: each live one whose check bits agree
    /// with its key is remembered as it was (backend token and deadline); the rest are
    /// skipped. Returns how many were taken.
    pub fn import(&self, entries: &[(u64, u64)], now_s: u32) -> usize {
        let mut n = 0;
        for &(k, v) in entries {
            if k != 0 && (v >> 32) & 0xff == check_bits(k) && deadline(v) > now_s {
                self.remember(k, (v >> 40) as u32, now_s, deadline(v));
                n += 1;
            }
        }
        n
    }

    /// Live entries now (a scan: for the API, never on the packet path).
    pub fn entries(&self, now_s: u32) -> usize {
        (0..self.keys.len())
            .filter(|&i| {
                self.keys[i].load(Ordering::Relaxed) != 0
                    && deadline(self.vals[i].load(Ordering::Relaxed)) > now_s
            })
            .count()
    }
}

/// A backend's 24-bit token from its identity hash (the entry stores no slot: slots move
/// when the pool changes, identities do not).
pub fn token(identity_hash: u64) -> u32 {
    (identity_hash as u32) & 0x00ff_ffff
}

/// A VIP's persistence settings, when on; the salt names the VIP in the shared table.
pub(crate) fn settings(
    v: &config::Vip,
    address: u128,
    proto: u8,
    zone: u32,
) -> Option<crate::tables::Persistence> {
    v.persistence.map(|d| crate::tables::Persistence {
        timeout_s: d.as_secs().clamp(1, u64::from(u32::MAX / 2)) as u32,
        netmask: v.persistence_netmask,
        salt: salt(address, v.port, proto, zone),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netmask_groups_clients() {
        let a = |s: &str| crate::hash::addr_to_u128(s.parse().unwrap());
        let k = |s: &str, p| client_key(7, a(s), s.contains(':'), p);
        assert_eq!(k("198.51.100.7", 24), k("198.51.100.200", 24));
        assert_ne!(k("198.51.100.7", 24), k("198.51.101.7", 24));
        assert_ne!(k("198.51.100.7", 32), k("198.51.100.8", 32));
        assert_eq!(k("198.51.100.7", 0), k("203.0.113.1", 0));
        assert_eq!(k("2001:db8:1:2::7", 64), k("2001:db8:1:2::99", 64));
        assert_ne!(k("2001:db8:1:2::7", 64), k("2001:db8:1:3::7", 64));
        assert_ne!(k("2001:db8::7", 128), k("2001:db8::8", 128));
        // Another VIP (salt) is another client.
        assert_ne!(
            client_key(7, a("198.51.100.7"), false, 32),
            client_key(8, a("198.51.100.7"), false, 32)
        );
    }

    #[test]
    fn recalls_until_the_deadline_and_forgets() {
        let t = PersistTable::new(64);
        let key = client_key(1, 42, false, 32);
        assert_eq!(t.recall(key, 100), None);
        assert_eq!(t.remember(key, 0xabcdef, 100, 110), Remembered::Inserted);
        assert_eq!(t.recall(key, 109), Some(0xabcdef));
        assert_eq!(t.recall(key, 110), None, "deadline passed");
        assert_eq!(t.remember(key, 5, 109, 120), Remembered::Refreshed);
        assert_eq!(t.recall(key, 115), Some(5));
        assert_eq!(t.entries(115), 1);
        t.forget(key);
        assert_eq!(t.recall(key, 115), None);
        assert_eq!(t.entries(115), 0);
    }

    #[test]
    fn a_full_set_evicts_the_soonest_deadline() {
        // One set of four ways: the fifth live client evicts the one due first.
        let t = PersistTable::new(4);
        let keys: Vec<u64> = (0..5).map(|i| client_key(1, i, false, 32)).collect();
        for (i, k) in keys[..4].iter().enumerate() {
            assert_eq!(
                t.remember(*k, i as u32, 0, 100 + i as u32),
                Remembered::Inserted
            );
        }
        assert_eq!(t.remember(keys[4], 9, 0, 200), Remembered::Evicted);
        assert_eq!(t.recall(keys[0], 1), None, "the soonest deadline went");
        for k in &keys[1..] {
            assert!(t.recall(*k, 1).is_some());
        }
        // Expired entries are reused without an eviction.
        assert_eq!(t.remember(keys[0], 1, 150, 300), Remembered::Inserted);
        assert_eq!(t.capacity(), 4);
    }

    #[test]
    fn shared_between_threads() {
        let t = std::sync::Arc::new(PersistTable::new(1024));
        let handles: Vec<_> = (0..4)
            .map(|w| {
                let t = std::sync::Arc::clone(&t);
                std::thread::spawn(move || {
                    for c in 0..500u128 {
                        let k = client_key(3, c, false, 32);
                        t.remember(k, (c as u32) & 0xff_ffff, 0, 1000);
                        // Whatever another thread wrote for this client, it is this
                        // client's token or nothing: never another client's.
                        if let Some(tok) = t.recall(k, 1) {
                            assert_eq!(tok, (c as u32) & 0xff_ffff, "worker {w}");
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn entries_cross_to_another_table_with_their_backends_and_deadlines() {
        let old = PersistTable::new(64);
        let keys: Vec<u64> = (1..=20u64).map(|i| mix64(i) | 1).collect();
        for (i, k) in keys.iter().enumerate() {
            // Half live until 500, half already past at 200.
            let until = if i % 2 == 0 { 500 } else { 150 };
            old.remember(*k, 1000 + i as u32, 100, until);
        }
        let out = old.export(200);
        assert_eq!(out.len(), 10, "only the live entries leave");
        let new = PersistTable::new(64);
        // A forged word (check bits that do not match its key) and an expired one stay out.
        let mut input = out.clone();
        input.push((keys[0] ^ (1 << 60), out[0].1));
        input.push((keys[2], pack(5, keys[2], 199)));
        assert_eq!(new.import(&input, 200), 10);
        for (i, k) in keys.iter().enumerate() {
            let want = (i % 2 == 0).then_some(1000 + i as u32);
            assert_eq!(new.recall(*k, 200), want, "entry {i}");
            assert_eq!(new.recall(*k, 500), None, "entry {i} keeps its deadline");
        }
    }
}
