//! PROXY protocol version 2 for FullNAT TCP VIPs (`client_address = "proxy-v2"`): the
//! backend reads the real client's address from a header in front of the stream.
//!
//! The header (HAProxy's doc/proxy-protocol.txt, section 2.2) is the 12-byte signature,
//! version 2 with the PROXY command, TCP over the client's family, and the client's and
//! the VIP's addresses and ports: 28 bytes for IPv4, 52 for IPv6. It goes into the
//! client's first data segment (sequence number = the client's ISN + 1), in front of its
//! payload, every time that segment passes (a retransmission carries it again, and the
//! backend's TCP discards the duplicate). From then on the backend's view of the client's
//! stream runs the header's length ahead: every later client sequence number is moved
//! forward by it, every acknowledgement and SACK edge the backend sends moved back, for
//! the life of the flow ([`tcpopt::unshift`]). A flow that closes before sending data (FIN
//! or RST first) never gets a header and is never shifted.
//!
//! The header rides in the same segment as the data; it does not fit a full-size segment,
//! so the backend's SYN-ACK has its MSS lowered by the header's length: the client never
//! sends a first segment too big for the path once the header is in.

use super::DropReason;
use super::headers::{Ip, L4};
use super::tcpopt::{self, Tcp, after};
use crate::conntrack::Carry;
use crate::frame::Frame;
use crate::hash::FlowKey;

/// The v2 signature (section 2.2).
const SIGNATURE: [u8; 12] = [
    0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a,
];
/// Version 2, command PROXY.
const V2_PROXY: u8 = 0x21;
/// AF_INET, STREAM.
const TCP4: u8 = 0x11;
/// AF_INET6, STREAM.
const TCP6: u8 = 0x21;

/// The header's length for a client of this family.
pub(super) fn header_len(v6: bool) -> u8 {
    if v6 { 16 + 36 } else { 16 + 12 }
}

/// The header for the flow `key` (client → VIP): source the client, destination the VIP.
/// Returns the buffer and the bytes used.
pub(super) fn header(key: &FlowKey) -> ([u8; 52], usize) {
    let mut h = [0u8; 52];
    h[..12].copy_from_slice(&SIGNATURE);
    h[12] = V2_PROXY;
    let n = if key.v6 {
        h[13] = TCP6;
        h[14..16].copy_from_slice(&36u16.to_be_bytes());
        h[16..32].copy_from_slice(&key.src.to_be_bytes());
        h[32..48].copy_from_slice(&key.dst.to_be_bytes());
        48
    } else {
        h[13] = TCP4;
        h[14..16].copy_from_slice(&12u16.to_be_bytes());
        h[16..20].copy_from_slice(&(key.src as u32).to_be_bytes());
        h[20..24].copy_from_slice(&(key.dst as u32).to_be_bytes());
        24
    };
    h[n..n + 2].copy_from_slice(&key.sport.to_be_bytes());
    h[n + 2..n + 4].copy_from_slice(&key.dport.to_be_bytes());
    (h, n + 4)
}

/// A client → backend segment of a proxy-v2 flow, after the NAT rewrite: the header in
/// front of the first data, or the sequence number shifted. Returns the flow's carry state
/// after the segment and whether a header went in.
pub(super) fn forward(
    frame: &mut Frame<'_>,
    ip: &Ip,
    l4: &L4,
    key: &FlowKey,
    c: Carry,
) -> Result<(Carry, bool), DropReason> {
    let t = tcpopt::tcp(frame.data(), ip);
    if t.seq == c.base && t.len > 0 {
        insert(frame, ip, l4, key, &t)?;
        return Ok((Carry { armed: true, ..c }, true));
    }
    if !c.armed && !after(t.seq, c.base) {
        // Before any data (the handshake's ACK, a FIN or RST first): nothing to shift.
        return Ok((c, false));
    }
    let d = frame.data_mut();
    let acc = tcpopt::set_seq(d, ip, t.seq.wrapping_add(u32::from(c.delta)));
    l4.csum.patch_delta(d, acc);
    Ok((Carry { armed: true, ..c }, false))
}

/// Puts the header between the TCP header and the payload of the first data segment.
fn insert(
    frame: &mut Frame<'_>,
    ip: &Ip,
    l4: &L4,
    key: &FlowKey,
    t: &Tcp,
) -> Result<(), DropReason> {
    let (h, n) = header(key);
    tcpopt::open_room(frame, ip, l4, t.hlen, n)?;
    let d = frame.data_mut();
    let at = ip.l4 + t.hlen;
    d[at..at + n].copy_from_slice(&h[..n]);
    // The room was zeros as far as the checksum is concerned: the header's words are new.
    let zeros = [0u8; 52];
    l4.csum
        .patch_delta(d, tcpopt::bytes_delta(&zeros[..n], &h[..n], t.hlen));
    Ok(())
}

/// A backend → client segment of a proxy-v2 flow, after the NAT rewrite: its
/// acknowledgement and SACK edges moved back into the client's space once the header went
/// out.
pub(super) fn reverse(d: &mut [u8], ip: &Ip, l4: &L4, c: Carry) {
    if !c.armed {
        return;
    }
    let t = tcpopt::tcp(d, ip);
    let delta = u32::from(c.delta);
    let mut acc = 0;
    if t.flags & crate::conntrack::tcp_flags::ACK != 0 {
        acc += tcpopt::set_ack(d, ip, tcpopt::unshift(t.ack, c.base, delta));
    }
    if t.hlen > tcpopt::TCP_BASE {
        acc += tcpopt::unshift_sack(d, ip, &t, c.base, delta);
    }
    l4.csum.patch_delta(d, acc);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_follow_the_spec_layout_for_both_families() {
        let k4 = FlowKey {
            src: 0xffff_c633_6407,
            dst: 0xffff_c000_0214,
            sport: 40000,
            dport: 443,
            proto: 6,
            v6: false,
            zone: 0,
        };
        let (h, n) = header(&k4);
        assert_eq!(n, usize::from(header_len(false)));
        assert_eq!(
            &h[..n],
            &[
                0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x21, 0x11,
                0x00, 0x0c, 198, 51, 100, 7, 192, 0, 2, 20, 0x9c, 0x40, 0x01, 0xbb,
            ]
        );
        let k6 = FlowKey {
            src: 0x2001_0db8_000c_0000_0000_0000_0000_0007,
            dst: 0x2001_0db8_0000_0000_0000_0000_0000_0020,
            v6: true,
            ..k4
        };
        let (h, n) = header(&k6);
        assert_eq!(n, 52);
        assert_eq!(&h[12..16], &[0x21, 0x21, 0x00, 0x24]);
        assert_eq!(&h[16..18], &[0x20, 0x01]);
        assert_eq!(h[31], 7);
        assert_eq!(h[47], 0x20);
        assert_eq!(&h[48..52], &[0x9c, 0x40, 0x01, 0xbb]);
    }
}
