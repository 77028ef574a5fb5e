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
//! a backend's permutation position advances by `skip` with a conditional subtraction.

use crate::lb::hash::maglev_offset_skip;

/// A backend as Maglev sees it: identity bytes (see [`crate::lb::hash::backend_identity`])
/// and a weight. Weight 0 takes no slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaglevBackend<'a> {
    /// Stable identity bytes, hashed for offset and skip and used to sort.
    pub id: &'a [u8],
    /// Relative share of the ring.
    pub weight: u32,
}

/// Default ring size: a prime comfortably above 100 x the largest expected pool.
pub const DEFAULT_M: u32 = 65537;

/// A built lookup table: each slot holds an index into the backend list passed to
/// [`Ring::build`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    slots: Vec<u32>,
}

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

impl Ring {
    /// Populates a table of `m` slots. Returns an empty ring when no backend has weight.
    pub fn build(backends: &[MaglevBackend<'_>], m: u32) -> Result<Ring, MaglevError> {
        if !is_prime(m) {
            return Err(MaglevError::NotPrime(m));
        }
        let mut order: Vec<u32> = (0..backends.len() as u32)
            .filter(|&i| backends[i as usize].weight > 0)
            .collect();
        if order.is_empty() {
            return Ok(Ring { slots: Vec::new() });
        }
        if order.len() > m as usize {
            return Err(MaglevError::TooManyBackends {
                backends: order.len(),
                m,
            });
        }
        order.sort_by(|&a, &b| backends[a as usize].id.cmp(backends[b as usize].id));

        struct Perm {
            pos: u32,
            skip: u32,
            weight: u64,
            credit: u64,
            index: u32,
        }
        let mut perms: Vec<Perm> = order
            .iter()
            .map(|&i| {
                let b = &backends[i as usize];
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

        let mut slots = vec![0u32; m as usize];
        // Occupancy as a bitmap (8 KiB for M = 65537) stays in L1 while the permutation
        // walks probe it; late in the fill most probes hit taken slots.
        let mut taken = vec![0u64; (m as usize).div_ceil(64)];
        let mut filled = 0u32;
        'fill: loop {
            for p in perms.iter_mut() {
                p.credit += p.weight;
                while p.credit >= max_weight {
                    p.credit -= max_weight;
                    // Walk this backend's permutation to its next free slot.
                    while taken[(p.pos >> 6) as usize] & (1u64 << (p.pos & 63)) != 0 {
                        p.pos += p.skip;
                        if p.pos >= m {
                            p.pos -= m;
                        }
                    }
                    taken[(p.pos >> 6) as usize] |= 1u64 << (p.pos & 63);
                    slots[p.pos as usize] = p.index;
                    filled += 1;
                    if filled == m {
                        break 'fill;
                    }
                }
            }
        }
        Ok(Ring { slots })
    }

    /// The backend index for a flow hash, `None` for an empty ring.
    #[inline(always)]
    pub fn lookup(&self, hash: u32) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        Some(self.slots[(hash as usize) % self.slots.len()])
    }

    /// The slot a hash maps to (for `trace`), `None` for an empty ring.
    pub fn slot_of(&self, hash: u32) -> Option<usize> {
        if self.slots.is_empty() {
            None
        } else {
            Some(hash as usize % self.slots.len())
        }
    }

    /// All slots (backend indexes).
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }

    /// Table size, 0 when empty.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no backend holds a slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Slot count per backend index (`n` = length of the backend list used to build).
    pub fn counts(&self, n: usize) -> Vec<u32> {
        let mut c = vec![0u32; n];
        for &s in &self.slots {
            c[s as usize] += 1;
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::hash::backend_identity;
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

    /// Removing one backend of N: the slots of the removed backend must move; anything else
    /// that moves is collateral. Print it so regressions in disruption are visible.
    #[test]
    fn disruption_on_removal_is_near_one_over_n() {
        for n in [10usize, 100, 1000] {
            let id = ids(n);
            let full = Ring::build(&backends(&id, &vec![1; n]), DEFAULT_M).unwrap();
            let fewer: Vec<MaglevBackend<'_>> = backends(&id[1..], &vec![1; n - 1]);
            let part = Ring::build(&fewer, DEFAULT_M).unwrap();
            let mut moved = 0usize;
            let mut collateral = 0usize;
            for (&a, &b) in full.slots().iter().zip(part.slots()) {
                let before = a as usize;
                let after = b as usize + 1;
                if before != after {
                    moved += 1;
                    if before != 0 {
                        collateral += 1;
                    }
                }
            }
            let m = DEFAULT_M as f64;
            println!(
                "maglev N={n}: removing 1 moved {:.3}% of slots (ideal {:.3}%), collateral {:.3}%",
                100.0 * moved as f64 / m,
                100.0 / n as f64,
                100.0 * collateral as f64 / m
            );
            assert!(moved as f64 / m >= 1.0 / n as f64 * 0.99);
            // Collateral shrinks as M/N grows (the paper wants M > 100 N); at M = 65537 it
            // stays under 1% of the slots even for N = 1000.
            assert!(
                (collateral as f64 / m) < (2.0 / n as f64).max(0.01),
                "collateral {collateral} too high for N={n}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn equal_weights_differ_by_at_most_one(n in 1usize..300, w in 1u32..100) {
            let id = ids(n);
            let r = Ring::build(&backends(&id, &vec![w; n]), DEFAULT_M).unwrap();
            let c = r.counts(n);
            let min = *c.iter().min().unwrap();
            let max = *c.iter().max().unwrap();
            prop_assert!(max - min <= 1, "min {} max {}", min, max);
        }

        #[test]
        fn weights_respected_within_one_percent(weights in proptest::collection::vec(1u32..20, 2..40)) {
            let n = weights.len();
            let id = ids(n);
            let r = Ring::build(&backends(&id, &weights), DEFAULT_M).unwrap();
            let c = r.counts(n);
            let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
            for (i, &w) in weights.iter().enumerate() {
                let want = f64::from(DEFAULT_M) * f64::from(w) / total as f64;
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
                prop_assert_eq!(*x as usize, perm[*y as usize]);
            }
        }
    }
}
