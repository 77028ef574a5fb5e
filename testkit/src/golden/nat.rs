//! NAT rows: DNAT toward the backend, SNAT back on the return path, for TCP and UDP over
//! IPv4 and IPv6, with the header variants NAT must keep (options, tags, padding,
//! extension headers) and TTL 1 both ways.

use lb::{DropReason, Tables};

use super::build::{ACK, ICMP, ICMPV6, PSHACK, Pkt, SYN, SYNACK, TCP, UDP, icmp, tcp, udp};
use super::setup::mac_of;
use super::{BACKENDS, Counter, Fixture, Given, OUR_MAC, ROUTER_MAC, UPLINK};

const C4: &str = "198.51.100.7";
const C6: &str = "2001:db8:c::7";

pub(super) const ROWS: &[super::Row] = &[
    tcp_syn,
    tcp_synack_return,
    tcp_established_data,
    ip_options,
    vlan_tagged,
    ttl_1,
    return_without_flow,
    return_ttl_1,
    ethernet_padding,
    udp_query,
    udp_return,
    udp_zero_checksum,
    tcp6_syn,
    tcp6_return,
    hop_limit_1,
    udp6_query,
    udp6_return,
    hop_by_hop,
    udp6_zero_sum_query,
    udp6_zero_sum_return,
];

/// `p` as NAT forwards it to `vip`'s backend `addr:port`: destination rewritten, TTL - 1.
fn dnat(p: &Pkt, t: &Tables, vip: &str, addr: &str, port: u16) -> Vec<u8> {
    let out = p.clone().dport(port).macs(mac_of(t, vip), OUR_MAC);
    out.dst(addr).ttl(p.ttl - 1).build()
}

/// A backend's reply `p` as NAT returns it to the client: from `vip_addr:port`, TTL - 1.
fn snat(p: &Pkt, vip_addr: &str, port: u16) -> Vec<u8> {
    let out = p.clone().sport(port).macs(ROUTER_MAC, OUR_MAC);
    out.src(vip_addr).ttl(p.ttl - 1).build()
}

/// The nat4 flow the return rows belong to: client 198.51.100.7:40000 -> 192.0.2.10:80.
pub(super) fn nat4_syn() -> Pkt {
    Pkt::new(C4, "192.0.2.10", TCP, tcp(40000, 80, SYN, 1000, b""))
}

fn tcp_syn(t: &Tables) -> Fixture {
    let syn = nat4_syn();
    let out = dnat(&syn, t, "nat4", "10.0.0.1", 8080);
    Fixture::tx(
        "nat4 tcp syn: dnat to backend 10.0.0.1:8080, ttl-1",
        syn.build(),
        BACKENDS,
        out,
    )
}

fn tcp_synack_return(t: &Tables) -> Fixture {
    let synack = Pkt::new("10.0.0.1", C4, TCP, tcp(8080, 40000, SYNACK, 5000, b""))
        .macs(OUR_MAC, mac_of(t, "nat4"));
    let out = snat(&synack, "192.0.2.10", 80);
    Fixture::tx(
        "nat4 tcp syn-ack return: snat back to vip:80",
        synack.build(),
        UPLINK,
        out,
    )
    .arriving_on(BACKENDS)
    .given(vec![Given::from_client(&nat4_syn())])
}

fn tcp_established_data(t: &Tables) -> Fixture {
    let data = tcp(40000, 80, PSHACK, 1001, b"GET / HTTP/1.0\r\n\r\n");
    let ack = Pkt::new(C4, "192.0.2.10", TCP, data);
    let out = dnat(&ack, t, "nat4", "10.0.0.1", 8080);
    Fixture::tx(
        "nat4 tcp established data: dnat",
        ack.build(),
        BACKENDS,
        out,
    )
    .given(vec![Given::from_client(&nat4_syn())])
}

fn ip_options(t: &Tables) -> Fixture {
    let opt = Pkt::new(C4, "192.0.2.10", TCP, tcp(40001, 80, SYN, 7, b""))
        .with(|p| p.options = vec![0x01, 0x01, 0x01, 0x00]);
    let out = dnat(&opt, t, "nat4", "10.0.0.1", 8080);
    Fixture::tx(
        "nat4 with ip options (ihl 6): options kept",
        opt.build(),
        BACKENDS,
        out,
    )
}

fn vlan_tagged(t: &Tables) -> Fixture {
    let tagged = Pkt::new(C4, "192.0.2.10", TCP, tcp(40002, 80, SYN, 9, b"")).vlans(&[100]);
    let out = dnat(&tagged, t, "nat4", "10.0.0.1", 8080);
    Fixture::tx(
        "nat4 vlan 100 tagged: tag kept",
        tagged.build(),
        BACKENDS,
        out,
    )
}

fn ttl_1(_: &Tables) -> Fixture {
    let ttl1 = Pkt::new(C4, "192.0.2.10", TCP, tcp(40003, 80, SYN, 11, b"")).ttl(1);
    let quote = ttl1.ip_bytes();
    let out = Pkt::new("192.0.2.10", C4, ICMP, icmp(11, 0, [0; 4], &quote[..28]))
        .macs(ROUTER_MAC, OUR_MAC)
        .ident(0);
    Fixture::tx(
        "nat4 ttl 1: icmp time exceeded from the vip",
        ttl1.build(),
        UPLINK,
        out.build(),
    )
    .counting(Counter::TimeExceededSent)
}

fn return_without_flow(t: &Tables) -> Fixture {
    let stray = Pkt::new(
        "10.0.0.1",
        "198.51.100.8",
        TCP,
        tcp(8080, 41000, ACK, 1, b""),
    )
    .macs(OUR_MAC, mac_of(t, "nat4"));
    let out = snat(&stray, "192.0.2.10", 80);
    Fixture::tx(
        "nat4 return without a flow: stateless snat",
        stray.build(),
        UPLINK,
        out,
    )
    .arriving_on(BACKENDS)
    .counting(Counter::StatelessReturn)
}

fn return_ttl_1(t: &Tables) -> Fixture {
    let r1 = Pkt::new("10.0.0.1", C4, TCP, tcp(8080, 40000, ACK, 5001, b""))
        .macs(OUR_MAC, mac_of(t, "nat4"))
        .ttl(1);
    Fixture::drop(
        "nat4 return with ttl 1: dropped",
        r1.build(),
        DropReason::TtlExceeded,
    )
}

fn ethernet_padding(t: &Tables) -> Fixture {
    let padded =
        Pkt::new(C4, "192.0.2.10", TCP, tcp(40004, 80, SYN, 13, b"")).with(|p| p.pad_to = 60);
    let out = dnat(&padded, t, "nat4", "10.0.0.1", 8080);
    Fixture::tx(
        "nat4 with ethernet padding: padding kept",
        padded.build(),
        BACKENDS,
        out,
    )
}

/// The nat4u flow: client 198.51.100.7:5555 -> 192.0.2.10:53.
pub(super) fn nat4u_query() -> Pkt {
    Pkt::new(C4, "192.0.2.10", UDP, udp(5555, 53, b"\x12\x34query"))
}

fn udp_query(t: &Tables) -> Fixture {
    let q = nat4u_query();
    let out = dnat(&q, t, "nat4u", "10.0.0.2", 5353);
    Fixture::tx(
        "nat4u udp: dnat with port mapping 53 -> 5353",
        q.build(),
        BACKENDS,
        out,
    )
}

fn udp_return(t: &Tables) -> Fixture {
    let r = Pkt::new("10.0.0.2", C4, UDP, udp(5353, 5555, b"\x12\x34answer"))
        .macs(OUR_MAC, mac_of(t, "nat4u"));
    let out = snat(&r, "192.0.2.10", 53);
    Fixture::tx("nat4u udp return: snat to vip:53", r.build(), UPLINK, out)
        .arriving_on(BACKENDS)
        .given(vec![Given::from_client(&nat4u_query())])
}

fn udp_zero_checksum(t: &Tables) -> Fixture {
    let z = Pkt::new(C4, "192.0.2.10", UDP, udp(5556, 53, b"nocsum")).raw_l4();
    let out = dnat(&z, t, "nat4u", "10.0.0.2", 5353);
    Fixture::tx(
        "nat4u udp with zero checksum: stays zero",
        z.build(),
        BACKENDS,
        out,
    )
}

/// The nat6 flow: client [2001:db8:c::7]:40000 -> [2001:db8::10]:80.
fn nat6_syn() -> Pkt {
    Pkt::new(C6, "2001:db8::10", TCP, tcp(40000, 80, SYN, 1, b""))
}

fn tcp6_syn(t: &Tables) -> Fixture {
    let syn6 = nat6_syn();
    let out = dnat(&syn6, t, "nat6", "2001:db8:a::1", 8080);
    Fixture::tx(
        "nat6 tcp syn: dnat, hop limit-1",
        syn6.build(),
        BACKENDS,
        out,
    )
}

fn tcp6_return(t: &Tables) -> Fixture {
    let sa6 = Pkt::new("2001:db8:a::1", C6, TCP, tcp(8080, 40000, SYNACK, 2, b""))
        .macs(OUR_MAC, mac_of(t, "nat6"));
    let out = snat(&sa6, "2001:db8::10", 80);
    Fixture::tx("nat6 tcp return: snat", sa6.build(), UPLINK, out)
        .arriving_on(BACKENDS)
        .given(vec![Given::from_client(&nat6_syn())])
}

fn hop_limit_1(_: &Tables) -> Fixture {
    let h1 = Pkt::new(C6, "2001:db8::10", TCP, tcp(40001, 80, SYN, 3, b"")).ttl(1);
    let quote = h1.ip_bytes();
    let out =
        Pkt::new("2001:db8::10", C6, ICMPV6, icmp(3, 0, [0; 4], &quote)).macs(ROUTER_MAC, OUR_MAC);
    Fixture::tx(
        "nat6 hop limit 1: icmpv6 time exceeded",
        h1.build(),
        UPLINK,
        out.build(),
    )
    .counting(Counter::TimeExceededSent)
}

/// The nat6u flow: client [2001:db8:c::7]:6000 -> [2001:db8::10]:53.
fn nat6u_query() -> Pkt {
    Pkt::new(C6, "2001:db8::10", UDP, udp(6000, 53, b"q6"))
}

fn udp6_query(t: &Tables) -> Fixture {
    let u6 = nat6u_query();
    let out = dnat(&u6, t, "nat6u", "2001:db8:a::2", 53);
    Fixture::tx("nat6u udp: dnat", u6.build(), BACKENDS, out)
}

fn udp6_return(t: &Tables) -> Fixture {
    let u6r =
        Pkt::new("2001:db8:a::2", C6, UDP, udp(53, 6000, b"a6")).macs(OUR_MAC, mac_of(t, "nat6u"));
    let out = snat(&u6r, "2001:db8::10", 53);
    Fixture::tx("nat6u udp return: snat", u6r.build(), UPLINK, out)
        .arriving_on(BACKENDS)
        .given(vec![Given::from_client(&nat6u_query())])
}

fn hop_by_hop(t: &Tables) -> Fixture {
    let hbh = Pkt::new(C6, "2001:db8::10", TCP, tcp(40002, 80, SYN, 4, b""))
        .with(|p| p.hop_by_hop = Some([1, 4, 0, 0, 0, 0]));
    let out = dnat(&hbh, t, "nat6", "2001:db8:a::1", 8080);
    Fixture::tx(
        "nat6 with hop-by-hop header: walked and kept",
        hbh.build(),
        BACKENDS,
        out,
    )
}

/// A payload of "z6" and two bytes for which `out(payload)`, the frame as rewritten, has a
/// UDP checksum whose sum comes to zero: sent as 0xffff, since a zero UDP checksum over
/// IPv6 means none, which RFC 8200 8.1 has receivers discard (one datagram in 65,536 was
/// lost to it).
fn zero_sum_payload(out: impl Fn(&[u8]) -> Pkt) -> Vec<u8> {
    (0..=u16::MAX)
        .map(|w| {
            let mut p = b"z6".to_vec();
            p.extend_from_slice(&w.to_be_bytes());
            p
        })
        .find(|p| {
            let o = out(p);
            let mut l4 = o.l4.clone();
            l4[6] = 0;
            l4[7] = 0;
            super::build::l4_checksum(o.src, o.dst, UDP, &l4) == 0
        })
        .expect("one in 65,536 payloads sums to zero")
}

fn udp6_zero_sum_query(t: &Tables) -> Fixture {
    let query = |p: &[u8]| Pkt::new(C6, "2001:db8::10", UDP, udp(6001, 53, p));
    let rewritten = |p: &[u8]| {
        query(p)
            .dport(53)
            .macs(mac_of(t, "nat6u"), OUR_MAC)
            .dst("2001:db8:a::2")
            .ttl(63)
    };
    let payload = zero_sum_payload(rewritten);
    let input = query(&payload);
    let out = dnat(&input, t, "nat6u", "2001:db8:a::2", 53);
    assert_eq!(
        &out[out.len() - 6..][..2],
        &[0xff, 0xff],
        "the edge this row shows"
    );
    Fixture::tx(
        "nat6u udp: a rewrite whose checksum sums to zero sends 0xffff",
        input.build(),
        BACKENDS,
        out,
    )
}

fn udp6_zero_sum_return(t: &Tables) -> Fixture {
    let reply = |p: &[u8]| {
        Pkt::new("2001:db8:a::2", C6, UDP, udp(53, 6001, p)).macs(OUR_MAC, mac_of(t, "nat6u"))
    };
    let rewritten = |p: &[u8]| {
        reply(p)
            .sport(53)
            .macs(ROUTER_MAC, OUR_MAC)
            .src("2001:db8::10")
            .ttl(63)
    };
    let payload = zero_sum_payload(rewritten);
    let input = reply(&payload);
    let out = snat(&input, "2001:db8::10", 53);
    Fixture::tx(
        "nat6u udp return: a rewrite whose checksum sums to zero sends 0xffff",
        input.build(),
        UPLINK,
        out,
    )
    .arriving_on(BACKENDS)
    .given(vec![Given::from_client(&Pkt::new(
        C6,
        "2001:db8::10",
        UDP,
        udp(6001, 53, b"q6"),
    ))])
}
