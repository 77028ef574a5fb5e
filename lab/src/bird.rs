//! The lab router's BGP side: a BIRD 2 daemon in the router namespace that peers with every
//! appliance and installs the VIP routes it learns into the kernel with ECMP, so the lab
//! exercises the same announce/withdraw path a production router would, instead of static
//! routes that would keep sending traffic to a dead or unhealthy appliance.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::netns::{LabError, Netns, Result};

/// The router's autonomous system.
pub const ROUTER_ASN: u32 = 65000;
/// The appliances' autonomous system (one for all: BIRD merges equal eBGP paths from
/// neighbours in the same AS into one multipath route).
pub const APPLIANCE_ASN: u32 = 65010;
/// Hold time both sides propose; the appliance config says the same.
pub const HOLD_TIME_SECS: u32 = 3;

/// BIRD's config for the lab router: one eBGP session per appliance (`lb1`, `lb2`, ... by
/// address), every learned route exported to the kernel with paths merged (ECMP).
///
/// Imports follow RFC 8326 §4.2's receiver policy: a path tagged GRACEFUL_SHUTDOWN
/// (65535:0) gets LOCAL_PREF 0, so it falls out of the multipath set while the appliance
/// still forwards, and traffic has moved before the withdraw. BIRD 2.0.12 does not do that
/// on its own.
pub fn config(router_id: &str, log: &Path, appliances: &[IpAddr]) -> String {
    let mut c = format!(
        "router id {router_id};\n\
         log \"{}\" all;\n\
         filter graceful_shutdown {{\n\
         \x20 if (65535, 0) ~ bgp_community then bgp_local_pref = 0;\n\
         \x20 accept;\n\
         }}\n\
         protocol device {{ scan time 1; }}\n\
         protocol kernel k4 {{ merge paths on; ipv4 {{ import none; export all; }}; }}\n\
         protocol kernel k6 {{ merge paths on; ipv6 {{ import none; export all; }}; }}\n\
         template bgp appliance {{\n\
         \x20 local as {ROUTER_ASN};\n\
         \x20 hold time {HOLD_TIME_SECS};\n\
         \x20 keepalive time 1;\n\
         \x20 connect delay time 1;\n\
         \x20 connect retry time 2;\n\
         \x20 error wait time 1, 10;\n\
         \x20 ipv4 {{ import filter graceful_shutdown; export none; }};\n\
         \x20 ipv6 {{ import filter graceful_shutdown; export none; }};\n\
         }}\n",
        log.display()
    );
    for (k, addr) in appliances.iter().enumerate() {
        let _ = writeln!(
            c,
            "protocol bgp lb{} from appliance {{ neighbor {addr} as {APPLIANCE_ASN}; }}",
            k + 1
        );
    }
    c
}

/// A BIRD daemon running in the router namespace; killed on drop.
pub struct Bird {
    /// The control socket `birdc -s` talks to.
    pub socket: PathBuf,
    child: Child,
}

impl Drop for Bird {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Bird {
    /// Writes `config` to `dir/bird.conf`, starts BIRD in `router` with its control socket and
    /// pid file in `dir`, and waits until it answers on the socket.
    pub fn start(router: &Netns, dir: &Path, config: &str) -> Result<Bird> {
        crate::netns::require("bird", "bird2")?;
        crate::netns::require("birdc", "bird2")?;
        let conf = dir.join("bird.conf");
        std::fs::write(&conf, config).map_err(|e| LabError {
            command: format!("write {}", conf.display()),
            detail: e.to_string(),
        })?;
        let socket = dir.join("bird.ctl");
        let pid = dir.join("bird.pid");
        let out = std::fs::File::create(dir.join("bird.out")).ok();
        let child = router.try_spawn(
            &[
                "bird",
                "-f",
                "-c",
                &conf.to_string_lossy(),
                "-s",
                &socket.to_string_lossy(),
                "-P",
                &pid.to_string_lossy(),
            ],
            out,
        )?;
        let mut bird = Bird { socket, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if bird.cmd(router, &["show", "status"]).is_ok() {
                return Ok(bird);
            }
            if let Ok(Some(status)) = bird.child.try_wait() {
                let said = std::fs::read_to_string(dir.join("bird.out")).unwrap_or_default();
                return Err(LabError {
                    command: "bird".into(),
                    detail: format!("exited ({status}) at start: {}", said.trim()),
                });
            }
            if Instant::now() > deadline {
                return Err(LabError {
                    command: "bird".into(),
                    detail: "no answer on its control socket within 10 s".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `birdc` against this daemon and returns what it printed.
    pub fn cmd(&self, router: &Netns, args: &[&str]) -> Result<String> {
        let sock = self.socket.to_string_lossy().into_owned();
        let mut full = vec!["birdc", "-s", &sock];
        full.extend_from_slice(args);
        let out = router.try_run(&full)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The next hops of a route as `ip route show` prints it: `via X` of a single-path route,
/// or every `nexthop via X` line of a multipath one. Sorted, without duplicates.
pub fn next_hops(ip_route_output: &str) -> Vec<IpAddr> {
    let words: Vec<&str> = ip_route_output.split_whitespace().collect();
    let mut hops: Vec<IpAddr> = words
        .windows(2)
        .filter(|w| w[0] == "via")
        .filter_map(|w| {
            // `via inet6 X` is how IPv4-over-IPv6 next hops print; take the address either way.
            w[1].parse().ok()
        })
        .collect();
    hops.sort_unstable();
    hops.dedup();
    hops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_multipath_routes() {
        assert_eq!(
            next_hops("192.0.2.12 via 10.0.0.10 dev lan proto bird metric 32 \n"),
            vec!["10.0.0.10".parse::<IpAddr>().unwrap()]
        );
        let multi = "192.0.2.12 proto bird metric 32 \n\
                     \tnexthop via 10.0.0.11 dev lan weight 1 \n\
                     \tnexthop via 10.0.0.10 dev lan weight 1 \n";
        assert_eq!(
            next_hops(multi),
            vec![
                "10.0.0.10".parse::<IpAddr>().unwrap(),
                "10.0.0.11".parse().unwrap()
            ]
        );
        let v6 = "2001:db8:f::12 proto bird metric 32 pref medium\n\
                  \tnexthop via 2001:db8:a::10 dev lan weight 1 \n\
                  \tnexthop via 2001:db8:a::11 dev lan weight 1 \n";
        assert_eq!(next_hops(v6).len(), 2);
        assert!(next_hops("").is_empty());
    }

    #[test]
    fn config_has_one_session_per_appliance_and_ecmp() {
        let c = config(
            "10.0.0.1",
            Path::new("/tmp/x/bird.log"),
            &["10.0.0.10".parse().unwrap(), "10.0.0.11".parse().unwrap()],
        );
        assert!(c.contains("protocol bgp lb1 from appliance { neighbor 10.0.0.10 as 65010; }"));
        assert!(c.contains("protocol bgp lb2 from appliance { neighbor 10.0.0.11 as 65010; }"));
        assert_eq!(c.matches("merge paths on").count(), 2);
        assert!(c.contains("error wait time 1, 10;"));
        assert!(c.contains("hold time 3;"));
        assert_eq!(c.matches("import filter graceful_shutdown;").count(), 2);
    }
}
