//! Whole frames as one value: Ethernet, IP and L4 `Repr`s emitted or parsed together.
//!
//! Golden-packet tables, ICMP replies and lab tools need complete frames whose length,
//! EtherType, protocol and checksum fields agree with each other. Getting those right by hand
//! in every test is where test fixtures go wrong, so [`FrameRepr::emit`] derives them from the
//! layers it is given, and [`FrameRepr::parse`] reads a frame back into the same shape for
//! comparison.

use std::net::IpAddr;

use super::ethernet::{EtherType, EthernetFrame, EthernetRepr};
use super::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use super::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use super::ipv4::{Ipv4Packet, Ipv4Repr};
use super::ipv6::{Ipv6Packet, Ipv6Repr};
use super::tcp::{TcpPacket, TcpRepr};
use super::udp::{UdpPacket, UdpRepr};
use super::{Error, IpProtocol, Result, need_space};

/// An IPv4 or IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRepr {
    /// IPv4 header.
    V4(Ipv4Repr),
    /// IPv6 fixed header.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.src.into(),
            IpRepr::V6(r) => r.src.into(),
        }
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.dst.into(),
            IpRepr::V6(r) => r.dst.into(),
        }
    }

    /// Upper-layer protocol (IPv6: the next header).
    pub fn protocol(&self) -> IpProtocol {
        match self {
            IpRepr::V4(r) => r.protocol,
            IpRepr::V6(r) => r.next_header,
        }
    }

    /// Payload length.
    pub fn payload_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => r.payload_len,
            IpRepr::V6(r) => r.payload_len,
        }
    }

    /// Header length on the wire.
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => r.header_len(),
            IpRepr::V6(r) => r.header_len(),
        }
    }

    /// The EtherType that carries this header.
    pub fn ethertype(&self) -> EtherType {
        match self {
            IpRepr::V4(_) => EtherType::Ipv4,
            IpRepr::V6(_) => EtherType::Ipv6,
        }
    }

    fn with_payload(self, protocol: IpProtocol, len: usize) -> Self {
        match self {
            IpRepr::V4(mut r) => {
                r.protocol = protocol;
                r.payload_len = len;
                IpRepr::V4(r)
            }
            IpRepr::V6(mut r) => {
                r.next_header = protocol;
                r.payload_len = len;
                IpRepr::V6(r)
            }
        }
    }

    /// Writes the header at the start of `buf` and returns its length; IPv4 fills its header
    /// checksum when `fill_checksum` is set.
    pub fn emit(&self, buf: &mut [u8], fill_checksum: bool) -> Result<usize> {
        match self {
            IpRepr::V4(r) => r.emit(buf, fill_checksum),
            IpRepr::V6(r) => r.emit(buf),
        }
    }
}

impl From<Ipv4Repr> for IpRepr {
    fn from(value: Ipv4Repr) -> Self {
        IpRepr::V4(value)
    }
}

impl From<Ipv6Repr> for IpRepr {
    fn from(value: Ipv6Repr) -> Self {
        IpRepr::V6(value)
    }
}

/// The upper layer of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4Repr<'a> {
    /// TCP segment.
    Tcp(TcpRepr<'a>),
    /// UDP datagram.
    Udp(UdpRepr<'a>),
    /// ICMPv4 message (IPv4 only).
    Icmpv4(Icmpv4Repr<'a>),
    /// ICMPv6 message (IPv6 only).
    Icmpv6(Icmpv6Repr<'a>),
    /// Anything else, or an IPv4 fragment, or an IPv6 packet with extension
    /// headers: the IP payload verbatim.
    Raw {
        /// Protocol number for the IP header.
        protocol: IpProtocol,
        /// The IP payload.
        payload: &'a [u8],
    },
}

impl L4Repr<'_> {
    /// The IP protocol number of this layer.
    pub fn protocol(&self) -> IpProtocol {
        match self {
            L4Repr::Tcp(_) => IpProtocol::Tcp,
            L4Repr::Udp(_) => IpProtocol::Udp,
            L4Repr::Icmpv4(_) => IpProtocol::Icmp,
            L4Repr::Icmpv6(_) => IpProtocol::Icmpv6,
            L4Repr::Raw { protocol, .. } => *protocol,
        }
    }

    /// Length on the wire.
    pub fn buffer_len(&self) -> usize {
        match self {
            L4Repr::Tcp(r) => r.buffer_len(),
            L4Repr::Udp(r) => r.buffer_len(),
            L4Repr::Icmpv4(r) => r.buffer_len(),
            L4Repr::Icmpv6(r) => r.buffer_len(),
            L4Repr::Raw { payload, .. } => payload.len(),
        }
    }

    /// Writes the layer at the start of `buf` with pseudo-header addresses `src`/`dst` and
    /// returns its length. ICMPv4 over IPv6 or ICMPv6 over IPv4 is [`Error::Malformed`].
    pub fn emit(
        &self,
        buf: &mut [u8],
        src: IpAddr,
        dst: IpAddr,
        fill_checksum: bool,
    ) -> Result<usize> {
        match (self, src, dst) {
            (L4Repr::Tcp(r), _, _) => r.emit(buf, src, dst, fill_checksum),
            (L4Repr::Udp(r), _, _) => r.emit(buf, src, dst, fill_checksum),
            (L4Repr::Icmpv4(r), IpAddr::V4(_), IpAddr::V4(_)) => r.emit(buf, fill_checksum),
            (L4Repr::Icmpv6(r), IpAddr::V6(s), IpAddr::V6(d)) => r.emit(buf, s, d, fill_checksum),
            (L4Repr::Icmpv4(_) | L4Repr::Icmpv6(_), _, _) => Err(Error::Malformed),
            (L4Repr::Raw { payload, .. }, _, _) => {
                need_space(buf, payload.len())?;
                buf[..payload.len()].copy_from_slice(payload);
                Ok(payload.len())
            }
        }
    }
}

/// A complete Ethernet/IP/L4 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr<'a> {
    /// Link layer. Its `ethertype` is derived from `ip` by [`FrameRepr::emit`].
    pub ethernet: EthernetRepr,
    /// Network layer. Its protocol and payload length are derived from `l4`.
    pub ip: IpRepr,
    /// Upper layer.
    pub l4: L4Repr<'a>,
}

impl<'a> FrameRepr<'a> {
    /// This frame with the derived fields (EtherType, IP protocol, IP payload length) set
    /// from the layers below them: what [`FrameRepr::emit`] writes and
    /// [`FrameRepr::parse`] returns.
    pub fn normalized(&self) -> Self {
        let ip = self
            .ip
            .with_payload(self.l4.protocol(), self.l4.buffer_len());
        let ethernet = EthernetRepr {
            ethertype: ip.ethertype(),
            ..self.ethernet
        };
        FrameRepr {
            ethernet,
            ip,
            l4: self.l4,
        }
    }

    /// Total frame length.
    pub fn buffer_len(&self) -> usize {
        self.ethernet.header_len() + self.ip.header_len() + self.l4.buffer_len()
    }

    /// Writes the whole frame at the start of `buf` and returns its length. Derived fields
    /// come from [`FrameRepr::normalized`]; with `fill_checksums` every checksum (IPv4
    /// header, TCP, UDP, ICMP) is computed, otherwise they are left 0.
    pub fn emit(&self, buf: &mut [u8], fill_checksums: bool) -> Result<usize> {
        let frame = self.normalized();
        need_space(buf, frame.buffer_len())?;
        let mut at = frame.ethernet.emit(buf)?;
        at += frame.ip.emit(&mut buf[at..], fill_checksums)?;
        at += frame.l4.emit(
            &mut buf[at..],
            frame.ip.src(),
            frame.ip.dst(),
            fill_checksums,
        )?;
        Ok(at)
    }

    /// Parses a frame with at most one 802.1Q tag. With `verify_checksums`, every checksum
    /// present must verify ([`Error::BadChecksum`] otherwise). Non-IP frames are
    /// [`Error::Unsupported`]. IPv4 options are skipped; an IPv4 fragment (whose L4 header
    /// or checksum cannot be complete), an IPv6 packet with extension headers and unknown protocols come back as
    /// [`L4Repr::Raw`].
    pub fn parse(buf: &'a [u8], verify_checksums: bool) -> Result<Self> {
        let eth_frame = EthernetFrame::new_checked(buf)?;
        let ethernet = EthernetRepr::parse(&eth_frame)?;
        let l3 = &buf[ethernet.header_len()..];
        let (ip, payload, whole): (IpRepr, &'a [u8], bool) = match ethernet.ethertype {
            EtherType::Ipv4 => {
                let p = Ipv4Packet::new_checked(l3)?;
                let repr = Ipv4Repr::parse(&p, verify_checksums)?;
                let start = p.header_len();
                let end = usize::from(p.total_len());
                (repr.into(), &l3[start..end], !p.is_fragment())
            }
            EtherType::Ipv6 => {
                let p = Ipv6Packet::new_checked(l3)?;
                let repr = Ipv6Repr::parse(&p)?;
                let end = 40 + usize::from(p.payload_len());
                (repr.into(), &l3[40..end], true)
            }
            _ => return Err(Error::Unsupported),
        };
        let verify = verify_checksums.then(|| (ip.src(), ip.dst()));
        let raw = L4Repr::Raw {
            protocol: ip.protocol(),
            payload,
        };
        let l4 = if !whole {
            raw
        } else {
            match (ip.protocol(), ip) {
                (IpProtocol::Tcp, _) => {
                    let p = TcpPacket::new_checked(payload)?;
                    L4Repr::Tcp(TcpRepr::parse(&p, verify)?)
                }
                (IpProtocol::Udp, _) => {
                    let p = UdpPacket::new_checked(payload)?;
                    if usize::from(p.len()) != payload.len() {
                        return Err(Error::Malformed);
                    }
                    L4Repr::Udp(UdpRepr::parse(&p, verify)?)
                }
                (IpProtocol::Icmp, IpRepr::V4(_)) => {
                    let p = Icmpv4Packet::new_checked(payload)?;
                    L4Repr::Icmpv4(Icmpv4Repr::parse(&p, verify_checksums)?)
                }
                (IpProtocol::Icmpv6, IpRepr::V6(r)) => {
                    let p = Icmpv6Packet::new_checked(payload)?;
                    let verify = verify_checksums.then_some((r.src, r.dst));
                    L4Repr::Icmpv6(Icmpv6Repr::parse(&p, verify)?)
                }
                _ => raw,
            }
        };
        Ok(FrameRepr { ethernet, ip, l4 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MacAddr;
    use crate::tcp::flags;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    fn eth(vlan_tci: Option<u16>) -> EthernetRepr {
        EthernetRepr {
            src: MacAddr([2, 0, 0, 0, 0, 1]),
            dst: MacAddr([2, 0, 0, 0, 0, 2]),
            vlan_tci,
            ethertype: EtherType::Unknown(0),
        }
    }

    fn v4() -> IpRepr {
        Ipv4Repr::new(
            Ipv4Addr::new(198, 51, 100, 10),
            Ipv4Addr::new(203, 0, 113, 80),
            IpProtocol::Unknown(0),
            0,
        )
        .into()
    }

    fn v6() -> IpRepr {
        Ipv6Repr::new(
            "2001:db8:1::10".parse().unwrap(),
            "2001:db8:2::80".parse().unwrap(),
            IpProtocol::Unknown(0),
            0,
        )
        .into()
    }

    #[test]
    fn tcp_syn_v4_frame_bytes() {
        let frame = FrameRepr {
            ethernet: eth(None),
            ip: v4(),
            l4: L4Repr::Tcp(TcpRepr {
                src_port: 40000,
                dst_port: 80,
                seq_number: 1,
                ack_number: 0,
                flags: flags::SYN,
                window_len: 65535,
                urgent_at: 0,
                options: &[2, 4, 5, 0xb4],
                payload: &[],
            }),
        };
        let mut buf = [0xa5u8; 128];
        let n = frame.emit(&mut buf, true).unwrap();
        assert_eq!(n, 14 + 20 + 24);
        assert_eq!(n, frame.buffer_len());
        assert!(buf[n..].iter().all(|&b| b == 0xa5));
        // Every derived field is right, checked through the views.
        let f = EthernetFrame::new_checked(&buf[..n]).unwrap();
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        let ip = Ipv4Packet::new_checked(f.payload()).unwrap();
        assert_eq!((ip.total_len(), ip.protocol()), (44, 6));
        assert!(ip.verify_checksum());
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        assert!(tcp.verify_checksum_v4(ip.src(), ip.dst()));
        assert!(tcp.syn());
        assert_eq!(
            FrameRepr::parse(&buf[..n], true).unwrap(),
            frame.normalized()
        );
    }

    #[test]
    fn round_trips_every_kind() {
        let quoted = [0x45u8; 28];
        let l4s = [
            L4Repr::Udp(UdpRepr {
                src_port: 53,
                dst_port: 5353,
                payload: b"dns",
            }),
            L4Repr::Icmpv4(Icmpv4Repr::DestUnreachable {
                code: 4,
                next_hop_mtu: 1400,
                data: &quoted,
            }),
            L4Repr::Icmpv6(Icmpv6Repr::PacketTooBig {
                mtu: 1280,
                data: &quoted,
            }),
            L4Repr::Raw {
                protocol: IpProtocol::Gre,
                payload: &[0, 0, 0x08, 0x00],
            },
        ];
        for (vlan, ip) in [(None, v4()), (Some(0x0064), v6())] {
            for l4 in l4s {
                let frame = FrameRepr {
                    ethernet: eth(vlan),
                    ip,
                    l4,
                };
                let mut buf = [0xa5u8; 200];
                let icmp_mismatch = matches!(
                    (l4, ip),
                    (L4Repr::Icmpv4(_), IpRepr::V6(_)) | (L4Repr::Icmpv6(_), IpRepr::V4(_))
                );
                match frame.emit(&mut buf, true) {
                    Err(Error::Malformed) if icmp_mismatch => continue,
                    Ok(n) => {
                        assert!(!icmp_mismatch);
                        assert_eq!(n, frame.buffer_len());
                        let parsed = FrameRepr::parse(&buf[..n], true).unwrap();
                        assert_eq!(parsed, frame.normalized());
                        assert_eq!(frame.emit(&mut buf[..n - 1], true), Err(Error::NoSpace));
                    }
                    other => panic!("{other:?} for {frame:?}"),
                }
            }
        }
    }

    #[test]
    fn parse_detects_bad_checksums() {
        let frame = FrameRepr {
            ethernet: eth(None),
            ip: v6(),
            l4: L4Repr::Udp(UdpRepr {
                src_port: 1,
                dst_port: 2,
                payload: b"x",
            }),
        };
        let mut buf = [0u8; 80];
        let n = frame.emit(&mut buf, true).unwrap();
        buf[n - 1] ^= 0x40;
        assert_eq!(FrameRepr::parse(&buf[..n], true), Err(Error::BadChecksum));
        assert!(FrameRepr::parse(&buf[..n], false).is_ok());
        let arp = [0u8; 42];
        let mut arp = arp;
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(FrameRepr::parse(&arp, false), Err(Error::Unsupported));
    }

    #[test]
    fn non_first_fragment_is_raw() {
        let mut ip = Ipv4Repr::new(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            IpProtocol::Tcp,
            0,
        );
        ip.frag_offset = 1480;
        ip.dont_frag = false;
        let frame = FrameRepr {
            ethernet: eth(None),
            ip: ip.into(),
            l4: L4Repr::Raw {
                protocol: IpProtocol::Tcp,
                payload: &[1, 2, 3, 4, 5, 6, 7, 8],
            },
        };
        let mut buf = [0u8; 64];
        let n = frame.emit(&mut buf, true).unwrap();
        assert_eq!(
            FrameRepr::parse(&buf[..n], true).unwrap(),
            frame.normalized()
        );
    }

    proptest! {
        #[test]
        fn random_frames_round_trip(v6 in any::<bool>(), tcp in any::<bool>(),
                                    src in any::<u128>(), dst in any::<u128>(),
                                    sport in any::<u16>(), dport in any::<u16>(),
                                    seq in any::<u32>(), tcp_flags in any::<u8>(),
                                    vlan in proptest::option::of(any::<u16>()),
                                    ttl in any::<u8>(), tos in any::<u8>(),
                                    opt_words in 0usize..=10,
                                    payload in proptest::collection::vec(any::<u8>(), 0..300)) {
            let ip: IpRepr = if v6 {
                let mut r = Ipv6Repr::new(src.into(), dst.into(), IpProtocol::Tcp, 0);
                r.hop_limit = ttl;
                r.traffic_class = tos;
                r.flow_label = (src as u32) & 0xfffff;
                r.into()
            } else {
                let mut r = Ipv4Repr::new((src as u32).into(), (dst as u32).into(),
                                          IpProtocol::Tcp, 0);
                r.ttl = ttl;
                r.dscp_ecn = tos;
                r.ident = sport;
                r.into()
            };
            // NOP-filled options: any length that is a multiple of 4 survives a round trip.
            let options = [1u8; 40];
            let l4 = if tcp {
                L4Repr::Tcp(TcpRepr {
                    src_port: sport, dst_port: dport, seq_number: seq,
                    ack_number: seq.rotate_left(7), flags: tcp_flags, window_len: dport,
                    urgent_at: sport, options: &options[..opt_words * 4], payload: &payload,
                })
            } else {
                L4Repr::Udp(UdpRepr { src_port: sport, dst_port: dport, payload: &payload })
            };
            let frame = FrameRepr { ethernet: eth(vlan), ip, l4 };
            let mut buf = vec![0xa5u8; frame.buffer_len() + 8];
            let n = frame.emit(&mut buf, true).unwrap();
            prop_assert_eq!(n, frame.buffer_len());
            prop_assert!(buf[n..].iter().all(|&b| b == 0xa5));
            // Trailing bytes past the IP length (link padding) must not change the parse.
            let parsed = FrameRepr::parse(&buf, true).unwrap();
            prop_assert_eq!(parsed, frame.normalized());
        }

        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200),
                              kind in 0u8..3) {
            let mut data = data;
            if data.len() >= 15 {
                // Steer most inputs into the IP parsers.
                let (et, ver) = [(0x0800u16, 0x45u8), (0x86dd, 0x60), (0x8100, 0x00)]
                    [usize::from(kind)];
                data[12..14].copy_from_slice(&et.to_be_bytes());
                data[14] = ver | (data[14] & 0x0f);
            }
            let _ = FrameRepr::parse(&data, true);
            let _ = FrameRepr::parse(&data, false);
        }
    }
}
