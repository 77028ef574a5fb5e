//! The applying half of a change: a [`Prepared`] version becomes the running one. The
//! running state takes what it was built from, the XDP program's steering maps and the
//! prober's targets follow the new config, the workers get the tables in one atomic swap, the
//! flow cache loses entries the new tables would not repeat, and BGP is brought in line
//! (the speaker restarted when `[bgp]` changed).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::time::Instant;

use tracing::{error, info};

use super::announce::{self, Announcer};
use super::events::Kind;
use super::prepare::{self, HealthSource, Inputs, PrepareError, Prepared, Steering, Targets};
use super::run::Control;
use super::shared::{Override, Shared, Sync};
use super::state::State;
use super::{cache, view};
use crate::config::{self, Vip};
use crate::datapath::DatapathError;
use crate::lb::BackendId;
use crate::lb::Tables;

/// Why a prepared version could not become the running one. Each is returned to the
/// operator; the running version (tables, steering maps, speaker) stays.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("steering maps: {0}; the XDP program keeps steering the running version's keys")]
    Steering(#[source] DatapathError),
    #[error("[bgp]: {0}")]
    SpeakerConfig(#[source] bgp::SpeakerConfigError),
    #[error("[bgp]: the new speaker did not start: {0}")]
    Speaker(#[source] bgp::SpeakerError),
    #[error(
        "[bgp]: the running speaker did not start again either ({0}): no announcements until the next successful reload"
    )]
    SpeakerRestore(#[source] bgp::SpeakerError),
}

/// Every error of a version that was not committed.
#[derive(Debug)]
pub struct CommitFailed(pub Vec<CommitError>);

impl std::fmt::Display for CommitFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        write!(f, "not applied, running version kept: {}", all.join("; "))
    }
}

impl std::error::Error for CommitFailed {}

/// Why [`Control::update`] kept the running version.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error(transparent)]
    Commit(#[from] CommitFailed),
}

impl UpdateError {
    /// One line per error.
    pub fn errors(&self) -> Vec<String> {
        match self {
            UpdateError::Prepare(e) => vec![e.to_string()],
            UpdateError::Commit(c) => c.0.iter().map(ToString::to_string).collect(),
        }
    }
}

impl Control {
    /// Prepares the next version from the running state with `overrides` and commits it;
    /// on failure the running version stays and the error is logged.
    pub(super) async fn update(
        &mut self,
        overrides: &HashMap<BackendId, Override>,
        why: &str,
    ) -> Result<u64, UpdateError> {
        let now = Instant::now();
        let version = self.st.next_version();
        let st = &self.st;
        let running = self.shared.published.current();
        let prepared = prepare::prepare(Inputs {
            running: Some(&running),
            file: &st.file_config,
            overrides,
            health: HealthSource::Verdicts(&st.health),
            next_hops: &st.next_hops,
            host_addresses: &crate::datapath::host_addresses(),
            version,
            now,
            resettle: false,
            ramps: &st.ramps,
            agents: &st.policy.agents,
        });
        let r = match prepared {
            Ok(p) => self.commit(p, why, now).await.map_err(UpdateError::from),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = &r {
            error!("{why}: running version kept: {e}");
        }
        r
    }

    /// Commits a health batch whose `changed` verdicts `st.health` already holds. The running
    /// tables were built from `st.config` (every commit adopts what it publishes), so only
    /// the VIPs of the changed pairs are rebuilt ([`prepare::prepare_health`]) and the
    /// config, steering maps, probes and speaker stay as they are; a full [`Control::update`]
    /// when the running tables do not match.
    pub(super) async fn update_health(
        &mut self,
        changed: &HashMap<BackendId, bool>,
        why: &str,
    ) -> Result<u64, UpdateError> {
        let running = self.shared.published.current();
        let version = self.st.version + 1;
        let fast = prepare::prepare_health(
            &running,
            &self.st.config,
            &self.st.health,
            &self.st.ramps,
            changed.keys(),
            &crate::datapath::host_addresses(),
            version,
        );
        let next = match fast {
            None => {
                let overrides = self.st.overrides.clone();
                return self.update(&overrides, why).await;
            }
            Some(r) => {
                // The number is used, as a failed full prepare uses one.
                self.st.next_version();
                r.inspect_err(|e| error!("{why}: running version kept: {e}"))?
            }
        };
        for (id, r) in &next.ready {
            self.st.ramps.note(id, *r);
        }
        let tables = next.tables;
        let now = Instant::now();
        let version = publish(
            &self.shared,
            self.walker.as_ref(),
            tables,
            why,
            self.health_since.take(),
        );
        self.sync_bgp(now);
        self.view(None);
        Ok(version)
    }

    /// Makes `p` the running version; returns its number. What can fail (the steering
    /// maps, a new speaker) is done before the tables are published; on failure it is undone
    /// and nothing of `p` is running.
    pub(super) async fn commit(
        &mut self,
        p: Prepared,
        why: &str,
        now: Instant,
    ) -> Result<u64, CommitFailed> {
        let old_steering = self.st.steering.clone();
        let steering_changed = p.steering != old_steering;
        if steering_changed {
            self.steer(&p.steering).map_err(|e| CommitFailed(vec![e]))?;
        }
        if self.st.config.bgp != p.config.bgp
            && let Err(mut errors) = self.restart_speaker(p.config.bgp.as_ref()).await
        {
            if steering_changed && let Err(e) = self.steer(&old_steering) {
                errors.push(e);
            }
            self.sync_bgp(now);
            return Err(CommitFailed(errors));
        }
        // Removed VIPs are withdrawn before their tables go away; the sync after the
        // publication takes care of everything else.
        if let Some(a) = self.announcer.as_mut() {
            let vips = &p.config.vips;
            a.withdraw_unless(|ip| vips.iter().any(|v| v.address == *ip), "VIP removed");
        }
        let rest = self.st.adopt(p);
        self.keep_overrides();
        if rest.targets != self.targets {
            self.targets = rest.targets;
            set_probes(&self.prober, &self.targets);
        }
        self.apply_flood(why);
        let version = publish(
            &self.shared,
            self.walker.as_ref(),
            rest.tables,
            why,
            self.health_since.take(),
        );
        self.apply_stateless(why);
        if let Some(t) = rest.settle_by {
            self.settle_by = t;
        }
        self.sync_bgp(now);
        self.view(None);
        Ok(version)
    }

    /// Makes the XDP program steer `steering`; on failure the maps hold the running keys
    /// again (each set is replaced whole or not at all; the VIP set is put back when the
    /// return set fails).
    fn steer(&mut self, steering: &Steering) -> Result<(), CommitError> {
        self.dp
            .set_vips(&steering.vips)
            .map_err(CommitError::Steering)?;
        if let Err(e) = self.dp.set_return_keys(&steering.returns) {
            if let Err(back) = self.dp.set_vips(&self.st.steering.vips) {
                error!("steering maps: cannot put the running VIP keys back: {back}");
            }
            return Err(CommitError::Steering(e));
        }
        self.st.steering = steering.clone();
        Ok(())
    }

    /// Replaces the speaker for a changed `[bgp]`: the new config is checked before the
    /// running speaker stops, and when the new one does not start the running config's
    /// speaker starts again. Returns every error.
    async fn restart_speaker(
        &mut self,
        next: Option<&config::Bgp>,
    ) -> Result<(), Vec<CommitError>> {
        if let Some(b) = next {
            bgp::validate(&announce::speaker_config(b))
                .map_err(|e| vec![CommitError::SpeakerConfig(e)])?;
        }
        info!("reload: [bgp] changed, restarting the speaker");
        if let Some(a) = self.announcer.take() {
            a.shutdown().await;
        }
        let Some(b) = next else { return Ok(()) };
        match Announcer::start(b).await {
            Ok(a) => {
                self.announcer = Some(a);
                Ok(())
            }
            Err(e) => {
                let mut errors = vec![CommitError::Speaker(e)];
                if let Some(old) = self.st.config.bgp.as_ref() {
                    match Announcer::start(old).await {
                        Ok(a) => self.announcer = Some(a),
                        Err(e) => errors.push(CommitError::SpeakerRestore(e)),
                    }
                }
                Err(errors)
            }
        }
    }

    /// Brings the BGP announcements in line with the published tables (see
    /// [`announcements`]).
    pub(super) fn sync_bgp(&mut self, now: Instant) {
        let Some(a) = self.announcer.as_mut() else {
            return;
        };
        let settling = now < self.settle_by;
        let status = self.prober.status();
        let undecided = prepare::undecided(&status, &self.targets, &self.st.health, settling);
        let tables = self.shared.published.current();
        let (wanted, all_settled) = announcements(&self.st, &tables, &undecided, settling);
        a.sync(&wanted);
        if all_settled {
            a.initial_routes_done();
        }
    }
}

/// The BGP decision for `tables`: a VIP is wanted once the tables can serve it and its
/// health checks have decided (`undecided` holds the pairs still waiting while `settling`),
/// and not while an operator withdrew it. Also whether every VIP has settled, which ends the
/// speaker's initial wait.
pub fn announcements(
    st: &State,
    tables: &Tables,
    undecided: &HashSet<&BackendId>,
    settling: bool,
) -> (BTreeMap<IpAddr, announce::Wanted>, bool) {
    // Once settled nothing is undecided: no backend identity to make per VIP.
    let settled = |v: &Vip| {
        undecided.is_empty()
            || v.backends.iter().all(|b| {
                b.state == config::BackendState::Disabled
                    || !undecided.contains(&BackendId::of(v, b))
            })
    };
    let mut wanted = announce::wanted(&st.config, tables, &settled);
    if st.fleet_hold {
        // A fleet member that came back behind the fleet catches up before it announces.
        wanted.clear();
    }
    let all_settled = !settling || st.config.vips.iter().all(settled);
    // An address stays wanted only while a VIP on it that no operator withdrew can serve.
    let serving: HashSet<IpAddr> = st
        .config
        .vips
        .iter()
        .enumerate()
        .filter(|(slot, v)| {
            !st.withdrawn.contains(&v.name)
                && tables
                    .vips
                    .get(*slot)
                    .is_some_and(|e| e.backends.clone().any(|b| tables.eligible[b as usize]))
        })
        .map(|(_, v)| v.address)
        .collect();
    wanted.retain(|addr, _| serving.contains(addr));
    (wanted, all_settled)
}

/// Starts the BGP speaker for `[bgp]`, if there is one; a speaker that cannot start leaves
/// the appliance forwarding without announcements.
pub(super) async fn start_speaker(bgp: Option<&config::Bgp>) -> Option<Announcer> {
    match Announcer::start(bgp?).await {
        Ok(a) => Some(a),
        Err(e) => {
            error!("bgp: {e}; running without announcements");
            None
        }
    }
}

/// Gives the prober one probe per distinct target; probes that stay keep their state.
pub(super) fn set_probes(prober: &health::Prober, targets: &Targets) {
    prober.set_targets(targets.keys().map(|k| health::Target {
        address: k.address,
        port: k.port,
        check: std::sync::Arc::clone(&k.check),
        via_vip: k.via_vip,
    }));
}

/// Swaps `t` in for the workers, asks the walker to evict the flow-cache entries it would
/// not repeat, and restarts the sync-lag clock (for a health version also the one counting
/// from its first transition, `health_since`); returns its version.
pub(super) fn publish(
    shared: &Shared,
    walker: Option<&cache::Walker>,
    t: Tables,
    why: &str,
    health_since: Option<Instant>,
) -> u64 {
    let version = t.version;
    let quorum = super::policy::quorum_events(&shared.published.current(), &t);
    shared.published.publish(t);
    // Strictly after the swap: a worker that decided with the old tables takes its own
    // entry back when it sees the new version, and the walk removes the rest.
    if let Some(w) = walker {
        w.evict();
    }
    if let Ok(mut s) = shared.sync.lock() {
        *s = Sync {
            version,
            published_at: Instant::now(),
            lag: None,
            health_since,
        };
    }
    shared.sync_changed.notify_one();
    view::event(shared, Kind::Commit, format!("version {version}: {why}"));
    for e in quorum {
        tracing::info!("{e}");
        view::event(shared, Kind::Health, e);
    }
    version
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;
    use crate::control::prepare::NextHops;

    const CFG: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[bgp]
asn = 65001
router_id = "192.0.2.1"
[[bgp.peer]]
address = "192.0.2.254"
asn = 65000

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
[[vip.backend]]
address = "10.1.0.11"
port = 8080
"#;

    /// The state and tables after the first version of `CFG`.
    fn running() -> (State, Tables) {
        let file = Config::from_toml_str(CFG).unwrap_or_else(|e| panic!("{e}"));
        let mut st = State::new("sluice.toml".into(), file);
        let p = prepare::prepare(Inputs {
            running: None,
            file: &Arc::clone(&st.file_config),
            overrides: &HashMap::new(),
            health: HealthSource::Verdicts(&HashMap::new()),
            next_hops: &NextHops::default(),
            host_addresses: &[],
            version: st.next_version(),
            now: Instant::now(),
            resettle: false,
            ramps: &Default::default(),
            agents: &Default::default(),
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let rest = st.adopt(p);
        (st, rest.tables)
    }

    #[test]
    fn a_vip_is_wanted_while_it_can_serve_and_no_operator_withdrew_it() {
        let (mut st, tables) = running();
        let vip: IpAddr = "192.0.2.10".parse().expect("literal");
        let (wanted, settled) = announcements(&st, &tables, &HashSet::new(), false);
        assert!(wanted.contains_key(&vip));
        assert!(settled);
        st.withdrawn.insert("web".into());
        let (wanted, _) = announcements(&st, &tables, &HashSet::new(), false);
        assert!(wanted.is_empty(), "withdrawn by the operator");
    }

    #[test]
    fn the_initial_wait_lasts_while_a_backend_is_undecided() {
        let (st, tables) = running();
        let id = BackendId::new("web", "10.1.0.11".parse().expect("literal"), 8080);
        let undecided = HashSet::from([&id]);
        let (_, settled) = announcements(&st, &tables, &undecided, true);
        assert!(!settled, "settling, one backend undecided");
        let (_, settled) = announcements(&st, &tables, &undecided, false);
        assert!(settled, "past the settle time");
    }
}
