//! Rates from the API's running totals: the console keeps the previous sample of each
//! counter and divides the difference by the time between the two polls. A counter that went
//! backwards (the appliance restarted) gives no rate for that round rather than a wrong one.

use std::time::Instant;

use api::{Backend, Totals, Vip};

/// Running totals read at one poll, in the order each rate type knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters(Vec<u64>);

impl Counters {
    pub fn totals(t: &Totals) -> Counters {
        Counters(vec![
            t.rx_packets,
            t.tx_packets,
            t.passed_packets,
            t.dropped_packets,
            t.vip_bytes,
        ])
    }

    pub fn vip(v: &Vip) -> Counters {
        Counters(vec![v.packets, v.bytes, v.new_flows])
    }

    pub fn backend(b: &Backend) -> Counters {
        Counters(vec![b.packets, b.bytes])
    }
}

/// Per-second rate of a running total between two samples; `None` when the total went
/// backwards or no time passed.
pub fn rate(prev: u64, cur: u64, seconds: f64) -> Option<f64> {
    if cur < prev || seconds <= 0.0 {
        return None;
    }
    Some((cur - prev) as f64 / seconds)
}

/// Rates of every counter between `prev` and `cur`, or all `None` without a previous sample.
fn rates(prev: Option<&(Instant, Counters)>, cur: (Instant, &Counters)) -> Vec<Option<f64>> {
    let n = cur.1.0.len();
    match prev {
        Some((t0, c0)) if c0.0.len() == n => {
            let secs = cur.0.saturating_duration_since(*t0).as_secs_f64();
            c0.0.iter()
                .zip(&cur.1.0)
                .map(|(a, b)| rate(*a, *b, secs))
                .collect()
        }
        _ => vec![None; n],
    }
}

/// The appliance's traffic per second.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TotalRates {
    pub rx_pps: Option<f64>,
    pub tx_pps: Option<f64>,
    pub passed_pps: Option<f64>,
    pub dropped_pps: Option<f64>,
    /// VIP traffic, bits per second, both directions.
    pub vip_bps: Option<f64>,
}

impl TotalRates {
    pub fn from_samples(
        prev: Option<&(Instant, Counters)>,
        cur: (Instant, &Counters),
    ) -> TotalRates {
        let r = rates(prev, cur);
        TotalRates {
            rx_pps: r[0],
            tx_pps: r[1],
            passed_pps: r[2],
            dropped_pps: r[3],
            vip_bps: r[4].map(|b| b * 8.0),
        }
    }
}

/// One VIP's traffic per second.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct VipRates {
    pub pps: Option<f64>,
    /// Bits per second.
    pub bps: Option<f64>,
    pub new_flows: Option<f64>,
}

impl VipRates {
    pub fn from_samples(prev: Option<&(Instant, Counters)>, cur: (Instant, &Counters)) -> VipRates {
        let r = rates(prev, cur);
        VipRates {
            pps: r[0],
            bps: r[1].map(|b| b * 8.0),
            new_flows: r[2],
        }
    }
}

/// One backend's traffic per second.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BackendRates {
    pub pps: Option<f64>,
    /// Bits per second.
    pub bps: Option<f64>,
}

impl BackendRates {
    pub fn from_samples(
        prev: Option<&(Instant, Counters)>,
        cur: (Instant, &Counters),
    ) -> BackendRates {
        let r = rates(prev, cur);
        BackendRates {
            pps: r[0],
            bps: r[1].map(|b| b * 8.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rate_is_difference_over_elapsed_time() {
        assert_eq!(rate(100, 400, 2.0), Some(150.0));
        assert_eq!(rate(400, 100, 2.0), None, "a restarted counter has no rate");
        assert_eq!(rate(1, 2, 0.0), None);
    }

    #[test]
    fn vip_rates_from_two_samples() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(500);
        let a = Counters(vec![1000, 100_000, 10]);
        let b = Counters(vec![1500, 150_000, 60]);
        let r = VipRates::from_samples(Some(&(t0, a)), (t1, &b));
        assert_eq!(r.pps, Some(1000.0));
        assert_eq!(r.bps, Some(800_000.0));
        assert_eq!(r.new_flows, Some(100.0));
        assert_eq!(VipRates::from_samples(None, (t1, &b)), VipRates::default());
    }
}
