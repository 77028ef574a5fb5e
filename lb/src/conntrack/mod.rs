//! The per-worker connection table.
//!
//! Established flows must keep their backend when pools change (a new backend would reset
//! them), and NAT/FullNAT return traffic must find the client it belongs to. Each datapath
//! worker owns one table: fixed capacity, allocated once at creation, so the packet path
//! never allocates and never shares a cache line with another core.
//!
//! Only flows that earn it get state, in two steps ([`state`]): a SYN or a first UDP
//! datagram makes an embryonic entry, which the flow's later packets promote to established
//! once it has shown a real client is behind it; a TCP segment other than a SYN never makes
//! an entry (the caller answers it statelessly). So a flood of spoofed ACKs or one-shot
//! datagrams creates nothing that lasts.
//!
//! Entries live in a slab; two open-addressing indexes ([`index`]) find them by the forward
//! key (client → VIP) and by the reverse key (backend → client for NAT, backend → local SNAT
//! address/port for FullNAT). Each timeout class (one per [`FlowState`]) has its own
//! intrusive least-recently-used list, so every entry of a list has the same timeout and the
//! list's tail is its next entry to expire: [`ConnTable::expire`] is exact however entries of
//! other classes interleave, and stops at the first entry of each list that cannot have
//! expired. Expiry is decided from the `now` the caller passes (the table never reads a
//! clock).
//!
//! When the table is full, an insert reclaims, in order: an expired entry at the tail of any
//! list, the oldest embryonic entry, the oldest closing entry. Established entries are never
//! evicted for a new flow; when nothing qualifies the insert fails so the caller can answer
//! statelessly from the Maglev ring (and count it).
//!
//! The table also keeps each backend's active (established TCP) and inactive (everything
//! else) connection counts, which the LVS schedulers read; every insert, state change,
//! removal and expiry updates them.
//!
//! FullNAT local ports are allocated so that no two flows share (protocol, backend address,
//! backend port, local address, local port) ([`snat`]). When something outside the table
//! repeats its flows (the XDP flow cache), removals are journaled ([`ConnTable::journal`]):
//! the owner evicts the removed flows' kernel entries when it drains the journal, and until
//! then the removed FullNAT flows' ports stay taken, so a port never serves a new flow while
//! the kernel could still rewrite replies to it toward the old client.

pub mod budget;
pub mod codec;
mod flow;
mod index;
mod news;
mod record;
mod snat;
pub mod state;
#[cfg(test)]
mod tests;
pub mod track;

pub use flow::{Carry, Flow, Proxied, Rescale, RevKey};
pub use news::NEWS_MAX;
pub use record::{FlowRecord, ImportError};
pub use snat::{SNAT_PORT_MIN, SNAT_PROBES};
pub use state::{CLASSES, Evidence, FlowState, Seen, first_state, is_syn, tcp_flags};
pub use track::{Teardown, Track};

use crate::hash::FlowKey;
use config::Timeouts;
use flow::TCP;
use index::{Index, NONE};

/// A flow moves to the head of its LRU list at most this often (1 ms): relinking touches
/// two neighbours' cache lines, and a busy flow would pay it on every packet for an order
/// that only matters at millisecond scale. [`ConnTable::expire`] stays exact regardless: it
/// knows a flow's last packet is at most this much newer than its list position says.
pub const LRU_GRANULARITY_NS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy)]
struct Slot {
    flow: Flow,
    used: bool,
    counted_backend: u32,
    counted_active: bool,
    /// When the flow took its place in its list; `last_seen` is at most
    /// [`LRU_GRANULARITY_NS`] later.
    lru_at: u64,
    prev: u32,
    next: u32,
}

/// One timeout class's LRU list.
#[derive(Debug, Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
    len: usize,
}

/// Why an insert failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// Full of established entries: nothing may be evicted.
    Full,
    /// The client address holds its budget of embryonic entries ([`budget`]).
    SourceBudget,
    /// The tenant zone holds its share of the table ([`budget`]).
    ZoneBudget,
}

/// Table counters (the worker folds them into its statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Flows inserted (all embryonic, but for re-chosen established flows).
    pub inserted: u64,
    /// Embryonic flows promoted to established.
    pub promoted: u64,
    /// Flows removed because their timeout passed.
    pub expired: u64,
    /// Live embryonic flows evicted to make room.
    pub evicted_embryonic: u64,
    /// Live closing flows evicted to make room.
    pub evicted_closing: u64,
    /// Live one-way UDP flows evicted to make room.
    pub evicted_one_way: u64,
    /// Inserts refused because the table was full of established flows.
    pub full: u64,
    /// RSTs off their sender's sequence space (RFC 5961): forwarded, they closed nothing.
    pub rst_out_of_window: u64,
    /// FINs off their sender's sequence space: forwarded, they closed nothing.
    pub fin_out_of_window: u64,
    /// Embryonic entries refused because their client address held its budget.
    pub source_refused: u64,
    /// Entries refused because their tenant zone held its share of the table.
    pub zone_refused: u64,
    /// FullNAT ports taken from an embryonic flow for a new one (every port was held).
    pub snat_reclaimed: u64,
}

/// Removed flows whose kernel flow-cache entries still have to go, and the reverse keys
/// (FullNAT ports) they hold until then.
#[derive(Debug, Clone, Default)]
struct Journal {
    removed: Vec<FlowKey>,
    held: Vec<RevKey>,
}

/// A worker's connection table.
#[derive(Debug, Clone)]
pub struct ConnTable {
    slots: Vec<Slot>,
    fwd: Index,
    rev: Index,
    free: u32,
    lists: [List; CLASSES],
    len: usize,
    timeouts_ns: [u64; CLASSES],
    active: Vec<u32>,
    inactive: Vec<u32>,
    worker: u16,
    workers: u16,
    journal: Option<Journal>,
    /// Keys for connection sync ([`news`]), when it is on.
    news: Option<news::News>,
    /// Live FullNAT flows (each holds a local port).
    snat_flows: usize,
    budgets: budget::Budgets,
    /// Counters since creation.
    pub stats: ConnStats,
}

fn ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

const EMPTY_LIST: List = List {
    head: NONE,
    tail: NONE,
    len: 0,
};

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
                    zone: 0,
                },
                vip: NONE,
                backend: NONE,
                backend_addr: 0,
                backend_port: 0,
                version: 0,
                state: FlowState::UdpNew,
                evidence: Evidence::default(),
                last_seen: 0,
                hash: 0,
                snat: None,
                reverse: false,
                carry: Carry::default(),
                track: Track::default(),
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
        let mut timeouts_ns = [0; CLASSES];
        for s in FlowState::ALL {
            timeouts_ns[s.class()] = ns(match s {
                FlowState::TcpSyn => timeouts.tcp_syn,
                FlowState::TcpEstablished => timeouts.tcp_established,
                FlowState::TcpClosing => timeouts.tcp_closing,
                FlowState::Udp | FlowState::UdpOneWay => timeouts.udp,
                FlowState::UdpNew => timeouts.udp_new,
            });
        }
        ConnTable {
            slots,
            fwd: Index::new(capacity),
            rev: Index::new(capacity),
            free: 0,
            lists: [EMPTY_LIST; CLASSES],
            len: 0,
            timeouts_ns,
            active: vec![0; backends],
            inactive: vec![0; backends],
            worker: worker % workers,
            workers,
            journal: None,
            news: None,
            snat_flows: 0,
            budgets: budget::Budgets::default(),
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

    /// How many workers share the FullNAT port space (and the appliance's rate limits).
    pub fn workers(&self) -> u16 {
        self.workers
    }

    /// This table's worker index (below [`ConnTable::workers`]).
    pub fn worker(&self) -> u16 {
        self.worker
    }

    /// Fixed capacity.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Entries per timeout class, indexed by [`FlowState::class`].
    pub fn fill(&self) -> [usize; CLASSES] {
        self.lists.map(|l| l.len)
    }

    /// Idle timeout of a state in nanoseconds.
    pub fn timeout_ns(&self, s: FlowState) -> u64 {
        self.timeouts_ns[s.class()]
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
        let h = self.fwd.fwd_hash(key);
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
        let h = self.rev.rev_hash(key);
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
        let (prev, next, class) = {
            let s = &self.slots[id as usize];
            (s.prev, s.next, s.flow.state.class())
        };
        let l = &mut self.lists[class];
        l.len -= 1;
        if prev == NONE {
            l.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NONE {
            self.lists[class].tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    /// Puts a flow at the head of its state's list, positioned at `now`.
    fn push_front(&mut self, id: u32, now: u64) {
        let class = self.slots[id as usize].flow.state.class();
        let l = &mut self.lists[class];
        let old = l.head;
        l.head = id;
        l.len += 1;
        if old == NONE {
            l.tail = id;
        } else {
            self.slots[old as usize].prev = id;
        }
        let s = &mut self.slots[id as usize];
        s.prev = NONE;
        s.next = old;
        s.lru_at = now;
    }

    /// Records a packet of the flow: refreshes last-seen and (at most every
    /// [`LRU_GRANULARITY_NS`]) the list position, and moves the state on (adjusting the
    /// backend's active/inactive counts, and the list).
    ///
    /// Every established packet runs this, nearly always only the last-seen store: the
    /// relink and the state change live in out-of-line helpers so the common case inlines
    /// into the caller without their register pressure.
    #[inline(always)]
    pub fn touch(&mut self, id: u32, now: u64, state: FlowState) {
        let (cur, lru_at) = {
            let s = &self.slots[id as usize];
            (s.flow.state, s.lru_at)
        };
        if cur != state {
            self.change_state(id, state, now);
        } else if now.saturating_sub(lru_at) >= LRU_GRANULARITY_NS {
            self.relink(id, now);
        }
        self.slots[id as usize].flow.last_seen = now;
    }

    /// Runs a packet of the flow through the sequence tracker ([`track`]: a FIN or RST off
    /// its sender's space closes nothing) and the state machine ([`state::advance`]), and
    /// records it ([`ConnTable::touch`]); returns the new state and what its FIN or RST
    /// counted for.
    #[inline(always)]
    pub fn step(&mut self, id: u32, now: u64, flags: u8, seen: Seen) -> (FlowState, Teardown) {
        let f = &mut self.slots[id as usize].flow;
        let mut seen = seen;
        seen.closes = false;
        let mut teardown = Teardown::None;
        if f.key.proto == TCP {
            let seg = track::Segment {
                seq: seen.seq,
                ack: seen.ack,
                len: seen.len,
                flags,
            };
            teardown = f
                .track
                .segment(!seen.reverse, &seg, f.carry.shift(), f.carry.isn_shift());
            match teardown {
                track::Teardown::OutOfWindow if flags & tcp_flags::RST != 0 => {
                    self.stats.rst_out_of_window += 1;
                }
                track::Teardown::OutOfWindow => self.stats.fin_out_of_window += 1,
                track::Teardown::InWindow => {
                    seen.closes =
                        flags & tcp_flags::RST != 0 || !seen.both_ways || f.track.closed();
                }
                track::Teardown::None => {}
            }
        }
        if !seen.reverse {
            // The state machine compares acknowledgements with the backend's SYN-ACK: a
            // proxied client acknowledges in the cookie's space.
            seen.ack = seen.ack.wrapping_add(f.carry.isn_shift());
        }
        let (st, m) = state::advance(f.state, f.evidence, flags, seen);
        f.evidence = m;
        self.touch(id, now, st);
        (st, teardown)
    }

    /// Records where a flow's sequence spaces stand ([`Track`]), as a flow cache saw them.
    #[inline]
    pub fn set_track(&mut self, id: u32, track: Track) {
        self.slots[id as usize].flow.track = track;
    }

    /// Records where a flow's client-address rewrite stands ([`Carry`]).
    #[inline]
    pub fn set_carry(&mut self, id: u32, carry: Carry) {
        self.slots[id as usize].flow.carry = carry;
    }

    /// Moves a flow to the head of its list (see [`ConnTable::touch`]).
    #[inline(never)]
    fn relink(&mut self, id: u32, now: u64) {
        if self.lists[self.slots[id as usize].flow.state.class()].head == id {
            self.slots[id as usize].lru_at = now;
            return;
        }
        self.unlink(id);
        self.push_front(id, now);
    }

    /// Sets a flow's state: another list, and its connection count between active and
    /// inactive.
    #[inline(never)]
    fn change_state(&mut self, id: u32, state: FlowState, now: u64) {
        let old = self.slots[id as usize].flow.state;
        if old.is_embryonic() && state.is_established() {
            self.stats.promoted += 1;
        }
        if old.is_embryonic() && !state.is_embryonic() {
            let k = self.slots[id as usize].flow.key;
            self.budgets.left_embryonic(k.src, k.zone);
            if let Some(n) = &mut self.news
                && state != FlowState::TcpClosing
            {
                news::News::note(&mut n.established, &mut n.lost, k);
            }
        }
        self.unlink(id);
        self.slots[id as usize].flow.state = state;
        self.push_front(id, now);
        if self.slots[id as usize].counted_active != state.is_active() {
            self.count(id, false);
            self.slots[id as usize].counted_active = state.is_active();
            self.count(id, true);
        }
    }

    /// Removes a flow, freeing its connection count and (unless the journal holds it) its
    /// FullNAT port.
    pub fn remove(&mut self, id: u32) {
        if !self.slots[id as usize].used {
            return;
        }
        let flow = self.slots[id as usize].flow;
        if let Some((pos, _)) = self.fwd.find(self.fwd.fwd_hash(&flow.key), |x| x == id) {
            self.fwd.remove_at(pos);
        }
        if let Some(rk) = flow.rev_key()
            && let Some((pos, _)) = self.rev.find(self.rev.rev_hash(&rk), |x| x == id)
        {
            self.rev.remove_at(pos);
        }
        if flow.snat.is_some() {
            self.snat_flows -= 1;
        }
        if flow.state.is_embryonic() {
            self.budgets.left_embryonic(flow.key.src, flow.key.zone);
        }
        self.budgets.left_zone(flow.key.zone);
        if let Some(n) = &mut self.news
            && !flow.state.is_embryonic()
        {
            news::News::note(&mut n.ended, &mut n.lost, flow.key);
        }
        if let Some(j) = &mut self.journal {
            j.removed.push(flow.key);
            if flow.snat.is_some()
                && let Some(rk) = flow.rev_key()
            {
                j.held.push(rk);
            }
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

    /// Makes one slot free in a full table: an expired list tail, else the oldest embryonic
    /// flow, else the oldest closing one, else the oldest one-way UDP flow. False when every
    /// entry is established and live.
    fn make_room(&mut self, now: u64) -> bool {
        for l in self.lists {
            if l.tail != NONE && self.expired(l.tail, now) {
                self.remove(l.tail);
                self.stats.expired += 1;
                return true;
            }
        }
        let syn = self.lists[FlowState::TcpSyn.class()].tail;
        let udp = self.lists[FlowState::UdpNew.class()].tail;
        let at = |id: u32| self.slots[id as usize].lru_at;
        let embryonic = match (syn, udp) {
            (NONE, x) | (x, NONE) => x,
            (a, b) if at(a) <= at(b) => a,
            (_, b) => b,
        };
        if embryonic != NONE {
            self.remove(embryonic);
            self.stats.evicted_embryonic += 1;
            return true;
        }
        let closing = self.lists[FlowState::TcpClosing.class()].tail;
        if closing != NONE {
            self.remove(closing);
            self.stats.evicted_closing += 1;
            return true;
        }
        let one_way = self.lists[FlowState::UdpOneWay.class()].tail;
        if one_way != NONE {
            self.remove(one_way);
            self.stats.evicted_one_way += 1;
            return true;
        }
        false
    }

    /// Inserts a new flow (the caller has checked it is absent), making room as
    /// [`ConnTable::make_room`] allows when full.
    pub fn insert(&mut self, flow: Flow, now: u64) -> Result<u32, InsertError> {
        let (src, zone, embryonic) = (flow.key.src, flow.key.zone, flow.state.is_embryonic());
        match self.budgets.admits(src, zone, embryonic) {
            Ok(()) => {}
            Err(budget::Refused::Source) => {
                self.stats.source_refused += 1;
                return Err(InsertError::SourceBudget);
            }
            Err(budget::Refused::Zone) => {
                self.stats.zone_refused += 1;
                return Err(InsertError::ZoneBudget);
            }
        }
        if self.free == NONE && !self.make_room(now) {
            self.stats.full += 1;
            return Err(InsertError::Full);
        }
        let id = self.free;
        self.free = self.slots[id as usize].next;
        {
            let s = &mut self.slots[id as usize];
            s.flow = flow;
            s.flow.last_seen = now;
            s.used = true;
            s.counted_backend = flow.backend;
            s.counted_active = flow.state.is_active();
        }
        self.push_front(id, now);
        self.fwd.insert(self.fwd.fwd_hash(&flow.key), id);
        if let Some(rk) = flow.rev_key() {
            self.rev.insert(self.rev.rev_hash(&rk), id);
        }
        if flow.snat.is_some() {
            self.snat_flows += 1;
        }
        self.count(id, true);
        self.budgets.add(src, zone, embryonic);
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

    /// The earliest time any flow may expire, `None` for an empty table: each timeout
    /// class's oldest list position plus the class's timeout. A flow's last packet is at
    /// most [`LRU_GRANULARITY_NS`] newer than its position, so this is early by at most
    /// that, never late; an idle worker sleeps until then (and [`ConnTable::expire`] runs).
    pub fn next_expiry(&self) -> Option<u64> {
        (0..CLASSES)
            .filter_map(|class| {
                let tail = self.lists[class].tail;
                (tail != NONE).then(|| {
                    self.slots[tail as usize]
                        .lru_at
                        .saturating_add(self.timeouts_ns[class])
                        .saturating_add(1)
                })
            })
            .min()
    }

    /// Removes expired flows, oldest first in each timeout class, visiting at most `budget`
    /// entries; returns how many went. A list's walk stops at its first entry placed no
    /// longer than the class's timeout ago: every entry ahead of it was placed later and
    /// seen no earlier, so none can have expired. Entries placed longer ago but seen within
    /// the timeout (at most [`LRU_GRANULARITY_NS`] of them by age) are stepped over.
    pub fn expire(&mut self, now: u64, budget: usize) -> usize {
        let mut removed = 0;
        let mut visited = 0;
        for class in 0..CLASSES {
            let timeout = self.timeouts_ns[class];
            let mut cand = self.lists[class].tail;
            while cand != NONE && visited < budget {
                let s = &self.slots[cand as usize];
                if now.saturating_sub(s.lru_at) <= timeout {
                    break;
                }
                let prev = s.prev;
                visited += 1;
                if self.expired(cand, now) {
                    self.remove(cand);
                    self.stats.expired += 1;
                    removed += 1;
                }
                cand = prev;
            }
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

    /// Sets the table's budgets ([`budget`]): `per_source` embryonic entries a client
    /// address (0: none), and an equal share of the table for each tenant zone of `zones`
    /// and the underlay.
    pub fn set_budgets(&mut self, per_source: u16, zones: &[u32]) {
        let capacity = self.slots.len();
        self.budgets.set(per_source, capacity, zones);
    }

    /// Turns the removal journal on (for a worker with a flow cache) or off. While on, every
    /// removed flow's key waits for [`ConnTable::drain_removed`], and a removed FullNAT
    /// flow's port stays taken until then.
    pub fn journal(&mut self, on: bool) {
        self.journal = on.then(Journal::default);
    }

    /// Hands every flow removed since the last call to `evict` (which must remove the
    /// flow's kernel entries before it returns), then frees the FullNAT ports they held.
    #[inline]
    pub fn drain_removed(&mut self, mut evict: impl FnMut(&FlowKey)) {
        let Some(j) = &mut self.journal else {
            return;
        };
        if j.removed.is_empty() {
            return;
        }
        for k in &j.removed {
            evict(k);
        }
        j.removed.clear();
        j.held.clear();
    }

    /// FullNAT local ports taken now: by live flows, and by removed ones whose kernel
    /// flow-cache entries have not gone yet.
    pub fn snat_ports(&self) -> usize {
        self.snat_flows + self.journal.as_ref().map_or(0, |j| j.held.len())
    }

    /// Whether a removed flow not yet drained holds this reverse key.
    fn held(&self, rk: &RevKey) -> bool {
        self.journal.as_ref().is_some_and(|j| j.held.contains(rk))
    }

    /// Iterates over the live flow ids (for `ctl` listings and tests): class by class, each
    /// newest first.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        let mut class = 0;
        let mut cur = self.lists[0].head;
        std::iter::from_fn(move || {
            while cur == NONE {
                class += 1;
                if class >= CLASSES {
                    return None;
                }
                cur = self.lists[class].head;
            }
            let id = cur;
            cur = self.slots[id as usize].next;
            Some(id)
        })
    }
}
