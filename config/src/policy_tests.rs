//! Validation tests of the health and announcement policy (`validate/policy.rs`) and of the
//! check kinds and keys it builds on (`validate/health.rs`): several checks and their
//! combination, a check of another host, status lists and digests, agent and gRPC checks,
//! inhibit_on_failure, the quorum with sorry backends, and the announcement attributes,
//! each error at its exact key path.

use super::*;

const HEAD: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[health_check]]
name = "http"
kind = "http"
expect_status = [200, "301-302"]
expect_digest = "B1946AC92492D2347C6235B4D2611184"

[[health_check]]
name = "agent"
kind = "agent"
port = 9777
send = "ping\n"

[[health_check]]
name = "grpc"
kind = "grpc"
service = "web"
address = "10.9.9.9"
port = 50051
"#;

/// `HEAD`, then a VIP with `vip` lines, two backends with `b1` and `b2` lines.
fn file(vip: &str, b1: &str, b2: &str) -> String {
    format!(
        "{HEAD}\n[[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n{vip}\n\
         [[vip.backend]]\naddress = \"10.1.0.11\"\nweight = 3\n{b1}\n\
         [[vip.backend]]\naddress = \"10.1.0.12\"\nweight = 2\n{b2}\n"
    )
}

fn ok(text: &str) -> Config {
    Config::from_toml_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[track_caller]
fn refused(text: &str, key: &str, needle: &str) {
    let errs = match Config::from_toml_str(text) {
        Ok(c) => panic!("expected an error at {key}, got {c:?}"),
        Err(e) => e,
    };
    let Some(e) = errs.find(key) else {
        panic!("no error at {key:?}; got:\n{errs}");
    };
    assert!(
        e.message.contains(needle),
        "error at {key:?} is {:?}, expected {needle:?}",
        e.message
    );
}

#[test]
fn check_kinds_and_their_keys() {
    let c = ok(&file("", "", ""));
    let CheckKind::Http(h) = &c.health_checks[0].kind else {
        panic!("http");
    };
    assert_eq!(h.expect_status, vec![(200, 200), (301, 302)]);
    assert!(h.accepts(302) && !h.accepts(300));
    assert_eq!(
        h.expect_digest.as_deref(),
        Some("b1946ac92492d2347c6235b4d2611184")
    );
    assert_eq!(
        c.health_checks[1].kind,
        CheckKind::Agent {
            send: Some("ping\n".into())
        }
    );
    let g = &c.health_checks[2];
    assert_eq!(g.address, Some("10.9.9.9".parse().unwrap()));
    assert_eq!(
        g.kind,
        CheckKind::Grpc(GrpcCheck {
            service: "web".into(),
            tls: false,
            verify_tls: true,
            server_name: None,
            authority: None,
        })
    );
    let agent_without_port = HEAD.replace("port = 9777\n", "");
    refused(
        &file("", "", "").replace(HEAD, &agent_without_port),
        "health_check \"agent\".port",
        "required for kind \"agent\"",
    );
    refused(
        &file("", "", "").replace("\"301-302\"", "\"302-301\""),
        "health_check \"http\".expect_status[1]",
        "not a status code",
    );
    refused(
        &file("", "", "").replace("B1946AC92492D2347C6235B4D2611184", "xyz"),
        "health_check \"http\".expect_digest",
        "not an MD5 digest",
    );
    refused(
        &file("", "", "").replace(
            "service = \"web\"",
            "service = \"web\"\nserver_name = \"a\"",
        ),
        "health_check \"grpc\".server_name",
        "without tls = true",
    );
    refused(
        &file("", "", "").replace("send = \"ping\\n\"", "path = \"/\""),
        "health_check \"agent\".path",
        "not valid for kind \"agent\"",
    );
}

#[test]
fn several_checks_per_vip_and_per_backend() {
    let c = ok(&file(
        "health_check = [\"http\", \"agent\"]\nhealth_combine = \"any\"\ninhibit_on_failure = true",
        "health_check = \"grpc\"\ninhibit_on_failure = false",
        "",
    ));
    let v = &c.vips[0];
    assert_eq!(v.health_checks, ["http", "agent"]);
    assert_eq!(v.health_combine, Combine::Any);
    assert_eq!(v.checks_of(&v.backends[0]), ["grpc"]);
    assert_eq!(v.checks_of(&v.backends[1]), ["http", "agent"]);
    assert!(!v.inhibits(&v.backends[0]) && v.inhibits(&v.backends[1]));
    let unchecked = ok(&file("health_check = \"http\"", "health_check = []", ""));
    assert!(
        unchecked.vips[0]
            .checks_of(&unchecked.vips[0].backends[0])
            .is_empty()
    );
    refused(
        &file("health_check = [\"http\", \"nope\"]", "", ""),
        "vip \"web\".health_check[1]",
        "\"nope\" is not a defined [[health_check]]",
    );
    refused(
        &file("health_check = [\"http\", \"http\"]", "", ""),
        "vip \"web\".health_check[1]",
        "listed twice",
    );
    refused(
        &file("", "health_check = 3", ""),
        "vip \"web\".backend[0].health_check",
        "a check's name or a list of names",
    );
}

#[test]
fn quorum_and_sorry_backends() {
    let c = ok(&file(
        "quorum = 2\nquorum_hysteresis = 1",
        "",
        "role = \"sorry\"",
    ));
    let v = &c.vips[0];
    assert_eq!(
        v.fallback,
        Fallback {
            quorum: 2,
            hysteresis: 1,
            on_lost: QuorumLost::Sorry
        }
    );
    assert!(v.backends[1].sorry && !v.backends[0].sorry);
    let w = ok(&file("on_quorum_lost = \"withdraw\"", "", ""));
    assert_eq!(w.vips[0].fallback.on_lost, QuorumLost::Withdraw);
    assert_eq!(ok(&file("", "", "")).vips[0].fallback, Fallback::default());
    refused(
        &file("quorum = 6", "", ""),
        "vip \"web\".quorum",
        "more than the primary backends weigh in all (5)",
    );
    refused(
        &file("quorum = 3\nquorum_hysteresis = 3", "", ""),
        "vip \"web\".quorum_hysteresis",
        "not below the quorum",
    );
    refused(
        &file("on_quorum_lost = \"sorry\"", "", ""),
        "vip \"web\".on_quorum_lost",
        "needs a backend with role = \"sorry\"",
    );
    refused(
        &file("on_quorum_lost = \"withdraw\"", "", "role = \"sorry\""),
        "vip \"web\".on_quorum_lost",
        "would never take a flow",
    );
    refused(
        &file("", "role = \"sorry\"", "role = \"sorry\""),
        "vip \"web\".backend",
        "a VIP needs a primary backend",
    );
}

#[test]
fn announcement_attributes_per_vip_peer_and_standby() {
    let bgp = "\n[bgp]\nasn = 65010\nrouter_id = \"10.0.0.10\"\n\
               [bgp.standby]\nas_path_prepend = 4\ncommunities = [\"65010:666\"]\n\
               [[bgp.peer]]\naddress = \"10.0.0.1\"\nasn = 65000\nmed = 7\n\
               communities = [\"65010:1:1\"]\n\
               [[bgp.peer]]\naddress = \"10.0.0.2\"\nasn = 65000\nas_path_prepend = 2\n";
    let c = ok(&(file(
        "med = 50\nas_path_prepend = 1\nlocal_pref = 200\nannounce_to = [\"10.0.0.2\"]\n\
         role = \"standby\"",
        "",
        "",
    ) + bgp));
    let a = &c.vips[0].announce;
    assert_eq!(
        (a.med, a.as_path_prepend, a.local_pref, a.role),
        (Some(50), 1, Some(200), Role::Standby)
    );
    assert_eq!(
        a.announce_to,
        ["10.0.0.2".parse::<std::net::IpAddr>().unwrap()]
    );
    let b = c.bgp.as_ref().expect("bgp");
    assert_eq!(b.standby.as_path_prepend, 4);
    assert_eq!(b.standby.med, Standby::default().med);
    assert_eq!(b.standby.communities, [Community::Standard(65010, 666)]);
    assert_eq!(b.peers[0].export.med, Some(7));
    assert_eq!(
        b.peers[0].export.communities,
        [Community::Large(65010, 1, 1)]
    );
    assert_eq!(b.peers[1].export.as_path_prepend, 2);
    refused(
        &(file("announce_to = [\"10.0.0.9\"]", "", "") + bgp),
        "vip \"web\".announce_to[0]",
        "not a [[bgp.peer]] address",
    );
    refused(
        &(file("as_path_prepend = 11", "", "") + bgp),
        "vip \"web\".as_path_prepend",
        "out of range",
    );
    let second = "\n[[vip]]\nname = \"web2\"\naddress = \"192.0.2.10\"\nport = 443\n\
                  [[vip.backend]]\naddress = \"10.1.0.11\"\n";
    refused(
        &(file("med = 5", "", "") + second + bgp),
        "vip \"web2\"",
        "announced as one route",
    );
    refused(
        &(file("role = \"primary\"", "", "") + bgp),
        "vip \"web\".role",
        "not one of active, standby",
    );
}
