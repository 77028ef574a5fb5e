//! The XDP steering program's decisions, frame by frame, through BPF_PROG_TEST_RUN: which
//! frames it claims for the load balancer (VIPs, NAT and FullNAT return traffic, through
//! VLAN tags, IPv6 extension headers and fragments, and tenant VIPs inside VXLAN) and which
//! it leaves to the kernel.
//! Needs root to load BPF; no namespaces.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lab::netns::require_root;
use sluice::config::{Encap, Mode, Protocol};
use sluice::datapath::flowcache::FlowCache;
use sluice::datapath::steer::Steer;
use sluice::datapath::{ReturnKey, VipKey};
use sluice::lb::process::TENANT_VXLAN_PORT;

const VIP4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const CLIENT4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const BACKEND4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);
const HOST4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SNAT4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 100);

fn vip6() -> Ipv6Addr {
    "2001:db8::10".parse().expect("literal")
}
fn client6() -> Ipv6Addr {
    "2001:db8:1::7".parse().expect("literal")
}

/// Ethernet header with `tags` VLAN tags (802.1ad outer, 802.1Q inner) before `ethertype`.
fn eth(tags: usize, ethertype: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    for i in 0..tags {
        let tpid: u16 = if i + 1 < tags { 0x88a8 } else { 0x8100 };
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&(100 + i as u16).to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// IPv4 frame; `frag` is the raw flags+offset field; `l4` follows the header.
fn v4(tags: usize, proto: u8, src: Ipv4Addr, dst: Ipv4Addr, frag: u16, l4: &[u8]) -> Vec<u8> {
    let mut f = eth(tags, 0x0800);
    let total = (20 + l4.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 1]);
    f.extend_from_slice(&frag.to_be_bytes());
    f.extend_from_slice(&[64, proto, 0, 0]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(l4);
    f
}

/// IPv6 frame with optional extension headers (`ext`: (type, bytes)) before `l4`.
fn v6(next: u8, src: Ipv6Addr, dst: Ipv6Addr, ext: &[(u8, Vec<u8>)], l4: &[u8]) -> Vec<u8> {
    let mut f = eth(0, 0x86dd);
    let mut payload = Vec::new();
    let first = ext.first().map(|e| e.0).unwrap_or(next);
    for (i, (_, body)) in ext.iter().enumerate() {
        let nh = ext.get(i + 1).map(|e| e.0).unwrap_or(next);
        let mut b = body.clone();
        b[0] = nh;
        payload.extend_from_slice(&b);
    }
    payload.extend_from_slice(l4);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[first, 64]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&payload);
    f
}

/// TCP or UDP ports followed by padding, enough for either header.
fn ports(sport: u16, dport: u16) -> Vec<u8> {
    let mut l4 = sport.to_be_bytes().to_vec();
    l4.extend_from_slice(&dport.to_be_bytes());
    l4.resize(20, 0);
    l4
}

#[test]
fn the_program_claims_exactly_the_traffic_the_engine_owns() {
    require_root();
    let mut steer = Steer::load().expect("load the steering program");
    steer
        .set_vips(&[
            VipKey {
                addr: IpAddr::V4(VIP4),
                port: 80,
                proto: Protocol::Tcp,
                mode: Mode::Nat,
                slot: 0,
                tenant_vni: None,
            },
            VipKey {
                addr: IpAddr::V4(VIP4),
                port: 0,
                proto: Protocol::Udp,
                mode: Mode::Nat,
                slot: 0,
                tenant_vni: None,
            },
            VipKey {
                addr: IpAddr::V6(vip6()),
                port: 443,
                proto: Protocol::Tcp,
                mode: Mode::Nat,
                slot: 0,
                tenant_vni: None,
            },
        ])
        .expect("vips");
    steer
        .set_return_keys(&[
            ReturnKey::Backend {
                addr: IpAddr::V4(BACKEND4),
                port: 8080,
                proto: Protocol::Tcp,
            },
            ReturnKey::Local {
                addr: IpAddr::V4(SNAT4),
                port: 0,
                proto: Protocol::Tcp,
            },
        ])
        .expect("return keys");
    steer
        .set_host_addresses(&[IpAddr::V4(HOST4)])
        .expect("host addresses");

    let tcp = 6;
    let udp = 17;
    let more_fragments = 0x2000;
    let frag_ext = |offset8: u16| {
        let mut b = vec![0u8; 8];
        b[2..4].copy_from_slice(&(offset8 << 3).to_be_bytes());
        (44u8, b)
    };
    let hop_by_hop = (0u8, vec![0u8, 0, 1, 4, 0, 0, 0, 0]);
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        (
            "tcp to vip:80",
            v4(0, tcp, CLIENT4, VIP4, 0, &ports(40000, 80)),
            true,
        ),
        (
            "tcp to vip:81 (no such service)",
            v4(0, tcp, CLIENT4, VIP4, 0, &ports(40000, 81)),
            false,
        ),
        (
            "udp to vip, any-port service",
            v4(0, udp, CLIENT4, VIP4, 0, &ports(5000, 53)),
            true,
        ),
        (
            "one vlan tag",
            v4(1, tcp, CLIENT4, VIP4, 0, &ports(40000, 80)),
            true,
        ),
        (
            "two vlan tags",
            v4(2, tcp, CLIENT4, VIP4, 0, &ports(40000, 80)),
            true,
        ),
        (
            "first fragment has ports",
            v4(0, tcp, CLIENT4, VIP4, more_fragments, &ports(40000, 80)),
            true,
        ),
        (
            "later fragment: address only",
            v4(0, tcp, CLIENT4, VIP4, 185, &[0u8; 8]),
            true,
        ),
        (
            "later fragment to another address",
            v4(0, tcp, CLIENT4, HOST4, 185, &[0u8; 8]),
            false,
        ),
        (
            "icmp echo to a vip",
            v4(0, 1, CLIENT4, VIP4, 0, &[8, 0, 0, 0, 0, 1, 0, 1]),
            true,
        ),
        (
            "tcp to the appliance itself",
            v4(0, tcp, CLIENT4, HOST4, 0, &ports(40000, 22)),
            false,
        ),
        (
            "nat return: backend to client",
            v4(0, tcp, BACKEND4, CLIENT4, 0, &ports(8080, 40000)),
            true,
        ),
        (
            "backend to us: a health probe reply",
            v4(0, tcp, BACKEND4, HOST4, 0, &ports(8080, 40000)),
            false,
        ),
        (
            "backend from another port",
            v4(0, tcp, BACKEND4, CLIENT4, 0, &ports(22, 40000)),
            false,
        ),
        (
            "fullnat return to a snat address",
            v4(0, tcp, BACKEND4, SNAT4, 0, &ports(8080, 61000)),
            true,
        ),
        (
            "udp to a snat address (tcp only)",
            v4(0, udp, BACKEND4, SNAT4, 0, &ports(53, 61000)),
            false,
        ),
        (
            "arp",
            {
                let mut f = eth(0, 0x0806);
                f.extend_from_slice(&[0u8; 28]);
                f
            },
            false,
        ),
        (
            "ipv6 tcp to vip:443",
            v6(tcp, client6(), vip6(), &[], &ports(40000, 443)),
            true,
        ),
        (
            "ipv6 after hop-by-hop",
            v6(
                tcp,
                client6(),
                vip6(),
                std::slice::from_ref(&hop_by_hop),
                &ports(40000, 443),
            ),
            true,
        ),
        (
            "ipv6 later fragment",
            v6(tcp, client6(), vip6(), &[frag_ext(100)], &[0u8; 8]),
            true,
        ),
        (
            "ipv6 first fragment, wrong port",
            v6(tcp, client6(), vip6(), &[frag_ext(0)], &ports(40000, 80)),
            false,
        ),
        (
            "ipv6 neighbour solicitation to a vip",
            v6(58, client6(), vip6(), &[], &[135, 0, 0, 0, 0, 0, 0, 0]),
            false,
        ),
        (
            "ipv6 echo to a vip",
            v6(58, client6(), vip6(), &[], &[128, 0, 0, 0, 0, 0, 0, 0]),
            true,
        ),
        (
            "truncated ipv4",
            v4(0, tcp, CLIENT4, VIP4, 0, &ports(40000, 80))[..30].to_vec(),
            false,
        ),
        (
            "truncated ports",
            v4(0, tcp, CLIENT4, VIP4, 0, &[0, 80]),
            false,
        ),
    ];
    let mut wrong = Vec::new();
    for (what, frame, owned) in &cases {
        let got = steer
            .classify(frame)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        if got != *owned {
            wrong.push(format!("{what}: steered={got}, want {owned}"));
        }
    }
    assert!(wrong.is_empty(), "wrong decisions:\n{}", wrong.join("\n"));

    // Map edits take effect at once, without reloading the program.
    let to_vip = v4(0, tcp, CLIENT4, VIP4, 0, &ports(40000, 80));
    steer.set_vips(&[]).expect("clear vips");
    assert!(
        !steer.classify(&to_vip).expect("run"),
        "a removed VIP is no longer steered"
    );
    steer
        .set_vips(&[VipKey {
            addr: IpAddr::V4(VIP4),
            port: 80,
            proto: Protocol::Tcp,
            mode: Mode::Nat,
            slot: 0,
            tenant_vni: None,
        }])
        .expect("vips again");
    assert!(
        steer.classify(&to_vip).expect("run"),
        "a re-added VIP is steered again"
    );
    let c = steer.counters().expect("counters");
    assert!(
        c.passed as usize >= cases.len(),
        "every test frame was passed (no socket): {c:?}"
    );
}

#[test]
fn a_vip_set_that_does_not_fit_changes_nothing() {
    require_root();
    let mut steer = Steer::load().expect("load the steering program");
    let web = VipKey {
        addr: IpAddr::V4(VIP4),
        port: 80,
        proto: Protocol::Tcp,
        mode: Mode::Nat,
        slot: 0,
        tenant_vni: None,
    };
    steer.set_vips(&[web]).expect("one vip");
    // 40 000 addresses need 80 000 keys (each with its address-only twin): more than the
    // map's 65 536 entries.
    let too_many: Vec<VipKey> = (0..40_000u32)
        .map(|i| VipKey {
            addr: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)),
            port: 80,
            proto: Protocol::Tcp,
            mode: Mode::Nat,
            slot: 0,
            tenant_vni: None,
        })
        .collect();
    let e = steer.set_vips(&too_many).expect_err("cannot fit");
    assert!(e.to_string().contains("map full?"), "{e}");
    let to_web = v4(0, 6, CLIENT4, VIP4, 0, &ports(40000, 80));
    assert!(
        steer.classify(&to_web).expect("run"),
        "the old set still steers"
    );
    let to_new = v4(
        0,
        6,
        CLIENT4,
        Ipv4Addr::new(10, 0, 0, 9),
        0,
        &ports(40000, 80),
    );
    assert!(
        !steer.classify(&to_new).expect("run"),
        "nothing of the refused set remains"
    );
    // And the map has room again for a set that fits.
    steer.set_vips(&too_many[..1000]).expect("a set that fits");
    assert!(steer.classify(&to_new).expect("run"));
}

/// The underlay side of the tenant VIP test: the appliance's own addresses, a tenant
/// gateway (VTEP) sending to them, and the tenants' shared VIP addresses.
const UNDERLAY_HOST4: Ipv4Addr = Ipv4Addr::new(192, 168, 50, 1);
const GATEWAY4: Ipv4Addr = Ipv4Addr::new(192, 168, 50, 9);
const TENANT_VIP4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);
const TENANT_ANY_PORT4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 7);
const TENANT_CLIENT4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 66);

fn underlay_host6() -> Ipv6Addr {
    "2001:db8:50::1".parse().expect("literal")
}
fn gateway6() -> Ipv6Addr {
    "2001:db8:50::9".parse().expect("literal")
}
fn tenant_vip6() -> Ipv6Addr {
    "fd00::5".parse().expect("literal")
}
fn tenant_client6() -> Ipv6Addr {
    "fd00::66".parse().expect("literal")
}

/// The outer UDP payload of a VXLAN frame: UDP header to `dport`, the VXLAN header with
/// `flags` and `vni`, then the inner Ethernet frame.
fn vxlan(dport: u16, flags: u8, vni: u32, inner: &[u8]) -> Vec<u8> {
    let mut u = 49152u16.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((16 + inner.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    let [_, a, b, c] = vni.to_be_bytes();
    u.extend_from_slice(&[flags, 0, 0, 0, a, b, c, 0]);
    u.extend_from_slice(inner);
    u
}

/// A tenant VIP's key: TCP to `addr:port` in `vni` (a VXLAN tunnel VIP, as the config
/// requires of tenant VIPs).
fn tenant_key(addr: IpAddr, port: u16, proto: Protocol, vni: u32, slot: u32) -> VipKey {
    VipKey {
        addr,
        port,
        proto,
        mode: Mode::Tunnel(Encap::Vxlan {
            port: TENANT_VXLAN_PORT,
            vni: 5000,
        }),
        slot,
        tenant_vni: Some(vni),
    }
}

/// The VNI match's golden rows: the frames `lb::process::tenant` takes are claimed, and every
/// way of being almost one (each row below changes one thing of a claimed frame) is the
/// kernel's; the tenant's addresses are not steered in the underlay. With and without the
/// flow cache, which changes the program the verifier sees.
#[test]
fn the_program_claims_tenant_vxlan_frames_by_vni_and_inner_destination() {
    require_root();
    let cache = FlowCache::create(1024).expect("flow cache maps");
    for with_cache in [false, true] {
        let mut steer = if with_cache {
            Steer::load_with_cache(Some(&cache))
        } else {
            Steer::load()
        }
        .expect("load the steering program");
        tenant_rows(
            &mut steer,
            if with_cache { "cache on" } else { "cache off" },
        );
    }
}

fn tenant_rows(steer: &mut Steer, run: &str) {
    let (tcp, udp) = (6, 17);
    let vxlan_i = 0x08;
    let tenant4 = IpAddr::V4(TENANT_VIP4);
    steer
        .set_vips(&[
            VipKey {
                addr: IpAddr::V4(VIP4),
                port: 80,
                proto: Protocol::Tcp,
                mode: Mode::Nat,
                slot: 0,
                tenant_vni: None,
            },
            tenant_key(tenant4, 80, Protocol::Tcp, 100, 1),
            tenant_key(tenant4, 80, Protocol::Tcp, 200, 2),
            tenant_key(IpAddr::V6(tenant_vip6()), 80, Protocol::Tcp, 100, 3),
            tenant_key(IpAddr::V4(TENANT_ANY_PORT4), 0, Protocol::Udp, 100, 4),
            tenant_key(tenant4, 80, Protocol::Tcp, 0x12_3456, 5),
        ])
        .expect("vips");
    steer
        .set_host_addresses(&[IpAddr::V4(UNDERLAY_HOST4), IpAddr::V6(underlay_host6())])
        .expect("host addresses");

    // Inner frames: the tenant client to a tenant VIP.
    let inner4 = |proto: u8, dst: Ipv4Addr, dport: u16| {
        v4(0, proto, TENANT_CLIENT4, dst, 0, &ports(40000, dport))
    };
    let to_vip4 = inner4(tcp, TENANT_VIP4, 80);
    let to_vip6 = v6(tcp, tenant_client6(), tenant_vip6(), &[], &ports(40000, 80));
    // Outer frames: the gateway to one of our addresses, VXLAN inside UDP.
    let over4 = |tags: usize, dst: Ipv4Addr, dport: u16, flags: u8, vni: u32, inner: &[u8]| {
        v4(
            tags,
            udp,
            GATEWAY4,
            dst,
            0,
            &vxlan(dport, flags, vni, inner),
        )
    };
    let over6 = |vni: u32, inner: &[u8]| {
        v6(
            udp,
            gateway6(),
            underlay_host6(),
            &[],
            &vxlan(TENANT_VXLAN_PORT, vxlan_i, vni, inner),
        )
    };
    let tenant =
        |vni: u32, inner: &[u8]| over4(0, UNDERLAY_HOST4, TENANT_VXLAN_PORT, vxlan_i, vni, inner);
    let claimed = tenant(100, &to_vip4);
    // Where the inner frame starts in `claimed`: Ethernet, IPv4, UDP, VXLAN.
    let inner_at = 14 + 20 + 8 + 8;
    assert_eq!(&claimed[inner_at..], &to_vip4[..], "the test's own framing");

    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        ("vni 100 to 10.0.0.5:80", claimed.clone(), true),
        ("vni 200 to 10.0.0.5:80", tenant(200, &to_vip4), true),
        (
            "vni 0x123456 to 10.0.0.5:80",
            tenant(0x12_3456, &to_vip4),
            true,
        ),
        (
            "vni 100, inner ipv6 to [fd00::5]:80, outer ipv6",
            over6(100, &to_vip6),
            true,
        ),
        (
            "vni 100, inner ipv6 to [fd00::5]:80, outer ipv4",
            tenant(100, &to_vip6),
            true,
        ),
        (
            "vni 100, inner ipv4, outer ipv6",
            over6(100, &to_vip4),
            true,
        ),
        (
            "outer vlan tag",
            over4(1, UNDERLAY_HOST4, TENANT_VXLAN_PORT, vxlan_i, 100, &to_vip4),
            true,
        ),
        (
            "two outer vlan tags",
            over4(2, UNDERLAY_HOST4, TENANT_VXLAN_PORT, vxlan_i, 100, &to_vip4),
            true,
        ),
        (
            "any-port tenant vip, inner udp",
            tenant(100, &inner4(udp, TENANT_ANY_PORT4, 5353)),
            true,
        ),
        (
            "the ordinary vip still",
            v4(0, tcp, CLIENT4, VIP4, 0, &ports(40000, 80)),
            true,
        ),
        ("vni 300 (no such tenant)", tenant(300, &to_vip4), false),
        (
            "vni 0x563412 (the vni's bytes reversed)",
            tenant(0x56_3412, &to_vip4),
            false,
        ),
        (
            "vni 200, inner ipv6 (vni 100's address)",
            over6(200, &to_vip6),
            false,
        ),
        (
            "vni 100 to port 81",
            tenant(100, &inner4(tcp, TENANT_VIP4, 81)),
            false,
        ),
        (
            "inner udp to the tcp vip",
            tenant(100, &inner4(udp, TENANT_VIP4, 80)),
            false,
        ),
        (
            "any-port tenant vip, inner tcp (udp vip)",
            tenant(100, &inner4(tcp, TENANT_ANY_PORT4, 5353)),
            false,
        ),
        (
            "inner icmp to the vip address",
            tenant(
                100,
                &v4(
                    0,
                    1,
                    TENANT_CLIENT4,
                    TENANT_VIP4,
                    0,
                    &[8, 0, 0, 0, 0, 1, 0, 1],
                ),
            ),
            false,
        ),
        (
            "outer dst not one of our addresses",
            over4(
                0,
                Ipv4Addr::new(192, 168, 50, 2),
                TENANT_VXLAN_PORT,
                vxlan_i,
                100,
                &to_vip4,
            ),
            false,
        ),
        (
            "outer dport 4790",
            over4(0, UNDERLAY_HOST4, 4790, vxlan_i, 100, &to_vip4),
            false,
        ),
        (
            "vxlan i-flag clear",
            over4(0, UNDERLAY_HOST4, TENANT_VXLAN_PORT, 0, 100, &to_vip4),
            false,
        ),
        (
            "outer tcp to port 4789",
            v4(
                0,
                tcp,
                GATEWAY4,
                UNDERLAY_HOST4,
                0,
                &vxlan(TENANT_VXLAN_PORT, vxlan_i, 100, &to_vip4),
            ),
            false,
        ),
        (
            "outer first fragment",
            v4(
                0,
                udp,
                GATEWAY4,
                UNDERLAY_HOST4,
                0x2000,
                &vxlan(TENANT_VXLAN_PORT, vxlan_i, 100, &to_vip4),
            ),
            false,
        ),
        (
            "inner vlan-tagged frame",
            tenant(
                100,
                &v4(1, tcp, TENANT_CLIENT4, TENANT_VIP4, 0, &ports(40000, 80)),
            ),
            false,
        ),
        (
            "inner ipv4 first fragment",
            tenant(
                100,
                &v4(
                    0,
                    tcp,
                    TENANT_CLIENT4,
                    TENANT_VIP4,
                    0x2000,
                    &ports(40000, 80),
                ),
            ),
            false,
        ),
        (
            "inner ipv4 later fragment",
            tenant(
                100,
                &v4(0, tcp, TENANT_CLIENT4, TENANT_VIP4, 185, &ports(40000, 80)),
            ),
            false,
        ),
        (
            "inner ipv6 after hop-by-hop",
            over6(
                100,
                &v6(
                    tcp,
                    tenant_client6(),
                    tenant_vip6(),
                    &[(0u8, vec![0u8, 0, 1, 4, 0, 0, 0, 0])],
                    &ports(40000, 80),
                ),
            ),
            false,
        ),
        (
            "plain tcp to 10.0.0.5:80 (the tenant address in the underlay)",
            v4(0, tcp, CLIENT4, TENANT_VIP4, 0, &ports(40000, 80)),
            false,
        ),
        (
            "plain tcp to [fd00::5]:80",
            v6(tcp, client6(), tenant_vip6(), &[], &ports(40000, 80)),
            false,
        ),
        (
            "icmp to 10.0.0.5 in the underlay",
            v4(0, 1, CLIENT4, TENANT_VIP4, 0, &[8, 0, 0, 0, 0, 1, 0, 1]),
            false,
        ),
        (
            "truncated: cut inside the inner ip header",
            claimed[..inner_at + 14 + 12].to_vec(),
            false,
        ),
        (
            "truncated: cut inside the inner ports",
            claimed[..inner_at + 14 + 20 + 3].to_vec(),
            false,
        ),
        (
            "truncated: cut inside the inner ethernet header",
            claimed[..inner_at + 10].to_vec(),
            false,
        ),
    ];
    let mut wrong = Vec::new();
    for (what, frame, owned) in &cases {
        let got = steer
            .classify(frame)
            .unwrap_or_else(|e| panic!("{run}, {what}: {e}"));
        if got != *owned {
            wrong.push(format!("{what}: steered={got}, want {owned}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{run}: wrong decisions:\n{}",
        wrong.join("\n")
    );

    // A tenant's keys go with its VIP; the other tenant's, on the same address, stay.
    steer
        .set_vips(&[tenant_key(tenant4, 80, Protocol::Tcp, 200, 0)])
        .expect("vni 200 only");
    assert!(
        !steer.classify(&claimed).expect("run"),
        "{run}: vni 100's removed VIP is no longer steered"
    );
    assert!(
        steer.classify(&tenant(200, &to_vip4)).expect("run"),
        "{run}: vni 200's VIP still is"
    );
    // Without host addresses no VXLAN frame is looked into.
    steer.set_host_addresses(&[]).expect("no host addresses");
    assert!(
        !steer.classify(&tenant(200, &to_vip4)).expect("run"),
        "{run}: vxlan to an address that is not ours"
    );
}
