//! ICMP and ICMPv6 the appliance answers or forwards.
//!
//! Echo requests to any VIP address are answered in place (v4 and v6), within the ICMP rate
//! limits (`super::ratelimit`). Errors (destination
//! unreachable incl. fragmentation needed, packet too big, time exceeded) addressed to a VIP
//! that quote a VIP flow are sent to that flow's backend, rewritten as its mode needs, so
//! path-MTU discovery works through the balancer. Other ICMP to a VIP address goes to the
//! kernel. A NAT or FullNAT packet whose TTL runs out toward a VIP is answered with a
//! time-exceeded from the VIP, and a tunnel frame too big for the underlay with
//! fragmentation-needed / packet-too-big from the VIP (see `mss`), both built with `wire`'s
//! `Repr`s in the frame's own buffer.

use std::net::Ipv6Addr;

use wire::checksum::{self, L4Csum};
use wire::{Icmpv4Packet, Icmpv4Repr, Icmpv4Type, Icmpv6Packet, Icmpv6Repr, Icmpv6Type};
use wire::{IpProtocol, IpRepr, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, L4Repr};

use super::dr::direct_to_backend;
use super::headers::{Ip, UDP_CSUM_AT, decrement_ttl, rewrite_addr, rewrite_port};
use super::headers::{set_macs, swap_macs, u128_v4, v4_u128};
use super::{DropReason, NONE, OUTER_TTL, Verdict, WorkerState};
use crate::conntrack::ConnTable;
use crate::egress::{Miss, return_hash};
use crate::frame::Frame;
use crate::hash::FlowKey;
use crate::tables::{BackendEntry, NextHop, Tables, VipEntry};
use config::{Mode, Scheduler};

/// The most of the offending packet an ICMPv6 error quotes: the whole error fits the IPv6
/// minimum MTU of 1280 bytes (RFC 4443 section 2.4).
const QUOTE_MAX_V6: usize = 1280 - 48;

/// ICMP / ICMPv6 addressed to a VIP: echo replies and errors quoting a flow.
pub(super) fn icmp(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    now: u64,
) -> Verdict {
    if tables.vip_by_address(ip.dst).is_none() {
        return worker.pass();
    }
    if ip.frag {
        return worker.pass();
    }
    if ip.end() < ip.l4 + 8 {
        return worker.drop(DropReason::Truncated);
    }
    let ty = frame.data()[ip.l4];
    let (echo, error) = if ip.v6 {
        let t = Icmpv6Type::from(ty);
        (t == Icmpv6Type::EchoRequest, matches!(ty, 1..=3))
    } else {
        let t = Icmpv4Type::from(ty);
        (
            t == Icmpv4Type::EchoRequest,
            matches!(t, Icmpv4Type::DestUnreachable | Icmpv4Type::TimeExceeded),
        )
    };
    if echo {
        let vip = tables.vip_by_address(ip.dst).unwrap_or(NONE);
        // The lists of the address's first VIP (in config order) decide who may ping it.
        if let Some(v) = tables.vips.get(vip as usize)
            && !v.admits(ip.src)
        {
            return worker.drop(DropReason::Denied);
        }
        if !worker.icmp.allow(vip, ip.v6, now) {
            worker.stats.icmp_rate_limited += 1;
            return worker.drop(DropReason::IcmpRateLimited);
        }
        let n = match reply_egress(tables, ip) {
            Ok(n) => n,
            Err(m) => return worker.drop(m.into()),
        };
        let d = frame.data_mut();
        echo_reply(d, ip);
        set_macs(d, &n);
        worker.stats.echo_replies += 1;
        return worker.tx(n.ifindex);
    }
    if !error {
        return worker.pass();
    }
    icmp_error(frame, tables, ct, worker, ip, now)
}

/// Where a reply the appliance originates toward `ip`'s sender leaves: by route lookup, the
/// next hop picked by the address pair.
pub(super) fn reply_egress(tables: &Tables, ip: &Ip) -> Result<NextHop, Miss> {
    let key = FlowKey {
        src: ip.src,
        dst: ip.dst,
        sport: 0,
        dport: 0,
        proto: ip.proto,
        v6: ip.v6,
        zone: 0,
    };
    tables.route(ip.src, ip.v6, return_hash(&key))
}

/// Turns an echo request into its reply in place: type, addresses swapped, a fresh TTL.
/// Swapping source and destination leaves every checksum's sum unchanged.
fn echo_reply(d: &mut [u8], ip: &Ip) {
    let end = ip.end();
    let (l3, l4) = (ip.l3, ip.l4);
    let code = d[l4 + 1];
    let old = u16::from_be_bytes([d[l4], code]);
    if ip.v6 {
        let mut m = Icmpv6Packet::new_unchecked(&mut d[l4..end]);
        m.set_msg_type(Icmpv6Type::EchoReply);
        let new = u16::from_be_bytes([u8::from(Icmpv6Type::EchoReply), code]);
        m.set_checksum(checksum::update16(m.checksum(), old, new));
        let mut p = Ipv6Packet::new_unchecked(&mut d[l3..end]);
        let (src, dst) = (p.src(), p.dst());
        p.set_src(dst);
        p.set_dst(src);
        p.set_hop_limit(OUTER_TTL);
    } else {
        let mut m = Icmpv4Packet::new_unchecked(&mut d[l4..end]);
        m.set_msg_type(Icmpv4Type::EchoReply);
        let new = u16::from_be_bytes([u8::from(Icmpv4Type::EchoReply), code]);
        m.set_checksum(checksum::update16(m.checksum(), old, new));
        let mut p = Ipv4Packet::new_unchecked(&mut d[l3..end]);
        let (src, dst) = (p.src(), p.dst());
        p.set_src(dst);
        p.set_dst(src);
        let proto = p.protocol();
        let c = checksum::update16(
            p.checksum(),
            u16::from_be_bytes([p.ttl(), proto]),
            u16::from_be_bytes([OUTER_TTL, proto]),
        );
        p.set_ttl(OUTER_TTL);
        p.set_checksum(c);
    }
    swap_macs(d);
}

/// Replaces the frame with an ICMP time-exceeded from the VIP (the packet's destination)
/// back to its sender, quoting as much of the packet as RFC 792 / RFC 4443 ask for.
#[cold]
#[inline(never)]
pub(super) fn time_exceeded(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
) -> Verdict {
    error_reply(frame, tables, worker, ip, Error::TimeExceeded)
}

/// Replaces the frame with an ICMP fragmentation-needed (IPv4, RFC 1191) or Packet Too Big
/// (IPv6, RFC 8201) from the VIP back to its sender, saying `mtu` fits.
#[cold]
#[inline(never)]
pub(super) fn too_big(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    mtu: u32,
) -> Verdict {
    error_reply(frame, tables, worker, ip, Error::TooBig(mtu))
}

/// The errors the engine originates.
#[derive(Debug, Clone, Copy)]
enum Error {
    TimeExceeded,
    /// With the MTU that fits.
    TooBig(u32),
}

/// Replaces the frame with `kind` from the VIP back to the packet's sender.
fn error_reply(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    kind: Error,
) -> Verdict {
    let n = match reply_egress(tables, ip) {
        Ok(n) => n,
        Err(m) => return worker.drop(m.into()),
    };
    let l3 = ip.l3;
    let hdr = if ip.v6 { 48 } else { 28 };
    let quote_max = if ip.v6 {
        QUOTE_MAX_V6
    } else {
        (ip.l4 - l3) + 8
    };
    let room = frame.capacity().saturating_sub(l3 + hdr);
    let quote = ip.ip_len.min(quote_max).min(room);
    if frame.set_len(l3 + hdr + quote).is_err() {
        return worker.drop(DropReason::NoRoom);
    }
    let d = frame.data_mut();
    // The quote moves behind the new headers; a stack copy lets the Repr borrow it.
    let mut saved = [0u8; QUOTE_MAX_V6];
    let quoted = &mut saved[..quote];
    quoted.copy_from_slice(&d[l3..l3 + quote]);
    set_macs(d, &n);
    let (ip_repr, l4): (IpRepr, L4Repr<'_>) = if ip.v6 {
        let mut r = Ipv6Repr::new(
            Ipv6Addr::from_bits(ip.dst),
            Ipv6Addr::from_bits(ip.src),
            IpProtocol::Icmpv6,
            8 + quote,
        );
        r.hop_limit = OUTER_TTL;
        let m = match kind {
            Error::TimeExceeded => Icmpv6Repr::TimeExceeded {
                code: 0,
                data: quoted,
            },
            Error::TooBig(mtu) => Icmpv6Repr::PacketTooBig { mtu, data: quoted },
        };
        (r.into(), L4Repr::Icmpv6(m))
    } else {
        let mut r = Ipv4Repr::new(
            u128_v4(ip.dst),
            u128_v4(ip.src),
            IpProtocol::Icmp,
            8 + quote,
        );
        r.ttl = OUTER_TTL;
        r.dont_frag = false;
        let m = match kind {
            Error::TimeExceeded => Icmpv4Repr::TimeExceeded {
                code: 0,
                data: quoted,
            },
            Error::TooBig(mtu) => Icmpv4Repr::DestUnreachable {
                code: 4,
                next_hop_mtu: mtu.min(u32::from(u16::MAX)) as u16,
                data: quoted,
            },
        };
        (r.into(), L4Repr::Icmpv4(m))
    };
    let emitted = ip_repr
        .emit(&mut d[l3..], true)
        .and_then(|at| l4.emit(&mut d[l3 + at..], ip_repr.src(), ip_repr.dst(), true));
    if emitted.is_err() {
        return worker.drop(DropReason::NoRoom);
    }
    match kind {
        Error::TimeExceeded => worker.stats.time_exceeded_sent += 1,
        Error::TooBig(_) => worker.stats.too_big_sent += 1,
    }
    worker.tx(n.ifindex)
}

/// The packet an ICMP error quotes (it went VIP → client), as far as the flow needs it.
#[derive(Debug, Clone, Copy)]
struct Quoted {
    /// Offsets and addresses of the quoted IP header (`ip_len` runs to the frame's end).
    ip: Ip,
    sport: u16,
    dport: u16,
}

/// Reads the quoted packet after the 8-byte ICMP header: its IP header must be complete and
/// 8 bytes of its TCP or UDP header present.
fn quoted(d: &[u8], ip: &Ip) -> Option<Quoted> {
    let end = ip.end();
    let q = ip.l4 + 8;
    let d = &d[..end];
    let (hl, proto, src, dst) = if ip.v6 {
        let p = Ipv6Packet::new_checked_quoted(d.get(q..)?).ok()?;
        (40, p.next_header(), p.src().to_bits(), p.dst().to_bits())
    } else {
        let p = Ipv4Packet::new_checked_quoted(d.get(q..)?).ok()?;
        (
            p.header_len(),
            p.protocol(),
            v4_u128(p.src()),
            v4_u128(p.dst()),
        )
    };
    let ql4 = q + hl;
    if d.len() < ql4 + 8 || !matches!(proto, IpProtocol::TCP | IpProtocol::UDP) {
        return None;
    }
    let ports = |at: usize| u16::from_be_bytes([d[at], d[at + 1]]);
    Some(Quoted {
        ip: Ip {
            l3: q,
            v6: ip.v6,
            ip_len: end - q,
            l4: ql4,
            proto,
            src,
            dst,
            frag: false,
            zone: ip.zone,
        },
        sport: ports(ql4),
        dport: ports(ql4 + 2),
    })
}

/// What [`quoted_flow`] found.
struct QuotedFlow {
    backend: u32,
    hash: u32,
    /// FullNAT local address and port.
    snat: Option<(u128, u16)>,
}

/// The backend (and FullNAT address) of the flow whose packet `q` quotes, by connection
/// table or, for a stateless Maglev VIP, by ring.
fn quoted_flow(ct: &mut ConnTable, v: &VipEntry, q: &Quoted, now: u64) -> Option<QuotedFlow> {
    // The quoted packet went VIP → client: the flow key is its reverse.
    let key = FlowKey {
        src: q.ip.dst,
        dst: q.ip.src,
        sport: q.dport,
        dport: q.sport,
        proto: q.ip.proto,
        v6: q.ip.v6,
        zone: 0,
    };
    let hash = key.hash(v.hash);
    let (backend, snat) = match ct.lookup(&key, now) {
        Some(id) => {
            let f = ct.flow(id);
            (f.backend, f.snat)
        }
        None if v.scheduler == Scheduler::Maglev && v.mode != Mode::FullNat => {
            (v.backends.start + v.ring.lookup(hash)?, None)
        }
        None => return None,
    };
    (backend != NONE).then_some(QuotedFlow {
        backend,
        hash,
        snat,
    })
}

/// An ICMP error to a VIP quoting VIP → client: forward to the flow's backend.
fn icmp_error(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    now: u64,
) -> Verdict {
    let Some(q) = quoted(frame.data(), ip).filter(|q| q.ip.src == ip.dst) else {
        return worker.drop(DropReason::IcmpNoFlow);
    };
    let Some(vip) = tables.vip_lookup(q.ip.src, q.sport, q.ip.proto) else {
        return worker.drop(DropReason::IcmpNoFlow);
    };
    let v = &tables.vips[vip as usize];
    let Some(QuotedFlow {
        backend,
        hash,
        snat,
    }) = quoted_flow(ct, v, &q, now)
    else {
        return worker.drop(DropReason::IcmpNoFlow);
    };
    let n = match tables.backend_egress(backend) {
        Ok(n) => n,
        Err(m) => return worker.drop(m.into()),
    };
    let b = tables.backends[backend as usize];
    worker.stats.icmp_errors_forwarded += 1;
    match v.mode {
        Mode::Dr | Mode::Tunnel(_) => {
            direct_to_backend(frame, tables, worker, ip, v.mode, &n, &b, hash)
        }
        Mode::Nat | Mode::FullNat => nat_error(frame, worker, ip, &q, &b, snat, &n),
    }
}

/// NAT and FullNAT: the error goes to the backend, and the packet it quotes becomes what the
/// backend sent (backend:port → client, or → the FullNAT address:port).
fn nat_error(
    frame: &mut Frame<'_>,
    worker: &mut WorkerState,
    ip: &Ip,
    q: &Quoted,
    b: &BackendEntry,
    snat: Option<(u128, u16)>,
    n: &NextHop,
) -> Verdict {
    if b.v6 != ip.v6 {
        return worker.drop(DropReason::FamilyMismatch);
    }
    let end = ip.end();
    if frame.set_len(end).is_err() {
        return worker.drop(DropReason::BadLength);
    }
    let d = frame.data_mut();
    if !decrement_ttl(d, ip) {
        return worker.drop(DropReason::TtlExceeded);
    }
    // Outer: to the backend (from our SNAT address for FullNAT).
    rewrite_addr(d, ip, None, false, b.address);
    if let Some((saddr, _)) = snat {
        rewrite_addr(d, ip, None, true, saddr);
    }
    // The quoted UDP checksum is inside the 8 quoted bytes; TCP's is not.
    let ql4 = q.ip.l4;
    let qcsum = (q.ip.proto == IpProtocol::UDP).then_some(L4Csum::udp(ql4 + UDP_CSUM_AT, ip.v6));
    let set_port = |d: &mut [u8], at: usize, port: u16| match qcsum {
        Some(c) => rewrite_port(d, at, c, port),
        None => d[at..at + 2].copy_from_slice(&port.to_be_bytes()),
    };
    rewrite_addr(d, &q.ip, qcsum, true, b.address);
    set_port(d, ql4, b.port);
    if let Some((saddr, sport)) = snat {
        rewrite_addr(d, &q.ip, qcsum, false, saddr);
        set_port(d, ql4 + 2, sport);
    }
    if ip.v6 {
        let src = Ipv6Packet::new_unchecked(&d[ip.l3..]).src();
        let dst = Ipv6Packet::new_unchecked(&d[ip.l3..]).dst();
        // The message fits a frame, far below the 4 GiB that fill_checksum refuses.
        let _ = Icmpv6Packet::new_unchecked(&mut d[ip.l4..end]).fill_checksum(src, dst);
    } else {
        Icmpv4Packet::new_unchecked(&mut d[ip.l4..end]).fill_checksum();
    }
    set_macs(d, n);
    worker.tx(n.ifindex)
}
