//! SYN cookies: the appliance's initial sequence number toward a client whose SYN it
//! answered, from which the client's ACK alone proves the client saw the answer and tells
//! what its SYN asked for, with no state kept in between.
//!
//! The layout is Linux's (net/ipv4/syncookies.c), with SipHash-2-4 keyed by the
//! appliance's 128-bit secret as the hash and a wider data field:
//!
//! ```text
//! cookie = H(0, tuple) + client ISN + (period << 24) + ((H(1, tuple, period, ISN) + data) mod 2^24)
//! ```
//!
//! where `tuple` is the client's and the VIP's address and port, `period` the number of the
//! 64-second period the SYN came in, and `data` 8 bits of the SYN's options ([`Options`]).
//! The check takes the client's ISN (its ACK's sequence number less one) and the cookie
//! (its acknowledgement less one): removing the first hash and the ISN leaves the period in
//! the top 8 bits, which must be this one or the last; removing the second hash of that
//! period must leave data below 2^8. A guess passes one time in 2^23 (two periods of 256,
//! 2^8 data values of 2^24); a cookie is good for 64 to 128 seconds. Unlike Linux's, the
//! second hash covers the ISN too, so a cookie seen for one ISN says nothing of another's. Each period's cookies
//! hash its number under the secret, so a cookie says nothing about the next period's.

use siphasher::sip::SipHasher24;
use std::hash::Hasher;

use crate::hash::FlowKey;

/// A cookie's period, in nanoseconds of the caller's clock.
pub const PERIOD_NS: u64 = 64_000_000_000;

/// The MSS values a cookie can carry (3 bits): a client's MSS is rounded down to one of
/// them (below the first, the first: 536 is every TCP's minimum). IPv4's common values
/// (1460 Ethernet, 1452 PPPoE, 1400 and 1380 tunnels) and IPv6's (1440 Ethernet, 1220 the
/// minimum MTU's).
pub const MSS: [u16; 8] = [536, 1220, 1300, 1380, 1400, 1440, 1452, 1460];

/// The window scale of [`Options`] for a SYN without the option.
pub const NO_WSCALE: u8 = 15;

/// What a cookie carries of the client's SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The index of the client's MSS in [`MSS`].
    pub mss: u8,
    /// The client's window scale (0 to 14), or [`NO_WSCALE`].
    pub wscale: u8,
    /// The client sent SACK-permitted.
    pub sack: bool,
}

impl Options {
    /// The options of a SYN that announced `mss` (if any: 536 otherwise), window scale
    /// `wscale` and, when `sack`, SACK-permitted.
    pub fn of_syn(mss: Option<u16>, wscale: Option<u8>, sack: bool) -> Options {
        let mss = mss.unwrap_or(536);
        let i = MSS.iter().rposition(|&m| m <= mss).unwrap_or(0);
        Options {
            mss: i as u8,
            // RFC 7323 2.3: a larger shift is taken as 14.
            wscale: wscale.map_or(NO_WSCALE, |w| w.min(14)),
            sack,
        }
    }

    /// The MSS the cookie carries.
    pub fn mss_value(self) -> u16 {
        MSS[usize::from(self.mss & 7)]
    }

    /// The 8 bits: MSS index, window scale, SACK-permitted.
    pub fn byte(self) -> u8 {
        (self.mss & 7) << 5 | (self.wscale & 0x0f) << 1 | u8::from(self.sack)
    }

    /// The inverse of [`Options::byte`].
    pub fn of_byte(b: u8) -> Options {
        Options {
            mss: b >> 5,
            wscale: (b >> 1) & 0x0f,
            sack: b & 1 != 0,
        }
    }
}

/// The appliance's secret, shared by its workers (and kept for the next process: the
/// appliance's `control::cookie_secret`). Its `Debug` does not print it.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct CookieKey(pub [u64; 2]);

impl std::fmt::Debug for CookieKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKey(..)")
    }
}

impl CookieKey {
    /// The key from its 16 bytes (two little-endian words).
    pub fn from_bytes(b: [u8; 16]) -> CookieKey {
        let (lo, hi) = b.split_at(8);
        let word = |x: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(x);
            u64::from_le_bytes(w)
        };
        CookieKey([word(lo), word(hi)])
    }

    /// The key's 16 bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.0[0].to_le_bytes());
        b[8..].copy_from_slice(&self.0[1].to_le_bytes());
        b
    }
}

/// The period `now` falls in.
#[inline]
pub fn period(now: u64) -> u32 {
    (now / PERIOD_NS) as u32
}

/// SipHash-2-4 of the tuple (client address and port, VIP address and port, in network
/// order), a domain byte and, for the second hash, the period and the client's ISN.
fn hash(key: &CookieKey, k: &FlowKey, domain: u8, period: Option<(u32, u32)>) -> u32 {
    let mut h = SipHasher24::new_with_keys(key.0[0], key.0[1]);
    let mut m = [0u8; 45];
    m[0] = domain;
    m[1..17].copy_from_slice(&k.src.to_be_bytes());
    m[17..33].copy_from_slice(&k.dst.to_be_bytes());
    m[33..35].copy_from_slice(&k.sport.to_be_bytes());
    m[35..37].copy_from_slice(&k.dport.to_be_bytes());
    let n = match period {
        Some((p, isn)) => {
            m[37..41].copy_from_slice(&p.to_be_bytes());
            m[41..45].copy_from_slice(&isn.to_be_bytes());
            45
        }
        None => 37,
    };
    h.write(&m[..n]);
    h.finish() as u32
}

/// The cookie for a SYN of flow `k` (client → VIP) with initial sequence number `isn`,
/// carrying `o`, at `now`.
pub fn make(key: &CookieKey, k: &FlowKey, isn: u32, o: Options, now: u64) -> u32 {
    let p = period(now);
    let data = u32::from(o.byte());
    hash(key, k, 0, None)
        .wrapping_add(isn)
        .wrapping_add(p << 24)
        .wrapping_add(hash(key, k, 1, Some((p, isn))).wrapping_add(data) & 0x00ff_ffff)
}

/// The options of a cookie an ACK of flow `k` carries (`cookie`: its acknowledgement less
/// one; `isn`: its sequence number less one), if the appliance made it this period or the
/// last; `None` for anything else.
pub fn check(key: &CookieKey, k: &FlowKey, isn: u32, cookie: u32, now: u64) -> Option<Options> {
    let p = period(now);
    let c = cookie.wrapping_sub(hash(key, k, 0, None)).wrapping_sub(isn);
    let age = p.wrapping_sub(c >> 24) & 0xff;
    if age > 1 {
        return None;
    }
    let made = p.wrapping_sub(age);
    let data = c
        .wrapping_sub(made << 24)
        .wrapping_sub(hash(key, k, 1, Some((made, isn))))
        & 0x00ff_ffff;
    (data < 0x100).then(|| Options::of_byte(data as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: CookieKey = CookieKey([0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908]);

    fn flow(sport: u16) -> FlowKey {
        FlowKey {
            src: 0xffff_c633_6407,
            dst: 0xffff_c000_020a,
            sport,
            dport: 80,
            proto: 6,
            v6: false,
            zone: 0,
        }
    }

    #[test]
    fn sip_hash_is_the_reference_one() {
        // SipHash-2-4 of the empty message under key 00..0f (the paper's appendix A key):
        // the reference implementation's first test vector, 0x726fdb47dd0e0e31.
        let h = SipHasher24::new_with_keys(KEY.0[0], KEY.0[1]);
        assert_eq!(h.finish(), 0x726f_db47_dd0e_0e31);
    }

    #[test]
    fn options_round_trip_and_round_the_mss_down() {
        let o = Options::of_syn(Some(1460), Some(7), true);
        assert_eq!((o.mss_value(), o.wscale, o.sack), (1460, 7, true));
        assert_eq!(Options::of_byte(o.byte()), o);
        assert_eq!(Options::of_syn(Some(1459), None, false).mss_value(), 1452);
        assert_eq!(Options::of_syn(Some(9000), Some(20), false).wscale, 14);
        assert_eq!(Options::of_syn(Some(100), None, false).mss_value(), 536);
        assert_eq!(Options::of_syn(None, None, false).wscale, NO_WSCALE);
        for b in 0..=255u8 {
            assert_eq!(Options::of_byte(b).byte(), b);
        }
    }

    #[test]
    fn a_cookie_checks_for_two_periods_and_for_its_flow_only() {
        let o = Options::of_syn(Some(1440), Some(9), true);
        let now = 1_000 * PERIOD_NS + 5;
        let c = make(&KEY, &flow(40000), 77, o, now);
        assert_eq!(check(&KEY, &flow(40000), 77, c, now), Some(o));
        assert_eq!(check(&KEY, &flow(40000), 77, c, now + PERIOD_NS), Some(o));
        assert_eq!(
            check(&KEY, &flow(40000), 77, c, now + 2 * PERIOD_NS),
            None,
            "too old"
        );
        assert_eq!(
            check(&KEY, &flow(40000), 77, c, now - PERIOD_NS),
            None,
            "from the future"
        );
        assert_eq!(check(&KEY, &flow(40001), 77, c, now), None, "another port");
        assert_eq!(check(&KEY, &flow(40000), 78, c, now), None, "another ISN");
        let other = CookieKey([1, 2]);
        assert_eq!(
            check(&other, &flow(40000), 77, c, now),
            None,
            "another secret"
        );
    }

    /// Blind guesses pass about one time in 2^23: none of a million.
    #[test]
    fn guesses_do_not_pass() {
        let now = 77 * PERIOD_NS;
        let mut x = 0x9e37_79b9u32;
        let passed = (0..1_000_000u32)
            .filter(|i| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                check(&KEY, &flow(40000), *i, x, now).is_some()
            })
            .count();
        assert!(passed <= 2, "{passed} guesses passed");
    }
}
