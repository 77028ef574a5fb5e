//! Connection sync's metrics (`[sync]` only): records and ends sent and received, the
//! standby table, what was refused and why (a peer with another key, garbage, replays, an
//! address that is no peer), what was left out (a full queue, the rate), the lag behind the
//! newest peer datagram and whether the catch-up is still under way.

use std::sync::atomic::Ordering;

use super::builder::{Builder, labels, set};
use crate::sync::SyncHandle;

/// Registers the sync families with `h`'s values.
pub(super) fn families(b: &mut Builder, h: &SyncHandle) {
    let s = &h.stats;
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let records = b.counter(
        "sluice_sync_records",
        "Flow records sent to the peers (each once, whatever their number) and received from them, by kind (established, ended)",
    );
    for (dir, kind, v) in [
        ("sent", "established", n(&s.records_sent)),
        ("sent", "ended", n(&s.ended_sent)),
        ("received", "established", n(&s.records_received)),
        ("received", "ended", n(&s.ended_received)),
    ] {
        set(&records, labels(&[("direction", dir), ("kind", kind)]), v);
    }
    b.counter1(
        "sluice_sync_datagrams_sent",
        "Sync datagrams sent (one per peer)",
        n(&s.datagrams_sent),
    );
    b.counter1(
        "sluice_sync_sent_bytes",
        "Bytes of sync datagrams sent",
        n(&s.bytes_sent),
    );
    b.counter1(
        "sluice_sync_datagrams_received",
        "Sync datagrams received and accepted",
        n(&s.datagrams_received),
    );
    let refused = b.counter(
        "sluice_sync_refused",
        "Sync datagrams refused, by reason: auth (another [sync] key, forged), garbage (cut short, unreadable), replay (seen before, or outside the clock window), unknown_peer (not in [sync] peers)",
    );
    for (why, v) in [
        ("auth", n(&s.auth_failures)),
        ("garbage", n(&s.garbage)),
        ("replay", n(&s.replays)),
        ("unknown_peer", n(&s.unknown_peer)),
    ] {
        set(&refused, labels(&[("reason", why)]), v);
    }
    let left_out = b.counter(
        "sluice_sync_left_out",
        "Flows not synced, by reason: queue (the workers' queue was full), rate ([sync] rate spent), send (the kernel refused the datagram), standby_full (the standby table held [sync] standby entries)",
    );
    for (why, v) in [
        ("queue", n(&s.outbox_full)),
        ("rate", n(&s.rate_limited)),
        ("send", n(&s.send_errors)),
        ("standby_full", n(&s.standby_full)),
    ] {
        set(&left_out, labels(&[("reason", why)]), v);
    }
    standby(b, h);
}

/// The standby table's families.
fn standby(b: &mut Builder, h: &SyncHandle) {
    let s = &h.stats;
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    b.gauge1(
        "sluice_sync_standby_entries",
        "Peers' flows held as standby entries",
        h.standby.len() as i64,
    );
    let sb = &h.standby.stats;
    let standby = b.counter(
        "sluice_sync_standby",
        "Standby entries by outcome: taken (a worker took the flow over), refused (found but not taken: no VIP, port taken, table full), ended (by the owner), expired",
    );
    for (what, v) in [
        ("taken", n(&sb.taken)),
        ("refused", n(&sb.refused_import)),
        ("ended", n(&sb.ended)),
        ("expired", n(&sb.expired)),
    ] {
        set(&standby, labels(&[("outcome", what)]), v);
    }
    b.gauge1(
        "sluice_sync_lag_ms",
        "Milliseconds between a peer sending the newest accepted sync datagram and its arrival",
        n(&s.lag_ms) as i64,
    );
    b.gauge1(
        "sluice_sync_catching_up",
        "1 while this appliance waits for its peers' flows (it announces no VIP meanwhile)",
        i64::from(s.catching_up.load(Ordering::Relaxed)),
    );
    b.counter1(
        "sluice_sync_catch_ups_served",
        "Bulk transfers of this appliance's flows to peers that (re)joined",
        n(&s.catch_ups_served),
    );
}
