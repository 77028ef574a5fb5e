//! Many VIPs' rings at once: a storm's health version rebuilds hundreds of rings, a first
//! build or a reload every ring, and each ring is a fill of all its slots on one core.
//! Above [`PARALLEL_FROM`] VIPs the rings are built on every core the system gives; each
//! ring is built whole on one thread, so the result is the one a single thread would build,
//! in the same order.

use std::sync::Arc;

use crate::config::Vip;
use crate::lb::maglev::Ring;
use crate::lb::tables::{Core, TableError};

/// Below this many VIPs one thread builds their rings; above it, every core does.
const PARALLEL_FROM: usize = 32;

/// The rings of the VIPs `vips` (slot in `core`, config), in order, each with whether it
/// was built rather than shared with the ring its slot holds (`core.vips[slot].ring`, the
/// running version's when its inputs are unchanged). The first error in `vips` order wins.
/// With `digests` every new ring's digest is computed here too, on the same threads (a
/// first build or a reload, which the API's fingerprint reads next); a health version
/// leaves them to the first reader, so that its commit does not wait for them.
pub(super) fn build(
    core: &Core,
    vips: &[(usize, &Vip)],
    digests: bool,
) -> Result<Vec<(Arc<Ring>, bool)>, TableError> {
    let one = |&(slot, v): &(usize, &Vip)| {
        let entry = &core.vips[slot];
        let r = core.ring_shared(v, entry.backends.clone(), Some(&entry.ring));
        if digests && let Ok((ring, true)) = &r {
            ring.digest();
        }
        r
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if vips.len() < PARALLEL_FROM || threads < 2 {
        return vips.iter().map(one).collect();
    }
    let chunk = vips.len().div_ceil(threads);
    std::thread::scope(|s| {
        let mut out = Vec::with_capacity(vips.len());
        let mut parts = Vec::new();
        for part in vips.chunks(chunk) {
            // A thread the system will not give (out of memory or threads) is no reason to
            // fail a commit: that part is built here instead.
            match std::thread::Builder::new()
                .name("sluice-rings".into())
                .spawn_scoped(s, move || part.iter().map(one).collect::<Vec<_>>())
            {
                Ok(h) => parts.push(Ok(h)),
                Err(_) => parts.push(Err(part)),
            }
        }
        for p in parts {
            let built = match p {
                // A panic in a ring build is a bug; carry it to this thread as it is.
                Ok(h) => h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
                Err(part) => part.iter().map(one).collect(),
            };
            for r in built {
                out.push(r?);
            }
        }
        Ok(out)
    })
}
