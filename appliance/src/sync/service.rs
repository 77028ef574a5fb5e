//! The sync thread: one UDP socket, the workers' notes batched into datagrams to every
//! peer at a bounded rate, the peers' datagrams checked ([`super::wire`]) and kept in the
//! standby table, and the catch-up both ways (see the module docs of [`super`]).

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::wire::{self, Body, Header, Window, WireError};
use super::{Note, Outbox, SyncError, SyncHandle, SyncStats};
use crate::config::Sync as SyncConfig;
use crate::lb::FlowKey;
use crate::lb::conntrack::{ConnTable, FlowRecord};
use crate::lb::standby::{Offered, Standby};

/// How long the thread waits for a datagram before it looks at the workers' notes.
const PASS: Duration = Duration::from_millis(5);
/// How often a peer that has not answered the catch-up request is asked again.
const ASK_AGAIN: Duration = Duration::from_secs(1);

/// The running sync thread.
pub struct Service {
    /// What the workers and the readers need.
    pub handle: SyncHandle,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Service {
    /// Binds `[sync] listen` and starts the thread; `caught_up` fires once this appliance
    /// has every peer's flows (or the catch-up timed out).
    pub fn start(
        c: &SyncConfig,
        timeouts: config::Timeouts,
        caught_up: tokio::sync::oneshot::Sender<()>,
    ) -> Result<Service, SyncError> {
        let key = super::read_key(&c.key_file)?;
        let socket = UdpSocket::bind(c.listen).map_err(|source| SyncError::Bind {
            addr: c.listen,
            source,
        })?;
        socket
            .set_read_timeout(Some(PASS))
            .map_err(SyncError::Thread)?;
        let stats = Arc::new(SyncStats::default());
        stats.catching_up.store(true, Ordering::Relaxed);
        let standby = Arc::new(Standby::new(c.standby as usize));
        let (tx, rx) = sync_channel(super::OUTBOX);
        let handle = SyncHandle {
            standby: Arc::clone(&standby),
            outbox: Outbox {
                tx,
                stats: Arc::clone(&stats),
            },
            stats: Arc::clone(&stats),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let mut t = Thread {
            socket,
            key,
            peers: c.peers.clone(),
            windows: HashMap::new(),
            notes: rx,
            stats,
            standby,
            ttl: ConnTable::new(1, timeouts, 0, 0, 1),
            session: session(),
            seq: 0,
            mine: HashMap::new(),
            mine_max: c.standby as usize,
            pending: Vec::new(),
            ended: Vec::new(),
            pending_since: None,
            bucket: Bucket::new(c.rate),
            serving: VecDeque::new(),
            asked: c.peers.iter().map(|p| (*p, None)).collect(),
            catch_up_by: Instant::now() + c.catch_up_timeout,
            caught_up: Some(caught_up),
            last_expire: Instant::now(),
            stop: Arc::clone(&stop),
        };
        let thread = std::thread::Builder::new()
            .name("sluice-sync".into())
            .spawn(move || t.run())
            .map_err(SyncError::Thread)?;
        Ok(Service {
            handle,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A session number unlikely to repeat across starts (uniqueness, not secrecy: the tag
/// authenticates).
fn session() -> u64 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    crate::lb::hash::mix64(t ^ u64::from(std::process::id()).rotate_left(40)) | 1
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Records a second, as a token bucket of one second's depth.
struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: u32) -> Bucket {
        Bucket {
            rate: f64::from(rate),
            tokens: f64::from(rate),
            at: Instant::now(),
        }
    }

    fn take(&mut self, n: usize) -> bool {
        let now = Instant::now();
        let dt = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.rate);
        if self.tokens >= n as f64 {
            self.tokens -= n as f64;
            true
        } else {
            false
        }
    }
}

/// A catch-up being sent to a peer.
struct Serving {
    peer: SocketAddr,
    records: Vec<FlowRecord>,
}

struct Thread {
    socket: UdpSocket,
    key: Vec<u8>,
    peers: Vec<SocketAddr>,
    windows: HashMap<SocketAddr, Window>,
    notes: Receiver<Note>,
    stats: Arc<SyncStats>,
    standby: Arc<Standby>,
    /// The idle timeouts by state (a table of one flow, for its `timeout_ns`).
    ttl: ConnTable,
    session: u64,
    seq: u64,
    /// The flows this appliance announced and has not ended (a peer's catch-up).
    mine: HashMap<FlowKey, FlowRecord>,
    mine_max: usize,
    pending: Vec<FlowRecord>,
    ended: Vec<FlowKey>,
    pending_since: Option<Instant>,
    bucket: Bucket,
    serving: VecDeque<Serving>,
    /// Peers asked for their flows: when last (`None`: not yet); removed once done.
    asked: HashMap<SocketAddr, Option<Instant>>,
    catch_up_by: Instant,
    caught_up: Option<tokio::sync::oneshot::Sender<()>>,
    last_expire: Instant,
    stop: Arc<AtomicBool>,
}

impl Thread {
    fn run(&mut self) {
        let mut buf = vec![0u8; 65536];
        while !self.stop.load(Ordering::Relaxed) {
            match self.socket.recv_from(&mut buf) {
                Ok((n, from)) => self.received(&buf[..n], from),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => tracing::warn!(error = %e, "sync: receive failed"),
            }
            self.take_notes();
            self.flush(false);
            self.serve();
            self.catch_up();
            if self.last_expire.elapsed() >= Duration::from_secs(1) {
                self.last_expire = Instant::now();
                self.standby.expire(crate::datapath::monotonic_ns());
            }
        }
    }

    fn received(&mut self, d: &[u8], from: SocketAddr) {
        let s = &self.stats;
        if !self.peers.contains(&from) {
            s.unknown_peer.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let now_ms = unix_ms();
        let (h, body) = match wire::open(&self.key, d) {
            Ok(x) => x,
            Err(e) => return self.refused(&e, from),
        };
        if let Err(e) = self.windows.entry(from).or_default().accept(&h, now_ms) {
            return self.refused(&e, from);
        }
        s.datagrams_received.fetch_add(1, Ordering::Relaxed);
        s.lag_ms
            .store(now_ms.saturating_sub(h.sent_ms), Ordering::Relaxed);
        let now = crate::datapath::monotonic_ns();
        match body {
            Body::Records(records) => {
                s.records_received
                    .fetch_add(records.len() as u64, Ordering::Relaxed);
                for r in &records {
                    let ttl = self.ttl.timeout_ns(r.state);
                    if self.standby.offer(r, ttl, now) == Offered::Full {
                        s.standby_full.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Body::Ended(keys) => {
                s.ended_received
                    .fetch_add(keys.len() as u64, Ordering::Relaxed);
                for k in &keys {
                    self.standby.end(k);
                }
            }
            Body::CatchUpRequest => {
                // A newer request replaces one still being served.
                self.serving.retain(|c| c.peer != from);
                self.serving.push_back(Serving {
                    peer: from,
                    records: self.mine.values().copied().collect(),
                });
            }
            Body::CatchUpDone => {
                self.asked.remove(&from);
            }
        }
    }

    fn refused(&self, e: &WireError, from: SocketAddr) {
        let c = match e {
            WireError::BadTag => &self.stats.auth_failures,
            WireError::Truncated(_) | WireError::Garbage(_) => &self.stats.garbage,
            WireError::Replay { .. } | WireError::Stale(_) => &self.stats.replays,
        };
        // Counted, not logged per datagram: a flood must not flood the log too.
        if c.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(peer = %from, error = %e, "sync: datagram refused (first of its kind)");
        }
    }

    fn take_notes(&mut self) {
        for _ in 0..super::OUTBOX {
            let Ok(n) = self.notes.try_recv() else {
                break;
            };
            self.pending_since.get_or_insert_with(Instant::now);
            match n {
                Note::Established(r) => {
                    if self.mine.len() < self.mine_max || self.mine.contains_key(&r.key) {
                        self.mine.insert(r.key, r);
                    }
                    self.pending.push(r);
                }
                Note::Ended(k) => {
                    self.mine.remove(&k);
                    self.ended.push(k);
                }
            }
            if self.pending.len() >= wire::RECORDS_PER_DATAGRAM
                || self.ended.len() >= wire::KEYS_PER_DATAGRAM
            {
                self.flush(true);
            }
        }
    }

    /// Sends what is pending when a datagram is full, or `PASS` after the first note.
    fn flush(&mut self, full: bool) {
        let due = full || self.pending_since.is_some_and(|t| t.elapsed() >= PASS);
        if !due {
            return;
        }
        self.pending_since = None;
        while !self.pending.is_empty() {
            let n = self.pending.len().min(wire::RECORDS_PER_DATAGRAM);
            let batch: Vec<FlowRecord> = self.pending.drain(..n).collect();
            if !self.bucket.take(n) {
                self.stats
                    .rate_limited
                    .fetch_add(n as u64, Ordering::Relaxed);
                continue;
            }
            self.stats
                .records_sent
                .fetch_add(n as u64, Ordering::Relaxed);
            self.send_all(&Body::Records(batch));
        }
        while !self.ended.is_empty() {
            let n = self.ended.len().min(wire::KEYS_PER_DATAGRAM);
            let batch: Vec<FlowKey> = self.ended.drain(..n).collect();
            self.stats.ended_sent.fetch_add(n as u64, Ordering::Relaxed);
            self.send_all(&Body::Ended(batch));
        }
    }

    fn send_all(&mut self, body: &Body) {
        for p in self.peers.clone() {
            self.send(p, body);
        }
    }

    fn send(&mut self, to: SocketAddr, body: &Body) {
        self.seq += 1;
        let h = Header {
            session: self.session,
            seq: self.seq,
            sent_ms: unix_ms(),
        };
        let d = wire::seal(&self.key, h, body);
        match self.socket.send_to(&d, to) {
            Ok(_) => {
                self.stats.datagrams_sent.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .bytes_sent
                    .fetch_add(d.len() as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.stats.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Sends the next datagram of the first catch-up being served, within the rate.
    fn serve(&mut self) {
        let Some(c) = self.serving.front_mut() else {
            return;
        };
        let n = c.records.len().min(wire::RECORDS_PER_DATAGRAM);
        if n > 0 && !self.bucket.take(n) {
            return;
        }
        let peer = c.peer;
        let batch: Vec<FlowRecord> = c.records.drain(..n).collect();
        let done = c.records.is_empty();
        if n > 0 {
            self.stats
                .records_sent
                .fetch_add(n as u64, Ordering::Relaxed);
            self.send(peer, &Body::Records(batch));
        }
        if done {
            self.serving.pop_front();
            self.send(peer, &Body::CatchUpDone);
            self.stats.catch_ups_served.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks the peers that have not answered, and says when this appliance caught up.
    fn catch_up(&mut self) {
        if self.caught_up.is_none() {
            return;
        }
        let now = Instant::now();
        if self.asked.is_empty() || now >= self.catch_up_by {
            if !self.asked.is_empty() {
                let silent: Vec<String> = self.asked.keys().map(|p| p.to_string()).collect();
                tracing::warn!(
                    peers = %silent.join(", "),
                    "sync: catch-up timed out; announcing without these peers' flows"
                );
            }
            self.stats.catching_up.store(false, Ordering::Relaxed);
            tracing::info!(
                standby = self.standby.len(),
                "sync: caught up with the peers' flows"
            );
            if let Some(tx) = self.caught_up.take() {
                let _ = tx.send(());
            }
            return;
        }
        let due: Vec<SocketAddr> = self
            .asked
            .iter()
            .filter(|(_, at)| at.is_none_or(|t| now.duration_since(t) >= ASK_AGAIN))
            .map(|(p, _)| *p)
            .collect();
        for p in due {
            self.send(p, &Body::CatchUpRequest);
            self.asked.insert(p, Some(now));
        }
    }
}

#[cfg(test)]
mod tests;
