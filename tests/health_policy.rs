//! Health and announcement policy through real namespaces (issue 47), with `sluice run`, the
//! lab's backends (real HTTP servers) and, for the standby, BIRD on the router:
//!
//! - an agent at a backend answering `50%`, then `drain`, then `up`: the backend's share of
//!   the Maglev ring follows its scaled weight within one point, and while it drains it gets
//!   no new flow;
//! - a VIP whose primary backends all fail is served by its sorry backend, and by the
//!   primaries again once one is back;
//! - a NAT VIP on two appliances, `role = "standby"` on the second: BIRD sees the standby's
//!   worse path (AS-path prepends, MED, community) and the router sends the VIP to the
//!   active appliance only; when the active one is killed, to the standby.
//!
//! Namespaces are named `hp...`. Needs root.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use lab::testing::{Api, Daemon, Whoami, build, wait_until};
use lab::{Lab, LabMode, LabOptions};

/// A lab of one NAT mode and three backends, no lab health checks, namespaces `prefix...`.
fn lab(prefix: &'static str, appliances: usize) -> Lab {
    build(LabOptions {
        modes: vec![LabMode::Nat],
        health_checks: false,
        appliances: Some(appliances),
        bgp: Some(appliances > 1),
        prefix,
        ..LabOptions::default()
    })
}

/// In a lab without BGP, the router's static route to `vip` through `lb1`.
fn route(lab: &Lab, vip: &str) {
    lab.router.run(&[
        "ip",
        "route",
        "replace",
        &format!("{vip}/32"),
        "via",
        lab::LB_LAN4,
    ]);
}

/// Appliance `k`'s lab config up to its VIPs ([appliance], [api], [bgp] in a BGP lab).
fn head(lab: &Lab, k: usize) -> String {
    let full = lab.config_for(k, &lab.api_socket_at(k));
    let end = ["[[health_check]]", "[[vip]]"]
        .iter()
        .filter_map(|m| full.find(m))
        .min()
        .unwrap_or(full.len());
    full[..end].to_string()
}

/// Backend `address` of `vip` as the API shows it.
fn backend(api: &Api, vip: &str, address: &str) -> api::Backend {
    api.call(|c| c.backends(vip))
        .unwrap_or_else(|e| panic!("backends of {vip}: {e}"))
        .into_iter()
        .find(|b| b.address == address)
        .unwrap_or_else(|| panic!("no backend {address} in {vip}"))
}

/// `vip`'s quorum as the API shows it.
fn quorum(api: &Api, vip: &str) -> String {
    api.call(|c| c.vip(vip))
        .unwrap_or_else(|e| panic!("vip {vip}: {e}"))
        .quorum
}

/// A tiny agent in backend `i`'s namespace: answers each connection on port 9777 with the
/// contents of `answer` (rewritten by the test).
fn start_agent(lab: &Lab, i: usize, answer: &std::path::Path) -> std::process::Child {
    let script = format!(
        "import socket\n\
         s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('0.0.0.0', 9777)); s.listen(16)\n\
         while True:\n\
         \x20   c, _ = s.accept()\n\
         \x20   try:\n\
         \x20       c.sendall(open('{}').read().encode())\n\
         \x20   finally:\n\
         \x20       c.close()\n",
        answer.display()
    );
    let path = lab.dir.join(format!("agent{i}.py"));
    std::fs::write(&path, script).expect("agent script");
    lab.backends[i].spawn(&["python3", &path.display().to_string()])
}

/// 50% -> drain -> up: the ring share within one point of the scaled weight, no new flows
/// while drained.
#[test]
fn an_agent_s_answers_move_its_backend_s_share_and_new_flows() {
    lab::netns::require_program("python3", "python3");
    let mut lab = lab("hpag", 1);
    let answer = lab.dir.join("agent-answer");
    std::fs::write(&answer, "50%\n").expect("answer");
    let _agent = Daemon(start_agent(&lab, 0, &answer));
    let cfg = head(&lab, 0)
        + "[[health_check]]\nname = \"agent\"\nkind = \"agent\"\nport = 9777\n\
           interval = \"300ms\"\ntimeout = \"200ms\"\nrise = 1\nfall = 1\ninitial = \"up\"\n\n\
           [[vip]]\nname = \"web\"\naddress = \"192.0.2.30\"\nport = 80\nmode = \"nat\"\n\
           scheduler = \"maglev\"\nmaglev_table_size = 65537\n\
           [[vip.backend]]\naddress = \"10.0.0.21\"\nport = 8080\nhealth_check = \"agent\"\n\
           [[vip.backend]]\naddress = \"10.0.0.22\"\nport = 8080\n\
           [[vip.backend]]\naddress = \"10.0.0.23\"\nport = 8080\n";
    lab.write_config(&cfg).expect("config");
    route(&lab, "192.0.2.30");
    let vip = SocketAddr::new("192.0.2.30".parse().unwrap(), 80);
    lab.start_serving(lab::sluice!().path(), &[vip]);
    let log = || lab.log_text(0);
    let api = lab.api_at(0);
    let client = Whoami::new(&lab, vip, Duration::from_secs(2));
    let share = |want: f64| move |b: &api::Backend| (b.ring_share - want).abs() <= 0.01;

    // 50%: weight 50 of 250 in all, a fifth of the ring.
    let took = wait_until(
        "the agent's 50%",
        Duration::from_secs(10),
        || {
            let b = backend(&api, "web", "10.0.0.21");
            b.agent.as_deref() == Some("ready 50%") && share(0.2)(&b)
        },
        log,
    );
    let b = backend(&api, "web", "10.0.0.21");
    let half = client.spread(100);
    println!(
        "MEASURE agent 50%: ring share {:.4} (ideal 0.2000), weight {} after {took:?}; 100 \
         requests {half:?}",
        b.ring_share, b.weight
    );
    assert!(half.get("be1").copied().unwrap_or(0) > 0, "{half:?}");

    // drain: no new flow reaches it; the others serve every request.
    std::fs::write(&answer, "drain\n").expect("answer");
    wait_until(
        "the agent's drain",
        Duration::from_secs(10),
        || {
            let b = backend(&api, "web", "10.0.0.21");
            b.agent.as_deref() == Some("drain") && !b.eligible && b.ring_share == 0.0
        },
        log,
    );
    let before = backend(&api, "web", "10.0.0.21").new_flows;
    let got = client.spread(60);
    let after = backend(&api, "web", "10.0.0.21").new_flows;
    println!("MEASURE agent drain: 60 requests {got:?}, be1's new flows {before} -> {after}");
    assert!(before > 0, "be1 took flows at 50%");
    assert_eq!(
        after, before,
        "new flows reached the drained backend: {got:?}"
    );
    assert_eq!(
        got.iter()
            .filter(|(k, _)| *k == "be2" || *k == "be3")
            .map(|(_, n)| n)
            .sum::<usize>(),
        60,
        "{got:?}"
    );

    // up: the full weight, a third of the ring, and new flows again.
    std::fs::write(&answer, "up\n").expect("answer");
    wait_until(
        "the agent's up",
        Duration::from_secs(10),
        || {
            let b = backend(&api, "web", "10.0.0.21");
            b.agent.as_deref() == Some("ready") && b.eligible && share(1.0 / 3.0)(&b)
        },
        log,
    );
    let got = client.spread(60);
    println!(
        "MEASURE agent up: ring share {:.4} (ideal 0.3333); 60 requests {got:?}",
        backend(&api, "web", "10.0.0.21").ring_share
    );
    assert!(got.get("be1").copied().unwrap_or(0) > 0, "{got:?}");
}

/// All primaries down: the sorry backend serves; one primary back: it alone serves again.
#[test]
fn a_vip_without_its_primaries_serves_from_its_sorry_backend_and_back() {
    let mut lab = lab("hpso", 1);
    let cfg = head(&lab, 0)
        + "[[health_check]]\nname = \"http\"\nkind = \"http\"\npath = \"/whoami\"\n\
           interval = \"300ms\"\ntimeout = \"200ms\"\nrise = 1\nfall = 1\n\n\
           [[vip]]\nname = \"web\"\naddress = \"192.0.2.31\"\nport = 80\nmode = \"nat\"\n\
           scheduler = \"rr\"\nhealth_check = \"http\"\n\
           [[vip.backend]]\naddress = \"10.0.0.21\"\nport = 8080\n\
           [[vip.backend]]\naddress = \"10.0.0.22\"\nport = 8080\n\
           [[vip.backend]]\naddress = \"10.0.0.23\"\nport = 8080\nrole = \"sorry\"\n\
           health_check = []\n";
    lab.write_config(&cfg).expect("config");
    route(&lab, "192.0.2.31");
    lab.start_appliance(lab::sluice!().path()).expect("start");
    let api = lab.api_at(0);
    let vip = SocketAddr::new("192.0.2.31".parse().unwrap(), 80);
    let client = Whoami::new(&lab, vip, Duration::from_secs(2));
    let primaries_only = |g: &BTreeMap<String, usize>| {
        g.keys().all(|k| k == "be1" || k == "be2") && g.values().sum::<usize>() == 20
    };
    wait_until(
        "the primaries up",
        Duration::from_secs(20),
        || primaries_only(&client.spread(20)),
        || lab.log_text(0),
    );
    assert_eq!(quorum(&api, "web"), "up");

    lab.stop_backend(0);
    lab.stop_backend(1);
    let t = wait_until(
        "the sorry backend alone",
        Duration::from_secs(10),
        || client.spread(10) == BTreeMap::from([("be3".to_string(), 10)]),
        || lab.log_text(0),
    );
    println!(
        "MEASURE sorry: every request on the sorry backend {t:?} after both primaries stopped"
    );
    assert_eq!(quorum(&api, "web"), "sorry");
    assert!(
        lab.log_text(0)
            .contains("vip web: quorum lost: the sorry backends take the new flows"),
        "{}",
        lab.log_text(0)
    );

    lab.start_backend(0).expect("restart be1");
    let t = wait_until(
        "be1 alone again",
        Duration::from_secs(10),
        || client.spread(10) == BTreeMap::from([("be1".to_string(), 10)]),
        || lab.log_text(0),
    );
    println!("MEASURE sorry: back on the primary {t:?} after it restarted");
    assert_eq!(quorum(&api, "web"), "up");
}

/// The standby appliance carries the NAT VIP only once the active one is gone.
#[test]
fn a_standby_nat_vip_moves_to_the_standby_when_the_active_appliance_dies() {
    let mut lab = lab("hpsb", 2);
    let vip_text = |role: &str| {
        format!(
            "[[vip]]\nname = \"web\"\naddress = \"192.0.2.32\"\nport = 80\nmode = \"nat\"\n\
             scheduler = \"rr\"\nrole = \"{role}\"\ncommunities = [\"65010:32\"]\n\
             [[vip.backend]]\naddress = \"10.0.0.21\"\nport = 8080\n\
             [[vip.backend]]\naddress = \"10.0.0.22\"\nport = 8080\n"
        )
    };
    for (k, role) in [(0, "active"), (1, "standby")] {
        lab.write_config_at(k, &(head(&lab, k) + &vip_text(role)))
            .expect("config");
    }
    lab.start_appliances(lab::sluice!().path()).expect("start");
    let vip_ip: std::net::IpAddr = "192.0.2.32".parse().unwrap();
    let vip = SocketAddr::new(vip_ip, 80);
    let client = Whoami::new(&lab, vip, Duration::from_secs(2));
    let lb1: std::net::IpAddr = lab::appliance_addr(0, false);
    let lb2: std::net::IpAddr = lab::appliance_addr(1, false);
    let logs = |lab: &Lab| lab.logs_tail(60);
    // BIRD has both paths, the standby's worse; the kernel has the active one only.
    wait_until(
        "both paths in BIRD",
        Duration::from_secs(30),
        || {
            let all = lab
                .birdc(&["show", "route", "all", "192.0.2.32/32"])
                .unwrap_or_default();
            all.contains(&lb1.to_string()) && all.contains(&lb2.to_string())
        },
        || logs(&lab),
    );
    let all = lab
        .birdc(&["show", "route", "all", "192.0.2.32/32"])
        .expect("birdc");
    println!("MEASURE standby: BIRD's routes:\n{all}");
    for want in [
        "BGP.as_path: 65010 65010 65010 65010",
        "BGP.med: 1000",
        "BGP.as_path: 65010\n",
        "(65010,32)",
    ] {
        assert!(all.contains(want), "{want:?} not in:\n{all}");
    }
    assert_eq!(lab.next_hops(vip_ip).expect("route"), vec![lb1]);
    let got = client.spread(10);
    assert_eq!(got.values().sum::<usize>(), 10, "{got:?}");
    assert!(got.keys().all(|k| k.starts_with("be")), "{got:?}");

    // The active appliance dies; the backends' gateway moves to the standby with it (what
    // a VRRP gateway address did for keepalived's NAT directors).
    assert!(lab.kill_appliance_at(0));
    for be in &lab.backends {
        be.run(&[
            "ip",
            "route",
            "replace",
            "default",
            "via",
            &lb2.to_string(),
            "table",
            "100",
        ]);
    }
    let t = wait_until(
        "the route through the standby",
        Duration::from_secs(15),
        || lab.next_hops(vip_ip).unwrap_or_default() == vec![lb2],
        || logs(&lab),
    );
    let got = client.spread(10);
    println!(
        "MEASURE standby: the router moved the VIP to lb2 {t:?} after lb1 was killed; {got:?}"
    );
    assert_eq!(got.values().sum::<usize>(), 10, "{got:?}");
    assert!(
        got.keys().all(|k| k.starts_with("be")),
        "{got:?}\n{}",
        logs(&lab)
    );
}
