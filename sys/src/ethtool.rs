//! ntuple receive classification rules (`ethtool -N ... flow-type ... action Q`): the NIC
//! steers a class of frames to one receive queue, so a flow's return traffic reaches the
//! queue (and so the datapath worker) that owns it without any software handoff.
//!
//! Rules go in and out through the `SIOCETHTOOL` ioctl (`ETHTOOL_SRXCLSRLINS` and
//! `ETHTOOL_SRXCLSRLDEL`) on a socket of the calling thread, so they apply to the interface of
//! that name in the calling thread's network namespace. Drivers without ntuple filters (veth,
//! most virtual NICs) refuse with `EOPNOTSUPP`, which the caller reports and works around.
#![allow(unsafe_code)]

use std::io;
use std::net::IpAddr;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_SRXCLSRLDEL: u32 = 0x31;
const ETHTOOL_SRXCLSRLINS: u32 = 0x32;
const TCP_V4_FLOW: u32 = 0x01;
const UDP_V4_FLOW: u32 = 0x02;
const TCP_V6_FLOW: u32 = 0x05;
const UDP_V6_FLOW: u32 = 0x06;
/// Let the driver pick the rule's location (it reports the one it chose).
const RX_CLS_LOC_ANY: u32 = 0x8000_0000;

/// `struct ethtool_rx_flow_spec` (include/uapi/linux/ethtool.h): the header fields to match
/// (`h_u`, laid out per flow type) and their masks (`m_u`, bits set must match).
#[repr(C)]
#[derive(Clone, Copy)]
struct FlowSpec {
    flow_type: u32,
    h_u: [u8; 52],
    h_ext: [u8; 20],
    m_u: [u8; 52],
    m_ext: [u8; 20],
    ring_cookie: u64,
    location: u32,
}

/// `struct ethtool_rxnfc` with no trailing rule locations.
#[repr(C)]
#[derive(Clone, Copy)]
struct Rxnfc {
    cmd: u32,
    flow_type: u32,
    data: u64,
    fs: FlowSpec,
    rule_cnt: u32,
}

// The kernel's layout (x86-64 and aarch64): fs at 16, ring_cookie at 152 of fs, 192 in all.
const _: () = assert!(std::mem::size_of::<FlowSpec>() == 168);
const _: () = assert!(std::mem::offset_of!(FlowSpec, ring_cookie) == 152);
const _: () = assert!(std::mem::offset_of!(Rxnfc, fs) == 16);
const _: () = assert!(std::mem::size_of::<Rxnfc>() == 192);

/// TCP or UDP, the protocols an ntuple rule here matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// Frames to `dst`, over `proto`, whose destination port has the bits `port_mask` equal to
/// those of `port`, go to receive queue `queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NtupleRule {
    /// Destination address.
    pub dst: IpAddr,
    /// Transport protocol.
    pub proto: L4,
    /// Destination port bits to match.
    pub port: u16,
    /// Which destination port bits must match.
    pub port_mask: u16,
    /// Receive queue.
    pub queue: u32,
}

impl NtupleRule {
    fn spec(&self) -> FlowSpec {
        let mut fs = FlowSpec {
            flow_type: 0,
            h_u: [0; 52],
            h_ext: [0; 20],
            m_u: [0; 52],
            m_ext: [0; 20],
            ring_cookie: u64::from(self.queue),
            location: RX_CLS_LOC_ANY,
        };
        // ethtool_tcpip4_spec: ip4src, ip4dst, psrc, pdst, tos;
        // ethtool_tcpip6_spec: ip6src[4], ip6dst[4], psrc, pdst, tclass.
        let pdst_at = match self.dst {
            IpAddr::V4(a) => {
                fs.flow_type = match self.proto {
                    L4::Tcp => TCP_V4_FLOW,
                    L4::Udp => UDP_V4_FLOW,
                };
                fs.h_u[4..8].copy_from_slice(&a.octets());
                fs.m_u[4..8].copy_from_slice(&[0xff; 4]);
                10
            }
            IpAddr::V6(a) => {
                fs.flow_type = match self.proto {
                    L4::Tcp => TCP_V6_FLOW,
                    L4::Udp => UDP_V6_FLOW,
                };
                fs.h_u[16..32].copy_from_slice(&a.octets());
                fs.m_u[16..32].copy_from_slice(&[0xff; 16]);
                34
            }
        };
        fs.h_u[pdst_at..pdst_at + 2].copy_from_slice(&(self.port & self.port_mask).to_be_bytes());
        fs.m_u[pdst_at..pdst_at + 2].copy_from_slice(&self.port_mask.to_be_bytes());
        fs
    }
}

/// Issues one `SIOCETHTOOL` request on `ifname`, returning the kernel's error.
///
/// # Safety
/// `data` must point to a live, writable ethtool request structure of the kind its `cmd`
/// names.
unsafe fn ethtool_io(ifname: &str, data: *mut libc::c_void) -> io::Result<()> {
    #[repr(C)]
    struct IfreqData {
        name: [libc::c_char; libc::IFNAMSIZ],
        data: *mut libc::c_void,
        // struct ifreq is 40 bytes on 64-bit Linux: name plus a 24-byte union.
        _pad: [u8; 16],
    }
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut req = IfreqData {
        name: [0; libc::IFNAMSIZ],
        data,
        _pad: [0; 16],
    };
    for (d, b) in req.name.iter_mut().zip(bytes) {
        *d = *b as libc::c_char;
    }
    // SAFETY: creating a datagram socket has no preconditions; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `req` is a live ifreq whose data pointer is the caller's request (see the
    // function's contract); both outlive the call.
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL, &mut req as *mut IfreqData) };
    let err = (rc != 0).then(io::Error::last_os_error);
    // SAFETY: closes the socket opened above, once.
    unsafe { libc::close(fd) };
    err.map_or(Ok(()), Err)
}

/// Inserts `rule` on `ifname` and returns the location the driver put it at (for
/// [`delete_ntuple`]). `EOPNOTSUPP` when the driver has no ntuple filters.
pub fn insert_ntuple(ifname: &str, rule: &NtupleRule) -> io::Result<u32> {
    let mut req = Rxnfc {
        cmd: ETHTOOL_SRXCLSRLINS,
        flow_type: 0,
        data: 0,
        fs: rule.spec(),
        rule_cnt: 0,
    };
    req.flow_type = req.fs.flow_type;
    // SAFETY: `req` is a live ethtool_rxnfc, the structure ETHTOOL_SRXCLSRLINS reads and
    // writes back (the chosen location).
    unsafe { ethtool_io(ifname, (&mut req as *mut Rxnfc).cast())? };
    Ok(req.fs.location)
}

/// Removes the rule at `location` from `ifname`.
pub fn delete_ntuple(ifname: &str, location: u32) -> io::Result<()> {
    let mut req = Rxnfc {
        cmd: ETHTOOL_SRXCLSRLDEL,
        flow_type: 0,
        data: 0,
        fs: FlowSpec {
            flow_type: 0,
            h_u: [0; 52],
            h_ext: [0; 20],
            m_u: [0; 52],
            m_ext: [0; 20],
            ring_cookie: 0,
            location,
        },
        rule_cnt: 0,
    };
    // SAFETY: `req` is a live ethtool_rxnfc, the structure ETHTOOL_SRXCLSRLDEL reads.
    unsafe { ethtool_io(ifname, (&mut req as *mut Rxnfc).cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_matches_the_destination_and_the_masked_port_bits() {
        let r = NtupleRule {
            dst: "10.0.0.100".parse().expect("literal"),
            proto: L4::Udp,
            port: 0x0403,
            port_mask: 0x0003,
            queue: 3,
        };
        let fs = r.spec();
        assert_eq!(fs.flow_type, UDP_V4_FLOW);
        assert_eq!(&fs.h_u[4..8], &[10, 0, 0, 100]);
        assert_eq!(&fs.m_u[4..8], &[0xff; 4]);
        assert_eq!(&fs.h_u[10..12], &[0, 3], "only the masked bits");
        assert_eq!(&fs.m_u[10..12], &[0, 3]);
        assert_eq!(&fs.m_u[..4], &[0; 4], "the source is not matched");
        assert_eq!((fs.ring_cookie, fs.location), (3, RX_CLS_LOC_ANY));
        let v6 = NtupleRule {
            dst: "2001:db8:a::100".parse().expect("literal"),
            proto: L4::Tcp,
            ..r
        }
        .spec();
        assert_eq!(v6.flow_type, TCP_V6_FLOW);
        assert_eq!(v6.h_u[31], 0x00);
        assert_eq!(v6.h_u[30], 0x01);
        assert_eq!(&v6.m_u[16..32], &[0xff; 16]);
        assert_eq!(&v6.h_u[34..36], &[0, 3]);
    }

    #[test]
    fn a_missing_interface_is_an_error_not_a_crash() {
        let r = NtupleRule {
            dst: "10.0.0.100".parse().expect("literal"),
            proto: L4::Tcp,
            port: 0,
            port_mask: 1,
            queue: 0,
        };
        insert_ntuple("nosuchif9", &r).expect_err("no such interface");
        insert_ntuple("", &r).expect_err("no name");
        delete_ntuple("nosuchif9", 0).expect_err("no such interface");
    }
}
