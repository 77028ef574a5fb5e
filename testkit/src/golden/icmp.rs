//! ICMP rows: echo to a VIP answered by the appliance, errors quoting one of our flows sent
//! on to that flow's backend (rewritten or encapsulated like the flow), and the ICMP the
//! appliance leaves to the kernel or drops.

use lb::{DropReason, Tables};

use super::build::{ACK, Encap, ICMP, ICMPV6, Pkt, SYNACK, TCP, UDP, encap_frame, icmp, tcp, udp};
use super::setup::{flow_hash, mac_of, tunnel_src};
use super::{BACKENDS, Counter, Fixture, Given, OUR_MAC, ROUTER_MAC, UPLINK};
use super::{dr, fullnat, nat, tunnel};

const C4: &str = "198.51.100.7";
const C6: &str = "2001:db8:c::7";
const ROUTER4: &str = "203.0.113.1";
const ROUTER6: &str = "2001:db8:ffff::1";
/// Fragmentation needed, next-hop MTU 1400 (RFC 1191).
const FRAG_NEEDED: (u8, u8, [u8; 4]) = (3, 4, [0, 0, 0x05, 0x78]);

pub(super) const ROWS: &[super::Row] = &[
    echo,
    echo_ttl_3,
    echo6,
    echo_not_a_vip,
    frag_needed_dr,
    packet_too_big_dr6,
    frag_needed_nat,
    port_unreachable_nat_udp,
    time_exceeded_fullnat,
    frag_needed_ipip,
    quoting_unserved_port,
    truncated_quote,
    neighbour_solicitation,
];

/// An echo reply to the client from `vip` (TTL 64).
fn reply(vip: &str, client: &str, proto: u8, ty: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
    let r = Pkt::new(vip, client, proto, icmp(ty, 0, rest, body));
    r.macs(ROUTER_MAC, OUR_MAC).build()
}

/// A router's ICMPv4 error about a packet of ours: `(type, code, rest)` quoting `quote`.
fn error4(to: &str, (ty, code, rest): (u8, u8, [u8; 4]), quote: &[u8]) -> Pkt {
    Pkt::new(ROUTER4, to, ICMP, icmp(ty, code, rest, quote))
}

fn echo(_: &Tables) -> Fixture {
    let rest = [0x12, 0x34, 0, 1];
    let e = Pkt::new(C4, "192.0.2.10", ICMP, icmp(8, 0, rest, b"ping-payload"));
    let out = reply("192.0.2.10", C4, ICMP, 0, rest, b"ping-payload");
    Fixture::tx(
        "icmp echo to a vip: answered by the appliance",
        e.build(),
        UPLINK,
        out,
    )
    .counting(Counter::EchoReplies)
}

fn echo_ttl_3(_: &Tables) -> Fixture {
    let e = Pkt::new(C4, "192.0.2.30", ICMP, icmp(8, 0, [0, 7, 0, 9], b"")).ttl(3);
    let out = reply("192.0.2.30", C4, ICMP, 0, [0, 7, 0, 9], b"");
    Fixture::tx(
        "icmp echo with ttl 3 to a dr vip: reply ttl 64",
        e.build(),
        UPLINK,
        out,
    )
    .counting(Counter::EchoReplies)
}

fn echo6(_: &Tables) -> Fixture {
    let rest = [0xab, 0xcd, 0, 2];
    let e = Pkt::new(C6, "2001:db8::30", ICMPV6, icmp(128, 0, rest, b"ping6"));
    let out = reply("2001:db8::30", C6, ICMPV6, 129, rest, b"ping6");
    Fixture::tx("icmpv6 echo to a vip: answered", e.build(), UPLINK, out)
        .counting(Counter::EchoReplies)
}

fn echo_not_a_vip(_: &Tables) -> Fixture {
    let e = Pkt::new(C4, "192.0.2.99", ICMP, icmp(8, 0, [0, 1, 0, 1], b""));
    Fixture::pass("icmp echo to a non-vip address: kernel", e.build())
}

fn frag_needed_dr(t: &Tables) -> Fixture {
    // The backend answered with src = VIP.
    let quoted = Pkt::new("192.0.2.30", C4, TCP, tcp(80, 40000, SYNACK, 5, b"x")).ip_bytes();
    let e = error4("192.0.2.30", FRAG_NEEDED, &quoted[..28]).ttl(250);
    let out = e.clone().macs(mac_of(t, "dr4"), OUR_MAC);
    Fixture::tx(
        "icmp frag-needed quoting a dr flow: to that flow's backend",
        e.build(),
        BACKENDS,
        out.build(),
    )
    .given(vec![Given::from_client(&dr::dr4_syn())])
    .counting(Counter::IcmpErrorsForwarded)
}

fn packet_too_big_dr6(t: &Tables) -> Fixture {
    let seg = tcp(80, 40000, ACK, 5, &[0u8; 64]);
    let quoted = Pkt::new("2001:db8::30", C6, TCP, seg).ip_bytes();
    let ptb = icmp(2, 0, [0, 0, 0x05, 0x00], &quoted);
    let e = Pkt::new(ROUTER6, "2001:db8::30", ICMPV6, ptb);
    let out = e.clone().macs(mac_of(t, "dr6"), OUR_MAC);
    Fixture::tx(
        "icmpv6 packet-too-big quoting a dr6 flow: to its backend",
        e.build(),
        BACKENDS,
        out.build(),
    )
    .given(vec![Given::from_client(&dr::dr6_syn())])
    .counting(Counter::IcmpErrorsForwarded)
}

fn frag_needed_nat(t: &Tables) -> Fixture {
    // Quoting nat4's flow as the client saw it (VIP:80 -> client:40000).
    let q_in = Pkt::new("192.0.2.10", C4, TCP, tcp(80, 40000, ACK, 5, b"data")).ip_bytes();
    let e = error4("192.0.2.10", FRAG_NEEDED, &q_in[..28]);
    let q_out = Pkt::new("10.0.0.1", C4, TCP, tcp(8080, 40000, ACK, 5, b"data"));
    let q_out = q_out.raw_l4().ip_bytes();
    let out = error4("10.0.0.1", FRAG_NEEDED, &q_out[..28]);
    let out = out.macs(mac_of(t, "nat4"), OUR_MAC).ttl(63);
    Fixture::tx(
        "icmp frag-needed quoting a nat flow: outer dst and quoted src rewritten to the backend",
        e.build(),
        BACKENDS,
        out.build(),
    )
    .given(vec![Given::from_client(&nat::nat4_syn())])
    .counting(Counter::IcmpErrorsForwarded)
}

fn port_unreachable_nat_udp(t: &Tables) -> Fixture {
    // Quoting nat4u's flow: the quoted UDP checksum is patched too.
    let answer = b"\x12\x34answer";
    let q_in = Pkt::new("192.0.2.10", C4, UDP, udp(53, 5555, answer)).ip_bytes();
    let e = error4("192.0.2.10", (3, 3, [0; 4]), &q_in);
    let q_out = Pkt::new("10.0.0.2", C4, UDP, udp(5353, 5555, answer)).ip_bytes();
    let out = error4("10.0.0.2", (3, 3, [0; 4]), &q_out);
    let out = out.macs(mac_of(t, "nat4u"), OUR_MAC).ttl(63);
    Fixture::tx(
        "icmp port-unreachable quoting a nat udp flow: quoted udp checksum patched",
        e.build(),
        BACKENDS,
        out.build(),
    )
    .given(vec![Given::from_client(&nat::nat4u_query())])
    .counting(Counter::IcmpErrorsForwarded)
}

fn time_exceeded_fullnat(t: &Tables) -> Fixture {
    let lport = fullnat::fnat4_local_port();
    let q_in = Pkt::new("192.0.2.20", C4, TCP, tcp(443, 40000, ACK, 5, b"")).ip_bytes();
    let e = error4("192.0.2.20", (11, 0, [0; 4]), &q_in[..28]);
    let q_out = Pkt::new("10.0.0.3", "10.1.0.1", TCP, tcp(8443, lport, ACK, 5, b""));
    let q_out = q_out.raw_l4().ip_bytes();
    let out = Pkt::new(
        "10.1.0.1",
        "10.0.0.3",
        ICMP,
        icmp(11, 0, [0; 4], &q_out[..28]),
    );
    let out = out.macs(mac_of(t, "fnat4"), OUR_MAC).ttl(63);
    Fixture::tx(
        "icmp time-exceeded quoting a fullnat flow: from the snat address to the backend",
        e.build(),
        BACKENDS,
        out.build(),
    )
    .given(vec![fullnat::fnat4_given()])
    .counting(Counter::IcmpErrorsForwarded)
}

fn frag_needed_ipip(t: &Tables) -> Fixture {
    // Quoting a tunnel VIP's flow: encapsulated like the flow.
    let quoted = Pkt::new("192.0.2.40", C4, TCP, tcp(80, 40000, SYNACK, 5, b"")).ip_bytes();
    let e = error4("192.0.2.40", FRAG_NEEDED, &quoted[..28]);
    let (osrc, _) = tunnel_src(false, flow_hash(C4, "192.0.2.40", 40000, 80, TCP));
    let outer = Pkt::new(C4, "10.0.0.5", 4, Vec::new())
        .macs(mac_of(t, "ipip4"), OUR_MAC)
        .ident(0)
        .with(|o| o.src = osrc);
    let out = encap_frame(&e, outer, Encap::default());
    Fixture::tx(
        "icmp frag-needed quoting an ipip flow: encapsulated to its backend",
        e.build(),
        BACKENDS,
        out,
    )
    .given(vec![Given::from_client(&tunnel::ipip4_syn())])
    .counting(Counter::IcmpErrorsForwarded)
}

fn quoting_unserved_port(_: &Tables) -> Fixture {
    let quoted = Pkt::new("192.0.2.10", C4, TCP, tcp(9999, 40000, ACK, 5, b"")).ip_bytes();
    let e = error4("192.0.2.10", (3, 1, [0; 4]), &quoted[..28]);
    Fixture::drop(
        "icmp error quoting a port no vip serves",
        e.build(),
        DropReason::IcmpNoFlow,
    )
}

fn truncated_quote(_: &Tables) -> Fixture {
    let e = error4("192.0.2.10", (3, 1, [0; 4]), &[0x45, 0, 0]);
    Fixture::drop(
        "icmp error with a truncated quote",
        e.build(),
        DropReason::IcmpNoFlow,
    )
}

fn neighbour_solicitation(_: &Tables) -> Fixture {
    let ns = Pkt::new(C6, "2001:db8::30", ICMPV6, icmp(135, 0, [0; 4], &[0u8; 16])).ttl(255);
    Fixture::pass(
        "icmpv6 neighbour solicitation to a vip address: kernel",
        ns.build(),
    )
}
