//! Rows for traffic that is not the load balancer's: ARP, ND, other addresses, ports and
//! protocols, and the appliance's own health-probe replies, all passed to the kernel
//! untouched.

use lb::Tables;

use super::build::{ICMPV6, Pkt, SYN, SYNACK, TCP, UDP, icmp, tcp, udp};
use super::setup::mac_of;
use super::{Fixture, OUR_MAC, ROUTER_MAC};

const C4: &str = "198.51.100.7";
const C6: &str = "2001:db8:c::7";

pub(super) const ROWS: &[super::Row] = &[
    arp,
    not_a_vip,
    port_no_vip_serves,
    solicited_node,
    gre,
    udp_from_non_backend,
    health_probe_reply,
];

fn arp(_: &Tables) -> Fixture {
    // Who has 192.0.2.10? Tell 203.0.113.1.
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&ROUTER_MAC);
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&ROUTER_MAC);
    arp.extend_from_slice(&[203, 0, 113, 1, 0, 0, 0, 0, 0, 0, 192, 0, 2, 10]);
    Fixture::pass("arp request for a vip: kernel", arp)
}

fn not_a_vip(_: &Tables) -> Fixture {
    let o = Pkt::new(C4, "192.0.2.200", TCP, tcp(40000, 22, SYN, 1, b""));
    Fixture::pass("tcp to a non-vip address: kernel", o.build())
}

fn port_no_vip_serves(_: &Tables) -> Fixture {
    let o = Pkt::new(C4, "192.0.2.10", TCP, tcp(40000, 22, SYN, 1, b""));
    Fixture::pass(
        "tcp to a vip address on a port no vip serves: kernel",
        o.build(),
    )
}

fn solicited_node(_: &Tables) -> Fixture {
    let ns = icmp(135, 0, [0; 4], &[0u8; 16]);
    let ns = Pkt::new(C6, "ff02::1:ff00:30", ICMPV6, ns).ttl(255);
    Fixture::pass(
        "icmpv6 neighbour solicitation to solicited-node multicast: kernel",
        ns.build(),
    )
}

fn gre(_: &Tables) -> Fixture {
    let gre = Pkt::new(C4, "192.0.2.10", 47, vec![0, 0, 0x08, 0]);
    Fixture::pass("gre to a vip address: kernel", gre.build())
}

fn udp_from_non_backend(_: &Tables) -> Fixture {
    let u = Pkt::new("10.0.0.77", C4, UDP, udp(5353, 5555, b"x"));
    Fixture::pass("udp from a non-backend: kernel", u.build())
}

fn health_probe_reply(t: &Tables) -> Fixture {
    let seg = tcp(8080, 50000, SYNACK, 1, b"");
    let probe = Pkt::new("10.0.0.1", "10.0.0.254", TCP, seg).macs(OUR_MAC, mac_of(t, "nat4"));
    Fixture::pass(
        "nat backend's reply to the appliance's own address (health probe): kernel",
        probe.build(),
    )
}
