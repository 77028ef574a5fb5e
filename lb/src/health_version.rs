//! A version that changes health only: what a batch of the prober's transitions commits.
//! The running version's core is copied (flat arrays and indexes, no ring), the backends of
//! the VIPs the batch touched take their new verdicts, and only those VIPs' rings and bucket
//! tables are built again; the egress and every other ring are shared. A commit then costs
//! a copy of the flat per-backend arrays plus the rings of what changed, instead of a build
//! of every VIP from the config, and gives the tables a full build would.

use std::sync::Arc;

use crate::limits::LimitBoard;
use crate::tables::{TableError, Tables};
use config::{Backend, Config, Vip};

impl Tables {
    /// Version `version` of these tables with the health verdicts `healthy` gives (as for
    /// [`Tables::build`]) for the backends of the VIP slots `vips`; every other VIP keeps
    /// its entries and ring. `config` must be the config these tables were built from:
    /// `None` when a VIP slot does not match it (another VIP or pool there), and the caller
    /// builds in full instead.
    pub fn with_health(
        &self,
        config: &Config,
        healthy: &dyn Fn(&Vip, &Backend) -> bool,
        vips: &[usize],
        version: u64,
        exec: &dyn crate::exec::Executor,
    ) -> Option<Result<Tables, TableError>> {
        if config.vips.len() != self.vips.len() {
            return None;
        }
        let mut core = (*self.core).clone();
        core.built_as = version;
        core.rings_built = 0;
        // The verdicts first, for every touched VIP; then the rings, which read them.
        let mut touched = Vec::with_capacity(vips.len());
        for &slot in vips {
            let v = config.vips.get(slot)?;
            let entry = &core.vips[slot];
            let range = entry.backends.clone();
            if entry.name != v.name || range.len() != v.backends.len() {
                return None;
            }
            for (b, s) in v.backends.iter().zip(range.clone()) {
                let e = &mut core.backends[s as usize];
                if (e.address, e.port) != (crate::hash::addr_to_u128(b.address), b.port) {
                    return None;
                }
                e.healthy = healthy(v, b);
                core.eligible[s as usize] = e.eligible();
            }
            let before = core.vips[slot].quorum.up;
            core.vips[slot].quorum = core.apply_fallback(v, range, Some(before));
            touched.push((slot, v));
        }
        let rings = match super::rings::build(&core, &touched, false, exec) {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        for ((slot, v), (ring, built)) in touched.iter().zip(rings) {
            let range = core.vips[*slot].backends.clone();
            let buckets = core.buckets(v, range);
            core.rings_built += u32::from(built);
            let entry = &mut core.vips[*slot];
            entry.ring = ring;
            entry.buckets = buckets;
        }
        // Every version has a board of its own, as a full build makes.
        core.limits = Arc::new(LimitBoard::new(core.limited.len()));
        Some(Ok(Tables {
            version,
            core: Arc::new(core),
            egress: Arc::clone(&self.egress),
        }))
    }
}
