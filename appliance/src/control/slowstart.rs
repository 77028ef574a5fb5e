//! Slow start (`slow_start = "30s"` on a VIP, or a backend overriding it): a backend that
//! comes up (added to a running VIP, healthy again, enabled or undrained, given a weight
//! again) ramps its effective weight from a tenth of its weight to all of it over the
//! period, so a cold backend (empty caches, JIT not warm, pools not filled) is not handed
//! its full share of new flows at once.
//!
//! The Maglev ring and the weighted LVS schedulers read weights from the tables, which are
//! immutable, so each level of the ramp is one table version: [`LEVELS`] levels, the first
//! (a tenth) in the version that brings the backend up, the other nine at equal intervals,
//! the last (full weight) at the end of the period. Ten levels move a tenth of the
//! backend's share at a time, small enough that no step is a burst, few enough that a ramp
//! costs nine commits; commits that rebuild rings rebuild only the ramping VIPs' (the others'
//! inputs are unchanged and their rings are shared). The control loop commits steps no
//! closer than [`MIN_STEP_GAP`], so many backends ramping out of phase cost a bounded rate.
//!
//! Nobody ramps at start-up: every backend of the first version is up at once, and a
//! backend's first health verdict after the start is its start-up decision, not a recovery.
//! Nor do the backends of a VIP a reload adds (they all start together). Pure: the time
//! comes in as an argument; `prepare` applies it, the control loop commits the steps.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::config::{Backend, Config, Vip};
use crate::lb::BackendId;

/// Levels of a ramp: level `k` (0..LEVELS) carries `weight * (k + 1) / LEVELS`.
pub const LEVELS: u32 = 10;

/// The shortest time between two slow-start commits (steps due closer together are
/// committed together).
pub const MIN_STEP_GAP: Duration = Duration::from_millis(250);

/// How a backend stands in the version being prepared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// May take new flows: healthy, active, weight above 0.
    pub up: bool,
    /// Its health is known: it has no check, or its check has given a verdict.
    pub decided: bool,
}

/// Which backends are up, which of them ramp and since when; what the running version was
/// prepared with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ramps {
    up: HashSet<BackendId>,
    since: HashMap<BackendId, Instant>,
    /// Backends present since the first version whose health is not decided yet: their
    /// first verdict is the start-up decision and does not ramp.
    pending: HashSet<BackendId>,
    /// VIPs of the running version.
    vips: HashSet<String>,
    started: bool,
}

/// One backend's ramp, as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ramp {
    /// When it came up.
    pub since: Instant,
    /// When it reaches its full weight.
    pub until: Instant,
}

impl Ramps {
    /// The ramps of the next version. A backend with slow start that is up now and was not
    /// in the running version starts its ramp `now`; one that is no longer up, or whose
    /// period is over, stops. The first call (the first version) starts none.
    pub fn next(
        &self,
        config: &Config,
        ready: &dyn Fn(&Vip, &Backend) -> Readiness,
        now: Instant,
    ) -> Ramps {
        let mut out = Ramps {
            started: true,
            ..Ramps::default()
        };
        for v in &config.vips {
            out.vips.insert(v.name.clone());
            let new_vip = !self.vips.contains(&v.name);
            for b in &v.backends {
                let id = BackendId::of(v, b);
                let r = ready(v, b);
                let quiet = !self.started || self.pending.contains(&id);
                if !r.decided && quiet {
                    out.pending.insert(id.clone());
                }
                if !r.up {
                    continue;
                }
                if let Some(period) = b.slow_start(v) {
                    let since = match self.since.get(&id) {
                        Some(t) => Some(*t),
                        None if !quiet && !new_vip && !self.up.contains(&id) => Some(now),
                        None => None,
                    };
                    if let Some(t) = since
                        && now.saturating_duration_since(t) < period
                    {
                        out.since.insert(id.clone(), t);
                    }
                }
                out.up.insert(id);
            }
        }
        out
    }

    /// After a health version that ramps nobody ([`super::prepare::prepare_health`]): a
    /// backend whose verdict changed, with its readiness now. Leaves the sets
    /// [`Ramps::next`] would give, without its pass over the config.
    pub fn note(&mut self, id: &BackendId, r: Readiness) {
        if r.decided {
            self.pending.remove(id);
        }
        if r.up {
            self.up.insert(id.clone());
        } else {
            self.up.remove(id);
        }
    }

    /// Whether any backend is ramping.
    pub fn is_empty(&self) -> bool {
        self.since.is_empty()
    }

    /// How many backends are ramping.
    pub fn len(&self) -> usize {
        self.since.len()
    }

    /// The ramp of backend `b` of `v`, if it is ramping.
    pub fn ramp(&self, v: &Vip, b: &Backend) -> Option<Ramp> {
        self.ramp_of(&BackendId::of(v, b), period(v.slow_start, b)?)
    }

    fn ramp_of(&self, id: &BackendId, period: Duration) -> Option<Ramp> {
        let since = *self.since.get(id)?;
        Some(Ramp {
            since,
            until: since + period,
        })
    }

    /// Lowers the weights of ramping backends in `config` to their level at `now`; returns
    /// when the next level is due (`None` when nothing ramps).
    pub fn apply(&self, config: &mut Config, now: Instant) -> Option<Instant> {
        if self.since.is_empty() {
            return None;
        }
        let mut due: Option<Instant> = None;
        for v in &mut config.vips {
            for b in &mut v.backends {
                let Some(p) = period(v.slow_start, b) else {
                    continue;
                };
                let Some(r) = self.ramp_of(&BackendId::new(&v.name, b.underlay(), b.port), p)
                else {
                    continue;
                };
                let k = level(now.saturating_duration_since(r.since), p);
                b.weight = ramped(b.weight, k);
                let at = r.since + p * (k + 1) / (LEVELS - 1);
                due = Some(due.map_or(at, |d| d.min(at)));
            }
        }
        due
    }
}

/// A backend's slow-start period: its own, else its VIP's; `None` when off (as
/// [`Backend::slow_start`], without the VIP at hand).
fn period(vip: Option<Duration>, b: &Backend) -> Option<Duration> {
    b.slow_start.or(vip).filter(|d| !d.is_zero())
}

/// The level (0..LEVELS) a ramp of `period` is at after `elapsed`: level `k` from
/// `k / (LEVELS - 1)` of the period on, the last one at its end.
pub fn level(elapsed: Duration, period: Duration) -> u32 {
    let k = elapsed.as_nanos() * u128::from(LEVELS - 1) / period.as_nanos().max(1);
    k.min(u128::from(LEVELS - 1)) as u32
}

/// `weight` at level `k`: `weight * (k + 1) / LEVELS`, at least 1 for a backend with a
/// weight (0 would take it out of the pool, which is not what a ramp means).
pub fn ramped(weight: u32, k: u32) -> u32 {
    if weight == 0 {
        return 0;
    }
    let k = k.min(LEVELS - 1);
    ((u64::from(weight) * u64::from(k + 1) / u64::from(LEVELS)) as u32).max(1)
}

#[cfg(test)]
#[path = "slowstart_tests.rs"]
mod tests;
