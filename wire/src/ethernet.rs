//! Ethernet II frames and IEEE 802.1Q / 802.1ad VLAN tags.
//!
//! Every packet the datapath sees arrives as an Ethernet frame, possibly tagged once (802.1Q)
//! or twice (802.1ad QinQ) on trunk ports. [`l3_offset`] finds the network header behind at
//! most two tags so the rest of the packet core never has to think about tagging.

use core::fmt;

use super::{Error, Result, need_space, read_u16, write_u16};

/// A 48-bit IEEE MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// 00:00:00:00:00:00, used as "unknown" in ARP requests.
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// The address as bytes.
    pub const fn octets(&self) -> [u8; 6] {
        self.0
    }

    /// True for ff:ff:ff:ff:ff:ff.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// True when the I/G bit is set (multicast, including broadcast).
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// True for a unicast address (I/G bit clear).
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(value: [u8; 6]) -> Self {
        MacAddr(value)
    }
}

/// EtherType values Sluice distinguishes.
///
/// Registry: IEEE "EtherType" public listing, mirrored by IANA "IEEE 802 Numbers",
/// <https://www.iana.org/assignments/ieee-802-numbers/ieee-802-numbers.xhtml>.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// 0x0800: Internet Protocol version 4.
    Ipv4,
    /// 0x0806: Address Resolution Protocol.
    Arp,
    /// 0x8100: IEEE 802.1Q customer VLAN tag.
    Vlan,
    /// 0x88a8: IEEE 802.1ad service VLAN tag (QinQ outer tag).
    QinQ,
    /// 0x86dd: Internet Protocol version 6.
    Ipv6,
    /// Anything else (including 802.3 length values below 0x0600).
    Unknown(u16),
}

impl EtherType {
    /// True for the two tag protocol identifiers a VLAN walker must step over.
    #[inline]
    pub fn is_vlan(self) -> bool {
        matches!(self, EtherType::Vlan | EtherType::QinQ)
    }
}

impl From<u16> for EtherType {
    #[inline]
    fn from(value: u16) -> Self {
        match value {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x8100 => EtherType::Vlan,
            0x88a8 => EtherType::QinQ,
            0x86dd => EtherType::Ipv6,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    #[inline]
    fn from(value: EtherType) -> Self {
        match value {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::QinQ => 0x88a8,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Unknown(other) => other,
        }
    }
}

mod field {
    use core::ops::{Range, RangeFrom};

    pub(super) const DST: Range<usize> = 0..6;
    pub(super) const SRC: Range<usize> = 6..12;
    pub(super) const ETHERTYPE: usize = 12;
    pub(super) const PAYLOAD: RangeFrom<usize> = 14..;

    pub(super) const TCI: usize = 0;
    pub(super) const INNER_TYPE: usize = 2;
    pub(super) const TAG_PAYLOAD: RangeFrom<usize> = 4..;
}

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q/802.1ad tag.
pub const VLAN_TAG_LEN: usize = 4;
/// How many stacked VLAN tags [`l3_offset`] steps over (802.1ad QinQ).
pub const MAX_VLAN_TAGS: usize = 2;

/// A view of an Ethernet II frame (IEEE 802.3 clause 3, DIX framing; no FCS).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                  Destination MAC (6 octets)                   |
/// +                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                               |                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
/// |                     Source MAC (6 octets)                     |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           EtherType           |     Payload ...
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than 14 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer after checking it holds at least a 14-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the buffer holds the whole header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC address.
    #[inline]
    pub fn dst(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        MacAddr(a)
    }

    /// Source MAC address.
    #[inline]
    pub fn src(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        MacAddr(a)
    }

    /// The EtherType (or the outer tag protocol identifier of a tagged frame).
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(read_u16(self.buffer.as_ref(), field::ETHERTYPE))
    }

    /// Everything after the 14-byte header (a VLAN tag, when the frame is tagged).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_dst(&mut self, value: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&value.0);
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_src(&mut self, value: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&value.0);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, value: EtherType) {
        write_u16(self.buffer.as_mut(), field::ETHERTYPE, value.into());
    }

    /// Mutable access to everything after the 14-byte header.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// A view of one IEEE 802.1Q tag, starting right after the tag protocol identifier (0x8100 or
/// 0x88a8) that announced it.
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | PCP |D|         VID           |     Inner EtherType / TPID    |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than 4 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        VlanTag { buffer }
    }

    /// Wraps a buffer after checking it holds the 4-byte tag.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < VLAN_TAG_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole Tag Control Information word (PCP, DEI, VID).
    #[inline]
    pub fn tci(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::TCI)
    }

    /// Priority Code Point (3 bits).
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop Eligible Indicator.
    #[inline]
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN identifier (12 bits).
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// The EtherType (or next tag protocol identifier) after this tag.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(read_u16(self.buffer.as_ref(), field::INNER_TYPE))
    }

    /// Everything after the tag.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::TAG_PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    /// Sets the whole TCI word.
    #[inline]
    pub fn set_tci(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::TCI, value);
    }

    /// Sets the priority (only the low 3 bits of `value` are used).
    #[inline]
    pub fn set_pcp(&mut self, value: u8) {
        let tci = (self.tci() & 0x1fff) | (u16::from(value & 0x7) << 13);
        self.set_tci(tci);
    }

    /// Sets the Drop Eligible Indicator.
    #[inline]
    pub fn set_dei(&mut self, value: bool) {
        let tci = (self.tci() & !0x1000) | if value { 0x1000 } else { 0 };
        self.set_tci(tci);
    }

    /// Sets the VLAN identifier (only the low 12 bits of `value` are used).
    #[inline]
    pub fn set_vid(&mut self, value: u16) {
        let tci = (self.tci() & 0xf000) | (value & 0x0fff);
        self.set_tci(tci);
    }

    /// Sets the EtherType after this tag.
    #[inline]
    pub fn set_ethertype(&mut self, value: EtherType) {
        write_u16(self.buffer.as_mut(), field::INNER_TYPE, value.into());
    }

    /// Mutable access to everything after the tag.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::TAG_PAYLOAD]
    }
}

/// Finds the network-layer header of `frame`, stepping over at most [`MAX_VLAN_TAGS`] tags.
///
/// Returns the offset of the L3 header from the start of the frame, its EtherType, and the VID
/// of the outermost tag (the VLAN the appliance's port sees; `None` for an untagged frame).
/// A third tag is [`Error::TooManyHeaders`]; a tag cut short is [`Error::Truncated`].
#[inline]
pub fn l3_offset<T: AsRef<[u8]>>(
    frame: &EthernetFrame<T>,
) -> Result<(usize, EtherType, Option<u16>)> {
    let data = frame.buffer.as_ref();
    if data.len() < HEADER_LEN {
        return Err(Error::Truncated);
    }
    let mut offset = HEADER_LEN;
    let mut ethertype = frame.ethertype();
    let mut vid = None;
    let mut tags = 0;
    while ethertype.is_vlan() {
        if tags == MAX_VLAN_TAGS {
            return Err(Error::TooManyHeaders);
        }
        let Some(tag) = data.get(offset..offset + VLAN_TAG_LEN) else {
            return Err(Error::Truncated);
        };
        let tag = VlanTag::new_unchecked(tag);
        if vid.is_none() {
            vid = Some(tag.vid());
        }
        ethertype = tag.ethertype();
        offset += VLAN_TAG_LEN;
        tags += 1;
    }
    Ok((offset, ethertype, vid))
}

/// An owned Ethernet header, optionally with one 802.1Q tag, for building and parsing frames
/// off the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source MAC.
    pub src: MacAddr,
    /// Destination MAC.
    pub dst: MacAddr,
    /// The full 802.1Q TCI (PCP, DEI, VID) of a single customer tag, if tagged.
    pub vlan_tci: Option<u16>,
    /// EtherType of the payload (after the tag, when tagged).
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Parses the header and, if present, one 802.1Q (0x8100) tag. A frame with a second tag
    /// or an 802.1ad outer tag is reported with `ethertype` set to that tag's identifier.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<Self> {
        frame.check_len()?;
        let mut repr = EthernetRepr {
            src: frame.src(),
            dst: frame.dst(),
            vlan_tci: None,
            ethertype: frame.ethertype(),
        };
        if repr.ethertype == EtherType::Vlan {
            let tag = VlanTag::new_checked(frame.payload())?;
            repr.vlan_tci = Some(tag.tci());
            repr.ethertype = tag.ethertype();
        }
        Ok(repr)
    }

    /// Header length on the wire: 14, or 18 with a tag.
    pub const fn header_len(&self) -> usize {
        if self.vlan_tci.is_some() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header (and tag) at the start of `buf`; returns the bytes written, which is
    /// where the payload starts.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        need_space(buf, self.header_len())?;
        let mut frame = EthernetFrame::new_unchecked(&mut *buf);
        frame.set_dst(self.dst);
        frame.set_src(self.src);
        match self.vlan_tci {
            None => frame.set_ethertype(self.ethertype),
            Some(tci) => {
                frame.set_ethertype(EtherType::Vlan);
                let mut tag = VlanTag::new_unchecked(frame.payload_mut());
                tag.set_tci(tci);
                tag.set_ethertype(self.ethertype);
            }
        }
        Ok(self.header_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // dst 02:00:00:00:00:02, src 02:00:00:00:00:01, 802.1ad outer VID 100, 802.1Q inner VID 7
    // with PCP 5, then IPv4.
    static QINQ_FRAME: [u8; 26] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x88, 0xa8, 0x00,
        0x64, 0x81, 0x00, 0xa0, 0x07, 0x08, 0x00, 0x45, 0x00, 0x00, 0x14,
    ];

    #[test]
    fn getters() {
        let f = EthernetFrame::new_checked(&QINQ_FRAME[..]).unwrap();
        assert_eq!(f.dst(), MacAddr([2, 0, 0, 0, 0, 2]));
        assert_eq!(f.src(), MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(f.ethertype(), EtherType::QinQ);
        assert_eq!(f.payload().len(), 12);
        assert_eq!(f.src().to_string(), "02:00:00:00:00:01");
        let outer = VlanTag::new_checked(f.payload()).unwrap();
        assert_eq!(outer.vid(), 100);
        assert_eq!(outer.ethertype(), EtherType::Vlan);
        let inner = VlanTag::new_checked(outer.payload()).unwrap();
        assert_eq!((inner.pcp(), inner.dei(), inner.vid()), (5, false, 7));
        assert_eq!(inner.ethertype(), EtherType::Ipv4);
    }

    #[test]
    fn l3_offset_walks_tags() {
        let f = EthernetFrame::new_checked(&QINQ_FRAME[..]).unwrap();
        assert_eq!(l3_offset(&f).unwrap(), (22, EtherType::Ipv4, Some(100)));

        let mut single = QINQ_FRAME;
        single[12..14].copy_from_slice(&[0x08, 0x00]);
        let f = EthernetFrame::new_checked(&single[..]).unwrap();
        assert_eq!(l3_offset(&f).unwrap(), (14, EtherType::Ipv4, None));

        let mut triple = QINQ_FRAME;
        triple[20..22].copy_from_slice(&[0x81, 0x00]);
        let f = EthernetFrame::new_checked(&triple[..]).unwrap();
        assert_eq!(l3_offset(&f), Err(Error::TooManyHeaders));

        let f = EthernetFrame::new_checked(&QINQ_FRAME[..17]).unwrap();
        assert_eq!(l3_offset(&f), Err(Error::Truncated));
    }

    #[test]
    fn setters_touch_only_their_bytes() {
        let mut buf = QINQ_FRAME;
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        f.set_dst(MacAddr([0xaa; 6]));
        f.set_src(MacAddr([0xbb; 6]));
        f.set_ethertype(EtherType::Ipv6);
        let mut want = QINQ_FRAME;
        want[0..6].fill(0xaa);
        want[6..12].fill(0xbb);
        want[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(buf, want);

        let mut buf = QINQ_FRAME;
        let mut tag = VlanTag::new_unchecked(&mut buf[18..22]);
        tag.set_vid(0xabc);
        assert_eq!(&buf[18..20], &[0xaa, 0xbc]);
        let mut tag = VlanTag::new_unchecked(&mut buf[18..22]);
        tag.set_pcp(1);
        tag.set_dei(true);
        tag.set_ethertype(EtherType::Arp);
        assert_eq!(&buf[18..22], &[0x3a, 0xbc, 0x08, 0x06]);
        assert_eq!(&buf[..18], &QINQ_FRAME[..18]);
        assert_eq!(&buf[22..], &QINQ_FRAME[22..]);
    }

    #[test]
    fn too_short_is_truncated() {
        assert_eq!(
            EthernetFrame::new_checked(&QINQ_FRAME[..13]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            VlanTag::new_checked(&[0u8; 3][..]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn repr_round_trip() {
        for vlan_tci in [None, Some(0x2064)] {
            let repr = EthernetRepr {
                src: MacAddr([2, 0, 0, 0, 0, 1]),
                dst: MacAddr::BROADCAST,
                vlan_tci,
                ethertype: EtherType::Ipv6,
            };
            let mut buf = [0xa5u8; 32];
            let n = repr.emit(&mut buf).unwrap();
            assert_eq!(n, repr.header_len());
            assert!(buf[n..].iter().all(|&b| b == 0xa5));
            let f = EthernetFrame::new_checked(&buf[..]).unwrap();
            assert_eq!(EthernetRepr::parse(&f).unwrap(), repr);
        }
        let repr = EthernetRepr {
            src: MacAddr::ZERO,
            dst: MacAddr::ZERO,
            vlan_tci: Some(1),
            ethertype: EtherType::Ipv4,
        };
        assert_eq!(repr.emit(&mut [0u8; 17]), Err(Error::NoSpace));
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(f) = EthernetFrame::new_checked(&data[..]) {
                let _ = (f.dst(), f.src(), f.ethertype(), f.payload().len());
                let _ = l3_offset(&f);
                let _ = EthernetRepr::parse(&f);
            }
            if let Ok(t) = VlanTag::new_checked(&data[..]) {
                let _ = (t.tci(), t.pcp(), t.dei(), t.vid(), t.ethertype(), t.payload().len());
            }
        }

        #[test]
        fn tagged_frames_find_l3(vids in proptest::collection::vec(0u16..4096, 0..=2),
                                 tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut data = vec![0u8; 12];
            for (i, vid) in vids.iter().enumerate() {
                let tpid: u16 = if i == 0 && vids.len() == 2 { 0x88a8 } else { 0x8100 };
                data.extend_from_slice(&tpid.to_be_bytes());
                data.extend_from_slice(&vid.to_be_bytes());
            }
            data.extend_from_slice(&0x86ddu16.to_be_bytes());
            data.extend_from_slice(&tail);
            let f = EthernetFrame::new_checked(&data[..]).unwrap();
            let (off, et, vid) = l3_offset(&f).unwrap();
            prop_assert_eq!(off, 14 + 4 * vids.len());
            prop_assert_eq!(et, EtherType::Ipv6);
            prop_assert_eq!(vid, vids.first().copied());
        }
    }
}
