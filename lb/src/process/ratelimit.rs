//! Rate limits on the ICMP and ICMPv6 messages the engine originates: echo replies for VIP
//! addresses and the errors it generates (time exceeded). Without them a VIP is a
//! reflector: spoofed echo requests or TTL-1 packets make it send one message per packet to
//! whatever address they claim, and RFC 4443 section 2.4(f) requires ICMPv6 errors to be
//! limited.
//!
//! Each message takes a token from its VIP address's bucket and from its family's bucket
//! (so one VIP cannot use the whole family's budget, and many VIPs together cannot exceed
//! it). The buckets are GCRA (virtual scheduling), the token bucket written as one
//! timestamp: integer arithmetic on the caller's `now`, no clock read. The configured
//! rates are the appliance's; each worker limits itself to its share.

use config::IcmpLimits;

/// One bucket's rate: a message every `interval_ns`, `tolerance_ns` of credit for bursts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rate {
    interval_ns: u64,
    tolerance_ns: u64,
}

impl Rate {
    /// `per_sec` messages a second over `workers` workers with bursts of `burst`; `None`
    /// (no limit) for a rate of 0.
    fn new(per_sec: u32, burst: u32, workers: u16) -> Option<Rate> {
        if per_sec == 0 {
            return None;
        }
        let w = u64::from(workers.max(1));
        let interval_ns = (1_000_000_000 * w / u64::from(per_sec)).max(1);
        let burst = (u64::from(burst) / w).max(1);
        Some(Rate {
            interval_ns,
            tolerance_ns: interval_ns * (burst - 1),
        })
    }

    /// The bucket's next theoretical arrival time if a message conforms at `now`.
    #[inline]
    fn admit(self, tat: u64, now: u64) -> Option<u64> {
        let tat = tat.max(now);
        (tat - now <= self.tolerance_ns).then_some(tat + self.interval_ns)
    }
}

/// A worker's ICMP buckets, sized for one table version.
#[derive(Debug, Clone, Default)]
pub struct IcmpLimiter {
    per_vip: Option<Rate>,
    per_family: Option<Rate>,
    /// Theoretical arrival time per VIP slot.
    vips: Vec<u64>,
    /// Per family (IPv4, IPv6).
    families: [u64; 2],
}

impl IcmpLimiter {
    /// Buckets for `vips` VIP slots under `limits`, for one of `workers` workers.
    pub fn new(limits: IcmpLimits, vips: usize, workers: u16) -> IcmpLimiter {
        IcmpLimiter {
            per_vip: Rate::new(limits.per_vip, limits.burst, workers),
            per_family: Rate::new(limits.per_family, limits.burst, workers),
            vips: vec![0; vips],
            families: [0; 2],
        }
    }

    /// Whether a message from VIP slot `vip` of family `v6` may be sent at `now`; takes
    /// its tokens when it may.
    #[inline]
    pub fn allow(&mut self, vip: u32, v6: bool, now: u64) -> bool {
        let f = usize::from(v6);
        let fam = match self.per_family {
            Some(r) => match r.admit(self.families[f], now) {
                Some(t) => Some(t),
                None => return false,
            },
            None => None,
        };
        if let (Some(r), Some(tat)) = (self.per_vip, self.vips.get_mut(vip as usize)) {
            match r.admit(*tat, now) {
                Some(t) => *tat = t,
                None => return false,
            }
        }
        if let Some(t) = fam {
            self.families[f] = t;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn limits(per_vip: u32, per_family: u32, burst: u32) -> IcmpLimits {
        IcmpLimits {
            per_vip,
            per_family,
            burst,
        }
    }

    fn sent(l: &mut IcmpLimiter, vip: u32, v6: bool, from: u64, every: u64, n: u64) -> u64 {
        (0..n)
            .filter(|i| l.allow(vip, v6, from + i * every))
            .count() as u64
    }

    #[test]
    fn a_burst_then_the_rate() {
        let mut l = IcmpLimiter::new(limits(100, 0, 50), 1, 1);
        // 10,000 requests in one instant: the burst passes, nothing more.
        assert_eq!(sent(&mut l, 0, false, SEC, 0, 10_000), 50);
        // A flood of one request a microsecond for 10 s: 100 a second get through.
        let n = sent(&mut l, 0, false, 2 * SEC, 1_000, 10_000_000);
        assert!((1000..=1051).contains(&n), "{n} in 10 s at 100/s");
    }

    #[test]
    fn the_family_caps_all_vips_and_one_vip_cannot_take_it_all() {
        let mut l = IcmpLimiter::new(limits(100, 150, 1), 5, 1);
        // One VIP alone: its own 100/s.
        let one = sent(&mut l, 0, true, SEC, 100_000, 10_000);
        assert!((99..=101).contains(&one), "{one}");
        // Four VIPs together for a second: the family's 150/s, not 400.
        let mut total = 0;
        for i in 0..40_000u64 {
            total += u64::from(l.allow((i % 4) as u32, true, 3 * SEC + i * 25_000));
        }
        assert!((149..=151).contains(&total), "{total}");
        // IPv4 has its own family bucket.
        assert!(l.allow(4, false, 3 * SEC + SEC / 2));
    }

    #[test]
    fn workers_share_the_rate_and_zero_is_no_limit() {
        let mut l = IcmpLimiter::new(limits(100, 1000, 50), 1, 4);
        // A quarter of 100/s with a quarter of the burst.
        assert_eq!(sent(&mut l, 0, false, SEC, 0, 1000), 12);
        let n = sent(&mut l, 0, false, 2 * SEC, 1_000_000, 4_000);
        assert!((100..=113).contains(&n), "{n} in 4 s at 25/s");
        let mut off = IcmpLimiter::new(limits(0, 0, 1), 1, 1);
        assert_eq!(sent(&mut off, 0, false, 0, 0, 10_000), 10_000);
    }
}
