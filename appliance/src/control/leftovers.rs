//! What a run before this one left attached: its XDP program and flow cache. A run handing
//! over (or stopped for a restart) leaves them on purpose; one that died without a hand-over
//! (SIGKILL, a panic, an OOM kill) leaves them too, with established flows still forwarding
//! and nothing else of its connection tables. Then the cache is all there is: its flows are
//! rebuilt for this run's workers ([`crate::engine::rebuild`]), and their backends start
//! healthy (the old run forwarded to them moments ago; the cache holds no flow of a backend
//! it had taken out), as a hand-over's verdicts would, so the first tables keep the flows on
//! them instead of moving every flow whose backend's checks have not decided yet. The
//! probes decide from there as always.

use std::collections::HashSet;

use tracing::{info, warn};

use super::takeover_run::Imports;
use crate::config::Config;
use crate::datapath::flowcache::{self, FlowCache};
use crate::lb::{BackendId, NetState, Tables};

/// The cache of the Sluice program attached to one of `config`'s interfaces, when its maps
/// fit this build.
pub(super) fn attached_cache(config: &Config) -> Option<FlowCache> {
    let id = config
        .appliance
        .interfaces
        .iter()
        .find_map(|i| crate::datapath::steer::attached_sluice(i))?;
    FlowCache::adopt(id, flowcache::CACHE_ENTRIES)
}

/// A crashed run's cache, its flows and their backends' verdicts.
#[derive(Default)]
pub(super) struct Leftovers {
    pub cache: Option<FlowCache>,
    pub imports: Option<Imports>,
    pub health: Vec<(BackendId, bool)>,
}

/// What a run that stopped without a hand-over left, when one did: `handed` says a
/// hand-over (socket or file) came instead; `net` names DR backends by their MAC.
pub(super) fn read(config: &Config, net: &NetState, handed: bool) -> Leftovers {
    if handed || !config.appliance.flow_cache {
        return Leftovers::default();
    }
    let Some(cache) = attached_cache(config) else {
        return Leftovers::default();
    };
    let tables = match Tables::build(config, &|_, _| true, 0) {
        Ok(t) => t,
        Err(e) => {
            warn!("the flow cache a run before left is kept, its flows not rebuilt: {e}");
            return Leftovers {
                cache: Some(cache),
                ..Leftovers::default()
            };
        }
    };
    let entries = cache.entries();
    let r = crate::engine::rebuild::from_cache(&entries, &tables, net);
    for k in &r.strays {
        cache.evict(k);
    }
    let mut up = HashSet::new();
    for (f, _) in &r.flows {
        let slot = tables
            .vip_of_key(&f.key)
            .and_then(|vip| tables.backend_slot(vip, f.backend.0, f.backend.1));
        if let Some(id) = slot.and_then(|s| BackendId::of_slot(&tables, s as usize)) {
            up.insert(id);
        }
    }
    info!(
        entries = entries.len(),
        flows = r.flows.len(),
        evicted = r.strays.len(),
        backends = up.len(),
        "a run before stopped without a hand-over: rebuilding the flows its flow cache holds"
    );
    Leftovers {
        cache: Some(cache),
        imports: Some(Imports::rebuilt(r.flows)),
        health: up.into_iter().map(|id| (id, true)).collect(),
    }
}
