//! Tenant rows (issue 23): VXLAN arrivals for tenant VIPs. Tenants 100 and 200 both have
//! 192.0.2.40:80 (the underlay VIP ipip4's address too) with a backend 10.0.0.5 each, behind
//! VTEPs 10.0.0.101 and 10.0.0.102. A frame in VNI 100 reaches tenant 100's backend in VXLAN
//! with its network's VNI; the same inner frame in VNI 200 reaches tenant 200's (VNI 2200);
//! a flow of tenant 100 does not capture the same 5-tuple in tenant 200. What is not a
//! tenant VIP's (unknown VNI, other port or protocol, not addressed to the appliance, no
//! VNI flag, a tagged inner frame) is the kernel's, untouched.

use lb::Tables;

use super::build::{ACK, Pkt, SYN, TCP, UDP, ip, tcp, udp};
use super::tunnel::{Tun, encapsulated};
use super::{BACKENDS, Fixture, Given, OUR_MAC, UPLINK};

pub(super) const ROWS: &[super::Row] = &[
    tenant100_syn,
    tenant200_same_syn,
    tenant100_syn6,
    same_tuple_other_tenant,
    unknown_vni,
    other_port,
    udp_to_a_tcp_vip,
    not_addressed_to_us,
    no_vni_flag,
    tagged_inner_frame,
];

/// The tenants' gateway (its VTEP) and the appliance's own address it sends to.
const GW4: &str = "10.0.0.200";
pub(super) const US4: &str = "10.0.0.254";
const GW6: &str = "2001:db8:a::200";
const US6: &str = "2001:db8:a::fe";
/// The gateway's MAC inside the tunnel (the inner frame's source).
const GW_INNER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x0e, 0x01];
const CLIENT4: &str = "198.51.100.7";
const CLIENT6: &str = "2001:db8:c::7";
const VIP4: &str = "192.0.2.40";
const VIP6: &str = "2001:db8::40";
/// VXLAN's I flag (RFC 7348): the VNI is valid.
const I_FLAG: u8 = 0x08;

/// A client's TCP segment to VIP:`dport` inside the tenant's network.
pub(super) fn inner(v6: bool, dport: u16, flags: u8) -> Pkt {
    let (c, v) = if v6 { (CLIENT6, VIP6) } else { (CLIENT4, VIP4) };
    let payload: &[u8] = if flags & SYN != 0 { b"" } else { b"GET /" };
    Pkt::new(c, v, TCP, tcp(40000, dport, flags, 77, payload)).macs(OUR_MAC, GW_INNER_MAC)
}

/// `inner`'s whole Ethernet frame in VXLAN from the gateway to `to` (UDP 4789).
pub(super) fn arrival(to: &str, vni: u32, flags: u8, inner: &Pkt) -> Vec<u8> {
    let gw = if ip(to).is_ipv6() { GW6 } else { GW4 };
    let mut body = vec![flags, 0, 0, 0];
    body.extend_from_slice(&(vni << 8).to_be_bytes());
    body.extend_from_slice(&inner.build());
    let mut outer = Pkt::new(gw, to, UDP, udp(51000, 4789, &body));
    if !outer.v6() {
        // Zero UDP checksum over IPv4, as Linux VTEPs send it.
        outer.csum_at = None;
    }
    outer.build()
}

/// `inner` as tenant VIP `vip` sends it to its backend behind `vtep`, in VXLAN `vni`.
fn to_backend(t: &Tables, vip: &'static str, vtep: &'static str, vni: u32, inner: &Pkt) -> Vec<u8> {
    let (client, addr) = if inner.v6() {
        (CLIENT6, VIP6)
    } else {
        (CLIENT4, VIP4)
    };
    let v = Tun {
        vip,
        client,
        addr,
        backend: vtep,
        udp_port: Some(4789),
        vni: Some(vni),
    };
    encapsulated(t, &v, inner)
}

fn tenant100_syn(t: &Tables) -> Fixture {
    let p = inner(false, 80, SYN);
    let out = to_backend(t, "tenant100", "10.0.0.101", 100, &p);
    let d = "tenant 100 syn in vni 100: decapsulated, to its backend's vtep 10.0.0.101 in vni 100";
    Fixture::tx(d, arrival(US4, 100, I_FLAG, &p), BACKENDS, out)
}

fn tenant200_same_syn(t: &Tables) -> Fixture {
    let p = inner(false, 80, SYN);
    let out = to_backend(t, "tenant200", "10.0.0.102", 2200, &p);
    let d =
        "the same syn in vni 200: tenant 200's backend, vtep 10.0.0.102, its network's vni 2200";
    Fixture::tx(d, arrival(US4, 200, I_FLAG, &p), BACKENDS, out)
}

fn tenant100_syn6(t: &Tables) -> Fixture {
    let p = inner(true, 80, SYN);
    let out = to_backend(t, "tenant100v6", "2001:db8:a::101", 100, &p);
    let d = "tenant 100 ipv6 syn over an ipv6 underlay: to vtep 2001:db8:a::101 in vni 100";
    Fixture::tx(d, arrival(US6, 100, I_FLAG, &p), BACKENDS, out)
}

fn same_tuple_other_tenant(t: &Tables) -> Fixture {
    let syn = inner(false, 80, SYN);
    let ack = inner(false, 80, ACK);
    let out = to_backend(t, "tenant200", "10.0.0.102", 2200, &ack);
    let d =
        "after tenant 100's syn, tenant 200's segment of the same 5-tuple: tenant 200's backend";
    Fixture::tx(d, arrival(US4, 200, I_FLAG, &ack), BACKENDS, out).given(vec![Given {
        frame: arrival(US4, 100, I_FLAG, &syn),
        ifindex: UPLINK,
    }])
}

fn unknown_vni(_: &Tables) -> Fixture {
    let d = "vni 300, no tenant's: the kernel's";
    Fixture::pass(d, arrival(US4, 300, I_FLAG, &inner(false, 80, SYN)))
}

fn other_port(_: &Tables) -> Fixture {
    let d = "vni 100 to port 81, no vip of tenant 100: the kernel's";
    Fixture::pass(d, arrival(US4, 100, I_FLAG, &inner(false, 81, SYN)))
}

fn udp_to_a_tcp_vip(_: &Tables) -> Fixture {
    let p = Pkt::new(CLIENT4, VIP4, UDP, udp(40000, 80, b"q")).macs(OUR_MAC, GW_INNER_MAC);
    let d = "vni 100 udp to 192.0.2.40:80, a tcp vip: the kernel's";
    Fixture::pass(d, arrival(US4, 100, I_FLAG, &p))
}

fn not_addressed_to_us(_: &Tables) -> Fixture {
    let d = "vxlan to 10.0.0.253, not the appliance's address: the kernel's";
    Fixture::pass(
        d,
        arrival("10.0.0.253", 100, I_FLAG, &inner(false, 80, SYN)),
    )
}

fn no_vni_flag(_: &Tables) -> Fixture {
    let d = "vni 100 without the I flag (no valid vni): the kernel's";
    Fixture::pass(d, arrival(US4, 100, 0, &inner(false, 80, SYN)))
}

fn tagged_inner_frame(_: &Tables) -> Fixture {
    let p = inner(false, 80, SYN).vlans(&[7]);
    let d = "vni 100 with a vlan tag inside (rfc 7348 6.1): the kernel's";
    Fixture::pass(d, arrival(US4, 100, I_FLAG, &p))
}
