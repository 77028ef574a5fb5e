//! Session security against BIRD 2: TCP MD5 signatures (RFC 2385) and the receive check of
//! GTSM (RFC 5082), each with a case that must come up and one that must not, proved by the
//! kernel's own drop counters (`nstat`). BIRD runs in a router namespace, the speaker on a
//! thread inside a speaker namespace, linked by a veth pair.
//!
//! The speaker gets its socket options from `sys::sockopt`, the implementation the appliance
//! ships.
//!
//! Run as root: `cargo test -p bgp --test bgp_security -- --nocapture`.

#[path = "bgp_common/mod.rs"]
mod bgp_common;

use bgp::{Md5Key, RouteAttrs, SpeakerConfig, State};
use bgp_common::{Cmd, NsSpeaker, peer};
use lab::bird::Config;
use lab::netns::{Netns, link, require_program, require_root};
use lab::testing::{BirdRouter, output_text, wait_until};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sys::sockopt;

/// The status of the speaker's one peer.
fn only_peer(sp: &NsSpeaker) -> bgp::PeerStatus {
    let mut peers = sp.peers();
    assert_eq!(peers.len(), 1, "one peer configured");
    peers.remove(0)
}

/// BIRD config with one eBGP protocol `spk` to the speaker at 10.9.0.2; `extra` goes into
/// that protocol (password, ttl security).
fn bird_config(extra: &str) -> String {
    Config::new("10.9.0.1", 65000)
        .peer_with("spk", "10.9.0.2", 65001, &[extra])
        .render()
}

/// Router namespace linked to a speaker namespace: 10.9.0.1 (router) / 10.9.0.2 (speaker).
fn pair() -> (Netns, Netns) {
    let r = Netns::new("bsr");
    let s = Netns::new("bss");
    link(&r, "dn", &s, "upl", "10.9.0");
    (r, s)
}

/// A speaker config for the one peer, with the appliance's socket options.
fn speaker_config(md5: Option<&str>, ttl_security: bool) -> SpeakerConfig {
    let mut p = peer("10.9.0.1", 65000, "10.9.0.2");
    p.md5_key = md5.map(|k| Md5Key::new(k).expect("test key"));
    p.ttl_security = ttl_security;
    let mut c = SpeakerConfig::new(65001, "10.9.0.2".parse().unwrap());
    c.peers = vec![p];
    c.socket_options = Some(Arc::new(sockopt::KernelSocketOptions));
    c
}

/// Kernel SNMP/netstat counters of the namespace, absolute, without touching nstat's
/// history file (`-s`), so tests running in parallel do not disturb each other.
fn counters(ns: &Netns, names: &[&str]) -> u64 {
    require_program("nstat", "iproute2");
    let out = output_text(&ns.output(&["nstat", "-asz"]));
    names
        .iter()
        .map(|n| {
            out.lines()
                .find_map(|l| {
                    let mut f = l.split_whitespace();
                    (f.next() == Some(n)).then(|| f.next()?.parse::<u64>().ok())?
                })
                .unwrap_or_else(|| panic!("nstat shows no {n}:\n{out}"))
        })
        .sum()
}

const MD5_DROPS: &[&str] = &[
    "TcpExtTCPMD5Failure",
    "TcpExtTCPMD5Unexpected",
    "TcpExtTCPMD5NotFound",
];
const VIP: &str = "192.0.2.10/32";

/// Watches for `limit` that neither side reaches Established.
fn assert_stays_down(bird: &BirdRouter<'_>, sp: &NsSpeaker, limit: Duration) {
    let start = Instant::now();
    while start.elapsed() < limit {
        let st = only_peer(sp);
        assert_ne!(st.state, State::Established, "{}", bird.view());
        assert_ne!(bird.bgp_state("spk"), "Established", "{}", bird.view());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn md5_same_key_establishes_and_route_is_learned() {
    require_root();
    let (r, s) = pair();
    let bird = BirdRouter::start(&r, &bird_config("password \"s3cret-Key!\";"));
    let md5_before = counters(&r, MD5_DROPS);
    let sp = NsSpeaker::start(&s, speaker_config(Some("s3cret-Key!"), false));
    wait_until(
        "session Established with MD5",
        Duration::from_secs(20),
        || only_peer(&sp).state == State::Established,
        || bird.view(),
    );
    sp.send(Cmd::Announce(VIP.parse().unwrap(), RouteAttrs::default()));
    wait_until(
        "BIRD to learn the VIP",
        Duration::from_secs(10),
        || bird.cmd(&["show", "route", VIP]).contains("10.9.0.2"),
        || bird.view(),
    );
    assert_eq!(bird.bgp_state("spk"), "Established");
    let md5_after = counters(&r, MD5_DROPS);
    assert_eq!(
        md5_after, md5_before,
        "with matching keys the router must drop no segment for its signature"
    );
}

#[test]
fn md5_wrong_key_never_establishes_and_router_counts_failures() {
    require_root();
    let (r, s) = pair();
    let bird = BirdRouter::start(&r, &bird_config("password \"right-key\";"));
    let router_before = counters(&r, MD5_DROPS);
    let speaker_before = counters(&s, MD5_DROPS);
    let sp = NsSpeaker::start(&s, speaker_config(Some("wrong-key"), false));
    assert_stays_down(&bird, &sp, Duration::from_secs(8));
    let router_after = counters(&r, MD5_DROPS);
    let speaker_after = counters(&s, MD5_DROPS);
    eprintln!(
        "md5 drops: router {router_before}->{router_after}, speaker {speaker_before}->{speaker_after}"
    );
    assert!(
        router_after > router_before,
        "the router's kernel must have dropped our badly signed SYNs\n{}",
        bird.view()
    );
    assert!(
        speaker_after > speaker_before,
        "our listener must have dropped BIRD's SYNs signed with its key"
    );
}

#[test]
fn md5_unsigned_speaker_is_refused_by_a_router_with_a_key() {
    require_root();
    let (r, s) = pair();
    let bird = BirdRouter::start(&r, &bird_config("password \"right-key\";"));
    let before = counters(&r, &["TcpExtTCPMD5NotFound"]);
    let sp = NsSpeaker::start(&s, speaker_config(None, false));
    assert_stays_down(&bird, &sp, Duration::from_secs(6));
    let after = counters(&r, &["TcpExtTCPMD5NotFound"]);
    assert!(
        after > before,
        "the router must count our unsigned SYNs ({before} -> {after})"
    );
}

#[test]
fn gtsm_both_sides_direct_establishes() {
    require_root();
    let (r, s) = pair();
    let bird = BirdRouter::start(&r, &bird_config("ttl security yes;"));
    let before = counters(&s, &["TcpExtTCPMinTTLDrop"]);
    let sp = NsSpeaker::start(&s, speaker_config(None, true));
    wait_until(
        "session Established with GTSM",
        Duration::from_secs(20),
        || only_peer(&sp).state == State::Established,
        || bird.view(),
    );
    sp.send(Cmd::Announce(VIP.parse().unwrap(), RouteAttrs::default()));
    wait_until(
        "BIRD to learn the VIP",
        Duration::from_secs(10),
        || bird.cmd(&["show", "route", VIP]).contains("10.9.0.2"),
        || bird.view(),
    );
    let after = counters(&s, &["TcpExtTCPMinTTLDrop"]);
    assert_eq!(
        after, before,
        "BIRD sends with TTL 255; nothing may be dropped"
    );
}

/// BIRD without `ttl security` sends eBGP segments with TTL 1 (a direct neighbour), so
/// our IP_MINTTL 255 must drop all of them: its SYNs at our listener and its SYN-ACKs to
/// our connects. BIRD itself checks nothing here, so the session staying down is our
/// receive check alone.
#[test]
fn gtsm_peer_sending_low_ttl_is_dropped_by_our_kernel() {
    require_root();
    let (r, s) = pair();
    let bird = BirdRouter::start(&r, &bird_config(""));
    let before = counters(&s, &["TcpExtTCPMinTTLDrop"]);
    let sp = NsSpeaker::start(&s, speaker_config(None, true));
    assert_stays_down(&bird, &sp, Duration::from_secs(8));
    let after = counters(&s, &["TcpExtTCPMinTTLDrop"]);
    eprintln!("min TTL drops in the speaker namespace: {before} -> {after}");
    assert!(
        after > before,
        "our kernel must count BIRD's TTL-1 segments as TCPMinTTLDrop\n{}",
        bird.view()
    );
}
