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
