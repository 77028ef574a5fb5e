//! One worker's packet engine: [`LbHandler`] is the datapath's [`FrameHandler`]; it looks the
//! published tables up, calls [`lb::process`], repeats established decisions into the XDP flow
//! cache, and publishes its counters now and then. Asked first, it names the worker that
//! owns a FullNAT return frame's flow (`lb::process::owner`), and the datapath hands such
//! frames over to it.
//!
//! The hot path takes no lock: a new table set is noticed through one relaxed atomic load of
//! the published version per frame, and only then is the `Arc<Tables>` fetched. Counters are
//! copied out with `try_lock` when the worker is idle or every [`PUBLISH_EVERY`] frames, so a
//! slow reader never stalls forwarding.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::counters::{BackendTotals, CounterSnapshot, SlotCounters, VipTotals};
use super::published::Published;
use crate::datapath::FrameHandler;
use crate::datapath::doorbell::Doorbell;
use crate::datapath::flowcache::{FlowCache, WorkerCache};
use crate::lb::BackendId;
use crate::lb::{self, ConnTable, Frame, Tables, Verdict, WorkerState};

/// Frames between two counter publications on a busy worker.
pub const PUBLISH_EVERY: u32 = 1 << 16;

/// One worker's packet engine.
pub struct LbHandler {
    published: Arc<Published>,
    pub(super) tables: Arc<Tables>,
    pub(super) ct: ConnTable,
    state: WorkerState,
    out: Arc<Mutex<CounterSnapshot>>,
    /// The version this worker runs, readable without the snapshot's lock.
    running: Arc<AtomicU64>,
    retired_vips: HashMap<String, VipTotals>,
    retired_backends: HashMap<BackendId, BackendTotals>,
    since_publish: u32,
    /// The XDP flow cache, when `[appliance] flow_cache` is on.
    pub(super) flow_cache: Option<WorkerCache>,
    /// This worker's index and the number of workers (FullNAT local ports are partitioned
    /// between them, see [`FrameHandler::owner`]).
    worker: u16,
    workers: u16,
    /// Where this worker sent FullNAT return fragments (see `lb::process::owner`).
    frag_owners: lb::process::FragOwners,
    /// Rung when a new version is published (`None` if no eventfd could be had: the
    /// worker then ticks every 10 ms to notice new tables).
    doorbell: Option<Doorbell>,
    /// Connection sync's queue, when `[sync]` is on.
    sync: Option<crate::sync::Outbox>,
}

impl LbHandler {
    /// Worker `worker` of `workers`, with a connection table of `capacity` flows.
    pub fn new(
        published: Arc<Published>,
        capacity: usize,
        worker: u16,
        workers: u16,
        out: Arc<Mutex<CounterSnapshot>>,
        running: Arc<AtomicU64>,
    ) -> LbHandler {
        let tables = published.current();
        let ct = ConnTable::new(
            capacity,
            tables.timeouts,
            tables.backends.len(),
            worker,
            workers,
        );
        running.store(tables.version, Ordering::Release);
        let mut state = WorkerState::new();
        state.set_persistence(Arc::clone(published.persistence()));
        state.set_cookie_key(published.cookie_key());
        state.set_flood_flag(Arc::clone(published.flood_flag()));
        state.set_cookies_until(Arc::clone(published.cookies_until()));
        let doorbell = published
            .doorbell()
            .inspect_err(|e| {
                tracing::warn!(
                    worker,
                    error = %e,
                    "no eventfd for the worker's doorbell: it wakes every 10 ms instead"
                )
            })
            .ok();
        LbHandler {
            published,
            tables,
            ct,
            state,
            out,
            running,
            retired_vips: HashMap::new(),
            retired_backends: HashMap::new(),
            since_publish: 0,
            flow_cache: None,
            worker,
            workers: workers.max(1),
            frag_owners: Default::default(),
            doorbell,
            sync: None,
        }
    }

    /// Puts the XDP flow cache in front of this worker: after each decision the engine can
    /// hand to the kernel, the worker installs the entry (see `datapath::flowcache`).
    pub fn with_flow_cache(mut self, cache: Arc<FlowCache>) -> Self {
        self.flow_cache = Some(WorkerCache::new(cache));
        self.ct.journal(true);
        self
    }

    /// Connection sync (`crate::sync`): this worker consults the standby table on a miss
    /// and sends the flows it establishes and ends.
    pub fn with_sync(mut self, sync: &crate::sync::SyncHandle) -> Self {
        self.state.set_standby(Arc::clone(&sync.standby));
        self.ct.note_news(true);
        self.sync = Some(sync.outbox.clone());
        self
    }

    #[inline]
    fn refresh(&mut self) {
        if self.published.version() != self.tables.version {
            self.swap();
        }
    }

    /// Folds this version's per-slot counters into the retired totals and takes the newest
    /// tables (the counters themselves restart when `lb::process` adopts them). Runs once
    /// per swap, off the per-packet path.
    #[cold]
    fn swap(&mut self) {
        if self.state.version() == Some(self.tables.version) {
            let st = &self.state;
            SlotCounters {
                vip_packets: &st.vip_packets,
                vip_bytes: &st.vip_bytes,
                vip_new_flows: &st.vip_new_flows,
                vip_quic: &st.quic,
                backend_packets: &st.backend_packets,
                backend_bytes: &st.backend_bytes,
                backend_new_flows: &st.backend_new_flows,
            }
            .fold_into(
                &self.tables,
                &mut self.retired_vips,
                &mut self.retired_backends,
            );
        }
        self.tables = self.published.current();
        // Adopt now, so the per-slot counters and the retired totals never count a packet
        // twice or not at all, whichever the snapshot shows.
        self.state.adopt(&self.tables, &mut self.ct);
        self.evict_removed();
        self.running.store(self.tables.version, Ordering::Release);
        self.publish_counters();
    }

    /// Evicts the kernel entries of every flow the connection table removed since the last
    /// call (expiry, eviction, a swap), which frees their FullNAT ports.
    #[inline]
    fn evict_removed(&mut self) {
        if let Some(fc) = &mut self.flow_cache {
            self.ct.drain_removed(|k| fc.forget(k));
        }
    }

    fn publish_counters(&mut self) {
        self.since_publish = 0;
        let Ok(mut s) = self.out.try_lock() else {
            return;
        };
        if s.version != self.tables.version || s.tables.is_none() {
            s.version = self.tables.version;
            s.tables = Some(Arc::clone(&self.tables));
            s.retired_vips.clone_from(&self.retired_vips);
            s.retired_backends.clone_from(&self.retired_backends);
        }
        s.drops = self.state.drops;
        s.stats = self.state.stats;
        s.vip_packets.clone_from(&self.state.vip_packets);
        s.vip_bytes.clone_from(&self.state.vip_bytes);
        s.vip_new_flows.clone_from(&self.state.vip_new_flows);
        s.vip_quic.clone_from(&self.state.quic);
        s.backend_packets.clone_from(&self.state.backend_packets);
        s.backend_bytes.clone_from(&self.state.backend_bytes);
        s.backend_new_flows
            .clone_from(&self.state.backend_new_flows);
        s.backend_flows.clear();
        s.backend_flows.extend(
            self.ct
                .active_counts()
                .iter()
                .zip(self.ct.inactive_counts())
                .map(|(a, i)| (*a, *i)),
        );
        s.conntrack_len = self.ct.len();
        s.conntrack_capacity = self.ct.capacity();
        s.conntrack = self.ct.stats;
        s.conntrack_fill = self.ct.fill();
        s.snat_ports = self.ct.snat_ports();
    }
}

/// What the engine records with a flow cache on: the frame's decision (the entries to
/// install or evict), and, for a FIN or RST about to be judged, where the cache's entries
/// say the flow's sequence spaces stand (they moved on as the kernel forwarded the flow).
struct Cached<'a> {
    decision: Option<lb::process::Decision>,
    cache: &'a WorkerCache,
}

impl lb::process::Record for Cached<'_> {
    const ON: bool = true;

    #[inline(always)]
    fn decision(&mut self, d: lb::process::Decision) {
        self.decision = Some(d);
    }

    fn catch_up(&mut self, flow: &lb::FlowKey, t: &mut lb::conntrack::Track) {
        self.cache.catch_up(flow, t);
    }
}

impl FrameHandler for LbHandler {
    #[inline]
    fn handle(&mut self, frame: &mut Frame<'_>, now_ns: u64) -> Verdict {
        self.refresh();
        self.since_publish += 1;
        if self.since_publish >= PUBLISH_EVERY {
            self.publish_counters();
        }
        match &mut self.flow_cache {
            None => lb::process(frame, &self.tables, &mut self.ct, &mut self.state, now_ns),
            Some(fc) => {
                let mut rec = Cached {
                    decision: None,
                    cache: fc,
                };
                let v = lb::process::process_recorded(
                    frame,
                    &self.tables,
                    &mut self.ct,
                    &mut self.state,
                    now_ns,
                    &mut rec,
                );
                let decision = rec.decision;
                // Before the decision: a removed flow's entries go before a new flow with
                // the same key queues its own.
                self.ct.drain_removed(|k| fc.forget(k));
                if let Some(d) = decision {
                    fc.after_decision(&d, &self.tables);
                }
                v
            }
        }
    }

    #[inline]
    fn owner(&mut self, frame: &Frame<'_>) -> Option<usize> {
        self.refresh();
        lb::process::owner(frame, &self.tables, self.workers, &mut self.frag_owners)
            .filter(|o| *o != self.worker)
            .map(usize::from)
    }

    fn after_tx(&mut self) {
        if let Some(fc) = &mut self.flow_cache
            && fc.has_pending()
        {
            let published = &self.published;
            fc.install_pending(|version| published.version() == version);
        }
    }

    /// Nothing is due while the connection table and the cache hold nothing: an idle
    /// worker sleeps until frames come or a new version rings its doorbell.
    fn tick(&mut self, now_ns: u64) -> Option<u64> {
        self.refresh();
        if let Some(fc) = &mut self.flow_cache {
            fc.tick(&mut self.ct, now_ns);
        }
        self.ct.expire(now_ns, 256);
        self.evict_removed();
        if let Some(o) = &self.sync {
            use crate::sync::Note;
            let lost = self.ct.drain_news(
                now_ns,
                |r| o.send(Note::Established(r)),
                |k| o.send(Note::Ended(*k)),
            );
            o.lost(lost);
        }
        // Connections that closed or expired reach the other workers' limit checks.
        if !self.tables.limited.is_empty() && self.state.version() == Some(self.tables.version) {
            lb::process::publish_all_counts(&self.tables, &self.ct);
        }
        self.publish_counters();
        let walk = self.flow_cache.as_ref().and_then(|fc| fc.next_due(now_ns));
        [self.ct.next_expiry(), walk].into_iter().flatten().min()
    }

    fn doorbell(&self) -> Option<&Doorbell> {
        self.doorbell.as_ref()
    }

    fn export_flows(&mut self, now_ns: u64) -> Vec<lb::conntrack::FlowRecord> {
        self.export(now_ns)
    }
}
