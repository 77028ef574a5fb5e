//! The golden fixtures through `lb::process`, each row alone: verdict, output bytes and
//! counters as the row says, every checksum of a forwarded frame valid, and every row's
//! bytes equal to the committed digests (so a change to a fixture shows in review).

use std::net::IpAddr;

use lb::Verdict;
use sha2::{Digest, Sha256};
use testkit::golden::{self, Pkt, checksum, l4_checksum, tcp, udp};

/// `sha256(input) sha256(output) description`, one line per fixture, in table order.
const DIGESTS: &str = include_str!("golden_digests.txt");

fn sha256(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Verifies every checksum of an Ethernet frame from scratch, descending into IPIP,
/// GUE, VXLAN and ICMP quotes' outer layers. Fragments' L4 checksums are skipped.
fn verify_checksums(frame: &[u8], desc: &str) {
    let mut off = 12;
    let mut et = u16::from_be_bytes([frame[off], frame[off + 1]]);
    while et == 0x8100 {
        off += 4;
        et = u16::from_be_bytes([frame[off], frame[off + 1]]);
    }
    verify_ip(&frame[off + 2..], et == 0x86dd, desc);
}

/// The IPv6 upper-layer protocol and its offset past hop-by-hop and fragment headers,
/// and whether a fragment header was seen.
fn ipv6_upper(p: &[u8]) -> (u8, usize, bool) {
    let (mut proto, mut l4, mut frag) = (p[6], 40, false);
    loop {
        match proto {
            0 => {
                proto = p[l4];
                l4 += (usize::from(p[l4 + 1]) + 1) * 8;
            }
            44 => {
                proto = p[l4];
                l4 += 8;
                frag = true;
            }
            _ => return (proto, l4, frag),
        }
    }
}

fn verify_ip(p: &[u8], v6: bool, desc: &str) {
    let (src, dst, proto, l4, end, frag): (IpAddr, IpAddr, u8, usize, usize, bool);
    if v6 {
        let s: [u8; 16] = p[8..24].try_into().unwrap();
        let d: [u8; 16] = p[24..40].try_into().unwrap();
        (src, dst) = (IpAddr::from(s), IpAddr::from(d));
        (proto, l4, frag) = ipv6_upper(p);
        end = 40 + usize::from(u16::from_be_bytes([p[4], p[5]]));
    } else {
        let hl = usize::from(p[0] & 0xf) * 4;
        assert_eq!(checksum(&p[..hl]), 0, "{desc}: ipv4 header checksum");
        let s: [u8; 4] = p[12..16].try_into().unwrap();
        let d: [u8; 4] = p[16..20].try_into().unwrap();
        (src, dst) = (IpAddr::from(s), IpAddr::from(d));
        (proto, l4) = (p[9], hl);
        end = usize::from(u16::from_be_bytes([p[2], p[3]]));
        frag = u16::from_be_bytes([p[6], p[7]]) & 0x3fff != 0;
    }
    let seg = &p[l4..end];
    match proto {
        4 => verify_ip(seg, false, desc),
        41 => verify_ip(seg, true, desc),
        _ if frag => {}
        6 | 58 | 1 => {
            let c = l4_checksum(src, dst, proto, seg);
            assert_eq!(c, 0, "{desc}: l4 checksum ({proto})");
        }
        17 => verify_udp(src, dst, seg, v6, desc),
        _ => {}
    }
}

fn verify_udp(src: IpAddr, dst: IpAddr, seg: &[u8], v6: bool, desc: &str) {
    if seg[6] == 0 && seg[7] == 0 {
        assert!(!v6, "{desc}: zero udp checksum over ipv6");
    } else {
        assert_eq!(l4_checksum(src, dst, 17, seg), 0, "{desc}: udp checksum");
    }
    match u16::from_be_bytes([seg[2], seg[3]]) {
        6080 => verify_ip(&seg[8..], seg[8] >> 4 == 6, desc),
        4789 => verify_checksums(&seg[16..], desc),
        _ => {}
    }
}

#[test]
fn every_fixture_alone_gives_its_verdict_bytes_and_counters() {
    let fixtures = golden::fixtures();
    let t = golden::tables();
    let mut failures = Vec::new();
    for fx in &fixtures {
        match golden::run_alone(fx, &t) {
            Ok(out) if matches!(fx.verdict, Verdict::Tx { .. }) => {
                verify_checksums(&out, fx.description)
            }
            Ok(_) => {}
            Err(m) => failures.push(format!("{}: {}", m.description, m.what)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures failed:\n{}",
        failures.len(),
        fixtures.len(),
        failures.join("\n")
    );
}

#[test]
fn fixture_bytes_match_the_committed_digests() {
    let got: Vec<String> = golden::fixtures()
        .iter()
        .map(|f| {
            format!(
                "{} {} {}",
                sha256(&f.input),
                sha256(&f.output),
                f.description
            )
        })
        .collect();
    let want: Vec<&str> = DIGESTS.lines().collect();
    let mut diffs = Vec::new();
    for i in 0..got.len().max(want.len()) {
        let (g, w) = (got.get(i).map(String::as_str), want.get(i).copied());
        if g != w {
            diffs.push(format!("row {i}:\n  now:       {g:?}\n  committed: {w:?}"));
        }
    }
    assert!(
        diffs.is_empty(),
        "fixture bytes changed (if meant, update tests/golden_digests.txt with the \"now\" \
         lines):\n{}",
        diffs.join("\n")
    );
}

#[test]
fn descriptions_name_one_row_each() {
    let fixtures = golden::fixtures();
    let mut seen = std::collections::BTreeSet::new();
    for f in &fixtures {
        assert!(seen.insert(f.description), "{:?} twice", f.description);
    }
    assert_eq!(
        golden::fixture(fixtures[5].description).input,
        fixtures[5].input
    );
}

#[test]
fn the_golden_config_is_valid_and_parses() {
    let c = golden::config();
    assert_eq!(c.vips.len(), 46);
    assert!(!c.appliance.flow_cache);
    assert_eq!(c.api.metrics, None);
}

#[test]
fn fixture_builder_checksums_are_self_consistent() {
    let p = Pkt::new("198.51.100.7", "192.0.2.10", 6, tcp(1, 2, 0x02, 3, b"abc")).build();
    verify_checksums(&p, "builder tcp");
    let p = Pkt::new("2001:db8::1", "2001:db8::2", 17, udp(1, 2, b"abc")).build();
    verify_checksums(&p, "builder udp6");
}
