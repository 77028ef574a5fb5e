//! Validation tests of `tenant_vni` and `vtep` (`validate/tenant.rs`): two tenants on one
//! address, the backend network's VNI defaulting to the tenant's, and each config that
//! cannot work, at its exact key path.

use super::*;

/// Two tenant VIPs on 10.0.0.5:80, `a` and `b` lines added to each, backends of the same
/// tenant address behind their own VTEPs (`ba` and `bb` added to each backend).
fn file(a: &str, ba: &str, b: &str, bb: &str) -> String {
    format!(
        r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[vip]]
name = "t100"
address = "10.0.0.5"
port = 80
mode = "tunnel"
tunnel = "vxlan"
{a}

[[vip.backend]]
address = "10.1.0.11"
{ba}

[[vip]]
name = "t200"
address = "10.0.0.5"
port = 80
mode = "tunnel"
tunnel = "vxlan"
{b}

[[vip.backend]]
address = "10.1.0.11"
{bb}
"#
    )
}

fn two_tenants() -> String {
    file(
        "tenant_vni = 100",
        "vtep = \"192.168.50.11\"",
        "tenant_vni = 200\nvni = 2200",
        "vtep = \"192.168.50.21\"",
    )
}

#[track_caller]
fn error_at(text: &str, key: &str, needle: &str) {
    super::tests::assert_error(text, key, needle);
}

#[test]
fn two_tenants_share_an_address_and_the_backend_vni_defaults_to_the_tenants() {
    let c = Config::from_toml_str(&two_tenants()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.vips[0].tenant_vni, Some(100));
    assert_eq!(c.vips[1].tenant_vni, Some(200));
    assert_eq!(
        c.vips[0].mode,
        Mode::Tunnel(Encap::Vxlan {
            port: 4789,
            vni: 100
        })
    );
    assert_eq!(
        c.vips[1].mode,
        Mode::Tunnel(Encap::Vxlan {
            port: 4789,
            vni: 2200
        })
    );
    let vtep: std::net::IpAddr = "192.168.50.11".parse().unwrap();
    assert_eq!(c.vips[0].backends[0].vtep, Some(vtep));
    assert_eq!(c.vips[0].backends[0].underlay(), vtep);
    assert_ne!(c.vips[0].zone(), c.vips[1].zone());
    assert_eq!(c.vips[0].zone() & 0xff_ffff, 100);
}

#[test]
fn the_same_vni_address_and_port_twice_is_refused() {
    let text = file(
        "tenant_vni = 100",
        "vtep = \"192.168.50.11\"",
        "tenant_vni = 100",
        "vtep = \"192.168.50.21\"",
    );
    error_at(&text, "vip \"t200\"", "overlaps vip \"t100\"");
}

#[test]
fn a_tenant_vip_and_an_underlay_vip_may_share_an_address() {
    let text = file("tenant_vni = 100", "vtep = \"192.168.50.11\"", "", "");
    let c = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.vips[1].tenant_vni, None);
    assert_eq!(c.vips[1].zone(), 0);
}

#[test]
fn tenant_vni_needs_vxlan() {
    let text = two_tenants().replacen("tunnel = \"vxlan\"", "tunnel = \"gue\"", 1);
    error_at(&text, "vip \"t100\".tenant_vni", "tunnel = \"vxlan\"");
    let text = two_tenants().replacen("mode = \"tunnel\"\ntunnel = \"vxlan\"", "mode = \"dr\"", 1);
    error_at(&text, "vip \"t100\".tenant_vni", "not mode \"dr\"");
}

#[test]
fn tenant_vni_is_24_bits() {
    let text = two_tenants().replacen("tenant_vni = 100", "tenant_vni = 16777216", 1);
    error_at(&text, "vip \"t100\".tenant_vni", "");
}

#[test]
fn a_tenant_backend_needs_its_vtep_and_others_take_none() {
    let text = file("tenant_vni = 100", "", "", "");
    error_at(&text, "vip \"t100\".backend[0].vtep", "missing");
    let text = file("", "vtep = \"192.168.50.11\"", "", "");
    error_at(&text, "vip \"t100\".backend[0].vtep", "without tenant_vni");
    let text = file("tenant_vni = 100", "vtep = \"224.0.0.1\"", "", "");
    error_at(&text, "vip \"t100\".backend[0].vtep", "cannot be a VTEP");
}

#[test]
fn two_backends_behind_one_vtep_and_port_are_ambiguous() {
    let text = format!(
        "{}\n[[vip.backend]]\naddress = \"10.1.0.12\"\nvtep = \"192.168.50.21\"\n",
        two_tenants()
    );
    error_at(&text, "vip \"t200\".backend[1].vtep", "ambiguous");
}

#[test]
fn outbound_is_not_for_tenants() {
    let text = two_tenants().replacen(
        "tenant_vni = 100",
        "tenant_vni = 100\noutbound = \"40000-40999\"",
        1,
    );
    error_at(&text, "vip \"t100\".outbound", "not valid with tenant_vni");
}
