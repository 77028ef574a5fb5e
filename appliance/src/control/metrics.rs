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

use super::shared::{Shared, imbalance, ring_shares};
use crate::lb::DropReason;
use crate::lb::hash::addr_to_u128;

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Builds families and registers them by name.
struct Builder {
    reg: Registry,
}

impl Builder {
    fn counter(&mut self, name: &str, help: &str) -> Family<Labels, Counter> {
        let f = Family::<Labels, Counter>::default();
        self.reg.register(name, help, f.clone());
        f
    }

    fn gauge(&mut self, name: &str, help: &str) -> Family<Labels, Gauge> {
        let f = Family::<Labels, Gauge>::default();
        self.reg.register(name, help, f.clone());
        f
    }

    fn fgauge(&mut self, name: &str, help: &str) -> Family<Labels, Gauge<f64, AtomicU64>> {
        let f = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        self.reg.register(name, help, f.clone());
        f
    }
}

fn set(f: &Family<Labels, Counter>, l: Labels, v: u64) {
    f.get_or_create(&l).inc_by(v);
}

fn gset(f: &Family<Labels, Gauge>, l: Labels, v: i64) {
    f.get_or_create(&l).set(v);
}

impl Builder {
    /// An unlabelled counter with value `v`.
    fn counter1(&mut self, name: &str, help: &str, v: u64) {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        self.reg.register(name, help, c);
    }

    /// An unlabelled gauge with value `v`.
    fn gauge1(&mut self, name: &str, help: &str, v: i64) {
        let g = Gauge::<i64>::default();
        g.set(v);
        self.reg.register(name, help, g);
    }
}

/// The exposition text.
pub fn render(s: &Shared) -> String {
    let mut b = Builder {
        reg: Registry::default(),
    };
    let view = s.view.load();
    let tables = s.published.current();
    let agg = s.aggregate();
    let version = s.published.version();

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

    // Config versions and table sync.
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
        s.reloads_rejected.load(Ordering::Relaxed),
    );

    // Datapath totals.
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

    // Per VIP and backend.
    let vp = b.counter("sluice_vip_packets", "Packets of a VIP (both directions)");
    let vb = b.counter("sluice_vip_bytes", "Bytes of a VIP (both directions)");
    let vn = b.counter("sluice_vip_new_flows", "New flows of a VIP");
    let va = b.gauge(
        "sluice_vip_active_flows",
        "Connection-table entries of a VIP",
    );
    let vann = b.gauge(
        "sluice_vip_announced",
        "1 while the VIP's address is announced over BGP",
    );
    let velig = b.gauge(
        "sluice_vip_backends_eligible",
        "Backends that may take new flows",
    );
    let vimb = b.fgauge(
        "sluice_vip_hash_imbalance_ratio",
        "Largest Maglev ring share of an eligible backend over its ideal (weighted) share",
    );
    let bp = b.counter("sluice_backend_packets", "Packets to and from a backend");
    let bb = b.counter("sluice_backend_bytes", "Bytes to and from a backend");
    let ba = b.gauge(
        "sluice_backend_active_flows",
        "Connection-table entries pointing at a backend",
    );
    let bh = b.gauge(
        "sluice_backend_healthy",
        "1 when the prober finds the backend up (or it has no check), 0 otherwise",
    );
    let be = b.gauge(
        "sluice_backend_eligible",
        "1 when the backend may take new flows (healthy, active, weight > 0)",
    );
    let bw = b.gauge("sluice_backend_weight", "Effective weight of a backend");
    let bs = b.fgauge(
        "sluice_backend_ring_share_ratio",
        "Share of the VIP's Maglev ring the backend holds",
    );
    if let Some(cfg) = &view.config {
        for (slot, v) in cfg.vips.iter().enumerate() {
            let vl = labels(&[("vip", &v.name)]);
            let t = agg.vips.get(&v.name).copied().unwrap_or_default();
            set(&vp, vl.clone(), t.packets);
            set(&vb, vl.clone(), t.bytes);
            set(&vn, vl.clone(), t.new_flows);
            gset(
                &va,
                vl.clone(),
                agg.vip_flows.get(&v.name).copied().unwrap_or(0) as i64,
            );
            gset(
                &vann,
                vl.clone(),
                i64::from(view.announced.contains(&v.address)),
            );
            let shares = ring_shares(&tables, slot);
            gset(
                &velig,
                vl.clone(),
                shares.iter().filter(|s| s.2).count() as i64,
            );
            if let Some(r) = imbalance(&shares) {
                vimb.get_or_create(&vl).set(r);
            }
            for (i, bk) in v.backends.iter().enumerate() {
                let id = std::net::SocketAddr::new(bk.address, bk.port).to_string();
                let l = labels(&[("vip", &v.name), ("backend", &id)]);
                let key = (v.name.clone(), addr_to_u128(bk.address), bk.port);
                let t = agg.backends.get(&key).copied().unwrap_or_default();
                set(&bp, l.clone(), t.packets);
                set(&bb, l.clone(), t.bytes);
                gset(
                    &ba,
                    l.clone(),
                    agg.backend_flows.get(&key).copied().unwrap_or(0) as i64,
                );
                let healthy = v.health_check.is_none()
                    || view
                        .health
                        .get(&(v.name.clone(), bk.address, bk.port))
                        .is_some_and(|h| h.state == "up");
                gset(&bh, l.clone(), i64::from(healthy));
                let (share, _, eligible) = shares.get(i).copied().unwrap_or((0.0, 0.0, false));
                gset(&be, l.clone(), i64::from(eligible));
                gset(&bw, l.clone(), i64::from(bk.weight));
                bs.get_or_create(&l).set(share);
            }
        }
    }

    // BGP.
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

    b.counter1(
        "sluice_events",
        "Events recorded (see /v1/events)",
        s.events.lock().map(|e| e.total()).unwrap_or(0),
    );
    b.counter1(
        "sluice_api_errors",
        "API requests refused with a 4xx status",
        s.api_errors.load(Ordering::Relaxed),
    );

    let mut out = String::new();
    if let Err(e) = encode(&mut out, &b.reg) {
        tracing::error!("metrics: encoding failed: {e}");
    }
    out
}
