//! Tests of the packet step that need its internals: scheduler state across swaps, flow
//! keeping and re-choosing, the full-table fallback, the NAT rewrite against a reference,
//! and the UDP NAT round trip. The tests that need the golden tables (encapsulation limits,
//! mutated golden frames) live in testkit/tests/process.rs: testkit's types come from
//! another build of this library.

use super::headers::{Ip, L4};
use super::nat::nat_rewrite;
use super::*;
use config::{Backend, BackendState, Config, HashFields, Protocol, Scheduler};
use proptest::prelude::*;
use testkit::golden::{self, Pkt, tcp, udp};
use testkit::unit;
use wire::MacAddr;
use wire::checksum::{self, L4Csum};

fn rd16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

fn wr16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_be_bytes());
}

fn rd_addr(b: &[u8], o: usize, v6: bool) -> u128 {
    if v6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[o..o + 16]);
        u128::from_be_bytes(a)
    } else {
        0xffff_0000_0000 | u128::from(u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]))
    }
}

fn wr_addr(b: &mut [u8], o: usize, v6: bool, a: u128) {
    if v6 {
        b[o..o + 16].copy_from_slice(&a.to_be_bytes());
    } else {
        b[o..o + 4].copy_from_slice(&(a as u32).to_be_bytes());
    }
}

#[test]
fn scheduler_state_survives_a_swap_that_leaves_the_pool_alone() {
    let cfg = Config::from_toml_str(
        "[appliance]\nname = \"t\"\ninterfaces = [\"eth0\"]\n\
         [[vip]]\nname = \"a\"\naddress = \"192.0.2.10\"\nport = 80\nscheduler = \"rr\"\n\
         [[vip.backend]]\naddress = \"10.0.0.1\"\n[[vip.backend]]\naddress = \"10.0.0.2\"\n\
         [[vip]]\nname = \"b\"\naddress = \"192.0.2.11\"\nport = 80\nscheduler = \"rr\"\n\
         [[vip.backend]]\naddress = \"10.0.0.3\"\n[[vip.backend]]\naddress = \"10.0.0.4\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut ct = ConnTable::new(64, cfg.appliance.timeouts, 4, 0, 1);
    let mut w = WorkerState::new();
    let v1 = Tables::build(&cfg, &|_, _| true, 1).expect("tables");
    w.adopt(&v1, &mut ct);
    for vip in 0..2 {
        w.sched_state(vip).expect("state").expiration_ns = 4242;
    }
    // Version 2: VIP b loses a backend to health; VIP a is untouched.
    let v2 = Tables::build(
        &cfg,
        &|v, b| v.name == "a" || b.address.to_string() != "10.0.0.4",
        2,
    )
    .expect("tables");
    w.adopt(&v2, &mut ct);
    assert_eq!(
        w.sched_state(0).expect("a").expiration_ns,
        4242,
        "a keeps its state"
    );
    assert_ne!(
        w.sched_state(1).expect("b").expiration_ns,
        4242,
        "b starts afresh"
    );
}

const SEC: u64 = 1_000_000_000;

pub(super) fn one_vip(mode: Mode, scheduler: Scheduler, n: u8) -> Config {
    // The golden appliance settings, with this one VIP.
    let mut c = golden_appliance();
    let mut v = unit::vip("web", "192.0.2.100", 80, mode, unit::backends(n));
    v.scheduler = scheduler;
    v.snat = vec!["10.1.0.1".parse().unwrap()];
    c.vips = vec![v];
    c
}

/// `golden.toml`'s appliance settings (its VIPs are replaced by each test).
pub(super) fn golden_appliance() -> Config {
    unit::parse(golden::CONFIG_TOML)
}

/// Tables with every backend's neighbour MAC ending in its address's last byte.
pub(super) fn tables(c: &Config, version: u64, healthy: &dyn Fn(&Backend) -> bool) -> Tables {
    let mut t = Tables::build(c, &|_, b| healthy(b), version).unwrap();
    for s in 0..t.backends.len() as u32 {
        let last = match t.backends[s as usize].ip() {
            std::net::IpAddr::V4(a) => a.octets()[3],
            std::net::IpAddr::V6(a) => a.octets()[15],
        };
        t.set_next_hop(
            s,
            NextHop {
                ifindex: 2,
                src_mac: MacAddr(golden::OUR_MAC),
                dst_mac: MacAddr([2, 0, 0, 0, 9, last]),
            },
        );
    }
    t.set_gateway(
        false,
        NextHop {
            ifindex: 1,
            src_mac: MacAddr(golden::OUR_MAC),
            dst_mac: MacAddr(golden::ROUTER_MAC),
        },
    );
    t
}

/// Sends one TCP packet from client port `sport`; returns the verdict and the backend
/// (last address byte) it went to.
pub(super) fn send(
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
    sport: u16,
    flags: u8,
    now: u64,
) -> (Verdict, Option<u8>) {
    let input = Pkt::new(
        "198.51.100.7",
        "192.0.2.100",
        6,
        tcp(sport, 80, flags, 1, b""),
    )
    .build();
    let mut buf = vec![0xa5u8; HEADROOM + input.len() + 128];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
    let v = process(&mut f, t, ct, w, now);
    let b = matches!(v, Verdict::Tx { .. }).then(|| f.data()[5]);
    (v, b)
}

/// Sends one TCP segment from the backend of the flow of client port `sport` back through
/// the appliance (to the client for NAT, to the SNAT address for FullNAT), with sequence
/// number `seq`; returns the verdict.
pub(super) fn reply(
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
    sport: u16,
    flags: u8,
    seq: u32,
    now: u64,
) -> Verdict {
    let key = crate::hash::FlowKey {
        src: crate::hash::addr_to_u128("198.51.100.7".parse().unwrap()),
        dst: crate::hash::addr_to_u128("192.0.2.100".parse().unwrap()),
        sport,
        dport: 80,
        proto: 6,
        v6: false,
        zone: 0,
    };
    let id = ct.lookup(&key, now).expect("the flow of the reply");
    let rk = ct.flow(id).rev_key().expect("a NAT or FullNAT flow");
    let ip = |a: u128| crate::hash::u128_to_addr(a, false).to_string();
    let input = Pkt::new(
        &ip(rk.backend),
        &ip(rk.local),
        6,
        tcp(rk.backend_port, rk.local_port, flags, seq, b""),
    )
    .build();
    let mut buf = vec![0xa5u8; HEADROOM + input.len() + 128];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
    process(&mut f, t, ct, w, now)
}

pub(super) fn ct_for(t: &Tables, cap: usize) -> ConnTable {
    ConnTable::new(cap, t.timeouts, t.backends.len(), 0, 1)
}

#[test]
fn drain_keeps_flows_and_takes_no_new_ones() {
    let mut c = one_vip(Mode::Dr, Scheduler::Maglev, 2);
    let t1 = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t1, 1024);
    let mut w = WorkerState::new();
    let mut on = [Vec::new(), Vec::new()];
    for sport in 1000..1040 {
        let (_, b) = send(&t1, &mut ct, &mut w, sport, 0x02, 0);
        on[usize::from(b.unwrap()) - 1].push(sport);
    }
    assert!(!on[0].is_empty() && !on[1].is_empty());
    c.vips[0].backends[0].state = BackendState::Drain;
    let t2 = tables(&c, 2, &|_| true);
    for &sport in &on[0] {
        assert_eq!(
            send(&t2, &mut ct, &mut w, sport, 0x10, SEC).1,
            Some(1),
            "kept"
        );
    }
    for sport in 2000..2040 {
        assert_eq!(
            send(&t2, &mut ct, &mut w, sport, 0x02, SEC).1,
            Some(2),
            "new"
        );
    }
    assert_eq!(w.stats.rechosen, 0);
}

/// A client that closed second holds no TIME_WAIT and may reuse its source port at once: a
/// SYN on a closing entry's tuple, or on any entry of a drained backend, is a new connection
/// and never reaches the drained backend (LVS's `conn_reuse_mode`), in every mode that keeps
/// state. A SYN on a closing entry of an active backend is scheduled anew too (Maglev gives
/// the same backend), and a retransmitted SYN of an embryonic flow to an active backend
/// stays where it went.
#[test]
fn a_reused_port_of_a_closed_connection_never_reaches_a_drained_backend() {
    for mode in [Mode::Dr, Mode::Nat, Mode::FullNat] {
        let mut c = one_vip(mode, Scheduler::Maglev, 2);
        let t1 = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t1, 1024);
        let mut w = WorkerState::new();
        let mut on = [Vec::new(), Vec::new()];
        for sport in 1000..1040 {
            let (_, b) = send(&t1, &mut ct, &mut w, sport, 0x02, 0);
            on[usize::from(b.unwrap()) - 1].push(sport);
        }
        assert!(!on[0].is_empty() && !on[1].is_empty(), "{mode:?}");
        // Half of backend 1's connections closed (the backend's FIN, then the client's),
        // the other half are still opening.
        let (closed, opening) = on[0].split_at(on[0].len() / 2);
        let both_ways = mode != Mode::Dr;
        let close = |ct: &mut ConnTable, w: &mut WorkerState, t: &Tables, sport: u16, now: u64| {
            if both_ways {
                reply(t, ct, w, sport, 0x12, golden::PEER_ISN, now);
                reply(t, ct, w, sport, 0x11, golden::PEER_ISN + 1, now);
            }
            send(t, ct, w, sport, 0x11, now);
        };
        for &sport in closed {
            close(&mut ct, &mut w, &t1, sport, SEC);
        }
        // A retransmitted SYN of an opening flow to an active backend stays there.
        for &sport in opening {
            assert_eq!(send(&t1, &mut ct, &mut w, sport, 0x02, SEC).1, Some(1));
        }
        // A closed tuple reused while backend 1 is active: scheduled anew (Maglev: the same).
        let again = closed[0];
        assert_eq!(send(&t1, &mut ct, &mut w, again, 0x02, SEC).1, Some(1));
        assert_eq!(w.stats.reopened, 1, "{mode:?}");
        close(&mut ct, &mut w, &t1, again, SEC);
        c.vips[0].backends[0].state = BackendState::Drain;
        let t2 = tables(&c, 2, &|_| true);
        for &sport in on[0].iter() {
            assert_eq!(
                send(&t2, &mut ct, &mut w, sport, 0x02, 2 * SEC).1,
                Some(2),
                "{mode:?}: port {sport} reached the drained backend"
            );
        }
        assert_eq!(w.stats.reopened, 1 + on[0].len() as u64, "{mode:?}");
        // Backend 2's established flows were not touched.
        for &sport in &on[1] {
            assert_eq!(send(&t2, &mut ct, &mut w, sport, 0x10, 2 * SEC).1, Some(2));
        }
        assert_eq!(w.stats.rechosen, 0, "{mode:?}");
    }
}

/// A SYN on an established flow (a spoofer's, or a client's that lost its state) never
/// moves it, even to a drained backend's replacement: the backend answers it.
#[test]
fn a_syn_on_an_established_flow_of_a_drained_backend_stays() {
    let mut c = one_vip(Mode::Dr, Scheduler::Maglev, 2);
    let t1 = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t1, 1024);
    let mut w = WorkerState::new();
    let mut on_1 = Vec::new();
    for sport in 3000..3040 {
        if send(&t1, &mut ct, &mut w, sport, 0x02, 0).1 == Some(1) {
            // DR: established by the second segment after the SYN.
            send(&t1, &mut ct, &mut w, sport, 0x10, 0);
            send(&t1, &mut ct, &mut w, sport, 0x10, 0);
            on_1.push(sport);
        }
    }
    assert!(!on_1.is_empty());
    c.vips[0].backends[0].state = BackendState::Drain;
    let t2 = tables(&c, 2, &|_| true);
    for &sport in &on_1 {
        assert_eq!(send(&t2, &mut ct, &mut w, sport, 0x02, SEC).1, Some(1));
    }
    let established = ct
        .ids()
        .filter(|&id| ct.flow(id).state == FlowState::TcpEstablished)
        .count();
    assert_eq!(established, on_1.len());
    assert_eq!(w.stats.reopened, 0);
}

#[test]
fn disabled_unhealthy_and_removed_backends_rechoose() {
    let mut c = one_vip(Mode::Dr, Scheduler::Maglev, 3);
    let t1 = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t1, 1024);
    let mut w = WorkerState::new();
    let flows: Vec<(u16, u8)> = (3000..3060)
        .map(|p| (p, send(&t1, &mut ct, &mut w, p, 0x02, 0).1.unwrap()))
        .collect();
    let on = |b: u8| flows.iter().filter(move |f| f.1 == b).map(|f| f.0);
    // Disabled: backend 1's flows move, others stay.
    c.vips[0].backends[0].state = BackendState::Disabled;
    let t2 = tables(&c, 2, &|_| true);
    for p in on(1) {
        assert_ne!(send(&t2, &mut ct, &mut w, p, 0x10, SEC).1, Some(1));
    }
    for p in on(2) {
        assert_eq!(send(&t2, &mut ct, &mut w, p, 0x10, SEC).1, Some(2));
    }
    let moved = on(1).count() as u64;
    assert_eq!(w.stats.rechosen, moved);
    // Unhealthy: backend 2's flows move to 3.
    let t3 = tables(&c, 3, &|b| b.address.to_string() != "10.9.0.2");
    for p in on(2) {
        assert_eq!(send(&t3, &mut ct, &mut w, p, 0x10, 2 * SEC).1, Some(3));
    }
    // Removed: backend 3 leaves the config; everything lands on 2 (healthy again).
    c.vips[0].backends.pop();
    let t4 = tables(&c, 4, &|_| true);
    for p in on(3) {
        assert_eq!(send(&t4, &mut ct, &mut w, p, 0x10, 3 * SEC).1, Some(2));
    }
}

/// `inhibit_on_failure` (keepalived's): a failed backend keeps its established flows through
/// the packet step while it takes no new ones; without it the same flows are re-chosen.
#[test]
fn an_inhibiting_failed_backend_keeps_its_flows_and_takes_no_new_ones() {
    for inhibit in [true, false] {
        let mut c = one_vip(Mode::Nat, Scheduler::Maglev, 3);
        c.vips[0].inhibit_on_failure = inhibit;
        let t1 = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t1, 1024);
        let mut w = WorkerState::new();
        let flows: Vec<(u16, u8)> = (3000..3060)
            .map(|p| (p, send(&t1, &mut ct, &mut w, p, 0x02, 0).1.unwrap()))
            .collect();
        let on_1: Vec<u16> = flows.iter().filter(|f| f.1 == 1).map(|f| f.0).collect();
        assert!(!on_1.is_empty(), "some of 60 flows chose backend 1");
        for &p in &on_1 {
            // The backend's SYN-ACK and the client's ACK: the flow is established.
            reply(&t1, &mut ct, &mut w, p, 0x12, golden::PEER_ISN, 0);
            send(&t1, &mut ct, &mut w, p, 0x10, 0);
        }
        assert_eq!(
            ct.fill()[FlowState::TcpEstablished.class()],
            on_1.len(),
            "the flows on backend 1 are established"
        );
        // Backend 1 fails its checks.
        let t2 = tables(&c, 2, &|b| b.address.to_string() != "10.9.0.1");
        for &p in &on_1 {
            let to = send(&t2, &mut ct, &mut w, p, 0x10, SEC).1;
            if inhibit {
                assert_eq!(to, Some(1), "inhibit: port {p} stays on its failed backend");
            } else {
                assert_ne!(to, Some(1), "no inhibit: port {p} is re-chosen");
            }
        }
        let fresh: Vec<Option<u8>> = (5000..5200)
            .map(|p| send(&t2, &mut ct, &mut w, p, 0x02, SEC).1)
            .collect();
        assert!(
            fresh.iter().all(|b| b.is_some() && *b != Some(1)),
            "inhibit {inhibit}: no new flow reaches the failed backend: {fresh:?}"
        );
    }
}

#[test]
fn full_table_falls_back_to_maglev_and_counts() {
    let c = one_vip(Mode::Dr, Scheduler::Rr, 3);
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 2);
    let mut w = WorkerState::new();
    // Two established flows fill the table and cannot be evicted (DR: a SYN, then the
    // handshake's ACK and one more segment).
    for sport in [1, 2] {
        for flags in [0x02, 0x10, 0x10] {
            send(&t, &mut ct, &mut w, sport, flags, 0);
        }
    }
    assert_eq!(ct.stats.promoted, 2);
    for sport in 10..20u16 {
        let (v, b) = send(&t, &mut ct, &mut w, sport, 0x02, 1);
        assert!(matches!(v, Verdict::Tx { ifindex: 2 }));
        let key = FlowKey {
            src: crate::hash::addr_to_u128("198.51.100.7".parse().unwrap()),
            dst: crate::hash::addr_to_u128("192.0.2.100".parse().unwrap()),
            sport,
            dport: 80,
            proto: 6,
            v6: false,
            zone: 0,
        };
        let pos = t.vips[0]
            .ring
            .lookup(key.hash(HashFields::FiveTuple))
            .unwrap();
        assert_eq!(b, Some(pos as u8 + 1), "stateless maglev answer");
    }
    assert_eq!(w.stats.conntrack_fallback, 10);
    assert_eq!(ct.stats.full, 10);
    // FullNAT cannot run without an entry: a segment that is not a SYN is dropped and
    // takes no port.
    let c = one_vip(Mode::FullNat, Scheduler::Maglev, 1);
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 1);
    let (v, _) = send(&t, &mut ct, &mut w, 2, 0x10, 0);
    assert_eq!(v, Verdict::Drop(DropReason::NoFlow));
    assert!(ct.is_empty());
}

#[test]
fn flows_expire_by_now() {
    let c = one_vip(Mode::Dr, Scheduler::Rr, 2);
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 16);
    let mut w = WorkerState::new();
    // rr: the first flow goes to 1; its SYN state lives 30 s.
    assert_eq!(send(&t, &mut ct, &mut w, 1, 0x02, 0).1, Some(1));
    assert_eq!(send(&t, &mut ct, &mut w, 1, 0x02, 30 * SEC).1, Some(1));
    assert_eq!(ct.stats.inserted, 1);
    // Idle past the SYN timeout: a new entry, and rr moves on to backend 2.
    assert_eq!(send(&t, &mut ct, &mut w, 1, 0x02, 60 * SEC + 1).1, Some(2));
    assert_eq!(ct.stats.expired, 1);
    assert_eq!(ct.stats.inserted, 2);
}

#[test]
fn lc_follows_connection_counts_kept_by_the_table() {
    let c = one_vip(Mode::Dr, Scheduler::Lc, 2);
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 16);
    let mut w = WorkerState::new();
    // All idle: first wins; then the one with fewer inactive; then a tie (1, 1) -> first.
    assert_eq!(send(&t, &mut ct, &mut w, 1, 0x02, 0).1, Some(1));
    assert_eq!(send(&t, &mut ct, &mut w, 2, 0x02, 0).1, Some(2));
    assert_eq!(send(&t, &mut ct, &mut w, 3, 0x02, 0).1, Some(1));
    // Flow 1 completes its handshake and sends again (DR's proof): backend 1 = 1 active +
    // 1 inactive = 257, backend 2 = 1 inactive = 1.
    send(&t, &mut ct, &mut w, 1, 0x10, 1);
    assert_eq!(ct.active_counts(), &[0, 0], "one ACK is not enough in DR");
    send(&t, &mut ct, &mut w, 1, 0x10, 1);
    assert_eq!(ct.active_counts(), &[1, 0]);
    assert_eq!(ct.inactive_counts(), &[1, 1]);
    assert_eq!(send(&t, &mut ct, &mut w, 4, 0x02, 2).1, Some(2));
    // Flow 1 closes: back to inactive.
    send(&t, &mut ct, &mut w, 1, 0x11, 3);
    assert_eq!(ct.active_counts(), &[0, 0]);
    assert_eq!(ct.inactive_counts(), &[2, 2]);
}

#[test]
fn udp_nat_round_trip_through_process() {
    let mut c = one_vip(Mode::Nat, Scheduler::Maglev, 1);
    c.vips[0].protocol = Protocol::Udp;
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 16);
    let mut w = WorkerState::new();
    let q = Pkt::new("198.51.100.7", "192.0.2.100", 17, udp(5000, 80, b"q")).build();
    let mut buf = vec![0u8; HEADROOM + q.len()];
    buf[HEADROOM..].copy_from_slice(&q);
    let mut f = Frame::new(&mut buf, HEADROOM, q.len(), 1).unwrap();
    assert_eq!(
        process(&mut f, &t, &mut ct, &mut w, 0),
        Verdict::Tx { ifindex: 2 }
    );
    assert_eq!(w.vip_packets[0], 1);
    assert_eq!(w.backend_bytes[0], q.len() as u64);
    assert_eq!(ct.inactive_counts(), &[1]);
}

/// Textbook LVS-NAT with an on-link client the kernel has no neighbour entry for yet: the
/// flow's first datagram teaches the worker the client's MAC, so the backend's answers go
/// back to it, for that datagram's answer and for the flow's later ones.
#[test]
fn an_on_link_udp_clients_mac_is_learned_from_its_flows_first_datagram() {
    use crate::egress::{Link, NetState, Route, RouteHop};
    let mut c = one_vip(Mode::Nat, Scheduler::Maglev, 1);
    c.vips[0].protocol = Protocol::Udp;
    let mut t = tables(&c, 1, &|_| true);
    let mut net = NetState::default();
    for (i, name) in [(1, "up"), (2, "be")] {
        let mac = Some(MacAddr(golden::OUR_MAC));
        net.links.insert(
            i,
            Link {
                name: name.into(),
                mac,
                mtu: 1500,
            },
        );
    }
    for (dst, ifindex) in [("198.51.100.0", 1), ("10.9.0.0", 2)] {
        let hops = vec![RouteHop {
            ifindex,
            gateway: None,
            weight: 1,
        }];
        net.routes.push(Route {
            dst: dst.parse().unwrap(),
            len: 24,
            metric: 0,
            hops,
        });
    }
    let backend: std::net::IpAddr = "10.9.0.1".parse().unwrap();
    net.neighbours
        .insert((2, backend), MacAddr([2, 0, 0, 0, 9, 1]));
    let dp = ["up".to_string(), "be".to_string()];
    t.set_egress(crate::Egress::build(&net, &dp, &[backend], None));
    let mut ct = ct_for(&t, 16);
    let mut w = WorkerState::new();
    let client_mac = [2, 0, 0, 0, 0x77, 7];
    let mut run = |w: &mut WorkerState, mut p: Pkt, ifindex: u32, now: u64| {
        p.src_mac = client_mac;
        let frame = p.build();
        let mut buf = vec![0u8; HEADROOM + frame.len()];
        buf[HEADROOM..].copy_from_slice(&frame);
        let mut f = Frame::new(&mut buf, HEADROOM, frame.len(), ifindex).unwrap();
        let v = process(&mut f, &t, &mut ct, w, now);
        (v, f.data()[0..6].to_vec())
    };
    let query = || Pkt::new("198.51.100.7", "192.0.2.100", 17, udp(5000, 80, b"q"));
    let answer = || Pkt::new("10.9.0.1", "198.51.100.7", 17, udp(80, 5000, b"a"));
    for now in [0, 1_000_000] {
        assert_eq!(run(&mut w, query(), 1, now).0, Verdict::Tx { ifindex: 2 });
        let (v, dst_mac) = run(&mut w, answer(), 2, now + 1);
        assert_eq!(v, Verdict::Tx { ifindex: 1 }, "the answer at {now}");
        assert_eq!(dst_mac, client_mac, "to the client's own MAC");
    }
    // Another client of the same network, never seen: no MAC, its answer is dropped.
    let stranger = Pkt::new("10.9.0.1", "198.51.100.8", 17, udp(80, 5000, b"a"));
    assert!(matches!(run(&mut w, stranger, 2, 3).0, Verdict::Drop(_)));
}

/// A word-at-a-time NAT rewrite, the plain reading of RFC 1624 that [`nat_rewrite`] must
/// match byte for byte.
fn nat_rewrite_reference(
    d: &mut [u8],
    ip: &Ip,
    l4: &L4,
    src: Option<(u128, u16)>,
    dst: Option<(u128, u16)>,
) {
    fn addr_delta(old: u128, new: u128, v6: bool) -> u32 {
        let words = if v6 { 8 } else { 2 };
        let mut acc = 0u32;
        for i in 0..words {
            acc += u32::from(!((old >> (16 * i)) as u16)) + u32::from((new >> (16 * i)) as u16);
        }
        acc
    }
    let mut ip_acc = 0u32;
    let mut l4_acc = 0u32;
    if ip.v6 {
        d[ip.l3 + 7] -= 1;
    } else {
        let old = rd16(d, ip.l3 + 8);
        let new = old - 0x100;
        wr16(d, ip.l3 + 8, new);
        ip_acc += u32::from(!old) + u32::from(new);
    }
    let (so, dof) = if ip.v6 { (8, 24) } else { (12, 16) };
    for (change, aoff, poff) in [(src, so, 0), (dst, dof, 2)] {
        let Some((addr, port)) = change else {
            continue;
        };
        let old = rd_addr(d, ip.l3 + aoff, ip.v6);
        wr_addr(d, ip.l3 + aoff, ip.v6, addr);
        let delta = addr_delta(old, addr, ip.v6);
        if !ip.v6 {
            ip_acc += delta;
        }
        let old_port = rd16(d, ip.l4 + poff);
        wr16(d, ip.l4 + poff, port);
        l4_acc += delta + u32::from(!old_port) + u32::from(port);
    }
    if !ip.v6 {
        let c = rd16(d, ip.l3 + 10);
        wr16(d, ip.l3 + 10, !checksum::fold(u32::from(!c) + ip_acc));
    }
    l4.csum
        .patch(d, |c| !checksum::fold(u32::from(!c) + l4_acc));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The NAT rewrite gives the same bytes as the word-at-a-time reference
    /// for any header bytes, addresses, ports and checksums (UDP zero and 0xffff
    /// included, through `special`).
    #[test]
    fn nat_rewrite_matches_reference(
        v6 in any::<bool>(),
        udp in any::<bool>(),
        bytes in proptest::collection::vec(any::<u8>(), 14 + 40 + 20),
        src in proptest::option::of((any::<u128>(), any::<u16>())),
        dst in proptest::option::of((any::<u128>(), any::<u16>())),
        special in 0u8..4,
    ) {
        let mut d = bytes;
        let l3 = 14;
        let hl = if v6 { 40 } else { 20 };
        let l4off = l3 + hl;
        let csum_off = l4off + if udp { 6 } else { 16 };
        // The caller guarantees TTL / hop limit > 1.
        let ttl_at = l3 + if v6 { 7 } else { 8 };
        d[ttl_at] = d[ttl_at].max(2);
        match special {
            1 => wr16(&mut d, csum_off, 0),
            2 => wr16(&mut d, csum_off, 0xffff),
            _ => {}
        }
        // IPv4 addresses live in the low 32 bits of the u128 form.
        let narrow = |c: Option<(u128, u16)>| {
            c.map(|(a, p)| (if v6 { a } else { 0xffff_0000_0000 | (a & 0xffff_ffff) }, p))
        };
        let (src, dst) = (narrow(src), narrow(dst));
        let ip = Ip {
            l3,
            v6,
            ip_len: hl + 20,
            l4: l4off,
            proto: if udp { wire::IpProtocol::UDP } else { wire::IpProtocol::TCP },
            src: rd_addr(&d, l3 + if v6 { 8 } else { 12 }, v6),
            dst: rd_addr(&d, l3 + if v6 { 24 } else { 16 }, v6),
            frag: false,
            zone: 0,
        };
        let l4 = L4 {
            sport: rd16(&d, l4off),
            dport: rd16(&d, l4off + 2),
            flags: 0,
            payload: true,
            seq: 0,
            ack: 0,
            len: 0,
            csum: if udp { L4Csum::udp(csum_off, v6) } else { L4Csum::tcp(csum_off) },
        };
        let mut want = d.clone();
        nat_rewrite_reference(&mut want, &ip, &l4, src, dst);
        nat_rewrite(&mut d, &ip, &l4, src, dst);
        prop_assert_eq!(d, want);
    }
}
