//! Rise/fall hysteresis: turns a stream of probe outcomes into up/down decisions.
//!
//! A backend that answers every other probe must not flap in and out of the pool, and one
//! that recovered must come back without an operator. The rule is the one HAProxy, LVS
//! keepalived and every hardware balancer use: `fall` *consecutive* failures take a
//! backend down, `rise` *consecutive* successes bring it up; any opposite result restarts
//! the count. This module is a pure state machine fed outcomes and `now`, so its every
//! edge is tested without sockets or clocks.

use std::time::Instant;

use crate::check::InitialHealth;
use crate::outcome::{Failure, Outcome, Pass};

/// Whether a backend may take new flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Health {
    /// Passing: in the pool.
    Up,
    /// Failing or not yet proven: out of the pool.
    Down,
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Health::Up => "up",
            Health::Down => "down",
        })
    }
}

impl From<InitialHealth> for Health {
    fn from(i: InitialHealth) -> Health {
        match i {
            InitialHealth::Up => Health::Up,
            InitialHealth::Down => Health::Down,
        }
    }
}

/// Why a state changed: the outcome of the probe that completed the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// `rise` consecutive successes; the last one's detail.
    Passed(Pass),
    /// `fall` consecutive failures; the last one's cause.
    Failed(Failure),
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Passed(p) => write!(f, "{p}"),
            Reason::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// A change of state decided by [`Hysteresis::record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// State before.
    pub from: Health,
    /// State after.
    pub to: Health,
    /// The outcome that completed the run of `rise` successes or `fall` failures.
    pub reason: Reason,
    /// When that outcome was recorded.
    pub at: Instant,
}

/// The rise/fall state of one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hysteresis {
    rise: u32,
    fall: u32,
    state: Health,
    decided: bool,
    successes: u32,
    failures: u32,
    last_change: Option<Instant>,
}

impl Hysteresis {
    /// A machine in `initial` state, undecided. `rise` and `fall` below 1 act as 1: a
    /// threshold of zero would mean "change without evidence".
    pub fn new(rise: u32, fall: u32, initial: InitialHealth) -> Hysteresis {
        Hysteresis {
            rise: rise.max(1),
            fall: fall.max(1),
            state: initial.into(),
            decided: false,
            successes: 0,
            failures: 0,
            last_change: None,
        }
    }

    /// Records one probe outcome at `now`; returns the change of state it causes, if any.
    ///
    /// Reaching `fall` failures while already down (or `rise` successes while already up)
    /// only marks the state as decided: there is nothing to announce.
    pub fn record(&mut self, outcome: &Outcome, now: Instant) -> Option<Change> {
        let (target, reason) = match outcome {
            Ok(pass) => {
                self.failures = 0;
                self.successes = self.successes.saturating_add(1);
                if self.successes < self.rise {
                    return None;
                }
                (Health::Up, Reason::Passed(*pass))
            }
            Err(failure) => {
                self.successes = 0;
                self.failures = self.failures.saturating_add(1);
                if self.failures < self.fall {
                    return None;
                }
                (Health::Down, Reason::Failed(failure.clone()))
            }
        };
        self.decided = true;
        if self.state == target {
            return None;
        }
        let from = self.state;
        self.state = target;
        self.last_change = Some(now);
        Some(Change {
            from,
            to: target,
            reason,
            at: now,
        })
    }

    /// Current state.
    pub fn state(&self) -> Health {
        self.state
    }

    /// False while the state is still the configured initial one, unconfirmed by a full
    /// run of `rise` successes or `fall` failures.
    pub fn decided(&self) -> bool {
        self.decided
    }

    /// Consecutive successes so far (zero after any failure).
    pub fn successes(&self) -> u32 {
        self.successes
    }

    /// Consecutive failures so far (zero after any success).
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// When the state last changed; `None` while it is the initial one.
    pub fn last_change(&self) -> Option<Instant> {
        self.last_change
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn ok() -> Outcome {
        Ok(Pass::Connected)
    }

    #[test]
    fn initial_down_needs_rise_consecutive_successes() {
        let t0 = Instant::now();
        let mut h = Hysteresis::new(3, 2, InitialHealth::Down);
        assert_eq!(h.state(), Health::Down);
        assert!(!h.decided());
        assert_eq!(h.record(&ok(), t0), None);
        assert_eq!(h.record(&ok(), t0), None);
        // A failure restarts the count: rise is consecutive, not cumulative.
        assert_eq!(h.record(&Err(Failure::Timeout), t0), None);
        assert_eq!(h.successes(), 0);
        assert_eq!(h.failures(), 1);
        assert_eq!(h.record(&ok(), t0), None);
        assert_eq!(h.record(&ok(), t0), None);
        let at = t0 + Duration::from_secs(5);
        let change = h.record(&Ok(Pass::Status(200)), at).expect("up after 3");
        assert_eq!(
            change,
            Change {
                from: Health::Down,
                to: Health::Up,
                reason: Reason::Passed(Pass::Status(200)),
                at,
            }
        );
        assert_eq!(h.state(), Health::Up);
        assert_eq!(h.last_change(), Some(at));
        assert!(h.decided());
    }

    #[test]
    fn initial_down_confirmed_by_failures_without_a_change() {
        let t0 = Instant::now();
        let mut h = Hysteresis::new(2, 2, InitialHealth::Down);
        assert_eq!(h.record(&Err(Failure::Refused), t0), None);
        assert!(!h.decided());
        assert_eq!(h.record(&Err(Failure::Refused), t0), None);
        assert!(h.decided());
        assert_eq!(h.state(), Health::Down);
        assert_eq!(h.last_change(), None);
    }

    #[test]
    fn initial_up_goes_down_after_fall_with_last_reason() {
        let t0 = Instant::now();
        let mut h = Hysteresis::new(2, 3, InitialHealth::Up);
        assert_eq!(h.state(), Health::Up);
        assert_eq!(h.record(&Err(Failure::Timeout), t0), None);
        assert_eq!(h.record(&Err(Failure::Refused), t0), None);
        let c = h
            .record(&Err(Failure::Status(503)), t0)
            .expect("down after 3");
        assert_eq!((c.from, c.to), (Health::Up, Health::Down));
        assert_eq!(c.reason, Reason::Failed(Failure::Status(503)));
        assert_eq!(c.reason.to_string(), "status 503");
        // Further failures change nothing.
        assert_eq!(h.record(&Err(Failure::Status(503)), t0), None);
        assert_eq!(h.failures(), 4);
    }

    #[test]
    fn zero_thresholds_act_as_one() {
        let t0 = Instant::now();
        let mut h = Hysteresis::new(0, 0, InitialHealth::Down);
        assert!(h.record(&ok(), t0).is_some());
        assert!(h.record(&Err(Failure::NoReply), t0).is_some());
    }

    /// A reference model written differently: the state after result `i` is Up when the
    /// last `rise` results all passed, Down when the last `fall` all failed, else as before.
    fn windowed(rise: usize, fall: usize, initial: Health, results: &[bool]) -> Vec<Health> {
        let mut state = initial;
        let mut out = Vec::new();
        for i in 0..results.len() {
            if i + 1 >= rise && results[i + 1 - rise..=i].iter().all(|&r| r) {
                state = Health::Up;
            } else if i + 1 >= fall && results[i + 1 - fall..=i].iter().all(|&r| !r) {
                state = Health::Down;
            }
            out.push(state);
        }
        out
    }

    proptest! {
        #[test]
        fn never_flips_faster_than_rise_and_fall(
            rise in 1u32..6,
            fall in 1u32..6,
            initial_up in any::<bool>(),
            results in proptest::collection::vec(any::<bool>(), 0..200),
        ) {
            let initial = if initial_up { InitialHealth::Up } else { InitialHealth::Down };
            let t0 = Instant::now();
            let mut h = Hysteresis::new(rise, fall, initial);
            let expected = windowed(rise as usize, fall as usize, initial.into(), &results);
            let mut last_flip: Option<usize> = None;
            for (i, &pass) in results.iter().enumerate() {
                let outcome = if pass { ok() } else { Err(Failure::Timeout) };
                let before = h.state();
                let now = t0 + Duration::from_secs(i as u64);
                let change = h.record(&outcome, now);
                prop_assert_eq!(h.state(), expected[i]);
                match change {
                    Some(c) => {
                        prop_assert_eq!(c.from, before);
                        prop_assert_ne!(c.from, c.to);
                        prop_assert_eq!(c.at, now);
                        let need = if c.to == Health::Up { rise } else { fall } as usize;
                        // The run that caused it lies wholly after the previous flip.
                        if let Some(prev) = last_flip {
                            prop_assert!(i - prev >= need);
                        }
                        prop_assert!(i + 1 >= need);
                        last_flip = Some(i);
                    }
                    None => prop_assert_eq!(h.state(), before),
                }
            }
        }
    }
}
