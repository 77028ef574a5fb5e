//! Connection-ID routing through [`process`] (`process/quic.rs`): a routable CID follows
//! its backend across client ports, an unroutable one falls back and is remembered, a
//! drained backend keeps its CIDs, a removed one's fall back, and each outcome is counted.

use super::tests::{ct_for, one_vip, tables};
use super::*;
use crate::quic::Counter;
use config::quic::QuicLb;
use config::{BackendState, Config, Protocol, Scheduler};
use testkit::golden::{Pkt, udp};

fn quic_vip(mode: Mode) -> Config {
    let mut c = one_vip(mode, Scheduler::Maglev, 4);
    c.vips[0].protocol = Protocol::Udp;
    c.vips[0].quic_lb = Some(QuicLb {
        config_id: 1,
        server_id_len: 2,
        nonce_len: 6,
        key: Some([0x42; 16]),
        assigned: Vec::new(),
    });
    c
}

/// A short-header datagram whose DCID names backend `i` of the VIP (nonce `n`).
fn short_for(t: &Tables, i: usize, n: u8) -> Vec<u8> {
    let q = t.vips[0].quic.as_ref().expect("quic");
    let slot = t.vips[0].backends.start + i as u32;
    let id = q.id_of(slot).expect("id");
    let mut d = vec![0x40];
    d.extend_from_slice(&q.codec.encode(id.as_bytes(), &[n; 6]));
    d.extend_from_slice(b"protected payload");
    d
}

/// Sends `payload` from client port `sport`; the backend (last octet) it went to.
fn send(
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
    sport: u16,
    payload: &[u8],
) -> Option<u8> {
    let input = Pkt::new("198.51.100.7", "192.0.2.100", 17, udp(sport, 80, payload)).build();
    let mut buf = vec![0xa5u8; HEADROOM + input.len() + 128];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
    let v = process(&mut f, t, ct, w, 1);
    matches!(v, Verdict::Tx { .. }).then(|| f.data()[5])
}

fn count(w: &WorkerState, c: Counter) -> u64 {
    w.quic[0][c as usize]
}

#[test]
fn a_cid_follows_its_backend_across_client_ports_in_every_mode() {
    for mode in [Mode::Nat, Mode::FullNat, Mode::Dr] {
        let t = tables(&quic_vip(mode), 1, &|_| true);
        let mut ct = ct_for(&t, 64);
        let mut w = WorkerState::new();
        for i in 0..4 {
            let d = short_for(&t, i, i as u8);
            let expected = Some(i as u8 + 1);
            for sport in [
                4000 + i as u16 * 10,
                4001 + i as u16 * 10,
                4002 + i as u16 * 10,
            ] {
                assert_eq!(
                    send(&t, &mut ct, &mut w, sport, &d),
                    expected,
                    "{mode:?} backend {i}"
                );
            }
        }
        assert_eq!(count(&w, Counter::Routed), 12, "{mode:?}");
        assert_eq!(count(&w, Counter::Fallback), 0);
    }
}

#[test]
fn an_unroutable_cid_falls_back_and_the_flow_is_remembered() {
    let t = tables(&quic_vip(Mode::Nat), 1, &|_| true);
    let mut ct = ct_for(&t, 64);
    let mut w = WorkerState::new();
    // A client's first Initial: its own random DCID under another config's codepoint.
    let mut initial = vec![0xc0, 0, 0, 0, 1, 8, 0xe1, 2, 3, 4, 5, 6, 7, 8, 0];
    initial.extend_from_slice(&[0; 32]);
    let first = send(&t, &mut ct, &mut w, 5000, &initial).expect("forwarded");
    for _ in 0..5 {
        assert_eq!(send(&t, &mut ct, &mut w, 5000, &initial), Some(first));
    }
    assert_eq!(count(&w, Counter::UnknownConfig), 6);
    // Not QUIC at all: counted as a decode failure, still forwarded by the 5-tuple.
    assert!(send(&t, &mut ct, &mut w, 5001, &[0x40, 1]).is_some());
    assert_eq!(count(&w, Counter::DecodeFailure), 1);
    assert_eq!(count(&w, Counter::Fallback), 7);
    assert_eq!(count(&w, Counter::Routed), 0);
    // Once the server's CID arrives on the same 5-tuple, it rules.
    let d = short_for(&t, 2, 9);
    assert_eq!(send(&t, &mut ct, &mut w, 5000, &d), Some(3));
    assert_eq!(count(&w, Counter::Routed), 1);
}

#[test]
fn drained_backends_keep_their_cids_and_removed_ones_fall_back() {
    let mut c = quic_vip(Mode::Dr);
    let t1 = tables(&c, 1, &|_| true);
    let d = short_for(&t1, 1, 3);
    c.vips[0].backends[1].state = BackendState::Drain;
    let t2 = tables(&c, 2, &|_| true);
    let mut ct = ct_for(&t2, 64);
    let mut w = WorkerState::new();
    assert_eq!(
        send(&t2, &mut ct, &mut w, 6000, &d),
        Some(2),
        "drained keeps its CID"
    );
    assert_eq!(
        send(&t2, &mut ct, &mut w, 6001, &d),
        Some(2),
        "on a new port too"
    );
    assert_eq!(count(&w, Counter::Routed), 2);
    // Removed: the CID no longer routes; the VIP's normal choice takes it.
    c.vips[0].backends.remove(1);
    let t3 = tables(&c, 3, &|_| true);
    let got = send(&t3, &mut ct, &mut w, 6002, &d).expect("forwarded");
    assert_ne!(got, 2);
    assert_eq!(
        count(&w, Counter::Routed),
        0,
        "counters restart with the version"
    );
    assert_eq!(count(&w, Counter::Fallback), 1);
    // Disabled: not live either.
    let mut c = quic_vip(Mode::Dr);
    c.vips[0].backends[1].state = BackendState::Disabled;
    let t4 = tables(&c, 4, &|_| true);
    assert_ne!(send(&t4, &mut ct, &mut w, 6003, &d), Some(2));
    assert_eq!(count(&w, Counter::Fallback), 1);
}

#[test]
fn without_quic_lb_a_new_port_is_a_new_flow() {
    // What the stage is for: by 5-tuple alone the same CID lands on several backends.
    let with = quic_vip(Mode::Dr);
    let t = tables(&with, 1, &|_| true);
    let d = short_for(&t, 0, 1);
    let mut without = with.clone();
    without.vips[0].quic_lb = None;
    let t = tables(&without, 1, &|_| true);
    let mut ct = ct_for(&t, 256);
    let mut w = WorkerState::new();
    let seen: std::collections::HashSet<Option<u8>> = (0..32)
        .map(|p| send(&t, &mut ct, &mut w, 7000 + p, &d))
        .collect();
    assert!(seen.len() > 1, "{seen:?}");
}
