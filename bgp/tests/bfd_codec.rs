//! BFD control-packet vectors both ways: hand-assembled bytes (from the RFC 5880 §4.1
//! layout, not from our encoder) against the expected `ControlPacket`, then one case per
//! §6.8.6 reception check, then properties: decode never panics, encode→decode round-trips.

use bgp::bfd::{BfdDecodeError, ControlPacket, Diag, State};
use proptest::prelude::*;

/// Hex to bytes, ignoring whitespace and `|` separators used for readability.
fn h(s: &str) -> Vec<u8> {
    let s: String = s
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '|')
        .collect();
    assert!(s.len().is_multiple_of(2), "odd hex length in vector: {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Line-by-line hex diff (8 octets per line) marking lines that differ.
fn hex_diff(want: &[u8], got: &[u8]) -> String {
    let mut out = String::new();
    let lines = want.len().max(got.len()).div_ceil(8);
    for i in 0..lines {
        let w = want
            .get(i * 8..((i + 1) * 8).min(want.len()))
            .unwrap_or(&[]);
        let g = got.get(i * 8..((i + 1) * 8).min(got.len())).unwrap_or(&[]);
        let mark = if w == g { " " } else { "!" };
        out.push_str(&format!(
            "{mark} {:02x} want {:<16} got {}\n",
            i * 8,
            hex(w),
            hex(g)
        ));
    }
    out
}

fn base() -> ControlPacket {
    ControlPacket {
        version: 1,
        diag: Diag::NoDiagnostic,
        state: State::Down,
        poll: false,
        final_: false,
        control_plane_independent: false,
        auth_present: false,
        demand: false,
        multipoint: false,
        detect_mult: 3,
        my_discriminator: 1,
        your_discriminator: 0,
        desired_min_tx: 1_000_000,
        required_min_rx: 1_000_000,
        required_min_echo_rx: 0,
    }
}

struct Vector {
    what: &'static str,
    bytes: &'static str,
    pkt: fn() -> ControlPacket,
}

/// Byte 0 is `vers(3) | diag(5)`, byte 1 `sta(2) P F C A D M`.
const VECTORS: &[Vector] = &[
    Vector {
        what: "initial Down, slow rate, your discriminator unknown",
        //       v1 diag0 | Down | mult 3 | len 24
        bytes: "20 | 40 | 03 | 18 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        pkt: base,
    },
    Vector {
        what: "Up with Poll, 100ms/300ms, echo 50ms",
        bytes: "20 | e0 | 05 | 18 | deadbeef | 01020304 | 000186a0 | 000493e0 | 0000c350",
        pkt: || ControlPacket {
            state: State::Up,
            poll: true,
            detect_mult: 5,
            my_discriminator: 0xdead_beef,
            your_discriminator: 0x0102_0304,
            desired_min_tx: 100_000,
            required_min_rx: 300_000,
            required_min_echo_rx: 50_000,
            ..base()
        },
    },
    Vector {
        what: "Init with Final and C bit",
        bytes: "20 | 98 | 03 | 18 | 00000007 | 00000009 | 000f4240 | 000f4240 | 00000000",
        pkt: || ControlPacket {
            state: State::Init,
            final_: true,
            control_plane_independent: true,
            my_discriminator: 7,
            your_discriminator: 9,
            ..base()
        },
    },
    Vector {
        what: "Down after detection timeout (diag 1)",
        bytes: "21 | 40 | 03 | 18 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        pkt: || ControlPacket {
            diag: Diag::ControlDetectionTimeExpired,
            ..base()
        },
    },
    Vector {
        what: "AdminDown (diag 7), demand bit",
        bytes: "27 | 02 | 01 | 18 | ffffffff | 00000000 | 00000001 | ffffffff | ffffffff",
        pkt: || ControlPacket {
            diag: Diag::AdministrativelyDown,
            state: State::AdminDown,
            demand: true,
            detect_mult: 1,
            my_discriminator: u32::MAX,
            desired_min_tx: 1,
            required_min_rx: u32::MAX,
            required_min_echo_rx: u32::MAX,
            ..base()
        },
    },
    Vector {
        what: "unassigned diag 31 is kept",
        bytes: "3f | 40 | 03 | 18 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        pkt: || ControlPacket {
            diag: Diag::Other(31),
            ..base()
        },
    },
];

#[test]
fn vectors_decode() {
    for v in VECTORS {
        let got = ControlPacket::decode(&h(v.bytes));
        assert_eq!(got, Ok((v.pkt)()), "{}", v.what);
    }
}

#[test]
fn vectors_encode() {
    for v in VECTORS {
        let want = h(v.bytes);
        // Poison first so a field the encoder forgets shows up in the diff.
        let mut buf = [0xa5u8; 40];
        let n = (v.pkt)().encode(&mut buf);
        assert_eq!(n, ControlPacket::LEN, "{}", v.what);
        assert!(
            buf[..n] == want[..],
            "{}\n{}",
            v.what,
            hex_diff(&want, &buf[..n])
        );
        assert!(
            buf[n..].iter().all(|&b| b == 0xa5),
            "{}: wrote past 24",
            v.what
        );
    }
}

#[test]
fn trailing_octets_beyond_length_are_ignored() {
    let mut b = h(VECTORS[0].bytes);
    b.extend_from_slice(&[1, 2, 3, 4]);
    assert_eq!(ControlPacket::decode(&b), Ok(base()));
}

#[test]
fn diag_and_state_registry_values() {
    for code in 0..32u8 {
        assert_eq!(Diag::from_code(code).code(), code);
    }
    assert_eq!(Diag::from_code(3), Diag::NeighborSignaledSessionDown);
    assert_eq!(Diag::from_code(8), Diag::ReverseConcatenatedPathDown);
    let states = [State::AdminDown, State::Down, State::Init, State::Up];
    for (i, s) in states.iter().enumerate() {
        assert_eq!(s.code(), i as u8);
        assert_eq!(State::from_code(i as u8), *s);
    }
}

struct Bad {
    what: &'static str,
    bytes: &'static str,
    err: BfdDecodeError,
}

const BAD: &[Bad] = &[
    Bad {
        what: "version 0",
        bytes: "00 | 40 | 03 | 18 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        err: BfdDecodeError::BadVersion(0),
    },
    Bad {
        what: "version 2",
        bytes: "40 | 40 | 03 | 18 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        err: BfdDecodeError::BadVersion(2),
    },
    Bad {
        what: "version 7 in a short datagram still reads as a version problem",
        bytes: "e0 40 03",
        err: BfdDecodeError::BadVersion(7),
    },
    Bad {
        what: "empty datagram",
        bytes: "",
        err: BfdDecodeError::Truncated(0),
    },
    Bad {
        what: "23 octets",
        bytes: "20 | 40 | 03 | 17 | 00000001 | 00000000 | 000f4240 | 000f4240 | 000000",
        err: BfdDecodeError::Truncated(23),
    },
    Bad {
        what: "length field 23",
        bytes: "20 | 40 | 03 | 17 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        err: BfdDecodeError::LengthTooSmall(23),
    },
    Bad {
        what: "length field 0",
        bytes: "20 | 40 | 03 | 00 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        err: BfdDecodeError::LengthTooSmall(0),
    },
    Bad {
        what: "A bit with length 24 (no room for the auth header)",
        bytes: "20 | 44 | 03 | 18 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        err: BfdDecodeError::LengthTooSmall(24),
    },
    Bad {
        what: "length field 25 but 24 octets received",
        bytes: "20 | 40 | 03 | 19 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        err: BfdDecodeError::LengthExceedsPayload {
            length: 25,
            received: 24,
        },
    },
    Bad {
        what: "detect multiplier 0",
        bytes: "20 | 40 | 00 | 18 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        err: BfdDecodeError::ZeroDetectMult,
    },
    Bad {
        what: "multipoint bit",
        bytes: "20 | 41 | 03 | 18 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        err: BfdDecodeError::Multipoint,
    },
    Bad {
        what: "my discriminator 0",
        bytes: "20 | 40 | 03 | 18 | 00000000 | 00000000 | 000f4240 | 000f4240 | 00000000",
        err: BfdDecodeError::ZeroMyDiscriminator,
    },
    Bad {
        what: "your discriminator 0 in Init",
        bytes: "20 | 80 | 03 | 18 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        err: BfdDecodeError::ZeroYourDiscriminator(State::Init),
    },
    Bad {
        what: "your discriminator 0 in Up",
        bytes: "20 | c0 | 03 | 18 | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000",
        err: BfdDecodeError::ZeroYourDiscriminator(State::Up),
    },
    Bad {
        what: "auth present (simple password section) but not configured",
        bytes: "20 | 44 | 03 | 1f | 00000001 | 00000000 | 000f4240 | 000f4240 | 00000000 \
                | 01 07 01 73 65 63 72",
        err: BfdDecodeError::AuthNotConfigured,
    },
];

#[test]
fn malformed_packets_are_rejected_each_with_its_reason() {
    for b in BAD {
        assert_eq!(
            ControlPacket::decode(&h(b.bytes)),
            Err(b.err),
            "{}: {}",
            b.what,
            b.bytes
        );
    }
}

#[test]
fn your_discriminator_zero_is_fine_in_down_and_admindown() {
    for sta in ["40", "00"] {
        let b = h(&format!(
            "20 {sta} 03 18 00000001 00000000 000f4240 000f4240 00000000"
        ));
        assert!(ControlPacket::decode(&b).is_ok(), "state byte {sta}");
    }
}

#[test]
fn error_indices_are_dense_and_distinct() {
    let all = [
        BfdDecodeError::Truncated(3),
        BfdDecodeError::BadVersion(0),
        BfdDecodeError::LengthTooSmall(0),
        BfdDecodeError::LengthExceedsPayload {
            length: 30,
            received: 24,
        },
        BfdDecodeError::ZeroDetectMult,
        BfdDecodeError::Multipoint,
        BfdDecodeError::ZeroMyDiscriminator,
        BfdDecodeError::ZeroYourDiscriminator(State::Up),
        BfdDecodeError::AuthNotConfigured,
    ];
    assert_eq!(all.len(), BfdDecodeError::COUNT);
    let mut seen = [false; BfdDecodeError::COUNT];
    for e in all {
        assert!(!seen[e.index()], "{e:?} shares an index");
        seen[e.index()] = true;
        assert!(!BfdDecodeError::NAMES[e.index()].is_empty());
    }
}

fn state() -> impl Strategy<Value = State> {
    prop_oneof![
        Just(State::AdminDown),
        Just(State::Down),
        Just(State::Init),
        Just(State::Up)
    ]
}

prop_compose! {
    /// Packets that pass every §6.8.6 check.
    fn valid_packet()(
        diag in 0u8..32, state in state(), poll: bool, final_: bool, cpi: bool, demand: bool,
        detect_mult in 1u8.., my in 1u32.., your: u32, tx: u32, rx: u32, echo: u32,
    ) -> ControlPacket {
        let your = if matches!(state, State::Init | State::Up) && your == 0 { 1 } else { your };
        ControlPacket {
            version: 1, diag: Diag::from_code(diag), state, poll, final_,
            control_plane_independent: cpi, auth_present: false, demand, multipoint: false,
            detect_mult, my_discriminator: my, your_discriminator: your,
            desired_min_tx: tx, required_min_rx: rx, required_min_echo_rx: echo,
        }
    }
}

proptest! {
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = ControlPacket::decode(&bytes);
    }

    #[test]
    fn decode_never_panics_near_valid(mut bytes in proptest::collection::vec(any::<u8>(), 24..40)) {
        // Steer toward the later checks: right version, plausible length.
        bytes[0] = (bytes[0] & 0x1f) | 0x20;
        bytes[3] = 24 + bytes[3] % 24;
        if let Ok(p) = ControlPacket::decode(&bytes) {
            prop_assert!(p.validate().is_ok());
        }
    }

    #[test]
    fn encode_decode_round_trips(p in valid_packet()) {
        let mut buf = [0xa5u8; 24];
        let n = p.encode(&mut buf);
        prop_assert_eq!(n, 24);
        prop_assert_eq!(ControlPacket::decode(&buf), Ok(p));
    }

    #[test]
    fn decode_encode_round_trips(p in valid_packet()) {
        // Bytes → packet → bytes: the wire form is canonical for valid packets.
        let mut a = [0u8; 24];
        p.encode(&mut a);
        let q = ControlPacket::decode(&a).expect("valid");
        let mut b = [0xa5u8; 24];
        q.encode(&mut b);
        prop_assert_eq!(a, b);
    }
}
