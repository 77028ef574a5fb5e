//! The metrics of the LVS features: the persistence table (fill and what it answered),
//! connection limits (new flows moved off a full backend, refused or let through by the
//! `overflow` policy) and one-packet UDP scheduling. An operator watching a limited pool
//! sees `skips` rise before `overflow`; persistence misses after a backend goes down. And
//! the XDP program's own answers and drops beside them, and `sluice capture`'s counts.

use std::sync::atomic::Ordering;

use super::builder::{Builder, labels, set};
use crate::control::model::Shared;

/// Registers the LVS families from the status document's counters.
pub(super) fn families(b: &mut Builder, s: &Shared) {
    let l = s.status_lvs();
    b.gauge1(
        "sluice_persistence_entries",
        "Clients the persistence table remembers now",
        l.persistence_entries as i64,
    );
    let answers = b.counter(
        "sluice_persistence_lookups",
        "New connections of persistent VIPs, by result (hit: the remembered backend)",
    );
    set(&answers, labels(&[("result", "hit")]), l.persistence_hits);
    set(
        &answers,
        labels(&[("result", "miss")]),
        l.persistence_misses,
    );
    b.counter1(
        "sluice_persistence_evictions",
        "Live persistence entries given up for another client (a full set)",
        l.persistence_evictions,
    );
    b.counter1(
        "sluice_connection_limit_skips",
        "New flows whose scheduled backend was at max_connections and went to another",
        l.limit_skips,
    );
    let overflow = b.counter(
        "sluice_overflow",
        "New flows while every backend was at max_connections, by what overflow did",
    );
    set(
        &overflow,
        labels(&[("action", "refused")]),
        l.overflow_refused,
    );
    set(&overflow, labels(&[("action", "reset")]), l.overflow_resets);
    set(
        &overflow,
        labels(&[("action", "ignored")]),
        l.overflow_ignored,
    );
    b.counter1(
        "sluice_one_packet_datagrams",
        "Datagrams of udp_one_packet VIPs, each scheduled on its own without a flow entry",
        l.one_packet,
    );
    outbound(b, s);
}

/// Answers to the backends' outbound connections: forwarded to their port's owner by the
/// engine or by the XDP program itself, and those to a port nobody owns.
fn outbound(b: &mut Builder, s: &Shared) {
    let st = s.aggregate().stats;
    let xdp = s
        .view
        .load()
        .datapath
        .as_ref()
        .map_or(0, |d| d.steer.outbound);
    let answers = b.counter(
        "sluice_outbound_answers",
        "Answers to backends' outbound connections forwarded to the port's owner, by where",
    );
    set(&answers, labels(&[("by", "engine")]), st.outbound_answers);
    set(&answers, labels(&[("by", "xdp")]), xdp);
    let deep = s.view.load().datapath.as_ref().map_or(0, |d| d.steer.deep);
    b.counter1(
        "sluice_xdp_too_many_headers",
        "IPv6 frames to a VIP with more extension headers than the parsers walk (8), dropped by the XDP program",
        deep,
    );
    capture(b, s);
    b.counter1(
        "sluice_outbound_unowned",
        "Answers to an outbound port no backend owns (dropped as no_backend)",
        st.outbound_unowned,
    );
}
/// `sluice capture`: captures run, their frames, and what they lost.
fn capture(b: &mut Builder, s: &Shared) {
    let ring = s
        .view
        .load()
        .datapath
        .as_ref()
        .map_or(0, |d| d.steer.capture_lost);
    b.counter1(
        "sluice_captures",
        "Captures (sluice capture) run to their end",
        s.capture.runs.load(Ordering::Relaxed),
    );
    b.counter1(
        "sluice_capture_frames",
        "Frames captures delivered",
        s.capture.frames.load(Ordering::Relaxed),
    );
    let lost = b.counter(
        "sluice_capture_lost",
        "Frames a capture took but did not deliver, by reason: ring (the XDP program's capture ring was full), count (beyond the capture's count)",
    );
    set(&lost, labels(&[("reason", "ring")]), ring);
    set(
        &lost,
        labels(&[("reason", "count")]),
        s.capture.over_count.load(Ordering::Relaxed),
    );
}
