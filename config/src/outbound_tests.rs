//! Validation tests of `outbound` and `outbound_drain` (`validate/outbound.rs`): what they
//! take, their default, and each config that cannot work, at its exact key path.

use super::*;
use crate::PortRange;
use std::time::Duration;

/// A VIP with `vip` lines (port 80 and mode "dr" unless they set them), and a second VIP (`other`
/// lines) on the same address.
fn file(vip: &str, other: &str) -> String {
    let mut vip = vip.to_string();
    if !vip.contains("port =") {
        vip.push_str("\nport = 80");
    }
    if !vip.contains("mode =") {
        vip.push_str("\nmode = \"dr\"");
    }
    format!(
        r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[vip]]
name = "web"
address = "192.0.2.10"
{vip}

[[vip.backend]]
address = "10.1.0.11"

[[vip]]
name = "other"
address = "192.0.2.10"
mode = "dr"
{other}

[[vip.backend]]
address = "10.1.0.12"
"#
    )
}

#[track_caller]
fn error_at(vip: &str, other: &str, key: &str, needle: &str) {
    super::tests::assert_error(&file(vip, other), key, needle);
}

#[test]
fn a_range_with_its_default_drain_and_one_with_its_own() {
    let c = Config::from_toml_str(&file("outbound = \"40000-49999\"", "port = 443"))
        .unwrap_or_else(|e| panic!("{e}"));
    let o = c.vips[0].outbound.expect("outbound");
    assert_eq!(o.range, PortRange::new(40000, 49999).unwrap());
    assert_eq!(o.drain, Duration::from_secs(120));
    assert_eq!(c.vips[1].outbound, None);
    let c = Config::from_toml_str(&file(
        "outbound = \"50000\"\noutbound_drain = \"0s\"",
        "port = 443",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let o = c.vips[0].outbound.expect("outbound");
    assert_eq!((o.range.first, o.range.last), (50000, 50000));
    assert_eq!(o.drain, Duration::ZERO);
}

#[test]
fn a_range_that_cannot_work_is_refused_at_its_key() {
    let key = "vip \"web\".outbound";
    error_at("outbound = \"4-3\"", "port = 443", key, "not a port range");
    error_at("outbound = \"x\"", "port = 443", key, "not a port range");
    error_at("outbound = \"100-2000\"", "port = 443", key, "below 1024");
    error_at("outbound = \"1-80\"", "port = 443", key, "below 1024");
    error_at(
        "outbound = \"40000-49999\"\nmode = \"nat\"",
        "port = 443",
        key,
        "needs mode",
    );
    error_at(
        "outbound = \"40000-49999\"\nport = 0",
        "port = 443",
        key,
        "port = 0",
    );
    error_at(
        "outbound_drain = \"10s\"",
        "port = 443",
        "vip \"web\".outbound_drain",
        "without outbound",
    );
    error_at(
        "outbound = \"40000-49999\"\noutbound_drain = \"2h\"",
        "port = 443",
        "vip \"web\".outbound_drain",
        "out of range",
    );
}

#[test]
fn a_range_that_holds_its_own_or_another_vips_port_is_refused() {
    let errs = Config::from_toml_str(&file("outbound = \"1024-2048\"\nport = 1500", "port = 443"))
        .expect_err("own port");
    assert!(
        errs.to_string().contains("holds the VIP's own port 1500"),
        "{errs}"
    );
    // The other VIP comes second: its port is in the first one's range.
    let errs = Config::from_toml_str(&file("outbound = \"40000-49999\"", "port = 45000"))
        .expect_err("other's port");
    assert!(
        errs.to_string()
            .contains("port 45000 is in vip \"web\"'s outbound"),
        "{errs}"
    );
    let errs = Config::from_toml_str(&file("outbound = \"40000-49999\"", "port = 0"))
        .expect_err("a port-0 VIP on the address");
    assert!(
        errs.to_string().contains("is in vip \"web\"'s outbound"),
        "{errs}"
    );
    let errs = Config::from_toml_str(&file(
        "outbound = \"40000-49999\"",
        "port = 443\noutbound = \"49000-50000\"",
    ))
    .expect_err("overlap");
    assert!(
        errs.to_string()
            .contains("overlaps vip \"web\"'s outbound 40000-49999"),
        "{errs}"
    );
    // Another protocol on the same address is another range.
    Config::from_toml_str(&file(
        "outbound = \"40000-49999\"",
        "port = 45000\nprotocol = \"udp\"",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
}
