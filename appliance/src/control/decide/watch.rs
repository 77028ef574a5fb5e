//! What the loop watches besides changes: the start, the one-second tick (BGP sync, next
//! hops to resolve, events for BGP peers, drop spikes, probes not run and flood mode, the
//! view with fresh counters), routes and neighbours (an egress-only version), and the stop.

use std::time::Duration;

use tracing::{debug, info, warn};

use super::bgp::sync_bgp;
use super::commit::{self, publish, stateless};
use super::fleet;
use super::operator::kept_started;
use super::out::Out;
use crate::control::effect::{Counter, Effect};
use crate::control::events::Kind;
use crate::control::flood;
use crate::control::input::{Now, Tick};
use crate::control::neighbours::{self, NetEvent};
use crate::control::state::State;
use crate::datapath::DatapathStats;

/// Drops in one second that make an event.
const DROP_SPIKE: u64 = 1000;

/// The first version runs: BGP, the view and the event log catch up.
pub(super) fn started(
    st: &mut State,
    now: &Now,
    out: &mut Out,
    speaker: bool,
    datapath: Option<DatapathStats>,
    fleet_problem: Option<String>,
) {
    st.speaker = speaker;
    sync_bgp(st, now, out);
    out.push(Effect::View {
        datapath: datapath.map(Box::new),
    });
    let started = format!("version {}: started", st.tables.version);
    out.event(Kind::Commit, started);
    fleet::started(st, now, out, fleet_problem);
    kept_started(st, out);
}

/// Once a second: BGP sync, resolution of missing next hops, events for BGP, drops, probes
/// and flood mode, the view, and every ten seconds the totals in the log.
pub(super) fn tick(st: &mut State, now: &Now, out: &mut Out, t: Tick) {
    st.last.ticks += 1;
    let ticks = st.last.ticks;
    sync_bgp(st, now, out);
    let want = neighbours::wanted(&st.config, &st.tables);
    if !want.is_empty() {
        out.push(Effect::Resolve(want));
    }
    peer_events(st, out, &t.peers);
    drop_events(st, now, out, t.drops);
    full_events(st, now, out, t.table_full);
    if ticks.is_multiple_of(5) {
        probe_events(st, out, t.probes_not_run);
    }
    let dp = match t.datapath {
        Ok(s) => Some(s),
        Err(e) => {
            warn!("datapath stats: {e}");
            None
        }
    };
    if let Some(message) = dp
        .as_ref()
        .and_then(|s| flood::transition(&mut st.last.flood, s.steer.flood))
    {
        warn!("{message}");
        out.event(Kind::Flood, message);
        out.push(Effect::FloodMode(st.last.flood.on()));
    }
    out.push(Effect::View {
        datapath: dp.map(Box::new),
    });
    if ticks.is_multiple_of(10) {
        out.push(Effect::LogStats);
    }
}

/// An event for each BGP peer whose state changed since the last tick.
fn peer_events(st: &mut State, out: &mut Out, peers: &[bgp::PeerStatus]) {
    if !st.speaker {
        return;
    }
    for p in peers {
        let before = st.last.peers.insert(p.address, p.state);
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
            out.event(Kind::Bgp, m);
        }
    }
}

/// An event when health probes could not run for a local shortage since the last one:
/// the backends keep their verdicts, and the operator learns why probing lags.
fn probe_events(st: &mut State, out: &mut Out, n: u64) {
    out.count(Counter::ProbesNotRun(n));
    if n > st.last.not_run {
        out.event(
            Kind::Health,
            format!(
                "{} health probes not run: the appliance is short of descriptors, buffers or \
                 local ports (verdicts kept; see sluice_health_probes_not_run_total)",
                n - st.last.not_run
            ),
        );
        st.last.not_run = n;
    }
}

/// An event when the workers dropped [`DROP_SPIKE`] frames or more in the last second,
/// at most one every ten seconds.
fn drop_events(st: &mut State, now: &Now, out: &mut Out, drops: u64) {
    let delta = drops.saturating_sub(st.last.drops);
    st.last.drops = drops;
    if delta >= DROP_SPIKE
        && st
            .last
            .spike
            .is_none_or(|t| now.at.duration_since(t) >= Duration::from_secs(10))
    {
        st.last.spike = Some(now.at);
        out.event(
            Kind::Drops,
            format!(
                "{delta} frames dropped in the last second (see sluice_dropped_packets_total by reason)"
            ),
        );
    }
}

/// An event (at most one each ten seconds) when the connection tables refused new flows,
/// being full of established ones: an operator must hear of it, not find new FullNAT
/// connections failing.
fn full_events(st: &mut State, now: &Now, out: &mut Out, refused: u64) {
    let delta = refused.saturating_sub(st.last.table_full);
    if delta == 0
        || st
            .last
            .full_reported
            .is_some_and(|t| now.at.duration_since(t) < Duration::from_secs(10))
    {
        return;
    }
    st.last.table_full = refused;
    st.last.full_reported = Some(now.at);
    let m = format!(
        "connection table full: {delta} new flows refused since the last report (NAT and \
         DR answered from the ring, FullNAT dropped); raise [appliance] conntrack_capacity \
         (see sluice_conntrack_evicted_total and sluice_stateless_answers_total)"
    );
    warn!("{m}");
    out.event(Kind::Drops, m);
}

/// Routes or neighbours changed: one new version with the new egress and the running core
/// (no ring is rebuilt); the flow-cache entries whose egress changed are evicted by the
/// publication.
pub(super) fn net(st: &mut State, out: &mut Out, events: Vec<NetEvent>) {
    let mut changed = false;
    for ev in events {
        changed |= neighbours::apply(&mut st.next_hops.net, ev);
    }
    if !changed {
        return;
    }
    let tables = commit::build_egress(st);
    debug!(
        version = tables.version,
        "egress: routes or neighbours changed"
    );
    let why = "routes or neighbours changed";
    publish(st, out, tables, why, None);
    stateless(st, out, why);
    out.view();
}

/// SIGTERM or SIGINT: leave the fleet and BGP (routers move traffic away while the
/// datapath still forwards; with graceful restart configured they keep the routes for the
/// next process instead), then detach the datapath.
pub(super) fn terminate(st: &State, out: &mut Out, signal: &str) {
    info!("{signal}: stopping");
    out.push(Effect::Stopping);
    if st.fleet.is_some() {
        out.push(Effect::LeaveFleet);
    }
    if st.speaker {
        let graceful_restart = st
            .config
            .bgp
            .as_ref()
            .is_some_and(|b| b.graceful_restart.is_some());
        out.push(Effect::StopSpeaker { graceful_restart });
    }
    out.push(Effect::Stop);
}
