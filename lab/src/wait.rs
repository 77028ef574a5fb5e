//! Waiting for the lab to be ready and asking it how it is: health from the appliances'
//! logs, routes and ECMP counters from the router, answers from the VIPs.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::netns::{LabError, Result};
use crate::{Lab, appliance_addr, bird, config, wait_answer};

impl Lab {
    /// Waits until appliance `k` reports every backend it health-checks up (from its log:
    /// each `health: KEY: down -> up` not followed by `KEY: up -> down`, counted against
    /// the distinct (check, backend) pairs of the config file the lab wrote for it);
    /// returns how long that took, or `None` on timeout, when the appliance is not running
    /// or when its config file does not parse.
    ///
    /// Flows that start while an appliance still warms up are pinned (conntrack) to a ring
    /// built from fewer backends than the other appliances use, so tests that move flows
    /// between appliances wait for this first.
    pub fn wait_healthy(&self, k: usize, timeout: Duration) -> Option<Duration> {
        let start = Instant::now();
        let text = std::fs::read_to_string(self.config_path_at(k)).ok()?;
        // A config that does not parse: the appliance will not get healthy, say so at once.
        let expected = config::health_checked_backends(&text)?;
        loop {
            if healthy_in_log(&self.log_path_at(k)) >= expected {
                return Some(start.elapsed());
            }
            if start.elapsed() >= timeout || !self.appliance_alive(k) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The router's kernel route to `vip` as `ip route show` prints it (empty when none).
    pub fn router_route(&self, vip: IpAddr) -> Result<String> {
        let fam = if vip.is_ipv6() { "-6" } else { "-4" };
        let out = self
            .router
            .try_run(&["ip", fam, "route", "show", &vip.to_string()])?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The next hops of the router's kernel route to `vip` (empty when there is no route).
    pub fn next_hops(&self, vip: IpAddr) -> Result<Vec<IpAddr>> {
        Ok(bird::next_hops(&self.router_route(vip)?))
    }

    /// Runs `birdc` on the router's BIRD; fails in a lab without BGP.
    pub fn birdc(&self, args: &[&str]) -> Result<String> {
        match &self.bird {
            Some(b) => b.cmd(&self.router, args),
            None => Err(LabError {
                command: format!("birdc {}", args.join(" ")),
                detail: "this lab has no BGP router (LabOptions::bgp is off)".into(),
            }),
        }
    }

    /// Packets from the client that the router has forwarded to appliance `k` so far, as
    /// (IPv4, IPv6): which appliances ECMP actually uses. BGP labs only.
    pub fn client_packets_to(&self, k: usize) -> Result<(u64, u64)> {
        let out = self
            .router
            .try_run(&["nft", "list", "chain", "inet", "sluicelab", "counts"])?;
        let text = String::from_utf8_lossy(&out.stdout);
        let count = |fam: &str| -> Result<u64> {
            let tag = format!("comment \"lb{}-{fam}\"", k + 1);
            text.lines()
                .find(|l| l.contains(&tag))
                .and_then(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    w.windows(2)
                        .find(|p| p[0] == "packets")
                        .and_then(|p| p[1].parse().ok())
                })
                .ok_or_else(|| LabError {
                    command: "nft list chain inet sluicelab counts".into(),
                    detail: format!("no counter for lb{} ({fam}) in:\n{text}", k + 1),
                })
        };
        Ok((count("ip")?, count("ip6")?))
    }

    /// Runs `f` in the client namespace.
    pub fn from_client<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T> {
        self.client.in_thread(f)?.join().map_err(|_| LabError {
            command: "client traffic".into(),
            detail: "the client thread panicked".into(),
        })
    }

    /// Asks `addr` for `/whoami` from the client every 200 ms until it answers or `timeout`
    /// passes; returns whether it answered.
    pub fn wait_vip(&self, addr: SocketAddr, timeout: Duration) -> Result<bool> {
        self.from_client(move || wait_answer(addr, Duration::from_millis(500), timeout))
    }
}

/// How many (check, backend) pairs an appliance's log says are up now.
fn healthy_in_log(log: &std::path::Path) -> usize {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let mut up: BTreeMap<&str, bool> = BTreeMap::new();
    for line in log.lines() {
        let Some((_, rest)) = line.split_once("health: ") else {
            continue;
        };
        if let Some((key, _)) = rest.split_once(": down -> up") {
            up.insert(key, true);
        } else if let Some((key, _)) = rest.split_once(": up -> down") {
            up.insert(key, false);
        }
    }
    up.values().filter(|u| **u).count()
}

/// Waits until the router's kernel has a route to every VIP of the lab, through every
/// appliance that serves it; returns how long that took, or `None` on timeout.
pub fn wait_for_routes(lab: &Lab, timeout: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut want: Vec<(IpAddr, Vec<IpAddr>)> = Vec::new();
    for mode in &lab.options.modes {
        for v6 in [false, true] {
            let hops = (0..lab.appliance_count())
                .filter(|k| lab.modes_of(*k).contains(mode))
                .map(|k| appliance_addr(k, v6))
                .collect();
            want.push((mode.vip(v6), hops));
        }
    }
    // Each appliance's own FullNAT address goes to it alone: the others announce it with
    // a worse path.
    if lab.routed_snat() {
        for k in 0..lab.appliance_count() {
            for v6 in [false, true] {
                want.push((crate::snat_addr(k, v6), vec![appliance_addr(k, v6)]));
            }
        }
    }
    while start.elapsed() < timeout {
        if want
            .iter()
            .all(|(vip, hops)| lab.next_hops(*vip).is_ok_and(|h| &h == hops))
        {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}
