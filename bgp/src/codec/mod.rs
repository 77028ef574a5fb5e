//! BGP-4 message codec (RFC 4271 and extensions): owned message types with `encode` and
//! `decode`, stream framing, and the decode-error tree that maps to NOTIFICATIONs.
//!
//! Choice: our own codec rather than a crate. `netgauze-bgp-pkt` 0.13 encodes and decodes
//! everything we need, but its errors are nested nom-based location types per field; turning
//! them into RFC 4271 code/subcode pairs (and deciding RFC 7606 treat-as-withdraw) would mean
//! a large, fragile match on another crate's internals, and it pulls serde/nom/strum trees
//! into the appliance. `routecore` 0.7 parses well but builds messages through a separate
//! builder API with its own attribute model, and its parse error is opaque (no code/subcode).
//! A speaker that only announces host routes needs a small, fixed subset, so ~700 lines of
//! plain code with the RFC diagrams above each type is easier to audit than either adapter.
//!
//! The 4-octet AS capability is mandatory for our peers, so AS_PATH is always decoded with
//! 4-octet ASNs (RFC 6793 "NEW" speakers); AS4_PATH is carried as an unknown optional
//! attribute, which RFC 6793 §4.1 lets a NEW speaker ignore.

mod error;

pub use error::{DecodeError, HeaderError, OpenError, UpdateError, cease, code};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 19;
/// Largest message RFC 4271 allows (we do not negotiate RFC 8654 extended messages).
pub const MAX_MESSAGE_LEN: usize = 4096;
/// AS_TRANS (RFC 6793): what a 4-octet ASN above 65535 puts in OPEN's 2-octet field.
pub const AS_TRANS: u16 = 23456;
/// The GRACEFUL_SHUTDOWN well-known community 65535:0 (RFC 8326).
pub const GRACEFUL_SHUTDOWN: u32 = 0xFFFF_0000;

/// Message types (IANA "BGP Message Types").
mod msg_type {
    pub const OPEN: u8 = 1;
    pub const UPDATE: u8 = 2;
    pub const NOTIFICATION: u8 = 3;
    pub const KEEPALIVE: u8 = 4;
    pub const ROUTE_REFRESH: u8 = 5;
}

/// Path attribute type codes (IANA "BGP Path Attributes").
pub mod attr {
    /// ORIGIN (RFC 4271).
    pub const ORIGIN: u8 = 1;
    /// AS_PATH (RFC 4271).
    pub const AS_PATH: u8 = 2;
    /// NEXT_HOP (RFC 4271).
    pub const NEXT_HOP: u8 = 3;
    /// MULTI_EXIT_DISC (RFC 4271).
    pub const MED: u8 = 4;
    /// LOCAL_PREF (RFC 4271).
    pub const LOCAL_PREF: u8 = 5;
    /// ATOMIC_AGGREGATE (RFC 4271).
    pub const ATOMIC_AGGREGATE: u8 = 6;
    /// COMMUNITIES (RFC 1997).
    pub const COMMUNITIES: u8 = 8;
    /// MP_REACH_NLRI (RFC 4760).
    pub const MP_REACH_NLRI: u8 = 14;
    /// MP_UNREACH_NLRI (RFC 4760).
    pub const MP_UNREACH_NLRI: u8 = 15;
    /// LARGE_COMMUNITY (RFC 8092).
    pub const LARGE_COMMUNITIES: u8 = 32;
}

/// Attribute flag bits (RFC 4271 §4.3).
mod flag {
    pub const OPTIONAL: u8 = 0x80;
    pub const TRANSITIVE: u8 = 0x40;
    pub const EXTENDED_LENGTH: u8 = 0x10;
}

/// Capability codes (IANA "Capability Codes").
mod cap {
    pub const MULTIPROTOCOL: u8 = 1;
    pub const ROUTE_REFRESH: u8 = 2;
    pub const GRACEFUL_RESTART: u8 = 64;
    pub const FOUR_OCTET_AS: u8 = 65;
    pub const ENHANCED_ROUTE_REFRESH: u8 = 70;
}

/// Address Family Identifier for IPv4 (IANA "Address Family Numbers").
pub const AFI_IPV4: u16 = 1;
/// Address Family Identifier for IPv6.
pub const AFI_IPV6: u16 = 2;
/// Subsequent AFI for unicast (IANA "SAFI Values").
pub const SAFI_UNICAST: u8 = 1;

/// One BGP message.
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// +                                                               +
/// |                           Marker                              |
/// +                                                               +
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |          Length               |      Type     |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// OPEN (type 1).
    Open(Open),
    /// UPDATE (type 2).
    Update(Update),
    /// NOTIFICATION (type 3).
    Notification(Notification),
    /// KEEPALIVE (type 4), header only.
    Keepalive,
    /// ROUTE-REFRESH (type 5).
    RouteRefresh(RouteRefresh),
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

/// UPDATE message body (RFC 4271 §4.3).
///
/// ```text
/// +-----------------------------------------------------+
/// |   Withdrawn Routes Length (2 octets)                |
/// +-----------------------------------------------------+
/// |   Withdrawn Routes (variable)                       |
/// +-----------------------------------------------------+
/// |   Total Path Attribute Length (2 octets)            |
/// +-----------------------------------------------------+
/// |   Path Attributes (variable)                        |
/// +-----------------------------------------------------+
/// |   Network Layer Reachability Information (variable) |
/// +-----------------------------------------------------+
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Update {
    /// IPv4 unicast prefixes withdrawn.
    pub withdrawn: Vec<Ipv4Net>,
    /// Path attributes, in wire order.
    pub attrs: Vec<PathAttr>,
    /// IPv4 unicast prefixes announced.
    pub nlri: Vec<Ipv4Net>,
    /// Set by the decoder when RFC 7606 treat-as-withdraw applied: the announced prefixes
    /// were moved to `withdrawn` (and MP_REACH into MP_UNREACH) and the attributes dropped.
    /// Ignored by the encoder.
    pub withdraw_cause: Option<UpdateError>,
}

impl Update {
    /// Whether this is an End-of-RIB marker (RFC 4724 §2) for IPv4 or another family.
    pub fn is_end_of_rib(&self) -> bool {
        if !self.withdrawn.is_empty() || !self.nlri.is_empty() {
            return false;
        }
        match self.attrs.as_slice() {
            [] => true,
            [PathAttr::MpUnreach(u)] => u.withdrawn.is_empty(),
            _ => false,
        }
    }

    /// All prefixes this UPDATE announces (IPv4 NLRI and MP_REACH).
    pub fn announced(&self) -> Vec<IpNet> {
        let mut out: Vec<IpNet> = self.nlri.iter().map(|p| IpNet::V4(*p)).collect();
        for a in &self.attrs {
            if let PathAttr::MpReach(r) = a {
                out.extend(r.nlri.iter().copied());
            }
        }
        out
    }

    /// All prefixes this UPDATE withdraws (IPv4 withdrawn routes and MP_UNREACH).
    pub fn withdrawn_all(&self) -> Vec<IpNet> {
        let mut out: Vec<IpNet> = self.withdrawn.iter().map(|p| IpNet::V4(*p)).collect();
        for a in &self.attrs {
            if let PathAttr::MpUnreach(u) = a {
                out.extend(u.withdrawn.iter().copied());
            }
        }
        out
    }
}

/// ORIGIN values (RFC 4271 §5.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// 0: learned from an interior protocol (what a VIP is).
    Igp,
    /// 1: learned from EGP.
    Egp,
    /// 2: learned some other way.
    Incomplete,
}

/// AS_PATH segment (RFC 4271 §4.3, 4-octet ASNs per RFC 6793, confed types RFC 5065).
///
/// ```text
/// +-----------------+----------------+--------------------------+
/// | type (1 octet)  | count (1 octet)| count x ASN (4 octets)   |
/// +-----------------+----------------+--------------------------+
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsSegment {
    /// Segment type.
    pub kind: AsSegmentKind,
    /// ASNs, 1..=255 of them.
    pub asns: Vec<u32>,
}

/// AS_PATH segment types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsSegmentKind {
    /// 1: unordered set.
    Set,
    /// 2: ordered sequence.
    Sequence,
    /// 3: confederation sequence.
    ConfedSequence,
    /// 4: confederation set.
    ConfedSet,
}

/// A large community (RFC 8092): global administrator, local data 1, local data 2.
pub type LargeCommunity = [u32; 3];

/// MP_REACH_NLRI value (RFC 4760 §3), for AFI 1/2 SAFI 1.
///
/// ```text
/// +---------------------------------------------------------+
/// | Address Family Identifier (2 octets)                    |
/// +---------------------------------------------------------+
/// | Subsequent Address Family Identifier (1 octet)          |
/// +---------------------------------------------------------+
/// | Length of Next Hop Network Address (1 octet)            |
/// +---------------------------------------------------------+
/// | Network Address of Next Hop (variable)                  |
/// +---------------------------------------------------------+
/// | Reserved (1 octet)                                      |
/// +---------------------------------------------------------+
/// | Network Layer Reachability Information (variable)       |
/// +---------------------------------------------------------+
/// ```
/// For IPv6 the next hop is a global address optionally followed by a link-local one
/// (RFC 2545 §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpReach {
    /// Next hops: one (global) or two (global, link-local) addresses of the family.
    pub next_hops: Vec<IpAddr>,
    /// Announced prefixes, all of one family.
    pub nlri: Vec<IpNet>,
    /// AFI (1 or 2).
    pub afi: u16,
}

/// MP_UNREACH_NLRI value (RFC 4760 §4): AFI(2) SAFI(1) withdrawn routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpUnreach {
    /// AFI (1 or 2).
    pub afi: u16,
    /// Withdrawn prefixes, all of one family.
    pub withdrawn: Vec<IpNet>,
}

/// One path attribute (RFC 4271 §4.3).
///
/// ```text
///  0                   1
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  Attr. Flags  |Attr. Type Code|  then Length (1, or 2 with Extended Length), Value
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathAttr {
    /// ORIGIN (well-known mandatory).
    Origin(Origin),
    /// AS_PATH (well-known mandatory).
    AsPath(Vec<AsSegment>),
    /// NEXT_HOP (well-known, mandatory with IPv4 NLRI).
    NextHop(Ipv4Addr),
    /// MULTI_EXIT_DISC (optional non-transitive).
    Med(u32),
    /// LOCAL_PREF (well-known, iBGP only).
    LocalPref(u32),
    /// ATOMIC_AGGREGATE (well-known discretionary, no value).
    AtomicAggregate,
    /// COMMUNITIES (optional transitive), each `asn << 16 | value`.
    Communities(Vec<u32>),
    /// MP_REACH_NLRI (optional non-transitive).
    MpReach(MpReach),
    /// MP_UNREACH_NLRI (optional non-transitive).
    MpUnreach(MpUnreach),
    /// LARGE_COMMUNITY (optional transitive).
    LargeCommunities(Vec<LargeCommunity>),
    /// An optional attribute we do not interpret, kept with its flags.
    Unknown {
        /// Flags as received (extended-length bit is recomputed on encode).
        flags: u8,
        /// Type code.
        code: u8,
        /// Value.
        data: Vec<u8>,
    },
}

/// NOTIFICATION body (RFC 4271 §4.5): error code, subcode, data.
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Error code    | Error subcode |   Data (variable)             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Error code (see [`code`]).
    pub code: u8,
    /// Error subcode.
    pub subcode: u8,
    /// Diagnostic data.
    pub data: Vec<u8>,
}

impl Notification {
    /// A Cease with a shutdown communication (RFC 9003: length octet + UTF-8, <= 255 bytes).
    pub fn cease(subcode: u8, message: &str) -> Notification {
        let mut msg = message.as_bytes().to_vec();
        msg.truncate(255);
        // Truncation may split a UTF-8 sequence; back off to a char boundary.
        while std::str::from_utf8(&msg).is_err() {
            msg.pop();
        }
        let mut data = Vec::with_capacity(msg.len() + 1);
        if !msg.is_empty() {
            data.push(msg.len() as u8);
            data.extend_from_slice(&msg);
        }
        Notification {
            code: code::CEASE,
            subcode,
            data,
        }
    }
}

impl std::fmt::Display for Notification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match (self.code, self.subcode) {
            (1, _) => "message header error",
            (2, _) => "OPEN message error",
            (3, _) => "UPDATE message error",
            (4, _) => "hold timer expired",
            (5, _) => "FSM error",
            (6, 2) => "cease: administrative shutdown",
            (6, 4) => "cease: administrative reset",
            (6, 7) => "cease: connection collision resolution",
            (6, _) => "cease",
            (7, _) => "ROUTE-REFRESH message error",
            _ => "unknown error",
        };
        write!(f, "{name} ({}/{})", self.code, self.subcode)
    }
}

/// ROUTE-REFRESH body (RFC 2918 §3, subtype RFC 7313 §3.2).
///
/// ```text
///  0       7      15      23      31
/// +-------+-------+-------+-------+
/// |      AFI      | Subtyp| SAFI  |
/// +-------+-------+-------+-------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteRefresh {
    /// Address family.
    pub afi: u16,
    /// 0 normal request, 1 begin of route refresh, 2 end of route refresh.
    pub subtype: u8,
    /// Subsequent address family.
    pub safi: u8,
}

/// Reads the header at the start of `buf` and returns the whole message length once `buf`
/// holds it all (`None` while more bytes are needed). Errors are fatal to the session.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    if buf[..16].iter().any(|b| *b != 0xff) {
        return Err(HeaderError::ConnectionNotSynchronized.into());
    }
    let len = u16::from_be_bytes([buf[16], buf[17]]);
    let (min, max) = match buf[18] {
        msg_type::OPEN => (29, MAX_MESSAGE_LEN),
        msg_type::UPDATE => (23, MAX_MESSAGE_LEN),
        msg_type::NOTIFICATION => (21, MAX_MESSAGE_LEN),
        msg_type::KEEPALIVE => (19, 19),
        // A wrong ROUTE-REFRESH length has its own error (RFC 7313 §5), raised in decode.
        msg_type::ROUTE_REFRESH => (19, MAX_MESSAGE_LEN),
        t => return Err(HeaderError::BadType(t).into()),
    };
    let l = usize::from(len);
    if l < min || l > max {
        return Err(HeaderError::BadLength(len).into());
    }
    Ok((buf.len() >= l).then_some(l))
}

/// Decodes one whole message (header included). `buf` must be exactly one message.
pub fn decode(buf: &[u8]) -> Result<Message, DecodeError> {
    let len = match frame_len(buf)? {
        Some(l) if l == buf.len() => l,
        // Shorter than its length field, or with trailing bytes: the length is wrong.
        _ => {
            let field = if buf.len() >= 18 {
                u16::from_be_bytes([buf[16], buf[17]])
            } else {
                buf.len() as u16
            };
            return Err(HeaderError::BadLength(field).into());
        }
    };
    let body = &buf[HEADER_LEN..len];
    match buf[18] {
        msg_type::OPEN => decode_open(body).map(Message::Open),
        msg_type::UPDATE => decode_update(body).map(Message::Update),
        msg_type::NOTIFICATION => Ok(Message::Notification(Notification {
            code: body[0],
            subcode: body[1],
            data: body[2..].to_vec(),
        })),
        msg_type::KEEPALIVE => Ok(Message::Keepalive),
        msg_type::ROUTE_REFRESH => {
            if body.len() != 4 {
                return Err(DecodeError::RouteRefreshLength(len as u16));
            }
            Ok(Message::RouteRefresh(RouteRefresh {
                afi: u16::from_be_bytes([body[0], body[1]]),
                subtype: body[2],
                safi: body[3],
            }))
        }
        t => Err(HeaderError::BadType(t).into()),
    }
}

fn decode_open(body: &[u8]) -> Result<Open, DecodeError> {
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

fn decode_capability(code: u8, v: &[u8]) -> Result<Capability, DecodeError> {
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

fn decode_update(body: &[u8]) -> Result<Update, DecodeError> {
    let wlen = usize::from(u16::from_be_bytes([body[0], body[1]]));
    let after_w = 2 + wlen;
    if body.len() < after_w + 2 {
        return Err(UpdateError::MalformedAttributeList.into());
    }
    let withdrawn = decode_v4_prefixes(&body[2..after_w])?;
    let alen = usize::from(u16::from_be_bytes([body[after_w], body[after_w + 1]]));
    let attr_start = after_w + 2;
    if body.len() < attr_start + alen {
        return Err(UpdateError::MalformedAttributeList.into());
    }
    let nlri = decode_v4_prefixes(&body[attr_start + alen..])?;
    let mut update = Update {
        withdrawn,
        attrs: Vec::new(),
        nlri,
        withdraw_cause: None,
    };
    let mut seen = [false; 256];
    let mut rest = &body[attr_start..attr_start + alen];
    while !rest.is_empty() {
        let [flags, code, ..] = *rest else {
            return Err(UpdateError::MalformedAttributeList.into());
        };
        let (hdr, vlen) = if flags & flag::EXTENDED_LENGTH != 0 {
            match rest.get(2..4) {
                Some(l) => (4, usize::from(u16::from_be_bytes([l[0], l[1]]))),
                None => return Err(UpdateError::MalformedAttributeList.into()),
            }
        } else {
            match rest.get(2) {
                Some(l) => (3, usize::from(*l)),
                None => return Err(UpdateError::MalformedAttributeList.into()),
            }
        };
        if rest.len() < hdr + vlen {
            return Err(UpdateError::MalformedAttributeList.into());
        }
        let whole = &rest[..hdr + vlen];
        let value = &rest[hdr..hdr + vlen];
        rest = &rest[hdr + vlen..];
        if seen[usize::from(code)] {
            if code == attr::MP_REACH_NLRI || code == attr::MP_UNREACH_NLRI {
                return Err(UpdateError::MalformedAttributeList.into());
            }
            // RFC 7606 §3(g): keep the first occurrence, discard the rest.
            continue;
        }
        seen[usize::from(code)] = true;
        match decode_attr(flags, code, value, whole) {
            Ok(Some(a)) => update.attrs.push(a),
            Ok(None) => {}
            Err(e) if e.treat_as_withdraw() => {
                if update.withdraw_cause.is_none() {
                    update.withdraw_cause = Some(e);
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    let has_mp_reach = update
        .attrs
        .iter()
        .any(|a| matches!(a, PathAttr::MpReach(_)));
    if update.withdraw_cause.is_none() && (!update.nlri.is_empty() || has_mp_reach) {
        let mut required = vec![attr::ORIGIN, attr::AS_PATH];
        if !update.nlri.is_empty() {
            required.push(attr::NEXT_HOP);
        }
        if let Some(missing) = required.into_iter().find(|c| !seen[usize::from(*c)]) {
            update.withdraw_cause = Some(UpdateError::MissingWellKnown(missing));
        }
    }
    if update.withdraw_cause.is_some() {
        apply_treat_as_withdraw(&mut update);
    }
    Ok(update)
}

/// RFC 7606 §2: the UPDATE's reachable routes become withdrawn ones, attributes go.
fn apply_treat_as_withdraw(u: &mut Update) {
    let nlri = std::mem::take(&mut u.nlri);
    u.withdrawn.extend(nlri);
    let attrs = std::mem::take(&mut u.attrs);
    for a in attrs {
        match a {
            PathAttr::MpReach(r) => u.attrs.push(PathAttr::MpUnreach(MpUnreach {
                afi: r.afi,
                withdrawn: r.nlri,
            })),
            PathAttr::MpUnreach(w) => u.attrs.push(PathAttr::MpUnreach(w)),
            _ => {}
        }
    }
}

/// Decodes one attribute value. `Ok(None)` discards it (RFC 7606 attribute-discard).
fn decode_attr(
    flags: u8,
    code: u8,
    v: &[u8],
    whole: &[u8],
) -> Result<Option<PathAttr>, UpdateError> {
    let expected = match code {
        attr::ORIGIN
        | attr::AS_PATH
        | attr::NEXT_HOP
        | attr::LOCAL_PREF
        | attr::ATOMIC_AGGREGATE => Some(flag::TRANSITIVE),
        attr::MED | attr::MP_REACH_NLRI | attr::MP_UNREACH_NLRI => Some(flag::OPTIONAL),
        attr::COMMUNITIES | attr::LARGE_COMMUNITIES => Some(flag::OPTIONAL | flag::TRANSITIVE),
        _ => None,
    };
    let Some(expected) = expected else {
        if flags & flag::OPTIONAL == 0 {
            return Err(UpdateError::UnrecognizedWellKnown {
                code,
                data: whole.to_vec(),
            });
        }
        return Ok(Some(PathAttr::Unknown {
            flags: flags & !flag::EXTENDED_LENGTH,
            code,
            data: v.to_vec(),
        }));
    };
    if flags & (flag::OPTIONAL | flag::TRANSITIVE) != expected {
        return Err(UpdateError::AttributeFlags {
            code,
            data: whole.to_vec(),
        });
    }
    let len_err = || UpdateError::AttributeLength {
        code,
        data: whole.to_vec(),
    };
    let u32_of = |v: &[u8]| -> Result<u32, UpdateError> {
        let b: [u8; 4] = v.try_into().map_err(|_| len_err())?;
        Ok(u32::from_be_bytes(b))
    };
    Ok(Some(match code {
        attr::ORIGIN => match v {
            [0] => PathAttr::Origin(Origin::Igp),
            [1] => PathAttr::Origin(Origin::Egp),
            [2] => PathAttr::Origin(Origin::Incomplete),
            [_] => return Err(UpdateError::InvalidOrigin(whole.to_vec())),
            _ => return Err(len_err()),
        },
        attr::AS_PATH => PathAttr::AsPath(decode_as_path(v)?),
        attr::NEXT_HOP => {
            let nh = Ipv4Addr::from(u32_of(v)?);
            if nh.is_unspecified() || nh.is_broadcast() || nh.is_multicast() {
                return Err(UpdateError::InvalidNextHop(whole.to_vec()));
            }
            PathAttr::NextHop(nh)
        }
        attr::MED => PathAttr::Med(u32_of(v)?),
        attr::LOCAL_PREF => PathAttr::LocalPref(u32_of(v)?),
        attr::ATOMIC_AGGREGATE => {
            if !v.is_empty() {
                return Ok(None);
            }
            PathAttr::AtomicAggregate
        }
        attr::COMMUNITIES => {
            if v.is_empty() || !v.len().is_multiple_of(4) {
                return Err(len_err());
            }
            PathAttr::Communities(
                v.chunks_exact(4)
                    .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            )
        }
        attr::LARGE_COMMUNITIES => {
            if v.is_empty() || !v.len().is_multiple_of(12) {
                return Err(len_err());
            }
            PathAttr::LargeCommunities(
                v.chunks_exact(12)
                    .map(|c| {
                        let w = |i: usize| u32::from_be_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
                        [w(0), w(4), w(8)]
                    })
                    .collect(),
            )
        }
        attr::MP_REACH_NLRI => {
            let [a0, a1, safi, nhlen, rest @ ..] = v else {
                return Err(len_err());
            };
            let afi = u16::from_be_bytes([*a0, *a1]);
            if !matches!(afi, AFI_IPV4 | AFI_IPV6) || *safi != SAFI_UNICAST {
                return Ok(Some(PathAttr::Unknown {
                    flags: flags & !flag::EXTENDED_LENGTH,
                    code,
                    data: v.to_vec(),
                }));
            }
            let nhlen = usize::from(*nhlen);
            // Next hop(s), then one reserved octet.
            if rest.len() < nhlen + 1 {
                return Err(len_err());
            }
            let nh = &rest[..nhlen];
            let next_hops = match (afi, nhlen) {
                (AFI_IPV4, 4) => vec![IpAddr::V4(Ipv4Addr::from(u32_of(nh)?))],
                (AFI_IPV6, 16) | (AFI_IPV6, 32) => nh
                    .chunks_exact(16)
                    .map(|c| {
                        let b: [u8; 16] = c.try_into().unwrap_or([0; 16]);
                        IpAddr::V6(Ipv6Addr::from(b))
                    })
                    .collect(),
                _ => return Err(len_err()),
            };
            PathAttr::MpReach(MpReach {
                next_hops,
                nlri: decode_prefixes(afi, &rest[nhlen + 1..])?,
                afi,
            })
        }
        attr::MP_UNREACH_NLRI => {
            let [a0, a1, safi, rest @ ..] = v else {
                return Err(len_err());
            };
            let afi = u16::from_be_bytes([*a0, *a1]);
            if !matches!(afi, AFI_IPV4 | AFI_IPV6) || *safi != SAFI_UNICAST {
                return Ok(Some(PathAttr::Unknown {
                    flags: flags & !flag::EXTENDED_LENGTH,
                    code,
                    data: v.to_vec(),
                }));
            }
            PathAttr::MpUnreach(MpUnreach {
                afi,
                withdrawn: decode_prefixes(afi, rest)?,
            })
        }
        // `expected` above lists exactly the codes matched here; any other code returned
        // earlier, so this arm only keeps the compiler's exhaustiveness check satisfied.
        _ => PathAttr::Unknown {
            flags: flags & !flag::EXTENDED_LENGTH,
            code,
            data: v.to_vec(),
        },
    }))
}

fn decode_as_path(mut v: &[u8]) -> Result<Vec<AsSegment>, UpdateError> {
    let mut segs = Vec::new();
    while !v.is_empty() {
        let [t, n, rest @ ..] = v else {
            return Err(UpdateError::MalformedAsPath);
        };
        let kind = match t {
            1 => AsSegmentKind::Set,
            2 => AsSegmentKind::Sequence,
            3 => AsSegmentKind::ConfedSequence,
            4 => AsSegmentKind::ConfedSet,
            _ => return Err(UpdateError::MalformedAsPath),
        };
        let n = usize::from(*n);
        if n == 0 || rest.len() < n * 4 {
            return Err(UpdateError::MalformedAsPath);
        }
        let asns = rest[..n * 4]
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        segs.push(AsSegment { kind, asns });
        v = &rest[n * 4..];
    }
    Ok(segs)
}

fn decode_v4_prefixes(v: &[u8]) -> Result<Vec<Ipv4Net>, UpdateError> {
    Ok(decode_prefixes(AFI_IPV4, v)?
        .into_iter()
        .filter_map(|p| match p {
            IpNet::V4(p) => Some(p),
            IpNet::V6(_) => None,
        })
        .collect())
}

/// NLRI encoding (RFC 4271 §4.3): length in bits, then the fewest octets holding them.
fn decode_prefixes(afi: u16, mut v: &[u8]) -> Result<Vec<IpNet>, UpdateError> {
    let max = if afi == AFI_IPV4 { 32 } else { 128 };
    let mut out = Vec::new();
    while let [len, rest @ ..] = v {
        let len = *len;
        if len > max {
            return Err(UpdateError::InvalidNetworkField);
        }
        let n = usize::from(len).div_ceil(8);
        if rest.len() < n {
            return Err(UpdateError::InvalidNetworkField);
        }
        let net = if afi == AFI_IPV4 {
            let mut b = [0u8; 4];
            b[..n].copy_from_slice(&rest[..n]);
            Ipv4Net::new(Ipv4Addr::from(b), len)
                .map(|p| IpNet::V4(p.trunc()))
                .map_err(|_| UpdateError::InvalidNetworkField)?
        } else {
            let mut b = [0u8; 16];
            b[..n].copy_from_slice(&rest[..n]);
            Ipv6Net::new(Ipv6Addr::from(b), len)
                .map(|p| IpNet::V6(p.trunc()))
                .map_err(|_| UpdateError::InvalidNetworkField)?
        };
        out.push(net);
        v = &rest[n..];
    }
    Ok(out)
}

impl Message {
    /// Encodes the whole message, header included.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0xff; 16];
        out.extend_from_slice(&[0, 0, 0]);
        let t = match self {
            Message::Open(o) => {
                encode_open(o, &mut out);
                msg_type::OPEN
            }
            Message::Update(u) => {
                encode_update(u, &mut out);
                msg_type::UPDATE
            }
            Message::Notification(n) => {
                out.extend_from_slice(&[n.code, n.subcode]);
                out.extend_from_slice(&n.data);
                msg_type::NOTIFICATION
            }
            Message::Keepalive => msg_type::KEEPALIVE,
            Message::RouteRefresh(r) => {
                out.extend_from_slice(&r.afi.to_be_bytes());
                out.extend_from_slice(&[r.subtype, r.safi]);
                msg_type::ROUTE_REFRESH
            }
        };
        let len = out.len() as u16;
        out[16..18].copy_from_slice(&len.to_be_bytes());
        out[18] = t;
        out
    }

    /// Short name for logs and counters.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Open(_) => "OPEN",
            Message::Update(_) => "UPDATE",
            Message::Notification(_) => "NOTIFICATION",
            Message::Keepalive => "KEEPALIVE",
            Message::RouteRefresh(_) => "ROUTE-REFRESH",
        }
    }
}

fn encode_open(o: &Open, out: &mut Vec<u8>) {
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

fn encode_prefix(p: &IpNet, out: &mut Vec<u8>) {
    let len = p.prefix_len();
    out.push(len);
    let n = usize::from(len).div_ceil(8);
    match p {
        IpNet::V4(p) => out.extend_from_slice(&p.network().octets()[..n]),
        IpNet::V6(p) => out.extend_from_slice(&p.network().octets()[..n]),
    }
}

fn encode_update(u: &Update, out: &mut Vec<u8>) {
    let mut w = Vec::new();
    for p in &u.withdrawn {
        encode_prefix(&IpNet::V4(*p), &mut w);
    }
    out.extend_from_slice(&(w.len() as u16).to_be_bytes());
    out.extend_from_slice(&w);
    let mut a = Vec::new();
    for attr in &u.attrs {
        encode_attr(attr, &mut a);
    }
    out.extend_from_slice(&(a.len() as u16).to_be_bytes());
    out.extend_from_slice(&a);
    for p in &u.nlri {
        encode_prefix(&IpNet::V4(*p), out);
    }
}

fn encode_attr(a: &PathAttr, out: &mut Vec<u8>) {
    let wk = flag::TRANSITIVE;
    let (flags, code, v) = match a {
        PathAttr::Origin(o) => {
            let b = match o {
                Origin::Igp => 0,
                Origin::Egp => 1,
                Origin::Incomplete => 2,
            };
            (wk, attr::ORIGIN, vec![b])
        }
        PathAttr::AsPath(segs) => {
            let mut v = Vec::new();
            for s in segs {
                v.push(match s.kind {
                    AsSegmentKind::Set => 1,
                    AsSegmentKind::Sequence => 2,
                    AsSegmentKind::ConfedSequence => 3,
                    AsSegmentKind::ConfedSet => 4,
                });
                v.push(s.asns.len() as u8);
                for asn in &s.asns {
                    v.extend_from_slice(&asn.to_be_bytes());
                }
            }
            (wk, attr::AS_PATH, v)
        }
        PathAttr::NextHop(nh) => (wk, attr::NEXT_HOP, nh.octets().to_vec()),
        PathAttr::Med(m) => (flag::OPTIONAL, attr::MED, m.to_be_bytes().to_vec()),
        PathAttr::LocalPref(l) => (wk, attr::LOCAL_PREF, l.to_be_bytes().to_vec()),
        PathAttr::AtomicAggregate => (wk, attr::ATOMIC_AGGREGATE, vec![]),
        PathAttr::Communities(cs) => (
            flag::OPTIONAL | flag::TRANSITIVE,
            attr::COMMUNITIES,
            cs.iter().flat_map(|c| c.to_be_bytes()).collect(),
        ),
        PathAttr::LargeCommunities(cs) => (
            flag::OPTIONAL | flag::TRANSITIVE,
            attr::LARGE_COMMUNITIES,
            cs.iter().flatten().flat_map(|c| c.to_be_bytes()).collect(),
        ),
        PathAttr::MpReach(r) => {
            let mut v = r.afi.to_be_bytes().to_vec();
            v.push(SAFI_UNICAST);
            let mut nh = Vec::new();
            for h in &r.next_hops {
                match h {
                    IpAddr::V4(a) => nh.extend_from_slice(&a.octets()),
                    IpAddr::V6(a) => nh.extend_from_slice(&a.octets()),
                }
            }
            v.push(nh.len() as u8);
            v.extend_from_slice(&nh);
            v.push(0);
            for p in &r.nlri {
                encode_prefix(p, &mut v);
            }
            (flag::OPTIONAL, attr::MP_REACH_NLRI, v)
        }
        PathAttr::MpUnreach(u) => {
            let mut v = u.afi.to_be_bytes().to_vec();
            v.push(SAFI_UNICAST);
            for p in &u.withdrawn {
                encode_prefix(p, &mut v);
            }
            (flag::OPTIONAL, attr::MP_UNREACH_NLRI, v)
        }
        PathAttr::Unknown { flags, code, data } => {
            (flags & !flag::EXTENDED_LENGTH, *code, data.clone())
        }
    };
    if v.len() > 255 {
        out.extend_from_slice(&[flags | flag::EXTENDED_LENGTH, code]);
        out.extend_from_slice(&(v.len() as u16).to_be_bytes());
    } else {
        out.extend_from_slice(&[flags, code, v.len() as u8]);
    }
    out.extend_from_slice(&v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_flag_is_ignored_on_known_attributes() {
        // ORIGIN with the Partial bit set (a transitive attribute passed through an old
        // speaker) must still decode.
        let mut m = Message::Update(Update::default()).encode();
        let attrs = [0x60, 1, 1, 0];
        m[21..23].copy_from_slice(&(attrs.len() as u16).to_be_bytes());
        m.extend_from_slice(&attrs);
        let len = m.len() as u16;
        m[16..18].copy_from_slice(&len.to_be_bytes());
        let Ok(Message::Update(u)) = decode(&m) else {
            panic!("decode failed: {:?}", decode(&m))
        };
        assert_eq!(u.attrs, vec![PathAttr::Origin(Origin::Igp)]);
    }
}
