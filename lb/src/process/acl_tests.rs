//! Source lists through the packet step (issue 46): a deny added while connections are open
//! ends every one of them in the swap that publishes it, in every mode, and nothing is
//! forwarded for them afterwards (a backend's reply included); a change to an allow list
//! leaves the flows it still allows on their backends; drops are counted per list.

use super::tests::{ct_for, one_vip, reply, send, tables};
use super::*;
use config::{AclRule, Prefix, Scheduler, SourceAcl};
use std::sync::atomic::Ordering;
use testkit::golden::{Pkt, tcp};

const SEC: u64 = 1_000_000_000;

fn rule(p: &str, allow: bool, list: &str) -> AclRule {
    AclRule {
        prefix: Prefix::parse(p).unwrap(),
        allow,
        list: list.into(),
    }
}

/// One SYN from `client`:`sport` to the test VIP; its verdict.
fn syn_from(
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
    client: &str,
    sport: u16,
) -> Verdict {
    let input = Pkt::new(client, "192.0.2.100", 6, tcp(sport, 80, 0x02, 1, b"")).build();
    let mut buf = vec![0xa5u8; HEADROOM + input.len() + 128];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
    process(&mut f, t, ct, w, SEC)
}

#[test]
fn a_deny_ends_every_open_flow_of_its_source_in_one_swap() {
    for mode in [
        Mode::Nat,
        Mode::FullNat,
        Mode::Dr,
        Mode::Tunnel(config::Encap::Ipip),
    ] {
        let mut c = one_vip(mode, Scheduler::Maglev, 3);
        let t1 = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t1, 4096);
        let mut w = WorkerState::new();
        // 100 connections from 198.51.100.7 (the helpers' client), 10 from another one.
        for sport in 1000..1100 {
            assert!(matches!(
                send(&t1, &mut ct, &mut w, sport, 0x02, SEC).0,
                Verdict::Tx { .. }
            ));
        }
        for sport in 2000..2010 {
            let v = syn_from(&t1, &mut ct, &mut w, "198.51.100.9", sport);
            assert!(matches!(v, Verdict::Tx { .. }), "{mode:?}");
        }
        assert_eq!(ct.len(), 110);
        c.vips[0].acl = SourceAcl {
            rules: vec![rule("198.51.100.7/32", false, "blocked")],
            default_deny: false,
        };
        let t2 = tables(&c, 2, &|_| true);
        // The first frame after the swap adopts it: the 100 are gone, the 10 stay.
        let v = send(&t2, &mut ct, &mut w, 1000, 0x10, 2 * SEC).0;
        assert_eq!(v, Verdict::Drop(DropReason::Denied), "{mode:?}");
        assert_eq!(ct.len(), 10, "{mode:?}: the denied source's flows ended");
        for sport in 1000..1100 {
            assert_eq!(
                send(&t2, &mut ct, &mut w, sport, 0x10, 2 * SEC).0,
                Verdict::Drop(DropReason::Denied)
            );
        }
        assert_eq!(ct.len(), 10, "{mode:?}: a denied source makes no state");
        let acl = t2.vips[0].acl.as_ref().expect("lists");
        assert_eq!(acl.counters[0].list, "blocked");
        assert_eq!(acl.counters[0].dropped.load(Ordering::Relaxed), 101);
        assert_eq!(w.drops[DropReason::Denied.index()], 101);
    }
}

#[test]
fn a_reply_toward_a_denied_client_is_not_forwarded() {
    for mode in [Mode::Nat, Mode::FullNat] {
        let mut c = one_vip(mode, Scheduler::Maglev, 3);
        let t1 = tables(&c, 1, &|_| true);
        let mut ct = ct_for(&t1, 4096);
        let mut w = WorkerState::new();
        send(&t1, &mut ct, &mut w, 1000, 0x02, SEC);
        assert!(matches!(
            reply(&t1, &mut ct, &mut w, 1000, 0x12, 5000, SEC),
            Verdict::Tx { .. }
        ));
        // The same tables with the client denied, applied to the reply itself: the flow
        // was ended, and a NAT reply without a flow is not rewritten toward it either.
        c.vips[0].acl = SourceAcl {
            rules: vec![rule("198.51.100.0/24", false, "deny")],
            default_deny: false,
        };
        let t2 = tables(&c, 2, &|_| true);
        let mut ct2 = ct_for(&t1, 4096);
        let mut w2 = WorkerState::new();
        send(&t1, &mut ct2, &mut w2, 1000, 0x02, SEC);
        let rk = {
            let key = crate::hash::FlowKey {
                src: crate::hash::addr_to_u128("198.51.100.7".parse().unwrap()),
                dst: crate::hash::addr_to_u128("192.0.2.100".parse().unwrap()),
                sport: 1000,
                dport: 80,
                proto: 6,
                v6: false,
                zone: 0,
            };
            let id = ct2.lookup(&key, SEC).unwrap();
            ct2.flow(id).rev_key().unwrap()
        };
        let ip = |a: u128| crate::hash::u128_to_addr(a, false).to_string();
        let input = Pkt::new(
            &ip(rk.backend),
            &ip(rk.local),
            6,
            tcp(rk.backend_port, rk.local_port, 0x12, 5000, b""),
        )
        .build();
        let mut buf = vec![0xa5u8; HEADROOM + input.len() + 128];
        buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
        let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
        let v = process(&mut f, &t2, &mut ct2, &mut w2, 2 * SEC);
        let want = match mode {
            // FullNAT's reply finds no flow once the swap ended it.
            Mode::FullNat => Verdict::Drop(DropReason::NoFlow),
            _ => Verdict::Drop(DropReason::Denied),
        };
        assert_eq!(v, want, "{mode:?}");
        assert!(ct2.is_empty(), "{mode:?}");
    }
}

#[test]
fn an_allow_list_change_leaves_allowed_flows_on_their_backends() {
    let mut c = one_vip(Mode::Nat, Scheduler::Maglev, 5);
    c.vips[0].acl = SourceAcl {
        rules: vec![rule("198.51.100.0/24", true, "allow")],
        default_deny: true,
    };
    let t1 = tables(&c, 1, &|_| true);
    let mut ct = ct_for(&t1, 4096);
    let mut w = WorkerState::new();
    let before: Vec<Option<u8>> = (1000..1100)
        .map(|s| send(&t1, &mut ct, &mut w, s, 0x02, SEC).1)
        .collect();
    assert!(before.iter().all(Option::is_some));
    // Another prefix allowed, a hole elsewhere denied: 198.51.100.7 is still allowed.
    c.vips[0].acl = SourceAcl {
        rules: vec![
            rule("198.51.100.0/24", true, "allow"),
            rule("198.51.100.64/26", false, "deny"),
            rule("203.0.113.0/24", true, "allow"),
        ],
        default_deny: true,
    };
    let t2 = tables(&c, 2, &|_| true);
    let after: Vec<Option<u8>> = (1000..1100)
        .map(|s| send(&t2, &mut ct, &mut w, s, 0x10, 2 * SEC).1)
        .collect();
    assert_eq!(before, after, "every flow kept its backend");
    assert_eq!(ct.len(), 100);
    assert_eq!(w.drops[DropReason::Denied.index()], 0);
}
