//! Many VIPs' rings at once: a storm's health version rebuilds hundreds of rings, a first
//! build or a reload every ring, and each ring is a fill of all its slots on one core.
//! Above [`PARALLEL_FROM`] VIPs the rings are built in as many parts as the caller's
//! [`Executor`] runs at once; each ring is built whole by one job, so the result is the one
//! a single thread would build, in the same order.

use std::sync::Arc;

use crate::exec::{Executor, Job};

use crate::maglev::Ring;
use crate::tables::{Core, TableError};
use config::Vip;

/// One VIP's ring, and whether it was built rather than shared.
type Built = Result<(Arc<Ring>, bool), TableError>;

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
    exec: &dyn Executor,
) -> Result<Vec<(Arc<Ring>, bool)>, TableError> {
    let one = |&(slot, v): &(usize, &Vip)| {
        let entry = &core.vips[slot];
        let r = core.ring_shared(v, entry.backends.clone(), Some(&entry.ring));
        if digests && let Ok((ring, true)) = &r {
            ring.digest();
        }
        r
    };
    let width = exec.width();
    if vips.len() < PARALLEL_FROM || width < 2 {
        return vips.iter().map(one).collect();
    }
    let chunk = vips.len().div_ceil(width);
    let mut parts: Vec<Vec<Built>> = (0..vips.len().div_ceil(chunk))
        .map(|_| Vec::new())
        .collect();
    let one = &one;
    let jobs: Vec<Job<'_>> = vips
        .chunks(chunk)
        .zip(parts.iter_mut())
        .map(|(part, out)| -> Job<'_> { Box::new(move || *out = part.iter().map(one).collect()) })
        .collect();
    exec.run(jobs);
    parts.into_iter().flatten().collect()
}
