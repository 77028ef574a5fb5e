//! The readers' side of the executor: what it republishes for readers after every change
//! (the API and metrics read [`super::model::Shared`], never the loop): the [`View`] of the
//! state, events, the sync lag, and the one-line totals for the log.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::announce::Announcer;
use super::cache;
use super::events::Kind;
use super::model::{HealthView, Shared, View};
use super::state::State;
use crate::datapath::DatapathStats;
use crate::lb::DropReason;

/// Appends an event to the ring the API serves.
pub fn event(shared: &Shared, kind: Kind, message: String) {
    if let Ok(mut e) = shared.events.lock() {
        e.push(kind, message);
    }
}

/// Republishes what the API reads about the control state.
pub fn publish(
    shared: &Shared,
    st: &State,
    status: &[health::Status],
    announcer: Option<&Announcer>,
    walker: Option<&cache::Walker>,
    datapath: Option<DatapathStats>,
) {
    let mut health = HashMap::new();
    // `health` is this appliance's own verdicts; on a fleet member the tables follow the
    // fleet's (st.health there), shown beside them as `fleet_health`.
    let own = st.fleet.as_ref().map_or(&st.health, |f| &f.local);
    for s in status {
        let Some(pairs) = st.targets.get(&s.key) else {
            continue;
        };
        let state = match (s.decided, s.state) {
            (false, _) => "unknown",
            (true, health::Health::Up) => "up",
            (true, health::Health::Down) => "down",
        };
        for p in pairs {
            let reason = st
                .reasons
                .get(p)
                .cloned()
                .or_else(|| s.last_failure.as_ref().map(|f| f.to_string()));
            // A backend of several checks shows their combined verdict once it has one.
            let state = match (st.policy.combined.contains(p), own.get(p)) {
                (true, Some(true)) => "up",
                (true, Some(false)) => "down",
                _ => state,
            };
            health.insert(p.clone(), HealthView { state, reason });
        }
    }
    let old = shared.view.load();
    shared.view.store(Arc::new(View {
        config: Some(Arc::clone(&st.config)),
        health,
        overrides: st.overrides.clone(),
        withdrawn: st.withdrawn.clone(),
        announced: announcer
            .map(|a| a.announced().copied().collect())
            .unwrap_or_default(),
        peers: announcer.map(|a| a.peers()).unwrap_or_default(),
        // The entry count is the walker's last (its thread counts again when asked; the
        // loop never walks the maps).
        cache: match (&datapath, &shared.flow_cache) {
            (Some(_), Some(c)) => {
                let entries = walker.map_or(0, |w| {
                    w.count();
                    w.entries()
                });
                Some(cache::counters(c, entries))
            }
            _ => old.cache.clone(),
        },
        datapath: datapath.or_else(|| old.datapath.clone()),
        ramps: ramps(st),
        agents: st.policy.agents.clone(),
        fleet_health: match &st.fleet {
            Some(_) => st.health.clone(),
            None => HashMap::new(),
        },
    }));
}

/// When each ramping backend of the running config reaches its full weight.
fn ramps(st: &State) -> HashMap<crate::lb::BackendId, Instant> {
    if st.ramps.is_empty() {
        return HashMap::new();
    }
    let mut out = HashMap::new();
    for v in &st.config.vips {
        for b in &v.backends {
            if let Some(r) = st.ramps.ramp(v, b) {
                out.insert(crate::lb::BackendId::of(v, b), r.until);
            }
        }
    }
    out
}

/// One line of totals for the log.
pub fn summary(shared: &Shared) -> String {
    let agg = shared.aggregate();
    let mut line = format!(
        "version {} tx {} flows {} conntrack_fallback {}",
        shared.published.version(),
        agg.stats.tx,
        agg.conntrack_entries,
        agg.stats.conntrack_fallback
    );
    for (r, n) in DropReason::ALL.iter().zip(agg.drops) {
        if n > 0 {
            line.push_str(&format!(" drop_{} {n}", r.name()));
        }
    }
    let mut vips: Vec<_> = agg.vips.iter().filter(|(_, t)| t.packets > 0).collect();
    vips.sort_by(|a, b| a.0.cmp(b.0));
    for (name, t) in vips {
        line.push_str(&format!(" vip[{name}] {}", t.packets));
    }
    line
}

/// Watches the workers after each commit and records how long it took them all to run it.
/// Between commits it sleeps until the next one (`sync_changed`): an idle appliance wakes
/// nothing here.
pub async fn watch_sync(shared: Arc<Shared>) {
    let mut iv = tokio::time::interval(Duration::from_millis(5));
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let Ok(s) = shared.sync.lock().map(|s| *s) else {
            return;
        };
        if s.lag.is_some() {
            // A commit sets `sync` before it signals, so none is missed between the read
            // above and this wait (a signal with no waiter is kept for the next one).
            shared.sync_changed.notified().await;
            iv.reset();
            continue;
        }
        iv.tick().await;
        if shared.synced_to(s.version) {
            let lag = s.published_at.elapsed();
            if let Ok(mut cur) = shared.sync.lock()
                && cur.version == s.version
            {
                cur.lag = Some(lag);
                if let Some(since) = s.health_since
                    && let Ok(mut h) = shared.counters.health.lag.lock()
                {
                    *h = Some(since.elapsed());
                }
            }
        }
    }
}

/// Restarts the sync-lag clock of the running version (the first one counts from the
/// moment the workers exist).
pub fn restart_sync_clock(shared: &Shared, now: Instant) {
    if let Ok(mut s) = shared.sync.lock() {
        s.published_at = now;
    }
}
