//! UDP datagram headers (RFC 768; IPv6 rules from RFC 8200 section 8.1).
//!
//! UDP VIPs are balanced by port like TCP, and the tunnel modes (VXLAN, GUE) ride on UDP.
//! UDP's checksum has two special cases the NAT path must keep: over IPv4 a zero checksum
//! means "not computed" and must stay zero, and a computed zero is sent as 0xffff. Over IPv6
//! the checksum is mandatory.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::checksum;
use super::{Error, Result, need_space, read_u16, write_u16};

mod field {
    pub(super) const SRC_PORT: usize = 0;
    pub(super) const DST_PORT: usize = 2;
    pub(super) const LENGTH: usize = 4;
    pub(super) const CHECKSUM: usize = 6;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A view of a UDP datagram.
///
/// RFC 768:
/// ```text
///  0      7 8     15 16    23 24    31
/// +--------+--------+--------+--------+
/// |     Source      |   Destination   |
/// |      Port       |      Port       |
/// +--------+--------+--------+--------+
/// |                 |                 |
/// |     Length      |    Checksum     |
/// +--------+--------+--------+--------+
/// |
/// |          data octets ...
/// +---------------- ...
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checking it; getters may panic on a short buffer.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps untrusted bytes after [`UdpPacket::check`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check()?;
        Ok(packet)
    }

    /// Checks the header fits and 8 <= length field <= buffer length. Bytes beyond the length
    /// field are ignored.
    #[inline]
    pub fn check(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let field_len = usize::from(self.len());
        if field_len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if field_len > len {
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

    /// Length field: header plus data, in bytes.
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Checksum field (0 over IPv4 means "no checksum").
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The datagram data, up to the length field.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    #[inline]
    fn datagram(&self) -> &[u8] {
        &self.buffer.as_ref()[..usize::from(self.len())]
    }

    /// True when the checksum is absent (0) or verifies over the IPv4 pseudo-header.
    #[inline]
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let ph = checksum::pseudo_header_v4(src, dst, 17, self.len());
        checksum::finish(checksum::sum(self.datagram(), ph)) == 0
    }

    /// True when the checksum verifies over the IPv6 pseudo-header; 0 never verifies (the
    /// checksum is mandatory over IPv6).
    #[inline]
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        if self.checksum() == 0 {
            return false;
        }
        let ph = checksum::pseudo_header_v6(src, dst, 17, u32::from(self.len()));
        checksum::finish(checksum::sum(self.datagram(), ph)) == 0
    }

    /// [`UdpPacket::verify_checksum_v4`] or `_v6` by family; mixed families never verify.
    #[inline]
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => self.verify_checksum_v4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => self.verify_checksum_v6(s, d),
            _ => false,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
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

    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, value);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Mutable datagram data, up to the length field.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    fn fill_with(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let c = checksum::finish(checksum::sum(self.datagram(), pseudo));
        // A computed 0 is sent as all ones: 0 would read as "no checksum" (RFC 768).
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Computes the checksum over the IPv4 pseudo-header and the datagram.
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let ph = checksum::pseudo_header_v4(src, dst, 17, self.len());
        self.fill_with(ph);
    }

    /// Computes the checksum over the IPv6 pseudo-header and the datagram.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        let ph = checksum::pseudo_header_v6(src, dst, 17, u32::from(self.len()));
        self.fill_with(ph);
    }

    /// [`UdpPacket::fill_checksum_v4`] or `_v6` by family; mixed families are
    /// [`Error::Malformed`].
    #[inline]
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) -> Result<()> {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => self.fill_checksum_v4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => self.fill_checksum_v6(s, d),
            _ => return Err(Error::Malformed),
        }
        Ok(())
    }

    /// Rewrites the source port and patches the checksum (an absent checksum stays absent).
    #[inline]
    pub fn rewrite_src_port(&mut self, value: u16) {
        let c = checksum::udp_update16(self.checksum(), self.src_port(), value);
        self.set_src_port(value);
        self.set_checksum(c);
    }

    /// Rewrites the destination port and patches the checksum.
    #[inline]
    pub fn rewrite_dst_port(&mut self, value: u16) {
        let c = checksum::udp_update16(self.checksum(), self.dst_port(), value);
        self.set_dst_port(value);
        self.set_checksum(c);
    }

    /// Patches the checksum for an IPv4 pseudo-header address change.
    #[inline]
    pub fn update_checksum_addr_v4(&mut self, old: Ipv4Addr, new: Ipv4Addr) {
        let c = checksum::udp_update_addr_v4(self.checksum(), old, new);
        self.set_checksum(c);
    }

    /// Patches the checksum for an IPv6 pseudo-header address change.
    #[inline]
    pub fn update_checksum_addr_v6(&mut self, old: Ipv6Addr, new: Ipv6Addr) {
        let c = checksum::udp_update_addr_v6(self.checksum(), old, new);
        self.set_checksum(c);
    }
}

/// An owned UDP datagram with a borrowed payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Datagram data.
    pub payload: &'a [u8],
}

impl<'a> UdpRepr<'a> {
    /// Parses a checked datagram; with `verify` set, a checksum that does not verify against
    /// that pseudo-header is [`Error::BadChecksum`] (over IPv4 an absent checksum passes).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &UdpPacket<&'a T>,
        verify: Option<(IpAddr, IpAddr)>,
    ) -> Result<Self> {
        packet.check()?;
        if let Some((src, dst)) = verify
            && !packet.verify_checksum(src, dst)
        {
            return Err(Error::BadChecksum);
        }
        let data: &'a [u8] = packet.buffer.as_ref();
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload: &data[HEADER_LEN..usize::from(packet.len())],
        })
    }

    /// Header plus payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    /// Writes header and payload at the start of `buf` and returns the bytes written. With
    /// `fill_checksum` the checksum is computed over the pseudo-header of `src`/`dst`;
    /// otherwise it is left 0 ("none", valid over IPv4 only). A payload too long for the
    /// 16-bit length, or mixed families, is [`Error::Malformed`].
    pub fn emit(
        &self,
        buf: &mut [u8],
        src: IpAddr,
        dst: IpAddr,
        fill_checksum: bool,
    ) -> Result<usize> {
        let len = self.buffer_len();
        let len16 = u16::try_from(len).map_err(|_| Error::Malformed)?;
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(Error::Malformed);
        }
        need_space(buf, len)?;
        let mut p = UdpPacket::new_unchecked(&mut buf[..len]);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(len16);
        p.set_checksum(0);
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

    fn reference_checksum(bytes: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for pair in bytes.chunks(2) {
            acc += (u32::from(pair[0]) << 8) | pair.get(1).copied().map_or(0, u32::from);
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    const SRC: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 5);
    const DST: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 53);

    // A DNS-like query 10.1.0.5:53000 -> 10.1.0.53:53, 5 data bytes, then 3 bytes beyond the
    // length field (padding). The checksum is set by `fixture()` from the reference sum.
    static DATAGRAM: [u8; 16] = [
        0xcf, 0x08, 0x00, 0x35, 0x00, 0x0d, 0x00, 0x00, 1, 2, 3, 4, 5, 0, 0, 0,
    ];

    fn fixture() -> [u8; 16] {
        let mut d = DATAGRAM;
        let mut bytes = vec![10, 1, 0, 5, 10, 1, 0, 53, 0, 17, 0, 13];
        bytes.extend_from_slice(&d[..13]);
        let c = reference_checksum(&bytes);
        d[6..8].copy_from_slice(&c.to_be_bytes());
        d
    }

    #[test]
    fn getters() {
        let d = fixture();
        let p = UdpPacket::new_checked(&d[..]).unwrap();
        assert_eq!(p.src_port(), 53000);
        assert_eq!(p.dst_port(), 53);
        assert_eq!(p.len(), 13);
        assert_eq!(p.payload(), &[1, 2, 3, 4, 5]);
        assert!(p.verify_checksum_v4(SRC, DST));
        assert!(!p.verify_checksum_v4(DST, SRC.to_bits().wrapping_add(3).into()));
        let mut zero = d;
        zero[6..8].fill(0);
        let p = UdpPacket::new_checked(&zero[..]).unwrap();
        assert!(
            p.verify_checksum_v4(DST, DST),
            "0 means no checksum over IPv4"
        );
        assert!(!p.verify_checksum_v6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST));
    }

    #[test]
    fn check_rejects_bad_input() {
        let d = fixture();
        assert_eq!(
            UdpPacket::new_checked(&d[..7]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            UdpPacket::new_checked(&d[..12]).err(),
            Some(Error::Truncated)
        );
        let mut bad = d;
        bad[5] = 7;
        assert_eq!(
            UdpPacket::new_checked(&bad[..]).err(),
            Some(Error::Malformed)
        );
    }

    #[test]
    fn setters_touch_only_their_bytes() {
        type Set = fn(&mut UdpPacket<&mut [u8]>);
        let cases: [(Set, &[usize]); 5] = [
            (|p| p.set_src_port(0xcf09), &[1]),
            (|p| p.set_dst_port(0x0100), &[2, 3]),
            (|p| p.set_len(0x000c), &[5]),
            (|p| p.set_checksum(0), &[6, 7]),
            (|p| p.payload_mut()[4] = 9, &[12]),
        ];
        let orig = fixture();
        for (i, (set, bytes)) in cases.iter().enumerate() {
            let mut buf = orig;
            set(&mut UdpPacket::new_unchecked(&mut buf[..]));
            for (j, (a, b)) in buf.iter().zip(orig.iter()).enumerate() {
                assert_eq!(a != b, bytes.contains(&j), "case {i} byte {j}");
            }
        }
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Choose the last payload word so the full sum is 0xffff, i.e. the checksum is 0.
        let mut d = [0u8; 10];
        d[0..8].copy_from_slice(&[0x12, 0x34, 0x00, 0x35, 0x00, 0x0a, 0x00, 0x00]);
        let ph = checksum::pseudo_header_v4(SRC, DST, 17, 10);
        let partial = checksum::fold(checksum::sum(&d, ph));
        let word = !partial; // makes the folded sum 0xffff
        d[8..10].copy_from_slice(&word.to_be_bytes());
        let mut p = UdpPacket::new_checked(&mut d[..]).unwrap();
        p.fill_checksum_v4(SRC, DST);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum_v4(SRC, DST));
    }

    #[test]
    fn repr_round_trip() {
        let s6: IpAddr = "2001:db8::5".parse().unwrap();
        let d6: IpAddr = "2001:db8::35".parse().unwrap();
        for (s, d) in [(IpAddr::from(SRC), IpAddr::from(DST)), (s6, d6)] {
            let repr = UdpRepr {
                src_port: 1234,
                dst_port: 4789,
                payload: b"vxlan?",
            };
            let mut buf = [0xa5u8; 20];
            let n = repr.emit(&mut buf, s, d, true).unwrap();
            assert_eq!(n, 14);
            assert!(buf[n..].iter().all(|&b| b == 0xa5));
            let p = UdpPacket::new_checked(&buf[..]).unwrap();
            assert_eq!(UdpRepr::parse(&p, Some((s, d))).unwrap(), repr);
            assert_eq!(repr.emit(&mut buf[..13], s, d, true), Err(Error::NoSpace));
            assert_eq!(repr.emit(&mut buf, s, d6, true).err(), {
                if s.is_ipv4() {
                    Some(Error::Malformed)
                } else {
                    None
                }
            });
        }
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = UdpPacket::new_checked(&data[..]) {
                let _ = (p.src_port(), p.dst_port(), p.len(), p.checksum(), p.payload().len());
                let _ = p.verify_checksum_v4(SRC, DST);
                let _ = p.verify_checksum_v6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST);
                let _ = UdpRepr::parse(&p, Some((SRC.into(), DST.into())));
            }
        }

        #[test]
        fn nat_rewrite_v4_matches_full(payload in proptest::collection::vec(any::<u8>(), 0..64),
                                       src in any::<u32>(), dst in any::<u32>(),
                                       new_src in any::<u32>(), new_dst in any::<u32>(),
                                       sport in any::<u16>(), new_sport in any::<u16>(),
                                       new_dport in any::<u16>(), with_checksum in any::<bool>()) {
            let (src, dst) = (Ipv4Addr::from_bits(src), Ipv4Addr::from_bits(dst));
            let (new_src, new_dst) = (Ipv4Addr::from_bits(new_src), Ipv4Addr::from_bits(new_dst));
            let repr = UdpRepr { src_port: sport, dst_port: 53, payload: &payload };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut buf, src.into(), dst.into(), with_checksum).unwrap();
            let mut p = UdpPacket::new_checked(&mut buf[..]).unwrap();
            p.rewrite_src_port(new_sport);
            p.rewrite_dst_port(new_dport);
            p.update_checksum_addr_v4(src, new_src);
            p.update_checksum_addr_v4(dst, new_dst);
            let incremental = p.checksum();
            if with_checksum {
                p.fill_checksum_v4(new_src, new_dst);
                prop_assert_eq!(incremental, p.checksum());
                prop_assert!(p.verify_checksum_v4(new_src, new_dst));
            } else {
                prop_assert_eq!(incremental, 0, "an absent IPv4 UDP checksum stays absent");
            }
        }

        #[test]
        fn nat_rewrite_v6_matches_full(payload in proptest::collection::vec(any::<u8>(), 0..64),
                                       src in any::<u128>(), dst in any::<u128>(),
                                       new_src in any::<u128>(), new_dst in any::<u128>(),
                                       new_dport in any::<u16>()) {
            let (src, dst) = (Ipv6Addr::from_bits(src), Ipv6Addr::from_bits(dst));
            let (new_src, new_dst) = (Ipv6Addr::from_bits(new_src), Ipv6Addr::from_bits(new_dst));
            let repr = UdpRepr { src_port: 5000, dst_port: 53, payload: &payload };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut buf, src.into(), dst.into(), true).unwrap();
            let mut p = UdpPacket::new_checked(&mut buf[..]).unwrap();
            p.rewrite_dst_port(new_dport);
            p.update_checksum_addr_v6(src, new_src);
            p.update_checksum_addr_v6(dst, new_dst);
            let incremental = p.checksum();
            p.fill_checksum_v6(new_src, new_dst);
            prop_assert_eq!(incremental, p.checksum());
            prop_assert!(p.verify_checksum_v6(new_src, new_dst));
        }
    }
}
