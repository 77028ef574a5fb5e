//! IP fragments of DR and tunnel VIPs.
//!
//! Non-first fragments carry no ports, so every fragment of a datagram (first included, so
//! the datagram stays together) is hashed on the 3-tuple (2-tuple if the VIP says so) and
//! looked up statelessly in the VIP's Maglev ring. The VIP is found by (address, protocol);
//! when several VIPs share both, the fragment is dropped as ambiguous. NAT and FullNAT
//! cannot rewrite ports they cannot see and would need reassembly: their fragments are
//! dropped and counted.

use super::dr::direct_to_backend;
use super::headers::Ip;
use super::{DropReason, Verdict, WorkerState};
use crate::config::{HashFields, Mode};
use crate::lb::frame::Frame;
use crate::lb::hash::FlowKey;
use crate::lb::tables::{FragmentVip, Tables, VipEntry};

/// Forwards a fragment to the backend its 3-tuple hashes to.
pub(super) fn fragment(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    len: u64,
) -> Verdict {
    let vip = match tables.fragment_vip(ip.dst, ip.proto) {
        None => return worker.pass(),
        Some(FragmentVip::Ambiguous) => return worker.drop(DropReason::FragmentAmbiguous),
        Some(FragmentVip::Unique(v)) => v,
    };
    let v: &VipEntry = &tables.vips[vip as usize];
    if matches!(v.mode, Mode::Nat | Mode::FullNat) {
        return worker.drop(DropReason::FragmentNat);
    }
    let fields = if v.hash == HashFields::TwoTuple {
        HashFields::TwoTuple
    } else {
        HashFields::ThreeTuple
    };
    let key = FlowKey {
        src: ip.src,
        dst: ip.dst,
        sport: 0,
        dport: 0,
        proto: ip.proto,
        v6: ip.v6,
    };
    let hash = key.hash(fields);
    let Some(pos) = v.ring.lookup(hash) else {
        return worker.drop(DropReason::NoBackend);
    };
    let backend = v.backends.start + pos;
    let n = match tables.backend_egress(backend) {
        Ok(n) => n,
        Err(m) => return worker.drop(m.into()),
    };
    let b = tables.backends[backend as usize];
    worker.stats.fragments += 1;
    worker.vip_packets[vip as usize] += 1;
    worker.vip_bytes[vip as usize] += len;
    worker.backend_packets[backend as usize] += 1;
    worker.backend_bytes[backend as usize] += len;
    direct_to_backend(frame, tables, worker, ip, v.mode, &n, &b, hash)
}
