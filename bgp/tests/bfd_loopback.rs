//! BFD between two speakers over loopback (127.0.0.5 and 127.0.0.6, no namespaces): the
//! sessions come Up with the configured timers, packets that fail the RFC 5881 TTL check,
//! the RFC 5880 §6.8.6 checks or demultiplexing are dropped and counted where they belong,
//! and a speaker that shuts down says AdminDown, which the other side does not take for a
//! failure (RFC 5882 §3.2): its BGP session ends by the Cease, not by BFD.

use bgp::bfd::State as BfdState;
use bgp::{BfdConfig, PeerConfig, PeerStatus, Speaker, SpeakerConfig, State};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

fn free_port(ip: &str) -> u16 {
    let l = std::net::TcpListener::bind((ip, 0)).expect("bind probe");
    l.local_addr().expect("addr").port()
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

const BFD: BfdConfig = BfdConfig {
    interval: Duration::from_millis(50),
    multiplier: 3,
};

fn config(
    asn: u32,
    id: &str,
    listen: SocketAddr,
    peer_ip: &str,
    port: u16,
    local: &str,
) -> SpeakerConfig {
    let mut p = PeerConfig::new(ip(peer_ip), if asn == 65001 { 65002 } else { 65001 });
    p.port = port;
    p.local_address = Some(ip(local));
    p.hold_time = Duration::from_secs(3);
    p.connect_retry = Duration::from_millis(200);
    p.idle_hold = Duration::from_millis(200);
    p.bfd = Some(BFD);
    let mut c = SpeakerConfig::new(asn, id.parse().expect("id"));
    c.listen = Some(listen);
    c.peers = vec![p];
    c.graceful_shutdown_wait = Duration::from_millis(100);
    c
}

async fn wait(what: &str, s: &Speaker, f: impl Fn(&PeerStatus) -> bool) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        if f(&s.peers()[0]) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}: {:#?}", s.peers());
}

fn bfd_up(p: &PeerStatus) -> bool {
    p.state == State::Established && p.bfd.as_ref().is_some_and(|b| b.state == BfdState::Up)
}

/// Sends `bytes` to `to`:3784 from `from` with this TTL.
fn send_raw(from: &str, to: &str, ttl: u32, bytes: &[u8]) {
    let s = std::net::UdpSocket::bind((ip(from), 0)).expect("bind raw sender");
    s.set_ttl(ttl).expect("ttl");
    s.send_to(bytes, (ip(to), 3784)).expect("send");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bfd_up_discards_and_admin_down() {
    let (pa, pb) = (free_port("127.0.0.5"), free_port("127.0.0.6"));
    let la: SocketAddr = format!("127.0.0.5:{pa}").parse().expect("addr");
    let lb: SocketAddr = format!("127.0.0.6:{pb}").parse().expect("addr");
    let a = Speaker::start(config(65001, "10.0.0.5", la, "127.0.0.6", pb, "127.0.0.5"))
        .await
        .expect("start a");
    let before = a.peers()[0]
        .bfd
        .clone()
        .expect("bfd status before Established");
    assert_eq!(before.state, BfdState::Down);
    assert_eq!(
        before.local_discriminator, 0,
        "session must wait for Established"
    );
    let b = Speaker::start(config(65002, "10.0.0.6", lb, "127.0.0.5", pa, "127.0.0.6"))
        .await
        .expect("start b");
    wait("BFD Up on a", &a, bfd_up).await;
    wait("BFD Up on b", &b, bfd_up).await;
    let (sa, sb) = (
        a.peers()[0].bfd.clone().unwrap(),
        b.peers()[0].bfd.clone().unwrap(),
    );
    assert_ne!(sa.local_discriminator, 0);
    assert_eq!(
        sa.remote_discriminator, sb.local_discriminator,
        "{sa:?} {sb:?}"
    );
    assert_eq!(
        sb.remote_discriminator, sa.local_discriminator,
        "{sa:?} {sb:?}"
    );
    assert_eq!(sa.tx_interval, Some(BFD.interval), "{sa:?}");
    assert_eq!(sa.detect_time, Some(BFD.interval * 3), "{sa:?}");
    assert_eq!(sa.remote_state, BfdState::Up);
    assert!(sa.packets_in > 0 && sa.packets_out > 0, "{sa:?}");
    assert_eq!(sa.discards.total(), 0, "{sa:?}");
    assert_eq!(sa.error, None);

    // A valid-looking packet from b's address but TTL 64: not a neighbour (RFC 5881 §5).
    let mut good = [0u8; 24];
    bgp::bfd::ControlPacket {
        version: 1,
        diag: bgp::bfd::Diag::NoDiagnostic,
        state: BfdState::Down,
        poll: false,
        final_: false,
        control_plane_independent: false,
        auth_present: false,
        demand: false,
        multipoint: false,
        detect_mult: 3,
        my_discriminator: 7,
        your_discriminator: 0,
        desired_min_tx: 1_000_000,
        required_min_rx: 1_000_000,
        required_min_echo_rx: 0,
    }
    .encode(&mut good);
    send_raw("127.0.0.6", "127.0.0.5", 64, &good);
    // Version 0 with TTL 255: malformed, counted as bad_version.
    let mut v0 = good;
    v0[0] &= 0x1f;
    send_raw("127.0.0.6", "127.0.0.5", 255, &v0);
    // Your Discriminator naming no session of a.
    let mut stray = good;
    stray[8..12].copy_from_slice(&0xdead_beef_u32.to_be_bytes());
    send_raw("127.0.0.6", "127.0.0.5", 255, &stray);
    // From an address that is no peer: nobody's packet.
    send_raw("127.0.0.9", "127.0.0.5", 255, &good);
    wait("the four bad packets counted", &a, |p| {
        let d = p.bfd.as_ref().unwrap().discards;
        d.bad_ttl == 1 && d.malformed[1] == 1 && d.wrong_discriminator == 1
    })
    .await;
    let start = Instant::now();
    while a.bfd_unmatched() == 0 && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(a.bfd_unmatched(), 1);
    let d = a.peers()[0].bfd.clone().unwrap().discards;
    assert_eq!(d.total(), 3, "{d:?}");
    assert!(
        bfd_up(&a.peers()[0]),
        "bad packets must not disturb the session"
    );

    // b leaves in order: BFD AdminDown first, then Cease. a's BFD goes Down without
    // resetting BGP itself.
    b.graceful_shutdown().await;
    wait("a to see AdminDown and the Cease", &a, |p| {
        let f = p.bfd.as_ref().unwrap();
        f.state == BfdState::Down
            && f.remote_state == BfdState::AdminDown
            && p.state != State::Established
            && p.last_error
                .as_deref()
                .is_some_and(|e| e.contains("administrative shutdown"))
    })
    .await;
    let f = a.peers()[0].bfd.clone().unwrap();
    assert_eq!(f.bgp_resets, 0, "AdminDown is not a failure: {f:?}");
    assert_eq!(f.downs, 1, "{f:?}");
    assert_eq!(f.local_diag, bgp::bfd::Diag::NeighborSignaledSessionDown);
    a.graceful_shutdown().await;
}

#[tokio::test]
async fn bad_bfd_config_is_rejected() {
    for (bfd, needle) in [
        (
            BfdConfig {
                interval: Duration::from_millis(100),
                multiplier: 0,
            },
            "multiplier",
        ),
        (
            BfdConfig {
                interval: Duration::from_micros(500),
                multiplier: 3,
            },
            "bfd interval",
        ),
        (
            BfdConfig {
                interval: Duration::from_secs(5000),
                multiplier: 3,
            },
            "bfd interval",
        ),
    ] {
        let mut p = PeerConfig::new(ip("192.0.2.1"), 65000);
        p.bfd = Some(bfd);
        let mut c = SpeakerConfig::new(65001, "10.0.0.1".parse().expect("id"));
        c.listen = None;
        c.peers = vec![p];
        let e = Speaker::start(c).await.expect_err("bad bfd config");
        assert!(e.to_string().contains(needle), "{bfd:?}: {e}");
    }
}
