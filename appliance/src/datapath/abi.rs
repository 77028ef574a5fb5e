//! steer.bpf.c's structs on the Rust side: generated from the compiled object's BTF, and
//! turned into the bytes the kernel stores in the program's maps.
//!
//! build.rs keeps the `types` module of the skeleton libbpf-cargo generates for the object,
//! so every struct here has the C's field names, types and offsets. A field moved in the C
//! moves here too; a field the Rust side names that the C renames, retypes or removes fails
//! the build. `map_bytes!` writes and reads each field at its `offset_of!` with its own
//! type's width, so no offset or size is written down a second time.
//!
//! `__be16`/`__be32` fields come out as `u16`/`u32` holding network-order bytes, as the
//! packet carries them: fill them with `to_be()` and read them with `u16::from_be`.

#[allow(
    non_camel_case_types,
    non_snake_case,
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::all
)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/steer_types.rs"));
}

pub(crate) use generated::{
    cache_key4, cache_key6, cache_stat, cache_val, flood_conf, flood_cpu, stateless_hop,
    stateless_vip, steer_key, steer_val, xdp_md,
};

/// A scalar or byte-array field of a map struct, stored in native byte order.
trait Field {
    /// Writes the field at the start of `b`.
    fn put(&self, b: &mut [u8]);
    /// Reads the field from the start of `b`.
    fn get(&mut self, b: &[u8]);
}

macro_rules! int_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn put(&self, b: &mut [u8]) {
                b[..size_of::<$t>()].copy_from_slice(&self.to_ne_bytes());
            }
            fn get(&mut self, b: &[u8]) {
                let mut a = [0u8; size_of::<$t>()];
                a.copy_from_slice(&b[..size_of::<$t>()]);
                *self = <$t>::from_ne_bytes(a);
            }
        }
    )*};
}
int_field!(u8, u16, u32, u64);

impl<const N: usize> Field for [u8; N] {
    fn put(&self, b: &mut [u8]) {
        b[..N].copy_from_slice(self);
    }
    fn get(&mut self, b: &[u8]) {
        self.copy_from_slice(&b[..N]);
    }
}

/// Gives a generated struct `LEN`, `to_bytes` and `from_bytes` over the fields listed
/// (padding is left out and stays zero). Each field goes to its `offset_of!` in the C
/// layout, with its own type's width.
macro_rules! map_bytes {
    ($($t:ident { $($f:ident),* $(,)? })*) => {$(
        // Every struct gets both directions; some maps are only written, some only read.
        #[allow(dead_code)]
        impl $t {
            /// Bytes of the C struct (its `sizeof`).
            pub(crate) const LEN: usize = size_of::<$t>();

            /// The struct as the kernel stores it in a map.
            pub(crate) fn to_bytes(self) -> [u8; size_of::<$t>()] {
                let mut b = [0u8; size_of::<$t>()];
                $( Field::put(&self.$f, &mut b[std::mem::offset_of!($t, $f)..]); )*
                b
            }

            /// The struct from a map's bytes; `None` when `b` is shorter than the struct.
            pub(crate) fn from_bytes(b: &[u8]) -> Option<$t> {
                if b.len() < Self::LEN {
                    return None;
                }
                let mut v = $t::default();
                $( Field::get(&mut v.$f, &b[std::mem::offset_of!($t, $f)..]); )*
                Some(v)
            }
        }
    )*};
}

map_bytes! {
    steer_key { addr, port, proto, kind, family, vni }
    steer_val { vip, ring, mode }
    stateless_vip { vip, base, m, hash }
    stateless_hop { dst_mac, src_mac, ifindex, ok, tx, tx_port }
    cache_key4 { src, dst, sport, dport, proto }
    cache_key6 { src, dst, sport, dport, proto }
    cache_val {
        last_seen, new_src, new_dst, new_sport, new_dport, dst_mac, src_mac, ifindex, stat,
        action, flags, tx, tx_port, carry_base, carry, carry_delta,
    }
    cache_stat { packets, bytes }
    flood_conf { threshold, src_rate, src_burst }
    flood_cpu { window_start, window_count, last_seen, on, quiet }
    xdp_md { data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn fields_land_at_the_c_offsets_and_round_trip() {
        let v = cache_val {
            last_seen: 0x0102_0304_0506_0708,
            dst_mac: [1, 2, 3, 4, 5, 6],
            ifindex: 7,
            tx_port: 9,
            new_dport: 8080u16.to_be(),
            ..Default::default()
        };
        let b = v.to_bytes();
        assert_eq!(b.len(), cache_val::LEN);
        let at = |o: usize, n: usize| b[o..o + n].to_vec();
        assert_eq!(at(offset_of!(cache_val, dst_mac), 6), [1, 2, 3, 4, 5, 6]);
        assert_eq!(at(offset_of!(cache_val, ifindex), 4), 7u32.to_ne_bytes());
        assert_eq!(at(offset_of!(cache_val, new_dport), 2), [0x1f, 0x90]);
        assert_eq!(b[offset_of!(cache_val, tx_port)], 9);
        let back = cache_val::from_bytes(&b).expect("whole value");
        assert_eq!(back.to_bytes(), b);
        assert!(cache_val::from_bytes(&b[..cache_val::LEN - 1]).is_none());
    }
}
