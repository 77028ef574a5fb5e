//! The flow cache's map keys and values as the program lays them out (bpf/structs.h
//! `struct cache_key4`, `cache_key6`, `cache_val`, generated from the object's BTF in
//! datapath/abi.rs, with the codes bpf/consts.h gives their fields), and the front table's
//! slot of a key.

use super::{CacheAction, CacheCarry, CacheEntry, CacheShift};
use crate::datapath::abi::{
    cache_action, cache_carry, cache_key4, cache_key6, cache_set, cache_track, cache_val, defines,
    maps,
};
use crate::lb::conntrack::Rescale;
use crate::lb::hash::FlowKey;

/// How a [`FlowKey`] holds an IPv4 address: IPv4-mapped (`::ffff:a.b.c.d`).
const V4_MAPPED: u128 = 0xffff_0000_0000;

/// `a` in network order in a 16-byte C address field: all 16 bytes for IPv6, the first 4
/// for IPv4 (the program reads no more).
fn addr_field(a: u128, v6: bool) -> [u8; 16] {
    if v6 {
        return a.to_be_bytes();
    }
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&(a as u32).to_be_bytes());
    b
}

/// The inverse of [`addr_field`].
fn addr_of_field(b: &[u8; 16], v6: bool) -> u128 {
    if v6 {
        u128::from_be_bytes(*b)
    } else {
        V4_MAPPED | u128::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// The map key of a frame: its 5-tuple as carried, laid out for its family's map.
pub(crate) fn key_bytes(k: &FlowKey) -> Vec<u8> {
    if k.v6 {
        cache_key6 {
            src: k.src.to_be_bytes(),
            dst: k.dst.to_be_bytes(),
            sport: k.sport.to_be(),
            dport: k.dport.to_be(),
            proto: k.proto,
            ..Default::default()
        }
        .to_bytes()
        .to_vec()
    } else {
        cache_key4 {
            src: (k.src as u32).to_be(),
            dst: (k.dst as u32).to_be(),
            sport: k.sport.to_be(),
            dport: k.dport.to_be(),
            proto: k.proto,
            ..Default::default()
        }
        .to_bytes()
        .to_vec()
    }
}

/// Slots of each family in the program's front table (its maps' size: bpf/consts.h
/// FRONT_SLOTS), and the bits of the hash that pick one.
pub(crate) const FRONT_SLOTS: usize = maps::CACHE_FRONT4.entries as usize;
pub(crate) const FRONT_BITS: u32 = FRONT_SLOTS.trailing_zeros();
const _: () = assert!(
    FRONT_SLOTS.is_power_of_two()
        && maps::CACHE_FRONT6.entries as usize == FRONT_SLOTS
        && maps::FRONT_GEN.entries as usize == 2 * FRONT_SLOTS,
    "front.h: a power-of-two table per family, and a number per slot of both"
);
/// The front table's multipliers, one per 8 bytes of key (bpf/consts.h FRONT_M0..4).
const FRONT_M: [u64; 5] = [
    defines::FRONT_M0,
    defines::FRONT_M1,
    defines::FRONT_M2,
    defines::FRONT_M3,
    defines::FRONT_M4,
];

/// The index in `front_gen` of the front-table slot the program copies `key`'s entry to
/// (bpf/front.h `cache_find4`, `cache_find6`): the map key's 8-byte words as the program
/// loads them (native order), each times its multiplier, summed, top FRONT_BITS bits; IPv6
/// slots after the IPv4 ones.
pub(crate) fn front_index(key: &FlowKey) -> usize {
    let bytes = key_bytes(key);
    let h = bytes.chunks_exact(8).zip(FRONT_M).fold(0u64, |h, (w, m)| {
        let w = u64::from_ne_bytes(w.try_into().unwrap_or_default());
        h.wrapping_add(w.wrapping_mul(m))
    });
    let slot = (h >> (64 - FRONT_BITS)) as usize;
    if key.v6 { FRONT_SLOTS + slot } else { slot }
}

/// The inverse of [`key_bytes`]: the family follows from the length.
pub(crate) fn key_from_bytes(b: &[u8]) -> Option<FlowKey> {
    match b.len() {
        cache_key4::LEN => {
            let k = cache_key4::from_bytes(b)?;
            Some(FlowKey {
                src: V4_MAPPED | u128::from(u32::from_be(k.src)),
                dst: V4_MAPPED | u128::from(u32::from_be(k.dst)),
                sport: u16::from_be(k.sport),
                dport: u16::from_be(k.dport),
                proto: k.proto,
                v6: false,
                zone: 0,
            })
        }
        cache_key6::LEN => {
            let k = cache_key6::from_bytes(b)?;
            Some(FlowKey {
                src: u128::from_be_bytes(k.src),
                dst: u128::from_be_bytes(k.dst),
                sport: u16::from_be(k.sport),
                dport: u16::from_be(k.dport),
                proto: k.proto,
                v6: true,
                zone: 0,
            })
        }
        _ => None,
    }
}

impl CacheEntry {
    /// The map value, leaving `tx` (XDP_TX) and `tx_port` to [`super::FlowCache::install`],
    /// which knows the egress interface.
    pub(super) fn value(&self) -> cache_val {
        let mut v = cache_val {
            last_seen: self.last_seen,
            dst_mac: self.dst_mac,
            src_mac: self.src_mac,
            ifindex: self.ifindex,
            stat: self.stat,
            ..Default::default()
        };
        match self.action {
            CacheAction::Nat { src, dst } => {
                v.action = cache_action::ACT_NAT;
                if let Some((a, p)) = src {
                    v.new_src = addr_field(a, self.v6);
                    v.new_sport = p.to_be();
                    v.flags.0 |= cache_set::SET_SRC.0;
                }
                if let Some((a, p)) = dst {
                    v.new_dst = addr_field(a, self.v6);
                    v.new_dport = p.to_be();
                    v.flags.0 |= cache_set::SET_DST.0;
                }
            }
            CacheAction::Dr => v.action = cache_action::ACT_DR,
        }
        if let Some(n) = self.seq_next {
            v.seq_next = n;
            v.track.0 |= cache_track::TRACK_SEQ.0;
        }
        if let Some(a) = self.ack_max {
            v.ack_max = a;
            v.track.0 |= cache_track::TRACK_ACK.0;
        }
        (v.carry, v.carry_base, v.carry_delta) = match self.carry {
            CacheCarry::None => (cache_carry::CARRY_NONE, 0, 0),
            CacheCarry::Seq { base, delta } => (cache_carry::CARRY_SEQ, base, delta),
            CacheCarry::Ack { base, delta } => (cache_carry::CARRY_ACK, base, delta),
            CacheCarry::Toa { base } => (cache_carry::CARRY_TOA, base, 0),
        };
        let (px, shift, window) = match self.shift {
            CacheShift::None => (0, 0, Rescale::default()),
            CacheShift::Ack { shift, window } => (cache_carry::CARRY_PX_ACK.0, shift, window),
            CacheShift::Seq { shift, window } => (cache_carry::CARRY_PX_SEQ.0, shift, window),
        };
        v.carry.0 |= px;
        v.px_shift = shift;
        v.px_scale = (window.from & 0x0f) | (window.to & 0x0f) << 4;
        v
    }

    /// The inverse of [`CacheEntry::value`] (for a key of family `v6`); `None` for an
    /// action the program does not know.
    pub(super) fn from_value(v: &cache_val, v6: bool) -> Option<CacheEntry> {
        let set = |bit: cache_set| v.flags.0 & bit.0 != 0;
        let action = match v.action {
            cache_action::ACT_NAT => CacheAction::Nat {
                src: set(cache_set::SET_SRC)
                    .then(|| (addr_of_field(&v.new_src, v6), u16::from_be(v.new_sport))),
                dst: set(cache_set::SET_DST)
                    .then(|| (addr_of_field(&v.new_dst, v6), u16::from_be(v.new_dport))),
            },
            cache_action::ACT_DR => CacheAction::Dr,
            _ => return None,
        };
        let (base, delta) = (v.carry_base, v.carry_delta);
        let px = cache_carry::CARRY_PX_ACK.0 | cache_carry::CARRY_PX_SEQ.0;
        let window = Rescale {
            from: v.px_scale & 0x0f,
            to: v.px_scale >> 4,
        };
        let shift = match v.carry.0 & px {
            0 => CacheShift::None,
            b if b == cache_carry::CARRY_PX_ACK.0 => CacheShift::Ack {
                shift: v.px_shift,
                window,
            },
            b if b == cache_carry::CARRY_PX_SEQ.0 => CacheShift::Seq {
                shift: v.px_shift,
                window,
            },
            _ => return None,
        };
        let carry = match cache_carry(v.carry.0 & !px) {
            cache_carry::CARRY_NONE => CacheCarry::None,
            cache_carry::CARRY_SEQ => CacheCarry::Seq { base, delta },
            cache_carry::CARRY_ACK => CacheCarry::Ack { base, delta },
            cache_carry::CARRY_TOA => CacheCarry::Toa { base },
            _ => return None,
        };
        Some(CacheEntry {
            action,
            carry,
            shift,
            v6,
            dst_mac: v.dst_mac,
            src_mac: v.src_mac,
            ifindex: v.ifindex,
            stat: v.stat,
            last_seen: v.last_seen,
            seq_next: (v.track.0 & cache_track::TRACK_SEQ.0 != 0).then_some(v.seq_next),
            ack_max: (v.track.0 & cache_track::TRACK_ACK.0 != 0).then_some(v.ack_max),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::abi::hairpin_tx;
    use std::mem::offset_of;

    fn v4(a: [u8; 4]) -> u128 {
        V4_MAPPED | u128::from(u32::from_be_bytes(a))
    }

    #[test]
    fn keys_carry_the_tuple_in_network_order_and_round_trip() {
        let k = FlowKey {
            src: v4([198, 51, 100, 7]),
            dst: v4([192, 0, 2, 10]),
            sport: 40000,
            dport: 80,
            proto: 6,
            v6: false,
            zone: 0,
        };
        let b = key_bytes(&k);
        assert_eq!(b.len(), cache_key4::LEN);
        let at = |o: usize, n: usize| b[o..o + n].to_vec();
        assert_eq!(at(offset_of!(cache_key4, src), 4), [198, 51, 100, 7]);
        assert_eq!(at(offset_of!(cache_key4, dst), 4), [192, 0, 2, 10]);
        assert_eq!(at(offset_of!(cache_key4, sport), 2), [0x9c, 0x40]);
        assert_eq!(at(offset_of!(cache_key4, dport), 2), [0, 80]);
        assert_eq!(b[offset_of!(cache_key4, proto)], 6);
        assert_eq!(key_from_bytes(&b), Some(k));

        let k6 = FlowKey {
            src: 0x2001_0db8_0000_0000_0000_0000_0000_0007,
            dst: 0x2001_0db8_0000_0000_0000_0000_0000_0010,
            sport: 1,
            dport: 2,
            proto: 17,
            v6: true,
            zone: 0,
        };
        let b = key_bytes(&k6);
        assert_eq!(b.len(), cache_key6::LEN);
        assert_eq!(b[offset_of!(cache_key6, src) + 15], 7);
        assert_eq!(b[offset_of!(cache_key6, dst)], 0x20);
        assert_eq!(b[offset_of!(cache_key6, dport) + 1], 2);
        assert_eq!(b[offset_of!(cache_key6, proto)], 17);
        assert_eq!(key_from_bytes(&b), Some(k6));
        assert_eq!(
            key_from_bytes(&b[..b.len() - 1]),
            None,
            "a key of no family's length"
        );
    }

    /// A FullNAT entry toward 10.0.0.1:8080 from 10.1.0.1:1025, its client's next sequence
    /// number tracked.
    fn nat_entry() -> CacheEntry {
        CacheEntry {
            action: CacheAction::Nat {
                src: Some((v4([10, 1, 0, 1]), 1025)),
                dst: Some((v4([10, 0, 0, 1]), 8080)),
            },
            carry: CacheCarry::None,
            shift: CacheShift::None,
            v6: false,
            dst_mac: [2, 0, 0, 0, 1, 1],
            src_mac: [2, 0, 0, 0, 0, 0xaa],
            ifindex: 2,
            stat: 7,
            last_seen: 0,
            seq_next: Some(0xffff_fff0),
            ack_max: None,
        }
    }

    #[test]
    fn values_carry_the_rewrite_and_round_trip() {
        let e = nat_entry();
        let v = e.value();
        assert_eq!(v.track.0, cache_track::TRACK_SEQ.0);
        assert_eq!(v.seq_next, 0xffff_fff0);
        assert_eq!(&v.new_src[..4], &[10, 1, 0, 1]);
        assert_eq!(&v.new_dst[..4], &[10, 0, 0, 1]);
        let b = v.to_bytes();
        assert_eq!(&b[offset_of!(cache_val, new_sport)..][..2], &[4, 1]);
        assert_eq!(&b[offset_of!(cache_val, new_dport)..][..2], &[0x1f, 0x90]);
        assert_eq!(v.action, cache_action::ACT_NAT);
        assert_eq!(v.flags.0, cache_set::SET_SRC.0 | cache_set::SET_DST.0);
        assert_eq!(
            v.tx,
            hairpin_tx::TX_XDP_TX,
            "XDP_TX unless the cache says otherwise at install"
        );
        let back = cache_val::from_bytes(&b).expect("whole value");
        assert_eq!(CacheEntry::from_value(&back, false), Some(e));
        let untracked = CacheEntry {
            seq_next: None,
            ..e
        };
        assert_eq!(
            CacheEntry::from_value(&untracked.value(), false),
            Some(untracked)
        );

        let dr = CacheEntry {
            action: CacheAction::Dr,
            ..e
        };
        assert_eq!(CacheEntry::from_value(&dr.value(), false), Some(dr));
        for carry in [
            CacheCarry::Seq { base: 7, delta: 28 },
            CacheCarry::Ack {
                base: 0xffff_fff0,
                delta: 52,
            },
            CacheCarry::Toa { base: 9 },
        ] {
            let c = CacheEntry { carry, ..e };
            let v = c.value();
            assert_eq!(v.carry.0.count_ones(), 1, "one CARRY_* bit");
            let back = cache_val::from_bytes(&v.to_bytes()).expect("whole value");
            assert_eq!(CacheEntry::from_value(&back, false), Some(c));
        }
    }

    /// The SYN proxy's shift and rescale land in px_shift and px_scale (sender's scale in
    /// the low nibble) with one CARRY_PX_* bit, and come back; two PX bits at once are no
    /// entry the Rust side wrote.
    #[test]
    fn proxied_entries_carry_their_shift_and_rescale() {
        let e = CacheEntry {
            action: CacheAction::Nat {
                src: None,
                dst: Some((v4([10, 0, 0, 1]), 8080)),
            },
            seq_next: None,
            ..nat_entry()
        };
        let window = Rescale { from: 2, to: 7 };
        for (shift, bit) in [
            (
                CacheShift::Ack {
                    shift: 0x8000_0001,
                    window,
                },
                cache_carry::CARRY_PX_ACK,
            ),
            (
                CacheShift::Seq {
                    shift: 0x7fff_ffff,
                    window,
                },
                cache_carry::CARRY_PX_SEQ,
            ),
        ] {
            let c = CacheEntry { shift, ..e };
            let v = c.value();
            assert_eq!(v.carry, bit);
            assert_eq!(v.px_scale, 0x72);
            let back = cache_val::from_bytes(&v.to_bytes()).expect("whole value");
            assert_eq!(CacheEntry::from_value(&back, false), Some(c));
        }
        let mut both = e.value();
        both.carry.0 = cache_carry::CARRY_PX_ACK.0 | cache_carry::CARRY_PX_SEQ.0;
        assert_eq!(CacheEntry::from_value(&both, false), None);
    }

    /// The program's front slots (bpf/front.h) spread one client's ports about
    /// as a random placement would (a multiply that left ports in unused bits, as the
    /// connection table's first hash did, would put them in a handful of slots), and each
    /// family keeps to its half of front_gen.
    #[test]
    fn front_slots_spread_one_clients_ports_and_keep_to_their_family() {
        for v6 in [false, true] {
            let base = if v6 {
                0x2001_0db8 << 96
            } else {
                V4_MAPPED | 0x0a52_0001
            };
            let slots: std::collections::HashSet<usize> = (0..256u16)
                .map(|p| {
                    front_index(&FlowKey {
                        src: base,
                        dst: base + 1,
                        sport: 40_000 + p,
                        dport: 80,
                        proto: 17,
                        v6,
                        zone: 0,
                    })
                })
                .collect();
            // 256 keys placed at random in 2,048 slots fill about 241 (standard deviation
            // about 5). The sum of multiplies fills 256 with IPv4 ports; with IPv6 ports,
            // whose word's multiplier is close to 15/47 of 2^64 once shifted by the port's
            // byte, 218.
            assert!(slots.len() >= 210, "v6 {v6}: {} slots", slots.len());
            let half = if v6 {
                FRONT_SLOTS..2 * FRONT_SLOTS
            } else {
                0..FRONT_SLOTS
            };
            assert!(slots.iter().all(|s| half.contains(s)), "v6 {v6}");
        }
    }
}
