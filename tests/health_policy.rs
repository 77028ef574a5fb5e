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
use std::time::{Duration, Instant};

use api::{Client, Endpoint};
use lab::{Lab, LabMode, LabOptions, http_get};

fn sluice() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_sluice"))
}

/// A lab of one NAT mode and three backends, no lab health checks, namespaces `prefix...`.
fn lab(prefix: &'static str, appliances: usize) -> Lab {
    lab::netns::require_root();
    Lab::build(LabOptions {
        modes: vec![LabMode::Nat],
        health_checks: false,
        appliances: Some(appliances),
        bgp: Some(appliances > 1),
        prefix,
        ..LabOptions::default()
    })
    .unwrap_or_else(|e| panic!("lab: {e}"))
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

struct Api {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Api {
    fn of(lab: &Lab, k: usize) -> Api {
        Api {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            client: Client::new(Endpoint::Unix(lab.api_socket_at(k)))
                .with_timeout(Duration::from_secs(5)),
        }
    }

    fn backends(&self, vip: &str) -> Vec<api::Backend> {
        self.rt
            .block_on(self.client.backends(vip))
            .unwrap_or_else(|e| panic!("backends of {vip}: {e}"))
    }

    fn vip(&self, vip: &str) -> api::Vip {
        self.rt
            .block_on(self.client.vip(vip))
            .unwrap_or_else(|e| panic!("vip {vip}: {e}"))
    }

    fn backend(&self, vip: &str, address: &str) -> api::Backend {
        self.backends(vip)
            .into_iter()
            .find(|b| b.address == address)
            .unwrap_or_else(|| panic!("no backend {address} in {vip}"))
    }
}

/// Who answered `n` requests to `vip` from the client.
fn spread(lab: &Lab, vip: SocketAddr, n: usize) -> BTreeMap<String, usize> {
    lab.from_client(move || {
        let mut c = BTreeMap::new();
        for _ in 0..n {
            let key = match http_get(vip, "/whoami", Duration::from_secs(2)) {
                Ok((200, body)) => String::from_utf8_lossy(&body).into_owned(),
                Ok((s, _)) => format!("status {s}"),
                Err(e) => format!("error {}", e.kind()),
            };
            *c.entry(key).or_insert(0) += 1;
        }
        c
    })
    .expect("client")
}

/// Polls `f` every 200 ms until it holds or `limit` passes; how long it took.
fn wait(
    what: &str,
    limit: Duration,
    log: &dyn Fn() -> String,
    mut f: impl FnMut() -> bool,
) -> Duration {
    let t0 = Instant::now();
    loop {
        if f() {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < limit,
            "{what}: not within {limit:?}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn log_of(lab: &Lab, k: usize) -> String {
    std::fs::read_to_string(lab.log_path_at(k)).unwrap_or_default()
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
    let mut agent = start_agent(&lab, 0, &answer);
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
    lab.start_appliance(sluice()).expect("start");
    let log = || log_of(&lab, 0);
    let api = Api::of(&lab, 0);
    let vip = SocketAddr::new("192.0.2.30".parse().unwrap(), 80);
    assert!(
        lab.wait_vip(vip, Duration::from_secs(20)).expect("client"),
        "{}",
        log()
    );
    let share = |want: f64| move |b: &api::Backend| (b.ring_share - want).abs() <= 0.01;

    // 50%: weight 50 of 250 in all, a fifth of the ring.
    let took = wait("the agent's 50%", Duration::from_secs(10), &log, || {
        let b = api.backend("web", "10.0.0.21");
        b.agent.as_deref() == Some("ready 50%") && share(0.2)(&b)
    });
    let b = api.backend("web", "10.0.0.21");
    let half = spread(&lab, vip, 100);
    println!(
        "MEASURE agent 50%: ring share {:.4} (ideal 0.2000), weight {} after {took:?}; 100 \
         requests {half:?}",
        b.ring_share, b.weight
    );
    assert!(half.get("be1").copied().unwrap_or(0) > 0, "{half:?}");

    // drain: no new flow reaches it; the others serve every request.
    std::fs::write(&answer, "drain\n").expect("answer");
    wait("the agent's drain", Duration::from_secs(10), &log, || {
        let b = api.backend("web", "10.0.0.21");
        b.agent.as_deref() == Some("drain") && !b.eligible && b.ring_share == 0.0
    });
    let before = api.backend("web", "10.0.0.21").new_flows;
    let got = spread(&lab, vip, 60);
    let after = api.backend("web", "10.0.0.21").new_flows;
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
    wait("the agent's up", Duration::from_secs(10), &log, || {
        let b = api.backend("web", "10.0.0.21");
        b.agent.as_deref() == Some("ready") && b.eligible && share(1.0 / 3.0)(&b)
    });
    let got = spread(&lab, vip, 60);
    println!(
        "MEASURE agent up: ring share {:.4} (ideal 0.3333); 60 requests {got:?}",
        api.backend("web", "10.0.0.21").ring_share
    );
    assert!(got.get("be1").copied().unwrap_or(0) > 0, "{got:?}");
    let _ = agent.kill();
    let _ = agent.wait();
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
    lab.start_appliance(sluice()).expect("start");
    let api = Api::of(&lab, 0);
    let vip = SocketAddr::new("192.0.2.31".parse().unwrap(), 80);
    let primaries_only = |g: &BTreeMap<String, usize>| {
        g.keys().all(|k| k == "be1" || k == "be2") && g.values().sum::<usize>() == 20
    };
    wait(
        "the primaries up",
        Duration::from_secs(20),
        &|| log_of(&lab, 0),
        || primaries_only(&spread(&lab, vip, 20)),
    );
    assert_eq!(api.vip("web").quorum, "up");

    lab.stop_backend(0);
    lab.stop_backend(1);
    let t = wait(
        "the sorry backend alone",
        Duration::from_secs(10),
        &|| log_of(&lab, 0),
        || spread(&lab, vip, 10) == BTreeMap::from([("be3".to_string(), 10)]),
    );
    println!(
        "MEASURE sorry: every request on the sorry backend {t:?} after both primaries stopped"
    );
    assert_eq!(api.vip("web").quorum, "sorry");
    assert!(
        log_of(&lab, 0).contains("vip web: quorum lost: the sorry backends take the new flows"),
        "{}",
        log_of(&lab, 0)
    );

    lab.start_backend(0).expect("restart be1");
    let t = wait(
        "be1 alone again",
        Duration::from_secs(10),
        &|| log_of(&lab, 0),
        || spread(&lab, vip, 10) == BTreeMap::from([("be1".to_string(), 10)]),
    );
    println!("MEASURE sorry: back on the primary {t:?} after it restarted");
    assert_eq!(api.vip("web").quorum, "up");
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
    lab.start_appliances(sluice()).expect("start");
    let vip_ip: std::net::IpAddr = "192.0.2.32".parse().unwrap();
    let vip = SocketAddr::new(vip_ip, 80);
    let lb1: std::net::IpAddr = lab::appliance_addr(0, false);
    let lb2: std::net::IpAddr = lab::appliance_addr(1, false);
    let logs = |lab: &Lab| format!("{}\n---- lb2\n{}", log_of(lab, 0), log_of(lab, 1));
    // BIRD has both paths, the standby's worse; the kernel has the active one only.
    wait(
        "both paths in BIRD",
        Duration::from_secs(30),
        &|| logs(&lab),
        || {
            let all = lab
                .birdc(&["show", "route", "all", "192.0.2.32/32"])
                .unwrap_or_default();
            all.contains(&lb1.to_string()) && all.contains(&lb2.to_string())
        },
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
    let got = spread(&lab, vip, 10);
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
    let t = wait(
        "the route through the standby",
        Duration::from_secs(15),
        &|| logs(&lab),
        || lab.next_hops(vip_ip).unwrap_or_default() == vec![lb2],
    );
    let got = spread(&lab, vip, 10);
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
