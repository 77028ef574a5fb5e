//! Health batching: the prober's transitions are recorded as they arrive (event log,
//! counters, reasons) but committed together once `[appliance] health_batch` has passed since
//! the first of them, so a storm of hundreds of transitions (a switch taking a rack down)
//! makes a few versions instead of hundreds, and the commit work stays bounded. Pure: the
//! loop passes `now`, asks when the batch is due and takes it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::engine::BackendId;

/// The transitions received since the last health commit.
#[derive(Debug, Default)]
pub struct HealthBatch {
    verdicts: HashMap<BackendId, bool>,
    first: Option<Instant>,
    transitions: u64,
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

    /// Opens the batch at `now` without a local transition: in a fleet, the fleet's
    /// verdicts moved with another member's report, and they commit with the batch.
    pub fn touch(&mut self, now: Instant) {
        self.first.get_or_insert(now);
    }

    /// When the batch must be committed: `window` after its first transition; `None` while
    /// it is empty.
    pub fn due(&self, window: Duration) -> Option<Instant> {
        self.first.map(|f| f + window)
    }

    /// Whether the batch is due at `now`.
    pub fn is_due(&self, window: Duration, now: Instant) -> bool {
        self.due(window).is_some_and(|d| now >= d)
    }

    /// Takes the batch, leaving it empty; `None` when nothing arrived.
    pub fn take(&mut self) -> Option<Taken> {
        let first = self.first.take()?;
        Some(Taken {
            verdicts: std::mem::take(&mut self.verdicts),
            first,
            transitions: std::mem::take(&mut self.transitions),
        })
    }
}

impl Taken {
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

/// Health commit counters for metrics: every transition, the versions they made, and the
/// sync lag of the last health version.
#[derive(Debug, Default)]
pub struct HealthStats {
    /// Transitions received from the prober.
    pub transitions: std::sync::atomic::AtomicU64,
    /// Versions committed for health batches.
    pub commits: std::sync::atomic::AtomicU64,
    /// From the first transition of the last health version to every worker running it.
    pub lag: std::sync::Mutex<Option<Duration>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u8) -> BackendId {
        BackendId::new("web", std::net::IpAddr::from([10, 0, 0, i]), 80)
    }

    #[test]
    fn a_storm_is_one_batch_due_a_window_after_its_first_transition() {
        let t0 = Instant::now();
        let w = Duration::from_millis(50);
        let mut b = HealthBatch::default();
        assert_eq!(b.due(w), None);
        assert!(b.take().is_none());
        for i in 0..200u8 {
            b.add(
                [&id(i)],
                false,
                t0 + Duration::from_micros(u64::from(i) * 100),
            );
        }
        // The same pair flaps back up within the window: its newest verdict wins.
        b.add([&id(3)], true, t0 + Duration::from_millis(30));
        assert_eq!(b.due(w), Some(t0 + w));
        assert!(!b.is_due(w, t0 + Duration::from_millis(49)));
        assert!(b.is_due(w, t0 + w));
        let taken = b.take().expect("a batch");
        assert_eq!((taken.first, taken.transitions), (t0, 201));
        assert_eq!(taken.verdicts.len(), 200);
        assert!(taken.verdicts[&id(3)], "the newest verdict wins");
        assert_eq!(b.due(w), None, "taken: empty again");
        b.touch(t0);
        b.add([&id(1)], true, t0 + Duration::from_millis(10));
        assert_eq!(b.due(w), Some(t0 + w), "a touch opens the batch");
        assert_eq!(
            b.take().map(|t| t.transitions),
            Some(1),
            "and counts nothing"
        );

        let mut health = HashMap::from([(id(3), true)]);
        assert!(taken.apply(&mut health));
        assert_eq!(health.len(), 200);
        assert!(
            !taken.apply(&mut health),
            "the same verdicts again change nothing"
        );
    }
}
