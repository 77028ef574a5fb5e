//! Tenant VIPs' lookups (issue 23): a tenant VIP is found by its zone
//! ([`crate::hash::zone_of`] its VNI), address, port and protocol, never by address
//! alone, so tenants may reuse each other's (and the underlay's) addresses. The engine's
//! per-packet side is `lb::process::tenant`.

use crate::hash::FlowKey;
use crate::tables::Core;

impl Core {
    /// The tenant VIP serving `addr:port` over `proto` in `zone` (a tenant's): an exact
    /// port first, then a port-0 VIP.
    #[inline]
    pub fn tenant_vip(&self, zone: u32, addr: u128, port: u16, proto: u8) -> Option<u32> {
        let t = &self.tenant_index;
        t.get(&(zone, addr, port, proto))
            .or_else(|| t.get(&(zone, addr, 0, proto)))
            .copied()
    }

    /// Whether any VIP is a tenant's (the engine then looks into VXLAN frames).
    #[inline(always)]
    pub fn has_tenants(&self) -> bool {
        !self.tenant_index.is_empty()
    }

    /// The tenant zones of these tables' VIPs, in order, once each.
    pub fn tenant_zones(&self) -> Vec<u32> {
        let mut z: Vec<u32> = self
            .vips
            .iter()
            .map(|v| v.zone)
            .filter(|z| *z != 0)
            .collect();
        z.sort_unstable();
        z.dedup();
        z
    }

    /// The VIP serving `addr:port` over `proto` in `zone`: a tenant's, or the underlay's.
    #[inline]
    pub fn vip_in(&self, zone: u32, addr: u128, port: u16, proto: u8) -> Option<u32> {
        if zone != 0 {
            self.tenant_vip(zone, addr, port, proto)
        } else {
            self.vip_lookup(addr, port, proto)
        }
    }

    /// The VIP of a connection-table key: by its zone, address, port and protocol.
    pub fn vip_of_key(&self, k: &FlowKey) -> Option<u32> {
        self.vip_in(k.zone, k.dst, k.dport, k.proto)
    }
}
