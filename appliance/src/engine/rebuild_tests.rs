//! Flows rebuilt from cache entries: NAT, FullNAT with a PROXY v2 carry, a proxied flow, DR
//! by its backend's MAC; strays (no VIP, a direction without its other half) left out.

use std::net::IpAddr;

use config::ClientAddress;
use wire::MacAddr;

use super::rebuild::{Owner, from_cache};
use crate::datapath::flowcache::{CacheAction, CacheCarry, CacheEntry, CacheShift};
use crate::lb::FlowKey;
use crate::lb::conntrack::{FlowState, Proxied, Rescale, track::seen};
use crate::lb::egress::NetState;
use crate::lb::hash::addr_to_u128;

fn a(s: &str) -> u128 {
    addr_to_u128(s.parse().expect("address"))
}

fn key(src: &str, sport: u16, dst: &str, dport: u16, proto: u8) -> FlowKey {
    FlowKey {
        src: a(src),
        dst: a(dst),
        sport,
        dport,
        proto,
        v6: src.contains(':'),
        zone: 0,
    }
}

fn entry(action: CacheAction) -> CacheEntry {
    CacheEntry {
        action,
        carry: CacheCarry::None,
        shift: CacheShift::None,
        v6: false,
        dst_mac: [2, 0, 0, 0, 1, 1],
        src_mac: [2, 0, 0, 0, 0, 0xaa],
        ifindex: 2,
        stat: 1,
        last_seen: 7,
        seq_next: None,
        ack_max: None,
    }
}

const TCP: u8 = 6;
const UDP: u8 = 17;

#[test]
fn nat_and_fullnat_flows_come_back_with_backend_port_carry_and_sequence_spaces() {
    let tables = testkit::golden::tables();
    let client = key("198.51.100.7", 40000, "192.0.2.10", 80, TCP);
    let fwd = CacheEntry {
        seq_next: Some(1001),
        ack_max: Some(5001),
        ..entry(CacheAction::Nat {
            src: None,
            dst: Some((a("10.0.0.1"), 8080)),
        })
    };
    let back = CacheEntry {
        seq_next: Some(9001),
        ack_max: Some(1001),
        ..entry(CacheAction::Nat {
            src: Some((a("192.0.2.10"), 80)),
            dst: None,
        })
    };
    let nat_back = key("10.0.0.1", 8080, "198.51.100.7", 40000, TCP);
    // FullNAT with PROXY v2: the client's numbers 28 ahead toward the backend.
    let fclient = key("198.51.100.8", 40001, "192.0.2.20", 443, TCP);
    let ffwd = CacheEntry {
        carry: CacheCarry::Seq {
            base: 77,
            delta: 28,
        },
        ..entry(CacheAction::Nat {
            src: Some((a("10.1.0.1"), 33333)),
            dst: Some((a("10.0.0.3"), 8443)),
        })
    };
    let fback_key = key("10.0.0.3", 8443, "10.1.0.1", 33333, TCP);
    let fback = CacheEntry {
        carry: CacheCarry::Ack {
            base: 77,
            delta: 28,
        },
        ..entry(CacheAction::Nat {
            src: Some((a("192.0.2.20"), 443)),
            dst: Some((a("198.51.100.8"), 40001)),
        })
    };
    let entries = vec![
        (client, fwd),
        (nat_back, back),
        (fclient, ffwd),
        (fback_key, fback),
    ];
    let r = from_cache(&entries, &tables, &NetState::default());
    assert!(r.strays.is_empty(), "{:?}", r.strays);
    assert_eq!(r.flows.len(), 2);
    let (nat, owner) = r.flows.iter().find(|(f, _)| f.key == client).expect("nat");
    assert_eq!(*owner, Owner::Client(client.src, client.sport));
    assert_eq!(nat.backend, (a("10.0.0.1"), 8080));
    assert_eq!(nat.snat, None);
    assert_eq!(nat.state, FlowState::TcpEstablished);
    assert_eq!(
        (
            nat.track.client_next,
            nat.track.client_acked,
            nat.track.backend_next,
            nat.track.backend_acked
        ),
        (1001, 5001, 9001, 1001)
    );
    assert_eq!(
        nat.track.seen,
        seen::CLIENT | seen::CLIENT_ACK | seen::BACKEND | seen::BACKEND_ACK
    );
    let (f, owner) = r
        .flows
        .iter()
        .find(|(f, _)| f.key == fclient)
        .expect("fnat");
    assert_eq!(*owner, Owner::Port(33333));
    assert!(Owner::Port(33333).takes(33333 % 3, 3));
    assert!(!Owner::Port(33333).takes((33333 + 1) % 3, 3));
    assert_eq!(f.snat, Some((a("10.1.0.1"), 33333)));
    assert_eq!(f.backend, (a("10.0.0.3"), 8443));
    assert_eq!(
        (f.carry.kind, f.carry.base, f.carry.delta, f.carry.armed),
        (ClientAddress::ProxyV2, 77, 28, true)
    );
    // No sequence fields in the entries: nothing known, judged as before tracking.
    assert_eq!(f.track.seen, 0);
}

#[test]
fn a_proxied_flow_keeps_its_shift_and_both_rescales() {
    let tables = testkit::golden::tables();
    let client = key("198.51.100.9", 40002, "192.0.2.10", 80, TCP);
    let (fwd_w, rev_w) = (Rescale { from: 7, to: 0 }, Rescale { from: 0, to: 7 });
    let fwd = CacheEntry {
        shift: CacheShift::Ack {
            shift: 123_456,
            window: fwd_w,
        },
        ..entry(CacheAction::Nat {
            src: None,
            dst: Some((a("10.0.0.1"), 8080)),
        })
    };
    let back = CacheEntry {
        shift: CacheShift::Seq {
            shift: 123_456,
            window: rev_w,
        },
        ..entry(CacheAction::Nat {
            src: Some((a("192.0.2.10"), 80)),
            dst: None,
        })
    };
    let entries = vec![
        (client, fwd),
        (key("10.0.0.1", 8080, "198.51.100.9", 40002, TCP), back),
    ];
    let r = from_cache(&entries, &tables, &NetState::default());
    assert_eq!(r.flows.len(), 1);
    assert_eq!(
        r.flows[0].0.carry.proxy,
        Proxied::Open {
            shift: 123_456,
            fwd: fwd_w,
            rev: rev_w
        }
    );
    // Without its backend → client half the shift is not known whole: no proxy state.
    let r = from_cache(&entries[..1], &tables, &NetState::default());
    assert_eq!(r.flows[0].0.carry.proxy, Proxied::No);
}

#[test]
fn dr_flows_find_their_backend_by_mac_and_strays_are_named() {
    let tables = testkit::golden::tables();
    let dr = tables
        .vips
        .iter()
        .position(|v| v.name == "dr4")
        .expect("dr4");
    let slot = tables.vips[dr].backends.start;
    let mac = testkit::golden::setup::backend_mac(slot);
    let mut net = NetState::default();
    let backend: IpAddr = "10.0.0.4".parse().expect("address");
    net.neighbours.insert((2, backend), MacAddr(mac));
    let client = key("198.51.100.10", 40003, "192.0.2.30", 80, TCP);
    let udp = key("198.51.100.10", 40004, "192.0.2.30", 53, UDP);
    let dr_entry = CacheEntry {
        dst_mac: mac,
        ..entry(CacheAction::Dr)
    };
    let other_mac = CacheEntry {
        dst_mac: [2, 0, 0, 0, 9, 9],
        ..entry(CacheAction::Dr)
    };
    let unknown_vip = key("198.51.100.10", 40005, "192.0.2.99", 80, TCP);
    let orphan_back = key("10.0.0.1", 8080, "198.51.100.11", 40006, TCP);
    let entries = vec![
        (client, dr_entry),
        (udp, dr_entry),
        (
            key("198.51.100.10", 40007, "192.0.2.30", 80, TCP),
            other_mac,
        ),
        (unknown_vip, dr_entry),
        (
            orphan_back,
            entry(CacheAction::Nat {
                src: Some((a("192.0.2.10"), 80)),
                dst: None,
            }),
        ),
    ];
    let r = from_cache(&entries, &tables, &net);
    let states: Vec<(FlowKey, FlowState, Owner)> =
        r.flows.iter().map(|(f, o)| (f.key, f.state, *o)).collect();
    assert_eq!(
        states,
        vec![
            (client, FlowState::TcpEstablished, Owner::Any),
            (udp, FlowState::UdpOneWay, Owner::Any),
        ]
    );
    assert_eq!(r.flows[0].0.backend.0, a("10.0.0.4"));
    assert_eq!(r.strays.len(), 3, "{:?}", r.strays);
    assert!(r.strays.contains(&unknown_vip) && r.strays.contains(&orphan_back));
}
