//! Health and slow start. The prober's transitions are recorded as they arrive (reasons,
//! an event, a counter) and join the health batch, which commits as one version when its
//! pacing says (`batch.rs`; the loop wakes at `State::due`). A backend of several checks
//! takes their combined verdict, and an agent's answer is kept as the backend's wish
//! (`policy.rs`). A batch's version rebuilds only the touched VIPs when it can
//! (`prepare::prepare_health`); one that carries an agent's new answer is a full version,
//! which applies the answers over the operator's settings. A slow-start level (or the end
//! of an outbound drain) due is an ordinary update: the ramps are in the running state.

use std::time::{Duration, Instant};

use tracing::info;

use super::bgp::sync_bgp;
use super::commit::{self, HealthBuilt, Next};
use super::fleet;
use super::out::Out;
use crate::control::batch::Pacing;
use crate::control::change::UpdateError;
use crate::control::effect::Counter;
use crate::control::events::Kind;
use crate::control::input::Now;
use crate::control::pending::{Commit, Then};
use crate::control::policy;
use crate::control::state::State;

/// Transitions the prober decided: each is logged, counted and evented now, and its
/// verdicts join the health batch.
pub(super) fn transitions(st: &mut State, now: &Now, out: &mut Out, all: Vec<health::Transition>) {
    for tr in all {
        record(st, out, tr, now.at);
    }
}

fn record(st: &mut State, out: &mut Out, tr: health::Transition, at: Instant) {
    info!("health: {tr}");
    out.count(Counter::HealthTransition);
    let pairs = st.targets.get(&tr.key).map(Vec::as_slice).unwrap_or(&[]);
    for p in pairs {
        st.reasons.insert(p.clone(), tr.reason.to_string());
    }
    // Several checks of a backend combine into its verdict; an agent's answer waits for
    // the batch's version.
    policy::record(&mut st.policy, &tr, pairs, &mut st.batch, at);
    out.event(
        Kind::Health,
        format!("{}: {} -> {} ({})", tr.key, tr.from, tr.to, tr.reason),
    );
}

/// The health batch is due: every pair takes its newest verdict, in one version. A batch
/// that changes no verdict (flaps that went back) makes none.
pub(super) fn due(st: &mut State, now: &Now, out: &mut Out) {
    if !st.batch.is_due(Pacing::of(&st.config), now.at) {
        return;
    }
    let Some(batch) = st.batch.take(now.at) else {
        return;
    };
    if st.fleet.is_some() {
        return fleet::health_batch(st, now, out, batch);
    }
    // An agent's new answer changes weights or states: a full version applies it.
    let agents = std::mem::take(&mut st.policy.agents_changed);
    if !batch.apply(&mut st.health) && !agents {
        return out.view();
    }
    let why = batch.why();
    let since = Some(batch.first);
    let built = match agents {
        true => commit::build_full(st, now, Next::RUNNING).map(|p| HealthBuilt::Full(Box::new(p))),
        false => commit::build_health(st, now, &batch.verdicts),
    };
    match built {
        Err(e) => out.done(Then::Health, why, Err(e.into())),
        Ok(HealthBuilt::Full(prepared)) => {
            let c = Commit {
                prepared,
                why,
                then: Then::Health,
                health_since: since,
            };
            commit::commit(st, now, out, c);
        }
        Ok(HealthBuilt::Tables(next)) => {
            for (id, r) in &next.ready {
                st.ramps.note(id, *r);
            }
            let version = commit::publish(st, out, next.tables, &why, since);
            sync_bgp(st, now, out);
            out.view();
            out.done(Then::Health, why, Ok(version));
        }
    }
}

/// A health batch's version runs, or not: the reasons changed even if the tables could
/// not follow.
pub(super) fn done(st: &State, now: &Now, out: &mut Out, result: Result<u64, UpdateError>) {
    match result {
        Ok(_) => out.count(Counter::HealthCommit),
        Err(_) => {
            sync_bgp(st, now, out);
            out.view();
        }
    }
}

/// A slow-start level is due: the next version carries every ramp's level at its time.
pub(super) fn ramp(st: &mut State, now: &Now, out: &mut Out) {
    st.last_ramp_step = Some(now.at);
    let why = match st.ramps.len() {
        0 => "outbound: a drain ended".to_string(),
        n => format!("slow start: {n} backend(s) ramping"),
    };
    commit::update(st, now, out, None, why, Then::Ramp);
}

/// A slow-start step that did not run is tried again a second later, without spinning.
pub(super) fn ramp_done(st: &mut State, now: &Now, result: Result<u64, UpdateError>) {
    if result.is_err() {
        st.ramp_due = Some(now.at + Duration::from_secs(1));
    }
}
