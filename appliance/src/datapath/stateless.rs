//! The maps of the XDP program's stateless answer (bpf/stateless.h): while flood mode is
//! on, a DR VIP's first packets are forwarded by the program itself from the VIP's Maglev
//! ring, exactly as the engine's stateless answer would forward them, so a flood costs the
//! engine nothing and sheds nobody.
//!
//! With every table version the control plane writes each DR VIP's ring (the backend slot of
//! every ring entry) and every backend's next hop (MACs, egress and how a hairpin leaves).
//! A ring is written whole, in one batch syscall, only when it changed; next hops likewise.
//! DR VIPs take ring slots in table order, at most [`STATELESS_VIPS`] of them, each at most
//! [`RING_STRIDE`] entries (a 65,537-slot ring; the default sizes for pools up to 655
//! backends are smaller); the others, and backends past
//! [`BACKEND_SLOTS`], stay with the policing and the engine. The ring map is
//! `STATELESS_VIPS * RING_STRIDE` u32s: 8 MiB of kernel memory, allocated at load.

use std::collections::HashMap;

use libbpf_rs::{MapCore, MapFlags};

use super::DatapathError;
use super::abi::{hash_fields, maps, stateless_hop, stateless_vip};
use super::flowcache::FlowCache;
use super::steer::bpf_err;
use crate::config::{HashFields, Mode};
use crate::lb::Tables;

/// DR VIPs with a ring in the program (its `stateless_vips`: bpf/consts.h STATELESS_VIPS).
pub const STATELESS_VIPS: usize = maps::STATELESS_VIPS.entries as usize;
/// Entries each VIP's ring may have (its `stateless_rings` holds STATELESS_VIPS times this:
/// bpf/consts.h RING_STRIDE).
pub const RING_STRIDE: u32 = maps::STATELESS_RINGS.entries / maps::STATELESS_VIPS.entries;
const _: () = assert!(maps::STATELESS_RINGS.entries == RING_STRIDE * maps::STATELESS_VIPS.entries);
/// Backend slots the program has next hops for (its `stateless_hops`: bpf/consts.h
/// BACKEND_SLOTS).
pub const BACKEND_SLOTS: usize = maps::STATELESS_HOPS.entries as usize;

/// The program's code for the VIP's hash fields (`stateless_vip.hash`).
fn hash_code(h: HashFields) -> hash_fields {
    match h {
        HashFields::FiveTuple => hash_fields::HASH_5,
        HashFields::ThreeTuple => hash_fields::HASH_3,
        HashFields::TwoTuple => hash_fields::HASH_2,
    }
}

/// The ring slot of every VIP that gets one: DR VIPs, by VIP slot, in slot order.
pub(super) fn ring_slots(vips: impl Iterator<Item = (u32, Mode)>) -> HashMap<u32, u16> {
    let mut dr: Vec<u32> = vips
        .filter(|(_, m)| *m == Mode::Dr)
        .map(|(slot, _)| slot)
        .collect();
    dr.sort_unstable();
    dr.dedup();
    dr.into_iter()
        .take(STATELESS_VIPS)
        .enumerate()
        .map(|(ring, slot)| (slot, ring as u16))
        .collect()
}

/// What the maps hold, so that a version which changes nothing writes nothing.
#[derive(Debug, Default)]
pub(super) struct Held {
    vips: Vec<[u8; stateless_vip::LEN]>,
    rings: Vec<Vec<u32>>,
    hops: Vec<[u8; stateless_hop::LEN]>,
}

/// What [`fill`] found and wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatelessFill {
    /// DR VIPs with a ring in the program.
    pub vips: usize,
    /// Rings written (changed since the last version).
    pub rings_written: usize,
    /// Backends with a next hop in the program.
    pub hops: usize,
    /// DR VIPs left to the engine (past [`STATELESS_VIPS`], or a ring larger than
    /// [`RING_STRIDE`]).
    pub skipped: usize,
}

/// The maps the fill writes, by name.
pub(super) struct Maps<'a> {
    pub(super) vips: libbpf_rs::Map<'a>,
    pub(super) rings: libbpf_rs::Map<'a>,
    pub(super) hops: libbpf_rs::Map<'a>,
}

/// Writes `tables`' DR rings and next hops; `cache` gives each egress's slot in the flow
/// cache's tx_ports (without the cache the program never answers statelessly).
pub(super) fn fill(
    maps: &Maps<'_>,
    held: &mut Held,
    tables: &Tables,
    cache: &FlowCache,
) -> Result<StatelessFill, DatapathError> {
    let rings = ring_slots(
        tables
            .vips
            .iter()
            .enumerate()
            .map(|(i, v)| (i as u32, v.mode)),
    );
    let mut out = StatelessFill {
        skipped: tables.vips.iter().filter(|v| v.mode == Mode::Dr).count() - rings.len(),
        ..StatelessFill::default()
    };
    let mut want_vips = vec![[0u8; stateless_vip::LEN]; STATELESS_VIPS];
    held.rings.resize(STATELESS_VIPS, Vec::new());
    for (&slot, &ring) in &rings {
        let v = &tables.vips[slot as usize];
        let r = usize::from(ring);
        if v.ring.len() > RING_STRIDE as usize {
            out.skipped += 1;
            continue;
        }
        let entries: Vec<u32> = v
            .ring
            .slots()
            .iter()
            .map(|p| v.backends.start + u32::from(*p))
            .collect();
        if held.rings[r] != entries && !entries.is_empty() {
            let keys: Vec<u8> = (0..entries.len() as u32)
                .flat_map(|i| (ring as u32 * RING_STRIDE + i).to_ne_bytes())
                .collect();
            let values: Vec<u8> = entries.iter().flat_map(|b| b.to_ne_bytes()).collect();
            maps.rings
                .update_batch(
                    &keys,
                    &values,
                    entries.len() as u32,
                    MapFlags::ANY,
                    MapFlags::ANY,
                )
                .map_err(|e| bpf_err("writing a VIP's ring for the stateless answer", e))?;
            out.rings_written += 1;
        }
        held.rings[r] = entries;
        want_vips[r] = stateless_vip {
            vip: slot,
            base: ring as u32 * RING_STRIDE,
            m: v.ring.len() as u32,
            hash: hash_code(v.hash),
            ..Default::default()
        }
        .to_bytes();
        out.vips += 1;
    }
    write_changed(
        &maps.vips,
        &mut held.vips,
        want_vips,
        "the stateless answer's VIPs",
    )?;
    let hops: Vec<[u8; stateless_hop::LEN]> = (0..tables.backends.len().min(BACKEND_SLOTS))
        .map(|slot| hop(tables, cache, slot as u32))
        .collect();
    out.hops = hops
        .iter()
        .filter(|h| stateless_hop::from_bytes(&h[..]).is_some_and(|h| h.ok != 0))
        .count();
    write_changed(
        &maps.hops,
        &mut held.hops,
        hops,
        "the stateless answer's next hops",
    )?;
    Ok(out)
}

/// Clears every VIP's ring entry (best effort: the program then answers no VIP) and forgets
/// what the maps held, so the next fill writes everything again.
pub(super) fn switch_off(vips: &libbpf_rs::Map<'_>, held: &mut Held) {
    for i in 0..STATELESS_VIPS as u32 {
        let _ = vips.update(&i.to_ne_bytes(), &[0u8; stateless_vip::LEN], MapFlags::ANY);
    }
    *held = Held::default();
}

/// Backend `slot`'s next hop as the program's DR rewrite uses it (`ok` 0 without one).
fn hop(tables: &Tables, cache: &FlowCache, slot: u32) -> [u8; stateless_hop::LEN] {
    let Ok(n) = tables.backend_egress(slot) else {
        return stateless_hop::default().to_bytes();
    };
    let Some((port, hairpin)) = cache.egress_port(n.ifindex) else {
        return stateless_hop::default().to_bytes();
    };
    stateless_hop {
        dst_mac: n.dst_mac.0,
        src_mac: n.src_mac.0,
        ifindex: n.ifindex,
        ok: 1,
        tx: hairpin.tx(),
        tx_port: port,
        ..Default::default()
    }
    .to_bytes()
}

/// Writes the entries of `want` (keys 0..) that differ from `held`, in one batch.
fn write_changed<const N: usize>(
    map: &libbpf_rs::Map<'_>,
    held: &mut Vec<[u8; N]>,
    want: Vec<[u8; N]>,
    what: &'static str,
) -> Result<(), DatapathError> {
    let zero = [0u8; N];
    // Entries no longer wanted are cleared (an array's entries cannot be deleted).
    let len = want.len().max(held.len());
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    for i in 0..len {
        let w = want.get(i).unwrap_or(&zero);
        if held.get(i) != Some(w) {
            keys.extend_from_slice(&(i as u32).to_ne_bytes());
            values.extend_from_slice(w);
        }
    }
    if !keys.is_empty() {
        let count = (keys.len() / 4) as u32;
        map.update_batch(&keys, &values, count, MapFlags::ANY, MapFlags::ANY)
            .map_err(|e| bpf_err(what, e))?;
    }
    let mut next = want;
    next.resize(len, zero);
    *held = next;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Encap;

    #[test]
    fn dr_vips_take_ring_slots_in_table_order_up_to_the_limit() {
        let vxlan = Mode::Tunnel(Encap::Vxlan { port: 4789, vni: 1 });
        let vips = [
            (0, Mode::Nat),
            (1, Mode::Dr),
            (2, vxlan),
            (3, Mode::Dr),
            (1, Mode::Dr),
        ];
        let r = ring_slots(vips.into_iter());
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[&1], r[&3]), (0, 1));
        let many = ring_slots((0..100).map(|i| (i, Mode::Dr)));
        assert_eq!(many.len(), STATELESS_VIPS);
        assert_eq!(
            many.get(&(STATELESS_VIPS as u32)),
            None,
            "the 33rd DR VIP has none"
        );
    }
}
