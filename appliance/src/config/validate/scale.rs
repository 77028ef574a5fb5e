//! The keys that keep the control plane cheap at thousands of VIPs: each VIP's Maglev ring
//! size, checked against its pool for balance; `[appliance] health_batch` and
//! `health_batch_delay`, which pace health commits so that a storm of transitions becomes a
//! few versions while a lone transition commits soon; and `[metrics] per_backend`, which
//! bounds the scrape.

use std::time::Duration;

use super::is_prime;
use crate::config::error::ConfigErrors;
use crate::config::model::{Appliance, Metrics, PerBackend};
use crate::config::reader::{Table, describe};
use config::ValueKind;

/// Default ring size per VIP: a prime that keeps pools of up to 163 backends within 1% of
/// an even share ([`MIN_SLOTS_PER_BACKEND`]) at 32 KiB per ring (2-byte slots), so 10,000
/// VIPs fit in about 330 MB.
pub const DEFAULT_MAGLEV_TABLE_SIZE: u32 = 16381;

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

/// A VIP's ring size: its own `maglev_table_size`, else the appliance's; a prime with at
/// least [`MIN_SLOTS_PER_BACKEND`] slots per configured backend, so that every backend's
/// share stays within 1% of an even one.
pub(super) fn vip_table_size(
    t: &mut Table<'_>,
    appliance: Option<&Appliance>,
    backends: usize,
    errs: &mut ConfigErrors,
) -> Option<u32> {
    let own = t
        .int("maglev_table_size", 13..=i64::from(MAX_TABLE_SIZE), errs)
        .map(|m| m as u32);
    let (m, from) = match (own, appliance) {
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
        (None, Some(a)) => (
            a.maglev_table_size,
            "appliance.maglev_table_size".to_string(),
        ),
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
