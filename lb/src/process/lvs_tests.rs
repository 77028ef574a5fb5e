//! Tests of the LVS features through [`process`]: connection limits and each overflow
//! policy, one-packet UDP, persistence across pool changes, its netmask and its timeout.

use super::tests::{ct_for, one_vip, tables};
use super::*;
use config::{BackendState, Config, Overflow, Protocol, Scheduler};
use std::time::Duration;
use testkit::golden::{Pkt, tcp, udp};

const SEC: u64 = 1_000_000_000;

/// Sends one packet from `client:sport`; returns the verdict and the output frame.
fn send(
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
    client: &str,
    sport: u16,
    udp_vip: bool,
    now: u64,
) -> (Verdict, Vec<u8>) {
    let l4 = if udp_vip {
        udp(sport, 80, b"q")
    } else {
        tcp(sport, 80, 0x02, 7000, b"")
    };
    let input = Pkt::new(client, "192.0.2.100", if udp_vip { 17 } else { 6 }, l4).build();
    let mut buf = vec![0xa5u8; HEADROOM + input.len() + 128];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
    let v = process(&mut f, t, ct, w, now);
    (v, f.data().to_vec())
}

/// The backend (last address byte of its MAC, see `tests::tables`) a DR frame went to.
fn backend_of(v: Verdict, out: &[u8]) -> Option<u8> {
    matches!(v, Verdict::Tx { ifindex: 2 }).then(|| out[5])
}

fn limited(overflow: Overflow) -> Config {
    let mut c = one_vip(Mode::Dr, Scheduler::Maglev, 3);
    c.vips[0].overflow = overflow;
    for b in &mut c.vips[0].backends {
        b.max_connections = Some(5);
        b.resume_connections = Some(5);
    }
    c
}

#[test]
fn max_connections_caps_every_backend_and_overflow_drops() {
    let t = tables(&limited(Overflow::Drop), 1, &|_| true);
    let mut ct = ct_for(&t, 1024);
    let mut w = WorkerState::new();
    let mut per = [0u32; 3];
    let mut refused = 0;
    for sport in 1000..1020 {
        let (v, out) = send(&t, &mut ct, &mut w, "198.51.100.7", sport, false, 0);
        match backend_of(v, &out) {
            Some(b) => per[usize::from(b) - 1] += 1,
            None => {
                assert_eq!(v, Verdict::Drop(DropReason::Overflow));
                refused += 1;
            }
        }
    }
    assert_eq!(per, [5, 5, 5], "no backend above 5");
    assert_eq!(refused, 5);
    assert_eq!(w.drops[DropReason::Overflow.index()], 5);
    assert!(w.stats.limit_skips >= 5, "{:?}", w.stats);
    assert!((0..3).all(|i| t.limits.marked_full(i)));
    // A retransmitted SYN of an admitted flow keeps its backend: limits are for new flows.
    let (v, out) = send(&t, &mut ct, &mut w, "198.51.100.7", 1000, false, SEC);
    assert!(backend_of(v, &out).is_some());
}

#[test]
fn overflow_ignore_and_reset() {
    let t = tables(&limited(Overflow::Ignore), 1, &|_| true);
    let mut ct = ct_for(&t, 1024);
    let mut w = WorkerState::new();
    let sent = (1000..1020)
        .filter(|&p| {
            let (v, out) = send(&t, &mut ct, &mut w, "198.51.100.7", p, false, 0);
            backend_of(v, &out).is_some()
        })
        .count();
    assert_eq!(sent, 20);
    assert_eq!(w.stats.overflow_ignored, 5);

    let t = tables(&limited(Overflow::Reset), 1, &|_| true);
    let mut ct = ct_for(&t, 1024);
    let mut w = WorkerState::new();
    for p in 1000..1015 {
        send(&t, &mut ct, &mut w, "198.51.100.7", p, false, 0);
    }
    let (v, out) = send(&t, &mut ct, &mut w, "198.51.100.7", 1015, false, 0);
    // Toward the client through the router (ifindex 1), from the VIP, RST+ACK of seq+1.
    assert_eq!(v, Verdict::Tx { ifindex: 1 });
    let ip = &out[14..];
    assert_eq!(&ip[12..16], &[192, 0, 2, 100]);
    assert_eq!(&ip[16..20], &[198, 51, 100, 7]);
    let th = &ip[20..40];
    assert_eq!(u16::from_be_bytes([th[0], th[1]]), 80);
    assert_eq!(u16::from_be_bytes([th[2], th[3]]), 1015);
    assert_eq!(u32::from_be_bytes([th[8], th[9], th[10], th[11]]), 7001);
    assert_eq!(th[13], 0x14, "RST+ACK");
    assert_eq!(w.stats.overflow_resets, 1);
    assert_eq!(w.drops[DropReason::Overflow.index()], 1);
    let parsed = wire::Ipv4Packet::new_checked(ip).expect("valid IPv4");
    assert!(parsed.verify_checksum(), "IPv4 header checksum");
}

#[test]
fn one_packet_schedules_every_datagram_and_keeps_no_state() {
    let mut c = one_vip(Mode::Dr, Scheduler::Rr, 3);
    c.vips[0].protocol = Protocol::Udp;
    c.vips[0].udp_one_packet = true;
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 1024);
    let mut w = WorkerState::new();
    let mut per = [0u32; 3];
    for i in 0..300 {
        let (v, out) = send(&t, &mut ct, &mut w, "198.51.100.7", 5353, true, i);
        per[usize::from(backend_of(v, &out).expect("forwarded")) - 1] += 1;
    }
    assert_eq!(
        per,
        [100, 100, 100],
        "one source port, every datagram scheduled"
    );
    assert_eq!(ct.len(), 0, "no flow entries");
    assert_eq!(w.stats.one_packet, 300);
    assert_eq!(w.vip_new_flows, [300]);
    assert_eq!(
        w.backend_new_flows,
        [100, 100, 100],
        "each datagram a new flow"
    );
}

#[test]
fn new_flows_are_counted_per_backend_and_add_up_to_the_vip_s() {
    let c = one_vip(Mode::Dr, Scheduler::Maglev, 3);
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 1024);
    let mut w = WorkerState::new();
    let mut per = [0u64; 3];
    for p in 0..200u16 {
        let (v, out) = send(&t, &mut ct, &mut w, "198.51.100.7", 10_000 + p, false, 1);
        per[usize::from(backend_of(v, &out).expect("forwarded")) - 1] += 1;
        // A second packet of the same connection is not a new flow.
        send(&t, &mut ct, &mut w, "198.51.100.7", 10_000 + p, false, 2);
    }
    assert_eq!(w.backend_new_flows, per, "where each connection went");
    assert_eq!(w.vip_new_flows, [200]);
}

fn persistent(n: u8) -> Config {
    let mut c = one_vip(Mode::Dr, Scheduler::Maglev, n);
    c.vips[0].persistence = Some(Duration::from_secs(10));
    c
}

/// The backends `client`'s new connections from `ports` go to.
fn backends_of(
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
    client: &str,
    ports: std::ops::Range<u16>,
    now: u64,
) -> std::collections::BTreeSet<u8> {
    ports
        .map(|p| {
            let (v, out) = send(t, ct, w, client, p, false, now);
            backend_of(v, &out).expect("forwarded")
        })
        .collect()
}

#[test]
fn persistence_keeps_a_client_across_pool_changes_until_disabled_or_idle() {
    let mut c = persistent(3);
    let t1 = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t1, 4096);
    let mut w = WorkerState::new();
    let first = backends_of(&t1, &mut ct, &mut w, "198.51.100.7", 1000..1100, 0);
    assert_eq!(first.len(), 1, "one backend for 100 connections: {first:?}");
    let b = *first.first().unwrap();
    assert_eq!(w.stats.persist_hits, 99);
    // Another backend and other weights: the client stays.
    let extra = c.vips[0].backends[0].clone();
    c.vips[0].backends.push(extra);
    c.vips[0].backends[3].address = "10.9.0.4".parse().unwrap();
    for (i, be) in c.vips[0].backends.iter_mut().enumerate() {
        be.weight = 1 + i as u32 * 3;
    }
    let t2 = tables(&c, 2, &|_| true);
    let kept = backends_of(&t2, &mut ct, &mut w, "198.51.100.7", 2000..2050, 5 * SEC);
    assert_eq!(kept, first, "across an added backend and new weights");
    // A drained backend keeps its persistent clients (LVS's quiescent server).
    c.vips[0].backends[usize::from(b) - 1].state = BackendState::Drain;
    let t3 = tables(&c, 3, &|_| true);
    let kept = backends_of(&t3, &mut ct, &mut w, "198.51.100.7", 3000..3010, 6 * SEC);
    assert_eq!(kept, first, "drained: kept");
    // Disabled: the client moves at once, and stays on its new backend.
    c.vips[0].backends[usize::from(b) - 1].state = BackendState::Disabled;
    let t4 = tables(&c, 4, &|_| true);
    let moved = backends_of(&t4, &mut ct, &mut w, "198.51.100.7", 4000..4050, 7 * SEC);
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert!(!moved.contains(&b), "disabled {b} kept a client");
    // Unhealthy: the same.
    let nb = *moved.first().unwrap();
    c.vips[0].backends[usize::from(b) - 1].state = BackendState::Active;
    let t5 = tables(&c, 5, &|be| {
        be.address.to_string() != format!("10.9.0.{nb}")
    });
    let again = backends_of(&t5, &mut ct, &mut w, "198.51.100.7", 5000..5010, 8 * SEC);
    assert!(!again.contains(&nb) && again.len() == 1, "{again:?}");
    // After the timeout idle the entry is gone: the client gets the consistent answer,
    // the same one a fresh worker (another appliance) gives.
    let late = backends_of(&t5, &mut ct, &mut w, "198.51.100.7", 6000..6010, 30 * SEC);
    let mut fresh = WorkerState::new();
    let mut ct2 = ct_for(&t5, 64);
    let other = backends_of(
        &t5,
        &mut ct2,
        &mut fresh,
        "198.51.100.7",
        7000..7001,
        30 * SEC,
    );
    assert_eq!(late, other, "first choice is consistent across workers");
    assert!(w.stats.persist_misses >= 3);
}

#[test]
fn persistence_netmask_groups_a_subnet_and_new_clients_agree_everywhere() {
    let mut c = persistent(8);
    c.vips[0].persistence_netmask = 24;
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 4096);
    let mut w = WorkerState::new();
    let a = backends_of(&t, &mut ct, &mut w, "198.51.100.7", 1000..1010, 0);
    let b = backends_of(&t, &mut ct, &mut w, "198.51.100.200", 1000..1010, 0);
    assert_eq!(a, b, "one /24, one backend");
    // New clients' first choices are the same on a worker that never saw them.
    let mut spread = std::collections::BTreeSet::new();
    for net in 0..40 {
        let client = format!("203.0.{net}.9");
        let mut w2 = WorkerState::new();
        let mut ct2 = ct_for(&t, 64);
        let x = backends_of(&t, &mut ct, &mut w, &client, 1000..1001, 0);
        let y = backends_of(&t, &mut ct2, &mut w2, &client, 2000..2001, 0);
        assert_eq!(x, y, "{client}");
        spread.extend(x);
    }
    assert!(
        spread.len() >= 5,
        "40 subnets spread over 8 backends: {spread:?}"
    );
}
