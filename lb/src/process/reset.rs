//! `overflow = "reset"`: a SYN refused because every backend of its VIP is at its
//! connection limit is answered with a RST from the VIP, so the client fails at once
//! instead of retrying into a full pool. The answer is built in place over the SYN, like
//! the ICMP errors (`icmp`), and leaves by the route toward the client.

use std::net::Ipv6Addr;

use wire::{IpProtocol, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, TcpRepr, tcp};

use super::headers::{Ip, L4, set_macs, u128_v4};
use super::icmp::reply_egress;
use super::{DropReason, OUTER_TTL, Verdict, WorkerState};
use crate::frame::Frame;
use crate::tables::Tables;
use config::Overflow;

/// A new flow the engine refused for `reason`: a SYN refused by `overflow = "reset"` gets
/// its RST (and still counts as an `overflow` drop), anything else is dropped.
pub(super) fn refuse(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    reason: DropReason,
) -> Verdict {
    let Some(vip) = tables.vip_in(ip.zone, ip.dst, l4.dport, ip.proto) else {
        return worker.drop(reason);
    };
    // A tenant's client is not reachable in the underlay: no RST from here.
    if ip.zone != 0 {
        return worker.drop(reason);
    }
    let syn = ip.proto == IpProtocol::TCP && l4.flags & 0x12 == 0x02;
    if reason != DropReason::Overflow
        || !syn
        || tables.vips[vip as usize].overflow != Overflow::Reset
    {
        return worker.drop(reason);
    }
    worker.drops[DropReason::Overflow.index()] += 1;
    reset(frame, tables, worker, ip, l4)
}

/// Rewrites the client's SYN into RST+ACK from the VIP (RFC 9293 3.10.7.1: SEQ 0, ACK the
/// SYN's sequence number plus one) and transmits it toward the client.
fn reset(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
) -> Verdict {
    let n = match reply_egress(tables, ip) {
        Ok(n) => n,
        Err(m) => return worker.drop(m.into()),
    };
    let d = frame.data();
    let Some(seq) = d.get(ip.l4 + 4..ip.l4 + 8) else {
        return worker.drop(DropReason::Truncated);
    };
    let seq = u32::from_be_bytes([seq[0], seq[1], seq[2], seq[3]]);
    let l3 = ip.l3;
    let hdr = if ip.v6 { 40 } else { 20 } + 20;
    if frame.set_len(l3 + hdr).is_err() {
        return worker.drop(DropReason::NoRoom);
    }
    let d = frame.data_mut();
    set_macs(d, &n);
    let ip_repr: IpRepr = if ip.v6 {
        let mut r = Ipv6Repr::new(
            Ipv6Addr::from_bits(ip.dst),
            Ipv6Addr::from_bits(ip.src),
            IpProtocol::Tcp,
            20,
        );
        r.hop_limit = OUTER_TTL;
        r.into()
    } else {
        let mut r = Ipv4Repr::new(u128_v4(ip.dst), u128_v4(ip.src), IpProtocol::Tcp, 20);
        r.ttl = OUTER_TTL;
        r.into()
    };
    let rst = L4Repr::Tcp(TcpRepr {
        src_port: l4.dport,
        dst_port: l4.sport,
        seq_number: 0,
        ack_number: seq.wrapping_add(1),
        flags: tcp::flags::RST | tcp::flags::ACK,
        window_len: 0,
        urgent_at: 0,
        options: &[],
        payload: &[],
    });
    let emitted = ip_repr
        .emit(&mut d[l3..], true)
        .and_then(|at| rst.emit(&mut d[l3 + at..], ip_repr.src(), ip_repr.dst(), true));
    if emitted.is_err() {
        return worker.drop(DropReason::NoRoom);
    }
    worker.stats.overflow_resets += 1;
    worker.tx(n.ifindex)
}
