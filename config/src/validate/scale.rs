//! The keys that keep the control plane cheap at thousands of VIPs: each VIP's Maglev ring
//! size, checked against its pool for balance or chosen from the pool's size; `[appliance] health_batch` and
//! `health_batch_delay`, which pace health commits so that a storm of transitions becomes a
//! few versions while a lone transition commits soon; and `[metrics] per_backend`, which
//! bounds the scrape.

use std::time::Duration;

use super::is_prime;
use crate::error::ConfigErrors;
use crate::model::{Appliance, Metrics, PerBackend};
use crate::reader::{Table, describe};
use config::ValueKind;

/// The ring sizes a VIP gets when neither it nor `[appliance]` sets `maglev_table_size`
/// ([`default_table_size`]): the prime just below every fourth power of two from 2^10 to
/// 2^24. A step is four times the last, so few pool sizes cross one, and a ring of 2-byte
/// slots just fits its power-of-two allocation (1021 slots: 2042 bytes).
pub const DEFAULT_TABLE_SIZES: [u32; 8] = [
    1021, 4093, 16381, 65521, 262_139, 1_048_573, 4_194_301, 16_777_213,
];

/// The default ring size for a pool of `backends` configured backends: the smallest of
/// [`DEFAULT_TABLE_SIZES`] with at least [`MIN_SLOTS_PER_BACKEND`] slots per backend (1021
/// up to 10 backends, 4093 up to 40, 16381 up to 163, 65521 up to 655, ...), the largest
/// when none has. It counts every configured backend, whatever its weight, state or
/// health, so the size, like the ring, is a function of the config alone and the same on
/// every appliance. A pool that grows past a step gets the next size, and then every slot
/// may move: established flows keep their backends through the connection table, new flows
/// are spread over the new ring (pin `maglev_table_size` to keep a VIP's size).
pub fn default_table_size(backends: usize) -> u32 {
    let need = min_table_size(backends);
    DEFAULT_TABLE_SIZES
        .into_iter()
        .find(|&m| u64::from(m) >= need)
        .unwrap_or(DEFAULT_TABLE_SIZES[DEFAULT_TABLE_SIZES.len() - 1])
}

/// The balance rule: a ring needs at least this many slots per configured backend. With
/// equal weights every backend holds `floor(M/N)` or `ceil(M/N)` slots, so the worst
/// deviation from an even share is one slot in `M/N`: at most 1% here (the paper's
/// `M > 100 N`).
pub const MIN_SLOTS_PER_BACKEND: u64 = 100;

/// The smallest table size the balance rule allows for `backends` configured backends.
pub fn min_table_size(backends: usize) -> u64 {
    backends as u64 * MIN_SLOTS_PER_BACKEND
}

/// The smallest prime at least `n` (a table size to suggest to the operator).
pub fn prime_at_least(n: u64) -> u64 {
    let mut c = n.max(2);
    while c < u64::from(u32::MAX) && !is_prime(c as u32) {
        c += 1;
    }
    c
}

/// The health batch window when `[appliance] health_batch` is not set: the least time
/// between the starts of two health commits.
pub const DEFAULT_HEALTH_BATCH: Duration = Duration::from_millis(50);

/// How long the first transition after a quiet spell waits for others to join its commit
/// when `[appliance] health_batch_delay` is not set (never longer than `health_batch`).
/// Transitions a failure causes at one moment reach the loop within a few milliseconds of
/// each other; waiting longer only adds to every storm's lag.
pub const DEFAULT_HEALTH_BATCH_DELAY: Duration = Duration::from_millis(10);

/// The largest Maglev table a VIP may have.
pub const MAX_TABLE_SIZE: u32 = 1 << 24;

/// `[appliance] health_batch`: 0 to 1 s.
pub(super) fn health_batch(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Duration {
    t.duration(
        "health_batch",
        Duration::ZERO..=Duration::from_secs(1),
        errs,
    )
    .unwrap_or(DEFAULT_HEALTH_BATCH)
}

/// `[appliance] health_batch_delay`: 0 up to `health_batch` (`batch`); when unset, the
/// default or `health_batch` when that is shorter.
pub(super) fn health_batch_delay(
    t: &mut Table<'_>,
    batch: Duration,
    errs: &mut ConfigErrors,
) -> Duration {
    let set = t.duration(
        "health_batch_delay",
        Duration::ZERO..=Duration::from_secs(1),
        errs,
    );
    match set {
        Some(d) if d > batch => {
            errs.push(
                t.key("health_batch_delay"),
                format!(
                    "{} is longer than health_batch ({}): lower it, or raise health_batch",
                    humantime::format_duration(d),
                    humantime::format_duration(batch)
                ),
            );
            batch
        }
        Some(d) => d,
        None => DEFAULT_HEALTH_BATCH_DELAY.min(batch),
    }
}

/// A VIP's ring size: its own `maglev_table_size`, else the appliance's, else the default
/// for its pool ([`default_table_size`]). A size that is set must be a prime with at least
/// [`MIN_SLOTS_PER_BACKEND`] slots per configured backend, so that every backend's share
/// stays within 1% of an even one; the default always has (up to 167,772 backends).
pub(super) fn vip_table_size(
    t: &mut Table<'_>,
    appliance: Option<&Appliance>,
    backends: usize,
    errs: &mut ConfigErrors,
) -> Option<u32> {
    let own = t
        .int("maglev_table_size", 13..=i64::from(MAX_TABLE_SIZE), errs)
        .map(|m| m as u32);
    let (m, from) = match (own, appliance.map(|a| a.maglev_table_size)) {
        (Some(m), _) => {
            if !is_prime(m) {
                errs.push(
                    t.key("maglev_table_size"),
                    format!("{m} is not a prime (Maglev needs a prime table size, e.g. 16381)"),
                );
                return None;
            }
            (m, t.key("maglev_table_size"))
        }
        (None, Some(Some(m))) => (m, "appliance.maglev_table_size".to_string()),
        (None, Some(None)) => return Some(default_table_size(backends)),
        (None, None) => return None,
    };
    let need = min_table_size(backends);
    if u64::from(m) < need {
        let suggest = prime_at_least(need);
        errs.push(
            t.key("maglev_table_size"),
            format!(
                "{backends} backends need a Maglev table of at least {need} slots \
                 ({MIN_SLOTS_PER_BACKEND} per backend keeps every share within 1%), but {from} \
                 is {m}: set this VIP's maglev_table_size to a prime of at least {need}, \
                 e.g. {suggest}"
            ),
        );
    }
    Some(m)
}

/// `[metrics]`: `per_backend = "all" | "none" | N` (N from 1 to 1,000,000; a string of
/// digits counts, as the environment gives every value as a string).
pub(super) fn metrics(mut t: Table<'_>, errs: &mut ConfigErrors) -> Metrics {
    let top = |n: i128| {
        (1..=1_000_000)
            .contains(&n)
            .then_some(PerBackend::Top(n as u32))
    };
    let per_backend = match t.raw("per_backend") {
        None => PerBackend::All,
        Some(v) => {
            let parsed = match &v.kind {
                ValueKind::I64(n) => top(i128::from(*n)),
                ValueKind::U64(n) => top(i128::from(*n)),
                ValueKind::String(s) if s == "all" => Some(PerBackend::All),
                ValueKind::String(s) if s == "none" => Some(PerBackend::None),
                ValueKind::String(s) => s.trim().parse::<i128>().ok().and_then(top),
                _ => None,
            };
            parsed.unwrap_or_else(|| {
                errs.push(
                    t.key("per_backend"),
                    format!(
                        "{} is not \"all\", \"none\" or a number of backends from 1 to 1000000",
                        describe(v)
                    ),
                );
                PerBackend::All
            })
        }
    };
    t.finish(errs);
    Metrics { per_backend }
}
