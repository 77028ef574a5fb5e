//! `[sync]`: connection sync between the appliances of an ECMP group: where this appliance
//! listens, its peers, the shared key's file, and the bounds on rate and memory.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::ConfigErrors;
use crate::model::Sync;
use crate::reader::Table;

/// Default records a second sent.
pub const DEFAULT_SYNC_RATE: u32 = 200_000;
/// Default standby entries kept (128 bytes of record each, about 150 MB at most).
pub const DEFAULT_SYNC_STANDBY: u32 = 1_000_000;

pub(super) fn sync(mut t: Table<'_>, errs: &mut ConfigErrors) -> Option<Sync> {
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
    t.finish(errs);
    Some(Sync {
        listen: listen?,
        peers: peers?,
        key_file: key_file?,
        rate,
        standby,
        catch_up_timeout,
    })
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
