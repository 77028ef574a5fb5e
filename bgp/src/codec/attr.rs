//! Path attributes (RFC 4271 §4.3 and extensions): their type codes, the values we
//! interpret, and the RFC 7606 rules for which malformed ones end the session, are treated
//! as withdraw, or are discarded.
//!
//! Type codes are from the IANA "BGP Path Attributes" registry.

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::prefix::{decode_prefixes, encode_prefix};
use super::{AFI_IPV4, AFI_IPV6, DecodeError, SAFI_UNICAST, Update, UpdateError};

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
/// Attribute flag bits (RFC 4271 §4.3).
mod flag {
    pub const OPTIONAL: u8 = 0x80;
    pub const TRANSITIVE: u8 = 0x40;
    pub const EXTENDED_LENGTH: u8 = 0x10;
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

/// Decodes the attribute list of an UPDATE into `update.attrs`, keeping in
/// `update.withdraw_cause` the first error RFC 7606 answers with treat-as-withdraw.
/// Returns which type codes were present, to check the mandatory ones.
pub(super) fn decode_attrs(
    mut rest: &[u8],
    update: &mut Update,
) -> Result<[bool; 256], DecodeError> {
    let mut seen = [false; 256];
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
            if code == MP_REACH_NLRI || code == MP_UNREACH_NLRI {
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
    Ok(seen)
}

/// The optional and transitive flags a known attribute must carry; `None` for codes we do
/// not interpret.
fn expected_flags(code: u8) -> Option<u8> {
    match code {
        ORIGIN | AS_PATH | NEXT_HOP | LOCAL_PREF | ATOMIC_AGGREGATE => Some(flag::TRANSITIVE),
        MED | MP_REACH_NLRI | MP_UNREACH_NLRI => Some(flag::OPTIONAL),
        COMMUNITIES | LARGE_COMMUNITIES => Some(flag::OPTIONAL | flag::TRANSITIVE),
        _ => None,
    }
}

/// An attribute kept verbatim (the extended-length bit is recomputed on encode).
fn unknown(flags: u8, code: u8, v: &[u8]) -> PathAttr {
    PathAttr::Unknown {
        flags: flags & !flag::EXTENDED_LENGTH,
        code,
        data: v.to_vec(),
    }
}

/// Decodes one attribute value. `Ok(None)` discards it (RFC 7606 attribute-discard).
fn decode_attr(
    flags: u8,
    code: u8,
    v: &[u8],
    whole: &[u8],
) -> Result<Option<PathAttr>, UpdateError> {
    let Some(expected) = expected_flags(code) else {
        if flags & flag::OPTIONAL == 0 {
            return Err(UpdateError::UnrecognizedWellKnown {
                code,
                data: whole.to_vec(),
            });
        }
        return Ok(Some(unknown(flags, code, v)));
    };
    if flags & (flag::OPTIONAL | flag::TRANSITIVE) != expected {
        return Err(UpdateError::AttributeFlags {
            code,
            data: whole.to_vec(),
        });
    }
    let len_err = || length_error(code, whole);
    Ok(Some(match code {
        ORIGIN => match v {
            [0] => PathAttr::Origin(Origin::Igp),
            [1] => PathAttr::Origin(Origin::Egp),
            [2] => PathAttr::Origin(Origin::Incomplete),
            [_] => return Err(UpdateError::InvalidOrigin(whole.to_vec())),
            _ => return Err(len_err()),
        },
        AS_PATH => PathAttr::AsPath(decode_as_path(v)?),
        NEXT_HOP => {
            let nh = Ipv4Addr::from(be_u32(v).ok_or_else(len_err)?);
            if nh.is_unspecified() || nh.is_broadcast() || nh.is_multicast() {
                return Err(UpdateError::InvalidNextHop(whole.to_vec()));
            }
            PathAttr::NextHop(nh)
        }
        MED => PathAttr::Med(be_u32(v).ok_or_else(len_err)?),
        LOCAL_PREF => PathAttr::LocalPref(be_u32(v).ok_or_else(len_err)?),
        ATOMIC_AGGREGATE => {
            if !v.is_empty() {
                return Ok(None);
            }
            PathAttr::AtomicAggregate
        }
        COMMUNITIES => PathAttr::Communities(communities(v).ok_or_else(len_err)?),
        LARGE_COMMUNITIES => PathAttr::LargeCommunities(large_communities(v).ok_or_else(len_err)?),
        MP_REACH_NLRI => mp_reach(flags, v, whole)?,
        MP_UNREACH_NLRI => mp_unreach(flags, v, whole)?,
        // `expected_flags` lists exactly the codes matched here; any other code returned
        // earlier, so this arm only keeps the compiler's exhaustiveness check satisfied.
        _ => unknown(flags, code, v),
    }))
}

/// A value of the wrong length; the whole attribute goes into the NOTIFICATION's data.
fn length_error(code: u8, whole: &[u8]) -> UpdateError {
    UpdateError::AttributeLength {
        code,
        data: whole.to_vec(),
    }
}

/// A 4-octet value; `None` when `v` is not 4 octets long.
fn be_u32(v: &[u8]) -> Option<u32> {
    let b: [u8; 4] = v.try_into().ok()?;
    Some(u32::from_be_bytes(b))
}

/// COMMUNITIES: one or more 4-octet values; `None` for any other length.
fn communities(v: &[u8]) -> Option<Vec<u32>> {
    if v.is_empty() || !v.len().is_multiple_of(4) {
        return None;
    }
    Some(
        v.chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// LARGE_COMMUNITY: one or more 12-octet values; `None` for any other length.
fn large_communities(v: &[u8]) -> Option<Vec<LargeCommunity>> {
    if v.is_empty() || !v.len().is_multiple_of(12) {
        return None;
    }
    Some(
        v.chunks_exact(12)
            .map(|c| {
                let w = |i: usize| u32::from_be_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
                [w(0), w(4), w(8)]
            })
            .collect(),
    )
}

/// MP_REACH_NLRI; a family other than IPv4 or IPv6 unicast is kept as unknown.
fn mp_reach(flags: u8, v: &[u8], whole: &[u8]) -> Result<PathAttr, UpdateError> {
    let len_err = || length_error(MP_REACH_NLRI, whole);
    let [a0, a1, safi, nhlen, rest @ ..] = v else {
        return Err(len_err());
    };
    let afi = u16::from_be_bytes([*a0, *a1]);
    if !matches!(afi, AFI_IPV4 | AFI_IPV6) || *safi != SAFI_UNICAST {
        return Ok(unknown(flags, MP_REACH_NLRI, v));
    }
    let nhlen = usize::from(*nhlen);
    // Next hop(s), then one reserved octet.
    if rest.len() < nhlen + 1 {
        return Err(len_err());
    }
    let nh = &rest[..nhlen];
    let next_hops = match (afi, nhlen) {
        (AFI_IPV4, 4) => vec![IpAddr::V4(Ipv4Addr::from(be_u32(nh).ok_or_else(len_err)?))],
        (AFI_IPV6, 16) | (AFI_IPV6, 32) => nh
            .chunks_exact(16)
            .map(|c| {
                let b: [u8; 16] = c.try_into().unwrap_or([0; 16]);
                IpAddr::V6(Ipv6Addr::from(b))
            })
            .collect(),
        _ => return Err(len_err()),
    };
    Ok(PathAttr::MpReach(MpReach {
        next_hops,
        nlri: decode_prefixes(afi, &rest[nhlen + 1..])?,
        afi,
    }))
}

/// MP_UNREACH_NLRI; a family other than IPv4 or IPv6 unicast is kept as unknown.
fn mp_unreach(flags: u8, v: &[u8], whole: &[u8]) -> Result<PathAttr, UpdateError> {
    let [a0, a1, safi, rest @ ..] = v else {
        return Err(length_error(MP_UNREACH_NLRI, whole));
    };
    let afi = u16::from_be_bytes([*a0, *a1]);
    if !matches!(afi, AFI_IPV4 | AFI_IPV6) || *safi != SAFI_UNICAST {
        return Ok(unknown(flags, MP_UNREACH_NLRI, v));
    }
    Ok(PathAttr::MpUnreach(MpUnreach {
        afi,
        withdrawn: decode_prefixes(afi, rest)?,
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

pub(super) fn encode_attr(a: &PathAttr, out: &mut Vec<u8>) {
    let (flags, code, v) = encode_value(a);
    if v.len() > 255 {
        out.extend_from_slice(&[flags | flag::EXTENDED_LENGTH, code]);
        out.extend_from_slice(&(v.len() as u16).to_be_bytes());
    } else {
        out.extend_from_slice(&[flags, code, v.len() as u8]);
    }
    out.extend_from_slice(&v);
}

/// Flags (without extended length), type code and value.
fn encode_value(a: &PathAttr) -> (u8, u8, Vec<u8>) {
    let wk = flag::TRANSITIVE;
    match a {
        PathAttr::Origin(o) => {
            let b = match o {
                Origin::Igp => 0,
                Origin::Egp => 1,
                Origin::Incomplete => 2,
            };
            (wk, ORIGIN, vec![b])
        }
        PathAttr::AsPath(segs) => (wk, AS_PATH, encode_as_path(segs)),
        PathAttr::NextHop(nh) => (wk, NEXT_HOP, nh.octets().to_vec()),
        PathAttr::Med(m) => (flag::OPTIONAL, MED, m.to_be_bytes().to_vec()),
        PathAttr::LocalPref(l) => (wk, LOCAL_PREF, l.to_be_bytes().to_vec()),
        PathAttr::AtomicAggregate => (wk, ATOMIC_AGGREGATE, vec![]),
        PathAttr::Communities(cs) => (
            flag::OPTIONAL | flag::TRANSITIVE,
            COMMUNITIES,
            cs.iter().flat_map(|c| c.to_be_bytes()).collect(),
        ),
        PathAttr::LargeCommunities(cs) => (
            flag::OPTIONAL | flag::TRANSITIVE,
            LARGE_COMMUNITIES,
            cs.iter().flatten().flat_map(|c| c.to_be_bytes()).collect(),
        ),
        PathAttr::MpReach(r) => (flag::OPTIONAL, MP_REACH_NLRI, encode_mp_reach(r)),
        PathAttr::MpUnreach(u) => {
            let mut v = u.afi.to_be_bytes().to_vec();
            v.push(SAFI_UNICAST);
            for p in &u.withdrawn {
                encode_prefix(p, &mut v);
            }
            (flag::OPTIONAL, MP_UNREACH_NLRI, v)
        }
        PathAttr::Unknown { flags, code, data } => {
            (flags & !flag::EXTENDED_LENGTH, *code, data.clone())
        }
    }
}

fn encode_as_path(segs: &[AsSegment]) -> Vec<u8> {
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
    v
}

fn encode_mp_reach(r: &MpReach) -> Vec<u8> {
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
    v
}
