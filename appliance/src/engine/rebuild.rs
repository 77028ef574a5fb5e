//! Connections rebuilt from a flow cache that a run before this one left behind without a
//! hand-over (SIGKILL, a panic, an OOM kill): its XDP program stays attached and its cache
//! goes on forwarding established flows, but the engine's tables died with the process.
//! Every flow the cache holds is in it because the engine established it, and its entries
//! say all a connection-table entry needs: the client → VIP key, the backend (NAT, FullNAT:
//! the rewrite; DR: the backend whose MAC the frames are sent to), the FullNAT address and
//! port, the client-address carry and the SYN proxy's shift, and how far each direction's
//! sequence numbers have gone. So the next run imports them as established flows
//! ([`Rebuilt`]) before its workers see a frame, and a FIN, RST or segment the cache leaves
//! to the engine finds its flow instead of `no_flow` (FullNAT) or a fresh scheduling choice
//! (NAT on a changed ring, every scheduler but Maglev).
//!
//! What is not rebuilt: flows the cache did not hold (embryonic ones, flows the engine kept
//! for itself: a PROXY v2 header not yet sent, a proxied flow with a client-address carry,
//! UDP flows that had not earned a cache entry), tenant VIPs' flows (their zone is not in
//! the cache key), tunnel VIPs' (never cached), persistence entries, connection-limit
//! counts and outbound drains; and the flows' ages (the cache's jiffies are not a clock
//! the engine reads: every rebuilt flow starts its idle timeout afresh).

use std::collections::{HashMap, HashSet};

use config::{ClientAddress, Mode};

use crate::datapath::flowcache::{CacheAction, CacheCarry, CacheEntry, CacheShift};
use crate::lb::FlowKey;
use crate::lb::conntrack::{Carry, Evidence, FlowRecord, FlowState, Proxied, Track, track};
use crate::lb::egress::NetState;
use crate::lb::tables::Tables;

/// Which worker's table a rebuilt flow belongs in (`lb::process::owner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// FullNAT: the worker its local port names (`port % workers`).
    Port(u16),
    /// NAT: the worker the client's address and port name.
    Client(u128, u16),
    /// DR: the worker the NIC's RSS picks, which the record cannot tell: every worker
    /// takes it (the others' copies idle out).
    Any,
}

impl Owner {
    /// Whether worker `worker` of `workers` takes the flow.
    pub fn takes(self, worker: usize, workers: usize) -> bool {
        let workers = workers.max(1);
        match self {
            Owner::Port(p) => usize::from(p) % workers == worker,
            Owner::Client(addr, port) => {
                usize::from(crate::lb::process::nat_owner(addr, port, workers as u16)) == worker
            }
            Owner::Any => true,
        }
    }
}

/// What a cache gave back.
#[derive(Debug, Default)]
pub struct Rebuilt {
    /// The flows, each with the worker it belongs to.
    pub flows: Vec<(FlowRecord, Owner)>,
    /// Cache entries that are no flow of the running tables (their VIP is gone or changed
    /// mode, a tenant's or a tunnel's, or a direction whose other half is missing): the
    /// caller evicts them, so nothing forwards a flow no table holds.
    pub strays: Vec<FlowKey>,
}

/// The flows `entries` (a cache's every entry) hold that `tables` serve; `net` names DR
/// backends by their MAC.
pub fn from_cache(entries: &[(FlowKey, CacheEntry)], tables: &Tables, net: &NetState) -> Rebuilt {
    let by_key: HashMap<FlowKey, &CacheEntry> = entries.iter().map(|(k, e)| (*k, e)).collect();
    let mut used = HashSet::new();
    let mut out = Rebuilt::default();
    for (key, e) in entries {
        let Some(vip) = tables.vip_lookup(key.dst, key.dport, key.proto) else {
            continue;
        };
        let v = &tables.vips[vip as usize];
        if v.zone != 0 {
            continue;
        }
        let forward = match (v.mode, e.action) {
            (Mode::Nat | Mode::FullNat, CacheAction::Nat { dst: Some(b), src }) => {
                let fullnat = v.mode == Mode::FullNat;
                (fullnat == src.is_some()).then_some((b, src))
            }
            (Mode::Dr, CacheAction::Dr) => dr_backend(tables, vip, e, net).map(|b| (b, None)),
            _ => None,
        };
        let Some((backend, snat)) = forward else {
            continue;
        };
        let tcp = key.proto == wire::IpProtocol::TCP;
        let reverse = (v.mode != Mode::Dr).then(|| {
            let (local, local_port) = snat.unwrap_or((key.src, key.sport));
            FlowKey {
                src: backend.0,
                dst: local,
                sport: backend.1,
                dport: local_port,
                proto: key.proto,
                v6: key.v6,
                zone: 0,
            }
        });
        let back = reverse.and_then(|k| by_key.get(&k).copied());
        let state = match (tcp, v.mode) {
            (true, _) => FlowState::TcpEstablished,
            (false, Mode::Dr) => FlowState::UdpOneWay,
            (false, _) => FlowState::Udp,
        };
        let record = FlowRecord {
            key: *key,
            backend,
            state,
            evidence: Evidence::default(),
            snat,
            carry: carry_of(e, back),
            track: if tcp {
                track_of(e, back)
            } else {
                Track::default()
            },
            age_ns: 0,
        };
        used.insert(*key);
        if let Some(k) = reverse.filter(|_| back.is_some()) {
            used.insert(k);
        }
        let owner = match (v.mode, snat) {
            (Mode::FullNat, Some((_, port))) => Owner::Port(port),
            (Mode::Nat, _) => Owner::Client(key.src, key.sport),
            _ => Owner::Any,
        };
        out.flows.push((record, owner));
    }
    out.strays = entries
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| !used.contains(k))
        .collect();
    out
}

/// The backend of DR VIP `vip` the entry `e` sends to: the one whose neighbour entry on the
/// entry's egress has the entry's destination MAC.
fn dr_backend(tables: &Tables, vip: u32, e: &CacheEntry, net: &NetState) -> Option<(u128, u16)> {
    tables.pool_range(vip).find_map(|slot| {
        let b = &tables.backends[slot];
        let addr = crate::lb::hash::u128_to_addr(b.address, b.v6);
        let mac = net.neighbours.get(&(e.ifindex, addr))?;
        (mac.0 == e.dst_mac).then_some((b.address, b.port))
    })
}

/// The client-address carry and the SYN proxy's shift the two directions repeat.
fn carry_of(fwd: &CacheEntry, back: Option<&CacheEntry>) -> Carry {
    let (kind, base, delta) = match fwd.carry {
        CacheCarry::Seq { base, delta } => (ClientAddress::ProxyV2, base, delta),
        CacheCarry::Toa { base } => (ClientAddress::Toa, base, 0),
        CacheCarry::None | CacheCarry::Ack { .. } => (ClientAddress::None, 0, 0),
    };
    let proxy = match (fwd.shift, back.map(|b| b.shift)) {
        (CacheShift::Ack { shift, window: fwd }, Some(CacheShift::Seq { window: rev, .. })) => {
            Proxied::Open { shift, fwd, rev }
        }
        _ => Proxied::No,
    };
    Carry {
        kind,
        base,
        delta,
        armed: kind != ClientAddress::None,
        proxy,
    }
}

/// Where the two directions' sequence spaces stood when the cache last forwarded them.
fn track_of(fwd: &CacheEntry, back: Option<&CacheEntry>) -> Track {
    let mut t = Track::default();
    let mut side = |e: Option<&CacheEntry>, next_bit, ack_bit, client: bool| {
        let Some(e) = e else { return };
        if let Some(n) = e.seq_next {
            t.seen |= next_bit;
            if client {
                t.client_next = n;
            } else {
                t.backend_next = n;
            }
        }
        if let Some(a) = e.ack_max {
            t.seen |= ack_bit;
            if client {
                t.client_acked = a;
            } else {
                t.backend_acked = a;
            }
        }
    };
    side(
        Some(fwd),
        track::seen::CLIENT,
        track::seen::CLIENT_ACK,
        true,
    );
    side(back, track::seen::BACKEND, track::seen::BACKEND_ACK, false);
    t
}
