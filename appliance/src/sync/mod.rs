//! Connection sync (`[sync]`): the flows this appliance establishes and ends go to its
//! peers, and theirs are kept here as standby entries ([`crate::lb::standby`]) for the
//! day ECMP sends their frames here (a peer lost, a reshuffle).
//!
//! ```text
//! worker ticks --Note (try_send, bounded)--> sync thread --UDP datagrams (wire.rs)--> peers
//! peers --UDP--> sync thread --offer/end--> Standby <--miss-- workers (lb::process)
//! sync thread --caught up (oneshot)--> control loop: announce the VIPs
//! ```
//! Workers never block on sync: a note that finds the queue full is counted and dropped.
//! The thread ([`service`]) owns the socket, batches notes into datagrams, paces them to
//! `[sync] rate` records a second, keeps the flows it announced (for a peer's catch-up)
//! and the replay windows of its peers. At start it asks every peer for its flows and
//! tells the control loop it has caught up once each answered or `catch_up_timeout` passed;
//! until then the appliance announces no VIP, so the routers send it no frame of a flow it
//! does not know yet.

pub mod service;
pub mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};

use crate::lb::FlowKey;
use crate::lb::conntrack::FlowRecord;
use crate::lb::standby::Standby;

/// The shortest key accepted (bytes of the key file, a trailing newline left out).
pub const MIN_KEY_LEN: usize = 32;
/// Notes the workers may queue toward the sync thread.
pub const OUTBOX: usize = 1 << 16;

/// Why sync could not start.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The key file could not be read.
    #[error("[sync] key_file {path}: {source} (it must hold the group's shared key)")]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The key is too short to authenticate anything.
    #[error(
        "[sync] key_file {path}: {len} bytes; the shared key needs at least {MIN_KEY_LEN} \
         (e.g. `head -c 32 /dev/urandom | base64 > {path}` on one appliance, copied to all)"
    )]
    ShortKey {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: usize,
    },
    /// The listen address could not be bound.
    #[error("[sync] listen {addr}: {source} (an address of this appliance, a free UDP port)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The thread could not start.
    #[error("sync thread: {0}")]
    Thread(std::io::Error),
}

/// What a worker tells the sync thread.
#[derive(Debug, Clone, Copy)]
pub enum Note {
    /// A flow became established.
    Established(FlowRecord),
    /// An established flow ended.
    Ended(FlowKey),
}

/// Sync's counters (metrics and `sluice ctl status`).
#[derive(Debug, Default)]
pub struct SyncStats {
    /// Records sent (each counted once, whatever the number of peers).
    pub records_sent: AtomicU64,
    /// Ended flows sent.
    pub ended_sent: AtomicU64,
    /// Authentic records received.
    pub records_received: AtomicU64,
    /// Authentic ended flows received.
    pub ended_received: AtomicU64,
    /// Datagrams sent (to all peers).
    pub datagrams_sent: AtomicU64,
    /// Datagrams and bytes sent and received.
    pub bytes_sent: AtomicU64,
    /// Datagrams received and accepted.
    pub datagrams_received: AtomicU64,
    /// Datagrams whose tag did not match (another key, forged).
    pub auth_failures: AtomicU64,
    /// Datagrams cut short or unreadable.
    pub garbage: AtomicU64,
    /// Datagrams seen before, or sent outside the clock window.
    pub replays: AtomicU64,
    /// Datagrams from an address that is not a peer.
    pub unknown_peer: AtomicU64,
    /// Notes dropped because the workers' queue was full.
    pub outbox_full: AtomicU64,
    /// Records left out because the send rate was spent.
    pub rate_limited: AtomicU64,
    /// Datagrams the kernel refused to send.
    pub send_errors: AtomicU64,
    /// Records the standby table refused (full).
    pub standby_full: AtomicU64,
    /// Milliseconds between a peer sending the newest accepted datagram and its arrival.
    pub lag_ms: AtomicU64,
    /// Catch-ups served to peers.
    pub catch_ups_served: AtomicU64,
    /// This appliance still waits for its peers' flows (it announces nothing meanwhile).
    pub catching_up: AtomicBool,
}

/// A worker's end of the queue to the sync thread.
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: SyncSender<Note>,
    stats: Arc<SyncStats>,
}

impl Outbox {
    /// Counts `n` notes the connection table left out (too many between two drains).
    pub fn lost(&self, n: u64) {
        if n > 0 {
            self.stats.outbox_full.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Queues `n` without waiting; a full queue drops it (counted).
    pub fn send(&self, n: Note) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(n) {
            self.stats.outbox_full.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What the workers need of sync.
#[derive(Debug, Clone)]
pub struct SyncHandle {
    /// The standby table, consulted on a miss.
    pub standby: Arc<Standby>,
    /// Where the workers send their news.
    pub outbox: Outbox,
    /// The counters.
    pub stats: Arc<SyncStats>,
}

/// Reads the shared key from `path`.
pub fn read_key(path: &std::path::Path) -> Result<Vec<u8>, SyncError> {
    let mut key = std::fs::read(path).map_err(|source| SyncError::Key {
        path: path.to_path_buf(),
        source,
    })?;
    while key.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        key.pop();
    }
    if key.len() < MIN_KEY_LEN {
        return Err(SyncError::ShortKey {
            path: path.to_path_buf(),
            len: key.len(),
        });
    }
    Ok(key)
}

/// Sync's part of the status document (`sluice ctl status`).
pub fn status(h: &SyncHandle) -> api::SyncStatus {
    let s = &h.stats;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    api::SyncStatus {
        catching_up: s.catching_up.load(Ordering::Relaxed),
        standby_entries: h.standby.len() as u64,
        standby_taken: n(&h.standby.stats.taken),
        records_sent: n(&s.records_sent),
        records_received: n(&s.records_received),
        ended_sent: n(&s.ended_sent),
        ended_received: n(&s.ended_received),
        auth_failures: n(&s.auth_failures),
        garbage: n(&s.garbage),
        replays: n(&s.replays),
        unknown_peer: n(&s.unknown_peer),
        left_out: n(&s.outbox_full) + n(&s.rate_limited) + n(&s.send_errors) + n(&s.standby_full),
        lag_ms: n(&s.lag_ms),
    }
}
