//! Flow lookup: which backend a client → VIP packet goes to.
//!
//! A tracked flow keeps its backend while that backend keeps flows (active, or draining);
//! otherwise, for a new flow, and for a SYN that reopens a closed connection's tuple or
//! finds a backend that takes no new connections, the VIP's scheduler chooses ([`choose_backend`]: Maglev or
//! an LVS scheduler over this worker's connection counts) and the flow is inserted as
//! embryonic (`lb::conntrack::state` says how it earns established).
//!
//! Two kinds of packet get the stateless answer instead, the VIP's Maglev ring, whatever its
//! scheduler, so consistent hashing keeps the flow on one backend anyway: a TCP segment that
//! is not a SYN and has no entry (spoofed, or its entry is gone), which never makes state,
//! and a new flow when the table is full of established flows. Both are counted by cause.
//! Since a flow that got the stateless answer never makes state later (only a SYN does),
//! an LVS-scheduler VIP keeps answering it from the ring once room appears: the scheduler
//! cannot move it. FullNAT, which cannot map return traffic without an entry, drops such
//! packets instead and never gives them a port.

use super::admit::admit;
use super::synproxy::Ask;
use super::{DropReason, NONE, WorkerState, fullnat};
use crate::conntrack::state::marks;
use crate::conntrack::track::Segment;
use crate::conntrack::{
    Carry, ConnTable, Flow, FlowState, InsertError, Seen, Teardown, Track, first_state, is_syn,
};
use crate::hash::FlowKey;
use crate::sched::{self, PoolView, SchedState};
use crate::tables::Tables;
use config::{Mode, Scheduler};
use wire::IpProtocol;

/// How a new flow's backend was decided (shared with `trace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Maglev ring slot `slot` holds the backend.
    Maglev {
        /// Ring slot (`hash % M`).
        slot: usize,
    },
    /// An LVS scheduler chose it.
    Scheduler(Scheduler),
}

/// A worker's connection counts for all backend slots (see [`ConnTable::active_counts`]).
#[derive(Debug, Clone, Copy)]
pub struct Load<'a> {
    /// Established connections per backend slot.
    pub active: &'a [u32],
    /// Other connections per backend slot.
    pub inactive: &'a [u32],
}

/// Chooses a backend slot for a new flow of `vip`.
pub fn choose_backend(
    tables: &Tables,
    vip: u32,
    key: &FlowKey,
    hash: u32,
    load: Load<'_>,
    st: &mut SchedState,
    now: u64,
) -> Option<(u32, Choice)> {
    let Load { active, inactive } = load;
    let v = &tables.vips[vip as usize];
    let r = tables.pool_range(vip);
    if v.scheduler == Scheduler::Maglev {
        let slot = v.ring.slot_of(hash)?;
        let pos = u32::from(v.ring.slots()[slot]);
        return Some((r.start as u32 + pos, Choice::Maglev { slot }));
    }
    let counts =
        |c: &[u32]| -> Option<std::ops::Range<usize>> { (r.end <= c.len()).then_some(r.clone()) };
    let zeros = [0u32; 0];
    let (a, i) = match (counts(active), counts(inactive)) {
        (Some(x), Some(y)) => (&active[x], &inactive[y]),
        _ => (&zeros[..], &zeros[..]),
    };
    if a.len() != r.len() {
        return None;
    }
    let pool = PoolView {
        weight: &tables.weights[r.clone()],
        eligible: &tables.eligible[r.clone()],
        active: a,
        inactive: i,
    };
    let pos = sched::pick(v.scheduler, v.hash_ports, &pool, &v.buckets, st, key, now)?;
    Some((r.start as u32 + pos as u32, Choice::Scheduler(v.scheduler)))
}

/// What [`flow_for`] found or created.
pub(super) struct FlowHit {
    pub(super) backend: u32,
    pub(super) hash: u32,
    /// FullNAT local address and port.
    pub(super) snat: Option<(u128, u16)>,
    /// The flow's client-address state (`client_address`), before this packet.
    pub(super) carry: Carry,
    /// What the packet's FIN or RST counted for (see `conntrack::track`).
    pub(super) teardown: Teardown,
    /// The packet belongs to a flow the table already held (not one it opened, nor one
    /// answered without an entry).
    pub(super) found: bool,
}

/// The client → VIP packet [`flow_for`] decides for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Packet<'a> {
    pub(super) key: &'a FlowKey,
    /// TCP flags (0 for UDP).
    pub(super) flags: u8,
    /// A TCP segment with payload, or any UDP datagram.
    pub(super) payload: bool,
    /// TCP: the segment's sequence and acknowledgement numbers and payload bytes (0 for
    /// UDP).
    pub(super) seq: u32,
    pub(super) ack: u32,
    pub(super) len: u32,
}

impl Packet<'_> {
    /// The segment as the sequence tracker reads it.
    fn segment(&self) -> Segment {
        Segment {
            seq: self.seq,
            ack: self.ack,
            len: self.len,
            flags: self.flags,
        }
    }
}

/// Finds or creates the flow for a client → VIP packet; `None` for a segment without a
/// flow that the SYN proxy takes (`proxy`).
pub(super) fn flow_for(
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    vip: u32,
    p: Packet<'_>,
    proxy: Ask,
    now: u64,
) -> Result<Option<FlowHit>, DropReason> {
    let key = p.key;
    if tables.vips[vip as usize].one_packet && key.proto == IpProtocol::UDP {
        return one_packet(tables, ct, worker, vip, key, now).map(Some);
    }
    if let Some(id) = ct.lookup(key, now) {
        let half_open = ct.flow(id).state == FlowState::TcpSyn && !is_syn(p.flags);
        if !half_open {
            return found(tables, ct, worker, vip, p, id, now).map(Some);
        }
        // A peer's established flow wins over this table's half-open entry of its tuple:
        // the client's SYN came here first and went unanswered, and its resend (another
        // flow hash, so another ECMP path) completed the handshake through the peer, whose
        // backend is the one that knows the connection. The entry is looked up again when
        // none was taken: a refused import may have removed it (then: no entry, below).
        let id = worker
            .standby_flow(key, tables, ct, now)
            .or_else(|| ct.lookup(key, now));
        if let Some(id) = id {
            return found(tables, ct, worker, vip, p, id, now).map(Some);
        }
    }
    // A flow a peer synced is established: its ACKs carry no cookie of ours.
    if let Some(id) = worker.standby_flow(key, tables, ct, now) {
        return found(tables, ct, worker, vip, p, id, now).map(Some);
    }
    if proxy.takes(p.flags) {
        return Ok(None);
    }
    unheld(tables, ct, worker, vip, p, now).map(Some)
}

/// [`flow_for`] for a packet whose flow the table does not hold.
fn unheld(
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    vip: u32,
    p: Packet<'_>,
    now: u64,
) -> Result<FlowHit, DropReason> {
    let key = p.key;
    match first_state(key.proto == IpProtocol::TCP, p.flags) {
        Some(st) => {
            let track = if st == FlowState::TcpSyn {
                Track::opened(&p.segment())
            } else {
                Track::default()
            };
            new_flow(tables, ct, worker, vip, key, (st, track), now, None)
        }
        None => {
            worker.stats.stateless_no_entry += 1;
            stateless(tables, vip, key.hash(tables.vips[vip as usize].hash))
        }
    }
}

/// Whether a SYN reopens the flow `id`: on the tuple of a connection that closed (the
/// client that closed second holds no TIME_WAIT and may reuse its port at once), or of a
/// handshake its backend has not answered while that backend takes no new connections
/// (drained, weight 0), a SYN is a new connection: scheduled anew, as LVS's
/// `conn_reuse_mode` does, never sent to the old entry's backend by the entry alone
/// (persistence still may). An established flow is never reopened by a SYN: the backend
/// answers it (a challenge ACK, RFC 5961 4), so a spoofed SYN moves nothing.
fn reopens(tables: &Tables, ct: &ConnTable, id: u32, p: &Packet<'_>) -> bool {
    if p.key.proto != IpProtocol::TCP || !is_syn(p.flags) {
        return false;
    }
    let f = ct.flow(id);
    match f.state {
        FlowState::TcpClosing => true,
        FlowState::TcpSyn => {
            f.evidence.marks & marks::REPLY == 0
                && !tables
                    .eligible
                    .get(f.backend as usize)
                    .copied()
                    .unwrap_or(false)
        }
        _ => false,
    }
}

/// [`flow_for`] for a packet of flow `id`, which the table holds.
pub(super) fn found(
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    vip: u32,
    p: Packet<'_>,
    id: u32,
    now: u64,
) -> Result<FlowHit, DropReason> {
    let key = p.key;
    if reopens(tables, ct, id, &p) {
        worker.stats.reopened += 1;
        ct.remove(id);
        let fresh = (FlowState::TcpSyn, Track::opened(&p.segment()));
        return new_flow(tables, ct, worker, vip, key, fresh, now, None);
    }
    let f = *ct.flow(id);
    let keeps = f.backend != NONE
        && tables
            .backends
            .get(f.backend as usize)
            .is_some_and(|b| b.keeps_flows());
    if keeps {
        let seen = Seen {
            reverse: false,
            both_ways: matches!(tables.vips[vip as usize].mode, Mode::Nat | Mode::FullNat),
            payload: p.payload,
            seq: p.seq,
            ack: p.ack,
            len: p.len,
            closes: false,
        };
        let (_, teardown) = ct.step(id, now, p.flags, seen);
        return Ok(FlowHit {
            backend: f.backend,
            hash: f.hash,
            snat: f.snat,
            carry: f.carry,
            teardown,
            found: true,
        });
    }
    worker.stats.rechosen += 1;
    // The flow earned its state with the old backend; it keeps it with the new one.
    ct.remove(id);
    new_flow(tables, ct, worker, vip, key, (f.state, f.track), now, None)
}

/// A datagram of a `udp_one_packet` VIP: scheduled like a new flow (persistence and limits
/// included), given no connection-table entry, so the next one is scheduled again.
fn one_packet(
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    vip: u32,
    key: &FlowKey,
    now: u64,
) -> Result<FlowHit, DropReason> {
    let hash = key.hash(tables.vips[vip as usize].hash);
    let backend = admit(tables, ct, worker, vip, key, hash, now)?;
    worker.stats.one_packet += 1;
    worker.count_new_flow(vip, backend);
    Ok(FlowHit {
        backend,
        hash,
        snat: None,
        carry: Carry::default(),
        teardown: Teardown::None,
        found: false,
    })
}

/// The stateless answer: the VIP's Maglev ring, whatever its scheduler; FullNAT drops
/// (its return traffic could not be mapped back without an entry).
fn stateless(tables: &Tables, vip: u32, hash: u32) -> Result<FlowHit, DropReason> {
    let v = &tables.vips[vip as usize];
    if v.mode == Mode::FullNat {
        return Err(DropReason::NoFlow);
    }
    let pos = v.ring.lookup(hash).ok_or(DropReason::NoBackend)?;
    Ok(FlowHit {
        backend: v.backends.start + pos,
        hash,
        snat: None,
        carry: Carry::default(),
        teardown: Teardown::None,
        found: false,
    })
}

/// The new-flow half of [`flow_for`] for a flow that starts in `state`: ageing, scheduling
/// (unless `pinned` names the backend: a QUIC connection ID's), FullNAT port allocation and
/// the insert. Kept out of line so the established path, inlined into [`forward`], does not
/// carry this code's stack frame and register spills on every packet.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) fn new_flow(
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    vip: u32,
    key: &FlowKey,
    (state, track): (FlowState, Track),
    now: u64,
    pinned: Option<u32>,
) -> Result<FlowHit, DropReason> {
    let v = &tables.vips[vip as usize];
    // New flows pay for a little ageing so expired flows leave the LVS connection counts
    // even when nothing else sweeps the table.
    ct.expire(now, 2);
    let hash = key.hash(v.hash);
    let backend = match pinned {
        Some(b) => b,
        None => admit(tables, ct, worker, vip, key, hash, now)?,
    };
    worker.count_new_flow(vip, backend);
    let b = tables.backends[backend as usize];
    let snat = fullnat::snat_for(ct, v, key, &b, (hash, now), worker.standby.as_deref())?;
    let flow = Flow {
        key: *key,
        vip,
        backend,
        backend_addr: b.address,
        backend_port: b.port,
        version: tables.version,
        state,
        evidence: Default::default(),
        last_seen: now,
        hash,
        snat,
        reverse: matches!(v.mode, Mode::Nat | Mode::FullNat),
        carry: Default::default(),
        track,
    };
    match ct.insert(flow, now) {
        Ok(_) => Ok(FlowHit {
            backend,
            hash,
            snat,
            carry: Carry::default(),
            teardown: Teardown::None,
            found: false,
        }),
        Err(InsertError::Full) => {
            worker.stats.conntrack_fallback += 1;
            stateless(tables, vip, hash)
        }
        // Over a budget (the table counts which): the answer of a flow without an entry,
        // as for a full table; FullNAT cannot give one.
        Err(InsertError::SourceBudget | InsertError::ZoneBudget) => stateless(tables, vip, hash),
    }
}
