//! The worker side of the table swap: each datapath worker runs one [`LbHandler`], which
//! looks tables up and calls [`lb::process`], and publishes its counters now and then.
//!
//! The hot path takes no lock: a new table set is noticed through one relaxed atomic load of
//! the published version per frame, and only then is the `Arc<Tables>` fetched. Counters are
//! copied out with `try_lock` when the worker is idle or every [`PUBLISH_EVERY`] frames, so a
//! slow reader never stalls forwarding.

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

/// A worker's counters as last published.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Table version the worker runs.
    pub version: u64,
    pub drops: [u64; DropReason::COUNT],
    pub stats: lb::process::WorkerStats,
    /// Per VIP slot of `version`.
    pub vip_packets: Vec<u64>,
    pub vip_bytes: Vec<u64>,
    /// Per backend slot of `version`.
    pub backend_packets: Vec<u64>,
    pub backend_bytes: Vec<u64>,
    pub conntrack_len: usize,
}

/// One worker's packet engine.
pub struct LbHandler {
    published: Arc<Published>,
    tables: Arc<Tables>,
    ct: ConnTable,
    state: WorkerState,
    out: Arc<Mutex<Snapshot>>,
    since_publish: u32,
}

impl LbHandler {
    /// Worker `worker` of `workers`, with a connection table of `capacity` flows.
    pub fn new(
        published: Arc<Published>,
        capacity: usize,
        worker: u16,
        workers: u16,
        out: Arc<Mutex<Snapshot>>,
    ) -> LbHandler {
        let tables = published.current();
        let ct = ConnTable::new(
            capacity,
            tables.timeouts,
            tables.backends.len(),
            worker,
            workers,
        );
        LbHandler {
            published,
            tables,
            ct,
            state: WorkerState::new(),
            out,
            since_publish: 0,
        }
    }

    #[inline]
    fn refresh(&mut self) {
        if self.published.version() != self.tables.version {
            self.publish_counters();
            self.tables = self.published.current();
        }
    }

    fn publish_counters(&mut self) {
        self.since_publish = 0;
        let Ok(mut s) = self.out.try_lock() else {
            return;
        };
        s.version = self.tables.version;
        s.drops = self.state.drops;
        s.stats = self.state.stats;
        s.vip_packets.clone_from(&self.state.vip_packets);
        s.vip_bytes.clone_from(&self.state.vip_bytes);
        s.backend_packets.clone_from(&self.state.backend_packets);
        s.backend_bytes.clone_from(&self.state.backend_bytes);
        s.conntrack_len = self.ct.len();
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
        match lb::process(frame, &self.tables, &mut self.ct, &mut self.state, now_ns) {
            Verdict::Tx { ifindex } => Action::Tx { ifindex },
            Verdict::Pass => Action::Pass,
            Verdict::Drop(_) => Action::Drop,
        }
    }

    fn tick(&mut self, now_ns: u64) {
        self.refresh();
        self.ct.expire(now_ns, 256);
        self.publish_counters();
    }
}
