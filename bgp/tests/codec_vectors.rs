//! Codec vectors both ways: hand-assembled bytes (from the RFC layouts, not from our
//! encoder) against the expected `Message`, then every malformed case against the
//! NOTIFICATION RFC 4271 §6 / RFC 7606 prescribe. Failures print a hex diff.

use bgp::codec::{
    AsSegment, AsSegmentKind, Capability, DecodeError, Message, MpReach, MpUnreach, Notification,
    Open, Origin, PathAttr, RouteRefresh, Update, UpdateError, decode, frame_len,
};
use ipnet::{IpNet, Ipv4Net};
use std::net::Ipv4Addr;

const MARKER: &str = "ffffffffffffffffffffffffffffffff";

/// Hex to bytes, ignoring whitespace and `|` separators used for readability.
fn h(s: &str) -> Vec<u8> {
    let s: String = s
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '|')
        .collect();
    assert!(s.len().is_multiple_of(2), "odd hex length in vector: {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Line-by-line hex diff (16 octets per line) marking lines that differ.
fn hex_diff(want: &[u8], got: &[u8]) -> String {
    let mut out = String::new();
    let lines = want.len().max(got.len()).div_ceil(16);
    for i in 0..lines {
        let w = want
            .get(i * 16..((i + 1) * 16).min(want.len()))
            .unwrap_or(&[]);
        let g = got
            .get(i * 16..((i + 1) * 16).min(got.len()))
            .unwrap_or(&[]);
        let mark = if w == g { " " } else { "!" };
        out.push_str(&format!(
            "{mark} {:04x} want {:<32} got {}\n",
            i * 16,
            hex(w),
            hex(g)
        ));
    }
    out
}

fn p4(s: &str) -> Ipv4Net {
    s.parse().expect("v4 prefix")
}

fn p(s: &str) -> IpNet {
    s.parse().expect("prefix")
}

fn origin_aspath(asns: &[u32]) -> Vec<PathAttr> {
    vec![
        PathAttr::Origin(Origin::Igp),
        PathAttr::AsPath(if asns.is_empty() {
            vec![]
        } else {
            vec![AsSegment {
                kind: AsSegmentKind::Sequence,
                asns: asns.to_vec(),
            }]
        }),
    ]
}

/// (description, bytes, message). Encoding `message` must give exactly `bytes`, and
/// decoding `bytes` must give exactly `message`.
fn vectors() -> Vec<(&'static str, Vec<u8>, Message)> {
    let mut v = vec![
        (
            "KEEPALIVE",
            h(&format!("{MARKER} 0013 04")),
            Message::Keepalive,
        ),
        (
            "OPEN, 2-octet ASN, MP v4+v6, route refresh, AS4, graceful restart, enhanced RR",
            h(&format!(
                "{MARKER} 003d 01 | 04 fde9 005a 0a000001 20 | 02 1e
                 01 04 0001 00 01 | 01 04 0002 00 01 | 02 00 | 41 04 0000fde9
                 40 06 0078 0001 01 80 | 46 00"
            )),
            Message::Open(Open {
                my_as: 65001,
                hold_time: 90,
                bgp_id: Ipv4Addr::new(10, 0, 0, 1),
                capabilities: vec![
                    Capability::Multiprotocol { afi: 1, safi: 1 },
                    Capability::Multiprotocol { afi: 2, safi: 1 },
                    Capability::RouteRefresh,
                    Capability::FourOctetAs(65001),
                    Capability::GracefulRestart {
                        restarting: false,
                        restart_time: 120,
                        families: vec![(1, 1, 0x80)],
                    },
                    Capability::EnhancedRouteRefresh,
                ],
            }),
        ),
        (
            "OPEN, 4-octet ASN 4200000000 behind AS_TRANS, hold 0, unknown capability kept",
            h(&format!(
                "{MARKER} 0033 01 | 04 5ba0 0000 c0000201 16 | 02 14
                 41 04 fa56ea00 | 40 02 8000 | 83 02 abcd | 01 04 0001 00 01"
            )),
            Message::Open(Open {
                my_as: 23456,
                hold_time: 0,
                bgp_id: Ipv4Addr::new(192, 0, 2, 1),
                capabilities: vec![
                    Capability::FourOctetAs(4_200_000_000),
                    Capability::GracefulRestart {
                        restarting: true,
                        restart_time: 0,
                        families: vec![],
                    },
                    Capability::Unknown {
                        code: 0x83,
                        data: vec![0xab, 0xcd],
                    },
                    Capability::Multiprotocol { afi: 1, safi: 1 },
                ],
            }),
        ),
        (
            "OPEN, graceful restart as Sluice sends it after a restart: R bit, 30 s, \
             IPv4 and IPv6 unicast with the forwarding-state bit",
            h(&format!(
                "{MARKER} 002b 01 | 04 fde9 0003 0a000002 0e | 02 0c
                 40 0a 801e 0001 01 80 0002 01 80"
            )),
            Message::Open(Open {
                my_as: 65001,
                hold_time: 3,
                bgp_id: Ipv4Addr::new(10, 0, 0, 2),
                capabilities: vec![Capability::GracefulRestart {
                    restarting: true,
                    restart_time: 30,
                    families: vec![(1, 1, 0x80), (2, 1, 0x80)],
                }],
            }),
        ),
        (
            "UPDATE eBGP IPv4: ORIGIN, AS_PATH, NEXT_HOP, MED, COMMUNITIES, LARGE_COMMUNITIES",
            h(&format!(
                "{MARKER} 0051 02 | 0000 | 0035
                 40 01 01 00 | 40 02 06 02 01 0000fde9 | 40 03 04 0a000001
                 80 04 04 00000007 | c0 08 08 fde9002a ffff0000
                 c0 20 0c 0000fde9 00000001 00000002 | 20 c000020a"
            )),
            Message::Update(Update {
                attrs: [
                    origin_aspath(&[65001]),
                    vec![
                        PathAttr::NextHop(Ipv4Addr::new(10, 0, 0, 1)),
                        PathAttr::Med(7),
                        PathAttr::Communities(vec![(65001 << 16) | 42, 0xffff_0000]),
                        PathAttr::LargeCommunities(vec![[65001, 1, 2]]),
                    ],
                ]
                .concat(),
                nlri: vec![p4("192.0.2.10/32")],
                ..Update::default()
            }),
        ),
        (
            "UPDATE iBGP: empty AS_PATH, LOCAL_PREF, ATOMIC_AGGREGATE, two NLRI incl. /0-/24",
            h(&format!(
                "{MARKER} 0034 02 | 0000 | 0018
                 40 01 01 00 | 40 02 00 | 40 03 04 0a000001 | 40 05 04 00000064 | 40 06 00
                 18 c63364 | 00"
            )),
            Message::Update(Update {
                attrs: [
                    origin_aspath(&[]),
                    vec![
                        PathAttr::NextHop(Ipv4Addr::new(10, 0, 0, 1)),
                        PathAttr::LocalPref(100),
                        PathAttr::AtomicAggregate,
                    ],
                ]
                .concat(),
                nlri: vec![p4("198.51.100.0/24"), p4("0.0.0.0/0")],
                ..Update::default()
            }),
        ),
        (
            "UPDATE AS_PATH with 4-octet ASNs: AS_SEQUENCE then AS_SET",
            h(&format!(
                "{MARKER} 003a 02 | 0000 | 001e
                 40 01 01 02 | 40 02 10 02 01 fa56ea00 01 02 0000fde9 0000fdea
                 40 03 04 0a000001 | 20 c000020a"
            )),
            Message::Update(Update {
                attrs: vec![
                    PathAttr::Origin(Origin::Incomplete),
                    PathAttr::AsPath(vec![
                        AsSegment {
                            kind: AsSegmentKind::Sequence,
                            asns: vec![4_200_000_000],
                        },
                        AsSegment {
                            kind: AsSegmentKind::Set,
                            asns: vec![65001, 65002],
                        },
                    ]),
                    PathAttr::NextHop(Ipv4Addr::new(10, 0, 0, 1)),
                ],
                nlri: vec![p4("192.0.2.10/32")],
                ..Update::default()
            }),
        ),
        (
            "UPDATE IPv4 withdraw",
            h(&format!("{MARKER} 001c 02 | 0005 20 c000020a | 0000")),
            Message::Update(Update {
                withdrawn: vec![p4("192.0.2.10/32")],
                ..Update::default()
            }),
        ),
        (
            "UPDATE End-of-RIB IPv4",
            h(&format!("{MARKER} 0017 02 | 0000 | 0000")),
            Message::Update(Update::default()),
        ),
        (
            "UPDATE IPv6 MP_REACH_NLRI /128 with a global next hop",
            h(&format!(
                "{MARKER} 0047 02 | 0000 | 0030
                 40 01 01 00 | 40 02 00
                 80 0e 26 0002 01 10 20010db8000000000000000000000001 00
                 80 20010db8000500000000000000000010"
            )),
            Message::Update(Update {
                attrs: [
                    origin_aspath(&[]),
                    vec![PathAttr::MpReach(MpReach {
                        next_hops: vec!["2001:db8::1".parse().expect("ip")],
                        nlri: vec![p("2001:db8:5::10/128")],
                        afi: 2,
                    })],
                ]
                .concat(),
                ..Update::default()
            }),
        ),
        (
            "UPDATE IPv6 MP_REACH_NLRI with global + link-local next hops, /64",
            h(&format!(
                "{MARKER} 0055 02 | 0000 | 003e
                 40 01 01 00 | 40 02 06 02 01 0000fde9
                 80 0e 2e 0002 01 20 20010db8000000000000000000000001
                 fe800000000000000000000000000001 00 40 20010db800070000"
            )),
            Message::Update(Update {
                attrs: [
                    origin_aspath(&[65001]),
                    vec![PathAttr::MpReach(MpReach {
                        next_hops: vec![
                            "2001:db8::1".parse().expect("ip"),
                            "fe80::1".parse().expect("ip"),
                        ],
                        nlri: vec![p("2001:db8:7::/64")],
                        afi: 2,
                    })],
                ]
                .concat(),
                ..Update::default()
            }),
        ),
        (
            "UPDATE IPv6 MP_UNREACH_NLRI",
            h(&format!(
                "{MARKER} 002e 02 | 0000 | 0017
                 80 0f 14 0002 01 80 20010db8000500000000000000000010"
            )),
            Message::Update(Update {
                attrs: vec![PathAttr::MpUnreach(MpUnreach {
                    afi: 2,
                    withdrawn: vec![p("2001:db8:5::10/128")],
                })],
                ..Update::default()
            }),
        ),
        (
            "UPDATE End-of-RIB IPv6 (empty MP_UNREACH_NLRI)",
            h(&format!("{MARKER} 001d 02 | 0000 | 0006 80 0f 03 0002 01")),
            Message::Update(Update {
                attrs: vec![PathAttr::MpUnreach(MpUnreach {
                    afi: 2,
                    withdrawn: vec![],
                })],
                ..Update::default()
            }),
        ),
        (
            "UPDATE unknown optional transitive attribute (partial bit kept)",
            h(&format!("{MARKER} 001d 02 | 0000 | 0006 e0 63 03 010203")),
            Message::Update(Update {
                attrs: vec![PathAttr::Unknown {
                    flags: 0xe0,
                    code: 0x63,
                    data: vec![1, 2, 3],
                }],
                ..Update::default()
            }),
        ),
        (
            "NOTIFICATION Cease/Administrative Shutdown with RFC 9003 message",
            h(&format!("{MARKER} 0019 03 | 06 02 03 627965")),
            Message::Notification(Notification::cease(2, "bye")),
        ),
        (
            "NOTIFICATION Hold Timer Expired",
            h(&format!("{MARKER} 0015 03 | 04 00")),
            Message::Notification(Notification {
                code: 4,
                subcode: 0,
                data: vec![],
            }),
        ),
        (
            "ROUTE-REFRESH IPv4 unicast",
            h(&format!("{MARKER} 0017 05 | 0001 00 01")),
            Message::RouteRefresh(RouteRefresh {
                afi: 1,
                subtype: 0,
                safi: 1,
            }),
        ),
        (
            "ROUTE-REFRESH end of route refresh (RFC 7313) IPv6",
            h(&format!("{MARKER} 0017 05 | 0002 02 01")),
            Message::RouteRefresh(RouteRefresh {
                afi: 2,
                subtype: 2,
                safi: 1,
            }),
        ),
    ];
    // A 300-octet attribute needs the Extended Length flag (0x10) and a 2-octet length.
    let big: Vec<u8> = (0..300u16).map(|i| i as u8).collect();
    let mut bytes = h(&format!("{MARKER} 0147 02 | 0000 | 0130 d0 64 012c"));
    bytes.extend_from_slice(&big);
    v.push((
        "UPDATE extended-length attribute",
        bytes,
        Message::Update(Update {
            attrs: vec![PathAttr::Unknown {
                flags: 0xc0,
                code: 0x64,
                data: big,
            }],
            ..Update::default()
        }),
    ));
    v
}

#[test]
fn vectors_decode_and_encode() {
    let mut failures = Vec::new();
    for (name, bytes, msg) in vectors() {
        assert_eq!(
            frame_len(&bytes),
            Ok(Some(bytes.len())),
            "{name}: framing of a whole message"
        );
        match decode(&bytes) {
            Ok(got) if got == msg => {}
            other => failures.push(format!("{name}: decode\n want {msg:?}\n got  {other:?}")),
        }
        let enc = msg.encode();
        if enc != bytes {
            failures.push(format!("{name}: encode\n{}", hex_diff(&bytes, &enc)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn non_canonical_extended_length_decodes() {
    // Extended Length on a short ORIGIN is legal; we re-encode it canonically.
    let b = h(&format!("{MARKER} 001c 02 | 0000 | 0005 50 01 0001 00"));
    let Ok(Message::Update(u)) = decode(&b) else {
        panic!("decode failed: {:?}", decode(&b));
    };
    assert_eq!(u.attrs, vec![PathAttr::Origin(Origin::Igp)]);
}

#[test]
fn framing_waits_for_whole_message() {
    let b = h(&format!("{MARKER} 0017 02 | 0000 | 0000"));
    assert_eq!(frame_len(&b[..10]), Ok(None));
    assert_eq!(frame_len(&b[..19]), Ok(None));
    assert_eq!(frame_len(&b[..22]), Ok(None));
    assert_eq!(frame_len(&b), Ok(Some(23)));
    let mut two = b.clone();
    two.extend_from_slice(&b);
    assert_eq!(frame_len(&two), Ok(Some(23)));
}

fn notif(code: u8, subcode: u8, data: &[u8]) -> Notification {
    Notification {
        code,
        subcode,
        data: data.to_vec(),
    }
}

/// Malformed messages that reset the session: the NOTIFICATION we must send.
#[test]
fn malformed_messages_map_to_notifications() {
    let cases: Vec<(&str, Vec<u8>, Notification)> = vec![
        (
            "bad marker",
            h("fffffffffffffffffffffffffffffffe 0013 04"),
            notif(1, 1, &[]),
        ),
        (
            "length below header size",
            h(&format!("{MARKER} 0012 04")),
            notif(1, 2, &[0x00, 0x12]),
        ),
        (
            "length above 4096",
            h(&format!("{MARKER} 1001 02")),
            notif(1, 2, &[0x10, 0x01]),
        ),
        (
            "KEEPALIVE with a body",
            h(&format!("{MARKER} 0014 04 00")),
            notif(1, 2, &[0x00, 0x14]),
        ),
        (
            "OPEN shorter than its fixed fields",
            h(&format!("{MARKER} 001c 01 04 fde9 005a 0a000001")),
            notif(1, 2, &[0x00, 0x1c]),
        ),
        (
            "length field larger than the bytes",
            h(&format!("{MARKER} 0018 04")),
            notif(1, 2, &[0x00, 0x18]),
        ),
        (
            "bad message type",
            h(&format!("{MARKER} 0013 09")),
            notif(1, 3, &[9]),
        ),
        (
            "OPEN version 3",
            h(&format!("{MARKER} 001d 01 | 03 fde9 005a 0a000001 00")),
            notif(2, 1, &[0, 4]),
        ),
        (
            "OPEN hold time 2",
            h(&format!("{MARKER} 001d 01 | 04 fde9 0002 0a000001 00")),
            notif(2, 6, &[]),
        ),
        (
            "OPEN BGP identifier 0.0.0.0",
            h(&format!("{MARKER} 001d 01 | 04 fde9 005a 00000000 00")),
            notif(2, 3, &[]),
        ),
        (
            "OPEN unsupported optional parameter (type 1, authentication)",
            h(&format!(
                "{MARKER} 0021 01 | 04 fde9 005a 0a000001 04 | 01 02 abcd"
            )),
            notif(2, 4, &[]),
        ),
        (
            "OPEN capability overruns its parameter",
            h(&format!(
                "{MARKER} 0021 01 | 04 fde9 005a 0a000001 04 | 02 02 41 04"
            )),
            notif(2, 0, &[]),
        ),
        (
            "OPEN optional parameter length disagrees with message length",
            h(&format!(
                "{MARKER} 001f 01 | 04 fde9 005a 0a000001 05 | 02 00"
            )),
            notif(2, 0, &[]),
        ),
        (
            "UPDATE withdrawn length overruns the message",
            h(&format!("{MARKER} 0017 02 | 0005 | 0000")),
            notif(3, 1, &[]),
        ),
        (
            "UPDATE total attribute length overruns the message",
            h(&format!("{MARKER} 001a 02 | 0000 | 0009 40 01 01")),
            notif(3, 1, &[]),
        ),
        (
            "UPDATE attribute length overruns the attribute list",
            h(&format!("{MARKER} 001b 02 | 0000 | 0004 40 01 05 00")),
            notif(3, 1, &[]),
        ),
        (
            "UPDATE MP_REACH_NLRI twice",
            h(&format!(
                "{MARKER} 002f 02 | 0000 | 0018
                 80 0e 09 0001 01 04 0a000001 00 | 80 0e 09 0001 01 04 0a000001 00"
            )),
            notif(3, 1, &[]),
        ),
        (
            "UPDATE unrecognized well-known attribute",
            h(&format!("{MARKER} 001c 02 | 0000 | 0005 40 63 02 abcd")),
            notif(3, 2, &h("40 63 02 abcd")),
        ),
        (
            "UPDATE NLRI prefix length 33",
            h(&format!("{MARKER} 001c 02 | 0000 | 0000 | 21 c000020a")),
            notif(3, 10, &[]),
        ),
        (
            "UPDATE NLRI truncated",
            h(&format!("{MARKER} 001a 02 | 0000 | 0000 | 20 c000")),
            notif(3, 10, &[]),
        ),
        (
            "UPDATE MP_REACH_NLRI IPv6 next hop of 5 octets",
            h(&format!(
                "{MARKER} 0024 02 | 0000 | 000d 80 0e 0a 0002 01 05 0000000000 00"
            )),
            notif(3, 5, &h("80 0e 0a 0002 01 05 0000000000 00")),
        ),
        (
            "ROUTE-REFRESH of 5 octets",
            h(&format!("{MARKER} 0018 05 | 0001 00 01 00")),
            notif(7, 1, &[]),
        ),
    ];
    let mut failures = Vec::new();
    for (name, bytes, want) in cases {
        match decode(&bytes) {
            Err(e) => {
                let got = Notification::from(&e);
                if got != want {
                    failures.push(format!("{name}: {e}\n want {want:?}\n got  {got:?}"));
                }
            }
            Ok(m) => failures.push(format!("{name}: decoded as {m:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// RFC 7606 attribute errors: the session stays, the routes count as withdrawn, and the
/// cause still carries the RFC 4271 code/subcode (for logs and counters).
#[test]
fn attribute_errors_treat_as_withdraw() {
    let nh = "40 03 04 0a000001";
    let org = "40 01 01 00";
    let asp = "40 02 06 02 01 0000fde9";
    let nlri = "20 c000020a";
    let update = |attrs: &str| {
        let a = h(attrs);
        let n = h(nlri);
        let mut b = h(MARKER);
        b.extend_from_slice(&((19 + 4 + a.len() + n.len()) as u16).to_be_bytes());
        b.push(2);
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&(a.len() as u16).to_be_bytes());
        b.extend_from_slice(&a);
        b.extend_from_slice(&n);
        b
    };
    let cases: Vec<(&str, Vec<u8>, Notification)> = vec![
        (
            "missing NEXT_HOP",
            update(&format!("{org} {asp}")),
            notif(3, 3, &[3]),
        ),
        (
            "missing ORIGIN",
            update(&format!("{asp} {nh}")),
            notif(3, 3, &[1]),
        ),
        (
            "ORIGIN flagged optional (attribute flags error)",
            update(&format!("c0 01 01 00 {asp} {nh}")),
            notif(3, 4, &h("c0 01 01 00")),
        ),
        (
            "MED flagged well-known (attribute flags error)",
            update(&format!("{org} {asp} {nh} 40 04 04 00000001")),
            notif(3, 4, &h("40 04 04 00000001")),
        ),
        (
            "ORIGIN value 5",
            update(&format!("40 01 01 05 {asp} {nh}")),
            notif(3, 6, &h("40 01 01 05")),
        ),
        (
            "ORIGIN of 2 octets (attribute length error)",
            update(&format!("40 01 02 0000 {asp} {nh}")),
            notif(3, 5, &h("40 01 02 0000")),
        ),
        (
            "NEXT_HOP 0.0.0.0",
            update(&format!("{org} {asp} 40 03 04 00000000")),
            notif(3, 8, &h("40 03 04 00000000")),
        ),
        (
            "NEXT_HOP multicast",
            update(&format!("{org} {asp} 40 03 04 e0000001")),
            notif(3, 8, &h("40 03 04 e0000001")),
        ),
        (
            "NEXT_HOP of 3 octets",
            update(&format!("{org} {asp} 40 03 03 0a0000")),
            notif(3, 5, &h("40 03 03 0a0000")),
        ),
        (
            "AS_PATH segment type 7",
            update(&format!("{org} 40 02 06 07 01 0000fde9 {nh}")),
            notif(3, 11, &[]),
        ),
        (
            "AS_PATH segment overruns",
            update(&format!("{org} 40 02 06 02 02 0000fde9 {nh}")),
            notif(3, 11, &[]),
        ),
        (
            "AS_PATH zero-length segment",
            update(&format!("{org} 40 02 02 02 00 {nh}")),
            notif(3, 11, &[]),
        ),
        (
            "MED of 3 octets",
            update(&format!("{org} {asp} {nh} 80 04 03 000001")),
            notif(3, 5, &h("80 04 03 000001")),
        ),
        (
            "COMMUNITIES of 5 octets",
            update(&format!("{org} {asp} {nh} c0 08 05 0000000001")),
            notif(3, 5, &h("c0 08 05 0000000001")),
        ),
        (
            "LARGE_COMMUNITIES of 8 octets",
            update(&format!("{org} {asp} {nh} c0 20 08 0000000100000002")),
            notif(3, 5, &h("c0 20 08 0000000100000002")),
        ),
    ];
    let mut failures = Vec::new();
    for (name, bytes, want) in cases {
        match decode(&bytes) {
            Ok(Message::Update(u)) => {
                let Some(cause) = u.withdraw_cause.clone() else {
                    failures.push(format!("{name}: accepted as valid: {u:?}"));
                    continue;
                };
                let got = Notification::from(&DecodeError::Update(cause));
                if got != want {
                    failures.push(format!("{name}\n want {want:?}\n got  {got:?}"));
                }
                if u.nlri.is_empty()
                    && u.withdrawn == vec![p4("192.0.2.10/32")]
                    && u.attrs.is_empty()
                {
                    continue;
                }
                failures.push(format!("{name}: routes not turned into withdrawals: {u:?}"));
            }
            other => failures.push(format!("{name}: expected treat-as-withdraw, got {other:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn treat_as_withdraw_turns_mp_reach_into_mp_unreach() {
    // ORIGIN value 9 next to an MP_REACH for an IPv6 /128: the /128 must come out withdrawn.
    let b = h(&format!(
        "{MARKER} 0047 02 | 0000 | 0030
         40 01 01 00 | 40 02 00
         80 0e 26 0002 01 10 20010db8000000000000000000000001 00
         80 20010db8000500000000000000000010"
    ));
    let mut b2 = b.clone();
    assert_eq!(
        &b2[23..27],
        &[0x40, 1, 1, 0],
        "ORIGIN position in the vector"
    );
    b2[26] = 9;
    let Ok(Message::Update(u)) = decode(&b2) else {
        panic!("{:?}", decode(&b2));
    };
    assert!(
        matches!(u.withdraw_cause, Some(UpdateError::InvalidOrigin(_))),
        "{u:?}"
    );
    assert_eq!(u.withdrawn_all(), vec![p("2001:db8:5::10/128")]);
    assert!(u.announced().is_empty());
}

#[test]
fn duplicate_non_mp_attribute_keeps_the_first() {
    let b = h(&format!(
        "{MARKER} 002e 02 | 0000 | 0012 40 01 01 00 40 01 01 02 40 02 00 40 03 04 0a000001
         20 c000020a"
    ));
    let Ok(Message::Update(u)) = decode(&b) else {
        panic!("{:?}", decode(&b));
    };
    assert_eq!(u.withdraw_cause, None);
    assert_eq!(u.attrs[0], PathAttr::Origin(Origin::Igp));
    assert_eq!(u.attrs.len(), 3);
}

#[test]
fn open_helpers() {
    let o = Open::new(4_200_000_000, 90, Ipv4Addr::new(1, 1, 1, 1), vec![]);
    assert_eq!(o.my_as, 23456);
    assert_eq!(
        o.asn(),
        23456,
        "no AS4 capability: the 2-octet field is the ASN"
    );
    let o = Open::new(
        4_200_000_000,
        90,
        Ipv4Addr::new(1, 1, 1, 1),
        vec![Capability::FourOctetAs(4_200_000_000)],
    );
    assert_eq!(o.asn(), 4_200_000_000);
    let long = "é".repeat(200);
    let n = Notification::cease(2, &long);
    assert!(n.data.len() <= 256);
    assert!(std::str::from_utf8(&n.data[1..]).is_ok());
    assert_eq!(usize::from(n.data[0]), n.data.len() - 1);
}
