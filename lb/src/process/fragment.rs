//! IP fragments: stateless for DR and tunnel VIPs, through the fragment table for NAT and
//! FullNAT.
//!
//! Non-first fragments carry no ports. For DR and tunnel VIPs every fragment of a datagram
//! (first included, so the datagram stays together) is hashed on the 3-tuple (2-tuple if the
//! VIP says so) and looked up statelessly in the VIP's Maglev ring; the VIP is found by
//! (address, protocol), and when several VIPs share both a fragment is dropped as ambiguous.
//!
//! NAT and FullNAT rewrite ports, which only the first fragment has. The first fragment
//! goes the way an unfragmented packet would (flow, backend, FullNAT address and port, the
//! L4 header and its checksum rewritten: the checksum covers the whole datagram, so the
//! incremental fix of the changed fields in the first fragment is right for all of it), and
//! its decision is remembered in the worker's [`FragTable`](super::fragtable::FragTable)
//! under (source, destination, protocol, identification). Later fragments get the same
//! addresses, TTL / hop limit and next hop from there; one without a first fragment is
//! dropped (`fragment_no_first`), as are overlapping pieces and datagrams over 65,535
//! bytes. Replies the backend fragments come back the same way (return traffic).

use wire::{Ipv4Packet, Ipv6Packet, walk_ext_headers};

use super::dr::direct_to_backend;
use super::fragtable::{FragKey, Piece, Rewrite};
use super::headers::{Ip, parse_l4_first_fragment, set_macs};
use super::mss;
use super::nat::{nat_rewrite_v4, nat_rewrite_v6};
use super::{Decision, DropReason, Record, Verdict, WorkerState, forward, nat};
use crate::conntrack::ConnTable;
use crate::frame::Frame;
use crate::hash::FlowKey;
use crate::tables::{FragmentVip, Tables, VipEntry};
use config::{HashFields, Mode};

/// The largest datagram IPv4 and IPv6 (without jumbograms) can describe.
const MAX_DATAGRAM: u32 = 65_535;

/// A fragment's identity and place, read from its IPv4 header or IPv6 Fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FragInfo {
    pub(super) key: FragKey,
    pub(super) piece: Piece,
}

/// Reads `ip`'s fragment fields; `None` when they are not there (not a fragment after all).
pub(super) fn frag_info(d: &[u8], ip: &Ip) -> Option<FragInfo> {
    let (offset, more, ident) = if ip.v6 {
        let p = Ipv6Packet::new_unchecked(d.get(ip.l3..)?);
        let f = walk_ext_headers(&p).ok()?.fragment?;
        (f.offset, f.more, f.ident)
    } else {
        let p = Ipv4Packet::new_unchecked(d.get(ip.l3..)?);
        (p.frag_offset(), p.more_frags(), u32::from(p.ident()))
    };
    let start = u32::from(offset);
    Some(FragInfo {
        key: FragKey {
            src: ip.src,
            dst: ip.dst,
            ident,
            proto: ip.proto,
            v6: ip.v6,
        },
        piece: Piece {
            start,
            end: start + ip.end().saturating_sub(ip.l4) as u32,
            last: !more,
        },
    })
}

/// Any fragment of a TCP or UDP datagram. A first fragment's decision is described to
/// `rec` (the flow cache may take the flow; it never takes a fragment).
#[allow(clippy::too_many_arguments)]
pub(super) fn fragment<R: Record>(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    len: u64,
    now: u64,
    rec: &mut R,
) -> Verdict {
    let fvip = tables.fragment_vip(ip.dst, ip.proto);
    if let Some(FragmentVip::Unique(v)) = fvip
        && !is_nat(&tables.vips[v as usize])
    {
        return stateless(frame, tables, worker, ip, v, len, now);
    }
    let ours = fvip.is_some() || tables.snat_vip(ip.dst).is_some();
    let Some(f) = frag_info(frame.data(), ip) else {
        return worker.drop(DropReason::Malformed);
    };
    if f.piece.start == 0 {
        return first(frame, tables, ct, worker, ip, &f, len, now, rec);
    }
    // A later fragment is NAT return traffic only if its first fragment said so.
    if let Some(r) = checked(&f, ip) {
        return if ours || worker.frags.contains(&f.key, now) {
            worker.drop(r)
        } else {
            worker.pass()
        };
    }
    match worker.frags.later(&f.key, f.piece, now) {
        Some(Ok(rw)) => later(frame, worker, ip, &rw, len),
        Some(Err(r)) => worker.drop(r),
        None if fvip == Some(FragmentVip::Ambiguous) => worker.drop(DropReason::FragmentAmbiguous),
        None if ours => worker.drop(DropReason::FragmentNoFirst),
        None => worker.pass(),
    }
}

fn is_nat(v: &VipEntry) -> bool {
    matches!(v.mode, Mode::Nat | Mode::FullNat)
}

/// Why a fragment cannot be part of a well-formed datagram: past 65,535 bytes (RFC 791,
/// RFC 8200 section 4.5), or not the last and not a multiple of 8 bytes long.
fn checked(f: &FragInfo, ip: &Ip) -> Option<DropReason> {
    let header = if ip.v6 { 0 } else { (ip.l4 - ip.l3) as u32 };
    if f.piece.end + header > MAX_DATAGRAM {
        return Some(DropReason::FragmentOversize);
    }
    if !f.piece.last && !(f.piece.end - f.piece.start).is_multiple_of(8) {
        return Some(DropReason::Malformed);
    }
    None
}

/// The first fragment: decided like an unfragmented packet, the decision remembered.
#[allow(clippy::too_many_arguments)]
fn first<R: Record>(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    f: &FragInfo,
    len: u64,
    now: u64,
    outer: &mut R,
) -> Verdict {
    let vip_address = tables.vip_by_address(ip.dst).is_some();
    let ours = vip_address || tables.snat_vip(ip.dst).is_some();
    let l4 = match parse_l4_first_fragment(frame.data(), ip) {
        Ok(l4) => l4,
        Err(r) if ours => return worker.drop(r),
        Err(_) => return worker.pass(),
    };
    let vip = tables.vip_lookup(ip.dst, l4.dport, ip.proto);
    let nat_return = vip.is_none()
        && (tables.snat_vip(ip.dst).is_some()
            || tables.nat_backend(ip.src, l4.sport, ip.proto).is_some());
    if vip.is_none() && !nat_return {
        return worker.pass();
    }
    if let Some(r) = checked(f, ip) {
        return worker.drop(r);
    }
    if worker.frags.contains(&f.key, now) {
        return worker.drop(DropReason::FragmentOverlap);
    }
    let mut rec: Option<Decision> = None;
    let verdict = match vip {
        Some(v) if !is_nat(&tables.vips[v as usize]) => {
            // A DR or tunnel VIP sharing its address and protocol with another VIP.
            return worker.drop(DropReason::FragmentAmbiguous);
        }
        Some(v) => forward(frame, tables, ct, worker, ip, &l4, v, len, now, &mut rec),
        None => nat::reverse(frame, tables, ct, worker, ip, &l4, len, now, &mut rec),
    };
    if let (Verdict::Tx { .. }, Some(d)) = (verdict, rec) {
        let rw = Rewrite {
            src: d.src.map(|s| s.0),
            dst: d.dst.map(|s| s.0),
            next_hop: d.next_hop,
            vip: d.vip,
            backend: d.backend,
        };
        worker.frags.insert(f.key, rw, f.piece, now);
        worker.stats.fragments += 1;
        if R::ON {
            outer.decision(d);
        }
    }
    verdict
}

/// A later fragment of a NAT or FullNAT datagram: the first fragment's addresses, TTL /
/// hop limit down by one, its next hop.
fn later(
    frame: &mut Frame<'_>,
    worker: &mut WorkerState,
    ip: &Ip,
    rw: &Rewrite,
    len: u64,
) -> Verdict {
    let d = frame.data_mut();
    if d[ip.ttl_at()] <= 1 {
        return worker.drop(DropReason::TtlExceeded);
    }
    let (src, dst) = (rw.src.map(|a| (a, 0)), rw.dst.map(|a| (a, 0)));
    // The L4 delta these return is for a header this fragment does not carry.
    if ip.v6 {
        nat_rewrite_v6(d, ip, src, dst);
    } else {
        nat_rewrite_v4(d, ip, src, dst);
    }
    set_macs(d, &rw.next_hop);
    if let Some(c) = worker.vip_packets.get_mut(rw.vip as usize) {
        *c += 1;
        worker.vip_bytes[rw.vip as usize] += len;
    }
    if let Some(c) = worker.backend_packets.get_mut(rw.backend as usize) {
        *c += 1;
        worker.backend_bytes[rw.backend as usize] += len;
    }
    worker.stats.fragments += 1;
    worker.tx(rw.next_hop.ifindex)
}

/// Forwards a DR or tunnel fragment to the backend its 3-tuple hashes to (a tunnel
/// fragment that would not fit the underlay is answered as `mss::fit` says).
fn stateless(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    vip: u32,
    len: u64,
    now: u64,
) -> Verdict {
    let v: &VipEntry = &tables.vips[vip as usize];
    if !v.admits(ip.src) {
        return worker.drop(DropReason::Denied);
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
        zone: 0,
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
    if let Mode::Tunnel(encap) = v.mode
        && let Some(verdict) = mss::fit(frame, tables, worker, ip, encap, &n, &b, vip, now)
    {
        return verdict;
    }
    worker.stats.fragments += 1;
    worker.vip_packets[vip as usize] += 1;
    worker.vip_bytes[vip as usize] += len;
    worker.backend_packets[backend as usize] += 1;
    worker.backend_bytes[backend as usize] += len;
    direct_to_backend(frame, tables, worker, ip, v.mode, &n, &b, hash)
}
