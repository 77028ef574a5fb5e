//! Generic UDP Encapsulation headers (draft-ietf-intarea-gue).
//!
//! GUE is the tunnel format katran-style load balancers use to reach backends across routed
//! networks: unlike IPIP it is UDP, so NIC receive-side scaling spreads the flows and
//! middleboxes pass it. Most deployments use variant 1, which is no header at all: the inner
//! IPv4 or IPv6 packet follows the UDP header directly, and its first nibble (4 = 0100 or
//! 6 = 0110) doubles as the GUE version field `01`. Variant 0 carries a 4-byte header and
//! optional extension fields.

use super::{Error, IpProtocol, Result, read_u16};

mod field {
    pub(super) const VER_C_HLEN: usize = 0;
    pub(super) const PROTO: usize = 1;
    pub(super) const FLAGS: usize = 2;
}

/// Length of the variant 0 base header.
pub const HEADER_LEN: usize = 4;
/// The UDP port Sluice uses for GUE by default (GUE has no IANA-assigned port).
pub const DEFAULT_PORT: u16 = 6080;

/// A view of a GUE payload: a variant 0 header and what follows it, or a variant 1 direct IP
/// packet.
///
/// draft-ietf-intarea-gue section 3.1 (variant 0):
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | 0 |C|   Hlen  |  Proto/ctype  |             Flags             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                  Extensions Fields (optional)                 ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
/// Hlen counts the extension fields in 32-bit words, not the base header. C set means a
/// control message whose type is in Proto/ctype; clear means a data message whose IP
/// protocol is in Proto/ctype. Section 3.3 (variant 1): the first two bits are `01` and the
/// UDP payload is an IPv4 or IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GueHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GueHeader<T> {
    /// Wraps a buffer without checking it; getters may panic on a short buffer.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        GueHeader { buffer }
    }

    /// Wraps untrusted bytes. Variant 0 needs the base header and its extension fields;
    /// variant 1 needs an IP version nibble of 4 or 6 ([`Error::Malformed`] otherwise);
    /// versions 2 and 3 are [`Error::Unsupported`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Self::new_unchecked(buffer);
        let data = h.buffer.as_ref();
        let Some(&first) = data.first() else {
            return Err(Error::Truncated);
        };
        match first >> 6 {
            0 => {
                if data.len() < HEADER_LEN || data.len() < h.header_len() {
                    return Err(Error::Truncated);
                }
            }
            1 => {
                if !matches!(first >> 4, 4 | 6) {
                    return Err(Error::Malformed);
                }
            }
            _ => return Err(Error::Unsupported),
        }
        Ok(h)
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 2-bit version (variant): 0 with a GUE header, 1 for direct IP.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_C_HLEN] >> 6
    }

    /// True for variant 1: the payload is an IPv4 or IPv6 packet with no GUE header.
    #[inline]
    pub fn is_direct_ip(&self) -> bool {
        self.version() == 1
    }

    /// For variant 1, the inner IP version (4 or 6); `None` for variant 0.
    #[inline]
    pub fn direct_ip_version(&self) -> Option<u8> {
        self.is_direct_ip()
            .then(|| self.buffer.as_ref()[field::VER_C_HLEN] >> 4)
    }

    /// The C bit (variant 0): a control message.
    #[inline]
    pub fn is_control(&self) -> bool {
        !self.is_direct_ip() && self.buffer.as_ref()[field::VER_C_HLEN] & 0x20 != 0
    }

    /// Hlen (variant 0): extension fields length in 32-bit words.
    #[inline]
    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[field::VER_C_HLEN] & 0x1f
    }

    /// Bytes before the payload: 4 + 4 * Hlen for variant 0, 0 for variant 1.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.is_direct_ip() {
            0
        } else {
            HEADER_LEN + usize::from(self.hlen()) * 4
        }
    }

    /// Proto/ctype: the inner IP protocol of a data message, or the control type. For
    /// variant 1 the protocol implied by the version nibble: 4 (IPIP) or 41 (IPv6).
    #[inline]
    pub fn proto_ctype(&self) -> u8 {
        match self.direct_ip_version() {
            Some(4) => IpProtocol::IpIp.into(),
            Some(_) => IpProtocol::Ipv6.into(),
            None => self.buffer.as_ref()[field::PROTO],
        }
    }

    /// Flags (variant 0; variant 1 has none and reads 0).
    #[inline]
    pub fn flags(&self) -> u16 {
        if self.is_direct_ip() {
            0
        } else {
            read_u16(self.buffer.as_ref(), field::FLAGS)
        }
    }

    /// Extension fields (variant 0; empty for variant 1).
    #[inline]
    pub fn extensions(&self) -> &[u8] {
        if self.is_direct_ip() {
            &[]
        } else {
            &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
        }
    }

    /// The encapsulated packet (for variant 1, the whole buffer).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GueHeader<T> {
    /// Writes a variant 0 data header with no extensions and no flags for inner protocol
    /// `proto`; returns 4. The buffer must hold 4 bytes.
    #[inline]
    pub fn emit_v0(&mut self, proto: u8) -> usize {
        let b = self.buffer.as_mut();
        b[..HEADER_LEN].copy_from_slice(&[0, proto, 0, 0]);
        HEADER_LEN
    }

    /// Mutable encapsulated packet.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn variant0_with_extensions() {
        // Version 0, C clear, Hlen 1, proto 4 (IPIP), flags 0x8000, one extension word, data.
        let buf = [0x01, 0x04, 0x80, 0x00, 1, 2, 3, 4, 0x45, 0x00];
        let h = GueHeader::new_checked(&buf[..]).unwrap();
        assert_eq!(h.version(), 0);
        assert!(!h.is_direct_ip() && !h.is_control());
        assert_eq!(h.direct_ip_version(), None);
        assert_eq!(h.hlen(), 1);
        assert_eq!(h.header_len(), 8);
        assert_eq!(h.proto_ctype(), 4);
        assert_eq!(h.flags(), 0x8000);
        assert_eq!(h.extensions(), &[1, 2, 3, 4]);
        assert_eq!(h.payload(), &[0x45, 0x00]);
        assert_eq!(
            GueHeader::new_checked(&buf[..7]).err(),
            Some(Error::Truncated)
        );
        let control = [0x20, 0x01, 0, 0];
        assert!(GueHeader::new_checked(&control[..]).unwrap().is_control());
    }

    #[test]
    fn variant1_is_direct_ip() {
        let v4 = [0x45, 0x00, 0x00, 0x14];
        let h = GueHeader::new_checked(&v4[..]).unwrap();
        assert!(h.is_direct_ip());
        assert_eq!(h.direct_ip_version(), Some(4));
        assert_eq!((h.proto_ctype(), h.flags()), (4, 0));
        assert_eq!(h.header_len(), 0);
        assert_eq!(h.payload(), &v4);
        assert!(h.extensions().is_empty());
        let v6 = [0x60, 0, 0, 0];
        assert_eq!(
            GueHeader::new_checked(&v6[..]).unwrap().direct_ip_version(),
            Some(6)
        );
        assert_eq!(
            GueHeader::new_checked(&[0x50u8][..]).err(),
            Some(Error::Malformed)
        );
        assert_eq!(
            GueHeader::new_checked(&[0x80u8, 0, 0, 0][..]).err(),
            Some(Error::Unsupported)
        );
        assert_eq!(
            GueHeader::new_checked(&[0u8; 0][..]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn emit_v0() {
        let mut buf = [0xa5u8; 6];
        let mut h = GueHeader::new_unchecked(&mut buf[..]);
        assert_eq!(h.emit_v0(41), 4);
        h.payload_mut()[0] = 0x60;
        assert_eq!(buf, [0, 41, 0, 0, 0x60, 0xa5]);
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(h) = GueHeader::new_checked(&data[..]) {
                let _ = (h.version(), h.is_direct_ip(), h.direct_ip_version(), h.is_control());
                let _ = (h.hlen(), h.header_len(), h.payload().len(), h.extensions().len());
                let _ = (h.proto_ctype(), h.flags());
            }
        }
    }
}
