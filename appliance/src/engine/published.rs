//! The table set the control plane publishes and every worker runs: one atomic swap per
//! commit, read on the hot path through one atomic load of the version per frame. Each
//! worker's engine registers a doorbell here, rung after every swap, so a worker asleep
//! without traffic adopts the new version at once instead of at a periodic wake-up.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

use crate::datapath::doorbell::{Bells, Doorbell};
use crate::lb::Tables;
use crate::lb::persist::PersistTable;

/// The table set every worker runs, swapped atomically by the control plane.
#[derive(Debug)]
pub struct Published {
    version: AtomicU64,
    tables: ArcSwap<Tables>,
    /// The persistence table every worker shares; it outlives table versions, so a
    /// client's backend is remembered across pool changes.
    persistence: Arc<PersistTable>,
    /// The workers' doorbells.
    bells: Bells,
}

impl Published {
    /// Starts with `tables` as the running version.
    pub fn new(tables: impl Into<Arc<Tables>>) -> Published {
        let tables = tables.into();
        Published {
            version: AtomicU64::new(tables.version),
            tables: ArcSwap::new(tables),
            persistence: Arc::new(PersistTable::default()),
            bells: Bells::default(),
        }
    }

    /// Publishes a new table set; workers pick it up on their next frame, and idle ones
    /// when their doorbell rings.
    pub fn publish(&self, tables: impl Into<Arc<Tables>>) {
        let tables = tables.into();
        let v = tables.version;
        self.tables.store(tables);
        self.version.store(v, Ordering::Release);
        self.bells.ring_all();
    }

    /// A doorbell that every later [`Published::publish`] rings, for one worker.
    pub fn doorbell(&self) -> std::io::Result<Doorbell> {
        self.bells.register()
    }

    /// The current table set.
    pub fn current(&self) -> Arc<Tables> {
        self.tables.load_full()
    }

    /// The persistence table the workers share.
    pub fn persistence(&self) -> &Arc<PersistTable> {
        &self.persistence
    }

    /// The version of the newest published set.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }
}
