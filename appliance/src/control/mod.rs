//! The control plane of `sluice run`: it computes, the datapath executes.
//!
//! ```text
//! config file --load/validate--> Config --Tables::build + neighbours--> Published (swap)
//!   SIGHUP ----------^                  ^                                  |  workers read
//! health transitions --------------------+                                 v
//! neighbour retries (1 s) ---------------+                     LbHandler per worker
//! ```
//! Every change (a reload, a health transition, a neighbour that resolved) builds a new
//! table version off the packet path and publishes it with one atomic swap. A reload that
//! fails validation changes nothing and logs every error.

pub mod announce;
pub mod handler;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

use crate::config::{self, Backend, Config, Mode, Protocol, Vip};
use crate::datapath::{
    Datapath, DatapathConfig, Proto, ReturnKey, VipKey,
    neigh::{Neighbor as NetNeighbor, Resolver},
};
use crate::lb::{DropReason, Neighbor, Tables};
pub use handler::{LbHandler, Published, Snapshot};

/// Why `sluice run` could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Config(#[from] config::LoadError),
    #[error("sluice run needs root (or CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW and CAP_SYS_ADMIN)")]
    NotRoot,
    #[error("cannot build tables: {0}")]
    Tables(#[from] crate::lb::TableError),
    #[error("datapath: {0}")]
    Datapath(#[from] crate::datapath::DatapathError),
    #[error("netlink: {0}")]
    Netlink(String),
    #[error("signals: {0}")]
    Signal(std::io::Error),
}

/// Health of one backend of one VIP, keyed by VIP name, backend address and port.
type HealthKey = (String, IpAddr, u16);

/// What the control plane knows besides the config.
struct State {
    path: PathBuf,
    config: Arc<Config>,
    version: u64,
    /// Prober verdicts; a backend missing here has no check, or no verdict yet.
    health: HashMap<HealthKey, bool>,
    neighbors: HashMap<IpAddr, Neighbor>,
    gateways: [Option<Neighbor>; 2],
}

impl State {
    fn healthy(&self, v: &Vip, b: &Backend) -> bool {
        let Some(check) = v
            .health_check
            .as_ref()
            .and_then(|n| self.config.health_check(n))
        else {
            return true;
        };
        self.health
            .get(&(v.name.clone(), b.address, b.port))
            .copied()
            .unwrap_or(check.initial == config::InitialHealth::Up)
    }

    fn build(&mut self) -> Result<Tables, crate::lb::TableError> {
        self.version += 1;
        let mut t = Tables::build(&self.config, &|v, b| self.healthy(v, b), self.version)?;
        for slot in 0..t.backends.len() {
            let ip = t.backends[slot].ip();
            if let Some(n) = self.neighbors.get(&ip) {
                t.set_neighbor(slot as u32, *n);
            }
        }
        for (i, g) in self.gateways.iter().enumerate() {
            if let Some(n) = g {
                t.set_gateway(i == 1, *n);
            }
        }
        // Replies to the appliance's own traffic (health probes) are the kernel's, even when
        // they come from a NAT backend's address and port.
        t.set_local_addresses(&crate::datapath::host_addresses());
        Ok(t)
    }
}

fn to_lb(n: &NetNeighbor) -> Neighbor {
    Neighbor {
        ifindex: n.ifindex,
        src_mac: crate::wire::ethernet::MacAddr(n.src_mac),
        dst_mac: crate::wire::ethernet::MacAddr(n.dst_mac),
    }
}

fn proto(p: Protocol) -> Proto {
    match p {
        Protocol::Tcp => Proto::Tcp,
        Protocol::Udp => Proto::Udp,
    }
}

/// What the XDP program must steer to the engine for `config`.
pub fn steering(config: &Config) -> (Vec<VipKey>, Vec<ReturnKey>) {
    let mut vips = Vec::new();
    let mut ret = Vec::new();
    for v in &config.vips {
        vips.push(VipKey {
            addr: v.address,
            port: v.port,
            proto: proto(v.protocol),
        });
        match v.mode {
            Mode::Nat => {
                for b in &v.backends {
                    ret.push(ReturnKey::Backend {
                        addr: b.address,
                        port: b.port,
                        proto: proto(v.protocol),
                    });
                }
            }
            Mode::FullNat => {
                for a in &v.snat {
                    ret.push(ReturnKey::Local {
                        addr: *a,
                        port: 0,
                        proto: proto(v.protocol),
                    });
                }
            }
            Mode::Dr | Mode::Tunnel(_) => {}
        }
    }
    ret.sort_by_key(|k| format!("{k:?}"));
    ret.dedup();
    (vips, ret)
}

/// Default gateways from the kernel's routing tables (procfs), for return traffic to
/// clients: `[v4, v6]`.
fn default_gateways() -> [Option<IpAddr>; 2] {
    let mut out = [None, None];
    if let Ok(t) = std::fs::read_to_string("/proc/net/route") {
        for line in t.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Destination 0.0.0.0: the default route; the gateway is little-endian hex.
            if f.len() > 2
                && f[1] == "00000000"
                && let Ok(g) = u32::from_str_radix(f[2], 16)
            {
                out[0] = Some(IpAddr::V4(std::net::Ipv4Addr::from(g.swap_bytes())));
                break;
            }
        }
    }
    if let Ok(t) = std::fs::read_to_string("/proc/net/ipv6_route") {
        for line in t.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            // dst, dst_len, src, src_len, next hop, metric, refcnt, use, flags, device
            let zero = "0".repeat(32);
            if f.len() >= 10
                && f[0] == zero
                && f[1] == "00"
                && f[4] != zero
                && let Ok(g) = u128::from_str_radix(f[4], 16)
            {
                out[1] = Some(IpAddr::V6(std::net::Ipv6Addr::from(g)));
                break;
            }
        }
    }
    out
}

/// Resolves every backend and gateway not yet known; returns whether anything changed.
async fn resolve_all(resolver: &Resolver, st: &mut State) -> bool {
    let mut changed = false;
    let mut wanted: Vec<IpAddr> = st
        .config
        .vips
        .iter()
        .flat_map(|v| v.backends.iter().map(|b| b.address))
        .collect();
    wanted.sort();
    wanted.dedup();
    for ip in wanted {
        match resolver.resolve(ip).await {
            Ok(n) => {
                let n = to_lb(&n);
                if st.neighbors.insert(ip, n) != Some(n) {
                    changed = true;
                }
            }
            Err(e) => {
                if st.neighbors.remove(&ip).is_some() {
                    changed = true;
                }
                warn!(backend = %ip, "neighbour unresolved: {e}");
            }
        }
    }
    for (i, gw) in default_gateways().into_iter().enumerate() {
        let Some(gw) = gw else { continue };
        match resolver.resolve(gw).await {
            Ok(n) => {
                let n = Some(to_lb(&n));
                if st.gateways[i] != n {
                    st.gateways[i] = n;
                    changed = true;
                }
            }
            Err(e) => warn!(gateway = %gw, "gateway unresolved: {e}"),
        }
    }
    changed
}

/// Health targets for the prober, with the VIP/backend pairs each one decides.
fn health_targets(config: &Config) -> HashMap<health::ProbeKey, Vec<HealthKey>> {
    let mut out: HashMap<health::ProbeKey, Vec<HealthKey>> = HashMap::new();
    let mut checks: HashMap<String, Arc<config::HealthCheck>> = HashMap::new();
    for c in &config.health_checks {
        checks.insert(c.name.clone(), Arc::new(c.clone()));
    }
    for v in &config.vips {
        let Some(check) = v.health_check.as_ref().and_then(|n| checks.get(n)) else {
            continue;
        };
        for b in &v.backends {
            let target = health::Target {
                address: b.address,
                port: b.port,
                check: Arc::clone(check),
            };
            out.entry(target.key())
                .or_default()
                .push((v.name.clone(), b.address, b.port));
        }
    }
    out
}

/// Gives the prober one probe per distinct target; probes that stay keep their state.
fn set_probes(prober: &health::Prober, targets: &HashMap<health::ProbeKey, Vec<HealthKey>>) {
    prober.set_targets(targets.keys().map(|k| health::Target {
        address: k.address,
        port: k.port,
        check: Arc::clone(&k.check),
    }));
}

/// The prober's current verdict for every VIP/backend pair, so a pair that a reload adds to
/// a probe already running gets that probe's state instead of waiting for a transition.
fn verdicts(
    prober: &health::Prober,
    targets: &HashMap<health::ProbeKey, Vec<HealthKey>>,
) -> HashMap<HealthKey, bool> {
    let mut out = HashMap::new();
    for s in prober.status() {
        if let Some(pairs) = targets.get(&s.key) {
            for p in pairs {
                out.insert(p.clone(), s.state == health::Health::Up);
            }
        }
    }
    out
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Sums the workers' snapshots into one line for the log.
fn summary(snaps: &[Arc<Mutex<Snapshot>>], tables: &Tables) -> String {
    let mut drops = [0u64; DropReason::COUNT];
    let mut tx = 0;
    let mut flows = 0;
    let mut per_vip = vec![0u64; tables.vips.len()];
    let mut fallback = 0;
    for s in snaps {
        let Ok(s) = s.lock() else { continue };
        for (d, n) in drops.iter_mut().zip(s.drops.iter()) {
            *d += n;
        }
        tx += s.stats.tx;
        fallback += s.stats.conntrack_fallback;
        flows += s.conntrack_len;
        if s.version == tables.version {
            for (p, n) in per_vip.iter_mut().zip(&s.vip_packets) {
                *p += n;
            }
        }
    }
    let mut line = format!(
        "version {} tx {tx} flows {flows} conntrack_fallback {fallback}",
        tables.version
    );
    for (r, n) in DropReason::ALL.iter().zip(drops) {
        if n > 0 {
            line.push_str(&format!(" drop_{} {n}", r.name()));
        }
    }
    for (v, n) in tables.vips.iter().zip(per_vip) {
        if n > 0 {
            line.push_str(&format!(" vip[{}] {n}", v.name));
        }
    }
    line
}

/// Builds the next table version and publishes it to the workers. On failure the running
/// version stays.
fn commit(st: &mut State, published: &Published, why: &str) {
    match st.build() {
        Ok(t) => {
            published.publish(t);
            info!(version = published.version(), "commit: {why}");
        }
        Err(e) => error!("{why}: cannot build tables, running version kept: {e}"),
    }
}

/// Brings the BGP announcements in line with the published tables: announce a VIP once the
/// tables can serve it and its health checks have decided (or `settle_by` has passed),
/// withdraw it when its last backend left.
fn sync_announcements(
    announcer: Option<&mut announce::Announcer>,
    st: &State,
    published: &Published,
    prober: &health::Prober,
    targets: &HashMap<health::ProbeKey, Vec<HealthKey>>,
    settle_by: std::time::Instant,
) {
    let Some(a) = announcer else { return };
    let undecided: std::collections::HashSet<&HealthKey> = if std::time::Instant::now() >= settle_by
    {
        Default::default()
    } else {
        prober
            .status()
            .iter()
            .filter(|s| !s.decided)
            .filter_map(|s| targets.get(&s.key))
            .flatten()
            .collect()
    };
    let settled = |v: &Vip| {
        v.backends.iter().all(|b| {
            b.state == config::BackendState::Disabled
                || !undecided.contains(&(v.name.clone(), b.address, b.port))
        })
    };
    a.sync(&announce::wanted(
        &st.config,
        &published.current(),
        &settled,
    ));
}

/// How long after a (re)start the announcer waits at most for health checks to decide:
/// long enough for `rise` or `fall` results of the slowest check.
fn settle_time(config: &Config) -> Duration {
    config
        .health_checks
        .iter()
        .map(|c| c.interval * (c.rise.max(c.fall) + 1) + c.timeout + c.jitter)
        .max()
        .unwrap_or_default()
}

/// `sluice run`: brings the datapath up with `path`'s config and runs until SIGTERM or
/// SIGINT; SIGHUP reloads the config.
pub async fn run(path: &Path) -> Result<(), RunError> {
    let cfg = config::load(path)?;
    if !is_root() {
        return Err(RunError::NotRoot);
    }
    let resolver = Resolver::new().map_err(|e| RunError::Netlink(e.to_string()))?;
    let mut st = State {
        path: path.to_path_buf(),
        config: Arc::new(cfg),
        version: 0,
        health: HashMap::new(),
        neighbors: HashMap::new(),
        gateways: [None, None],
    };
    resolve_all(&resolver, &mut st).await;
    let published = Arc::new(Published::new(st.build()?));

    let dp_cfg = DatapathConfig::from(&st.config.appliance);
    let capacity = st.config.appliance.conntrack_capacity as usize;
    let snapshots: Arc<Mutex<Vec<Arc<Mutex<Snapshot>>>>> = Arc::new(Mutex::new(Vec::new()));
    let factory = {
        let published = Arc::clone(&published);
        let snapshots = Arc::clone(&snapshots);
        move |worker: usize, workers: usize| -> Box<dyn crate::datapath::FrameHandler> {
            let out = Arc::new(Mutex::new(Snapshot::default()));
            if let Ok(mut s) = snapshots.lock() {
                s.push(Arc::clone(&out));
            }
            Box::new(LbHandler::new(
                Arc::clone(&published),
                capacity,
                worker as u16,
                workers as u16,
                out,
            ))
        }
    };
    let mut dp = Datapath::start(dp_cfg, factory)?;
    let (vips, ret) = steering(&st.config);
    dp.set_vips(&vips)?;
    dp.set_return_keys(&ret)?;
    info!(
        version = published.version(),
        vips = st.config.vips.len(),
        "sluice running (appliance {})",
        st.config.appliance.name
    );

    let (prober, mut transitions) = health::Prober::spawn();
    let mut targets = health_targets(&st.config);
    set_probes(&prober, &targets);
    let mut settle_by = std::time::Instant::now() + settle_time(&st.config);

    // The speaker starts now that the datapath forwards; VIPs are announced as their health
    // checks settle (every tick re-syncs).
    let mut announcer = match &st.config.bgp {
        Some(b) => match announce::Announcer::start(b).await {
            Ok(a) => Some(a),
            Err(e) => {
                error!("bgp: {e}; running without announcements");
                None
            }
        },
        None => None,
    };
    sync_announcements(
        announcer.as_mut(),
        &st,
        &published,
        &prober,
        &targets,
        settle_by,
    );

    // Neighbour and route changes mark the resolution stale; the next tick re-resolves, so a
    // burst of kernel notifications costs one pass.
    let mut net_changes = match crate::datapath::neigh::watch() {
        Ok(rx) => Some(rx),
        Err(e) => {
            warn!("cannot watch neighbour and route changes ({e}); re-resolving every 30 s");
            None
        }
    };
    let mut net_dirty = false;
    let mut term = signal(SignalKind::terminate()).map_err(RunError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(RunError::Signal)?;
    let mut hup = signal(SignalKind::hangup()).map_err(RunError::Signal)?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = term.recv() => { info!("SIGTERM: stopping"); break; }
            _ = int.recv() => { info!("SIGINT: stopping"); break; }
            _ = hup.recv() => {
                info!(path = %st.path.display(), "SIGHUP: reloading");
                match config::load(&st.path) {
                    Ok(new) => {
                        if new.bgp != st.config.bgp {
                            info!("reload: [bgp] changed, restarting the speaker");
                            if let Some(a) = announcer.take() {
                                a.shutdown().await;
                            }
                            if let Some(b) = &new.bgp {
                                match announce::Announcer::start(b).await {
                                    Ok(a) => announcer = Some(a),
                                    Err(e) => error!("bgp: {e}; running without announcements"),
                                }
                            }
                        }
                        st.config = Arc::new(new);
                        targets = health_targets(&st.config);
                        set_probes(&prober, &targets);
                        st.health = verdicts(&prober, &targets);
                        resolve_all(&resolver, &mut st).await;
                        let (vips, ret) = steering(&st.config);
                        if let Err(e) = dp.set_vips(&vips).and_then(|_| dp.set_return_keys(&ret)) {
                            error!("reload: steering maps: {e}");
                        }
                        commit(&mut st, &published, "reload");
                        settle_by = std::time::Instant::now() + settle_time(&st.config);
                    }
                    Err(e) => error!("reload rejected, running version kept: {e}"),
                }
            }
            Some(tr) = transitions.recv() => {
                let up = tr.to == health::Health::Up;
                info!("health: {tr}");
                if let Some(pairs) = targets.get(&tr.key) {
                    for p in pairs {
                        st.health.insert(p.clone(), up);
                    }
                }
                commit(&mut st, &published, "health change");
                sync_announcements(announcer.as_mut(), &st, &published, &prober, &targets, settle_by);
            }
            Some(change) = async {
                match net_changes.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                use crate::datapath::neigh::NetChange;
                let known = |mac: &[u8; 6]| {
                    st.neighbors.values().chain(st.gateways.iter().flatten()).any(|n| n.dst_mac.0 == *mac)
                };
                net_dirty |= match &change {
                    NetChange::Neighbour { mac: Some(mac), .. } => !known(mac),
                    NetChange::Neighbour { mac: None, .. } | NetChange::Route { .. } => true,
                };
            }
            _ = tick.tick() => {
                ticks += 1;
                sync_announcements(announcer.as_mut(), &st, &published, &prober, &targets, settle_by);
                let missing = st.config.vips.iter().flat_map(|v| &v.backends)
                    .any(|b| !st.neighbors.contains_key(&b.address));
                let stale = std::mem::take(&mut net_dirty);
                if (missing || stale || ticks.is_multiple_of(30)) && resolve_all(&resolver, &mut st).await {
                    commit(&mut st, &published, "neighbours changed");
                }
                if ticks.is_multiple_of(10) {
                    let snaps = snapshots.lock().map(|s| s.clone()).unwrap_or_default();
                    info!("stats: {}", summary(&snaps, &published.current()));
                }
            }
        }
    }
    // Routers move traffic away (GRACEFUL_SHUTDOWN, then withdraw) while we still forward.
    if let Some(a) = announcer.take() {
        a.shutdown().await;
    }
    dp.stop()?;
    let snaps = snapshots.lock().map(|s| s.clone()).unwrap_or_default();
    info!("final stats: {}", summary(&snaps, &published.current()));
    info!("datapath stopped, XDP detached");
    Ok(())
}
