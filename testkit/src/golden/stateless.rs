//! Rows for the stateless answer: DR VIPs with four backends, where the backend is the VIP's
//! Maglev ring at the flow hash of its hash fields. The engine gives this answer to a first
//! packet (Maglev scheduler) and to a segment of no flow; the XDP program gives the same,
//! byte for byte, while flood mode is on (tests/flood.rs replays these rows through it).

use lb::Tables;
use lb::hash::{FlowKey, addr_to_u128};

use super::build::{ACK, Pkt, SYN, TCP, UDP, tcp, udp};
use super::setup::backend_mac;
use super::{BACKENDS, Fixture, OUR_MAC};

pub(super) const ROWS: &[super::Row] = &[
    syn4_a,
    syn4_b,
    syn4_c,
    syn4_d,
    ack4_no_flow,
    udp4_a,
    udp4_b,
    udp4_c,
    syn6_a,
    syn6_b,
    syn6_c,
    ack6_no_flow,
];

const VIP4: &str = "192.0.2.33";
const VIP6: &str = "2001:db8::33";

/// `p` as DR forwards it to the backend `vip`'s ring holds for the flow's hash.
fn from_ring(t: &Tables, vip: &str, p: &Pkt, sport: u16, dport: u16, proto: u8) -> Vec<u8> {
    let v = t.vips.iter().find(|v| v.name == vip).expect("golden vip");
    let key = FlowKey {
        src: addr_to_u128(p.src),
        dst: addr_to_u128(p.dst),
        sport,
        dport,
        proto,
        v6: p.src.is_ipv6(),
        zone: 0,
    };
    let pos = v
        .ring
        .lookup(key.hash(v.hash))
        .expect("a ring with backends");
    p.clone()
        .macs(backend_mac(v.backends.start + pos), OUR_MAC)
        .build()
}

fn tcp_row(t: &Tables, what: &'static str, vip: &str, src: &str, sport: u16, flags: u8) -> Fixture {
    let dst = if vip == "drm6" { VIP6 } else { VIP4 };
    let p = Pkt::new(src, dst, TCP, tcp(sport, 80, flags, 1, b""));
    let out = from_ring(t, vip, &p, sport, 80, 6);
    Fixture::tx(what, p.build(), BACKENDS, out)
}

fn udp_row(t: &Tables, what: &'static str, src: &str, sport: u16) -> Fixture {
    let p = Pkt::new(src, VIP4, UDP, udp(sport, 53, b"query"));
    let out = from_ring(t, "drm4u", &p, sport, 53, 17);
    Fixture::tx(what, p.build(), BACKENDS, out)
}

fn syn4_a(t: &Tables) -> Fixture {
    tcp_row(
        t,
        "drm4 syn: the ring's backend at the 5-tuple hash (a)",
        "drm4",
        "198.51.100.7",
        40000,
        SYN,
    )
}

fn syn4_b(t: &Tables) -> Fixture {
    tcp_row(
        t,
        "drm4 syn: the ring's backend at the 5-tuple hash (b)",
        "drm4",
        "198.51.100.7",
        40001,
        SYN,
    )
}

fn syn4_c(t: &Tables) -> Fixture {
    tcp_row(
        t,
        "drm4 syn: the ring's backend at the 5-tuple hash (c)",
        "drm4",
        "198.51.100.8",
        1234,
        SYN,
    )
}

fn syn4_d(t: &Tables) -> Fixture {
    tcp_row(
        t,
        "drm4 syn: the ring's backend at the 5-tuple hash (d)",
        "drm4",
        "203.0.113.9",
        65535,
        SYN,
    )
}

fn ack4_no_flow(t: &Tables) -> Fixture {
    tcp_row(
        t,
        "drm4 ack of no flow: the ring's backend, no state",
        "drm4",
        "198.51.100.9",
        5555,
        ACK,
    )
}

fn udp4_a(t: &Tables) -> Fixture {
    udp_row(
        t,
        "drm4u udp: the ring's backend at the 2-tuple hash (a)",
        "198.51.100.7",
        7777,
    )
}

fn udp4_b(t: &Tables) -> Fixture {
    udp_row(
        t,
        "drm4u udp: the ring's backend at the 2-tuple hash (b)",
        "198.51.100.10",
        7777,
    )
}

fn udp4_c(t: &Tables) -> Fixture {
    udp_row(
        t,
        "drm4u udp: the ring's backend at the 2-tuple hash (c)",
        "198.51.100.11",
        1,
    )
}

fn syn6_a(t: &Tables) -> Fixture {
    tcp_row(
        t,
        "drm6 syn: the ring's backend at the 3-tuple hash (a)",
        "drm6",
        "2001:db8:c::7",
        40000,
        SYN,
    )
}

fn syn6_b(t: &Tables) -> Fixture {
    tcp_row(
        t,
        "drm6 syn: the ring's backend at the 3-tuple hash (b)",
        "drm6",
        "2001:db8:c::8",
        40000,
        SYN,
    )
}

fn syn6_c(t: &Tables) -> Fixture {
    tcp_row(
        t,
        "drm6 syn: the ring's backend at the 3-tuple hash (c)",
        "drm6",
        "2001:db8:c::1:9",
        3,
        SYN,
    )
}

fn ack6_no_flow(t: &Tables) -> Fixture {
    tcp_row(
        t,
        "drm6 ack of no flow: the ring's backend, no state",
        "drm6",
        "2001:db8:c::a",
        5555,
        ACK,
    )
}
