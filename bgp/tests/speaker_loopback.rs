//! Two speakers peering over loopback (127.0.0.1 and 127.0.0.2, no namespaces, no root):
//! announce/withdraw reach the other side's received-prefix counter, a speaker started
//! late still gets routes announced before its session came up, collisions settle on one
//! session, graceful shutdown ends with Cease/Administrative Shutdown, strangers are refused,
//! bad config is rejected with a message naming the problem, and MD5 keys and GTSM reach
//! the listener and outgoing sockets (through a recording `SocketOptions`) before use.

use bgp::{PeerConfig, PeerStatus, RouteAttrs, Speaker, SpeakerConfig, SpeakerError, State};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
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

    // A stranger's connection is refused and counted, and leaves the session alone.
    let flaps_before = b.peers()[0].flaps;
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
    assert_eq!(
        b.peers()[0].flaps,
        flaps_before,
        "stranger made the session flap: {:?}",
        b.peers()[0]
    );

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

/// Records what the speaker asks of its `SocketOptions`, failing MD5 on request.
#[derive(Debug, Default)]
struct Recorder {
    calls: std::sync::Mutex<Vec<String>>,
    fail_md5: bool,
}

impl bgp::SocketOptions for Recorder {
    fn tcp_md5(
        &self,
        _fd: std::os::fd::BorrowedFd<'_>,
        peer: IpAddr,
        key: &[u8],
    ) -> std::io::Result<()> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("md5 {peer} {}", String::from_utf8_lossy(key)));
        if self.fail_md5 {
            return Err(std::io::Error::from_raw_os_error(22));
        }
        Ok(())
    }

    fn min_ttl(&self, _fd: std::os::fd::BorrowedFd<'_>, v6: bool, ttl: u8) -> std::io::Result<()> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("minttl v6={v6} {ttl}"));
        Ok(())
    }
}

#[test]
fn md5_key_length_and_redacted_debug() {
    assert!(bgp::Md5Key::new(Vec::new()).is_err());
    assert!(bgp::Md5Key::new(vec![b'k'; 81]).is_err());
    let k = bgp::Md5Key::new(vec![b'k'; 80]).expect("80 bytes");
    assert_eq!(k.as_bytes().len(), 80);
    let k = bgp::Md5Key::new("hunter2").expect("key");
    assert_eq!(format!("{k:?}"), "Md5Key(<7 bytes>)");
}

#[tokio::test]
async fn security_options_reach_the_listener_before_accept() {
    // Without SocketOptions a key or GTSM is refused, not silently dropped.
    for (key, gtsm) in [(true, false), (false, true)] {
        let mut p = PeerConfig::new(ip("192.0.2.1"), 65000);
        p.md5_key = key.then(|| bgp::Md5Key::new("k").expect("key"));
        p.ttl_security = gtsm;
        let mut c = SpeakerConfig::new(65001, "10.0.0.1".parse().expect("id"));
        c.listen = None;
        c.peers = vec![p];
        let e = Speaker::start(c).await.expect_err("no socket options");
        assert!(e.to_string().contains("socket_options"), "{e}");
    }

    // A dual-stack listener gets the IPv4 peer's key v4-mapped, the IPv6 peer's as is,
    // nothing for the peer without a key, and the minimum TTL since every peer uses GTSM.
    let rec = Arc::new(Recorder::default());
    let mut a = PeerConfig::new(ip("192.0.2.1"), 65000);
    a.md5_key = Some(bgp::Md5Key::new("four").expect("key"));
    let mut b = PeerConfig::new(ip("2001:db8::1"), 65000);
    b.md5_key = Some(bgp::Md5Key::new("six").expect("key"));
    let c3 = PeerConfig::new(ip("192.0.2.3"), 65000);
    let mut peers = vec![a, b, c3];
    for p in &mut peers {
        p.ttl_security = true;
        // Never connect out: these addresses are not ours to send to.
        p.passive = true;
    }
    let mut c = SpeakerConfig::new(65001, "10.0.0.1".parse().expect("id"));
    c.listen = Some("[::1]:0".parse().expect("addr"));
    c.peers = peers.clone();
    c.socket_options = Some(rec.clone());
    let s = Speaker::start(c).await.expect("start");
    assert_eq!(
        *rec.calls.lock().unwrap(),
        [
            "md5 ::ffff:192.0.2.1 four",
            "md5 2001:db8::1 six",
            "minttl v6=true 255"
        ]
    );
    drop(s);

    // One peer without GTSM: no minimum TTL on the shared listener; an IPv4 listener
    // cannot take an IPv6 peer's key.
    let rec = Arc::new(Recorder::default());
    peers[2].ttl_security = false;
    let mut c = SpeakerConfig::new(65001, "10.0.0.1".parse().expect("id"));
    c.listen = Some("127.0.0.1:0".parse().expect("addr"));
    c.peers = peers.clone();
    c.socket_options = Some(rec.clone());
    let s = Speaker::start(c).await.expect("start");
    assert_eq!(*rec.calls.lock().unwrap(), ["md5 192.0.2.1 four"]);
    drop(s);

    // The kernel refusing a key stops the start with the peer named.
    let rec = Arc::new(Recorder {
        fail_md5: true,
        ..Recorder::default()
    });
    let mut c = SpeakerConfig::new(65001, "10.0.0.1".parse().expect("id"));
    c.listen = Some("127.0.0.1:0".parse().expect("addr"));
    c.peers = peers;
    c.socket_options = Some(rec);
    let e = Speaker::start(c).await.expect_err("md5 refused");
    assert!(
        matches!(e, SpeakerError::SocketOption { peer, .. } if peer == ip("192.0.2.1")),
        "{e}"
    );
}

/// An outgoing connection gets key and minimum TTL before it connects, and a session
/// whose key cannot be set reports why instead of connecting unsigned.
#[tokio::test]
async fn security_options_reach_outgoing_connections() {
    let target = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = target.local_addr().expect("addr").port();
    let rec = Arc::new(Recorder {
        fail_md5: true,
        ..Recorder::default()
    });
    let mut p = peer("127.0.0.1", port, 65000, "127.0.0.1");
    p.md5_key = Some(bgp::Md5Key::new("key").expect("key"));
    p.ttl_security = true;
    let mut c = SpeakerConfig::new(65001, "10.0.0.1".parse().expect("id"));
    c.listen = None;
    c.peers = vec![p];
    c.socket_options = Some(rec.clone());
    let s = Speaker::start(c).await.expect("start");
    let start = Instant::now();
    let err = loop {
        if let Some(e) = s.peers()[0].last_error.clone() {
            break e;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "no connect error");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(err.contains("TCP MD5"), "{err}");
    let calls = rec.calls.lock().unwrap().clone();
    assert_eq!(calls[..2], ["minttl v6=false 255", "md5 127.0.0.1 key"]);
    target.set_nonblocking(true).expect("nonblocking");
    assert!(target.accept().is_err(), "nothing may connect unsigned");
}
