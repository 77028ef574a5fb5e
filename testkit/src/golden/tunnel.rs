//! Tunnel rows: IPIP (4in4, 6in6, 4in6, 6in4), GUE and VXLAN outer headers toward the
//! backend, the outer source (and IPv6 flow label, UDP source port) from the flow hash,
//! and what the outer header copies from the inner one (DF, DSCP, VLAN tags).

use lb::{DropReason, Tables};

use super::build::{ACK, Encap, ICMP, ICMPV6, Pkt, SYN, TCP, encap_frame, icmp, ip, tcp};
use super::setup::{flow_hash, mac_of, tunnel_src};
use super::{BACKENDS, Counter, Fixture, OUR_MAC, ROUTER_MAC, UPLINK};

pub(super) const ROWS: &[super::Row] = &[
    ipip4,
    ipip6,
    ipip46,
    ipip64,
    gue4,
    gue6,
    vxlan4,
    vxlan6,
    ipip4_df_dscp,
    ipip4_vlan,
    gue4_ttl_1,
    ipip6_traffic_class,
    vxlan4_mss_clamped,
    vxlan6_mss_clamped,
    gue4_small_mss_kept,
    vxlan4_too_big_df,
    vxlan6_too_big,
    vxlan4_too_big_no_df,
];

/// A tunnel VIP of the golden setup, the client that sends to it and its backend.
pub(super) struct Tun {
    pub(super) vip: &'static str,
    pub(super) client: &'static str,
    pub(super) addr: &'static str,
    /// The outer destination: the backend's address (a tenant backend's VTEP).
    pub(super) backend: &'static str,
    /// GUE or VXLAN: the outer UDP destination port.
    pub(super) udp_port: Option<u16>,
    /// VXLAN: the VNI.
    pub(super) vni: Option<u32>,
}

const C4: &str = "198.51.100.7";
const C6: &str = "2001:db8:c::7";

const fn tun(
    vip: &'static str,
    client: &'static str,
    addr: &'static str,
    backend: &'static str,
) -> Tun {
    Tun {
        vip,
        client,
        addr,
        backend,
        udp_port: None,
        vni: None,
    }
}

const IPIP4: Tun = tun("ipip4", C4, "192.0.2.40", "10.0.0.5");
const IPIP6: Tun = tun("ipip6", C6, "2001:db8::40", "2001:db8:a::5");
const GUE4: Tun = Tun {
    udp_port: Some(6080),
    ..tun("gue4", C4, "192.0.2.50", "10.0.0.7")
};

/// The SYN every tunnel row sends: client:40000 -> VIP:80.
fn syn(v: &Tun) -> Pkt {
    Pkt::new(v.client, v.addr, TCP, tcp(40000, 80, SYN, 77, b""))
}

/// The ipip4 flow (the ICMP and fragment rows quote or follow it).
pub(super) fn ipip4_syn() -> Pkt {
    syn(&IPIP4)
}

/// `inner` (client:40000 -> VIP:80) as the VIP `v` encapsulates it toward its backend.
pub(super) fn encapsulated(t: &Tables, v: &Tun, inner: &Pkt) -> Vec<u8> {
    let h = flow_hash(v.client, v.addr, 40000, 80, TCP);
    let b = ip(v.backend);
    let (osrc, sport) = tunnel_src(b.is_ipv6(), h);
    let outer = Pkt::new(v.client, v.addr, 4, Vec::new())
        .macs(mac_of(t, v.vip), OUR_MAC)
        .ident(0)
        .with(|o| {
            o.src = osrc;
            o.dst = b;
            o.tos = inner.tos;
            // IPv6 has no fragmentation on the path: the outer IPv4 header sets DF then too.
            o.df = inner.v6() || inner.df;
            if b.is_ipv6() {
                o.flow_label = h & 0xfffff;
            }
        });
    let encap = Encap {
        udp: v.udp_port.map(|p| (sport, p)),
        vxlan: v.vni.map(|vni| (vni, mac_of(t, v.vip), OUR_MAC)),
    };
    encap_frame(inner, outer, encap)
}

/// The row for `inner` sent to the tunnel VIP `v`.
fn row(t: &Tables, description: &'static str, v: &Tun, inner: Pkt) -> Fixture {
    let out = encapsulated(t, v, &inner);
    Fixture::tx(description, inner.build(), BACKENDS, out)
}

fn ipip4(t: &Tables) -> Fixture {
    let d = "ipip 4in4: outer src 172.16.x.x from the flow hash";
    row(t, d, &IPIP4, syn(&IPIP4))
}

fn ipip6(t: &Tables) -> Fixture {
    let d = "ipip 6in6: outer flow label from the flow hash";
    row(t, d, &IPIP6, syn(&IPIP6))
}

fn ipip46(t: &Tables) -> Fixture {
    let v = tun("ipip46", C4, "192.0.2.41", "2001:db8:a::6");
    row(t, "ipip 4in6 for an ipv6 backend", &v, syn(&v))
}

fn ipip64(t: &Tables) -> Fixture {
    let v = tun("ipip64", C6, "2001:db8::41", "10.0.0.6");
    row(t, "ipip 6in4 for an ipv4 backend", &v, syn(&v))
}

fn gue4(t: &Tables) -> Fixture {
    let d = "gue over ipv4: udp 6080, zero udp checksum";
    row(t, d, &GUE4, syn(&GUE4))
}

fn gue6(t: &Tables) -> Fixture {
    let v = Tun {
        udp_port: Some(6080),
        ..tun("gue6", C6, "2001:db8::50", "2001:db8:a::7")
    };
    row(t, "gue over ipv6: udp checksum computed", &v, syn(&v))
}

fn vxlan4(t: &Tables) -> Fixture {
    let v = Tun {
        udp_port: Some(4789),
        vni: Some(4242),
        ..tun("vxlan4", C4, "192.0.2.60", "10.0.0.8")
    };
    row(t, "vxlan over ipv4: vni 4242, inner ethernet", &v, syn(&v))
}

fn vxlan6(t: &Tables) -> Fixture {
    let v = Tun {
        udp_port: Some(4789),
        vni: Some(4242),
        ..tun("vxlan6", C6, "2001:db8::60", "2001:db8:a::8")
    };
    row(t, "vxlan over ipv6", &v, syn(&v))
}

fn ipip4_df_dscp(t: &Tables) -> Fixture {
    let d = "ipip 4in4 with inner df and dscp: copied to the outer header";
    let inner = syn(&IPIP4).with(|p| {
        p.df = true;
        p.tos = 0xb8;
    });
    row(t, d, &IPIP4, inner)
}

fn ipip4_vlan(t: &Tables) -> Fixture {
    let d = "ipip 4in4 vlan-tagged: outer keeps the tag";
    row(t, d, &IPIP4, syn(&IPIP4).vlans(&[300]))
}

fn gue4_ttl_1(t: &Tables) -> Fixture {
    let d = "gue with inner ttl 1: inner ttl untouched";
    row(t, d, &GUE4, syn(&GUE4).ttl(1))
}

fn ipip6_traffic_class(t: &Tables) -> Fixture {
    let d = "ipip 6in6 with inner traffic class";
    row(t, d, &IPIP6, syn(&IPIP6).with(|p| p.tos = 0x28))
}

/// The MTU of the backends' interface in the golden setup (`setup::tables`).
const UNDERLAY_MTU: u16 = 1400;

const VXLAN4: Tun = Tun {
    udp_port: Some(4789),
    vni: Some(4242),
    ..tun("vxlan4", C4, "192.0.2.60", "10.0.0.8")
};

const VXLAN6: Tun = Tun {
    udp_port: Some(4789),
    vni: Some(4242),
    ..tun("vxlan6", C6, "2001:db8::60", "2001:db8:a::8")
};

/// A SYN from `v`'s client with an MSS option (and SACK-permitted before it, so the MSS
/// sits at an odd word of the header).
fn syn_mss(v: &Tun, mss: u16) -> Pkt {
    let mut seg = tcp(40000, 80, SYN, 77, b"");
    seg[12] = 0x70;
    let [hi, lo] = mss.to_be_bytes();
    seg.extend_from_slice(&[1, 4, 2, 2, 4, hi, lo, 0]);
    Pkt::new(v.client, v.addr, TCP, seg)
}

fn vxlan4_mss_clamped(t: &Tables) -> Fixture {
    // 1400 - outer IPv4 20 - UDP 8 - VXLAN 8 - inner Ethernet 14 - IPv4 20 - TCP 20.
    let out = encapsulated(t, &VXLAN4, &syn_mss(&VXLAN4, UNDERLAY_MTU - 50 - 40));
    Fixture::tx(
        "vxlan4 syn: mss 1460 clamped to 1310 for the 1400-byte underlay",
        syn_mss(&VXLAN4, 1460).build(),
        BACKENDS,
        out,
    )
}

fn vxlan6_mss_clamped(t: &Tables) -> Fixture {
    // 1400 - outer IPv6 40 - UDP 8 - VXLAN 8 - inner Ethernet 14 - IPv6 40 - TCP 20.
    let out = encapsulated(t, &VXLAN6, &syn_mss(&VXLAN6, UNDERLAY_MTU - 70 - 60));
    Fixture::tx(
        "vxlan6 syn: mss 1440 clamped to 1270",
        syn_mss(&VXLAN6, 1440).build(),
        BACKENDS,
        out,
    )
}

fn gue4_small_mss_kept(t: &Tables) -> Fixture {
    let inner = syn_mss(&GUE4, 1200);
    Fixture::tx(
        "gue4 syn with an mss that fits: kept",
        inner.build(),
        BACKENDS,
        encapsulated(t, &GUE4, &inner),
    )
}

/// A data segment of `v`'s flow whose IP packet is `len` bytes.
fn big(v: &Tun, len: usize, df: bool) -> Pkt {
    let hdr = if v.client.contains(':') { 60 } else { 40 };
    let data = vec![0x5au8; len - hdr];
    let mut p = Pkt::new(v.client, v.addr, TCP, tcp(40000, 80, ACK, 78, &data));
    p.df = df;
    p
}

fn vxlan4_too_big_df(_: &Tables) -> Fixture {
    let p = big(&VXLAN4, 1400, true);
    let quote = p.ip_bytes();
    let mtu = (UNDERLAY_MTU - 50).to_be_bytes();
    let out = Pkt::new(
        "192.0.2.60",
        C4,
        ICMP,
        icmp(3, 4, [0, 0, mtu[0], mtu[1]], &quote[..28]),
    )
    .macs(ROUTER_MAC, OUR_MAC)
    .ident(0);
    Fixture::tx(
        "vxlan4 df segment over the underlay mtu: icmp fragmentation needed, mtu 1350",
        p.build(),
        UPLINK,
        out.build(),
    )
    .counting(Counter::TooBigSent)
}

fn vxlan6_too_big(_: &Tables) -> Fixture {
    let p = big(&VXLAN6, 1400, false);
    let quote = p.ip_bytes();
    let mtu = u32::from(UNDERLAY_MTU - 70).to_be_bytes();
    let out = Pkt::new("2001:db8::60", C6, ICMPV6, icmp(2, 0, mtu, &quote[..1232]))
        .macs(ROUTER_MAC, OUR_MAC);
    Fixture::tx(
        "vxlan6 segment over the underlay mtu: packet too big, mtu 1330",
        p.build(),
        UPLINK,
        out.build(),
    )
    .counting(Counter::TooBigSent)
}

fn vxlan4_too_big_no_df(_: &Tables) -> Fixture {
    Fixture::drop(
        "vxlan4 segment over the underlay mtu without df: dropped (no outer fragmentation)",
        big(&VXLAN4, 1400, false).build(),
        DropReason::TooBig,
    )
}
