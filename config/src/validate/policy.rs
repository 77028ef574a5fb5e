//! A VIP's health and announcement policy: the checks that decide a backend (one or several,
//! all or any of them, per VIP or per backend), what a failed backend keeps
//! (`inhibit_on_failure`), the quorum of primary backends and what serves without it (sorry
//! backends or withdrawal), and how the VIP is announced (MED, AS-path prepends, local
//! preference, to which peers, as the active or the standby appliance). Also the
//! `[bgp.standby]` and per-peer export attributes these build on.

use std::collections::HashMap;
use std::net::IpAddr;

use super::bgp::communities;
use crate::error::ConfigErrors;
use crate::model::{
    Announce, Backend, Combine, Fallback, PeerExport, QuorumLost, Role, Standby, Vip,
};
use crate::reader::{Table, describe};

/// The most copies of the AS a route may be prepended with (routers cap AS paths; a few
/// copies already lose every tie).
const MAX_PREPEND: i64 = 10;

/// `health_check` (one name or a list of names, each a defined `[[health_check]]`) and
/// `health_combine`.
pub(super) fn health(
    t: &mut Table<'_>,
    checks: &HashMap<String, &'static str>,
    errs: &mut ConfigErrors,
) -> (Vec<String>, Combine) {
    let names = check_names(t, checks, errs).unwrap_or_default();
    let combine = t
        .choice(
            "health_combine",
            &[("all", Combine::All), ("any", Combine::Any)],
            errs,
        )
        .unwrap_or_default();
    (names, combine)
}

/// `health_check` as a name or a list of names; `None` when absent.
pub(super) fn check_names(
    t: &mut Table<'_>,
    checks: &HashMap<String, &'static str>,
    errs: &mut ConfigErrors,
) -> Option<Vec<String>> {
    let v = t.raw("health_check")?;
    let key = t.key("health_check");
    let items: Vec<(String, String)> = match &v.kind {
        config::ValueKind::String(s) => vec![(key.clone(), s.clone())],
        config::ValueKind::Array(_) => t.strings("health_check", errs).unwrap_or_default(),
        _ => {
            errs.push(
                key,
                format!(
                    "expected a check's name or a list of names, found {}",
                    describe(v)
                ),
            );
            return None;
        }
    };
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for (path, name) in items {
        if !checks.contains_key(&name) {
            errs.push(path, format!("{name:?} is not a defined [[health_check]]"));
        } else if out.contains(&name) {
            errs.push(path, format!("{name:?} listed twice"));
        } else {
            out.push(name);
        }
    }
    Some(out)
}

/// A backend's own `health_check`, `inhibit_on_failure` and `role`.
pub(super) struct BackendPolicy {
    pub health_checks: Option<Vec<String>>,
    pub inhibit_on_failure: Option<bool>,
    pub sorry: bool,
}

pub(super) fn backend(
    b: &mut Table<'_>,
    checks: &HashMap<String, &'static str>,
    errs: &mut ConfigErrors,
) -> BackendPolicy {
    BackendPolicy {
        health_checks: check_names(b, checks, errs),
        inhibit_on_failure: b.bool("inhibit_on_failure", errs),
        sorry: b
            .choice("role", &[("primary", false), ("sorry", true)], errs)
            .unwrap_or(false),
    }
}

/// A VIP's `inhibit_on_failure`, its fallback and its announcement policy.
pub(super) fn vip(
    t: &mut Table<'_>,
    backends: &[Backend],
    errs: &mut ConfigErrors,
) -> (bool, Fallback, Announce) {
    let inhibit = t.bool("inhibit_on_failure", errs).unwrap_or(false);
    (inhibit, fallback(t, backends, errs), announce(t, errs))
}

/// `quorum`, `quorum_hysteresis` and `on_quorum_lost`, checked against the backends: a
/// quorum the primaries can never reach, sorry backends that would never serve, or a VIP of
/// sorry backends alone are errors.
fn fallback(t: &mut Table<'_>, backends: &[Backend], errs: &mut ConfigErrors) -> Fallback {
    let has_sorry = backends.iter().any(|b| b.sorry);
    let quorum = t.int("quorum", 1..=i64::from(u32::MAX), errs).unwrap_or(1) as u32;
    let hysteresis = t
        .int("quorum_hysteresis", 0..=i64::from(u32::MAX), errs)
        .unwrap_or(0) as u32;
    if hysteresis >= quorum && t.has("quorum_hysteresis") {
        errs.push(
            t.key("quorum_hysteresis"),
            format!(
                "{hysteresis} is not below the quorum {quorum}: the quorum would never be lost"
            ),
        );
    }
    let on_lost = t
        .choice(
            "on_quorum_lost",
            &[
                ("serve", QuorumLost::Serve),
                ("sorry", QuorumLost::Sorry),
                ("withdraw", QuorumLost::Withdraw),
            ],
            errs,
        )
        .unwrap_or(if has_sorry {
            QuorumLost::Sorry
        } else {
            QuorumLost::Serve
        });
    if on_lost == QuorumLost::Sorry && !has_sorry && !backends.is_empty() {
        errs.push(
            t.key("on_quorum_lost"),
            "\"sorry\" needs a backend with role = \"sorry\" to take the flows",
        );
    }
    if on_lost != QuorumLost::Sorry && has_sorry {
        errs.push(
            t.key("on_quorum_lost"),
            format!(
                "{:?}: the role = \"sorry\" backends would never take a flow (use \"sorry\")",
                on_lost.name()
            ),
        );
    }
    let primaries: u64 = backends
        .iter()
        .filter(|b| !b.sorry)
        .map(|b| u64::from(b.weight))
        .sum();
    if !backends.is_empty() && backends.iter().all(|b| b.sorry) {
        errs.push(
            t.key("backend"),
            "every backend has role = \"sorry\": a VIP needs a primary backend",
        );
    } else if !backends.is_empty() && u64::from(quorum) + u64::from(hysteresis) > primaries {
        errs.push(
            t.key("quorum"),
            format!(
                "{quorum} (+ hysteresis {hysteresis}) is more than the primary backends weigh \
                 in all ({primaries}): the VIP could never have its quorum"
            ),
        );
    }
    Fallback {
        quorum,
        hysteresis,
        on_lost,
    }
}

/// `med`, `as_path_prepend`, `local_pref`, `announce_to` and `role`.
fn announce(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Announce {
    let (med, as_path_prepend, local_pref) = attributes(t, errs);
    let mut announce_to: Vec<IpAddr> = Vec::new();
    for (path, s) in t.strings("announce_to", errs).unwrap_or_default() {
        match s.parse::<IpAddr>() {
            Err(_) => errs.push(path, format!("{s:?} is not a peer's address")),
            Ok(ip) if announce_to.contains(&ip) => {
                errs.push(path, format!("\"{ip}\" listed twice"))
            }
            Ok(ip) => announce_to.push(ip),
        }
    }
    if t.has("announce_to") && announce_to.is_empty() {
        errs.push(
            t.key("announce_to"),
            "empty: the VIP would be announced to no peer (leave it out for every peer)",
        );
    }
    let role = t
        .choice(
            "role",
            &[("active", Role::Active), ("standby", Role::Standby)],
            errs,
        )
        .unwrap_or_default();
    Announce {
        med,
        as_path_prepend,
        local_pref,
        announce_to,
        role,
    }
}

/// `med`, `as_path_prepend` and `local_pref` of a VIP, a peer or `[bgp.standby]`.
fn attributes(t: &mut Table<'_>, errs: &mut ConfigErrors) -> (Option<u32>, u8, Option<u32>) {
    let med = t
        .int("med", 0..=i64::from(u32::MAX), errs)
        .map(|n| n as u32);
    let prepend = t.int("as_path_prepend", 0..=MAX_PREPEND, errs).unwrap_or(0) as u8;
    let local_pref = t
        .int("local_pref", 0..=i64::from(u32::MAX), errs)
        .map(|n| n as u32);
    (med, prepend, local_pref)
}

/// A `[[bgp.peer]]`'s export attributes.
pub(super) fn peer_export(p: &mut Table<'_>, errs: &mut ConfigErrors) -> PeerExport {
    let (med, as_path_prepend, local_pref) = attributes(p, errs);
    PeerExport {
        med,
        as_path_prepend,
        local_pref,
        communities: communities(p, errs),
    }
}

/// `[bgp.standby]`.
pub(super) fn standby(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Standby {
    let Some(mut s) = t.table("standby", errs) else {
        return Standby::default();
    };
    let d = Standby::default();
    let (med, prepend, local_pref) = attributes(&mut s, errs);
    let out = Standby {
        as_path_prepend: if s.has("as_path_prepend") {
            prepend
        } else {
            d.as_path_prepend
        },
        med: med.unwrap_or(d.med),
        local_pref: local_pref.unwrap_or(d.local_pref),
        communities: communities(&mut s, errs),
    };
    s.finish(errs);
    out
}

/// Every VIP's `announce_to` names a configured `[[bgp.peer]]`, and the VIPs of one
/// address (one route) agree on how it is announced.
pub(super) fn announce_checks(vips: &[Vip], peers: &[IpAddr], errs: &mut ConfigErrors) {
    let mut first: HashMap<(IpAddr, Option<u32>), &Vip> = HashMap::new();
    for v in vips {
        let o = *first.entry((v.address, v.tenant_vni)).or_insert(v);
        if o.announce != v.announce {
            errs.push(
                format!("vip {:?}", v.name),
                format!(
                    "its med, as_path_prepend, local_pref, announce_to or role differ from vip \
                     {:?}'s: both are on {}, which is announced as one route",
                    o.name, v.address
                ),
            );
        }
        for (i, a) in v.announce.announce_to.iter().enumerate() {
            if !peers.contains(a) {
                errs.push(
                    format!("vip {:?}.announce_to[{i}]", v.name),
                    format!("\"{a}\" is not a [[bgp.peer]] address"),
                );
            }
        }
    }
}
