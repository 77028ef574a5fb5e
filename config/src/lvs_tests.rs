//! Validation tests of the LVS keys (`validate/lvs.rs`): the values they take, their
//! defaults, and every combination that cannot work, each at its exact key path.

use super::*;
use std::time::Duration;

/// One VIP with `vip` and `backend` lines appended to its tables.
fn file(vip: &str, backend: &str) -> String {
    format!(
        r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
{vip}

[[vip.backend]]
address = "10.1.0.11"
{backend}

[[vip.backend]]
address = "10.1.0.12"
"#
    )
}

fn valid(vip: &str, backend: &str) -> Vip {
    let c = Config::from_toml_str(&file(vip, backend)).unwrap_or_else(|e| panic!("{e}"));
    c.vips[0].clone()
}

#[track_caller]
fn error_at(vip: &str, backend: &str, key: &str, needle: &str) {
    let errs = match Config::from_toml_str(&file(vip, backend)) {
        Ok(c) => panic!("expected an error at {key}, got {c:?}"),
        Err(e) => e,
    };
    let Some(e) = errs.find(key) else {
        panic!("no error at {key:?}; got:\n{errs}");
    };
    assert!(
        e.message.contains(needle),
        "{key}: {:?} lacks {needle:?}",
        e.message
    );
}

#[test]
fn defaults_are_off() {
    let v = valid("", "");
    assert!(v.scheduler_flags.is_empty());
    assert!(!v.hashes_port());
    assert_eq!(v.persistence, None);
    assert_eq!(v.persistence_netmask, 32);
    assert_eq!(v.overflow, Overflow::Drop);
    assert_eq!(v.slow_start, None);
    assert!(!v.udp_one_packet);
    let b = &v.backends[0];
    assert_eq!(
        (b.max_connections, b.resume_connections, b.slow_start),
        (None, None, None)
    );
}

#[test]
fn every_key_is_read() {
    let v = valid(
        "scheduler = \"sh\"\nscheduler_flags = [\"sh-port\"]\npersistence = \"300s\"\n\
         persistence_netmask = 24\noverflow = \"reset\"",
        "max_connections = 100\nresume_connections = 80\nslow_start = \"0s\"",
    );
    assert_eq!(v.scheduler_flags, [SchedulerFlag::ShPort]);
    assert!(v.hashes_port());
    assert_eq!(v.persistence, Some(Duration::from_secs(300)));
    assert_eq!(v.persistence_netmask, 24);
    assert_eq!(v.overflow, Overflow::Reset);
    let (b0, b1) = (&v.backends[0], &v.backends[1]);
    assert_eq!(
        (b0.max_connections, b0.resume_connections),
        (Some(100), Some(80))
    );
    // "0s": off for this backend.
    assert_eq!(b0.slow_start(&v), None);
    assert_eq!(b1.slow_start(&v), None);
    assert_eq!(b1.max_connections, None);
}

#[test]
fn resume_defaults_to_max() {
    let v = valid("", "max_connections = 5");
    assert_eq!(v.backends[0].resume_connections, Some(5));
}

#[test]
fn ipv6_netmask_takes_a_64() {
    let text = file("persistence = \"10s\"\npersistence_netmask = 64", "")
        .replace("192.0.2.10", "2001:db8::10")
        .replace("10.1.0.1", "2001:db8:1::1");
    let c = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.vips[0].persistence_netmask, 64);
    let text = file("persistence = \"10s\"", "")
        .replace("192.0.2.10", "2001:db8::10")
        .replace("10.1.0.1", "2001:db8:1::1");
    let c = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.vips[0].persistence_netmask, 128);
}

#[test]
fn udp_one_packet_on_a_udp_nat_vip() {
    let v = valid("protocol = \"udp\"\nudp_one_packet = true", "");
    assert!(v.udp_one_packet);
}

#[test]
fn conflicting_combinations_are_explained() {
    let key = |k: &str| format!("vip \"web\".{k}");
    error_at(
        "scheduler = \"sh\"\nhash = \"5-tuple\"",
        "",
        &key("hash"),
        "scheduler_flags = [\"sh-port\"]",
    );
    error_at(
        "scheduler = \"dh\"\nhash = \"3-tuple\"",
        "",
        &key("hash"),
        "destination address only",
    );
    error_at(
        "scheduler_flags = [\"sh-port\"]",
        "",
        &key("scheduler_flags[0]"),
        "needs scheduler = \"sh\"",
    );
    error_at(
        "scheduler = \"sh\"\nscheduler_flags = [\"dh-port\"]",
        "",
        &key("scheduler_flags[0]"),
        "needs scheduler = \"dh\"",
    );
    error_at(
        "scheduler = \"sh\"\nscheduler_flags = [\"sh-port\", \"sh-port\"]",
        "",
        &key("scheduler_flags[1]"),
        "twice",
    );
    error_at(
        "scheduler_flags = [\"sh-fast\"]",
        "",
        &key("scheduler_flags[0]"),
        "not one of sh-port, dh-port",
    );
    error_at(
        "persistence_netmask = 24",
        "",
        &key("persistence_netmask"),
        "without persistence",
    );
    error_at(
        "persistence = \"10s\"\npersistence_netmask = 33",
        "",
        &key("persistence_netmask"),
        "out of range 0..=32",
    );
    error_at(
        "persistence = \"0s\"",
        "",
        &key("persistence"),
        "out of range",
    );
    error_at(
        "overflow = \"queue\"",
        "",
        &key("overflow"),
        "not one of drop, reset, ignore",
    );
    error_at(
        "protocol = \"udp\"\noverflow = \"reset\"",
        "",
        &key("overflow"),
        "nothing to reset",
    );
    error_at(
        "udp_one_packet = true",
        "",
        &key("udp_one_packet"),
        "needs protocol = \"udp\"",
    );
    error_at(
        "protocol = \"udp\"\nudp_one_packet = true\nmode = \"fullnat\"\nsnat = [\"10.9.0.1\"]",
        "",
        &key("udp_one_packet"),
        "fullnat",
    );
    error_at(
        "scheduler = \"rr\"\nslow_start = \"10s\"",
        "",
        &key("slow_start"),
        "ignores weights",
    );
    error_at(
        "slow_start = \"2h\"",
        "",
        &key("slow_start"),
        "out of range",
    );
    let b = |k: &str| format!("vip \"web\".backend[0].{k}");
    error_at(
        "",
        "resume_connections = 3",
        &b("resume_connections"),
        "without max_connections",
    );
    error_at(
        "",
        "max_connections = 5\nresume_connections = 6",
        &b("resume_connections"),
        "out of range 1..=5",
    );
    error_at(
        "",
        "max_connections = 0",
        &b("max_connections"),
        "out of range",
    );
    error_at(
        "protocol = \"udp\"\nudp_one_packet = true",
        "max_connections = 5",
        &b("max_connections"),
        "udp_one_packet",
    );
    error_at(
        "scheduler = \"lc\"",
        "slow_start = \"5s\"",
        &b("slow_start"),
        "ignores weights",
    );
    error_at(
        "",
        "slow_start = \"500ms\"",
        &b("slow_start"),
        "shorter than 1s",
    );
    error_at("", "slow_start = \"2h\"", &b("slow_start"), "out of range");
    error_at(
        "slow_start = \"500ms\"",
        "",
        &key("slow_start"),
        "out of range",
    );
}

#[test]
fn slow_start_on_the_vip_and_a_backend_overriding_it() {
    let v = valid("slow_start = \"30s\"", "slow_start = \"5s\"");
    assert_eq!(v.slow_start, Some(Duration::from_secs(30)));
    assert_eq!(v.backends[0].slow_start(&v), Some(Duration::from_secs(5)));
    assert_eq!(v.backends[1].slow_start(&v), Some(Duration::from_secs(30)));
    let off = valid("slow_start = \"30s\"", "slow_start = \"0s\"");
    assert_eq!(off.backends[0].slow_start(&off), None, "0s turns it off");
    let own = valid("", "slow_start = \"10s\"");
    assert_eq!(
        own.backends[0].slow_start(&own),
        Some(Duration::from_secs(10))
    );
    assert_eq!(own.backends[1].slow_start(&own), None);
}
