//! `lb::process` over the golden tables: encapsulation limits, and any golden input
//! corrupted or truncated, or random IP bytes, give a verdict and never a panic. Here
//! rather than in the appliance's unit tests because they need the golden tables, which
//! this crate builds with the appliance library's own types.

use lb::conntrack::ConnTable;
use lb::{DropReason, Frame, HEADROOM, Tables, Verdict, WorkerState, process};
use proptest::prelude::*;
use testkit::golden::{self, Pkt, tcp};

/// The golden fixtures and tables, built once.
fn shared() -> &'static (Vec<golden::Fixture>, Tables) {
    static SHARED: std::sync::OnceLock<(Vec<golden::Fixture>, Tables)> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| (golden::fixtures(), golden::tables()))
}

fn ct_for(t: &Tables, cap: usize) -> ConnTable {
    ConnTable::new(cap, t.timeouts, t.backends.len(), 0, 1)
}

#[test]
fn encapsulation_needs_headroom_and_a_representable_length() {
    // An underlay that takes any frame, so only the outer length field limits.
    let mut t = shared().1.clone();
    t.set_mtu(golden::BACKENDS, u32::MAX);
    let t = &t;
    let mut ct = ct_for(t, 16);
    let mut w = WorkerState::new();
    // No headroom: dropped untouched.
    let input = Pkt::new("198.51.100.7", "192.0.2.40", 6, tcp(1, 80, 0x02, 1, b"")).build();
    let mut buf = input.clone();
    let mut f = Frame::new(&mut buf, 0, input.len(), 1).unwrap();
    assert_eq!(
        process(&mut f, t, &mut ct, &mut w, 0),
        Verdict::Drop(DropReason::NoRoom)
    );
    assert_eq!(f.data(), &input[..]);
    // A 65 520-byte inner packet cannot get a 20-byte outer IPv4 header.
    let big = Pkt::new(
        "198.51.100.7",
        "192.0.2.40",
        6,
        tcp(2, 80, 0x10, 1, &vec![0u8; 65480]),
    )
    .build();
    let mut buf = vec![0u8; HEADROOM + big.len()];
    buf[HEADROOM..].copy_from_slice(&big);
    let mut f = Frame::new(&mut buf, HEADROOM, big.len(), 1).unwrap();
    assert_eq!(
        process(&mut f, t, &mut ct, &mut w, 0),
        Verdict::Drop(DropReason::BadLength)
    );
    assert_eq!(f.data(), &big[..]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any corruption or truncation of any golden input gives a verdict, never a panic,
    /// and a Tx frame never leaves the buffer.
    #[test]
    fn mutated_frames_never_panic(
        which in 0usize..86,
        flips in proptest::collection::vec((any::<u16>(), any::<u8>()), 0..8),
        cut in any::<u16>(),
    ) {
        let (fixtures, t) = shared();
        let fx = &fixtures[which % fixtures.len()];
        let mut input = fx.input.clone();
        for (at, x) in flips {
            let n = input.len();
            if n > 0 {
                input[usize::from(at) % n] ^= x;
            }
        }
        let keep = usize::from(cut) % (input.len() + 1);
        if cut % 3 == 0 {
            input.truncate(keep);
        }
        let mut ct = ct_for(t, 64);
        let mut w = WorkerState::new();
        let mut buf = vec![0xa5u8; HEADROOM + input.len() + 64];
        buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
        let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
        let _ = process(&mut f, t, &mut ct, &mut w, golden::NOW);
        prop_assert!(f.start() + f.len() <= HEADROOM + input.len() + 64);
    }

    /// Random bytes with an IPv4 or IPv6 EtherType never panic either.
    #[test]
    fn random_ip_frames_never_panic(v6 in any::<bool>(), body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let t = &shared().1;
        let mut ct = ct_for(t, 64);
        let mut w = WorkerState::new();
        let mut input = vec![2, 0, 0, 0, 0, 0xaa, 2, 0, 0, 0, 0, 1];
        input.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
        input.extend_from_slice(&body);
        if let Some(b) = input.get_mut(14) {
            *b = (*b & 0x0f) | if v6 { 0x60 } else { 0x40 };
        }
        let mut buf = vec![0u8; HEADROOM + input.len()];
        buf[HEADROOM..].copy_from_slice(&input);
        let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).unwrap();
        let _ = process(&mut f, t, &mut ct, &mut w, 0);
    }
}
