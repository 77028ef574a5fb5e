//! TCP segment headers (RFC 9293).
//!
//! The load balancer hashes TCP ports, follows the SYN/FIN/RST flags to age connection-table
//! entries, and rewrites ports and addresses in NAT modes; the checksum helpers here take the
//! pseudo-header addresses because a NAT rewrite changes them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::checksum;
use super::{Error, Result, need_space, read_u16, read_u32, write_u16, write_u32};

mod field {
    pub(super) const SRC_PORT: usize = 0;
    pub(super) const DST_PORT: usize = 2;
    pub(super) const SEQ: usize = 4;
    pub(super) const ACK: usize = 8;
    pub(super) const OFF_FLAGS: usize = 12;
    pub(super) const FLAGS: usize = 13;
    pub(super) const WINDOW: usize = 14;
    pub(super) const CHECKSUM: usize = 16;
    pub(super) const URGENT: usize = 18;
}

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = 20;

/// Bits of the flags byte ([`TcpPacket::flags`]).
pub mod flags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// Acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// Urgent pointer field is significant.
    pub const URG: u8 = 0x20;
    /// ECN-Echo (RFC 3168).
    pub const ECE: u8 = 0x40;
    /// Congestion Window Reduced (RFC 3168).
    pub const CWR: u8 = 0x80;
}

/// A view of a TCP segment.
///
/// RFC 9293 section 3.1:
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |          Source Port          |       Destination Port        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                        Sequence Number                        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                    Acknowledgment Number                      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  Data |       |C|E|U|A|P|R|S|F|                               |
/// | Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
/// |       |       |R|E|G|K|H|T|N|N|                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           Checksum            |         Urgent Pointer        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                           [Options]                           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                             Data ...
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
/// The segment extends to the end of the buffer: wrap exactly the IP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps a buffer without checking it; getters may panic on a short buffer.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wraps untrusted bytes after [`TcpPacket::check`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check()?;
        Ok(packet)
    }

    /// Checks the fixed header fits and 20 <= data offset * 4 <= buffer length.
    #[inline]
    pub fn check(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if header_len > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SEQ)
    }

    /// Acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ACK)
    }

    /// Data offset, in 32-bit words.
    #[inline]
    pub fn data_offset(&self) -> u8 {
        self.buffer.as_ref()[field::OFF_FLAGS] >> 4
    }

    /// Header length in bytes (data offset * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * 4
    }

    /// The flags byte (CWR ECE URG ACK PSH RST SYN FIN); see [`flags`].
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// FIN flag.
    #[inline]
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }

    /// SYN flag.
    #[inline]
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }

    /// RST flag.
    #[inline]
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }

    /// PSH flag.
    #[inline]
    pub fn psh(&self) -> bool {
        self.flags() & flags::PSH != 0
    }

    /// ACK flag.
    #[inline]
    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }

    /// URG flag.
    #[inline]
    pub fn urg(&self) -> bool {
        self.flags() & flags::URG != 0
    }

    /// Window size.
    #[inline]
    pub fn window_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent_at(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::URGENT)
    }

    /// Option bytes between the fixed header and `header_len()`.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The segment data after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// Length of the whole segment (header and data).
    #[inline]
    pub fn segment_len(&self) -> usize {
        self.buffer.as_ref().len()
    }

    /// True when the checksum verifies over the IPv4 pseudo-header and the whole buffer.
    #[inline]
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let data = self.buffer.as_ref();
        let Ok(len) = u16::try_from(data.len()) else {
            return false;
        };
        let ph = checksum::pseudo_header_v4(src, dst, 6, len);
        checksum::finish(checksum::sum(data, ph)) == 0
    }

    /// True when the checksum verifies over the IPv6 pseudo-header and the whole buffer.
    #[inline]
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let data = self.buffer.as_ref();
        let Ok(len) = u32::try_from(data.len()) else {
            return false;
        };
        let ph = checksum::pseudo_header_v6(src, dst, 6, len);
        checksum::finish(checksum::sum(data, ph)) == 0
    }

    /// [`TcpPacket::verify_checksum_v4`] or `_v6` by address family; mixed families never
    /// verify.
    #[inline]
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => self.verify_checksum_v4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => self.verify_checksum_v6(s, d),
            _ => false,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, value);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, value);
    }

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::SEQ, value);
    }

    /// Sets the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::ACK, value);
    }

    /// Sets the data offset in 32-bit words (low 4 bits) and clears the reserved bits.
    #[inline]
    pub fn set_data_offset(&mut self, value: u8) {
        self.buffer.as_mut()[field::OFF_FLAGS] = value << 4;
    }

    /// Sets the header length in bytes (multiple of 4, 20..=60).
    #[inline]
    pub fn set_header_len(&mut self, value: usize) {
        self.set_data_offset((value / 4) as u8);
    }

    /// Sets the whole flags byte.
    #[inline]
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    fn set_flag(&mut self, bit: u8, value: bool) {
        let f = self.flags();
        self.set_flags(if value { f | bit } else { f & !bit });
    }

    /// Sets the FIN flag.
    #[inline]
    pub fn set_fin(&mut self, value: bool) {
        self.set_flag(flags::FIN, value);
    }

    /// Sets the SYN flag.
    #[inline]
    pub fn set_syn(&mut self, value: bool) {
        self.set_flag(flags::SYN, value);
    }

    /// Sets the RST flag.
    #[inline]
    pub fn set_rst(&mut self, value: bool) {
        self.set_flag(flags::RST, value);
    }

    /// Sets the PSH flag.
    #[inline]
    pub fn set_psh(&mut self, value: bool) {
        self.set_flag(flags::PSH, value);
    }

    /// Sets the ACK flag.
    #[inline]
    pub fn set_ack(&mut self, value: bool) {
        self.set_flag(flags::ACK, value);
    }

    /// Sets the URG flag.
    #[inline]
    pub fn set_urg(&mut self, value: bool) {
        self.set_flag(flags::URG, value);
    }

    /// Sets the window size.
    #[inline]
    pub fn set_window_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::WINDOW, value);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the urgent pointer.
    #[inline]
    pub fn set_urgent_at(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::URGENT, value);
    }

    /// Mutable option bytes.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// Mutable segment data.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }

    /// Computes the checksum over the IPv4 pseudo-header and the whole buffer. A segment
    /// longer than 65535 bytes cannot be carried by IPv4 and is [`Error::Malformed`].
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) -> Result<()> {
        let len = u16::try_from(self.buffer.as_ref().len()).map_err(|_| Error::Malformed)?;
        self.set_checksum(0);
        let ph = checksum::pseudo_header_v4(src, dst, 6, len);
        let c = checksum::finish(checksum::sum(self.buffer.as_ref(), ph));
        self.set_checksum(c);
        Ok(())
    }

    /// Computes the checksum over the IPv6 pseudo-header and the whole buffer.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) -> Result<()> {
        let len = u32::try_from(self.buffer.as_ref().len()).map_err(|_| Error::Malformed)?;
        self.set_checksum(0);
        let ph = checksum::pseudo_header_v6(src, dst, 6, len);
        let c = checksum::finish(checksum::sum(self.buffer.as_ref(), ph));
        self.set_checksum(c);
        Ok(())
    }

    /// [`TcpPacket::fill_checksum_v4`] or `_v6` by address family; mixed families are
    /// [`Error::Malformed`].
    #[inline]
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) -> Result<()> {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => self.fill_checksum_v4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => self.fill_checksum_v6(s, d),
            _ => Err(Error::Malformed),
        }
    }

    /// Rewrites the source port and patches the checksum incrementally.
    #[inline]
    pub fn rewrite_src_port(&mut self, value: u16) {
        let c = checksum::update16(self.checksum(), self.src_port(), value);
        self.set_src_port(value);
        self.set_checksum(c);
    }

    /// Rewrites the destination port and patches the checksum incrementally.
    #[inline]
    pub fn rewrite_dst_port(&mut self, value: u16) {
        let c = checksum::update16(self.checksum(), self.dst_port(), value);
        self.set_dst_port(value);
        self.set_checksum(c);
    }

    /// Patches the checksum for an IPv4 pseudo-header address change (the caller rewrites
    /// the address in the IP header).
    #[inline]
    pub fn update_checksum_addr_v4(&mut self, old: Ipv4Addr, new: Ipv4Addr) {
        let c = checksum::update_addr_v4(self.checksum(), old, new);
        self.set_checksum(c);
    }

    /// Patches the checksum for an IPv6 pseudo-header address change.
    #[inline]
    pub fn update_checksum_addr_v6(&mut self, old: Ipv6Addr, new: Ipv6Addr) {
        let c = checksum::update_addr_v6(self.checksum(), old, new);
        self.set_checksum(c);
    }
}

/// An owned TCP segment: header fields, raw options and a borrowed payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRepr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number.
    pub ack_number: u32,
    /// Flags byte (see [`flags`]).
    pub flags: u8,
    /// Window size.
    pub window_len: u16,
    /// Urgent pointer.
    pub urgent_at: u16,
    /// Raw option bytes; `emit` pads them with zeros (End of Option List) to a multiple of 4.
    /// At most 40 bytes.
    pub options: &'a [u8],
    /// Segment data.
    pub payload: &'a [u8],
}

impl<'a> TcpRepr<'a> {
    /// Parses a checked segment; with `verify` set to `Some((src, dst))` a checksum that does
    /// not verify against that pseudo-header is [`Error::BadChecksum`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &TcpPacket<&'a T>,
        verify: Option<(IpAddr, IpAddr)>,
    ) -> Result<Self> {
        packet.check()?;
        if let Some((src, dst)) = verify
            && !packet.verify_checksum(src, dst)
        {
            return Err(Error::BadChecksum);
        }
        let data: &'a [u8] = packet.buffer.as_ref();
        let header_len = packet.header_len();
        Ok(TcpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags(),
            window_len: packet.window_len(),
            urgent_at: packet.urgent_at(),
            options: &data[HEADER_LEN..header_len],
            payload: &data[header_len..],
        })
    }

    /// Header length on the wire, options padded to a multiple of 4.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len().div_ceil(4) * 4
    }

    /// Header plus payload length.
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// Writes header, options and payload at the start of `buf` and returns the bytes written.
    /// With `fill_checksum` the checksum is computed over the pseudo-header of `src`/`dst`;
    /// otherwise it is left 0. More than 40 option bytes, or mixed address families, are
    /// [`Error::Malformed`].
    pub fn emit(
        &self,
        buf: &mut [u8],
        src: IpAddr,
        dst: IpAddr,
        fill_checksum: bool,
    ) -> Result<usize> {
        if self.options.len() > 40 || src.is_ipv4() != dst.is_ipv4() {
            return Err(Error::Malformed);
        }
        let len = self.buffer_len();
        need_space(buf, len)?;
        let header_len = self.header_len();
        let mut p = TcpPacket::new_unchecked(&mut buf[..len]);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq_number(self.seq_number);
        p.set_ack_number(self.ack_number);
        p.set_header_len(header_len);
        p.set_flags(self.flags);
        p.set_window_len(self.window_len);
        p.set_checksum(0);
        p.set_urgent_at(self.urgent_at);
        let opts = p.options_mut();
        opts.fill(0);
        opts[..self.options.len()].copy_from_slice(self.options);
        p.payload_mut().copy_from_slice(self.payload);
        if fill_checksum {
            p.fill_checksum(src, dst)?;
        }
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference_checksum(chunks: &[&[u8]]) -> u16 {
        let mut bytes = Vec::new();
        for c in chunks {
            bytes.extend_from_slice(c);
        }
        let mut acc: u32 = 0;
        for pair in bytes.chunks(2) {
            acc += (u32::from(pair[0]) << 8) | pair.get(1).copied().map_or(0, u32::from);
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);
    const DST: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 1);

    // A SYN from 192.168.1.10:49152 to 192.168.1.1:80 with MSS 1460 and SACK-permitted
    // options, 3 data bytes "abc". Checksum filled by `fixture()` from the reference sum.
    static SEGMENT: [u8; 31] = [
        0xc0, 0x00, 0x00, 0x50, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00, 0x70, 0x02, 0xfa,
        0xf0, 0x00, 0x00, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x01, 0x00, b'a', b'b',
        b'c',
    ];

    fn fixture() -> [u8; 31] {
        let mut s = SEGMENT;
        let pseudo = [192, 168, 1, 10, 192, 168, 1, 1, 0, 6, 0, 31];
        let c = reference_checksum(&[&pseudo, &s]);
        s[16..18].copy_from_slice(&c.to_be_bytes());
        s
    }

    #[test]
    fn getters() {
        let s = fixture();
        let p = TcpPacket::new_checked(&s[..]).unwrap();
        assert_eq!(p.src_port(), 49152);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), 0x12345678);
        assert_eq!(p.ack_number(), 0);
        assert_eq!(p.data_offset(), 7);
        assert_eq!(p.header_len(), 28);
        assert_eq!(p.flags(), flags::SYN);
        assert!(p.syn() && !p.ack() && !p.fin() && !p.rst() && !p.psh() && !p.urg());
        assert_eq!(p.window_len(), 64240);
        assert_eq!(p.urgent_at(), 0);
        assert_eq!(p.options(), &[2, 4, 5, 180, 4, 2, 1, 0]);
        assert_eq!(p.payload(), b"abc");
        assert!(p.verify_checksum_v4(SRC, DST));
        assert!(p.verify_checksum(SRC.into(), DST.into()));
        assert!(!p.verify_checksum_v4(DST, SRC.to_bits().wrapping_add(1).into()));
        assert!(!p.verify_checksum(SRC.into(), Ipv6Addr::LOCALHOST.into()));
    }

    #[test]
    fn check_rejects_bad_input() {
        let s = fixture();
        assert_eq!(
            TcpPacket::new_checked(&s[..19]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            TcpPacket::new_checked(&s[..27]).err(),
            Some(Error::Truncated)
        );
        let mut bad = s;
        bad[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&bad[..]).err(),
            Some(Error::Malformed)
        );
    }

    #[test]
    fn setters_touch_only_their_bytes() {
        type Set = fn(&mut TcpPacket<&mut [u8]>);
        let cases: [(Set, &[usize]); 13] = [
            (|p| p.set_src_port(1), &[0, 1]),
            (|p| p.set_dst_port(0x0051), &[3]),
            (|p| p.set_seq_number(0x12345679), &[7]),
            (|p| p.set_ack_number(0x01020304), &[8, 9, 10, 11]),
            (|p| p.set_data_offset(5), &[12]),
            (|p| p.set_ack(true), &[13]),
            (|p| p.set_fin(true), &[13]),
            (|p| p.set_syn(false), &[13]),
            (|p| p.set_window_len(0xfaf1), &[15]),
            (|p| p.set_checksum(0xffff), &[16, 17]),
            (|p| p.set_urgent_at(0x0100), &[18]),
            (|p| p.options_mut()[0] = 1, &[20]),
            (|p| p.payload_mut()[2] = b'z', &[30]),
        ];
        let orig = fixture();
        for (i, (set, bytes)) in cases.iter().enumerate() {
            let mut buf = orig;
            set(&mut TcpPacket::new_unchecked(&mut buf[..]));
            for (j, (a, b)) in buf.iter().zip(orig.iter()).enumerate() {
                assert_eq!(a != b, bytes.contains(&j), "case {i} byte {j}");
            }
        }
        let mut buf = orig;
        let mut p = TcpPacket::new_unchecked(&mut buf[..]);
        p.set_psh(true);
        p.set_rst(true);
        p.set_urg(true);
        assert_eq!(p.flags(), flags::SYN | flags::PSH | flags::RST | flags::URG);
    }

    #[test]
    fn fill_checksum_matches_reference_v4_and_v6() {
        let mut buf = fixture();
        let mut p = TcpPacket::new_unchecked(&mut buf[..]);
        p.set_checksum(0x1234);
        p.fill_checksum_v4(SRC, DST).unwrap();
        assert_eq!(buf, fixture());

        let s6: Ipv6Addr = "2001:db8::a".parse().unwrap();
        let d6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let mut p = TcpPacket::new_unchecked(&mut buf[..]);
        p.fill_checksum(s6.into(), d6.into()).unwrap();
        assert!(p.verify_checksum_v6(s6, d6));
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&s6.octets());
        pseudo.extend_from_slice(&d6.octets());
        pseudo.extend_from_slice(&[0, 0, 0, 31, 0, 0, 0, 6]);
        assert_eq!(reference_checksum(&[&pseudo, &buf]), 0);
        let mut p = TcpPacket::new_unchecked(&mut buf[..]);
        assert_eq!(
            p.fill_checksum(SRC.into(), d6.into()),
            Err(Error::Malformed)
        );
    }

    #[test]
    fn repr_round_trip() {
        let repr = TcpRepr {
            src_port: 40000,
            dst_port: 443,
            seq_number: 1,
            ack_number: 2,
            flags: flags::ACK | flags::PSH,
            window_len: 512,
            urgent_at: 0,
            options: &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
            payload: b"hello",
        };
        let (s, d): (IpAddr, IpAddr) = (SRC.into(), DST.into());
        let mut buf = [0xa5u8; 64];
        let n = repr.emit(&mut buf, s, d, true).unwrap();
        assert_eq!(n, 20 + 12 + 5);
        assert!(buf[n..].iter().all(|&b| b == 0xa5));
        let p = TcpPacket::new_checked(&buf[..n]).unwrap();
        assert_eq!(TcpRepr::parse(&p, Some((s, d))).unwrap(), repr);
        assert_eq!(
            repr.emit(&mut buf[..n - 1], s, d, true),
            Err(Error::NoSpace)
        );

        let mut bad = buf;
        bad[n - 1] ^= 0xff;
        let p = TcpPacket::new_checked(&bad[..n]).unwrap();
        assert_eq!(TcpRepr::parse(&p, Some((s, d))), Err(Error::BadChecksum));
        assert!(TcpRepr::parse(&p, None).is_ok());

        // Options that are not a multiple of 4 are padded with End of Option List.
        let odd = TcpRepr {
            options: &[3, 3, 7],
            ..repr
        };
        let n = odd.emit(&mut buf, s, d, false).unwrap();
        let p = TcpPacket::new_checked(&buf[..n]).unwrap();
        assert_eq!(p.options(), &[3, 3, 7, 0]);
        assert_eq!(p.checksum(), 0);
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Ok(p) = TcpPacket::new_checked(&data[..]) {
                let _ = (p.src_port(), p.dst_port(), p.seq_number(), p.ack_number());
                let _ = (p.header_len(), p.flags(), p.syn(), p.ack(), p.fin(), p.rst());
                let _ = (p.window_len(), p.checksum(), p.urgent_at(), p.options().len());
                let _ = (p.payload().len(), p.verify_checksum_v4(SRC, DST));
                let _ = p.verify_checksum_v6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST);
                let _ = TcpRepr::parse(&p, Some((SRC.into(), DST.into())));
            }
        }

        #[test]
        fn nat_rewrite_v4_matches_full(payload in proptest::collection::vec(any::<u8>(), 0..64),
                                       src in any::<u32>(), dst in any::<u32>(),
                                       new_src in any::<u32>(), new_dst in any::<u32>(),
                                       sport in any::<u16>(), dport in any::<u16>(),
                                       new_sport in any::<u16>(), new_dport in any::<u16>()) {
            let (src, dst) = (Ipv4Addr::from_bits(src), Ipv4Addr::from_bits(dst));
            let (new_src, new_dst) = (Ipv4Addr::from_bits(new_src), Ipv4Addr::from_bits(new_dst));
            let repr = TcpRepr {
                src_port: sport, dst_port: dport, seq_number: 9, ack_number: 10,
                flags: flags::ACK, window_len: 100, urgent_at: 0, options: &[], payload: &payload,
            };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut buf, src.into(), dst.into(), true).unwrap();
            let mut p = TcpPacket::new_checked(&mut buf[..]).unwrap();
            p.rewrite_src_port(new_sport);
            p.rewrite_dst_port(new_dport);
            p.update_checksum_addr_v4(src, new_src);
            p.update_checksum_addr_v4(dst, new_dst);
            let incremental = p.checksum();
            p.fill_checksum_v4(new_src, new_dst).unwrap();
            prop_assert_eq!(incremental, p.checksum());
            prop_assert!(p.verify_checksum_v4(new_src, new_dst));
        }

        #[test]
        fn nat_rewrite_v6_matches_full(payload in proptest::collection::vec(any::<u8>(), 0..64),
                                       src in any::<u128>(), dst in any::<u128>(),
                                       new_src in any::<u128>(), new_dst in any::<u128>(),
                                       sport in any::<u16>(), new_sport in any::<u16>()) {
            let (src, dst) = (Ipv6Addr::from_bits(src), Ipv6Addr::from_bits(dst));
            let (new_src, new_dst) = (Ipv6Addr::from_bits(new_src), Ipv6Addr::from_bits(new_dst));
            let repr = TcpRepr {
                src_port: sport, dst_port: 80, seq_number: 9, ack_number: 10,
                flags: flags::SYN, window_len: 100, urgent_at: 0, options: &[2, 4, 5, 0xb4],
                payload: &payload,
            };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut buf, src.into(), dst.into(), true).unwrap();
            let mut p = TcpPacket::new_checked(&mut buf[..]).unwrap();
            p.rewrite_src_port(new_sport);
            p.update_checksum_addr_v6(src, new_src);
            p.update_checksum_addr_v6(dst, new_dst);
            let incremental = p.checksum();
            p.fill_checksum_v6(new_src, new_dst).unwrap();
            prop_assert_eq!(incremental, p.checksum());
        }
    }
}
