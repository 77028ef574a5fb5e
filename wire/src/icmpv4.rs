//! ICMP for IPv4 (RFC 792, RFC 1191 path-MTU discovery).
//!
//! The appliance answers pings to its VIPs, must forward "fragmentation needed" errors for a
//! flow to the backend that owns it (their inner header names the flow), and generates
//! "fragmentation needed" itself when encapsulation would exceed the MTU.

use super::checksum;
use super::{Error, Result, need_space, read_u16, read_u32, write_u16, write_u32};

mod field {
    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: usize = 2;
    pub(super) const REST: usize = 4;
    pub(super) const ECHO_IDENT: usize = 4;
    pub(super) const ECHO_SEQ: usize = 6;
    pub(super) const NEXT_HOP_MTU: usize = 6;
}

/// Length of the ICMP header (type, code, checksum, rest of header).
pub const HEADER_LEN: usize = 8;

/// Destination Unreachable codes (RFC 792, RFC 1191, RFC 1812).
pub mod unreach {
    /// Network unreachable.
    pub const NET: u8 = 0;
    /// Host unreachable.
    pub const HOST: u8 = 1;
    /// Protocol unreachable.
    pub const PROTOCOL: u8 = 2;
    /// Port unreachable.
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set; carries the next-hop MTU (RFC 1191).
    pub const FRAG_NEEDED: u8 = 4;
    /// Communication administratively prohibited (RFC 1812).
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// Time Exceeded codes (RFC 792).
pub mod time_exceeded {
    /// TTL exceeded in transit.
    pub const TTL: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const REASSEMBLY: u8 = 1;
}

/// ICMP message types.
///
/// Registry: IANA "ICMP Type Numbers",
/// <https://www.iana.org/assignments/icmp-parameters/icmp-parameters.xhtml#icmp-parameters-types>.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv4Type {
    /// 0: Echo Reply.
    EchoReply,
    /// 3: Destination Unreachable.
    DestUnreachable,
    /// 5: Redirect.
    Redirect,
    /// 8: Echo Request.
    EchoRequest,
    /// 9: Router Advertisement.
    RouterAdvert,
    /// 10: Router Solicitation.
    RouterSolicit,
    /// 11: Time Exceeded.
    TimeExceeded,
    /// 12: Parameter Problem.
    ParamProblem,
    /// 13: Timestamp.
    Timestamp,
    /// 14: Timestamp Reply.
    TimestampReply,
    /// Any other type.
    Unknown(u8),
}

impl Icmpv4Type {
    /// True for error messages, which quote the offending packet's header.
    pub fn is_error(self) -> bool {
        matches!(
            self,
            Icmpv4Type::DestUnreachable
                | Icmpv4Type::Redirect
                | Icmpv4Type::TimeExceeded
                | Icmpv4Type::ParamProblem
        )
    }
}

impl From<u8> for Icmpv4Type {
    fn from(value: u8) -> Self {
        match value {
            0 => Icmpv4Type::EchoReply,
            3 => Icmpv4Type::DestUnreachable,
            5 => Icmpv4Type::Redirect,
            8 => Icmpv4Type::EchoRequest,
            9 => Icmpv4Type::RouterAdvert,
            10 => Icmpv4Type::RouterSolicit,
            11 => Icmpv4Type::TimeExceeded,
            12 => Icmpv4Type::ParamProblem,
            13 => Icmpv4Type::Timestamp,
            14 => Icmpv4Type::TimestampReply,
            other => Icmpv4Type::Unknown(other),
        }
    }
}

impl From<Icmpv4Type> for u8 {
    fn from(value: Icmpv4Type) -> Self {
        match value {
            Icmpv4Type::EchoReply => 0,
            Icmpv4Type::DestUnreachable => 3,
            Icmpv4Type::Redirect => 5,
            Icmpv4Type::EchoRequest => 8,
            Icmpv4Type::RouterAdvert => 9,
            Icmpv4Type::RouterSolicit => 10,
            Icmpv4Type::TimeExceeded => 11,
            Icmpv4Type::ParamProblem => 12,
            Icmpv4Type::Timestamp => 13,
            Icmpv4Type::TimestampReply => 14,
            Icmpv4Type::Unknown(other) => other,
        }
    }
}

/// A view of an ICMPv4 message.
///
/// RFC 792 (echo shown; error messages carry an unused word, or the next-hop MTU of
/// RFC 1191 in its low 16 bits, followed by the offending IP header and 8 bytes of its data):
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     Type      |     Code      |          Checksum             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           Identifier          |        Sequence Number        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     Data ...
/// +-+-+-+-+-
/// ```
/// The message extends to the end of the buffer (ICMPv4 has no length field): wrap exactly
/// the IP payload. The checksum covers the whole message, with no pseudo-header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than 8 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
    }

    /// Wraps untrusted bytes after checking the 8-byte header fits.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> Icmpv4Type {
        Icmpv4Type::from(self.buffer.as_ref()[field::TYPE])
    }

    /// Message code.
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The 32-bit "rest of header" word.
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::REST)
    }

    /// Echo identifier (meaningful for echo request/reply).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// Echo sequence number (meaningful for echo request/reply).
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_SEQ)
    }

    /// Next-hop MTU of a "fragmentation needed" message (RFC 1191); 0 from old routers.
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::NEXT_HOP_MTU)
    }

    /// True for Destination Unreachable / Fragmentation Needed.
    #[inline]
    pub fn is_frag_needed(&self) -> bool {
        self.msg_type() == Icmpv4Type::DestUnreachable && self.msg_code() == unreach::FRAG_NEEDED
    }

    /// Everything after the 8-byte header: echo data, or the quoted IP header and data of an
    /// error message.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// True when the checksum over the whole message verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.buffer.as_ref()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, value: Icmpv4Type) {
        self.buffer.as_mut()[field::TYPE] = value.into();
    }

    /// Sets the message code.
    #[inline]
    pub fn set_msg_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the rest-of-header word.
    #[inline]
    pub fn set_rest_of_header(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::REST, value);
    }

    /// Sets the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_IDENT, value);
    }

    /// Sets the echo sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_SEQ, value);
    }

    /// Sets the next-hop MTU (low 16 bits of the rest-of-header word).
    #[inline]
    pub fn set_next_hop_mtu(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::NEXT_HOP_MTU, value);
    }

    /// Mutable data after the header.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Computes the checksum over the whole message.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

/// An owned ICMPv4 message with borrowed data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv4Repr<'a> {
    /// Type 8.
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data.
        data: &'a [u8],
    },
    /// Type 0.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data.
        data: &'a [u8],
    },
    /// Type 3. `next_hop_mtu` is meaningful for code [`unreach::FRAG_NEEDED`] and 0 otherwise.
    DestUnreachable {
        /// Code (see [`unreach`]).
        code: u8,
        /// Next-hop MTU (RFC 1191).
        next_hop_mtu: u16,
        /// The offending IP header and at least 8 bytes of its payload.
        data: &'a [u8],
    },
    /// Type 11.
    TimeExceeded {
        /// Code (see [`time_exceeded`]).
        code: u8,
        /// The offending IP header and at least 8 bytes of its payload.
        data: &'a [u8],
    },
    /// Any other type, carried verbatim.
    Other {
        /// Type.
        msg_type: u8,
        /// Code.
        code: u8,
        /// Rest-of-header word.
        rest: u32,
        /// Data after the header.
        data: &'a [u8],
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// Parses a checked message; with `verify_checksum` a bad checksum is
    /// [`Error::BadChecksum`]. In the typed variants, bits of the rest-of-header word the type
    /// leaves unused are dropped.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Icmpv4Packet<&'a T>,
        verify_checksum: bool,
    ) -> Result<Self> {
        let data: &'a [u8] = packet.buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if verify_checksum && !packet.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        let body = &data[HEADER_LEN..];
        let code = packet.msg_code();
        Ok(match packet.msg_type() {
            Icmpv4Type::EchoRequest if code == 0 => Icmpv4Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data: body,
            },
            Icmpv4Type::EchoReply if code == 0 => Icmpv4Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data: body,
            },
            Icmpv4Type::DestUnreachable => Icmpv4Repr::DestUnreachable {
                code,
                next_hop_mtu: packet.next_hop_mtu(),
                data: body,
            },
            Icmpv4Type::TimeExceeded => Icmpv4Repr::TimeExceeded { code, data: body },
            other => Icmpv4Repr::Other {
                msg_type: other.into(),
                code,
                rest: packet.rest_of_header(),
                data: body,
            },
        })
    }

    fn data(&self) -> &'a [u8] {
        match *self {
            Icmpv4Repr::EchoRequest { data, .. }
            | Icmpv4Repr::EchoReply { data, .. }
            | Icmpv4Repr::DestUnreachable { data, .. }
            | Icmpv4Repr::TimeExceeded { data, .. }
            | Icmpv4Repr::Other { data, .. } => data,
        }
    }

    /// Header plus data length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data().len()
    }

    /// Writes the message at the start of `buf` and returns the bytes written; the checksum
    /// is filled when `fill_checksum` is set, else left 0.
    pub fn emit(&self, buf: &mut [u8], fill_checksum: bool) -> Result<usize> {
        let len = self.buffer_len();
        need_space(buf, len)?;
        let mut p = Icmpv4Packet::new_unchecked(&mut buf[..len]);
        let (msg_type, code, rest) = match *self {
            Icmpv4Repr::EchoRequest { ident, seq_no, .. } => {
                (8, 0, (u32::from(ident) << 16) | u32::from(seq_no))
            }
            Icmpv4Repr::EchoReply { ident, seq_no, .. } => {
                (0, 0, (u32::from(ident) << 16) | u32::from(seq_no))
            }
            Icmpv4Repr::DestUnreachable {
                code, next_hop_mtu, ..
            } => (3, code, u32::from(next_hop_mtu)),
            Icmpv4Repr::TimeExceeded { code, .. } => (11, code, 0),
            Icmpv4Repr::Other {
                msg_type,
                code,
                rest,
                ..
            } => (msg_type, code, rest),
        };
        p.set_msg_type(Icmpv4Type::from(msg_type));
        p.set_msg_code(code);
        p.set_checksum(0);
        p.set_rest_of_header(rest);
        p.data_mut().copy_from_slice(self.data());
        if fill_checksum {
            p.fill_checksum();
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

    // Echo request, ident 0x1234, seq 1, data "abcd"; checksum computed by hand:
    // 0x0800 + 0x1234 + 0x0001 + 0x6162 + 0x6364 = 0xdefb, and !0xdefb = 0x2104.
    static ECHO: [u8; 12] = [
        0x08, 0x00, 0x21, 0x04, 0x12, 0x34, 0x00, 0x01, b'a', b'b', b'c', b'd',
    ];

    #[test]
    fn echo_getters() {
        assert_eq!(reference_checksum(&ECHO), 0);
        let p = Icmpv4Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Type::EchoRequest);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.checksum(), 0x2104);
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 1);
        assert_eq!(p.rest_of_header(), 0x1234_0001);
        assert_eq!(p.data(), b"abcd");
        assert!(p.verify_checksum());
        assert!(!p.is_frag_needed());
    }

    #[test]
    fn frag_needed_getters_and_setters() {
        let mut buf = [0u8; 36];
        buf[0] = 3;
        buf[1] = unreach::FRAG_NEEDED;
        buf[6..8].copy_from_slice(&1400u16.to_be_bytes());
        let mut p = Icmpv4Packet::new_checked(&mut buf[..]).unwrap();
        assert!(p.is_frag_needed());
        assert_eq!(p.next_hop_mtu(), 1400);
        p.fill_checksum();
        assert_eq!(reference_checksum(&buf), 0);

        let orig = buf;
        let mut p = Icmpv4Packet::new_unchecked(&mut buf[..]);
        p.set_next_hop_mtu(1280);
        assert_eq!(&buf[..6], &orig[..6]);
        assert_eq!(&buf[6..8], &1280u16.to_be_bytes());
        assert_eq!(&buf[8..], &orig[8..]);

        let mut buf = ECHO;
        let mut p = Icmpv4Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(Icmpv4Type::EchoReply);
        p.set_echo_seq_no(2);
        let mut want = ECHO;
        want[0] = 0;
        want[7] = 2;
        assert_eq!(buf, want);
        let mut p = Icmpv4Packet::new_unchecked(&mut buf[..]);
        p.set_msg_code(9);
        p.set_echo_ident(0x1235);
        want[1] = 9;
        want[5] = 0x35;
        assert_eq!(buf, want);
    }

    #[test]
    fn too_short_is_truncated() {
        assert_eq!(
            Icmpv4Packet::new_checked(&ECHO[..7]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn type_registry_round_trips() {
        for b in 0..=255u8 {
            assert_eq!(u8::from(Icmpv4Type::from(b)), b);
        }
        assert!(Icmpv4Type::TimeExceeded.is_error());
        assert!(!Icmpv4Type::EchoReply.is_error());
    }

    #[test]
    fn repr_round_trip() {
        let quoted = [0x45u8; 28];
        let reprs = [
            Icmpv4Repr::EchoRequest {
                ident: 1,
                seq_no: 2,
                data: b"ping",
            },
            Icmpv4Repr::EchoReply {
                ident: 3,
                seq_no: 4,
                data: b"",
            },
            Icmpv4Repr::DestUnreachable {
                code: unreach::FRAG_NEEDED,
                next_hop_mtu: 1450,
                data: &quoted,
            },
            Icmpv4Repr::TimeExceeded {
                code: time_exceeded::TTL,
                data: &quoted,
            },
            Icmpv4Repr::Other {
                msg_type: 12,
                code: 0,
                rest: 0x1400_0000,
                data: &quoted,
            },
        ];
        for repr in reprs {
            let mut buf = [0xa5u8; 64];
            let n = repr.emit(&mut buf, true).unwrap();
            assert_eq!(n, repr.buffer_len());
            assert!(buf[n..].iter().all(|&b| b == 0xa5));
            assert_eq!(reference_checksum(&buf[..n]), 0);
            let p = Icmpv4Packet::new_checked(&buf[..n]).unwrap();
            assert_eq!(Icmpv4Repr::parse(&p, true).unwrap(), repr);
            assert_eq!(repr.emit(&mut buf[..n - 1], true), Err(Error::NoSpace));
        }
        let mut bad = ECHO;
        bad[9] ^= 1;
        let p = Icmpv4Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p, true), Err(Error::BadChecksum));
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = Icmpv4Packet::new_checked(&data[..]) {
                let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.rest_of_header());
                let _ = (p.echo_ident(), p.echo_seq_no(), p.next_hop_mtu(), p.data().len());
                let _ = (p.verify_checksum(), p.is_frag_needed());
                let _ = Icmpv4Repr::parse(&p, true);
                if let Ok(r) = Icmpv4Repr::parse(&p, false) {
                    let mut out = vec![0u8; r.buffer_len()];
                    prop_assert_eq!(r.emit(&mut out, false), Ok(data.len()));
                }
            }
        }
    }
}
