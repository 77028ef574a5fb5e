//! UPDATE (RFC 4271 §4.3): routes announced and withdrawn, with RFC 7606's
//! treat-as-withdraw for attributes that are malformed but leave the message readable.

use ipnet::{IpNet, Ipv4Net};

use super::attr::{self, MpUnreach, PathAttr, decode_attrs, encode_attr};
use super::prefix::{decode_v4_prefixes, encode_prefix};
use super::{DecodeError, UpdateError};

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

pub(super) fn decode_update(body: &[u8]) -> Result<Update, DecodeError> {
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
    let seen = decode_attrs(&body[attr_start..attr_start + alen], &mut update)?;
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

pub(super) fn encode_update(u: &Update, out: &mut Vec<u8>) {
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
