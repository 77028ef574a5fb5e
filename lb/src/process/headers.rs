//! What every mode needs to know about a frame, read once, and the small edits they share.
//!
//! [`parse_ip`] and [`parse_l4`] read the frame through `wire`'s views into [`Ip`] and [`L4`]:
//! the offsets the rewrites work at and the fields the modes decide on, with addresses in the
//! `u128` form of [`FlowKey`](crate::hash::FlowKey) (IPv4 mapped into IPv6). The modes
//! then rewrite in place through the same views.

use std::net::Ipv4Addr;

use wire::checksum::L4Csum;
use wire::{EtherType, EthernetFrame, IpProtocol, Ipv4Packet, Ipv6Packet, MacAddr};
use wire::{TcpPacket, UdpPacket, walk_ext_headers};

use super::DropReason;
use crate::tables::NextHop;

/// Offsets and facts of one parsed IP packet inside a frame.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ip {
    pub(super) l3: usize,
    pub(super) v6: bool,
    /// IP header + payload length per the header (no Ethernet padding).
    pub(super) ip_len: usize,
    pub(super) l4: usize,
    pub(super) proto: u8,
    pub(super) src: u128,
    pub(super) dst: u128,
    /// Any fragment (first included).
    pub(super) frag: bool,
    /// The flow key's zone: 0, or the tenant's (set by `tenant` after decapsulation).
    pub(super) zone: u32,
}

impl Ip {
    /// Offset of the TTL (IPv4) or hop limit (IPv6) byte.
    #[inline(always)]
    pub(super) fn ttl_at(&self) -> usize {
        self.l3 + if self.v6 { 7 } else { 8 }
    }

    /// Where the IP packet ends (Ethernet padding excluded).
    #[inline(always)]
    pub(super) fn end(&self) -> usize {
        self.l3 + self.ip_len
    }
}

/// An IPv4 address in the packet path's `u128` form.
#[inline(always)]
pub(super) fn v4_u128(a: Ipv4Addr) -> u128 {
    0xffff_0000_0000 | u128::from(a.to_bits())
}

/// The IPv4 address of a `u128`-form address (its low 32 bits).
#[inline(always)]
pub(super) fn u128_v4(a: u128) -> Ipv4Addr {
    Ipv4Addr::from_bits(a as u32)
}

/// Parses the IP header at `l3`; `Ok(None)` for anything that is not IPv4 or IPv6.
pub(super) fn parse_ip(
    d: &[u8],
    l3: usize,
    ethertype: EtherType,
) -> Result<Option<Ip>, DropReason> {
    match ethertype {
        EtherType::Ipv4 => {
            let p = Ipv4Packet::new_checked(&d[l3..])?;
            if !p.verify_checksum() {
                return Err(DropReason::BadChecksum);
            }
            Ok(Some(Ip {
                l3,
                v6: false,
                ip_len: usize::from(p.total_len()),
                l4: l3 + p.header_len(),
                proto: p.protocol(),
                src: v4_u128(p.src()),
                dst: v4_u128(p.dst()),
                frag: p.is_fragment(),
                zone: 0,
            }))
        }
        EtherType::Ipv6 => {
            let p = Ipv6Packet::new_checked(&d[l3..])?;
            let up = walk_ext_headers(&p)?;
            Ok(Some(Ip {
                l3,
                v6: true,
                ip_len: 40 + usize::from(p.payload_len()),
                l4: l3 + up.offset,
                proto: up.protocol,
                src: p.src().to_bits(),
                dst: p.dst().to_bits(),
                frag: up.fragment.is_some(),
                zone: 0,
            }))
        }
        _ => Ok(None),
    }
}

/// TCP/UDP facts: ports, TCP flags, checksum field.
#[derive(Debug, Clone, Copy)]
pub(super) struct L4 {
    pub(super) sport: u16,
    pub(super) dport: u16,
    pub(super) flags: u8,
    /// A TCP segment with payload, or any UDP datagram (evidence for the flow's state).
    pub(super) payload: bool,
    /// TCP: the sequence and acknowledgement numbers (the handshake's evidence); 0 for UDP.
    pub(super) seq: u32,
    pub(super) ack: u32,
    /// TCP: payload bytes (0 for UDP).
    pub(super) len: u32,
    pub(super) csum: L4Csum,
}

/// The frame's 5-tuple, as received.
#[inline(always)]
pub(super) fn flow_key(ip: &Ip, l4: &L4) -> crate::hash::FlowKey {
    crate::hash::FlowKey {
        src: ip.src,
        dst: ip.dst,
        sport: l4.sport,
        dport: l4.dport,
        proto: ip.proto,
        v6: ip.v6,
        zone: ip.zone,
    }
}

/// Offset of the checksum field in a TCP header.
pub(super) const TCP_CSUM_AT: usize = 16;
/// Offset of the checksum field in a UDP header.
pub(super) const UDP_CSUM_AT: usize = 6;

/// Checks the TCP or UDP header after `ip` fits the IP packet and reads its ports.
pub(super) fn parse_l4(d: &[u8], ip: &Ip) -> Result<L4, DropReason> {
    parse_l4_in(d, ip, false)
}

/// [`parse_l4`] for the first fragment of a datagram: the whole TCP or UDP header must be
/// in it (RFC 1858: no tiny first fragments), and the UDP length, which counts the whole
/// datagram, must be at least what this fragment carries.
pub(super) fn parse_l4_first_fragment(d: &[u8], ip: &Ip) -> Result<L4, DropReason> {
    parse_l4_in(d, ip, true)
}

fn parse_l4_in(d: &[u8], ip: &Ip, fragment: bool) -> Result<L4, DropReason> {
    let end = ip.end();
    let avail = end.saturating_sub(ip.l4);
    match ip.proto {
        IpProtocol::TCP => {
            if avail < 20 {
                return Err(DropReason::Truncated);
            }
            let t = TcpPacket::new_unchecked(&d[ip.l4..end]);
            let doff = t.header_len();
            if doff < 20 {
                return Err(DropReason::Malformed);
            }
            if doff > avail {
                return Err(DropReason::BadLength);
            }
            Ok(L4 {
                sport: t.src_port(),
                dport: t.dst_port(),
                flags: t.flags(),
                payload: avail > doff,
                seq: t.seq_number(),
                ack: t.ack_number(),
                len: (avail - doff) as u32,
                csum: L4Csum::tcp(ip.l4 + TCP_CSUM_AT),
            })
        }
        _ => {
            if avail < 8 {
                return Err(DropReason::Truncated);
            }
            let u = UdpPacket::new_unchecked(&d[ip.l4..end]);
            let ulen = usize::from(u.len());
            let short = if fragment { ulen < avail } else { ulen > avail };
            if ulen < 8 || short {
                return Err(DropReason::BadLength);
            }
            Ok(L4 {
                sport: u.src_port(),
                dport: u.dst_port(),
                flags: 0,
                payload: true,
                seq: 0,
                ack: 0,
                len: 0,
                csum: L4Csum::udp(ip.l4 + UDP_CSUM_AT, ip.v6),
            })
        }
    }
}

/// Decrements TTL / hop limit with the IPv4 checksum patched; false if it was <= 1.
pub(super) fn decrement_ttl(d: &mut [u8], ip: &Ip) -> bool {
    if d[ip.ttl_at()] <= 1 {
        return false;
    }
    if ip.v6 {
        let mut p = Ipv6Packet::new_unchecked(&mut d[ip.l3..]);
        p.set_hop_limit(p.hop_limit() - 1);
    } else {
        Ipv4Packet::new_unchecked(&mut d[ip.l3..]).decrement_ttl();
    }
    true
}

/// Rewrites the source or destination address, patching the IPv4 header checksum and the
/// L4 checksum (whose pseudo-header covers addresses).
pub(super) fn rewrite_addr(d: &mut [u8], ip: &Ip, l4: Option<L4Csum>, src: bool, new: u128) {
    let old = if ip.v6 {
        let mut p = Ipv6Packet::new_unchecked(&mut d[ip.l3..]);
        let old = if src { p.src() } else { p.dst() }.to_bits();
        if src {
            p.set_src(new.into());
        } else {
            p.set_dst(new.into());
        }
        old
    } else {
        let mut p = Ipv4Packet::new_unchecked(&mut d[ip.l3..]);
        let old = v4_u128(if src { p.src() } else { p.dst() });
        if old != new && src {
            p.rewrite_src(u128_v4(new));
        } else if old != new {
            p.rewrite_dst(u128_v4(new));
        }
        old
    };
    if old == new {
        return;
    }
    if let Some(c) = l4 {
        c.patch(d, |x| wire::checksum::update_addr(x, old, new, ip.v6));
    }
}

/// Replaces the port at `off`, patching the checksum field `csum`.
pub(super) fn rewrite_port(d: &mut [u8], off: usize, csum: L4Csum, new: u16) {
    let old = u16::from_be_bytes([d[off], d[off + 1]]);
    if old == new {
        return;
    }
    d[off..off + 2].copy_from_slice(&new.to_be_bytes());
    csum.patch(d, |x| wire::checksum::update16(x, old, new));
}

/// Addresses the frame to the next hop: its MAC as destination, ours as source.
#[inline(always)]
pub(super) fn set_macs(d: &mut [u8], n: &NextHop) {
    let mut e = EthernetFrame::new_unchecked(d);
    e.set_dst(n.dst_mac);
    e.set_src(n.src_mac);
}

/// Sends the frame back where it came from (replies the appliance originates).
pub(super) fn swap_macs(d: &mut [u8]) {
    let mut e = EthernetFrame::new_unchecked(d);
    let (src, dst): (MacAddr, MacAddr) = (e.src(), e.dst());
    e.set_dst(src);
    e.set_src(dst);
}
