//! Connection sync through [`process`]: a flow another appliance established, offered to
//! this one's standby table, keeps its backend (and FullNAT port) when its frames move here,
//! whatever this appliance's scheduler would choose.

use super::tests::{ct_for, one_vip, send, tables};
use super::*;
use crate::standby::Standby;
use config::Scheduler;
use testkit::golden::{Pkt, tcp};

const SEC: u64 = 1_000_000_000;

/// Two appliances of one `wrr` VIP (weights 5:3:1): the tables, A's and B's connection
/// tables and workers, and the standby table B reads (when `synced`).
struct Two {
    t: Tables,
    a: (ConnTable, WorkerState),
    b: (ConnTable, WorkerState),
    sb: Arc<Standby>,
}

fn two(mode: Mode, synced: bool) -> Two {
    let mut c = one_vip(mode, Scheduler::Wrr, 3);
    for (b, w) in c.vips[0].backends.iter_mut().zip([5, 3, 1]) {
        b.weight = w;
    }
    let t = tables(&c, 1, &|_| true);
    let a = (ct_for(&t, 4096), WorkerState::new());
    let mut b = (ct_for(&t, 4096), WorkerState::new());
    let sb = Arc::new(Standby::new(1024));
    if synced {
        b.1.set_standby(Arc::clone(&sb));
    }
    Two { t, a, b, sb }
}

/// 200 flows opened on appliance A (a SYN each, through `wrr` with weights 5:3:1), then
/// their next segment (an ACK, no SYN) on appliance B: returns each flow's backend on A
/// and on B.
fn moved(mode: Mode, synced: bool) -> Vec<(Option<u8>, Option<u8>)> {
    let Two {
        t,
        a: (mut ct_a, mut w_a),
        b: (mut ct_b, mut w_b),
        sb,
    } = two(mode, synced);
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

/// The client's SYN reached B first and went unanswered; its resend took another ECMP path
/// and completed the handshake through A, which synced the flow; then the flow's segments
/// move to B (the helper's capture in the flow_sync_ring lab: B's half-open entry sent
/// the ACK to its own choice, which reset the connection).
#[test]
fn a_synced_flow_wins_over_a_half_open_entry_of_its_tuple() {
    // (FullNAT too, but two appliances of one table here would share one SNAT pool, and
    // a synced port another flow holds is refused: `a_fullnat_flow_keeps_its_port...`.)
    for mode in [Mode::Dr, Mode::Nat] {
        let Two {
            t,
            a: (mut ct_a, mut w_a),
            b: (mut ct_b, mut w_b),
            sb,
        } = two(mode, true);
        // A has scheduled 100 other flows first, so its wrr choices for the same tuples
        // differ from B's.
        for i in 0..100 {
            send(&t, &mut ct_a, &mut w_a, 9000 + i, 0x02, SEC);
        }
        let on_b: Vec<Option<u8>> = (0..200)
            .map(|i| send(&t, &mut ct_b, &mut w_b, 2000 + i, 0x02, SEC).1)
            .collect();
        let on_a: Vec<Option<u8>> = (0..200)
            .map(|i| send(&t, &mut ct_a, &mut w_a, 2000 + i, 0x02, SEC).1)
            .collect();
        assert!(
            on_a.iter().zip(&on_b).any(|(a, b)| a != b),
            "{mode:?}: the test needs flows whose two choices differ"
        );
        for mut r in ct_a
            .export(2 * SEC)
            .filter(|r| r.key.sport >= 2000 && r.key.sport < 2200)
        {
            // Synced flows are established ones (see `conntrack::news`).
            r.state = crate::conntrack::FlowState::TcpEstablished;
            sb.offer(&r, 300 * SEC, 2 * SEC);
        }
        let after: Vec<Option<u8>> = (0..200)
            .map(|i| send(&t, &mut ct_b, &mut w_b, 2000 + i, 0x10, 3 * SEC).1)
            .collect();
        assert_eq!(
            after, on_a,
            "{mode:?}: every flow goes where A's handshake went"
        );
        // The taken flow is established here now: a later SYN of its tuple goes to its
        // backend too (an established flow is never reopened by a SYN).
        let v = send(&t, &mut ct_b, &mut w_b, 2000, 0x02, 4 * SEC).1;
        assert_eq!(v, on_a[0], "{mode:?}: the taken flow stays taken");
    }
}

/// The backend's TCP segment (`flags`, `payload`) to FullNAT flow `r`'s SNAT address and
/// port, processed at 2 s by the given appliance.
fn reply(
    r: &crate::conntrack::FlowRecord,
    flags: u8,
    payload: &[u8],
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
) -> Verdict {
    let (snat, port) = r.snat.expect("a FullNAT port");
    let ip = |a: u128| crate::hash::u128_to_addr(a, false).to_string();
    let input = Pkt::new(
        &ip(r.backend.0),
        &ip(snat),
        6,
        tcp(r.backend.1, port, flags, 9000, payload),
    )
    .build();
    let mut buf = vec![0xa5u8; HEADROOM + input.len() + 128];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
    process(&mut f, t, ct, w, 2 * SEC)
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
    let v = reply(&r, 0x12, b"", &t, &mut ct_b, &mut w_b);
    assert!(matches!(v, Verdict::Tx { .. }), "return frame: {v:?}");
    let id = ct_b.lookup(&r.key, 2 * SEC).expect("B took the flow");
    assert_eq!(ct_b.flow(id).snat, Some((snat, port)), "same FullNAT port");
    assert_eq!(sb.stats.taken.load(std::sync::atomic::Ordering::Relaxed), 1);
    // B owns it now: its peers hear of it (a rejoining A learns it in its catch-up).
    let mut news = Vec::new();
    ct_b.drain_news(2 * SEC, |r| news.push(r.key), |_| {});
    assert_eq!(news, vec![r.key]);
}

/// `one_vip`'s FullNAT VIP on a pool of two addresses, on an appliance whose `[sync] snat`
/// is `own`.
fn owning(own: &str) -> Tables {
    let mut c = one_vip(Mode::FullNat, Scheduler::Wrr, 3);
    c.vips[0].snat = vec!["10.1.0.1".parse().unwrap(), "10.1.0.2".parse().unwrap()];
    c.sync = Some(config::Sync {
        listen: "10.0.0.10:7946".parse().unwrap(),
        peers: vec!["10.0.0.11:7946".parse().unwrap()],
        key_file: "/etc/sluice/sync.key".into(),
        rate: 1000,
        standby: 1000,
        catch_up_timeout: std::time::Duration::from_secs(1),
        snat: vec![own.parse().unwrap()],
    });
    tables(&c, 1, &|_| true)
}

#[test]
fn each_appliance_takes_ports_on_its_own_snat_addresses_and_answers_for_the_others() {
    let (t_a, t_b) = (owning("10.1.0.1"), owning("10.1.0.2"));
    assert_eq!(
        t_a.fingerprint(),
        t_b.fingerprint(),
        "which addresses are whose does not change where flows go"
    );
    let addr = |s: &str| crate::hash::addr_to_u128(s.parse().unwrap());
    let (mut ct_a, mut w_a) = (ct_for(&t_a, 1024), WorkerState::new());
    let (mut ct_b, mut w_b) = (ct_for(&t_b, 1024), WorkerState::new());
    for i in 0..100 {
        send(&t_a, &mut ct_a, &mut w_a, 3000 + i, 0x02, SEC);
        send(&t_b, &mut ct_b, &mut w_b, 3000 + i, 0x02, SEC);
    }
    let on = |ct: &ConnTable| -> std::collections::BTreeSet<u128> {
        ct.export(SEC).filter_map(|r| r.snat.map(|s| s.0)).collect()
    };
    assert_eq!(
        on(&ct_a),
        [addr("10.1.0.1")].into(),
        "A only on its own address"
    );
    assert_eq!(
        on(&ct_b),
        [addr("10.1.0.2")].into(),
        "B only on its own address"
    );

    // A's flow, synced to C (owning 10.1.0.2 too, as B): the backend's reply to A's address
    // reaches C (the routers' next choice once A is gone), which translates it.
    let t_c = owning("10.1.0.2");
    let (mut ct_c, mut w_c) = (ct_for(&t_c, 1024), WorkerState::new());
    let sb = Arc::new(Standby::new(1024));
    w_c.set_standby(Arc::clone(&sb));
    let mut r = ct_a.export(SEC).next().expect("A's flow");
    r.state = crate::conntrack::FlowState::TcpEstablished;
    let (snat, port) = r.snat.expect("a FullNAT port");
    sb.offer(&r, 300 * SEC, SEC);
    let v = reply(&r, 0x10, b"data", &t_c, &mut ct_c, &mut w_c);
    assert!(matches!(v, Verdict::Tx { .. }), "A's reply on C: {v:?}");
    let id = ct_c.lookup(&r.key, 2 * SEC).expect("C took A's flow");
    assert_eq!(
        ct_c.flow(id).snat,
        Some((snat, port)),
        "A's address and port"
    );
}
