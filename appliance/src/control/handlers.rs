//! One handler per kind of event the control loop waits on: SIGHUP, an API command, a
//! health transition, a kernel neighbour or route change, the one-second tick. Each turns
//! its event into a change ([`super::prepare`] then [`super::commit`]) or into events and a
//! fresh view for readers.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ::api::BackendAction;
use tracing::{debug, error, info, warn};

use super::batch::Pacing;
use super::change::{self, Applied, ChangeError, Deferred};
use super::commit::publish;
use super::events::Kind;
use super::neighbours;
use super::neighbours::NetEvent;
use super::prepare::{self, HealthSource, Inputs};
use super::run::Control;
use super::shared::{BackendOp, Command};
use super::slowstart;
use super::view::{self, event};
use crate::config::{self, BackendState, Config};

/// Drops in one second that make an event.
const DROP_SPIKE: u64 = 1000;

impl Control {
    /// SIGHUP: reloads the config file, logging every error of a rejected one.
    pub(super) async fn on_hangup(&mut self) {
        info!(path = %self.st.path.display(), "SIGHUP: reloading");
        if let Err(e) = self.reload("SIGHUP reload").await {
            error!("reload rejected, running version kept: {e}");
            for x in e.errors() {
                error!("  {x}");
            }
        }
    }

    /// A change the API asks for; the reply goes back to the waiting request.
    pub(super) async fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Backend {
                vip,
                backend,
                op,
                reply,
            } => {
                let r = self.backend(&vip, &backend, op).await;
                self.reply_after_walk(reply, r);
            }
            Command::Announce {
                vip,
                announce,
                reply,
            } => {
                let _ = reply.send(self.announce(&vip, announce));
            }
            Command::Reload { reply } => {
                info!("API: reloading");
                let r = self.reload("API reload").await;
                if let Err(e) = &r {
                    error!("reload rejected, running version kept: {e}");
                }
                self.reply_after_walk(reply, r);
            }
        }
    }

    /// Sends `r` once the flow-cache walk the change asked for has finished (so an operator
    /// who disabled a backend hears back when no cached flow goes to it), without holding
    /// the loop up for it.
    fn reply_after_walk<T: Send + 'static>(&self, reply: tokio::sync::oneshot::Sender<T>, r: T) {
        match &self.walker {
            Some(w) => {
                let walked = w.evicted(w.latest());
                tokio::spawn(async move {
                    walked.await;
                    let _ = reply.send(r);
                });
            }
            None => {
                let _ = reply.send(r);
            }
        }
    }

    /// Probes changed state: `first` and every transition already queued behind it join
    /// the health batch (each logged and counted now); the batch commits when its pacing
    /// says (`health_batch_delay` after its first transition, `health_batch` after the last
    /// health commit), at once when that time has come.
    pub(super) async fn on_transitions(
        &mut self,
        first: health::Transition,
        queued: &mut tokio::sync::mpsc::UnboundedReceiver<health::Transition>,
    ) {
        let now = Instant::now();
        self.record_transition(first, now);
        while let Ok(tr) = queued.try_recv() {
            self.record_transition(tr, now);
        }
        if self
            .health_batch
            .is_due(Pacing::of(&self.st.config), Instant::now())
        {
            self.commit_health().await;
        }
    }

    /// One transition: its reason, event and counter now; its verdicts into the batch.
    fn record_transition(&mut self, tr: health::Transition, now: Instant) {
        info!("health: {tr}");
        self.shared
            .health
            .transitions
            .fetch_add(1, Ordering::Relaxed);
        let pairs = self.targets.get(&tr.key).map(Vec::as_slice).unwrap_or(&[]);
        for p in pairs {
            self.st.reasons.insert(p.clone(), tr.reason.to_string());
        }
        super::policy::record(&mut self.st.policy, &tr, pairs, &mut self.health_batch, now);
        event(
            &self.shared,
            Kind::Health,
            format!("{}: {} -> {} ({})", tr.key, tr.from, tr.to, tr.reason),
        );
    }

    /// Commits the health batch as one version: every pair takes its newest verdict. A
    /// batch that changes no verdict (flaps that went back) makes no version.
    pub(super) async fn commit_health(&mut self) {
        let Some(batch) = self.health_batch.take(Instant::now()) else {
            return;
        };
        if self.fleet.is_some() {
            return self.commit_fleet_health(batch).await;
        }
        // An agent's new answer changes weights or states: a full prepare applies it.
        let agents = std::mem::take(&mut self.st.policy.agents_changed);
        if !batch.apply(&mut self.st.health) && !agents {
            self.view(None);
            return;
        }
        let why = match batch.transitions {
            1 => "health change".to_string(),
            n => format!("health: {n} transitions"),
        };
        self.health_since = Some(batch.first);
        let r = if agents {
            let overrides = self.st.overrides.clone();
            self.update(&overrides, &why).await
        } else {
            self.update_health(&batch.verdicts, &why).await
        };
        self.health_since = None;
        match r {
            Ok(_) => {
                self.shared.health.commits.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                // The reasons changed even if the tables could not follow.
                self.sync_bgp(Instant::now());
                self.view(None);
            }
        }
    }

    /// When the next slow-start step commits: when its level is due, but no sooner than
    /// `MIN_STEP_GAP` after the last step; `None` while nothing ramps.
    pub(super) fn ramp_at(&self) -> Option<Instant> {
        let due = self.st.ramp_due?;
        Some(match self.last_ramp_step {
            Some(t) => due.max(t + slowstart::MIN_STEP_GAP),
            None => due,
        })
    }

    /// A slow-start level is due: the next version carries every ramp's level at its time
    /// (the ramps' state is in the running state, so this is an ordinary update).
    pub(super) async fn ramp_step(&mut self) {
        let now = Instant::now();
        self.last_ramp_step = Some(now);
        let why = match self.st.ramps.len() {
            0 => "outbound: a drain ended".to_string(),
            n => format!("slow start: {n} backend(s) ramping"),
        };
        let overrides = self.st.overrides.clone();
        if self.update(&overrides, &why).await.is_err() {
            // The running version stays (the error is logged); try again, without spinning.
            self.st.ramp_due = Some(now + Duration::from_secs(1));
        }
    }

    /// Routes or neighbours changed: every event already queued is applied, then one new
    /// version with the new egress and the running core (no ring is rebuilt), and the
    /// flow-cache entries whose egress changed are evicted.
    pub(super) fn on_net_event(&mut self, first: NetEvent) {
        let mut changed = neighbours::apply(&mut self.st.next_hops.net, first);
        while let Ok(ev) = self.net.events.try_recv() {
            changed |= neighbours::apply(&mut self.st.next_hops.net, ev);
        }
        if !changed {
            return;
        }
        let running = self.shared.published.current();
        let egress = neighbours::egress(&self.st.config, &running, &self.st.next_hops);
        let version = self.st.next_version();
        debug!(version, "egress: routes or neighbours changed");
        publish(
            &self.shared,
            self.walker.as_ref(),
            running.with_egress(egress, version),
            "routes or neighbours changed",
            None,
        );
        self.apply_stateless("routes or neighbours changed");
        self.view(None);
    }

    /// Once a second: BGP sync, resolution of missing next hops, events for BGP and drops,
    /// the view.
    pub(super) async fn on_tick(&mut self, ticks: u64, now: Instant) {
        self.sync_bgp(now);
        let running = self.shared.published.current();
        self.net
            .resolve(neighbours::wanted(&self.st.config, &running));
        self.peer_events();
        self.drop_events(now);
        if ticks.is_multiple_of(5) {
            self.probe_events();
        }
        let dp = match self.dp.stats() {
            Ok(s) => Some(s),
            Err(e) => {
                warn!("datapath stats: {e}");
                None
            }
        };
        self.flood_events(dp.as_ref());
        self.view(dp);
        if ticks.is_multiple_of(10) {
            info!("stats: {}", view::summary(&self.shared));
        }
    }

    /// An event for each BGP peer whose state changed since the last tick.
    fn peer_events(&mut self) {
        let Some(a) = &self.announcer else { return };
        for p in a.peers() {
            let before = self.peer_states.insert(p.address, p.state);
            if before.is_some_and(|b| b != p.state)
                || (before.is_none() && p.state == bgp::State::Established)
            {
                let mut m = format!(
                    "peer {}: {:?} -> {:?}",
                    p.address,
                    before.unwrap_or(bgp::State::Idle),
                    p.state
                );
                if p.state != bgp::State::Established
                    && let Some(e) = &p.last_error
                {
                    m.push_str(&format!(" ({e})"));
                }
                event(&self.shared, Kind::Bgp, m);
            }
        }
    }

    /// An event when health probes could not run for a local shortage since the last one:
    /// the backends keep their verdicts, and the operator learns why probing lags.
    fn probe_events(&mut self) {
        let n = self.prober.counters().local_errors;
        self.shared.probes_not_run.store(n, Ordering::Relaxed);
        if n > self.last_not_run {
            event(
                &self.shared,
                Kind::Health,
                format!(
                    "{} health probes not run: the appliance is short of descriptors, buffers or \
                     local ports (verdicts kept; see sluice_health_probes_not_run_total)",
                    n - self.last_not_run
                ),
            );
            self.last_not_run = n;
        }
    }

    /// An event when the workers dropped [`DROP_SPIKE`] frames or more in the last second,
    /// at most one every ten seconds.
    fn drop_events(&mut self, now: Instant) {
        let drops: u64 = self.shared.aggregate().drops.iter().sum();
        let delta = drops.saturating_sub(self.last_drops);
        self.last_drops = drops;
        if delta >= DROP_SPIKE
            && self
                .last_spike
                .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(10))
        {
            self.last_spike = Some(now);
            event(
                &self.shared,
                Kind::Drops,
                format!(
                    "{delta} frames dropped in the last second (see sluice_dropped_packets_total by reason)"
                ),
            );
        }
    }

    /// Loads the config file and, when it is valid and its tables build, makes it the
    /// running one; otherwise nothing changes and every error comes back.
    async fn reload(&mut self, how: &str) -> Result<Applied, ChangeError> {
        let r = self.try_reload(how).await;
        if let Err(e) = &r {
            self.shared.reloads_rejected.fetch_add(1, Ordering::Relaxed);
            event(
                &self.shared,
                Kind::Reload,
                format!("{how}: rejected, running version kept: {}", e.summary()),
            );
        }
        r
    }

    async fn try_reload(&mut self, how: &str) -> Result<Applied, ChangeError> {
        // A fleet member reloads its file merged with the fleet's revision, on the fleet's health.
        let fleet = self.fleet_reload_file();
        let is_fleet = self.fleet.is_some();
        let file = fleet.unwrap_or_else(|| config::load(&self.st.path));
        // The parsed documents are dead now: give their heap back (large configs).
        sys::mem::release_free_heap();
        let file = Arc::new(file.map_err(ChangeError::ConfigRejected)?);
        let now = Instant::now();
        let version = self.st.next_version();
        let status = self.prober.status();
        let running = self.shared.published.current();
        let prepared = prepare::prepare(Inputs {
            running: Some(&running),
            file: &file,
            overrides: &self.st.overrides,
            health: if is_fleet {
                HealthSource::Verdicts(&self.st.health)
            } else {
                HealthSource::Prober(&status)
            },
            next_hops: &self.st.next_hops,
            host_addresses: &crate::datapath::host_addresses(),
            version,
            now,
            resettle: true,
            ramps: &self.st.ramps,
            agents: &self.st.policy.agents,
        })
        .map_err(ChangeError::TablesRejected)?;
        let deferred = deferred(&self.st.config, &prepared.config);
        let resized = change::resized(&self.st.config, &prepared.config);
        let version = self
            .commit(prepared, how, now)
            .await
            .map_err(ChangeError::NotCommitted)?;
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
        event(
            &self.shared,
            Kind::Reload,
            format!(
                "{how}: version {version} running{}",
                change::deferred_note(&deferred)
            ),
        );
        for r in resized {
            event(&self.shared, Kind::Reload, format!("{how}: {r}"));
        }
        Ok(Applied::Reloaded { version, deferred })
    }

    /// Applies an operator's change to a backend as a new version.
    async fn backend(
        &mut self,
        vip: &str,
        backend: &str,
        op: BackendOp,
    ) -> Result<Applied, ChangeError> {
        let key = change::find_backend(&self.st.config, vip, backend)?;
        let mut overrides = self.st.overrides.clone();
        let o = overrides.entry(key.clone()).or_default();
        match op {
            BackendOp::Action(BackendAction::Drain) => o.state = Some(BackendState::Drain),
            BackendOp::Action(BackendAction::Undrain | BackendAction::Enable) => {
                o.state = Some(BackendState::Active)
            }
            BackendOp::Action(BackendAction::Disable) => o.state = Some(BackendState::Disabled),
            BackendOp::Weight(w) => o.weight = Some(w),
        }
        let id = key.socket_addr();
        if let Some(o) = overrides.get(&key) {
            self.fleet_override(&key, &o.clone()).await?;
        }
        let why = format!("operator: {} {id} of VIP {vip}", change::op_name(op));
        let version = self
            .update(&overrides, &why)
            .await
            .map_err(|source| ChangeError::NotApplied { op, source })?;
        event(&self.shared, Kind::Operator, why);
        Ok(Applied::Backend {
            op,
            backend: id,
            vip: vip.to_string(),
            version,
        })
    }

    /// An operator announces or withdraws a VIP; the tables do not change.
    fn announce(&mut self, vip: &str, announce: bool) -> Result<Applied, ChangeError> {
        if self.st.config.vip(vip).is_none() {
            return Err(ChangeError::NoVip(vip.to_string()));
        }
        if self.announcer.is_none() {
            return Err(ChangeError::NoBgp);
        }
        if announce {
            self.st.withdrawn.remove(vip);
        } else {
            self.st.withdrawn.insert(vip.to_string());
        }
        self.keep_overrides();
        self.sync_bgp(Instant::now());
        self.view(None);
        let applied = Applied::Announce {
            vip: vip.to_string(),
            announce,
        };
        event(&self.shared, Kind::Operator, format!("operator: {applied}"));
        Ok(applied)
    }
}

/// The sections of `next` that differ from `running` but only apply at the next start.
fn deferred(running: &Config, next: &Config) -> Vec<Deferred> {
    let mut out = Vec::new();
    if running.appliance.flow_cache != next.appliance.flow_cache {
        out.push(Deferred::FlowCache);
    }
    if running.api != next.api {
        out.push(Deferred::Api);
    }
    out
}
