//! Validation tests of `[[prefix_list]]`, `allow` and `deny` (`validate/acl.rs`): lists
//! resolved with the list each rule came from, and every rule that decides nothing refused
//! at its exact key path, naming the rule that makes it so.

use super::*;

/// One IPv4 VIP "web" with `acl` lines, an IPv6 VIP "web6" with `acl6` lines, and `lists`
/// before them.
fn file(lists: &str, acl: &str, acl6: &str) -> String {
    format!(
        r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]
{lists}

[[vip]]
name = "web"
address = "192.0.2.1"
port = 80
mode = "nat"
{acl}

[[vip.backend]]
address = "10.1.0.11"

[[vip]]
name = "web6"
address = "2001:db8::1"
port = 80
mode = "dr"
{acl6}

[[vip.backend]]
address = "2001:db8:1::11"
"#
    )
}

const OFFICE: &str = r#"
[[prefix_list]]
name = "office"
prefixes = ["10.0.0.0/8", "2001:db8:a::/48"]
"#;

#[track_caller]
fn error_at(lists: &str, acl: &str, acl6: &str, key: &str, needle: &str) {
    super::tests::assert_error(&file(lists, acl, acl6), key, needle);
}

#[test]
fn lists_resolve_with_their_names_and_families() {
    let c = Config::from_toml_str(&file(
        OFFICE,
        r#"allow = ["office", "198.51.100.0/24"]
deny = ["10.9.0.0/16"]"#,
        r#"deny = ["office"]"#,
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let web = &c.vips[0].acl;
    let rules: Vec<(String, bool, &str)> = web
        .rules
        .iter()
        .map(|r| (r.prefix.to_string(), r.allow, r.list.as_str()))
        .collect();
    assert_eq!(
        rules,
        [
            ("10.0.0.0/8".to_string(), true, "office"),
            ("198.51.100.0/24".to_string(), true, "allow"),
            ("10.9.0.0/16".to_string(), false, "deny"),
        ]
    );
    assert!(web.default_deny);
    assert!(web.decide("10.1.1.1".parse().unwrap()).allowed());
    assert!(!web.decide("10.9.1.1".parse().unwrap()).allowed());
    assert!(!web.decide("192.0.2.200".parse().unwrap()).allowed());
    // A shared list mixing families: only the VIP's own family applies.
    let web6 = &c.vips[1].acl;
    assert_eq!(web6.rules.len(), 1);
    assert_eq!(web6.rules[0].prefix.to_string(), "2001:db8:a::/48");
    assert!(!web6.default_deny);
    assert!(!web6.decide("2001:db8:a::9".parse().unwrap()).allowed());
    assert!(web6.decide("2001:db8:b::9".parse().unwrap()).allowed());
    assert_eq!(web6.deny_lists(), ["office"]);
}

#[test]
fn a_vip_without_lists_is_open() {
    let c = Config::from_toml_str(&file("", "", "")).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.vips.iter().all(|v| v.acl.is_open()));
}

#[test]
fn bad_entries_are_named() {
    let key = r#"vip "web".allow[0]"#;
    error_at(
        "",
        r#"allow = ["nobody"]"#,
        "",
        key,
        "nor the name of a [[prefix_list]]",
    );
    error_at(
        "",
        r#"allow = ["10.1.2.3/16"]"#,
        "",
        key,
        "did you mean 10.1.0.0/16",
    );
    error_at("", r#"allow = ["10.0.0.0/40"]"#, "", key, "length over 32");
    error_at(
        "",
        r#"allow = ["2001:db8::/32"]"#,
        "",
        key,
        "the VIP is IPv4",
    );
    let only6 = "[[prefix_list]]\nname = \"v6\"\nprefixes = [\"2001:db8::/32\"]\n";
    error_at(only6, r#"allow = ["v6"]"#, "", key, "has no IPv4 prefix");
    let twice = "[[prefix_list]]\nname = \"x\"\nprefixes = [\"10.0.0.0/8\", \"10.0.0.0/8\"]\n";
    error_at(
        twice,
        "",
        "",
        r#"prefix_list "x".prefixes[1]"#,
        "listed twice",
    );
}

#[test]
fn overlapping_and_unreachable_rules_are_named() {
    // The same prefix in both lists.
    error_at(
        OFFICE,
        r#"allow = ["office"]
deny = ["10.0.0.0/8"]"#,
        "",
        r#"vip "web".deny[0]"#,
        "is in both allow and deny (also office",
    );
    // Twice in one list, once through a prefix_list.
    error_at(
        OFFICE,
        r#"allow = ["office", "10.0.0.0/8"]"#,
        "",
        r#"vip "web".allow[1]"#,
        "10.0.0.0/8 is already in office",
    );
    // An allow inside an allow with nothing between.
    error_at(
        OFFICE,
        r#"allow = ["office", "10.1.0.0/16"]"#,
        "",
        r#"vip "web".allow[1]"#,
        "allow 10.1.0.0/16 (allow) changes nothing: allow 10.0.0.0/8 (office",
    );
    // A deny inside a deny.
    error_at(
        "",
        r#"deny = ["10.0.0.0/8", "10.1.0.0/16"]"#,
        "",
        r#"vip "web".deny[1]"#,
        "deny 10.1.0.0/16 (deny) changes nothing: deny 10.0.0.0/8",
    );
    // A deny no allow covers, on a VIP with an allow list.
    error_at(
        "",
        r#"allow = ["10.0.0.0/8"]
deny = ["192.168.0.0/16"]"#,
        "",
        r#"vip "web".deny[0]"#,
        "no allow rule covers it",
    );
    // Holes and holes in holes are fine.
    Config::from_toml_str(&file(
        "",
        r#"allow = ["10.0.0.0/8", "10.1.2.0/24"]
deny = ["10.1.0.0/16"]"#,
        r#"deny = ["2001:db8::/32"]
allow = ["::/0"]"#,
    ))
    .unwrap_or_else(|e| panic!("{e}"));
}
