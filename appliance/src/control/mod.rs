//! The control plane of `sluice run`: it computes, the datapath executes.
//!
//! ```text
//! config file --load/validate--> Config --Tables::build + neighbours--> Published (swap)
//!   SIGHUP ----------^                  ^                                  |  workers read
//! health transitions --------------------+                                 v
//! neighbour retries (1 s) ---------------+                     LbHandler per worker
//! ```
//! Every change (a reload, an operator's API call, a health transition, a neighbour that
//! resolved) builds a new table version off the packet path and publishes it with one atomic
//! swap; workers report the version they run, so the API knows when a change is everywhere.
//! A reload that fails validation or table building changes nothing and returns every
//! error. The local API ([`api`]) reads [`shared::Shared`] and sends writes to this loop as
//! [`shared::Command`]s.

pub mod announce;
pub mod api;
pub mod cache;
pub mod events;
pub mod metrics;
pub mod shared;

use std::collections::BTreeSet;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

use tui::api::{ApiError, BackendAction};

use crate::config::{self, Backend, BackendState, Config, Mode, Protocol, Vip};
use crate::datapath::flowcache::{self, FlowCache};
use crate::datapath::{
    Datapath, DatapathConfig, DatapathStats, Proto, ReturnKey, VipKey,
    neigh::{Neighbor as NetNeighbor, Resolver},
};
use crate::engine::{CounterSnapshot, LbHandler, Published};
use crate::lb::{DropReason, Neighbor, Tables};
use events::{EventRing, Kind};
use shared::{BackendOp, Command, HealthView, Override, Shared, Sync, View, WorkerView};

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
    #[error("{0}")]
    Api(#[from] api::ApiStartError),
}

/// Health of one backend of one VIP, keyed by VIP name, backend address and port.
type HealthKey = (String, IpAddr, u16);

/// What the control plane knows besides the config.
struct State {
    path: PathBuf,
    /// The config file as loaded.
    file_config: Arc<Config>,
    /// `file_config` with the operator's overrides: what the tables are built from.
    config: Arc<Config>,
    version: u64,
    /// Prober verdicts; a backend missing here has no check, or no verdict yet.
    health: HashMap<HealthKey, bool>,
    /// The reason of each backend's last health transition.
    reasons: HashMap<HealthKey, String>,
    /// Operator changes to backends (API), layered over the file.
    overrides: HashMap<HealthKey, Override>,
    /// VIPs an operator withdrew from BGP.
    withdrawn: BTreeSet<String>,
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
        src_mac: wire::ethernet::MacAddr(n.src_mac),
        dst_mac: wire::ethernet::MacAddr(n.dst_mac),
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

/// One line of totals for the log.
fn summary(shared: &Shared) -> String {
    let agg = shared.aggregate();
    let mut line = format!(
        "version {} tx {} flows {} conntrack_fallback {}",
        shared.published.version(),
        agg.stats.tx,
        agg.conntrack_entries,
        agg.stats.conntrack_fallback
    );
    for (r, n) in DropReason::ALL.iter().zip(agg.drops) {
        if n > 0 {
            line.push_str(&format!(" drop_{} {n}", r.name()));
        }
    }
    let mut vips: Vec<_> = agg.vips.iter().filter(|(_, t)| t.packets > 0).collect();
    vips.sort_by(|a, b| a.0.cmp(b.0));
    for (name, t) in vips {
        line.push_str(&format!(" vip[{name}] {}", t.packets));
    }
    line
}

/// The config the tables are built from: the file's, with the operator's overrides.
/// Overrides of backends the file no longer has are dropped; an override equal to the
/// file's value is dropped too, so `undrain` after `drain` leaves no trace.
fn effective(file: &Config, overrides: &mut HashMap<HealthKey, Override>) -> Config {
    let mut out = file.clone();
    let mut seen = std::collections::HashSet::new();
    for v in &mut out.vips {
        for b in &mut v.backends {
            let key = (v.name.clone(), b.address, b.port);
            if let Some(o) = overrides.get_mut(&key) {
                if o.state == Some(b.state) {
                    o.state = None;
                }
                if o.weight == Some(b.weight) {
                    o.weight = None;
                }
                if let Some(s) = o.state {
                    b.state = s;
                }
                if let Some(w) = o.weight {
                    b.weight = w;
                }
                seen.insert(key);
            }
        }
    }
    overrides.retain(|k, o| seen.contains(k) && (o.state.is_some() || o.weight.is_some()));
    out
}

/// The VIP and backend an API call names; `backend` is `address:port`, or the address alone
/// when the VIP has one backend there.
fn find_backend(cfg: &Config, vip: &str, backend: &str) -> Result<HealthKey, ApiError> {
    let err = |m: String, f: &str| ApiError {
        error: m,
        field: Some(f.to_string()),
        errors: Vec::new(),
    };
    let Some(v) = cfg.vip(vip) else {
        return Err(err(format!("no VIP named {vip:?}"), "vip"));
    };
    let matches: Vec<&Backend> = if let Ok(sa) = backend.parse::<std::net::SocketAddr>() {
        v.backends
            .iter()
            .filter(|b| b.address == sa.ip() && b.port == sa.port())
            .collect()
    } else if let Ok(ip) = backend.parse::<IpAddr>() {
        v.backends.iter().filter(|b| b.address == ip).collect()
    } else {
        return Err(err(
            format!("backend {backend:?} is not an address or address:port"),
            "backend",
        ));
    };
    match matches.as_slice() {
        [b] => Ok((v.name.clone(), b.address, b.port)),
        [] => Err(err(
            format!("no backend {backend} in VIP {vip:?}"),
            "backend",
        )),
        _ => Err(err(
            format!("VIP {vip:?} has several backends at {backend}: give address:port"),
            "backend",
        )),
    }
}

/// Builds the next table version and publishes it to the workers. On failure the running
/// version stays.
fn commit(st: &mut State, shared: &Shared, why: &str) -> Result<u64, String> {
    match st.build() {
        Ok(t) => Ok(publish(shared, t, why)),
        Err(e) => {
            error!("{why}: cannot build tables, running version kept: {e}");
            Err(e.to_string())
        }
    }
}

fn publish(shared: &Shared, t: Tables, why: &str) -> u64 {
    let version = t.version;
    let old = shared.published.current();
    shared.published.publish(t);
    // Strictly after the swap: a worker that decided with the old tables takes its own
    // entry back when it sees the new version, and this walk removes the rest.
    if let Some(c) = &shared.flow_cache {
        let evicted = cache::after_commit(c, &old, &shared.published.current());
        if evicted > 0 {
            info!(
                version,
                evicted,
                "flow cache: evicted entries the new tables would not forward the same way"
            );
        }
    }
    if let Ok(mut s) = shared.sync.lock() {
        *s = Sync {
            version,
            published_at: Instant::now(),
            lag: None,
        };
    }
    event(shared, Kind::Commit, format!("version {version}: {why}"));
    version
}

fn event(shared: &Shared, kind: Kind, message: String) {
    if let Ok(mut e) = shared.events.lock() {
        e.push(kind, message);
    }
}

/// Republishes what the API reads about the control state.
fn publish_view(
    shared: &Shared,
    st: &State,
    prober: &health::Prober,
    targets: &HashMap<health::ProbeKey, Vec<HealthKey>>,
    announcer: Option<&announce::Announcer>,
    datapath: Option<DatapathStats>,
) {
    let mut health = HashMap::new();
    for s in prober.status() {
        let Some(pairs) = targets.get(&s.key) else {
            continue;
        };
        let state = match (s.decided, s.state) {
            (false, _) => "unknown",
            (true, health::Health::Up) => "up",
            (true, health::Health::Down) => "down",
        };
        for p in pairs {
            let reason = st
                .reasons
                .get(p)
                .cloned()
                .or_else(|| s.last_failure.as_ref().map(|f| f.to_string()));
            health.insert(p.clone(), HealthView { state, reason });
        }
    }
    let old = shared.view.load();
    shared.view.store(Arc::new(View {
        config: Some(Arc::clone(&st.config)),
        health,
        overrides: st.overrides.clone(),
        withdrawn: st.withdrawn.clone(),
        announced: announcer
            .map(|a| a.announced().copied().collect())
            .unwrap_or_default(),
        peers: announcer.map(|a| a.peers()).unwrap_or_default(),
        cache: match (&datapath, &shared.flow_cache) {
            (Some(_), Some(c)) => Some(cache::stats(c)),
            _ => old.cache.clone(),
        },
        datapath: datapath.or_else(|| old.datapath.clone()),
    }));
}

/// Brings the BGP announcements in line with the published tables: announce a VIP once the
/// tables can serve it and its health checks have decided (or `settle_by` has passed),
/// withdraw it when its last backend left or an operator withdrew it.
fn sync_announcements(
    announcer: Option<&mut announce::Announcer>,
    st: &State,
    published: &Published,
    prober: &health::Prober,
    targets: &HashMap<health::ProbeKey, Vec<HealthKey>>,
    settle_by: Instant,
) {
    let Some(a) = announcer else { return };
    let undecided: std::collections::HashSet<&HealthKey> = if Instant::now() >= settle_by {
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
    let tables = published.current();
    let mut wanted = announce::wanted(&st.config, &tables, &settled);
    let all_settled = Instant::now() >= settle_by || st.config.vips.iter().all(settled);
    // An address stays wanted only while a VIP on it that no operator withdrew can serve.
    wanted.retain(|addr, _| {
        st.config.vips.iter().enumerate().any(|(slot, v)| {
            v.address == *addr
                && !st.withdrawn.contains(&v.name)
                && tables
                    .vips
                    .get(slot)
                    .is_some_and(|e| e.backends.clone().any(|b| tables.eligible[b as usize]))
        })
    });
    a.sync(&wanted);
    if all_settled {
        a.initial_routes_done();
    }
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

/// Everything the control loop owns besides [`State`].
struct Control {
    st: State,
    shared: Arc<Shared>,
    resolver: Resolver,
    dp: Datapath,
    prober: health::Prober,
    targets: HashMap<health::ProbeKey, Vec<HealthKey>>,
    announcer: Option<announce::Announcer>,
    settle_by: Instant,
    /// Peer states at the last tick, for BGP events.
    peer_states: HashMap<IpAddr, bgp::State>,
    /// Drops at the last tick, and when the last spike was reported.
    last_drops: u64,
    last_spike: Option<Instant>,
}

impl Control {
    fn sync_bgp(&mut self) {
        sync_announcements(
            self.announcer.as_mut(),
            &self.st,
            &self.shared.published,
            &self.prober,
            &self.targets,
            self.settle_by,
        );
    }

    fn view(&self, datapath: Option<DatapathStats>) {
        publish_view(
            &self.shared,
            &self.st,
            &self.prober,
            &self.targets,
            self.announcer.as_ref(),
            datapath,
        );
    }

    /// Loads the config file and, when it is valid and its tables build, makes it the
    /// running one; otherwise nothing changes and every error comes back.
    async fn reload(&mut self, how: &str) -> Result<String, ApiError> {
        let rejected = |shared: &Shared, errors: Vec<String>, summary: String| {
            shared.reloads_rejected.fetch_add(1, Ordering::Relaxed);
            event(
                shared,
                Kind::Reload,
                format!("{how}: rejected, running version kept: {summary}"),
            );
            ApiError {
                error: format!("config rejected, running version kept: {summary}"),
                field: Some("config".into()),
                errors,
            }
        };
        let file = match config::load(&self.st.path) {
            Ok(c) => c,
            Err(e) => {
                let errors = match e.errors() {
                    Some(list) => list.0.iter().map(|x| x.to_string()).collect(),
                    None => vec![e.to_string()],
                };
                let n = errors.len();
                return Err(rejected(&self.shared, errors, format!("{n} error(s)")));
            }
        };
        let mut overrides = self.st.overrides.clone();
        let eff = Arc::new(effective(&file, &mut overrides));
        let targets = health_targets(&eff);
        // Tentatively switch, build, and switch back if the tables cannot be built.
        let old_config = std::mem::replace(&mut self.st.config, Arc::clone(&eff));
        let old_health = std::mem::replace(&mut self.st.health, verdicts(&self.prober, &targets));
        resolve_all(&self.resolver, &mut self.st).await;
        let tables = match self.st.build() {
            Ok(t) => t,
            Err(e) => {
                self.st.config = old_config;
                self.st.health = old_health;
                return Err(rejected(&self.shared, vec![e.to_string()], e.to_string()));
            }
        };
        // Removed VIPs are withdrawn before their tables go away; the sync after the
        // publication takes care of everything else.
        if let Some(a) = self.announcer.as_mut() {
            a.withdraw_unless(
                |ip| eff.vips.iter().any(|v| v.address == *ip),
                "VIP removed",
            );
        }
        self.st.file_config = Arc::new(file);
        self.st.overrides = overrides;
        self.st.withdrawn.retain(|n| eff.vip(n).is_some());
        self.targets = targets;
        set_probes(&self.prober, &self.targets);
        let (vips, ret) = steering(&self.st.config);
        if let Err(e) = self
            .dp
            .set_vips(&vips)
            .and_then(|_| self.dp.set_return_keys(&ret))
        {
            error!("reload: steering maps: {e}");
        }
        let version = publish(&self.shared, tables, how);
        if old_config.bgp != self.st.config.bgp {
            info!("reload: [bgp] changed, restarting the speaker");
            if let Some(a) = self.announcer.take() {
                a.shutdown().await;
            }
            if let Some(b) = &self.st.config.bgp {
                match announce::Announcer::start(b).await {
                    Ok(a) => self.announcer = Some(a),
                    Err(e) => error!("bgp: {e}; running without announcements"),
                }
            }
        }
        self.settle_by = Instant::now() + settle_time(&self.st.config);
        self.sync_bgp();
        self.view(None);
        let mut note = String::new();
        if old_config.appliance.flow_cache != self.st.config.appliance.flow_cache {
            warn!("reload: [appliance] flow_cache changed; it takes effect at the next start");
            note.push_str(" ([appliance] flow_cache takes effect at the next start)");
        }
        if old_config.api != self.st.config.api {
            warn!("reload: [api] changed; the API listeners keep their settings until restart");
            note.push_str(" ([api] changes take effect at the next start)");
        }
        event(
            &self.shared,
            Kind::Reload,
            format!("{how}: version {version} running{note}"),
        );
        Ok(format!("config reloaded: version {version}{note}"))
    }

    /// Applies an operator's change to a backend as a new version.
    fn backend(&mut self, vip: &str, backend: &str, op: BackendOp) -> Result<String, ApiError> {
        let key = find_backend(&self.st.config, vip, backend)?;
        let what = match op {
            BackendOp::Action(a) => a.name().to_string(),
            BackendOp::Weight(w) => format!("weight {w}"),
        };
        let mut overrides = self.st.overrides.clone();
        let o = overrides.entry(key.clone()).or_default();
        match op {
            BackendOp::Action(BackendAction::Drain) => o.state = Some(BackendState::Drain),
            BackendOp::Action(BackendAction::Undrain | BackendAction::Enable) => {
                o.state = Some(BackendState::Active)
            }
            BackendOp::Action(BackendAction::Disable) => o.state = Some(BackendState::Disabled),
            BackendOp::Weight(w) => o.weight = Some(w),
        }
        let eff = Arc::new(effective(&self.st.file_config, &mut overrides));
        let old = std::mem::replace(&mut self.st.config, eff);
        let id = std::net::SocketAddr::new(key.1, key.2);
        let why = format!("operator: {what} {id} of VIP {vip}");
        match commit(&mut self.st, &self.shared, &why) {
            Ok(v) => {
                self.st.overrides = overrides;
                event(&self.shared, Kind::Operator, why.clone());
                self.sync_bgp();
                self.view(None);
                Ok(format!("{what} {id} of VIP {vip}: version {v}"))
            }
            Err(e) => {
                self.st.config = old;
                Err(ApiError {
                    error: format!("cannot apply {what}: {e}"),
                    field: None,
                    errors: vec![e],
                })
            }
        }
    }

    fn announce(&mut self, vip: &str, announce: bool) -> Result<String, ApiError> {
        if self.st.config.vip(vip).is_none() {
            return Err(ApiError {
                error: format!("no VIP named {vip:?}"),
                field: Some("vip".into()),
                errors: Vec::new(),
            });
        }
        if self.announcer.is_none() {
            return Err(ApiError {
                error: "BGP is not running (no [bgp] section, or the speaker failed to start)"
                    .into(),
                field: Some("vip".into()),
                errors: Vec::new(),
            });
        }
        let what = if announce { "announce" } else { "withdraw" };
        if announce {
            self.st.withdrawn.remove(vip);
        } else {
            self.st.withdrawn.insert(vip.to_string());
        }
        self.sync_bgp();
        self.view(None);
        event(
            &self.shared,
            Kind::Operator,
            format!("operator: {what} VIP {vip}"),
        );
        Ok(format!("{what} VIP {vip}"))
    }

    /// Once a second: BGP sync, neighbours, sync lag, events for BGP and drops, the view.
    async fn tick(&mut self, ticks: u64, net_dirty: bool) {
        self.sync_bgp();
        let missing = self
            .st
            .config
            .vips
            .iter()
            .flat_map(|v| &v.backends)
            .any(|b| !self.st.neighbors.contains_key(&b.address));
        if (missing || net_dirty || ticks.is_multiple_of(30))
            && resolve_all(&self.resolver, &mut self.st).await
        {
            let _ = commit(&mut self.st, &self.shared, "neighbours changed");
        }
        if let Some(a) = &self.announcer {
            for p in a.peers() {
                let before = self.peer_states.insert(p.address, p.state);
                if before.is_some_and(|b| b != p.state)
                    || (before.is_none() && p.state == bgp::State::Established)
                {
                    let mut m = format!(
                        "peer {}: {:?} -> {:?}",
                        p.address,
                        before.unwrap_or(bgp::State::Idle),
                        p.state
                    );
                    if p.state != bgp::State::Established
                        && let Some(e) = &p.last_error
                    {
                        m.push_str(&format!(" ({e})"));
                    }
                    event(&self.shared, Kind::Bgp, m);
                }
            }
        }
        let drops: u64 = self.shared.aggregate().drops.iter().sum();
        let delta = drops.saturating_sub(self.last_drops);
        self.last_drops = drops;
        if delta >= DROP_SPIKE
            && self
                .last_spike
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            self.last_spike = Some(Instant::now());
            event(
                &self.shared,
                Kind::Drops,
                format!(
                    "{delta} frames dropped in the last second (see sluice_dropped_packets_total by reason)"
                ),
            );
        }
        let dp = match self.dp.stats() {
            Ok(s) => Some(s),
            Err(e) => {
                warn!("datapath stats: {e}");
                None
            }
        };
        self.view(dp);
        if ticks.is_multiple_of(10) {
            info!("stats: {}", summary(&self.shared));
        }
    }
}

/// Drops in one second that make an event.
const DROP_SPIKE: u64 = 1000;

/// Watches the workers after each commit and records how long it took them all to run it.
async fn watch_sync(shared: Arc<Shared>) {
    let mut iv = tokio::time::interval(Duration::from_millis(5));
    loop {
        iv.tick().await;
        let Ok(s) = shared.sync.lock().map(|s| *s) else {
            return;
        };
        if s.lag.is_none() && shared.synced_to(s.version) {
            let lag = s.published_at.elapsed();
            if let Ok(mut cur) = shared.sync.lock()
                && cur.version == s.version
            {
                cur.lag = Some(lag);
            }
        }
    }
}

/// `sluice run`: brings the datapath up with `path`'s config and runs until SIGTERM or
/// SIGINT; SIGHUP (or the API) reloads the config.
pub async fn run(path: &Path) -> Result<(), RunError> {
    let cfg = config::load(path)?;
    if !is_root() {
        return Err(RunError::NotRoot);
    }
    let resolver = Resolver::new().map_err(|e| RunError::Netlink(e.to_string()))?;
    let file = Arc::new(cfg);
    let mut st = State {
        path: path.to_path_buf(),
        file_config: Arc::clone(&file),
        config: file,
        version: 0,
        health: HashMap::new(),
        reasons: HashMap::new(),
        overrides: HashMap::new(),
        withdrawn: Default::default(),
        neighbors: HashMap::new(),
        gateways: [None, None],
    };
    resolve_all(&resolver, &mut st).await;
    let published = Arc::new(Published::new(st.build()?));
    let (cmd_tx, mut cmd_rx) = tokio::sync::mpsc::channel::<Command>(64);
    let flow_cache = if st.config.appliance.flow_cache {
        Some(Arc::new(FlowCache::create(flowcache::CACHE_ENTRIES)?))
    } else {
        None
    };
    let shared = Arc::new(Shared {
        flow_cache,
        started: Instant::now(),
        config_path: path.to_path_buf(),
        published: Arc::clone(&published),
        workers: Mutex::new(Vec::new()),
        view: Default::default(),
        events: Mutex::new(EventRing::default()),
        sync: Mutex::new(Sync {
            version: published.version(),
            published_at: Instant::now(),
            lag: None,
        }),
        commands: cmd_tx,
        api_errors: Default::default(),
        reloads_rejected: Default::default(),
    });

    let dp_cfg = DatapathConfig::from(&st.config.appliance);
    let capacity = st.config.appliance.conntrack_capacity as usize;
    let factory = {
        let published = Arc::clone(&published);
        let shared = Arc::clone(&shared);
        let flow_cache = shared.flow_cache.clone();
        move |worker: usize, workers: usize| -> Box<dyn crate::datapath::FrameHandler> {
            let out = Arc::new(Mutex::new(CounterSnapshot::default()));
            let running = Arc::new(std::sync::atomic::AtomicU64::new(0));
            if let Ok(mut w) = shared.workers.lock() {
                w.push(WorkerView {
                    snapshot: Arc::clone(&out),
                    running: Arc::clone(&running),
                });
            }
            let h = LbHandler::new(
                Arc::clone(&published),
                capacity,
                worker as u16,
                workers as u16,
                out,
                running,
            );
            match &flow_cache {
                Some(c) => Box::new(h.with_flow_cache(Arc::clone(c))),
                None => Box::new(h),
            }
        }
    };
    let dp = Datapath::start_with_cache(dp_cfg, shared.flow_cache.clone(), factory)?;
    let (vips, ret) = steering(&st.config);
    dp.set_vips(&vips)?;
    dp.set_return_keys(&ret)?;
    // The first version's sync lag counts from the moment the workers exist.
    if let Ok(mut s) = shared.sync.lock() {
        s.published_at = Instant::now();
    }
    let api_tasks = api::start(Arc::clone(&shared), &st.config.api)
        .await
        .map_err(RunError::Api)?;
    info!(
        version = published.version(),
        vips = st.config.vips.len(),
        api = %st.config.api.socket.display(),
        "sluice running (appliance {})",
        st.config.appliance.name
    );
    let sync_task = tokio::spawn(watch_sync(Arc::clone(&shared)));

    let (prober, mut transitions) = health::Prober::spawn();
    let targets = health_targets(&st.config);
    set_probes(&prober, &targets);
    let settle_by = Instant::now() + settle_time(&st.config);

    // The speaker starts now that the datapath forwards; VIPs are announced as their health
    // checks settle (every tick re-syncs).
    let announcer = match &st.config.bgp {
        Some(b) => match announce::Announcer::start(b).await {
            Ok(a) => Some(a),
            Err(e) => {
                error!("bgp: {e}; running without announcements");
                None
            }
        },
        None => None,
    };
    let mut c = Control {
        st,
        shared: Arc::clone(&shared),
        resolver,
        dp,
        prober,
        targets,
        announcer,
        settle_by,
        peer_states: HashMap::new(),
        last_drops: 0,
        last_spike: None,
    };
    c.sync_bgp();
    let dp_stats = c.dp.stats().ok();
    c.view(dp_stats);
    event(
        &shared,
        Kind::Commit,
        format!("version {}: started", published.version()),
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
                info!(path = %c.st.path.display(), "SIGHUP: reloading");
                if let Err(e) = c.reload("SIGHUP reload").await {
                    error!("reload rejected, running version kept: {}", e.error);
                    for x in &e.errors {
                        error!("  {x}");
                    }
                }
            }
            Some(cmd) = cmd_rx.recv() => {
                match cmd {
                    Command::Backend { vip, backend, op, reply } => {
                        let _ = reply.send(c.backend(&vip, &backend, op));
                    }
                    Command::Announce { vip, announce, reply } => {
                        let _ = reply.send(c.announce(&vip, announce));
                    }
                    Command::Reload { reply } => {
                        info!("API: reloading");
                        let r = c.reload("API reload").await;
                        if let Err(e) = &r {
                            error!("reload rejected, running version kept: {}", e.error);
                        }
                        let _ = reply.send(r);
                    }
                }
            }
            Some(tr) = transitions.recv() => {
                let up = tr.to == health::Health::Up;
                info!("health: {tr}");
                if let Some(pairs) = c.targets.get(&tr.key) {
                    for p in pairs {
                        c.st.health.insert(p.clone(), up);
                        c.st.reasons.insert(p.clone(), tr.reason.to_string());
                    }
                }
                event(&shared, Kind::Health, format!("{}: {} -> {} ({})", tr.key, tr.from, tr.to, tr.reason));
                let _ = commit(&mut c.st, &shared, "health change");
                c.sync_bgp();
                c.view(None);
            }
            Some(change) = async {
                match net_changes.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                use crate::datapath::neigh::NetChange;
                let known = |mac: &[u8; 6]| {
                    c.st.neighbors.values().chain(c.st.gateways.iter().flatten()).any(|n| n.dst_mac.0 == *mac)
                };
                net_dirty |= match &change {
                    NetChange::Neighbour { mac: Some(mac), .. } => !known(mac),
                    NetChange::Neighbour { mac: None, .. } | NetChange::Route { .. } => true,
                };
            }
            _ = tick.tick() => {
                ticks += 1;
                c.tick(ticks, std::mem::take(&mut net_dirty)).await;
            }
        }
    }
    for t in api_tasks {
        t.abort();
    }
    sync_task.abort();
    let _ = std::fs::remove_file(&c.st.config.api.socket);
    // Routers move traffic away (GRACEFUL_SHUTDOWN, then withdraw) while we still forward;
    // with graceful restart configured they keep the routes for the next process instead.
    if let Some(a) = c.announcer.take() {
        if a.graceful_restart() {
            a.abandon();
        } else {
            a.shutdown().await;
        }
    }
    c.dp.stop()?;
    info!("final stats: {}", summary(&shared));
    info!("datapath stopped, XDP detached");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
[[vip.backend]]
address = "10.1.0.11"
port = 8080
[[vip.backend]]
address = "10.1.0.12"
port = 8080
state = "drain"
[[vip.backend]]
address = "10.1.0.12"
port = 8081
"#;

    fn cfg() -> Config {
        Config::from_toml_str(CFG).unwrap_or_else(|e| panic!("{e}"))
    }

    fn key(a: &str, p: u16) -> HealthKey {
        ("web".into(), a.parse().expect("literal"), p)
    }

    #[test]
    fn backends_are_named_by_address_and_port_or_a_unique_address() {
        let c = cfg();
        assert_eq!(
            find_backend(&c, "web", "10.1.0.11"),
            Ok(key("10.1.0.11", 8080))
        );
        assert_eq!(
            find_backend(&c, "web", "10.1.0.12:8081"),
            Ok(key("10.1.0.12", 8081))
        );
        let field = |vip: &str, b: &str| find_backend(&c, vip, b).err().and_then(|e| e.field);
        assert_eq!(
            field("web", "10.1.0.12"),
            Some("backend".into()),
            "ambiguous"
        );
        assert_eq!(field("web", "10.1.0.99"), Some("backend".into()));
        assert_eq!(field("web", "nonsense"), Some("backend".into()));
        assert_eq!(field("api", "10.1.0.11"), Some("vip".into()));
    }

    #[test]
    fn overrides_layer_over_the_file_and_vanish_when_equal_or_orphaned() {
        let file = cfg();
        let mut ov = HashMap::new();
        ov.insert(
            key("10.1.0.11", 8080),
            Override {
                state: Some(BackendState::Disabled),
                weight: Some(7),
            },
        );
        // Undrain of a backend the file drains: an override to active.
        ov.insert(
            key("10.1.0.12", 8080),
            Override {
                state: Some(BackendState::Active),
                weight: None,
            },
        );
        // Equal to the file: dropped.
        ov.insert(
            key("10.1.0.12", 8081),
            Override {
                state: Some(BackendState::Active),
                weight: Some(100),
            },
        );
        // A backend the file does not have: dropped.
        ov.insert(
            key("10.1.0.99", 80),
            Override {
                state: Some(BackendState::Drain),
                weight: None,
            },
        );
        let eff = effective(&file, &mut ov);
        let b = &eff.vips[0].backends;
        assert_eq!((b[0].state, b[0].weight), (BackendState::Disabled, 7));
        assert_eq!(b[1].state, BackendState::Active);
        assert_eq!((b[2].state, b[2].weight), (BackendState::Active, 100));
        let mut keys: Vec<_> = ov.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, vec![key("10.1.0.11", 8080), key("10.1.0.12", 8080)]);
    }
}
