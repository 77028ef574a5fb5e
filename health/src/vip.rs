//! The VIP probe: proof that a DR or tunnel backend holds the VIP and serves it.
//!
//! A check on the backend's own address says the application runs; it says nothing about
//! the VIP, which a DR backend holds on `lo` and a tunnel backend behind its decapsulation
//! device. A backend that lost it answers its own address, stays up, and blackholes every
//! flow Maglev sends it. The VIP probe closes that gap the way Katran's healthchecking
//! program does: it sends a probe to the VIP, forced to the backend exactly as the datapath
//! forwards a client's packet (to the backend's MAC, or encapsulated), and waits for the
//! answer the backend sends from the VIP.
//!
//! Building and sending that frame needs the datapath's tables and tunnel code, so this
//! crate only defines the question ([`VipProbe`]), the answer ([`VipFailure`]) and the
//! trait the appliance implements ([`VipProber`]); [`crate::ProbeContext::with_vip_prober`]
//! takes the implementation.

use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::Duration;

/// The transport the VIP serves, which decides what the VIP probe sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VipProtocol {
    /// A TCP SYN: a SYN-ACK from the VIP passes, a RST fails.
    Tcp,
    /// The check's UDP payload: a reply from the VIP passes.
    Udp,
}

/// The VIP a target's backend must prove it serves, part of the probe's identity: a backend
/// in two DR VIPs is probed for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ViaVip {
    /// The VIP's address and the port probed on it (the service port).
    pub vip: SocketAddr,
    /// The VIP's transport.
    pub protocol: VipProtocol,
    /// The backend's port in the VIP (with the target's address, the backend's identity in
    /// the appliance's tables).
    pub backend_port: u16,
    /// A tenant VIP's VNI: the VIP's address is the tenant's (another tenant may use it).
    pub tenant_vni: Option<u32>,
}

impl fmt::Display for ViaVip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = match self.protocol {
            VipProtocol::Tcp => "tcp",
            VipProtocol::Udp => "udp",
        };
        write!(f, "via vip {proto} {}", self.vip)?;
        match self.tenant_vni {
            Some(vni) => write!(f, " vni {vni}"),
            None => Ok(()),
        }
    }
}

/// One VIP probe to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VipProbe {
    /// The backend's own address.
    pub backend: IpAddr,
    /// The VIP to probe through it.
    pub via: ViaVip,
    /// UDP VIPs: the datagram sent (the check's payload) and what the reply must contain.
    pub udp: Option<(Vec<u8>, Option<Vec<u8>>)>,
    /// How long to wait for the answer.
    pub timeout: Duration,
}

/// Why a VIP probe failed, in words that send the operator to the right box.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VipFailure {
    /// Nothing came back from the VIP: the backend does not hold it (or cannot decapsulate).
    #[error(
        "VIP probe: the backend did not answer for VIP {0} (does it hold the VIP on lo or its tunnel device?)"
    )]
    NoAnswer(SocketAddr),
    /// The backend holds the VIP but nothing listens on the port (TCP RST, ICMP port
    /// unreachable).
    #[error("VIP probe: VIP port {0} closed on the backend")]
    Closed(SocketAddr),
    /// The UDP reply from the VIP lacked the expected bytes.
    #[error("VIP probe: the reply from VIP {vip} lacked {expect:?}")]
    ReplyMismatch {
        /// The VIP probed.
        vip: SocketAddr,
        /// What the check expects.
        expect: String,
    },
    /// The appliance cannot send the probe: no table entry or next hop for the backend yet.
    #[error("VIP probe not sent: {0}")]
    NotSent(String),
    /// The probe socket failed.
    #[error("VIP probe: {0}")]
    Io(String),
    /// No VIP prober runs here (the health crate outside the appliance).
    #[error("VIP probe: not available in this process")]
    Unavailable,
}

impl VipFailure {
    /// A short stable label for counters and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            VipFailure::NoAnswer(_) => "vip_no_answer",
            VipFailure::Closed(_) => "vip_closed",
            VipFailure::ReplyMismatch { .. } => "vip_reply_mismatch",
            VipFailure::NotSent(_) => "vip_not_sent",
            VipFailure::Io(_) => "vip_io",
            VipFailure::Unavailable => "vip_unavailable",
        }
    }
}

/// The future a [`VipProber`] returns.
pub type VipFuture = Pin<Box<dyn Future<Output = Result<(), VipFailure>> + Send>>;

/// Sends VIP probes the way the datapath sends traffic; implemented by the appliance.
pub trait VipProber: Send + Sync + fmt::Debug {
    /// Runs one probe to completion within `probe.timeout` (the prober also bounds it).
    fn probe(&self, probe: VipProbe) -> VipFuture;
}
