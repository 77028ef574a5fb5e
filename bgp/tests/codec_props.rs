//! Property tests: decoding arbitrary bytes never panics (whole messages and the stream
//! framer), and every message we can build survives encode -> decode unchanged.

use bgp::codec::{
    AsSegment, AsSegmentKind, Capability, Message, MpReach, MpUnreach, Notification, Open, Origin,
    PathAttr, RouteRefresh, Update, decode, frame_len,
};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn v4_prefix() -> impl Strategy<Value = Ipv4Net> {
    (any::<u32>(), 0u8..=32).prop_map(|(a, l)| {
        Ipv4Net::new(Ipv4Addr::from(a), l)
            .expect("len <= 32")
            .trunc()
    })
}

fn v6_prefix() -> impl Strategy<Value = IpNet> {
    (any::<u128>(), 0u8..=128).prop_map(|(a, l)| {
        IpNet::V6(
            Ipv6Net::new(Ipv6Addr::from(a), l)
                .expect("len <= 128")
                .trunc(),
        )
    })
}

/// A unicast IPv4 next hop the decoder accepts (not 0/8-unspecified, multicast, broadcast).
fn next_hop() -> impl Strategy<Value = Ipv4Addr> {
    (0x0100_0000u32..0xE000_0000).prop_map(Ipv4Addr::from)
}

fn capability() -> impl Strategy<Value = Capability> {
    prop_oneof![
        (1u16..=2, 1u8..=2).prop_map(|(afi, safi)| Capability::Multiprotocol { afi, safi }),
        Just(Capability::RouteRefresh),
        Just(Capability::EnhancedRouteRefresh),
        any::<u32>().prop_map(Capability::FourOctetAs),
        (
            any::<bool>(),
            0u16..4096,
            proptest::collection::vec((any::<u16>(), any::<u8>(), any::<u8>()), 0..4)
        )
            .prop_map(
                |(restarting, restart_time, families)| Capability::GracefulRestart {
                    restarting,
                    restart_time,
                    families,
                }
            ),
        (128u8..=255, proptest::collection::vec(any::<u8>(), 0..8))
            .prop_map(|(code, data)| Capability::Unknown { code, data }),
    ]
}

fn open() -> impl Strategy<Value = Open> {
    (
        any::<u16>(),
        prop_oneof![Just(0u16), 3u16..=u16::MAX],
        1u32..=u32::MAX,
        proptest::collection::vec(capability(), 0..8),
    )
        .prop_map(|(my_as, hold_time, id, capabilities)| Open {
            my_as,
            hold_time,
            bgp_id: Ipv4Addr::from(id),
            capabilities,
        })
}

fn as_path() -> impl Strategy<Value = Vec<AsSegment>> {
    proptest::collection::vec(
        (
            prop_oneof![
                Just(AsSegmentKind::Set),
                Just(AsSegmentKind::Sequence),
                Just(AsSegmentKind::ConfedSequence),
                Just(AsSegmentKind::ConfedSet),
            ],
            proptest::collection::vec(any::<u32>(), 1..6),
        )
            .prop_map(|(kind, asns)| AsSegment { kind, asns }),
        0..4,
    )
}

/// Optional attributes, each at most once, in a fixed order.
fn optional_attrs() -> impl Strategy<Value = Vec<PathAttr>> {
    (
        proptest::option::of(any::<u32>().prop_map(PathAttr::Med)),
        proptest::option::of(any::<u32>().prop_map(PathAttr::LocalPref)),
        proptest::option::of(Just(PathAttr::AtomicAggregate)),
        proptest::option::of(
            proptest::collection::vec(any::<u32>(), 1..10).prop_map(PathAttr::Communities),
        ),
        proptest::option::of(
            proptest::collection::vec(any::<[u32; 3]>(), 1..5).prop_map(PathAttr::LargeCommunities),
        ),
        proptest::option::of(
            (
                prop_oneof![Just(0x80u8), Just(0xc0), Just(0xe0)],
                100u8..=200,
                proptest::collection::vec(any::<u8>(), 0..300),
            )
                .prop_map(|(flags, code, data)| PathAttr::Unknown {
                    flags,
                    code,
                    data,
                }),
        ),
    )
        .prop_map(|(a, b, c, d, e, f)| [a, b, c, d, e, f].into_iter().flatten().collect())
}

fn update() -> impl Strategy<Value = Update> {
    prop_oneof![
        // IPv4 announcement (with the mandatory attributes) and withdrawals.
        (
            proptest::collection::vec(v4_prefix(), 0..20),
            any::<u8>(),
            as_path(),
            next_hop(),
            optional_attrs(),
            proptest::collection::vec(v4_prefix(), 1..20),
        )
            .prop_map(|(withdrawn, o, path, nh, opt, nlri)| {
                let origin = [Origin::Igp, Origin::Egp, Origin::Incomplete][usize::from(o % 3)];
                let mut attrs = vec![
                    PathAttr::Origin(origin),
                    PathAttr::AsPath(path),
                    PathAttr::NextHop(nh),
                ];
                attrs.extend(opt);
                Update {
                    withdrawn,
                    attrs,
                    nlri,
                    withdraw_cause: None,
                }
            }),
        // IPv6 MP_REACH announcement.
        (
            as_path(),
            any::<u128>(),
            proptest::option::of(any::<u128>()),
            proptest::collection::vec(v6_prefix(), 1..20),
            optional_attrs(),
        )
            .prop_map(|(path, nh, ll, nlri, opt)| {
                let mut next_hops = vec![IpAddr::V6(Ipv6Addr::from(nh))];
                next_hops.extend(ll.map(|l| IpAddr::V6(Ipv6Addr::from(l))));
                let mut attrs = vec![
                    PathAttr::Origin(Origin::Igp),
                    PathAttr::AsPath(path),
                    PathAttr::MpReach(MpReach {
                        next_hops,
                        nlri,
                        afi: 2,
                    }),
                ];
                attrs.extend(opt);
                Update {
                    attrs,
                    ..Update::default()
                }
            }),
        // Withdrawals only, both families.
        (
            proptest::collection::vec(v4_prefix(), 0..20),
            proptest::collection::vec(v6_prefix(), 0..20),
        )
            .prop_map(|(withdrawn, v6)| Update {
                withdrawn,
                attrs: vec![PathAttr::MpUnreach(MpUnreach {
                    afi: 2,
                    withdrawn: v6,
                })],
                ..Update::default()
            }),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        Just(Message::Keepalive),
        open().prop_map(Message::Open),
        update().prop_map(Message::Update),
        (
            any::<u8>(),
            any::<u8>(),
            proptest::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(code, subcode, data)| Message::Notification(Notification {
                code,
                subcode,
                data
            })),
        (any::<u16>(), any::<u8>(), any::<u8>()).prop_map(|(afi, subtype, safi)| {
            Message::RouteRefresh(RouteRefresh { afi, subtype, safi })
        }),
    ]
}

/// A valid header around an arbitrary body, so the body decoders see the fuzz too.
fn framed_garbage() -> impl Strategy<Value = Vec<u8>> {
    (1u8..=5, proptest::collection::vec(any::<u8>(), 0..600)).prop_map(|(t, body)| {
        let mut b = vec![0xff; 16];
        b.extend_from_slice(&((19 + body.len()) as u16).to_be_bytes());
        b.push(t);
        b.extend_from_slice(&body);
        b
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
        let _ = frame_len(&bytes);
        let _ = decode(&bytes);
    }

    #[test]
    fn framed_garbage_never_panics(bytes in framed_garbage()) {
        if let Ok(m) = decode(&bytes) {
            // Whatever was accepted cleanly must survive encode -> decode; treat-as-withdraw
            // rewrites an UPDATE, so those only need to encode.
            let again = m.encode();
            let clean = !matches!(&m, Message::Update(u) if u.withdraw_cause.is_some());
            if clean {
                prop_assert_eq!(decode(&again), Ok(m));
            }
        }
    }

    #[test]
    fn encode_decode_round_trip(m in message()) {
        let bytes = m.encode();
        prop_assume!(bytes.len() <= 4096);
        prop_assert_eq!(frame_len(&bytes), Ok(Some(bytes.len())));
        prop_assert_eq!(decode(&bytes), Ok(m));
    }
}
