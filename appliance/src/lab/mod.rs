//! `sluice lab`: a self-contained lab in network namespaces on this machine.
//!
//! ```text
//!  client ──── router ──┬── lb1        (sluice run, one-arm on eth0)
//!  198.51.100.2   (bridge "lan",   ├── be1 ┐
//!  2001:db8:c::2   10.0.0.1,       ├── be2 ├ real HTTP + UDP servers (backend.py)
//!                  2001:db8:a::1)  └── be3 ┘
//! ```
//! One VIP per mode and family, all served at once: NAT (backends' replies from port 8080 go
//! back through the appliance by policy routing), FullNAT (SNAT to an address the appliance
//! holds), DR (backends hold the VIP on lo) and VXLAN tunnel (backends decapsulate on a vxlan
//! device). The lab starts the appliance with a generated config, sends real traffic through
//! every VIP, prints what happened, and removes everything on exit or Ctrl-C.
//!
//! With several appliances (`lb1` at 10.0.0.10, `lb2` at 10.0.0.11, ...) the router runs BIRD
//! instead of static routes: every appliance announces its VIPs over BGP and the router
//! spreads flows over them by ECMP (hashing L4 ports). DR and VXLAN VIPs are served by every
//! appliance, since their return path skips the appliance and Maglev picks the same backend
//! on each; NAT and FullNAT VIPs stay on `lb1` alone, because their replies must come back
//! through the appliance that rewrote the request.

pub mod bird;
pub mod netns;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use netns::{LabError, Netns, Result, veth};

const BACKEND_PY: &str = include_str!("backend.py");
/// Size of the `/blob` body every backend serves.
pub const BLOB_SIZE: usize = 1 << 20;
/// VXLAN network identifier used between the appliance and the lab backends.
pub const LAB_VNI: u32 = 42;

/// The deterministic body of `/blob` (must match backend.py).
pub fn blob() -> Vec<u8> {
    (0..BLOB_SIZE)
        .map(|i| ((i * 7 + i / 251) % 256) as u8)
        .collect()
}

/// Forwarding modes the lab sets up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabMode {
    Nat,
    FullNat,
    Dr,
    Vxlan,
}

impl LabMode {
    pub const ALL: [LabMode; 4] = [LabMode::Nat, LabMode::FullNat, LabMode::Dr, LabMode::Vxlan];

    pub fn name(self) -> &'static str {
        match self {
            LabMode::Nat => "nat",
            LabMode::FullNat => "fullnat",
            LabMode::Dr => "dr",
            LabMode::Vxlan => "tunnel/vxlan",
        }
    }

    fn index(self) -> u8 {
        match self {
            LabMode::Nat => 0,
            LabMode::FullNat => 1,
            LabMode::Dr => 2,
            LabMode::Vxlan => 3,
        }
    }

    /// Port the backends serve this mode's VIP on (NAT modes map 80 -> 8080).
    pub fn backend_port(self) -> u16 {
        match self {
            LabMode::Nat | LabMode::FullNat => 8080,
            LabMode::Dr | LabMode::Vxlan => 80,
        }
    }

    /// The VIP address of this mode in the given family.
    pub fn vip(self, v6: bool) -> IpAddr {
        let i = self.index();
        if v6 {
            IpAddr::V6(format!("2001:db8:f::{}", 10 + i).parse().expect("literal"))
        } else {
            IpAddr::V4(format!("192.0.2.{}", 10 + i).parse().expect("literal"))
        }
    }
}

/// Lab addressing.
pub const ROUTER_LAN4: &str = "10.0.0.1";
pub const ROUTER_LAN6: &str = "2001:db8:a::1";
pub const LB_LAN4: &str = "10.0.0.10";
pub const LB_LAN6: &str = "2001:db8:a::10";
/// How long starting an appliance waits for its backends to pass their health checks.
const STARTUP_HEALTH_WAIT: Duration = Duration::from_secs(20);

/// Most appliances a lab can hold (their LAN addresses are 10.0.0.10 to 10.0.0.19).
pub const MAX_APPLIANCES: usize = 10;

/// How many appliances `sluice lab` runs when [`LabOptions::appliances`] is `None`.
pub const CLI_APPLIANCES: usize = 2;
pub const SNAT4: &str = "10.0.0.100";
pub const SNAT6: &str = "2001:db8:a::100";

/// LAN address of appliance `k` (0-based: `lb1` is 0 and holds [`LB_LAN4`] / [`LB_LAN6`]).
pub fn appliance_addr(k: usize, v6: bool) -> IpAddr {
    let text = if v6 {
        format!("2001:db8:a::{}", 10 + k)
    } else {
        format!("10.0.0.{}", 10 + k)
    };
    text.parse().expect("lab appliance addresses are literals")
}

fn backend_addr(i: usize, v6: bool) -> String {
    if v6 {
        format!("2001:db8:a::{}", 21 + i)
    } else {
        format!("10.0.0.{}", 21 + i)
    }
}

/// What to build.
#[derive(Debug, Clone)]
pub struct LabOptions {
    pub backends: usize,
    pub modes: Vec<LabMode>,
    /// Requests per VIP for the spread check.
    pub requests: usize,
    /// Scheduler for every VIP.
    pub scheduler: String,
    /// Health-check every backend (HTTP for TCP VIPs, UDP echo for UDP VIPs).
    pub health_checks: bool,
    /// How many appliances share the LAN. `None`: one for [`Lab::build`] (what the existing
    /// single-appliance tests expect), [`CLI_APPLIANCES`] for `sluice lab` ([`run_lab`]).
    /// [`Lab::build`] replaces it with the number it used.
    pub appliances: Option<usize>,
    /// Route VIPs with BGP (BIRD on the router) instead of static routes. `None`: BGP when
    /// there is more than one appliance. [`Lab::build`] replaces it with what it used.
    pub bgp: Option<bool>,
    /// After the traffic report, open `sluice console` on lb1 (with light background
    /// traffic) and keep the lab up until the console quits.
    pub console: bool,
    /// `[appliance] flow_cache` in every appliance's config; `None` leaves the default (on).
    pub flow_cache: Option<bool>,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            backends: 3,
            modes: LabMode::ALL.to_vec(),
            requests: 60,
            scheduler: "maglev".into(),
            health_checks: true,
            appliances: None,
            bgp: None,
            console: false,
            flow_cache: None,
        }
    }
}

/// A running lab: namespaces, backends and their processes. Dropping it tears all down.
pub struct Lab {
    pub id: String,
    pub dir: PathBuf,
    pub client: Netns,
    pub router: Netns,
    /// The first appliance's namespace (`lb1`).
    pub lb: Netns,
    /// Namespaces of appliances `lb2`, `lb3`, ... (empty in a single-appliance lab).
    pub more_lbs: Vec<Netns>,
    pub backends: Vec<Netns>,
    pub options: LabOptions,
    /// Backend servers by backend index.
    servers: Vec<Option<Child>>,
    /// `sluice run` processes by appliance index.
    appliances: Vec<Option<Child>>,
    bird: Option<bird::Bird>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in self
            .appliances
            .iter_mut()
            .chain(self.servers.iter_mut())
            .flatten()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.bird = None;
        let _ = std::fs::remove_dir_all(&self.dir);
        // Namespaces drop after this, killing anything left inside them.
    }
}

impl Lab {
    /// Builds the topology and starts the backends (not the appliance).
    pub fn build(options: LabOptions) -> Result<Lab> {
        if !netns::is_root() {
            return Err(LabError {
                command: "sluice lab".into(),
                detail: "needs root (network namespaces, XDP)".into(),
            });
        }
        netns::require("ip", "iproute2")?;
        netns::require("python3", "python3")?;
        let mut options = options;
        let n_lbs = options.appliances.unwrap_or(1).max(1);
        if n_lbs > MAX_APPLIANCES {
            return Err(LabError {
                command: "sluice lab".into(),
                detail: format!(
                    "{n_lbs} appliances asked for; the lab has addresses for at most {MAX_APPLIANCES} \
                     (10.0.0.10 to 10.0.0.19)"
                ),
            });
        }
        let bgp = options.bgp.unwrap_or(n_lbs > 1);
        options.appliances = Some(n_lbs);
        options.bgp = Some(bgp);
        if bgp {
            netns::require("bird", "bird2")?;
            netns::require("birdc", "bird2")?;
            netns::require("nft", "nftables")?;
        }
        // Unique per process and per lab, so labs in parallel tests never share a name.
        static LABS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = LABS.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{n}", std::process::id() % 10_000);
        let dir = std::env::temp_dir().join(format!("sluice-lab-{id}"));
        std::fs::create_dir_all(&dir).map_err(|e| LabError {
            command: format!("mkdir {}", dir.display()),
            detail: e.to_string(),
        })?;
        let ns = |role: &str| Netns::create(&format!("sl{id}{role}"));
        let client = ns("cl")?;
        let router = ns("rt")?;
        let lb = ns("lb")?;
        let mut more_lbs = Vec::new();
        for k in 1..n_lbs {
            more_lbs.push(ns(&format!("lb{}", k + 1))?);
        }
        let mut backends = Vec::new();
        for i in 0..options.backends {
            backends.push(ns(&format!("be{}", i + 1))?);
        }
        let mut lab = Lab {
            id,
            dir,
            client,
            router,
            lb,
            more_lbs,
            backends,
            options,
            servers: Vec::new(),
            appliances: (0..n_lbs).map(|_| None).collect(),
            bird: None,
        };
        lab.wire()?;
        if bgp {
            let addrs: Vec<IpAddr> = (0..n_lbs).map(|k| appliance_addr(k, false)).collect();
            let conf = bird::config(ROUTER_LAN4, &lab.dir.join("bird.log"), &addrs);
            lab.bird = Some(bird::Bird::start(&lab.router, &lab.dir, &conf)?);
        }
        lab.start_backends()?;
        Ok(lab)
    }

    /// How many appliances this lab has.
    pub fn appliance_count(&self) -> usize {
        1 + self.more_lbs.len()
    }

    /// Whether the router learns the VIPs over BGP (else: static routes to `lb1`).
    pub fn bgp(&self) -> bool {
        self.bird.is_some()
    }

    /// The namespace of appliance `k` (0-based; 0 is [`Lab::lb`]).
    pub fn appliance_ns(&self, k: usize) -> &Netns {
        if k == 0 {
            &self.lb
        } else {
            &self.more_lbs[k - 1]
        }
    }

    /// The modes appliance `k` serves: all of the lab's for `lb1`, only the stateless-return
    /// ones (DR, VXLAN) for the others, whose NAT replies would return through `lb1`.
    pub fn modes_of(&self, k: usize) -> Vec<LabMode> {
        self.options
            .modes
            .iter()
            .copied()
            .filter(|m| k == 0 || matches!(m, LabMode::Dr | LabMode::Vxlan))
            .collect()
    }

    fn tmp_if(&self, n: &str) -> String {
        format!("sl{}{n}", self.id)
    }

    fn wire(&mut self) -> Result<()> {
        let (r, c, lb) = (&self.router, &self.client, &self.lb);
        for ns in [r, c, lb]
            .into_iter()
            .chain(&self.more_lbs)
            .chain(&self.backends)
        {
            ns.sh("sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0")?;
        }
        r.sh("sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1")?;
        r.run(&["ip", "link", "add", "lan", "type", "bridge"])?;
        r.run(&["ip", "link", "set", "lan", "up"])?;
        r.run(&[
            "ip",
            "addr",
            "add",
            &format!("{ROUTER_LAN4}/24"),
            "dev",
            "lan",
        ])?;
        r.run(&[
            "ip",
            "addr",
            "add",
            &format!("{ROUTER_LAN6}/64"),
            "dev",
            "lan",
        ])?;

        veth(c, "eth0", r, "client", &self.tmp_if("c"))?;
        c.run(&["ip", "addr", "add", "198.51.100.2/24", "dev", "eth0"])?;
        c.run(&["ip", "addr", "add", "2001:db8:c::2/64", "dev", "eth0"])?;
        c.run(&["ip", "route", "add", "default", "via", "198.51.100.1"])?;
        c.run(&[
            "ip",
            "-6",
            "route",
            "add",
            "default",
            "via",
            "2001:db8:c::1",
        ])?;
        r.run(&["ip", "addr", "add", "198.51.100.1/24", "dev", "client"])?;
        r.run(&["ip", "addr", "add", "2001:db8:c::1/64", "dev", "client"])?;

        veth(lb, "eth0", r, "lb1", &self.tmp_if("l"))?;
        r.run(&["ip", "link", "set", "lb1", "master", "lan"])?;
        xdp_tx_ready(r, "lb1")?;
        lb.run(&["ip", "addr", "add", &format!("{LB_LAN4}/24"), "dev", "eth0"])?;
        lb.run(&["ip", "addr", "add", &format!("{LB_LAN6}/64"), "dev", "eth0"])?;
        // The FullNAT source addresses: held by the appliance so the kernel answers ARP/ND
        // for them; the XDP program steers traffic to them into the engine.
        lb.run(&["ip", "addr", "add", &format!("{SNAT4}/32"), "dev", "eth0"])?;
        // Deprecated (preferred_lft 0) so that source selection never picks it for the
        // appliance's own IPv6 traffic: it shares more leading bits with the backends than
        // LB_LAN6 does, and replies to it are steered into the engine as FullNAT returns,
        // which silently broke every IPv6 health probe.
        lb.run(&[
            "ip",
            "addr",
            "add",
            &format!("{SNAT6}/128"),
            "dev",
            "eth0",
            "preferred_lft",
            "0",
        ])?;
        lb.run(&["ip", "route", "add", "default", "via", ROUTER_LAN4])?;
        lb.run(&["ip", "-6", "route", "add", "default", "via", ROUTER_LAN6])?;

        for (j, other) in self.more_lbs.iter().enumerate() {
            let k = j + 1;
            let port = format!("lb{}", k + 1);
            veth(other, "eth0", r, &port, &self.tmp_if(&format!("l{k}")))?;
            r.run(&["ip", "link", "set", &port, "master", "lan"])?;
            xdp_tx_ready(r, &port)?;
            let (a4, a6) = (appliance_addr(k, false), appliance_addr(k, true));
            other.run(&["ip", "addr", "add", &format!("{a4}/24"), "dev", "eth0"])?;
            other.run(&["ip", "addr", "add", &format!("{a6}/64"), "dev", "eth0"])?;
            other.run(&["ip", "route", "add", "default", "via", ROUTER_LAN4])?;
            other.run(&["ip", "-6", "route", "add", "default", "via", ROUTER_LAN6])?;
        }

        if self.options.bgp == Some(true) {
            // ECMP by L4 ports too, so the flows of one client spread over the appliances.
            r.sh("sysctl -qw net.ipv4.fib_multipath_hash_policy=1 \
                  net.ipv6.fib_multipath_hash_policy=1")?;
            // Count the client's packets by the next hop ECMP chose: the only place that
            // knows which appliance carries which flow without asking the appliances.
            let mut nft = String::from(
                "table inet sluicelab {\n  chain counts {\n    type filter hook forward priority 0; policy accept;\n",
            );
            for k in 0..1 + self.more_lbs.len() {
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
            r.run(&["nft", "-f", &path.to_string_lossy()])?;
        } else {
            for mode in &self.options.modes {
                for v6 in [false, true] {
                    let vip = mode.vip(v6).to_string();
                    let via = if v6 { LB_LAN6 } else { LB_LAN4 };
                    r.run(&["ip", "route", "add", &vip, "via", via])?;
                }
            }
        }

        for (i, be) in self.backends.iter().enumerate() {
            veth(
                be,
                "eth0",
                r,
                &format!("be{}", i + 1),
                &self.tmp_if(&format!("b{i}")),
            )?;
            r.run(&[
                "ip",
                "link",
                "set",
                &format!("be{}", i + 1),
                "master",
                "lan",
            ])?;
            let (a4, a6) = (backend_addr(i, false), backend_addr(i, true));
            be.run(&["ip", "addr", "add", &format!("{a4}/24"), "dev", "eth0"])?;
            be.run(&["ip", "addr", "add", &format!("{a6}/64"), "dev", "eth0"])?;
            be.run(&["ip", "route", "add", "default", "via", ROUTER_LAN4])?;
            be.run(&["ip", "-6", "route", "add", "default", "via", ROUTER_LAN6])?;
            // NAT: replies from the backend port 8080 must return through the appliance.
            be.run(&[
                "ip", "route", "add", "default", "via", LB_LAN4, "table", "100",
            ])?;
            be.run(&[
                "ip", "-6", "route", "add", "default", "via", LB_LAN6, "table", "100",
            ])?;
            be.run(&["ip", "rule", "add", "sport", "8080", "lookup", "100"])?;
            be.run(&["ip", "-6", "rule", "add", "sport", "8080", "lookup", "100"])?;
            // DR and tunnel: the backend holds the VIP on lo and must not answer ARP for it.
            be.sh(
                "sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 \
                   net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0",
            )?;
            for mode in [LabMode::Dr, LabMode::Vxlan] {
                be.run(&[
                    "ip",
                    "addr",
                    "add",
                    &format!("{}/32", mode.vip(false)),
                    "dev",
                    "lo",
                ])?;
                be.run(&[
                    "ip",
                    "addr",
                    "add",
                    &format!("{}/128", mode.vip(true)),
                    "dev",
                    "lo",
                ])?;
            }
            // VXLAN: decapsulate on vx4/vx6. The appliance sets the inner destination MAC to
            // the backend's own MAC, so the vxlan devices take eth0's address.
            let mac_out = be.run(&["cat", "/sys/class/net/eth0/address"])?;
            let mac = String::from_utf8_lossy(&mac_out.stdout).trim().to_string();
            for (dev, local) in [("vx4", &a4), ("vx6", &a6)] {
                be.run(&[
                    "ip",
                    "link",
                    "add",
                    dev,
                    "type",
                    "vxlan",
                    "id",
                    &LAB_VNI.to_string(),
                    "dstport",
                    "4789",
                    "local",
                    local,
                    "nolearning",
                ])?;
                be.run(&["ip", "link", "set", dev, "address", &mac])?;
                be.run(&["ip", "link", "set", dev, "up"])?;
                be.sh(&format!("sysctl -qw net.ipv4.conf.{dev}.rp_filter=0"))?;
            }
        }
        Ok(())
    }

    fn start_backends(&mut self) -> Result<()> {
        let script = self.dir.join("backend.py");
        std::fs::write(&script, BACKEND_PY).map_err(|e| LabError {
            command: format!("write {}", script.display()),
            detail: e.to_string(),
        })?;
        for i in 0..self.backends.len() {
            self.start_backend(i)?;
        }
        Ok(())
    }

    /// Starts backend `i`'s servers (again) and waits until they listen.
    pub fn start_backend(&mut self, i: usize) -> Result<()> {
        let script = self.dir.join("backend.py").to_string_lossy().into_owned();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("be{}.log", i + 1)))
            .ok();
        let vips: Vec<String> = [LabMode::Dr, LabMode::Vxlan]
            .iter()
            .flat_map(|m| [m.vip(false).to_string(), m.vip(true).to_string()])
            .collect();
        let be = &self.backends[i];
        let child = be.spawn(
            &[
                "python3",
                &script,
                &format!("be{}", i + 1),
                "80,8080",
                &vips.join(","),
            ],
            log,
        )?;
        self.servers.resize_with(self.backends.len(), || None);
        self.servers[i] = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr: SocketAddr = format!("{}:8080", backend_addr(i, false))
            .parse()
            .expect("literal");
        let ok = be
            .in_thread(move || {
                loop {
                    if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                        return true;
                    }
                    if Instant::now() > deadline {
                        return false;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })?
            .join()
            .unwrap_or(false);
        if !ok {
            return Err(LabError {
                command: format!("backend be{}", i + 1),
                detail: "did not start listening within 20 s (see its log)".into(),
            });
        }
        Ok(())
    }

    /// Stops backend `i`'s servers (its namespace and addresses stay).
    pub fn stop_backend(&mut self, i: usize) {
        if let Some(mut c) = self.servers.get_mut(i).and_then(Option::take) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The first appliance's configuration for this lab.
    pub fn config(&self, api_socket: &Path) -> String {
        self.config_for(0, api_socket)
    }

    /// Appliance `k`'s configuration: its VIPs ([`Lab::modes_of`]) and, in a BGP lab, a
    /// `[bgp]` section peering with the router from its LAN address.
    pub fn config_for(&self, k: usize, api_socket: &Path) -> String {
        let mut s = String::new();
        let flow_cache = match self.options.flow_cache {
            Some(on) => format!("flow_cache = {on}\n"),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "[appliance]\nname = \"lab-lb{}\"\ninterfaces = [\"eth0\"]\nxdp_mode = \"auto\"\n\
             umem_frames = 4096\nring_size = 1024\nconntrack_capacity = 65536\n{flow_cache}\n\
             [api]\nsocket = \"{}\"\nmetrics = \"\"\n",
            k + 1,
            api_socket.display()
        );
        if self.bgp() {
            // One IPv4 session carries both families: IPv6 VIPs get the appliance's IPv6
            // LAN address as next hop, which the router reaches on the same bridge.
            let _ = writeln!(
                s,
                "[bgp]\nasn = {}\nrouter_id = \"{a4}\"\ngraceful_shutdown_wait = \"2s\"\n\n\
                 [[bgp.peer]]\naddress = \"{ROUTER_LAN4}\"\nasn = {}\nhold_time = \"{}s\"\n\
                 connect_retry = \"1s\"\nsource = \"{a4}\"\nnext_hop = \"{a6}\"\n",
                bird::APPLIANCE_ASN,
                bird::ROUTER_ASN,
                bird::HOLD_TIME_SECS,
                a4 = appliance_addr(k, false),
                a6 = appliance_addr(k, true),
            );
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
                    match mode {
                        LabMode::Nat => s.push_str("mode = \"nat\"\n"),
                        LabMode::FullNat => {
                            let snat = if v6 { SNAT6 } else { SNAT4 };
                            let _ = writeln!(s, "mode = \"fullnat\"\nsnat = [\"{snat}\"]");
                        }
                        LabMode::Dr => s.push_str("mode = \"dr\"\n"),
                        LabMode::Vxlan => {
                            let _ = writeln!(
                                s,
                                "mode = \"tunnel\"\ntunnel = \"vxlan\"\nvni = {LAB_VNI}"
                            );
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
                }
            }
        }
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

    /// Starts `sluice run` in the appliance namespace with the lab config (unless a config
    /// was written already); its output goes to `sluice.log` in the lab directory.
    pub fn start_appliance(&mut self, sluice: &Path) -> Result<PathBuf> {
        self.start_appliance_at(0, sluice)
    }

    /// Starts every appliance and waits (up to 20 s) until each reports its health-checked
    /// backends up; returns their log paths in order.
    pub fn start_appliances(&mut self, sluice: &Path) -> Result<Vec<PathBuf>> {
        let logs = self.spawn_appliances(sluice)?;
        for k in 0..self.appliance_count() {
            self.wait_healthy(k, STARTUP_HEALTH_WAIT);
        }
        Ok(logs)
    }

    /// Starts every appliance without waiting for anything; returns their log paths.
    pub fn spawn_appliances(&mut self, sluice: &Path) -> Result<Vec<PathBuf>> {
        (0..self.appliance_count())
            .map(|k| self.spawn_appliance_at(k, sluice))
            .collect()
    }

    /// Starts `sluice run` for appliance `k` (see [`Lab::spawn_appliance_at`]) and waits up to
    /// 20 s until it reports every health-checked backend up, so that the first flows see
    /// the whole pool (a flow started while backends still rise is pinned to a smaller
    /// ring). Returns early, without an error, when the appliance exits or the wait times
    /// out: the caller's own traffic check reports what is wrong.
    pub fn start_appliance_at(&mut self, k: usize, sluice: &Path) -> Result<PathBuf> {
        let log = self.spawn_appliance_at(k, sluice)?;
        self.wait_healthy(k, STARTUP_HEALTH_WAIT);
        Ok(log)
    }

    /// Starts `sluice run` for appliance `k` with its lab config (unless a config was
    /// written already) and returns at once; its output goes to [`Lab::log_path_at`].
    pub fn spawn_appliance_at(&mut self, k: usize, sluice: &Path) -> Result<PathBuf> {
        let cfg = self.config_path_at(k);
        if !cfg.exists() {
            self.write_config_at(k, &self.config_for(k, &self.api_socket_at(k)))?;
        }
        let log_path = self.log_path_at(k);
        let log = std::fs::File::create(&log_path).ok();
        let child = self.appliance_ns(k).spawn(
            &[
                &sluice.to_string_lossy(),
                "run",
                "--config",
                &cfg.to_string_lossy(),
            ],
            log,
        )?;
        self.appliances[k] = Some(child);
        Ok(log_path)
    }

    /// The process id of appliance `k`'s `sluice run`, while the lab runs it.
    pub fn appliance_pid(&self, k: usize) -> Option<u32> {
        self.appliances.get(k)?.as_ref().map(Child::id)
    }

    fn signal_appliance(&self, k: usize, signal: &str) -> bool {
        let Some(pid) = self.appliance_pid(k) else {
            return false;
        };
        std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Asks the appliance to reload its config file (SIGHUP).
    pub fn reload(&self) -> bool {
        self.signal_appliance(0, "-HUP")
    }

    /// Sends SIGTERM to the appliance and waits for it to exit; returns whether it exited
    /// cleanly.
    pub fn stop_appliance(&mut self) -> bool {
        self.stop_appliance_at(0)
    }

    /// Sends SIGTERM to appliance `k` and waits (up to 15 s) for it to exit; returns whether
    /// it exited cleanly (status 0).
    pub fn stop_appliance_at(&mut self, k: usize) -> bool {
        self.terminate_appliance_at(k) && self.wait_appliance_at(k, Duration::from_secs(15))
    }

    /// Sends SIGTERM to appliance `k` without waiting (it shuts down gracefully: BGP
    /// GRACEFUL_SHUTDOWN, withdraw, datapath stop); returns whether the signal was sent.
    pub fn terminate_appliance_at(&self, k: usize) -> bool {
        self.signal_appliance(k, "-TERM")
    }

    /// Waits up to `timeout` for appliance `k` to exit and reaps it; returns whether it
    /// exited with status 0. Kills it (and returns false) when it outlives `timeout`.
    pub fn wait_appliance_at(&mut self, k: usize, timeout: Duration) -> bool {
        let Some(mut child) = self.appliances.get_mut(k).and_then(Option::take) else {
            return false;
        };
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return false;
                }
            }
        }
    }

    /// Kills appliance `k` hard (SIGKILL: no graceful shutdown, no withdraw, no cleanup)
    /// and reaps it; returns whether there was one to kill.
    pub fn kill_appliance_at(&mut self, k: usize) -> bool {
        let Some(mut child) = self.appliances.get_mut(k).and_then(Option::take) else {
            return false;
        };
        let killed = child.kill().is_ok();
        let _ = child.wait();
        killed
    }

    /// Waits until appliance `k` reports every backend it health-checks up (from its log:
    /// each `health: KEY: down -> up` not followed by `KEY: up -> down`, counted against
    /// the distinct (check, backend) pairs of its config file); returns how long that took,
    /// or `None` on timeout or when the appliance is not running.
    ///
    /// Flows that start while an appliance still warms up are pinned (conntrack) to a ring
    /// built from fewer backends than the other appliances use, so tests that move flows
    /// between appliances wait for this first.
    pub fn wait_healthy(&self, k: usize, timeout: Duration) -> Option<Duration> {
        let start = Instant::now();
        let expected = match crate::config::load(&self.config_path_at(k)) {
            Ok(cfg) => {
                let mut keys: Vec<(String, IpAddr, u16)> = cfg
                    .vips
                    .iter()
                    .filter_map(|v| v.health_check.as_ref().map(|c| (c, &v.backends)))
                    .flat_map(|(c, bs)| {
                        bs.iter()
                            .filter(|b| b.state != crate::config::BackendState::Disabled)
                            .map(|b| (c.clone(), b.address, b.port))
                    })
                    .collect();
                keys.sort_unstable();
                keys.dedup();
                keys.len()
            }
            // A config the appliance rejects: it will not get healthy, say so at once.
            Err(_) => return None,
        };
        loop {
            let log = std::fs::read_to_string(self.log_path_at(k)).unwrap_or_default();
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
            if up.values().filter(|u| **u).count() >= expected {
                return Some(start.elapsed());
            }
            if start.elapsed() >= timeout || !self.appliance_alive(k) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether appliance `k`'s process runs (exists and is not a zombie awaiting reaping).
    fn appliance_alive(&self, k: usize) -> bool {
        let Some(pid) = self.appliance_pid(k) else {
            return false;
        };
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|st| st.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
            .unwrap_or(false)
    }

    /// The router's kernel route to `vip` as `ip route show` prints it (empty when none).
    pub fn router_route(&self, vip: IpAddr) -> Result<String> {
        let fam = if vip.is_ipv6() { "-6" } else { "-4" };
        let out = self
            .router
            .run(&["ip", fam, "route", "show", &vip.to_string()])?;
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
            .run(&["nft", "list", "chain", "inet", "sluicelab", "counts"])?;
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
        self.from_client(move || {
            let deadline = Instant::now() + timeout;
            while Instant::now() < deadline {
                if http_get(addr, "/whoami", Duration::from_millis(500)).is_ok() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            false
        })
    }
}

/// File-name suffix of appliance `k`: none for the first (the single-appliance names stay
/// what they always were), `2`, `3`, ... after it.
fn suffix(k: usize) -> String {
    if k == 0 {
        String::new()
    } else {
        (k + 1).to_string()
    }
}

/// One HTTP/1.1 GET over a new connection; returns the status and body.
pub fn http_get(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of headers"))?;
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
    Ok((status, buf[split + 4..].to_vec()))
}

/// GET /blob, reading `pace` apart in 8 KB steps so that the transfer lasts seconds; sends
/// the serving backend's name once the headers arrive and returns the body.
pub fn slow_download(
    addr: SocketAddr,
    pace: Duration,
    started: std::sync::mpsc::Sender<String>,
) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    // Long enough for the router to drop a dead next hop and TCP to retransmit after it.
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET /blob HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n"
    )?;
    let mut data = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut told = false;
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&chunk[..n]);
        if !told && let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_string();
            let name = head
                .lines()
                .find_map(|l| l.strip_prefix("X-Backend: "))
                .unwrap_or("?")
                .to_string();
            let _ = started.send(name);
            told = true;
        }
        std::thread::sleep(pace);
    }
    let end = data
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of headers"))?;
    Ok(data[end + 4..].to_vec())
}

/// One UDP request/response; returns the reply.
pub fn udp_ask(addr: SocketAddr, payload: &[u8], timeout: Duration) -> std::io::Result<Vec<u8>> {
    let bind: SocketAddr = if addr.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let s = UdpSocket::bind(bind)?;
    s.set_read_timeout(Some(timeout))?;
    s.connect(addr)?;
    s.send(payload)?;
    let mut buf = [0u8; 2048];
    let n = s.recv(&mut buf)?;
    Ok(buf[..n].to_vec())
}

/// What the client saw through one VIP.
#[derive(Debug, Clone, Default)]
pub struct VipReport {
    pub vip: String,
    pub mode: String,
    pub requests: usize,
    pub per_backend: BTreeMap<String, usize>,
    pub failures: usize,
    pub first_error: Option<String>,
    pub blob_intact: bool,
    pub udp_replies: usize,
    pub udp_sent: usize,
}

impl VipReport {
    /// Everything answered, the blob arrived intact and UDP answered.
    pub fn ok(&self) -> bool {
        self.failures == 0 && self.blob_intact && self.udp_replies == self.udp_sent
    }
}

/// Sends `requests` HTTP requests, one 1 MB download and a few UDP requests through a VIP.
/// Run it from the client namespace.
pub fn exercise_vip(mode: LabMode, v6: bool, requests: usize, stop: Arc<AtomicBool>) -> VipReport {
    let vip = mode.vip(v6);
    let addr = SocketAddr::new(vip, 80);
    let mut r = VipReport {
        vip: addr.to_string(),
        mode: mode.name().into(),
        requests,
        ..VipReport::default()
    };
    let timeout = Duration::from_secs(3);
    for _ in 0..requests {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match http_get(addr, "/whoami", timeout) {
            Ok((200, body)) => {
                *r.per_backend
                    .entry(String::from_utf8_lossy(&body).into_owned())
                    .or_default() += 1
            }
            Ok((status, _)) => {
                r.failures += 1;
                r.first_error.get_or_insert(format!("status {status}"));
            }
            Err(e) => {
                r.failures += 1;
                r.first_error.get_or_insert(e.to_string());
            }
        }
    }
    match http_get(addr, "/blob", Duration::from_secs(10)) {
        Ok((200, body)) => r.blob_intact = body == blob(),
        Ok((status, _)) => {
            r.first_error
                .get_or_insert(format!("blob: status {status}"));
        }
        Err(e) => {
            r.first_error.get_or_insert(format!("blob: {e}"));
        }
    }
    for i in 0..4 {
        r.udp_sent += 1;
        match udp_ask(addr, format!("ping{i}").as_bytes(), timeout) {
            Ok(reply) if reply.ends_with(format!(":ping{i}").as_bytes()) => r.udp_replies += 1,
            Ok(reply) => {
                r.first_error.get_or_insert(format!(
                    "udp: unexpected reply {:?}",
                    String::from_utf8_lossy(&reply)
                ));
            }
            Err(e) => {
                r.first_error.get_or_insert(format!("udp: {e}"));
            }
        }
    }
    r
}

/// Formats the reports as the table `sluice lab` prints.
pub fn format_reports(reports: &[VipReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<14} {:<22} {:>5} {:>6}  {:<28} {:<9} udp",
        "mode", "vip", "ok", "failed", "requests per backend", "1MB body"
    );
    for r in reports {
        let spread: Vec<String> = r
            .per_backend
            .iter()
            .map(|(b, n)| format!("{b}={n}"))
            .collect();
        let _ = writeln!(
            s,
            "{:<14} {:<22} {:>5} {:>6}  {:<28} {:<9} {}/{}{}",
            r.mode,
            r.vip,
            r.requests - r.failures,
            r.failures,
            spread.join(" "),
            if r.blob_intact { "intact" } else { "BROKEN" },
            r.udp_replies,
            r.udp_sent,
            r.first_error
                .as_ref()
                .map(|e| format!("  ({e})"))
                .unwrap_or_default()
        );
    }
    s
}

/// `sluice lab`: build, start the appliances, exercise every VIP, report, tear down.
/// Returns whether every VIP worked.
/// Turns GRO on at the router's end of an appliance's veth: a veth only accepts frames that
/// its peer's XDP program sends back (XDP_TX or a redirect, the flow cache's fast path) when
/// the receiving end runs NAPI, which GRO (or an XDP program) enables; otherwise the kernel
/// drops them. Real NICs need nothing like it.
fn xdp_tx_ready(ns: &Netns, ifname: &str) -> Result<()> {
    ns.run(&["ethtool", "-K", ifname, "gro", "on"]).map(|_| ())
}

/// Runs `sluice console` on lb1's API in this terminal while the client sends a request to
/// `mode`'s IPv4 VIP every 100 ms, so the console has traffic to show; returns when the
/// operator quits it.
fn open_console(lab: &Lab, sluice: &Path, mode: LabMode) -> Result<()> {
    println!(
        "lab: opening the console on lb1 (background HTTP to the {} VIP; q quits and tears \
         the lab down)",
        mode.name()
    );
    std::thread::sleep(Duration::from_secs(2));
    let quit = Arc::new(AtomicBool::new(false));
    let traffic = {
        let quit = Arc::clone(&quit);
        lab.client.in_thread(move || {
            let addr = SocketAddr::new(mode.vip(false), 80);
            while !quit.load(Ordering::Relaxed) {
                let _ = http_get(addr, "/whoami", Duration::from_millis(500));
                std::thread::sleep(Duration::from_millis(100));
            }
        })?
    };
    let status = std::process::Command::new(sluice)
        .arg("console")
        .arg("--socket")
        .arg(lab.api_socket_at(0))
        .status();
    quit.store(true, Ordering::Relaxed);
    let _ = traffic.join();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(LabError {
            command: "sluice console".into(),
            detail: format!("exited with {s}"),
        }),
        Err(e) => Err(LabError {
            command: "sluice console".into(),
            detail: e.to_string(),
        }),
    }
}

pub fn run_lab(options: LabOptions, stop: Arc<AtomicBool>) -> Result<bool> {
    let sluice = std::env::current_exe().map_err(|e| LabError {
        command: "current_exe".into(),
        detail: e.to_string(),
    })?;
    let mut options = options;
    options.appliances = Some(options.appliances.unwrap_or(CLI_APPLIANCES));
    let n = options.appliances.unwrap_or(1);
    let names: Vec<String> = (1..=n).map(|k| format!("lb{k}")).collect();
    println!(
        "lab: building namespaces (client, router, {}, {} backends)",
        names.join(", "),
        options.backends
    );
    let mut lab = Lab::build(options)?;
    println!(
        "lab: namespaces sl{}* up, backends serving{}; starting sluice run on {}",
        lab.id,
        if lab.bgp() {
            ", BIRD on the router"
        } else {
            ""
        },
        names.join(", ")
    );
    let logs = lab.spawn_appliances(&sluice)?;
    let tails = |logs: &[PathBuf]| {
        let mut s = String::new();
        for (k, log) in logs.iter().enumerate() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let _ = writeln!(s, "lb{} log (last lines):", k + 1);
            for line in text
                .lines()
                .rev()
                .take(25)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                let _ = writeln!(s, "  {line}");
            }
        }
        s
    };
    if lab.bgp() {
        let waited = wait_for_routes(&lab, Duration::from_secs(30));
        match waited {
            Some(t) => println!(
                "lab: router has every VIP route from BGP {:.1} s after start",
                t.as_secs_f64()
            ),
            None => {
                let bird = lab.birdc(&["show", "protocols"]).unwrap_or_default();
                return Err(LabError {
                    command: "bgp".into(),
                    detail: format!(
                        "the router did not learn every VIP within 30 s\n{bird}\n{}",
                        tails(&logs)
                    ),
                });
            }
        }
        for mode in [LabMode::Dr, LabMode::Vxlan] {
            if !lab.options.modes.contains(&mode) {
                continue;
            }
            for v6 in [false, true] {
                let route = lab.router_route(mode.vip(v6)).unwrap_or_default();
                println!("router: ip route show {}   ({})", mode.vip(v6), mode.name());
                for line in route.lines() {
                    println!("  {line}");
                }
            }
        }
    }
    for k in 0..lab.appliance_count() {
        if lab.wait_healthy(k, Duration::from_secs(20)).is_none() {
            println!(
                "lab: lb{} still has backends down after 20 s (see its log)",
                k + 1
            );
        }
    }
    let first = lab.options.modes.first().copied().unwrap_or(LabMode::Nat);
    let ready = lab.wait_vip(
        SocketAddr::new(first.vip(false), 80),
        Duration::from_secs(20),
    )?;
    if !ready {
        return Err(LabError {
            command: "sluice run".into(),
            detail: format!("the first VIP did not answer within 20 s\n{}", tails(&logs)),
        });
    }
    let packets_before: Vec<(u64, u64)> = (0..lab.appliance_count())
        .map(|k| lab.client_packets_to(k).unwrap_or_default())
        .collect();
    let mut reports = Vec::new();
    for mode in lab.options.modes.clone() {
        for v6 in [false, true] {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let (n, st) = (lab.options.requests, stop.clone());
            reports.push(lab.from_client(move || exercise_vip(mode, v6, n, st))?);
        }
    }
    println!("\n{}", format_reports(&reports));
    if lab.bgp() {
        let shares: Vec<String> = (0..lab.appliance_count())
            .map(|k| {
                let (v4, v6) = lab.client_packets_to(k).unwrap_or_default();
                let (b4, b6) = packets_before[k];
                format!(
                    "lb{}: {} IPv4 + {} IPv6",
                    k + 1,
                    v4.saturating_sub(b4),
                    v6.saturating_sub(b6)
                )
            })
            .collect();
        println!(
            "client packets the router forwarded to each appliance (ECMP): {}\n\
             (NAT and FullNAT VIPs are served by lb1 only: their replies must return through it)\n",
            shares.join(", ")
        );
    }
    if lab.options.console && !stop.load(Ordering::Relaxed) {
        open_console(&lab, &sluice, first)?;
    }
    let mut clean = true;
    for k in 0..lab.appliance_count() {
        clean &= lab.stop_appliance_at(k);
    }
    print!("{}", tails(&logs));
    println!(
        "lab: appliances exited {}; tearing down",
        if clean { "cleanly" } else { "with an error" }
    );
    Ok(clean && reports.iter().all(VipReport::ok))
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
