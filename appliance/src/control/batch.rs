//! Health batching: the prober's transitions are recorded as they arrive (event log,
//! counters, reasons) but committed together, paced the way routers throttle SPF runs: the
//! first transition after a quiet spell waits `[appliance] health_batch_delay` for others
//! to join it, and a commit never starts sooner than `health_batch` after the previous one
//! started. A storm of hundreds of transitions (a switch taking a rack down) then makes at
//! most one version per `health_batch` instead of hundreds, the commit work stays bounded,
//! and a storm that arrives at once, or a lone transition, waits only the short delay plus
//! its commit. Pure: the loop passes `now`, asks when the batch is due and takes it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::lb::BackendId;

/// The transitions received since the last health commit.
#[derive(Debug, Default)]
pub struct HealthBatch {
    verdicts: HashMap<BackendId, bool>,
    first: Option<Instant>,
    transitions: u64,
    /// When the last batch was taken for a commit.
    last_taken: Option<Instant>,
}

/// How health commits are paced (`[appliance] health_batch_delay` and `health_batch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// How long a batch waits after its first transition for others to join it.
    pub delay: Duration,
    /// The least time from one batch being taken to the next.
    pub hold: Duration,
}

impl Pacing {
    /// The pacing `config` asks for.
    pub fn of(config: &crate::config::Config) -> Pacing {
        Pacing {
            delay: config.appliance.health_batch_delay,
            hold: config.appliance.health_batch,
        }
    }
}

/// A batch taken for one commit.
#[derive(Debug, PartialEq, Eq)]
pub struct Taken {
    /// The newest verdict of every pair a transition of the batch decided.
    pub verdicts: HashMap<BackendId, bool>,
    /// When the first transition of the batch arrived (the sync lag counts from here).
    pub first: Instant,
    /// Transitions in the batch (a probe deciding several pairs counts once).
    pub transitions: u64,
}

impl HealthBatch {
    /// Records one transition of a probe deciding `pairs`, arrived at `now`.
    pub fn add<'a>(
        &mut self,
        pairs: impl IntoIterator<Item = &'a BackendId>,
        up: bool,
        now: Instant,
    ) {
        for p in pairs {
            self.verdicts.insert(p.clone(), up);
        }
        self.first.get_or_insert(now);
        self.transitions += 1;
    }

    /// Records one transition deciding each pair its own way (a backend of several checks
    /// takes their combined verdict).
    pub fn add_each<'a>(
        &mut self,
        verdicts: impl IntoIterator<Item = (&'a BackendId, bool)>,
        now: Instant,
    ) {
        for (p, up) in verdicts {
            self.verdicts.insert(p.clone(), up);
        }
        self.first.get_or_insert(now);
        self.transitions += 1;
    }

    /// Opens the batch at `now` without a local transition: in a fleet, the fleet's
    /// verdicts moved with another member's report, and they commit with the batch.
    pub fn touch(&mut self, now: Instant) {
        self.first.get_or_insert(now);
    }

    /// When the batch must be committed: `delay` after its first transition, and not
    /// sooner than `hold` after the last batch was taken; `None` while it is empty.
    pub fn due(&self, pacing: Pacing) -> Option<Instant> {
        let first = self.first? + pacing.delay;
        Some(match self.last_taken {
            Some(t) => first.max(t + pacing.hold),
            None => first,
        })
    }

    /// Whether the batch is due at `now`.
    pub fn is_due(&self, pacing: Pacing, now: Instant) -> bool {
        self.due(pacing).is_some_and(|d| now >= d)
    }

    /// Takes the batch at `now` for a commit, leaving it empty; `None` when nothing
    /// arrived.
    pub fn take(&mut self, now: Instant) -> Option<Taken> {
        let first = self.first.take()?;
        self.last_taken = Some(now);
        Some(Taken {
            verdicts: std::mem::take(&mut self.verdicts),
            first,
            transitions: std::mem::take(&mut self.transitions),
        })
    }
}

impl Taken {
    /// The event log's words for the version it makes.
    pub fn why(&self) -> String {
        match self.transitions {
            1 => "health change".to_string(),
            n => format!("health: {n} transitions"),
        }
    }

    /// Applies the verdicts to `health`; whether any of them changed it (a batch whose
    /// pairs flapped back needs no new version).
    pub fn apply(&self, health: &mut HashMap<BackendId, bool>) -> bool {
        let mut changed = false;
        for (k, &up) in &self.verdicts {
            changed |= health.insert(k.clone(), up) != Some(up);
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u8) -> BackendId {
        BackendId::new("web", std::net::IpAddr::from([10, 0, 0, i]), 80)
    }

    const PACING: Pacing = Pacing {
        delay: Duration::from_millis(10),
        hold: Duration::from_millis(50),
    };

    #[test]
    fn a_storm_is_one_batch_due_the_delay_after_its_first_transition() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut b = HealthBatch::default();
        assert_eq!(b.due(PACING), None);
        assert!(b.take(t0).is_none());
        for i in 0..200u8 {
            b.add(
                [&id(i)],
                false,
                t0 + Duration::from_micros(u64::from(i) * 40),
            );
        }
        // The same pair flaps back up before the commit: its newest verdict wins.
        b.add([&id(3)], true, t0 + ms(9));
        assert_eq!(b.due(PACING), Some(t0 + ms(10)), "nothing committed before");
        assert!(!b.is_due(PACING, t0 + ms(9)));
        assert!(b.is_due(PACING, t0 + ms(10)));
        let taken = b.take(t0 + ms(10)).expect("a batch");
        assert_eq!((taken.first, taken.transitions), (t0, 201));
        assert_eq!(taken.verdicts.len(), 200);
        assert!(taken.verdicts[&id(3)], "the newest verdict wins");
        assert_eq!(b.due(PACING), None, "taken: empty again");
        // A transition soon after a commit waits until `hold` after it.
        b.add([&id(1)], true, t0 + ms(12));
        assert_eq!(b.due(PACING), Some(t0 + ms(60)));
        assert!(b.take(t0 + ms(60)).is_some());
        // After a quiet spell longer than `hold`, only the delay again.
        b.touch(t0 + ms(200));
        assert_eq!(b.due(PACING), Some(t0 + ms(210)), "a touch opens the batch");
        assert_eq!(
            b.take(t0 + ms(210)).map(|t| t.transitions),
            Some(0),
            "and counts nothing"
        );
        let zero = Pacing {
            delay: Duration::ZERO,
            hold: Duration::ZERO,
        };
        b.add([&id(1)], false, t0 + ms(211));
        assert!(b.is_due(zero, t0 + ms(211)), "zero windows commit at once");

        let mut health = HashMap::from([(id(3), true)]);
        assert!(taken.apply(&mut health));
        assert_eq!(health.len(), 200);
        assert!(
            !taken.apply(&mut health),
            "the same verdicts again change nothing"
        );
    }
}
