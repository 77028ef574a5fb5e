//! A flow cache taken over from the Sluice program attached before this run (a run
//! handing over, stopped for a restart, or dead without either): its maps, when they have
//! this build's geometry, and flood mode's maps beside them.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, RwLock};

use libbpf_rs::{MapCore, MapHandle, MapType};

use super::layout::FRONT_SLOTS;
use super::{FlowCache, MappedWords};
use crate::datapath::abi::{
    MapDef, cache_key4, cache_key6, cache_stat, cache_val, flood_bucket, flood_cpu, flood_src, maps,
};

impl FlowCache {
    /// The cache of the Sluice program attached before this run (`prog`, its id: a run
    /// handing over to this one, or one that crashed), when its maps have the geometry this
    /// build gives them: their entries go on forwarding through the hand-over, and the
    /// engine can read the flows back. `None` when one is missing or differs (another
    /// build's layout): the caller creates a new cache.
    pub fn adopt(prog: u32, entries: u32) -> Option<FlowCache> {
        const U32: u32 = size_of::<u32>() as u32;
        let mut found: HashMap<String, MapHandle> = prog_map_ids(prog)
            .into_iter()
            .filter_map(|id| MapHandle::from_map_id(id).ok())
            .map(|m| (m.name().to_string_lossy().into_owned(), m))
            .collect();
        let mut take = |def: MapDef, ty: MapType, key: u32, value: u32, n: u32| {
            take_map(&mut found, def, (ty, key, value, n))
        };
        let (lru, per_cpu) = (MapType::LruHash, MapType::PercpuArray);
        let (val, n, u64_len) = (
            cache_val::LEN as u32,
            entries.max(1),
            size_of::<u64>() as u32,
        );
        let cache4 = take(maps::FLOW_CACHE4, lru, cache_key4::LEN as u32, val, n)?;
        let cache6 = take(maps::FLOW_CACHE6, lru, cache_key6::LEN as u32, val, n)?;
        let stat_len = cache_stat::LEN as u32;
        let stats = take(
            maps::CACHE_STATS,
            per_cpu,
            U32,
            stat_len,
            maps::CACHE_STATS.entries,
        )?;
        let counters = take(
            maps::CACHE_COUNTERS,
            per_cpu,
            U32,
            u64_len,
            maps::CACHE_COUNTERS.entries,
        )?;
        let tx_ports = take(
            maps::TX_PORTS,
            MapType::Devmap,
            U32,
            U32,
            maps::TX_PORTS.entries,
        )?;
        let front_gen = take(
            maps::FRONT_GEN,
            MapType::Array,
            U32,
            u64_len,
            maps::FRONT_GEN.entries,
        )?;
        let gens = MappedWords::map(front_gen.as_fd(), 2 * FRONT_SLOTS).ok()?;
        // Numbers keep growing from the largest the run before wrote, so none repeats.
        let start = (0..2 * FRONT_SLOTS)
            .map(|i| gens.load(i))
            .max()
            .unwrap_or(0);
        let carried = flood_maps(&mut found);
        Some(FlowCache {
            cache4,
            cache6,
            stats,
            counters,
            tx_ports,
            front_gen,
            gens,
            next_gen: AtomicU64::new(start),
            slots: Mutex::new(HashMap::new()),
            egress: RwLock::new(HashMap::new()),
            carried,
        })
    }
}

/// The map `def` of a program before this run (taken out of `found`), when it has this
/// build's geometry (type, key size, value size, entries).
fn take_map(
    found: &mut HashMap<String, MapHandle>,
    def: MapDef,
    (ty, key, value, n): (MapType, u32, u32, u32),
) -> Option<MapHandle> {
    let m = found.remove(def.name)?;
    let same = m.map_type() == ty
        && m.key_size() == key
        && m.value_size() == value
        && m.max_entries() == n;
    if !same {
        tracing::info!(
            map = def.name,
            "the program before this run has another layout of this map"
        );
    }
    same.then_some(m)
}

/// Flood mode's maps of a program before this run, those that fit this build (another
/// build's start empty): see [`FlowCache`]'s `carried`.
fn flood_maps(found: &mut HashMap<String, MapHandle>) -> HashMap<String, MapHandle> {
    const U32: u32 = size_of::<u32>() as u32;
    let per_cpu = MapType::PercpuArray;
    let flood = [
        (
            maps::FLOOD_BUCKETS,
            MapType::LruHash,
            size_of::<flood_src>() as u32,
            size_of::<flood_bucket>() as u32,
        ),
        (
            maps::FLOOD_CPUS,
            per_cpu,
            U32,
            size_of::<flood_cpu>() as u32,
        ),
        (maps::FLOOD_COUNTERS, per_cpu, U32, size_of::<u64>() as u32),
    ];
    flood
        .into_iter()
        .filter_map(|(def, ty, key, value)| {
            let m = take_map(found, def, (ty, key, value, def.entries))?;
            Some((def.name.to_string(), m))
        })
        .collect()
}

/// The ids of the maps program `prog` uses (none when it is gone or cannot be read).
fn prog_map_ids(prog: u32) -> Vec<u32> {
    use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions};
    ProgInfoIter::with_query_opts(ProgInfoQueryOptions::default().include_map_ids(true))
        .find(|p| p.id == prog)
        .map(|p| p.map_ids)
        .unwrap_or_default()
}
