//! Budgets that keep one party from taking a connection table: embryonic entries per
//! client address (a spoofer's SYNs and first datagrams from one source cost it no more
//! than this many entries, wherever the flood comes from within its budget), and entries
//! per tenant zone (one tenant cannot use up another's share: each of the tenants and the
//! underlay is guaranteed an equal part of the table).
//!
//! Sources are counted in a fixed array indexed by a hash of (address, zone); two sources
//! that share a slot share a budget, which can only make it stricter for them. Counts move
//! with the entries: an embryonic entry counts from its insert until it is promoted or
//! removed.

use crate::hash::mix64;

/// Slots of the per-source counts (16 KiB per worker).
pub const SOURCE_SLOTS: usize = 1 << 13;

/// Why a budget refused an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The client address holds its budget of embryonic entries.
    Source,
    /// The tenant zone holds its share of the table.
    Zone,
}

/// The budgets of one table.
#[derive(Debug, Clone)]
pub struct Budgets {
    /// Embryonic entries a source may hold (0: no budget).
    per_source: u16,
    sources: Vec<u16>,
    /// Entries a tenant zone may hold (0: no budget), and each tenant zone's count.
    per_zone: u32,
    zones: Vec<(u32, u32)>,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            per_source: 0,
            sources: vec![0; SOURCE_SLOTS],
            per_zone: 0,
            zones: Vec::new(),
        }
    }
}

/// The slot of a source (address, zone).
#[inline(always)]
fn slot(src: u128, zone: u32) -> usize {
    let h = mix64(src as u64 ^ ((src >> 64) as u64).rotate_left(17) ^ u64::from(zone) << 32);
    (h as usize) & (SOURCE_SLOTS - 1)
}

impl Budgets {
    /// Sets the budgets: `per_source` embryonic entries a source (0: none), and, for a
    /// table of `capacity` entries serving the tenant `zones`, an equal share for each of
    /// them and the underlay. Counts of zones that remain are kept.
    pub fn set(&mut self, per_source: u16, capacity: usize, zones: &[u32]) {
        self.per_source = per_source;
        self.per_zone = if zones.is_empty() {
            0
        } else {
            (capacity / (zones.len() + 1)).max(1) as u32
        };
        let mut next: Vec<(u32, u32)> = zones
            .iter()
            .map(|z| {
                let n = self
                    .zones
                    .iter()
                    .find(|(x, _)| x == z)
                    .map_or(0, |(_, n)| *n);
                (*z, n)
            })
            .collect();
        next.sort_unstable();
        next.dedup_by_key(|(z, _)| *z);
        self.zones = next;
    }

    /// Whether an entry of source `src` in `zone` may be inserted (`embryonic`: it counts
    /// against the source's budget).
    #[inline]
    pub fn admits(&self, src: u128, zone: u32, embryonic: bool) -> Result<(), Refused> {
        if embryonic && self.per_source != 0 && self.sources[slot(src, zone)] >= self.per_source {
            return Err(Refused::Source);
        }
        if zone != 0
            && self.per_zone != 0
            && let Some((_, n)) = self.zones.iter().find(|(z, _)| *z == zone)
            && *n >= self.per_zone
        {
            return Err(Refused::Zone);
        }
        Ok(())
    }

    /// An entry came in (`embryonic`: in an embryonic state).
    #[inline]
    pub fn add(&mut self, src: u128, zone: u32, embryonic: bool) {
        if embryonic {
            let s = &mut self.sources[slot(src, zone)];
            *s = s.saturating_add(1);
        }
        if zone != 0
            && let Some((_, n)) = self.zones.iter_mut().find(|(z, _)| *z == zone)
        {
            *n += 1;
        }
    }

    /// An entry of source `src` stopped being embryonic (promoted, or removed as such).
    #[inline]
    pub fn left_embryonic(&mut self, src: u128, zone: u32) {
        let s = &mut self.sources[slot(src, zone)];
        *s = s.saturating_sub(1);
    }

    /// An entry of `zone` went.
    #[inline]
    pub fn left_zone(&mut self, zone: u32) {
        if zone != 0
            && let Some((_, n)) = self.zones.iter_mut().find(|(z, _)| *z == zone)
        {
            *n = n.saturating_sub(1);
        }
    }
}
