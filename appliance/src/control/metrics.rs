//! The Prometheus exposition. Every scrape builds a fresh registry from the workers'
//! snapshots and the control state (the counters live in the datapath, not in metric
//! objects), and encodes it with `prometheus-client` in the OpenMetrics text format, which
//! Prometheus scrapes natively. Names follow the Prometheus conventions: a `sluice_`
//! prefix, base units in the name, `_total` on counters.
//!
//! The two numbers Ananta's operators watch first are here: the config sync state
//! (`sluice_config_version`, `sluice_workers_unsynced`, `sluice_config_sync_lag_seconds`)
//! and the hash imbalance per VIP (`sluice_vip_hash_imbalance_ratio`).

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

mod acl;
mod builder;
mod conntrack;
mod fleet;
mod flowsync;
mod lvs;
mod mtu;
mod quic;
mod watch;

use builder::{Builder, Labels, gset, labels, set};

use super::counters::Aggregate;
use super::model::{Shared, View, effective_weight, imbalance, ring_shares};
use crate::config::{Backend, Config, PerBackend, Vip};
use crate::datapath::vipprobe::{FAILURE_LABELS, VipProbeCounters};
use crate::lb::BackendId;
use crate::lb::{DropReason, Tables};

/// The exposition text.
pub fn render(s: &Shared) -> String {
    let mut b = Builder {
        reg: Registry::default(),
    };
    let view = s.view.load();
    let tables = s.published.current();
    let agg = s.aggregate();
    info(&mut b, s, &view);
    config_sync(&mut b, s, &agg);
    datapath(&mut b, &view, &agg);
    watch::families(&mut b, s, &view);
    acl::families(&mut b, &view, &tables);
    conntrack::families(&mut b, &agg);
    mtu::families(&mut b, &agg);
    lvs::families(&mut b, s);
    flood(&mut b, &view);
    quic::families(&mut b, view.config.as_deref(), &agg);
    if let Some(cfg) = &view.config {
        vips(&mut b, cfg, &view, &tables, &agg);
    } else {
        VipFamilies::register(&mut b);
        BackendFamilies::register(&mut b);
    }
    health_commits(&mut b, s);
    bgp(&mut b, &view);
    if let Some(f) = s.fleet.lock().ok().and_then(|f| f.clone()) {
        fleet::families(&mut b, &f);
    }
    if let Some(h) = s.flow_sync.get() {
        flowsync::families(&mut b, h);
    }
    vip_probes(&mut b, &s.counters.vip_probes);
    b.counter1(
        "sluice_events",
        "Events recorded (see /v1/events)",
        s.events.lock().map(|e| e.total()).unwrap_or(0),
    );
    b.counter1(
        "sluice_api_errors",
        "API requests refused with a 4xx status (401 included)",
        s.counters.api_errors.load(Ordering::Relaxed),
    );
    listeners(&mut b, s);
    b.counter1(
        "sluice_overrides_file_errors",
        "Failed reads and writes of the operator overrides file in the state directory \
         (the log says which and why)",
        s.counters.overrides_file_errors.load(Ordering::Relaxed),
    );
    b.counter1(
        "sluice_health_probes_not_run",
        "Health probes not run for a local shortage (descriptors, buffers, ports); verdicts kept",
        s.counters.probes_not_run.load(Ordering::Relaxed),
    );

    let mut out = String::new();
    if let Err(e) = encode(&mut out, &b.reg) {
        tracing::error!("metrics: encoding failed: {e}");
    }
    out
}

/// The API listeners' connections, by listener.
fn listeners(b: &mut Builder, s: &Shared) {
    use super::serve::Which;
    let open = b.gauge(
        "sluice_api_connections",
        "Connections open on each API listener",
    );
    let refused = b.counter(
        "sluice_api_connections_refused",
        "Connections closed at once because the listener was at its connection cap",
    );
    let timed_out = b.counter(
        "sluice_api_connection_timeouts",
        "Connections closed for the header-read or idle timeout",
    );
    let unauthorized = b.counter(
        "sluice_api_connections_unauthorized",
        "TCP API connections closed before taking a slot: no TLS handshake, or a first \
         request that was not HTTP or had no or a wrong bearer token",
    );
    for w in Which::ALL {
        let c = s.counters.listeners.of(w);
        let l = || labels(&[("listener", w.name())]);
        gset(&open, l(), c.open.load(Ordering::Relaxed) as i64);
        set(&refused, l(), c.refused.load(Ordering::Relaxed));
        set(&timed_out, l(), c.timed_out.load(Ordering::Relaxed));
        set(&unauthorized, l(), c.unauthorized.load(Ordering::Relaxed));
    }
}

/// The VIP probes of DR and tunnel backends (`health_via_vip`).
fn vip_probes(b: &mut Builder, c: &VipProbeCounters) {
    b.counter1(
        "sluice_vip_probes_sent",
        "VIP health probes sent to DR and tunnel backends",
        c.sent.load(Ordering::Relaxed),
    );
    b.counter1(
        "sluice_vip_probes_passed",
        "VIP health probes the backend answered from the VIP",
        c.passed.load(Ordering::Relaxed),
    );
    let failed = b.counter(
        "sluice_vip_probes_failed",
        "VIP health probes failed, by reason",
    );
    for (label, n) in FAILURE_LABELS.iter().zip(&c.failed) {
        set(
            &failed,
            labels(&[("reason", label)]),
            n.load(Ordering::Relaxed),
        );
    }
}

/// Who is answering and for how long.
fn info(b: &mut Builder, s: &Shared, view: &View) {
    let info = b.gauge("sluice_info", "Appliance name and release (always 1)");
    let name = view
        .config
        .as_ref()
        .map(|c| c.appliance.name.clone())
        .unwrap_or_default();
    gset(
        &info,
        labels(&[("appliance", &name), ("release", env!("CARGO_PKG_VERSION"))]),
        1,
    );
    b.gauge1(
        "sluice_uptime_seconds",
        "Seconds since sluice run started",
        s.started.elapsed().as_secs() as i64,
    );
}

/// Config versions and table sync: whether every worker runs what was published.
fn config_sync(b: &mut Builder, s: &Shared, agg: &Aggregate) {
    let version = s.published.version();
    b.gauge1(
        "sluice_config_version",
        "Table version the control plane published last",
        version as i64,
    );
    let wv = b.gauge(
        "sluice_worker_config_version",
        "Table version each datapath worker runs",
    );
    for (i, v) in agg.running.iter().enumerate() {
        gset(&wv, labels(&[("worker", &i.to_string())]), *v as i64);
    }
    b.gauge1(
        "sluice_workers_unsynced",
        "Workers not yet running the latest table version",
        agg.running.iter().filter(|v| **v < version).count() as i64,
    );
    // Absent until the last commit has reached every worker.
    if let Ok(sync) = s.sync.lock()
        && let Some(l) = sync.lag
    {
        let g = Gauge::<f64, AtomicU64>::default();
        g.set(l.as_secs_f64());
        b.reg.register(
            "sluice_config_sync_lag_seconds",
            "Time the last commit took to reach every worker",
            g,
        );
    }
    b.counter1(
        "sluice_config_reloads_rejected",
        "Reloads rejected (validation or table build); the running version stayed",
        s.counters.reloads_rejected.load(Ordering::Relaxed),
    );
}

/// Health transitions, the versions their batches made, and the last one's sync lag.
fn health_commits(b: &mut Builder, s: &Shared) {
    b.counter1(
        "sluice_health_transitions",
        "Health transitions received from the prober (each also in the event log)",
        s.counters.health.transitions.load(Ordering::Relaxed),
    );
    b.counter1(
        "sluice_health_commits",
        "Table versions committed for batches of health transitions ([appliance] health_batch)",
        s.counters.health.commits.load(Ordering::Relaxed),
    );
    // Absent until a health version has reached every worker.
    if let Ok(lag) = s.counters.health.lag.lock()
        && let Some(l) = *lag
    {
        let g = Gauge::<f64, AtomicU64>::default();
        g.set(l.as_secs_f64());
        b.reg.register(
            "sluice_health_sync_lag_seconds",
            "From the first health transition of the last health version to every worker running it",
            g,
        );
    }
}

/// Datapath totals: frames in, out, passed and dropped, and the connection tables.
fn datapath(b: &mut Builder, view: &View, agg: &Aggregate) {
    let (rx, tx) = view.datapath.as_ref().map_or((0, 0), |d| {
        (
            d.workers.iter().map(|w| w.rx).sum(),
            d.workers.iter().map(|w| w.tx).sum(),
        )
    });
    b.counter1("sluice_rx_packets", "Frames the workers received", rx);
    b.counter1("sluice_tx_packets", "Frames the workers transmitted", tx);
    b.counter1(
        "sluice_passed_packets",
        "Frames handed to the kernel (not load-balanced)",
        agg.stats.passed,
    );
    let drops = b.counter("sluice_dropped_packets", "Frames dropped, by reason");
    for (r, n) in DropReason::ALL.iter().zip(agg.drops) {
        set(&drops, labels(&[("reason", r.name())]), n);
    }
    b.gauge1(
        "sluice_conntrack_entries",
        "Connection-table entries over all workers",
        agg.conntrack_entries as i64,
    );
    b.gauge1(
        "sluice_conntrack_capacity_entries",
        "Connection-table capacity over all workers",
        agg.conntrack_capacity as i64,
    );
    b.counter1(
        "sluice_conntrack_fallbacks",
        "New flows answered from the Maglev ring because a connection table was full",
        agg.stats.conntrack_fallback,
    );
    b.counter1(
        "sluice_flows_rechosen",
        "Flows whose backend went away (disabled, unhealthy, removed) and were re-chosen",
        agg.stats.rechosen,
    );
    b.counter1(
        "sluice_flows_reopened",
        "SYNs on a closed connection's tuple, or of an unanswered handshake to a backend that takes no new connections, scheduled anew",
        agg.stats.reopened,
    );
}

/// Flood mode (`[flood]`): the XDP program's counters and how many CPUs are in the mode.
fn flood(b: &mut Builder, view: &View) {
    let f = view
        .datapath
        .as_ref()
        .map(|d| d.steer.flood)
        .unwrap_or_default();
    b.gauge1(
        "sluice_flood_active_cpus",
        "CPUs in flood mode now (0: off)",
        i64::from(f.active_cpus),
    );
    b.counter1(
        "sluice_flood_first_packets",
        "VIP frames that may open a flow, seen by the XDP program",
        f.first,
    );
    b.counter1(
        "sluice_flood_admitted_packets",
        "First packets passed on in flood mode (their source inside its rate)",
        f.admitted,
    );
    b.counter1(
        "sluice_flood_shed_packets",
        "First packets dropped in XDP in flood mode (their source over its rate)",
        f.shed,
    );
    let sw = b.counter(
        "sluice_flood_switches",
        "Times a CPU switched flood mode on or off",
    );
    set(&sw, labels(&[("to", "on")]), f.switched_on);
    set(&sw, labels(&[("to", "off")]), f.switched_off);
    b.counter1(
        "sluice_flood_no_room_packets",
        "First packets let through in flood mode because the bucket map was full",
        f.no_room,
    );
    b.counter1(
        "sluice_flood_refunded_flows",
        "Flows that proved themselves in flood mode and paid their source's tokens back",
        f.refunded,
    );
    b.counter1(
        "sluice_flood_stateless_packets",
        "First packets of DR VIPs answered in XDP from the VIP's ring, without state, in flood mode",
        f.stateless,
    );
}

/// The per-VIP families, labelled `vip`.
struct VipFamilies {
    packets: Family<Labels, Counter>,
    bytes: Family<Labels, Counter>,
    new_flows: Family<Labels, Counter>,
    active_flows: Family<Labels, Gauge>,
    announced: Family<Labels, Gauge>,
    eligible: Family<Labels, Gauge>,
    imbalance: Family<Labels, Gauge<f64, AtomicU64>>,
    tenant_vni: Family<Labels, Gauge>,
}

impl VipFamilies {
    fn register(b: &mut Builder) -> VipFamilies {
        VipFamilies {
            packets: b.counter("sluice_vip_packets", "Packets of a VIP (both directions)"),
            bytes: b.counter("sluice_vip_bytes", "Bytes of a VIP (both directions)"),
            new_flows: b.counter("sluice_vip_new_flows", "New flows of a VIP"),
            active_flows: b.gauge(
                "sluice_vip_active_flows",
                "Connection-table entries of a VIP",
            ),
            announced: b.gauge(
                "sluice_vip_announced",
                "1 while the VIP's address is announced over BGP",
            ),
            eligible: b.gauge(
                "sluice_vip_backends_eligible",
                "Backends that may take new flows",
            ),
            imbalance: b.fgauge(
                "sluice_vip_hash_imbalance_ratio",
                "Largest Maglev ring share of an eligible backend over its ideal (weighted) share",
            ),
            tenant_vni: b.gauge(
                "sluice_vip_tenant_vni",
                "The VXLAN VNI of a tenant VIP's network (tenant_vni); no series for the \
                 underlay's VIPs. Tenants may reuse an address: the vip label tells them apart",
            ),
        }
    }
}

/// The per-backend families, labelled `vip` and `backend`.
struct BackendFamilies {
    packets: Family<Labels, Counter>,
    bytes: Family<Labels, Counter>,
    new_flows: Family<Labels, Counter>,
    active_flows: Family<Labels, Gauge>,
    healthy: Family<Labels, Gauge>,
    eligible: Family<Labels, Gauge>,
    weight: Family<Labels, Gauge>,
    ramping: Family<Labels, Gauge>,
    ring_share: Family<Labels, Gauge<f64, AtomicU64>>,
}

impl BackendFamilies {
    fn register(b: &mut Builder) -> BackendFamilies {
        BackendFamilies {
            packets: b.counter("sluice_backend_packets", "Packets to and from a backend"),
            bytes: b.counter("sluice_backend_bytes", "Bytes to and from a backend"),
            new_flows: b.counter(
                "sluice_backend_new_flows",
                "New flows scheduled to a backend (ipvsadm's Conns)",
            ),
            active_flows: b.gauge(
                "sluice_backend_active_flows",
                "Connection-table entries pointing at a backend",
            ),
            healthy: b.gauge(
                "sluice_backend_healthy",
                "1 when the prober finds the backend up (or it has no check), 0 otherwise",
            ),
            eligible: b.gauge(
                "sluice_backend_eligible",
                "1 when the backend may take new flows (healthy, active, weight > 0)",
            ),
            weight: b.gauge(
                "sluice_backend_weight",
                "Effective weight of a backend (lower than its configured weight while slow start ramps it)",
            ),
            ramping: b.gauge(
                "sluice_backend_slow_start_ramping",
                "1 while slow start ramps the backend's weight up to its configured weight",
            ),
            ring_share: b.fgauge(
                "sluice_backend_ring_share_ratio",
                "Share of the VIP's Maglev ring the backend holds",
            ),
        }
    }
}

/// Per VIP and backend of the running config: traffic, flows, health and ring shares.
fn vips(b: &mut Builder, cfg: &Config, view: &View, tables: &Tables, agg: &Aggregate) {
    let vf = VipFamilies::register(b);
    let bf = BackendFamilies::register(b);
    let shown = Shown::pick(cfg, agg);
    for (slot, v) in cfg.vips.iter().enumerate() {
        let vl = labels(&[("vip", &v.name)]);
        let t = agg.vips.get(&v.name).copied().unwrap_or_default();
        set(&vf.packets, vl.clone(), t.packets);
        set(&vf.bytes, vl.clone(), t.bytes);
        set(&vf.new_flows, vl.clone(), t.new_flows);
        gset(
            &vf.active_flows,
            vl.clone(),
            agg.vip_flows.get(&v.name).copied().unwrap_or(0) as i64,
        );
        // A tenant's address is never announced; an underlay VIP's on it is not this one's.
        let announced = v.tenant_vni.is_none() && view.announced.contains(&v.address);
        gset(&vf.announced, vl.clone(), i64::from(announced));
        if let Some(vni) = v.tenant_vni {
            gset(&vf.tenant_vni, vl.clone(), i64::from(vni));
        }
        let shares = ring_shares(tables, slot);
        gset(
            &vf.eligible,
            vl.clone(),
            shares.iter().filter(|s| s.2).count() as i64,
        );
        if let Some(r) = imbalance(&shares) {
            vf.imbalance.get_or_create(&vl).set(r);
        }
        for (i, bk) in v.backends.iter().enumerate() {
            if !shown.shows(slot, i) {
                continue;
            }
            let share = shares.get(i).copied().unwrap_or((0.0, 0.0, false));
            let weight = effective_weight(tables, slot, i);
            backend(&bf, v, bk, (share, weight), view, agg);
        }
    }
    b.gauge1(
        "sluice_backend_series_omitted",
        "Backends without their own series ([metrics] per_backend); their VIP's series count them",
        shown.omitted as i64,
    );
}

/// Which backends get their own series under `[metrics] per_backend`.
struct Shown {
    /// `None`: every backend; else the (VIP slot, backend position) pairs shown.
    only: Option<std::collections::HashSet<(usize, usize)>>,
    omitted: usize,
}

impl Shown {
    /// `all`, `none`, or the `n` backends with the most packets (ties by config order).
    fn pick(cfg: &Config, agg: &Aggregate) -> Shown {
        let total: usize = cfg.vips.iter().map(|v| v.backends.len()).sum();
        let n = match cfg.metrics.per_backend {
            PerBackend::All => {
                return Shown {
                    only: None,
                    omitted: 0,
                };
            }
            PerBackend::None => 0,
            PerBackend::Top(n) => n as usize,
        };
        let mut all: Vec<(u64, usize, usize)> = Vec::with_capacity(total);
        for (slot, v) in cfg.vips.iter().enumerate() {
            for (i, bk) in v.backends.iter().enumerate() {
                let p = agg
                    .backends
                    .get(&BackendId::of(v, bk))
                    .map_or(0, |t| t.packets);
                all.push((p, slot, i));
            }
        }
        if n < all.len() {
            all.select_nth_unstable_by(n, |a, b| b.0.cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
            all.truncate(n);
        }
        Shown {
            omitted: total - all.len(),
            only: Some(all.into_iter().map(|(_, s, i)| (s, i)).collect()),
        }
    }

    fn shows(&self, slot: usize, i: usize) -> bool {
        self.only.as_ref().is_none_or(|o| o.contains(&(slot, i)))
    }
}

/// One backend's samples; `share` is its entry of [`ring_shares`], with its weight in the
/// tables.
fn backend(
    bf: &BackendFamilies,
    v: &Vip,
    bk: &Backend,
    (share, weight): ((f64, f64, bool), u32),
    view: &View,
    agg: &Aggregate,
) {
    let id = std::net::SocketAddr::new(bk.address, bk.port).to_string();
    let l = labels(&[("vip", &v.name), ("backend", &id)]);
    let key = BackendId::of(v, bk);
    let t = agg.backends.get(&key).copied().unwrap_or_default();
    set(&bf.packets, l.clone(), t.packets);
    set(&bf.bytes, l.clone(), t.bytes);
    set(&bf.new_flows, l.clone(), t.new_flows);
    gset(
        &bf.active_flows,
        l.clone(),
        agg.backend_flows.get(&key).copied().unwrap_or(0) as i64,
    );
    let healthy =
        v.checks_of(bk).is_empty() || view.health.get(&key).is_some_and(|h| h.state == "up");
    gset(&bf.healthy, l.clone(), i64::from(healthy));
    let (share, _, eligible) = share;
    gset(&bf.eligible, l.clone(), i64::from(eligible));
    gset(&bf.weight, l.clone(), i64::from(weight));
    gset(
        &bf.ramping,
        l.clone(),
        i64::from(view.ramps.contains_key(&key)),
    );
    bf.ring_share.get_or_create(&l).set(share);
}

/// BGP sessions and their BFD, per peer, and the prefixes announced.
fn bgp(b: &mut Builder, view: &View) {
    let est = b.gauge(
        "sluice_bgp_session_established",
        "1 while the BGP session with the peer is Established",
    );
    let pa = b.gauge(
        "sluice_bgp_peer_prefixes_announced",
        "Prefixes advertised to the peer",
    );
    let flaps = b.counter(
        "sluice_bgp_session_flaps",
        "Times the session with the peer left Established",
    );
    let bfd_up = b.gauge(
        "sluice_bgp_bfd_up",
        "1 while the BFD session with the peer is Up (only peers with BFD)",
    );
    let bfd_resets = b.counter(
        "sluice_bgp_bfd_session_resets",
        "BGP sessions BFD took down (Up to Down while Established)",
    );
    let bfd_discards = b.counter(
        "sluice_bgp_bfd_discarded_packets",
        "BFD control packets dropped, by reason",
    );
    for p in &view.peers {
        let peer = p.address.to_string();
        if let Some(bfd) = &p.bfd {
            let l = labels(&[("peer", &peer)]);
            gset(&bfd_up, l.clone(), i64::from(bfd.state.name() == "up"));
            set(&bfd_resets, l, bfd.bgp_resets);
            for (reason, n) in bfd.discards.iter() {
                set(
                    &bfd_discards,
                    labels(&[("peer", &peer), ("reason", reason)]),
                    n,
                );
            }
        }
    }
    for p in &view.peers {
        let l = labels(&[("peer", &p.address.to_string())]);
        gset(
            &est,
            l.clone(),
            i64::from(matches!(p.state, bgp::State::Established)),
        );
        gset(&pa, l.clone(), p.prefixes_announced as i64);
        set(&flaps, l, p.flaps);
    }
    b.gauge1(
        "sluice_bgp_announced_prefixes",
        "VIP prefixes the appliance announces",
        view.announced.len() as i64,
    );
}

#[cfg(test)]
pub(super) mod tests {
    //! The exposition of one fixed control state, byte for byte: the families, their order,
    //! labels and values are what dashboards and alerts are written against.

    use std::collections::HashMap;
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use arc_swap::ArcSwap;

    use super::super::counters::{Counters, HealthStats, WorkerView};
    use super::super::events::{EventRing, Kind};
    use super::super::model::{HealthView, Shared, Sync, View};
    use super::render;
    use crate::config::PerBackend;
    use crate::datapath::{DatapathStats, FloodCounters, RingStats, SteerCounters};
    use crate::engine::{BackendTotals, CounterSnapshot, Published};
    use crate::lb::BackendId;
    use crate::lb::Tables;

    const CONFIG: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]
maglev_table_size = 251

[[health_check]]
name = "web"
kind = "tcp"

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
health_check = "web"

[[vip.backend]]
address = "10.1.0.11"

[[vip.backend]]
address = "10.1.0.12"
weight = 50

[[vip]]
name = "dns"
address = "192.0.2.53"
port = 53
protocol = "udp"

[[vip.backend]]
address = "10.1.0.21"
"#;

    fn peer(address: &str, state: bgp::State, bfd: Option<bgp::BfdStatus>) -> bgp::PeerStatus {
        bgp::PeerStatus {
            address: address.parse().unwrap(),
            asn: 65000,
            state,
            established_since: None,
            uptime: None,
            prefixes_announced: 1,
            prefixes_received: 0,
            last_error: None,
            messages_in: 10,
            messages_out: 11,
            decode_errors: 0,
            treat_as_withdraw: 0,
            flaps: 2,
            unsendable_routes: 0,
            bfd,
        }
    }

    /// Two tenants' VIPs on web's address and port (which is announced), appended to
    /// [`CONFIG`] so web and dns keep their slots and counters.
    pub(crate) const TENANTS: &str = r#"
[[vip]]
name = "t100"
address = "192.0.2.10"
port = 80
tenant_vni = 100
mode = "tunnel"
tunnel = "vxlan"
backend = [{ address = "10.1.0.11", vtep = "10.9.0.1" }]

[[vip]]
name = "t200"
address = "192.0.2.10"
port = 80
tenant_vni = 200
mode = "tunnel"
tunnel = "vxlan"
backend = [{ address = "10.1.0.11", vtep = "10.9.0.2" }]
"#;

    /// A `Shared` with a fixed state (also for the API's tests).
    pub(crate) fn shared() -> Shared {
        shared_with("")
    }

    /// [`shared`] with `more` (VIPs) appended to its config.
    pub(crate) fn shared_with(more: &str) -> Shared {
        let text = format!("{CONFIG}{more}");
        let config = Arc::new(testkit::unit::parse(&text));
        let web = &config.vips[0];
        let tables = Arc::new(Tables::build(&config, &|_, _| true, 3).expect("tables"));
        let mut snap = CounterSnapshot {
            version: 3,
            tables: Some(Arc::clone(&tables)),
            vip_packets: vec![100, 7],
            vip_bytes: vec![64_000, 700],
            vip_new_flows: vec![10, 3],
            backend_packets: vec![60, 40, 7],
            backend_bytes: vec![38_000, 26_000, 700],
            backend_new_flows: vec![6, 4, 3],
            backend_flows: vec![(4, 1), (2, 0), (1, 1)],
            conntrack_len: 9,
            conntrack_capacity: 1024,
            ..CounterSnapshot::default()
        };
        snap.drops[0] = 5;
        snap.drops[2] = 1;
        snap.stats.passed = 12;
        snap.stats.conntrack_fallback = 1;
        snap.stats.stateless_no_entry = 7;
        snap.stats.icmp_rate_limited = 2;
        snap.stats.proxy_headers = 3;
        snap.conntrack.promoted = 4;
        snap.conntrack.evicted_embryonic = 6;
        snap.conntrack_fill = [3, 2, 1, 0, 5, 4];
        snap.stats.rechosen = 2;
        snap.stats.reopened = 3;
        snap.retired_backends.insert(
            BackendId::new(&web.name, web.backends[0].address, 80),
            BackendTotals {
                packets: 3,
                bytes: 300,
                new_flows: 1,
            },
        );
        let workers = vec![
            WorkerView {
                snapshot: Arc::new(Mutex::new(snap)),
                running: Arc::new(AtomicU64::new(3)),
            },
            WorkerView {
                snapshot: Arc::new(Mutex::new(CounterSnapshot {
                    conntrack_capacity: 1024,
                    ..CounterSnapshot::default()
                })),
                running: Arc::new(AtomicU64::new(2)),
            },
        ];
        let mut health = HashMap::new();
        for (i, state) in ["up", "down"].into_iter().enumerate() {
            let b = &web.backends[i];
            health.insert(
                BackendId::of(web, b),
                HealthView {
                    state,
                    reason: None,
                },
            );
        }
        let mut bfd = bgp::BfdStatus {
            bgp_resets: 1,
            ..bgp::BfdStatus::default()
        };
        bfd.discards.bad_ttl = 4;
        let view = View {
            health,
            announced: [web.address].into_iter().collect(),
            peers: vec![
                peer("192.0.2.1", bgp::State::Established, Some(bfd)),
                peer("192.0.2.2", bgp::State::Active, None),
            ],
            datapath: Some(DatapathStats {
                workers: vec![
                    RingStats {
                        rx: 150,
                        tx: 140,
                        ..RingStats::default()
                    },
                    RingStats {
                        rx: 5,
                        tx: 4,
                        ..RingStats::default()
                    },
                ],
                interfaces: Vec::new(),
                steer: SteerCounters {
                    flood: FloodCounters {
                        first: 9000,
                        admitted: 300,
                        shed: 8000,
                        switched_on: 3,
                        switched_off: 2,
                        no_room: 1,
                        refunded: 6,
                        stateless: 70,
                        active_cpus: 1,
                    },
                    ..SteerCounters::default()
                },
                acl_drops: Vec::new(),
            }),
            config: Some(Arc::clone(&config)),
            ..View::default()
        };
        let mut events = EventRing::default();
        events.push(Kind::Reload, "one");
        events.push(Kind::Reload, "two");
        let published = Arc::new(Published::new(Arc::unwrap_or_clone(tables)));
        Shared {
            started: Instant::now(),
            config_path: "/etc/sluice/sluice.toml".into(),
            published,
            workers: Mutex::new(workers),
            view: ArcSwap::from_pointee(view),
            events: Mutex::new(events),
            sync: Mutex::new(Sync {
                version: 3,
                published_at: Instant::now(),
                lag: Some(Duration::from_millis(1500)),
                health_since: None,
            }),
            sync_changed: tokio::sync::Notify::new(),
            commands: tokio::sync::mpsc::channel(1).0,
            fleet: Default::default(),
            takeover: Default::default(),
            capture: Default::default(),
            flow_sync: Default::default(),
            flow_cache: None,
            counters: Counters {
                api_errors: AtomicU64::new(4),
                probes_not_run: AtomicU64::new(0),
                listeners: Default::default(),
                reloads_rejected: AtomicU64::new(1),
                datapath_watch: Default::default(),
                health: {
                    let h = HealthStats::default();
                    h.transitions.store(5, std::sync::atomic::Ordering::Relaxed);
                    h.commits.store(2, std::sync::atomic::Ordering::Relaxed);
                    *h.lag.lock().expect("fresh") = Some(Duration::from_millis(40));
                    h
                },
                overrides_file_errors: AtomicU64::new(0),
                vip_probes: {
                    let c = crate::datapath::vipprobe::VipProbeCounters::default();
                    c.sent.store(5, std::sync::atomic::Ordering::Relaxed);
                    c.passed.store(3, std::sync::atomic::Ordering::Relaxed);
                    c.failed[0].store(2, std::sync::atomic::Ordering::Relaxed);
                    Arc::new(c)
                },
            },
        }
    }

    /// `render`, normalised where a fixed input cannot fix the text: the uptime and release
    /// are masked, and the samples within each family are sorted (prometheus-client keeps a
    /// family's samples in a `HashMap`, so their order differs from one scrape to the next).
    /// Everything else (family order, HELP and TYPE lines, names, labels, values) is compared
    /// byte for byte.
    fn rendered() -> String {
        let release = format!("release=\"{}\"", env!("CARGO_PKG_VERSION"));
        let text = render(&shared()).replace(&release, "release=\"RELEASE\"");
        let mut out = Vec::new();
        let mut samples: Vec<String> = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') {
                samples.sort();
                out.append(&mut samples);
                out.push(line.to_string());
            } else if line.starts_with("sluice_uptime_seconds ") {
                samples.push("sluice_uptime_seconds UPTIME".to_string());
            } else {
                samples.push(line.to_string());
            }
        }
        samples.sort();
        out.append(&mut samples);
        out.join("\n") + "\n"
    }

    /// The backend series under `[metrics] per_backend` = `n` (`None` for "none").
    fn backend_series(limit: PerBackend) -> (Vec<String>, String) {
        let s = shared();
        let mut view = (**s.view.load()).clone();
        let mut cfg = (**view.config.as_ref().expect("a config")).clone();
        cfg.metrics.per_backend = limit;
        view.config = Some(Arc::new(cfg));
        s.view.store(Arc::new(view));
        let text = render(&s);
        let series = text
            .lines()
            .filter(|l| l.starts_with("sluice_backend_packets_total{"))
            .map(str::to_string)
            .collect();
        let omitted = text
            .lines()
            .find(|l| l.starts_with("sluice_backend_series_omitted "))
            .expect("the omitted gauge")
            .to_string();
        (series, omitted)
    }

    #[test]
    fn per_backend_limits_the_backend_series_to_the_busiest() {
        let (all, omitted) = backend_series(PerBackend::All);
        assert_eq!(
            (all.len(), omitted.as_str()),
            (3, "sluice_backend_series_omitted 0")
        );
        let (none, omitted) = backend_series(PerBackend::None);
        assert!(none.is_empty(), "{none:?}");
        assert_eq!(omitted, "sluice_backend_series_omitted 3");
        let (top, omitted) = backend_series(PerBackend::Top(2));
        assert_eq!(omitted, "sluice_backend_series_omitted 1");
        let mut top = top;
        top.sort();
        assert_eq!(
            top,
            [
                "sluice_backend_packets_total{vip=\"web\",backend=\"10.1.0.11:80\"} 63",
                "sluice_backend_packets_total{vip=\"web\",backend=\"10.1.0.12:80\"} 40",
            ],
            "the two busiest backends; the dns one (7 packets) is left to its VIP's series"
        );
        let (big, _) = backend_series(PerBackend::Top(10));
        assert_eq!(big.len(), 3);
    }

    /// A tenant VIP's VNI is its own gauge; it is not announced although an underlay VIP
    /// on its address is; the API documents carry the VNI and the backends' VTEPs.
    #[test]
    fn tenant_vips_export_their_vni() {
        let s = shared_with(TENANTS);
        let text = render(&s);
        let has = |l: &str| text.lines().any(|x| x == l);
        for l in [
            "sluice_vip_tenant_vni{vip=\"t100\"} 100",
            "sluice_vip_tenant_vni{vip=\"t200\"} 200",
            "sluice_vip_announced{vip=\"t100\"} 0",
            "sluice_vip_announced{vip=\"web\"} 1",
            "# TYPE sluice_vip_tenant_vni gauge",
        ] {
            assert!(has(l), "{l} missing from\n{text}");
        }
        assert!(
            !text.contains("sluice_vip_tenant_vni{vip=\"web\"}"),
            "no series for an underlay VIP"
        );
        let vips = s.vips();
        let by = |n: &str| vips.iter().find(|v| v.name == n).expect("the VIP");
        assert_eq!(by("web").tenant_vni, None);
        assert!(by("web").announced);
        let t = by("t200");
        assert_eq!((t.tenant_vni, t.announced), (Some(200), false));
        assert_eq!(s.vip("t100").and_then(|v| v.tenant_vni), Some(100));
        let json = serde_json::to_value(&vips).expect("json");
        assert!(json[0].get("tenant_vni").is_none(), "omitted: {}", json[0]);
        let b = s.backends("t200").expect("t200's backends");
        assert_eq!(b[0].address, "10.1.0.11");
        assert_eq!(b[0].vtep.as_deref(), Some("10.9.0.2"));
        let w = s.backends("web").expect("web's backends");
        assert_eq!(w[0].vtep, None);
        assert!(
            serde_json::to_value(&w[0])
                .expect("json")
                .get("vtep")
                .is_none()
        );
    }

    /// Every series the Grafana dashboard (docs/grafana) and the alert rules
    /// (docs/prometheus) name is one the appliance exports, a fleet member's families
    /// included: a renamed metric fails here, not on an operator's empty graph.
    #[test]
    fn the_dashboard_and_the_alert_rules_read_exported_series() {
        let s = shared();
        *s.fleet.lock().expect("fresh") = Some(api::FleetStatus {
            fleet: "edge".into(),
            member: "lb1".into(),
            members: vec![api::FleetMember {
                name: "lb1".into(),
                prepared: 3,
                readiness: "ready".into(),
                running: 3,
                sync_lag_ms: Some(4),
                error: None,
                table_fingerprint: String::new(),
            }],
            disagreements: vec![api::Disagreement {
                backend: "web/10.1.0.11:80".into(),
                fleet_up: true,
                up_votes: 2,
                down_votes: 1,
                members: vec!["lb1".into()],
            }],
            ..Default::default()
        });
        let text = render(&s);
        let mut exported = std::collections::BTreeSet::new();
        for l in text.lines() {
            let Some(rest) = l.strip_prefix("# TYPE ") else {
                continue;
            };
            match rest.split_once(' ') {
                Some((name, "counter")) => exported.insert(format!("{name}_total")),
                Some((name, _)) => exported.insert(name.to_string()),
                None => false,
            };
        }
        assert!(exported.contains("sluice_fleet_stale"), "{exported:?}");
        for (file, doc) in [
            (
                "docs/grafana/sluice.json",
                include_str!("../../../docs/grafana/sluice.json"),
            ),
            (
                "docs/prometheus/sluice.rules.yml",
                include_str!("../../../docs/prometheus/sluice.rules.yml"),
            ),
        ] {
            let named: std::collections::BTreeSet<&str> = doc
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("sluice_"))
                .collect();
            assert!(
                named.len() > 8,
                "{file} names the metrics it reads: {named:?}"
            );
            let unknown: Vec<&&str> = named.iter().filter(|n| !exported.contains(**n)).collect();
            assert!(
                unknown.is_empty(),
                "{file} reads {unknown:?}, which are not exported"
            );
        }
    }

    /// The manual's reference explains every metric family and every drop reason the
    /// appliance exports (a fleet member's families included).
    #[test]
    fn the_reference_explains_every_metric_and_drop_reason() {
        let reference = include_str!("../../../docs/manual/reference.md");
        let s = shared();
        *s.fleet.lock().expect("fresh") = Some(api::FleetStatus::default());
        let text = render(&s);
        let families = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next());
        let reasons = crate::lb::DropReason::ALL.iter().map(|r| r.name());
        let missing: Vec<&str> = families
            .chain(reasons)
            .filter(|n| !reference.contains(&format!("| `{n}` |")))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/manual/reference.md has no row for {missing:?}"
        );
    }

    #[test]
    fn renders_a_fixed_state_byte_for_byte() {
        let got = rendered();
        if got != EXPECTED {
            panic!("exposition differs; got:\n{got}");
        }
    }

    /// The exposition of [`shared`]: what dashboards and alerts read, so a change here is a
    /// change operators see.
    const EXPECTED: &str = r##"# HELP sluice_info Appliance name and release (always 1).
# TYPE sluice_info gauge
sluice_info{appliance="lb1",release="RELEASE"} 1
# HELP sluice_uptime_seconds Seconds since sluice run started.
# TYPE sluice_uptime_seconds gauge
sluice_uptime_seconds UPTIME
# HELP sluice_config_version Table version the control plane published last.
# TYPE sluice_config_version gauge
sluice_config_version 3
# HELP sluice_worker_config_version Table version each datapath worker runs.
# TYPE sluice_worker_config_version gauge
sluice_worker_config_version{worker="0"} 3
sluice_worker_config_version{worker="1"} 2
# HELP sluice_workers_unsynced Workers not yet running the latest table version.
# TYPE sluice_workers_unsynced gauge
sluice_workers_unsynced 1
# HELP sluice_config_sync_lag_seconds Time the last commit took to reach every worker.
# TYPE sluice_config_sync_lag_seconds gauge
sluice_config_sync_lag_seconds 1.5
# HELP sluice_config_reloads_rejected Reloads rejected (validation or table build); the running version stayed.
# TYPE sluice_config_reloads_rejected counter
sluice_config_reloads_rejected_total 1
# HELP sluice_rx_packets Frames the workers received.
# TYPE sluice_rx_packets counter
sluice_rx_packets_total 155
# HELP sluice_tx_packets Frames the workers transmitted.
# TYPE sluice_tx_packets counter
sluice_tx_packets_total 144
# HELP sluice_passed_packets Frames handed to the kernel (not load-balanced).
# TYPE sluice_passed_packets counter
sluice_passed_packets_total 12
# HELP sluice_dropped_packets Frames dropped, by reason.
# TYPE sluice_dropped_packets counter
sluice_dropped_packets_total{reason="bad_checksum"} 0
sluice_dropped_packets_total{reason="bad_length"} 1
sluice_dropped_packets_total{reason="denied"} 0
sluice_dropped_packets_total{reason="family_mismatch"} 0
sluice_dropped_packets_total{reason="fragment_ambiguous"} 0
sluice_dropped_packets_total{reason="fragment_no_first"} 0
sluice_dropped_packets_total{reason="fragment_overlap"} 0
sluice_dropped_packets_total{reason="fragment_oversize"} 0
sluice_dropped_packets_total{reason="icmp_no_flow"} 0
sluice_dropped_packets_total{reason="icmp_rate_limited"} 0
sluice_dropped_packets_total{reason="malformed"} 0
sluice_dropped_packets_total{reason="no_backend"} 0
sluice_dropped_packets_total{reason="no_flow"} 0
sluice_dropped_packets_total{reason="no_neighbor"} 0
sluice_dropped_packets_total{reason="no_room"} 0
sluice_dropped_packets_total{reason="no_route"} 0
sluice_dropped_packets_total{reason="overflow"} 0
sluice_dropped_packets_total{reason="proxy_opening"} 0
sluice_dropped_packets_total{reason="route_not_datapath"} 0
sluice_dropped_packets_total{reason="snat_exhausted"} 0
sluice_dropped_packets_total{reason="too_big"} 0
sluice_dropped_packets_total{reason="too_many_headers"} 0
sluice_dropped_packets_total{reason="truncated"} 5
sluice_dropped_packets_total{reason="ttl_exceeded"} 0
# HELP sluice_conntrack_entries Connection-table entries over all workers.
# TYPE sluice_conntrack_entries gauge
sluice_conntrack_entries 9
# HELP sluice_conntrack_capacity_entries Connection-table capacity over all workers.
# TYPE sluice_conntrack_capacity_entries gauge
sluice_conntrack_capacity_entries 2048
# HELP sluice_conntrack_fallbacks New flows answered from the Maglev ring because a connection table was full.
# TYPE sluice_conntrack_fallbacks counter
sluice_conntrack_fallbacks_total 1
# HELP sluice_flows_rechosen Flows whose backend went away (disabled, unhealthy, removed) and were re-chosen.
# TYPE sluice_flows_rechosen counter
sluice_flows_rechosen_total 2
# HELP sluice_flows_reopened SYNs on a closed connection's tuple, or of an unanswered handshake to a backend that takes no new connections, scheduled anew.
# TYPE sluice_flows_reopened counter
sluice_flows_reopened_total 3
# HELP sluice_datapath_watch_events What the datapath watch did (reattached, rebound, reclaimed) or saw an interface become (forwarding, link_down, detached, foreign, unbound, missing).
# TYPE sluice_datapath_watch_events counter
sluice_datapath_watch_events_total{event="detached"} 0
sluice_datapath_watch_events_total{event="foreign"} 0
sluice_datapath_watch_events_total{event="forwarding"} 0
sluice_datapath_watch_events_total{event="link_down"} 0
sluice_datapath_watch_events_total{event="missing"} 0
sluice_datapath_watch_events_total{event="reattached"} 0
sluice_datapath_watch_events_total{event="rebound"} 0
sluice_datapath_watch_events_total{event="reclaimed"} 0
sluice_datapath_watch_events_total{event="unbound"} 0
# HELP sluice_conntrack_state_entries Connection-table entries by state (syn and udp_new are embryonic; udp_oneway is reclaimed after them), over all workers.
# TYPE sluice_conntrack_state_entries gauge
sluice_conntrack_state_entries{state="closing"} 1
sluice_conntrack_state_entries{state="established"} 2
sluice_conntrack_state_entries{state="syn"} 3
sluice_conntrack_state_entries{state="udp"} 0
sluice_conntrack_state_entries{state="udp_new"} 5
sluice_conntrack_state_entries{state="udp_oneway"} 4
# HELP sluice_conntrack_inserted Connection-table entries created (embryonic, but for re-chosen flows).
# TYPE sluice_conntrack_inserted counter
sluice_conntrack_inserted_total 0
# HELP sluice_conntrack_promoted Embryonic connection-table entries promoted to established.
# TYPE sluice_conntrack_promoted counter
sluice_conntrack_promoted_total 4
# HELP sluice_conntrack_expired Connection-table entries removed at their idle timeout.
# TYPE sluice_conntrack_expired counter
sluice_conntrack_expired_total 0
# HELP sluice_conntrack_evicted Live connection-table entries evicted for new flows, by state.
# TYPE sluice_conntrack_evicted counter
sluice_conntrack_evicted_total{state="closing"} 0
sluice_conntrack_evicted_total{state="embryonic"} 6
sluice_conntrack_evicted_total{state="udp_oneway"} 0
# HELP sluice_teardown_out_of_window FINs and RSTs off their sender's sequence space (RFC 5961): forwarded, they closed nothing, by flag.
# TYPE sluice_teardown_out_of_window counter
sluice_teardown_out_of_window_total{flag="fin"} 0
sluice_teardown_out_of_window_total{flag="rst"} 0
# HELP sluice_conntrack_budget_refused New entries refused by a budget: embryonic ones of a client address over [appliance] embryonic_per_source, or a tenant zone's over its share, by budget.
# TYPE sluice_conntrack_budget_refused counter
sluice_conntrack_budget_refused_total{budget="source"} 0
sluice_conntrack_budget_refused_total{budget="zone"} 0
# HELP sluice_snat_ports_reclaimed FullNAT ports taken from an unfinished handshake for a new flow, every candidate port being held.
# TYPE sluice_snat_ports_reclaimed counter
sluice_snat_ports_reclaimed_total 0
# HELP sluice_syn_proxy The SYN proxy's handshakes by step: SYNs answered with a cookie (answered), ACKs whose cookie checked and opened a flow to a backend (opened), ACKs without a flow whose acknowledgement was no cookie of ours (bad_cookie), backends' SYN-ACKs turned into the handshake's last ACK (established), client data before the backend answered, dropped (early), SYNs sent to the backend again on the client's retransmission (resent).
# TYPE sluice_syn_proxy counter
sluice_syn_proxy_total{step="answered"} 0
sluice_syn_proxy_total{step="bad_cookie"} 0
sluice_syn_proxy_total{step="early"} 0
sluice_syn_proxy_total{step="established"} 0
sluice_syn_proxy_total{step="opened"} 0
sluice_syn_proxy_total{step="resent"} 0
# HELP sluice_stateless_answers Packets answered from the Maglev ring without a connection entry, by cause.
# TYPE sluice_stateless_answers counter
sluice_stateless_answers_total{cause="no_entry"} 7
sluice_stateless_answers_total{cause="table_full"} 1
# HELP sluice_icmp_rate_limited ICMP echo replies and errors not sent because of [appliance.icmp_limits].
# TYPE sluice_icmp_rate_limited counter
sluice_icmp_rate_limited_total 2
# HELP sluice_client_address_added FullNAT segments that carried the client's address to the backend (client_address), by kind.
# TYPE sluice_client_address_added counter
sluice_client_address_added_total{kind="proxy-v2"} 3
sluice_client_address_added_total{kind="toa"} 0
# HELP sluice_client_address_toa_no_room Segments that should have carried the TOA option but had no room in their TCP header.
# TYPE sluice_client_address_toa_no_room counter
sluice_client_address_toa_no_room_total 0
# HELP sluice_fragment_table NAT and FullNAT fragments through the fragment table, by event (tracked: first fragments remembered; rewritten: later fragments forwarded; completed: datagrams whole; evicted: live entries pushed out of a full table).
# TYPE sluice_fragment_table counter
sluice_fragment_table_total{event="completed"} 0
sluice_fragment_table_total{event="evicted"} 0
sluice_fragment_table_total{event="rewritten"} 0
sluice_fragment_table_total{event="tracked"} 0
# HELP sluice_icmp_too_big_sent ICMP fragmentation-needed and packet-too-big messages sent for tunnel frames over the egress MTU.
# TYPE sluice_icmp_too_big_sent counter
sluice_icmp_too_big_sent_total 0
# HELP sluice_mss_clamped TCP SYN and SYN-ACK segments whose MSS was lowered to fit a tunnel.
# TYPE sluice_mss_clamped counter
sluice_mss_clamped_total 0
# HELP sluice_persistence_entries Clients the persistence table remembers now.
# TYPE sluice_persistence_entries gauge
sluice_persistence_entries 0
# HELP sluice_persistence_lookups New connections of persistent VIPs, by result (hit: the remembered backend).
# TYPE sluice_persistence_lookups counter
sluice_persistence_lookups_total{result="hit"} 0
sluice_persistence_lookups_total{result="miss"} 0
# HELP sluice_persistence_evictions Live persistence entries given up for another client (a full set).
# TYPE sluice_persistence_evictions counter
sluice_persistence_evictions_total 0
# HELP sluice_connection_limit_skips New flows whose scheduled backend was at max_connections and went to another.
# TYPE sluice_connection_limit_skips counter
sluice_connection_limit_skips_total 0
# HELP sluice_overflow New flows while every backend was at max_connections, by what overflow did.
# TYPE sluice_overflow counter
sluice_overflow_total{action="ignored"} 0
sluice_overflow_total{action="refused"} 0
sluice_overflow_total{action="reset"} 0
# HELP sluice_one_packet_datagrams Datagrams of udp_one_packet VIPs, each scheduled on its own without a flow entry.
# TYPE sluice_one_packet_datagrams counter
sluice_one_packet_datagrams_total 0
# HELP sluice_outbound_answers Answers to backends' outbound connections forwarded to the port's owner, by where.
# TYPE sluice_outbound_answers counter
sluice_outbound_answers_total{by="engine"} 0
sluice_outbound_answers_total{by="xdp"} 0
# HELP sluice_xdp_too_many_headers IPv6 frames to a VIP with more extension headers than the parsers walk (8), dropped by the XDP program.
# TYPE sluice_xdp_too_many_headers counter
sluice_xdp_too_many_headers_total 0
# HELP sluice_captures Captures (sluice capture) run to their end.
# TYPE sluice_captures counter
sluice_captures_total 0
# HELP sluice_capture_frames Frames captures delivered.
# TYPE sluice_capture_frames counter
sluice_capture_frames_total 0
# HELP sluice_capture_lost Frames a capture took but did not deliver, by reason: ring (the XDP program's capture ring was full), count (beyond the capture's count).
# TYPE sluice_capture_lost counter
sluice_capture_lost_total{reason="count"} 0
sluice_capture_lost_total{reason="ring"} 0
# HELP sluice_outbound_unowned Answers to an outbound port no backend owns (dropped as no_backend).
# TYPE sluice_outbound_unowned counter
sluice_outbound_unowned_total 0
# HELP sluice_flood_active_cpus CPUs in flood mode now (0: off).
# TYPE sluice_flood_active_cpus gauge
sluice_flood_active_cpus 1
# HELP sluice_flood_first_packets VIP frames that may open a flow, seen by the XDP program.
# TYPE sluice_flood_first_packets counter
sluice_flood_first_packets_total 9000
# HELP sluice_flood_admitted_packets First packets passed on in flood mode (their source inside its rate).
# TYPE sluice_flood_admitted_packets counter
sluice_flood_admitted_packets_total 300
# HELP sluice_flood_shed_packets First packets dropped in XDP in flood mode (their source over its rate).
# TYPE sluice_flood_shed_packets counter
sluice_flood_shed_packets_total 8000
# HELP sluice_flood_switches Times a CPU switched flood mode on or off.
# TYPE sluice_flood_switches counter
sluice_flood_switches_total{to="off"} 2
sluice_flood_switches_total{to="on"} 3
# HELP sluice_flood_no_room_packets First packets let through in flood mode because the bucket map was full.
# TYPE sluice_flood_no_room_packets counter
sluice_flood_no_room_packets_total 1
# HELP sluice_flood_refunded_flows Flows that proved themselves in flood mode and paid their source's tokens back.
# TYPE sluice_flood_refunded_flows counter
sluice_flood_refunded_flows_total 6
# HELP sluice_flood_stateless_packets First packets of DR VIPs answered in XDP from the VIP's ring, without state, in flood mode.
# TYPE sluice_flood_stateless_packets counter
sluice_flood_stateless_packets_total 70
# HELP sluice_vip_packets Packets of a VIP (both directions).
# TYPE sluice_vip_packets counter
sluice_vip_packets_total{vip="dns"} 7
sluice_vip_packets_total{vip="web"} 100
# HELP sluice_vip_bytes Bytes of a VIP (both directions).
# TYPE sluice_vip_bytes counter
sluice_vip_bytes_total{vip="dns"} 700
sluice_vip_bytes_total{vip="web"} 64000
# HELP sluice_vip_new_flows New flows of a VIP.
# TYPE sluice_vip_new_flows counter
sluice_vip_new_flows_total{vip="dns"} 3
sluice_vip_new_flows_total{vip="web"} 10
# HELP sluice_vip_active_flows Connection-table entries of a VIP.
# TYPE sluice_vip_active_flows gauge
sluice_vip_active_flows{vip="dns"} 2
sluice_vip_active_flows{vip="web"} 7
# HELP sluice_vip_announced 1 while the VIP's address is announced over BGP.
# TYPE sluice_vip_announced gauge
sluice_vip_announced{vip="dns"} 0
sluice_vip_announced{vip="web"} 1
# HELP sluice_vip_backends_eligible Backends that may take new flows.
# TYPE sluice_vip_backends_eligible gauge
sluice_vip_backends_eligible{vip="dns"} 1
sluice_vip_backends_eligible{vip="web"} 2
# HELP sluice_vip_hash_imbalance_ratio Largest Maglev ring share of an eligible backend over its ideal (weighted) share.
# TYPE sluice_vip_hash_imbalance_ratio gauge
sluice_vip_hash_imbalance_ratio{vip="dns"} 1.0
sluice_vip_hash_imbalance_ratio{vip="web"} 1.00398406374502
# HELP sluice_backend_packets Packets to and from a backend.
# TYPE sluice_backend_packets counter
sluice_backend_packets_total{vip="dns",backend="10.1.0.21:53"} 7
sluice_backend_packets_total{vip="web",backend="10.1.0.11:80"} 63
sluice_backend_packets_total{vip="web",backend="10.1.0.12:80"} 40
# HELP sluice_backend_bytes Bytes to and from a backend.
# TYPE sluice_backend_bytes counter
sluice_backend_bytes_total{vip="dns",backend="10.1.0.21:53"} 700
sluice_backend_bytes_total{vip="web",backend="10.1.0.11:80"} 38300
sluice_backend_bytes_total{vip="web",backend="10.1.0.12:80"} 26000
# HELP sluice_backend_new_flows New flows scheduled to a backend (ipvsadm's Conns).
# TYPE sluice_backend_new_flows counter
sluice_backend_new_flows_total{vip="dns",backend="10.1.0.21:53"} 3
sluice_backend_new_flows_total{vip="web",backend="10.1.0.11:80"} 7
sluice_backend_new_flows_total{vip="web",backend="10.1.0.12:80"} 4
# HELP sluice_backend_active_flows Connection-table entries pointing at a backend.
# TYPE sluice_backend_active_flows gauge
sluice_backend_active_flows{vip="dns",backend="10.1.0.21:53"} 2
sluice_backend_active_flows{vip="web",backend="10.1.0.11:80"} 5
sluice_backend_active_flows{vip="web",backend="10.1.0.12:80"} 2
# HELP sluice_backend_healthy 1 when the prober finds the backend up (or it has no check), 0 otherwise.
# TYPE sluice_backend_healthy gauge
sluice_backend_healthy{vip="dns",backend="10.1.0.21:53"} 1
sluice_backend_healthy{vip="web",backend="10.1.0.11:80"} 1
sluice_backend_healthy{vip="web",backend="10.1.0.12:80"} 0
# HELP sluice_backend_eligible 1 when the backend may take new flows (healthy, active, weight > 0).
# TYPE sluice_backend_eligible gauge
sluice_backend_eligible{vip="dns",backend="10.1.0.21:53"} 1
sluice_backend_eligible{vip="web",backend="10.1.0.11:80"} 1
sluice_backend_eligible{vip="web",backend="10.1.0.12:80"} 1
# HELP sluice_backend_weight Effective weight of a backend (lower than its configured weight while slow start ramps it).
# TYPE sluice_backend_weight gauge
sluice_backend_weight{vip="dns",backend="10.1.0.21:53"} 100
sluice_backend_weight{vip="web",backend="10.1.0.11:80"} 100
sluice_backend_weight{vip="web",backend="10.1.0.12:80"} 50
# HELP sluice_backend_slow_start_ramping 1 while slow start ramps the backend's weight up to its configured weight.
# TYPE sluice_backend_slow_start_ramping gauge
sluice_backend_slow_start_ramping{vip="dns",backend="10.1.0.21:53"} 0
sluice_backend_slow_start_ramping{vip="web",backend="10.1.0.11:80"} 0
sluice_backend_slow_start_ramping{vip="web",backend="10.1.0.12:80"} 0
# HELP sluice_backend_ring_share_ratio Share of the VIP's Maglev ring the backend holds.
# TYPE sluice_backend_ring_share_ratio gauge
sluice_backend_ring_share_ratio{vip="dns",backend="10.1.0.21:53"} 1.0
sluice_backend_ring_share_ratio{vip="web",backend="10.1.0.11:80"} 0.6693227091633466
sluice_backend_ring_share_ratio{vip="web",backend="10.1.0.12:80"} 0.33067729083665339
# HELP sluice_backend_series_omitted Backends without their own series ([metrics] per_backend); their VIP's series count them.
# TYPE sluice_backend_series_omitted gauge
sluice_backend_series_omitted 0
# HELP sluice_health_transitions Health transitions received from the prober (each also in the event log).
# TYPE sluice_health_transitions counter
sluice_health_transitions_total 5
# HELP sluice_health_commits Table versions committed for batches of health transitions ([appliance] health_batch).
# TYPE sluice_health_commits counter
sluice_health_commits_total 2
# HELP sluice_health_sync_lag_seconds From the first health transition of the last health version to every worker running it.
# TYPE sluice_health_sync_lag_seconds gauge
sluice_health_sync_lag_seconds 0.04
# HELP sluice_bgp_session_established 1 while the BGP session with the peer is Established.
# TYPE sluice_bgp_session_established gauge
sluice_bgp_session_established{peer="192.0.2.1"} 1
sluice_bgp_session_established{peer="192.0.2.2"} 0
# HELP sluice_bgp_peer_prefixes_announced Prefixes advertised to the peer.
# TYPE sluice_bgp_peer_prefixes_announced gauge
sluice_bgp_peer_prefixes_announced{peer="192.0.2.1"} 1
sluice_bgp_peer_prefixes_announced{peer="192.0.2.2"} 1
# HELP sluice_bgp_session_flaps Times the session with the peer left Established.
# TYPE sluice_bgp_session_flaps counter
sluice_bgp_session_flaps_total{peer="192.0.2.1"} 2
sluice_bgp_session_flaps_total{peer="192.0.2.2"} 2
# HELP sluice_bgp_bfd_up 1 while the BFD session with the peer is Up (only peers with BFD).
# TYPE sluice_bgp_bfd_up gauge
sluice_bgp_bfd_up{peer="192.0.2.1"} 0
# HELP sluice_bgp_bfd_session_resets BGP sessions BFD took down (Up to Down while Established).
# TYPE sluice_bgp_bfd_session_resets counter
sluice_bgp_bfd_session_resets_total{peer="192.0.2.1"} 1
# HELP sluice_bgp_bfd_discarded_packets BFD control packets dropped, by reason.
# TYPE sluice_bgp_bfd_discarded_packets counter
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="admin_down"} 0
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="auth_not_configured"} 0
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="bad_ttl"} 4
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="bad_version"} 0
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="length_exceeds_payload"} 0
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="length_too_small"} 0
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="multipoint"} 0
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="truncated"} 0
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="wrong_discriminator"} 0
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="zero_detect_mult"} 0
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="zero_my_discriminator"} 0
sluice_bgp_bfd_discarded_packets_total{peer="192.0.2.1",reason="zero_your_discriminator"} 0
# HELP sluice_bgp_announced_prefixes VIP prefixes the appliance announces.
# TYPE sluice_bgp_announced_prefixes gauge
sluice_bgp_announced_prefixes 1
# HELP sluice_vip_probes_sent VIP health probes sent to DR and tunnel backends.
# TYPE sluice_vip_probes_sent counter
sluice_vip_probes_sent_total 5
# HELP sluice_vip_probes_passed VIP health probes the backend answered from the VIP.
# TYPE sluice_vip_probes_passed counter
sluice_vip_probes_passed_total 3
# HELP sluice_vip_probes_failed VIP health probes failed, by reason.
# TYPE sluice_vip_probes_failed counter
sluice_vip_probes_failed_total{reason="vip_closed"} 0
sluice_vip_probes_failed_total{reason="vip_io"} 0
sluice_vip_probes_failed_total{reason="vip_no_answer"} 2
sluice_vip_probes_failed_total{reason="vip_not_sent"} 0
sluice_vip_probes_failed_total{reason="vip_reply_mismatch"} 0
# HELP sluice_events Events recorded (see /v1/events).
# TYPE sluice_events counter
sluice_events_total 2
# HELP sluice_api_errors API requests refused with a 4xx status (401 included).
# TYPE sluice_api_errors counter
sluice_api_errors_total 4
# HELP sluice_api_connections Connections open on each API listener.
# TYPE sluice_api_connections gauge
sluice_api_connections{listener="metrics"} 0
sluice_api_connections{listener="socket"} 0
sluice_api_connections{listener="tcp"} 0
# HELP sluice_api_connections_refused Connections closed at once because the listener was at its connection cap.
# TYPE sluice_api_connections_refused counter
sluice_api_connections_refused_total{listener="metrics"} 0
sluice_api_connections_refused_total{listener="socket"} 0
sluice_api_connections_refused_total{listener="tcp"} 0
# HELP sluice_api_connection_timeouts Connections closed for the header-read or idle timeout.
# TYPE sluice_api_connection_timeouts counter
sluice_api_connection_timeouts_total{listener="metrics"} 0
sluice_api_connection_timeouts_total{listener="socket"} 0
sluice_api_connection_timeouts_total{listener="tcp"} 0
# HELP sluice_api_connections_unauthorized TCP API connections closed before taking a slot: no TLS handshake, or a first request that was not HTTP or had no or a wrong bearer token.
# TYPE sluice_api_connections_unauthorized counter
sluice_api_connections_unauthorized_total{listener="metrics"} 0
sluice_api_connections_unauthorized_total{listener="socket"} 0
sluice_api_connections_unauthorized_total{listener="tcp"} 0
# HELP sluice_overrides_file_errors Failed reads and writes of the operator overrides file in the state directory (the log says which and why).
# TYPE sluice_overrides_file_errors counter
sluice_overrides_file_errors_total 0
# HELP sluice_health_probes_not_run Health probes not run for a local shortage (descriptors, buffers, ports); verdicts kept.
# TYPE sluice_health_probes_not_run counter
sluice_health_probes_not_run_total 0
# EOF
"##;
}
