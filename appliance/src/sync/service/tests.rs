//! Two and three sync threads on loopback: records and ends reach the peer's standby
//! table, a late joiner catches up before it says so, and a bad peer (wrong key, cut short,
//! random bytes, replays, a flood) is counted and changes nothing.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::*;
use crate::lb::conntrack::{Carry, Evidence, FlowState, Track};
use crate::sync::wire::{Body, Header, seal};

const KEY: &[u8] = b"an example key of 32 bytes or more, for tests";

fn free_port() -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap()
}

/// A scratch directory of this test, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("fs-sync-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn key_file(dir: &std::path::Path, key: &[u8]) -> std::path::PathBuf {
    let p = dir.join("sync.key");
    std::fs::write(&p, key).unwrap();
    p
}

fn config(listen: SocketAddr, peers: Vec<SocketAddr>, key: &std::path::Path) -> SyncConfig {
    SyncConfig {
        listen,
        peers,
        key_file: key.to_path_buf(),
        rate: 100_000,
        standby: 1000,
        catch_up_timeout: Duration::from_secs(3),
        snat: Vec::new(),
    }
}

fn start(c: &SyncConfig) -> (Service, tokio::sync::oneshot::Receiver<()>) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = Service::start(c, config::Timeouts::default(), tx).unwrap();
    (s, rx)
}

fn rec(port: u16) -> FlowRecord {
    FlowRecord {
        key: FlowKey {
            src: 0xffff_0a00_0001,
            dst: 0xffff_c000_020a,
            sport: port,
            dport: 80,
            proto: 6,
            v6: false,
            zone: 0,
        },
        backend: (0xffff_0a01_000b, 80),
        state: FlowState::TcpEstablished,
        evidence: Evidence::default(),
        snat: None,
        carry: Carry::default(),
        track: Track::default(),
        age_ns: 0,
    }
}

fn until(what: &str, mut f: impl FnMut() -> bool) {
    let by = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < by, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn caught_up(rx: &mut tokio::sync::oneshot::Receiver<()>) -> bool {
    rx.try_recv().is_ok()
}

#[test]
fn flows_reach_the_peer_and_a_late_joiner_catches_up_first() {
    let dir = Scratch::new("flows");
    let k = key_file(dir.path(), KEY);
    let (a, b, c) = (free_port(), free_port(), free_port());
    let (sa, mut ra) = start(&config(a, vec![b, c], &k));
    let (sb, mut rb) = start(&config(b, vec![a], &k));
    until("b caught up", || caught_up(&mut rb));
    for p in 1..=25 {
        sa.handle.outbox.send(Note::Established(rec(p)));
    }
    let now = || crate::datapath::monotonic_ns();
    until("b holds a's flows", || sb.handle.standby.len() == 25);
    assert_eq!(
        sb.handle.standby.find(&rec(7).key, now()).unwrap().backend,
        rec(7).backend
    );
    sa.handle.outbox.send(Note::Ended(rec(7).key));
    until("b drops the ended flow", || sb.handle.standby.len() == 24);
    assert!(sb.handle.standby.find(&rec(7).key, now()).is_none());
    // A peer that starts late holds a's flows by the time it says it caught up.
    let (sc, mut rc) = start(&config(c, vec![a], &k));
    until("c caught up", || caught_up(&mut rc));
    assert_eq!(sc.handle.standby.len(), 24, "caught up before saying so");
    assert!(!sc.handle.stats.catching_up.load(Ordering::Relaxed));
    assert!(sa.handle.stats.catch_ups_served.load(Ordering::Relaxed) >= 2);
    // a waited for c, which was not there at first, until c answered.
    until("a caught up", || caught_up(&mut ra));
    assert_eq!(sb.handle.stats.auth_failures.load(Ordering::Relaxed), 0);
}

#[test]
fn a_bad_peer_is_counted_and_ignored() {
    let dir = Scratch::new("bad");
    let k = key_file(dir.path(), KEY);
    let rogue = UdpSocket::bind("127.0.0.1:0").unwrap();
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = free_port();
    let mut cfg = config(b, vec![rogue.local_addr().unwrap()], &k);
    cfg.standby = 64;
    cfg.catch_up_timeout = Duration::from_millis(100);
    let (sb, _rb) = start(&cfg);
    let st = &sb.handle.stats;
    let h = |seq| Header {
        session: 42,
        seq,
        sent_ms: unix_ms(),
    };
    let good = seal(KEY, h(1), &Body::Records(vec![rec(1)]));
    rogue
        .send_to(
            &seal(b"another key entirely", h(1), &Body::Records(vec![rec(2)])),
            b,
        )
        .unwrap();
    rogue.send_to(&good[..20], b).unwrap();
    rogue.send_to(&good, b).unwrap();
    rogue.send_to(&good, b).unwrap();
    stranger.send_to(&good, b).unwrap();
    until("the good record", || sb.handle.standby.len() == 1);
    until("counters", || {
        st.auth_failures.load(Ordering::Relaxed) == 1
            && st.garbage.load(Ordering::Relaxed) == 1
            && st.replays.load(Ordering::Relaxed) == 1
            && st.unknown_peer.load(Ordering::Relaxed) == 1
    });
    // A flood of random bytes and of authentic records beyond the table's bound.
    let mut x: u64 = 1;
    for i in 0..2000u64 {
        let bytes: Vec<u8> = (0..(i % 1400) as usize)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = rogue.send_to(&bytes, b);
    }
    for i in 0..200u16 {
        let batch: Vec<FlowRecord> = (0..10).map(|j| rec(1000 + i * 10 + j)).collect();
        let _ = rogue.send_to(&seal(KEY, h(2 + u64::from(i)), &Body::Records(batch)), b);
    }
    until("the flood counted", || {
        st.auth_failures.load(Ordering::Relaxed)
            + st.garbage.load(Ordering::Relaxed)
            + st.records_received.load(Ordering::Relaxed)
            > 1000
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        sb.handle.standby.len() <= 64,
        "bounded: {}",
        sb.handle.standby.len()
    );
    assert!(st.standby_full.load(Ordering::Relaxed) > 0);
}
