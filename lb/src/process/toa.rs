//! TOA for FullNAT TCP VIPs (`client_address = "toa"`): the client's address and port in a
//! TCP option, which the LVS/DPVS `toa` kernel module on the backend hands to the
//! application as the peer address.
//!
//! The layout is DPVS's (`include/ipvs/proto_tcp.h`, `struct tcpopt_ip4_addr` and
//! `tcpopt_ip6_addr`): kind 254, length 8 or 20, the client's port, then its IPv4 or IPv6
//! address, all in network order, right after the fixed TCP header (before the segment's
//! own options). The module reads it when the backend's handshake completes (its
//! `syn_recv_sock` hook, on the segment that acknowledges the SYN-ACK), so it goes where
//! DPVS puts it: on every client segment that acknowledges exactly the backend's first
//! sequence number, that is the handshake's ACK and whatever the client sends before the
//! backend sends data. A lost ACK is covered by the next segment that still carries it. A
//! SYN would be the wrong place: a backend under SYN cookies keeps no SYN options.
//!
//! Room: the option adds 8 or 20 bytes to a segment the client sized for the path, so the
//! backend's SYN-ACK has its MSS lowered by that much; a segment whose header is already
//! too full (more than 52 or 40 bytes) goes without it, counted.

use super::DropReason;
use super::headers::{Ip, L4};
use super::tcpopt::{self, TCP_BASE, TCP_MAX, kind};
use crate::conntrack::{Carry, tcp_flags};
use crate::frame::Frame;
use crate::hash::FlowKey;

/// The option's length for a client of this family.
pub(super) fn option_len(v6: bool) -> u8 {
    if v6 { 20 } else { 8 }
}

/// The option for the flow `key` (client → VIP). Returns the buffer and the bytes used.
pub(super) fn option(key: &FlowKey) -> ([u8; 20], usize) {
    let mut o = [0u8; 20];
    let n = usize::from(option_len(key.v6));
    o[0] = kind::TOA;
    o[1] = n as u8;
    o[2..4].copy_from_slice(&key.sport.to_be_bytes());
    if key.v6 {
        o[4..20].copy_from_slice(&key.src.to_be_bytes());
    } else {
        o[4..8].copy_from_slice(&(key.src as u32).to_be_bytes());
    }
    (o, n)
}

/// What [`forward`] did with a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Added {
    /// The segment does not get the option.
    No,
    /// The option went in.
    Yes,
    /// It should have, but the TCP header had no room.
    NoRoom,
}

/// A client → backend segment of a toa flow, after the NAT rewrite: the option added when
/// the segment acknowledges exactly the backend's first sequence number.
pub(super) fn forward(
    frame: &mut Frame<'_>,
    ip: &Ip,
    l4: &L4,
    key: &FlowKey,
    c: Carry,
) -> Result<Added, DropReason> {
    let t = tcpopt::tcp(frame.data(), ip);
    let wants = c.armed
        && t.flags & tcp_flags::ACK != 0
        && t.flags & (tcp_flags::SYN | tcp_flags::RST) == 0
        && t.ack == c.base;
    if !wants {
        return Ok(Added::No);
    }
    let (o, n) = option(key);
    if t.hlen + n > TCP_MAX {
        return Ok(Added::NoRoom);
    }
    let old_word = u16::from_be_bytes([frame.data()[ip.l4 + 12], frame.data()[ip.l4 + 13]]);
    tcpopt::open_room(frame, ip, l4, TCP_BASE, n)?;
    let d = frame.data_mut();
    d[ip.l4 + TCP_BASE..ip.l4 + TCP_BASE + n].copy_from_slice(&o[..n]);
    d[ip.l4 + 12] = (((t.hlen + n) / 4) as u8) << 4 | (d[ip.l4 + 12] & 0x0f);
    let new_word = u16::from_be_bytes([d[ip.l4 + 12], d[ip.l4 + 13]]);
    let zeros = [0u8; 20];
    let acc = tcpopt::bytes_delta(&zeros[..n], &o[..n], TCP_BASE)
        + wire::checksum::delta16(old_word, new_word);
    l4.csum.patch_delta(d, acc);
    Ok(Added::Yes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_the_dpvs_layout() {
        let k = FlowKey {
            src: 0xffff_c633_6407,
            dst: 0xffff_c000_0214,
            sport: 40000,
            dport: 443,
            proto: 6,
            v6: false,
            zone: 0,
        };
        let (o, n) = option(&k);
        assert_eq!(&o[..n], &[254, 8, 0x9c, 0x40, 198, 51, 100, 7]);
        let k6 = FlowKey {
            src: 0x2001_0db8_000c_0000_0000_0000_0000_0007,
            v6: true,
            ..k
        };
        let (o, n) = option(&k6);
        assert_eq!(n, 20);
        assert_eq!(&o[..6], &[254, 20, 0x9c, 0x40, 0x20, 0x01]);
        assert_eq!(o[19], 7);
    }
}
