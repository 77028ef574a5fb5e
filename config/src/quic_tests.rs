//! Validation tests of `[vip.quic_lb]` and `quic_server_id` (`validate/quic.rs`): what they
//! take, their defaults, and each config that cannot work, at its exact key path.

use super::*;

/// A UDP VIP with `vip` lines, and two backends with `b1` and `b2` lines.
fn file(vip: &str, b1: &str, b2: &str) -> String {
    let proto = if vip.contains("protocol =") {
        ""
    } else {
        "protocol = \"udp\""
    };
    format!(
        r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[vip]]
name = "h3"
address = "192.0.2.10"
port = 443
{proto}
{vip}

[[vip.backend]]
address = "10.1.0.11"
{b1}

[[vip.backend]]
address = "10.1.0.12"
{b2}
"#
    )
}

#[track_caller]
fn error_at(vip: &str, b1: &str, b2: &str, key: &str, needle: &str) {
    super::tests::assert_error(&file(vip, b1, b2), key, needle);
}

#[test]
fn defaults_and_derived_ids() {
    let c = Config::from_toml_str(&file("[vip.quic_lb]", "", "")).unwrap_or_else(|e| panic!("{e}"));
    let q = c.vips[0].quic_lb.clone().expect("quic_lb");
    assert_eq!((q.config_id, q.server_id_len, q.nonce_len), (0, 2, 6));
    assert_eq!(q.key, None);
    assert_eq!(q.encoding(), quic::Encoding::Plaintext);
    let b = &c.vips[0].backends;
    let ids = q.server_ids(b.iter().map(|b| (b.address, b.port))).unwrap();
    assert_eq!(ids[0], quic::derive(b[0].address, 443, 2));
    assert_ne!(ids[0], ids[1]);
    // Without the table, nothing.
    let c = Config::from_toml_str(&file("", "", "")).unwrap();
    assert_eq!(c.vips[0].quic_lb, None);
}

#[test]
fn keys_and_set_ids() {
    let vip = "[vip.quic_lb]\nconfig_id = 2\nserver_id_len = 8\nnonce_len = 8\n\
               key = \"8f95f09245765f80256934e50c66207f\"";
    // The backend keys come after the table in TOML, so they go on the backends' lines.
    let c = Config::from_toml_str(&file(vip, "quic_server_id = \"0102030405060708\"", ""))
        .unwrap_or_else(|e| panic!("{e}"));
    let q = c.vips[0].quic_lb.clone().unwrap();
    assert_eq!(q.config_id, 2);
    assert_eq!(q.encoding(), quic::Encoding::SinglePass);
    assert_eq!(q.key.unwrap()[0], 0x8f);
    let a = c.vips[0].backends[0].address;
    assert_eq!(q.server_id(a, 443).to_string(), "0102030405060708");
    let vip = vip.replace("nonce_len = 8", "nonce_len = 4");
    let c = Config::from_toml_str(&file(&vip, "", "")).unwrap();
    assert_eq!(
        c.vips[0].quic_lb.as_ref().unwrap().encoding(),
        quic::Encoding::FourPass
    );
}

#[test]
fn what_cannot_work_is_refused_with_the_fix() {
    let at = "vip \"h3\".quic_lb";
    error_at(
        "[vip.quic_lb]\nconfig_id = 7",
        "",
        "",
        &format!("{at}.config_id"),
        "reserved",
    );
    error_at(
        "[vip.quic_lb]\nserver_id_len = 15\nnonce_len = 5",
        "",
        "",
        at,
        "shorten one",
    );
    error_at(
        "[vip.quic_lb]\nnonce_len = 3",
        "",
        "",
        &format!("{at}.nonce_len"),
        "out of range",
    );
    error_at(
        "[vip.quic_lb]\nkey = \"abcd\"",
        "",
        "",
        &format!("{at}.key"),
        "32 hex digits",
    );
    error_at("protocol = \"tcp\"\n[vip.quic_lb]", "", "", at, "udp");
    error_at(
        "udp_one_packet = true\n[vip.quic_lb]",
        "",
        "",
        at,
        "udp_one_packet",
    );
    error_at(
        "[vip.quic_lb]\nbogus = 1",
        "",
        "",
        &format!("{at}.bogus"),
        "unknown key",
    );
    let b0 = "vip \"h3\".backend[0].quic_server_id";
    error_at(
        "",
        "quic_server_id = \"01\"",
        "",
        b0,
        "without [vip.quic_lb]",
    );
    error_at(
        "[vip.quic_lb]",
        "quic_server_id = \"01\"",
        "",
        b0,
        "4 hex digits",
    );
    error_at(
        "[vip.quic_lb]",
        "quic_server_id = \"0101\"",
        "quic_server_id = \"0101\"",
        "vip \"h3\"",
        "give each backend its own quic_server_id",
    );
}
