//! Zero-copy packet views and owned header representations.
//!
//! The packet core (`lb`) reads and rewrites every frame in place, so it needs typed access to
//! header fields without copying, allocating or panicking on hostile input. Each protocol gets
//! a view over a byte buffer in the shape of smoltcp's `wire` module: `new_unchecked` for bytes
//! already validated, `new_checked` for untrusted bytes (it checks every length a getter will
//! later rely on, so getters after a successful `new_checked` cannot panic), getters for any
//! `AsRef<[u8]>` buffer and setters only for `AsMut<[u8]>` buffers, so a read-only buffer
//! cannot be rewritten by mistake. Slow paths (ICMP replies, test frames) use the owned `Repr`
//! types, which `parse` a view and `emit` into a caller's buffer; [`frame`] builds a complete
//! Ethernet/IP/L4 frame in one call. For people rather than the datapath, [`pcapng`] writes
//! and reads the capture files of `sluice capture`, and [`summary`] puts a frame in one
//! tcpdump-like line. This crate knows nothing about the rest of Sluice, so the bench and
//! test-support crates can build frames without the appliance library.

#![forbid(unsafe_code)]

pub mod checksum;
pub mod ethernet;
pub mod frame;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod pcapng;
pub mod summary;
pub mod tcp;
pub mod udp;
pub mod vxlan;

pub use ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr, VlanTag, l3_offset};
pub use frame::{FrameRepr, IpRepr, L4Repr};
pub use icmpv4::{Icmpv4Packet, Icmpv4Repr, Icmpv4Type};
pub use icmpv6::{Icmpv6Packet, Icmpv6Repr, Icmpv6Type};
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{FragInfo, Ipv6FragmentHeader, Ipv6Packet, Ipv6Repr, Ipv6Upper, walk_ext_headers};
pub use tcp::{TcpPacket, TcpRepr};
pub use udp::{UdpPacket, UdpRepr};
pub use vxlan::VxlanHeader;

use core::fmt;

/// Why a buffer could not be parsed or a header could not be emitted.
///
/// `Copy` and allocation-free so the datapath can turn it straight into a drop-counter index
/// with [`Error::index`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than a header or a length field says it should be.
    Truncated,
    /// A field has a value the protocol forbids (bad version, header length below minimum,
    /// length fields that contradict each other).
    Malformed,
    /// A checksum does not verify.
    BadChecksum,
    /// The bytes are valid but describe something Sluice does not handle (for example ARP
    /// for a non-Ethernet/IPv4 pair, or a GUE version above 1).
    Unsupported,
    /// More stacked headers (VLAN tags, IPv6 extension headers) than the walker accepts.
    TooManyHeaders,
    /// An `emit` target buffer is too small for the header and payload.
    NoSpace,
}

impl Error {
    /// Every variant, in [`Error::index`] order, for sizing and naming counter arrays.
    pub const ALL: [Error; 6] = [
        Error::Truncated,
        Error::Malformed,
        Error::BadChecksum,
        Error::Unsupported,
        Error::TooManyHeaders,
        Error::NoSpace,
    ];

    /// Dense index in `0..Error::ALL.len()`, for per-reason counters.
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Short stable name for counters and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Error::Truncated => "truncated",
            Error::Malformed => "malformed",
            Error::BadChecksum => "bad_checksum",
            Error::Unsupported => "unsupported",
            Error::TooManyHeaders => "too_many_headers",
            Error::NoSpace => "no_space",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Error::Truncated => "packet truncated",
            Error::Malformed => "malformed header",
            Error::BadChecksum => "checksum does not verify",
            Error::Unsupported => "unsupported protocol variant",
            Error::TooManyHeaders => "too many stacked headers",
            Error::NoSpace => "output buffer too small",
        };
        f.write_str(text)
    }
}

impl std::error::Error for Error {}

/// Result of parsing or emitting wire data.
pub type Result<T> = core::result::Result<T, Error>;

/// IP protocol numbers (IPv4 "Protocol", IPv6 "Next Header").
///
/// Registry: IANA "Assigned Internet Protocol Numbers",
/// <https://www.iana.org/assignments/protocol-numbers/protocol-numbers.xhtml>.
/// Views return the raw `u8` (cheapest to match on the hot path); this enum is for `Repr`s
/// and readable code: `u8::from(IpProtocol::Tcp) == 6`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpProtocol {
    /// 0: IPv6 Hop-by-Hop Options.
    HopByHop,
    /// 1: ICMP for IPv4.
    Icmp,
    /// 4: IPv4-in-IP encapsulation (IPIP).
    IpIp,
    /// 6: TCP.
    Tcp,
    /// 17: UDP.
    Udp,
    /// 41: IPv6 encapsulation.
    Ipv6,
    /// 43: Routing Header for IPv6.
    Ipv6Route,
    /// 44: Fragment Header for IPv6.
    Ipv6Frag,
    /// 47: Generic Routing Encapsulation.
    Gre,
    /// 50: Encapsulating Security Payload.
    Esp,
    /// 51: Authentication Header.
    Ah,
    /// 58: ICMP for IPv6.
    Icmpv6,
    /// 59: No Next Header for IPv6.
    Ipv6NoNxt,
    /// 60: Destination Options for IPv6.
    Ipv6Opts,
    /// 132: SCTP.
    Sctp,
    /// Any other assigned or unassigned number.
    Unknown(u8),
}

impl IpProtocol {
    /// 1: ICMP for IPv4, as the views' raw `protocol()` returns it.
    pub const ICMP: u8 = 1;
    /// 4: IPv4-in-IP encapsulation.
    pub const IPIP: u8 = 4;
    /// 6: TCP.
    pub const TCP: u8 = 6;
    /// 17: UDP.
    pub const UDP: u8 = 17;
    /// 41: IPv6 encapsulation.
    pub const IPV6: u8 = 41;
    /// 58: ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
}

impl From<u8> for IpProtocol {
    fn from(value: u8) -> Self {
        match value {
            0 => IpProtocol::HopByHop,
            1 => IpProtocol::Icmp,
            4 => IpProtocol::IpIp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            41 => IpProtocol::Ipv6,
            43 => IpProtocol::Ipv6Route,
            44 => IpProtocol::Ipv6Frag,
            47 => IpProtocol::Gre,
            50 => IpProtocol::Esp,
            51 => IpProtocol::Ah,
            58 => IpProtocol::Icmpv6,
            59 => IpProtocol::Ipv6NoNxt,
            60 => IpProtocol::Ipv6Opts,
            132 => IpProtocol::Sctp,
            other => IpProtocol::Unknown(other),
        }
    }
}

impl From<IpProtocol> for u8 {
    fn from(value: IpProtocol) -> Self {
        match value {
            IpProtocol::HopByHop => 0,
            IpProtocol::Icmp => 1,
            IpProtocol::IpIp => 4,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Ipv6 => 41,
            IpProtocol::Ipv6Route => 43,
            IpProtocol::Ipv6Frag => 44,
            IpProtocol::Gre => 47,
            IpProtocol::Esp => 50,
            IpProtocol::Ah => 51,
            IpProtocol::Icmpv6 => 58,
            IpProtocol::Ipv6NoNxt => 59,
            IpProtocol::Ipv6Opts => 60,
            IpProtocol::Sctp => 132,
            IpProtocol::Unknown(other) => other,
        }
    }
}

// Field accessors shared by every view. Callers index only ranges that `new_checked` proved
// to be in bounds, so these never see a short slice on the checked path.

#[inline]
fn read_u16(data: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([data[at], data[at + 1]])
}

#[inline]
fn write_u16(data: &mut [u8], at: usize, value: u16) {
    data[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

#[inline]
fn read_u32(data: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
}

#[inline]
fn write_u32(data: &mut [u8], at: usize, value: u32) {
    data[at..at + 4].copy_from_slice(&value.to_be_bytes());
}

/// Fails with [`Error::NoSpace`] unless `buf` holds at least `len` bytes; every `emit` calls
/// it first so a short caller buffer is an error, not a panic.
#[inline]
fn need_space(buf: &[u8], len: usize) -> Result<()> {
    if buf.len() < len {
        Err(Error::NoSpace)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_index_matches_all_order() {
        for (i, e) in Error::ALL.iter().enumerate() {
            assert_eq!(e.index(), i, "{e:?}");
            assert!(!e.as_str().is_empty());
        }
    }

    #[test]
    fn ip_protocol_round_trips_every_byte() {
        for b in 0..=255u8 {
            assert_eq!(u8::from(IpProtocol::from(b)), b);
        }
        assert_eq!(IpProtocol::from(6), IpProtocol::Tcp);
        assert_eq!(IpProtocol::from(200), IpProtocol::Unknown(200));
    }
}
