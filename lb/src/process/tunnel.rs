//! Tunnel: DR across a routed network, the client's packet inside an outer header.
//!
//! IPIP picks the outer family from the backend (4in4, 6in4, 4in6, 6in6), GUE is variant 1
//! (UDP straight to the inner IP header), VXLAN carries an inner Ethernet header. The outer
//! header is written fresh in the headroom in front of the frame; the Ethernet header (with
//! its VLAN tags) moves to the new front. See the module docs of [`super`] for TTL, DF and
//! the flow-hash source address and port.

use std::net::Ipv6Addr;

use wire::checksum::{self, l4_checksum_full};
use wire::{EtherType, EthernetFrame, IpProtocol, Ipv4Packet, Ipv6Packet, UdpPacket, VxlanHeader};

use super::headers::{Ip, UDP_CSUM_AT, parse_ip, set_macs, u128_v4};
use super::{DropReason, OUTER_TTL, Verdict, WorkerState};
use crate::frame::Frame;
use crate::tables::{BackendEntry, NextHop, Tables, TunnelSource};
use config::Encap;

/// Length of the inner Ethernet header VXLAN carries.
const INNER_ETH: usize = 14;
/// Length of an untagged Ethernet header (the probe frames').
const ETH_LEN: usize = 14;

/// Tunnel mode: encapsulate toward backend `b` and send to its next hop.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn to_backend(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    encap: Encap,
    n: &NextHop,
    b: &BackendEntry,
    hash: u32,
) -> Verdict {
    let outer = Outer {
        encap,
        v6: b.v6,
        backend: b.address,
        hash,
    };
    match encapsulate(frame, ip, &outer, n, &tables.tunnel_source) {
        Ok(()) => worker.tx(n.ifindex),
        Err(r) => worker.drop(r),
    }
}

/// Encapsulates a frame the appliance originates (the VIP health probe) toward backend `b`
/// exactly as [`to_backend`] does a client's: the probe must reach the backend by the path
/// the clients' traffic takes, or it proves nothing. The frame starts with an untagged
/// Ethernet header; `hash` picks the outer source address and port as a flow hash would.
pub fn encapsulate_probe(
    frame: &mut Frame<'_>,
    encap: Encap,
    b: &BackendEntry,
    n: &NextHop,
    src: &TunnelSource,
    hash: u32,
) -> Result<(), DropReason> {
    let ethertype = EthernetFrame::new_checked(frame.data())?.ethertype();
    let ip = parse_ip(frame.data(), ETH_LEN, ethertype)?.ok_or(DropReason::Malformed)?;
    let outer = Outer {
        encap,
        v6: b.v6,
        backend: b.address,
        hash,
    };
    encapsulate(frame, &ip, &outer, n, src)
}

/// What the outer headers are made of.
struct Outer {
    encap: Encap,
    /// Outer IPv6 (else IPv4).
    v6: bool,
    backend: u128,
    hash: u32,
}

/// The outer IP header's fields that do not come from [`Outer`].
struct OuterIp {
    /// DSCP/ECN, copied from the inner header.
    tos: u8,
    /// DF, copied from the inner IPv4 header (always set for inner IPv6).
    df: bool,
    /// Outer IP header + payload.
    total: usize,
    proto: u8,
    src: u128,
}

/// Prepends the tunnel headers. Ethernet padding after the IP packet is cut.
fn encapsulate(
    frame: &mut Frame<'_>,
    ip: &Ip,
    outer: &Outer,
    n: &NextHop,
    src: &TunnelSource,
) -> Result<(), DropReason> {
    let l3 = ip.l3;
    if frame.set_len(ip.end()).is_err() {
        return Err(DropReason::BadLength);
    }
    let (udp, extra) = match outer.encap {
        Encap::Ipip => (None, 0),
        Encap::Gue { port } => (Some(port), 8),
        Encap::Vxlan { port, .. } => (Some(port), 8 + 8 + INNER_ETH),
    };
    let outer_ip = if outer.v6 { 40 } else { 20 };
    let add = outer_ip + extra;
    // The outer length field must hold the result (IPv4 total length, IPv6 payload length).
    if ip.ip_len + add - if outer.v6 { 40 } else { 0 } > usize::from(u16::MAX) {
        return Err(DropReason::BadLength);
    }
    // DSCP/ECN and DF come from the inner header before anything moves.
    let (tos, df) = if ip.v6 {
        (
            Ipv6Packet::new_unchecked(&frame.data()[l3..]).traffic_class(),
            true,
        )
    } else {
        let p = Ipv4Packet::new_unchecked(&frame.data()[l3..]);
        (p.dscp_ecn(), p.dont_frag())
    };
    if frame.push_front(add).is_err() {
        return Err(DropReason::NoRoom);
    }
    let d = frame.data_mut();
    // Move MACs + tags + EtherType to the new front; the last EtherType names the outer IP.
    d.copy_within(add..add + l3, 0);
    let ethertype = if outer.v6 {
        EtherType::Ipv6
    } else {
        EtherType::Ipv4
    };
    d[l3 - 2..l3].copy_from_slice(&u16::from(ethertype).to_be_bytes());
    set_macs(d, n);
    let proto = match outer.encap {
        Encap::Ipip if ip.v6 => IpProtocol::IPV6,
        Encap::Ipip => IpProtocol::IPIP,
        _ => IpProtocol::UDP,
    };
    let (src_addr, sport) = tunnel_source(src, outer.v6, outer.hash);
    let o = OuterIp {
        tos,
        df,
        total: d.len() - l3,
        proto,
        src: src_addr,
    };
    if outer.v6 {
        outer_v6(&mut d[l3..], outer, &o);
    } else {
        outer_v4(&mut d[l3..], outer, &o);
    }
    if let Some(port) = udp {
        outer_udp(d, l3, outer, (sport, port), n, ip.v6);
    }
    Ok(())
}

/// Writes the outer IPv6 header at the start of `h`.
#[inline(always)]
fn outer_v6(h: &mut [u8], outer: &Outer, o: &OuterIp) {
    if let Some(h) = h.first_chunk_mut::<40>() {
        let mut p = Ipv6Packet::new_unchecked(h);
        p.set_first_word((6u32 << 28) | (u32::from(o.tos) << 20) | (outer.hash & 0x000f_ffff));
        p.set_payload_len((o.total - 40) as u16);
        p.set_next_header(o.proto);
        p.set_hop_limit(OUTER_TTL);
        p.set_src(Ipv6Addr::from_bits(o.src));
        p.set_dst(Ipv6Addr::from_bits(outer.backend));
    }
}

/// Writes the outer IPv4 header at the start of `h`, its checksum summed from the values.
#[inline(always)]
fn outer_v4(h: &mut [u8], outer: &Outer, o: &OuterIp) {
    if let Some(h) = h.first_chunk_mut::<20>() {
        let flags = if o.df { 0x4000u16 } else { 0 };
        let (s, t) = (u128_v4(o.src), u128_v4(outer.backend));
        let c = checksum::v4_fresh_header(
            o.tos,
            o.total as u16,
            flags,
            OUTER_TTL,
            o.proto,
            s.to_bits(),
            t.to_bits(),
        );
        let mut p = Ipv4Packet::new_unchecked(h);
        p.set_version(4);
        p.set_ihl(5);
        p.set_dscp_ecn(o.tos);
        p.set_total_len(o.total as u16);
        p.set_ident(0);
        p.set_flags_frag_word(flags);
        p.set_ttl(OUTER_TTL);
        p.set_protocol(o.proto);
        p.set_checksum(c);
        p.set_src(s);
        p.set_dst(t);
    }
}

/// Writes the outer UDP header (and for VXLAN its header and the inner Ethernet header)
/// after the outer IP header at `l3`. The UDP checksum is zero over IPv4 and computed over
/// IPv6.
#[inline(always)]
fn outer_udp(
    d: &mut [u8],
    l3: usize,
    outer: &Outer,
    ports: (u16, u16),
    n: &NextHop,
    inner_v6: bool,
) {
    let u = l3 + if outer.v6 { 40 } else { 20 };
    let len = (d.len() - u) as u16;
    let mut p = UdpPacket::new_unchecked(&mut d[u..]);
    p.set_src_port(ports.0);
    p.set_dst_port(ports.1);
    p.set_len(len);
    p.set_checksum(0);
    if let Encap::Vxlan { vni, .. } = outer.encap {
        let x = &mut d[u + 8..];
        VxlanHeader::new_unchecked(&mut x[..8]).emit(vni);
        let inner = &mut x[8..8 + INNER_ETH];
        inner[0..6].copy_from_slice(&n.dst_mac.0);
        inner[6..12].copy_from_slice(&n.src_mac.0);
        let t = if inner_v6 {
            EtherType::Ipv6
        } else {
            EtherType::Ipv4
        };
        inner[12..14].copy_from_slice(&u16::from(t).to_be_bytes());
    }
    if outer.v6 {
        let end = d.len();
        l4_checksum_full(d, l3, true, u, end, IpProtocol::UDP, UDP_CSUM_AT);
    }
}

/// Outer source address and UDP source port derived from the flow hash.
pub fn tunnel_source(src: &TunnelSource, v6: bool, hash: u32) -> (u128, u16) {
    let sport = 49152 | (hash as u16 & 0x3fff);
    if v6 {
        let base = u128::from(src.v6) & !0xffff_ffffu128;
        (base | u128::from(hash), sport)
    } else {
        let base = u32::from(src.v4) & 0xffff_0000;
        (0xffff_0000_0000 | u128::from(base | (hash & 0xffff)), sport)
    }
}
