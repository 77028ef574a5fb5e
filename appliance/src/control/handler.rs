//! The worker side of the table swap: each datapath worker runs one [`LbHandler`], which
//! looks tables up and calls [`lb::process`], and publishes its counters now and then.
//!
//! The hot path takes no lock: a new table set is noticed through one relaxed atomic load of
//! the published version per frame, and only then is the `Arc<Tables>` fetched. Counters are
//! copied out with `try_lock` when the worker is idle or every [`PUBLISH_EVERY`] frames, so a
//! slow reader never stalls forwarding.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::datapath::{Action, FrameHandler};
use crate::lb::{self, ConnTable, DropReason, Frame, Tables, Verdict, WorkerState};

/// Frames between two counter publications on a busy worker.
pub const PUBLISH_EVERY: u32 = 1 << 16;

/// The table set every worker runs, swapped atomically by the control plane.
#[derive(Debug)]
pub struct Published {
    version: AtomicU64,
    tables: ArcSwap<Tables>,
}

impl Published {
    pub fn new(tables: Tables) -> Published {
        Published {
            version: AtomicU64::new(tables.version),
            tables: ArcSwap::from_pointee(tables),
        }
    }

    /// Publishes a new table set; workers pick it up on their next frame or idle tick.
    pub fn publish(&self, tables: Tables) {
        let v = tables.version;
        self.tables.store(Arc::new(tables));
        self.version.store(v, Ordering::Release);
    }

    /// The current table set.
    pub fn current(&self) -> Arc<Tables> {
        self.tables.load_full()
    }

    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }
}

/// Counters of one VIP, kept across table versions by its name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VipTotals {
    pub packets: u64,
    pub bytes: u64,
    pub new_flows: u64,
}

/// Counters of one backend of one VIP, kept across table versions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendTotals {
    pub packets: u64,
    pub bytes: u64,
}

/// A backend's identity across table versions: VIP name, address (IPv4-mapped) and port
/// (one type with the flow cache's, so its totals merge with the workers').
pub use crate::datapath::flowcache::BackendId;

/// A worker's counters as last published.
///
/// Per-slot counters restart with every table version (slots move when the config does), so
/// the worker folds the old version's counters into `retired_*`, keyed by names that survive
/// a reload, before it adopts a new version: a VIP's totals never go backwards.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Table version the worker runs.
    pub version: u64,
    /// The tables of `version`, to map the per-slot counters to names.
    pub tables: Option<Arc<Tables>>,
    pub drops: [u64; DropReason::COUNT],
    pub stats: lb::process::WorkerStats,
    /// Per VIP slot of `version`.
    pub vip_packets: Vec<u64>,
    pub vip_bytes: Vec<u64>,
    pub vip_new_flows: Vec<u64>,
    /// Per backend slot of `version`.
    pub backend_packets: Vec<u64>,
    pub backend_bytes: Vec<u64>,
    /// Flows in the connection table per backend slot of `version` (active, inactive).
    pub backend_flows: Vec<(u32, u32)>,
    pub conntrack_len: usize,
    pub conntrack_capacity: usize,
    /// Counters of earlier versions.
    pub retired_vips: HashMap<String, VipTotals>,
    pub retired_backends: HashMap<BackendId, BackendTotals>,
}

impl std::ops::AddAssign for VipTotals {
    fn add_assign(&mut self, o: VipTotals) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.new_flows += o.new_flows;
    }
}

impl std::ops::AddAssign for BackendTotals {
    fn add_assign(&mut self, o: BackendTotals) {
        self.packets += o.packets;
        self.bytes += o.bytes;
    }
}

/// Per-slot counters of one table version, borrowed from a worker's state or snapshot.
struct SlotCounters<'a> {
    vip_packets: &'a [u64],
    vip_bytes: &'a [u64],
    vip_new_flows: &'a [u64],
    backend_packets: &'a [u64],
    backend_bytes: &'a [u64],
}

impl SlotCounters<'_> {
    /// Adds these counters of version `t` to totals keyed by VIP name and backend identity.
    fn fold_into(
        &self,
        t: &Tables,
        vips: &mut HashMap<String, VipTotals>,
        backends: &mut HashMap<BackendId, BackendTotals>,
    ) {
        let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
        for (i, v) in t.vips.iter().enumerate() {
            *vips.entry(v.name.clone()).or_default() += VipTotals {
                packets: at(self.vip_packets, i),
                bytes: at(self.vip_bytes, i),
                new_flows: at(self.vip_new_flows, i),
            };
        }
        for (i, b) in t.backends.iter().enumerate() {
            let Some(v) = t.vips.get(b.vip as usize) else {
                continue;
            };
            *backends
                .entry((v.name.clone(), b.address, b.port))
                .or_default() += BackendTotals {
                packets: at(self.backend_packets, i),
                bytes: at(self.backend_bytes, i),
            };
        }
    }
}

impl Snapshot {
    /// Totals per VIP name and per backend: retired versions plus the running one.
    pub fn totals(
        &self,
    ) -> (
        HashMap<String, VipTotals>,
        HashMap<BackendId, BackendTotals>,
    ) {
        let (mut vips, mut backends) = (self.retired_vips.clone(), self.retired_backends.clone());
        if let Some(t) = &self.tables {
            SlotCounters {
                vip_packets: &self.vip_packets,
                vip_bytes: &self.vip_bytes,
                vip_new_flows: &self.vip_new_flows,
                backend_packets: &self.backend_packets,
                backend_bytes: &self.backend_bytes,
            }
            .fold_into(t, &mut vips, &mut backends);
        }
        (vips, backends)
    }
}

/// One worker's packet engine.
pub struct LbHandler {
    published: Arc<Published>,
    tables: Arc<Tables>,
    ct: ConnTable,
    state: WorkerState,
    out: Arc<Mutex<Snapshot>>,
    /// The version this worker runs, readable without the snapshot's lock.
    running: Arc<AtomicU64>,
    retired_vips: HashMap<String, VipTotals>,
    retired_backends: HashMap<BackendId, BackendTotals>,
    since_publish: u32,
    /// The XDP flow cache, when `[appliance] flow_cache` is on.
    flow_cache: Option<crate::datapath::flowcache::WorkerCache>,
}

impl LbHandler {
    /// Worker `worker` of `workers`, with a connection table of `capacity` flows.
    pub fn new(
        published: Arc<Published>,
        capacity: usize,
        worker: u16,
        workers: u16,
        out: Arc<Mutex<Snapshot>>,
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
        LbHandler {
            published,
            tables,
            ct,
            state: WorkerState::new(),
            out,
            running,
            retired_vips: HashMap::new(),
            retired_backends: HashMap::new(),
            since_publish: 0,
            flow_cache: None,
        }
    }

    /// Puts the XDP flow cache in front of this worker: after each decision the engine can
    /// hand to the kernel, the worker installs the entry (see `datapath::flowcache`).
    pub fn with_flow_cache(mut self, cache: Arc<crate::datapath::flowcache::FlowCache>) -> Self {
        self.flow_cache = Some(crate::datapath::flowcache::WorkerCache::new(cache));
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
                backend_packets: &st.backend_packets,
                backend_bytes: &st.backend_bytes,
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
        self.running.store(self.tables.version, Ordering::Release);
        self.publish_counters();
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
        s.backend_packets.clone_from(&self.state.backend_packets);
        s.backend_bytes.clone_from(&self.state.backend_bytes);
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
    }
}

impl FrameHandler for LbHandler {
    #[inline]
    fn handle(&mut self, frame: &mut Frame<'_>, now_ns: u64) -> Action {
        self.refresh();
        self.since_publish += 1;
        if self.since_publish >= PUBLISH_EVERY {
            self.publish_counters();
        }
        let verdict = match &mut self.flow_cache {
            None => lb::process(frame, &self.tables, &mut self.ct, &mut self.state, now_ns),
            Some(fc) => {
                let mut rec = None;
                let v = lb::process::process_recorded(
                    frame,
                    &self.tables,
                    &mut self.ct,
                    &mut self.state,
                    now_ns,
                    &mut rec,
                );
                if let Some(d) = rec {
                    fc.after_decision(&d, &self.tables);
                }
                v
            }
        };
        match verdict {
            Verdict::Tx { ifindex } => Action::Tx { ifindex },
            Verdict::Pass => Action::Pass,
            Verdict::Drop(_) => Action::Drop,
        }
    }

    fn after_tx(&mut self) {
        if let Some(fc) = &mut self.flow_cache
            && fc.has_pending()
        {
            let published = &self.published;
            fc.install_pending(|version| published.version() == version);
        }
    }

    fn tick(&mut self, now_ns: u64) {
        self.refresh();
        if let Some(fc) = &mut self.flow_cache {
            fc.tick(&mut self.ct, now_ns);
        }
        self.ct.expire(now_ns, 256);
        self.publish_counters();
    }
}
