//! The per-worker connection table.
//!
//! Established flows must keep their backend when pools change (a new backend would reset
//! them), and NAT/FullNAT return traffic must find the client it belongs to. Each datapath
//! worker owns one table: fixed capacity, allocated once at creation, so the packet path
//! never allocates and never shares a cache line with another core.
//!
//! Entries live in a slab; two open-addressing indexes (linear probing, backward-shift
//! deletion, so no tombstones accumulate) find them by the forward key (client → VIP) and by
//! the reverse key (backend → client for NAT, backend → local SNAT address/port for
//! FullNAT). An intrusive doubly linked list keeps entries in least-recently-used order.
//!
//! Timeouts follow the TCP state (`tcp_syn`, `tcp_established`, `tcp_closing`) or `udp`, and
//! expiry is decided from the `now` the caller passes (the table never reads a clock). When
//! the table is full, the oldest of the [`EVICT_SCAN`] least recently used entries that is
//! expired, half-open or closing is evicted; established TCP and live UDP flows are never
//! evicted, and when nothing qualifies the insert fails so the caller can fall back to the
//! stateless Maglev answer (and count it).
//!
//! The table also keeps each backend's active (established TCP) and inactive (everything
//! else) connection counts, which the LVS schedulers read; every insert, state change,
//! removal and expiry updates them.
//!
//! FullNAT local ports are allocated so that no two flows share (protocol, backend address,
//! backend port, local address, local port): a candidate port is free exactly when the
//! reverse index has no live entry for it. Ports are partitioned between workers (`port %
//! workers == worker`) so the steering program can send return traffic to the worker that
//! owns the flow.

use crate::config::Timeouts;
use crate::lb::hash::{FlowKey, mix64};

/// How many least-recently-used entries an insert into a full table examines for eviction.
pub const EVICT_SCAN: usize = 8;
/// Lowest FullNAT local port (below are well-known and registered services).
pub const SNAT_PORT_MIN: u16 = 1024;
/// FullNAT port candidates tried per local address before trying the next address.
pub const SNAT_PROBES: usize = 64;
/// A flow moves to the head of the LRU list at most this often (1 ms): relinking touches
/// two neighbours' cache lines, and a busy flow would pay it on every packet for an order
/// that only matters at millisecond scale (eviction compares idle times of seconds).
pub const LRU_GRANULARITY_NS: u64 = 1_000_000;

const NONE: u32 = u32::MAX;

/// Connection state, which selects the idle timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowState {
    /// A SYN was seen, the handshake has not completed.
    TcpSyn,
    /// Handshake done (or joined mid-flow).
    TcpEstablished,
    /// FIN or RST seen.
    TcpClosing,
    /// Any UDP flow.
    Udp,
}

impl FlowState {
    /// The state's name for traces and the console.
    pub fn name(self) -> &'static str {
        match self {
            FlowState::TcpSyn => "syn",
            FlowState::TcpEstablished => "established",
            FlowState::TcpClosing => "closing",
            FlowState::Udp => "udp",
        }
    }

    fn is_active(self) -> bool {
        self == FlowState::TcpEstablished
    }

    fn evictable(self) -> bool {
        matches!(self, FlowState::TcpSyn | FlowState::TcpClosing)
    }
}

/// TCP flag bits as they appear in the header's flags byte.
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// The state a TCP flow starts in, given the flags of its first packet. A flow joined
/// mid-stream (a worker restarted, tables swapped) is taken as established.
pub fn initial_tcp_state(flags: u8) -> FlowState {
    if flags & (tcp_flags::FIN | tcp_flags::RST) != 0 {
        FlowState::TcpClosing
    } else if flags & tcp_flags::SYN != 0 && flags & tcp_flags::ACK == 0 {
        FlowState::TcpSyn
    } else {
        FlowState::TcpEstablished
    }
}

/// The next state after a TCP packet with `flags` in either direction.
pub fn next_tcp_state(cur: FlowState, flags: u8) -> FlowState {
    if flags & (tcp_flags::FIN | tcp_flags::RST) != 0 {
        return FlowState::TcpClosing;
    }
    match cur {
        FlowState::TcpSyn if flags & tcp_flags::ACK != 0 && flags & tcp_flags::SYN == 0 => {
            FlowState::TcpEstablished
        }
        // A fresh SYN on a closing tuple is a new connection on the same backend.
        FlowState::TcpClosing if flags & tcp_flags::SYN != 0 && flags & tcp_flags::ACK == 0 => {
            FlowState::TcpSyn
        }
        s => s,
    }
}

/// The key return traffic carries: backend → local side (client for NAT, SNAT address and
/// port for FullNAT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RevKey {
    /// IANA protocol number.
    pub proto: u8,
    /// Backend address (source of return traffic).
    pub backend: u128,
    /// Backend port.
    pub backend_port: u16,
    /// Destination of return traffic: the client (NAT) or the SNAT address (FullNAT).
    pub local: u128,
    /// Destination port of return traffic.
    pub local_port: u16,
}

/// One tracked flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Client → VIP key (the VIP identity is its destination address, port and protocol).
    pub key: FlowKey,
    /// VIP slot in the table version `version`.
    pub vip: u32,
    /// Backend slot in table version `version`; `u32::MAX` when the backend is gone.
    pub backend: u32,
    /// Backend address, so the flow can be re-bound after a table swap.
    pub backend_addr: u128,
    /// Backend port.
    pub backend_port: u16,
    /// Table version the slots refer to.
    pub version: u64,
    /// Connection state.
    pub state: FlowState,
    /// Last packet seen, in the caller's nanosecond clock.
    pub last_seen: u64,
    /// The flow hash under the VIP's hash fields (tunnel outer source, stateless answers).
    pub hash: u32,
    /// FullNAT local address and port.
    pub snat: Option<(u128, u16)>,
    /// Whether the reverse index holds this flow (NAT, FullNAT).
    pub reverse: bool,
}

impl Flow {
    /// The reverse key of this flow, if return traffic passes the appliance.
    pub fn rev_key(&self) -> Option<RevKey> {
        if !self.reverse {
            return None;
        }
        let (local, local_port) = self.snat.unwrap_or((self.key.src, self.key.sport));
        Some(RevKey {
            proto: self.key.proto,
            backend: self.backend_addr,
            backend_port: self.backend_port,
            local,
            local_port,
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    flow: Flow,
    used: bool,
    counted_backend: u32,
    counted_active: bool,
    lru_at: u64,
    prev: u32,
    next: u32,
}

/// Open-addressing index of entry ids with stored hashes.
#[derive(Debug, Clone)]
struct Index {
    slots: Vec<(u32, u32)>,
    mask: usize,
}

impl Index {
    fn new(capacity: usize) -> Index {
        let size = (capacity.max(4) * 2).next_power_of_two();
        Index {
            slots: vec![(NONE, 0); size],
            mask: size - 1,
        }
    }

    #[inline(always)]
    fn find(&self, hash: u32, mut eq: impl FnMut(u32) -> bool) -> Option<(usize, u32)> {
        let mut i = hash as usize & self.mask;
        loop {
            let (id, h) = self.slots[i];
            if id == NONE {
                return None;
            }
            if h == hash && eq(id) {
                return Some((i, id));
            }
            i = (i + 1) & self.mask;
        }
    }

    fn insert(&mut self, hash: u32, id: u32) {
        let mut i = hash as usize & self.mask;
        while self.slots[i].0 != NONE {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = (id, hash);
    }

    /// Backward-shift deletion: later members of the probe run move up so lookups never
    /// stop early at the hole.
    fn remove_at(&mut self, mut hole: usize) {
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let (id, h) = self.slots[j];
            if id == NONE {
                break;
            }
            let home = h as usize & self.mask;
            // Move j into the hole unless its home lies cyclically in (hole, j].
            let dist_home = j.wrapping_sub(home) & self.mask;
            let dist_hole = j.wrapping_sub(hole) & self.mask;
            if dist_home >= dist_hole {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = (NONE, 0);
    }
}

#[inline]
fn fold(a: u128) -> u64 {
    (a as u64) ^ ((a >> 64) as u64).rotate_left(29)
}

#[inline]
fn fwd_hash(k: &FlowKey) -> u32 {
    let x = fold(k.src)
        ^ fold(k.dst).rotate_left(13)
        ^ (u64::from(k.sport) << 48)
        ^ (u64::from(k.dport) << 32)
        ^ (u64::from(k.proto) << 24)
        ^ u64::from(k.v6);
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 29) as u32
}

#[inline]
fn rev_hash(k: &RevKey) -> u32 {
    let x = fold(k.backend).rotate_left(7)
        ^ fold(k.local)
        ^ (u64::from(k.backend_port) << 48)
        ^ (u64::from(k.local_port) << 32)
        ^ (u64::from(k.proto) << 24);
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 29) as u32
}

/// Why an insert failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// Full, and none of the least recently used entries may be evicted.
    Full,
}

/// Table counters (the worker folds them into its statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Flows inserted.
    pub inserted: u64,
    /// Flows removed because their timeout passed.
    pub expired: u64,
    /// Live flows evicted to make room.
    pub evicted: u64,
    /// Inserts refused because the table was full.
    pub full: u64,
}

/// A worker's connection table.
#[derive(Debug, Clone)]
pub struct ConnTable {
    slots: Vec<Slot>,
    fwd: Index,
    rev: Index,
    free: u32,
    head: u32,
    tail: u32,
    len: usize,
    timeouts_ns: [u64; 4],
    active: Vec<u32>,
    inactive: Vec<u32>,
    worker: u16,
    workers: u16,
    /// Counters since creation.
    pub stats: ConnStats,
}

fn ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn state_index(s: FlowState) -> usize {
    match s {
        FlowState::TcpSyn => 0,
        FlowState::TcpEstablished => 1,
        FlowState::TcpClosing => 2,
        FlowState::Udp => 3,
    }
}

impl ConnTable {
    /// A table of `capacity` flows (at least 1) for worker `worker` of `workers`, counting
    /// connections for up to `backends` backend slots.
    pub fn new(
        capacity: usize,
        timeouts: Timeouts,
        backends: usize,
        worker: u16,
        workers: u16,
    ) -> ConnTable {
        let capacity = capacity.clamp(1, NONE as usize - 1);
        let empty = Slot {
            flow: Flow {
                key: FlowKey {
                    src: 0,
                    dst: 0,
                    sport: 0,
                    dport: 0,
                    proto: 0,
                    v6: false,
                },
                vip: NONE,
                backend: NONE,
                backend_addr: 0,
                backend_port: 0,
                version: 0,
                state: FlowState::Udp,
                last_seen: 0,
                hash: 0,
                snat: None,
                reverse: false,
            },
            used: false,
            counted_backend: NONE,
            counted_active: false,
            lru_at: 0,
            prev: NONE,
            next: NONE,
        };
        let mut slots = vec![empty; capacity];
        for (i, s) in slots.iter_mut().enumerate() {
            s.next = if i + 1 < capacity { i as u32 + 1 } else { NONE };
        }
        let workers = workers.max(1);
        ConnTable {
            slots,
            fwd: Index::new(capacity),
            rev: Index::new(capacity),
            free: 0,
            head: NONE,
            tail: NONE,
            len: 0,
            timeouts_ns: [
                ns(timeouts.tcp_syn),
                ns(timeouts.tcp_established),
                ns(timeouts.tcp_closing),
                ns(timeouts.udp),
            ],
            active: vec![0; backends],
            inactive: vec![0; backends],
            worker: worker % workers,
            workers,
            stats: ConnStats::default(),
        }
    }

    /// Live plus not-yet-reclaimed expired flows.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fixed capacity.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Idle timeout of a state in nanoseconds.
    pub fn timeout_ns(&self, s: FlowState) -> u64 {
        self.timeouts_ns[state_index(s)]
    }

    /// Established connections per backend slot.
    pub fn active_counts(&self) -> &[u32] {
        &self.active
    }

    /// Other connections per backend slot.
    pub fn inactive_counts(&self) -> &[u32] {
        &self.inactive
    }

    /// The flow with this id.
    pub fn flow(&self, id: u32) -> &Flow {
        &self.slots[id as usize].flow
    }

    #[inline(always)]
    fn expired(&self, id: u32, now: u64) -> bool {
        let f = &self.slots[id as usize].flow;
        now.saturating_sub(f.last_seen) > self.timeout_ns(f.state)
    }

    /// Finds a live flow by its client → VIP key. An expired match is removed.
    #[inline(always)]
    pub fn lookup(&mut self, key: &FlowKey, now: u64) -> Option<u32> {
        let h = fwd_hash(key);
        let slots = &self.slots;
        let (_, id) = self.fwd.find(h, |id| slots[id as usize].flow.key == *key)?;
        if self.expired(id, now) {
            self.remove(id);
            self.stats.expired += 1;
            return None;
        }
        Some(id)
    }

    /// Finds a live flow by the key its return traffic carries.
    #[inline]
    pub fn lookup_rev(&mut self, key: &RevKey, now: u64) -> Option<u32> {
        let id = self.find_rev(key)?;
        if self.expired(id, now) {
            self.remove(id);
            self.stats.expired += 1;
            return None;
        }
        Some(id)
    }

    fn find_rev(&self, key: &RevKey) -> Option<u32> {
        let h = rev_hash(key);
        let slots = &self.slots;
        self.rev
            .find(h, |id| {
                slots[id as usize].flow.rev_key().as_ref() == Some(key)
            })
            .map(|(_, id)| id)
    }

    fn count(&mut self, id: u32, add: bool) {
        let s = &self.slots[id as usize];
        let b = s.counted_backend as usize;
        let active = s.counted_active;
        if b >= self.active.len() {
            return;
        }
        let c = if active {
            &mut self.active[b]
        } else {
            &mut self.inactive[b]
        };
        *c = if add {
            c.saturating_add(1)
        } else {
            c.saturating_sub(1)
        };
    }

    fn unlink(&mut self, id: u32) {
        let (prev, next) = {
            let s = &self.slots[id as usize];
            (s.prev, s.next)
        };
        if prev == NONE {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NONE {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    fn push_front(&mut self, id: u32) {
        let old = self.head;
        {
            let s = &mut self.slots[id as usize];
            s.prev = NONE;
            s.next = old;
        }
        if old != NONE {
            self.slots[old as usize].prev = id;
        } else {
            self.tail = id;
        }
        self.head = id;
    }

    /// Records a packet of the flow: refreshes last-seen and (at most every
    /// [`LRU_GRANULARITY_NS`]) the LRU position, and moves the TCP state on (adjusting the
    /// backend's active/inactive counts).
    ///
    /// Every established packet runs this, nearly always only the last-seen store: the
    /// relink and the state change live in out-of-line helpers so the common case inlines
    /// into the caller without their register pressure.
    #[inline(always)]
    pub fn touch(&mut self, id: u32, now: u64, state: FlowState) {
        if self.head != id
            && now.saturating_sub(self.slots[id as usize].lru_at) >= LRU_GRANULARITY_NS
        {
            self.relink(id, now);
        }
        let s = &mut self.slots[id as usize];
        s.flow.last_seen = now;
        if s.flow.state != state {
            self.change_state(id, state);
        }
    }

    /// Moves a flow to the head of the LRU list (see [`ConnTable::touch`]).
    #[inline(never)]
    fn relink(&mut self, id: u32, now: u64) {
        self.unlink(id);
        self.push_front(id);
        self.slots[id as usize].lru_at = now;
    }

    /// Sets a flow's state, moving its connection count between active and inactive.
    #[inline(never)]
    fn change_state(&mut self, id: u32, state: FlowState) {
        self.slots[id as usize].flow.state = state;
        if self.slots[id as usize].counted_active != state.is_active() {
            self.count(id, false);
            self.slots[id as usize].counted_active = state.is_active();
            self.count(id, true);
        }
    }

    /// Removes a flow, freeing its FullNAT port and its connection count.
    pub fn remove(&mut self, id: u32) {
        if !self.slots[id as usize].used {
            return;
        }
        let flow = self.slots[id as usize].flow;
        if let Some((pos, _)) = self.fwd.find(fwd_hash(&flow.key), |x| x == id) {
            self.fwd.remove_at(pos);
        }
        if let Some(rk) = flow.rev_key()
            && let Some((pos, _)) = self.rev.find(rev_hash(&rk), |x| x == id)
        {
            self.rev.remove_at(pos);
        }
        self.count(id, false);
        self.unlink(id);
        let s = &mut self.slots[id as usize];
        s.used = false;
        s.next = self.free;
        s.prev = NONE;
        self.free = id;
        self.len -= 1;
    }

    /// Inserts a new flow (the caller has checked it is absent). Evicts an expired,
    /// half-open or closing entry from the LRU end when full.
    pub fn insert(&mut self, flow: Flow, now: u64) -> Result<u32, InsertError> {
        if self.free == NONE {
            let mut cand = self.tail;
            let mut victim = NONE;
            for _ in 0..EVICT_SCAN {
                if cand == NONE {
                    break;
                }
                let s = &self.slots[cand as usize];
                if self.expired(cand, now) || s.flow.state.evictable() {
                    victim = cand;
                    break;
                }
                cand = s.prev;
            }
            if victim == NONE {
                self.stats.full += 1;
                return Err(InsertError::Full);
            }
            if self.expired(victim, now) {
                self.stats.expired += 1;
            } else {
                self.stats.evicted += 1;
            }
            self.remove(victim);
        }
        let id = self.free;
        self.free = self.slots[id as usize].next;
        {
            let s = &mut self.slots[id as usize];
            s.flow = flow;
            s.flow.last_seen = now;
            s.lru_at = now;
            s.used = true;
            s.counted_backend = flow.backend;
            s.counted_active = flow.state.is_active();
        }
        self.push_front(id);
        self.fwd.insert(fwd_hash(&flow.key), id);
        if let Some(rk) = flow.rev_key() {
            self.rev.insert(rev_hash(&rk), id);
        }
        self.count(id, true);
        self.len += 1;
        self.stats.inserted += 1;
        Ok(id)
    }

    /// Points a flow at another backend (after a re-choice), keeping counts right. Not for
    /// flows in the reverse index (their key would change): remove and insert those.
    pub fn rebind(&mut self, id: u32, backend: u32, addr: u128, port: u16, version: u64) {
        self.count(id, false);
        let s = &mut self.slots[id as usize];
        s.flow.backend = backend;
        s.flow.backend_addr = addr;
        s.flow.backend_port = port;
        s.flow.version = version;
        s.counted_backend = backend;
        self.count(id, true);
    }

    /// Removes up to `budget` expired flows, oldest first; returns how many went. Stops at
    /// the first live entry of the LRU end whose timeout is the longest, since nothing more
    /// recently used with that timeout can have expired.
    pub fn expire(&mut self, now: u64, budget: usize) -> usize {
        let mut removed = 0;
        let mut cand = self.tail;
        let mut scanned = 0;
        while cand != NONE && scanned < budget {
            let prev = self.slots[cand as usize].prev;
            if self.expired(cand, now) {
                self.remove(cand);
                self.stats.expired += 1;
                removed += 1;
            }
            scanned += 1;
            cand = prev;
        }
        removed
    }

    /// Re-resolves every flow after a table swap: `resolve` returns the flow's new VIP and
    /// backend slots (`None` when the VIP is gone, which drops the flow; a backend slot of
    /// `u32::MAX` keeps the flow but marks it for re-choice). Counts are rebuilt for
    /// `backends` slots. Runs once per swap, outside the per-packet path.
    pub fn adopt(
        &mut self,
        version: u64,
        backends: usize,
        mut resolve: impl FnMut(&Flow) -> Option<(u32, u32)>,
    ) {
        self.active.clear();
        self.active.resize(backends, 0);
        self.inactive.clear();
        self.inactive.resize(backends, 0);
        let mut gone = Vec::new();
        for id in 0..self.slots.len() as u32 {
            if !self.slots[id as usize].used {
                continue;
            }
            match resolve(&self.slots[id as usize].flow) {
                None => gone.push(id),
                Some((vip, backend)) => {
                    let s = &mut self.slots[id as usize];
                    s.flow.vip = vip;
                    s.flow.backend = backend;
                    s.flow.version = version;
                    s.counted_backend = backend;
                    self.count(id, true);
                }
            }
        }
        for id in gone {
            // Its count was already zeroed by the rebuild.
            self.slots[id as usize].counted_backend = NONE;
            self.remove(id);
        }
    }

    /// Allocates a FullNAT local address and port toward `backend:backend_port` over
    /// `proto`, starting at a hash-derived address and port so flows spread. Expired flows
    /// holding a candidate are reclaimed. `None` when every probe is taken.
    pub fn alloc_snat(
        &mut self,
        proto: u8,
        backend: u128,
        backend_port: u16,
        pool: &[u128],
        hash: u32,
        now: u64,
    ) -> Option<(u128, u16)> {
        if pool.is_empty() {
            return None;
        }
        let w = u32::from(self.workers);
        let id = u32::from(self.worker);
        let min = u32::from(SNAT_PORT_MIN);
        // First port >= min owned by this worker, and how many such ports exist.
        let first = min + (id + w - min % w) % w;
        if first > 65535 {
            return None;
        }
        let count = (65535 - first) / w + 1;
        let start_addr = (hash as usize) % pool.len();
        let start_port = mix64(u64::from(hash)) as u32 % count;
        for a in 0..pool.len() {
            let local = pool[(start_addr + a) % pool.len()];
            for i in 0..SNAT_PROBES as u32 {
                let port = (first + ((start_port + i) % count) * w) as u16;
                let rk = RevKey {
                    proto,
                    backend,
                    backend_port,
                    local,
                    local_port: port,
                };
                match self.find_rev(&rk) {
                    None => return Some((local, port)),
                    Some(holder) if self.expired(holder, now) => {
                        self.remove(holder);
                        self.stats.expired += 1;
                        return Some((local, port));
                    }
                    Some(_) => {}
                }
            }
        }
        None
    }

    /// Iterates over the live flow ids (for `ctl` listings and tests), LRU order, newest
    /// first.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur == NONE {
                return None;
            }
            let id = cur;
            cur = self.slots[id as usize].next;
            Some(id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::time::Duration;

    const S: u64 = 1_000_000_000;

    fn timeouts() -> Timeouts {
        Timeouts {
            tcp_syn: Duration::from_secs(30),
            tcp_established: Duration::from_secs(900),
            tcp_closing: Duration::from_secs(10),
            udp: Duration::from_secs(300),
        }
    }

    fn key(i: u32, proto: u8) -> FlowKey {
        FlowKey {
            src: 0xffff_0000_0000 | u128::from(0xc633_6400 + (i >> 16)),
            dst: 0xffff_c000_020a,
            sport: i as u16,
            dport: 80,
            proto,
            v6: false,
        }
    }

    fn flow(i: u32, backend: u32, state: FlowState) -> Flow {
        Flow {
            key: key(i, if state == FlowState::Udp { 17 } else { 6 }),
            vip: 0,
            backend,
            backend_addr: 0xffff_0a00_0001 + u128::from(backend),
            backend_port: 8080,
            version: 1,
            state,
            last_seen: 0,
            hash: i,
            snat: None,
            reverse: false,
        }
    }

    #[test]
    fn insert_lookup_remove_and_counts() {
        let mut ct = ConnTable::new(16, timeouts(), 4, 0, 1);
        let a = ct.insert(flow(1, 2, FlowState::TcpSyn), 0).unwrap();
        let b = ct.insert(flow(2, 2, FlowState::TcpEstablished), 0).unwrap();
        assert_eq!(ct.lookup(&key(1, 6), 1), Some(a));
        assert_eq!(ct.lookup(&key(2, 6), 1), Some(b));
        assert_eq!(ct.lookup(&key(3, 6), 1), None);
        assert_eq!((ct.active_counts()[2], ct.inactive_counts()[2]), (1, 1));
        ct.touch(a, 2, next_tcp_state(FlowState::TcpSyn, tcp_flags::ACK));
        assert_eq!(ct.flow(a).state, FlowState::TcpEstablished);
        assert_eq!((ct.active_counts()[2], ct.inactive_counts()[2]), (2, 0));
        ct.touch(
            b,
            3,
            next_tcp_state(FlowState::TcpEstablished, tcp_flags::FIN),
        );
        assert_eq!((ct.active_counts()[2], ct.inactive_counts()[2]), (1, 1));
        ct.remove(a);
        ct.remove(b);
        assert_eq!((ct.active_counts()[2], ct.inactive_counts()[2]), (0, 0));
        assert!(ct.is_empty());
        assert_eq!(ct.lookup(&key(1, 6), 4), None);
    }

    #[test]
    fn timeouts_expire_by_now() {
        let mut ct = ConnTable::new(16, timeouts(), 1, 0, 1);
        ct.insert(flow(1, 0, FlowState::TcpSyn), 0).unwrap();
        ct.insert(flow(2, 0, FlowState::TcpEstablished), 0).unwrap();
        ct.insert(flow(3, 0, FlowState::TcpClosing), 0).unwrap();
        ct.insert(flow(4, 0, FlowState::Udp), 0).unwrap();
        // At exactly the timeout a flow is still alive; one nanosecond later it is gone.
        assert!(ct.lookup(&key(3, 6), 10 * S).is_some());
        assert!(ct.lookup(&key(3, 6), 10 * S + 1).is_none());
        assert!(ct.lookup(&key(1, 6), 30 * S + 1).is_none());
        assert!(ct.lookup(&key(4, 17), 300 * S).is_some());
        assert!(ct.lookup(&key(4, 17), 300 * S + 1).is_none());
        assert!(ct.lookup(&key(2, 6), 900 * S).is_some());
        assert_eq!(ct.expire(900 * S + 1, 100), 1);
        assert!(ct.is_empty());
        assert_eq!(ct.stats.expired, 4);
        assert_eq!(ct.inactive_counts()[0] + ct.active_counts()[0], 0);
    }

    #[test]
    fn full_table_evicts_embryonic_then_refuses() {
        let mut ct = ConnTable::new(4, timeouts(), 1, 0, 1);
        ct.insert(flow(1, 0, FlowState::TcpSyn), 0).unwrap();
        for i in 2..=4 {
            ct.insert(flow(i, 0, FlowState::TcpEstablished), 0).unwrap();
        }
        // Full: the half-open flow goes.
        ct.insert(flow(5, 0, FlowState::TcpEstablished), 1).unwrap();
        assert_eq!(ct.stats.evicted, 1);
        assert!(ct.lookup(&key(1, 6), 1).is_none());
        // Full of established flows: refused and counted.
        assert_eq!(
            ct.insert(flow(6, 0, FlowState::TcpSyn), 1),
            Err(InsertError::Full)
        );
        assert_eq!(ct.stats.full, 1);
        // After the established timeout everything is reclaimable.
        ct.insert(flow(6, 0, FlowState::TcpSyn), 901 * S).unwrap();
        assert_eq!(ct.len(), 4);
    }

    #[test]
    fn lru_order_follows_touch() {
        let mut ct = ConnTable::new(8, timeouts(), 1, 0, 1);
        let a = ct.insert(flow(1, 0, FlowState::Udp), 0).unwrap();
        let b = ct.insert(flow(2, 0, FlowState::Udp), 0).unwrap();
        let c = ct.insert(flow(3, 0, FlowState::Udp), 0).unwrap();
        // Within the granularity the order stays; after it the flow moves to the head.
        ct.touch(a, LRU_GRANULARITY_NS - 1, FlowState::Udp);
        assert_eq!(ct.ids().collect::<Vec<_>>(), [c, b, a]);
        ct.touch(a, LRU_GRANULARITY_NS, FlowState::Udp);
        assert_eq!(ct.ids().collect::<Vec<_>>(), [a, c, b]);
    }

    #[test]
    fn index_survives_heavy_churn() {
        let mut ct = ConnTable::new(512, timeouts(), 1, 0, 1);
        let mut live = HashSet::new();
        let mut x = 12345u64;
        for round in 0..20_000u32 {
            x = mix64(x.wrapping_add(u64::from(round)));
            let i = (x % 700) as u32;
            let k = key(i, 17);
            match ct.lookup(&k, 0) {
                Some(id) if x & 1 == 0 => {
                    ct.remove(id);
                    live.remove(&i);
                }
                Some(_) => assert!(live.contains(&i)),
                None => {
                    assert!(!live.contains(&i), "lost flow {i}");
                    if ct.insert(flow(i, 0, FlowState::Udp), 0).is_ok() {
                        live.insert(i);
                    }
                }
            }
        }
        assert_eq!(ct.len(), live.len());
        for i in 0..700 {
            assert_eq!(ct.lookup(&key(i, 17), 0).is_some(), live.contains(&i));
        }
    }

    #[test]
    fn fullnat_ports_never_collide_and_are_reused_after_expiry() {
        let mut ct = ConnTable::new(4096, timeouts(), 1, 1, 2);
        let pool = [0xffff_c633_6401u128, 0xffff_c633_6402];
        let backend = 0xffff_0a00_0001u128;
        let mut used = HashSet::new();
        for i in 0..3000u32 {
            // Few distinct hashes: starting points collide often, probing must resolve it.
            let h = i % 64;
            let (local, port) = ct.alloc_snat(6, backend, 8080, &pool, h, 0).unwrap();
            assert_eq!(port % 2, 1, "worker 1 of 2 owns odd ports");
            assert!(port >= SNAT_PORT_MIN);
            assert!(used.insert((local, port)), "collision at flow {i}");
            let mut f = flow(i, 0, FlowState::TcpSyn);
            f.backend_addr = backend;
            f.snat = Some((local, port));
            f.reverse = true;
            let id = ct.insert(f, 0).unwrap();
            let rk = f.rev_key().unwrap();
            assert_eq!(ct.lookup_rev(&rk, 0), Some(id));
        }
        // 64 probes x 2 addresses are exhausted for this hash.
        let mut fresh = ConnTable::new(256, timeouts(), 1, 0, 1);
        for i in 0..(2 * SNAT_PROBES as u32) {
            let (l, p) = fresh.alloc_snat(17, backend, 53, &pool, 9, 0).unwrap();
            let mut f = flow(i, 0, FlowState::Udp);
            f.backend_addr = backend;
            f.backend_port = 53;
            f.snat = Some((l, p));
            f.reverse = true;
            fresh.insert(f, 0).unwrap();
        }
        assert_eq!(fresh.alloc_snat(17, backend, 53, &pool, 9, 0), None);
        // A different backend port is a different tuple space.
        assert!(fresh.alloc_snat(17, backend, 54, &pool, 9, 0).is_some());
        // After the UDP timeout the same ports come back.
        let again = fresh
            .alloc_snat(17, backend, 53, &pool, 9, 301 * S)
            .unwrap();
        assert_eq!(again.0, pool[9 % 2]);
        assert_eq!(fresh.stats.expired, 1);
    }

    #[test]
    fn adopt_rebinds_and_recounts() {
        let mut ct = ConnTable::new(8, timeouts(), 2, 0, 1);
        ct.insert(flow(1, 0, FlowState::TcpEstablished), 0).unwrap();
        ct.insert(flow(2, 1, FlowState::TcpEstablished), 0).unwrap();
        // New version: backend 0 moved to slot 2, backend 1 disappeared.
        ct.adopt(2, 3, |f| {
            Some((0, if f.backend == 0 { 2 } else { u32::MAX }))
        });
        assert_eq!(ct.active_counts(), &[0, 0, 1]);
        let id = ct.lookup(&key(2, 6), 0).unwrap();
        assert_eq!(ct.flow(id).backend, u32::MAX);
        ct.adopt(3, 3, |f| (f.key.sport == 1).then_some((0, 2)));
        assert_eq!(ct.len(), 1);
        assert_eq!(ct.active_counts(), &[0, 0, 1]);
    }
}
