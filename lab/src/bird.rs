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
/// With `bfd` (interval, multiplier), every session runs BFD too.
pub fn config(
    router_id: &str,
    log: &Path,
    appliances: &[IpAddr],
    bfd: Option<(Duration, u32)>,
) -> String {
    let mut c = Config::new(router_id, ROUTER_ASN)
        .log(log)
        .kernel(true, true, true)
        .families(true, true)
        .template("appliance")
        .hold(HOLD_TIME_SECS)
        .graceful_shutdown_filter();
    if let Some((interval, multiplier)) = bfd {
        c = c.bfd(interval, multiplier);
    }
    for (k, addr) in appliances.iter().enumerate() {
        c = c.peer(&format!("lb{}", k + 1), &addr.to_string(), APPLIANCE_ASN);
    }
    c.render()
}

/// A BIRD 2 router config built from its parts: the lab router's ([`config`]) and the BGP
/// tests' routers, so every router a test starts speaks with the same timers unless the test
/// says otherwise. Every session shares one `template bgp` (keepalive 1 s, connect delay
/// 1 s; hold time 3 s, connect retry 2 s and error wait 1 to 10 s unless set) and imports
/// every route it learns, exporting none.
#[derive(Debug, Clone)]
pub struct Config {
    router_id: String,
    local_as: u32,
    log: Option<PathBuf>,
    /// (IPv4, IPv6, merge paths): which families go to the kernel, and whether as ECMP.
    kernel: Option<(bool, bool, bool)>,
    /// (interval, multiplier) of `protocol bfd`.
    bfd: Option<(Duration, u32)>,
    template: String,
    hold: u32,
    connect_retry: u32,
    error_wait: (u32, u32),
    /// Lines every session gets (`bfd on;`, `graceful restart aware;`).
    session: Vec<String>,
    /// The families the sessions carry.
    families: (bool, bool),
    graceful_shutdown_filter: bool,
    /// (protocol name, neighbor address, neighbor AS, lines of its own).
    peers: Vec<(String, String, u32, Vec<String>)>,
}

impl Config {
    /// A router `router_id` in `local_as`, IPv4 sessions only, nothing exported to the kernel.
    pub fn new(router_id: &str, local_as: u32) -> Config {
        Config {
            router_id: router_id.to_string(),
            local_as,
            log: None,
            kernel: None,
            bfd: None,
            template: "peers".into(),
            hold: 3,
            connect_retry: 2,
            error_wait: (1, 10),
            session: Vec::new(),
            families: (true, false),
            graceful_shutdown_filter: false,
            peers: Vec::new(),
        }
    }

    /// Logs everything to `path`.
    pub fn log(mut self, path: &Path) -> Config {
        self.log = Some(path.to_path_buf());
        self
    }

    /// Exports the learned routes of these families to the kernel; with `merge_paths`, equal
    /// paths become one multipath (ECMP) route.
    pub fn kernel(mut self, v4: bool, v6: bool, merge_paths: bool) -> Config {
        self.kernel = Some((v4, v6, merge_paths));
        self
    }

    /// Runs `protocol bfd` on every interface at `interval` x `multiplier` and turns BFD on
    /// for every session.
    pub fn bfd(mut self, interval: Duration, multiplier: u32) -> Config {
        self.bfd = Some((interval, multiplier));
        self.session("bfd on;")
    }

    /// The name of the sessions' template (`from NAME` in every protocol).
    pub fn template(mut self, name: &str) -> Config {
        self.template = name.to_string();
        self
    }

    /// The hold time every session proposes, in seconds.
    pub fn hold(mut self, secs: u32) -> Config {
        self.hold = secs;
        self
    }

    /// Reconnects fast: connect retry 1 s, error wait 1 to 2 s.
    pub fn quick_retry(mut self) -> Config {
        self.connect_retry = 1;
        self.error_wait = (1, 2);
        self
    }

    /// A line every session gets.
    pub fn session(mut self, line: &str) -> Config {
        self.session.push(line.to_string());
        self
    }

    /// The families the sessions carry (IPv4 unicast, IPv6 unicast).
    pub fn families(mut self, v4: bool, v6: bool) -> Config {
        self.families = (v4, v6);
        self
    }

    /// Imports through RFC 8326's receiver policy ([`config`]).
    pub fn graceful_shutdown_filter(mut self) -> Config {
        self.graceful_shutdown_filter = true;
        self
    }

    /// A session `name` to `addr` in `asn`.
    pub fn peer(self, name: &str, addr: &str, asn: u32) -> Config {
        self.peer_with(name, addr, asn, &[])
    }

    /// A session `name` to `addr` in `asn` with lines of its own (`password "...";`).
    pub fn peer_with(mut self, name: &str, addr: &str, asn: u32, lines: &[&str]) -> Config {
        let lines = lines
            .iter()
            .filter(|l| !l.is_empty())
            .map(|l| l.to_string())
            .collect();
        self.peers
            .push((name.to_string(), addr.to_string(), asn, lines));
        self
    }

    /// The config file's text.
    pub fn render(&self) -> String {
        let mut c = format!("router id {};\n", self.router_id);
        if let Some(log) = &self.log {
            let _ = writeln!(c, "log \"{}\" all;", log.display());
        }
        if self.graceful_shutdown_filter {
            c.push_str(
                "filter graceful_shutdown {\n\
                 \x20 if (65535, 0) ~ bgp_community then bgp_local_pref = 0;\n\
                 \x20 accept;\n\
                 }\n",
            );
        }
        c.push_str("protocol device { scan time 1; }\n");
        if let Some((v4, v6, merge)) = self.kernel {
            let merge = if merge { "merge paths on; " } else { "" };
            for (on, name, fam) in [(v4, "k4", "ipv4"), (v6, "k6", "ipv6")] {
                if on {
                    let _ = writeln!(
                        c,
                        "protocol kernel {name} {{ {merge}{fam} {{ import none; export all; }}; }}"
                    );
                }
            }
        }
        if let Some((interval, mult)) = self.bfd {
            let ms = interval.as_millis();
            let _ = writeln!(
                c,
                "protocol bfd {{ interface \"*\" {{ min rx interval {ms} ms; \
                 min tx interval {ms} ms; multiplier {mult}; }}; }}"
            );
        }
        self.render_template(&mut c);
        for (name, addr, asn, lines) in &self.peers {
            let own: String = lines.iter().map(|l| format!(" {l}")).collect();
            let _ = writeln!(
                c,
                "protocol bgp {name} from {} {{ neighbor {addr} as {asn};{own} }}",
                self.template
            );
        }
        c
    }

    fn render_template(&self, c: &mut String) {
        let import = if self.graceful_shutdown_filter {
            "filter graceful_shutdown"
        } else {
            "all"
        };
        let _ = writeln!(c, "template bgp {} {{", self.template);
        let _ = writeln!(c, "  local as {};", self.local_as);
        let _ = writeln!(c, "  hold time {};", self.hold);
        c.push_str("  keepalive time 1;\n  connect delay time 1;\n");
        let _ = writeln!(c, "  connect retry time {};", self.connect_retry);
        let (first, most) = self.error_wait;
        let _ = writeln!(c, "  error wait time {first}, {most};");
        for line in &self.session {
            let _ = writeln!(c, "  {line}");
        }
        for (on, fam) in [(self.families.0, "ipv4"), (self.families.1, "ipv6")] {
            if on {
                let _ = writeln!(c, "  {fam} {{ import {import}; export none; }};");
            }
        }
        c.push_str("}\n");
    }
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

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGSTOP (`stop`) or SIGCONT: a router that hangs with its sessions open, and resumes.
    pub fn freeze(&self, stop: bool) -> Result<()> {
        let signal = if stop {
            nix::sys::signal::Signal::SIGSTOP
        } else {
            nix::sys::signal::Signal::SIGCONT
        };
        let pid = i32::try_from(self.child.id()).unwrap_or(i32::MAX);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).map_err(|e| LabError {
            command: format!("kill -{} {pid} (bird)", signal.as_str()),
            detail: e.to_string(),
        })
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
            None,
        );
        assert!(!c.contains("bfd"), "no BFD unless asked");
        assert!(c.contains("protocol bgp lb1 from appliance { neighbor 10.0.0.10 as 65010; }"));
        assert!(c.contains("protocol bgp lb2 from appliance { neighbor 10.0.0.11 as 65010; }"));
        assert_eq!(c.matches("merge paths on").count(), 2);
        assert!(c.contains("error wait time 1, 10;"));
        assert!(c.contains("hold time 3;"));
        assert_eq!(c.matches("import filter graceful_shutdown;").count(), 2);
        assert!(c.starts_with("router id 10.0.0.1;\nlog \"/tmp/x/bird.log\" all;\n"));
        let bfd = config(
            "10.0.0.1",
            Path::new("/tmp/x/bird.log"),
            &["10.0.0.10".parse().unwrap()],
            Some((Duration::from_millis(300), 3)),
        );
        assert!(bfd.contains("min rx interval 300 ms; min tx interval 300 ms; multiplier 3;"));
        assert!(bfd.contains("bfd on;"));
    }

    #[test]
    fn config_parts_as_the_tests_ask() {
        let c = Config::new("10.71.1.1", 65000)
            .kernel(true, false, false)
            .bfd(Duration::from_millis(100), 3)
            .quick_retry()
            .template("t")
            .peer_with("sp1", "10.71.1.2", 65001, &["password \"k\";"])
            .render();
        assert!(c.contains("protocol kernel k4 { ipv4 { import none; export all; }; }\n"));
        assert!(!c.contains("k6") && !c.contains("ipv6") && !c.contains("filter"));
        assert!(c.contains(
            "protocol bfd { interface \"*\" { min rx interval 100 ms; min tx interval 100 ms; \
             multiplier 3; }; }"
        ));
        assert!(c.contains("  connect retry time 1;\n  error wait time 1, 2;\n  bfd on;\n"));
        assert!(c.contains("  ipv4 { import all; export none; };\n}\n"));
        assert!(c.ends_with(
            "protocol bgp sp1 from t { neighbor 10.71.1.2 as 65001; password \"k\"; }\n"
        ));
    }
}
