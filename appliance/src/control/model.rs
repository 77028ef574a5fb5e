//! The readers' model: what the control loop shares with the API, the metrics and the
//! console (through the API): the published tables, the workers' counters, and a [`View`]
//! of the control state the loop republishes after every change, and the API documents
//! built from them. Readers never wait on the loop (it may be resolving neighbours or
//! starting the speaker): they read atomics, short mutexes and an `ArcSwap`. The counters
//! themselves are in `counters.rs`.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::mpsc;

use super::cache::{self, CacheStats};
use super::change::{Command, Override};
use super::counters::{self, Aggregate, Counters, WorkerView};
use super::events::EventRing;
use super::flood::document as flood_doc;
use crate::config::{self, Config, Mode};
use crate::datapath::{AttachMode, DatapathStats, InterfaceStatus};
use crate::engine::Published;
use crate::lb::BackendId;
use crate::lb::{DropReason, Tables};

/// A backend's health as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthView {
    /// `up`, `down`, `unknown`.
    pub state: &'static str,
    pub reason: Option<String>,
}

/// Health, overrides and announcements: the control loop's state for readers.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// The config the tables are built from (file plus overrides).
    pub config: Option<Arc<Config>>,
    /// Keyed by (VIP name, backend address, port).
    pub health: HashMap<BackendId, HealthView>,
    pub overrides: HashMap<BackendId, Override>,
    /// VIPs an operator withdrew.
    pub withdrawn: BTreeSet<String>,
    /// Addresses the speaker announces now.
    pub announced: BTreeSet<IpAddr>,
    pub peers: Vec<bgp::PeerStatus>,
    pub datapath: Option<DatapathStats>,
    /// The XDP flow cache's counters, read once a second (readers take fresh counters from
    /// [`Shared::cache_stats`]; `entries` comes from here).
    pub cache: Option<CacheStats>,
    /// Backends slow start ramps, with when each reaches its full weight.
    pub ramps: HashMap<BackendId, Instant>,
    /// The agents' last answers.
    pub agents: super::policy::Agents,
    /// On a fleet member, the fleet's verdicts the tables follow (empty off a fleet).
    pub fleet_health: HashMap<BackendId, bool>,
}

/// When the last commit was published and when every worker ran it.
#[derive(Debug, Clone, Copy)]
pub struct Sync {
    pub version: u64,
    pub published_at: Instant,
    pub lag: Option<Duration>,
    /// A health version: when the first transition of its batch arrived.
    pub health_since: Option<Instant>,
}

/// Everything the API and metrics read.
pub struct Shared {
    pub started: Instant,
    pub config_path: PathBuf,
    pub published: Arc<Published>,
    pub workers: Mutex<Vec<WorkerView>>,
    pub view: ArcSwap<View>,
    pub events: Mutex<EventRing>,
    pub sync: Mutex<Sync>,
    /// Signalled after each commit sets `sync`, so the sync watcher sleeps between commits
    /// instead of ticking while the appliance is idle.
    pub sync_changed: tokio::sync::Notify,
    /// Where the API's writes go: the control loop.
    pub commands: mpsc::Sender<Command>,
    /// The XDP flow cache (`[appliance] flow_cache`).
    pub flow_cache: Option<Arc<crate::datapath::flowcache::FlowCache>>,
    /// The fleet document (`GET /v1/fleet`); `None` without `[fleet]`.
    pub fleet: Mutex<Option<api::FleetStatus>>,
    /// Connection sync (`[sync]`), set once it started.
    pub flow_sync: std::sync::OnceLock<crate::sync::SyncHandle>,
    pub counters: Counters,
    /// How this process took over from the one before it (`None`: it started cold).
    pub takeover: Mutex<Option<api::Takeover>>,
    /// `sluice capture`: the running datapath's capture points.
    pub capture: super::capture::Hub,
}

/// Per worker: the version it runs, its flows, and its ring and handoff counters (from the
/// datapath's last view; zero without a datapath).
fn worker_status(
    agg: &Aggregate,
    dp: Option<&crate::datapath::DatapathStats>,
) -> Vec<api::WorkerStatus> {
    agg.running
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let ring = dp
                .and_then(|d| d.workers.get(i))
                .copied()
                .unwrap_or_default();
            let (new_flows, entries) = agg.worker_flows.get(i).copied().unwrap_or_default();
            api::WorkerStatus {
                id: i as u32,
                version: *v,
                rx_packets: ring.rx,
                tx_packets: ring.tx,
                new_flows,
                conntrack_entries: entries,
                handed_off: ring.handed_off,
                handoff_ring_full: ring.handoff_ring_full,
                handoff_received: ring.handoff_received,
            }
        })
        .collect()
}

impl Shared {
    pub fn workers(&self) -> Vec<WorkerView> {
        self.workers.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// True when every worker runs `version` or newer.
    pub fn synced_to(&self, version: u64) -> bool {
        self.workers()
            .iter()
            .all(|w| w.running.load(Ordering::Acquire) >= version)
    }

    /// Waits (polling, at most `limit`) until every worker runs `version`.
    pub async fn wait_synced(&self, version: u64, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            if self.synced_to(version) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The flow cache's counters as of now, with the entry count of the last view.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        let c = self.flow_cache.as_ref()?;
        let entries = self.view.load().cache.as_ref().map_or(0, |s| s.entries);
        Some(cache::counters(c, entries))
    }

    /// The workers' counters (and the flow cache's) summed.
    pub fn aggregate(&self) -> Aggregate {
        counters::aggregate(&self.workers(), self.cache_stats().as_ref())
    }

    pub fn status(&self) -> api::Status {
        let view = self.view.load();
        let agg = self.aggregate();
        let tables = self.published.current(); // one version: the number and its fingerprint
        let version = tables.version;
        let sync = self.sync.lock().map(|s| *s).ok();
        let (interfaces, rx, tx) = match &view.datapath {
            Some(d) => (
                d.interfaces.iter().map(interface).collect(),
                d.workers.iter().map(|w| w.rx).sum(),
                d.workers.iter().map(|w| w.tx).sum(),
            ),
            None => (Vec::new(), 0, agg.stats.tx),
        };
        let dropped: u64 = agg.drops.iter().sum();
        api::Status {
            appliance: view
                .config
                .as_ref()
                .map(|c| c.appliance.name.clone())
                .unwrap_or_default(),
            release: env!("CARGO_PKG_VERSION").to_string(),
            uptime_seconds: self.started.elapsed().as_secs(),
            config_path: self.config_path.display().to_string(),
            config_version: version,
            synced: agg.running.iter().all(|v| *v >= version),
            table_fingerprint: super::fleet::status::fingerprint(&tables),
            sync_lag_ms: sync
                .filter(|s| s.version == version)
                .and_then(|s| s.lag)
                .map(|d| d.as_secs_f64() * 1000.0),
            workers: worker_status(&agg, view.datapath.as_ref()),
            interfaces,
            totals: api::Totals {
                rx_packets: rx,
                tx_packets: tx,
                passed_packets: agg.stats.passed,
                dropped_packets: dropped,
                vip_bytes: agg.vips.values().map(|v| v.bytes).sum(),
            },
            drops: DropReason::ALL
                .iter()
                .zip(agg.drops)
                .map(|(r, n)| api::Count {
                    name: r.name().to_string(),
                    value: n,
                })
                .collect(),
            conntrack_entries: agg.conntrack_entries,
            conntrack_capacity: agg.conntrack_capacity,
            conntrack_fallbacks: agg.stats.conntrack_fallback,
            conntrack: conntrack_doc(&agg),
            bgp: view.config.as_ref().is_some_and(|c| c.bgp.is_some()),
            flow_cache: self.cache_stats().map(|c| api::FlowCache {
                hits: c.hits,
                misses: c.misses,
                entries: c.entries as u64,
            }),
            flood: view.datapath.as_ref().map(|d| flood_doc(d.steer.flood)),
            takeover: self.takeover.lock().ok().and_then(|t| t.clone()),
            lvs: self.lvs_doc(&agg),
            sync: self.flow_sync.get().map(crate::sync::status),
        }
    }

    /// The LVS features' counters (for the metrics).
    pub fn status_lvs(&self) -> api::Lvs {
        self.lvs_doc(&self.aggregate())
    }

    /// The LVS features' counters, and the persistence table's fill (a scan of it).
    fn lvs_doc(&self, agg: &Aggregate) -> api::Lvs {
        let table = self.published.persistence();
        let now_s = (crate::datapath::monotonic_ns() / 1_000_000_000) as u32;
        let st = &agg.stats;
        api::Lvs {
            persistence_entries: table.entries(now_s) as u64,
            persistence_capacity: table.capacity() as u64,
            persistence_hits: st.persist_hits,
            persistence_misses: st.persist_misses,
            persistence_evictions: st.persist_evictions,
            limit_skips: st.limit_skips,
            overflow_refused: agg.drops[DropReason::Overflow.index()],
            overflow_resets: st.overflow_resets,
            overflow_ignored: st.overflow_ignored,
            one_packet: st.one_packet,
        }
    }

    /// Every VIP, in config order.
    pub fn vips(&self) -> Vec<api::Vip> {
        self.vips_page(&api::Page::default()).1
    }

    /// The VIPs `page` selects, in config order, and how many matched its filter; only
    /// the page's documents are built.
    pub fn vips_page(&self, page: &api::Page) -> (usize, Vec<api::Vip>) {
        let view = self.view.load();
        let Some(cfg) = &view.config else {
            return (0, Vec::new());
        };
        let matched: Vec<usize> = (0..cfg.vips.len())
            .filter(|&i| page.matches(&cfg.vips[i].name))
            .collect();
        let window = page.window(matched.len());
        if window.is_empty() {
            return (matched.len(), Vec::new());
        }
        let tables = self.published.current();
        let agg = self.aggregate();
        let docs = matched[window]
            .iter()
            .map(|&slot| vip_doc(&view, &tables, &agg, slot, &cfg.vips[slot]))
            .collect();
        (matched.len(), docs)
    }

    pub fn vip(&self, name: &str) -> Option<api::Vip> {
        let view = self.view.load();
        let cfg = view.config.as_ref()?;
        let slot = cfg.vips.iter().position(|v| v.name == name)?;
        let tables = self.published.current();
        let agg = self.aggregate();
        Some(vip_doc(&view, &tables, &agg, slot, &cfg.vips[slot]))
    }

    /// VIP `name`'s outbound range and shares now: `None` for an unknown VIP, `Some(None)`
    /// for one without a range.
    pub fn outbound(&self, name: &str) -> Option<Option<api::Outbound>> {
        let view = self.view.load();
        let cfg = view.config.as_ref()?;
        let slot = cfg.vips.iter().position(|v| v.name == name)?;
        let tables = self.published.current();
        let now = crate::datapath::monotonic_ns();
        Some(super::outbound::doc(&tables, slot, &cfg.vips[slot], now))
    }

    /// The backends of VIP `name`, in config order; `None` for an unknown VIP.
    pub fn backends(&self, name: &str) -> Option<Vec<api::Backend>> {
        self.backends_page(name, &api::Page::default()).map(|p| p.1)
    }

    /// The backends of VIP `name` that `page` selects (its filter on `address:port`), and
    /// how many matched; `None` for an unknown VIP.
    pub fn backends_page(
        &self,
        name: &str,
        page: &api::Page,
    ) -> Option<(usize, Vec<api::Backend>)> {
        let view = self.view.load();
        let tables = self.published.current();
        let agg = self.aggregate();
        let cfg = view.config.as_ref()?;
        let slot = cfg.vips.iter().position(|v| v.name == name)?;
        let v = &cfg.vips[slot];
        let shares = ring_shares(&tables, slot);
        let matched: Vec<usize> = (0..v.backends.len())
            .filter(|&i| {
                let b = &v.backends[i];
                page.matches(&std::net::SocketAddr::new(b.address, b.port).to_string())
            })
            .collect();
        let window = page.window(matched.len());
        Some((
            matched.len(),
            matched[window]
                .iter()
                .map(|&i| (i, &v.backends[i]))
                .map(|(i, b)| {
                    let key = BackendId::of(v, b);
                    let id = key.clone();
                    let ov = view.overrides.get(&key).copied().unwrap_or_default();
                    let health = if v.checks_of(b).is_empty() {
                        HealthView {
                            state: "unchecked",
                            reason: None,
                        }
                    } else {
                        view.health.get(&key).cloned().unwrap_or(HealthView {
                            state: "unknown",
                            reason: None,
                        })
                    };
                    let totals = agg.backends.get(&id).copied().unwrap_or_default();
                    let conns = agg.backend_conns.get(&id).copied().unwrap_or_default();
                    let (ring_share, ideal_share, eligible) =
                        shares.get(i).copied().unwrap_or((0.0, 0.0, false));
                    api::Backend {
                        id: std::net::SocketAddr::new(b.address, b.port).to_string(),
                        address: b.address.to_string(),
                        port: b.port,
                        state: b.state.name().to_string(),
                        state_overridden: ov.state.is_some(),
                        health: health.state.to_string(),
                        health_reason: health.reason,
                        weight: b.weight,
                        weight_overridden: ov.weight.is_some(),
                        eligible,
                        ring_share,
                        ideal_share,
                        active_flows: agg.backend_flows.get(&id).copied().unwrap_or(0),
                        max_connections: b.max_connections,
                        resume_connections: b.resume_connections,
                        full: backend_full(&tables, slot, i),
                        effective_weight: effective_weight(&tables, slot, i),
                        ramping_until_ms: view.ramps.get(&key).map(|t| unix_ms(*t)),
                        packets: totals.packets,
                        bytes: totals.bytes,
                        new_flows: totals.new_flows,
                        active_connections: conns.0,
                        inactive_connections: conns.1,
                        vtep: b.vtep.map(|a| a.to_string()),
                        role: if b.sorry { "sorry" } else { "primary" }.to_string(),
                        agent: super::policy::agent_word(&view.agents, &key),
                        fleet_health: view
                            .fleet_health
                            .get(&key)
                            .map(|up| if *up { "up" } else { "down" }.to_string()),
                    }
                })
                .collect(),
        ))
    }

    pub fn bgp(&self) -> api::Bgp {
        let view = self.view.load();
        let b = view.config.as_ref().and_then(|c| c.bgp.as_ref());
        api::Bgp {
            enabled: b.is_some(),
            asn: b.map(|b| b.asn),
            router_id: b.map(|b| b.router_id.to_string()),
            announced: view
                .announced
                .iter()
                .map(|ip| bgp::IpNet::from(*ip).to_string())
                .collect(),
            peers: view
                .peers
                .iter()
                .map(|p| api::Peer {
                    address: p.address.to_string(),
                    asn: p.asn,
                    state: format!("{:?}", p.state),
                    uptime_seconds: p.uptime.map(|d| d.as_secs()),
                    prefixes_announced: p.prefixes_announced as u64,
                    prefixes_received: p.prefixes_received as u64,
                    last_error: p.last_error.clone(),
                    flaps: p.flaps,
                    bfd: p.bfd.as_ref().map(|b| b.state.to_string()),
                })
                .collect(),
        }
    }
}

/// Per backend position of VIP `slot`: (ring share, ideal share, eligible).
pub fn ring_shares(tables: &Tables, slot: usize) -> Vec<(f64, f64, bool)> {
    let Some(v) = tables.vips.get(slot) else {
        return Vec::new();
    };
    let n = v.backends.len();
    let counts = v.ring.counts(n);
    let total: u64 = counts.iter().map(|c| u64::from(*c)).sum();
    let range = v.backends.start as usize..v.backends.end as usize;
    let eligible: Vec<bool> = tables.eligible[range.clone()].to_vec();
    let weights: Vec<u32> = tables.weights[range].to_vec();
    let wsum: u64 = weights
        .iter()
        .zip(&eligible)
        .filter(|(_, e)| **e)
        .map(|(w, _)| u64::from(*w))
        .sum();
    (0..n)
        .map(|i| {
            let share = if total == 0 {
                0.0
            } else {
                f64::from(counts.get(i).copied().unwrap_or(0)) / total as f64
            };
            let ideal = if eligible[i] && wsum > 0 {
                f64::from(weights[i]) / wsum as f64
            } else {
                0.0
            };
            (share, ideal, eligible[i])
        })
        .collect()
}

/// Whether backend `i` of VIP slot `vip` is marked full on the running version's board.
fn backend_full(tables: &Tables, vip: usize, i: usize) -> bool {
    let Some(v) = tables.vips.get(vip) else {
        return false;
    };
    let slot = v.backends.start as usize + i;
    tables
        .backends
        .get(slot)
        .filter(|e| slot < v.backends.end as usize && e.limit.is_some())
        .is_some_and(|e| tables.limits.marked_full(e.limit_index))
}

/// The weight backend `i` of VIP `vip` has in `tables` (slow start lowers it while it
/// ramps); 0 when the tables do not have it.
pub fn effective_weight(tables: &Tables, vip: usize, i: usize) -> u32 {
    let Some(v) = tables.vips.get(vip) else {
        return 0;
    };
    let slot = v.backends.start as usize + i;
    if slot >= v.backends.end as usize {
        return 0;
    }
    tables.backends.get(slot).map_or(0, |e| e.weight)
}

/// `at` as Unix time in milliseconds (an instant of this process's monotonic clock).
fn unix_ms(at: Instant) -> u64 {
    let now = Instant::now();
    let wall = std::time::SystemTime::now();
    let t = if at >= now {
        wall + (at - now)
    } else {
        wall - (now - at)
    };
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Largest ring share over ideal share among eligible backends.
pub fn imbalance(shares: &[(f64, f64, bool)]) -> Option<f64> {
    shares
        .iter()
        .filter(|(_, ideal, e)| *e && *ideal > 0.0)
        .map(|(s, ideal, _)| s / ideal)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))
}

fn vip_doc(
    view: &View,
    tables: &Tables,
    agg: &Aggregate,
    slot: usize,
    v: &config::Vip,
) -> api::Vip {
    let totals = agg.vips.get(&v.name).copied().unwrap_or_default();
    let shares = ring_shares(tables, slot);
    let healthy = v
        .backends
        .iter()
        .filter(|b| {
            v.checks_of(b).is_empty()
                || view
                    .health
                    .get(&BackendId::of(v, b))
                    .is_some_and(|h| h.state == "up")
        })
        .count();
    api::Vip {
        name: v.name.clone(),
        address: v.address.to_string(),
        port: v.port,
        protocol: v.protocol.name().to_string(),
        mode: v.mode.name().to_string(),
        encap: match v.mode {
            Mode::Tunnel(e) => Some(e.name().to_string()),
            _ => None,
        },
        scheduler: v.scheduler.name().to_string(),
        hash: v.hash.name().to_string(),
        // A tenant's address is never announced (`announce::wanted`): an underlay VIP's
        // announcement of the same address is not this VIP's.
        announced: v.tenant_vni.is_none() && view.announced.contains(&v.address),
        withdrawn_by_operator: view.withdrawn.contains(&v.name),
        backends_eligible: shares.iter().filter(|s| s.2).count() as u32,
        backends_healthy: healthy as u32,
        backends_total: v.backends.len() as u32,
        packets: totals.packets,
        bytes: totals.bytes,
        new_flows: totals.new_flows,
        active_flows: agg.vip_flows.get(&v.name).copied().unwrap_or(0),
        hash_imbalance: imbalance(&shares),
        scheduler_flags: v
            .scheduler_flags
            .iter()
            .map(|f| f.name().to_string())
            .collect(),
        persistence_seconds: v.persistence.map(|d| d.as_secs()),
        persistence_netmask: v.persistence.map(|_| v.persistence_netmask),
        udp_one_packet: v.udp_one_packet,
        tenant_vni: v.tenant_vni,
        quorum: super::policy::quorum_word(tables, slot).to_string(),
        role: v.announce.role.name().to_string(),
    }
}

/// The connection tables' fill by state and their counters, summed over the workers.
fn conntrack_doc(agg: &Aggregate) -> api::Conntrack {
    use crate::lb::FlowState as S;
    let fill = |s: S| agg.conntrack_fill[s.class()];
    let c = &agg.conntrack;
    api::Conntrack {
        embryonic_tcp: fill(S::TcpSyn),
        established_tcp: fill(S::TcpEstablished),
        closing_tcp: fill(S::TcpClosing),
        embryonic_udp: fill(S::UdpNew),
        established_udp: fill(S::Udp),
        inserted: c.inserted,
        promoted: c.promoted,
        expired: c.expired,
        evicted_embryonic: c.evicted_embryonic,
        evicted_closing: c.evicted_closing,
        table_full: c.full,
        stateless_no_entry: agg.stats.stateless_no_entry,
        stateless_table_full: agg.stats.conntrack_fallback,
        snat_exhausted: agg.drops[DropReason::SnatExhausted.index()],
        snat_ports: agg.snat_ports,
    }
}

/// One datapath interface as the API shows it.
fn interface(i: &InterfaceStatus) -> api::Interface {
    api::Interface {
        name: i.name.clone(),
        xdp_mode: match i.xdp_mode {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
        }
        .to_string(),
        zero_copy: i.zero_copy,
        zero_copy_refused: i.zero_copy_refused.clone(),
        queues: i.queues,
        return_steering: i.return_steering.describe(),
        state: i.state.name().to_string(),
        state_detail: i.state.describe(),
        socket_drops: api::SocketDrops {
            rx_ring_full: i.kernel.rx_ring_full,
            rx_fill_ring_empty: i.kernel.rx_fill_ring_empty,
            rx_dropped: i.kernel.rx_dropped,
            rx_invalid: i.kernel.rx_invalid,
            tx_invalid: i.kernel.tx_invalid,
        },
    }
}
