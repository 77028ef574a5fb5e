//! Budgets through the packet step (issue 42): one source's spoofed SYNs take at most its
//! budget of embryonic entries (and of FullNAT ports) while other sources are admitted,
//! and a FullNAT port space held by handshakes nobody finished still serves a new flow.

use super::tests::{ct_for, one_vip, reply, send, tables};
use super::*;
use config::Scheduler;
use testkit::golden::{PEER_ISN, Pkt, tcp};

#[test]
fn one_source_holds_at_most_its_budget_of_embryonic_entries() {
    let mut c = one_vip(Mode::FullNat, Scheduler::Maglev, 2);
    c.appliance.embryonic_per_source = 8;
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 1024);
    let mut w = WorkerState::new();
    let through = (0..50u16)
        .filter(|p| {
            matches!(
                send(&t, &mut ct, &mut w, 1000 + p, 0x02, 0).0,
                Verdict::Tx { .. }
            )
        })
        .count();
    assert_eq!(
        through, 8,
        "FullNAT cannot answer without an entry: the rest are dropped"
    );
    assert_eq!(ct.len(), 8);
    assert_eq!(ct.stats.source_refused, 42);
    assert_eq!(ct.snat_ports(), 8, "nor do they hold ports");
    // Another source is admitted.
    let other = Pkt::new(
        "198.51.100.8",
        "192.0.2.100",
        6,
        tcp(2000, 80, 0x02, 1, b""),
    )
    .build();
    let mut buf = vec![0xa5u8; HEADROOM + other.len() + 128];
    buf[HEADROOM..HEADROOM + other.len()].copy_from_slice(&other);
    let mut f = Frame::new(&mut buf, HEADROOM, other.len(), 1).unwrap();
    assert!(matches!(
        process(&mut f, &t, &mut ct, &mut w, 0),
        Verdict::Tx { .. }
    ));
    // A handshake that completes leaves the budget: the source may open one more.
    reply(&t, &mut ct, &mut w, 1000, 0x12, PEER_ISN, 1);
    send(&t, &mut ct, &mut w, 1000, 0x10, 2);
    assert_eq!(ct.fill()[FlowState::TcpEstablished.class()], 1);
    assert!(matches!(
        send(&t, &mut ct, &mut w, 1100, 0x02, 3).0,
        Verdict::Tx { .. }
    ));
    assert!(!matches!(
        send(&t, &mut ct, &mut w, 1101, 0x02, 3).0,
        Verdict::Tx { .. }
    ));
}

/// Every FullNAT port toward a backend held by a spoofed SYN's embryonic flow: a new flow
/// takes the oldest one's port instead of being refused (it was dropped as
/// snat_exhausted, and real clients waited for SYN retransmissions).
#[test]
fn embryonic_flows_give_their_fullnat_ports_up_first() {
    let mut c = one_vip(Mode::FullNat, Scheduler::Maglev, 1);
    c.appliance.embryonic_per_source = 0;
    let t = tables(&c, 1, &|_| true);
    let ports = 65536 - usize::from(crate::conntrack::SNAT_PORT_MIN);
    let mut ct = ct_for(&t, ports + 1024);
    let mut w = WorkerState::new();
    for i in 0..ports as u32 {
        let src = format!("10.{}.{}.{}", 64 + (i >> 16), (i >> 8) & 0xff, i & 0xff);
        let p = Pkt::new(&src, "192.0.2.100", 6, tcp(4000, 80, 0x02, 1, b"")).build();
        let mut buf = vec![0u8; HEADROOM + p.len() + 64];
        buf[HEADROOM..HEADROOM + p.len()].copy_from_slice(&p);
        let mut f = Frame::new(&mut buf, HEADROOM, p.len(), 1).unwrap();
        process(&mut f, &t, &mut ct, &mut w, 1);
    }
    // As the space fills, a new flow's candidate ports are all held more and more often:
    // the oldest handshake among them gives its port up.
    let held = ct.snat_ports();
    assert!(
        held > ports * 9 / 10,
        "the flood holds {held} of {ports} ports"
    );
    let reclaimed = ct.stats.snat_reclaimed;
    assert!(reclaimed > 0);
    let (v, _) = send(&t, &mut ct, &mut w, 7000, 0x02, 2);
    assert!(
        matches!(v, Verdict::Tx { .. }),
        "a real client's SYN: {v:?}"
    );
    assert_eq!(
        w.drops[DropReason::SnatExhausted.index()],
        0,
        "no SYN was refused for want of a port ({reclaimed} ports taken over)"
    );
}
