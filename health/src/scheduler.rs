//! The probe scheduler: which probes are due when, and what their results mean.
//!
//! A pure state machine, fed `now` and probe results, with no sockets, timers or clocks,
//! so deduplication, reloads, jitter and hysteresis are tested in microseconds. The tokio
//! layer ([`crate::tasks`]) asks [`Scheduler::poll`] for due probes, runs them, hands each
//! outcome to [`Scheduler::on_result`] and publishes the transitions it returns.
//!
//! Timing: each probe has an origin (when it was added, plus a per-target phase in
//! `[0, interval)` hashed from its key) and rounds `origin + n * interval + jitter(n)`,
//! where `jitter(n)` is a per-target, per-round hashed offset in `[0, min(jitter,
//! interval))`. Scheduling against fixed rounds instead of "last finish + interval" keeps
//! probes from drifting, the phase spreads thousands of targets over the interval instead
//! of firing them in one burst, and hashing keeps it deterministic for tests. At most one
//! probe per target is in flight: a round that comes due while its predecessor still runs
//! is skipped, not queued.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use crate::agent::AgentState;
use crate::check::{ProbeKey, Target};
use crate::hysteresis::{Health, Hysteresis, Reason};
use crate::outcome::{Failure, Outcome, Pass};

/// Identifies one probe for the lifetime of its key in the scheduler; a key removed and
/// added again gets a new id (and fresh state).
pub type ProbeId = u64;

/// The shortest interval honoured; a zero interval from a bad conversion would spin.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// A probe to start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    /// Which probe.
    pub id: ProbeId,
    /// Per-probe sequence number; the result must carry it back.
    pub seq: u64,
    /// What to probe.
    pub key: ProbeKey,
    /// When this round was due (the start may be later if the caller polled late).
    pub due: Instant,
    /// When the probe must have finished; past it, the caller reports a timeout.
    pub deadline: Instant,
}

/// A backend changed state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// Which probe (address, port, check).
    pub key: ProbeKey,
    /// State before.
    pub from: Health,
    /// State after.
    pub to: Health,
    /// The outcome that completed the run of `rise` successes or `fall` failures.
    pub reason: Reason,
    /// When the deciding result was recorded.
    pub at: Instant,
    /// How many probes of this target had completed, counting the deciding one.
    pub probe: u64,
    /// An agent check's new answer ([`crate::agent`]): set when it differs from the one
    /// before, with or without a change of state (`from == to` then).
    pub agent: Option<AgentState>,
}

impl std::fmt::Display for Transition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.from == self.to
            && let Some(a) = &self.agent
        {
            return write!(f, "{}: agent asks for {a} (probe {})", self.key, self.probe);
        }
        write!(
            f,
            "{}: {} -> {} ({}, probe {})",
            self.key, self.from, self.to, self.reason, self.probe
        )
    }
}

/// What a reload did (keys ordered by address, port and check name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reload {
    /// Probes started (new keys).
    pub added: Vec<ProbeKey>,
    /// Probes stopped (keys no longer wanted); their state is gone.
    pub removed: Vec<ProbeKey>,
    /// Probes kept with their state.
    pub kept: usize,
}

/// Everything the console and the pools want to know about one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Which probe.
    pub key: ProbeKey,
    /// How many of the targets given to `set_targets` share this probe.
    pub users: usize,
    /// Current state.
    pub state: Health,
    /// False while the state is still the configured initial one.
    pub decided: bool,
    /// Outcome of the most recent completed probe.
    pub last_outcome: Option<Outcome>,
    /// Most recent failure cause, kept after later successes.
    pub last_failure: Option<Failure>,
    /// Consecutive successes.
    pub successes: u32,
    /// Consecutive failures.
    pub failures: u32,
    /// When the state last changed.
    pub last_change: Option<Instant>,
    /// Probes started.
    pub started: u64,
    /// Probes that passed.
    pub passed: u64,
    /// Probes that failed.
    pub failed: u64,
    /// When the most recent probe was due and when it really started.
    pub last_start: Option<(Instant, Instant)>,
    /// When the next round is due (`None` while a probe is in flight).
    pub next_due: Option<Instant>,
    /// A probe is running.
    pub in_flight: bool,
    /// An agent check's last answer while up.
    pub agent: Option<AgentState>,
}

/// Scheduler-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Probes handed out by `poll`.
    pub dispatched: u64,
    /// Results accepted.
    pub completed: u64,
    /// Results ignored: unknown probe (removed by a reload) or a sequence not in flight.
    pub stale_results: u64,
    /// Rounds skipped because the previous probe of the target was still running.
    pub skipped_rounds: u64,
    /// Probes that could not run for a local shortage ([`Failure::Local`]): neither a pass
    /// nor a failure for their target.
    pub local_errors: u64,
    /// Times a due probe waited because [`MAX_IN_FLIGHT`] probes were running.
    pub deferred: u64,
    /// Agent checks whose agent could not be asked or gave no answer it understands
    /// ([`Failure::NoVerdict`]): neither a pass nor a failure.
    pub no_verdict: u64,
}

/// At most this many probes run at once, so hanging targets cannot take every descriptor:
/// the rest wait their turn (counted in [`Counters::deferred`]) and run late rather than
/// fail.
pub const MAX_IN_FLIGHT: usize = 1024;

#[derive(Debug, Clone)]
struct InFlight {
    seq: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    key: ProbeKey,
    hash: u64,
    users: usize,
    hysteresis: Hysteresis,
    origin: Instant,
    interval: Duration,
    jitter: Duration,
    round: u64,
    next_due: Instant,
    in_flight: Option<InFlight>,
    seq: u64,
    started: u64,
    passed: u64,
    failed: u64,
    last_outcome: Option<Outcome>,
    last_failure: Option<Failure>,
    last_start: Option<(Instant, Instant)>,
    agent: Option<AgentState>,
}

impl Entry {
    fn new(key: ProbeKey, users: usize, now: Instant) -> Entry {
        let check = &key.check;
        let interval = check.interval.max(MIN_INTERVAL);
        let jitter = check.jitter.min(interval);
        let hash = key_hash(&key);
        let phase = Duration::from_nanos(hash % nanos(interval));
        let hysteresis = Hysteresis::new(check.rise, check.fall, check.initial);
        let mut e = Entry {
            key,
            hash,
            users,
            hysteresis,
            origin: later(now, phase),
            interval,
            jitter,
            round: 0,
            next_due: now,
            in_flight: None,
            seq: 0,
            started: 0,
            passed: 0,
            failed: 0,
            last_outcome: None,
            last_failure: None,
            last_start: None,
            agent: None,
        };
        e.next_due = e.due_of(0);
        e
    }

    fn due_of(&self, round: u64) -> Instant {
        let base = later(
            self.origin,
            Duration::from_nanos(nanos(self.interval).saturating_mul(round)),
        );
        if self.jitter.is_zero() {
            return base;
        }
        let r = mix(self.hash ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        later(base, Duration::from_nanos(r % nanos(self.jitter)))
    }

    /// The first round after the current one that is due no earlier than `now`.
    fn next_round(&self, now: Instant) -> u64 {
        let mut r = self.round + 1;
        let elapsed = now.saturating_duration_since(self.origin);
        let floor =
            u64::try_from(elapsed.as_nanos() / self.interval.as_nanos()).unwrap_or(u64::MAX);
        r = r.max(floor);
        // base(floor) <= now < base(floor + 1) <= due(floor + 1): at most two steps.
        while self.due_of(r) < now {
            r += 1;
        }
        r
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// `t + d`, or a century after `t` when `d` is absurd: a config with an interval of
/// `u64::MAX` seconds must not panic the prober.
fn later(t: Instant, d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
    t.checked_add(d.min(CENTURY)).unwrap_or(t)
}

fn key_hash(key: &ProbeKey) -> u64 {
    // SipHash with fixed keys: stable within a build, which is all determinism needs.
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    mix(h.finish())
}

/// Hashes the sequential `u64` ids the hot path looks up (probe ids, tokio task ids)
/// with one multiply instead of SipHash: they are ours, not attacker-chosen.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing: spreads consecutive ids into the high bits the table uses.
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// `HashMap` state for [`IdHasher`].
pub(crate) type IdHash = std::hash::BuildHasherDefault<IdHasher>;

/// splitmix64's finaliser: spreads nearby inputs (consecutive rounds) over the range.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Due times in one-millisecond buckets, earliest first.
///
/// A binary heap of ten thousand due times costs a dozen cache-missing levels per
/// dispatch; here a dispatch round drains whole buckets front to back, and a push lands
/// in a bucket a thousand or so keys deep in a B-tree whose upper nodes stay cached.
/// Within the bucket that `now` falls in, only entries due by `now` are taken.
#[derive(Debug, Default)]
struct DueQueue {
    /// Bucket 0 starts here (the first due time ever pushed); earlier times share it.
    base: Option<Instant>,
    buckets: BTreeMap<u64, Vec<(Instant, ProbeId)>>,
    /// Emptied buckets, kept to spare an allocation per millisecond.
    spare: Vec<Vec<(Instant, ProbeId)>>,
}

impl DueQueue {
    const SPARE: usize = 64;

    fn bucket(base: Instant, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(base).as_millis()).unwrap_or(u64::MAX)
    }

    fn push(&mut self, due: Instant, id: ProbeId) {
        let base = *self.base.get_or_insert(due);
        let spare = &mut self.spare;
        self.buckets
            .entry(Self::bucket(base, due))
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push((due, id));
    }

    /// The earliest due time.
    fn first(&self) -> Option<Instant> {
        let (_, v) = self.buckets.first_key_value()?;
        v.iter().map(|&(due, _)| due).min()
    }

    /// Moves every entry due by `now` into `out`, ordered by due time then id.
    fn pop_due(&mut self, now: Instant, out: &mut Vec<(Instant, ProbeId)>) {
        let Some(base) = self.base else {
            return;
        };
        let last = Self::bucket(base, now);
        while let Some(mut first) = self.buckets.first_entry() {
            let key = *first.key();
            if key > last {
                break;
            }
            let v = first.get_mut();
            if key < last {
                // Every entry of an earlier bucket is due before `now`'s millisecond.
                out.append(v);
            } else {
                let mut i = 0;
                while i < v.len() {
                    if v[i].0 <= now {
                        out.push(v.swap_remove(i));
                    } else {
                        i += 1;
                    }
                }
            }
            if !first.get().is_empty() {
                break;
            }
            let v = first.remove();
            if self.spare.len() < Self::SPARE {
                self.spare.push(v);
            }
        }
        out.sort_unstable();
    }
}

/// The set of probes, their timing and their hysteresis.
#[derive(Debug, Default)]
pub struct Scheduler {
    entries: HashMap<ProbeId, Entry, IdHash>,
    by_key: HashMap<ProbeKey, ProbeId>,
    /// Due times; entries for removed or already-dispatched probes are dropped lazily.
    due: DueQueue,
    /// Reused by `poll` for the probes it takes off `due`.
    taken: Vec<(Instant, ProbeId)>,
    next_id: ProbeId,
    counters: Counters,
    /// Probes dispatched whose result has not been recorded (nor their entry removed).
    in_flight: usize,
    /// [`MAX_IN_FLIGHT`] unless a test sets another cap.
    max_in_flight: Option<usize>,
}

impl Scheduler {
    /// An empty scheduler.
    pub fn new() -> Scheduler {
        Scheduler::default()
    }

    /// Replaces the set of targets. Targets that map to the same [`ProbeKey`] share one
    /// probe; keys already present keep their state and timing; keys no longer present
    /// stop (a result still in flight for them is ignored).
    pub fn set_targets(
        &mut self,
        targets: impl IntoIterator<Item = Target>,
        now: Instant,
    ) -> Reload {
        let mut wanted: HashMap<ProbeKey, usize> = HashMap::new();
        for t in targets {
            *wanted.entry(t.key()).or_default() += 1;
        }
        let mut reload = Reload::default();
        let gone: Vec<ProbeKey> = self
            .by_key
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(id) = self.by_key.remove(&key)
                && let Some(e) = self.entries.remove(&id)
                && e.in_flight.is_some()
            {
                self.in_flight -= 1;
            }
            reload.removed.push(key);
        }
        for (key, users) in wanted {
            if let Some(id) = self.by_key.get(&key) {
                if let Some(e) = self.entries.get_mut(id) {
                    e.users = users;
                }
                reload.kept += 1;
                continue;
            }
            let id = self.next_id;
            self.next_id += 1;
            let entry = Entry::new(key.clone(), users, now);
            self.due.push(entry.next_due, id);
            self.entries.insert(id, entry);
            self.by_key.insert(key.clone(), id);
            reload.added.push(key);
        }
        let order = |a: &ProbeKey, b: &ProbeKey| {
            (a.address, a.port, &a.check.name).cmp(&(b.address, b.port, &b.check.name))
        };
        reload.added.sort_by(order);
        reload.removed.sort_by(order);
        reload
    }

    /// Probes due at `now`, each marked in flight with a deadline of `now + timeout`.
    pub fn poll(&mut self, now: Instant) -> Vec<Dispatch> {
        let mut out = Vec::new();
        let mut taken = std::mem::take(&mut self.taken);
        self.due.pop_due(now, &mut taken);
        let cap = self.max_in_flight.unwrap_or(MAX_IN_FLIGHT);
        for (due, id) in taken.drain(..) {
            let Some(e) = self.entries.get_mut(&id) else {
                continue;
            };
            if e.in_flight.is_some() || e.next_due != due {
                continue;
            }
            if self.in_flight >= cap {
                // Due still: handed out by a later poll, once a running probe finished.
                self.counters.deferred += 1;
                self.due.push(due, id);
                continue;
            }
            self.in_flight += 1;
            e.seq += 1;
            e.started += 1;
            e.in_flight = Some(InFlight { seq: e.seq });
            e.last_start = Some((due, now));
            self.counters.dispatched += 1;
            out.push(Dispatch {
                id,
                seq: e.seq,
                key: e.key.clone(),
                due,
                deadline: later(now, e.key.check.timeout),
            });
        }
        self.taken = taken;
        out
    }

    /// The earliest time `poll` may have something to hand out.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.due.first()
    }

    /// Records the outcome of a dispatched probe. Returns the transition it caused, if
    /// any. Results for probes removed since, or with a sequence number not in flight,
    /// are counted as stale and ignored.
    pub fn on_result(
        &mut self,
        id: ProbeId,
        seq: u64,
        outcome: Outcome,
        now: Instant,
    ) -> Option<Transition> {
        let Some(e) = self.entries.get_mut(&id) else {
            self.counters.stale_results += 1;
            return None;
        };
        match &e.in_flight {
            Some(f) if f.seq == seq => {}
            _ => {
                self.counters.stale_results += 1;
                return None;
            }
        }
        e.in_flight = None;
        self.in_flight -= 1;
        self.counters.completed += 1;
        if let Err(f @ (Failure::Local(_) | Failure::NoVerdict(_))) = &outcome {
            // The probe never reached the backend, or its agent said nothing usable: the
            // verdict stays as it was.
            match f {
                Failure::Local(why) => {
                    self.counters.local_errors += 1;
                    tracing::debug!(key = %e.key, "health probe not run: {why}");
                }
                _ => {
                    self.counters.no_verdict += 1;
                    e.last_outcome = Some(outcome.clone());
                }
            }
            let next = e.next_round(now);
            self.counters.skipped_rounds += next - e.round - 1;
            e.round = next;
            e.next_due = e.due_of(next);
            self.due.push(e.next_due, id);
            return None;
        }
        match &outcome {
            Ok(_) => e.passed += 1,
            Err(f) => {
                e.failed += 1;
                e.last_failure = Some(f.clone());
            }
        }
        let change = e.hysteresis.record(&outcome, now);
        let agent = match &outcome {
            Ok(Pass::Agent(a)) if e.agent != Some(*a) => {
                e.agent = Some(*a);
                Some(*a)
            }
            _ => None,
        };
        e.last_outcome = Some(outcome);
        let next = e.next_round(now);
        self.counters.skipped_rounds += next - e.round - 1;
        e.round = next;
        e.next_due = e.due_of(next);
        self.due.push(e.next_due, id);
        transition(e, change, agent, now)
    }

    /// Status of one probe.
    pub fn status_of(&self, key: &ProbeKey) -> Option<Status> {
        let id = self.by_key.get(key)?;
        self.entries.get(id).map(status)
    }

    /// Status of every probe, in no particular order (sort with [`sort_status`] outside
    /// any lock).
    pub fn status(&self) -> Vec<Status> {
        self.entries.values().map(status).collect()
    }

    /// Number of distinct probes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is probed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Scheduler-wide counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Caps concurrent probes at `n` instead of [`MAX_IN_FLIGHT`].
    pub fn set_max_in_flight(&mut self, n: usize) {
        self.max_in_flight = Some(n.max(1));
    }
}

/// The transition a result caused: a change of state, an agent's new answer, both or none.
fn transition(
    e: &Entry,
    change: Option<crate::hysteresis::Change>,
    agent: Option<AgentState>,
    now: Instant,
) -> Option<Transition> {
    let probe = e.passed + e.failed;
    match (change, agent) {
        (Some(c), agent) => Some(Transition {
            key: e.key.clone(),
            from: c.from,
            to: c.to,
            reason: c.reason,
            at: c.at,
            probe,
            agent,
        }),
        // A new answer of an agent whose state stays: a transition of its own.
        (None, Some(a)) => {
            let state = e.hysteresis.state();
            Some(Transition {
                key: e.key.clone(),
                from: state,
                to: state,
                reason: Reason::Passed(Pass::Agent(a)),
                at: now,
                probe,
                agent: Some(a),
            })
        }
        (None, None) => None,
    }
}

/// Orders statuses by address, port and check name, as the console lists them.
pub fn sort_status(v: &mut [Status]) {
    v.sort_by(|a, b| {
        (a.key.address, a.key.port, &a.key.check.name).cmp(&(
            b.key.address,
            b.key.port,
            &b.key.check.name,
        ))
    });
}

fn status(e: &Entry) -> Status {
    Status {
        key: e.key.clone(),
        users: e.users,
        state: e.hysteresis.state(),
        decided: e.hysteresis.decided(),
        last_outcome: e.last_outcome.clone(),
        last_failure: e.last_failure.clone(),
        successes: e.hysteresis.successes(),
        failures: e.hysteresis.failures(),
        last_change: e.hysteresis.last_change(),
        started: e.started,
        passed: e.passed,
        failed: e.failed,
        last_start: e.last_start,
        next_due: e.in_flight.is_none().then_some(e.next_due),
        in_flight: e.in_flight.is_some(),
        agent: e.agent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{CheckKind, HealthCheck, InitialHealth};
    use crate::outcome::Pass;
    use std::net::IpAddr;
    use std::sync::Arc;

    const MS: Duration = Duration::from_millis(1);

    fn check(
        name: &str,
        interval_ms: u32,
        jitter_ms: u32,
        initial: InitialHealth,
    ) -> Arc<HealthCheck> {
        Arc::new(HealthCheck {
            name: name.into(),
            kind: CheckKind::Tcp {
                send: None,
                expect: None,
            },
            port: None,
            interval: interval_ms * MS,
            timeout: 300 * MS,
            rise: 2,
            fall: 3,
            jitter: jitter_ms * MS,
            initial,
            source: None,
            address: None,
        })
    }

    fn target(addr: &str, port: u16, check: &Arc<HealthCheck>) -> Target {
        Target {
            address: addr.parse::<IpAddr>().unwrap(),
            port,
            check: Arc::clone(check),
            via_vip: None,
        }
    }

    /// Steps the clock by `step` from `from` to `to`, answering every due probe at once
    /// with `answer`; returns every dispatch and every transition.
    fn drive(
        s: &mut Scheduler,
        from: Instant,
        to: Instant,
        step: Duration,
        mut answer: impl FnMut(&Dispatch) -> Outcome,
    ) -> (Vec<Dispatch>, Vec<Transition>) {
        let (mut sent, mut changes) = (Vec::new(), Vec::new());
        let mut now = from;
        while now <= to {
            for d in s.poll(now) {
                assert!(d.due <= now);
                let outcome = answer(&d);
                changes.extend(s.on_result(d.id, d.seq, outcome, now));
                sent.push(d);
            }
            now += step;
        }
        (sent, changes)
    }

    #[test]
    fn hd_an_agent_s_new_answer_is_a_transition_and_silence_no_verdict() {
        use crate::agent::{AgentAdmin, AgentState};
        let t0 = Instant::now();
        let c = check("agent", 100, 0, InitialHealth::Up);
        let mut s = Scheduler::new();
        s.set_targets([target("10.0.0.1", 80, &c)], t0);
        let key = target("10.0.0.1", 80, &c).key();
        let half = AgentState {
            admin: AgentAdmin::Ready,
            weight_percent: Some(50),
        };
        let drain = AgentState {
            admin: AgentAdmin::Drain,
            weight_percent: None,
        };
        let mut answers = vec![
            Ok(Pass::Agent(half)),
            Ok(Pass::Agent(half)),
            Err(Failure::NoVerdict("connection refused".into())),
            Ok(Pass::Agent(drain)),
            Ok(Pass::Agent(AgentState::READY)),
        ]
        .into_iter();
        let mut changes = Vec::new();
        let mut now = t0;
        while changes.len() < 3 && now < t0 + 5_000 * MS {
            for d in s.poll(now) {
                let outcome = answers.next().unwrap_or(Ok(Pass::Agent(AgentState::READY)));
                changes.extend(s.on_result(d.id, d.seq, outcome, now));
            }
            now += MS;
        }
        let agents: Vec<Option<AgentState>> = changes.iter().map(|t| t.agent).collect();
        assert_eq!(
            agents,
            [Some(half), Some(drain), Some(AgentState::READY)],
            "each new answer once; a repeat and silence none"
        );
        assert!(
            changes
                .iter()
                .all(|t| t.from == Health::Up && t.to == Health::Up)
        );
        assert_eq!(s.counters().no_verdict, 1);
        assert_eq!(s.status_of(&key).unwrap().agent, Some(AgentState::READY));
        assert!(
            changes[1].to_string().contains("agent asks for drain"),
            "{}",
            changes[1]
        );
    }

    #[test]
    fn hd_local_shortages_never_move_a_verdict() {
        let t0 = Instant::now();
        let c = check("web", 100, 0, InitialHealth::Up);
        let mut s = Scheduler::new();
        s.set_targets([target("10.0.0.1", 80, &c)], t0);
        let key = target("10.0.0.1", 80, &c).key();
        // Far more than `fall` rounds of EMFILE: still up, every one counted.
        let (sent, changes) = drive(&mut s, t0, t0 + 2_000 * MS, MS, |_| {
            Err(Failure::Local("Too many open files (os error 24)".into()))
        });
        assert!(sent.len() >= 10, "{} probes", sent.len());
        assert!(changes.is_empty(), "{changes:?}");
        assert_eq!(s.counters().local_errors, sent.len() as u64);
        assert_eq!(s.status_of(&key).unwrap().state, crate::Health::Up);
        assert_eq!(s.status_of(&key).unwrap().failed, 0);
        // Real failures still count.
        let (_, changes) = drive(&mut s, t0 + 2_001 * MS, t0 + 4_000 * MS, MS, |_| {
            Err(Failure::Refused)
        });
        assert_eq!(changes.len(), 1, "down after fall refusals");
    }

    #[test]
    fn hd_probes_beyond_the_cap_wait_instead_of_running() {
        let t0 = Instant::now();
        let c = check("web", 1000, 0, InitialHealth::Down);
        let mut s = Scheduler::new();
        s.set_max_in_flight(3);
        let targets: Vec<Target> = (1..=10)
            .map(|i| target(&format!("10.0.0.{i}"), 80, &c))
            .collect();
        s.set_targets(targets, t0);
        let first = s.poll(t0 + 2_000 * MS);
        assert_eq!(first.len(), 3, "three at once");
        assert!(s.poll(t0 + 2_000 * MS).is_empty(), "none while three run");
        assert!(s.counters().deferred >= 7);
        let d = &first[0];
        s.on_result(d.id, d.seq, Ok(Pass::Connected), t0 + 2_001 * MS);
        assert_eq!(
            s.poll(t0 + 2_002 * MS).len(),
            1,
            "one finished, one more runs"
        );
        // A removed probe that was running gives its slot back.
        let running = first[1].key.address;
        let rest: Vec<Target> = (1..=10)
            .map(|i| target(&format!("10.0.0.{i}"), 80, &c))
            .filter(|t| t.address != running)
            .collect();
        s.set_targets(rest, t0 + 2_003 * MS);
        assert_eq!(s.poll(t0 + 2_004 * MS).len(), 1, "the freed slot is used");
    }

    #[test]
    fn shared_targets_are_probed_once() {
        let t0 = Instant::now();
        let c = check("web", 1000, 0, InitialHealth::Down);
        let other = check("api", 1000, 0, InitialHealth::Down);
        let mut s = Scheduler::new();
        let reload = s.set_targets(
            [
                target("10.0.0.1", 80, &c),
                target("10.0.0.1", 80, &c), // a second VIP with the same backend
                target("10.0.0.1", 80, &other),
                target("10.0.0.2", 80, &c),
            ],
            t0,
        );
        assert_eq!(reload.added.len(), 3);
        assert_eq!(s.len(), 3);
        let key = target("10.0.0.1", 80, &c).key();
        assert_eq!(s.status_of(&key).unwrap().users, 2);

        // An equal definition in a different allocation is the same check.
        let copy = Arc::new((*c).clone());
        let again = s.set_targets(
            [
                target("10.0.0.1", 80, &copy),
                target("10.0.0.1", 80, &other),
                target("10.0.0.2", 80, &copy),
            ],
            t0,
        );
        assert_eq!(
            (again.added.len(), again.removed.len(), again.kept),
            (0, 0, 3)
        );

        let (sent, _) = drive(&mut s, t0, t0 + 10_000 * MS, MS, |_| Ok(Pass::Connected));
        let for_key = sent.iter().filter(|d| d.key == key).count();
        assert!(
            (10..=11).contains(&for_key),
            "{for_key} probes in 10 s at 1/s"
        );
        assert_eq!(s.status_of(&key).unwrap().users, 1);
    }

    #[test]
    fn reload_keeps_unchanged_state_and_stops_removed() {
        let t0 = Instant::now();
        let c = check("web", 100, 0, InitialHealth::Down);
        let (a, b, n) = (
            target("10.0.0.1", 80, &c),
            target("10.0.0.2", 80, &c),
            target("10.0.0.3", 80, &c),
        );
        let mut s = Scheduler::new();
        s.set_targets([a.clone(), b.clone()], t0);
        let end = t0 + 1000 * MS;
        let (_, changes) = drive(&mut s, t0, end, MS, |_| Ok(Pass::Connected));
        assert_eq!(changes.len(), 2, "both rise to up: {changes:?}");
        let before = s.status_of(&a.key()).unwrap();
        assert_eq!(before.state, Health::Up);

        // Leave a probe of b in flight across the reload.
        let mut now = end;
        let in_flight = 'found: loop {
            now += MS;
            for d in s.poll(now) {
                if d.key == b.key() {
                    break 'found d;
                }
                s.on_result(d.id, d.seq, Ok(Pass::Connected), now);
            }
        };
        let before = s.status_of(&a.key()).unwrap();
        let reload = s.set_targets([a.clone(), n.clone()], now);
        assert_eq!(reload.added, vec![n.key()]);
        assert_eq!(reload.removed, vec![b.key()]);
        assert_eq!(reload.kept, 1);
        let after = s.status_of(&a.key()).unwrap();
        assert_eq!(after, before, "reload touched a kept probe");
        assert!(s.status_of(&b.key()).is_none());
        let n_status = s.status_of(&n.key()).unwrap();
        assert_eq!(
            (n_status.state, n_status.decided, n_status.started),
            (Health::Down, false, 0)
        );

        // The removed target's late result changes nothing and is counted.
        let stale = s.counters().stale_results;
        assert_eq!(
            s.on_result(in_flight.id, in_flight.seq, Err(Failure::Timeout), now),
            None
        );
        assert_eq!(s.counters().stale_results, stale + 1);

        let (sent, _) = drive(&mut s, now, now + 1000 * MS, MS, |_| Ok(Pass::Connected));
        assert!(
            sent.iter().all(|d| d.key != b.key()),
            "removed target probed"
        );
        assert!(sent.iter().any(|d| d.key == n.key()));
        // a kept its rhythm: still one probe per 100 ms, no reset burst.
        let a_probes = sent.iter().filter(|d| d.key == a.key()).count();
        assert!((10..=11).contains(&a_probes), "{a_probes}");
        assert_eq!(
            s.status_of(&a.key()).unwrap().last_change,
            before.last_change
        );

        // Removing and re-adding starts fresh.
        s.set_targets([n.clone()], now);
        s.set_targets([a.clone(), n.clone()], now);
        let fresh = s.status_of(&a.key()).unwrap();
        assert_eq!((fresh.state, fresh.started), (Health::Down, 0));
    }

    #[test]
    fn rounds_follow_interval_with_bounded_jitter() {
        let t0 = Instant::now();
        let interval = 1000 * MS;
        let jitter = 200 * MS;
        let c = check("web", 1000, 200, InitialHealth::Up);
        let targets: Vec<Target> = (0..200)
            .map(|i| target(&format!("10.1.{}.{}", i / 250, i % 250 + 1), 80, &c))
            .collect();
        let mut s = Scheduler::new();
        s.set_targets(targets.clone(), t0);
        let (sent, _) = drive(&mut s, t0, t0 + 20 * interval, MS, |_| Ok(Pass::Connected));
        let mut first_phase_buckets = [0u32; 10];
        let mut saw_jitter = false;
        for t in &targets {
            let dues: Vec<Instant> = sent
                .iter()
                .filter(|d| d.key == t.key())
                .map(|d| d.due)
                .collect();
            assert!(
                (19..=21).contains(&dues.len()),
                "{} rounds in 20 s",
                dues.len()
            );
            let first = dues[0] - t0;
            assert!(first < interval + jitter, "first probe after {first:?}");
            first_phase_buckets[(first.as_millis() / 120).min(9) as usize] += 1;
            for w in dues.windows(2) {
                let gap = w[1] - w[0];
                assert!(
                    gap > interval - jitter && gap < interval + jitter,
                    "gap {gap:?}"
                );
                saw_jitter |= gap != interval;
            }
        }
        assert!(saw_jitter, "jitter never applied");
        // The phase spreads first probes over the interval instead of one burst.
        assert!(
            first_phase_buckets.iter().all(|&n| n > 0),
            "{first_phase_buckets:?}"
        );
        assert!(
            first_phase_buckets.iter().all(|&n| n < 60),
            "{first_phase_buckets:?}"
        );

        // Without jitter, rounds are exactly one interval apart: no drift.
        let c0 = check("exact", 250, 0, InitialHealth::Up);
        let mut s = Scheduler::new();
        s.set_targets([target("10.0.0.9", 80, &c0)], t0);
        let (sent, _) = drive(&mut s, t0, t0 + 5000 * MS, MS, |_| Ok(Pass::Connected));
        for w in sent.windows(2) {
            assert_eq!(w[1].due - w[0].due, 250 * MS);
        }
        // Deterministic: a second scheduler computes the same rounds.
        let mut s2 = Scheduler::new();
        s2.set_targets([target("10.0.0.9", 80, &c0)], t0);
        let (sent2, _) = drive(&mut s2, t0, t0 + 5000 * MS, MS, |_| Ok(Pass::Connected));
        assert_eq!(sent, sent2);
    }

    #[test]
    fn slow_probe_skips_rounds_instead_of_queueing() {
        let t0 = Instant::now();
        let c = check("slow", 100, 0, InitialHealth::Up);
        let mut s = Scheduler::new();
        s.set_targets([target("10.0.0.1", 80, &c)], t0);
        let d = s
            .poll(t0 + 100 * MS)
            .pop()
            .expect("first round due within the interval");
        assert_eq!(d.deadline, t0 + 400 * MS);
        // Nothing else is handed out while it runs, however late it gets.
        assert!(s.poll(t0 + 350 * MS).is_empty());
        let done = d.due + 350 * MS;
        assert_eq!(s.on_result(d.id, d.seq, Err(Failure::Timeout), done), None);
        assert_eq!(s.counters().skipped_rounds, 3);
        let next = s.status_of(&d.key).unwrap().next_due.unwrap();
        assert!(
            next >= done && next < done + 100 * MS,
            "next round {:?} after",
            next - done
        );
        // A duplicate result for the same sequence is stale.
        assert_eq!(s.on_result(d.id, d.seq, Ok(Pass::Connected), done), None);
        assert_eq!(s.counters().stale_results, 1);
    }

    #[test]
    fn transitions_carry_reason_time_and_probe_number() {
        let t0 = Instant::now();
        let c = check("web", 100, 0, InitialHealth::Down);
        let t = target("10.0.0.1", 80, &c);
        let mut s = Scheduler::new();
        s.set_targets([t.clone()], t0);
        // Probe n (1-based): 1-4 pass, 5-7 fail with 503, then pass.
        let mut n = 0;
        let (_, changes) = drive(&mut s, t0, t0 + 1200 * MS, MS, |_| {
            n += 1;
            if (5..=7).contains(&n) {
                Err(Failure::Status(503))
            } else {
                Ok(Pass::Status(200))
            }
        });
        let summary: Vec<(Health, u64, String)> = changes
            .iter()
            .map(|c| (c.to, c.probe, c.reason.to_string()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (Health::Up, 2, "status 200".to_string()),
                (Health::Down, 7, "status 503".to_string()),
                (Health::Up, 9, "status 200".to_string()),
            ]
        );
        let st = s.status_of(&t.key()).unwrap();
        assert_eq!(st.last_failure, Some(Failure::Status(503)));
        assert_eq!(st.last_change, Some(changes[2].at));
        assert_eq!((st.failed, st.passed + st.failed), (3, st.started));
        assert_eq!(
            changes[1].to_string(),
            "web tcp 10.0.0.1:80: up -> down (status 503, probe 7)"
        );
    }

    #[test]
    fn absurd_durations_do_not_panic() {
        let t0 = Instant::now();
        let mut c = (*check("huge", 1000, 0, InitialHealth::Down)).clone();
        c.interval = Duration::MAX;
        c.timeout = Duration::MAX;
        c.jitter = Duration::MAX;
        let huge = Arc::new(c);
        let mut z = (*check("zero", 1000, 0, InitialHealth::Down)).clone();
        z.interval = Duration::ZERO;
        z.timeout = Duration::ZERO;
        let zero = Arc::new(z);
        let mut s = Scheduler::new();
        s.set_targets(
            [target("10.0.0.1", 80, &huge), target("10.0.0.1", 80, &zero)],
            t0,
        );
        // A zero interval is clamped to 1 ms: 100 ms gives about 100 probes, not a spin.
        let (sent, _) = drive(&mut s, t0, t0 + 100 * MS, MS / 4, |_| Err(Failure::Timeout));
        assert!((99..=101).contains(&sent.len()), "{}", sent.len());
        assert!(sent.iter().all(|d| d.key.check.name == "zero"));
        assert!(
            s.status_of(&target("10.0.0.1", 80, &huge).key())
                .unwrap()
                .next_due
                .unwrap()
                > t0 + 100 * MS
        );
    }

    proptest::proptest! {
        /// The bucketed due queue hands out exactly what a sorted list would: every entry
        /// due by `now`, in (due, id) order, whatever the push order, bucket boundaries
        /// and times before the first push.
        #[test]
        fn due_queue_matches_a_sorted_list(
            pushes in proptest::collection::vec((0u64..5_000, 0u64..50), 1..200),
            polls in proptest::collection::vec(0u64..6_000, 1..20),
        ) {
            let t0 = Instant::now();
            let at = |us: u64| t0 + Duration::from_micros(us);
            let mut q = DueQueue::default();
            let mut reference: Vec<(Instant, ProbeId)> = Vec::new();
            // The first push sets bucket 0 in the middle, so later pushes land before it.
            for &(us, id) in &pushes {
                q.push(at(us + 1_000), id);
                reference.push((at(us + 1_000), id));
            }
            q.push(at(0), 99);
            reference.push((at(0), 99));
            reference.sort_unstable();
            let mut polls = polls;
            polls.sort_unstable();
            for now_us in polls {
                let now = at(now_us);
                let mut got = Vec::new();
                q.pop_due(now, &mut got);
                let split = reference.partition_point(|&(due, _)| due <= now);
                let want: Vec<_> = reference.drain(..split).collect();
                proptest::prop_assert_eq!(got, want);
                proptest::prop_assert_eq!(q.first(), reference.first().map(|&(due, _)| due));
            }
        }
    }
}
