//! Balance and disruption at every default ring size a pool can get
//! ([`default_table_size`]): for each step of the ladder a property test draws a pool that
//! gets that step (random size within the step's range, random backend addresses) and
//! checks that every backend holds an even share to within one slot, and that one backend
//! leaving or joining moves its own share plus at most a few percent of the ring. The
//! steps above 65521 (pools of more than 655 backends) take seconds per ring unoptimised;
//! the control bench measures them (`cargo bench -p appliance --bench control -- sizes`).

use proptest::prelude::*;

use super::hash::backend_identity;
use super::maglev::{
    DEFAULT_TABLE_SIZES, MIN_SLOTS_PER_BACKEND, MaglevBackend, Ring, default_table_size, is_prime,
};
use std::net::{IpAddr, Ipv4Addr};

/// `n` distinct backend identities at addresses from `base` on.
fn ids(n: usize, base: u32) -> Vec<[u8; 18]> {
    (0..n as u32)
        .map(|i| backend_identity(IpAddr::V4(Ipv4Addr::from(base.wrapping_add(i))), 8080))
        .collect()
}

fn ring(ids: &[[u8; 18]], m: u32) -> Ring {
    let b: Vec<MaglevBackend<'_>> = ids
        .iter()
        .map(|id| MaglevBackend { id, weight: 1 })
        .collect();
    Ring::build(&b, m).expect("a prime with room for the pool")
}

/// The identity each slot holds.
fn owners<'a>(r: &Ring, ids: &'a [[u8; 18]]) -> Vec<&'a [u8; 18]> {
    r.slots().iter().map(|&s| &ids[usize::from(s)]).collect()
}

/// The share of slots whose backend differs between two rings of one size.
fn moved(a: &[&[u8; 18]], b: &[&[u8; 18]]) -> f64 {
    let n = a.iter().zip(b).filter(|(x, y)| x != y).count();
    n as f64 / a.len() as f64
}

/// Slots beyond the leaving or joining backend's own that may move (Maglev's collateral)
/// at 100 or more slots per backend.
const COLLATERAL: f64 = 0.03;

/// The most a change whose ideal share is `ideal` may move: its own share, another whole
/// backend's share, and [`COLLATERAL`]. The second share is for pools in which two backends
/// draw the same permutation step (`skip`, one of M - 1; about C(N,2)/(M - 1) of pools,
/// more at the smaller sizes): their preference lists are then translates of each other,
/// and when one of them leaves or joins the other's slots move too.
fn bound(ideal: f64) -> f64 {
    2.0 * ideal + COLLATERAL
}

/// Checks step `step`'s properties for a pool of `n` backends at addresses from `base`,
/// `gone` the position of the backend that leaves.
fn check(step: usize, n: usize, base: u32, gone: usize) -> Result<(), TestCaseError> {
    let m = DEFAULT_TABLE_SIZES[step];
    prop_assert_eq!(default_table_size(n), m);
    let all = ids(n + 1, base);
    let (pool, joiner) = all.split_at(n);
    let full = ring(pool, m);
    let c = full.counts(n);
    let (min, max) = (*c.iter().min().unwrap(), *c.iter().max().unwrap());
    // Equal weights: floor(M/N) or ceil(M/N) slots each, at least 100, so max/min <= 1.01.
    prop_assert!(max - min <= 1, "N={} M={}: min {} max {}", n, m, min, max);
    prop_assert!(u64::from(min) >= MIN_SLOTS_PER_BACKEND);
    let before = owners(&full, pool);

    let gone = gone % n;
    if n > 1 {
        let rest: Vec<[u8; 18]> = pool
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != gone)
            .map(|(_, id)| *id)
            .collect();
        let left = owners(&ring(&rest, m), &rest);
        let share = moved(&before, &left);
        let ideal = 1.0 / n as f64;
        let own = f64::from(c[gone]) / f64::from(m);
        prop_assert!(share >= own, "its own slots must move");
        prop_assert!(
            share <= bound(ideal),
            "N={} M={}: one leaving moved {:.4} (ideal {:.4})",
            n,
            m,
            share,
            ideal
        );
    }
    if default_table_size(n + 1) == m {
        let joined = owners(&ring(&all, m), &all);
        let share = moved(&before, &joined);
        let ideal = 1.0 / (n + 1) as f64;
        let taken = joined.iter().filter(|&&id| *id == joiner[0]).count();
        prop_assert!(share >= taken as f64 / f64::from(m) - 1e-12);
        prop_assert!(
            share <= bound(ideal),
            "N={} M={}: one joining moved {:.4} (ideal {:.4})",
            n,
            m,
            share,
            ideal
        );
    }
    Ok(())
}

/// The pool sizes that get step `step`: above the last step's room, up to this one's.
fn range(step: usize) -> std::ops::RangeInclusive<usize> {
    let room = |s: usize| (u64::from(DEFAULT_TABLE_SIZES[s]) / MIN_SLOTS_PER_BACKEND) as usize;
    let low = if step == 0 { 1 } else { room(step - 1) + 1 };
    low..=room(step)
}

#[test]
fn the_ladder_is_primes_and_the_rule_picks_the_smallest_step_that_fits() {
    for (i, &m) in DEFAULT_TABLE_SIZES.iter().enumerate() {
        assert!(is_prime(m), "{m}");
        if i > 0 {
            let ratio = f64::from(m) / f64::from(DEFAULT_TABLE_SIZES[i - 1]);
            assert!((ratio - 4.0).abs() < 0.01, "steps four apart: {ratio}");
        }
        let r = range(i);
        assert_eq!(default_table_size(*r.start()), m);
        assert_eq!(default_table_size(*r.end()), m);
        if i + 1 < DEFAULT_TABLE_SIZES.len() {
            assert_eq!(default_table_size(r.end() + 1), DEFAULT_TABLE_SIZES[i + 1]);
        }
    }
    assert_eq!(range(0), 1..=10);
    assert_eq!(range(1), 11..=40);
    assert_eq!(range(2), 41..=163);
    assert_eq!(range(3), 164..=655);
    assert_eq!(default_table_size(0), 1021);
    // The largest pool a ring can index (65536) still gets a balanced default.
    assert!(u64::from(default_table_size(1 << 16)) >= (1 << 16) * MIN_SLOTS_PER_BACKEND);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn step_1021(n in range(0), base in any::<u32>(), gone in any::<usize>()) {
        check(0, n, base, gone)?;
    }

    #[test]
    fn step_4093(n in range(1), base in any::<u32>(), gone in any::<usize>()) {
        check(1, n, base, gone)?;
    }

    #[test]
    fn step_16381(n in range(2), base in any::<u32>(), gone in any::<usize>()) {
        check(2, n, base, gone)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4))]

    #[test]
    fn step_65521(n in range(3), base in any::<u32>(), gone in any::<usize>()) {
        check(3, n, base, gone)?;
    }
}
