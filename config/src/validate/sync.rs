//! `[sync]`: connection sync between the appliances of an ECMP group: where this appliance
//! listens, its peers, the shared key's file, and the bounds on rate and memory.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::ConfigErrors;
use crate::model::{Mode, Sync, Vip};
use crate::reader::Table;

/// Default records a second sent.
pub const DEFAULT_SYNC_RATE: u32 = 200_000;
/// Default standby entries kept (128 bytes of record each, about 150 MB at most).
pub const DEFAULT_SYNC_STANDBY: u32 = 1_000_000;

pub(super) fn sync(mut t: Table<'_>, vips: &[Vip], errs: &mut ConfigErrors) -> Option<Sync> {
    let listen = t.socket_addr("listen", errs);
    if !t.has("listen") {
        errs.push(
            t.key("listen"),
            "missing (required): this appliance's sync address and port, such as \"10.0.0.11:7946\"",
        );
    }
    if let Some(l) = listen
        && (l.port() == 0 || l.ip().is_unspecified())
    {
        errs.push(
            t.key("listen"),
            format!("{l} must be an address of this appliance and a port other than 0 (peers send to it)"),
        );
    }
    let peers = peers(&mut t, listen, errs);
    let key_file = t.string("key_file", errs).map(PathBuf::from);
    match &key_file {
        None if !t.has("key_file") => errs.push(
            t.key("key_file"),
            "missing (required): a file holding the group's shared key (at least 32 bytes)",
        ),
        Some(p) if !p.is_absolute() => errs.push(
            t.key("key_file"),
            format!("{:?} must be an absolute path", p.display().to_string()),
        ),
        _ => {}
    }
    let rate = t
        .int("rate", 1..=10_000_000, errs)
        .map_or(DEFAULT_SYNC_RATE, |n| n as u32);
    let standby = t
        .int("standby", 1..=100_000_000, errs)
        .map_or(DEFAULT_SYNC_STANDBY, |n| n as u32);
    let catch_up_timeout = t
        .duration(
            "catch_up_timeout",
            Duration::from_millis(100)..=Duration::from_secs(600),
            errs,
        )
        .unwrap_or(Duration::from_secs(5));
    let snat = snat(&mut t, errs);
    snat_owned(&snat, vips, errs);
    t.finish(errs);
    Some(Sync {
        listen: listen?,
        peers: peers?,
        key_file: key_file?,
        rate,
        standby,
        catch_up_timeout,
        snat,
    })
}

/// `snat`: this appliance's own FullNAT source addresses, each an address, listed once
/// (whether each is in a pool, and each pool has one, is [`snat_owned`]'s check).
fn snat(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for (path, s) in t.strings("snat", errs).unwrap_or_default() {
        match s.parse::<IpAddr>() {
            Err(_) => errs.push(path, format!("{s:?} is not an IPv4 or IPv6 address")),
            Ok(ip) if out.contains(&ip) => errs.push(path, format!("\"{ip}\" listed twice")),
            Ok(ip) => out.push(ip),
        }
    }
    out
}

/// With `[sync] snat`, this appliance takes FullNAT ports only on those addresses: each must
/// be in some FullNAT VIP's `snat` pool (an address in none is a typo, and would be
/// announced for nothing), and every FullNAT VIP's pool must hold one of them (such a VIP
/// could take no port here).
fn snat_owned(own: &[IpAddr], vips: &[Vip], errs: &mut ConfigErrors) {
    if own.is_empty() {
        return;
    }
    for (i, a) in own.iter().enumerate() {
        if !vips.iter().any(|v| v.snat.contains(a)) {
            errs.push(
                format!("sync.snat[{i}]"),
                format!("\"{a}\" is in no FullNAT VIP's snat pool"),
            );
        }
    }
    for v in vips.iter().filter(|v| v.mode == Mode::FullNat) {
        if !v.snat.iter().any(|a| own.contains(a)) {
            errs.push(
                "sync.snat",
                format!(
                    "VIP {:?}'s snat pool ({}) holds none of this appliance's addresses: it could \
                     take no FullNAT port here",
                    v.name,
                    v.snat
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }
}

fn peers(
    t: &mut Table<'_>,
    listen: Option<SocketAddr>,
    errs: &mut ConfigErrors,
) -> Option<Vec<SocketAddr>> {
    let Some(list) = t.strings("peers", errs) else {
        if !t.has("peers") {
            errs.push(
                t.key("peers"),
                "missing (required): the other appliances' sync addresses, such as [\"10.0.0.12:7946\"]",
            );
        }
        return None;
    };
    if list.is_empty() {
        errs.push(t.key("peers"), "empty: name at least one other appliance");
        return None;
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (path, p) in list {
        match p.parse::<SocketAddr>() {
            Err(_) => errs.push(
                path,
                format!("{p:?} is not an address:port such as \"10.0.0.12:7946\""),
            ),
            Ok(a) if Some(a) == listen => errs.push(
                path,
                format!("{a} is this appliance's own listen address: list only the others"),
            ),
            Ok(a) if a.port() == 0 || a.ip().is_unspecified() => errs.push(
                path,
                format!("{a} needs a real address and a port other than 0"),
            ),
            Ok(a) if listen.is_some_and(|l| l.is_ipv4() != a.is_ipv4()) => {
                errs.push(path, format!("{a} is not of listen's address family"))
            }
            Ok(a) if !seen.insert(a) => errs.push(path, format!("{a} listed twice")),
            Ok(a) => out.push(a),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use crate::tests::assert_error;
    use crate::*;
    use std::time::Duration;

    const BASE: &str = "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\n[[vip]]\n\
                        name = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n\n\
                        [[vip.backend]]\naddress = \"10.1.0.11\"\n";

    fn with(sync: &str) -> String {
        format!("{BASE}\n[sync]\n{sync}")
    }

    const GOOD: &str = "listen = \"10.0.0.11:7946\"\npeers = [\"10.0.0.12:7946\", \
                        \"10.0.0.13:7946\"]\nkey_file = \"/etc/sluice/sync.key\"\n";

    #[test]
    fn valid_with_defaults() {
        let c = Config::from_toml_str(&with(GOOD)).expect("valid");
        let s = c.sync.expect("[sync]");
        assert_eq!(s.listen, "10.0.0.11:7946".parse().unwrap());
        assert_eq!(s.peers.len(), 2);
        assert_eq!(s.rate, super::DEFAULT_SYNC_RATE);
        assert_eq!(s.standby, super::DEFAULT_SYNC_STANDBY);
        assert_eq!(s.catch_up_timeout, Duration::from_secs(5));
        assert!(Config::from_toml_str(BASE).expect("valid").sync.is_none());
    }

    #[test]
    fn limits_are_read() {
        let c = Config::from_toml_str(&with(&format!(
            "{GOOD}rate = 5000\nstandby = 100\ncatch_up_timeout = \"2s\"\n"
        )))
        .expect("valid");
        let s = c.sync.unwrap();
        assert_eq!((s.rate, s.standby), (5000, 100));
        assert_eq!(s.catch_up_timeout, Duration::from_secs(2));
    }

    const FULLNAT: &str = "\n[[vip]]\nname = \"full\"\naddress = \"192.0.2.11\"\nport = 80\n\
                           mode = \"fullnat\"\nsnat = [\"10.0.100.1\", \"10.0.100.2\"]\n\n\
                           [[vip.backend]]\naddress = \"10.1.0.12\"\n";

    fn with_fullnat(sync: &str) -> String {
        format!("{BASE}{FULLNAT}\n[sync]\n{sync}")
    }

    #[test]
    fn own_snat_addresses_are_in_the_pools_and_every_pool_holds_one() {
        let c = Config::from_toml_str(&with_fullnat(&format!("{GOOD}snat = [\"10.0.100.2\"]\n")))
            .expect("valid");
        assert_eq!(
            c.sync.unwrap().snat,
            vec!["10.0.100.2".parse::<std::net::IpAddr>().unwrap()]
        );
        let absent = Config::from_toml_str(&with_fullnat(GOOD)).expect("valid");
        assert!(
            absent.sync.unwrap().snat.is_empty(),
            "absent: the whole pools"
        );
        let stray = format!("{GOOD}snat = [\"10.0.100.2\", \"10.0.100.9\"]\n");
        assert_error(
            &with_fullnat(&stray),
            "sync.snat[1]",
            "in no FullNAT VIP's snat pool",
        );
        let twice = format!("{GOOD}snat = [\"10.0.100.2\", \"10.0.100.2\"]\n");
        assert_error(&with_fullnat(&twice), "sync.snat[1]", "listed twice");
        let bad = format!("{GOOD}snat = [\"10.0.100\"]\n");
        assert_error(
            &with_fullnat(&bad),
            "sync.snat[0]",
            "not an IPv4 or IPv6 address",
        );
        // A second FullNAT VIP on a pool of none of them could take no port here.
        let other = FULLNAT
            .replace("\"full\"", "\"full2\"")
            .replace("192.0.2.11", "192.0.2.12")
            .replace("[\"10.0.100.1\", \"10.0.100.2\"]", "[\"10.0.101.1\"]");
        let text = format!("{BASE}{FULLNAT}{other}\n[sync]\n{GOOD}snat = [\"10.0.100.1\"]\n");
        assert_error(
            &text,
            "sync.snat",
            "VIP \"full2\"'s snat pool (10.0.101.1) holds none",
        );
    }

    #[test]
    fn errors_say_what_to_fix() {
        assert_error(&with(""), "sync.listen", "missing (required)");
        assert_error(&with(""), "sync.peers", "missing (required)");
        assert_error(&with(""), "sync.key_file", "missing (required)");
        let bad_peer = GOOD.replace("10.0.0.13:7946", "10.0.0.13");
        assert_error(&with(&bad_peer), "sync.peers[1]", "not an address:port");
        let own = GOOD.replace("10.0.0.13:7946", "10.0.0.11:7946");
        assert_error(&with(&own), "sync.peers[1]", "own listen address");
        let twice = GOOD.replace("10.0.0.13:7946", "10.0.0.12:7946");
        assert_error(&with(&twice), "sync.peers[1]", "listed twice");
        let v6 = GOOD.replace("10.0.0.13:7946", "[2001:db8::13]:7946");
        assert_error(&with(&v6), "sync.peers[1]", "address family");
        let relative = GOOD.replace("/etc/sluice/sync.key", "sync.key");
        assert_error(&with(&relative), "sync.key_file", "absolute path");
        let any = GOOD.replace("10.0.0.11:7946", "0.0.0.0:7946");
        assert_error(&with(&any), "sync.listen", "an address of this appliance");
        let empty = GOOD.replace("[\"10.0.0.12:7946\", \"10.0.0.13:7946\"]", "[]");
        assert_error(&with(&empty), "sync.peers", "empty");
        assert_error(&with(&format!("{GOOD}rate = 0\n")), "sync.rate", "");
        assert_error(&with(&format!("{GOOD}peer = 1\n")), "sync.peer", "");
    }
}
