//! A FullNAT VIP's `snat` pool on this appliance: every address is recognised for return
//! traffic (a peer's synced flows use its own), but ports are taken only on the addresses of
//! `[sync] snat` when it is set, so the appliances of a group, one config for all, never hand
//! out the same address and port.

use config::{Config, Vip};

use crate::hash::addr_to_u128;
use crate::tables::{Core, VipEntry};

/// `[sync] snat` as table addresses; empty when unset (the whole pools are this appliance's).
pub(crate) fn own(config: &Config) -> Vec<u128> {
    config
        .sync
        .iter()
        .flat_map(|s| &s.snat)
        .map(|a| addr_to_u128(*a))
        .collect()
}

impl Core {
    /// Indexes `v`'s whole pool for its return traffic, as VIP `vslot`'s; returns the pool.
    pub(crate) fn index_snat(&mut self, v: &Vip, vslot: u32) -> Vec<u128> {
        let snat: Vec<u128> = v.snat.iter().map(|a| addr_to_u128(*a)).collect();
        for &a in &snat {
            self.snat_addresses.insert_first((a, 0, 0), vslot);
        }
        snat
    }
}

impl VipEntry {
    /// Takes ports only on the pool's addresses among `own` (unless `own` is empty).
    pub(crate) fn narrow_snat(&mut self, own: &[u128]) {
        if !own.is_empty() {
            self.snat_alloc.retain(|a| own.contains(a));
        }
    }
}
