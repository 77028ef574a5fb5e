//! Outbound rows (issue 23): an answer from the outside to a port of a VIP's `outbound`
//! range goes to the backend that owns the port, from the table alone (no flow, no given
//! frame): DR with its MACs only, tunnel encapsulated. A port outside the range, or another
//! protocol, is not the appliance's. The XDP program forwards the DR rows itself, byte for
//! byte (tests/outbound.rs replays them through it).

use lb::Tables;
use lb::hash::addr_to_u128;

use super::build::{ACK, Encap, Pkt, SYN, TCP, UDP, encap_frame, ip, tcp, udp};
use super::setup::{backend_mac, flow_hash, tunnel_src};
use super::{BACKENDS, Fixture, OUR_MAC};

pub(super) const ROWS: &[super::Row] = &[
    syn_ack4_first_share,
    data4_last_port_of_a_share,
    data4_first_port_of_the_next,
    syn_ack4_last_port,
    past_the_range,
    udp_to_a_tcp_range,
    syn_ack6_first_share,
    data6_last_port,
    tunnel4,
];

/// The server outside the backends connect to.
const SERVER4: &str = "203.0.113.9";
const SERVER6: &str = "2001:db8:e::9";
const VIP4: &str = "192.0.2.34";
const VIP6: &str = "2001:db8::34";

/// The MAC of backend `addr` of VIP `vip`.
fn owner_mac(t: &Tables, vip: &str, addr: &str) -> [u8; 6] {
    let slot = t.vips.iter().position(|v| v.name == vip).expect("vip") as u32;
    let port = t.vips[slot as usize].port;
    let b = t
        .backend_slot(slot, addr_to_u128(ip(addr)), port)
        .expect("golden backend");
    backend_mac(b)
}

/// An answer from `server`:443 to `vip`:`port`, forwarded to `owner` with new MACs only.
fn dr_row(t: &Tables, what: &'static str, v6: bool, port: u16, flags: u8, owner: &str) -> Fixture {
    let (server, vip, name) = if v6 {
        (SERVER6, VIP6, "dro6")
    } else {
        (SERVER4, VIP4, "dro4")
    };
    let payload: &[u8] = if flags & SYN != 0 { b"" } else { b"answer" };
    let p = Pkt::new(server, vip, TCP, tcp(443, port, flags, 9, payload));
    let out = p.clone().macs(owner_mac(t, name, owner), OUR_MAC).build();
    Fixture::tx(what, p.build(), BACKENDS, out)
}

fn syn_ack4_first_share(t: &Tables) -> Fixture {
    let d = "dro4 outbound syn-ack to 40000: to 10.0.0.51, first in sorted order, macs only";
    dr_row(t, d, false, 40000, SYN | ACK, "10.0.0.51")
}

fn data4_last_port_of_a_share(t: &Tables) -> Fixture {
    let d = "dro4 outbound data to 40333, the last port of 10.0.0.51's share";
    dr_row(t, d, false, 40333, ACK, "10.0.0.51")
}

fn data4_first_port_of_the_next(t: &Tables) -> Fixture {
    let d = "dro4 outbound data to 40334: 10.0.0.52's share";
    dr_row(t, d, false, 40334, ACK, "10.0.0.52")
}

fn syn_ack4_last_port(t: &Tables) -> Fixture {
    let d = "dro4 outbound syn-ack to 40999, the range's last port: 10.0.0.53";
    dr_row(t, d, false, 40999, SYN | ACK, "10.0.0.53")
}

fn past_the_range(_: &Tables) -> Fixture {
    let p = Pkt::new(SERVER4, VIP4, TCP, tcp(443, 41000, SYN | ACK, 9, b""));
    Fixture::pass(
        "dro4 port 41000, past the outbound range: the kernel's",
        p.build(),
    )
}

fn udp_to_a_tcp_range(_: &Tables) -> Fixture {
    let p = Pkt::new(SERVER4, VIP4, UDP, udp(53, 40000, b"answer"));
    Fixture::pass("dro4 udp to 40000 of a tcp range: the kernel's", p.build())
}

fn syn_ack6_first_share(t: &Tables) -> Fixture {
    let d = "dro6 outbound syn-ack to 50000: to 2001:db8:a::51, macs only";
    dr_row(t, d, true, 50000, SYN | ACK, "2001:db8:a::51")
}

fn data6_last_port(t: &Tables) -> Fixture {
    let d = "dro6 outbound data to 50999: to 2001:db8:a::52";
    dr_row(t, d, true, 50999, ACK, "2001:db8:a::52")
}

fn tunnel4(t: &Tables) -> Fixture {
    let inner = Pkt::new(
        SERVER4,
        "192.0.2.35",
        TCP,
        tcp(443, 40050, SYN | ACK, 9, b""),
    );
    let h = flow_hash(SERVER4, "192.0.2.35", 443, 40050, TCP);
    let backend = ip("10.0.0.62");
    let (osrc, _) = tunnel_src(false, h);
    let outer = Pkt::new(SERVER4, "192.0.2.35", 4, Vec::new())
        .macs(owner_mac(t, "tno4", "10.0.0.62"), OUR_MAC)
        .ident(0)
        .with(|o| {
            o.src = osrc;
            o.dst = backend;
            o.tos = inner.tos;
            o.df = inner.df;
        });
    let encap = Encap {
        udp: None,
        vxlan: None,
    };
    let out = encap_frame(&inner, outer, encap);
    let d = "tno4 outbound syn-ack to 40050: ipip to its owner 10.0.0.62";
    Fixture::tx(d, inner.build(), BACKENDS, out)
}
