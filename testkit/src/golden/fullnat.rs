//! FullNAT rows: DNAT plus SNAT to the VIP's local address and port toward the backend,
//! and the backend's reply to that local port back to the client.

use lb::{DropReason, Tables};

use super::build::{ACK, Pkt, SYN, SYNACK, TCP, UDP, tcp, udp};
use super::setup::{flow_hash, mac_of, snat_port};
use super::{BACKENDS, Fixture, Given, OUR_MAC, ROUTER_MAC, UPLINK};

const C4: &str = "198.51.100.7";
const C6: &str = "2001:db8:c::7";

pub(super) const ROWS: &[super::Row] = &[
    tcp_syn,
    tcp_return,
    udp_query,
    udp_return,
    tcp6_syn,
    tcp6_return,
    unallocated_port,
];

/// The fnat4 flow: client 198.51.100.7:40000 -> 192.0.2.20:443, and its local port.
fn fnat4_syn() -> (Pkt, u16) {
    let syn = Pkt::new(C4, "192.0.2.20", TCP, tcp(40000, 443, SYN, 1, b""));
    let h = flow_hash(C4, "192.0.2.20", 40000, 443, TCP);
    (syn, snat_port(TCP, "10.0.0.3", 8443, "10.1.0.1", h))
}

/// The local port the fnat4 flow gets (the ICMP rows quote it too).
pub(super) fn fnat4_local_port() -> u16 {
    fnat4_syn().1
}

/// The fnat4 flow's first frame, for the rows that need the flow.
pub(super) fn fnat4_given() -> Given {
    Given::from_client(&fnat4_syn().0)
}

/// `p` as FullNAT forwards it: from `local:lport`, to `backend:port`, TTL - 1.
pub(super) fn to_backend(
    p: &Pkt,
    mac: [u8; 6],
    local: (&str, u16),
    backend: (&str, u16),
) -> Vec<u8> {
    let out = p.clone().sport(local.1).dport(backend.1).macs(mac, OUR_MAC);
    out.src(local.0).dst(backend.0).ttl(p.ttl - 1).build()
}

/// A backend's reply `p` as FullNAT returns it: from `vip`, to `client`, TTL - 1.
fn to_client(p: &Pkt, vip: (&str, u16), client: (&str, u16)) -> Vec<u8> {
    let out = p
        .clone()
        .sport(vip.1)
        .dport(client.1)
        .macs(ROUTER_MAC, OUR_MAC);
    out.src(vip.0).dst(client.0).ttl(p.ttl - 1).build()
}

fn tcp_syn(t: &Tables) -> Fixture {
    let (syn, lport) = fnat4_syn();
    let out = to_backend(
        &syn,
        mac_of(t, "fnat4"),
        ("10.1.0.1", lport),
        ("10.0.0.3", 8443),
    );
    Fixture::tx(
        "fnat4 tcp syn: dnat + snat to 10.1.0.1",
        syn.build(),
        BACKENDS,
        out,
    )
}

fn tcp_return(t: &Tables) -> Fixture {
    let lport = fnat4_local_port();
    let r = Pkt::new(
        "10.0.0.3",
        "10.1.0.1",
        TCP,
        tcp(8443, lport, SYNACK, 9, b""),
    )
    .macs(OUR_MAC, mac_of(t, "fnat4"));
    let out = to_client(&r, ("192.0.2.20", 443), (C4, 40000));
    Fixture::tx(
        "fnat4 tcp return to the local port: back to the client",
        r.build(),
        UPLINK,
        out,
    )
    .arriving_on(BACKENDS)
    .given(vec![fnat4_given()])
}

/// The fnat4u flow: client 198.51.100.7:40000 -> 192.0.2.20:443 over UDP, and its port.
fn fnat4u_query() -> (Pkt, u16) {
    let q = Pkt::new(C4, "192.0.2.20", UDP, udp(40000, 443, b"quic"));
    let h = flow_hash(C4, "192.0.2.20", 40000, 443, UDP);
    (q, snat_port(UDP, "10.0.0.3", 8443, "10.1.0.1", h))
}

fn udp_query(t: &Tables) -> Fixture {
    let (q, uport) = fnat4u_query();
    let out = to_backend(
        &q,
        mac_of(t, "fnat4u"),
        ("10.1.0.1", uport),
        ("10.0.0.3", 8443),
    );
    Fixture::tx("fnat4u udp: dnat + snat", q.build(), BACKENDS, out)
}

fn udp_return(t: &Tables) -> Fixture {
    let (q, uport) = fnat4u_query();
    let r = Pkt::new("10.0.0.3", "10.1.0.1", UDP, udp(8443, uport, b"quic-reply"))
        .macs(OUR_MAC, mac_of(t, "fnat4u"));
    let out = to_client(&r, ("192.0.2.20", 443), (C4, 40000));
    Fixture::tx("fnat4u udp return", r.build(), UPLINK, out)
        .arriving_on(BACKENDS)
        .given(vec![Given::from_client(&q)])
}

/// The fnat6 flow: client [2001:db8:c::7]:40000 -> [2001:db8::20]:443, and its port.
fn fnat6_syn() -> (Pkt, u16) {
    let syn = Pkt::new(C6, "2001:db8::20", TCP, tcp(40000, 443, SYN, 1, b""));
    let h = flow_hash(C6, "2001:db8::20", 40000, 443, TCP);
    (
        syn,
        snat_port(TCP, "2001:db8:a::3", 8443, "2001:db8:f::1", h),
    )
}

fn tcp6_syn(t: &Tables) -> Fixture {
    let (syn, p6) = fnat6_syn();
    let out = to_backend(
        &syn,
        mac_of(t, "fnat6"),
        ("2001:db8:f::1", p6),
        ("2001:db8:a::3", 8443),
    );
    Fixture::tx("fnat6 tcp syn: dnat + snat", syn.build(), BACKENDS, out)
}

fn tcp6_return(t: &Tables) -> Fixture {
    let (syn, p6) = fnat6_syn();
    let seg = tcp(8443, p6, SYNACK, 1, b"");
    let r = Pkt::new("2001:db8:a::3", "2001:db8:f::1", TCP, seg).macs(OUR_MAC, mac_of(t, "fnat6"));
    let out = to_client(&r, ("2001:db8::20", 443), (C6, 40000));
    Fixture::tx("fnat6 tcp return", r.build(), UPLINK, out)
        .arriving_on(BACKENDS)
        .given(vec![Given::from_client(&syn)])
}

fn unallocated_port(_: &Tables) -> Fixture {
    let other = fnat4_local_port().wrapping_add(2);
    let r = Pkt::new("10.0.0.3", "10.1.0.1", TCP, tcp(8443, other, ACK, 9, b""));
    Fixture::drop(
        "fnat4 return to an unallocated local port",
        r.build(),
        DropReason::NoFlow,
    )
    .given(vec![fnat4_given()])
}
