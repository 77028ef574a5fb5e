//! TCP header edits the client-address rewrites share: sequence-space arithmetic, the
//! option walk (MSS, SACK), room made inside a segment, and checksum deltas for bytes at
//! any offset.
//!
//! Every edit returns or applies an RFC 1624 delta: the L4 checksum is patched, never
//! recomputed, so a segment that arrived with a bad checksum still carries one and its
//! endpoint drops it.

use wire::checksum::{addr_delta_v4, delta16};

use super::DropReason;
use super::headers::{Ip, L4};
use crate::frame::Frame;

/// TCP option kinds (IANA "TCP Option Kind Numbers").
pub(super) mod kind {
    /// End of option list.
    pub(crate) const EOL: u8 = 0;
    /// No operation (padding).
    pub(crate) const NOP: u8 = 1;
    /// Maximum segment size.
    pub(crate) const MSS: u8 = 2;
    /// Window scale (RFC 7323).
    pub(crate) const WSCALE: u8 = 3;
    /// SACK permitted (RFC 2018).
    pub(crate) const SACK_PERMITTED: u8 = 4;
    /// SACK blocks (RFC 2018).
    pub(crate) const SACK: u8 = 5;
    /// TOA: the client's address (LVS/DPVS; not IANA-assigned, 254 is for experiments).
    pub(crate) const TOA: u8 = 254;
}

/// The fixed TCP header; options follow it.
pub(super) const TCP_BASE: usize = 20;
/// The longest TCP header (data offset 15).
pub(super) const TCP_MAX: usize = 60;
/// Offset of the sequence number in the TCP header.
const SEQ_AT: usize = 4;
/// Offset of the acknowledgement number in the TCP header.
const ACK_AT: usize = 8;

/// `a` comes after `b` in sequence space (RFC 1982 serial arithmetic).
#[inline(always)]
pub(super) fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// A backend-side sequence number in the client's space, for a stream whose backend side
/// runs `delta` bytes ahead from `base` on: numbers before `base` are the same, numbers
/// inside the inserted bytes map to `base`, later ones move back by `delta`.
#[inline(always)]
pub(super) fn unshift(x: u32, base: u32, delta: u32) -> u32 {
    let d = x.wrapping_sub(base) as i32;
    if d <= 0 {
        x
    } else if (d as u32) < delta {
        base
    } else {
        x.wrapping_sub(delta)
    }
}

fn read32(d: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

/// The TCP header's sequence and acknowledgement numbers, data offset and flags.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tcp {
    pub(super) seq: u32,
    pub(super) ack: u32,
    /// Header length in bytes (parse_l4 checked it fits the packet).
    pub(super) hlen: usize,
    pub(super) flags: u8,
    /// Payload bytes.
    pub(super) len: usize,
}

/// Reads the TCP header of `ip`.
pub(super) fn tcp(d: &[u8], ip: &Ip) -> Tcp {
    let t = ip.l4;
    let hlen = usize::from(d[t + 12] >> 4) * 4;
    Tcp {
        seq: read32(d, t + SEQ_AT),
        ack: read32(d, t + ACK_AT),
        hlen,
        flags: d[t + 13],
        len: ip.end().saturating_sub(t + hlen),
    }
}

/// Writes a 32-bit field of the TCP header at `at`; returns its checksum delta (the field
/// sits at an even offset of the segment).
fn write32(d: &mut [u8], at: usize, new: u32) -> u64 {
    let old = read32(d, at);
    d[at..at + 4].copy_from_slice(&new.to_be_bytes());
    addr_delta_v4(old, new)
}

/// Sets the sequence number; returns the checksum delta.
pub(super) fn set_seq(d: &mut [u8], ip: &Ip, seq: u32) -> u64 {
    write32(d, ip.l4 + SEQ_AT, seq)
}

/// Sets the acknowledgement number; returns the checksum delta.
pub(super) fn set_ack(d: &mut [u8], ip: &Ip, ack: u32) -> u64 {
    write32(d, ip.l4 + ACK_AT, ack)
}

/// The checksum delta of bytes `old` becoming `new` at `at` bytes from the segment's start
/// (any parity: a byte at an even offset is a word's high half).
pub(super) fn bytes_delta(old: &[u8], new: &[u8], at: usize) -> u64 {
    let word = |i: usize, b: u8| -> u64 {
        if (at + i).is_multiple_of(2) {
            u64::from(b) << 8
        } else {
            u64::from(b)
        }
    };
    let mut acc = 0u64;
    for (i, (o, n)) in old.iter().zip(new).enumerate() {
        acc += 0xffff - word(i, *o) + word(i, *n);
    }
    acc
}

/// Each well-formed option of the TCP header at `l4` with `hlen` bytes: `(kind, offset of
/// the option from the segment's start, its length)`. Stops at EOL or at the first option
/// whose length does not fit (what follows cannot be read safely).
pub(super) fn options(
    d: &[u8],
    l4: usize,
    hlen: usize,
) -> impl Iterator<Item = (u8, usize, usize)> + '_ {
    let mut at = TCP_BASE;
    std::iter::from_fn(move || {
        loop {
            if at >= hlen {
                return None;
            }
            match d[l4 + at] {
                kind::EOL => return None,
                kind::NOP => at += 1,
                k => {
                    let len = usize::from(*d.get(l4 + at + 1)?);
                    if len < 2 || at + len > hlen {
                        return None;
                    }
                    let o = (k, at, len);
                    at += len;
                    return Some(o);
                }
            }
        }
    })
}

/// Lowers the MSS option of a SYN or SYN-ACK by `by` (not below 536, the default MSS);
/// returns the checksum delta (0 without an MSS option).
pub(super) fn lower_mss(d: &mut [u8], ip: &Ip, t: &Tcp, by: u16) -> u64 {
    let at = options(d, ip.l4, t.hlen).find(|(k, _, len)| *k == kind::MSS && *len == 4);
    let Some((_, at, _)) = at else {
        return 0;
    };
    let v = ip.l4 + at + 2;
    let old = u16::from_be_bytes([d[v], d[v + 1]]);
    let new = old.saturating_sub(by).max(536).min(old);
    d[v..v + 2].copy_from_slice(&new.to_be_bytes());
    bytes_delta(&old.to_be_bytes(), &new.to_be_bytes(), at + 2)
}

/// Moves every SACK edge beyond `base` back by `delta` ([`unshift`]); returns the checksum
/// delta.
pub(super) fn unshift_sack(d: &mut [u8], ip: &Ip, t: &Tcp, base: u32, delta: u32) -> u64 {
    map_sack(d, ip, t, |x| unshift(x, base, delta))
}

/// Moves every SACK edge on by `by` (the SYN proxy's shift); returns the checksum delta.
pub(super) fn shift_sack(d: &mut [u8], ip: &Ip, t: &Tcp, by: u32) -> u64 {
    map_sack(d, ip, t, |x| x.wrapping_add(by))
}

/// Replaces every SACK edge `x` (of the first two SACK options) by `f(x)`; returns the
/// checksum delta.
fn map_sack(d: &mut [u8], ip: &Ip, t: &Tcp, f: impl Fn(u32) -> u32) -> u64 {
    let mut blocks = [(0usize, 0usize); 2];
    let mut n = 0;
    for (k, at, len) in options(d, ip.l4, t.hlen) {
        if k == kind::SACK && n < blocks.len() {
            blocks[n] = (at, len);
            n += 1;
        }
    }
    let mut acc = 0u64;
    for &(at, len) in &blocks[..n] {
        let mut e = at + 2;
        while e + 4 <= at + len {
            let o = read32(d, ip.l4 + e);
            let new = f(o);
            d[ip.l4 + e..ip.l4 + e + 4].copy_from_slice(&new.to_be_bytes());
            acc += bytes_delta(&o.to_be_bytes(), &new.to_be_bytes(), e);
            e += 4;
        }
    }
    acc
}

/// Opens `n` bytes (even) at `at` bytes into the TCP segment, moving what follows back:
/// grows the frame (Ethernet padding is dropped), fixes the IP length (and the IPv4
/// header checksum) and adds the length change to the L4 checksum. The caller writes the
/// new bytes and adds their checksum delta; an even `n` keeps every moved byte's parity,
/// so the moved bytes' sum does not change.
pub(super) fn open_room(
    frame: &mut Frame<'_>,
    ip: &Ip,
    l4: &L4,
    at: usize,
    n: usize,
) -> Result<(), DropReason> {
    let end = ip.end();
    let new_ip_len = ip.ip_len + n;
    if new_ip_len > usize::from(u16::MAX) + if ip.v6 { 40 } else { 0 } {
        return Err(DropReason::NoRoom);
    }
    frame.set_len(end + n).map_err(|_| DropReason::NoRoom)?;
    let d = frame.data_mut();
    let from = ip.l4 + at;
    d.copy_within(from..end, from + n);
    let seg_old = (end - ip.l4) as u16;
    let seg_new = seg_old + n as u16;
    if ip.v6 {
        let pl = (new_ip_len - 40) as u16;
        d[ip.l3 + 4..ip.l3 + 6].copy_from_slice(&pl.to_be_bytes());
    } else {
        let h = ip.l3;
        let old = u16::from_be_bytes([d[h + 2], d[h + 3]]);
        let new = new_ip_len as u16;
        d[h + 2..h + 4].copy_from_slice(&new.to_be_bytes());
        let c = u16::from_be_bytes([d[h + 10], d[h + 11]]);
        let c = wire::checksum::apply_delta(c, delta16(old, new));
        d[h + 10..h + 12].copy_from_slice(&c.to_be_bytes());
    }
    // The pseudo-header's upper-layer length (16 bits for IPv4; the low word of IPv6's 32,
    // whose high word stays 0 below 64 KiB).
    l4.csum.patch_delta(d, delta16(seg_old, seg_new));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unshift_keeps_earlier_numbers_and_clamps_inside_the_insert() {
        assert_eq!(unshift(100, 100, 28), 100);
        assert_eq!(unshift(99, 100, 28), 99);
        assert_eq!(unshift(101, 100, 28), 100, "inside the header");
        assert_eq!(
            unshift(128, 100, 28),
            100,
            "the header acknowledged, nothing more"
        );
        assert_eq!(unshift(129, 100, 28), 101);
        assert_eq!(
            unshift(20, u32::MAX - 10, 28),
            u32::MAX - 7,
            "across the wrap"
        );
        assert!(after(1, u32::MAX) && !after(u32::MAX, 1));
    }

    #[test]
    fn bytes_delta_matches_a_recomputed_sum_at_either_parity() {
        let seg: Vec<u8> = (0u8..40).map(|i| i.wrapping_mul(37)).collect();
        for at in [3usize, 4, 7, 10] {
            let mut new = seg.clone();
            new[at..at + 4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
            let c0 = wire::checksum::checksum(&seg);
            let c1 = wire::checksum::checksum(&new);
            let got = wire::checksum::apply_delta(
                c0,
                bytes_delta(&seg[at..at + 4], &new[at..at + 4], at),
            );
            assert_eq!(got, c1, "at {at}");
        }
    }
}
