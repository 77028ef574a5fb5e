//! Unit and property tests of the connection table.

use super::*;
use crate::hash::mix64;
use proptest::prelude::*;
use std::collections::HashSet;
use std::time::Duration;

const S: u64 = 1_000_000_000;

fn timeouts() -> Timeouts {
    Timeouts {
        tcp_syn: Duration::from_secs(30),
        tcp_established: Duration::from_secs(900),
        tcp_closing: Duration::from_secs(10),
        udp: Duration::from_secs(300),
        udp_new: Duration::from_secs(20),
    }
}

fn key(i: u32, proto: u8) -> FlowKey {
    FlowKey {
        src: 0xffff_0000_0000 | u128::from(0xc633_6400 + (i >> 16)),
        dst: 0xffff_c000_020a,
        sport: i as u16,
        dport: 80,
        proto,
        v6: false,
        zone: 0,
    }
}

fn flow(i: u32, backend: u32, state: FlowState) -> Flow {
    Flow {
        key: key(
            i,
            if matches!(
                state,
                FlowState::Udp | FlowState::UdpNew | FlowState::UdpOneWay
            ) {
                17
            } else {
                6
            },
        ),
        vip: 0,
        backend,
        backend_addr: 0xffff_0a00_0001 + u128::from(backend),
        backend_port: 8080,
        version: 1,
        state,
        evidence: Default::default(),
        last_seen: 0,
        hash: i,
        snat: None,
        reverse: false,
        carry: Default::default(),
        track: Default::default(),
    }
}

#[test]
fn insert_lookup_remove_and_counts() {
    let mut ct = ConnTable::new(16, timeouts(), 4, 0, 1);
    let a = ct.insert(flow(1, 2, FlowState::TcpSyn), 0).unwrap();
    let b = ct.insert(flow(2, 2, FlowState::TcpEstablished), 0).unwrap();
    assert_eq!(ct.lookup(&key(1, 6), 1), Some(a));
    assert_eq!(ct.lookup(&key(2, 6), 1), Some(b));
    assert_eq!(ct.lookup(&key(3, 6), 1), None);
    assert_eq!((ct.active_counts()[2], ct.inactive_counts()[2]), (1, 1));
    ct.touch(a, 2, FlowState::TcpEstablished);
    assert_eq!(ct.flow(a).state, FlowState::TcpEstablished);
    assert_eq!((ct.active_counts()[2], ct.inactive_counts()[2]), (2, 0));
    ct.touch(b, 3, FlowState::TcpClosing);
    assert_eq!((ct.active_counts()[2], ct.inactive_counts()[2]), (1, 1));
    ct.remove(a);
    ct.remove(b);
    assert_eq!((ct.active_counts()[2], ct.inactive_counts()[2]), (0, 0));
    assert!(ct.is_empty());
    assert_eq!(ct.lookup(&key(1, 6), 4), None);
}

#[test]
fn timeouts_expire_by_now() {
    let mut ct = ConnTable::new(16, timeouts(), 1, 0, 1);
    ct.insert(flow(1, 0, FlowState::TcpSyn), 0).unwrap();
    ct.insert(flow(2, 0, FlowState::TcpEstablished), 0).unwrap();
    ct.insert(flow(3, 0, FlowState::TcpClosing), 0).unwrap();
    ct.insert(flow(4, 0, FlowState::Udp), 0).unwrap();
    // At exactly the timeout a flow is still alive; one nanosecond later it is gone.
    assert!(ct.lookup(&key(3, 6), 10 * S).is_some());
    assert!(ct.lookup(&key(3, 6), 10 * S + 1).is_none());
    assert!(ct.lookup(&key(1, 6), 30 * S + 1).is_none());
    assert!(ct.lookup(&key(4, 17), 300 * S).is_some());
    assert!(ct.lookup(&key(4, 17), 300 * S + 1).is_none());
    assert!(ct.lookup(&key(2, 6), 900 * S).is_some());
    assert_eq!(ct.expire(900 * S + 1, 100), 1);
    assert!(ct.is_empty());
    assert_eq!(ct.stats.expired, 4);
    assert_eq!(ct.inactive_counts()[0] + ct.active_counts()[0], 0);
}

/// An idle worker sleeps until `next_expiry`: it must never be later than the first flow
/// `expire` would remove, and once that flow is gone it moves to the next one.
#[test]
fn next_expiry_is_the_first_flow_expire_removes() {
    let mut ct = ConnTable::new(16, timeouts(), 1, 0, 1);
    assert_eq!(ct.next_expiry(), None, "an empty table has nothing due");
    ct.insert(flow(1, 0, FlowState::TcpEstablished), 0).unwrap();
    ct.insert(flow(2, 0, FlowState::Udp), 5 * S).unwrap();
    ct.insert(flow(3, 0, FlowState::TcpClosing), 7 * S).unwrap();
    let due = ct.next_expiry().expect("flows are due");
    assert_eq!(
        due,
        17 * S + 1,
        "the closing flow, 10 s after it was placed"
    );
    assert_eq!(ct.expire(due - 1, 100), 0, "nothing expires before it");
    assert_eq!(ct.expire(due, 100), 1);
    assert_eq!(ct.next_expiry(), Some(305 * S + 1), "then the UDP flow");
    // A packet moves its flow on: the bound follows (up to the LRU granularity early).
    let id = ct.lookup(&key(2, 17), 100 * S).expect("live");
    ct.touch(id, 100 * S, FlowState::Udp);
    assert_eq!(ct.next_expiry(), Some(400 * S + 1));
    assert_eq!(ct.expire(400 * S, 100), 0);
    assert_eq!(ct.expire(900 * S + 1, 100), 2);
    assert_eq!(ct.next_expiry(), None);
}

#[test]
fn full_table_evicts_embryonic_then_refuses() {
    let mut ct = ConnTable::new(4, timeouts(), 1, 0, 1);
    ct.insert(flow(1, 0, FlowState::TcpSyn), 0).unwrap();
    for i in 2..=4 {
        ct.insert(flow(i, 0, FlowState::TcpEstablished), 0).unwrap();
    }
    // Full: the half-open flow goes.
    ct.insert(flow(5, 0, FlowState::TcpEstablished), 1).unwrap();
    assert_eq!(ct.stats.evicted_embryonic, 1);
    assert!(ct.lookup(&key(1, 6), 1).is_none());
    // Full of established flows: refused and counted.
    assert_eq!(
        ct.insert(flow(6, 0, FlowState::TcpSyn), 1),
        Err(InsertError::Full)
    );
    assert_eq!(ct.stats.full, 1);
    // After the established timeout everything is reclaimable.
    ct.insert(flow(6, 0, FlowState::TcpSyn), 901 * S).unwrap();
    assert_eq!(ct.len(), 4);
}

#[test]
fn lru_order_follows_touch() {
    let mut ct = ConnTable::new(8, timeouts(), 1, 0, 1);
    let a = ct.insert(flow(1, 0, FlowState::Udp), 0).unwrap();
    let b = ct.insert(flow(2, 0, FlowState::Udp), 0).unwrap();
    let c = ct.insert(flow(3, 0, FlowState::Udp), 0).unwrap();
    // Within the granularity the order stays; after it the flow moves to the head.
    ct.touch(a, LRU_GRANULARITY_NS - 1, FlowState::Udp);
    assert_eq!(ct.ids().collect::<Vec<_>>(), [c, b, a]);
    ct.touch(a, LRU_GRANULARITY_NS, FlowState::Udp);
    assert_eq!(ct.ids().collect::<Vec<_>>(), [a, c, b]);
}

#[test]
fn index_survives_heavy_churn() {
    let mut ct = ConnTable::new(512, timeouts(), 1, 0, 1);
    let mut live = HashSet::new();
    let mut x = 12345u64;
    for round in 0..20_000u32 {
        x = mix64(x.wrapping_add(u64::from(round)));
        let i = (x % 700) as u32;
        let k = key(i, 17);
        match ct.lookup(&k, 0) {
            Some(id) if x & 1 == 0 => {
                ct.remove(id);
                live.remove(&i);
            }
            Some(_) => assert!(live.contains(&i)),
            None => {
                assert!(!live.contains(&i), "lost flow {i}");
                if ct.insert(flow(i, 0, FlowState::Udp), 0).is_ok() {
                    live.insert(i);
                }
            }
        }
    }
    assert_eq!(ct.len(), live.len());
    for i in 0..700 {
        assert_eq!(ct.lookup(&key(i, 17), 0).is_some(), live.contains(&i));
    }
}

#[test]
fn a_port_another_appliance_still_uses_is_passed_over() {
    let pool = [0xffff_c633_6401u128];
    let backend = 0xffff_0a00_0001u128;
    let mut ct = ConnTable::new(256, timeouts(), 0, 0, 1);
    let first = ct.alloc_snat(6, backend, 8080, &pool, 7, 0).unwrap();
    // The same table, but a peer carries on a flow of this address and port (synced).
    let mut again = ConnTable::new(256, timeouts(), 0, 0, 1);
    let busy = |rk: &RevKey| (rk.local, rk.local_port) == first && rk.backend == backend;
    let next = again
        .alloc_snat_avoiding(6, backend, 8080, &pool, 7, 0, &busy)
        .unwrap();
    assert_ne!(next, first, "the peer's port is not handed out");
    // Toward another backend the same port is another tuple.
    let other = again
        .alloc_snat_avoiding(6, backend + 1, 8080, &pool, 7, 0, &busy)
        .unwrap();
    assert_eq!(other, first);
}

#[test]
fn fullnat_ports_never_collide_and_are_reused_after_expiry() {
    let mut ct = ConnTable::new(4096, timeouts(), 1, 1, 2);
    let pool = [0xffff_c633_6401u128, 0xffff_c633_6402];
    let backend = 0xffff_0a00_0001u128;
    let mut used = HashSet::new();
    for i in 0..3000u32 {
        // Few distinct hashes: starting points collide often, probing must resolve it.
        let h = i % 64;
        let (local, port) = ct.alloc_snat(6, backend, 8080, &pool, h, 0).unwrap();
        assert_eq!(port % 2, 1, "worker 1 of 2 owns odd ports");
        assert!(port >= SNAT_PORT_MIN);
        assert!(used.insert((local, port)), "collision at flow {i}");
        let mut f = flow(i, 0, FlowState::TcpSyn);
        f.backend_addr = backend;
        f.snat = Some((local, port));
        f.reverse = true;
        let id = ct.insert(f, 0).unwrap();
        let rk = f.rev_key().unwrap();
        assert_eq!(ct.lookup_rev(&rk, 0), Some(id));
    }
    // 64 probes x 2 addresses are exhausted for this hash.
    let mut fresh = ConnTable::new(256, timeouts(), 1, 0, 1);
    for i in 0..(2 * SNAT_PROBES as u32) {
        let (l, p) = fresh.alloc_snat(17, backend, 53, &pool, 9, 0).unwrap();
        let mut f = flow(i, 0, FlowState::Udp);
        f.backend_addr = backend;
        f.backend_port = 53;
        f.snat = Some((l, p));
        f.reverse = true;
        fresh.insert(f, 0).unwrap();
    }
    assert_eq!(fresh.alloc_snat(17, backend, 53, &pool, 9, 0), None);
    // A different backend port is a different tuple space.
    assert!(fresh.alloc_snat(17, backend, 54, &pool, 9, 0).is_some());
    // After the UDP timeout the same ports come back.
    let again = fresh
        .alloc_snat(17, backend, 53, &pool, 9, 301 * S)
        .unwrap();
    assert_eq!(again.0, pool[9 % 2]);
    assert_eq!(fresh.stats.expired, 1);
}

#[test]
fn adopt_rebinds_and_recounts() {
    let mut ct = ConnTable::new(8, timeouts(), 2, 0, 1);
    ct.insert(flow(1, 0, FlowState::TcpEstablished), 0).unwrap();
    ct.insert(flow(2, 1, FlowState::TcpEstablished), 0).unwrap();
    // New version: backend 0 moved to slot 2, backend 1 disappeared.
    ct.adopt(2, 3, |f| {
        Some((0, if f.backend == 0 { 2 } else { u32::MAX }))
    });
    assert_eq!(ct.active_counts(), &[0, 0, 1]);
    let id = ct.lookup(&key(2, 6), 0).unwrap();
    assert_eq!(ct.flow(id).backend, u32::MAX);
    ct.adopt(3, 3, |f| (f.key.sport == 1).then_some((0, 2)));
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.active_counts(), &[0, 0, 1]);
}

/// Live entries of a long timeout class placed behind expired short-timeout ones (the
/// issue-18 case: a few hundred live entries at the tail hid every expired one).
#[test]
fn expiry_is_exact_behind_live_entries() {
    let mut ct = ConnTable::new(2048, timeouts(), 1, 0, 1);
    for i in 0..600 {
        ct.insert(flow(i, 0, FlowState::TcpEstablished), 0).unwrap();
    }
    for i in 600..700 {
        ct.insert(flow(i, 0, FlowState::TcpSyn), S).unwrap();
    }
    for i in 700..800 {
        ct.insert(flow(i, 0, FlowState::UdpNew), 2 * S).unwrap();
    }
    // The SYNs' 30 s and the first datagrams' 20 s have passed; the established flows live.
    let removed: usize = (0..4).map(|_| ct.expire(40 * S, 64)).sum();
    assert_eq!(removed, 200);
    assert_eq!(ct.len(), 600);
    assert_eq!(ct.fill()[FlowState::TcpEstablished.class()], 600);
    assert_eq!(ct.stats.expired, 200);
}

/// Whether the table holds `k`, expired or not (no lookup side effects).
fn present(ct: &ConnTable, k: &FlowKey) -> bool {
    let slots = &ct.slots;
    ct.fwd
        .find(ct.fwd.fwd_hash(k), |id| slots[id as usize].flow.key == *k)
        .is_some()
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u32, usize),
    Touch(u32),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..300, 0usize..CLASSES).prop_map(|(i, c)| Op::Insert(i, c)),
        (0u32..300).prop_map(Op::Touch),
        (1u64..40_000).prop_map(|ms| Op::Advance(ms * 1_000_000)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Entries of every class expire on time, whatever order the classes interleave in
    /// and however recently other entries were touched: after `expire` no expired entry
    /// is left and every live one is.
    #[test]
    fn every_class_expires_on_time(ops in proptest::collection::vec(op(), 1..400)) {
        let mut ct = ConnTable::new(512, timeouts(), 1, 0, 1);
        let mut now = 0u64;
        let mut model: std::collections::HashMap<u32, (FlowState, u64)> = Default::default();
        for o in ops {
            match o {
                Op::Insert(i, c) => {
                    let st = FlowState::ALL[c];
                    let k = flow(i, 0, st).key;
                    if ct.lookup(&k, now).is_none() && ct.insert(flow(i, 0, st), now).is_ok() {
                        model.retain(|j, _| *j != i);
                        model.insert(i, (st, now));
                    }
                }
                Op::Touch(i) => {
                    if let Some(&(st, _)) = model.get(&i)
                        && let Some(id) = ct.lookup(&flow(i, 0, st).key, now)
                    {
                        ct.touch(id, now, st);
                        model.insert(i, (st, now));
                    }
                }
                Op::Advance(d) => now += d,
            }
            // The model forgets what the table evicted or expired on its own.
            model.retain(|i, (st, _)| present(&ct, &flow(*i, 0, *st).key));
        }
        ct.expire(now, usize::MAX);
        for (i, (st, seen)) in &model {
            let live = now - seen <= ct.timeout_ns(*st);
            prop_assert_eq!(present(&ct, &flow(*i, 0, *st).key), live, "flow {} {:?} seen {} now {}", i, st, seen, now);
        }
    }

    /// A table full of embryonic entries (and some established ones) still admits a new
    /// SYN, and no insert ever evicts an established entry.
    #[test]
    fn embryonic_floods_never_evict_established(
        established in 1u32..60,
        flood in 100u32..2000,
    ) {
        let cap = 64usize;
        let mut ct = ConnTable::new(cap, timeouts(), 1, 0, 1);
        for i in 0..established {
            ct.insert(flow(i, 0, FlowState::TcpEstablished), 0).unwrap();
        }
        for j in 0..flood {
            let st = if j % 3 == 0 { FlowState::UdpNew } else { FlowState::TcpSyn };
            let r = ct.insert(flow(10_000 + j, 0, st), u64::from(j));
            // Room exists unless the table holds only established flows.
            prop_assert_eq!(r.is_ok(), (established as usize) < cap);
        }
        for i in 0..established {
            prop_assert!(ct.lookup(&key(i, 6), u64::from(flood)).is_some(), "lost {}", i);
        }
        prop_assert_eq!(ct.fill()[FlowState::TcpEstablished.class()], established as usize);
    }
}

#[test]
fn journal_holds_a_removed_fullnat_port_until_drained() {
    let mut ct = ConnTable::new(64, timeouts(), 1, 0, 1);
    ct.journal(true);
    let pool = [0xffff_c633_6401u128];
    let backend = 0xffff_0a00_0001u128;
    let (l, p) = ct.alloc_snat(6, backend, 8080, &pool, 7, 0).unwrap();
    let mut f = flow(1, 0, FlowState::TcpEstablished);
    f.backend_addr = backend;
    f.snat = Some((l, p));
    f.reverse = true;
    ct.insert(f, 0).unwrap();
    assert_eq!(ct.snat_ports(), 1, "a live FullNAT flow holds its port");
    // Expired: a new allocation with the same start reclaims the flow but not its port.
    let later = 901 * S;
    let next = ct.alloc_snat(6, backend, 8080, &pool, 7, later).unwrap();
    assert_ne!(next, (l, p), "port reused before its kernel entries went");
    assert!(ct.is_empty());
    assert_eq!(ct.snat_ports(), 1, "the journal still holds the port");
    let mut evicted = Vec::new();
    ct.drain_removed(|k| evicted.push(*k));
    assert_eq!(evicted, [f.key]);
    assert_eq!(ct.snat_ports(), 0);
    assert_eq!(
        ct.alloc_snat(6, backend, 8080, &pool, 7, later),
        Some((l, p))
    );
}

/// Issue 42: each tenant zone and the underlay are guaranteed an equal share of a table: a
/// tenant's flood takes its share and no more, and the others still insert.
#[test]
fn a_tenant_zone_takes_its_share_and_no_more() {
    let (z1, z2) = (
        crate::hash::zone_of(Some(100)),
        crate::hash::zone_of(Some(200)),
    );
    let mut ct = ConnTable::new(30, Timeouts::default(), 4, 0, 1);
    ct.set_budgets(0, &[z1, z2]);
    let in_zone = |i: u32, zone: u32| {
        let mut f = flow(i, 0, FlowState::TcpEstablished);
        f.key.zone = zone;
        f
    };
    let took = (0..15)
        .filter(|i| ct.insert(in_zone(*i, z1), S).is_ok())
        .count();
    assert_eq!(took, 10, "a third of 30");
    assert_eq!(ct.stats.zone_refused, 5);
    assert_eq!(ct.insert(in_zone(100, z1), S), Err(InsertError::ZoneBudget));
    let other = (200..210)
        .filter(|i| ct.insert(in_zone(*i, z2), S).is_ok())
        .count();
    assert_eq!(other, 10, "the other tenant's share is whole");
    let under = (300..310)
        .filter(|i| ct.insert(in_zone(*i, 0), S).is_ok())
        .count();
    assert_eq!(under, 10, "so is the underlay's");
    // A flow that leaves gives its zone room again.
    let id = ct.lookup(&in_zone(3, z1).key, S).expect("a zone-1 flow");
    ct.remove(id);
    assert!(ct.insert(in_zone(101, z1), S).is_ok());
}
