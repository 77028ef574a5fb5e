//! Two speakers peering over loopback (127.0.0.1 and 127.0.0.2, no namespaces, no root):
//! announce/withdraw reach the other side's received-prefix counter, a speaker started
//! late still gets routes announced before its session came up, collisions settle on one
//! session, graceful shutdown ends with Cease/Administrative Shutdown, strangers are refused,
//! and bad config is rejected with a message naming the problem.

use bgp::{PeerConfig, PeerStatus, RouteAttrs, Speaker, SpeakerConfig, SpeakerError, State};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

fn free_port(ip: &str) -> u16 {
    let l = std::net::TcpListener::bind((ip, 0)).expect("bind probe");
    l.local_addr().expect("addr").port()
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn peer(addr: &str, port: u16, asn: u32, local: &str) -> PeerConfig {
    let mut p = PeerConfig::new(ip(addr), asn);
    p.port = port;
    p.local_address = Some(ip(local));
    p.hold_time = Duration::from_secs(3);
    p.connect_retry = Duration::from_millis(200);
    p.idle_hold = Duration::from_millis(200);
    p
}

fn config(asn: u32, id: &str, listen: SocketAddr, peers: Vec<PeerConfig>) -> SpeakerConfig {
    let mut c = SpeakerConfig::new(asn, id.parse().expect("id"));
    c.listen = Some(listen);
    c.peers = peers;
    c.graceful_shutdown_wait = Duration::from_millis(500);
    c
}

async fn wait(what: &str, s: &Speaker, f: impl Fn(&PeerStatus) -> bool) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        if f(&s.peers()[0]) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}: {:#?}", s.peers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_speakers_exchange_routes() {
    let (pa, pb) = (free_port("127.0.0.1"), free_port("127.0.0.2"));
    let la: SocketAddr = format!("127.0.0.1:{pa}").parse().expect("addr");
    let lb: SocketAddr = format!("127.0.0.2:{pb}").parse().expect("addr");
    // Both sides connect actively and listen: a connection collision on every start.
    let a = Speaker::start(config(
        65001,
        "10.0.0.1",
        la,
        vec![peer("127.0.0.2", pb, 65002, "127.0.0.1")],
    ))
    .await
    .expect("start a");
    let vip = "192.0.2.77/32".parse().expect("prefix");
    let vip6 = "2001:db8::77/128".parse().expect("prefix");
    // Announced before any session exists: must go out when it comes up.
    a.announce(
        vip,
        RouteAttrs {
            communities: vec![(65001 << 16) | 1],
            ..RouteAttrs::default()
        },
    )
    .expect("announce");
    a.announce(
        vip6,
        RouteAttrs {
            next_hop: Some(ip("2001:db8::1")),
            ..RouteAttrs::default()
        },
    )
    .expect("announce v6");
    let b = Speaker::start(config(
        65002,
        "10.0.0.2",
        lb,
        vec![peer("127.0.0.1", pa, 65001, "127.0.0.2")],
    ))
    .await
    .expect("start b");
    wait("b to receive both prefixes", &b, |p| {
        p.state == State::Established && p.prefixes_received == 2
    })
    .await;
    let sa = &a.peers()[0];
    assert_eq!(sa.state, State::Established);
    assert_eq!(sa.prefixes_announced, 2, "{sa:?}");

    a.withdraw(vip).expect("withdraw");
    wait("b to see the withdrawal", &b, |p| p.prefixes_received == 1).await;
    a.withdraw(vip6).expect("withdraw v6");
    wait("b to see the v6 withdrawal", &b, |p| {
        p.prefixes_received == 0
    })
    .await;

    // A stranger's connection is refused and counted.
    let stranger = tokio::net::TcpSocket::new_v4().expect("socket");
    stranger
        .bind("127.0.0.3:0".parse().expect("addr"))
        .expect("bind");
    let _conn = stranger.connect(lb).await.expect("connect");
    let start = Instant::now();
    while b.rejected_connections() == 0 && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(b.rejected_connections(), 1);
    assert_eq!(
        b.peers()[0].state,
        State::Established,
        "stranger disturbed the session"
    );
    assert_eq!(b.peers()[0].flaps, 0);

    a.announce(vip, RouteAttrs::default()).expect("announce");
    wait("b to receive the VIP again", &b, |p| {
        p.prefixes_received == 1
    })
    .await;
    a.graceful_shutdown().await;
    wait("b to see an administrative shutdown", &b, |p| {
        p.state != State::Established
            && p.last_error
                .as_deref()
                .is_some_and(|e| e.contains("administrative shutdown"))
            && p.prefixes_received == 0
    })
    .await;
    assert_eq!(b.peers()[0].flaps, 1);
    b.graceful_shutdown().await;
}

#[tokio::test]
async fn bad_config_is_rejected() {
    let base = || SpeakerConfig {
        listen: None,
        ..SpeakerConfig::new(65001, "10.0.0.1".parse().expect("id"))
    };
    let mut c = base();
    c.peers = vec![PeerConfig::new(ip("192.0.2.1"), 65000); 2];
    let e = Speaker::start(c).await.expect_err("duplicate peer");
    assert!(e.to_string().contains("192.0.2.1 listed twice"), "{e}");

    let mut c = base();
    let mut p = PeerConfig::new(ip("192.0.2.1"), 65000);
    p.hold_time = Duration::from_secs(2);
    c.peers = vec![p];
    let e = Speaker::start(c).await.expect_err("hold 2");
    assert!(e.to_string().contains("hold time"), "{e}");

    let mut c = base();
    let mut p = PeerConfig::new(ip("192.0.2.1"), 65000);
    p.local_address = Some(ip("2001:db8::1"));
    c.peers = vec![p];
    let e = Speaker::start(c).await.expect_err("family mismatch");
    assert!(e.to_string().contains("same family"), "{e}");

    let c = SpeakerConfig::new(65001, "0.0.0.0".parse().expect("id"));
    assert!(matches!(
        Speaker::start(c).await,
        Err(SpeakerError::Config(_))
    ));

    // A port someone else holds.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut c = base();
    c.listen = Some(holder.local_addr().expect("addr"));
    let e = Speaker::start(c).await.expect_err("port in use");
    assert!(matches!(e, SpeakerError::Listen { .. }), "{e}");
}
