//! Summary lines: one golden row per kind of frame (built with `frame`, so every length and
//! protocol field agrees), every prefix of each (a snap length anywhere), nesting deeper than
//! the summary follows, and random bytes.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;
use crate::tcp::flags::{ACK, FIN, PSH, RST, SYN};
use crate::{
    EthernetRepr, FrameRepr, Icmpv4Repr, Icmpv6Repr, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, MacAddr,
    TcpRepr, UdpRepr, vxlan,
};

const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 80);

fn client6() -> Ipv6Addr {
    "2001:db8:1::10".parse().unwrap()
}

fn vip6() -> Ipv6Addr {
    "2001:db8:2::80".parse().unwrap()
}

fn eth(vlan_tci: Option<u16>) -> EthernetRepr {
    EthernetRepr {
        src: MacAddr([2, 0, 0, 0, 0, 1]),
        dst: MacAddr([2, 0, 0, 0, 0, 2]),
        vlan_tci,
        ethertype: EtherType::Unknown(0),
    }
}

fn v4(src: Ipv4Addr, dst: Ipv4Addr) -> Ipv4Repr {
    Ipv4Repr::new(src, dst, IpProtocol::Unknown(0), 0)
}

fn v6(src: Ipv6Addr, dst: Ipv6Addr) -> IpRepr {
    Ipv6Repr::new(src, dst, IpProtocol::Unknown(0), 0).into()
}

fn emit(vlan: Option<u16>, ip: impl Into<IpRepr>, l4: L4Repr<'_>) -> Vec<u8> {
    let frame = FrameRepr {
        ethernet: eth(vlan),
        ip: ip.into(),
        l4,
    };
    let mut buf = vec![0xa5; frame.buffer_len()];
    let n = frame.emit(&mut buf, true).unwrap();
    assert_eq!(n, buf.len());
    buf
}

fn tcp(src_port: u16, dst_port: u16, seq: u32, ack: u32, flags: u8, win: u16) -> TcpRepr<'static> {
    TcpRepr {
        src_port,
        dst_port,
        seq_number: seq,
        ack_number: ack,
        flags,
        window_len: win,
        urgent_at: 0,
        options: &[],
        payload: &[],
    }
}

/// The client's SYN to the VIP, with an MSS option (a 24-byte TCP header).
fn syn() -> Vec<u8> {
    let mut t = tcp(40000, 80, 1, 0, SYN, 65535);
    t.options = &[2, 4, 5, 0xb4];
    emit(None, v4(CLIENT, VIP), L4Repr::Tcp(t))
}

const SYN_LINE: &str =
    "IP 198.51.100.10.40000 > 203.0.113.80.80: Flags [S], seq 1, win 65535, length 0";

/// The bytes of an L4 header on its own (for IP payloads built by hand).
fn l4_bytes(l4: L4Repr<'_>) -> Vec<u8> {
    let mut buf = vec![0; l4.buffer_len()];
    l4.emit(&mut buf, CLIENT.into(), VIP.into(), false).unwrap();
    buf
}

fn arp(op: u8, pad_to: usize) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend([2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    f.extend([0, 1, 0x08, 0x00, 6, 4, 0, op]);
    f.extend([2, 0, 0, 0, 0, 2, 10, 0, 0, 2]);
    f.extend([0, 0, 0, 0, 0, 0, 10, 0, 0, 1]);
    f.resize(pad_to.max(f.len()), 0);
    f
}

/// An Ethernet header with `ethertype` and 46 bytes after it.
fn raw_ethertype(ethertype: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    f.extend(ethertype.to_be_bytes());
    f.resize(60, 0x11);
    f
}

/// `frame` wrapped in UDP to port 4789 and VXLAN `vni`, between two VTEPs.
fn in_vxlan(vni: u32, frame: &[u8]) -> Vec<u8> {
    let mut payload = vec![0; vxlan::HEADER_LEN];
    vxlan::emit(&mut payload, vni).unwrap();
    payload.extend_from_slice(frame);
    emit(
        None,
        v4(Ipv4Addr::new(10, 1, 0, 1), Ipv4Addr::new(10, 1, 0, 2)),
        L4Repr::Udp(UdpRepr {
            src_port: 49152,
            dst_port: vxlan::DEFAULT_PORT,
            payload: &payload,
        }),
    )
}

/// An IPv6 Fragment header before `next`.
fn frag6(next: u8, offset: u16, more: bool, ident: u32) -> Vec<u8> {
    let mut h = vec![next, 0];
    h.extend((offset | u16::from(more)).to_be_bytes());
    h.extend(ident.to_be_bytes());
    h
}

/// `{ description, frame, line }` for every kind the summary knows.
fn table() -> Vec<(&'static str, Vec<u8>, String)> {
    let quoted = [0x45u8; 28];
    let target = vip6().octets();
    let rows: Vec<(&str, Vec<u8>, &str)> = vec![
        ("SYN", syn(), SYN_LINE),
        (
            "SYN-ACK over IPv6",
            emit(
                None,
                v6(vip6(), client6()),
                L4Repr::Tcp(tcp(80, 40000, 7, 2, SYN | ACK, 28800)),
            ),
            "IP6 2001:db8:2::80.80 > 2001:db8:1::10.40000: Flags [S.], seq 7, ack 2, win 28800, length 0",
        ),
        (
            "ACK",
            emit(
                None,
                v4(CLIENT, VIP),
                L4Repr::Tcp(tcp(40000, 80, 2, 8, ACK, 502)),
            ),
            "IP 198.51.100.10.40000 > 203.0.113.80.80: Flags [.], seq 2, ack 8, win 502, length 0",
        ),
        (
            "PSH-ACK with data",
            emit(
                None,
                v4(CLIENT, VIP),
                L4Repr::Tcp(TcpRepr {
                    payload: b"GET /",
                    ..tcp(40000, 80, 2, 8, PSH | ACK, 502)
                }),
            ),
            "IP 198.51.100.10.40000 > 203.0.113.80.80: Flags [P.], seq 2:7, ack 8, win 502, length 5",
        ),
        (
            "FIN-ACK",
            emit(
                None,
                v4(VIP, CLIENT),
                L4Repr::Tcp(tcp(80, 40000, 8, 7, FIN | ACK, 501)),
            ),
            "IP 203.0.113.80.80 > 198.51.100.10.40000: Flags [F.], seq 8, ack 7, win 501, length 0",
        ),
        (
            "RST",
            emit(
                None,
                v4(VIP, CLIENT),
                L4Repr::Tcp(tcp(80, 40000, 9, 0, RST, 0)),
            ),
            "IP 203.0.113.80.80 > 198.51.100.10.40000: Flags [R], seq 9, win 0, length 0",
        ),
        (
            "no flags",
            emit(None, v4(CLIENT, VIP), L4Repr::Tcp(tcp(1, 2, 3, 0, 0, 4))),
            "IP 198.51.100.10.1 > 203.0.113.80.2: Flags [none], seq 3, win 4, length 0",
        ),
        (
            "UDP",
            emit(
                None,
                v4(CLIENT, VIP),
                L4Repr::Udp(UdpRepr {
                    src_port: 53,
                    dst_port: 5353,
                    payload: b"dns",
                }),
            ),
            "IP 198.51.100.10.53 > 203.0.113.80.5353: UDP, length 3",
        ),
        (
            "VXLAN",
            in_vxlan(100, &syn()),
            "IP 10.1.0.1.49152 > 10.1.0.2.4789: VXLAN vni 100: IP 198.51.100.10.40000 > 203.0.113.80.80: Flags [S], seq 1, win 65535, length 0",
        ),
        (
            "802.1Q",
            emit(
                Some(0xa064),
                v4(CLIENT, VIP),
                L4Repr::Tcp(tcp(40000, 80, 1, 0, SYN, 65535)),
            ),
            "vlan 100: IP 198.51.100.10.40000 > 203.0.113.80.80: Flags [S], seq 1, win 65535, length 0",
        ),
        (
            "ICMP echo request",
            emit(
                None,
                v4(CLIENT, VIP),
                L4Repr::Icmpv4(Icmpv4Repr::EchoRequest {
                    ident: 7,
                    seq_no: 1,
                    data: b"ping",
                }),
            ),
            "IP 198.51.100.10 > 203.0.113.80: ICMP echo request, id 7, seq 1, length 12",
        ),
        (
            "ICMP fragmentation needed",
            emit(
                None,
                v4(VIP, CLIENT),
                L4Repr::Icmpv4(Icmpv4Repr::DestUnreachable {
                    code: 4,
                    next_hop_mtu: 1400,
                    data: &quoted,
                }),
            ),
            "IP 203.0.113.80 > 198.51.100.10: ICMP unreachable need to frag (mtu 1400), length 36",
        ),
        (
            "ICMP port unreachable",
            emit(
                None,
                v4(VIP, CLIENT),
                L4Repr::Icmpv4(Icmpv4Repr::DestUnreachable {
                    code: 3,
                    next_hop_mtu: 0,
                    data: &quoted,
                }),
            ),
            "IP 203.0.113.80 > 198.51.100.10: ICMP unreachable port, length 36",
        ),
        (
            "ICMP time exceeded",
            emit(
                None,
                v4(VIP, CLIENT),
                L4Repr::Icmpv4(Icmpv4Repr::TimeExceeded {
                    code: 0,
                    data: &quoted,
                }),
            ),
            "IP 203.0.113.80 > 198.51.100.10: ICMP time exceeded in-transit, length 36",
        ),
        (
            "ICMP unknown type",
            emit(
                None,
                v4(VIP, CLIENT),
                L4Repr::Icmpv4(Icmpv4Repr::Other {
                    msg_type: 42,
                    code: 1,
                    rest: 0,
                    data: &[],
                }),
            ),
            "IP 203.0.113.80 > 198.51.100.10: ICMP type 42, code 1, length 8",
        ),
        (
            "ICMPv6 echo reply",
            emit(
                None,
                v6(vip6(), client6()),
                L4Repr::Icmpv6(Icmpv6Repr::EchoReply {
                    ident: 7,
                    seq_no: 1,
                    data: &[],
                }),
            ),
            "IP6 2001:db8:2::80 > 2001:db8:1::10: ICMP6, echo reply, id 7, seq 1, length 8",
        ),
        (
            "ICMPv6 packet too big",
            emit(
                None,
                v6(vip6(), client6()),
                L4Repr::Icmpv6(Icmpv6Repr::PacketTooBig {
                    mtu: 1280,
                    data: &quoted,
                }),
            ),
            "IP6 2001:db8:2::80 > 2001:db8:1::10: ICMP6, packet too big, mtu 1280, length 36",
        ),
        (
            "ICMPv6 neighbor solicitation",
            emit(
                None,
                v6(client6(), vip6()),
                L4Repr::Icmpv6(Icmpv6Repr::Other {
                    msg_type: 135,
                    code: 0,
                    rest: 0,
                    data: &target,
                }),
            ),
            "IP6 2001:db8:1::10 > 2001:db8:2::80: ICMP6, neighbor solicitation, who has 2001:db8:2::80, length 24",
        ),
        (
            "ICMPv6 port unreachable",
            emit(
                None,
                v6(vip6(), client6()),
                L4Repr::Icmpv6(Icmpv6Repr::DestUnreachable {
                    code: 4,
                    data: &quoted,
                }),
            ),
            "IP6 2001:db8:2::80 > 2001:db8:1::10: ICMP6, destination unreachable, port, length 36",
        ),
        (
            "ARP request",
            arp(1, 60),
            "ARP, Request who-has 10.0.0.1 tell 10.0.0.2, length 46",
        ),
        (
            "ARP reply",
            arp(2, 0),
            "ARP, Reply 10.0.0.2 is-at 02:00:00:00:00:02, length 28",
        ),
        ("LLDP", raw_ethertype(0x88cc), "LLDP, length 46"),
        (
            "unknown EtherType",
            raw_ethertype(0x1234),
            "ethertype 0x1234, length 46",
        ),
        ("802.3 length", raw_ethertype(46), "802.3, length 46"),
        (
            "GRE",
            emit(
                None,
                v4(CLIENT, VIP),
                L4Repr::Raw {
                    protocol: IpProtocol::Gre,
                    payload: &[0, 0, 8, 0],
                },
            ),
            "IP 198.51.100.10 > 203.0.113.80: GRE, length 4",
        ),
        (
            "unnamed protocol",
            emit(
                None,
                v4(CLIENT, VIP),
                L4Repr::Raw {
                    protocol: IpProtocol::Unknown(253),
                    payload: &[1, 2],
                },
            ),
            "IP 198.51.100.10 > 203.0.113.80: ip-proto-253, length 2",
        ),
    ];
    let mut owned: Vec<(&str, Vec<u8>, String)> = rows
        .into_iter()
        .map(|(d, f, l)| (d, f, l.to_string()))
        .collect();
    owned.extend(encapsulated_and_fragmented());
    owned
}

/// The rows whose frames need building by hand: QinQ, IP in IP, fragments, extension headers.
fn encapsulated_and_fragmented() -> Vec<(&'static str, Vec<u8>, String)> {
    let syn_segment = l4_bytes(L4Repr::Tcp(tcp(40000, 80, 1, 0, SYN, 65535)));
    let syn_body = "Flags [S], seq 1, win 65535, length 0";
    let mut qinq = syn();
    qinq.splice(12..12, [0x88, 0xa8, 0x00, 0xc8, 0x81, 0x00, 0x00, 0x07]);
    let inner = &syn()[14..];
    let mut first = v4(CLIENT, VIP);
    first.more_frags = true;
    first.dont_frag = false;
    first.ident = 0x1234;
    let mut later = first;
    later.more_frags = false;
    later.frag_offset = 1480;
    let mut frag_first = frag6(6, 0, true, 9);
    frag_first.extend(&syn_segment);
    let frag_later = frag6(6, 1232, false, 9);
    let frag_later = [&frag_later[..], &[0u8; 8]].concat();
    // Hop-by-Hop (8 bytes of padding options) then Destination Options, then UDP.
    let mut ext = vec![60, 0, 1, 4, 0, 0, 0, 0, 17, 0, 1, 4, 0, 0, 0, 0];
    ext.extend(l4_bytes(L4Repr::Udp(UdpRepr {
        src_port: 53,
        dst_port: 5353,
        payload: b"dns",
    })));
    let raw6 = |next: IpProtocol, payload: &[u8]| {
        emit(
            None,
            v6(client6(), vip6()),
            L4Repr::Raw {
                protocol: next,
                payload,
            },
        )
    };
    vec![
        (
            "802.1ad QinQ",
            qinq,
            format!("vlan 200: vlan 7: {SYN_LINE}"),
        ),
        (
            "IP in IP",
            emit(
                None,
                v4(Ipv4Addr::new(10, 1, 0, 1), Ipv4Addr::new(10, 1, 0, 2)),
                L4Repr::Raw {
                    protocol: IpProtocol::IpIp,
                    payload: inner,
                },
            ),
            format!("IP 10.1.0.1 > 10.1.0.2: {SYN_LINE}"),
        ),
        (
            "IPv4 first fragment",
            emit(None, first, L4Repr::Tcp(tcp(40000, 80, 1, 0, SYN, 65535))),
            format!(
                "IP 198.51.100.10.40000 > 203.0.113.80.80: {syn_body} (fragment, id 4660, offset 0+)"
            ),
        ),
        (
            "IPv4 later fragment",
            emit(
                None,
                later,
                L4Repr::Raw {
                    protocol: IpProtocol::Tcp,
                    payload: &[7; 8],
                },
            ),
            "IP 198.51.100.10 > 203.0.113.80: TCP fragment, id 4660, offset 1480, length 8".into(),
        ),
        (
            "IPv6 first fragment",
            raw6(IpProtocol::Ipv6Frag, &frag_first),
            format!(
                "IP6 2001:db8:1::10.40000 > 2001:db8:2::80.80: {syn_body} (fragment, id 9, offset 0+)"
            ),
        ),
        (
            "IPv6 later fragment",
            raw6(IpProtocol::Ipv6Frag, &frag_later),
            "IP6 2001:db8:1::10 > 2001:db8:2::80: TCP fragment, id 9, offset 1232, length 8".into(),
        ),
        (
            "IPv6 extension headers",
            raw6(IpProtocol::HopByHop, &ext),
            "IP6 2001:db8:1::10.53 > 2001:db8:2::80.5353: UDP, length 3".into(),
        ),
    ]
}

#[test]
fn golden_lines() {
    for (description, frame, want) in table() {
        assert_eq!(line(&frame), want, "{description}");
    }
}

/// A SYN cut by snap lengths inside each header says which header was cut.
#[test]
fn cut_frames_say_where() {
    let frame = syn();
    let at = |n: usize| line(&frame[..n]);
    assert_eq!(at(0), "[|ether]");
    assert_eq!(at(13), "[|ether]");
    assert_eq!(at(14), "IP [|ip]");
    assert_eq!(at(33), "IP [|ip]");
    assert_eq!(at(34), "IP 198.51.100.10 > 203.0.113.80: [|tcp]");
    assert_eq!(at(38), "IP 198.51.100.10.40000 > 203.0.113.80.80: [|tcp]");
    assert_eq!(at(53), "IP 198.51.100.10.40000 > 203.0.113.80.80: [|tcp]");
    // The fixed header is there, the MSS option is not.
    assert_eq!(at(54), format!("{SYN_LINE} [|tcp]"));
    assert_eq!(at(58), SYN_LINE);
    let v6 = &table()[1].1;
    assert_eq!(line(&v6[..53]), "IP6 [|ip6]");
    let udp = &table()[7].1;
    assert_eq!(
        line(&udp[..40]),
        "IP 198.51.100.10.53 > 203.0.113.80.5353: [|udp]"
    );
    let vxlan = in_vxlan(100, &syn());
    assert_eq!(
        line(&vxlan[..45]),
        "IP 10.1.0.1.49152 > 10.1.0.2.4789: VXLAN [|vxlan]"
    );
    assert_eq!(
        line(&vxlan[..60]),
        "IP 10.1.0.1.49152 > 10.1.0.2.4789: VXLAN vni 100: [|ether]"
    );
    assert_eq!(line(&arp(1, 0)[..30]), "ARP, [|arp]");
    let vlan = &table()[9].1;
    assert_eq!(line(&vlan[..16]), "[|vlan]");
}

/// Every prefix of every golden frame gives a line (a snap length can fall anywhere).
#[test]
fn every_prefix_of_every_frame_gives_a_line() {
    for (description, frame, want) in table() {
        for n in 0..frame.len() {
            let got = line(&frame[..n]);
            assert!(!got.is_empty(), "{description} cut at {n}");
            assert!(got.len() <= want.len() + 16, "{description} at {n}: {got}");
        }
    }
}

/// VXLAN in VXLAN ten deep: followed MAX_DEPTH levels, then the rest is a UDP length.
#[test]
fn nesting_is_followed_only_so_deep() {
    let mut frame = syn();
    for vni in 1..=10 {
        frame = in_vxlan(vni, &frame);
    }
    let got = line(&frame);
    assert_eq!(
        got.matches("VXLAN").count(),
        usize::from(MAX_DEPTH),
        "{got}"
    );
    assert!(
        got.ends_with(&format!("UDP, length {}", frame.len() - 42 - 4 * 50)),
        "{got}"
    );
}

proptest! {
    #[test]
    fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..300), kind in 0usize..6) {
        let mut data = data;
        if data.len() >= 24 {
            // Steer most inputs past the Ethernet header into each decoder.
            let (ethertype, first) = [(0x0800u16, 0x45u8), (0x86dd, 0x60), (0x8100, 0x00),
                                      (0x0806, 0x00), (0x88a8, 0x00), (0x0800, 0x46)][kind];
            data[12..14].copy_from_slice(&ethertype.to_be_bytes());
            data[14] = first | (data[14] & 0x0f);
        }
        let got = line(&data);
        prop_assert!(!got.is_empty());
    }

    #[test]
    fn never_panics_past_a_real_header(tail in proptest::collection::vec(any::<u8>(), 0..200),
                                       which in 0usize..33) {
        // The headers of a golden frame, then random bytes: random ports, lengths, flags,
        // extension headers, ICMP types.
        let rows = table();
        let (_, frame, _) = &rows[which % rows.len()];
        let keep = frame.len().min(34 + (which % 4) * 7);
        let mut data = frame[..keep].to_vec();
        data.extend_from_slice(&tail);
        prop_assert!(!line(&data).is_empty());
    }
}
