//! Fragment rows: fragments of DR and tunnel VIPs balanced by the 3-tuple so every piece
//! reaches the same backend; fragments that cannot be told apart between two VIPs dropped.
//! NAT and FullNAT fragments (first, later, replies) are in `fragnat`.

use lb::{DropReason, Tables};

use super::build::{ACK, Encap, Pkt, TCP, UDP, encap_frame, tcp, udp};
use super::setup::{mac_of, three_tuple_hash, tunnel_src};
use super::{BACKENDS, Counter, Fixture, OUR_MAC};

const C4: &str = "198.51.100.7";
const C6: &str = "2001:db8:c::7";

pub(super) const ROWS: &[super::Row] = &[
    dr4u_first,
    dr4u_non_first,
    dr6_first,
    dr6_last,
    two_udp_vips,
    ipip4_fragment,
];

/// A fragment as DR forwards it to `vip`'s backend: new MACs only.
fn forwarded(t: &Tables, description: &'static str, fr: Pkt, vip: &str) -> Fixture {
    let out = fr.clone().macs(mac_of(t, vip), OUR_MAC).build();
    Fixture::tx(description, fr.build(), BACKENDS, out).counting(Counter::Fragments)
}

fn dr4u_first(t: &Tables) -> Fixture {
    let fr = Pkt::new(C4, "192.0.2.30", UDP, udp(7000, 9000, &[7u8; 32])).frag(0, true, 0);
    forwarded(t, "dr4u first fragment: 3-tuple maglev", fr, "dr4u")
}

fn dr4u_non_first(t: &Tables) -> Fixture {
    let fr = Pkt::new(C4, "192.0.2.30", UDP, vec![9u8; 24]).frag(40, false, 0);
    let d = "dr4u non-first fragment (no ports): same backend";
    forwarded(t, d, fr, "dr4u")
}

fn dr6_first(t: &Tables) -> Fixture {
    let seg = tcp(40000, 80, ACK, 1, &[1u8; 40]);
    let fr = Pkt::new(C6, "2001:db8::30", TCP, seg).frag(0, true, 0xdead);
    let d = "dr6 ipv6 first fragment (fragment header): forwarded";
    forwarded(t, d, fr, "dr6")
}

fn dr6_last(t: &Tables) -> Fixture {
    let fr = Pkt::new(C6, "2001:db8::30", TCP, vec![2u8; 16]).frag(48, false, 0xdead);
    forwarded(t, "dr6 ipv6 last fragment: same backend", fr, "dr6")
}

fn two_udp_vips(_: &Tables) -> Fixture {
    let fr = Pkt::new(C4, "192.0.2.90", UDP, vec![0u8; 16]).frag(64, false, 0);
    Fixture::drop(
        "fragment for an address with two udp vips",
        fr.build(),
        DropReason::FragmentAmbiguous,
    )
}

fn ipip4_fragment(t: &Tables) -> Fixture {
    let seg = tcp(40000, 80, ACK, 1, &[3u8; 16]);
    let fr = Pkt::new(C4, "192.0.2.40", TCP, seg).frag(0, true, 0);
    let (osrc, _) = tunnel_src(false, three_tuple_hash(C4, "192.0.2.40", TCP));
    let outer = Pkt::new(C4, "10.0.0.5", 4, Vec::new())
        .macs(mac_of(t, "ipip4"), OUR_MAC)
        .ident(0)
        .with(|o| o.src = osrc);
    let out = encap_frame(&fr, outer, Encap::default());
    Fixture::tx(
        "ipip4 fragment: encapsulated, outer source from the 3-tuple hash",
        fr.build(),
        BACKENDS,
        out,
    )
    .counting(Counter::Fragments)
}
