//! Tests of which flows earn connection-table state through the packet step (issue 18):
//! spoofed segments and datagrams, the handshake each mode can see, the stateless answer
//! of an LVS-scheduler VIP, and ICMP rate limits.

use super::tests::{ct_for, one_vip, send, tables};
use super::*;
use config::Scheduler;
use proptest::prelude::*;
use testkit::golden::{PEER_ISN, Pkt, tcp, udp};

const SEC: u64 = 1_000_000_000;

/// Runs one built frame through [`process`]; returns the verdict and the output bytes.
fn run(
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
    input: &[u8],
    now: u64,
) -> (Verdict, Vec<u8>) {
    let mut buf = vec![0xa5u8; HEADROOM + input.len() + 128];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
    let v = process(&mut f, t, ct, w, now);
    (v, f.data().to_vec())
}

fn client(i: u32) -> String {
    format!("198.51.{}.{}", 100 + (i >> 8) % 4, i % 250 + 1)
}

fn mode_of(m: u8) -> Mode {
    match m {
        0 => Mode::Dr,
        1 => Mode::Nat,
        2 => Mode::FullNat,
        _ => Mode::Tunnel(config::Encap::Ipip),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Spoofed TCP segments that are not SYNs, from many sources and with any flags, make
    /// no state in any mode and take no FullNAT port; one-shot datagrams make only
    /// embryonic entries.
    #[test]
    fn spoofed_acks_and_datagrams_earn_nothing(
        mode in 0u8..4,
        sources in proptest::collection::vec((0u32..1000, 1024u16..65535, any::<u8>()), 1..200),
    ) {
        let c = one_vip(mode_of(mode), Scheduler::Maglev, 3);
        let t = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t, 4096);
        let mut w = WorkerState::new();
        let mut segments = 0;
        for (i, sport, flags) in &sources {
            // Every flag combination but a SYN without ACK.
            let flags = if crate::conntrack::is_syn(*flags) { flags | 0x10 } else { *flags };
            let p = Pkt::new(&client(*i), "192.0.2.100", 6, tcp(*sport, 80, flags, 1, b"x"))
                .build();
            run(&t, &mut ct, &mut w, &p, 0);
            segments += 1;
        }
        prop_assert!(ct.is_empty(), "{} entries from spoofed segments", ct.len());
        prop_assert_eq!(w.stats.stateless_no_entry, segments);
        let mut u = one_vip(mode_of(mode), Scheduler::Maglev, 3);
        u.vips[0].protocol = config::Protocol::Udp;
        let t = tables(&u, 1, &|_| true);
        // One datagram per flow: a second one of the same flow (the same client address and
        // port drawn twice) earns it, which is the rule, not a spoof.
        let mut flows = std::collections::HashSet::new();
        for (i, sport, _) in &sources {
            if !flows.insert((client(*i), *sport)) {
                continue;
            }
            let p = Pkt::new(&client(*i), "192.0.2.100", 17, udp(*sport, 80, b"q")).build();
            run(&t, &mut ct, &mut w, &p, 0);
        }
        let fill = ct.fill();
        prop_assert_eq!(fill[FlowState::Udp.class()], 0);
        prop_assert_eq!(fill[FlowState::TcpEstablished.class()], 0);
        prop_assert_eq!(ct.stats.promoted, 0);
    }
}

/// NAT sees the handshake: a blind ACK after a SYN leaves the flow embryonic; the client's
/// ACK after the backend's SYN-ACK establishes it, and a UDP flow is established by the
/// backend's answer.
#[test]
fn nat_establishes_on_the_seen_handshake() {
    let c = one_vip(Mode::Nat, Scheduler::Maglev, 1);
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 16);
    let mut w = WorkerState::new();
    let state = |ct: &ConnTable| ct.ids().map(|id| ct.flow(id).state).next();
    send(&t, &mut ct, &mut w, 7000, 0x02, 0);
    send(&t, &mut ct, &mut w, 7000, 0x10, 1);
    send(&t, &mut ct, &mut w, 7000, 0x18, 2);
    assert_eq!(
        state(&ct),
        Some(FlowState::TcpSyn),
        "blind ACKs prove nothing"
    );
    let synack = Pkt::new(
        "10.9.0.1",
        "198.51.100.7",
        6,
        tcp(80, 7000, 0x12, PEER_ISN, b""),
    )
    .build();
    assert!(matches!(
        run(&t, &mut ct, &mut w, &synack, 3).0,
        Verdict::Tx { .. }
    ));
    assert_eq!(state(&ct), Some(FlowState::TcpSyn));
    send(&t, &mut ct, &mut w, 7000, 0x10, 4);
    assert_eq!(state(&ct), Some(FlowState::TcpEstablished));
    assert_eq!(ct.stats.promoted, 1);

    // A blind spoofer times its ACKs after the backend's SYN-ACK passed, but does not know
    // its sequence number (here 9, where the spoofer's ACKs acknowledge PEER_ISN).
    let mut ct = ct_for(&t, 16);
    send(&t, &mut ct, &mut w, 7001, 0x02, 10);
    let guessed = Pkt::new("10.9.0.1", "198.51.100.7", 6, tcp(80, 7001, 0x12, 9, b"")).build();
    run(&t, &mut ct, &mut w, &guessed, 11);
    send(&t, &mut ct, &mut w, 7001, 0x10, 12);
    send(&t, &mut ct, &mut w, 7001, 0x18, 13);
    assert_eq!(
        state(&ct),
        Some(FlowState::TcpSyn),
        "ACKs of another sequence number prove nothing"
    );
    assert_eq!(ct.stats.promoted, 0);

    let mut u = one_vip(Mode::Nat, Scheduler::Maglev, 1);
    u.vips[0].protocol = config::Protocol::Udp;
    let t = tables(&u, 1, &|_| true);
    let mut ct = ct_for(&t, 16);
    let q = Pkt::new("198.51.100.7", "192.0.2.100", 17, udp(5000, 80, b"q")).build();
    run(&t, &mut ct, &mut w, &q, 0);
    assert_eq!(
        state(&ct),
        Some(FlowState::UdpNew),
        "one datagram earns nothing"
    );
    let a = Pkt::new("10.9.0.1", "198.51.100.7", 17, udp(80, 5000, b"a")).build();
    run(&t, &mut ct, &mut w, &a, 1);
    assert_eq!(
        state(&ct),
        Some(FlowState::Udp),
        "the backend's answer earns"
    );
    // A client's second datagram earns nothing where the answer can be seen: a spoofer
    // sends two as easily as one.
    let q2 = Pkt::new("198.51.100.8", "192.0.2.100", 17, udp(5001, 80, b"q")).build();
    run(&t, &mut ct, &mut w, &q2, 2);
    run(&t, &mut ct, &mut w, &q2, 3);
    assert_eq!(ct.stats.promoted, 1);
    assert_eq!(ct.fill()[FlowState::UdpNew.class()], 1);
}

/// An LVS-scheduler VIP whose SYN got the stateless answer (table full of established
/// flows) keeps the ring's backend for the flow's later segments after room appears: only a
/// SYN makes state, so the scheduler never sees the flow.
#[test]
fn stateless_lvs_flow_is_not_moved_when_room_appears() {
    let c = one_vip(Mode::Dr, Scheduler::Rr, 3);
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 2);
    let mut w = WorkerState::new();
    for sport in [1, 2] {
        for flags in [0x02, 0x10, 0x10] {
            send(&t, &mut ct, &mut w, sport, flags, 0);
        }
    }
    let first = send(&t, &mut ct, &mut w, 4242, 0x02, 1).1;
    assert_eq!(w.stats.conntrack_fallback, 1);
    // Room appears: both established flows close and age out.
    send(&t, &mut ct, &mut w, 1, 0x11, 2);
    send(&t, &mut ct, &mut w, 2, 0x11, 2);
    let later = 2 + 11 * SEC;
    for (i, flags) in [0x10, 0x18, 0x10, 0x18].into_iter().enumerate() {
        let b = send(&t, &mut ct, &mut w, 4242, flags, later + i as u64).1;
        assert_eq!(b, first, "segment {i} moved");
    }
    assert!(ct.lookup(&key_of(4242), later + 10).is_none());
}

fn key_of(sport: u16) -> crate::hash::FlowKey {
    crate::hash::FlowKey {
        src: crate::hash::addr_to_u128("198.51.100.7".parse().unwrap()),
        dst: crate::hash::addr_to_u128("192.0.2.100".parse().unwrap()),
        sport,
        dport: 80,
        proto: 6,
        v6: false,
        zone: 0,
    }
}

/// A table full of embryonic entries from a SYN flood still admits a legitimate SYN, and
/// a flow that earned established survives the flood.
#[test]
fn syn_flood_cannot_evict_an_established_flow() {
    let c = one_vip(Mode::FullNat, Scheduler::Maglev, 2);
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 64);
    let mut w = WorkerState::new();
    send(&t, &mut ct, &mut w, 7000, 0x02, 0);
    let id = ct.lookup(&key_of(7000), 0).unwrap();
    let sent = ct.flow(id).snat.unwrap();
    let synack = Pkt::new(
        "10.9.0.1",
        "10.1.0.1",
        6,
        tcp(80, sent.1, 0x12, PEER_ISN, b""),
    )
    .build();
    let back = Pkt::new(
        "10.9.0.2",
        "10.1.0.1",
        6,
        tcp(80, sent.1, 0x12, PEER_ISN, b""),
    )
    .build();
    let (v1, _) = run(&t, &mut ct, &mut w, &synack, 1);
    let (v2, _) = run(&t, &mut ct, &mut w, &back, 1);
    assert!(matches!(v1, Verdict::Tx { .. }) || matches!(v2, Verdict::Tx { .. }));
    send(&t, &mut ct, &mut w, 7000, 0x10, 2);
    assert_eq!(ct.fill()[FlowState::TcpEstablished.class()], 1);
    for i in 0..5000u32 {
        let p = Pkt::new(
            &client(i),
            "192.0.2.100",
            6,
            tcp(1024 + i as u16, 80, 0x02, 1, b""),
        )
        .build();
        let (v, _) = run(&t, &mut ct, &mut w, &p, 3 + u64::from(i));
        assert!(matches!(v, Verdict::Tx { .. }), "flood SYN {i}: {v:?}");
    }
    assert_eq!(ct.fill()[FlowState::TcpEstablished.class()], 1);
    assert!(ct.lookup(&key_of(7000), 10_000).is_some());
    assert_eq!(w.stats.conntrack_fallback, 0);
    assert!(ct.stats.evicted_embryonic >= 5000 - 63);
    // The legitimate client's new SYN is admitted too.
    let (v, _) = send(&t, &mut ct, &mut w, 7001, 0x02, 20_000);
    assert!(matches!(v, Verdict::Tx { .. }));
}

/// Spoofed echo requests and TTL-1 packets to VIPs: the engine answers the burst, then the
/// configured rate, and counts what it held back (issue 18 item 7).
#[test]
fn icmp_echo_replies_and_errors_are_rate_limited() {
    let mut c = one_vip(Mode::Nat, Scheduler::Maglev, 1);
    c.appliance.icmp_limits = config::IcmpLimits {
        per_vip: 10,
        per_family: 1000,
        burst: 5,
    };
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 64);
    let mut w = WorkerState::new();
    let echo = |i: u32| {
        Pkt::new(
            &client(i),
            "192.0.2.100",
            1,
            testkit::golden::icmp(8, 0, [0, 1, 0, 1], b"p"),
        )
        .build()
    };
    // 1000 requests within 1 s: the burst of 5 plus 10 a second.
    let mut replies = 0;
    for i in 0..1000u32 {
        let (v, _) = run(
            &t,
            &mut ct,
            &mut w,
            &echo(i),
            SEC + u64::from(i) * 1_000_000,
        );
        match v {
            Verdict::Tx { .. } => replies += 1,
            Verdict::Drop(DropReason::IcmpRateLimited) => {}
            v => panic!("echo {i}: {v:?}"),
        }
    }
    assert!((14..=16).contains(&replies), "{replies} replies");
    assert_eq!(w.stats.echo_replies, replies);
    assert_eq!(w.stats.icmp_rate_limited, 1000 - replies);
    // TTL 1 toward the VIP, a second later (the bucket refilled): time exceeded within the
    // same limits, the rest dropped as ttl_exceeded without an answer.
    let mut answered = 0;
    for i in 0..100u32 {
        let p = Pkt::new(&client(i), "192.0.2.100", 6, tcp(2000, 80, 0x02, 1, b""))
            .ttl(1)
            .build();
        let (v, _) = run(&t, &mut ct, &mut w, &p, 3 * SEC + u64::from(i));
        match v {
            Verdict::Tx { .. } => answered += 1,
            Verdict::Drop(DropReason::TtlExceeded) => {}
            v => panic!("ttl 1 packet {i}: {v:?}"),
        }
    }
    assert_eq!(answered, 5, "the burst only");
    assert_eq!(w.stats.time_exceeded_sent, 5);
    assert_eq!(w.drops[DropReason::TtlExceeded.index()], 100);
    assert_eq!(w.stats.icmp_rate_limited, 1000 - replies + 95);
}
