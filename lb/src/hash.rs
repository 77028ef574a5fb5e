//! Flow hashing, kept bit-for-bit reproducible in eBPF.
//!
//! A later XDP fast path mirrors established flows and must pick the same backend as the
//! userspace worker, so the per-packet hash is Bob Jenkins' lookup3 as the Linux kernel ships
//! it (`jhash2` in `include/linux/jhash.h`, which BPF programs include as Katran does), over a
//! fixed key layout of 32-bit words with a fixed seed. Nothing here depends on process state:
//! no `RandomState`, no random seeds, identical results on every machine.
//!
//! # Flow key layout ([`FlowKey::words`])
//!
//! Words are loaded from the key bytes in *little-endian* order, which is what an eBPF
//! program (or any x86/arm64 C program) reads when it casts the key struct to `u32 *`.
//! Addresses keep network byte order inside the struct, exactly like `struct flow_key` in
//! Katran.
//!
//! | family | words | layout (bytes, network order)                                   |
//! |--------|-------|-----------------------------------------------------------------|
//! | IPv4   | 4     | `src[4] dst[4] sport[2] dport[2] proto[1] 0[3]`                  |
//! | IPv6   | 10    | `src[16] dst[16] sport[2] dport[2] proto[1] 0[3]`                |
//!
//! Fields not selected by the VIP's [`HashFields`] are zero: a 3-tuple key has both ports
//! zero, a 2-tuple key has ports and protocol zero. The seed is [`FLOW_SEED`].

use std::net::IpAddr;

use config::HashFields;

/// `JHASH_INITVAL` from `include/linux/jhash.h` (lookup3's golden-ratio constant).
pub const JHASH_INITVAL: u32 = 0xdead_beef;

/// Seed of the per-packet flow hash. Fixed so that every appliance and the eBPF fast path
/// agree; changing it moves every stateless flow.
pub const FLOW_SEED: u32 = 0x5175_1ce0;

/// Seed of the Maglev `offset` hash of a backend identity.
pub const MAGLEV_OFFSET_SEED: u32 = 0x0000_2f4b;

/// Seed of the Maglev `skip` hash; different from [`MAGLEV_OFFSET_SEED`] so that offset and
/// skip are independent, as the Maglev paper requires of `h1` and `h2`.
pub const MAGLEV_SKIP_SEED: u32 = 0x9e37_79b9;

#[inline(always)]
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

#[inline(always)]
fn final_mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// Linux `jhash2`: lookup3 `hashword` over 32-bit words.
#[inline]
pub fn jhash2(k: &[u32], initval: u32) -> u32 {
    let len = k.len() as u32;
    let init = JHASH_INITVAL
        .wrapping_add(len.wrapping_shl(2))
        .wrapping_add(initval);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut rest = k;
    while rest.len() > 3 {
        a = a.wrapping_add(rest[0]);
        b = b.wrapping_add(rest[1]);
        c = c.wrapping_add(rest[2]);
        mix(&mut a, &mut b, &mut c);
        rest = &rest[3..];
    }
    match rest.len() {
        3 => {
            c = c.wrapping_add(rest[2]);
            b = b.wrapping_add(rest[1]);
            a = a.wrapping_add(rest[0]);
        }
        2 => {
            b = b.wrapping_add(rest[1]);
            a = a.wrapping_add(rest[0]);
        }
        1 => a = a.wrapping_add(rest[0]),
        _ => return c,
    }
    final_mix(&mut a, &mut b, &mut c);
    c
}

/// Linux `jhash`: lookup3 `hashlittle` over bytes (little-endian word loads).
pub fn jhash(key: &[u8], initval: u32) -> u32 {
    let init = JHASH_INITVAL
        .wrapping_add(key.len() as u32)
        .wrapping_add(initval);
    let (mut a, mut b, mut c) = (init, init, init);
    let word = |s: &[u8]| -> u32 {
        let mut w = [0u8; 4];
        w[..s.len()].copy_from_slice(s);
        u32::from_le_bytes(w)
    };
    let mut rest = key;
    while rest.len() > 12 {
        a = a.wrapping_add(word(&rest[0..4]));
        b = b.wrapping_add(word(&rest[4..8]));
        c = c.wrapping_add(word(&rest[8..12]));
        mix(&mut a, &mut b, &mut c);
        rest = &rest[12..];
    }
    if rest.is_empty() {
        return c;
    }
    let n = rest.len();
    a = a.wrapping_add(word(&rest[..n.min(4)]));
    if n > 4 {
        b = b.wrapping_add(word(&rest[4..n.min(8)]));
    }
    if n > 8 {
        c = c.wrapping_add(word(&rest[8..n]));
    }
    final_mix(&mut a, &mut b, &mut c);
    c
}

/// The fields of a packet that identify its flow, addresses as IPv4-mapped IPv6 `u128`s
/// (`::ffff:a.b.c.d` for IPv4), so one representation serves both families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source (client) address.
    pub src: u128,
    /// Destination (VIP) address.
    pub dst: u128,
    /// Source port; zero for protocols without ports.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IANA protocol number.
    pub proto: u8,
    /// Whether the addresses are IPv6 (the mapped form alone would be ambiguous for
    /// `::ffff:0:0/96` IPv6 traffic, which the key must not confuse with IPv4).
    pub v6: bool,
    /// The flow's address space: 0 for the underlay, [`zone_of`] a tenant's VNI for a flow
    /// that arrived VXLAN-encapsulated for a tenant VIP. Tenants reuse addresses, so two
    /// flows with the same 5-tuple in different zones are different flows. Not hashed:
    /// within one VIP the zone is constant.
    pub zone: u32,
}

pub use config::{TENANT_ZONE, vni_of, zone_of};

/// Turns an address into the `u128` form used in keys and tables.
pub fn addr_to_u128(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().into(),
        IpAddr::V6(a) => a.into(),
    }
}

/// The inverse of [`addr_to_u128`] for a known family.
pub fn u128_to_addr(addr: u128, v6: bool) -> IpAddr {
    let a = std::net::Ipv6Addr::from(addr);
    if v6 {
        IpAddr::V6(a)
    } else {
        IpAddr::V4(
            a.to_ipv4_mapped()
                .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
        )
    }
}

impl FlowKey {
    /// The key restricted to `fields` (unselected fields zeroed), as hashed.
    #[inline]
    pub fn restricted(&self, fields: HashFields) -> FlowKey {
        let mut k = *self;
        match fields {
            HashFields::FiveTuple => {}
            HashFields::ThreeTuple => {
                k.sport = 0;
                k.dport = 0;
            }
            HashFields::TwoTuple => {
                k.sport = 0;
                k.dport = 0;
                k.proto = 0;
            }
        }
        k
    }

    /// The documented word layout (see the module docs); returns the words and how many of
    /// them are used (4 for IPv4, 10 for IPv6).
    #[inline]
    pub fn words(&self) -> ([u32; 10], usize) {
        let mut w = [0u32; 10];
        let ports = u32::from_le_bytes([
            (self.sport >> 8) as u8,
            self.sport as u8,
            (self.dport >> 8) as u8,
            self.dport as u8,
        ]);
        let proto = u32::from(self.proto);
        if self.v6 {
            let s = self.src.to_be_bytes();
            let d = self.dst.to_be_bytes();
            for i in 0..4 {
                w[i] = u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
                w[4 + i] = u32::from_le_bytes([d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]]);
            }
            w[8] = ports;
            w[9] = proto;
            (w, 10)
        } else {
            w[0] = (self.src as u32).swap_bytes();
            w[1] = (self.dst as u32).swap_bytes();
            w[2] = ports;
            w[3] = proto;
            (w, 4)
        }
    }

    /// The flow hash of this key under `fields`: `jhash2(words, FLOW_SEED)`.
    #[inline]
    pub fn hash(&self, fields: HashFields) -> u32 {
        let (w, n) = self.restricted(fields).words();
        jhash2(&w[..n], FLOW_SEED)
    }
}

/// The bytes that identify a backend to Maglev: 16 address bytes (IPv4-mapped for IPv4) and
/// the port in network order. Stable across processes, so every appliance builds the same
/// ring from the same backend set.
pub fn backend_identity(addr: IpAddr, port: u16) -> [u8; 18] {
    let mut id = [0u8; 18];
    id[..16].copy_from_slice(&addr_to_u128(addr).to_be_bytes());
    id[16..].copy_from_slice(&port.to_be_bytes());
    id
}

/// Maglev `(offset, skip)` for a backend identity and table size `m` (a prime):
/// `offset = h1(id) mod m`, `skip = h2(id) mod (m - 1) + 1` (NSDI 2016, section 3.4), with
/// `h1`/`h2` being `jhash` under two different fixed seeds.
pub fn maglev_offset_skip(id: &[u8], m: u32) -> (u32, u32) {
    let offset = jhash(id, MAGLEV_OFFSET_SEED) % m;
    let skip = if m > 1 {
        jhash(id, MAGLEV_SKIP_SEED) % (m - 1) + 1
    } else {
        1
    };
    (offset, skip)
}

/// A fast, deterministic 64-bit mixer for in-memory table indexes (not for anything that
/// must match eBPF). Multiply-xorshift in the style of SplitMix64's finaliser.
#[inline(always)]
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    // Vectors from the driver in Bob Jenkins' lookup3.c (hashlittle).
    #[test]
    fn jhash_matches_lookup3_vectors() {
        assert_eq!(jhash(b"", 0), 0xdeadbeef);
        assert_eq!(jhash(b"", 0xdeadbeef), 0xbd5b7dde);
        assert_eq!(jhash(b"Four score and seven years ago", 0), 0x17770551);
        assert_eq!(jhash(b"Four score and seven years ago", 1), 0xcd628161);
    }

    #[test]
    fn jhash2_equals_jhash_on_whole_words() {
        let bytes: Vec<u8> = (0u8..40)
            .map(|b| b.wrapping_mul(37).wrapping_add(11))
            .collect();
        for words in 0..=10 {
            let b = &bytes[..words * 4];
            let w: Vec<u32> = b
                .chunks(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            for seed in [0, 1, FLOW_SEED] {
                assert_eq!(jhash2(&w, seed), jhash(b, seed), "{words} words");
            }
        }
    }

    fn v4key() -> FlowKey {
        FlowKey {
            src: addr_to_u128(Ipv4Addr::new(198, 51, 100, 7).into()),
            dst: addr_to_u128(Ipv4Addr::new(192, 0, 2, 10).into()),
            sport: 40000,
            dport: 80,
            proto: 6,
            v6: false,
            zone: 0,
        }
    }

    #[test]
    fn v4_layout_is_network_order_struct() {
        let (w, n) = v4key().words();
        assert_eq!(n, 4);
        let mut bytes = Vec::new();
        for x in &w[..n] {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        assert_eq!(
            bytes,
            [
                198, 51, 100, 7, 192, 0, 2, 10, 0x9c, 0x40, 0, 80, 6, 0, 0, 0
            ]
        );
        assert_eq!(
            v4key().hash(HashFields::FiveTuple),
            jhash(&bytes, FLOW_SEED)
        );
    }

    #[test]
    fn v6_layout_is_network_order_struct() {
        let src: Ipv6Addr = "2001:db8::7".parse().unwrap();
        let dst: Ipv6Addr = "2001:db8:1::10".parse().unwrap();
        let k = FlowKey {
            src: src.into(),
            dst: dst.into(),
            sport: 1,
            dport: 443,
            proto: 17,
            v6: true,
            zone: 0,
        };
        let (w, n) = k.words();
        assert_eq!(n, 10);
        let mut bytes = Vec::new();
        for x in &w[..n] {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        let mut want = Vec::new();
        want.extend_from_slice(&src.octets());
        want.extend_from_slice(&dst.octets());
        want.extend_from_slice(&[0, 1, 1, 187, 17, 0, 0, 0]);
        assert_eq!(bytes, want);
    }

    #[test]
    fn restricted_fields_zero_what_is_not_hashed() {
        let k = v4key();
        let mut other = k;
        other.sport = 1234;
        assert_ne!(
            k.hash(HashFields::FiveTuple),
            other.hash(HashFields::FiveTuple)
        );
        assert_eq!(
            k.hash(HashFields::ThreeTuple),
            other.hash(HashFields::ThreeTuple)
        );
        other.proto = 17;
        assert_ne!(
            k.hash(HashFields::ThreeTuple),
            other.hash(HashFields::ThreeTuple)
        );
        assert_eq!(
            k.hash(HashFields::TwoTuple),
            other.hash(HashFields::TwoTuple)
        );
    }

    #[test]
    fn maglev_offset_skip_in_range_and_seeded_differently() {
        let id = backend_identity(Ipv4Addr::new(10, 0, 0, 1).into(), 80);
        let (o, s) = maglev_offset_skip(&id, 65537);
        assert!(o < 65537);
        assert!((1..65537).contains(&s));
        assert_ne!(jhash(&id, MAGLEV_OFFSET_SEED), jhash(&id, MAGLEV_SKIP_SEED));
    }

    #[test]
    fn addr_roundtrip() {
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(u128_to_addr(addr_to_u128(a), false), a);
        let b: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(u128_to_addr(addr_to_u128(b), true), b);
    }
}
