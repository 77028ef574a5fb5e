//! The import carries meaning or refuses (issue 47): the four ways it used to change a file's
//! meaning without a word, each as keepalived reads the file, and `include` followed as
//! keepalived follows it, inside the including file's directory.

use super::tests::{assert_valid, refused};
use super::{ImportError, import, import_file};

/// One virtual server around `rs` (real_server blocks) with `vs` lines of its own.
/// A virtual server of TCP unless `vs` names its protocol (keepalived's default is UDP: see
/// `a_service_without_protocol_is_udp_as_in_keepalived`).
fn vs(head: &str, vs: &str, rs: &str) -> String {
    let tcp = if vs.contains("protocol") {
        ""
    } else {
        "  protocol TCP\n"
    };
    // Last, so the lines of `vs` and `rs` stay where the tests expect them.
    format!("virtual_server {head} {{\n  delay_loop 6\n{vs}{rs}{tcp}}}\n")
}

fn imported(text: &str) -> super::Imported {
    let out = import(text.as_bytes(), "t.conf").unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_valid(&out);
    out
}

/// Failure 1: a MISC_CHECK script keeps its host, port and scheme, or is refused.
#[test]
fn misc_check_scripts_keep_their_target_or_are_refused() {
    let rs = "  real_server 10.1.0.1 80 {\n    MISC_CHECK {\n      misc_path \"/bin/nc -z -w2 10.2.2.1 9999\"\n    }\n  }\n\
              \x20 real_server 10.1.0.2 80 {\n    MISC_CHECK {\n      misc_path \"/usr/bin/wget -q -O /dev/null --no-check-certificate https://10.9.9.9:8443/healthz\"\n    }\n  }\n";
    let out = imported(&vs("192.0.2.10 80", "  lb_kind NAT\n", rs));
    let t = &out.toml;
    for want in [
        "kind = \"tcp\"   # from MISC_CHECK, line 5",
        "address = \"10.2.2.1\"   # the host it checks",
        "port = 9999   # the port it checks",
        "kind = \"https\"   # from MISC_CHECK, line 10",
        "address = \"10.9.9.9\"",
        "port = 8443",
        "path = \"/healthz\"",
        "verify_tls = false",
    ] {
        assert!(t.contains(want), "{want:?} not in:\n{t}");
    }
    assert!(!t.contains("port = 80   # the port"), "{t}");
    // No host: the plugin exits with an error every time; keepalived never saw it pass.
    for script in ["check_http -p 8081 -u /status", "check_tcp -p 3306"] {
        let rs = format!(
            "  real_server 10.1.0.1 80 {{\n    MISC_CHECK {{\n      misc_path \"{script}\"\n    }}\n  }}\n"
        );
        let notes = refused(&vs("192.0.2.10 80", "  lb_kind NAT\n", &rs));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].line, 5);
        assert!(notes[0].text.contains("never passed"), "{}", notes[0]);
    }
}

/// Failure 2: `nb_get_retry` is HTTP_GET's; in TCP_CHECK keepalived ignores it.
#[test]
fn nb_get_retry_counts_only_where_keepalived_defines_it() {
    let rs = "  real_server 10.1.0.1 80 {\n    TCP_CHECK {\n      connect_timeout 3\n      nb_get_retry 3\n    }\n  }\n";
    let out = imported(&vs("192.0.2.10 80", "  lb_kind NAT\n", rs));
    assert!(out.toml.contains("fall = 2   # retry + 1"), "{}", out.toml);
    let note = out
        .notes
        .notes
        .iter()
        .find(|n| n.line == 7)
        .expect("a note");
    assert!(note.text.contains("keepalived ignores it"), "{note}");
    let http = rs.replace(
        "TCP_CHECK {",
        "HTTP_GET {\n      url {\n        path /\n      }",
    );
    let out = imported(&vs("192.0.2.10 80", "  lb_kind NAT\n", &http));
    assert!(out.toml.contains("fall = 4   # retry + 1"), "{}", out.toml);
}

/// Failure 3: keywords matched as keepalived matches them: `protocol` in any case,
/// `lb_kind` in capitals only (`dr` is not DR to keepalived, which ran such a service as NAT).
#[test]
fn keyword_values_match_as_keepalived_matches_them() {
    let rs = "  real_server 10.1.0.1 80 {\n  }\n";
    let out = imported(&vs("192.0.2.10 80", "  lb_kind DR\n  protocol tcp\n", rs));
    assert!(out.toml.contains("protocol = \"tcp\""), "{}", out.toml);
    let notes = refused(&vs("192.0.2.10 80", "  lb_kind dr\n  protocol udp\n", rs));
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].line, 3);
    assert!(
        notes[0].text.contains("in capitals only") && notes[0].text.contains("as NAT"),
        "{}",
        notes[0]
    );
    let notes = refused(&vs("192.0.2.10 80", "  lb_kind NAT\n  protocol SCTP\n", rs));
    assert_eq!((notes[0].line, notes.len()), (4, 1), "{notes:?}");
}

/// Failure 4: what keepalived repairs is repaired the same way (and the output passes `sluice
/// check`); what it would run but Sluice cannot is refused.
#[test]
fn what_keepalived_repairs_is_repaired_and_the_output_is_valid() {
    // A DR real server on another port: reset to the VIP's.
    let rs = "  real_server 10.1.0.1 8080 {\n  }\n  real_server 2001:db8::1 80 {\n  }\n";
    let out = imported(&vs("192.0.2.10 80", "  lb_kind DR\n", rs));
    assert!(
        out.toml.contains("address = \"10.1.0.1\"\nport = 80\n"),
        "{}",
        out.toml
    );
    assert!(
        !out.toml.contains("address = \"2001:db8::1\""),
        "the IPv6 real server is skipped"
    );
    let lines: Vec<usize> = out.notes.notes.iter().map(|n| n.line).collect();
    assert!(lines.contains(&4) && lines.contains(&6), "{:?}", out.notes);
    // A DR service of every port: its real servers' ports cleared.
    let out = imported(&vs("192.0.2.10", "  lb_kind DR\n", rs));
    assert!(out.toml.contains("port = 0   # every port"), "{}", out.toml);
    // ... and persistent for 360 s, as keepalived makes a service of every port.
    assert!(out.toml.contains("persistence = \"360s\""), "{}", out.toml);
    assert!(
        out.notes
            .notes
            .iter()
            .any(|n| n.line == 1 && n.text.contains("360 s")),
        "{:?}",
        out.notes
    );
    let kept = imported(&vs(
        "192.0.2.10",
        "  lb_kind DR\n  persistence_timeout 50\n",
        rs,
    ));
    assert!(kept.toml.contains("persistence = \"50s\""), "{}", kept.toml);
    // In a group, one address without a port makes the whole service persistent (its
    // addresses with a port too), as keepalived does.
    let group = format!(
        "virtual_server_group G {{\n  192.0.2.10 80\n  192.0.2.11\n}}\n{}",
        vs("group G", "  lb_kind DR\n", rs)
    );
    let out = imported(&group);
    assert_eq!(
        out.toml.matches("persistence = \"360s\"").count(),
        2,
        "{}",
        out.toml
    );
    assert!(
        out.toml.contains("address = \"10.1.0.1\"\nweight"),
        "{}",
        out.toml
    );
    // NAT without a port, and a VIP that is its own real server: refused, with their lines.
    let notes = refused(&vs("192.0.2.10", "  lb_kind NAT\n", rs));
    assert_eq!(notes[0].line, 1);
    let own = "  real_server 192.0.2.10 80 {\n  }\n  real_server 10.1.0.1 80 {\n  }\n";
    let notes = refused(&vs("192.0.2.10 80", "  lb_kind NAT\n", own));
    assert_eq!((notes.len(), notes[0].line), (1, 4), "{notes:?}");
    assert!(notes[0].text.contains("is the VIP itself"), "{}", notes[0]);
    // A duplicate real server is removed, a quorum above the total weight lowered.
    let dup = "  quorum 5\n  real_server 10.1.0.1 80 {\n  }\n  real_server 10.1.0.1 80 {\n  }\n";
    let out = imported(&vs("192.0.2.10 80", "  lb_kind NAT\n", dup));
    assert_eq!(
        out.toml.matches("[[vip.backend]]").count(),
        1,
        "{}",
        out.toml
    );
    assert!(
        !out.toml.contains("quorum ="),
        "lowered to keepalived's default 1"
    );
    assert!(
        out.toml.contains("#   line 4: quorum 5 exceeds"),
        "{}",
        out.toml
    );
}

/// A service without `protocol` is UDP in keepalived (IPVS takes protocol 0 as UDP; it warns
/// "no protocol set - defaulting to UDP"): imported as UDP with a note at its line, never as
/// TCP.
#[test]
fn a_service_without_protocol_is_udp_as_in_keepalived() {
    let text =
        "virtual_server 192.0.2.10 53 {\n  lb_kind DR\n  real_server 10.1.0.1 53 {\n  }\n}\n";
    let out = imported(text);
    assert!(out.toml.contains("protocol = \"udp\""), "{}", out.toml);
    assert!(
        out.notes
            .notes
            .iter()
            .any(|n| n.line == 1 && n.text.contains("defaulting to UDP")),
        "{:?}",
        out.notes
    );
    let tcp = imported(&text.replace("lb_kind DR", "lb_kind DR\n  protocol tcp"));
    assert!(tcp.toml.contains("protocol = \"tcp\""), "{}", tcp.toml);
}

/// What the files could not carry at all is carried now: sorry servers, several
/// checkers and urls, status-code lists, connect_ip and connect_port, inhibit_on_failure.
#[test]
fn sorry_servers_several_checkers_and_their_targets_are_carried() {
    let rs = "  sorry_server 10.9.0.1 8080\n  quorum 2\n\
              \x20 real_server 10.1.0.1 8080 {\n    weight 1\n    inhibit_on_failure\n\
              \x20   TCP_CHECK {\n      connect_ip 10.1.0.100\n      connect_port 9000\n    }\n\
              \x20   HTTP_GET {\n      url {\n        path /a\n        status_code 200 301-302\n      }\n\
              \x20     url {\n        path /b\n      }\n    }\n  }\n\
              \x20 real_server 10.1.0.2 8080 {\n    weight 1\n  }\n";
    let out = imported(&vs("192.0.2.10 80", "  lb_kind NAT\n", rs));
    let t = &out.toml;
    for want in [
        "address = \"10.1.0.100\"   # the host it checks",
        "port = 9000   # the port it checks",
        "expect_status = [200, \"301-302\"]",
        "path = \"/b\"",
        "quorum = 2",
        "on_quorum_lost = \"sorry\"",
        "role = \"sorry\"",
        "inhibit_on_failure = true",
        "health_check = []   # no checker: keepalived counts it up",
    ] {
        assert!(t.contains(want), "{want:?} not in:\n{t}");
    }
    let c = testkit::unit::parse(&super::tests::fill(t));
    let v = &c.vips[0];
    assert_eq!(
        v.checks_of(&v.backends[0]).len(),
        3,
        "tcp, /a and /b: all must pass"
    );
    assert!(v.backends[2].sorry && v.checks_of(&v.backends[2]).is_empty());
}

/// A directory of keepalived files for the include tests; removed on drop.
struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("hp-inc-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("conf.d/more")).expect("mkdir");
        Dir(d)
    }

    fn write(&self, name: &str, text: &str) -> std::path::PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }
}

#[test]
fn includes_are_followed_as_keepalived_follows_them() {
    let d = Dir::new("ok");
    let main = d.write(
        "keepalived.conf",
        "global_defs {\n}\ninclude conf.d/{web,db}.conf\ninclude conf.d/none-*.conf\n",
    );
    d.write(
        "conf.d/web.conf",
        "virtual_server 192.0.2.10 80 {\n  ha_suspend\n  lb_kind NAT\n  include more/*.rs\n}\n",
    );
    d.write("conf.d/more/a.rs", "real_server 10.1.0.1 80 {\n}\n");
    d.write(
        "conf.d/more/b.rs",
        "real_server 10.1.0.2 80 {\n  weight x\n}\n",
    );
    let e = import_file(&main, &[]).expect_err("b.rs line 2 is refused");
    let msg = e.to_string();
    assert!(
        msg.contains("conf.d/more/b.rs line 2: weight \"x\""),
        "{msg}"
    );
    d.write("conf.d/more/b.rs", "real_server 10.1.0.2 80 {\n}\n");
    d.write(
        "conf.d/db.conf",
        "virtual_server 192.0.2.11 3306 {\n  lb_kind DR\n  real_server 10.1.0.3 3306 {\n  }\n}\n",
    );
    let out = import_file(&main, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.vips, 2);
    assert_valid(&out);
    for a in ["10.1.0.1", "10.1.0.2", "10.1.0.3"] {
        assert!(out.toml.contains(&format!("address = \"{a}\"")), "{a}");
    }
    let shown: Vec<String> = out.notes.notes.iter().map(|n| out.notes.show(n)).collect();
    assert!(
        shown
            .iter()
            .any(|n| n.starts_with("line 4: include conf.d/none-*.conf: no file matches")),
        "{shown:?}"
    );
    assert!(
        shown
            .iter()
            .any(|n| n.starts_with("conf.d/web.conf line 2: ")),
        "notes of included files name them: {shown:?}"
    );
}

#[test]
fn includes_stay_inside_their_directory_and_never_loop() {
    let d = Dir::new("bad");
    let outside = Dir::new("outside");
    let abs = outside.write(
        "x.conf",
        "virtual_server 192.0.2.9 80 {\n  lb_kind DR\n  real_server 10.0.0.9 80 {\n  }\n}\n",
    );
    let sibling = outside
        .0
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    d.write("conf.d/a.conf", "include b.conf\n");
    d.write("conf.d/b.conf", "\ninclude a.conf\n");
    let cases = [
        (
            format!("include ../{sibling}/x.conf\n"),
            "line 1: include ../".to_string() + &sibling + "/x.conf: ",
            "a relative include may not leave it",
        ),
        (
            format!("include {}\n", abs.display()),
            "line 1: include /".to_string(),
            "give --allow-include",
        ),
        (
            "include keepalived.conf\n".into(),
            "line 1: include loop: ".into(),
            "keepalived.conf includes keepalived.conf again",
        ),
        (
            "include conf.d/a.conf\n".into(),
            "conf.d/b.conf: line 2: include loop: ".into(),
            "conf.d/a.conf -> conf.d/b.conf includes conf.d/a.conf again",
        ),
    ];
    for (text, at, why) in cases {
        let main = d.write("keepalived.conf", &text);
        let msg = import_file(&main, &[]).expect_err(&text).to_string();
        assert!(msg.contains(&at) && msg.contains(why), "{text}: {msg}");
    }
    // An absolute include inside an --allow-include directory is followed.
    let main = d.write("keepalived.conf", &format!("include {}\n", abs.display()));
    let out =
        import_file(&main, std::slice::from_ref(&outside.0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.vips, 1);
    // Bytes alone cannot follow an include.
    assert!(matches!(
        import(b"include x.conf\n", "t.conf"),
        Err(ImportError::Syntax(_))
    ));
}
