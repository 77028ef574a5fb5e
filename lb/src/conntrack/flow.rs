//! One tracked flow: the client → VIP key it is found by, the key its return traffic
//! carries, and what its rewrites need to remember (the client-address carry).

use super::{Evidence, FlowState, Track};
use crate::hash::FlowKey;
use config::ClientAddress;

/// The key return traffic carries: backend → local side (client for NAT, SNAT address and
/// port for FullNAT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RevKey {
    /// IANA protocol number.
    pub proto: u8,
    /// Backend address (source of return traffic).
    pub backend: u128,
    /// Backend port.
    pub backend_port: u16,
    /// Destination of return traffic: the client (NAT) or the SNAT address (FullNAT).
    pub local: u128,
    /// Destination port of return traffic.
    pub local_port: u16,
}

/// One tracked flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Client → VIP key (the VIP identity is its destination address, port and protocol).
    pub key: FlowKey,
    /// VIP slot in the table version `version`.
    pub vip: u32,
    /// Backend slot in table version `version`; `u32::MAX` when the backend is gone.
    pub backend: u32,
    /// Backend address, so the flow can be re-bound after a table swap.
    pub backend_addr: u128,
    /// Backend port.
    pub backend_port: u16,
    /// Table version the slots refer to.
    pub version: u64,
    /// Connection state.
    pub state: FlowState,
    /// Evidence toward established.
    pub evidence: Evidence,
    /// Last packet seen, in the caller's nanosecond clock.
    pub last_seen: u64,
    /// The flow hash under the VIP's hash fields (tunnel outer source, stateless answers).
    pub hash: u32,
    /// FullNAT local address and port.
    pub snat: Option<(u128, u16)>,
    /// Whether the reverse index holds this flow (NAT, FullNAT).
    pub reverse: bool,
    /// How this flow carries the client's address to the backend (FullNAT TCP VIPs with
    /// `client_address`), and where it stands.
    pub carry: Carry,
    /// Where its sequence spaces stand (TCP).
    pub track: Track,
}

/// A FullNAT TCP flow that tells the backend the client's address (`client_address`):
/// what the rewrites of its later segments need to know. `Carry::default()` for every
/// other flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Carry {
    /// What the flow adds.
    pub kind: ClientAddress,
    /// proxy-v2: the client's first sequence number after its SYN, where the header goes in
    /// the backend's view. toa: the backend's first sequence number after its SYN-ACK; the
    /// client's segments that acknowledge exactly it (sent before the backend sent any
    /// data, the handshake's ACK first) carry the option, as DPVS does.
    pub base: u32,
    /// proxy-v2: the header's length, by which the backend's sequence space runs ahead of
    /// the client's once the header went out.
    pub delta: u8,
    /// proxy-v2: the header went out (the shift applies). toa: `base` is known.
    pub armed: bool,
    /// How the SYN proxy opened the flow, if it did (any TCP VIP of NAT or FullNAT).
    pub proxy: Proxied,
}

/// A flow the SYN proxy opened (`process::synproxy`): the client's handshake was with the
/// appliance, whose initial sequence number was the cookie; the backend's with the
/// appliance on the client's behalf. The backend chose its own initial sequence number, so
/// for the flow's life its sequence numbers move by a constant on their way to the client
/// and the client's acknowledgements (and SACK edges) back on their way to the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Proxied {
    /// The flow opened as any other: its SYN went to the backend.
    #[default]
    No,
    /// The client's ACK carried a valid cookie; the SYN went to the backend, whose SYN-ACK
    /// has not come yet.
    Opening {
        /// The appliance's initial sequence number toward the client.
        cookie: u32,
        /// What the cookie encoded of the client's SYN (`synproxy::cookie::Options`): what
        /// a SYN sent again carries.
        options: u8,
        /// The window field of the client's ACK (scaled by its window scale): what the
        /// handshake's ACK tells the backend.
        window: u16,
    },
    /// The backend answered: the flow's segments are shifted.
    Open {
        /// The backend's initial sequence number less the cookie: what the backend's
        /// sequence numbers lose toward the client, and the client's acknowledgements gain
        /// toward the backend.
        shift: u32,
        /// How the client's window fields are rescaled for the backend.
        fwd: Rescale,
        /// How the backend's window fields are rescaled for the client.
        rev: Rescale,
    },
}

/// A window field's rescale between the window scale its sender applied and the one its
/// receiver reads with (RFC 7323 2.3): the appliance announced its own scale to the client
/// before the backend announced the backend's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rescale {
    /// The shift the sender's window field is scaled by.
    pub from: u8,
    /// The shift the receiver multiplies the field by.
    pub to: u8,
}

impl Rescale {
    /// The field for the receiver: the same window in its scale, rounded down, at most
    /// what 16 bits hold.
    #[inline]
    pub fn apply(self, w: u16) -> u16 {
        if self.from == self.to {
            return w;
        }
        let bytes = u64::from(w) << self.from;
        (bytes >> self.to).min(0xffff) as u16
    }

    /// Whether the field changes at all.
    pub fn is_identity(self) -> bool {
        self.from == self.to
    }
}

/// IANA protocol number of TCP.
pub(super) const TCP: u8 = 6;

impl Carry {
    /// What the client's sequence numbers gain on their way to the backend now: the PROXY
    /// header's length once it went out.
    pub fn shift(&self) -> u32 {
        if self.kind == ClientAddress::ProxyV2 && self.armed {
            u32::from(self.delta)
        } else {
            0
        }
    }

    /// What the backend's sequence numbers lose on their way to the client (and the
    /// client's acknowledgements gain on theirs to the backend): the SYN proxy's shift once
    /// the backend answered, else 0.
    pub fn isn_shift(&self) -> u32 {
        match self.proxy {
            Proxied::Open { shift, .. } => shift,
            _ => 0,
        }
    }
}

impl Flow {
    /// The reverse key of this flow, if return traffic passes the appliance.
    pub fn rev_key(&self) -> Option<RevKey> {
        if !self.reverse {
            return None;
        }
        let (local, local_port) = self.snat.unwrap_or((self.key.src, self.key.sport));
        Some(RevKey {
            proto: self.key.proto,
            backend: self.backend_addr,
            backend_port: self.backend_port,
            local,
            local_port,
        })
    }
}
