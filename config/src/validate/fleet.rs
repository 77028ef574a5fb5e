//! `[fleet]`: the etcd cluster this appliance takes its VIPs from, and how the fleet
//! decides; and the merge of the fleet's configuration (one TOML document in etcd) with the
//! local file. The fleet supplies what every member must share (`[[vip]]`, `[[prefix_list]]`,
//! `[[health_check]]`, `[flood]`); the local file supplies only what is per appliance
//! (`[appliance]`, `[api]`, `[bgp]`, `[fleet]`), and a `[[vip]]` it still lists must be the
//! fleet's, unchanged.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::ConfigErrors;
use crate::model::{Fleet, FleetTls};
use crate::reader::Table;

/// The sections the fleet's configuration holds; everything else is per appliance.
pub const FLEET_SECTIONS: [&str; 4] = ["vip", "health_check", "flood", "prefix_list"];
/// The VIP keys a local `[[vip]]` may not contradict.
const IDENTITY: [&str; 4] = ["address", "port", "protocol", "mode"];

pub(super) fn fleet(mut t: Table<'_>, errs: &mut ConfigErrors) -> Option<Fleet> {
    let name = t.req_string("name", errs);
    super::check_name(&t, name.as_ref(), errs);
    let endpoints = endpoints(&mut t, errs);
    let prefix = t.string("prefix", errs).unwrap_or_else(|| "/sluice".into());
    if !prefix.starts_with('/') || prefix.chars().any(char::is_whitespace) {
        errs.push(
            t.key("prefix"),
            format!("{prefix:?} must start with '/' and hold no spaces"),
        );
    }
    let quorum = t.int("quorum", 1..=64, errs).map(|n| n as u32);
    let activation_timeout = t
        .duration(
            "activation_timeout",
            Duration::from_millis(100)..=Duration::from_secs(600),
            errs,
        )
        .unwrap_or(Duration::from_secs(5));
    let lease_ttl = t
        .duration(
            "lease_ttl",
            Duration::from_secs(2)..=Duration::from_secs(300),
            errs,
        )
        .unwrap_or(Duration::from_secs(5));
    let user = t.string("user", errs);
    let password_file = t.string("password_file", errs).map(PathBuf::from);
    if user.is_some() != password_file.is_some() {
        errs.push(
            t.key(if user.is_some() {
                "password_file"
            } else {
                "user"
            }),
            "missing: user and password_file go together",
        );
    }
    let tls = tls(&mut t, errs);
    let state_dir = t
        .string("state_dir", errs)
        .map_or_else(|| PathBuf::from("/var/lib/sluice"), PathBuf::from);
    if !state_dir.is_absolute() {
        errs.push(
            t.key("state_dir"),
            format!(
                "{:?} must be an absolute path (the last good fleet revision is kept there)",
                state_dir.display().to_string()
            ),
        );
    }
    if let Some(eps) = &endpoints
        && tls.is_none()
        && eps.iter().any(|e| e.starts_with("https://"))
    {
        errs.push(t.key("tls_ca"), "missing: https endpoints need tls_ca");
    }
    t.finish(errs);
    Some(Fleet {
        name: name?,
        endpoints: endpoints?,
        prefix,
        quorum,
        activation_timeout,
        lease_ttl,
        user,
        password_file,
        tls,
        state_dir,
    })
}

fn endpoints(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<Vec<String>> {
    let Some(list) = t.strings("endpoints", errs) else {
        errs.push(t.key("endpoints"), "missing (required): etcd's client URLs");
        return None;
    };
    if list.is_empty() {
        errs.push(
            t.key("endpoints"),
            "empty: at least one etcd endpoint is required",
        );
        return None;
    }
    let mut out = Vec::new();
    for (path, e) in list {
        let rest = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"))
            .unwrap_or(&e);
        let port = rest.rsplit_once(':').map(|(_, p)| p);
        if rest.is_empty() || port.is_none_or(|p| p.parse::<u16>().is_err()) {
            errs.push(
                path,
                format!("{e:?} is not an etcd endpoint such as \"http://10.0.0.5:2379\""),
            );
        } else {
            out.push(e);
        }
    }
    Some(out)
}

fn tls(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<FleetTls> {
    let ca = t.string("tls_ca", errs).map(PathBuf::from);
    let cert = t.string("tls_cert", errs).map(PathBuf::from);
    let key = t.string("tls_key", errs).map(PathBuf::from);
    if cert.is_some() != key.is_some() {
        errs.push(
            t.key(if cert.is_some() {
                "tls_key"
            } else {
                "tls_cert"
            }),
            "missing: tls_cert and tls_key go together",
        );
    }
    if ca.is_none() && cert.is_some() {
        errs.push(
            t.key("tls_ca"),
            "missing: a client certificate needs tls_ca",
        );
    }
    Some(FleetTls { ca: ca?, cert, key })
}

/// The local file's tree with the fleet's sections from `fleet` (revision `revision`), or
/// every error of the merge: a section the fleet may not set, a local VIP the fleet lacks
/// or contradicts.
pub fn merge(
    local: &toml::Table,
    fleet: &toml::Table,
    revision: u64,
) -> Result<toml::Table, ConfigErrors> {
    let mut errs = ConfigErrors::default();
    for k in fleet.keys() {
        if !FLEET_SECTIONS.contains(&k.as_str()) {
            errs.push(
                format!("fleet config (revision {revision}).{k}"),
                "is per appliance: it belongs in each appliance's file, not in the fleet's",
            );
        }
    }
    let fleet_vips = vip_tables(fleet);
    for (i, local_vip) in vip_tables(local).iter().enumerate() {
        let name = local_vip.get("name").and_then(|v| v.as_str());
        let path = name.map_or(format!("vip[{i}]"), |n| format!("vip {n:?}"));
        let Some(theirs) = fleet_vips
            .iter()
            .find(|f| f.get("name").and_then(|v| v.as_str()) == name && name.is_some())
        else {
            errs.push(
                path,
                format!(
                    "not in the fleet's configuration (revision {revision}): with [fleet], \
                     VIPs come from the fleet (push them with `sluice fleet push`)"
                ),
            );
            continue;
        };
        for key in IDENTITY {
            let (mine, fleet_value) = (local_vip.get(key), theirs.get(key));
            if mine.is_some() && mine != fleet_value {
                errs.push(
                    format!("{path}.{key}"),
                    format!(
                        "{} contradicts the fleet's {} (revision {revision})",
                        show(mine),
                        show(fleet_value)
                    ),
                );
            }
        }
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    let mut out: toml::Table = local
        .iter()
        .filter(|(k, _)| !FLEET_SECTIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in fleet {
        out.insert(k.clone(), v.clone());
    }
    Ok(out)
}

fn vip_tables(t: &toml::Table) -> Vec<&toml::Table> {
    t.get("vip")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_table()).collect())
        .unwrap_or_default()
}

fn show(v: Option<&toml::Value>) -> String {
    v.map_or("nothing".into(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    const LOCAL: &str = "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\n\
        [fleet]\nname = \"edge\"\nendpoints = [\"http://10.0.0.1:2379\", \"10.0.0.1:2389\"]\n";
    const FLEET: &str = "[[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n\
        protocol = \"tcp\"\n[[vip.backend]]\naddress = \"10.0.0.21\"\n";

    fn tables(local: &str, fleet: &str) -> Result<toml::Table, ConfigErrors> {
        merge(&local.parse().unwrap(), &fleet.parse().unwrap(), 12)
    }

    #[test]
    fn a_member_file_needs_no_vip_and_reads_every_fleet_key() {
        let c = Config::from_toml_str(LOCAL).unwrap_or_else(|e| panic!("{e}"));
        assert!(c.vips.is_empty());
        let f = c.fleet.expect("[fleet]");
        assert_eq!(f.name, "edge");
        assert_eq!(f.endpoints.len(), 2);
        assert_eq!(f.prefix, "/sluice");
        assert_eq!(f.quorum, None);
        assert_eq!(f.activation_timeout, Duration::from_secs(5));
        assert_eq!(f.state_dir, PathBuf::from("/var/lib/sluice"));
        let text = format!(
            "{LOCAL}prefix = \"/lb\"\nquorum = 2\nactivation_timeout = \"2s\"\n\
             lease_ttl = \"3s\"\nuser = \"lb\"\npassword_file = \"/etc/sluice/etcd.pw\"\n\
             tls_ca = \"/etc/sluice/ca.pem\"\n"
        );
        let f = Config::from_toml_str(&text).unwrap().fleet.unwrap();
        assert_eq!((f.prefix.as_str(), f.quorum), ("/lb", Some(2)));
        assert_eq!(f.lease_ttl, Duration::from_secs(3));
        assert_eq!(f.user.as_deref(), Some("lb"));
        assert!(f.tls.is_some());
    }

    #[test]
    fn bad_fleet_keys_name_their_path() {
        let text = "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n[fleet]\n\
            name = \"e dge\"\nendpoints = [\"nowhere\", \"https://e:2379\"]\nquorum = 0\n\
            user = \"x\"\ntls_cert = \"/c.pem\"\nlease = 3\nstate_dir = \"var/sluice\"\n";
        let e = Config::from_toml_str(text)
            .expect_err("invalid")
            .to_string();
        for want in [
            "fleet.name: \"e dge\" is not a valid name",
            "fleet.endpoints[0]: \"nowhere\" is not an etcd endpoint",
            "fleet.quorum: 0 is out of range",
            "fleet.password_file: missing",
            "fleet.tls_key: missing",
            "fleet.tls_ca: missing",
            "fleet.lease: unknown key",
            "fleet.state_dir: \"var/sluice\" must be an absolute path",
        ] {
            assert!(e.contains(want), "{want:?} not in:\n{e}");
        }
    }

    #[test]
    fn the_merge_takes_the_fleets_vips_and_keeps_the_local_identity() {
        let merged = tables(LOCAL, FLEET).unwrap();
        let c = Config::from_toml_str(&toml::to_string(&merged).unwrap()).unwrap();
        assert_eq!(c.appliance.name, "lb1");
        assert_eq!(c.vips.len(), 1);
    }

    #[test]
    fn a_local_vip_may_repeat_the_fleets_but_not_contradict_it() {
        let same = format!("{LOCAL}{FLEET}");
        assert!(tables(&same, FLEET).is_ok());
        let moved = same.replace("192.0.2.10", "192.0.2.99");
        let e = tables(&moved, FLEET).unwrap_err().to_string();
        assert!(
            e.contains(
                "vip \"web\".address: \"192.0.2.99\" contradicts the fleet's \"192.0.2.10\""
            ),
            "{e}"
        );
        let other = same.replace("name = \"web\"", "name = \"api\"");
        let e = tables(&other, FLEET).unwrap_err().to_string();
        assert!(
            e.contains("vip \"api\": not in the fleet's configuration"),
            "{e}"
        );
    }

    #[test]
    fn the_fleet_may_not_set_per_appliance_sections() {
        let fleet = format!("[bgp]\nasn = 1\n{FLEET}");
        let e = tables(LOCAL, &fleet).unwrap_err().to_string();
        assert!(
            e.contains("fleet config (revision 12).bgp: is per appliance"),
            "{e}"
        );
    }
}
