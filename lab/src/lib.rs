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
//!
//! The lab knows the appliance only as the `sluice` binary it is given and the config text it
//! writes for it, so it depends on nothing of the appliance's library; [`netns`] is also the
//! integration tests' namespace toolkit.

#![forbid(unsafe_code)]

mod appliances;
mod backends;
pub mod bird;
mod config;
mod console;
pub mod etcd;
pub mod netns;
mod run;
#[cfg(feature = "testing")]
pub mod testing;
mod topology;
mod traffic;
mod wait;

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::Ordering;
use std::time::Duration;

use netns::{LabError, Netns, Result};

pub use appliances::{Appliance, spawn_sluice_run};
pub use run::run_lab;
pub use traffic::{
    BLOB_SIZE, VipReport, blob, crc32, exercise_vip, format_reports, http_get, http_request,
    slow_download, slow_download_for, udp_ask, upload, wait_answer,
};
pub use wait::wait_for_routes;

/// VXLAN network identifier used between the appliance and the lab backends.
pub const LAB_VNI: u32 = 42;

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
pub(crate) const STARTUP_HEALTH_WAIT: Duration = Duration::from_secs(20);

/// Most appliances a lab can hold (their LAN addresses are 10.0.0.10 to 10.0.0.19).
pub const MAX_APPLIANCES: usize = 10;

/// How many appliances `sluice lab` runs when [`LabOptions::appliances`] is `None`.
pub const CLI_APPLIANCES: usize = 2;
pub const SNAT4: &str = "10.0.0.100";
pub const SNAT6: &str = "2001:db8:a::100";

/// Appliance `k`'s own FullNAT source address in a lab with [`Lab::routed_snat`]: outside
/// the LAN, so the backends reach it through the router, which learns it over BGP.
pub fn snat_addr(k: usize, v6: bool) -> IpAddr {
    let text = if v6 {
        format!("{}{}", ROUTED_SNAT6, k + 1)
    } else {
        format!("{}{}", ROUTED_SNAT4, k + 1)
    };
    text.parse().expect("lab SNAT addresses are literals")
}
/// The prefixes of [`snat_addr`]'s addresses (a /24 and a /64).
pub(crate) const ROUTED_SNAT4: &str = "10.0.100.";
pub(crate) const ROUTED_SNAT6: &str = "2001:db8:64::";

/// LAN address of appliance `k` (0-based: `lb1` is 0 and holds [`LB_LAN4`] / [`LB_LAN6`]).
pub fn appliance_addr(k: usize, v6: bool) -> IpAddr {
    let text = if v6 {
        format!("2001:db8:a::{}", 10 + k)
    } else {
        format!("10.0.0.{}", 10 + k)
    };
    text.parse().expect("lab appliance addresses are literals")
}

/// Backend `i`'s address in the lab's backend subnet (IPv6 or IPv4).
pub fn backend_addr(i: usize, v6: bool) -> String {
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
    /// Rx and tx queues of every lab veth (client, appliances, backends, and the router's
    /// ends), so the appliance runs one worker per queue and the senders spread flows over
    /// them (a veth frame arrives on the queue its sender transmitted it on).
    pub queues: u32,
    /// The first letters of every namespace name (two are best: names have 15 bytes), so a
    /// test's namespaces are told from other tests' in `ip netns list`.
    pub prefix: &'static str,
    /// Connection sync between the appliances: a `[sync]` section in each config (listen
    /// on its LAN address, port [`SYNC_PORT`], the others as peers, one key file).
    pub sync: bool,
    /// `inhibit_on_failure = true` on every VIP: a backend whose checks fail keeps its
    /// established flows. For tests of something else than health (takeovers, sync) on a
    /// loaded machine, where a check's timeout would otherwise move a backend's flows and
    /// reset them (as the policy says, not as the thing tested did).
    pub inhibit_on_failure: bool,
    /// BFD on every BGP session (the router's and each appliance's, [`BFD_INTERVAL`] x
    /// [`BFD_MULTIPLIER`]), so a dead or frozen appliance is dropped in about a second
    /// rather than the hold time.
    pub bfd: bool,
}

/// The lab's BFD interval when [`LabOptions::bfd`] is on: slow enough for a loaded 2-core
/// machine not to drop a live appliance.
pub const BFD_INTERVAL: Duration = Duration::from_millis(300);
/// The lab's BFD detection multiplier.
pub const BFD_MULTIPLIER: u32 = 3;

/// The UDP port of the lab appliances' connection sync.
pub const SYNC_PORT: u16 = 7946;

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
            queues: 1,
            prefix: "sl",
            sync: false,
            inhibit_on_failure: false,
            bfd: false,
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
    appliances: Vec<Option<Appliance>>,
    bird: Option<bird::Bird>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.appliances.clear();
        for c in self.servers.iter_mut().flatten() {
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
        let (id, dir) = lab_dir()?;
        let prefix = options.prefix;
        let ns = |role: &str| Netns::create(&format!("{prefix}{id}{role}"));
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
        lab.write_sync_key()?;
        lab.wire()?;
        if bgp {
            let addrs: Vec<IpAddr> = (0..n_lbs).map(|k| appliance_addr(k, false)).collect();
            let bfd = lab.options.bfd.then_some((BFD_INTERVAL, BFD_MULTIPLIER));
            let conf = bird::config(ROUTER_LAN4, &lab.dir.join("bird.log"), &addrs, bfd);
            lab.bird = Some(bird::Bird::start(&lab.router, &lab.dir, &conf)?);
        }
        lab.start_backends()?;
        Ok(lab)
    }

    /// The key file of the appliances' `[sync]` sections, when the lab syncs.
    fn write_sync_key(&self) -> Result<()> {
        if !self.options.sync {
            return Ok(());
        }
        let key = self.dir.join("sync.key");
        std::fs::write(
            &key,
            format!("lab sync key {}, at least 32 bytes long\n", self.id),
        )
        .map_err(|e| LabError {
            command: format!("write {}", key.display()),
            detail: e.to_string(),
        })
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
            .filter(|m| {
                k == 0
                    || matches!(m, LabMode::Dr | LabMode::Vxlan)
                    || (*m == LabMode::FullNat && self.routed_snat())
            })
            .collect()
    }

    /// FullNAT on every appliance: with FullNAT VIPs, `[sync]` and several appliances, each
    /// takes ports on its own SNAT address ([`snat_addr`], `[sync] snat`) and announces the
    /// pool over BGP with its own preferred, so the backends' replies reach the appliance
    /// that took the port, through the router, and a survivor once that one is gone.
    pub fn routed_snat(&self) -> bool {
        self.options.sync
            && self.appliance_count() > 1
            && self.options.modes.contains(&LabMode::FullNat)
    }
}

/// File-name suffix of appliance `k`: none for the first (the single-appliance names stay
/// what they always were), `2`, `3`, ... after it.
/// A short id for the lab's namespace names and a directory of its own: unique per process
/// and per lab, so labs in parallel tests never share a name, and created anew (never an
/// existing one), so a lab of another test process whose short id happens to be the same
/// (two pids equal modulo 10,000, or "12" + "34" and "123" + "4") never shares its files,
/// API socket included.
fn lab_dir() -> std::result::Result<(String, PathBuf), LabError> {
    static LABS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    loop {
        let n = LABS.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{n}", std::process::id() % 10_000);
        let dir = std::env::temp_dir().join(format!("sluice-lab-{id}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((id, dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 10_000 => continue,
            Err(e) => {
                return Err(LabError {
                    command: format!("mkdir {}", dir.display()),
                    detail: e.to_string(),
                });
            }
        }
    }
}

fn suffix(k: usize) -> String {
    if k == 0 {
        String::new()
    } else {
        (k + 1).to_string()
    }
}
