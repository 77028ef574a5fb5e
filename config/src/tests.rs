//! Validation tests: each invalid config asserts the exact key path of its error.

use super::*;
use std::time::Duration;

/// A minimal valid file; tests append to it or replace parts of it.
const BASE: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80

[[vip.backend]]
address = "10.1.0.11"
"#;

fn errors(text: &str) -> ConfigErrors {
    match Config::from_toml_str(text) {
        Ok(c) => panic!("expected errors, got a valid config: {c:?}"),
        Err(e) => e,
    }
}

/// Asserts that validating `text` fails with an error at exactly `key` whose message
/// contains `needle`.
#[track_caller]
pub(super) fn assert_error(text: &str, key: &str, needle: &str) {
    let errs = errors(text);
    let Some(e) = errs.find(key) else {
        panic!("no error at {key:?}; got:\n{errs}");
    };
    assert!(
        e.message.contains(needle),
        "error at {key:?} is {:?}, expected it to contain {needle:?}",
        e.message
    );
}

#[test]
fn base_is_valid_with_defaults() {
    let c = Config::from_toml_str(BASE).expect("valid");
    assert_eq!(c.appliance.name, "lb1");
    assert_eq!(c.api.socket, std::path::PathBuf::from(DEFAULT_SOCKET));
    assert_eq!(c.api.metrics, Some(DEFAULT_METRICS.parse().unwrap()));
    assert!(c.bgp.is_none());
    let v = &c.vips[0];
    assert_eq!(v.mode, Mode::Nat);
    assert_eq!(v.scheduler, Scheduler::Maglev);
    assert_eq!(v.hash, HashFields::FiveTuple);
    assert_eq!(v.protocol, Protocol::Tcp);
    assert_eq!(
        v.backends[0].port, 80,
        "backend port defaults to the VIP port"
    );
    assert_eq!(v.backends[0].weight, 100);
    assert_eq!(v.backends[0].state, BackendState::Active);
    assert_eq!(c.appliance.maglev_table_size, None);
    assert_eq!(c.appliance.health_batch, Duration::from_millis(50));
    assert_eq!(c.appliance.health_batch_delay, Duration::from_millis(10));
    assert_eq!(c.metrics.per_backend, PerBackend::All);
    assert!(c.vips.iter().all(|v| v.maglev_table_size == 1021));
}

#[test]
fn shipped_example_is_valid() {
    let text = include_str!("../../examples/sluice.toml");
    let c = Config::from_toml_str(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.vips.len(), 4);
    assert_eq!(c.health_checks.len(), 2);
    assert_eq!(c.bgp.as_ref().map(|b| b.peers.len()), Some(2));
    let dns = c.vip("dns").expect("dns vip");
    assert_eq!(
        dns.mode,
        Mode::Tunnel(Encap::Vxlan {
            port: 4789,
            vni: 100
        })
    );
    assert_eq!(dns.communities, vec![Community::Standard(65010, 53)]);
    let web = c.vip("web").expect("web vip");
    assert_eq!(web.backends[0].port, 8080);
    assert_eq!(web.backends[2].state, BackendState::Drain);
    let check = c.health_check("web").expect("web check");
    match &check.kind {
        CheckKind::Http(h) => {
            assert_eq!(h.path, "/healthz");
            assert_eq!(h.expect_status, vec![(200, 200)]);
        }
        other => panic!("unexpected kind {other:?}"),
    }
}

#[test]
fn missing_appliance_section() {
    let text = BASE.replace("[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n", "");
    assert_error(&text, "appliance", "required");
}

#[test]
fn missing_vip() {
    assert_error(
        "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n",
        "vip",
        "at least one [[vip]]",
    );
}

#[test]
fn empty_interfaces() {
    let text = BASE.replace("interfaces = [\"eth0\"]", "interfaces = []");
    assert_error(&text, "appliance.interfaces", "at least one");
}

#[test]
fn interface_listed_twice() {
    let text = BASE.replace(
        "interfaces = [\"eth0\"]",
        "interfaces = [\"eth0\", \"eth0\"]",
    );
    assert_error(&text, "appliance.interfaces[1]", "listed twice");
}

#[test]
fn unknown_key_in_appliance() {
    let text = BASE.replace("name = \"lb1\"", "name = \"lb1\"\ncolour = \"blue\"");
    assert_error(&text, "appliance.colour", "unknown key");
}

#[test]
fn unknown_top_level_section() {
    let text = format!("{BASE}\n[logging]\nlevel = \"debug\"\n");
    assert_error(&text, "logging", "unknown key");
}

#[test]
fn unknown_key_in_backend() {
    let text = format!("{BASE}wieght = 3\n");
    assert_error(&text, "vip \"web\".backend[0].wieght", "unknown key");
}

#[test]
fn unknown_health_check() {
    let text = BASE.replace("port = 80\n", "port = 80\nhealth_check = \"nope\"\n");
    assert_error(
        &text,
        "vip \"web\".health_check",
        "\"nope\" is not a defined",
    );
}

#[test]
fn duplicate_vip_name() {
    let text = format!(
        "{BASE}\n[[vip]]\nname = \"web\"\naddress = \"192.0.2.11\"\nport = 80\n[[vip.backend]]\naddress = \"10.1.0.12\"\n"
    );
    assert_error(&text, "vip \"web\"", "used twice");
}

#[test]
fn duplicate_vip_address() {
    let text = format!(
        "{BASE}\n[[vip]]\nname = \"web2\"\naddress = \"192.0.2.10\"\nport = 80\n[[vip.backend]]\naddress = \"10.1.0.12\"\n"
    );
    assert_error(&text, "vip \"web2\"", "overlaps vip \"web\"");
}

#[test]
fn duplicate_backend() {
    let text = format!("{BASE}[[vip.backend]]\naddress = \"10.1.0.11\"\n");
    let errs = errors(&text);
    let e = errs.find("vip \"web\"").expect("error at vip \"web\"");
    assert_eq!(
        e.to_string(),
        "vip \"web\": backend 10.1.0.11:80 listed twice"
    );
}

#[test]
fn backend_family_mismatch() {
    let text = BASE.replace("address = \"10.1.0.11\"", "address = \"2001:db8::11\"");
    assert_error(
        &text,
        "vip \"web\".backend[0].address",
        "is IPv6 but the VIP",
    );
}

#[test]
fn tunnel_family_may_differ() {
    let text = BASE
        .replace(
            "port = 80\n",
            "port = 80\nmode = \"tunnel\"\ntunnel = \"ipip\"\n",
        )
        .replace("address = \"10.1.0.11\"", "address = \"2001:db8::11\"");
    Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn tunnel_without_tunnel_mode() {
    let text = BASE.replace("port = 80\n", "port = 80\ntunnel = \"vxlan\"\n");
    assert_error(&text, "vip \"web\".tunnel", "only with mode = \"tunnel\"");
}

#[test]
fn tunnel_mode_without_encapsulation() {
    let text = BASE.replace("port = 80\n", "port = 80\nmode = \"tunnel\"\n");
    assert_error(&text, "vip \"web\".tunnel", "missing");
}

#[test]
fn fullnat_without_snat() {
    let text = BASE.replace("port = 80\n", "port = 80\nmode = \"fullnat\"\n");
    assert_error(&text, "vip \"web\".snat", "needs a snat address pool");
}

#[test]
fn snat_family_mismatch() {
    let text = BASE.replace(
        "port = 80\n",
        "port = 80\nmode = \"fullnat\"\nsnat = [\"10.1.0.10\", \"2001:db8::1\"]\n",
    );
    assert_error(&text, "vip \"web\".snat[1]", "is IPv6 but the VIP is IPv4");
}

#[test]
fn snat_without_fullnat() {
    let text = BASE.replace("port = 80\n", "port = 80\nsnat = [\"10.1.0.10\"]\n");
    assert_error(&text, "vip \"web\".snat", "only with mode = \"fullnat\"");
}

#[test]
fn weight_out_of_range() {
    let text = format!("{BASE}weight = 70000\n");
    assert_error(
        &text,
        "vip \"web\".backend[0].weight",
        "70000 is out of range 0..=65535",
    );
}

#[test]
fn port_zero_needs_dr_or_tunnel() {
    let text = BASE.replace("port = 80\n", "port = 0\n");
    assert_error(&text, "vip \"web\".port", "all ports");
    let dr = BASE.replace("port = 80\n", "port = 0\nmode = \"dr\"\n");
    Config::from_toml_str(&dr).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn dr_cannot_map_ports() {
    let text = BASE.replace("port = 80\n", "port = 80\nmode = \"dr\"\n") + "port = 8080\n";
    assert_error(&text, "vip \"web\".backend[0].port", "cannot map ports");
}

#[test]
fn backend_port_zero() {
    let text = format!("{BASE}port = 0\n");
    assert_error(
        &text,
        "vip \"web\".backend[0].port",
        "out of range 1..=65535",
    );
}

#[test]
fn vip_port_out_of_range() {
    let text = BASE.replace("port = 80\n", "port = 65536\n");
    assert_error(&text, "vip \"web\".port", "65536 is out of range");
}

#[test]
fn wrong_type_names_the_value() {
    let text = BASE.replace("port = 80\n", "port = \"eighty\"\n");
    assert_error(
        &text,
        "vip \"web\".port",
        "expected an integer, found \"eighty\"",
    );
}

#[test]
fn unknown_scheduler_and_mode() {
    let text = BASE.replace(
        "port = 80\n",
        "port = 80\nscheduler = \"fastest\"\nmode = \"magic\"\n",
    );
    assert_error(
        &text,
        "vip \"web\".scheduler",
        "\"fastest\" is not one of maglev, rr",
    );
    assert_error(&text, "vip \"web\".mode", "\"magic\" is not one of");
}

#[test]
fn bad_address() {
    let text = BASE.replace("address = \"192.0.2.10\"", "address = \"192.0.2.300\"");
    assert_error(
        &text,
        "vip \"web\".address",
        "\"192.0.2.300\" is not an IPv4 or IPv6 address",
    );
}

#[test]
fn health_check_key_of_other_kind() {
    let text = format!("[[health_check]]\nname = \"t\"\nkind = \"tcp\"\npath = \"/x\"\n{BASE}");
    assert_error(
        &text,
        "health_check \"t\".path",
        "not valid for kind \"tcp\"",
    );
}

#[test]
fn health_check_timeout_longer_than_interval() {
    let text = format!(
        "[[health_check]]\nname = \"t\"\nkind = \"tcp\"\ninterval = \"1s\"\ntimeout = \"2s\"\n{BASE}"
    );
    assert_error(
        &text,
        "health_check \"t\".timeout",
        "longer than the interval",
    );
}

#[test]
fn health_check_bad_duration() {
    let text =
        format!("[[health_check]]\nname = \"t\"\nkind = \"tcp\"\ninterval = \"often\"\n{BASE}");
    assert_error(
        &text,
        "health_check \"t\".interval",
        "\"often\" is not a duration",
    );
}

#[test]
fn health_check_rise_zero() {
    let text = format!("[[health_check]]\nname = \"t\"\nkind = \"tcp\"\nrise = 0\n{BASE}");
    assert_error(
        &text,
        "health_check \"t\".rise",
        "0 is out of range 1..=100",
    );
}

#[test]
fn health_check_status_range() {
    let ok = format!(
        "[[health_check]]\nname = \"h\"\nkind = \"http\"\nexpect_status = \"200-299\"\n{BASE}"
    );
    let c = Config::from_toml_str(&ok).unwrap_or_else(|e| panic!("{e}"));
    match &c.health_checks[0].kind {
        CheckKind::Http(h) => assert_eq!(h.expect_status, vec![(200, 299)]),
        other => panic!("unexpected {other:?}"),
    }
    let bad = ok.replace("200-299", "299-200");
    assert_error(&bad, "health_check \"h\".expect_status", "\"299-200\"");
}

#[test]
fn udp_check_needs_payload() {
    let text = format!("[[health_check]]\nname = \"u\"\nkind = \"udp\"\n{BASE}");
    assert_error(&text, "health_check \"u\".payload", "missing");
}

#[test]
fn bgp_hold_time_rules() {
    let text = format!(
        "{BASE}\n[bgp]\nasn = 65010\nrouter_id = \"10.0.0.10\"\n[[bgp.peer]]\naddress = \"10.0.0.1\"\nasn = 65000\nhold_time = \"2s\"\n"
    );
    assert_error(&text, "bgp.peer[0].hold_time", "0 or at least 3s");
}

#[test]
fn bgp_router_id_must_be_ipv4() {
    let text = format!(
        "{BASE}\n[bgp]\nasn = 65010\nrouter_id = \"2001:db8::1\"\n[[bgp.peer]]\naddress = \"10.0.0.1\"\nasn = 65000\n"
    );
    assert_error(&text, "bgp.router_id", "not a usable BGP identifier");
}

#[test]
fn bgp_as_trans_and_missing_peer() {
    let text = format!("{BASE}\n[bgp]\nasn = 23456\nrouter_id = \"10.0.0.10\"\n");
    assert_error(&text, "bgp.asn", "AS_TRANS");
    assert_error(&text, "bgp.peer", "at least one [[bgp.peer]]");
}

#[test]
fn bgp_duplicate_peer_and_bad_community() {
    let text = format!(
        "{BASE}\n[bgp]\nasn = 65010\nrouter_id = \"10.0.0.10\"\ncommunities = [\"65010:x\"]\n[[bgp.peer]]\naddress = \"10.0.0.1\"\nasn = 65000\n[[bgp.peer]]\naddress = \"10.0.0.1\"\nasn = 65001\n"
    );
    assert_error(&text, "bgp.peer[1].address", "listed twice");
    assert_error(&text, "bgp.communities[0]", "not a community");
}

#[test]
fn maglev_table_size_must_be_prime() {
    let text = BASE.replace(
        "interfaces = [\"eth0\"]",
        "interfaces = [\"eth0\"]\nmaglev_table_size = 65536",
    );
    assert_error(&text, "appliance.maglev_table_size", "not a prime");
}

#[test]
fn api_listen_needs_token() {
    let text = format!("{BASE}\n[api]\nlisten = \"127.0.0.1:9400\"\nplain_tcp = true\n");
    assert_error(&text, "api.token_file", "bearer token");
}

#[test]
fn api_listen_serves_tls_unless_plain_tcp_is_asked_for() {
    let api = |keys: &str| format!("{BASE}\n[api]\ntoken_file = \"/etc/sluice/token\"\n{keys}\n");
    let listen = "listen = \"127.0.0.1:9400\"\n";
    assert_error(&api(listen), "api.tls_cert", "plain_tcp = true");
    let c = Config::from_toml_str(&api(&format!(
        "{listen}tls_cert = \"/etc/sluice/api.pem\"\ntls_key = \"/etc/sluice/api.key\""
    )))
    .unwrap_or_else(|e| panic!("{e}"));
    let tls = c.api.tls.expect("tls");
    assert_eq!(tls.cert, std::path::PathBuf::from("/etc/sluice/api.pem"));
    assert_eq!(tls.key, std::path::PathBuf::from("/etc/sluice/api.key"));
    let c = Config::from_toml_str(&api(&format!("{listen}plain_tcp = true")))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((c.api.listen.is_some(), c.api.tls), (true, None));
    assert_error(
        &api(&format!("{listen}tls_cert = \"/c.pem\"")),
        "api.tls_key",
        "private key",
    );
    assert_error(
        &api(&format!("{listen}tls_key = \"/k.pem\"")),
        "api.tls_cert",
        "certificate chain",
    );
    assert_error(
        &api(&format!(
            "{listen}tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\nplain_tcp = true"
        )),
        "api.plain_tcp",
        "not both",
    );
    assert_error(
        &api("tls_cert = \"/c.pem\""),
        "api.tls_cert",
        "without api.listen",
    );
    assert_error(
        &api("plain_tcp = true"),
        "api.plain_tcp",
        "without api.listen",
    );
}

#[test]
fn several_errors_are_all_reported() {
    let text = include_str!("../../examples/invalid/many-errors.toml");
    let errs = errors(text);
    let keys: Vec<&str> = errs.iter().map(|e| e.key.as_str()).collect();
    for expected in [
        "appliance.name",
        "appliance.interfaces",
        "vip \"web\".scheduler",
        "vip \"web\".health_check",
        "vip \"web\".snat",
        "vip \"web\".backend[0].weight",
    ] {
        assert!(keys.contains(&expected), "missing {expected:?} in {keys:?}");
    }
    assert_eq!(errs.len(), 6, "exactly these errors:\n{errs}");
}

#[test]
fn environment_overrides_scalars() {
    let dir = std::env::temp_dir().join(format!("sluice-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("env.toml");
    std::fs::write(&path, BASE).unwrap();
    let env = vec![
        ("SLUICE_APPLIANCE__NAME".to_string(), "lb2".to_string()),
        (
            "SLUICE_APPLIANCE__CONNTRACK_CAPACITY".to_string(),
            "4096".to_string(),
        ),
        // No `__`: not a key, ignored rather than reported as unknown.
        ("SLUICE_LOG".to_string(), "debug".to_string()),
        ("OTHER__THING".to_string(), "x".to_string()),
    ];
    let c = load_with_env(&path, env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.appliance.name, "lb2");
    assert_eq!(c.appliance.conntrack_capacity, 4096);

    let bad = vec![(
        "SLUICE_APPLIANCE__RING_SIZE".to_string(),
        "1000".to_string(),
    )];
    let err = load_with_env(&path, bad).expect_err("1000 is not a power of two");
    let errs = err.errors().expect("validation errors");
    assert!(errs.find("appliance.ring_size").is_some(), "{errs}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn syntax_error_is_one_line_with_position() {
    let err = Config::from_toml_str("[appliance\nname = 1\n").expect_err("not toml");
    let msg = err.to_string();
    assert!(msg.contains("line 1, column"), "{msg}");
    assert!(!msg.contains('\n'), "one line: {msg:?}");
}

#[test]
fn bgp_md5_password_length_is_checked() {
    let peer = |pw: &str| {
        format!(
            "{BASE}\n[bgp]\nasn = 65010\nrouter_id = \"10.0.0.10\"\n[[bgp.peer]]\naddress = \"10.0.0.1\"\nasn = 65000\npassword = \"{pw}\"\n"
        )
    };
    let c = Config::from_toml_str(&peer("s3cret")).expect("a 6-byte password is valid");
    let bgp = c.bgp.as_ref().expect("bgp section");
    assert_eq!(bgp.peers[0].password.as_deref(), Some("s3cret"));
    Config::from_toml_str(&peer(&"k".repeat(80))).expect("80 bytes is the kernel maximum");
    assert_error(&peer(""), "bgp.peer[0].password", "is 0 bytes");
    assert_error(
        &peer(&"k".repeat(81)),
        "bgp.peer[0].password",
        "1 to 80 bytes",
    );
}

/// `[bgp]` with `global` lines, then two peers with `p0` and `p1` lines.
fn bgp_text(global: &str, p0: &str, p1: &str) -> String {
    format!(
        "{BASE}\n[bgp]\nasn = 65010\nrouter_id = \"10.0.0.10\"\n{global}\n\
         [[bgp.peer]]\naddress = \"10.0.0.1\"\nasn = 65000\n{p0}\n\
         [[bgp.peer]]\naddress = \"10.0.0.2\"\nasn = 65000\n{p1}\n"
    )
}

#[test]
fn bgp_bfd_is_off_unless_asked_and_peers_override_the_default_key_by_key() {
    let c = Config::from_toml_str(&bgp_text("", "", "")).expect("valid");
    let b = c.bgp.as_ref().expect("bgp");
    assert!(b.peers.iter().all(|p| p.bfd.is_none()));
    assert_eq!(
        b.graceful_restart, None,
        "graceful restart is off by default"
    );

    let c = Config::from_toml_str(&bgp_text(
        "bfd = { interval = \"100ms\", multiplier = 5 }",
        "bfd = { multiplier = 3 }",
        "bfd = { enabled = false }",
    ))
    .expect("valid");
    let b = c.bgp.as_ref().expect("bgp");
    assert_eq!(
        b.peers[0].bfd,
        Some(Bfd {
            interval: std::time::Duration::from_millis(100),
            multiplier: 3
        }),
        "interval from [bgp], multiplier from the peer"
    );
    assert_eq!(b.peers[1].bfd, None, "a peer can turn the default off");

    let c = Config::from_toml_str(&bgp_text("", "bfd = { enabled = true }", "")).expect("valid");
    let b = c.bgp.as_ref().expect("bgp");
    assert_eq!(
        b.peers[0].bfd,
        Some(Bfd {
            interval: std::time::Duration::from_millis(300),
            multiplier: 3
        })
    );
    assert_eq!(b.peers[1].bfd, None);
}

#[test]
fn bgp_bfd_ranges_name_their_key() {
    assert_error(
        &bgp_text("bfd = { interval = \"5ms\" }", "", ""),
        "bgp.bfd.interval",
        "out of range",
    );
    assert_error(
        &bgp_text("", "", "bfd = { interval = \"11s\" }"),
        "bgp.peer[1].bfd.interval",
        "out of range",
    );
    assert_error(
        &bgp_text("", "bfd = { multiplier = 0 }", ""),
        "bgp.peer[0].bfd.multiplier",
        "out of range 1..=255",
    );
    assert_error(
        &bgp_text("", "bfd = { multiplier = 256 }", ""),
        "bgp.peer[0].bfd.multiplier",
        "out of range 1..=255",
    );
    assert_error(
        &bgp_text("", "bfd = { enabled = \"yes\" }", ""),
        "bgp.peer[0].bfd.enabled",
        "true or false",
    );
    assert_error(
        &bgp_text("", "bfd = { intervall = \"100ms\" }", ""),
        "bgp.peer[0].bfd.intervall",
        "unknown key",
    );
    assert_error(
        &bgp_text("", "bfd = true", ""),
        "bgp.peer[0].bfd",
        "a table",
    );
    Config::from_toml_str(&bgp_text(
        "bfd = { interval = \"10ms\", multiplier = 255 }",
        "bfd = { interval = \"10s\", multiplier = 1 }",
        "",
    ))
    .expect("both ends of the ranges are valid");
}

#[test]
fn bgp_graceful_restart() {
    let c = Config::from_toml_str(&bgp_text(
        "graceful_restart = { enabled = true, restart_time = \"45s\" }",
        "",
        "",
    ))
    .expect("valid");
    let b = c.bgp.as_ref().expect("bgp");
    assert_eq!(b.graceful_restart, Some(std::time::Duration::from_secs(45)));
    let c = Config::from_toml_str(&bgp_text("graceful_restart = { enabled = false }", "", ""))
        .expect("valid");
    assert_eq!(c.bgp.as_ref().expect("bgp").graceful_restart, None);
    let c = Config::from_toml_str(&bgp_text("graceful_restart = { }", "", "")).expect("valid");
    assert_eq!(
        c.bgp.as_ref().expect("bgp").graceful_restart,
        Some(std::time::Duration::from_secs(30)),
        "a table without keys enables it with the 30 s default"
    );
    assert_error(
        &bgp_text("graceful_restart = { restart_time = \"4096s\" }", "", ""),
        "bgp.graceful_restart.restart_time",
        "out of range",
    );
    assert_error(
        &bgp_text("graceful_restart = { restart_time = \"1500ms\" }", "", ""),
        "bgp.graceful_restart.restart_time",
        "whole number of seconds",
    );
    assert_error(
        &bgp_text("graceful_restart = { restart = \"30s\" }", "", ""),
        "bgp.graceful_restart.restart",
        "unknown key",
    );
}

#[test]
fn flow_cache_is_on_by_default_and_switches_off() {
    let c = Config::from_toml_str(BASE).expect("base");
    assert!(c.appliance.flow_cache);
    let off = BASE.replace(
        "interfaces = [\"eth0\"]",
        "interfaces = [\"eth0\"]\nflow_cache = false",
    );
    assert!(
        !Config::from_toml_str(&off)
            .expect("off")
            .appliance
            .flow_cache
    );
    let bad = BASE.replace(
        "interfaces = [\"eth0\"]",
        "interfaces = [\"eth0\"]\nflow_cache = \"yes\"",
    );
    assert_error(&bad, "appliance.flow_cache", "");
}

/// `BASE` with its VIP in `mode` (and extra VIP keys), plus checks "h" (http) and "u" (udp).
fn via_vip_config(mode: &str, extra: &str) -> String {
    let checks = "[[health_check]]\nname = \"h\"\nkind = \"http\"\n\n\
                  [[health_check]]\nname = \"u\"\nkind = \"udp\"\npayload = \"x\"\n";
    let vip = format!("port = 80\nmode = \"{mode}\"\n{extra}\n");
    format!("{checks}{}", BASE.replacen("port = 80\n", &vip, 1))
}

#[test]
fn health_via_vip_defaults_on_for_dr_and_tunnel_with_a_check() {
    let vip = |mode: &str, extra: &str| {
        Config::from_toml_str(&via_vip_config(mode, extra))
            .expect("valid")
            .vips[0]
            .clone()
    };
    assert!(vip("dr", "health_check = \"h\"").health_via_vip);
    assert!(vip("tunnel", "tunnel = \"ipip\"\nhealth_check = \"h\"").health_via_vip);
    assert!(
        !vip("dr", "").health_via_vip,
        "no check, nothing to probe with"
    );
    assert!(!vip("nat", "health_check = \"h\"").health_via_vip);
    assert!(!vip("dr", "health_check = \"h\"\nhealth_via_vip = false").health_via_vip);
    let udp = vip("dr", "protocol = \"udp\"\nhealth_check = \"u\"");
    assert!(udp.health_via_vip);
}

#[test]
fn health_via_vip_is_refused_where_it_cannot_prove_anything() {
    for mode in ["nat", "fullnat"] {
        let extra = match mode {
            "nat" => "health_check = \"h\"\nhealth_via_vip = true",
            _ => "health_check = \"h\"\nhealth_via_vip = true\nsnat = [\"10.1.0.1\"]",
        };
        assert_error(
            &via_vip_config(mode, extra),
            "vip \"web\".health_via_vip",
            "needs mode \"dr\" or \"tunnel\"",
        );
    }
    assert_error(
        &via_vip_config("dr", "health_via_vip = true"),
        "vip \"web\".health_via_vip",
        "needs a health_check",
    );
    assert_error(
        &via_vip_config(
            "dr",
            "protocol = \"udp\"\nhealth_check = \"h\"\nhealth_via_vip = true",
        ),
        "vip \"web\".health_via_vip",
        "use a udp check or set health_via_vip = false",
    );
}

#[test]
fn a_vip_ring_size_is_its_own_or_the_appliances_and_balanced_for_its_pool() {
    let own = BASE.replace("port = 80\n", "port = 80\nmaglev_table_size = 1009\n");
    let c = Config::from_toml_str(&own).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.vips[0].maglev_table_size, 1009);
    let wide = BASE.replace(
        "interfaces = [\"eth0\"]",
        "interfaces = [\"eth0\"]\nmaglev_table_size = 65537",
    );
    let c = Config::from_toml_str(&wide).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.vips[0].maglev_table_size, 65537);
    // Unset, the size follows the pool: 1021 up to 10 backends, 4093 from 11, whatever
    // the backends' weights or states (the config alone decides it).
    let mut ten = BASE.to_string();
    for i in 12..21 {
        ten.push_str(&format!(
            "\n[[vip.backend]]\naddress = \"10.1.0.{i}\"\nweight = 0\n"
        ));
    }
    let c = Config::from_toml_str(&ten).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (c.vips[0].backends.len(), c.vips[0].maglev_table_size),
        (10, 1021)
    );
    let eleven = format!("{ten}\n[[vip.backend]]\naddress = \"10.1.0.21\"\nstate = \"drain\"\n");
    let c = Config::from_toml_str(&eleven).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (c.vips[0].backends.len(), c.vips[0].maglev_table_size),
        (11, 4093)
    );
    let pinned = eleven.replace(
        "interfaces = [\"eth0\"]",
        "interfaces = [\"eth0\"]\nmaglev_table_size = 16381",
    );
    let c = Config::from_toml_str(&pinned).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.vips[0].maglev_table_size, 16381);
    let not_prime = BASE.replace("port = 80\n", "port = 80\nmaglev_table_size = 1000\n");
    assert_error(&not_prime, "vip \"web\".maglev_table_size", "not a prime");
    // Eleven backends need 1100 slots: 1009 is too small, and the message says what to set.
    let mut crowded = BASE.replace("port = 80\n", "port = 80\nmaglev_table_size = 1009\n");
    for i in 12..22 {
        crowded.push_str(&format!("\n[[vip.backend]]\naddress = \"10.1.0.{i}\"\n"));
    }
    assert_error(
        &crowded,
        "vip \"web\".maglev_table_size",
        "11 backends need a Maglev table of at least 1100 slots",
    );
    assert_error(&crowded, "vip \"web\".maglev_table_size", "e.g. 1103");
    // The appliance's size applies to a VIP without its own; the error names where it came from.
    let small = crowded.replace("maglev_table_size = 1009\n", "").replace(
        "interfaces = [\"eth0\"]",
        "interfaces = [\"eth0\"]\nmaglev_table_size = 1009",
    );
    assert_error(
        &small,
        "vip \"web\".maglev_table_size",
        "appliance.maglev_table_size is 1009",
    );
}

#[test]
fn health_batch_and_per_backend_metrics() {
    let with = |appliance: &str, tail: &str| {
        BASE.replace(
            "interfaces = [\"eth0\"]",
            &format!("interfaces = [\"eth0\"]\n{appliance}"),
        ) + tail
    };
    let c = Config::from_toml_str(&with(
        "health_batch = \"0s\"",
        "\n[metrics]\nper_backend = 25\n",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.appliance.health_batch, Duration::ZERO);
    assert_eq!(
        c.appliance.health_batch_delay,
        Duration::ZERO,
        "the default delay is never longer than the window"
    );
    assert_eq!(c.metrics.per_backend, PerBackend::Top(25));
    let c = Config::from_toml_str(&with("health_batch_delay = \"0s\"", ""))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (c.appliance.health_batch, c.appliance.health_batch_delay),
        (DEFAULT_HEALTH_BATCH, Duration::ZERO)
    );
    assert_error(
        &with("health_batch = \"20ms\"\nhealth_batch_delay = \"30ms\"", ""),
        "appliance.health_batch_delay",
        "30ms is longer than health_batch (20ms)",
    );
    assert_error(
        &with("health_batch_delay = \"5s\"", ""),
        "appliance.health_batch_delay",
        "out of range",
    );
    for (text, want) in [
        ("\"none\"", PerBackend::None),
        ("\"all\"", PerBackend::All),
        ("\"7\"", PerBackend::Top(7)),
    ] {
        let c = Config::from_toml_str(&with("", &format!("\n[metrics]\nper_backend = {text}\n")))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.metrics.per_backend, want, "{text}");
    }
    assert_error(
        &with("health_batch = \"2s\"", ""),
        "appliance.health_batch",
        "out of range",
    );
    assert_error(
        &with("health_batch = 5", ""),
        "appliance.health_batch",
        "a duration",
    );
    for bad in ["0", "\"some\"", "true"] {
        let text = with("", &format!("\n[metrics]\nper_backend = {bad}\n"));
        assert_error(
            &text,
            "metrics.per_backend",
            "is not \"all\", \"none\" or a number",
        );
    }
    assert_error(
        &with("", "\n[metrics]\ntop = 3\n"),
        "metrics.top",
        "unknown key",
    );
}

#[test]
fn a_file_that_is_not_text_is_refused_at_its_first_chunk() {
    // /dev/zero: refused at once, line 1 (it used to be read until memory ran out).
    let t = std::time::Instant::now();
    let e = load(std::path::Path::new("/dev/zero")).expect_err("not a config");
    assert!(
        matches!(
            e,
            LoadError::NotText {
                line: 1,
                byte: 0,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("is this the right file?"), "{e}");
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    let dir = std::env::temp_dir().join(format!("hp-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let bin = dir.join("binary.toml");
    std::fs::write(&bin, b"[appliance]\nname = \"x\"\n\x01\x02").expect("write");
    let e = load(&bin).expect_err("binary");
    assert!(
        matches!(
            e,
            LoadError::NotText {
                line: 3,
                byte: 1,
                ..
            }
        ),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
