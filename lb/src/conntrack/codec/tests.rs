//! The flow-record codec both ways: every valid record survives a round trip, any bytes
//! decode without a panic, a batch of another version or a record with an undefined value
//! is refused, and a committed version-1 batch still decodes to the same records (the
//! fixture a newer build must keep reading or refuse by version, never misread).

use super::*;
use crate::hash::FlowKey;
use proptest::prelude::*;

fn v4(a: u32) -> u128 {
    0xffff_0000_0000 | u128::from(a)
}

fn record() -> impl Strategy<Value = FlowRecord> {
    let key = (
        any::<bool>(),
        any::<u128>(),
        any::<u128>(),
        any::<u16>(),
        any::<u16>(),
        any::<bool>(),
        any::<u32>(),
    )
        .prop_map(|(v6, s, d, sport, dport, tcp, zone)| FlowKey {
            src: if v6 { s } else { v4(s as u32) },
            dst: if v6 { d } else { v4(d as u32) },
            sport,
            dport,
            proto: if tcp { 6 } else { 17 },
            v6,
            zone,
        });
    (
        key,
        any::<(u128, u16)>(),
        0usize..3,
        0u8..4,
        any::<u32>(),
        proptest::option::of(any::<(u128, u16)>()),
        (0u8..3, any::<u32>(), any::<u8>(), any::<bool>()),
        (any::<[u32; 4]>(), 0u8..=track::seen::ALL),
        any::<u64>(),
    )
        .prop_map(
            |(key, backend, st, m, syn_ack, snat, (kind, base, delta, armed), (t, seen), age)| {
                let state = if key.proto == 6 {
                    [
                        FlowState::TcpSyn,
                        FlowState::TcpEstablished,
                        FlowState::TcpClosing,
                    ][st]
                } else {
                    [FlowState::Udp, FlowState::UdpNew, FlowState::UdpOneWay][st]
                };
                FlowRecord {
                    key,
                    backend,
                    state,
                    evidence: Evidence { marks: m, syn_ack },
                    snat,
                    carry: Carry {
                        kind: [
                            ClientAddress::None,
                            ClientAddress::ProxyV2,
                            ClientAddress::Toa,
                        ][usize::from(kind)],
                        base,
                        delta,
                        armed,
                    },
                    track: Track {
                        client_next: t[0],
                        client_acked: t[1],
                        backend_next: t[2],
                        backend_acked: t[3],
                        seen,
                    },
                    age_ns: age,
                }
            },
        )
}

proptest! {
    #[test]
    fn every_record_survives_a_round_trip(records in proptest::collection::vec(record(), 0..40)) {
        let bytes = encode(&records);
        prop_assert_eq!(bytes.len(), HEADER_LEN + records.len() * RECORD_LEN);
        let (back, used) = decode(&bytes).expect("decode");
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(back, records);
    }

    #[test]
    fn any_bytes_decode_without_a_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..600), fix in any::<bool>()) {
        if fix && bytes.len() >= HEADER_LEN {
            // A valid header in front of random records exercises the record checks.
            bytes[..4].copy_from_slice(&MAGIC);
            bytes[4..6].copy_from_slice(&VERSION.to_le_bytes());
            bytes[6..8].copy_from_slice(&(RECORD_LEN as u16).to_le_bytes());
            let n = ((bytes.len() - HEADER_LEN) / RECORD_LEN) as u32;
            bytes[8..12].copy_from_slice(&n.to_le_bytes());
        }
        let _ = decode(&bytes);
    }
}

fn sample() -> Vec<FlowRecord> {
    let key = FlowKey {
        src: v4(0xc633_6407),
        dst: v4(0xc000_020a),
        sport: 40000,
        dport: 80,
        proto: 6,
        v6: false,
        zone: 0,
    };
    vec![
        FlowRecord {
            key,
            backend: (v4(0x0a01_000b), 8080),
            state: FlowState::TcpEstablished,
            evidence: Evidence {
                marks: marks::REPLY,
                syn_ack: 0x1234_5679,
            },
            snat: Some((v4(0x0a00_0064), 1025)),
            carry: Carry {
                kind: ClientAddress::ProxyV2,
                base: 0x0102_0304,
                delta: 28,
                armed: true,
            },
            track: Track {
                client_next: 0x0102_0305,
                client_acked: 0x1234_5679,
                backend_next: 0x1234_5679,
                backend_acked: 0x0102_0321,
                seen: track::seen::CLIENT | track::seen::BACKEND,
            },
            age_ns: 1_500_000_000,
        },
        FlowRecord {
            key: FlowKey {
                src: 0x2001_0db8_000c_0000_0000_0000_0000_0002,
                dst: 0x2001_0db8_000f_0000_0000_0000_0000_0011,
                sport: 5353,
                dport: 53,
                proto: 17,
                v6: true,
                zone: crate::hash::zone_of(Some(42)),
            },
            backend: (0x2001_0db8_000a_0000_0000_0000_0000_0021, 53),
            state: FlowState::Udp,
            evidence: Evidence::default(),
            snat: None,
            carry: Carry::default(),
            track: Track::default(),
            age_ns: 7,
        },
    ]
}

/// The committed version-1 batch of [`sample`]: a build that changes the layout without a
/// new version fails here.
const V1_FIXTURE: &str = include_str!("v1.hex");

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn a_version_1_batch_still_reads_the_same() {
    let bytes = unhex(V1_FIXTURE);
    let (records, used) = decode(&bytes).expect("the v1 fixture decodes");
    assert_eq!(used, bytes.len());
    assert_eq!(records, sample());
    assert_eq!(encode(&sample()), bytes, "the layout of version 1 changed");
}

#[test]
fn other_versions_and_undefined_values_are_refused() {
    let good = encode(&sample());
    let mut other = good.clone();
    other[4..6].copy_from_slice(&2u16.to_le_bytes());
    assert_eq!(
        decode(&other).unwrap_err(),
        CodecError::UnsupportedVersion { found: 2 }
    );
    let mut magic = good.clone();
    magic[0] = b'X';
    assert_eq!(decode(&magic).unwrap_err(), CodecError::BadMagic);
    let mut len = good.clone();
    len[6..8].copy_from_slice(&64u16.to_le_bytes());
    assert_eq!(
        decode(&len).unwrap_err(),
        CodecError::BadRecordLength { found: 64 }
    );
    assert!(matches!(
        decode(&good[..good.len() - 1]).unwrap_err(),
        CodecError::Truncated { .. }
    ));
    let cases: [(usize, u8, &str); 7] = [
        (HEADER_LEN + 38, 9, "unknown state"),
        (HEADER_LEN + 37, 0x80, "unknown flag bits"),
        (HEADER_LEN + 36, 1, "protocol is neither TCP nor UDP"),
        (HEADER_LEN + 84, 3, "unknown client-address kind"),
        (HEADER_LEN + 86, 2, "carry armed is neither 0 nor 1"),
        (HEADER_LEN + 120, 1, "reserved bytes are not zero"),
        (HEADER_LEN + 38, 3, "state of the other protocol"),
    ];
    for (at, value, what) in cases {
        let mut bad = good.clone();
        bad[at] = value;
        assert_eq!(
            decode(&bad).unwrap_err(),
            CodecError::BadRecord { index: 0, what },
            "byte {at} = {value}"
        );
    }
}
