//! `outbound` and `outbound_drain` on a DR or tunnel `[[vip]]` (issue 23): the source ports
//! its backends' own connections to the outside use on the VIP address. The range must leave
//! the VIP's own port alone and no other VIP may serve a port of it on that address and
//! protocol: an answer to one of its ports goes to the backend that owns the port.

use std::time::Duration;

use crate::PortRange;
use crate::error::ConfigErrors;
use crate::model::{Mode, OutboundPorts, Vip};
use crate::reader::Table;

/// `outbound_drain` when it is not set: long enough for the usual outbound call (a package
/// download, an API request) to finish on the ports that move.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(120);
/// The longest `outbound_drain`.
const MAX_DRAIN: Duration = Duration::from_secs(3600);
/// The first port a range may start at: below are the well-known and registered services a
/// backend may listen on itself.
const FIRST_PORT: u16 = 1024;

/// Reads `outbound` and `outbound_drain`.
pub(super) fn outbound(
    t: &mut Table<'_>,
    port: Option<u16>,
    mode: Option<Mode>,
    errs: &mut ConfigErrors,
) -> Option<OutboundPorts> {
    let drain = t.duration("outbound_drain", Duration::ZERO..=MAX_DRAIN, errs);
    let Some(text) = t.string("outbound", errs) else {
        if drain.is_some() {
            errs.push(
                t.key("outbound_drain"),
                "set without outbound: there is no range to drain",
            );
        }
        return None;
    };
    let key = t.key("outbound");
    let Some(range) = parse(&text) else {
        errs.push(
            key,
            format!("{text:?} is not a port range \"FIRST-LAST\" (for example \"40000-49999\")"),
        );
        return None;
    };
    if range.first < FIRST_PORT {
        errs.push(
            key,
            format!("{range} starts below {FIRST_PORT}: those ports are the services' own"),
        );
        return None;
    }
    if let Some(m) = mode
        && !matches!(m, Mode::Dr | Mode::Tunnel(_))
    {
        errs.push(
            key,
            format!(
                "needs mode \"dr\" or \"tunnel\": with mode {:?} the backends do not hold the VIP \
                 address, so they cannot open connections from it",
                m.name()
            ),
        );
        return None;
    }
    match port {
        Some(0) => {
            errs.push(
                key,
                "cannot work with port = 0: the VIP serves every port, so none is left for \
                 outbound connections",
            );
            return None;
        }
        Some(p) if range.contains(p) => {
            errs.push(key, format!("{range} holds the VIP's own port {p}"));
            return None;
        }
        _ => {}
    }
    Some(OutboundPorts {
        range,
        drain: drain.unwrap_or(DEFAULT_DRAIN),
    })
}

/// "FIRST-LAST", or one port.
fn parse(text: &str) -> Option<PortRange> {
    let (a, b) = text.split_once('-').unwrap_or((text, text));
    PortRange::new(a.trim().parse().ok()?, b.trim().parse().ok()?)
}

/// Why `vip` cannot sit beside `o`, a VIP before it on its tenant, address and protocol: a
/// port one serves is in the other's outbound range, or their outbound ranges overlap
/// (`placed.rs` finds the earliest such `o`).
pub(super) fn clash_with(vip: &Vip, o: &Vip) -> Option<String> {
    let serves = |v: &Vip, r: &PortRange| v.port == 0 || r.contains(v.port);
    let why = match (vip.outbound, o.outbound) {
        (Some(a), Some(b)) if a.range.intersect(&b.range).is_some() => {
            format!(
                "outbound {} overlaps vip {:?}'s outbound {}",
                a.range, o.name, b.range
            )
        }
        (Some(a), _) if serves(o, &a.range) => {
            format!(
                "outbound {} holds port {} of vip {:?}",
                a.range, o.port, o.name
            )
        }
        (_, Some(b)) if serves(vip, &b.range) => {
            format!(
                "port {} is in vip {:?}'s outbound {}",
                vip.port, o.name, b.range
            )
        }
        _ => return None,
    };
    Some(format!("{} {}: {why}", vip.protocol.name(), vip.address))
}
