//! QUIC connection-ID routing (QUIC-LB, draft-ietf-quic-load-balancers) for UDP VIPs with
//! `quic_lb`: a QUIC connection outlives its 5-tuple (NAT rebinding, a phone changing
//! networks), so its packets are routed by the server ID its server put in the destination
//! connection ID rather than by the addresses and ports.
//!
//! This module is the pure half: reading the DCID out of a datagram's first bytes (long
//! header: its own length; short header: the VIP's configured length, RFC 8999's
//! version-invariant layout), the encodings ([`codec`]) and each VIP's server-ID table
//! ([`VipQuic`]). The packet step (`process::quic`) decides with it: a routable CID goes to
//! its live backend; anything else (the client's first Initial, another config's CID, a
//! removed backend's ID) falls back to the VIP's normal choice, which the connection table
//! then remembers.
//!
//! ```text
//! Long Header Packet {              Short Header Packet {
//!   Header Form (1) = 1,              Header Form (1) = 0,
//!   Version-Specific Bits (7),        Version-Specific Bits (7),
//!   Version (32),                     Destination Connection ID (..),
//!   Destination CID Length (8),       Version-Specific Data (..),
//!   Destination Connection ID (0..2040),  }
//!   Source CID Length (8), ...
//! }
//! ```

pub mod codec;

use std::ops::Range;
use std::sync::Arc;

pub use codec::{Codec, Undecodable};
use config::quic::{QuicLb, ServerIdClash};
use config::{ServerId, Vip};

/// Per-VIP QUIC-LB counters, indexing [`COUNTERS`]-long arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// Packets routed by their CID to a live backend.
    Routed,
    /// Packets that went to the VIP's normal choice (every unroutable one).
    Fallback,
    /// Of those, packets whose CID names another configuration (or none: 0b111).
    UnknownConfig,
    /// Of those, packets whose DCID could not be read (not QUIC, or shorter than the
    /// configuration's connection ID).
    DecodeFailure,
}

/// Number of [`Counter`]s.
pub const COUNTERS: usize = 4;

impl Counter {
    /// All counters in index order.
    pub const ALL: [Counter; COUNTERS] = [
        Counter::Routed,
        Counter::Fallback,
        Counter::UnknownConfig,
        Counter::DecodeFailure,
    ];

    /// Metric label.
    pub fn name(self) -> &'static str {
        match self {
            Counter::Routed => "routed",
            Counter::Fallback => "fallback",
            Counter::UnknownConfig => "unknown_config",
            Counter::DecodeFailure => "decode_failure",
        }
    }
}

/// What a datagram's CID says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// It names the server ID of the backend in this slot (live or not: the caller asks).
    Backend {
        /// The decoded server ID.
        id: ServerId,
        /// The backend slot.
        slot: u32,
    },
    /// It decodes to a server ID no backend of the VIP has (removed, or a client's random
    /// Initial DCID).
    UnknownServer(ServerId),
    /// It names another configuration.
    UnknownConfig,
    /// No DCID could be read.
    Undecodable,
}

/// A VIP's QUIC-LB routing: its codec and server IDs sorted with their backend slots.
#[derive(Debug, Clone)]
pub struct VipQuic {
    /// The VIP's encoding and key.
    pub codec: Codec,
    ids: Vec<(ServerId, u32)>,
}

impl VipQuic {
    /// The routing of `v` (with `q`, its `quic_lb`), whose backends hold `slots`.
    pub fn build(q: &QuicLb, v: &Vip, slots: Range<u32>) -> Result<VipQuic, ServerIdClash> {
        let ids = q.server_ids(v.backends.iter().map(|b| (b.address, b.port)))?;
        let mut ids: Vec<(ServerId, u32)> = ids.into_iter().zip(slots).collect();
        ids.sort_unstable();
        Ok(VipQuic {
            codec: Codec::new(q),
            ids,
        })
    }

    /// The routing of `v` if it has `quic_lb` (its backends hold `slots`).
    pub fn for_vip(
        v: &Vip,
        slots: Range<u32>,
    ) -> Result<Option<Arc<VipQuic>>, crate::tables::TableError> {
        let Some(q) = &v.quic_lb else { return Ok(None) };
        VipQuic::build(q, v, slots)
            .map(|r| Some(Arc::new(r)))
            .map_err(|c| crate::tables::TableError::QuicServerId(v.name.clone(), c))
    }

    /// What `payload` (a UDP datagram's payload) routes to.
    #[inline]
    pub fn route(&self, payload: &[u8]) -> Route {
        let Some(cid) = dcid(payload, self.codec.cid_len()) else {
            return Route::Undecodable;
        };
        match self.codec.server_id(cid) {
            Ok(id) => match self.ids.binary_search_by(|(k, _)| k.cmp(&id)) {
                Ok(i) => Route::Backend {
                    id,
                    slot: self.ids[i].1,
                },
                Err(_) => Route::UnknownServer(id),
            },
            Err(Undecodable::UnknownConfig) => Route::UnknownConfig,
            Err(Undecodable::TooShort) => Route::Undecodable,
        }
    }

    /// The server ID of backend slot `slot`, if it is one of this VIP's.
    pub fn id_of(&self, slot: u32) -> Option<ServerId> {
        self.ids.iter().find(|(_, s)| *s == slot).map(|(id, _)| *id)
    }
}

/// The destination connection ID of a QUIC datagram: a long header's as long as it says, a
/// short header's the `short_len` octets after the first byte. `None` when the datagram is
/// too short to hold it.
#[inline]
pub fn dcid(payload: &[u8], short_len: usize) -> Option<&[u8]> {
    let &first = payload.first()?;
    if first & 0x80 != 0 {
        let len = usize::from(*payload.get(5)?);
        payload.get(6..6 + len)
    } else {
        payload.get(1..1 + short_len)
    }
}

#[cfg(test)]
mod tests;
