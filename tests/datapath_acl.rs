//! The XDP program's copy of the VIPs' allow and deny lists (issue 46), frame by frame
//! through BPF_PROG_TEST_RUN with the golden setup's steering: every golden source-list row
//! the program can judge (client → VIP over TCP, not a tenant's, not ICMP) gets the engine's
//! verdict, a denied one dropped in the program and counted per VIP and list; a list change
//! applies at once and leaves nothing of the old lists behind; and 50,000 spoofed sources
//! of a denied prefix are all dropped before the engine while allowed clients still reach
//! it. Needs root to load BPF; no namespaces.

use lab::netns::require_root;
use sluice::config::{AclRule, Prefix};
use sluice::control::prepare::steering;
use sluice::datapath::steer::Steer;
use sluice::lb::{DropReason, Verdict};
use testkit::golden::{self, Pkt, tcp};

const XDP_DROP: u32 = 1;

fn loaded(config: &sluice::config::Config) -> Steer {
    let mut steer = Steer::load().expect("load the steering program");
    let s = steering(config);
    assert!(!s.acls.is_empty(), "the golden setup has VIPs with lists");
    steer
        .set_vips_with_acls(&s.vips, &s.acls)
        .expect("vips and lists");
    steer
}

/// The program's drops for (vip, list).
fn drops(steer: &Steer, vip: &str, list: &str) -> u64 {
    steer
        .acl_drops()
        .expect("acl counters")
        .into_iter()
        .find(|((v, l), _)| v == vip && l == list)
        .map_or(0, |(_, n)| n)
}

#[test]
fn the_program_gives_every_golden_source_list_row_the_engines_verdict() {
    require_root();
    let config = golden::config();
    let steer = loaded(&config);
    let mut judged = 0;
    for f in golden::fixtures() {
        let d = f.description;
        let ours = [
            "acl4 nat",
            "acl6 nat",
            "aclf4 fullnat",
            "aclf6 fullnat",
            "acldr dr",
            "acldr6 dr",
            "acltun ipip",
            "acltun6 ipip",
        ]
        .iter()
        .any(|p| d.starts_with(p));
        if !ours || d.contains("icmp") || d.contains("reply") {
            continue;
        }
        judged += 1;
        let before = steer.counters().expect("counters").denied;
        let (action, _, claimed) = steer.test_run(&f.input, 0).expect("test run");
        let denied = steer.counters().expect("counters").denied - before;
        match f.verdict {
            Verdict::Drop(DropReason::Denied) => {
                assert_eq!(action, XDP_DROP, "{d}: dropped in the program");
                assert_eq!(denied, 1, "{d}: counted");
            }
            _ => {
                assert!(claimed, "{d}: an allowed client's frame goes to the engine");
                assert_eq!(denied, 0, "{d}");
            }
        }
    }
    assert_eq!(judged, 22, "the golden rows the program judges");
    assert_eq!(drops(&steer, "acl4", "deny"), 1);
    assert_eq!(drops(&steer, "acl4", "allow"), 1);
    assert_eq!(drops(&steer, "aclf6", "deny"), 1);
    assert_eq!(drops(&steer, "aclf6", "partners"), 1);
    assert_eq!(drops(&steer, "acldr", "partners"), 1);
    assert_eq!(drops(&steer, "acltun", "allow"), 1);
    assert_eq!(drops(&steer, "acl6", "deny"), 1);
    assert_eq!(drops(&steer, "acl6", "allow"), 1);
    assert_eq!(drops(&steer, "aclf4", "deny"), 1);
    assert_eq!(
        drops(&steer, "aclf4", "allow"),
        0,
        "allow 0.0.0.0/0 admits every source"
    );
    assert_eq!(drops(&steer, "acldr6", "partners"), 1);
    assert_eq!(drops(&steer, "acltun6", "allow"), 1);
}

#[test]
fn a_list_change_applies_at_once_and_leaves_nothing_behind() {
    require_root();
    let mut config = golden::config();
    let mut steer = loaded(&config);
    let frame = |src: &str| Pkt::new(src, "192.0.2.152", 6, tcp(40000, 80, 0x02, 1, b"")).build();
    // acldr denies the partners; 198.51.100.7 goes to the engine.
    assert_eq!(
        steer.test_run(&frame("203.0.113.9"), 0).unwrap().0,
        XDP_DROP
    );
    assert!(steer.test_run(&frame("198.51.100.7"), 0).unwrap().2);
    // Deny 198.51.100.0/24 instead: the verdicts swap with the one commit.
    let dr = config.vips.iter_mut().find(|v| v.name == "acldr").unwrap();
    dr.acl.rules = vec![AclRule {
        prefix: Prefix::parse("198.51.100.0/24").unwrap(),
        allow: false,
        list: "deny".into(),
    }];
    let s = steering(&config);
    steer
        .set_vips_with_acls(&s.vips, &s.acls)
        .expect("changed lists");
    assert!(steer.test_run(&frame("203.0.113.9"), 0).unwrap().2);
    assert_eq!(
        steer.test_run(&frame("198.51.100.7"), 0).unwrap().0,
        XDP_DROP
    );
    // No lists at all: every source goes to the engine, the old entries are gone.
    config
        .vips
        .iter_mut()
        .for_each(|v| v.acl = Default::default());
    let s = steering(&config);
    assert!(s.acls.is_empty());
    steer
        .set_vips_with_acls(&s.vips, &s.acls)
        .expect("no lists");
    assert!(steer.test_run(&frame("198.51.100.7"), 0).unwrap().2);
    assert!(steer.test_run(&frame("203.0.113.9"), 0).unwrap().2);
    assert_eq!(steer.acl_entries().expect("entries"), (0, 0), "tries empty");
}

#[test]
fn fifty_thousand_spoofed_denied_sources_never_reach_the_engine() {
    require_root();
    let config = golden::config();
    let steer = loaded(&config);
    let before = steer.counters().expect("counters");
    // aclf6 denies the partners' 2001:db8:e::/48: 50,000 sources in it (unused lab
    // addresses), one SYN each, as a spoofed flood sends them.
    let mut dropped = 0u64;
    for i in 0..50_000u32 {
        let src = format!("2001:db8:e::{:x}:{:x}", i >> 16, i & 0xffff);
        let p = Pkt::new(
            &src,
            "2001:db8::150",
            6,
            tcp(1024 + (i % 60000) as u16, 443, 0x02, i, b""),
        );
        let (action, _, claimed) = steer.test_run(&p.build(), 0).expect("test run");
        assert!(!claimed);
        dropped += u64::from(action == XDP_DROP);
    }
    assert_eq!(dropped, 50_000);
    // Allowed clients in between still reach the engine.
    for i in 0..1000u32 {
        let src = format!("2001:db8:d::{:x}", i + 1);
        let p = Pkt::new(&src, "2001:db8::150", 6, tcp(40000, 443, 0x02, 1, b""));
        assert!(steer.test_run(&p.build(), 0).expect("test run").2, "{src}");
    }
    let after = steer.counters().expect("counters");
    assert_eq!(after.denied - before.denied, 50_000);
    assert_eq!(
        after.no_socket - before.no_socket,
        1000,
        "only the allowed ones steered"
    );
    assert_eq!(drops(&steer, "aclf6", "partners"), 50_000);
}
