//! The table set the control plane publishes and every worker runs: one atomic swap per
//! commit, read on the hot path through one atomic load of the version per frame. Each
//! worker's engine registers a doorbell here, rung after every swap, so a worker asleep
//! without traffic adopts the new version at once instead of at a periodic wake-up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;

use crate::datapath::doorbell::{Bells, Doorbell};
use crate::lb::Tables;
use crate::lb::persist::PersistTable;
use crate::lb::process::CookieKey;

/// 128 bits from the kernel's random source; where it cannot be read, from the standard
/// library's per-process random hash keys (themselves drawn from the kernel at start).
pub fn draw_cookie_key() -> CookieKey {
    use std::hash::{BuildHasher, RandomState};
    use std::io::Read;
    let mut b = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if read.is_ok() {
        return CookieKey::from_bytes(b);
    }
    let s = RandomState::new();
    CookieKey([s.hash_one(1_u64), s.hash_one(2_u64)])
}

/// The table set every worker runs, swapped atomically by the control plane.
#[derive(Debug)]
pub struct Published {
    version: AtomicU64,
    tables: ArcSwap<Tables>,
    /// The persistence table every worker shares; it outlives table versions, so a
    /// client's backend is remembered across pool changes.
    persistence: Arc<PersistTable>,
    /// The SYN proxy's cookie secret, shared by the workers (a cookie one worker made
    /// checks on any other) and by the processes of a restart (`control::cookie_secret`).
    cookie_key: CookieKey,
    /// Until when (`CLOCK_MONOTONIC` ns) a cookie made here, or by the process before, may
    /// come back: the workers check flow-less ACKs to `"flood"` VIPs only until then.
    cookies_until: Arc<AtomicU64>,
    /// Flood mode is on (the control plane sets it at each tick that sees the XDP program
    /// switch it): the SYN proxy then answers `syn_proxy = "flood"` VIPs' SYNs too.
    flood: Arc<AtomicBool>,
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
            cookie_key: draw_cookie_key(),
            cookies_until: Arc::default(),
            flood: Arc::default(),
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

    /// The SYN proxy's cookie secret.
    pub fn cookie_key(&self) -> CookieKey {
        self.cookie_key
    }

    /// Runs with `key` as the cookie secret; `kept`: a process before this one used it, so
    /// its cookies may come back for two periods from `now_ns`.
    pub fn with_cookie_key(mut self, key: CookieKey, kept: bool, now_ns: u64) -> Published {
        self.cookie_key = key;
        if kept {
            let until = now_ns.saturating_add(2 * crate::lb::process::syn_cookie::PERIOD_NS);
            self.cookies_until.store(until, Ordering::Relaxed);
        }
        self
    }

    /// The time the workers' SYN proxies share: until when cookies may come back.
    pub fn cookies_until(&self) -> &Arc<AtomicU64> {
        &self.cookies_until
    }

    /// The flag the workers' SYN proxies read for flood mode.
    pub fn flood_flag(&self) -> &Arc<AtomicBool> {
        &self.flood
    }

    /// Tells the workers flood mode switched on or off.
    pub fn set_flood(&self, on: bool) {
        self.flood.store(on, Ordering::Relaxed);
    }

    /// The version of the newest published set.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }
}
