//! Flows leave one table and enter another ([`FlowRecord`], the hand-over's and sync's
//! unit): whatever the packets made, an export imported into a fresh table at a later
//! `now` holds the same flows (backend, state, FullNAT port, evidence, age), the next
//! packet of each goes where it went before, and the codec carries the
//! export byte for byte.

use super::tests::{ct_for, one_vip, send, tables};
use super::*;
use crate::conntrack::{FlowRecord, codec};
use config::Scheduler;
use proptest::prelude::*;

const SEC: u64 = 1_000_000_000;

fn mode_of(m: u8) -> Mode {
    match m {
        0 => Mode::Dr,
        1 => Mode::Nat,
        _ => Mode::FullNat,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn an_exported_table_imports_whole(
        mode in 0u8..3,
        lvs in any::<bool>(),
        packets in proptest::collection::vec((1000u16..1200, prop_oneof![Just(0x02u8), Just(0x10), Just(0x18), Just(0x11), Just(0x04)], 0u64..5), 1..300),
        gap in 0u64..5,
    ) {
        let sched = if lvs { Scheduler::Wrr } else { Scheduler::Maglev };
        let c = one_vip(mode_of(mode), sched, 3);
        let t = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t, 4096);
        let mut w = WorkerState::new();
        let mut now = 0;
        for (sport, flags, dt) in &packets {
            now += dt * SEC / 10;
            send(&t, &mut ct, &mut w, *sport, *flags, now);
        }
        ct.expire(now, usize::MAX);
        let records: Vec<FlowRecord> = ct.export(now).collect();
        prop_assert_eq!(records.len(), ct.len());
        let bytes = codec::encode(&records);
        let (decoded, _) = codec::decode(&bytes).expect("decode");
        prop_assert_eq!(&decoded, &records);
        // Another process, later: its own table, the same config's tables.
        let later = now + gap * SEC;
        let t2 = tables(&c, 7, &|_| true);
        let mut ct2 = ct_for(&t2, 4096);
        for r in &decoded {
            ct2.import(r, &t2, later).expect("import");
        }
        // A record's age is its age when written: the time it took to arrive is not idle
        // time of the flow.
        let again: Vec<FlowRecord> = ct2.export(later).collect();
        prop_assert_eq!(&again, &records);
        prop_assert_eq!(ct2.active_counts(), ct.active_counts());
        prop_assert_eq!(ct2.inactive_counts(), ct.inactive_counts());
        prop_assert_eq!(ct2.snat_ports(), ct.snat_ports());
        // Each imported flow's next segment goes to its backend, as in the old table.
        let mut w2 = WorkerState::new();
        for r in &records {
            if r.state == FlowState::TcpEstablished {
                let before = send(&t, &mut ct, &mut w, r.key.sport, 0x10, now).1;
                let after = send(&t2, &mut ct2, &mut w2, r.key.sport, 0x10, later).1;
                prop_assert_eq!(before, after, "port {}", r.key.sport);
            }
        }
    }
}

/// A record the tables cannot place is refused with why, and nothing changes.
#[test]
fn records_that_do_not_fit_are_refused() {
    let c = one_vip(Mode::FullNat, Scheduler::Maglev, 2);
    let t = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t, 64);
    let mut w = WorkerState::new();
    send(&t, &mut ct, &mut w, 4000, 0x02, 0);
    let r = ct.export(0).next().expect("one flow");
    let mut ct2 = ct_for(&t, 64);
    let mut other = r;
    other.key.dport = 81;
    assert_eq!(
        ct2.import(&other, &t, 0),
        Err(crate::conntrack::ImportError::NoVip)
    );
    let no_port = FlowRecord { snat: None, ..r };
    assert_eq!(
        ct2.import(&no_port, &t, 0),
        Err(crate::conntrack::ImportError::ModeMismatch)
    );
    let old = FlowRecord {
        age_ns: 31 * SEC,
        ..r
    };
    assert_eq!(
        ct2.import(&old, &t, 40 * SEC),
        Err(crate::conntrack::ImportError::Expired)
    );
    assert!(ct2.is_empty());
    assert!(ct2.import(&r, &t, 0).is_ok());
    assert_eq!(ct2.len(), 1);
}
