//! Connection limits per backend (`max_connections` / `resume_connections`, ipvsadm's `-x`
//! and `-y`): whether a backend may take a new flow, decided without locks by every worker.
//!
//! Each worker owns its connection table, so a backend's connections are the sum of every
//! worker's count. The [`LimitBoard`] of a table version holds, for each backend with a
//! limit, one atomic cell per worker that only that worker writes (its own count, stored
//! before it checks the limit and on every idle tick), and a shared `full` flag. A new flow
//! sums the cells (one relaxed load per worker) and compares with the thresholds, like LVS's
//! `IP_VS_DEST_F_OVERLOAD`: set when the total reaches `max_connections`, cleared when it
//! falls below `resume_connections`. What another worker opened since its last store is not
//! seen yet; that lag is one frame of that worker on the new-flow path (it stores first), and
//! an idle tick for removals, so a burst of SYNs on many workers at once can exceed the limit
//! by at most one flow per other worker. Counts are LVS's: established and other entries
//! (handshaking, closing, UDP) alike, so a SYN flood on a limited backend fills its limit.
//!
//! A version's board starts at zero: each worker stores its rebound counts when it adopts
//! the version, and workers still on the old version keep using the old board.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Workers a board has cells for; a worker index at or above it shares the last cell row.
pub const MAX_WORKERS: usize = 64;

/// One backend's limit as the tables hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Connections at which the backend becomes full.
    pub max: u32,
    /// Connections below which a full backend takes new flows again (at most `max`).
    pub resume: u32,
}

/// The shared counts of one table version's limited backends (see the module docs).
#[derive(Debug)]
pub struct LimitBoard {
    /// `MAX_WORKERS` cells per limited backend, backend-major.
    counts: Vec<AtomicU32>,
    full: Vec<AtomicBool>,
}

impl LimitBoard {
    /// A board for `limited` backends, every count zero.
    pub fn new(limited: usize) -> LimitBoard {
        LimitBoard {
            counts: (0..limited * MAX_WORKERS)
                .map(|_| AtomicU32::new(0))
                .collect(),
            full: (0..limited).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Limited backends on the board.
    pub fn len(&self) -> usize {
        self.full.len()
    }

    /// Whether no backend has a limit.
    pub fn is_empty(&self) -> bool {
        self.full.is_empty()
    }

    /// Stores worker `worker`'s count of limited backend `index`.
    #[inline]
    pub fn store(&self, index: u32, worker: u16, count: u32) {
        let w = usize::from(worker).min(MAX_WORKERS - 1);
        if let Some(c) = self.counts.get(index as usize * MAX_WORKERS + w) {
            c.store(count, Ordering::Relaxed);
        }
    }

    /// Connections of limited backend `index` over `workers` workers.
    #[inline]
    pub fn total(&self, index: u32, workers: u16) -> u64 {
        let base = index as usize * MAX_WORKERS;
        let n = usize::from(workers).clamp(1, MAX_WORKERS);
        self.counts.get(base..base + n).map_or(0, |cells| {
            cells
                .iter()
                .map(|c| u64::from(c.load(Ordering::Relaxed)))
                .sum()
        })
    }

    /// Whether limited backend `index` takes no new flow now, updating its flag with the
    /// total: full from `max` on, until the total is below `resume`.
    #[inline]
    pub fn is_full(&self, index: u32, limit: Limit, workers: u16) -> bool {
        let Some(flag) = self.full.get(index as usize) else {
            return false;
        };
        let total = self.total(index, workers);
        let was = flag.load(Ordering::Relaxed);
        let now = next_full(was, total, limit);
        if now != was {
            flag.store(now, Ordering::Relaxed);
        }
        now
    }

    /// Whether limited backend `index` is marked full (for the API; no update).
    pub fn marked_full(&self, index: u32) -> bool {
        self.full
            .get(index as usize)
            .is_some_and(|f| f.load(Ordering::Relaxed))
    }
}

/// The hysteresis: a backend below its limit becomes full at `max` connections; a full one
/// stays full until it has fewer than `resume`.
pub fn next_full(was_full: bool, total: u64, limit: Limit) -> bool {
    if was_full {
        total >= u64::from(limit.resume)
    } else {
        total >= u64::from(limit.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_at_max_until_below_resume() {
        let l = Limit { max: 5, resume: 3 };
        assert!(!next_full(false, 4, l));
        assert!(next_full(false, 5, l));
        assert!(next_full(true, 4, l));
        assert!(next_full(true, 3, l));
        assert!(!next_full(true, 2, l));
        // resume = max (the default): full exactly while at the limit.
        let l = Limit { max: 5, resume: 5 };
        assert!(next_full(false, 5, l));
        assert!(!next_full(true, 4, l));
    }

    #[test]
    fn board_sums_every_workers_cell() {
        let b = LimitBoard::new(2);
        let l = Limit { max: 5, resume: 4 };
        b.store(1, 0, 2);
        b.store(1, 3, 2);
        assert_eq!(b.total(1, 4), 4);
        assert_eq!(b.total(0, 4), 0);
        // Cells of workers beyond the count given are not summed.
        assert_eq!(b.total(1, 2), 2);
        assert!(!b.is_full(1, l, 4));
        b.store(1, 2, 1);
        assert!(b.is_full(1, l, 4));
        assert!(b.marked_full(1));
        // One connection closes: 4 is not below resume 4, still full; then 3 is.
        b.store(1, 2, 0);
        assert!(b.is_full(1, l, 4));
        b.store(1, 0, 1);
        assert!(!b.is_full(1, l, 4));
        // Out-of-range indexes are never full and never panic.
        assert!(!b.is_full(9, l, 4));
        b.store(9, 0, 1);
    }
}
