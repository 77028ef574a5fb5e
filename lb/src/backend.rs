//! A backend's identity across table versions. Slots in the tables move when the config
//! does, so totals, health verdicts, operator overrides and the flow cache's counter slots
//! are all keyed by what survives a reload: the VIP's name and the backend's address and
//! port.

use std::net::{IpAddr, SocketAddr};

use crate::Tables;

/// One backend of one VIP, by VIP name, backend address and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId {
    /// The VIP's name.
    pub vip: String,
    /// The backend's address.
    pub address: IpAddr,
    /// The backend's port.
    pub port: u16,
}

impl BackendId {
    /// Backend `address:port` of the VIP named `vip`.
    pub fn new(vip: &str, address: IpAddr, port: u16) -> BackendId {
        BackendId {
            vip: vip.to_string(),
            address,
            port,
        }
    }

    /// Backend `b` of VIP `v` in the config. A tenant backend is known by its VTEP (its
    /// address is the tenant's, and validation keeps VTEP and port unique in a VIP), as
    /// the tables know it.
    pub fn of(v: &config::Vip, b: &config::Backend) -> BackendId {
        BackendId::new(&v.name, b.underlay(), b.port)
    }

    /// The backend in slot `slot` of `t`, if there is one.
    pub fn of_slot(t: &Tables, slot: usize) -> Option<BackendId> {
        let b = t.backends.get(slot)?;
        let v = t.vips.get(b.vip as usize)?;
        Some(BackendId::new(&v.name, b.ip(), b.port))
    }

    /// `address:port`, as the operator names the backend.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.address, self.port)
    }
}
