//! Internet checksum: full computation (RFC 1071) and incremental update (RFC 1624).
//!
//! NAT and full-NAT rewrite addresses and ports on every packet; recomputing the TCP checksum
//! over a whole segment per packet would cost more than the rest of the rewrite, so the hot
//! path patches checksums incrementally with [`update16`], [`update32`], [`update_addr_v4`]
//! and [`update_addr_v6`], or sums several RFC 1624 deltas ([`delta16`], [`addr_delta_v4`],
//! [`addr_delta_v6`]) and applies them once ([`apply_delta`], [`L4Csum::patch_delta`]). The
//! full [`sum`]/[`checksum`] pair serves `verify`/`fill` methods, the frames the appliance
//! originates ([`v4_header_checksum`], [`l4_checksum_full`]) and tests. All of Sluice's
//! checksum arithmetic lives here.
//!
//! Conventions: a "sum" is a `u32` partial one's-complement sum that may still carry; it is
//! turned into a 16-bit value with [`fold`] and into the transmitted checksum with [`finish`].
//! UDP is special twice over: over IPv4 a checksum field of 0 means "no checksum" and must stay
//! 0 through a rewrite, and a computed checksum of 0 is sent as 0xffff (RFC 768, RFC 8200
//! section 8.1). The `udp_*` variants implement both rules.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{IpProtocol, read_u16, write_u16};

/// Adds `data` as big-endian 16-bit words to the partial sum `initial` (RFC 1071 section 4.1).
///
/// An odd trailing byte is padded with a zero byte, as the RFC requires. The result is a
/// partial sum already folded to at most 17 bits, so it can be fed back in as `initial` for the
/// next chunk (pseudo-header, then header, then payload).
#[inline]
pub fn sum(data: &[u8], initial: u32) -> u32 {
    // Adding 32-bit words into a 64-bit accumulator and folding at the end gives the same
    // one's-complement result as 16-bit adds (RFC 1071 section 2(B)) with half the additions,
    // and cannot overflow for any buffer shorter than 16 GiB.
    let mut acc = u64::from(initial);
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    acc += u64::from(u32::from_be_bytes(tail));
    // Fold 64 -> 32 -> 17 bits; a second fold at each step absorbs the carry of the first.
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    let mut s = acc as u32;
    s = (s & 0xffff) + (s >> 16);
    s
}

/// Folds a partial sum's carries back into 16 bits (end-around carry), without complementing.
#[inline]
pub fn fold(sum: u32) -> u16 {
    let s = (sum & 0xffff) + (sum >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Turns a partial sum into the value transmitted in a checksum field: `!fold(sum)`.
#[inline]
pub fn finish(sum: u32) -> u16 {
    !fold(sum)
}

/// The RFC 1071 checksum of `data` as transmitted; verifying a buffer that contains its own
/// checksum yields 0.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(data, 0))
}

/// Partial sum of the IPv4 pseudo-header (RFC 793 section 3.1, RFC 768): source, destination,
/// zero byte, protocol and the upper-layer length.
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, len: u16) -> u32 {
    let s = src.to_bits();
    let d = dst.to_bits();
    (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff) + u32::from(protocol) + u32::from(len)
}

/// Partial sum of the IPv6 pseudo-header (RFC 8200 section 8.1): source, destination, 32-bit
/// upper-layer length, three zero bytes and the next header.
#[inline]
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> u32 {
    let s = sum(&src.octets(), 0);
    let s = sum(&dst.octets(), s);
    let s = s + (len >> 16) + (len & 0xffff) + u32::from(next_header);
    u32::from(fold(s))
}

/// RFC 1624 equation 3: the checksum after one 16-bit word of the covered data changes from
/// `old` to `new`. `HC' = ~(~HC + ~m + m')`.
///
/// Equation 3 (rather than the RFC 1141 formula) never turns a valid checksum into the
/// negative zero 0xffff, so the result equals a full recomputation bit for bit, for any
/// covered data that is not entirely zero (every IP header and TCP/UDP pseudo-header has a
/// non-zero version or protocol byte).
#[inline]
pub fn update16(old_csum: u16, old: u16, new: u16) -> u16 {
    let s = u32::from(!old_csum) + u32::from(!old) + u32::from(new);
    !fold(s)
}

/// [`update16`] for a 32-bit field (sequence numbers, IPv4 addresses).
#[inline]
pub fn update32(old_csum: u16, old: u32, new: u32) -> u16 {
    let s = u32::from(!old_csum)
        + u32::from(!(old >> 16) as u16)
        + u32::from(!(old as u16))
        + (new >> 16)
        + (new & 0xffff);
    !fold(s)
}

/// [`update16`] for an IPv4 address change: patches the IPv4 header checksum, and the TCP/UDP
/// checksum whose pseudo-header covers the address.
#[inline]
pub fn update_addr_v4(csum: u16, old: Ipv4Addr, new: Ipv4Addr) -> u16 {
    update32(csum, old.to_bits(), new.to_bits())
}

/// [`update16`] for an IPv6 address change in a TCP/UDP/ICMPv6 pseudo-header.
#[inline]
pub fn update_addr_v6(csum: u16, old: Ipv6Addr, new: Ipv6Addr) -> u16 {
    let o = old.to_bits();
    let n = new.to_bits();
    // Sum of the complemented old words plus the new words, in one accumulator: eight
    // 16-bit words each side fit easily in 32 bits.
    let mut s = u32::from(!csum);
    let mut i = 0;
    while i < 8 {
        let shift = i * 16;
        s += u32::from(!((o >> shift) as u16));
        s += u32::from((n >> shift) as u16);
        i += 1;
    }
    !fold(s)
}

/// Maps a UDP checksum update through the two UDP rules: an absent checksum (0) stays absent,
/// and a result of 0 is transmitted as 0xffff.
#[inline]
fn udp_rules(old_csum: u16, updated: u16) -> u16 {
    if old_csum == 0 {
        0
    } else if updated == 0 {
        0xffff
    } else {
        updated
    }
}

/// [`update16`] for a UDP checksum field (see the module docs for the UDP rules).
#[inline]
pub fn udp_update16(old_csum: u16, old: u16, new: u16) -> u16 {
    udp_rules(old_csum, update16(old_csum, old, new))
}

/// [`update32`] for a UDP checksum field.
#[inline]
pub fn udp_update32(old_csum: u16, old: u32, new: u32) -> u16 {
    udp_rules(old_csum, update32(old_csum, old, new))
}

/// [`update_addr_v4`] for a UDP checksum field.
#[inline]
pub fn udp_update_addr_v4(old_csum: u16, old: Ipv4Addr, new: Ipv4Addr) -> u16 {
    udp_rules(old_csum, update_addr_v4(old_csum, old, new))
}

/// [`update_addr_v6`] for a UDP checksum field. IPv6 forbids a zero UDP checksum; a packet
/// carrying one is kept as is here and should be dropped by the caller's validation.
#[inline]
pub fn udp_update_addr_v6(old_csum: u16, old: Ipv6Addr, new: Ipv6Addr) -> u16 {
    udp_rules(old_csum, update_addr_v6(old_csum, old, new))
}

/// [`update_addr_v4`] or [`update_addr_v6`] for an address in the packet path's `u128` form
/// (an IPv4 address in the low 32 bits): patches a checksum whose covered data (IPv4 header,
/// TCP/UDP/ICMPv6 pseudo-header) holds the address.
#[inline(always)]
pub fn update_addr(csum: u16, old: u128, new: u128, v6: bool) -> u16 {
    if v6 {
        update_addr_v6(csum, old.into(), new.into())
    } else {
        update32(csum, old as u32, new as u32)
    }
}

/// Folds a 64-bit one's-complement accumulator to 16 bits with end-around carries. Each
/// step keeps the value congruent modulo 0xffff (2^16 and 2^32 are both 1 there) and only a
/// zero input gives zero, so the result is exactly what [`fold`] gives on the 16-bit-word
/// sum of the same terms.
#[inline(always)]
pub fn fold64(x: u64) -> u16 {
    let (s, c) = (x as u32).overflowing_add((x >> 32) as u32);
    let x = s + u32::from(c);
    let (s, c) = (x as u16).overflowing_add((x >> 16) as u16);
    s + u16::from(c)
}

/// `~old + new` over a 16-bit field change (RFC 1624, eqn. 3 terms), to be summed with other
/// deltas and applied once with [`fold64`].
#[inline(always)]
pub fn delta16(old: u16, new: u16) -> u64 {
    u64::from(!old) + u64::from(new)
}

/// `~old + new` over an IPv4 address change, in 32-bit chunks (RFC 1624, eqn. 3 terms):
/// congruent to the 16-bit-word sum, without splitting into words per packet.
#[inline(always)]
pub fn addr_delta_v4(old: u32, new: u32) -> u64 {
    u64::from(!old) + u64::from(new)
}

/// [`addr_delta_v4`] for an IPv6 address: four 32-bit chunks each side.
#[inline(always)]
pub fn addr_delta_v6(old: u128, new: u128) -> u64 {
    let chunks = |a: u128| {
        let hi = (a >> 64) as u64;
        let lo = a as u64;
        (hi >> 32) + (hi & 0xffff_ffff) + (lo >> 32) + (lo & 0xffff_ffff)
    };
    chunks(!old) + chunks(new)
}

/// Applies a summed RFC 1624 delta to a checksum: `~fold(~csum + delta)`.
#[inline(always)]
pub fn apply_delta(csum: u16, delta: u64) -> u16 {
    !fold64(u64::from(!csum) + delta)
}

/// A TCP or UDP checksum field at byte offset `off` of a frame. A UDP result of 0 is sent
/// as 0xffff in either family (RFC 768; over IPv6 a zero field means none, which RFC 8200
/// 8.1 has receivers discard); UDP over IPv4 may carry no checksum (0), which must stay 0
/// through a rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L4Csum {
    /// Offset of the 16-bit checksum field in the frame.
    pub off: usize,
    /// UDP: a result of zero goes out as 0xffff.
    pub udp: bool,
    /// UDP over IPv4: a zero field means "no checksum" and stays zero.
    pub optional: bool,
}

impl L4Csum {
    /// The checksum field of TCP at `off`.
    pub fn tcp(off: usize) -> L4Csum {
        L4Csum {
            off,
            udp: false,
            optional: false,
        }
    }

    /// The checksum field of UDP at `off`, over IPv6 (`v6`) or IPv4.
    pub fn udp(off: usize, v6: bool) -> L4Csum {
        L4Csum {
            off,
            udp: true,
            optional: !v6,
        }
    }

    /// Replaces the field with `f(old)`, keeping the UDP rules.
    #[inline(always)]
    pub fn patch(&self, b: &mut [u8], f: impl FnOnce(u16) -> u16) {
        let old = read_u16(b, self.off);
        if self.optional && old == 0 {
            return;
        }
        let mut new = f(old);
        if self.udp && new == 0 {
            new = 0xffff;
        }
        write_u16(b, self.off, new);
    }

    /// [`L4Csum::patch`] with a summed RFC 1624 delta (`~old + new` terms, any grouping,
    /// see [`delta16`] and [`addr_delta_v4`]) instead of a closure, so the per-packet NAT
    /// rewrite stays one straight-line function.
    #[inline(always)]
    pub fn patch_delta(&self, b: &mut [u8], delta: u64) {
        let old = read_u16(b, self.off);
        if self.optional && old == 0 {
            return;
        }
        let mut new = apply_delta(old, delta);
        if self.udp && new == 0 {
            new = 0xffff;
        }
        write_u16(b, self.off, new);
    }
}

/// The header checksum of an option-less IPv4 header with identification 0, summed from the
/// field values: a fresh header (a tunnel's outer one) gets its checksum without reading
/// back the bytes just stored.
#[inline(always)]
pub fn v4_fresh_header(
    tos: u8,
    total_len: u16,
    flags: u16,
    ttl: u8,
    proto: u8,
    src: u32,
    dst: u32,
) -> u16 {
    let sum = (0x4500u32 | u32::from(tos))
        + u32::from(total_len)
        + u32::from(flags)
        + ((u32::from(ttl) << 8) | u32::from(proto))
        + (src >> 16)
        + (src & 0xffff)
        + (dst >> 16)
        + (dst & 0xffff);
    finish(sum)
}

/// Recomputes the IPv4 header checksum of the `hl`-byte header at `d[l3..]`.
#[inline]
pub fn v4_header_checksum(d: &mut [u8], l3: usize, hl: usize) {
    write_u16(d, l3 + 10, 0);
    let c = checksum(&d[l3..l3 + hl]);
    write_u16(d, l3 + 10, c);
}

/// Full TCP/UDP/ICMPv6 checksum over `d[l4..end]` with the pseudo-header of the IP packet at
/// `l3`; `csum_off` is the field's offset from `l4`. A UDP result of 0 is sent as 0xffff.
#[allow(clippy::too_many_arguments)]
pub fn l4_checksum_full(
    d: &mut [u8],
    l3: usize,
    v6: bool,
    l4: usize,
    end: usize,
    proto: u8,
    csum_off: usize,
) {
    write_u16(d, l4 + csum_off, 0);
    let len = end - l4;
    let ph = if v6 {
        let s = sum(&d[l3 + 8..l3 + 40], 0);
        s + (len as u32 >> 16) + (len as u32 & 0xffff) + u32::from(proto)
    } else {
        let s = sum(&d[l3 + 12..l3 + 20], 0);
        s + len as u32 + u32::from(proto)
    };
    let mut c = finish(sum(&d[l4..end], ph));
    if proto == IpProtocol::UDP && c == 0 {
        c = 0xffff;
    }
    write_u16(d, l4 + csum_off, c);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Textbook RFC 1071 sum, 16 bits at a time, kept separate from the optimised code.
    fn reference_checksum(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        let mut i = 0;
        while i + 1 < data.len() {
            acc += u32::from(u16::from_be_bytes([data[i], data[i + 1]]));
            i += 2;
        }
        if i < data.len() {
            acc += u32::from(data[i]) << 8;
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3 example: bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data, 0)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn known_ipv4_header() {
        // Classic example header (Wikipedia "IPv4 header checksum"): checksum 0xb861.
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0xb861);
        hdr[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(checksum(&hdr), 0);
    }

    #[test]
    fn rfc1624_example() {
        // RFC 1624 section 4: HC 0xdd2f, field 0x5555 -> 0x3285 gives HC' 0x0000.
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0x0000);
    }

    #[test]
    fn udp_rules_keep_absent_and_map_zero() {
        assert_eq!(udp_update16(0, 1, 2), 0);
        // A checksum that becomes 0 must be sent as 0xffff: choose new so the update is 0.
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0);
        assert_eq!(udp_update16(0xdd2f, 0x5555, 0x3285), 0xffff);
    }

    #[test]
    fn pseudo_header_v6_matches_bytes() {
        let src: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let dst: Ipv6Addr = "2001:db8:ffff::2".parse().unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&src.octets());
        bytes.extend_from_slice(&dst.octets());
        bytes.extend_from_slice(&0x0001_0010u32.to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 17]);
        assert_eq!(
            finish(pseudo_header_v6(src, dst, 17, 0x0001_0010)),
            reference_checksum(&bytes)
        );
    }

    #[test]
    fn pseudo_header_v4_matches_bytes() {
        let src = Ipv4Addr::new(192, 0, 2, 1);
        let dst = Ipv4Addr::new(198, 51, 100, 254);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&src.octets());
        bytes.extend_from_slice(&dst.octets());
        bytes.extend_from_slice(&[0, 6, 0xff, 0xfe]);
        assert_eq!(
            finish(pseudo_header_v4(src, dst, 6, 0xfffe)),
            reference_checksum(&bytes)
        );
    }

    proptest! {
        #[test]
        fn sum_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            prop_assert_eq!(checksum(&data), reference_checksum(&data));
        }

        #[test]
        fn chained_sum_matches_whole(data in proptest::collection::vec(any::<u8>(), 0..600),
                                     cut in 0usize..300) {
            // Chaining is only defined at even boundaries (words must not straddle chunks).
            let cut = (cut * 2).min(data.len() & !1);
            let chained = finish(sum(&data[cut..], sum(&data[..cut], 0)));
            prop_assert_eq!(chained, checksum(&data));
        }

        #[test]
        fn update16_matches_recompute(mut data in proptest::collection::vec(any::<u8>(), 2..200),
                                      word in 0usize..100, new in any::<u16>()) {
            let n = data.len() / 2;
            let w = word % n;
            let before = checksum(&data);
            let old = u16::from_be_bytes([data[2 * w], data[2 * w + 1]]);
            data[2 * w..2 * w + 2].copy_from_slice(&new.to_be_bytes());
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(update16(before, old, new), checksum(&data));
        }

        #[test]
        fn update32_matches_recompute(mut data in proptest::collection::vec(any::<u8>(), 4..200),
                                      word in 0usize..50, new in any::<u32>()) {
            let n = data.len() / 4;
            let w = word % n;
            let before = checksum(&data);
            let old = u32::from_be_bytes(data[4 * w..4 * w + 4].try_into().unwrap());
            data[4 * w..4 * w + 4].copy_from_slice(&new.to_be_bytes());
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(update32(before, old, new), checksum(&data));
        }

        #[test]
        fn update_addr_v6_matches_recompute(prefix in proptest::collection::vec(any::<u8>(), 0..40),
                                            old in any::<u128>(), new in any::<u128>()) {
            let mut data = prefix.clone();
            data.truncate(prefix.len() & !1);
            let at = data.len();
            data.extend_from_slice(&old.to_be_bytes());
            data.extend_from_slice(&[0x12, 0x34]);
            let before = checksum(&data);
            data[at..at + 16].copy_from_slice(&new.to_be_bytes());
            let got = update_addr_v6(before, Ipv6Addr::from_bits(old), Ipv6Addr::from_bits(new));
            prop_assert_eq!(got, checksum(&data));
        }
        #[test]
        fn summed_deltas_match_one_update_at_a_time(csum in any::<u16>(), old in any::<u32>(),
                                                    new in any::<u32>(), po in any::<u16>(),
                                                    pn in any::<u16>()) {
            let one = update16(update32(csum, old, new), po, pn);
            let summed = apply_delta(csum, addr_delta_v4(old, new) + delta16(po, pn));
            prop_assert_eq!(summed, one);
        }

        #[test]
        fn fold64_agrees_with_fold(x in any::<u32>()) {
            prop_assert_eq!(fold64(u64::from(x)), fold(x));
        }

        #[test]
        fn v6_delta_matches_update_addr_v6(csum in any::<u16>(), old in any::<u128>(), new in any::<u128>()) {
            let want = update_addr_v6(csum, Ipv6Addr::from_bits(old), Ipv6Addr::from_bits(new));
            prop_assert_eq!(apply_delta(csum, addr_delta_v6(old, new)), want);
        }

        #[test]
        fn fresh_v4_header_checksum_matches_a_full_sum(tos in any::<u8>(), len in 20u16..,
                                                      df in any::<bool>(), proto in any::<u8>(),
                                                      src in any::<u32>(), dst in any::<u32>()) {
            let flags = if df { 0x4000 } else { 0 };
            let mut h = [0u8; 20];
            h[0] = 0x45;
            h[1] = tos;
            h[2..4].copy_from_slice(&len.to_be_bytes());
            h[6..8].copy_from_slice(&u16::to_be_bytes(flags));
            h[8] = 64;
            h[9] = proto;
            h[12..16].copy_from_slice(&src.to_be_bytes());
            h[16..20].copy_from_slice(&dst.to_be_bytes());
            let c = v4_fresh_header(tos, len, flags, 64, proto, src, dst);
            v4_header_checksum(&mut h, 0, 20);
            prop_assert_eq!(c, u16::from_be_bytes([h[10], h[11]]));
        }
    }

    #[test]
    fn l4_csum_keeps_an_absent_udp_checksum_and_never_sends_zero() {
        let udp = L4Csum::udp(0, false);
        let mut b = [0u8, 0];
        udp.patch(&mut b, |_| 0x1234);
        assert_eq!(b, [0, 0], "absent stays absent");
        let mut b = [0x00u8, 0x01];
        udp.patch_delta(&mut b, delta16(0, 1));
        assert_eq!(b, [0xff, 0xff], "zero goes out as 0xffff");
        // IPv6: the checksum is never absent, and zero goes out as 0xffff too.
        let udp6 = L4Csum::udp(0, true);
        let mut b = [0x00u8, 0x01];
        udp6.patch_delta(&mut b, delta16(0, 1));
        assert_eq!(
            b,
            [0xff, 0xff],
            "an IPv6 UDP checksum is never sent as zero"
        );
        let tcp = L4Csum::tcp(0);
        let mut b = [0u8, 0];
        tcp.patch(&mut b, |_| 0x1234);
        assert_eq!(b, [0x12, 0x34]);
        let mut b = [0x00u8, 0x01];
        tcp.patch_delta(&mut b, delta16(0, 1));
        assert_eq!(b, [0, 0], "zero is a TCP checksum like any other");
    }
}
