//! Connection sync through [`process`]: a flow another appliance established, offered to
//! this one's standby table, keeps its backend (and FullNAT port) when its frames move here,
//! whatever this appliance's scheduler would choose.

use super::tests::{ct_for, one_vip, send, tables};
use super::*;
use crate::standby::Standby;
use config::Scheduler;
use testkit::golden::{Pkt, tcp};

const SEC: u64 = 1_000_000_000;

/// 200 flows opened on appliance A (a SYN each, through `wrr` with weights 5:3:1), then
/// their next segment (an ACK, no SYN) on appliance B: returns each flow's backend on A
/// and on B.
fn moved(mode: Mode, synced: bool) -> Vec<(Option<u8>, Option<u8>)> {
    let mut c = one_vip(mode, Scheduler::Wrr, 3);
    for (b, w) in c.vips[0].backends.iter_mut().zip([5, 3, 1]) {
        b.weight = w;
    }
    let t = tables(&c, 1, &|_| true);
    let (mut ct_a, mut w_a) = (ct_for(&t, 4096), WorkerState::new());
    let (mut ct_b, mut w_b) = (ct_for(&t, 4096), WorkerState::new());
    let sb = Arc::new(Standby::new(1024));
    if synced {
        w_b.set_standby(Arc::clone(&sb));
    }
    let on_a: Vec<Option<u8>> = (0..200)
        .map(|i| send(&t, &mut ct_a, &mut w_a, 2000 + i, 0x02, SEC).1)
        .collect();
    for r in ct_a.export(2 * SEC) {
        sb.offer(&r, 300 * SEC, 2 * SEC);
    }
    (0..200)
        .map(|i| {
            let b = send(&t, &mut ct_b, &mut w_b, 2000 + i, 0x10, 3 * SEC).1;
            (on_a[i as usize], b)
        })
        .collect()
}

#[test]
fn a_synced_flow_keeps_its_backend_on_another_appliance() {
    for mode in [Mode::Dr, Mode::Nat] {
        let flows = moved(mode, true);
        assert!(
            flows.iter().all(|(a, _)| a.is_some()),
            "{mode:?}: A forwards"
        );
        let kept = flows.iter().filter(|(a, b)| a == b).count();
        assert_eq!(kept, 200, "{mode:?}: every synced flow keeps its backend");
        // Without the standby table, B answers from the ring: the choice moves.
        let unsynced = moved(mode, false);
        let kept = unsynced.iter().filter(|(a, b)| a == b).count();
        assert!(kept < 200, "{mode:?}: the test must tell the two apart");
    }
}

#[test]
fn a_fullnat_flow_keeps_its_port_and_answers_its_return_traffic_first() {
    let c = one_vip(Mode::FullNat, Scheduler::Wrr, 3);
    let t = tables(&c, 1, &|_| true);
    let (mut ct_a, mut w_a) = (ct_for(&t, 1024), WorkerState::new());
    let (mut ct_b, mut w_b) = (ct_for(&t, 1024), WorkerState::new());
    let sb = Arc::new(Standby::new(1024));
    w_b.set_standby(Arc::clone(&sb));
    ct_b.note_news(true);
    let (v, _) = send(&t, &mut ct_a, &mut w_a, 3000, 0x02, SEC);
    assert!(matches!(v, Verdict::Tx { .. }), "{v:?}");
    let mut r = ct_a.export(SEC).next().expect("A's flow");
    // Synced flows are established ones (see `conntrack::news`).
    r.state = crate::conntrack::FlowState::TcpEstablished;
    let (snat, port) = r.snat.expect("a FullNAT port");
    sb.offer(&r, 300 * SEC, SEC);
    // The backend's SYN-ACK reaches B before any frame of the client's.
    let ip = |a: u128| crate::hash::u128_to_addr(a, false).to_string();
    let input = Pkt::new(
        &ip(r.backend.0),
        &ip(snat),
        6,
        tcp(r.backend.1, port, 0x12, 9000, b""),
    )
    .build();
    let mut buf = vec![0xa5u8; HEADROOM + input.len() + 128];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
    let v = process(&mut f, &t, &mut ct_b, &mut w_b, 2 * SEC);
    assert!(matches!(v, Verdict::Tx { .. }), "return frame: {v:?}");
    let id = ct_b.lookup(&r.key, 2 * SEC).expect("B took the flow");
    assert_eq!(ct_b.flow(id).snat, Some((snat, port)), "same FullNAT port");
    assert_eq!(sb.stats.taken.load(std::sync::atomic::Ordering::Relaxed), 1);
    // B owns it now: its peers hear of it (a rejoining A learns it in its catch-up).
    let mut news = Vec::new();
    ct_b.drain_news(2 * SEC, |r| news.push(r.key), |_| {});
    assert_eq!(news, vec![r.key]);
}
