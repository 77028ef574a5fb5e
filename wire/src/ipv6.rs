//! IPv6 headers (RFC 8200) and the extension-header walk.
//!
//! Ports live behind a chain of extension headers in IPv6, so the load balancer cannot hash a
//! flow until it has walked that chain. [`walk_ext_headers`] does it with a fixed bound (an
//! attacker-controlled chain must not cost unbounded work) and reports fragmentation, since
//! only the first fragment carries the upper-layer header.

use std::net::Ipv6Addr;

use super::{Error, IpProtocol, Result, need_space, read_u16, read_u32, write_u16, write_u32};

mod field {
    use core::ops::Range;

    pub(super) const VER_TC_FLOW: usize = 0;
    pub(super) const LENGTH: usize = 4;
    pub(super) const NXT_HDR: usize = 6;
    pub(super) const HOP_LIMIT: usize = 7;
    pub(super) const SRC: Range<usize> = 8..24;
    pub(super) const DST: Range<usize> = 24..40;

    pub(super) const FRAG_NXT_HDR: usize = 0;
    pub(super) const FRAG_RESERVED: usize = 1;
    pub(super) const FRAG_OFF_M: usize = 2;
    pub(super) const FRAG_IDENT: usize = 4;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;
/// Length of a Fragment extension header.
pub const FRAG_HEADER_LEN: usize = 8;
/// How many extension headers [`walk_ext_headers`] steps over before giving up.
pub const MAX_EXT_HEADERS: usize = 8;

/// A view of an IPv6 packet.
///
/// RFC 8200 section 3:
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |Version| Traffic Class |           Flow Label                  |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |         Payload Length        |  Next Header  |   Hop Limit   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// +                         Source Address                        +
/// |                          (128 bits)                           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// +                      Destination Address                      +
/// |                          (128 bits)                           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking it; getters may panic on a short buffer.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps untrusted bytes after [`Ipv6Packet::check`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check()?;
        Ok(packet)
    }

    /// Wraps the IPv6 packet quoted inside an ICMPv6 error, which may be cut short (RFC 4443
    /// quotes as much as fits in 1280 bytes). Checks only the fixed header and version;
    /// `payload()` and [`walk_ext_headers`] then stop at the end of the buffer.
    #[inline]
    pub fn new_checked_quoted(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        if packet.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if packet.version() != 6 {
            return Err(Error::Malformed);
        }
        Ok(packet)
    }

    /// Checks the fixed header fits, version is 6 and the payload length fits the buffer.
    /// Trailing link-layer padding is allowed. Jumbograms (payload length 0 with a Jumbo
    /// option) are not supported: their payload reads as empty.
    #[inline]
    pub fn check(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::Malformed);
        }
        if HEADER_LEN + usize::from(self.payload_len()) > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn first_word(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }

    /// The version field (6 for a valid packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }

    /// Traffic class (DSCP and ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.first_word() & 0x000f_ffff
    }

    /// Payload length: everything after the fixed header, extension headers included.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Next header after the fixed header (an extension header or the upper layer).
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        Ipv6Addr::from(a)
    }

    /// Where the payload ends: after `payload_len()` bytes, cut to the buffer for a quoted
    /// packet.
    #[inline]
    fn payload_end(&self) -> usize {
        (HEADER_LEN + usize::from(self.payload_len())).min(self.buffer.as_ref().len())
    }

    /// The payload (extension headers and upper layer), excluding link-layer padding (for a
    /// [quoted](Ipv6Packet::new_checked_quoted) packet, up to the end of the buffer).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.payload_end()]
    }

    /// The fixed header plus payload, excluding link-layer padding.
    #[inline]
    pub fn packet(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.payload_end()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets version, traffic class and flow label in one store (a fresh header).
    #[inline]
    pub fn set_first_word(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::VER_TC_FLOW, value);
    }

    /// Sets the version (low 4 bits of `value`).
    #[inline]
    pub fn set_version(&mut self, value: u8) {
        let w = (self.first_word() & 0x0fff_ffff) | (u32::from(value & 0x0f) << 28);
        self.set_first_word(w);
    }

    /// Sets the traffic class.
    #[inline]
    pub fn set_traffic_class(&mut self, value: u8) {
        let w = (self.first_word() & 0xf00f_ffff) | (u32::from(value) << 20);
        self.set_first_word(w);
    }

    /// Sets the flow label (low 20 bits of `value`).
    #[inline]
    pub fn set_flow_label(&mut self, value: u32) {
        let w = (self.first_word() & 0xfff0_0000) | (value & 0x000f_ffff);
        self.set_first_word(w);
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, value);
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, value: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = value;
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = value;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src(&mut self, value: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&value.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst(&mut self, value: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&value.octets());
    }

    /// Mutable payload (extension headers and upper layer).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.payload_end();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// Fragmentation facts from an IPv6 Fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragInfo {
    /// Fragment offset in bytes (the 13-bit field times 8).
    pub offset: u16,
    /// More Fragments flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// Where the upper-layer header of an IPv6 packet starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Upper {
    /// The upper-layer protocol number (or 59, No Next Header; or an extension header this
    /// walker does not step over, such as 51 AH or 50 ESP).
    pub protocol: u8,
    /// Offset of the upper-layer header from the start of the IPv6 header.
    pub offset: usize,
    /// Present when a Fragment header was crossed. With a non-zero `offset` the bytes at
    /// [`Ipv6Upper::offset`] are the middle of a datagram, not an upper-layer header.
    pub fragment: Option<FragInfo>,
}

/// Walks Hop-by-Hop, Routing, Destination Options and Fragment headers of a packet that
/// passed [`Ipv6Packet::check`], stopping at the first other header. For a packet from
/// [`Ipv6Packet::new_checked_quoted`] the walk ends at the end of the buffer instead of the
/// payload length.
///
/// Errors: an extension header that runs past the payload length is [`Error::Truncated`]; a
/// Hop-by-Hop header anywhere but first (RFC 8200 section 4.3) or a second Fragment header is
/// [`Error::Malformed`]; more than [`MAX_EXT_HEADERS`] headers is [`Error::TooManyHeaders`].
/// After a fragment with a non-zero offset the walk stops: what follows is not a header.
#[inline]
pub fn walk_ext_headers<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Ipv6Upper> {
    let data = packet.buffer.as_ref();
    if data.len() < HEADER_LEN {
        return Err(Error::Truncated);
    }
    let end = packet.payload_end();
    let mut protocol = packet.next_header();
    let mut offset = HEADER_LEN;
    let mut fragment = None;
    let mut crossed = 0;
    loop {
        let header_len = match protocol {
            0 if crossed > 0 => return Err(Error::Malformed),
            0 | 43 | 60 => {
                // Generic extension header: next header, length in 8-octet units not counting
                // the first 8 octets.
                if offset + 2 > end {
                    return Err(Error::Truncated);
                }
                (usize::from(data[offset + 1]) + 1) * 8
            }
            44 => {
                if fragment.is_some() {
                    return Err(Error::Malformed);
                }
                if offset + FRAG_HEADER_LEN > end {
                    return Err(Error::Truncated);
                }
                let frag = Ipv6FragmentHeader::new_unchecked(&data[offset..offset + 8]);
                fragment = Some(FragInfo {
                    offset: frag.frag_offset(),
                    more: frag.more_frags(),
                    ident: frag.ident(),
                });
                FRAG_HEADER_LEN
            }
            _ => break,
        };
        if crossed == MAX_EXT_HEADERS {
            return Err(Error::TooManyHeaders);
        }
        if offset + header_len > end {
            return Err(Error::Truncated);
        }
        protocol = data[offset];
        offset += header_len;
        crossed += 1;
        if fragment.is_some_and(|f| f.offset != 0) {
            break;
        }
    }
    Ok(Ipv6Upper {
        protocol,
        offset,
        fragment,
    })
}

/// A view of the IPv6 Fragment extension header.
///
/// RFC 8200 section 4.5:
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  Next Header  |   Reserved    |      Fragment Offset    |Res|M|
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                         Identification                        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6FragmentHeader<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than 8 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6FragmentHeader { buffer }
    }

    /// Wraps a buffer after checking it holds the 8-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < FRAG_HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Next header after this one (of the reassembled datagram).
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::FRAG_NXT_HDR]
    }

    /// Fragment offset in bytes (the 13-bit field times 8).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::FRAG_OFF_M) & 0xfff8
    }

    /// More Fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FRAG_OFF_M) & 0x0001 != 0
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::FRAG_IDENT)
    }

    /// The fragment data after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[FRAG_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6FragmentHeader<T> {
    /// Sets the next header and clears the reserved byte.
    #[inline]
    pub fn set_next_header(&mut self, value: u8) {
        let b = self.buffer.as_mut();
        b[field::FRAG_NXT_HDR] = value;
        b[field::FRAG_RESERVED] = 0;
    }

    /// Sets the fragment offset in bytes (low 3 bits dropped).
    #[inline]
    pub fn set_frag_offset(&mut self, value: u16) {
        let old = read_u16(self.buffer.as_ref(), field::FRAG_OFF_M);
        write_u16(
            self.buffer.as_mut(),
            field::FRAG_OFF_M,
            (old & 0x0007) | (value & 0xfff8),
        );
    }

    /// Sets the More Fragments flag.
    #[inline]
    pub fn set_more_frags(&mut self, value: bool) {
        let old = read_u16(self.buffer.as_ref(), field::FRAG_OFF_M);
        write_u16(
            self.buffer.as_mut(),
            field::FRAG_OFF_M,
            (old & !1) | u16::from(value),
        );
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::FRAG_IDENT, value);
    }

    /// Mutable fragment data.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[FRAG_HEADER_LEN..]
    }
}

/// An owned fixed IPv6 header, for building packets and ICMPv6 replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Next header (upper-layer protocol when there are no extension headers).
    pub next_header: IpProtocol,
    /// Payload length in bytes (everything after the 40-byte header).
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// A typical header: hop limit 64, traffic class and flow label 0.
    pub fn new(src: Ipv6Addr, dst: Ipv6Addr, next_header: IpProtocol, payload_len: usize) -> Self {
        Ipv6Repr {
            src,
            dst,
            next_header,
            payload_len,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    /// Parses the fixed header of a checked packet (extension headers stay in the payload).
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Self> {
        packet.check()?;
        Ok(Ipv6Repr {
            src: packet.src(),
            dst: packet.dst(),
            next_header: IpProtocol::from(packet.next_header()),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// Header length on the wire (40).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 40-byte header at the start of `buf` and returns 40. A payload longer than
    /// 65535 bytes is [`Error::Malformed`] (no jumbograms).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        need_space(buf, HEADER_LEN)?;
        let len = u16::try_from(self.payload_len).map_err(|_| Error::Malformed)?;
        let mut p = Ipv6Packet::new_unchecked(&mut buf[..HEADER_LEN]);
        p.set_first_word(0x6000_0000);
        p.set_traffic_class(self.traffic_class);
        p.set_flow_label(self.flow_label);
        p.set_payload_len(len);
        p.set_next_header(self.next_header.into());
        p.set_hop_limit(self.hop_limit);
        p.set_src(self.src);
        p.set_dst(self.dst);
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header(next_header: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![
            0x6b, 0x81, 0x23, 0x45, // version 6, traffic class 0xb8, flow label 0x12345
        ];
        p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        p.push(next_header);
        p.push(63);
        p.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn getters() {
        let mut bytes = header(17, &[1, 2, 3, 4]);
        bytes.extend_from_slice(&[0, 0]); // link padding
        let p = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb8);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 4);
        assert_eq!(p.next_header(), 17);
        assert_eq!(p.hop_limit(), 63);
        assert_eq!(p.src(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        assert_eq!(p.packet().len(), 44);
    }

    #[test]
    fn check_rejects_bad_input() {
        let bytes = header(17, &[1, 2, 3, 4]);
        assert_eq!(
            Ipv6Packet::new_checked(&bytes[..39]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            Ipv6Packet::new_checked(&bytes[..43]).err(),
            Some(Error::Truncated)
        );
        let mut bad = bytes.clone();
        bad[0] = 0x4b;
        assert_eq!(
            Ipv6Packet::new_checked(&bad[..]).err(),
            Some(Error::Malformed)
        );
    }

    #[test]
    fn setters_touch_only_their_bytes() {
        let orig = header(6, &[]);
        type Set = fn(&mut Ipv6Packet<&mut [u8]>);
        let cases: [(Set, &[usize]); 7] = [
            (|p| p.set_traffic_class(0x00), &[0, 1]),
            (|p| p.set_flow_label(0x54321), &[1, 2, 3]),
            (|p| p.set_payload_len(0x0102), &[4, 5]),
            (|p| p.set_next_header(17), &[6]),
            (|p| p.set_hop_limit(1), &[7]),
            (
                |p| p.set_src(Ipv6Addr::from([0xff; 16])),
                &(8..24).collect::<Vec<_>>()[..],
            ),
            (
                |p| p.set_dst(Ipv6Addr::from([0xee; 16])),
                &(24..40).collect::<Vec<_>>()[..],
            ),
        ];
        for (i, (set, bytes)) in cases.iter().enumerate() {
            let mut buf = orig.clone();
            set(&mut Ipv6Packet::new_unchecked(&mut buf[..]));
            for (j, (a, b)) in buf.iter().zip(orig.iter()).enumerate() {
                assert_eq!(a != b, bytes.contains(&j), "case {i} byte {j}");
            }
        }
    }

    #[test]
    fn walk_plain_and_chained() {
        let bytes = header(6, &[0; 20]);
        let p = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        let up = walk_ext_headers(&p).unwrap();
        assert_eq!((up.protocol, up.offset, up.fragment), (6, 40, None));

        // Hop-by-Hop (8 bytes) -> Destination Options (16 bytes) -> Fragment (offset 0, M)
        // -> UDP.
        let mut ext = vec![60, 0, 1, 4, 0, 0, 0, 0];
        ext.extend_from_slice(&[44, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        ext.extend_from_slice(&[17, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef]);
        ext.extend_from_slice(&[0; 8]);
        let bytes = header(0, &ext);
        let p = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        let up = walk_ext_headers(&p).unwrap();
        assert_eq!(up.protocol, 17);
        assert_eq!(up.offset, 40 + 8 + 16 + 8);
        assert_eq!(
            up.fragment,
            Some(FragInfo {
                offset: 0,
                more: true,
                ident: 0xdeadbeef
            })
        );
    }

    #[test]
    fn walk_stops_at_non_first_fragment() {
        // Fragment at offset 1480 bytes (185 units), last fragment.
        let off: u16 = 1480;
        let mut ext = vec![6, 0];
        ext.extend_from_slice(&off.to_be_bytes());
        ext.extend_from_slice(&7u32.to_be_bytes());
        ext.extend_from_slice(&[0xff; 16]); // not a header: middle of the datagram
        let bytes = header(44, &ext);
        let p = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        let up = walk_ext_headers(&p).unwrap();
        assert_eq!(up.protocol, 6);
        assert_eq!(up.offset, 48);
        assert_eq!(
            up.fragment,
            Some(FragInfo {
                offset: 1480,
                more: false,
                ident: 7
            })
        );
    }

    #[test]
    fn walk_errors() {
        // Destination Options claiming 16 bytes with 8 present.
        let bytes = header(60, &[6, 1, 0, 0, 0, 0, 0, 0]);
        let p = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(walk_ext_headers(&p), Err(Error::Truncated));
        // Hop-by-Hop after Destination Options.
        let bytes = header(60, &[0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0]);
        let p = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(walk_ext_headers(&p), Err(Error::Malformed));
        // Nine Destination Options headers.
        let mut ext = Vec::new();
        for i in 0..9 {
            ext.extend_from_slice(&[if i == 8 { 6 } else { 60 }, 0, 0, 0, 0, 0, 0, 0]);
        }
        let bytes = header(60, &ext);
        let p = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(walk_ext_headers(&p), Err(Error::TooManyHeaders));
        // Eight is fine.
        let bytes = header(60, &ext[8..]);
        let p = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(walk_ext_headers(&p).unwrap().offset, 40 + 64);
        // Empty payload with an extension header announced.
        let bytes = header(43, &[]);
        let p = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(walk_ext_headers(&p), Err(Error::Truncated));
    }

    #[test]
    fn quoted_packet_walks_what_is_there() {
        // Destination Options (8 bytes) then TCP; the quote keeps 4 bytes of the TCP header.
        let mut ext = vec![6, 0, 0, 0, 0, 0, 0, 0];
        ext.extend_from_slice(&[0x1f, 0x90, 0x00, 0x50, 1, 2, 3, 4]);
        let bytes = header(60, &ext);
        let quoted = &bytes[..52];
        assert_eq!(
            Ipv6Packet::new_checked(quoted).err(),
            Some(Error::Truncated)
        );
        let p = Ipv6Packet::new_checked_quoted(quoted).unwrap();
        assert_eq!(p.payload().len(), 12);
        let up = walk_ext_headers(&p).unwrap();
        assert_eq!((up.protocol, up.offset), (6, 48));
        assert_eq!(&quoted[up.offset..], &[0x1f, 0x90, 0x00, 0x50]);
        // Cut inside the extension header.
        let p = Ipv6Packet::new_checked_quoted(&bytes[..45]).unwrap();
        assert_eq!(walk_ext_headers(&p), Err(Error::Truncated));
        assert_eq!(
            Ipv6Packet::new_checked_quoted(&bytes[..39]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn fragment_header_view() {
        let mut buf = [59u8, 0xaa, 0x05, 0xc9, 0, 0, 1, 0, 9, 9];
        let f = Ipv6FragmentHeader::new_checked(&buf[..]).unwrap();
        assert_eq!(f.next_header(), 59);
        assert_eq!(f.frag_offset(), 0x05c8);
        assert!(f.more_frags());
        assert_eq!(f.ident(), 256);
        assert_eq!(f.payload(), &[9, 9]);
        let mut f = Ipv6FragmentHeader::new_unchecked(&mut buf[..]);
        f.set_more_frags(false);
        f.set_frag_offset(8);
        f.set_ident(0x01020304);
        f.set_next_header(6);
        assert_eq!(buf, [6, 0, 0x00, 0x08, 1, 2, 3, 4, 9, 9]);
        assert_eq!(
            Ipv6FragmentHeader::new_checked(&buf[..7]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn repr_round_trip() {
        let repr = Ipv6Repr {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            next_header: IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 255,
            traffic_class: 0x2e,
            flow_label: 0xfffff,
        };
        let mut buf = [0xa5u8; 48];
        assert_eq!(repr.emit(&mut buf).unwrap(), 40);
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p).unwrap(), repr);
        assert_eq!(repr.emit(&mut buf[..39]), Err(Error::NoSpace));
    }

    proptest! {
        #[test]
        fn never_panics(mut data in proptest::collection::vec(any::<u8>(), 0..160),
                        force in any::<bool>()) {
            if force && data.len() >= 40 {
                // Make the header plausible so the extension walk sees random chains.
                data[0] = 0x60 | (data[0] & 0x0f);
                let len = (data.len() - 40) as u16;
                data[4..6].copy_from_slice(&len.to_be_bytes());
                data[6] = [0, 43, 44, 60, 6][usize::from(data[6]) % 5];
            }
            if let Ok(p) = Ipv6Packet::new_checked(&data[..]) {
                let _ = (p.version(), p.traffic_class(), p.flow_label(), p.payload_len());
                let _ = (p.next_header(), p.hop_limit(), p.src(), p.dst(), p.payload().len());
                if let Ok(up) = walk_ext_headers(&p) {
                    prop_assert!(up.offset <= 40 + usize::from(p.payload_len()));
                }
                let _ = Ipv6Repr::parse(&p);
            }
            if let Ok(p) = Ipv6Packet::new_checked_quoted(&data[..]) {
                let _ = (p.payload().len(), p.packet().len(), p.src(), p.next_header());
                if let Ok(up) = walk_ext_headers(&p) {
                    prop_assert!(up.offset <= data.len());
                }
            }
            if let Ok(f) = Ipv6FragmentHeader::new_checked(&data[..]) {
                let _ = (f.next_header(), f.frag_offset(), f.more_frags(), f.ident());
                let _ = f.payload().len();
            }
        }
    }
}
