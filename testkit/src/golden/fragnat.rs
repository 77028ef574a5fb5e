//! NAT and FullNAT fragment rows: a UDP datagram in pieces, its first fragment NATed like
//! an unfragmented datagram (ports, and the checksum that covers the whole datagram), its
//! later fragments given the first one's addresses from the fragment table, the backend's
//! fragmented reply returned to the client; fragments without a first one, overlapping or
//! past 65,535 bytes dropped. Each expected frame is the NATed datagram built whole (its
//! checksum from scratch) and cut at the same places.

use lb::{DropReason, Tables};

use super::build::{Pkt, TCP, UDP, tcp, udp};
use super::setup::{flow_hash, mac_of, snat_port};
use super::{BACKENDS, Counter, Fixture, Given, OUR_MAC, ROUTER_MAC, UPLINK};

const C4: &str = "198.51.100.7";
const C6: &str = "2001:db8:c::7";
/// L4 bytes per fragment (a multiple of 8).
const PIECE: usize = 512;
/// The IPv4 identification / IPv6 fragment identification of the datagrams.
const ID: u32 = 0x4d2;

pub(super) const ROWS: &[super::Row] = &[
    nat4u_first,
    nat4u_middle,
    nat4u_last,
    nat4u_no_first,
    nat4u_overlap,
    nat4u_oversize,
    nat4_tiny_first,
    nat6u_first,
    nat6u_last,
    fnat4u_first,
    fnat4u_later,
    fnat4u_return_first,
    fnat4u_return_later,
];

/// The pieces of datagram `p` (its L4 bytes, checksum filled over the whole datagram), cut
/// every [`PIECE`] bytes, with identification [`ID`].
fn pieces(p: &Pkt) -> Vec<Pkt> {
    let ip = p.ip_bytes();
    let l4 = ip[if p.v6() { 40 } else { 20 }..].to_vec();
    l4.chunks(PIECE)
        .enumerate()
        .map(|(i, c)| {
            let off = i * PIECE;
            let more = off + c.len() < l4.len();
            let mut q = p
                .clone()
                .raw_l4()
                .ident(ID as u16)
                .frag(off as u16, more, ID);
            q.l4 = c.to_vec();
            q
        })
        .collect()
}

fn payload() -> Vec<u8> {
    (0..1200u32).map(|i| (i * 7 + 3) as u8).collect()
}

/// Client → nat4u (192.0.2.10:53) and the datagram NAT sends to its backend.
fn nat4u() -> (Vec<Pkt>, Vec<Pkt>) {
    let q = Pkt::new(C4, "192.0.2.10", UDP, udp(5555, 53, &payload()));
    let out = q.clone().dst("10.0.0.2").dport(5353).ttl(63);
    (pieces(&q), pieces(&out))
}

fn to_backend(
    t: &Tables,
    vip: &str,
    i: usize,
    ins: &[Pkt],
    outs: &[Pkt],
    d: &'static str,
) -> Fixture {
    let out = outs[i].clone().macs(mac_of(t, vip), OUR_MAC).build();
    let given = ins[..i].iter().map(Given::from_client).collect();
    Fixture::tx(d, ins[i].build(), BACKENDS, out)
        .given(given)
        .counting(Counter::Fragments)
}

fn nat4u_first(t: &Tables) -> Fixture {
    let (ins, outs) = nat4u();
    let d = "nat4u first fragment: dnat, the udp checksum fixed for the whole datagram";
    to_backend(t, "nat4u", 0, &ins, &outs, d)
}

fn nat4u_middle(t: &Tables) -> Fixture {
    let (ins, outs) = nat4u();
    let d = "nat4u middle fragment: the first fragment's backend, addresses only";
    to_backend(t, "nat4u", 1, &ins, &outs, d)
}

fn nat4u_last(t: &Tables) -> Fixture {
    let (ins, outs) = nat4u();
    let d = "nat4u last fragment: the datagram complete";
    to_backend(t, "nat4u", 2, &ins, &outs, d)
}

fn nat4u_no_first(_: &Tables) -> Fixture {
    let (ins, _) = nat4u();
    Fixture::drop(
        "nat4u later fragment without its first: dropped",
        ins[1].build(),
        DropReason::FragmentNoFirst,
    )
}

fn nat4u_overlap(_: &Tables) -> Fixture {
    let (ins, _) = nat4u();
    let over = Pkt::new(C4, "192.0.2.10", UDP, vec![0u8; 64])
        .raw_l4()
        .ident(ID as u16)
        .frag(8, true, ID);
    Fixture::drop(
        "nat4u fragment overlapping the first (rfc 1858): dropped",
        over.build(),
        DropReason::FragmentOverlap,
    )
    .given(vec![Given::from_client(&ins[0])])
}

fn nat4u_oversize(_: &Tables) -> Fixture {
    let big = Pkt::new(C4, "192.0.2.10", UDP, vec![0u8; 16])
        .raw_l4()
        .ident(ID as u16)
        .frag(65528, false, ID);
    Fixture::drop(
        "nat4u fragment past 65535 bytes: dropped",
        big.build(),
        DropReason::FragmentOversize,
    )
}

fn nat4_tiny_first(_: &Tables) -> Fixture {
    let seg = tcp(40000, 80, 0x02, 1, b"");
    let tiny = Pkt::new(C4, "192.0.2.10", TCP, seg[..8].to_vec())
        .raw_l4()
        .frag(0, true, 0);
    Fixture::drop(
        "nat4 first fragment without the whole tcp header (rfc 1858): dropped",
        tiny.build(),
        DropReason::Truncated,
    )
}

/// Client → nat6u ([2001:db8::10]:53) and the datagram NAT sends to its backend.
fn nat6u() -> (Vec<Pkt>, Vec<Pkt>) {
    let q = Pkt::new(C6, "2001:db8::10", UDP, udp(5555, 53, &payload()[..900]));
    let out = q.clone().dst("2001:db8:a::2").ttl(63);
    (pieces(&q), pieces(&out))
}

fn nat6u_first(t: &Tables) -> Fixture {
    let (ins, outs) = nat6u();
    let d = "nat6u first fragment (fragment header): dnat, checksum for the whole datagram";
    to_backend(t, "nat6u", 0, &ins, &outs, d)
}

fn nat6u_last(t: &Tables) -> Fixture {
    let (ins, outs) = nat6u();
    to_backend(
        t,
        "nat6u",
        1,
        &ins,
        &outs,
        "nat6u last fragment: same backend",
    )
}

/// Client → fnat4u (192.0.2.20:443) and the datagram FullNAT sends, and its local port.
fn fnat4u() -> (Vec<Pkt>, Vec<Pkt>, u16) {
    let q = Pkt::new(C4, "192.0.2.20", UDP, udp(40001, 443, &payload()));
    let h = flow_hash(C4, "192.0.2.20", 40001, 443, UDP);
    let port = snat_port(UDP, "10.0.0.3", 8443, "10.1.0.1", h);
    let out = q
        .clone()
        .src("10.1.0.1")
        .sport(port)
        .dst("10.0.0.3")
        .dport(8443)
        .ttl(63);
    (pieces(&q), pieces(&out), port)
}

fn fnat4u_first(t: &Tables) -> Fixture {
    let (ins, outs, _) = fnat4u();
    let d = "fnat4u first fragment: dnat + snat, checksum for the whole datagram";
    to_backend(t, "fnat4u", 0, &ins, &outs, d)
}

fn fnat4u_later(t: &Tables) -> Fixture {
    let (ins, outs, _) = fnat4u();
    let d = "fnat4u later fragment: the first fragment's backend and local address";
    to_backend(t, "fnat4u", 1, &ins, &outs, d)
}

/// The backend's fragmented reply to the fnat4u flow, and what reaches the client.
fn fnat4u_reply(t: &Tables) -> (Given, Vec<Pkt>, Vec<Pkt>) {
    let q = Pkt::new(C4, "192.0.2.20", UDP, udp(40001, 443, b"hello"));
    let h = flow_hash(C4, "192.0.2.20", 40001, 443, UDP);
    let port = snat_port(UDP, "10.0.0.3", 8443, "10.1.0.1", h);
    let r = Pkt::new("10.0.0.3", "10.1.0.1", UDP, udp(8443, port, &payload()))
        .macs(OUR_MAC, mac_of(t, "fnat4u"));
    let out = r
        .clone()
        .src("192.0.2.20")
        .sport(443)
        .dst(C4)
        .dport(40001)
        .ttl(63)
        .macs(ROUTER_MAC, OUR_MAC);
    (Given::from_client(&q), pieces(&r), pieces(&out))
}

fn fnat4u_return_first(t: &Tables) -> Fixture {
    let (query, ins, outs) = fnat4u_reply(t);
    Fixture::tx(
        "fnat4u return first fragment: back to the client from the vip",
        ins[0].build(),
        UPLINK,
        outs[0].build(),
    )
    .arriving_on(BACKENDS)
    .given(vec![query])
    .counting(Counter::Fragments)
}

fn fnat4u_return_later(t: &Tables) -> Fixture {
    let (query, ins, outs) = fnat4u_reply(t);
    let first = Given {
        frame: ins[0].build(),
        ifindex: BACKENDS,
    };
    Fixture::tx(
        "fnat4u return later fragment: the client's address from the first",
        ins[1].build(),
        UPLINK,
        outs[1].build(),
    )
    .arriving_on(BACKENDS)
    .given(vec![query, first])
    .counting(Counter::Fragments)
}
