//! The datagram both ways, and every way a bad one is refused.

use super::*;
use crate::lb::conntrack::{Carry, Evidence, FlowState, Track};

const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

fn key(port: u16) -> FlowKey {
    FlowKey {
        src: 0xffff_0a00_0001,
        dst: 0xffff_c000_020a,
        sport: port,
        dport: 80,
        proto: 6,
        v6: false,
        zone: 7,
    }
}

fn rec(port: u16) -> FlowRecord {
    FlowRecord {
        key: key(port),
        backend: (0xffff_0a01_000b, 8080),
        state: FlowState::TcpEstablished,
        evidence: Evidence::default(),
        snat: Some((0xffff_c000_0264, 40_000 + port)),
        carry: Carry::default(),
        track: Track::default(),
        age_ns: 12_345,
    }
}

fn h(seq: u64) -> Header {
    Header {
        session: 0xfeed,
        seq,
        sent_ms: 1_000_000,
    }
}

#[test]
fn every_body_round_trips() {
    let records: Vec<FlowRecord> = (0..RECORDS_PER_DATAGRAM as u16).map(rec).collect();
    let keys: Vec<FlowKey> = (0..KEYS_PER_DATAGRAM as u16).map(key).collect();
    for body in [
        Body::Records(records),
        Body::Ended(keys),
        Body::CatchUpRequest,
        Body::CatchUpDone,
    ] {
        let d = seal(KEY, h(1), &body);
        assert!(d.len() <= MAX_DATAGRAM, "{} bytes", d.len());
        assert_eq!(open(KEY, &d), Ok((h(1), body)));
    }
}

#[test]
fn wrong_key_truncated_and_random_bytes_are_refused() {
    let d = seal(KEY, h(1), &Body::Records(vec![rec(1)]));
    assert_eq!(open(b"another key", &d), Err(WireError::BadTag));
    for cut in [0, 10, HEADER_LEN + TAG_LEN - 1] {
        assert_eq!(open(KEY, &d[..cut]), Err(WireError::Truncated(cut)));
    }
    assert_eq!(open(KEY, &d[..d.len() - 1]), Err(WireError::BadTag));
    let mut flipped = d.clone();
    flipped[HEADER_LEN + 20] ^= 1;
    assert_eq!(open(KEY, &flipped), Err(WireError::BadTag));
    // Random bytes of every length never pass (nor panic).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for len in 0..2000 {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(open(KEY, &bytes).is_err());
    }
}

#[test]
fn authentic_garbage_is_refused_with_what_it_is() {
    // A peer with the key that writes what this version does not read.
    let mut m = mac(KEY);
    let mut d = seal(KEY, h(1), &Body::CatchUpDone);
    d.truncate(HEADER_LEN);
    d[5] = 9;
    m.update(&d);
    d.extend_from_slice(&m.finalize().into_bytes());
    assert_eq!(
        open(KEY, &d),
        Err(WireError::Garbage("unknown kind 9".into()))
    );
    let mut d = seal(KEY, h(1), &Body::Records(vec![rec(1)]));
    d.truncate(d.len() - TAG_LEN);
    d[HEADER_LEN + 16 + 38] = 77; // the record's state
    let mut m = mac(KEY);
    m.update(&d);
    d.extend_from_slice(&m.finalize().into_bytes());
    assert!(matches!(open(KEY, &d), Err(WireError::Garbage(s)) if s.contains("unknown state")));
}

#[test]
fn replayed_and_stale_datagrams_are_refused() {
    let mut w = Window::default();
    let now = 1_000_000;
    assert_eq!(w.accept(&h(1), now), Ok(()));
    assert_eq!(w.accept(&h(3), now), Ok(()));
    assert!(matches!(
        w.accept(&h(1), now),
        Err(WireError::Replay { .. })
    ));
    assert_eq!(w.accept(&h(2), now), Ok(()), "late, but not seen");
    assert!(matches!(
        w.accept(&h(2), now),
        Err(WireError::Replay { .. })
    ));
    assert_eq!(w.accept(&h(5000), now), Ok(()));
    assert!(
        matches!(w.accept(&h(10), now), Err(WireError::Replay { .. })),
        "too far behind the newest"
    );
    let late = Header {
        sent_ms: now - CLOCK_WINDOW_MS - 1,
        ..h(6000)
    };
    assert!(matches!(w.accept(&late, now), Err(WireError::Stale(_))));
    // The peer restarts: a new session; the old one's datagrams are refused from then on.
    let new = Header {
        session: 0xbeef,
        ..h(1)
    };
    assert_eq!(w.accept(&new, now), Ok(()));
    assert!(matches!(
        w.accept(&h(6001), now),
        Err(WireError::Replay { .. })
    ));
    assert!(matches!(w.accept(&new, now), Err(WireError::Replay { .. })));
}

#[test]
fn the_window_is_bounded() {
    let mut w = Window::default();
    for s in 1..100u64 {
        let hd = Header {
            session: s,
            seq: 1,
            sent_ms: 0,
        };
        assert_eq!(w.accept(&hd, 0), Ok(()));
    }
    assert!(w.retired.len() <= 16);
    assert!(std::mem::size_of::<Window>() < 256);
}
