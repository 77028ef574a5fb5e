//! The QUIC-LB metrics of the VIPs with `quic_lb`: per VIP, the datagrams the engine routed
//! by connection ID and those that fell back to the VIP's normal choice, with the two
//! causes of fallback worth an alarm (a config ID the VIP does not know: servers ahead of
//! the appliance's configuration; a DCID that could not be read).

use super::builder::{Builder, labels, set};
use crate::config::Config;
use crate::control::counters::Aggregate;
use crate::lb::quic::Counter;

/// Registers `sluice_vip_quic_lb_packets` with one series per outcome of each VIP with
/// `quic_lb` (none without a config).
pub(super) fn families(b: &mut Builder, cfg: Option<&Config>, agg: &Aggregate) {
    let f = b.counter(
        "sluice_vip_quic_lb_packets",
        "Datagrams of a quic_lb VIP decided by the engine, by outcome (routed: by connection \
         ID to a live backend; fallback: to the VIP's normal choice, of which unknown_config \
         named another config ID and decode_failure had no readable DCID)",
    );
    for v in cfg.map(|c| &c.vips[..]).unwrap_or_default() {
        if v.quic_lb.is_none() {
            continue;
        }
        let t = agg.vips.get(&v.name).copied().unwrap_or_default();
        for c in Counter::ALL {
            set(
                &f,
                labels(&[("vip", &v.name), ("outcome", c.name())]),
                t.quic[c as usize],
            );
        }
    }
}
