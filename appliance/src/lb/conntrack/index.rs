//! The connection table's two open-addressing indexes (linear probing, backward-shift
//! deletion, so no tombstones accumulate) and the hashes that place keys in them.

use super::RevKey;
use crate::lb::hash::FlowKey;

pub(super) const NONE: u32 = u32::MAX;

/// Open-addressing index of entry ids with stored hashes.
#[derive(Debug, Clone)]
pub(super) struct Index {
    slots: Vec<(u32, u32)>,
    mask: usize,
}

impl Index {
    pub(super) fn new(capacity: usize) -> Index {
        let size = (capacity.max(4) * 2).next_power_of_two();
        Index {
            slots: vec![(NONE, 0); size],
            mask: size - 1,
        }
    }

    #[inline(always)]
    pub(super) fn find(&self, hash: u32, mut eq: impl FnMut(u32) -> bool) -> Option<(usize, u32)> {
        let mut i = hash as usize & self.mask;
        loop {
            let (id, h) = self.slots[i];
            if id == NONE {
                return None;
            }
            if h == hash && eq(id) {
                return Some((i, id));
            }
            i = (i + 1) & self.mask;
        }
    }

    pub(super) fn insert(&mut self, hash: u32, id: u32) {
        let mut i = hash as usize & self.mask;
        while self.slots[i].0 != NONE {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = (id, hash);
    }

    /// Backward-shift deletion: later members of the probe run move up so lookups never
    /// stop early at the hole.
    pub(super) fn remove_at(&mut self, mut hole: usize) {
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let (id, h) = self.slots[j];
            if id == NONE {
                break;
            }
            let home = h as usize & self.mask;
            // Move j into the hole unless its home lies cyclically in (hole, j].
            let dist_home = j.wrapping_sub(home) & self.mask;
            let dist_hole = j.wrapping_sub(hole) & self.mask;
            if dist_home >= dist_hole {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = (NONE, 0);
    }
}

#[inline]
fn fold(a: u128) -> u64 {
    (a as u64) ^ ((a >> 64) as u64).rotate_left(29)
}

#[inline]
pub(super) fn fwd_hash(k: &FlowKey) -> u32 {
    let x = fold(k.src)
        ^ fold(k.dst).rotate_left(13)
        ^ (u64::from(k.sport) << 48)
        ^ (u64::from(k.dport) << 32)
        ^ (u64::from(k.proto) << 24)
        ^ u64::from(k.v6);
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 29) as u32
}

#[inline]
pub(super) fn rev_hash(k: &RevKey) -> u32 {
    let x = fold(k.backend).rotate_left(7)
        ^ fold(k.local)
        ^ (u64::from(k.backend_port) << 48)
        ^ (u64::from(k.local_port) << 32)
        ^ (u64::from(k.proto) << 24);
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 29) as u32
}
