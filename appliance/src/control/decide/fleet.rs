//! A fleet member's decisions (see `control/fleet`): the etcd session's views, outages and
//! activations; the member state machine's actions, carried out in order ([`drive`]), one
//! of which may wait for the executor (a revision's config read, a commit's staged half);
//! the fleet's health (the quorum over every live member's verdicts) and overrides; the
//! fleet document.

use std::sync::Arc;

use ::fleet::View;
use ::fleet::client::{Request, Update};
use ::fleet::history::{self, Judged};
use ::fleet::member::Action;
use tracing::{info, warn};

use super::bgp::sync_bgp;
use super::commit::{self, Next};
use super::out::Out;
use crate::config::{Config, LoadError};
use crate::control::batch::Taken;
use crate::control::change::UpdateError;
use crate::control::effect::{Counter, Effect};
use crate::control::events::Kind;
use crate::control::fleet::Membership;
use crate::control::fleet::fingerprint;
use crate::control::fleet::lastgood::LastGood;
use crate::control::input::Now;
use crate::control::pending::{Commit, Then};
use crate::control::state::State;

/// A view, an outage or an activation's outcome from the etcd session.
pub(super) fn update(st: &mut State, now: &Now, out: &mut Out, u: Update) {
    let Some(f) = st.fleet.as_mut() else {
        return;
    };
    match u {
        Update::View { view, fresh } => {
            if !followed(f, now, out, &view) {
                drive(st, now, out);
                status(st, now, out);
                return;
            }
            if !f.connected {
                let m = format!(
                    "fleet {}: etcd reached at revision {}",
                    f.name, view.revision
                );
                info!("{m}");
                out.event(Kind::Commit, m);
            }
            f.connected = true;
            f.last_contact = now.at;
            f.last_error = None;
            f.view = *view;
            if fresh {
                reconnected(st, now, out);
            }
            drive(st, now, out);
            follow(st, now, out);
        }
        Update::Down { error, retry_in } => {
            if f.connected || f.last_error.is_none() {
                let m = format!(
                    "fleet {}: out of the fleet ({error}); forwarding on revision {}, stale; \
                     retrying every {retry_in:?} or so",
                    f.name,
                    f.member.running()
                );
                warn!("{m}");
                out.event(Kind::Commit, m);
            }
            f.connected = false;
            f.last_error = Some(error);
        }
        Update::Activation { revision, won } => {
            if won {
                let m = format!("fleet {}: activated revision {revision}", f.name);
                info!("{m}");
                out.event(Kind::Commit, m);
            }
        }
    }
    status(st, now, out);
}

/// Whether the member acts on `view`: the etcd history it follows, or a new epoch (then
/// its revisions start over). A history that went back (a restored snapshot, another
/// cluster) is refused: the view is not taken, the member reports its config revision
/// refused with the reason (which blocks that revision's activation everywhere) and keeps
/// forwarding on what it runs, stale, until an operator runs `sluice fleet rebase`.
fn followed(f: &mut Membership, now: &Now, out: &mut Out, view: &View) -> bool {
    let running = f.member.running();
    match history::judge(f.history.as_ref(), running, view) {
        Judged::Refuse(why) => {
            if f.off_history.as_deref() != Some(why.as_str()) {
                let m = format!("fleet {}: {why}", f.name);
                warn!("{m}");
                out.event(Kind::Commit, m);
            }
            let revision = view.config.as_ref().map_or(0, |c| c.revision);
            let actions = f.member.refuse_history(revision, &why, now.wall_ms);
            f.actions.extend(actions);
            f.connected = false;
            f.last_error = Some(why.clone());
            f.off_history = Some(why);
            return false;
        }
        Judged::Adopt { history, rebased } => {
            if rebased {
                let m = format!(
                    "fleet {}: re-based (epoch {}): following etcd as it is now; revisions \
                     start over, revision {running} forwards until the fleet activates one",
                    f.name, history.epoch
                );
                info!("{m}");
                out.event(Kind::Commit, m);
                f.member.rebase();
            }
            // Kept with the running revision on disk, so a restart judges by it too.
            if let Some((revision, text)) = f.running_doc.clone()
                && !rebased
                && f.history.as_ref() != Some(&history)
            {
                let last_good = LastGood {
                    fleet: f.name.clone(),
                    revision,
                    text,
                    history: Some(history.clone()),
                };
                let path = f.state_file.clone();
                out.push(Effect::SaveLastGood { path, last_good });
            }
            f.history = Some(history);
        }
        Judged::Follow => {}
    }
    if f.off_history.take().is_some() {
        // The refusal was the history's, not the revision's: prepare afresh.
        f.member.reconsider();
    }
    true
}

/// A new session's first view: the member starts over, and one that came back behind the
/// fleet holds its announcements until it has caught up.
fn reconnected(st: &mut State, now: &Now, out: &mut Out) {
    let Some(f) = st.fleet.as_mut() else {
        return;
    };
    let actions = f.member.reconnected();
    f.actions.extend(actions);
    if f.from_disk && f.member.caught_up(&f.view) {
        f.from_disk = false;
    }
    if !f.member.caught_up(&f.view) && f.view.activated() > 0 {
        let m = format!(
            "fleet: running revision {} behind the fleet's {}: announcements held until \
             caught up",
            f.member.running(),
            f.view.activated()
        );
        out.event(Kind::Bgp, m);
        st.fleet_hold = true;
        sync_bgp(st, now, out);
    }
}

/// Health and overrides from the view, then the member's decisions on it. Fleet verdicts
/// that moved with the view (another member's probes, a member gone) join the health
/// batch, so a storm of reports makes one version per `health_batch`.
fn follow(st: &mut State, now: &Now, out: &mut Out) {
    let name = st.config.appliance.name.clone();
    if let Some(f) = st.fleet.as_mut()
        && f.fleet_health(&name) != st.health
    {
        st.batch.touch(now.at);
    }
    apply_overrides(st, now, out);
    let Some(f) = st.fleet.as_mut() else {
        return;
    };
    let actions = f.member.on_view(&f.view, now.wall_ms);
    f.actions.extend(actions);
    drive(st, now, out);
}

/// Once a second: the activation timeout moves, the stale time grows.
pub(super) fn tick(st: &mut State, now: &Now, out: &mut Out) {
    let Some(f) = st.fleet.as_mut() else {
        return;
    };
    if f.connected {
        let mut actions = f.member.on_view(&f.view, now.wall_ms);
        // The tables' digest goes to etcd within a second of a commit, so `sluice fleet
        // status` compares the members' tables without asking each one.
        actions.extend(f.member.tables_are(&fingerprint(&st.tables)));
        f.actions.extend(actions);
        drive(st, now, out);
    }
    status(st, now, out);
}

/// Carries out the member's actions in order, until one waits for the executor (or a
/// commit is under way).
pub(super) fn drive(st: &mut State, now: &Now, out: &mut Out) {
    loop {
        let Some(f) = st.fleet.as_mut() else {
            return;
        };
        if f.waiting || st.pending.is_some() {
            return;
        }
        let Some(a) = f.actions.pop_front() else {
            return;
        };
        match a {
            Action::Prepare { revision, text } => {
                f.waiting = true;
                out.push(Effect::LoadRevision { revision, text });
            }
            Action::Report(r) => out.push(Effect::FleetSend(Request::Report(r))),
            Action::WriteActivation { activation, expect } => {
                out.push(Effect::FleetSend(Request::Activate { activation, expect }))
            }
            Action::Activate { revision } => activate(st, now, out, revision),
            Action::Refused { revision, by } => {
                let who: Vec<String> = by.iter().map(|(m, e)| format!("{m}: {e}")).collect();
                let m = format!(
                    "fleet: revision {revision} refused, not activated ({}); revision {} \
                     keeps running",
                    who.join("; "),
                    f.member.running()
                );
                warn!("{m}");
                f.refused = Some((revision, by));
                out.event(Kind::Reload, m);
            }
        }
    }
}

/// Revision `revision`, merged with the local file, was read: it is validated and its
/// tables built without running them, kept for the activation; the member hears how it
/// went.
pub(super) fn loaded(
    st: &mut State,
    now: &Now,
    out: &mut Out,
    revision: u64,
    text: String,
    file: Result<Config, LoadError>,
) {
    let r = prepare(st, now, revision, text, file);
    if let Err(e) = &r {
        let m = format!("fleet: revision {revision} refused here: {e}");
        warn!("{m}");
        out.event(Kind::Reload, m);
    }
    if let Some(f) = st.fleet.as_mut() {
        f.waiting = false;
        let actions = f.member.prepared_result(revision, r);
        f.actions.extend(actions);
    }
}

fn prepare(
    st: &mut State,
    now: &Now,
    revision: u64,
    text: String,
    file: Result<Config, LoadError>,
) -> Result<(), String> {
    let file = file.map_err(|e| match e.errors() {
        Some(list) => list
            .0
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
        None => e.to_string(),
    })?;
    let file = Arc::new(file);
    let built = commit::build_full(st, now, revision_build(&file)).map_err(|e| e.to_string())?;
    if let Some(f) = st.fleet.as_mut() {
        f.built = Some((built.tables.version, Box::new(built)));
        f.pending = Some((revision, file));
        f.prepared_text = Some((revision, text));
    }
    Ok(())
}

/// A revision's version: its file, on the fleet's health, settling again.
fn revision_build(file: &Arc<Config>) -> Next<'_> {
    Next {
        file: Some(file),
        resettle: true,
        ..Next::RUNNING
    }
}

/// Switches to the prepared `revision`: the tables built at its prepare, unless a version
/// number was taken since (health, overrides, routes made them stale): then they are built
/// again, as they would have been.
fn activate(st: &mut State, now: &Now, out: &mut Out, revision: u64) {
    let Some(f) = st.fleet.as_mut() else {
        return;
    };
    let Some((rev, file)) = f.pending.clone() else {
        return;
    };
    if rev != revision {
        return;
    }
    let last = st.versions.last();
    let reuse = f.built.take().filter(|(v, _)| *v == last).map(|(_, p)| p);
    let prepared = match reuse {
        Some(p) => Ok(p),
        None => commit::build_full(st, now, revision_build(&file)).map(Box::new),
    };
    let why = format!("fleet revision {revision}");
    match prepared {
        Ok(prepared) => {
            let version = prepared.tables.version;
            if let Some(f) = st.fleet.as_mut() {
                f.waiting = true;
            }
            let then = Then::FleetActivate { revision, version };
            let c = Commit {
                prepared,
                why,
                then,
                health_since: None,
            };
            commit::commit(st, now, out, c);
        }
        Err(e) => not_activated(out, revision, &e.to_string()),
    }
}

fn not_activated(out: &mut Out, revision: u64, e: &str) {
    let m = format!("fleet: revision {revision} could not be switched to here: {e}");
    warn!("{m}");
    out.event(Kind::Reload, m);
}

/// The activation's commit finished: the member hears of it, the revision is kept on disk,
/// and a member that held its announcements announces again once caught up.
pub(super) fn activated(
    st: &mut State,
    now: &Now,
    out: &mut Out,
    (revision, version): (u64, u64),
    result: Result<u64, UpdateError>,
) {
    let Some(f) = st.fleet.as_mut() else {
        return;
    };
    f.waiting = false;
    if let Err(e) = result {
        return not_activated(out, revision, &e.to_string());
    }
    let actions = f.member.activated(revision, &f.view, now.wall_ms);
    f.actions.extend(actions);
    let m = format!("fleet: revision {revision} running (table version {version})");
    info!("{m}");
    out.event(Kind::Commit, m);
    if let Some((revision, text)) = f.prepared_text.take().filter(|(r, _)| *r == revision) {
        f.running_doc = Some((revision, text.clone()));
        f.from_disk = false;
        let last_good = LastGood {
            fleet: f.name.clone(),
            revision,
            text,
            history: f.history.clone(),
        };
        let path = f.state_file.clone();
        out.push(Effect::SaveLastGood { path, last_good });
    }
    if st.fleet_hold && f.member.caught_up(&f.view) {
        st.fleet_hold = false;
        let m = format!("fleet: caught up with revision {revision}; announcing again");
        out.event(Kind::Bgp, m);
        sync_bgp(st, now, out);
    }
}

/// The running revision could not be kept on disk.
pub(super) fn not_saved(st: &mut State, out: &mut Out, e: String) {
    if let Some(f) = st.fleet.as_mut() {
        f.last_good_errors += 1;
    }
    warn!("{e}");
    out.event(Kind::Reload, e);
}

/// Applies the fleet's overrides when they changed since last applied.
fn apply_overrides(st: &mut State, now: &Now, out: &mut Out) {
    let Some(f) = st.fleet.as_mut() else {
        return;
    };
    if f.view.overrides == f.applied_overrides {
        return;
    }
    f.applied_overrides = f.view.overrides.clone();
    let wanted = f.overrides();
    let why = "fleet: operator overrides".to_string();
    commit::update(st, now, out, Some(&wanted), why, Then::FleetOverrides);
}

/// A health batch in a fleet: the member's own verdicts take the batch and are published
/// once for all of it; the tables follow the fleet's quorum over every live member, one
/// version for the batch.
pub(super) fn health_batch(st: &mut State, now: &Now, out: &mut Out, batch: Taken) {
    let name = st.config.appliance.name.clone();
    let Some(f) = st.fleet.as_mut() else {
        return;
    };
    if batch.apply(&mut f.local) {
        out.push(Effect::FleetSend(Request::Health(f.local_report())));
    }
    let health = f.fleet_health(&name);
    // This member's agents answered anew: their weights and states need a version too.
    let agents = std::mem::take(&mut st.policy.agents_changed);
    if health == st.health && !agents {
        return health_done(st, now, out, None);
    }
    st.health = health;
    let why = batch.why();
    match commit::build_full(st, now, Next::RUNNING) {
        Ok(p) => {
            let c = Commit {
                prepared: Box::new(p),
                why,
                then: Then::FleetHealth,
                health_since: Some(batch.first),
            };
            commit::commit(st, now, out, c);
        }
        Err(e) => out.done(Then::FleetHealth, why, Err(e.into())),
    }
}

/// A fleet health batch is through (`result`: its version's outcome, if it made one).
pub(super) fn health_done(
    st: &State,
    now: &Now,
    out: &mut Out,
    result: Option<Result<u64, UpdateError>>,
) {
    if let Some(Ok(_)) = result {
        out.count(Counter::HealthCommit);
    }
    sync_bgp(st, now, out);
    status(st, now, out);
    out.view();
}

/// What the member started on: the last good revision (stale until etcd answers), or why
/// the kept one could not be used.
pub(super) fn started(st: &mut State, now: &Now, out: &mut Out, problem: Option<String>) {
    let Some(f) = st.fleet.as_mut() else {
        return;
    };
    if let Some(p) = problem {
        f.last_good_errors += 1;
        warn!("{p}");
        out.event(Kind::Reload, p);
    }
    if f.from_disk {
        let m = format!(
            "fleet {}: started on the last good revision {} from {}; stale until etcd answers",
            f.name,
            f.member.running(),
            f.state_file.display()
        );
        info!("{m}");
        out.event(Kind::Commit, m);
    }
    status(st, now, out);
}

/// The fleet document readers see.
pub(super) fn status(st: &State, now: &Now, out: &mut Out) {
    let Some(f) = st.fleet.as_ref() else {
        return;
    };
    let doc = crate::control::fleet::status::status(
        f.parts(now.at),
        &st.config.appliance.name,
        !st.fleet_hold,
        &fingerprint(&st.tables),
    );
    out.push(Effect::FleetStatus(Box::new(doc)));
}
