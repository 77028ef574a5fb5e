//! The lab's wiring: the router's bridge, the client, the appliances and the backends on
//! veth pairs, their addresses and routes, and (in a BGP lab) the router's ECMP counters.
//! Everything here runs once, from [`Lab::build`], before any process starts.

use std::fmt::Write as _;

use crate::netns::{LabError, Netns, Result, try_veth_mq};
use crate::{
    LAB_VNI, LB_LAN4, LB_LAN6, Lab, LabMode, ROUTER_LAN4, ROUTER_LAN6, SNAT4, SNAT6,
    appliance_addr, backend_addr,
};

impl Lab {
    /// Connects every namespace to the router and gives each its addresses and routes.
    pub(crate) fn wire(&mut self) -> Result<()> {
        for ns in [&self.router, &self.client, &self.lb]
            .into_iter()
            .chain(&self.more_lbs)
            .chain(&self.backends)
        {
            ns.try_sh(
                "sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0",
            )?;
        }
        self.wire_router()?;
        self.wire_client()?;
        self.wire_first_appliance()?;
        for k in 1..self.appliance_count() {
            self.wire_appliance(k)?;
        }
        if self.options.bgp == Some(true) {
            self.count_ecmp()?;
        } else {
            self.route_vips_statically()?;
        }
        for i in 0..self.backends.len() {
            self.wire_backend(i)?;
        }
        Ok(())
    }

    /// Queues of every lab veth (at least one).
    fn queues(&self) -> u32 {
        self.options.queues.max(1)
    }

    /// The router forwards both families and holds the LAN bridge.
    fn wire_router(&self) -> Result<()> {
        let r = &self.router;
        r.try_sh("sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1")?;
        // Replies to a FullNAT address routed to an appliance leave by the LAN they came in
        // on: no redirect (see `route_replies`).
        r.try_sh(
            "sysctl -qw net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.default.send_redirects=0",
        )?;
        r.try_run(&["ip", "link", "add", "lan", "type", "bridge"])?;
        r.try_run(&["ip", "link", "set", "lan", "up"])?;
        for addr in [format!("{ROUTER_LAN4}/24"), format!("{ROUTER_LAN6}/64")] {
            r.try_run(&["ip", "addr", "add", &addr, "dev", "lan"])?;
        }
        Ok(())
    }

    /// The client sits on its own link to the router, outside the LAN.
    fn wire_client(&self) -> Result<()> {
        let (c, r) = (&self.client, &self.router);
        try_veth_mq(c, "eth0", r, "client", self.queues())?;
        c.try_run(&["ip", "addr", "add", "198.51.100.2/24", "dev", "eth0"])?;
        c.try_run(&["ip", "addr", "add", "2001:db8:c::2/64", "dev", "eth0"])?;
        c.try_run(&["ip", "route", "add", "default", "via", "198.51.100.1"])?;
        c.try_run(&[
            "ip",
            "-6",
            "route",
            "add",
            "default",
            "via",
            "2001:db8:c::1",
        ])?;
        r.try_run(&["ip", "addr", "add", "198.51.100.1/24", "dev", "client"])?;
        r.try_run(&["ip", "addr", "add", "2001:db8:c::1/64", "dev", "client"])?;
        Ok(())
    }

    /// `lb1`: its LAN addresses and the FullNAT source addresses it holds.
    fn wire_first_appliance(&self) -> Result<()> {
        let (lb, r) = (&self.lb, &self.router);
        try_veth_mq(lb, "eth0", r, "lb1", self.queues())?;
        r.try_run(&["ip", "link", "set", "lb1", "master", "lan"])?;
        xdp_tx_ready(r, "lb1")?;
        lb.try_run(&["ip", "addr", "add", &format!("{LB_LAN4}/24"), "dev", "eth0"])?;
        lb.try_run(&["ip", "addr", "add", &format!("{LB_LAN6}/64"), "dev", "eth0"])?;
        // The FullNAT source addresses: held by the appliance so the kernel answers ARP/ND
        // for them; the XDP program steers traffic to them into the engine.
        lb.try_run(&["ip", "addr", "add", &format!("{SNAT4}/32"), "dev", "eth0"])?;
        // Deprecated (preferred_lft 0) so that source selection never picks it for the
        // appliance's own IPv6 traffic: it shares more leading bits with the backends than
        // LB_LAN6 does, and replies to it are steered into the engine as FullNAT returns,
        // which would break every IPv6 health probe.
        let snat6 = format!("{SNAT6}/128");
        lb.try_run(&[
            "ip",
            "addr",
            "add",
            &snat6,
            "dev",
            "eth0",
            "preferred_lft",
            "0",
        ])?;
        lb.try_run(&["ip", "route", "add", "default", "via", ROUTER_LAN4])?;
        lb.try_run(&["ip", "-6", "route", "add", "default", "via", ROUTER_LAN6])?;
        Ok(())
    }

    /// Appliance `k` (1-based past `lb1`): a LAN port and addresses, nothing else.
    fn wire_appliance(&self, k: usize) -> Result<()> {
        let (other, r) = (self.appliance_ns(k), &self.router);
        let port = format!("lb{}", k + 1);
        try_veth_mq(other, "eth0", r, &port, self.queues())?;
        r.try_run(&["ip", "link", "set", &port, "master", "lan"])?;
        xdp_tx_ready(r, &port)?;
        let (a4, a6) = (appliance_addr(k, false), appliance_addr(k, true));
        other.try_run(&["ip", "addr", "add", &format!("{a4}/24"), "dev", "eth0"])?;
        other.try_run(&["ip", "addr", "add", &format!("{a6}/64"), "dev", "eth0"])?;
        other.try_run(&["ip", "route", "add", "default", "via", ROUTER_LAN4])?;
        other.try_run(&["ip", "-6", "route", "add", "default", "via", ROUTER_LAN6])?;
        Ok(())
    }

    /// BGP lab: ECMP by L4 ports, and an nftables counter per (appliance, family) of the
    /// client's packets by the next hop ECMP chose: the only place that knows which
    /// appliance carries which flow without asking the appliances.
    fn count_ecmp(&self) -> Result<()> {
        let r = &self.router;
        r.try_sh(
            "sysctl -qw net.ipv4.fib_multipath_hash_policy=1 \
             net.ipv6.fib_multipath_hash_policy=1",
        )?;
        let mut nft = String::from(
            "table inet sluicelab {\n  chain counts {\n    type filter hook forward priority 0; policy accept;\n",
        );
        for k in 0..self.appliance_count() {
            for (fam, v6) in [("ip", false), ("ip6", true)] {
                let _ = writeln!(
                    nft,
                    "    iifname \"client\" rt {fam} nexthop {} counter comment \"lb{}-{fam}\"",
                    appliance_addr(k, v6),
                    k + 1
                );
            }
        }
        nft.push_str("  }\n}\n");
        let path = self.dir.join("counters.nft");
        std::fs::write(&path, nft).map_err(|e| LabError {
            command: format!("write {}", path.display()),
            detail: e.to_string(),
        })?;
        r.try_run(&["nft", "-f", &path.to_string_lossy()])?;
        Ok(())
    }

    /// Without BGP every VIP is routed to `lb1`.
    fn route_vips_statically(&self) -> Result<()> {
        for mode in &self.options.modes {
            for v6 in [false, true] {
                let vip = mode.vip(v6).to_string();
                let via = if v6 { LB_LAN6 } else { LB_LAN4 };
                self.router
                    .try_run(&["ip", "route", "add", &vip, "via", via])?;
            }
        }
        Ok(())
    }

    /// Backend `i`: LAN addresses, the NAT return route, the DR/tunnel VIPs on lo and the
    /// VXLAN devices.
    fn wire_backend(&self, i: usize) -> Result<()> {
        let (be, r) = (&self.backends[i], &self.router);
        let port = format!("be{}", i + 1);
        try_veth_mq(be, "eth0", r, &port, self.queues())?;
        r.try_run(&["ip", "link", "set", &port, "master", "lan"])?;
        let (a4, a6) = (backend_addr(i, false), backend_addr(i, true));
        be.try_run(&["ip", "addr", "add", &format!("{a4}/24"), "dev", "eth0"])?;
        be.try_run(&["ip", "addr", "add", &format!("{a6}/64"), "dev", "eth0"])?;
        be.try_run(&["ip", "route", "add", "default", "via", ROUTER_LAN4])?;
        be.try_run(&["ip", "-6", "route", "add", "default", "via", ROUTER_LAN6])?;
        route_replies(be)?;
        // DR and tunnel: the backend holds the VIP on lo and must not answer ARP for it.
        be.try_sh(
            "sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 \
               net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0",
        )?;
        for mode in [LabMode::Dr, LabMode::Vxlan] {
            for addr in [
                format!("{}/32", mode.vip(false)),
                format!("{}/128", mode.vip(true)),
            ] {
                be.try_run(&["ip", "addr", "add", &addr, "dev", "lo"])?;
            }
        }
        wire_vxlan(be, &a4, &a6)
    }
}

/// A backend's replies from port 8080 (NAT and FullNAT), by policy routing (table 100):
/// - NAT: through lb1, which rewrote the request (its clients are off the LAN);
/// - the LAN on-link: every appliance's health probes, not only lb1's, are answered there;
/// - FullNAT on every appliance (`Lab::routed_snat`): to the appliances' own SNAT addresses
///   through the router, which learned them over BGP. Redirects off (here and on the
///   router): a backend that learned "the owner is on-link" would keep sending to it after
///   it is gone.
fn route_replies(be: &Netns) -> Result<()> {
    let (s4, s6) = (crate::ROUTED_SNAT4, crate::ROUTED_SNAT6);
    be.try_sh(&format!(
        "ip route add default via {LB_LAN4} table 100 && \
         ip -6 route add default via {LB_LAN6} table 100 && \
         ip route add 10.0.0.0/24 dev eth0 table 100 && \
         ip -6 route add 2001:db8:a::/64 dev eth0 table 100 && \
         ip route add {s4}0/24 via {ROUTER_LAN4} table 100 && \
         ip -6 route add {s6}/64 via {ROUTER_LAN6} table 100 && \
         ip rule add sport 8080 lookup 100 && ip -6 rule add sport 8080 lookup 100 && \
         sysctl -qw net.ipv4.conf.all.accept_redirects=0 net.ipv4.conf.eth0.accept_redirects=0 \
           net.ipv6.conf.all.accept_redirects=0 net.ipv6.conf.eth0.accept_redirects=0"
    ))?;
    Ok(())
}

/// VXLAN: the backend decapsulates on vx4/vx6. The appliance sets the inner destination
/// MAC to the backend's own MAC, so the vxlan devices take eth0's address.
fn wire_vxlan(be: &Netns, a4: &str, a6: &str) -> Result<()> {
    let mac_out = be.try_run(&["cat", "/sys/class/net/eth0/address"])?;
    let mac = String::from_utf8_lossy(&mac_out.stdout).trim().to_string();
    let vni = LAB_VNI.to_string();
    for (dev, local) in [("vx4", a4), ("vx6", a6)] {
        be.try_run(&[
            "ip",
            "link",
            "add",
            dev,
            "type",
            "vxlan",
            "id",
            &vni,
            "dstport",
            "4789",
            "local",
            local,
            "nolearning",
        ])?;
        be.try_run(&["ip", "link", "set", dev, "address", &mac])?;
        be.try_run(&["ip", "link", "set", dev, "up"])?;
        be.try_sh(&format!("sysctl -qw net.ipv4.conf.{dev}.rp_filter=0"))?;
    }
    Ok(())
}

/// Turns GRO on at the router's end of an appliance's veth: a veth only accepts frames that
/// its peer's XDP program sends back (XDP_TX or a redirect, the flow cache's fast path) when
/// the receiving end runs NAPI, which GRO (or an XDP program) enables; otherwise the kernel
/// drops them. Real NICs need nothing like it.
fn xdp_tx_ready(ns: &Netns, ifname: &str) -> Result<()> {
    ns.try_run(&["ethtool", "-K", ifname, "gro", "on"])
        .map(|_| ())
}
