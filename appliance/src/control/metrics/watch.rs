//! The datapath watch's metrics (`datapath/watch.rs`): what it did and saw, by event, and
//! whether each datapath interface forwards now.

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
    if let Some(d) = &view.datapath {
        for i in &d.interfaces {
            gset(
                &forwarding,
                labels(&[("interface", &i.name)]),
                i64::from(i.state.forwarding()),
            );
        }
    }
}
