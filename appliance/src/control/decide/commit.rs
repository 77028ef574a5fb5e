//! Versions and commits. Every version number is taken here, once per version built (one
//! that fails to build still uses its number): the first, a full one ([`build_full`]), a
//! health batch's ([`build_health`]) and an egress-only one ([`build_egress`]). A prepared
//! version becomes the running one here, all or nothing: what can fail (the steering maps,
//! a new speaker) is staged with the executor first, and only when it went through does
//! the state take the version and the tables get published; otherwise nothing of it runs
//! and the change hears why.

use std::collections::HashMap;
use std::sync::Arc;

use tracing::{info, warn};

use super::bgp::sync_bgp;
use super::out::Out;
use crate::config::Config;
use crate::control::change::{CommitError, CommitFailed, Override, PrepareError, UpdateError};
use crate::control::effect::{Effect, SpeakerChange, Stage};
use crate::control::events::Kind;
use crate::control::input::{Now, Staged};
use crate::control::kept::Kept;
use crate::control::neighbours;
use crate::control::pending::{Commit, Pending, Then};
use crate::control::policy::{self, Agents};
use crate::control::prepare::{self, HealthInputs, HealthSource, HealthVersion, Inputs, Prepared};
use crate::control::slowstart::Ramps;
use crate::control::state::{First, State, Versions};
use crate::lb::{BackendId, Tables};

/// What a full version is built from besides the running state.
#[derive(Clone, Copy)]
pub struct Next<'a> {
    /// A new config file (a reload, a fleet revision); `None`: the running one.
    pub file: Option<&'a Arc<Config>>,
    /// Overrides other than the running ones (an operator's change, the fleet's).
    pub overrides: Option<&'a HashMap<BackendId, Override>>,
    /// Health from the prober's status (a reload) instead of the verdicts held.
    pub probes: bool,
    /// A new config: BGP waits for the health checks to settle again.
    pub resettle: bool,
}

impl Next<'_> {
    /// The running file, overrides and verdicts.
    pub const RUNNING: Next<'static> = Next {
        file: None,
        overrides: None,
        probes: false,
        resettle: false,
    };
}

/// The first version, from the file and the kernel's routes and neighbours alone, and the
/// state running it.
pub fn first(f: First, now: &Now) -> Result<State, PrepareError> {
    let mut versions = Versions::after(f.versions_from);
    let p = prepare::prepare(Inputs {
        running: None,
        file: &f.file,
        overrides: &f.overrides,
        health: HealthSource::Verdicts(&f.health),
        next_hops: &f.next_hops,
        host_addresses: &now.host_addresses,
        version: versions.take(),
        now: now.at,
        now_ns: now.ns,
        resettle: false,
        ramps: &Ramps::default(),
        agents: &Agents::new(),
        exec: f.exec,
    })?;
    let mut p = p;
    if !f.outbound.is_empty() {
        let config = Arc::clone(&p.config);
        p.tables.carry_outbound(&config, &f.outbound, now.ns);
    }
    Ok(State::new(f, p, versions, now.at))
}

/// Builds the next full version (see [`Next`]), touching nothing that runs.
pub(super) fn build_full(
    st: &mut State,
    now: &Now,
    next: Next<'_>,
) -> Result<Prepared, PrepareError> {
    let version = st.versions.take();
    prepare_as(st, now, next, version)
}

fn prepare_as(
    st: &State,
    now: &Now,
    next: Next<'_>,
    version: u64,
) -> Result<Prepared, PrepareError> {
    prepare::prepare(Inputs {
        running: Some(&st.tables),
        file: next.file.unwrap_or(&st.file_config),
        overrides: next.overrides.unwrap_or(&st.overrides),
        health: match next.probes {
            true => HealthSource::Prober(&now.probes),
            false => HealthSource::Verdicts(&st.health),
        },
        next_hops: &st.next_hops,
        host_addresses: &now.host_addresses,
        version,
        now: now.at,
        now_ns: now.ns,
        resettle: next.resettle,
        ramps: &st.ramps,
        agents: &st.policy.agents,
        exec: st.exec,
    })
}

/// A health batch's version.
pub(super) enum HealthBuilt {
    /// The running tables with the touched VIPs rebuilt.
    Tables(HealthVersion),
    /// A full version: the running tables could not be reused (see
    /// [`prepare::prepare_health`]).
    Full(Box<Prepared>),
}

/// The next version for a health batch whose `changed` verdicts `st.health` already holds.
pub(super) fn build_health(
    st: &mut State,
    now: &Now,
    changed: &HashMap<BackendId, bool>,
) -> Result<HealthBuilt, PrepareError> {
    let version = st.versions.take();
    let inputs = HealthInputs {
        running: &st.tables,
        config: &st.config,
        health: &st.health,
        ramps: &st.ramps,
        host_addresses: &now.host_addresses,
        version,
        exec: st.exec,
    };
    let fast = prepare::prepare_health(inputs, changed.keys());
    match fast {
        Some(r) => r.map(HealthBuilt::Tables),
        None => prepare_as(st, now, Next::RUNNING, version).map(|p| HealthBuilt::Full(Box::new(p))),
    }
}

/// The running tables with the egress of the routes and neighbours held now (no ring is
/// rebuilt).
pub(super) fn build_egress(st: &mut State) -> Tables {
    let version = st.versions.take();
    let egress = neighbours::egress(&st.config, &st.tables, &st.next_hops);
    st.tables.with_egress(egress, version)
}

/// Prepares the next version from the running file (with `overrides`, when other than the
/// running ones) and commits it; `then` goes on with the outcome.
pub(super) fn update(
    st: &mut State,
    now: &Now,
    out: &mut Out,
    overrides: Option<&HashMap<BackendId, Override>>,
    why: String,
    then: Then,
) {
    let next = Next {
        overrides,
        ..Next::RUNNING
    };
    match build_full(st, now, next) {
        Ok(p) => commit(
            st,
            now,
            out,
            Commit {
                prepared: Box::new(p),
                why,
                then,
                health_since: None,
            },
        ),
        Err(e) => out.done(then, why, Err(e.into())),
    }
}

/// Makes `c` the running version. When its steering keys or `[bgp]` differ from the
/// running ones, those are staged with the executor first and the commit finishes with
/// `Input::Staged` ([`staged`]); otherwise at once.
pub(super) fn commit(st: &mut State, now: &Now, out: &mut Out, c: Commit) {
    let p = &c.prepared;
    let steering = (p.steering != st.steering).then(|| (p.steering.clone(), st.steering.clone()));
    let speaker = (st.config.bgp != p.config.bgp).then(|| SpeakerChange {
        next: p.config.bgp.clone(),
        running: st.config.bgp.clone(),
    });
    if steering.is_none() && speaker.is_none() {
        return finish(st, now, out, c);
    }
    st.pending = Some(Pending {
        speaker: speaker.is_some(),
        commit: c,
    });
    out.push(Effect::Stage(Stage { steering, speaker }));
}

/// The staged half of the pending commit ran: on success the commit finishes; on failure
/// nothing of the new version runs and its change hears every error.
pub(super) fn staged(st: &mut State, now: &Now, out: &mut Out, s: Staged) {
    st.speaker = s.speaker;
    let Some(Pending { commit: c, speaker }) = st.pending.take() else {
        warn!("a commit's staged half came back, but no commit was under way");
        return;
    };
    if s.steered {
        st.steering = c.prepared.steering.clone();
    }
    match s.result {
        Ok(()) => finish(st, now, out, c),
        Err(errors) => {
            // A failed speaker change leaves the running speaker restarted (or none): it
            // announces what the running tables want.
            if speaker && !matches!(errors.first(), Some(CommitError::Steering(_))) {
                sync_bgp(st, now, out);
            }
            let e = UpdateError::Commit(CommitFailed(errors));
            out.done(c.then, c.why, Err(e));
        }
    }
}

/// The state takes the version, the prober and the XDP program follow, the workers get the
/// tables, BGP is brought in line.
fn finish(st: &mut State, now: &Now, out: &mut Out, c: Commit) {
    let Commit {
        prepared,
        why,
        then,
        health_since,
    } = c;
    // Removed VIPs are withdrawn before their tables go away; the sync after the
    // publication takes care of everything else.
    if st.speaker {
        let keep = prepared.config.vips.iter().map(|v| v.address).collect();
        out.push(Effect::Withdraw {
            keep,
            why: "VIP removed",
        });
    }
    let rest = st.adopt(*prepared);
    keep_overrides(st, out);
    if rest.targets != *st.targets {
        st.targets = Arc::new(rest.targets);
        out.push(Effect::SetProbes(Arc::clone(&st.targets)));
    }
    out.push(Effect::Flood {
        flood: st.config.flood,
        why: why.clone(),
    });
    let version = publish(st, out, rest.tables, &why, health_since);
    stateless(st, out, &why);
    if let Some(t) = rest.settle_by {
        st.settle_by = t;
    }
    sync_bgp(st, now, out);
    out.view();
    out.done(then, why, Ok(version));
}

/// `tables` become the running ones: published for the workers (the flow cache loses what
/// they would not repeat), and an event, with one for each VIP whose quorum changed;
/// returns their version.
pub(super) fn publish(
    st: &mut State,
    out: &mut Out,
    tables: Tables,
    why: &str,
    health_since: Option<std::time::Instant>,
) -> u64 {
    let version = tables.version;
    let quorum = policy::quorum_events(&st.config, &st.tables, &tables);
    st.tables = Arc::new(tables);
    out.push(Effect::Publish {
        tables: Arc::clone(&st.tables),
        health_since,
    });
    out.event(Kind::Commit, format!("version {version}: {why}"));
    for e in quorum {
        info!("{e}");
        out.event(Kind::Health, e);
    }
    version
}

/// The XDP program's stateless answer follows the running tables.
pub(super) fn stateless(st: &State, out: &mut Out, why: &str) {
    out.push(Effect::Stateless {
        tables: Arc::clone(&st.tables),
        why: why.to_string(),
    });
}

/// Writes the running overrides to the state directory when they changed since the last
/// write.
pub(super) fn keep_overrides(st: &State, out: &mut Out) {
    let Some(dir) = st.keeper.dir(&st.file_config) else {
        return;
    };
    if !st.keeper.differs(&st.overrides, &st.withdrawn) {
        return;
    }
    let kept = Kept {
        backends: st.overrides.clone(),
        withdrawn: st.withdrawn.clone(),
    };
    out.push(Effect::SaveOverrides { dir, kept });
}
