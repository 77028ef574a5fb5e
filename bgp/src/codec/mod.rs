//! BGP-4 message codec (RFC 4271 and extensions): owned message types with `encode` and
//! `decode`, stream framing, and the decode-error tree that maps to NOTIFICATIONs.
//!
//! Choice: our own codec rather than a crate. `netgauze-bgp-pkt` 0.13 encodes and decodes
//! everything we need, but its errors are nested nom-based location types per field; turning
//! them into RFC 4271 code/subcode pairs (and deciding RFC 7606 treat-as-withdraw) would mean
//! a large, fragile match on another crate's internals, and it pulls serde/nom/strum trees
//! into the appliance. `routecore` 0.7 parses well but builds messages through a separate
//! builder API with its own attribute model, and its parse error is opaque (no code/subcode).
//! A speaker that only announces host routes needs a small, fixed subset, so plain code with
//! the RFC diagrams above each type is easier to audit than either adapter. One file per
//! message (`open`, `update`, `notification`, `route_refresh`), the path attributes in
//! `attr` and the NLRI prefixes both use in `prefix`; this one frames messages and
//! dispatches on their type.
//!
//! The 4-octet AS capability is mandatory for our peers, so AS_PATH is always decoded with
//! 4-octet ASNs (RFC 6793 "NEW" speakers); AS4_PATH is carried as an unknown optional
//! attribute, which RFC 6793 §4.1 lets a NEW speaker ignore.

pub mod attr;
mod error;
mod notification;
mod open;
mod prefix;
mod route_refresh;
mod update;

pub use attr::{AsSegment, AsSegmentKind, LargeCommunity, MpReach, MpUnreach, Origin, PathAttr};
pub use error::{DecodeError, HeaderError, OpenError, UpdateError, cease, code};
pub use notification::Notification;
pub use open::{Capability, Open};
pub use route_refresh::RouteRefresh;
pub use update::Update;

use notification::{decode_notification, encode_notification};
use open::{decode_open, encode_open};
use route_refresh::{decode_route_refresh, encode_route_refresh};
use update::{decode_update, encode_update};

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
        msg_type::NOTIFICATION => Ok(Message::Notification(decode_notification(body))),
        msg_type::KEEPALIVE => Ok(Message::Keepalive),
        msg_type::ROUTE_REFRESH => decode_route_refresh(body, len).map(Message::RouteRefresh),
        t => Err(HeaderError::BadType(t).into()),
    }
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
                encode_notification(n, &mut out);
                msg_type::NOTIFICATION
            }
            Message::Keepalive => msg_type::KEEPALIVE,
            Message::RouteRefresh(r) => {
                encode_route_refresh(r, &mut out);
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
