//! The metrics of packets that do not fit: the fragment table that carries NAT and FullNAT
//! datagrams in pieces (what it remembered, rewrote, completed and evicted; its drops are
//! `sluice_dropped_packets_total` reasons `fragment_*`), and the tunnel MTU work (MSS
//! clamped, ICMP too-big sent).

use super::builder::{Builder, labels, set};
use crate::control::counters::Aggregate;

/// Registers the fragment and MTU families with `agg`'s values.
pub(super) fn families(b: &mut Builder, agg: &Aggregate) {
    let f = &agg.stats.frag;
    let table = b.counter(
        "sluice_fragment_table",
        "NAT and FullNAT fragments through the fragment table, by event (tracked: first \
         fragments remembered; rewritten: later fragments forwarded; completed: datagrams \
         whole; evicted: live entries pushed out of a full table)",
    );
    for (event, v) in [
        ("tracked", f.tracked),
        ("rewritten", f.rewritten),
        ("completed", f.completed),
        ("evicted", f.evicted),
    ] {
        set(&table, labels(&[("event", event)]), v);
    }
    b.counter1(
        "sluice_icmp_too_big_sent",
        "ICMP fragmentation-needed and packet-too-big messages sent for tunnel frames over \
         the egress MTU",
        agg.stats.too_big_sent,
    );
    b.counter1(
        "sluice_mss_clamped",
        "TCP SYN and SYN-ACK segments whose MSS was lowered to fit a tunnel",
        agg.stats.mss_clamped,
    );
}
