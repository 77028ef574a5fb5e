//! Maglev consistent hashing (Eisenbud et al., NSDI 2016, Pseudocode 1), with weights.
//!
//! The ring maps `flow_hash % M` to a backend so that every appliance fed the same backend
//! set computes the same table, and removing one backend of N moves little more than 1/N of
//! the slots. Weights follow Katran's `MaglevV2` population: every round each backend adds
//! its weight to a running credit and claims its next preferred slot each time the credit
//! reaches the largest weight. With equal weights this is exactly the paper's round-robin
//! population (slot counts differ by at most one); with unequal weights slot counts are
//! proportional to weight to within one slot per backend.
//!
//! Backends are sorted by their identity (address, port) before population so the table does
//! not depend on configuration order. The inner loop allocates nothing and uses no division:
//! a backend's permutation position advances by `skip` with a conditional subtraction. When
//! every weight is the same (the common pool) the credit bookkeeping is skipped: the
//! population is then plain round robin, the same table.
//!
//! A slot holds a 16-bit position in the pool (a pool has at most 65536 backends), so a ring
//! costs 2 bytes per slot. A ring remembers what it was built from ([`Ring::built_from`]) so
//! that a new table version can share an unchanged VIP's ring instead of building it again,
//! and a stable digest of its slots for comparing tables across appliances, computed when
//! first asked for: forwarding never needs it, so a health commit does not wait for it.

use std::sync::OnceLock;

use crate::hash::maglev_offset_skip;

/// A backend as Maglev sees it: identity bytes (see [`crate::hash::backend_identity`])
/// and a weight. Weight 0 takes no slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaglevBackend<'a> {
    /// Stable identity bytes, hashed for offset and skip and used to sort.
    pub id: &'a [u8],
    /// Relative share of the ring.
    pub weight: u32,
}

pub use config::{
    DEFAULT_TABLE_SIZES, MIN_SLOTS_PER_BACKEND, default_table_size, min_table_size, prime_at_least,
};

/// Most backends a pool may have: slots hold 16-bit positions.
pub const MAX_POOL: usize = 1 << 16;

/// A built lookup table: each slot holds a position in the backend list passed to
/// [`Ring::build`].
#[derive(Debug, Clone)]
pub struct Ring {
    slots: Vec<u16>,
    /// The table size asked for (also when the ring is empty).
    m: u32,
    /// Identity bytes of every backend in list order, concatenated.
    ids: Vec<u8>,
    /// Identity length and weight of every backend in list order.
    inputs: Vec<(u8, u32)>,
    /// Slots per backend position, counted once at build (the API and metrics read them).
    counts: Vec<u32>,
    /// [`Ring::digest`], once asked for.
    digest: OnceLock<u64>,
}

/// Rings are equal when built the same way to the same slots (whether their digests were
/// computed yet does not matter).
impl PartialEq for Ring {
    fn eq(&self, other: &Ring) -> bool {
        self.m == other.m
            && self.slots == other.slots
            && self.ids == other.ids
            && self.inputs == other.inputs
    }
}

impl Eq for Ring {}

/// Why a ring could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MaglevError {
    /// `M` must be prime for every `skip` to generate a full permutation.
    #[error("maglev table size {0} is not a prime")]
    NotPrime(u32),
    /// More backends than slots cannot all be placed.
    #[error("{backends} backends do not fit a maglev table of {m} slots")]
    TooManyBackends {
        /// Backends with non-zero weight.
        backends: usize,
        /// Table size.
        m: u32,
    },
    /// Slots hold 16-bit pool positions.
    #[error("{0} backends exceed the 65536 a maglev ring can index")]
    PoolTooLarge(usize),
}

/// Whether `n` is prime (trial division; only called when a table is built).
pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    if n.is_multiple_of(2) {
        return n == 2;
    }
    let mut d = 3u32;
    while u64::from(d) * u64::from(d) <= u64::from(n) {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 2;
    }
    true
}

/// FNV-1a over 64 bits: a digest that is the same on every machine and release.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// FNV-1a's offset basis.
pub const DIGEST_SEED: u64 = 0xcbf2_9ce4_8422_2325;

impl Ring {
    /// Populates a table of `m` slots. Returns an empty ring when no backend has weight.
    pub fn build(backends: &[MaglevBackend<'_>], m: u32) -> Result<Ring, MaglevError> {
        if !is_prime(m) {
            return Err(MaglevError::NotPrime(m));
        }
        if backends.len() > MAX_POOL {
            return Err(MaglevError::PoolTooLarge(backends.len()));
        }
        let mut order: Vec<u16> = (0..backends.len())
            .filter(|&i| backends[i].weight > 0)
            .map(|i| i as u16)
            .collect();
        let mut ids = Vec::with_capacity(backends.iter().map(|b| b.id.len()).sum());
        let mut inputs = Vec::with_capacity(backends.len());
        for b in backends {
            ids.extend_from_slice(b.id);
            inputs.push((b.id.len() as u8, b.weight));
        }
        let slots = if order.is_empty() {
            Vec::new()
        } else {
            if order.len() > m as usize {
                return Err(MaglevError::TooManyBackends {
                    backends: order.len(),
                    m,
                });
            }
            order.sort_by(|&a, &b| backends[a as usize].id.cmp(backends[b as usize].id));
            populate(backends, &order, m)
        };
        let mut counts = vec![0u32; backends.len()];
        for &s in &slots {
            counts[usize::from(s)] += 1;
        }
        Ok(Ring {
            slots,
            m,
            ids,
            inputs,
            counts,
            digest: OnceLock::new(),
        })
    }

    /// The empty ring of no backends at the default size of an empty pool: what a table
    /// entry holds until its ring is built.
    pub(crate) fn none() -> Ring {
        Ring {
            slots: Vec::new(),
            m: DEFAULT_TABLE_SIZES[0],
            ids: Vec::new(),
            inputs: Vec::new(),
            counts: Vec::new(),
            digest: OnceLock::new(),
        }
    }

    /// Whether building from `backends` at size `m` would give this ring: the same table
    /// size and the same identities and weights in the same order.
    pub fn built_from(&self, backends: &[MaglevBackend<'_>], m: u32) -> bool {
        if self.m != m || self.inputs.len() != backends.len() {
            return false;
        }
        let mut at = 0usize;
        for (b, &(len, weight)) in backends.iter().zip(&self.inputs) {
            let len = usize::from(len);
            if b.weight != weight || b.id.len() != len || self.ids[at..at + len] != *b.id {
                return false;
            }
            at += len;
        }
        true
    }

    /// The backend position for a flow hash, `None` for an empty ring.
    #[inline(always)]
    pub fn lookup(&self, hash: u32) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        Some(u32::from(self.slots[(hash as usize) % self.slots.len()]))
    }

    /// The slot a hash maps to (for `trace`), `None` for an empty ring.
    pub fn slot_of(&self, hash: u32) -> Option<usize> {
        if self.slots.is_empty() {
            None
        } else {
            Some(hash as usize % self.slots.len())
        }
    }

    /// All slots (backend positions).
    pub fn slots(&self) -> &[u16] {
        &self.slots
    }

    /// Table size, 0 when empty.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// The table size this ring was built for, also when it is empty.
    pub fn table_size(&self) -> u32 {
        self.m
    }

    /// Whether no backend holds a slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// A stable 64-bit digest of the table size and every slot (FNV-1a): equal on every
    /// appliance that built the same ring. Computed on the first call (a pass over the
    /// slots), then kept.
    pub fn digest(&self) -> u64 {
        *self.digest.get_or_init(|| {
            let mut digest = fnv(DIGEST_SEED, &self.m.to_le_bytes());
            for &s in &self.slots {
                digest = fnv(digest, &s.to_le_bytes());
            }
            digest
        })
    }

    /// Heap bytes this ring holds (slots and the inputs it remembers).
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 2
            + self.ids.capacity()
            + self.inputs.capacity() * 8
            + self.counts.capacity() * 4
    }

    /// Slot count per backend position (`n` = length of the backend list used to build;
    /// positions past the list count 0).
    pub fn counts(&self, n: usize) -> Vec<u32> {
        let mut c = self.counts.clone();
        c.resize(n, 0);
        c
    }
}

/// A backend's walk through its Maglev permutation, and its weight credit.
struct Perm {
    pos: u32,
    skip: u32,
    weight: u64,
    credit: u64,
    index: u16,
}

/// Fills `m` slots from the backends at positions `order` (weight > 0, sorted by identity).
fn populate(backends: &[MaglevBackend<'_>], order: &[u16], m: u32) -> Vec<u16> {
    let mut perms: Vec<Perm> = order
        .iter()
        .map(|&i| {
            let b = &backends[usize::from(i)];
            let (offset, skip) = maglev_offset_skip(b.id, m);
            Perm {
                pos: offset,
                skip,
                weight: u64::from(b.weight),
                credit: 0,
                index: i,
            }
        })
        .collect();
    let max_weight = perms.iter().map(|p| p.weight).max().unwrap_or(1);

    let mut slots = vec![0u16; m as usize];
    // Occupancy as a bitmap (8 KiB for M = 65537) stays in L1 while the permutation
    // walks probe it; late in the fill most probes hit taken slots.
    let mut taken = vec![0u64; (m as usize).div_ceil(64)];
    let mut filled = 0u32;
    if perms.iter().all(|p| p.weight == max_weight) {
        // Equal weights: every backend's credit reaches the largest weight every round.
        'round_robin: loop {
            for p in perms.iter_mut() {
                claim(p, m, &mut taken, &mut slots);
                filled += 1;
                if filled == m {
                    break 'round_robin;
                }
            }
        }
        return slots;
    }
    'fill: loop {
        for p in perms.iter_mut() {
            p.credit += p.weight;
            while p.credit >= max_weight {
                p.credit -= max_weight;
                claim(p, m, &mut taken, &mut slots);
                filled += 1;
                if filled == m {
                    break 'fill;
                }
            }
        }
    }
    slots
}

/// Walks `p`'s permutation to its next free slot and gives it `p`'s backend.
#[inline(always)]
fn claim(p: &mut Perm, m: u32, taken: &mut [u64], slots: &mut [u16]) {
    // Position and step in registers for the walk; the word is tested and set once.
    let (mut pos, skip) = (p.pos, p.skip);
    loop {
        let word = taken[(pos >> 6) as usize];
        let bit = 1u64 << (pos & 63);
        if word & bit == 0 {
            taken[(pos >> 6) as usize] = word | bit;
            break;
        }
        pos += skip;
        if pos >= m {
            pos -= m;
        }
    }
    p.pos = pos;
    slots[pos as usize] = p.index;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::backend_identity;
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn ids(n: usize) -> Vec<[u8; 18]> {
        (0..n)
            .map(|i| {
                let a = IpAddr::V4(Ipv4Addr::new(10, (i >> 16) as u8, (i >> 8) as u8, i as u8));
                backend_identity(a, 8080)
            })
            .collect()
    }

    fn backends<'a>(ids: &'a [[u8; 18]], weights: &[u32]) -> Vec<MaglevBackend<'a>> {
        ids.iter()
            .zip(weights)
            .map(|(id, &weight)| MaglevBackend { id, weight })
            .collect()
    }

    #[test]
    fn rejects_non_prime_and_handles_empty() {
        let id = ids(1);
        let b = backends(&id, &[1]);
        assert_eq!(Ring::build(&b, 65536), Err(MaglevError::NotPrime(65536)));
        let r = Ring::build(&backends(&id, &[0]), 7).unwrap();
        assert!(r.is_empty());
        assert_eq!(r.lookup(5), None);
        let id = ids(8);
        assert!(matches!(
            Ring::build(&backends(&id, &[1; 8]), 7),
            Err(MaglevError::TooManyBackends { .. })
        ));
    }

    #[test]
    fn small_table_is_a_full_assignment() {
        let id = ids(3);
        let r = Ring::build(&backends(&id, &[1, 1, 1]), 7).unwrap();
        assert_eq!(r.len(), 7);
        let c = r.counts(3);
        assert_eq!(c.iter().sum::<u32>(), 7);
        assert!(c.iter().all(|&x| x == 2 || x == 3), "{c:?}");
    }

    #[test]
    fn known_primes() {
        assert!(is_prime(65537) && is_prime(2) && is_prime(13) && is_prime(655_373));
        assert!(!is_prime(1) && !is_prime(65535) && !is_prime(9));
    }

    /// The last release's default, pinned where a test was written for it.
    const M16381: u32 = 16381;

    /// The sizes the property tests cover: the default for `n` backends, the last
    /// release's default, Katran's 65537 (the golden fixtures' size), and the smallest the
    /// balance rule allows for `n` backends.
    fn sizes(n: usize) -> Vec<u32> {
        let mut m = vec![
            prime_at_least(min_table_size(n)) as u32,
            default_table_size(n),
            M16381,
            65537,
        ];
        m.retain(|&m| u64::from(m) >= min_table_size(n));
        m.sort_unstable();
        m.dedup();
        m
    }

    /// Removing one backend of N: the slots of the removed backend must move; anything else
    /// that moves is collateral. Printed for every size the validation allows so regressions
    /// in disruption are visible.
    #[test]
    fn disruption_on_removal_is_near_one_over_n() {
        for n in [10usize, 100, 163, 650] {
            let id = ids(n);
            for m in sizes(n) {
                let full = Ring::build(&backends(&id, &vec![1; n]), m).unwrap();
                let fewer: Vec<MaglevBackend<'_>> = backends(&id[1..], &vec![1; n - 1]);
                let part = Ring::build(&fewer, m).unwrap();
                let mut moved = 0usize;
                let mut collateral = 0usize;
                for (&a, &b) in full.slots().iter().zip(part.slots()) {
                    let before = usize::from(a);
                    let after = usize::from(b) + 1;
                    if before != after {
                        moved += 1;
                        if before != 0 {
                            collateral += 1;
                        }
                    }
                }
                let mf = f64::from(m);
                println!(
                    "maglev N={n} M={m}: removing 1 moved {:.3}% of slots (ideal {:.3}%), collateral {:.3}%",
                    100.0 * moved as f64 / mf,
                    100.0 / n as f64,
                    100.0 * collateral as f64 / mf
                );
                assert!(moved as f64 / mf >= 1.0 / n as f64 * 0.99);
                // Collateral shrinks as M/N grows (the paper wants M > 100 N): at 65537 it
                // stays under 1% of the slots even for N = 650, and at the smallest size
                // the validation allows (100 slots per backend) under 3%.
                let bound = if m == 65537 {
                    (2.0 / n as f64).max(0.01)
                } else {
                    0.03
                };
                assert!(
                    (collateral as f64 / mf) < bound,
                    "collateral {collateral} too high for N={n} M={m}"
                );
            }
        }
    }

    #[test]
    fn the_balance_rule_holds_at_the_smallest_allowed_size() {
        for n in [1usize, 10, 100, 163] {
            for m in sizes(n) {
                let id = ids(n);
                let r = Ring::build(&backends(&id, &vec![1; n]), m).unwrap();
                let c = r.counts(n);
                let even = f64::from(m) / n as f64;
                let worst = c
                    .iter()
                    .map(|&x| (f64::from(x) - even).abs() / even)
                    .fold(0.0, f64::max);
                assert!(worst <= 0.01, "N={n} M={m}: worst deviation {worst:.4}");
            }
        }
        assert_eq!(sizes(10), vec![1009, 1021, M16381, 65537]);
        assert_eq!(sizes(163), vec![16301, M16381, 65537]);
        assert_eq!(
            sizes(164),
            vec![16411, 65521, 65537],
            "16381 is too small for 164"
        );
    }

    #[test]
    fn a_ring_knows_its_inputs_and_digest() {
        let id = ids(4);
        let b = backends(&id, &[1, 2, 0, 1]);
        let r = Ring::build(&b, 251).unwrap();
        assert!(r.built_from(&b, 251));
        assert!(!r.built_from(&b, 257), "other size");
        assert!(
            !r.built_from(&backends(&id, &[1, 2, 1, 1]), 251),
            "other weight"
        );
        assert!(!r.built_from(&b[..3], 251), "fewer backends");
        let mut swapped = b.clone();
        swapped.swap(0, 1);
        assert!(!r.built_from(&swapped, 251), "other order");
        let again = Ring::build(&b, 251).unwrap();
        assert_eq!(r.digest(), again.digest());
        let other = Ring::build(&backends(&id, &[1, 1, 0, 1]), 251).unwrap();
        assert_ne!(r.digest(), other.digest());
        let empty = Ring::build(&backends(&id, &[0; 4]), 251).unwrap();
        assert!(empty.is_empty() && empty.built_from(&backends(&id, &[0; 4]), 251));
        assert_eq!(empty.table_size(), 251);
    }

    /// Every appliance of every release must build the same ring from the same inputs: the
    /// digests of rings over fixed backends (equal weights, unequal weights with a
    /// zero-weight backend, pools at the balance rule's limit) at the smallest allowed
    /// size, the default for the pool, the last release's default and 65537 are pinned
    /// here. A change to the population, the hashes
    /// or the identity bytes fails this test.
    /// Pool size, weight of backend `i`, table size, the ring's digest.
    type Pinned = (usize, fn(usize) -> u32, u32, u64);

    #[test]
    fn ring_digests_are_pinned() {
        let cases: [Pinned; 11] = [
            (10, |_| 1, 1009, 0x73ca_ccb8_b5f6_b7ed),
            (10, |_| 1, 1021, 0x9771_c373_815d_95e9),
            (40, |i| 1 + (i % 3) as u32, 4093, 0x8803_4a8b_1ee8_11ed),
            (10, |_| 1, M16381, 0x8814_ef33_41e5_a2f5),
            (10, |_| 1, 65537, 0x7082_b6e2_c0c9_991b),
            (7, |i| [3, 1, 0, 2, 5, 1, 1][i], 1009, 0x49b2_7c7b_5317_7a58),
            (
                7,
                |i| [3, 1, 0, 2, 5, 1, 1][i],
                M16381,
                0xd335_71a6_6347_f691,
            ),
            (
                7,
                |i| [3, 1, 0, 2, 5, 1, 1][i],
                65537,
                0x3d80_bfaf_9c82_f348,
            ),
            (163, |i| 1 + (i % 4) as u32, 16301, 0x6370_28bc_eb12_a689),
            (163, |i| 1 + (i % 4) as u32, M16381, 0x2afe_4f0d_af1e_df1e),
            (163, |i| 1 + (i % 4) as u32, 65537, 0x5b9b_7688_d037_63be),
        ];
        let mut got = Vec::new();
        for (n, weight, m, _) in cases {
            let id = ids(n);
            let w: Vec<u32> = (0..n).map(weight).collect();
            got.push(Ring::build(&backends(&id, &w), m).unwrap().digest());
        }
        let want: Vec<u64> = cases.iter().map(|c| c.3).collect();
        assert_eq!(
            got.iter().map(|d| format!("{d:#018x}")).collect::<Vec<_>>(),
            want.iter()
                .map(|d| format!("{d:#018x}"))
                .collect::<Vec<_>>()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn equal_weights_differ_by_at_most_one(n in 1usize..300, w in 1u32..100, big in any::<bool>()) {
            let id = ids(n);
            let m = if big { 65537 } else { M16381 };
            let r = Ring::build(&backends(&id, &vec![w; n]), m).unwrap();
            let c = r.counts(n);
            let min = *c.iter().min().unwrap();
            let max = *c.iter().max().unwrap();
            prop_assert!(max - min <= 1, "min {} max {}", min, max);
        }

        #[test]
        fn weights_respected_within_one_percent(weights in proptest::collection::vec(1u32..20, 2..40), big in any::<bool>()) {
            let n = weights.len();
            let id = ids(n);
            let m = if big { 65537 } else { M16381 };
            let r = Ring::build(&backends(&id, &weights), m).unwrap();
            let c = r.counts(n);
            let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
            for (i, &w) in weights.iter().enumerate() {
                let want = f64::from(m) * f64::from(w) / total as f64;
                let got = f64::from(c[i]);
                prop_assert!((got - want).abs() <= want * 0.01 + 1.0,
                    "backend {} weight {} got {} want {:.1}", i, w, got, want);
            }
        }

        #[test]
        fn same_table_for_any_order(n in 1usize..60, seed in any::<u64>()) {
            let id = ids(n);
            let weights: Vec<u32> = (0..n).map(|i| 1 + ((seed >> (i % 60)) as u32 & 3)).collect();
            let a = Ring::build(&backends(&id, &weights), 4099).unwrap();
            // Reverse, then rotate by a seed-dependent amount.
            let mut perm: Vec<usize> = (0..n).rev().collect();
            perm.rotate_left((seed as usize) % n);
            let id2: Vec<[u8; 18]> = perm.iter().map(|&i| id[i]).collect();
            let w2: Vec<u32> = perm.iter().map(|&i| weights[i]).collect();
            let b = Ring::build(&backends(&id2, &w2), 4099).unwrap();
            for (x, y) in a.slots().iter().zip(b.slots()) {
                prop_assert_eq!(usize::from(*x), perm[usize::from(*y)]);
            }
        }
    }
}
