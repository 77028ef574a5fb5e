//! The tables of tenant VIPs (issue 23): two tenants and the underlay on one address, each
//! found only in its own address space, their backends at their VTEPs.

use crate::Tables;
use crate::hash::{FlowKey, addr_to_u128, zone_of};

const CONFIG: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[vip]]
name = "underlay"
address = "10.0.0.5"
port = 80
mode = "dr"
backend = [{ address = "10.1.0.11" }]

[[vip]]
name = "t100"
address = "10.0.0.5"
port = 80
tenant_vni = 100
mode = "tunnel"
tunnel = "vxlan"
backend = [{ address = "10.1.0.11", vtep = "192.168.50.11" }]

[[vip]]
name = "t200"
address = "10.0.0.5"
port = 0
tenant_vni = 200
mode = "tunnel"
tunnel = "vxlan"
backend = [{ address = "10.1.0.11", vtep = "192.168.50.21" }]
"#;

fn a(s: &str) -> u128 {
    addr_to_u128(s.parse().unwrap())
}

#[test]
fn each_address_space_finds_only_its_own_vip() {
    let c = testkit::unit::parse(CONFIG);
    let t = Tables::build(&c, &|_, _| true, 1).expect("tables");
    let (vip, tcp) = (a("10.0.0.5"), 6);
    assert!(t.has_tenants());
    assert_eq!(t.vip_lookup(vip, 80, tcp), Some(0));
    assert_eq!(
        t.vip_lookup(vip, 81, tcp),
        None,
        "tenant 200's port-0 VIP is not the underlay's"
    );
    assert_eq!(t.tenant_vip(zone_of(Some(100)), vip, 80, tcp), Some(1));
    assert_eq!(t.tenant_vip(zone_of(Some(100)), vip, 81, tcp), None);
    assert_eq!(t.tenant_vip(zone_of(Some(200)), vip, 81, tcp), Some(2));
    assert_eq!(t.tenant_vip(zone_of(Some(300)), vip, 80, tcp), None);
    assert_eq!(t.vip_by_address(vip), Some(0));
    // The datapath sends to the VTEPs; the tenant address is the config's.
    assert_eq!(t.backends[1].address, a("192.168.50.11"));
    assert_eq!(t.backends[2].address, a("192.168.50.21"));
    assert_eq!(t.backends[0].address, a("10.1.0.11"));
    assert_eq!(t.backend_slot(1, a("192.168.50.11"), 80), Some(1));
    let key = |zone| FlowKey {
        src: a("198.51.100.7"),
        dst: vip,
        sport: 40000,
        dport: 80,
        proto: tcp,
        v6: false,
        zone,
    };
    assert_eq!(t.vip_of_key(&key(0)), Some(0));
    assert_eq!(t.vip_of_key(&key(zone_of(Some(100)))), Some(1));
    assert_eq!(t.vip_of_key(&key(zone_of(Some(200)))), Some(2));
    assert_ne!(
        key(0),
        key(zone_of(Some(100))),
        "the zone tells the flows apart"
    );
    assert_eq!(zone_of(Some(0)) & 0x00ff_ffff, 0);
    assert_ne!(zone_of(Some(0)), 0, "VNI 0 is a tenant's too");
}

#[test]
fn the_fingerprint_tells_the_tenants_apart() {
    let c = testkit::unit::parse(CONFIG);
    let t = Tables::build(&c, &|_, _| true, 1).expect("tables");
    let moved = CONFIG.replace("tenant_vni = 200", "tenant_vni = 201");
    let c2 = testkit::unit::parse(&moved);
    let t2 = Tables::build(&c2, &|_, _| true, 1).expect("tables");
    assert_ne!(t.fingerprint(), t2.fingerprint());
}

/// Issue 42: tenants reuse addresses, so the zone is part of every persistence key and
/// backend token: two tenants' VIPs on one address and port, with backends at one tenant
/// address, share neither a persistence salt nor a token (one tenant's clients could
/// otherwise pin or probe the other's).
#[test]
fn tenants_share_no_persistence_salt_or_token() {
    let text = CONFIG
        .replace("port = 0\ntenant_vni = 200", "port = 80\ntenant_vni = 200")
        .replace(
            "tenant_vni = 100\n",
            "tenant_vni = 100\npersistence = \"60s\"\n",
        )
        .replace(
            "tenant_vni = 200\n",
            "tenant_vni = 200\npersistence = \"60s\"\n",
        );
    let c = testkit::unit::parse(&text);
    let t = Tables::build(&c, &|_, _| true, 1).expect("tables");
    let (p100, p200) = (
        t.vips[1].persistence.expect("t100 persistent"),
        t.vips[2].persistence.expect("t200 persistent"),
    );
    assert_ne!(p100.salt, p200.salt, "the zone is part of the salt");
    let client = a("198.51.100.7");
    assert_ne!(
        crate::persist::client_key(p100.salt, client, false, 32),
        crate::persist::client_key(p200.salt, client, false, 32),
        "one client address is two clients in two tenants"
    );
    let (b100, b200) = (
        &t.backends[t.vips[1].backends.start as usize],
        &t.backends[t.vips[2].backends.start as usize],
    );
    assert_ne!(b100.token, b200.token, "the zone is part of the token");
}
