//! One line per frame, in the manner of `tcpdump -nn`, for people reading a capture.
//!
//! The console shows the frames `sluice capture` took as text, and the operator reading them
//! knows tcpdump: so the same shapes (`IP 198.51.100.10.40000 > 203.0.113.80.80: Flags [S],
//! seq 1, win 65535, length 0`), with absolute sequence numbers (tcpdump's `-S`: there is no
//! earlier packet to be relative to). Captured frames are cut at the snap length and may be
//! anything the wire carried, so every field is read only after its bytes are known to be
//! there, and a frame that ends too early says where, as tcpdump does (`[|tcp]`), instead of
//! failing: [`line()`] never panics and always returns a line.
//!
//! Lengths come from the headers (IP total length, UDP length), not from what was captured,
//! so a cut frame still reports the size it had on the wire.

use core::fmt::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::ethernet::{EthernetFrame, HEADER_LEN as ETHERNET_LEN, VLAN_TAG_LEN, VlanTag};
use super::icmpv4::{Icmpv4Packet, Icmpv4Type};
use super::icmpv6::{Icmpv6Packet, Icmpv6Type};
use super::ipv4::{HEADER_LEN as IPV4_LEN, Ipv4Packet};
use super::ipv6::{FRAG_HEADER_LEN, HEADER_LEN as IPV6_LEN, Ipv6FragmentHeader, Ipv6Packet};
use super::tcp::{HEADER_LEN as TCP_LEN, TcpPacket, flags};
use super::udp::{HEADER_LEN as UDP_LEN, UdpPacket};
use super::vxlan::{DEFAULT_PORT as VXLAN_PORT, HEADER_LEN as VXLAN_LEN, VxlanHeader};
use super::{EtherType, IpProtocol, icmpv4, icmpv6};

/// How deep encapsulations (VXLAN, IP in IP) are followed; past that the inner bytes are
/// counted, not read, so a hostile frame of nested headers cannot make the line long.
const MAX_DEPTH: u8 = 4;
/// Extension headers an IPv6 walk steps over before it gives up.
const MAX_EXT_HEADERS: usize = 8;

/// A tcpdump-like summary of an Ethernet frame: VLAN tags, then IPv4 or IPv6 (with the
/// Hop-by-Hop, Routing, Destination Options, Fragment and AH extension headers), then TCP,
/// UDP, VXLAN (UDP port 4789, followed into the inner frame), ICMP or ICMPv6; ARP; any other
/// EtherType by name or number. Fragments after the first say so instead of reading their
/// bytes as a header; a frame cut short ends in `[|ether]`, `[|vlan]`, `[|ip]`, `[|ip6]`,
/// `[|tcp]`, `[|udp]`, `[|icmp]`, `[|icmp6]`, `[|vxlan]` or `[|arp]`.
pub fn line(frame: &[u8]) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = ethernet(&mut out, frame, 0);
    out
}

fn ethernet(out: &mut String, b: &[u8], depth: u8) -> fmt::Result {
    let Some(header) = b.get(..ETHERNET_LEN) else {
        return out.write_str("[|ether]");
    };
    let mut ethertype = EthernetFrame::new_unchecked(header).ethertype();
    let mut at = ETHERNET_LEN;
    // Each tag takes four bytes, so the frame's length bounds the walk.
    while ethertype.is_vlan() {
        let Some(tag) = b.get(at..at + VLAN_TAG_LEN) else {
            return out.write_str("[|vlan]");
        };
        let tag = VlanTag::new_unchecked(tag);
        write!(out, "vlan {}: ", tag.vid())?;
        ethertype = tag.ethertype();
        at += VLAN_TAG_LEN;
    }
    let payload = &b[at..];
    match ethertype {
        EtherType::Ipv4 => ipv4(out, payload, depth),
        EtherType::Ipv6 => ipv6(out, payload, depth),
        EtherType::Arp => arp(out, payload),
        EtherType::Unknown(n) if n < 0x0600 => {
            write!(out, "802.3, length {n}")
        }
        other => {
            let n = u16::from(other);
            match ethertype_name(n) {
                Some(name) => write!(out, "{name}, length {}", payload.len()),
                None => write!(out, "ethertype {n:#06x}, length {}", payload.len()),
            }
        }
    }
}

/// Names for the EtherTypes a load balancer's links commonly carry besides IP and ARP.
/// Registry: IEEE "EtherType" public listing.
fn ethertype_name(n: u16) -> Option<&'static str> {
    Some(match n {
        0x8035 => "RARP",
        0x8809 => "LACP",
        0x8847 => "MPLS",
        0x8848 => "MPLS multicast",
        0x888e => "EAPOL",
        0x88cc => "LLDP",
        0x88e5 => "MACsec",
        0x88f7 => "PTP",
        0x8902 => "CFM",
        _ => return None,
    })
}

/// What the network layer hands the transport: addresses, protocol, the transport bytes
/// captured (`body`) and their length on the wire (`len`), and a fragment, if it is one.
struct L3<'a> {
    src: IpAddr,
    dst: IpAddr,
    protocol: u8,
    body: &'a [u8],
    len: usize,
    fragment: Option<Fragment>,
}

#[derive(Clone, Copy)]
struct Fragment {
    ident: u32,
    /// In bytes.
    offset: u16,
    more: bool,
}

fn ipv4(out: &mut String, b: &[u8], depth: u8) -> fmt::Result {
    out.write_str("IP ")?;
    let Some(fixed) = b.get(..IPV4_LEN) else {
        return out.write_str("[|ip]");
    };
    let ip = Ipv4Packet::new_unchecked(fixed);
    if ip.version() != 4 {
        return write!(out, "bad version {}", ip.version());
    }
    let (src, dst) = (ip.src(), ip.dst());
    let header_len = ip.header_len();
    let total = usize::from(ip.total_len());
    if header_len < IPV4_LEN || total < header_len {
        return write!(
            out,
            "{src} > {dst}: bad length (header {header_len}, total {total})"
        );
    }
    if b.len() < header_len {
        return write!(out, "{src} > {dst}: [|ip]");
    }
    let fragment = ip.is_fragment().then(|| Fragment {
        ident: u32::from(ip.ident()),
        offset: ip.frag_offset(),
        more: ip.more_frags(),
    });
    transport(
        out,
        L3 {
            src: src.into(),
            dst: dst.into(),
            protocol: ip.protocol(),
            body: &b[header_len..total.min(b.len())],
            len: total - header_len,
            fragment,
        },
        depth,
    )
}

fn ipv6(out: &mut String, b: &[u8], depth: u8) -> fmt::Result {
    out.write_str("IP6 ")?;
    let Some(fixed) = b.get(..IPV6_LEN) else {
        return out.write_str("[|ip6]");
    };
    let ip = Ipv6Packet::new_unchecked(fixed);
    if ip.version() != 6 {
        return write!(out, "bad version {}", ip.version());
    }
    let (src, dst) = (ip.src(), ip.dst());
    let len = usize::from(ip.payload_len());
    let payload = &b[IPV6_LEN..(IPV6_LEN + len).min(b.len())];
    let Some((protocol, at, fragment)) = ext_headers(ip.next_header(), payload) else {
        return write!(out, "{src} > {dst}: [|ip6]");
    };
    transport(
        out,
        L3 {
            src: src.into(),
            dst: dst.into(),
            protocol,
            body: payload.get(at..).unwrap_or_default(),
            len: len.saturating_sub(at),
            fragment,
        },
        depth,
    )
}

/// Steps over IPv6 extension headers: the upper-layer protocol, where it starts in the
/// payload, and the Fragment header if one was crossed. `None` when a header is cut short.
/// The walk stops at a fragment that is not the first (what follows is data) and after
/// [`MAX_EXT_HEADERS`] headers.
fn ext_headers(first: u8, payload: &[u8]) -> Option<(u8, usize, Option<Fragment>)> {
    let mut protocol = first;
    let mut at = 0;
    let mut fragment = None;
    for _ in 0..MAX_EXT_HEADERS {
        let len = match IpProtocol::from(protocol) {
            IpProtocol::HopByHop | IpProtocol::Ipv6Route | IpProtocol::Ipv6Opts => {
                (usize::from(*payload.get(at + 1)?) + 1) * 8
            }
            // RFC 4302: the length is in 4-octet units, minus 2.
            IpProtocol::Ah => (usize::from(*payload.get(at + 1)?) + 2) * 4,
            IpProtocol::Ipv6Frag => {
                let h = Ipv6FragmentHeader::new_unchecked(payload.get(at..at + FRAG_HEADER_LEN)?);
                let f = Fragment {
                    ident: h.ident(),
                    offset: h.frag_offset(),
                    more: h.more_frags(),
                };
                fragment = Some(f);
                protocol = h.next_header();
                at += FRAG_HEADER_LEN;
                if f.offset != 0 {
                    break;
                }
                continue;
            }
            _ => break,
        };
        protocol = *payload.get(at)?;
        at += len;
    }
    Some((protocol, at, fragment))
}

/// The transport layer, or what stands in for it: a later fragment, an encapsulated IP
/// packet, or the protocol's name and length.
fn transport(out: &mut String, l3: L3<'_>, depth: u8) -> fmt::Result {
    let (src, dst) = (l3.src, l3.dst);
    if let Some(f) = l3.fragment.filter(|f| f.offset != 0) {
        return write!(
            out,
            "{src} > {dst}: {} fragment, id {}, offset {}{}, length {}",
            protocol_name(l3.protocol),
            f.ident,
            f.offset,
            if f.more { "+" } else { "" },
            l3.len
        );
    }
    let nested = depth < MAX_DEPTH;
    match l3.protocol {
        IpProtocol::TCP => tcp(out, &l3)?,
        IpProtocol::UDP => udp(out, &l3, depth)?,
        IpProtocol::ICMP => icmp(out, &l3)?,
        IpProtocol::ICMPV6 => icmp6(out, &l3)?,
        IpProtocol::IPIP if nested => {
            write!(out, "{src} > {dst}: ")?;
            ipv4(out, l3.body, depth + 1)?;
        }
        IpProtocol::IPV6 if nested => {
            write!(out, "{src} > {dst}: ")?;
            ipv6(out, l3.body, depth + 1)?;
        }
        p => write!(
            out,
            "{src} > {dst}: {}, length {}",
            protocol_name(p),
            l3.len
        )?,
    }
    match l3.fragment {
        Some(f) => write!(out, " (fragment, id {}, offset 0+)", f.ident),
        None => Ok(()),
    }
}

/// Names of IP protocol numbers, tcpdump's `ip-proto-N` for the rest.
/// Registry: IANA "Assigned Internet Protocol Numbers".
fn protocol_name(p: u8) -> String {
    let name = match IpProtocol::from(p) {
        IpProtocol::Tcp => "TCP",
        IpProtocol::Udp => "UDP",
        IpProtocol::Icmp => "ICMP",
        IpProtocol::Icmpv6 => "ICMP6",
        IpProtocol::IpIp => "IPIP",
        IpProtocol::Ipv6 => "IP6",
        IpProtocol::Gre => "GRE",
        IpProtocol::Esp => "ESP",
        IpProtocol::Ah => "AH",
        IpProtocol::Sctp => "SCTP",
        IpProtocol::Ipv6NoNxt => "no next header",
        _ => return format!("ip-proto-{p}"),
    };
    name.to_string()
}

/// `ADDR.PORT > ADDR.PORT: ` when both ports were captured; `ADDR > ADDR: ` and false
/// otherwise.
fn endpoints(out: &mut String, l3: &L3<'_>) -> Result<bool, fmt::Error> {
    let (src, dst) = (l3.src, l3.dst);
    match (l3.body.get(0..2), l3.body.get(2..4)) {
        (Some(s), Some(d)) => {
            let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
            write!(out, "{src}.{} > {dst}.{}: ", port(s), port(d))?;
            Ok(true)
        }
        _ => {
            write!(out, "{src} > {dst}: ")?;
            Ok(false)
        }
    }
}

/// tcpdump's flag letters, in its order; ACK is `.`.
fn tcp_flags(f: u8) -> String {
    const LETTERS: [(u8, char); 8] = [
        (flags::FIN, 'F'),
        (flags::SYN, 'S'),
        (flags::RST, 'R'),
        (flags::PSH, 'P'),
        (flags::ACK, '.'),
        (flags::URG, 'U'),
        (flags::ECE, 'E'),
        (flags::CWR, 'W'),
    ];
    let s: String = LETTERS
        .iter()
        .filter(|(bit, _)| f & bit != 0)
        .map(|(_, c)| *c)
        .collect();
    if s.is_empty() { "none".to_string() } else { s }
}

fn tcp(out: &mut String, l3: &L3<'_>) -> fmt::Result {
    if !endpoints(out, l3)? {
        return out.write_str("[|tcp]");
    }
    let Some(fixed) = l3.body.get(..TCP_LEN) else {
        return out.write_str("[|tcp]");
    };
    let t = TcpPacket::new_unchecked(fixed);
    let header_len = t.header_len();
    if header_len < TCP_LEN {
        return write!(out, "bad header length {header_len}");
    }
    let seq = t.seq_number();
    let data = l3.len.saturating_sub(header_len);
    write!(out, "Flags [{}], seq {seq}", tcp_flags(t.flags()))?;
    if data > 0 {
        write!(out, ":{}", seq.wrapping_add(data as u32))?;
    }
    if t.ack() {
        write!(out, ", ack {}", t.ack_number())?;
    }
    write!(out, ", win {}, length {data}", t.window_len())?;
    if l3.body.len() < header_len {
        out.write_str(" [|tcp]")?;
    }
    Ok(())
}

fn udp(out: &mut String, l3: &L3<'_>, depth: u8) -> fmt::Result {
    if !endpoints(out, l3)? {
        return out.write_str("[|udp]");
    }
    let Some(fixed) = l3.body.get(..UDP_LEN) else {
        return out.write_str("[|udp]");
    };
    let u = UdpPacket::new_unchecked(fixed);
    let len = usize::from(u.len());
    if len < UDP_LEN {
        return write!(out, "UDP, bad length {len}");
    }
    if u.dst_port() == VXLAN_PORT && depth < MAX_DEPTH {
        return vxlan(out, &l3.body[UDP_LEN..], depth + 1);
    }
    write!(out, "UDP, length {}", len - UDP_LEN)
}

fn vxlan(out: &mut String, b: &[u8], depth: u8) -> fmt::Result {
    let Some(header) = b.get(..VXLAN_LEN) else {
        return out.write_str("VXLAN [|vxlan]");
    };
    write!(
        out,
        "VXLAN vni {}: ",
        VxlanHeader::new_unchecked(header).vni()
    )?;
    ethernet(out, &b[VXLAN_LEN..], depth)
}

fn icmp(out: &mut String, l3: &L3<'_>) -> fmt::Result {
    write!(out, "{} > {}: ICMP ", l3.src, l3.dst)?;
    let Some(&[kind, code]) = l3.body.get(..2) else {
        return out.write_str("[|icmp]");
    };
    // The second word (echo id and sequence, next-hop MTU), when it was captured.
    let word = l3
        .body
        .get(..icmpv4::HEADER_LEN)
        .map(Icmpv4Packet::new_unchecked);
    let echo = |out: &mut String, what: &str| match &word {
        Some(p) => write!(
            out,
            "{what}, id {}, seq {}",
            p.echo_ident(),
            p.echo_seq_no()
        ),
        None => write!(out, "{what} [|icmp]"),
    };
    match Icmpv4Type::from(kind) {
        Icmpv4Type::EchoRequest => echo(out, "echo request")?,
        Icmpv4Type::EchoReply => echo(out, "echo reply")?,
        Icmpv4Type::DestUnreachable => {
            use icmpv4::unreach;
            let why = match code {
                unreach::NET => "net",
                unreach::HOST => "host",
                unreach::PROTOCOL => "protocol",
                unreach::PORT => "port",
                unreach::FRAG_NEEDED => "need to frag",
                unreach::ADMIN_PROHIBITED => "admin prohibited",
                9 => "net prohibited",
                10 => "host prohibited",
                _ => "",
            };
            match why {
                "" => write!(out, "unreachable, code {code}")?,
                why => write!(out, "unreachable {why}")?,
            }
            if code == unreach::FRAG_NEEDED
                && let Some(p) = &word
            {
                write!(out, " (mtu {})", p.next_hop_mtu())?;
            }
        }
        Icmpv4Type::TimeExceeded => match code {
            icmpv4::time_exceeded::TTL => out.write_str("time exceeded in-transit")?,
            icmpv4::time_exceeded::REASSEMBLY => out.write_str("time exceeded reassembly")?,
            _ => write!(out, "time exceeded, code {code}")?,
        },
        Icmpv4Type::Redirect => out.write_str("redirect")?,
        Icmpv4Type::ParamProblem => out.write_str("parameter problem")?,
        Icmpv4Type::RouterAdvert => out.write_str("router advertisement")?,
        Icmpv4Type::RouterSolicit => out.write_str("router solicitation")?,
        Icmpv4Type::Timestamp => out.write_str("timestamp request")?,
        Icmpv4Type::TimestampReply => out.write_str("timestamp reply")?,
        Icmpv4Type::Unknown(t) => write!(out, "type {t}, code {code}")?,
    }
    write!(out, ", length {}", l3.len)
}

fn icmp6(out: &mut String, l3: &L3<'_>) -> fmt::Result {
    write!(out, "{} > {}: ICMP6, ", l3.src, l3.dst)?;
    let Some(&[kind, code]) = l3.body.get(..2) else {
        return out.write_str("[|icmp6]");
    };
    let word = l3
        .body
        .get(..icmpv6::HEADER_LEN)
        .map(Icmpv6Packet::new_unchecked);
    // The target address of neighbour discovery, after the reserved word.
    let target = l3.body.get(8..24).map(|t| {
        let mut a = [0u8; 16];
        a.copy_from_slice(t);
        Ipv6Addr::from(a)
    });
    let cut = "[|icmp6]";
    match (Icmpv6Type::from(kind), &word, target) {
        (Icmpv6Type::EchoRequest | Icmpv6Type::EchoReply, Some(p), _) => write!(
            out,
            "echo {}, id {}, seq {}",
            if kind == 128 { "request" } else { "reply" },
            p.echo_ident(),
            p.echo_seq_no()
        )?,
        (Icmpv6Type::DestUnreachable, _, _) => {
            use icmpv6::unreach;
            match code {
                unreach::NO_ROUTE => out.write_str("destination unreachable, no route")?,
                unreach::ADMIN_PROHIBITED => {
                    out.write_str("destination unreachable, admin prohibited")?
                }
                2 => out.write_str("destination unreachable, beyond scope")?,
                unreach::ADDRESS => out.write_str("destination unreachable, address")?,
                unreach::PORT => out.write_str("destination unreachable, port")?,
                _ => write!(out, "destination unreachable, code {code}")?,
            }
        }
        (Icmpv6Type::PacketTooBig, Some(p), _) => write!(out, "packet too big, mtu {}", p.mtu())?,
        (Icmpv6Type::TimeExceeded, _, _) => match code {
            0 => out.write_str("time exceeded in-transit")?,
            1 => out.write_str("time exceeded reassembly")?,
            _ => write!(out, "time exceeded, code {code}")?,
        },
        (Icmpv6Type::ParamProblem, _, _) => out.write_str("parameter problem")?,
        (Icmpv6Type::RouterSolicit, _, _) => out.write_str("router solicitation")?,
        (Icmpv6Type::RouterAdvert, _, _) => out.write_str("router advertisement")?,
        (Icmpv6Type::NeighborSolicit, _, Some(t)) => {
            write!(out, "neighbor solicitation, who has {t}")?
        }
        (Icmpv6Type::NeighborAdvert, _, Some(t)) => {
            write!(out, "neighbor advertisement, tgt is {t}")?
        }
        (Icmpv6Type::Redirect, _, _) => out.write_str("redirect")?,
        (Icmpv6Type::Unknown(t), _, _) => write!(out, "type {t}, code {code}")?,
        // A known type whose fields were cut off.
        (_, _, _) => return out.write_str(cut),
    }
    write!(out, ", length {}", l3.len)
}

/// ARP (RFC 826). Ethernet/IPv4 requests and replies in tcpdump's words; any other pair of
/// address types by number.
fn arp(out: &mut String, b: &[u8]) -> fmt::Result {
    out.write_str("ARP, ")?;
    let Some(fixed) = b.get(..8) else {
        return out.write_str("[|arp]");
    };
    let be16 = |at: usize| u16::from_be_bytes([fixed[at], fixed[at + 1]]);
    let (hardware, protocol, op) = (be16(0), be16(2), be16(6));
    if (hardware, protocol, fixed[4], fixed[5]) != (1, 0x0800, 6, 4) {
        return write!(
            out,
            "hardware {hardware}, protocol {protocol:#06x}, op {op}, length {}",
            b.len()
        );
    }
    let Some(body) = b.get(8..28) else {
        return out.write_str("[|arp]");
    };
    let ip = |at: usize| Ipv4Addr::new(body[at], body[at + 1], body[at + 2], body[at + 3]);
    let mac = super::MacAddr([body[0], body[1], body[2], body[3], body[4], body[5]]);
    match op {
        1 => write!(out, "Request who-has {} tell {}", ip(16), ip(6))?,
        2 => write!(out, "Reply {} is-at {mac}", ip(6))?,
        _ => write!(out, "op {op}")?,
    }
    write!(out, ", length {}", b.len())
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
