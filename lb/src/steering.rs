//! What a table version asks the XDP program to steer to the engine: its VIPs' keys and
//! the return traffic it owns. Pure data, computed by the control plane's `prepare` from the
//! tables and written into the program's maps by the datapath.

use std::net::IpAddr;

use config::{Mode, Protocol, SourceAcl};

/// A virtual service: frames to `addr:port/proto` are steered (port 0 = every port). ICMP
/// and later fragments to `addr` are steered too, since they carry no ports. A tenant VIP
/// (`tenant_vni`) is matched inside VXLAN instead: on its VNI and the inner destination
/// address, port and protocol; `addr` in the underlay is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VipKey {
    /// VIP address.
    pub addr: IpAddr,
    /// Destination port; 0 for every port.
    pub port: u16,
    /// Transport protocol.
    pub proto: Protocol,
    /// Forwarding mode: the XDP program polices a flood by it (tunnel VIPs are never in
    /// the flow cache, so their established flows are not told apart by a cache miss).
    pub mode: Mode,
    /// The VIP's slot in the engine's tables (its index in the config's VIP list).
    pub slot: u32,
    /// The tenant's VNI (24 bits) for a VIP in a tenant's virtual network; `None` for an
    /// ordinary VIP.
    pub tenant_vni: Option<u32>,
}

/// One VIP's source lists as the program is to hold them: the VIP's slot in the engine's
/// tables, its name (counters are per name) and its lists. Tenant VIPs are not here: their
/// source is inside VXLAN, and the engine checks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclKey {
    pub slot: u32,
    pub vip: String,
    /// The VIP's family (its clients' too).
    pub v6: bool,
    pub acl: SourceAcl,
}

/// Return traffic the engine owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReturnKey {
    /// NAT: replies from a backend (matched on the source) to anybody but the appliance.
    Backend {
        /// Backend address.
        addr: IpAddr,
        /// Backend port; 0 for every port.
        port: u16,
        /// Transport protocol.
        proto: Protocol,
    },
    /// FullNAT: replies to one of our SNAT addresses (matched on the destination).
    Local {
        /// SNAT address.
        addr: IpAddr,
        /// Port; 0 for every port (the usual case: SNAT ports come from a range).
        port: u16,
        /// Transport protocol.
        proto: Protocol,
    },
    /// An answer to a backend's outbound connection: a port of a VIP's `outbound` range
    /// (matched on the destination, port by port; no address-only twin).
    Outbound {
        /// VIP address.
        addr: IpAddr,
        /// One port of the range.
        port: u16,
        /// Transport protocol.
        proto: Protocol,
        /// The VIP's slot.
        vip: u32,
        /// DR: the port owner's backend slot, whose next hop the program rewrites the frame
        /// for itself (with the flow cache on); `None` sends the frame to the engine.
        owner: Option<u16>,
    },
}
