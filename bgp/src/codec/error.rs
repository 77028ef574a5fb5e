//! The decode-error tree: every way a received message can be malformed, and the one `From`
//! impl that turns it into the NOTIFICATION RFC 4271 §6 prescribes. Keeping the mapping in one
//! place makes the code/subcode table reviewable against the RFC in a single screen.

use super::Notification;

/// NOTIFICATION error codes (IANA "BGP Error (Notification) Codes" registry).
pub mod code {
    /// Message Header Error (RFC 4271).
    pub const MESSAGE_HEADER: u8 = 1;
    /// OPEN Message Error (RFC 4271).
    pub const OPEN_MESSAGE: u8 = 2;
    /// UPDATE Message Error (RFC 4271).
    pub const UPDATE_MESSAGE: u8 = 3;
    /// Hold Timer Expired (RFC 4271).
    pub const HOLD_TIMER_EXPIRED: u8 = 4;
    /// Finite State Machine Error (RFC 4271, subcodes RFC 6608).
    pub const FSM: u8 = 5;
    /// Cease (RFC 4271, subcodes RFC 4486).
    pub const CEASE: u8 = 6;
    /// ROUTE-REFRESH Message Error (RFC 7313).
    pub const ROUTE_REFRESH: u8 = 7;
}

/// Cease subcodes (IANA "BGP Cease NOTIFICATION message subcodes", RFC 4486).
pub mod cease {
    /// Maximum Number of Prefixes Reached (RFC 4486 §3); data: AFI, SAFI, upper bound.
    pub const MAX_PREFIXES: u8 = 1;
    /// Administrative Shutdown.
    pub const ADMINISTRATIVE_SHUTDOWN: u8 = 2;
    /// Peer De-configured.
    pub const PEER_DECONFIGURED: u8 = 3;
    /// Administrative Reset.
    pub const ADMINISTRATIVE_RESET: u8 = 4;
    /// Connection Rejected.
    pub const CONNECTION_REJECTED: u8 = 5;
    /// Connection Collision Resolution.
    pub const CONNECTION_COLLISION: u8 = 7;
    /// BFD Down (RFC 9384): the BFD session protecting this BGP session went down.
    pub const BFD_DOWN: u8 = 10;
}

/// Why a received message could not be accepted. Each leaf knows its NOTIFICATION.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The 19-octet header is wrong (RFC 4271 §6.1).
    #[error("message header: {0}")]
    Header(#[from] HeaderError),
    /// An OPEN message is wrong (RFC 4271 §6.2).
    #[error("OPEN: {0}")]
    Open(#[from] OpenError),
    /// An UPDATE message is wrong (RFC 4271 §6.3, RFC 7606).
    #[error("UPDATE: {0}")]
    Update(#[from] UpdateError),
    /// A ROUTE-REFRESH message has the wrong length (RFC 7313 §5).
    #[error("ROUTE-REFRESH: invalid message length {0}")]
    RouteRefreshLength(u16),
}

/// Message Header Error subcodes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The marker is not 16 octets of ones (subcode 1).
    #[error("connection not synchronized (marker is not all ones)")]
    ConnectionNotSynchronized,
    /// The length field is out of range for the message type (subcode 2); data is the length.
    #[error("bad message length {0}")]
    BadLength(u16),
    /// Unknown message type (subcode 3); data is the type.
    #[error("bad message type {0}")]
    BadType(u8),
}

/// OPEN Message Error subcodes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Version is not 4 (subcode 1); data is the version we support.
    #[error("unsupported version number {0}")]
    UnsupportedVersion(u8),
    /// The peer's AS is not the configured one (subcode 2).
    #[error("bad peer AS {0}")]
    BadPeerAs(u32),
    /// BGP identifier is 0 or equals ours on iBGP (subcode 3).
    #[error("bad BGP identifier {0}")]
    BadBgpIdentifier(std::net::Ipv4Addr),
    /// An optional parameter other than Capabilities (subcode 4).
    #[error("unsupported optional parameter type {0}")]
    UnsupportedOptionalParameter(u8),
    /// Hold time 1 or 2 seconds (subcode 6).
    #[error("unacceptable hold time {0}")]
    UnacceptableHoldTime(u16),
    /// A capability we require is missing (subcode 7); data is the capability we need.
    #[error("unsupported capability: peer lacks capability {code}")]
    UnsupportedCapability {
        /// Capability code the peer must support.
        code: u8,
        /// Capability value we would accept.
        data: Vec<u8>,
    },
    /// Optional parameters or capabilities overrun their length (subcode 0, unspecific).
    #[error("malformed optional parameters")]
    Malformed,
}

/// UPDATE Message Error subcodes. `treat_as_withdraw` tells which ones RFC 7606 downgrades.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// Lengths inconsistent, or MP_REACH/MP_UNREACH repeated (subcode 1).
    #[error("malformed attribute list")]
    MalformedAttributeList,
    /// A well-known attribute we do not know (subcode 2); data is the attribute.
    #[error("unrecognized well-known attribute {code}")]
    UnrecognizedWellKnown {
        /// Attribute type code.
        code: u8,
        /// The whole attribute (flags, type, length, value).
        data: Vec<u8>,
    },
    /// A mandatory well-known attribute is absent (subcode 3); data is its type code.
    #[error("missing well-known attribute {0}")]
    MissingWellKnown(u8),
    /// Flags conflict with the type code (subcode 4); data is the attribute.
    #[error("attribute flags error on attribute {code}")]
    AttributeFlags {
        /// Attribute type code.
        code: u8,
        /// The whole attribute.
        data: Vec<u8>,
    },
    /// Length wrong for the type (subcode 5); data is the attribute.
    #[error("attribute length error on attribute {code}")]
    AttributeLength {
        /// Attribute type code.
        code: u8,
        /// The whole attribute.
        data: Vec<u8>,
    },
    /// ORIGIN value not 0..=2 (subcode 6); data is the attribute.
    #[error("invalid ORIGIN attribute")]
    InvalidOrigin(Vec<u8>),
    /// NEXT_HOP is not a usable unicast address (subcode 8); data is the attribute.
    #[error("invalid NEXT_HOP attribute")]
    InvalidNextHop(Vec<u8>),
    /// An optional attribute's value is wrong (subcode 9); data is the attribute.
    #[error("optional attribute error on attribute {code}")]
    OptionalAttribute {
        /// Attribute type code.
        code: u8,
        /// The whole attribute.
        data: Vec<u8>,
    },
    /// An NLRI prefix length is impossible (subcode 10).
    #[error("invalid network field")]
    InvalidNetworkField,
    /// AS_PATH segments are malformed (subcode 11).
    #[error("malformed AS_PATH")]
    MalformedAsPath,
}

impl UpdateError {
    /// Whether RFC 7606 says to keep the session and treat the UPDATE's routes as withdrawn.
    /// Errors that make the NLRI unlocatable, or hit MP_REACH/MP_UNREACH, still reset.
    pub fn treat_as_withdraw(&self) -> bool {
        match self {
            UpdateError::MalformedAttributeList
            | UpdateError::UnrecognizedWellKnown { .. }
            | UpdateError::InvalidNetworkField => false,
            UpdateError::AttributeFlags { code, .. }
            | UpdateError::AttributeLength { code, .. }
            | UpdateError::OptionalAttribute { code, .. } => {
                *code != super::attr::MP_REACH_NLRI && *code != super::attr::MP_UNREACH_NLRI
            }
            UpdateError::MissingWellKnown(_)
            | UpdateError::InvalidOrigin(_)
            | UpdateError::InvalidNextHop(_)
            | UpdateError::MalformedAsPath => true,
        }
    }
}

impl From<&DecodeError> for Notification {
    fn from(e: &DecodeError) -> Notification {
        let (code, subcode, data) = match e {
            DecodeError::Header(h) => (
                code::MESSAGE_HEADER,
                match h {
                    HeaderError::ConnectionNotSynchronized => (1, vec![]),
                    HeaderError::BadLength(len) => (2, len.to_be_bytes().to_vec()),
                    HeaderError::BadType(t) => (3, vec![*t]),
                },
            )
                .flatten(),
            DecodeError::Open(o) => (
                code::OPEN_MESSAGE,
                match o {
                    OpenError::UnsupportedVersion(_) => (1, 4u16.to_be_bytes().to_vec()),
                    OpenError::BadPeerAs(_) => (2, vec![]),
                    OpenError::BadBgpIdentifier(_) => (3, vec![]),
                    OpenError::UnsupportedOptionalParameter(_) => (4, vec![]),
                    OpenError::UnacceptableHoldTime(_) => (6, vec![]),
                    OpenError::UnsupportedCapability { code, data } => {
                        let mut d = vec![*code, data.len() as u8];
                        d.extend_from_slice(data);
                        (7, d)
                    }
                    OpenError::Malformed => (0, vec![]),
                },
            )
                .flatten(),
            DecodeError::Update(u) => (
                code::UPDATE_MESSAGE,
                match u {
                    UpdateError::MalformedAttributeList => (1, vec![]),
                    UpdateError::UnrecognizedWellKnown { data, .. } => (2, data.clone()),
                    UpdateError::MissingWellKnown(c) => (3, vec![*c]),
                    UpdateError::AttributeFlags { data, .. } => (4, data.clone()),
                    UpdateError::AttributeLength { data, .. } => (5, data.clone()),
                    UpdateError::InvalidOrigin(data) => (6, data.clone()),
                    UpdateError::InvalidNextHop(data) => (8, data.clone()),
                    UpdateError::OptionalAttribute { data, .. } => (9, data.clone()),
                    UpdateError::InvalidNetworkField => (10, vec![]),
                    UpdateError::MalformedAsPath => (11, vec![]),
                },
            )
                .flatten(),
            DecodeError::RouteRefreshLength(_) => (code::ROUTE_REFRESH, 1, vec![]),
        };
        Notification {
            code,
            subcode,
            data,
        }
    }
}

/// Flattens `(code, (subcode, data))` so each arm above reads as one table row.
trait Flatten {
    fn flatten(self) -> (u8, u8, Vec<u8>);
}

impl Flatten for (u8, (u8, Vec<u8>)) {
    fn flatten(self) -> (u8, u8, Vec<u8>) {
        (self.0, self.1.0, self.1.1)
    }
}
