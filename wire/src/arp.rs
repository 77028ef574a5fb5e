//! ARP for Ethernet/IPv4 (RFC 826).
//!
//! The kernel answers ARP for the appliance's own addresses, but the datapath must recognise
//! ARP frames to pass them up, and lab tests build requests and replies. Only the
//! Ethernet/IPv4 pairing exists on Sluice's links, so [`ArpPacket::new_checked`] rejects any
//! other hardware or protocol type as [`Error::Unsupported`].

use std::net::Ipv4Addr;

use super::ethernet::MacAddr;
use super::{Error, Result, need_space, read_u16, write_u16};

mod field {
    use core::ops::Range;

    pub(super) const HTYPE: usize = 0;
    pub(super) const PTYPE: usize = 2;
    pub(super) const HLEN: usize = 4;
    pub(super) const PLEN: usize = 5;
    pub(super) const OPER: usize = 6;
    pub(super) const SHA: Range<usize> = 8..14;
    pub(super) const SPA: Range<usize> = 14..18;
    pub(super) const THA: Range<usize> = 18..24;
    pub(super) const TPA: Range<usize> = 24..28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// ARP operation codes.
///
/// Registry: IANA "Address Resolution Protocol (ARP) Parameters", Operation Codes,
/// <https://www.iana.org/assignments/arp-parameters/arp-parameters.xhtml>.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOperation {
    /// 1: REQUEST.
    Request,
    /// 2: REPLY.
    Reply,
    /// Any other code.
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    fn from(value: u16) -> Self {
        match value {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            other => ArpOperation::Unknown(other),
        }
    }
}

impl From<ArpOperation> for u16 {
    fn from(value: ArpOperation) -> Self {
        match value {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(other) => other,
        }
    }
}

/// A view of an ARP packet for Ethernet hardware and IPv4 protocol addresses.
///
/// RFC 826 (with the Ethernet/IPv4 sizes filled in):
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |      Hardware Type (1)        |     Protocol Type (0x0800)    |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  HLEN (6)     |   PLEN (4)    |          Operation            |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                Sender Hardware Address (6 octets)             |
/// +                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                               | Sender Protocol Address (4)   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
/// |                               |                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
/// |                Target Hardware Address (6 octets)             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                Target Protocol Address (4 octets)             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than 28 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// Wraps untrusted bytes after checking the length (28 bytes; Ethernet padding after it
    /// is allowed) and that the packet is Ethernet/IPv4 (else [`Error::Unsupported`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        if packet.buffer.as_ref().len() < PACKET_LEN {
            return Err(Error::Truncated);
        }
        if packet.hardware_type() != 1
            || packet.protocol_type() != 0x0800
            || packet.hardware_len() != 6
            || packet.protocol_len() != 4
        {
            return Err(Error::Unsupported);
        }
        Ok(packet)
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Hardware type (1 = Ethernet).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::HTYPE)
    }

    /// Protocol type (0x0800 = IPv4).
    #[inline]
    pub fn protocol_type(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::PTYPE)
    }

    /// Hardware address length.
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length.
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Operation.
    #[inline]
    pub fn operation(&self) -> ArpOperation {
        ArpOperation::from(read_u16(self.buffer.as_ref(), field::OPER))
    }

    /// Sender hardware address.
    #[inline]
    pub fn sender_hardware_addr(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SHA]);
        MacAddr(a)
    }

    /// Sender protocol address.
    #[inline]
    pub fn sender_protocol_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SPA];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Target hardware address.
    #[inline]
    pub fn target_hardware_addr(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::THA]);
        MacAddr(a)
    }

    /// Target protocol address.
    #[inline]
    pub fn target_protocol_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::TPA];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Writes the fixed Ethernet/IPv4 header: hardware type 1, protocol 0x0800, lengths 6
    /// and 4.
    #[inline]
    pub fn set_ethernet_ipv4(&mut self) {
        let b = self.buffer.as_mut();
        write_u16(b, field::HTYPE, 1);
        write_u16(b, field::PTYPE, 0x0800);
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
    }

    /// Sets the operation.
    #[inline]
    pub fn set_operation(&mut self, value: ArpOperation) {
        write_u16(self.buffer.as_mut(), field::OPER, value.into());
    }

    /// Sets the sender hardware address.
    #[inline]
    pub fn set_sender_hardware_addr(&mut self, value: MacAddr) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&value.0);
    }

    /// Sets the sender protocol address.
    #[inline]
    pub fn set_sender_protocol_addr(&mut self, value: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&value.octets());
    }

    /// Sets the target hardware address.
    #[inline]
    pub fn set_target_hardware_addr(&mut self, value: MacAddr) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&value.0);
    }

    /// Sets the target protocol address.
    #[inline]
    pub fn set_target_protocol_addr(&mut self, value: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&value.octets());
    }
}

/// An owned Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    /// Operation.
    pub operation: ArpOperation,
    /// Sender MAC.
    pub source_hardware_addr: MacAddr,
    /// Sender IPv4 address.
    pub source_protocol_addr: Ipv4Addr,
    /// Target MAC (zero in a request).
    pub target_hardware_addr: MacAddr,
    /// Target IPv4 address.
    pub target_protocol_addr: Ipv4Addr,
}

impl ArpRepr {
    /// Parses a packet that passed [`ArpPacket::new_checked`].
    pub fn parse<T: AsRef<[u8]>>(packet: &ArpPacket<T>) -> Result<Self> {
        if packet.buffer.as_ref().len() < PACKET_LEN {
            return Err(Error::Truncated);
        }
        Ok(ArpRepr {
            operation: packet.operation(),
            source_hardware_addr: packet.sender_hardware_addr(),
            source_protocol_addr: packet.sender_protocol_addr(),
            target_hardware_addr: packet.target_hardware_addr(),
            target_protocol_addr: packet.target_protocol_addr(),
        })
    }

    /// Length on the wire (28).
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes the packet at the start of `buf` and returns 28.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        need_space(buf, PACKET_LEN)?;
        let mut p = ArpPacket::new_unchecked(&mut buf[..PACKET_LEN]);
        p.set_ethernet_ipv4();
        p.set_operation(self.operation);
        p.set_sender_hardware_addr(self.source_hardware_addr);
        p.set_sender_protocol_addr(self.source_protocol_addr);
        p.set_target_hardware_addr(self.target_hardware_addr);
        p.set_target_protocol_addr(self.target_protocol_addr);
        Ok(PACKET_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // "who-has 10.0.0.1 tell 10.0.0.2" from 02:00:00:00:00:02, plus 2 bytes of padding.
    static REQUEST: [u8; 30] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 10, 0,
        0, 2, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1, 0, 0,
    ];

    #[test]
    fn getters() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(p.hardware_type(), 1);
        assert_eq!(p.protocol_type(), 0x0800);
        assert_eq!((p.hardware_len(), p.protocol_len()), (6, 4));
        assert_eq!(p.operation(), ArpOperation::Request);
        assert_eq!(p.sender_hardware_addr(), MacAddr([2, 0, 0, 0, 0, 2]));
        assert_eq!(p.sender_protocol_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.target_hardware_addr(), MacAddr::ZERO);
        assert_eq!(p.target_protocol_addr(), Ipv4Addr::new(10, 0, 0, 1));
    }

    #[test]
    fn rejects_short_and_foreign() {
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..27]).err(),
            Some(Error::Truncated)
        );
        for byte in [1usize, 3, 4, 5] {
            let mut bad = REQUEST;
            bad[byte] ^= 0x10;
            assert_eq!(
                ArpPacket::new_checked(&bad[..]).err(),
                Some(Error::Unsupported),
                "byte {byte}"
            );
        }
    }

    #[test]
    fn setters_touch_only_their_bytes() {
        type Set = fn(&mut ArpPacket<&mut [u8]>);
        let cases: [(Set, &[usize]); 5] = [
            (|p| p.set_operation(ArpOperation::Reply), &[7]),
            (
                |p| p.set_sender_hardware_addr(MacAddr([3, 0, 0, 0, 0, 2])),
                &[8],
            ),
            (
                |p| p.set_sender_protocol_addr(Ipv4Addr::new(10, 0, 0, 3)),
                &[17],
            ),
            (
                |p| p.set_target_hardware_addr(MacAddr([0, 0, 0, 0, 0, 1])),
                &[23],
            ),
            (
                |p| p.set_target_protocol_addr(Ipv4Addr::new(11, 0, 0, 1)),
                &[24],
            ),
        ];
        for (i, (set, bytes)) in cases.iter().enumerate() {
            let mut buf = REQUEST;
            set(&mut ArpPacket::new_unchecked(&mut buf[..]));
            for (j, (a, b)) in buf.iter().zip(REQUEST.iter()).enumerate() {
                assert_eq!(a != b, bytes.contains(&j), "case {i} byte {j}");
            }
        }
    }

    #[test]
    fn repr_round_trip() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        let repr = ArpRepr::parse(&p).unwrap();
        let mut buf = [0xa5u8; 30];
        assert_eq!(repr.emit(&mut buf).unwrap(), 28);
        assert_eq!(&buf[..28], &REQUEST[..28]);
        assert_eq!(&buf[28..], &[0xa5, 0xa5]);
        let p = ArpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p).unwrap(), repr);
        assert_eq!(repr.emit(&mut buf[..27]), Err(Error::NoSpace));
    }

    proptest! {
        #[test]
        fn never_panics(mut data in proptest::collection::vec(any::<u8>(), 0..40),
                        force in any::<bool>()) {
            if force && data.len() >= 6 {
                data[..6].copy_from_slice(&REQUEST[..6]);
            }
            if let Ok(p) = ArpPacket::new_checked(&data[..]) {
                let _ = (p.operation(), p.sender_hardware_addr(), p.sender_protocol_addr());
                let _ = (p.target_hardware_addr(), p.target_protocol_addr());
                prop_assert!(ArpRepr::parse(&p).is_ok());
            }
        }
    }
}
