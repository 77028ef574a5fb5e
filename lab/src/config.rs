//! The appliance configs the lab writes: one per appliance, its VIPs (one per mode, family
//! and protocol), health checks and, in a BGP lab, its session with the router. The lab reads
//! back only what it needs from the files it wrote (which backends are health-checked).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::netns::{LabError, Result};
use crate::{
    LAB_VNI, Lab, LabMode, ROUTER_LAN4, SNAT4, SNAT6, appliance_addr, backend_addr, bird,
    snat_addr, suffix,
};

impl Lab {
    /// The first appliance's configuration for this lab.
    pub fn config(&self, api_socket: &Path) -> String {
        self.config_for(0, api_socket)
    }

    /// Appliance `k`'s configuration: its VIPs ([`Lab::modes_of`]) and, in a BGP lab, a
    /// `[bgp]` section peering with the router from its LAN address.
    pub fn config_for(&self, k: usize, api_socket: &Path) -> String {
        let mut s = self.appliance_section(k, api_socket);
        if self.bgp() {
            s.push_str(&bgp_section(k, self.options.bfd));
        }
        if self.options.sync {
            s.push_str(&self.sync_section(k));
        }
        if self.options.health_checks {
            // Fast checks so the lab shows failover within a couple of seconds.
            s.push_str(
                "[[health_check]]\nname = \"http\"\nkind = \"http\"\npath = \"/whoami\"\n\
                 interval = \"500ms\"\ntimeout = \"300ms\"\nrise = 2\nfall = 2\n\n\
                 [[health_check]]\nname = \"echo\"\nkind = \"udp\"\npayload = \"health\"\n\
                 interval = \"500ms\"\ntimeout = \"300ms\"\nrise = 2\nfall = 2\n\n",
            );
        }
        for mode in &self.modes_of(k) {
            for v6 in [false, true] {
                for proto in ["tcp", "udp"] {
                    s.push_str(&self.vip_section(*mode, v6, proto));
                }
            }
        }
        s
    }

    /// `[sync]`: appliance `k` listens on its LAN address; every other one is a peer.
    fn sync_section(&self, k: usize) -> String {
        let at = |j: usize| format!("\"{}:{}\"", appliance_addr(j, false), crate::SYNC_PORT);
        let peers: Vec<String> = (0..self.appliance_count())
            .filter(|j| *j != k)
            .map(at)
            .collect();
        // This appliance's own FullNAT addresses, when it serves FullNAT VIPs.
        let snat = if self.routed_snat() {
            format!(
                "snat = [\"{}\", \"{}\"]\n",
                snat_addr(k, false),
                snat_addr(k, true)
            )
        } else {
            String::new()
        };
        format!(
            "[sync]\nlisten = {}\npeers = [{}]\nkey_file = \"{}\"\n{snat}\n",
            at(k),
            peers.join(", "),
            self.dir.join("sync.key").display()
        )
    }

    /// `[appliance]` and `[api]`.
    fn appliance_section(&self, k: usize, api_socket: &Path) -> String {
        let flow_cache = match self.options.flow_cache {
            Some(on) => format!("flow_cache = {on}\n"),
            None => String::new(),
        };
        format!(
            "[appliance]\nname = \"lab-lb{}\"\ninterfaces = [\"eth0\"]\nxdp_mode = \"auto\"\n\
             umem_frames = 4096\nring_size = 1024\nconntrack_capacity = 65536\n{flow_cache}\n\
             [api]\nsocket = \"{}\"\nmetrics = \"\"\n\n",
            k + 1,
            api_socket.display()
        )
    }

    /// One `[[vip]]` of `mode` in one family and protocol, with every backend.
    fn vip_section(&self, mode: LabMode, v6: bool, proto: &str) -> String {
        let mut s = String::new();
        let fam = if v6 { "6" } else { "4" };
        let name = format!("{}{fam}-{proto}", mode.name().replace("tunnel/", ""));
        let _ = writeln!(
            s,
            "[[vip]]\nname = \"{name}\"\naddress = \"{}\"\nport = 80\nprotocol = \"{proto}\"\n\
             scheduler = \"{}\"",
            mode.vip(v6),
            self.options.scheduler
        );
        if self.options.health_checks {
            let check = if proto == "tcp" { "http" } else { "echo" };
            let _ = writeln!(s, "health_check = \"{check}\"");
        }
        if self.options.inhibit_on_failure {
            s.push_str("inhibit_on_failure = true\n");
        }
        match mode {
            LabMode::Nat => s.push_str("mode = \"nat\"\n"),
            LabMode::FullNat if self.routed_snat() => {
                let pool: Vec<String> = (0..self.appliance_count())
                    .map(|k| format!("\"{}\"", snat_addr(k, v6)))
                    .collect();
                let _ = writeln!(s, "mode = \"fullnat\"\nsnat = [{}]", pool.join(", "));
            }
            LabMode::FullNat => {
                let snat = if v6 { SNAT6 } else { SNAT4 };
                let _ = writeln!(s, "mode = \"fullnat\"\nsnat = [\"{snat}\"]");
            }
            LabMode::Dr => s.push_str("mode = \"dr\"\n"),
            LabMode::Vxlan => {
                let _ = writeln!(s, "mode = \"tunnel\"\ntunnel = \"vxlan\"\nvni = {LAB_VNI}");
            }
        }
        for i in 0..self.backends.len() {
            let _ = writeln!(
                s,
                "[[vip.backend]]\naddress = \"{}\"\nport = {}",
                backend_addr(i, v6),
                mode.backend_port()
            );
        }
        s.push('\n');
        s
    }

    /// Where the lab keeps the (first) appliance's config file.
    pub fn config_path(&self) -> PathBuf {
        self.config_path_at(0)
    }

    /// Where the lab keeps appliance `k`'s config file (`sluice.toml`, `sluice2.toml`, ...).
    pub fn config_path_at(&self, k: usize) -> PathBuf {
        self.dir.join(format!("sluice{}.toml", suffix(k)))
    }

    /// Appliance `k`'s API socket (`api.sock`, `api2.sock`, ...) when the lab wrote its
    /// config.
    pub fn api_socket_at(&self, k: usize) -> PathBuf {
        self.dir.join(format!("api{}.sock", suffix(k)))
    }

    /// Where appliance `k`'s output goes (`sluice.log`, `sluice2.log`, ...).
    pub fn log_path_at(&self, k: usize) -> PathBuf {
        self.dir.join(format!("sluice{}.log", suffix(k)))
    }

    /// Replaces the appliance's config file (takes effect on [`Lab::reload`]).
    pub fn write_config(&self, text: &str) -> Result<()> {
        self.write_config_at(0, text)
    }

    /// Replaces appliance `k`'s config file.
    pub fn write_config_at(&self, k: usize, text: &str) -> Result<()> {
        let path = self.config_path_at(k);
        std::fs::write(&path, text).map_err(|e| LabError {
            command: format!("write {}", path.display()),
            detail: e.to_string(),
        })
    }
}

/// Appliance `k`'s `[bgp]` section. One IPv4 session carries both families: IPv6 VIPs get
/// the appliance's IPv6 LAN address as next hop, which the router reaches on the same bridge.
fn bgp_section(k: usize, bfd: bool) -> String {
    let bfd = if bfd {
        format!(
            "bfd = {{ interval = \"{}ms\", multiplier = {} }}\n",
            crate::BFD_INTERVAL.as_millis(),
            crate::BFD_MULTIPLIER
        )
    } else {
        String::new()
    };
    format!(
        "[bgp]\nasn = {}\nrouter_id = \"{a4}\"\ngraceful_shutdown_wait = \"2s\"\n\n\
         [[bgp.peer]]\naddress = \"{ROUTER_LAN4}\"\nasn = {}\nhold_time = \"{}s\"\n\
         connect_retry = \"1s\"\nsource = \"{a4}\"\nnext_hop = \"{a6}\"\n{bfd}\n",
        bird::APPLIANCE_ASN,
        bird::ROUTER_ASN,
        bird::HOLD_TIME_SECS,
        a4 = appliance_addr(k, false),
        a6 = appliance_addr(k, true),
    )
}

/// The distinct (health check, backend address, port, DR/tunnel VIP) probes of a config
/// file, leaving out disabled backends: what an appliance running it reports up once every backend is
/// healthy. A backend without a port serves on its VIP's. `None` when the text is not TOML.
pub(crate) fn health_checked_backends(text: &str) -> Option<usize> {
    let doc: toml::Table = text.parse().ok()?;
    let mut keys = BTreeSet::new();
    let vips = doc.get("vip").and_then(toml::Value::as_array);
    for vip in vips.into_iter().flatten() {
        let Some(check) = vip.get("health_check").and_then(toml::Value::as_str) else {
            continue;
        };
        let vip_port = vip
            .get("port")
            .and_then(toml::Value::as_integer)
            .unwrap_or(0);
        // DR and tunnel backends are probed once per VIP too (`health_via_vip`, on by
        // default): each VIP is a probe of its own.
        let mode = vip.get("mode").and_then(toml::Value::as_str);
        let via_vip = matches!(mode, Some("dr" | "tunnel"))
            && vip.get("health_via_vip").and_then(toml::Value::as_bool) != Some(false);
        let via = via_vip.then(|| {
            let get = |k| vip.get(k).and_then(toml::Value::as_str).unwrap_or_default();
            format!("{} {} {vip_port}", get("address"), get("protocol"))
        });
        let backends = vip.get("backend").and_then(toml::Value::as_array);
        for b in backends.into_iter().flatten() {
            if b.get("state").and_then(toml::Value::as_str) == Some("disabled") {
                continue;
            }
            let Some(addr) = b.get("address").and_then(toml::Value::as_str) else {
                continue;
            };
            // Parsed, so that two spellings of one address are one backend.
            let addr = addr
                .parse::<std::net::IpAddr>()
                .map_or_else(|_| addr.to_string(), |a| a.to_string());
            let port = b
                .get("port")
                .and_then(toml::Value::as_integer)
                .unwrap_or(vip_port);
            keys.insert((check.to_string(), addr, port, via.clone()));
        }
    }
    Some(keys.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_checked_backends_are_counted_once_and_disabled_ones_not() {
        let text = r#"
[appliance]
name = "x"

[[vip]]
name = "web4"
address = "192.0.2.10"
port = 80
health_check = "http"
[[vip.backend]]
address = "10.0.0.21"
port = 8080
[[vip.backend]]
address = "10.0.0.22"
state = "disabled"
[[vip.backend]]
address = "10.0.0.23"

[[vip]]
name = "web4-again"
address = "192.0.2.11"
port = 80
health_check = "http"
[[vip.backend]]
address = "10.0.0.21"
port = 8080

[[vip]]
name = "unchecked"
address = "192.0.2.12"
[[vip.backend]]
address = "10.0.0.24"
"#;
        // 10.0.0.21:8080 (twice, one pair) and 10.0.0.23:80 (the VIP's port).
        assert_eq!(health_checked_backends(text), Some(2));
        // DR VIPs: one probe per VIP, unless health_via_vip = false folds them again.
        let dr = |via: &str| {
            format!(
                "[[vip]]\nname = \"a\"\naddress = \"192.0.2.20\"\nport = 80\nmode = \"dr\"\n\
                 health_check = \"http\"\n{via}\n[[vip.backend]]\naddress = \"10.0.0.21\"\n\
                 [[vip]]\nname = \"b\"\naddress = \"192.0.2.21\"\nport = 80\nmode = \"dr\"\n\
                 health_check = \"http\"\n{via}\n[[vip.backend]]\naddress = \"10.0.0.21\"\n"
            )
        };
        assert_eq!(health_checked_backends(&dr("")), Some(2));
        assert_eq!(
            health_checked_backends(&dr("health_via_vip = false")),
            Some(1)
        );
        assert_eq!(
            health_checked_backends("[appliance]\nname = \"x\"\n"),
            Some(0)
        );
        assert_eq!(health_checked_backends("[[vip]\n"), None, "not TOML");
    }
}
