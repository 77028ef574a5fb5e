//! Malformed rows: every way a header can be cut short or lie about its lengths, versions
//! and checksums, each with its own drop reason.

use lb::{DropReason, Tables};

use super::Fixture;
use super::build::{Pkt, SYN, TCP, UDP, ipv4_header_checksum, tcp, udp};

const C4: &str = "198.51.100.7";
const C6: &str = "2001:db8:c::7";

pub(super) const ROWS: &[super::Row] = &[
    truncated_ethernet,
    truncated_ipv4,
    ipv4_version_5,
    ipv4_ihl_4,
    ipv4_total_length_beyond_frame,
    ipv4_bad_checksum,
    ipv4_total_length_below_header,
    tcp_header_cut_short,
    tcp_data_offset_4,
    tcp_data_offset_beyond_segment,
    udp_length_beyond_payload,
    ipv6_payload_length_beyond_frame,
    three_vlan_tags,
    ipv6_header_cut_short,
];

/// A good SYN to nat4 that the rows below break.
fn good4() -> Vec<u8> {
    Pkt::new(C4, "192.0.2.10", TCP, tcp(40100, 80, SYN, 1, b"")).build()
}

/// A good SYN to nat6 that the rows below break.
fn good6() -> Vec<u8> {
    Pkt::new(C6, "2001:db8::10", TCP, tcp(40000, 80, SYN, 1, b"")).build()
}

/// `good4()` with the IPv4 total length set to `len` and the header checksum fixed.
fn ipv4_total_length(len: u16) -> Vec<u8> {
    let mut b = good4();
    b[16..18].copy_from_slice(&len.to_be_bytes());
    let c = ipv4_header_checksum(&b[14..34]);
    b[24..26].copy_from_slice(&c.to_be_bytes());
    b
}

fn truncated_ethernet(_: &Tables) -> Fixture {
    let b = good4()[..10].to_vec();
    Fixture::drop("truncated ethernet header", b, DropReason::Truncated)
}

fn truncated_ipv4(_: &Tables) -> Fixture {
    let b = good4()[..14 + 12].to_vec();
    Fixture::drop("truncated ipv4 header", b, DropReason::Truncated)
}

fn ipv4_version_5(_: &Tables) -> Fixture {
    let mut b = good4();
    b[14] = 0x55;
    Fixture::drop("ipv4 header with version 5", b, DropReason::Malformed)
}

fn ipv4_ihl_4(_: &Tables) -> Fixture {
    let mut b = good4();
    b[14] = 0x44;
    Fixture::drop("ipv4 ihl 4", b, DropReason::Malformed)
}

fn ipv4_total_length_beyond_frame(_: &Tables) -> Fixture {
    let b = ipv4_total_length(200);
    Fixture::drop(
        "ipv4 total length beyond the frame",
        b,
        DropReason::Truncated,
    )
}

fn ipv4_bad_checksum(_: &Tables) -> Fixture {
    let mut b = good4();
    b[24] ^= 0xff;
    Fixture::drop("ipv4 bad header checksum", b, DropReason::BadChecksum)
}

fn ipv4_total_length_below_header(_: &Tables) -> Fixture {
    let b = ipv4_total_length(10);
    Fixture::drop(
        "ipv4 total length below the header length",
        b,
        DropReason::Malformed,
    )
}

fn tcp_header_cut_short(_: &Tables) -> Fixture {
    let ten = vec![0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0];
    let short = Pkt::new(C4, "192.0.2.10", TCP, ten).raw_l4();
    Fixture::drop(
        "tcp header cut short (10 bytes) to a vip",
        short.build(),
        DropReason::Truncated,
    )
}

fn tcp_data_offset_4(_: &Tables) -> Fixture {
    let bad =
        Pkt::new(C4, "192.0.2.10", TCP, tcp(40101, 80, SYN, 1, b"")).with(|p| p.l4[12] = 0x40);
    Fixture::drop("tcp data offset 4", bad.build(), DropReason::Malformed)
}

fn tcp_data_offset_beyond_segment(_: &Tables) -> Fixture {
    let bad =
        Pkt::new(C4, "192.0.2.10", TCP, tcp(40102, 80, SYN, 1, b"")).with(|p| p.l4[12] = 0xf0);
    Fixture::drop(
        "tcp data offset beyond the segment",
        bad.build(),
        DropReason::BadLength,
    )
}

fn udp_length_beyond_payload(_: &Tables) -> Fixture {
    let bad = Pkt::new(C4, "192.0.2.10", UDP, udp(5000, 53, b"abc"))
        .with(|p| p.l4[4..6].copy_from_slice(&100u16.to_be_bytes()));
    Fixture::drop(
        "udp length beyond the ip payload",
        bad.build(),
        DropReason::BadLength,
    )
}

fn ipv6_payload_length_beyond_frame(_: &Tables) -> Fixture {
    let mut b6 = good6();
    b6[18..20].copy_from_slice(&500u16.to_be_bytes());
    Fixture::drop(
        "ipv6 payload length beyond the frame",
        b6,
        DropReason::Truncated,
    )
}

fn three_vlan_tags(_: &Tables) -> Fixture {
    let tri = Pkt::new(C4, "192.0.2.30", TCP, tcp(40000, 80, SYN, 1, b"")).vlans(&[1, 2, 3]);
    Fixture::drop("three vlan tags", tri.build(), DropReason::TooManyHeaders)
}

fn ipv6_header_cut_short(_: &Tables) -> Fixture {
    let b6 = good6()[..14 + 30].to_vec();
    Fixture::drop("ipv6 header cut short", b6, DropReason::Truncated)
}
