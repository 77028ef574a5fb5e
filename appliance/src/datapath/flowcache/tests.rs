//! The flow cache's decisions and entries: what is cached, and what each entry repeats.

use super::*;
use crate::lb::NextHop;
use wire::MacAddr;

fn v4(a: [u8; 4]) -> u128 {
    0xffff_0000_0000 | u128::from(u32::from_be_bytes(a))
}

fn decision(mode: Mode, state: FlowState, flags: u8) -> Decision {
    let key = FlowKey {
        src: v4([198, 51, 100, 7]),
        dst: v4([192, 0, 2, 10]),
        sport: 40000,
        dport: 80,
        proto: 6,
        v6: false,
        zone: 0,
    };
    Decision {
        key,
        reverse: false,
        mode,
        vip: 0,
        backend: 0,
        src: None,
        dst: Some((v4([10, 0, 0, 1]), 8080)),
        next_hop: NextHop {
            ifindex: 2,
            src_mac: MacAddr([2, 0, 0, 0, 0, 0xaa]),
            dst_mac: MacAddr([2, 0, 0, 0, 1, 1]),
        },
        flow: Some((key, state)),
        tcp_flags: flags,
        carry: Default::default(),
        teardown: flags & (tcp_flags::FIN | tcp_flags::RST) != 0,
        track: Default::default(),
    }
}

#[test]
fn client_address_flows_are_cached_once_armed_with_their_shift() {
    use crate::lb::conntrack::Carry;
    let est = decision(Mode::FullNat, FlowState::TcpEstablished, tcp_flags::ACK);
    let waiting = Carry {
        kind: ClientAddress::ProxyV2,
        base: 1001,
        delta: 28,
        armed: false,
        ..Carry::default()
    };
    let d = Decision {
        carry: waiting,
        ..est
    };
    assert!(!cacheable(&d), "the header has not gone out yet");
    let sent = Carry {
        armed: true,
        ..waiting
    };
    let d = Decision { carry: sent, ..est };
    assert!(cacheable(&d));
    let e = entry_for(&d, 1).expect("entry");
    assert_eq!(
        e.carry,
        CacheCarry::Seq {
            base: 1001,
            delta: 28
        }
    );
    let r = Decision { reverse: true, ..d };
    let e = entry_for(&r, 1).expect("entry");
    assert_eq!(
        e.carry,
        CacheCarry::Ack {
            base: 1001,
            delta: 28
        }
    );
    let toa = Carry {
        kind: ClientAddress::Toa,
        base: 77,
        delta: 0,
        armed: true,
        ..Carry::default()
    };
    let t = Decision { carry: toa, ..est };
    assert_eq!(
        entry_for(&t, 1).expect("entry").carry,
        CacheCarry::Toa { base: 77 }
    );
    let t = Decision { reverse: true, ..t };
    assert_eq!(entry_for(&t, 1).expect("entry").carry, CacheCarry::None);
}

/// A flow the SYN proxy opened is cached once established: client → backend with its
/// shift on acknowledgements, backend → client with it back on sequence numbers, each
/// with its direction's rescale. Not while opening (no shift yet), not its backend's
/// SYN-ACK, and not beside a client-address carry.
#[test]
fn syn_proxied_flows_are_cached_with_their_shift() {
    use crate::lb::conntrack::Carry;
    let est = decision(Mode::Nat, FlowState::TcpEstablished, tcp_flags::ACK);
    let (fwd, rev) = (Rescale { from: 7, to: 0 }, Rescale { from: 0, to: 7 });
    let proxied = Carry {
        proxy: Proxied::Open {
            shift: 12345,
            fwd,
            rev,
        },
        ..Carry::default()
    };
    let d = Decision {
        carry: proxied,
        ..est
    };
    assert!(cacheable(&d));
    let e = entry_for(&d, 1).expect("entry");
    assert_eq!(
        e.shift,
        CacheShift::Ack {
            shift: 12345,
            window: fwd
        }
    );
    assert_eq!(e.carry, CacheCarry::None);
    let back = entry_for(&Decision { reverse: true, ..d }, 1).expect("entry");
    assert_eq!(
        back.shift,
        CacheShift::Seq {
            shift: 12345u32.wrapping_neg(),
            window: rev
        }
    );
    let opening = Carry {
        proxy: Proxied::Opening {
            cookie: 1,
            options: 0,
            window: 100,
        },
        ..Carry::default()
    };
    assert!(!cacheable(&Decision {
        carry: opening,
        ..est
    }));
    let with_header = Carry {
        kind: ClientAddress::ProxyV2,
        armed: true,
        delta: 28,
        ..proxied
    };
    assert!(!cacheable(&Decision {
        carry: with_header,
        ..est
    }));
    let answer = decision(
        Mode::Nat,
        FlowState::TcpSyn,
        tcp_flags::SYN | tcp_flags::ACK,
    );
    let answer = Decision {
        reverse: true,
        carry: proxied,
        ..answer
    };
    assert!(!cacheable(&answer));
    assert_eq!(
        entry_for(&est, 1).expect("plain").shift,
        CacheShift::None,
        "a flow the proxy did not open has no shift"
    );
}

#[test]
fn fullnat_and_dr_entries_repeat_the_decision() {
    let d = decision(Mode::FullNat, FlowState::TcpEstablished, 0x10);
    let d = Decision {
        src: Some((v4([10, 1, 0, 1]), 1025)),
        ..d
    };
    let e = entry_for(&d, 7).expect("fullnat is cached");
    assert_eq!(
        e.action,
        CacheAction::Nat {
            src: Some((v4([10, 1, 0, 1]), 1025)),
            dst: Some((v4([10, 0, 0, 1]), 8080)),
        }
    );
    assert_eq!((e.dst_mac, e.ifindex, e.stat), ([2, 0, 0, 0, 1, 1], 2, 7));
    let dr = entry_for(&decision(Mode::Dr, FlowState::Udp, 0), 1).expect("dr");
    assert_eq!(dr.action, CacheAction::Dr);
}

#[test]
fn only_established_flows_without_handshake_flags_are_cached() {
    let est = FlowState::TcpEstablished;
    assert!(cacheable(&decision(Mode::Nat, est, 0x18)));
    assert!(!cacheable(&decision(Mode::Nat, est, 0x11)), "fin");
    assert!(!cacheable(&decision(Mode::Nat, est, 0x14)), "rst");
    assert!(!cacheable(&decision(Mode::Nat, FlowState::TcpSyn, 0x10)));
    assert!(!cacheable(&decision(
        Mode::Nat,
        FlowState::TcpClosing,
        0x10
    )));
    assert!(cacheable(&decision(Mode::Nat, FlowState::Udp, 0)));
    let stateless = Decision {
        flow: None,
        ..decision(Mode::Nat, FlowState::Udp, 0)
    };
    assert!(!cacheable(&stateless));
}

#[test]
fn tunnels_and_dr_return_are_not_cached() {
    let t = decision(Mode::Tunnel(crate::config::Encap::Ipip), FlowState::Udp, 0);
    assert_eq!(entry_for(&t, 0), None);
    let r = Decision {
        reverse: true,
        ..decision(Mode::Dr, FlowState::Udp, 0)
    };
    assert_eq!(entry_for(&r, 0), None);
}
