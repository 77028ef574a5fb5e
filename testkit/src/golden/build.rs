//! The frame builder the fixtures are written with: Ethernet (with 802.1Q tags), IPv4 (with
//! options) or IPv6 (with hop-by-hop and fragment headers), an L4 segment, and the tunnel
//! encapsulations. Its checksums are computed from scratch here, never by the code under
//! test, so a fixture's expected bytes do not inherit a bug from `lb::process`.

use std::net::IpAddr;

use super::{OUR_MAC, ROUTER_MAC};

/// TCP SYN.
pub const SYN: u8 = 0x02;
/// TCP ACK.
pub const ACK: u8 = 0x10;
/// TCP SYN + ACK.
pub const SYNACK: u8 = 0x12;
/// TCP PSH + ACK.
pub const PSHACK: u8 = 0x18;

/// IP protocol numbers the fixtures use (IANA "Assigned Internet Protocol Numbers").
pub const ICMP: u8 = 1;
/// TCP.
pub const TCP: u8 = 6;
/// UDP.
pub const UDP: u8 = 17;
/// ICMPv6.
pub const ICMPV6: u8 = 58;

/// Parses a fixture's address literal.
pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("fixture address")
}

fn csum_sum(data: &[u8], mut acc: u64) -> u64 {
    let mut i = 0;
    while i + 1 < data.len() {
        acc += u64::from(u16::from_be_bytes([data[i], data[i + 1]]));
        i += 2;
    }
    if i < data.len() {
        acc += u64::from(data[i]) << 8;
    }
    acc
}

fn csum_finish(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// RFC 1071 checksum of an L4 segment with its pseudo-header (none for ICMPv4).
pub fn l4_checksum(src: IpAddr, dst: IpAddr, proto: u8, seg: &[u8]) -> u16 {
    let mut acc = 0u64;
    if proto != ICMP {
        acc = csum_sum(&addr_bytes(src), acc);
        acc = csum_sum(&addr_bytes(dst), acc);
        acc += u64::from(proto) + seg.len() as u64;
    }
    csum_finish(csum_sum(seg, acc))
}

/// Plain RFC 1071 checksum.
pub fn checksum(data: &[u8]) -> u16 {
    csum_finish(csum_sum(data, 0))
}

/// The IPv4 header checksum of `hdr` as if its checksum field were zero.
pub fn ipv4_header_checksum(hdr: &[u8]) -> u16 {
    let mut h = hdr.to_vec();
    h[10] = 0;
    h[11] = 0;
    checksum(&h)
}

/// A packet to build: Ethernet (with VLAN tags), IPv4 or IPv6, and an L4 segment.
#[derive(Debug, Clone)]
pub struct Pkt {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// 802.1Q VIDs, outermost first.
    pub vlans: Vec<u16>,
    /// Source address (family selects IPv4/IPv6).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// TTL / hop limit.
    pub ttl: u8,
    /// DSCP/ECN (IPv4 TOS, IPv6 traffic class).
    pub tos: u8,
    /// IPv4 DF.
    pub df: bool,
    /// IPv4 identification.
    pub ident: u16,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// IPv4 options (multiple of 4).
    pub options: Vec<u8>,
    /// IPv6 hop-by-hop options header body (6 bytes after next-header/len), if any.
    pub hop_by_hop: Option<[u8; 6]>,
    /// Fragment: (offset in bytes, more fragments, identification).
    pub frag: Option<(u16, bool, u32)>,
    /// L4 protocol.
    pub proto: u8,
    /// L4 bytes (header and payload).
    pub l4: Vec<u8>,
    /// Offset of the L4 checksum to fill; `None` leaves the bytes as given.
    pub csum_at: Option<usize>,
    /// Pad the frame with zeros to this length (Ethernet minimum 60).
    pub pad_to: usize,
}

/// The sequence number of the SYN-ACK that every ACK [`tcp`] builds acknowledges (their
/// acknowledgement number is `PEER_ISN + 1`): a handshake the engine must accept as
/// complete (NAT and FullNAT check it) answers with a SYN-ACK of this sequence number.
pub const PEER_ISN: u32 = 0x1000_0000;

/// A TCP segment: 20-byte header, window 65535, no options.
pub fn tcp(sport: u16, dport: u16, flags: u8, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    let ack = if flags & ACK != 0 { PEER_ISN + 1 } else { 0 };
    t.extend_from_slice(&ack.to_be_bytes());
    t.push(0x50);
    t.push(flags);
    t.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    t
}

/// A UDP datagram with its length set.
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// An ICMP/ICMPv6 message: type, code, the 4 bytes after the checksum, body.
pub fn icmp(ty: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![ty, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(body);
    m
}

impl Pkt {
    /// A client → `dst` packet from the router with TTL 64.
    pub fn new(src: &str, dst: &str, proto: u8, l4: Vec<u8>) -> Pkt {
        let csum_at = match proto {
            TCP => Some(16),
            UDP => Some(6),
            ICMP | ICMPV6 => Some(2),
            _ => None,
        };
        Pkt {
            dst_mac: OUR_MAC,
            src_mac: ROUTER_MAC,
            vlans: Vec::new(),
            src: ip(src),
            dst: ip(dst),
            ttl: 64,
            tos: 0,
            df: false,
            ident: 0x1234,
            flow_label: 0,
            options: Vec::new(),
            hop_by_hop: None,
            frag: None,
            proto,
            l4,
            csum_at,
            pad_to: 0,
        }
    }

    /// Whether this is an IPv6 packet.
    pub fn v6(&self) -> bool {
        self.src.is_ipv6()
    }

    /// Sets the L4 source port (bytes 0..2).
    pub fn sport(mut self, p: u16) -> Pkt {
        self.l4[0..2].copy_from_slice(&p.to_be_bytes());
        self
    }

    /// Sets the L4 destination port (bytes 2..4).
    pub fn dport(mut self, p: u16) -> Pkt {
        self.l4[2..4].copy_from_slice(&p.to_be_bytes());
        self
    }

    /// Sets both MACs.
    pub fn macs(mut self, dst: [u8; 6], src: [u8; 6]) -> Pkt {
        self.dst_mac = dst;
        self.src_mac = src;
        self
    }

    /// Sets the source address.
    pub fn src(mut self, a: &str) -> Pkt {
        self.src = ip(a);
        self
    }

    /// Sets the destination address.
    pub fn dst(mut self, a: &str) -> Pkt {
        self.dst = ip(a);
        self
    }

    /// Sets the TTL / hop limit.
    pub fn ttl(mut self, ttl: u8) -> Pkt {
        self.ttl = ttl;
        self
    }

    /// Sets the 802.1Q tags, outermost first.
    pub fn vlans(mut self, vids: &[u16]) -> Pkt {
        self.vlans = vids.to_vec();
        self
    }

    /// Sets the IPv4 identification.
    pub fn ident(mut self, ident: u16) -> Pkt {
        self.ident = ident;
        self
    }

    /// Makes this a fragment at `offset` bytes (identification `id` for IPv6).
    pub fn frag(mut self, offset: u16, more: bool, id: u32) -> Pkt {
        self.frag = Some((offset, more, id));
        self
    }

    /// Leaves the L4 bytes exactly as given (no checksum filled in).
    pub fn raw_l4(mut self) -> Pkt {
        self.csum_at = None;
        self
    }

    /// Applies `f` (for the fields without a setter).
    pub fn with(mut self, f: impl FnOnce(&mut Pkt)) -> Pkt {
        f(&mut self);
        self
    }

    /// The L4 bytes with the checksum filled where `csum_at` says (not for fragments).
    fn l4_bytes(&self) -> Vec<u8> {
        let mut l4 = self.l4.clone();
        if let Some(at) = self.csum_at
            && self.frag.is_none()
        {
            l4[at] = 0;
            l4[at + 1] = 0;
            let mut c = l4_checksum(self.src, self.dst, self.proto, &l4);
            if self.proto == UDP && c == 0 {
                c = 0xffff;
            }
            l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        l4
    }

    /// The IPv6 header and extension headers for an upper-layer length `l4_len`.
    fn ipv6_header(&self, l4_len: usize) -> Vec<u8> {
        let mut ext = Vec::new();
        let mut first_nh = self.proto;
        if let Some((off, more, id)) = self.frag {
            let mut f = vec![self.proto, 0];
            f.extend_from_slice(&(off | u16::from(more)).to_be_bytes());
            f.extend_from_slice(&id.to_be_bytes());
            ext = f;
            first_nh = 44;
        }
        if let Some(body) = self.hop_by_hop {
            let mut h = vec![first_nh, 0];
            h.extend_from_slice(&body);
            h.extend_from_slice(&ext);
            ext = h;
            first_nh = 0;
        }
        let mut out = Vec::new();
        let vtcf = (6u32 << 28) | (u32::from(self.tos) << 20) | self.flow_label;
        out.extend_from_slice(&vtcf.to_be_bytes());
        out.extend_from_slice(&((ext.len() + l4_len) as u16).to_be_bytes());
        out.push(first_nh);
        out.push(self.ttl);
        out.extend_from_slice(&addr_bytes(self.src));
        out.extend_from_slice(&addr_bytes(self.dst));
        out.extend_from_slice(&ext);
        out
    }

    /// The IPv4 header (with options and its checksum) for an upper-layer length `l4_len`.
    fn ipv4_header(&self, l4_len: usize) -> Vec<u8> {
        let hl = 20 + self.options.len();
        let mut out = vec![0x40 | (hl / 4) as u8, self.tos];
        out.extend_from_slice(&((hl + l4_len) as u16).to_be_bytes());
        out.extend_from_slice(&self.ident.to_be_bytes());
        let (off, more) = self.frag.map(|(o, m, _)| (o, m)).unwrap_or((0, false));
        let flags = (u16::from(self.df) << 14) | (u16::from(more) << 13) | (off / 8);
        out.extend_from_slice(&flags.to_be_bytes());
        out.push(self.ttl);
        out.push(self.proto);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&addr_bytes(self.src));
        out.extend_from_slice(&addr_bytes(self.dst));
        out.extend_from_slice(&self.options);
        let c = checksum(&out[..hl]);
        out[10..12].copy_from_slice(&c.to_be_bytes());
        out
    }

    /// The IP packet (header, extension headers, L4) with checksums filled.
    pub fn ip_bytes(&self) -> Vec<u8> {
        let l4 = self.l4_bytes();
        let mut out = if self.v6() {
            self.ipv6_header(l4.len())
        } else {
            self.ipv4_header(l4.len())
        };
        out.extend_from_slice(&l4);
        out
    }

    /// The Ethernet header (with tags) for an EtherType.
    pub fn eth(&self, ethertype: u16) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend_from_slice(&self.dst_mac);
        e.extend_from_slice(&self.src_mac);
        for v in &self.vlans {
            e.extend_from_slice(&0x8100u16.to_be_bytes());
            e.extend_from_slice(&v.to_be_bytes());
        }
        e.extend_from_slice(&ethertype.to_be_bytes());
        e
    }

    /// The whole frame.
    pub fn build(&self) -> Vec<u8> {
        let mut f = self.eth(if self.v6() { 0x86dd } else { 0x0800 });
        f.extend_from_slice(&self.ip_bytes());
        if f.len() < self.pad_to {
            f.resize(self.pad_to, 0);
        }
        f
    }
}

/// The outer layers of a tunnel frame: a UDP header (GUE, VXLAN) with its source port, and
/// for VXLAN its header and inner Ethernet (VNI, destination and source MAC).
#[derive(Debug, Clone, Copy, Default)]
pub struct Encap {
    /// UDP (source port, destination port); `None` for IPIP.
    pub udp: Option<(u16, u16)>,
    /// VXLAN (VNI, inner destination MAC, inner source MAC).
    pub vxlan: Option<(u32, [u8; 6], [u8; 6])>,
}

/// The expected tunnel frame: `outer` (its `l4` is replaced) around `inner`'s IP bytes,
/// with `encap`'s UDP and VXLAN headers; the outer frame keeps the inner's VLAN tags.
pub fn encap_frame(inner: &Pkt, mut outer: Pkt, encap: Encap) -> Vec<u8> {
    let mut body = Vec::new();
    if let Some((vni, dmac, smac)) = encap.vxlan {
        body.extend_from_slice(&[0x08, 0, 0, 0]);
        body.extend_from_slice(&(vni << 8).to_be_bytes());
        body.extend_from_slice(&dmac);
        body.extend_from_slice(&smac);
        body.extend_from_slice(&(if inner.v6() { 0x86ddu16 } else { 0x0800 }).to_be_bytes());
    }
    body.extend_from_slice(&inner.ip_bytes());
    match encap.udp {
        Some((s, d)) => {
            outer.proto = UDP;
            outer.l4 = udp(s, d, &body);
            // Zero UDP checksum over IPv4; computed over IPv6.
            outer.csum_at = if outer.v6() { Some(6) } else { None };
        }
        None => {
            outer.proto = if inner.v6() { 41 } else { 4 };
            outer.l4 = body;
            outer.csum_at = None;
        }
    }
    outer.vlans = inner.vlans.clone();
    outer.build()
}
