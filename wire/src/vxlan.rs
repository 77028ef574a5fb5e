//! VXLAN headers (RFC 7348).
//!
//! Tunnel mode can deliver client packets to backends inside VXLAN, and the appliance may sit
//! behind a VXLAN overlay itself; both need the 8-byte header to read and write the VNI.

use super::{Error, Result, need_space, read_u32, write_u32};

mod field {
    pub(super) const FLAGS: usize = 0;
    pub(super) const VNI: usize = 4;
}

/// Length of the VXLAN header.
pub const HEADER_LEN: usize = 8;
/// IANA-assigned UDP destination port for VXLAN.
pub const DEFAULT_PORT: u16 = 4789;
/// The I flag: the VNI field is valid (RFC 7348 section 5).
pub const FLAG_I: u8 = 0x08;

/// A view of a VXLAN header and the inner Ethernet frame after it.
///
/// RFC 7348 section 5:
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |R|R|R|R|I|R|R|R|            Reserved                           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                VXLAN Network Identifier (VNI) |   Reserved    |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VxlanHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VxlanHeader<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than 8 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        VxlanHeader { buffer }
    }

    /// Wraps untrusted bytes after checking the 8-byte header fits. The I flag is not
    /// checked here: a receiver decides with [`VxlanHeader::has_vni`] whether to drop.
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

    /// The flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// True when the I flag is set, i.e. the VNI is valid.
    #[inline]
    pub fn has_vni(&self) -> bool {
        self.flags() & FLAG_I != 0
    }

    /// The 24-bit VXLAN Network Identifier.
    #[inline]
    pub fn vni(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::VNI) >> 8
    }

    /// The inner Ethernet frame.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VxlanHeader<T> {
    /// Writes a fresh header: I flag set, reserved bits zero, the given VNI (low 24 bits).
    #[inline]
    pub fn emit(&mut self, vni: u32) {
        let b = self.buffer.as_mut();
        write_u32(b, field::FLAGS, u32::from(FLAG_I) << 24);
        write_u32(b, field::VNI, (vni & 0x00ff_ffff) << 8);
    }

    /// Sets the flags byte.
    #[inline]
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    /// Sets the VNI (low 24 bits of `value`), keeping the reserved byte after it.
    #[inline]
    pub fn set_vni(&mut self, value: u32) {
        let old = read_u32(self.buffer.as_ref(), field::VNI);
        write_u32(
            self.buffer.as_mut(),
            field::VNI,
            ((value & 0x00ff_ffff) << 8) | (old & 0xff),
        );
    }

    /// Mutable inner frame.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// Writes a VXLAN header with the I flag and `vni` at the start of `buf`; returns 8.
pub fn emit(buf: &mut [u8], vni: u32) -> Result<usize> {
    need_space(buf, HEADER_LEN)?;
    VxlanHeader::new_unchecked(&mut buf[..HEADER_LEN]).emit(vni);
    Ok(HEADER_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    static HEADER: [u8; 10] = [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0x00, 0xaa, 0xbb];

    #[test]
    fn getters() {
        let h = VxlanHeader::new_checked(&HEADER[..]).unwrap();
        assert_eq!(h.flags(), 0x08);
        assert!(h.has_vni());
        assert_eq!(h.vni(), 0x123456);
        assert_eq!(h.payload(), &[0xaa, 0xbb]);
        assert_eq!(
            VxlanHeader::new_checked(&HEADER[..7]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn setters_touch_only_their_bytes() {
        let mut buf = HEADER;
        buf[7] = 0x77;
        let mut h = VxlanHeader::new_unchecked(&mut buf[..]);
        h.set_vni(0x123457);
        assert_eq!(buf, [0x08, 0, 0, 0, 0x12, 0x34, 0x57, 0x77, 0xaa, 0xbb]);
        let mut h = VxlanHeader::new_unchecked(&mut buf[..]);
        h.set_flags(0);
        assert!(!h.has_vni());
        assert_eq!(buf[0], 0);
        assert_eq!(&buf[1..], &[0, 0, 0, 0x12, 0x34, 0x57, 0x77, 0xaa, 0xbb]);
    }

    #[test]
    fn emit_writes_a_clean_header() {
        let mut buf = [0xa5u8; 10];
        assert_eq!(emit(&mut buf, 0x0100_0042).unwrap(), 8);
        assert_eq!(buf, [0x08, 0, 0, 0, 0, 0, 0x42, 0, 0xa5, 0xa5]);
        let h = VxlanHeader::new_checked(&buf[..]).unwrap();
        assert_eq!(h.vni(), 0x42);
        assert_eq!(emit(&mut buf[..7], 1), Err(Error::NoSpace));
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..16)) {
            if let Ok(h) = VxlanHeader::new_checked(&data[..]) {
                let _ = (h.flags(), h.has_vni(), h.vni(), h.payload().len());
            }
        }
    }
}
