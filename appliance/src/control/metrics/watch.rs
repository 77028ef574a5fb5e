//! The datapath watch's metrics (`datapath/watch.rs`): what it did and saw, by event, and
//! whether each datapath interface forwards now; and what the kernel lost at each
//! interface's AF_XDP sockets.

use super::builder::{Builder, gset, labels, set};
use crate::control::model::{Shared, View};

/// Every state an interface can be in, and every action the watch takes, so each series
/// is there (at zero) before its first event.
const EVENTS: [&str; 9] = [
    "reattached",
    "rebound",
    "reclaimed",
    "forwarding",
    "link_down",
    "detached",
    "foreign",
    "unbound",
    "missing",
];

/// Registers the watch's families.
pub(super) fn families(b: &mut Builder, s: &Shared, view: &View) {
    let events = b.counter(
        "sluice_datapath_watch_events",
        "What the datapath watch did (reattached, rebound, reclaimed) or saw an interface \
         become (forwarding, link_down, detached, foreign, unbound, missing)",
    );
    let seen = s
        .counters
        .datapath_watch
        .lock()
        .map(|m| m.clone())
        .unwrap_or_default();
    for e in EVENTS {
        set(
            &events,
            labels(&[("event", e)]),
            seen.get(e).copied().unwrap_or(0),
        );
    }
    let forwarding = b.gauge(
        "sluice_datapath_interface_forwarding",
        "1 while the datapath forwards on the interface (its program attached, its sockets \
         bound, its link up), else 0; no VIP is announced while one is 0",
    );
    let socket = b.counter(
        "sluice_afxdp_socket_drops",
        "Frames the kernel lost at an interface's AF_XDP sockets before the engine saw them, \
         by reason (XDP_STATISTICS, summed over the interface's sockets; restarts at zero \
         when they are bound anew): rx_ring_full (the worker fell behind), \
         rx_fill_ring_empty (no free frame to receive into), rx_dropped (any other), \
         rx_invalid and tx_invalid (descriptors the kernel refused)",
    );
    if let Some(d) = &view.datapath {
        for i in &d.interfaces {
            gset(
                &forwarding,
                labels(&[("interface", &i.name)]),
                i64::from(i.state.forwarding()),
            );
            let k = &i.kernel;
            for (reason, n) in [
                ("rx_ring_full", k.rx_ring_full),
                ("rx_fill_ring_empty", k.rx_fill_ring_empty),
                ("rx_dropped", k.rx_dropped),
                ("rx_invalid", k.rx_invalid),
                ("tx_invalid", k.tx_invalid),
            ] {
                set(
                    &socket,
                    labels(&[("interface", &i.name), ("reason", reason)]),
                    n,
                );
            }
        }
    }
}
