//! The control plane's counters: what the loop, the API listeners and the prober count as
//! they go (atomics the metrics and the status document read), and the workers' counters
//! summed over every worker ([`aggregate`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::cache::CacheStats;
use super::serve::ListenerStats;
use crate::datapath::vipprobe::VipProbeCounters;
use crate::engine::{BackendTotals, CounterSnapshot, VipTotals};
use crate::lb::{BackendId, DropReason};

/// What the control plane and its servers count, shared with the readers.
#[derive(Debug, Default)]
pub struct Counters {
    /// API requests refused (4xx), by the API server.
    pub api_errors: AtomicU64,
    /// Health probes that did not run for a local shortage (descriptors, buffers, ports),
    /// copied from the prober every few ticks.
    pub probes_not_run: AtomicU64,
    /// Connections on each API listener (open, refused at the cap, timed out).
    pub listeners: Arc<ListenerStats>,
    /// Reloads rejected (validation, table build or commit).
    pub reloads_rejected: AtomicU64,
    /// VIP health probes of DR and tunnel backends: sent, passed, failed by reason.
    pub vip_probes: Arc<VipProbeCounters>,
    /// Health transitions, the versions they made and their sync lag.
    pub health: HealthStats,
    /// Failed reads and writes of the operator overrides file (see `kept.rs`).
    pub overrides_file_errors: AtomicU64,
    /// What the datapath watch did and saw, by `WatchEvent::name`.
    pub datapath_watch: Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

/// Health commit counters for metrics: every transition, the versions they made, and the
/// sync lag of the last health version.
#[derive(Debug, Default)]
pub struct HealthStats {
    /// Transitions received from the prober.
    pub transitions: AtomicU64,
    /// Versions committed for health batches.
    pub commits: AtomicU64,
    /// From the first transition of the last health version to every worker running it.
    pub lag: Mutex<Option<Duration>>,
}

/// One datapath worker as the control plane sees it.
#[derive(Debug, Clone)]
pub struct WorkerView {
    pub snapshot: Arc<Mutex<CounterSnapshot>>,
    /// The table version it runs (stored by the worker right after it adopts a version).
    pub running: Arc<AtomicU64>,
}

/// Counters summed over the workers, keyed by names that survive reloads.
#[derive(Debug, Default)]
pub struct Aggregate {
    pub vips: HashMap<String, VipTotals>,
    pub backends: HashMap<BackendId, BackendTotals>,
    /// Connection-table entries per backend (active + inactive), running version only.
    pub backend_flows: HashMap<BackendId, u64>,
    /// The same entries as (active: established TCP, inactive: the rest).
    pub backend_conns: HashMap<BackendId, (u64, u64)>,
    pub vip_flows: HashMap<String, u64>,
    pub drops: [u64; DropReason::COUNT],
    pub stats: crate::lb::process::WorkerStats,
    pub conntrack_entries: u64,
    pub conntrack_capacity: u64,
    /// Connection-table counters, summed.
    pub conntrack: crate::lb::conntrack::ConnStats,
    /// Entries per timeout class ([`crate::lb::FlowState::class`]), summed.
    pub conntrack_fill: [u64; crate::lb::conntrack::CLASSES],
    /// FullNAT local ports held, summed.
    pub snat_ports: u64,
    /// Per worker, the version it runs.
    pub running: Vec<u64>,
    /// Per worker, (new flows, connection-table entries).
    pub worker_flows: Vec<(u64, u64)>,
}

/// Adds one worker's counters `st` to the sum `a`.
fn add_stats(a: &mut crate::lb::process::WorkerStats, st: &crate::lb::process::WorkerStats) {
    a.passed += st.passed;
    a.tx += st.tx;
    a.conntrack_fallback += st.conntrack_fallback;
    a.rechosen += st.rechosen;
    a.reopened += st.reopened;
    a.stateless_return += st.stateless_return;
    a.echo_replies += st.echo_replies;
    a.icmp_errors_forwarded += st.icmp_errors_forwarded;
    a.time_exceeded_sent += st.time_exceeded_sent;
    a.fragments += st.fragments;
    a.stateless_no_entry += st.stateless_no_entry;
    a.icmp_rate_limited += st.icmp_rate_limited;
    a.proxy_headers += st.proxy_headers;
    a.toa_options += st.toa_options;
    a.toa_no_room += st.toa_no_room;
    a.frag.add(&st.frag);
    a.too_big_sent += st.too_big_sent;
    a.mss_clamped += st.mss_clamped;
    a.one_packet += st.one_packet;
    a.limit_skips += st.limit_skips;
    a.overflow_ignored += st.overflow_ignored;
    a.overflow_resets += st.overflow_resets;
    a.persist_hits += st.persist_hits;
    a.persist_misses += st.persist_misses;
    a.persist_evictions += st.persist_evictions;
    a.outbound_answers += st.outbound_answers;
    a.outbound_unowned += st.outbound_unowned;
    a.syn_proxy_answered += st.syn_proxy_answered;
    a.syn_proxy_opened += st.syn_proxy_opened;
    a.syn_proxy_bad_cookies += st.syn_proxy_bad_cookies;
    a.syn_proxy_early += st.syn_proxy_early;
    a.syn_proxy_resent += st.syn_proxy_resent;
    a.syn_proxy_established += st.syn_proxy_established;
}

/// The workers' counters and the flow cache's (`cache`: what the kernel forwarded counts for
/// its VIP and backend too), summed.
pub fn aggregate(workers: &[WorkerView], cache: Option<&CacheStats>) -> Aggregate {
    let mut a = Aggregate::default();
    // What the kernel forwarded from the flow cache counts for its VIP and backend too.
    if let Some(c) = cache {
        for (k, v) in &c.vips {
            *a.vips.entry(k.clone()).or_default() += *v;
        }
        for (k, v) in &c.backends {
            *a.backends.entry(k.clone()).or_default() += *v;
        }
    }
    for w in workers {
        a.running.push(w.running.load(Ordering::Acquire));
        a.worker_flows.push((0, 0));
        let Ok(s) = w.snapshot.lock() else { continue };
        let (vips, backends) = s.totals();
        if let Some(f) = a.worker_flows.last_mut() {
            *f = (
                vips.values().map(|v| v.new_flows).sum(),
                s.conntrack_len as u64,
            );
        }
        for (k, v) in vips {
            *a.vips.entry(k).or_default() += v;
        }
        for (k, v) in backends {
            *a.backends.entry(k).or_default() += v;
        }
        if let Some(t) = &s.tables {
            for (slot, (act, inact)) in s.backend_flows.iter().enumerate() {
                if slot >= t.backends.len() {
                    break;
                }
                let Some(id) = BackendId::of_slot(t, slot) else {
                    continue;
                };
                let n = u64::from(*act) + u64::from(*inact);
                let c = a.backend_conns.entry(id.clone()).or_default();
                c.0 += u64::from(*act);
                c.1 += u64::from(*inact);
                *a.vip_flows.entry(id.vip.clone()).or_default() += n;
                *a.backend_flows.entry(id).or_default() += n;
            }
        }
        for (d, n) in a.drops.iter_mut().zip(s.drops.iter()) {
            *d += n;
        }
        let st = &s.stats;
        add_stats(&mut a.stats, st);
        let c = &s.conntrack;
        a.conntrack.inserted += c.inserted;
        a.conntrack.promoted += c.promoted;
        a.conntrack.expired += c.expired;
        a.conntrack.evicted_embryonic += c.evicted_embryonic;
        a.conntrack.evicted_closing += c.evicted_closing;
        a.conntrack.evicted_one_way += c.evicted_one_way;
        a.conntrack.full += c.full;
        a.conntrack.rst_out_of_window += c.rst_out_of_window;
        a.conntrack.fin_out_of_window += c.fin_out_of_window;
        a.conntrack.source_refused += c.source_refused;
        a.conntrack.zone_refused += c.zone_refused;
        a.conntrack.snat_reclaimed += c.snat_reclaimed;
        let fill = a.conntrack_fill.iter_mut().zip(s.conntrack_fill);
        fill.for_each(|(f, n)| *f += n as u64);
        a.conntrack_entries += s.conntrack_len as u64;
        a.snat_ports += s.snat_ports as u64;
        a.conntrack_capacity += s.conntrack_capacity as u64;
    }
    a
}
