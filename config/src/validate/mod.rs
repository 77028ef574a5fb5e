//! Turns the raw configuration tree into a validated [`Config`], checking every key, range
//! and cross-reference, and collecting all errors of a file. One file per section:
//! `[appliance]`, `[api]`, `[bgp]`, `[[health_check]]`, `[[vip]]` with its backends, `[flood]`
//! and the scale keys (ring sizes, `health_batch`, `[metrics]`), `[fleet]` (with the merge
//! of a fleet's configuration), `[sync]`; this
//! one walks the top level and holds what the sections share.

mod acl;
mod api;
mod appliance;
mod bgp;
mod client_address;
mod fleet;
mod flood;
mod health;
mod lvs;
mod outbound;
mod placed;
mod placeholder;
mod policy;
mod quic;
mod scale;
mod syn_proxy;
mod sync;
mod tenant;
mod vip;

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use config::{Map, Value};

use super::error::ConfigErrors;
use super::model::*;
use super::reader::Table;

pub use acl::MAX_ACL_RULES;
pub use api::{DEFAULT_METRICS, DEFAULT_SOCKET};
pub use bgp::MD5_KEY_MAX_LEN;
pub use fleet::{FLEET_SECTIONS, merge};
pub use scale::{
    DEFAULT_HEALTH_BATCH, DEFAULT_HEALTH_BATCH_DELAY, DEFAULT_TABLE_SIZES, MIN_SLOTS_PER_BACKEND,
    default_table_size, min_table_size, prime_at_least,
};
pub use sync::{DEFAULT_SYNC_RATE, DEFAULT_SYNC_STANDBY};

/// The longest duration any key accepts unless it says otherwise.
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
const NAME_HELP: &str = "letters, digits, '.', '_' and '-', at most 63 characters";

/// Validates the whole tree. Returns the model only when there is no error at all.
pub fn validate(root: &Map<String, Value>) -> Result<Config, ConfigErrors> {
    let mut errs = ConfigErrors::default();
    let mut top = Table::new("", root);

    let appliance = match top.table("appliance", &mut errs) {
        Some(t) => appliance::appliance(t, &mut errs),
        None => {
            if !top.has("appliance") {
                errs.push("appliance", "missing: the [appliance] section is required");
            }
            None
        }
    };
    let api = match top.table("api", &mut errs) {
        Some(t) => api::api(t, &mut errs),
        None => Some(api::default_api()),
    };
    let bgp = top.table("bgp", &mut errs).map(|t| bgp::bgp(t, &mut errs));
    let health_checks = health::health_checks(&mut top, &mut errs);
    let check_names: HashMap<String, &'static str> = health_checks
        .iter()
        .map(|c| (c.name.clone(), c.kind.name()))
        .collect();
    let lists = acl::prefix_lists(&mut top, &mut errs);
    let vips = vip::vips(
        &mut top,
        &check_names,
        &lists,
        appliance.as_ref(),
        &mut errs,
    );
    acl::total_rules(&vips, &mut errs);
    let peers: Vec<IpAddr> = bgp
        .iter()
        .flatten()
        .flat_map(|b| b.peers.iter().map(|p| p.address))
        .collect();
    policy::announce_checks(&vips, &peers, &mut errs);
    let flood = match top.table("flood", &mut errs) {
        Some(t) => flood::flood(t, &mut errs),
        None => Flood::default(),
    };
    let metrics = match top.table("metrics", &mut errs) {
        Some(t) => scale::metrics(t, &mut errs),
        None => Metrics::default(),
    };
    let fleet = top
        .table("fleet", &mut errs)
        .and_then(|t| fleet::fleet(t, &mut errs));
    let sync = top
        .table("sync", &mut errs)
        .and_then(|t| sync::sync(t, &vips, &mut errs));
    top.finish(&mut errs);
    placeholder::placeholders(root, &mut errs);

    if !errs.is_empty() {
        return Err(errs);
    }
    match (appliance, api, bgp) {
        (Some(appliance), Some(api), bgp) => Ok(Config {
            appliance,
            api,
            bgp: bgp.flatten(),
            health_checks,
            vips,
            flood,
            metrics,
            fleet,
            sync,
        }),
        // A part that failed always records an error, so this is unreachable in practice;
        // stay total anyway.
        _ => {
            errs.push("", "configuration incomplete");
            Err(errs)
        }
    }
}

/// Records an error at `t`'s `name` key when the name read from it is not a valid name.
fn check_name(t: &Table<'_>, name: Option<&String>, errs: &mut ConfigErrors) {
    if let Some(n) = name
        && !valid_name(n)
    {
        errs.push(
            t.key("name"),
            format!("{n:?} is not a valid name ({NAME_HELP})"),
        );
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let n = u64::from(n);
    let mut d = 2u64;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 1;
    }
    true
}

fn family(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}
