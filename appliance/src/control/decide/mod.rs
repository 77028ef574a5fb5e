//! The control loop's decisions, as one function: [`handle`] takes the state, one input and
//! the moment it is handled, changes the state and returns what the world must do, as
//! effects. It reads no clock, file or socket and starts no task: the executor (`io.rs`)
//! gathers inputs and readings and carries the effects out, and tests feed inputs and
//! compare effects (`tests.rs`).
//!
//! One module per concern: `operator.rs` (reloads, backend changes, announce/withdraw),
//! `health.rs` (transitions, health batches, slow-start steps), `watch.rs` (start, tick,
//! routes and neighbours, stop), `fleet.rs` (a fleet member), `datapath.rs` (the datapath watch's reports), `commit.rs` (version numbers,
//! all-or-nothing commits), `bgp.rs` (what to announce). A change whose commit waits for
//! its staged half goes on when `Input::Staged` comes back: every change names what it does
//! next ([`Then`]) and [`handle`] runs it once the commit is through, here.

mod bgp;
mod commit;
mod datapath;
mod fleet;
mod health;
mod operator;
mod out;
#[cfg(test)]
pub(crate) mod tests;
mod watch;

pub use commit::first;

use tracing::error;

use super::effect::Effect;
use super::input::{Input, Now};
use super::pending::{Done, Then};
use super::state::State;
use out::Out;

/// Decides on `input` at `now`: the state changes, the effects come back in order.
pub fn handle(st: &mut State, input: Input, now: &Now) -> Vec<Effect> {
    let mut out = Out::default();
    let o = &mut out;
    match input {
        Input::Started {
            speaker,
            datapath,
            fleet_problem,
        } => watch::started(st, now, o, speaker, datapath, fleet_problem),
        Input::Hangup => operator::hangup(st, o),
        Input::Api { request, reply } => operator::api(st, now, o, request, reply),
        Input::Loaded { reload, file } => operator::loaded(st, now, o, reload, file),
        Input::OverrideWritten { change, result } => {
            operator::override_written(st, now, o, change, result)
        }
        Input::OverridesSaved { kept, result } => operator::overrides_saved(st, o, kept, result),
        Input::Transitions(all) => health::transitions(st, now, o, all),
        Input::HealthDue => health::due(st, now, o),
        Input::RampDue => health::ramp(st, now, o),
        Input::Net(events) => watch::net(st, o, events),
        Input::Tick(t) => {
            watch::tick(st, now, o, *t);
            fleet::tick(st, now, o);
        }
        Input::Fleet(u) => fleet::update(st, now, o, u),
        Input::RevisionLoaded {
            revision,
            text,
            file,
        } => fleet::loaded(st, now, o, revision, text, file),
        Input::LastGoodNotSaved(e) => fleet::not_saved(st, o, e),
        Input::Staged(s) => commit::staged(st, now, o, s),
        Input::Datapath { report, stats } => datapath::seen(st, now, o, report, stats),
        Input::Terminate(signal) => watch::terminate(st, o, signal),
        Input::SyncCaughtUp => bgp::sync_caught_up(st, now, o),
    }
    go_on(st, now, &mut out);
    out.effects
}

/// Every change whose commit finished goes on, and the fleet's actions that waited for it.
fn go_on(st: &mut State, now: &Now, out: &mut Out) {
    loop {
        while let Some(d) = out.done.pop_front() {
            then(st, now, out, d);
        }
        fleet::drive(st, now, out);
        if out.done.is_empty() {
            return;
        }
    }
}

/// What `d`'s change does now that its commit finished.
fn then(st: &mut State, now: &Now, out: &mut Out, d: Done) {
    let Done { then, why, result } = d;
    if let Err(e) = &result
        && !matches!(then, Then::Reload { .. } | Then::FleetActivate { .. })
    {
        error!("{why}: running version kept: {e}");
    }
    match then {
        Then::Reload {
            reload,
            deferred,
            resized,
        } => operator::reloaded(out, reload, deferred, resized, result),
        Then::Backend {
            vip,
            op,
            backend,
            reply,
        } => operator::backend_done(out, why, vip, op, backend, reply, result),
        Then::Ramp => health::ramp_done(st, now, result),
        Then::Health => health::done(st, now, out, result),
        Then::FleetHealth => fleet::health_done(st, now, out, Some(result)),
        Then::FleetOverrides => {}
        Then::FleetActivate { revision, version } => {
            fleet::activated(st, now, out, (revision, version), result)
        }
    }
}
