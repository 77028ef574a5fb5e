//! The metrics of what protects the engine from hostile load: the connection tables' fill
//! per state (embryonic, established, closing) and what admitted, promoted, evicted and
//! refused entries, so an operator sees a flood fill the embryonic classes while the
//! established ones stay put; and the ICMP messages the rate limits held back.

use super::builder::{Builder, labels, set};
use crate::control::counters::Aggregate;
use crate::lb::FlowState;

/// Registers the connection-table families with `agg`'s values.
pub(super) fn families(b: &mut Builder, agg: &Aggregate) {
    let fill = b.gauge(
        "sluice_conntrack_state_entries",
        "Connection-table entries by state (syn and udp_new are embryonic; udp_oneway is reclaimed after them), over all workers",
    );
    for s in FlowState::ALL {
        super::builder::gset(
            &fill,
            labels(&[("state", s.name())]),
            agg.conntrack_fill[s.class()] as i64,
        );
    }
    let c = &agg.conntrack;
    b.counter1(
        "sluice_conntrack_inserted",
        "Connection-table entries created (embryonic, but for re-chosen flows)",
        c.inserted,
    );
    b.counter1(
        "sluice_conntrack_promoted",
        "Embryonic connection-table entries promoted to established",
        c.promoted,
    );
    b.counter1(
        "sluice_conntrack_expired",
        "Connection-table entries removed at their idle timeout",
        c.expired,
    );
    let evicted = b.counter(
        "sluice_conntrack_evicted",
        "Live connection-table entries evicted for new flows, by state",
    );
    set(
        &evicted,
        labels(&[("state", "embryonic")]),
        c.evicted_embryonic,
    );
    set(&evicted, labels(&[("state", "closing")]), c.evicted_closing);
    set(
        &evicted,
        labels(&[("state", "udp_oneway")]),
        c.evicted_one_way,
    );
    let ignored = b.counter(
        "sluice_teardown_out_of_window",
        "FINs and RSTs off their sender's sequence space (RFC 5961): forwarded, they closed nothing, by flag",
    );
    set(&ignored, labels(&[("flag", "rst")]), c.rst_out_of_window);
    set(&ignored, labels(&[("flag", "fin")]), c.fin_out_of_window);
    let refused = b.counter(
        "sluice_conntrack_budget_refused",
        "New entries refused by a budget: embryonic ones of a client address over [appliance] embryonic_per_source, or a tenant zone's over its share, by budget",
    );
    set(&refused, labels(&[("budget", "source")]), c.source_refused);
    set(&refused, labels(&[("budget", "zone")]), c.zone_refused);
    b.counter1(
        "sluice_snat_ports_reclaimed",
        "FullNAT ports taken from an unfinished handshake for a new flow, every candidate port being held",
        c.snat_reclaimed,
    );
    syn_proxy(b, agg);
    answers(b, agg);
}

/// The SYN proxy's work (`[[vip]] syn_proxy`): SYNs answered with a cookie, ACKs whose
/// cookie opened a flow or did not check, and the backends' side of the handshakes.
fn syn_proxy(b: &mut Builder, agg: &Aggregate) {
    let st = &agg.stats;
    let handshakes = b.counter(
        "sluice_syn_proxy",
        "The SYN proxy's handshakes by step: SYNs answered with a cookie (answered), ACKs whose cookie checked and opened a flow to a backend (opened), ACKs without a flow whose acknowledgement was no cookie of ours (bad_cookie), backends' SYN-ACKs turned into the handshake's last ACK (established), client data before the backend answered, dropped (early), SYNs sent to the backend again on the client's retransmission (resent)",
    );
    for (step, v) in [
        ("answered", st.syn_proxy_answered),
        ("opened", st.syn_proxy_opened),
        ("bad_cookie", st.syn_proxy_bad_cookies),
        ("established", st.syn_proxy_established),
        ("early", st.syn_proxy_early),
        ("resent", st.syn_proxy_resent),
    ] {
        set(&handshakes, labels(&[("step", step)]), v);
    }
}

/// The packets answered without an entry, the ICMP the rate limits held back, and the
/// client-address carry.
fn answers(b: &mut Builder, agg: &Aggregate) {
    let stateless = b.counter(
        "sluice_stateless_answers",
        "Packets answered from the Maglev ring without a connection entry, by cause",
    );
    set(
        &stateless,
        labels(&[("cause", "no_entry")]),
        agg.stats.stateless_no_entry,
    );
    set(
        &stateless,
        labels(&[("cause", "table_full")]),
        agg.stats.conntrack_fallback,
    );
    b.counter1(
        "sluice_icmp_rate_limited",
        "ICMP echo replies and errors not sent because of [appliance.icmp_limits]",
        agg.stats.icmp_rate_limited,
    );
    let added = b.counter(
        "sluice_client_address_added",
        "FullNAT segments that carried the client's address to the backend (client_address), by kind",
    );
    set(
        &added,
        labels(&[("kind", "proxy-v2")]),
        agg.stats.proxy_headers,
    );
    set(&added, labels(&[("kind", "toa")]), agg.stats.toa_options);
    b.counter1(
        "sluice_client_address_toa_no_room",
        "Segments that should have carried the TOA option but had no room in their TCP header",
        agg.stats.toa_no_room,
    );
}
