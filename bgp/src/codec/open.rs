//! OPEN (RFC 4271 §4.2) and its capabilities (RFC 5492): what a session negotiates.

use std::net::Ipv4Addr;

use super::{AS_TRANS, DecodeError, OpenError};

/// Capability codes (IANA "Capability Codes").
mod cap {
    pub const MULTIPROTOCOL: u8 = 1;
    pub const ROUTE_REFRESH: u8 = 2;
    pub const GRACEFUL_RESTART: u8 = 64;
    pub const FOUR_OCTET_AS: u8 = 65;
    pub const ENHANCED_ROUTE_REFRESH: u8 = 70;
}

/// OPEN message body (RFC 4271 §4.2, optional parameters RFC 5492).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+
/// |    Version    |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     My Autonomous System      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           Hold Time           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                         BGP Identifier                        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Opt Parm Len  |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |             Optional Parameters (variable)                    |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
/// Version is always 4 (anything else fails to decode). All capabilities are sent in one
/// Capabilities optional parameter (type 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// The 2-octet "My Autonomous System" field (AS_TRANS when the ASN needs 4 octets).
    pub my_as: u16,
    /// Proposed hold time in seconds (0 or >= 3).
    pub hold_time: u16,
    /// BGP identifier (router id).
    pub bgp_id: Ipv4Addr,
    /// Capabilities advertised.
    pub capabilities: Vec<Capability>,
}

impl Open {
    /// Builds an OPEN for `asn`, filling the 2-octet field with AS_TRANS when needed.
    pub fn new(asn: u32, hold_time: u16, bgp_id: Ipv4Addr, capabilities: Vec<Capability>) -> Open {
        Open {
            my_as: u16::try_from(asn).unwrap_or(AS_TRANS),
            hold_time,
            bgp_id,
            capabilities,
        }
    }

    /// The speaker's ASN: the 4-octet AS capability when present, else the 2-octet field.
    pub fn asn(&self) -> u32 {
        self.four_octet_as().unwrap_or(u32::from(self.my_as))
    }

    /// The ASN in the 4-octet AS capability, if advertised.
    pub fn four_octet_as(&self) -> Option<u32> {
        self.capabilities.iter().find_map(|c| match c {
            Capability::FourOctetAs(asn) => Some(*asn),
            _ => None,
        })
    }

    /// Whether the OPEN advertises `c` (compared by value).
    pub fn has(&self, c: &Capability) -> bool {
        self.capabilities.contains(c)
    }
}

/// One capability (RFC 5492 §4): code, length, value.
///
/// ```text
/// +------------------------------+
/// | Capability Code (1 octet)    |
/// +------------------------------+
/// | Capability Length (1 octet)  |
/// +------------------------------+
/// | Capability Value (variable)  |
/// +------------------------------+
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capability {
    /// Multiprotocol extensions (RFC 4760, code 1): AFI(2) reserved(1) SAFI(1).
    Multiprotocol {
        /// Address family.
        afi: u16,
        /// Subsequent address family.
        safi: u8,
    },
    /// Route refresh (RFC 2918, code 2), no value.
    RouteRefresh,
    /// Graceful restart (RFC 4724, code 64): R bit + 12-bit restart time, then per family
    /// AFI(2) SAFI(1) flags(1).
    GracefulRestart {
        /// Restart State (R) bit.
        restarting: bool,
        /// Restart time in seconds (12 bits).
        restart_time: u16,
        /// (AFI, SAFI, flags) for which forwarding state may be preserved.
        families: Vec<(u16, u8, u8)>,
    },
    /// Support for 4-octet AS numbers (RFC 6793, code 65): the ASN.
    FourOctetAs(u32),
    /// Enhanced route refresh (RFC 7313, code 70), no value.
    EnhancedRouteRefresh,
    /// Anything else, kept verbatim.
    Unknown {
        /// Capability code.
        code: u8,
        /// Capability value.
        data: Vec<u8>,
    },
}

pub(super) fn decode_open(body: &[u8]) -> Result<Open, DecodeError> {
    // frame_len guarantees the 10 fixed octets.
    let version = body[0];
    if version != 4 {
        return Err(OpenError::UnsupportedVersion(version).into());
    }
    let my_as = u16::from_be_bytes([body[1], body[2]]);
    let hold_time = u16::from_be_bytes([body[3], body[4]]);
    if hold_time == 1 || hold_time == 2 {
        return Err(OpenError::UnacceptableHoldTime(hold_time).into());
    }
    let bgp_id = Ipv4Addr::new(body[5], body[6], body[7], body[8]);
    if bgp_id.is_unspecified() {
        return Err(OpenError::BadBgpIdentifier(bgp_id).into());
    }
    let opt_len = usize::from(body[9]);
    let mut params = body.get(10..).unwrap_or_default();
    if params.len() != opt_len {
        return Err(OpenError::Malformed.into());
    }
    let mut capabilities = Vec::new();
    while !params.is_empty() {
        let [ptype, plen, rest @ ..] = params else {
            return Err(OpenError::Malformed.into());
        };
        let plen = usize::from(*plen);
        if rest.len() < plen {
            return Err(OpenError::Malformed.into());
        }
        if *ptype != 2 {
            return Err(OpenError::UnsupportedOptionalParameter(*ptype).into());
        }
        let mut caps = &rest[..plen];
        while !caps.is_empty() {
            let [ccode, clen, crest @ ..] = caps else {
                return Err(OpenError::Malformed.into());
            };
            let clen = usize::from(*clen);
            if crest.len() < clen {
                return Err(OpenError::Malformed.into());
            }
            capabilities.push(decode_capability(*ccode, &crest[..clen])?);
            caps = &crest[clen..];
        }
        params = &rest[plen..];
    }
    Ok(Open {
        my_as,
        hold_time,
        bgp_id,
        capabilities,
    })
}

pub(super) fn decode_capability(code: u8, v: &[u8]) -> Result<Capability, DecodeError> {
    let bad = || DecodeError::Open(OpenError::Malformed);
    Ok(match code {
        cap::MULTIPROTOCOL => {
            let [a0, a1, _, safi] = v else {
                return Err(bad());
            };
            Capability::Multiprotocol {
                afi: u16::from_be_bytes([*a0, *a1]),
                safi: *safi,
            }
        }
        cap::ROUTE_REFRESH if v.is_empty() => Capability::RouteRefresh,
        cap::ENHANCED_ROUTE_REFRESH if v.is_empty() => Capability::EnhancedRouteRefresh,
        cap::ROUTE_REFRESH | cap::ENHANCED_ROUTE_REFRESH => return Err(bad()),
        cap::FOUR_OCTET_AS => {
            let [a, b, c, d] = v else {
                return Err(bad());
            };
            Capability::FourOctetAs(u32::from_be_bytes([*a, *b, *c, *d]))
        }
        cap::GRACEFUL_RESTART => {
            if v.len() < 2 || !(v.len() - 2).is_multiple_of(4) {
                return Err(bad());
            }
            let word = u16::from_be_bytes([v[0], v[1]]);
            Capability::GracefulRestart {
                restarting: word & 0x8000 != 0,
                restart_time: word & 0x0fff,
                families: v[2..]
                    .chunks_exact(4)
                    .map(|f| (u16::from_be_bytes([f[0], f[1]]), f[2], f[3]))
                    .collect(),
            }
        }
        _ => Capability::Unknown {
            code,
            data: v.to_vec(),
        },
    })
}

pub(super) fn encode_open(o: &Open, out: &mut Vec<u8>) {
    out.push(4);
    out.extend_from_slice(&o.my_as.to_be_bytes());
    out.extend_from_slice(&o.hold_time.to_be_bytes());
    out.extend_from_slice(&o.bgp_id.octets());
    let mut caps = Vec::new();
    for c in &o.capabilities {
        let (code, value) = match c {
            Capability::Multiprotocol { afi, safi } => {
                let a = afi.to_be_bytes();
                (cap::MULTIPROTOCOL, vec![a[0], a[1], 0, *safi])
            }
            Capability::RouteRefresh => (cap::ROUTE_REFRESH, vec![]),
            Capability::EnhancedRouteRefresh => (cap::ENHANCED_ROUTE_REFRESH, vec![]),
            Capability::FourOctetAs(asn) => (cap::FOUR_OCTET_AS, asn.to_be_bytes().to_vec()),
            Capability::GracefulRestart {
                restarting,
                restart_time,
                families,
            } => {
                let word = (restart_time & 0x0fff) | if *restarting { 0x8000 } else { 0 };
                let mut v = word.to_be_bytes().to_vec();
                for (afi, safi, fl) in families {
                    v.extend_from_slice(&afi.to_be_bytes());
                    v.extend_from_slice(&[*safi, *fl]);
                }
                (cap::GRACEFUL_RESTART, v)
            }
            Capability::Unknown { code, data } => (*code, data.clone()),
        };
        caps.push(code);
        caps.push(value.len() as u8);
        caps.extend_from_slice(&value);
    }
    if caps.is_empty() {
        out.push(0);
    } else {
        out.push((caps.len() + 2) as u8);
        out.push(2);
        out.push(caps.len() as u8);
        out.extend_from_slice(&caps);
    }
}
