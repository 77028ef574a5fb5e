//! ICMP for IPv6 (RFC 4443; Neighbor Discovery types from RFC 4861).
//!
//! As for ICMPv4: the appliance answers pings to VIPs, steers Packet Too Big errors to the
//! backend that owns the quoted flow, and emits Packet Too Big when encapsulation exceeds the
//! MTU. Unlike ICMPv4 the checksum covers the IPv6 pseudo-header, so fill and verify take the
//! addresses.

use std::net::Ipv6Addr;

use super::checksum;
use super::{Error, IpProtocol, Result, need_space, read_u16, read_u32, write_u16, write_u32};

mod field {
    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: usize = 2;
    pub(super) const REST: usize = 4;
    pub(super) const ECHO_IDENT: usize = 4;
    pub(super) const ECHO_SEQ: usize = 6;
}

/// Length of the ICMPv6 header (type, code, checksum, 32-bit message-specific word).
pub const HEADER_LEN: usize = 8;

/// Destination Unreachable codes (RFC 4443 section 3.1).
pub mod unreach {
    /// No route to destination.
    pub const NO_ROUTE: u8 = 0;
    /// Communication with destination administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 1;
    /// Address unreachable.
    pub const ADDRESS: u8 = 3;
    /// Port unreachable.
    pub const PORT: u8 = 4;
}

/// ICMPv6 message types.
///
/// Registry: IANA "ICMPv6 'type' Numbers",
/// <https://www.iana.org/assignments/icmpv6-parameters/icmpv6-parameters.xhtml>.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv6Type {
    /// 1: Destination Unreachable.
    DestUnreachable,
    /// 2: Packet Too Big.
    PacketTooBig,
    /// 3: Time Exceeded.
    TimeExceeded,
    /// 4: Parameter Problem.
    ParamProblem,
    /// 128: Echo Request.
    EchoRequest,
    /// 129: Echo Reply.
    EchoReply,
    /// 133: Router Solicitation (NDP).
    RouterSolicit,
    /// 134: Router Advertisement (NDP).
    RouterAdvert,
    /// 135: Neighbor Solicitation (NDP).
    NeighborSolicit,
    /// 136: Neighbor Advertisement (NDP).
    NeighborAdvert,
    /// 137: Redirect (NDP).
    Redirect,
    /// Any other type.
    Unknown(u8),
}

impl Icmpv6Type {
    /// True for error messages (types 0-127), which quote the offending packet.
    pub fn is_error(self) -> bool {
        u8::from(self) < 128
    }

    /// True for the Neighbor Discovery types 133-137.
    pub fn is_ndp(self) -> bool {
        matches!(u8::from(self), 133..=137)
    }
}

impl From<u8> for Icmpv6Type {
    fn from(value: u8) -> Self {
        match value {
            1 => Icmpv6Type::DestUnreachable,
            2 => Icmpv6Type::PacketTooBig,
            3 => Icmpv6Type::TimeExceeded,
            4 => Icmpv6Type::ParamProblem,
            128 => Icmpv6Type::EchoRequest,
            129 => Icmpv6Type::EchoReply,
            133 => Icmpv6Type::RouterSolicit,
            134 => Icmpv6Type::RouterAdvert,
            135 => Icmpv6Type::NeighborSolicit,
            136 => Icmpv6Type::NeighborAdvert,
            137 => Icmpv6Type::Redirect,
            other => Icmpv6Type::Unknown(other),
        }
    }
}

impl From<Icmpv6Type> for u8 {
    fn from(value: Icmpv6Type) -> Self {
        match value {
            Icmpv6Type::DestUnreachable => 1,
            Icmpv6Type::PacketTooBig => 2,
            Icmpv6Type::TimeExceeded => 3,
            Icmpv6Type::ParamProblem => 4,
            Icmpv6Type::EchoRequest => 128,
            Icmpv6Type::EchoReply => 129,
            Icmpv6Type::RouterSolicit => 133,
            Icmpv6Type::RouterAdvert => 134,
            Icmpv6Type::NeighborSolicit => 135,
            Icmpv6Type::NeighborAdvert => 136,
            Icmpv6Type::Redirect => 137,
            Icmpv6Type::Unknown(other) => other,
        }
    }
}

/// A view of an ICMPv6 message.
///
/// RFC 4443 section 2.1 (the second word is the MTU of Packet Too Big, the pointer of
/// Parameter Problem, identifier and sequence number of Echo, unused otherwise):
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     Type      |     Code      |          Checksum             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                    Message-specific word                      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                          Message Body ...
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-
/// ```
/// The message extends to the end of the buffer: wrap exactly the upper-layer bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than 8 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv6Packet { buffer }
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
    pub fn msg_type(&self) -> Icmpv6Type {
        Icmpv6Type::from(self.buffer.as_ref()[field::TYPE])
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

    /// The 32-bit message-specific word.
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::REST)
    }

    /// MTU of a Packet Too Big message.
    #[inline]
    pub fn mtu(&self) -> u32 {
        self.rest_of_header()
    }

    /// Pointer of a Parameter Problem message.
    #[inline]
    pub fn pointer(&self) -> u32 {
        self.rest_of_header()
    }

    /// Echo identifier.
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// Echo sequence number.
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_SEQ)
    }

    /// Everything after the 8-byte header: echo data, the quoted packet of an error, or the
    /// NDP target address and options.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// True when the checksum verifies over the IPv6 pseudo-header and the whole message.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let data = self.buffer.as_ref();
        let Ok(len) = u32::try_from(data.len()) else {
            return false;
        };
        let ph = checksum::pseudo_header_v6(src, dst, IpProtocol::Icmpv6.into(), len);
        checksum::finish(checksum::sum(data, ph)) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, value: Icmpv6Type) {
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

    /// Sets the message-specific word.
    #[inline]
    pub fn set_rest_of_header(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::REST, value);
    }

    /// Sets the MTU of a Packet Too Big message.
    #[inline]
    pub fn set_mtu(&mut self, value: u32) {
        self.set_rest_of_header(value);
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

    /// Mutable data after the header.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Computes the checksum over the IPv6 pseudo-header and the whole message. A message
    /// longer than 4 GiB is [`Error::Malformed`].
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) -> Result<()> {
        let len = u32::try_from(self.buffer.as_ref().len()).map_err(|_| Error::Malformed)?;
        self.set_checksum(0);
        let ph = checksum::pseudo_header_v6(src, dst, IpProtocol::Icmpv6.into(), len);
        let c = checksum::finish(checksum::sum(self.buffer.as_ref(), ph));
        self.set_checksum(c);
        Ok(())
    }

    /// Patches the checksum for a pseudo-header address change (NAT of the outer packet).
    #[inline]
    pub fn update_checksum_addr(&mut self, old: Ipv6Addr, new: Ipv6Addr) {
        let c = checksum::update_addr_v6(self.checksum(), old, new);
        self.set_checksum(c);
    }
}

/// An owned ICMPv6 message with borrowed data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv6Repr<'a> {
    /// Type 128.
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data.
        data: &'a [u8],
    },
    /// Type 129.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data.
        data: &'a [u8],
    },
    /// Type 1.
    DestUnreachable {
        /// Code (see [`unreach`]).
        code: u8,
        /// As much of the offending packet as fits in the minimum MTU.
        data: &'a [u8],
    },
    /// Type 2.
    PacketTooBig {
        /// MTU of the next-hop link.
        mtu: u32,
        /// As much of the offending packet as fits in the minimum MTU.
        data: &'a [u8],
    },
    /// Type 3.
    TimeExceeded {
        /// Code: 0 hop limit exceeded, 1 reassembly time exceeded.
        code: u8,
        /// As much of the offending packet as fits in the minimum MTU.
        data: &'a [u8],
    },
    /// Type 4.
    ParamProblem {
        /// Code.
        code: u8,
        /// Offset of the error in the offending packet.
        pointer: u32,
        /// As much of the offending packet as fits in the minimum MTU.
        data: &'a [u8],
    },
    /// Any other type (including NDP), carried verbatim.
    Other {
        /// Type.
        msg_type: u8,
        /// Code.
        code: u8,
        /// Message-specific word.
        rest: u32,
        /// Data after the header.
        data: &'a [u8],
    },
}

impl<'a> Icmpv6Repr<'a> {
    /// Parses a checked message; with `verify` set, a checksum that does not verify against
    /// that pseudo-header is [`Error::BadChecksum`]. Unused words of the typed variants are
    /// dropped.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Icmpv6Packet<&'a T>,
        verify: Option<(Ipv6Addr, Ipv6Addr)>,
    ) -> Result<Self> {
        let data: &'a [u8] = packet.buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if let Some((src, dst)) = verify
            && !packet.verify_checksum(src, dst)
        {
            return Err(Error::BadChecksum);
        }
        let body = &data[HEADER_LEN..];
        let code = packet.msg_code();
        Ok(match packet.msg_type() {
            Icmpv6Type::EchoRequest if code == 0 => Icmpv6Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data: body,
            },
            Icmpv6Type::EchoReply if code == 0 => Icmpv6Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data: body,
            },
            Icmpv6Type::DestUnreachable => Icmpv6Repr::DestUnreachable { code, data: body },
            Icmpv6Type::PacketTooBig if code == 0 => Icmpv6Repr::PacketTooBig {
                mtu: packet.mtu(),
                data: body,
            },
            Icmpv6Type::TimeExceeded => Icmpv6Repr::TimeExceeded { code, data: body },
            Icmpv6Type::ParamProblem => Icmpv6Repr::ParamProblem {
                code,
                pointer: packet.pointer(),
                data: body,
            },
            other => Icmpv6Repr::Other {
                msg_type: other.into(),
                code,
                rest: packet.rest_of_header(),
                data: body,
            },
        })
    }

    fn data(&self) -> &'a [u8] {
        match *self {
            Icmpv6Repr::EchoRequest { data, .. }
            | Icmpv6Repr::EchoReply { data, .. }
            | Icmpv6Repr::DestUnreachable { data, .. }
            | Icmpv6Repr::PacketTooBig { data, .. }
            | Icmpv6Repr::TimeExceeded { data, .. }
            | Icmpv6Repr::ParamProblem { data, .. }
            | Icmpv6Repr::Other { data, .. } => data,
        }
    }

    /// Header plus data length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data().len()
    }

    /// Writes the message at the start of `buf` and returns the bytes written; with
    /// `fill_checksum` the checksum is computed over the pseudo-header of `src`/`dst`.
    pub fn emit(
        &self,
        buf: &mut [u8],
        src: Ipv6Addr,
        dst: Ipv6Addr,
        fill_checksum: bool,
    ) -> Result<usize> {
        let len = self.buffer_len();
        need_space(buf, len)?;
        let echo = |ident: u16, seq_no: u16| (u32::from(ident) << 16) | u32::from(seq_no);
        let (msg_type, code, rest) = match *self {
            Icmpv6Repr::EchoRequest { ident, seq_no, .. } => (128, 0, echo(ident, seq_no)),
            Icmpv6Repr::EchoReply { ident, seq_no, .. } => (129, 0, echo(ident, seq_no)),
            Icmpv6Repr::DestUnreachable { code, .. } => (1, code, 0),
            Icmpv6Repr::PacketTooBig { mtu, .. } => (2, 0, mtu),
            Icmpv6Repr::TimeExceeded { code, .. } => (3, code, 0),
            Icmpv6Repr::ParamProblem { code, pointer, .. } => (4, code, pointer),
            Icmpv6Repr::Other {
                msg_type,
                code,
                rest,
                ..
            } => (msg_type, code, rest),
        };
        let mut p = Icmpv6Packet::new_unchecked(&mut buf[..len]);
        p.set_msg_type(Icmpv6Type::from(msg_type));
        p.set_msg_code(code);
        p.set_checksum(0);
        p.set_rest_of_header(rest);
        p.data_mut().copy_from_slice(self.data());
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

    fn addrs() -> (Ipv6Addr, Ipv6Addr) {
        ("fe80::1".parse().unwrap(), "ff02::1".parse().unwrap())
    }

    fn with_pseudo(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&src.octets());
        v.extend_from_slice(&dst.octets());
        v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        v.extend_from_slice(&[0, 0, 0, 58]);
        v.extend_from_slice(msg);
        v
    }

    #[test]
    fn packet_too_big_getters_and_checksum() {
        let (src, dst) = addrs();
        // Packet Too Big, MTU 1280, quoting 8 bytes of an IPv6 header.
        let mut msg = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00, 0x60, 0, 0, 0, 0, 8, 17, 64];
        let c = reference_checksum(&with_pseudo(src, dst, &msg));
        msg[2..4].copy_from_slice(&c.to_be_bytes());
        let p = Icmpv6Packet::new_checked(&msg[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv6Type::PacketTooBig);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.checksum(), c);
        assert_eq!(p.mtu(), 1280);
        assert_eq!(p.data(), &[0x60, 0, 0, 0, 0, 8, 17, 64]);
        assert!(p.verify_checksum(src, dst));
        assert!(!p.verify_checksum(src, Ipv6Addr::LOCALHOST));

        let orig = msg.clone();
        let mut p = Icmpv6Packet::new_unchecked(&mut msg[..]);
        p.set_checksum(0);
        p.fill_checksum(src, dst).unwrap();
        assert_eq!(msg, orig);
        let mut p = Icmpv6Packet::new_unchecked(&mut msg[..]);
        p.set_mtu(1500);
        assert_eq!(&msg[4..8], &[0, 0, 0x05, 0xdc]);
        assert_eq!(&msg[..4], &orig[..4]);
        assert_eq!(&msg[8..], &orig[8..]);
    }

    #[test]
    fn echo_setters_touch_only_their_bytes() {
        let orig = [128u8, 0, 0xaa, 0xbb, 0, 7, 0, 9, 1, 2];
        let mut buf = orig;
        let mut p = Icmpv6Packet::new_checked(&mut buf[..]).unwrap();
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (7, 9));
        p.set_msg_type(Icmpv6Type::EchoReply);
        p.set_echo_ident(0x0107);
        p.set_echo_seq_no(0x0009);
        p.set_msg_code(0);
        p.data_mut()[1] = 3;
        assert_eq!(buf, [129, 0, 0xaa, 0xbb, 1, 7, 0, 9, 1, 3]);
        assert_eq!(
            Icmpv6Packet::new_checked(&orig[..7]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn nat_address_update_matches_full() {
        let (src, dst) = addrs();
        let repr = Icmpv6Repr::EchoRequest {
            ident: 1,
            seq_no: 1,
            data: b"x",
        };
        let mut buf = [0u8; 9];
        repr.emit(&mut buf, src, dst, true).unwrap();
        let new_dst: Ipv6Addr = "2001:db8::99".parse().unwrap();
        let mut p = Icmpv6Packet::new_unchecked(&mut buf[..]);
        p.update_checksum_addr(dst, new_dst);
        assert!(p.verify_checksum(src, new_dst));
    }

    #[test]
    fn type_registry_round_trips() {
        for b in 0..=255u8 {
            assert_eq!(u8::from(Icmpv6Type::from(b)), b);
        }
        assert!(Icmpv6Type::PacketTooBig.is_error());
        assert!(!Icmpv6Type::EchoRequest.is_error());
        assert!(Icmpv6Type::NeighborSolicit.is_ndp());
        assert!(!Icmpv6Type::EchoReply.is_ndp());
    }

    #[test]
    fn repr_round_trip() {
        let (src, dst) = addrs();
        let quoted = [0x60u8; 48];
        let reprs = [
            Icmpv6Repr::EchoRequest {
                ident: 1,
                seq_no: 2,
                data: b"ping",
            },
            Icmpv6Repr::EchoReply {
                ident: 3,
                seq_no: 4,
                data: b"",
            },
            Icmpv6Repr::DestUnreachable {
                code: unreach::PORT,
                data: &quoted,
            },
            Icmpv6Repr::PacketTooBig {
                mtu: 1280,
                data: &quoted,
            },
            Icmpv6Repr::TimeExceeded {
                code: 0,
                data: &quoted,
            },
            Icmpv6Repr::ParamProblem {
                code: 1,
                pointer: 6,
                data: &quoted,
            },
            Icmpv6Repr::Other {
                msg_type: 135,
                code: 0,
                rest: 0,
                data: &quoted[..16],
            },
        ];
        for repr in reprs {
            let mut buf = [0xa5u8; 64];
            let n = repr.emit(&mut buf, src, dst, true).unwrap();
            assert_eq!(n, repr.buffer_len());
            assert!(buf[n..].iter().all(|&b| b == 0xa5));
            assert_eq!(reference_checksum(&with_pseudo(src, dst, &buf[..n])), 0);
            let p = Icmpv6Packet::new_checked(&buf[..n]).unwrap();
            assert_eq!(Icmpv6Repr::parse(&p, Some((src, dst))).unwrap(), repr);
            assert_eq!(
                Icmpv6Repr::parse(&p, Some((dst, Ipv6Addr::LOCALHOST))),
                Err(Error::BadChecksum)
            );
            assert_eq!(
                repr.emit(&mut buf[..n - 1], src, dst, true),
                Err(Error::NoSpace)
            );
        }
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            let (src, dst) = addrs();
            if let Ok(p) = Icmpv6Packet::new_checked(&data[..]) {
                let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.rest_of_header());
                let _ = (p.mtu(), p.pointer(), p.echo_ident(), p.echo_seq_no(), p.data().len());
                let _ = p.verify_checksum(src, dst);
                let _ = Icmpv6Repr::parse(&p, Some((src, dst)));
                if let Ok(r) = Icmpv6Repr::parse(&p, None) {
                    let mut out = vec![0u8; r.buffer_len()];
                    prop_assert_eq!(r.emit(&mut out, src, dst, false), Ok(data.len()));
                }
            }
        }
    }
}
