//! The operator's changes: a reload (SIGHUP or the API), a backend's state or weight, a
//! VIP announced or withdrawn; each answers with [`Applied`] or a [`ChangeError`]. Also the
//! overrides file's outcomes, and what its reading at start found.

use std::net::SocketAddr;
use std::sync::Arc;

use tracing::{error, info, warn};

use super::bgp::sync_bgp;
use super::commit::{self, Next, keep_overrides};
use super::out::Out;
use crate::config::{Config, LoadError};
use crate::control::change::{
    self, Applied, BackendOp, ChangeError, Deferred, Request, Resized, UpdateError, op_name,
};
use crate::control::effect::{Counter, Effect};
use crate::control::events::Kind;
use crate::control::fleet::doc_of;
use crate::control::input::{BackendChange, Now, Reload, ReplyTo};
use crate::control::kept::{Kept, KeptError};
use crate::control::pending::{Commit, Then};
use crate::control::state::State;

/// SIGHUP: reloads the config file.
pub(super) fn hangup(st: &State, out: &mut Out) {
    info!(path = %st.path.display(), "SIGHUP: reloading");
    reload(st, out, Reload::Signal);
}

/// An API write.
pub(super) fn api(st: &mut State, now: &Now, out: &mut Out, request: Request, reply: ReplyTo) {
    match request {
        Request::Backend { vip, backend, op } => {
            self::backend(st, now, out, vip, &backend, op, reply)
        }
        Request::Announce { vip, announce } => {
            let result = self::announce(st, now, out, &vip, announce);
            out.push(Effect::Reply {
                to: reply,
                result,
                after_walk: false,
            });
        }
        Request::Reload => {
            info!("API: reloading");
            reload(st, out, Reload::Api(reply));
        }
        Request::Reclaim => {
            info!("API: taking the datapath back");
            out.event(Kind::Operator, "take the datapath back (reclaim)");
            out.push(Effect::Reclaim(reply));
        }
    }
}

/// A reload starts with reading the file (a fleet member's merged with the revision it
/// runs).
fn reload(st: &State, out: &mut Out, reload: Reload) {
    let fleet = st.fleet.as_ref().and_then(|f| f.running_doc.clone());
    out.push(Effect::LoadConfig { reload, fleet });
}

/// The file was read: when it is valid and its tables build, it becomes the running one;
/// otherwise nothing changes and every error comes back.
pub(super) fn loaded(
    st: &mut State,
    now: &Now,
    out: &mut Out,
    reload: Reload,
    file: Result<Config, LoadError>,
) {
    let file = match file {
        Ok(f) => Arc::new(f),
        Err(e) => return answer(out, reload, Err(ChangeError::ConfigRejected(e))),
    };
    // A fleet member whose file refused the fleet's revision prepares it again with this one.
    if let Some(f) = st.fleet.as_mut() {
        f.member.reconsider();
    }
    // A fleet member reloads on the fleet's health, anyone else on the prober's.
    let next = Next {
        file: Some(&file),
        probes: st.fleet.is_none(),
        resettle: true,
        ..Next::RUNNING
    };
    let p = match commit::build_full(st, now, next) {
        Ok(p) => p,
        Err(e) => return answer(out, reload, Err(ChangeError::TablesRejected(e))),
    };
    let then = Then::Reload {
        reload,
        deferred: change::deferred(&st.config, &p.config),
        resized: change::resized(&st.config, &p.config),
    };
    let c = Commit {
        prepared: Box::new(p),
        why: reload.how().to_string(),
        then,
        health_since: None,
    };
    commit::commit(st, now, out, c);
}

/// A reload's commit finished.
pub(super) fn reloaded(
    out: &mut Out,
    reload: Reload,
    deferred: Vec<Deferred>,
    resized: Vec<Resized>,
    result: Result<u64, UpdateError>,
) {
    let how = reload.how();
    let r = match result {
        Ok(version) => {
            for d in &deferred {
                match d {
                    Deferred::FlowCache => warn!(
                        "reload: [appliance] flow_cache changed; it takes effect at the next start"
                    ),
                    Deferred::Api => warn!(
                        "reload: [api] changed; the API listeners keep their settings until restart"
                    ),
                }
            }
            let note = change::deferred_note(&deferred);
            out.event(
                Kind::Reload,
                format!("{how}: version {version} running{note}"),
            );
            for r in resized {
                out.event(Kind::Reload, format!("{how}: {r}"));
            }
            Ok(Applied::Reloaded { version, deferred })
        }
        Err(UpdateError::Prepare(e)) => Err(ChangeError::TablesRejected(e)),
        Err(UpdateError::Commit(c)) => Err(ChangeError::NotCommitted(c)),
    };
    answer(out, reload, r);
}

/// A reload's outcome: a rejection is counted and evented; SIGHUP's goes to the log, the
/// API's to its caller once the flow-cache walk it asked for is done.
fn answer(out: &mut Out, reload: Reload, r: Result<Applied, ChangeError>) {
    if let Err(e) = &r {
        out.count(Counter::ReloadRejected);
        let m = format!(
            "{}: rejected, running version kept: {}",
            reload.how(),
            e.summary()
        );
        out.event(Kind::Reload, m);
        error!("reload rejected, running version kept: {e}");
    }
    match reload {
        Reload::Signal => {
            if let Err(e) = &r {
                for x in e.errors() {
                    error!("  {x}");
                }
            }
        }
        Reload::Api(to) => out.push(Effect::Reply {
            to,
            result: r,
            after_walk: true,
        }),
    }
}

/// An operator's change to a backend; in a fleet it is written to etcd first, for every
/// member ([`override_written`]).
fn backend(
    st: &mut State,
    now: &Now,
    out: &mut Out,
    vip: String,
    backend: &str,
    op: BackendOp,
    reply: ReplyTo,
) {
    let id = match change::find_backend(&st.config, &vip, backend) {
        Ok(id) => id,
        Err(e) => return backend_reply(out, reply, Err(e)),
    };
    let mut overrides = st.overrides.clone();
    let o = overrides.entry(id.clone()).or_default();
    *o = o.with(op);
    let doc = doc_of(o);
    let change = BackendChange {
        vip,
        op,
        id,
        overrides,
        reply,
    };
    if st.fleet.is_some() {
        return out.push(Effect::WriteOverride { change, doc });
    }
    apply_backend(st, now, out, change);
}

/// A fleet member's change to a backend is in etcd (or could not be written).
pub(super) fn override_written(
    st: &mut State,
    now: &Now,
    out: &mut Out,
    change: BackendChange,
    result: Result<(), ChangeError>,
) {
    match result {
        Ok(()) => apply_backend(st, now, out, change),
        Err(e) => backend_reply(out, change.reply, Err(e)),
    }
}

fn apply_backend(st: &mut State, now: &Now, out: &mut Out, change: BackendChange) {
    let BackendChange {
        vip,
        op,
        id,
        overrides,
        reply,
    } = change;
    let backend = id.socket_addr();
    let why = format!("operator: {} {backend} of VIP {vip}", op_name(op));
    let then = Then::Backend {
        vip,
        op,
        backend,
        reply,
    };
    commit::update(st, now, out, Some(&overrides), why, then);
}

/// A backend change's commit finished.
pub(super) fn backend_done(
    out: &mut Out,
    why: String,
    vip: String,
    op: BackendOp,
    backend: SocketAddr,
    reply: ReplyTo,
    result: Result<u64, UpdateError>,
) {
    let r = match result {
        Ok(version) => {
            out.event(Kind::Operator, why);
            Ok(Applied::Backend {
                op,
                backend,
                vip,
                version,
            })
        }
        Err(source) => Err(ChangeError::NotApplied { op, source }),
    };
    backend_reply(out, reply, r);
}

/// A backend change answers once the flow-cache walk it asked for is done (so an operator
/// who disabled a backend hears back when no cached flow goes to it).
fn backend_reply(out: &mut Out, to: ReplyTo, result: Result<Applied, ChangeError>) {
    out.push(Effect::Reply {
        to,
        result,
        after_walk: true,
    });
}

/// An operator announces or withdraws a VIP; the tables do not change.
fn announce(
    st: &mut State,
    now: &Now,
    out: &mut Out,
    vip: &str,
    announce: bool,
) -> Result<Applied, ChangeError> {
    if st.config.vip(vip).is_none() {
        return Err(ChangeError::NoVip(vip.to_string()));
    }
    if !st.speaker {
        return Err(ChangeError::NoBgp);
    }
    if announce {
        st.withdrawn.remove(vip);
    } else {
        st.withdrawn.insert(vip.to_string());
    }
    keep_overrides(st, out);
    sync_bgp(st, now, out);
    out.view();
    let applied = Applied::Announce {
        vip: vip.to_string(),
        announce,
    };
    out.event(Kind::Operator, format!("operator: {applied}"));
    Ok(applied)
}

/// The overrides file was written, or not: an error is counted every time and reported
/// when it differs from the last one.
pub(super) fn overrides_saved(
    st: &mut State,
    out: &mut Out,
    kept: Kept,
    result: Result<(), KeptError>,
) {
    match result {
        Ok(()) => st.keeper.written(kept),
        Err(e) => {
            out.count(Counter::OverridesFileError);
            if let Some(msg) = st.keeper.failed(&e) {
                warn!("{msg}");
                out.event(Kind::Operator, msg);
            }
        }
    }
}

/// What the overrides file held at start (restored, or why not).
pub(super) fn kept_started(st: &mut State, out: &mut Out) {
    let (restored, problem) = st.keeper.started();
    if let Some(msg) = restored {
        out.event(Kind::Operator, msg);
    }
    if let Some(msg) = problem {
        out.count(Counter::OverridesFileError);
        out.event(Kind::Operator, msg);
    }
}
