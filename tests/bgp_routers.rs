//! The speaker against real routers from Debian packages (BIRD 2, FRR, GoBGP), each in its
//! own network namespace, with speakers in other namespaces. Every router runs with its own
//! config, control socket and pid file, and dies with its namespace when the test ends.
//!
//! Run as root: `cargo test -p bgp --test bgp_routers -- --nocapture` (prints timings).

#[path = "bgp_common/mod.rs"]
mod bgp_common;

use bgp::{PeerConfig, RouteAttrs, SpeakerConfig, State};
use bgp_common::{NsSpeaker, peer};
use lab::bird::Config;
use lab::netns::{Netns, link, require_program, require_root, veth};
use lab::testing::{BirdRouter, Daemon, Frr, TempDir, kernel_route, output_text, wait_until};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// BIRD config: ECMP into the kernel (both families), sessions from the template `spk`.
fn bird_config(router_id: &str, local_as: u32) -> Config {
    Config::new(router_id, local_as)
        .kernel(true, true, true)
        .families(true, true)
        .template("spk")
}

fn speaker_config(asn: u32, router_id: &str, peers: Vec<PeerConfig>) -> SpeakerConfig {
    let mut c = SpeakerConfig::new(asn, router_id.parse().expect("router id"));
    c.peers = peers;
    c.graceful_shutdown_wait = Duration::from_secs(3);
    c
}

fn established(s: &NsSpeaker) -> bool {
    s.peers().iter().all(|p| p.state == State::Established)
}

const VIP: &str = "192.0.2.10/32";

/// Scenarios a and b: two speakers announce one VIP; BIRD installs both next hops; when
/// one speaker's traffic is blackholed, BIRD drops that next hop after the 3 s hold time.
#[test]
fn bird_ecmp_and_hold_timer_expiry() {
    require_root();
    require_program("nft", "nftables");
    let r = Netns::new("bgr");
    let s1 = Netns::new("bgs");
    let s2 = Netns::new("bgs");
    link(&r, "s1", &s1, "upl", "10.1.1");
    link(&r, "s2", &s2, "upl", "10.1.2");
    let bird = BirdRouter::start(
        &r,
        &bird_config("10.1.1.1", 65000)
            .peer("sp1", "10.1.1.2", 65001)
            .peer("sp2", "10.1.2.2", 65001)
            .render(),
    );
    let t0 = Instant::now();
    let sp1 = NsSpeaker::start(
        &s1,
        speaker_config(65001, "10.1.1.2", vec![peer("10.1.1.1", 65000, "10.1.1.2")]),
    );
    let sp2 = NsSpeaker::start(
        &s2,
        speaker_config(65001, "10.1.2.2", vec![peer("10.1.2.1", 65000, "10.1.2.2")]),
    );
    sp1.announce(VIP, RouteAttrs::default());
    sp2.announce(VIP, RouteAttrs::default());
    wait_until(
        "ECMP route with both next hops",
        Duration::from_secs(30),
        || {
            let k = kernel_route(&r, VIP);
            k.contains("via 10.1.1.2") && k.contains("via 10.1.2.2")
        },
        || format!("{}\n{}", kernel_route(&r, VIP), bird.view()),
    );
    let up = t0.elapsed();
    println!("MEASURE bird: speaker start -> ECMP VIP route in kernel: {up:?}");
    let k = kernel_route(&r, VIP);
    assert!(
        k.contains("nexthop"),
        "expected a multipath route, got: {k}"
    );
    assert!(established(&sp1) && established(&sp2));
    let st = &sp1.peers()[0];
    assert_eq!(st.prefixes_announced, 1, "{st:?}");
    assert!(st.messages_out >= 3 && st.messages_in >= 2, "{st:?}");
    assert!(
        st.uptime.is_some() && st.established_since.is_some(),
        "{st:?}"
    );

    // b: blackhole speaker 1 (no FIN, no NOTIFICATION): only BIRD's hold timer notices.
    s1.sh("nft -f - <<'EOF'
table inet blk {
  chain in { type filter hook input priority 0; policy drop; }
  chain out { type filter hook output priority 0; policy drop; }
}
EOF");
    let t1 = Instant::now();
    wait_until(
        "next hop 10.1.1.2 to go after the hold time",
        Duration::from_secs(15),
        || {
            let k = kernel_route(&r, VIP);
            !k.contains("10.1.1.2") && k.contains("10.1.2.2")
        },
        || format!("{}\n{}", kernel_route(&r, VIP), bird.view()),
    );
    let gone = t1.elapsed();
    println!("MEASURE bird: blackholed speaker -> its next hop removed: {gone:?}");
    assert!(
        gone >= Duration::from_millis(1500),
        "next hop vanished after {gone:?}, before any hold timer could expire"
    );
    let proto = bird.cmd(&["show", "protocols", "all", "sp1"]);
    assert!(
        proto.to_lowercase().contains("hold timer"),
        "BIRD should report a hold timer expiry:\n{proto}"
    );

    // Withdraw on the remaining speaker: the route disappears.
    let t2 = Instant::now();
    sp2.withdraw(VIP);
    wait_until(
        "VIP route to disappear after withdraw",
        Duration::from_secs(10),
        || kernel_route(&r, VIP).trim().is_empty(),
        || format!("{}\n{}", kernel_route(&r, VIP), bird.view()),
    );
    println!(
        "MEASURE bird: withdraw -> route gone from kernel: {:?}",
        t2.elapsed()
    );
    assert_eq!(sp2.peers()[0].prefixes_announced, 0);
}

/// Scenario c: graceful shutdown tags the route with GRACEFUL_SHUTDOWN (65535,0) while the
/// session is still up, then withdraws it and closes with Cease/Administrative Shutdown.
#[test]
fn bird_graceful_shutdown() {
    require_root();
    let r = Netns::new("bgr");
    let s1 = Netns::new("bgs");
    link(&r, "s1", &s1, "upl", "10.2.1");
    let bird = BirdRouter::start(
        &r,
        &bird_config("10.2.1.1", 65000)
            .peer("sp1", "10.2.1.2", 65001)
            .render(),
    );
    let sp = NsSpeaker::start(
        &s1,
        speaker_config(65001, "10.2.1.2", vec![peer("10.2.1.1", 65000, "10.2.1.2")]),
    );
    let attrs = RouteAttrs {
        communities: vec![(65001 << 16) | 42],
        large_communities: vec![[65001, 1, 2]],
        med: Some(7),
        ..RouteAttrs::default()
    };
    sp.announce(VIP, attrs);
    wait_until(
        "VIP in BIRD",
        Duration::from_secs(30),
        || bird.cmd(&["show", "route", VIP]).contains("10.2.1.2"),
        || bird.view(),
    );
    let before = bird.cmd(&["show", "route", "all", VIP]);
    assert!(
        before.contains("(65001,42)"),
        "community missing:\n{before}"
    );
    assert!(
        before.contains("(65001, 1, 2)"),
        "large community missing:\n{before}"
    );
    assert!(before.contains("BGP.med: 7"), "MED missing:\n{before}");
    assert!(
        before.contains("BGP.as_path: 65001\n"),
        "eBGP must prepend our AS once:\n{before}"
    );
    assert!(
        before.contains("BGP.next_hop: 10.2.1.2"),
        "next hop must default to the session address:\n{before}"
    );
    assert!(
        !before.contains("(65535,0)"),
        "GRACEFUL_SHUTDOWN too early:\n{before}"
    );

    let done = sp.graceful_shutdown();
    wait_until(
        "GRACEFUL_SHUTDOWN community on the route",
        Duration::from_secs(3),
        || {
            bird.cmd(&["show", "route", "all", VIP])
                .contains("(65535,0)")
        },
        || bird.view(),
    );
    let proto = bird.cmd(&["show", "protocols", "sp1"]);
    assert!(
        proto.contains("Established"),
        "session closed too early:\n{proto}"
    );
    done.recv_timeout(Duration::from_secs(15))
        .expect("graceful shutdown finished");
    wait_until(
        "VIP withdrawn and session closed by Cease",
        Duration::from_secs(10),
        || {
            let p = bird.cmd(&["show", "protocols", "all", "sp1"]);
            !bird.cmd(&["show", "route", VIP]).contains("10.2.1.2")
                && p.contains("Administrative shutdown")
        },
        || bird.view(),
    );
}

/// iBGP: no AS prepended, LOCAL_PREF sent (200 from the route), configured next hop used.
#[test]
fn bird_ibgp_local_pref_and_next_hop() {
    require_root();
    let r = Netns::new("bgr");
    let s1 = Netns::new("bgs");
    link(&r, "s1", &s1, "upl", "10.5.1");
    let config = bird_config("10.5.1.1", 65000)
        .peer_with("sp1", "10.5.1.2", 65000, &["direct;"])
        .render();
    let bird = BirdRouter::start(&r, &config);
    let mut p = peer("10.5.1.1", 65000, "10.5.1.2");
    // Traffic for the VIP goes to another address on the speaker's subnet.
    p.next_hop_v4 = Some("10.5.1.3".parse().expect("ip"));
    let sp = NsSpeaker::start(&s1, speaker_config(65000, "10.5.1.2", vec![p]));
    sp.announce(
        VIP,
        RouteAttrs {
            local_pref: Some(200),
            ..RouteAttrs::default()
        },
    );
    wait_until(
        "iBGP route in BIRD",
        Duration::from_secs(30),
        || bird.cmd(&["show", "route", VIP]).contains("10.5.1.3"),
        || bird.view(),
    );
    let all = bird.cmd(&["show", "route", "all", VIP]);
    assert!(
        all.contains("BGP.local_pref: 200"),
        "LOCAL_PREF missing:\n{all}"
    );
    assert!(
        all.contains("BGP.as_path: \n"),
        "iBGP AS_PATH must be empty:\n{all}"
    );
    assert!(
        all.contains("BGP.next_hop: 10.5.1.3"),
        "configured next hop:\n{all}"
    );
}

/// Scenario e: an IPv6 VIP /128 over an IPv6 session.
#[test]
fn bird_ipv6_vip() {
    require_root();
    let r = Netns::new("bgr");
    let s1 = Netns::new("bgs");
    link(&r, "s1", &s1, "upl", "fd00:61::");
    let bird = BirdRouter::start(
        &r,
        &bird_config("10.6.1.1", 65000)
            .peer("sp1", "fd00:61::2", 65001)
            .render(),
    );
    let mut p = peer("fd00:61::1", 65000, "fd00:61::2");
    p.ipv4_unicast = false;
    let t0 = Instant::now();
    let sp = NsSpeaker::start(&s1, speaker_config(65001, "10.6.1.2", vec![p]));
    let vip6 = "2001:db8:5::10/128";
    sp.announce(vip6, RouteAttrs::default());
    wait_until(
        "IPv6 VIP in the kernel",
        Duration::from_secs(30),
        || kernel_route(&r, vip6).contains("via fd00:61::2"),
        || format!("{}\n{}", kernel_route(&r, vip6), bird.view()),
    );
    println!(
        "MEASURE bird v6: speaker start -> /128 in kernel: {:?}",
        t0.elapsed()
    );
    let t1 = Instant::now();
    sp.withdraw(vip6);
    wait_until(
        "IPv6 VIP withdrawn",
        Duration::from_secs(10),
        || kernel_route(&r, vip6).trim().is_empty(),
        || bird.view(),
    );
    println!("MEASURE bird v6: withdraw -> /128 gone: {:?}", t1.elapsed());
}

/// Scenario d (FRR): zebra and bgpd with private sockets; announce then withdraw.
#[test]
fn frr_announce_withdraw() {
    require_root();
    let r = Netns::new("bgr");
    let s1 = Netns::new("bgs");
    let s2 = Netns::new("bgs");
    link(&r, "s1", &s1, "upl", "10.3.1");
    link(&r, "s2", &s2, "upl", "10.3.2");
    let frr = Frr::start(
        &r,
        "hostname r
router bgp 65000
 bgp router-id 10.3.1.1
 no bgp ebgp-requires-policy
 bgp bestpath as-path multipath-relax
 timers bgp 1 3
 neighbor 10.3.1.2 remote-as 65001
 neighbor 10.3.1.2 timers connect 1
 neighbor 10.3.2.2 remote-as 65002
 neighbor 10.3.2.2 timers connect 1
 address-family ipv4 unicast
  maximum-paths 4
 exit-address-family
",
        None,
    );
    let show = |cmd: &str| frr.show(cmd);
    let view = || format!("{}\n{}", show("show bgp summary"), show("show ip bgp"));
    let t0 = Instant::now();
    let sp1 = NsSpeaker::start(
        &s1,
        speaker_config(65001, "10.3.1.2", vec![peer("10.3.1.1", 65000, "10.3.1.2")]),
    );
    let sp2 = NsSpeaker::start(
        &s2,
        speaker_config(65002, "10.3.2.2", vec![peer("10.3.2.1", 65000, "10.3.2.2")]),
    );
    sp1.announce(VIP, RouteAttrs::default());
    sp2.announce(VIP, RouteAttrs::default());
    wait_until(
        "FRR to have the VIP from both speakers",
        Duration::from_secs(40),
        || {
            let j = show(&format!("show ip bgp {VIP} json"));
            j.contains("10.3.1.2") && j.contains("10.3.2.2")
        },
        view,
    );
    println!(
        "MEASURE frr: speaker start -> VIP in bgpd from both: {:?}",
        t0.elapsed()
    );
    wait_until(
        "zebra to install an ECMP route",
        Duration::from_secs(20),
        || {
            let k = kernel_route(&r, VIP);
            k.contains("10.3.1.2") && k.contains("10.3.2.2")
        },
        || format!("{}\n{}", kernel_route(&r, VIP), view()),
    );
    sp1.withdraw(VIP);
    sp2.withdraw(VIP);
    wait_until(
        "FRR to drop the VIP",
        Duration::from_secs(10),
        || !show(&format!("show ip bgp {VIP} json")).contains("nexthops"),
        view,
    );
}

/// Scenario d (GoBGP): gobgpd with its own API port; announce then withdraw.
#[test]
fn gobgp_announce_withdraw() {
    require_root();
    require_program("gobgpd", "gobgpd");
    require_program("gobgp", "gobgpd");
    let r = Netns::new("bgr");
    let s1 = Netns::new("bgs");
    link(&r, "s1", &s1, "upl", "10.4.1");
    let dir = TempDir::new("gobgp");
    let conf = dir.path("gobgpd.toml");
    std::fs::write(
        &conf,
        r#"[global.config]
  as = 65000
  router-id = "10.4.1.1"
[[neighbors]]
  [neighbors.config]
    neighbor-address = "10.4.1.2"
    peer-as = 65001
  [neighbors.timers.config]
    hold-time = 3
    keepalive-interval = 1
    connect-retry = 1
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-unicast"
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv6-unicast"
"#,
    )
    .expect("gobgpd.toml");
    let port = "50777";
    let _gobgpd = Daemon(r.spawn(&[
        "gobgpd",
        "-f",
        &conf,
        "--api-hosts",
        &format!("127.0.0.1:{port}"),
        "--pprof-disable",
        "-l",
        "warn",
    ]));
    let gobgp = |args: &[&str]| {
        let mut full = vec!["gobgp", "-p", port, "-u", "127.0.0.1"];
        full.extend_from_slice(args);
        output_text(&r.output(&full))
    };
    let view = || format!("{}\n{}", gobgp(&["neighbor"]), gobgp(&["global", "rib"]));
    let t0 = Instant::now();
    let sp = NsSpeaker::start(
        &s1,
        speaker_config(65001, "10.4.1.2", vec![peer("10.4.1.1", 65000, "10.4.1.2")]),
    );
    let attrs = RouteAttrs {
        communities: vec![(65001 << 16) | 7],
        ..RouteAttrs::default()
    };
    sp.announce(VIP, attrs);
    wait_until(
        "GoBGP to have the VIP",
        Duration::from_secs(30),
        || {
            let rib = gobgp(&["global", "rib", VIP]);
            rib.contains("10.4.1.2") && rib.contains("65001:7")
        },
        view,
    );
    println!(
        "MEASURE gobgp: speaker start -> VIP in RIB: {:?}",
        t0.elapsed()
    );
    sp.withdraw(VIP);
    wait_until(
        "GoBGP to drop the VIP",
        Duration::from_secs(10),
        || !gobgp(&["global", "rib", VIP]).contains("10.4.1.2"),
        view,
    );
    let st = &sp.peers()[0];
    assert_eq!(st.address, "10.4.1.1".parse::<IpAddr>().expect("ip"));
    assert_eq!(st.state, State::Established);
}

/// The route attributes of a VIP's announcement policy: AS-path prepends, MED, standard
/// and large communities from the route and from the peer's export, and `peers`: the prefix
/// goes to the listed peer only.
fn policy_attrs() -> RouteAttrs {
    RouteAttrs {
        med: Some(50),
        as_path_prepend: 2,
        communities: vec![(65001 << 16) | 80],
        large_communities: vec![[65001, 1, 2]],
        peers: Some(vec!["10.7.1.1".parse().expect("literal")]),
        ..RouteAttrs::default()
    }
}

/// Two BIRD routers, each with a session to one speaker: the router the route is for sees
/// every attribute, the other never gets the prefix; moving the route to the other router
/// withdraws it from the first.
#[test]
fn bird_sees_the_announcement_policy() {
    require_root();
    let ra = Netns::new("hpba");
    let rb = Netns::new("hpbb");
    let s1 = Netns::new("hpbs");
    link(&ra, "s1", &s1, "upl", "10.7.1");
    veth(&rb, "s1", &s1, "upl2");
    rb.run(&["ip", "addr", "add", "10.7.3.1/24", "dev", "s1"]);
    s1.run(&["ip", "addr", "add", "10.7.3.2/24", "dev", "upl2"]);
    let bird_a = BirdRouter::start(
        &ra,
        &bird_config("10.7.1.1", 65000)
            .peer("pa", "10.7.1.2", 65001)
            .render(),
    );
    let bird_b = BirdRouter::start(
        &rb,
        &bird_config("10.7.3.1", 65000)
            .peer("pb", "10.7.3.2", 65001)
            .render(),
    );
    let mut a = peer("10.7.1.1", 65000, "10.7.1.2");
    a.export.communities = vec![(65000 << 16) | 7];
    let b = peer("10.7.3.1", 65000, "10.7.3.2");
    let sp = NsSpeaker::start(&s1, speaker_config(65001, "10.7.1.2", vec![a, b]));
    let view = || format!("{}\n{}", bird_a.view(), bird_b.view());
    wait_until(
        "both sessions up",
        Duration::from_secs(30),
        || established(&sp),
        view,
    );
    sp.announce(VIP, policy_attrs());
    wait_until(
        "the VIP in router a",
        Duration::from_secs(20),
        || bird_a.cmd(&["show", "route", VIP]).contains("10.7.1.2"),
        view,
    );
    let all = bird_a.cmd(&["show", "route", "all", VIP]);
    for want in [
        "BGP.as_path: 65001 65001 65001",
        "BGP.med: 50",
        "BGP.community: (65000,7) (65001,80)",
        "BGP.large_community: (65001, 1, 2)",
    ] {
        assert!(all.contains(want), "{want:?} missing:\n{all}");
    }
    std::thread::sleep(Duration::from_secs(2));
    let other = bird_b.cmd(&["show", "route", VIP]);
    assert!(!other.contains("10.7.3.2"), "announced to b too:\n{other}");
    let mut to_b = policy_attrs();
    to_b.peers = Some(vec!["10.7.3.1".parse().expect("literal")]);
    sp.announce(VIP, to_b);
    wait_until(
        "the VIP in router b only",
        Duration::from_secs(20),
        || {
            bird_b.cmd(&["show", "route", VIP]).contains("10.7.3.2")
                && !bird_a.cmd(&["show", "route", VIP]).contains("10.7.1.2")
        },
        view,
    );
    let all = bird_b.cmd(&["show", "route", "all", VIP]);
    assert!(
        all.contains("BGP.community: (65001,80)") && !all.contains("65000,7"),
        "b's route has no export community of a's:\n{all}"
    );
}

/// FRR sees the same attributes (its JSON view of the path).
#[test]
fn frr_sees_the_announcement_policy() {
    require_root();
    let r = Netns::new("hpfr");
    let s1 = Netns::new("hpfs");
    link(&r, "s1", &s1, "upl", "10.7.2");
    let frr = Frr::start(
        &r,
        "hostname r
router bgp 65000
 bgp router-id 10.7.2.1
 no bgp ebgp-requires-policy
 timers bgp 1 3
 neighbor 10.7.2.2 remote-as 65001
 neighbor 10.7.2.2 timers connect 1
",
        None,
    );
    let mut p = peer("10.7.2.1", 65000, "10.7.2.2");
    p.export.large_communities = vec![[65000, 9, 9]];
    let sp = NsSpeaker::start(&s1, speaker_config(65001, "10.7.2.2", vec![p]));
    let mut attrs = policy_attrs();
    attrs.peers = None;
    sp.announce(VIP, attrs);
    let show = || frr.show(&format!("show ip bgp {VIP} json"));
    wait_until(
        "FRR to have the VIP",
        Duration::from_secs(40),
        || show().contains("10.7.2.2"),
        || frr.show("show bgp summary"),
    );
    let j = show();
    for want in [
        "\"string\":\"65001 65001 65001\"",
        "\"metric\":50",
        "65001:80",
        "65000:9:9 65001:1:2",
    ] {
        assert!(
            j.replace(": ", ":").contains(want),
            "{want:?} missing:\n{j}"
        );
    }
}

/// iBGP to FRR: LOCAL_PREF as the route carries it (300), an empty AS path, the configured
/// next hop: what BIRD sees in `bird_ibgp_local_pref_and_next_hop`, FRR sees too.
#[test]
fn frr_ibgp_local_pref_and_next_hop() {
    require_root();
    let r = Netns::new("hpir");
    let s1 = Netns::new("hpis");
    link(&r, "s1", &s1, "upl", "10.7.4");
    let frr = Frr::start(
        &r,
        "hostname r
router bgp 65000
 bgp router-id 10.7.4.1
 timers bgp 1 3
 neighbor 10.7.4.2 remote-as 65000
 neighbor 10.7.4.2 timers connect 1
",
        None,
    );
    let mut p = peer("10.7.4.1", 65000, "10.7.4.2");
    p.next_hop_v4 = Some("10.7.4.3".parse().expect("ip"));
    let sp = NsSpeaker::start(&s1, speaker_config(65000, "10.7.4.2", vec![p]));
    sp.announce(
        VIP,
        RouteAttrs {
            local_pref: Some(300),
            ..RouteAttrs::default()
        },
    );
    let show = || {
        frr.show(&format!("show ip bgp {VIP} json"))
            .replace(": ", ":")
    };
    wait_until(
        "FRR to have the VIP over iBGP",
        Duration::from_secs(40),
        || show().contains("10.7.4.3"),
        || frr.show("show bgp summary"),
    );
    let j = show();
    for want in ["\"locPrf\":300", "\"ip\":\"10.7.4.3\"", "\"length\":0"] {
        assert!(j.contains(want), "{want:?} missing:\n{j}");
    }
}
