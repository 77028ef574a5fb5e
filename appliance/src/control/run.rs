//! `sluice run`: brings the datapath up with the first version, then waits on events and
//! hands each to its handler (`handlers.rs`); on SIGTERM or SIGINT it withdraws (or, with
//! graceful restart, abandons) the routes and detaches the datapath.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::info;

use super::announce::Announcer;
use super::commit::{set_probes, start_speaker};
use super::events::{EventRing, Kind};
use super::prepare::{self, HealthSource, Inputs, Targets};
use super::shared::{Command, Shared, Sync, WorkerView};
use super::state::State;
use super::view::{self, event};
use super::{RunError, api, cache, neighbours};
use crate::config;
use crate::datapath::flowcache::{self, FlowCache};
use crate::datapath::neigh::Resolver;
use crate::datapath::vipprobe::VipProbes;
use crate::datapath::{Datapath, DatapathConfig, DatapathStats, FrameHandler};
use crate::engine::{CounterSnapshot, LbHandler, Published};

/// Everything the control loop owns.
pub(super) struct Control {
    pub(super) st: State,
    pub(super) shared: Arc<Shared>,
    /// The routes-and-neighbours task (see `neighbours.rs`).
    pub(super) net: neighbours::NetTask,
    pub(super) dp: Datapath,
    pub(super) prober: health::Prober,
    pub(super) targets: Targets,
    pub(super) announcer: Option<Announcer>,
    /// Until when BGP waits for the health checks to decide.
    pub(super) settle_by: Instant,
    /// Peer states at the last tick, for BGP events.
    pub(super) peer_states: HashMap<IpAddr, bgp::State>,
    /// Drops at the last tick, and when the last spike was reported.
    pub(super) last_drops: u64,
    pub(super) last_spike: Option<Instant>,
    /// Flood mode as the last tick saw it.
    pub(super) flood: super::flood::Watch,
    /// Probes not run (local shortage) at the last event about them.
    pub(super) last_not_run: u64,
    /// Health transitions received and not yet committed.
    pub(super) health_batch: super::batch::HealthBatch,
    /// Set while a health batch commits: when its first transition arrived.
    pub(super) health_since: Option<Instant>,
    /// The etcd side of `[fleet]`, when the appliance is a fleet member.
    pub(super) fleet: Option<super::fleet::Link>,
    /// The flow cache's walks (eviction after commits, the entry count), off the runtime.
    pub(super) walker: Option<cache::Walker>,
    /// When the last slow-start step was committed (steps keep `MIN_STEP_GAP` apart).
    pub(super) last_ramp_step: Option<Instant>,
    /// The operator overrides on disk (see `kept.rs`).
    pub(super) keeper: super::kept::Keeper,
}

impl Control {
    /// Republishes the view readers see; `datapath` when fresh counters were read.
    pub(super) fn view(&self, datapath: Option<DatapathStats>) {
        view::publish(
            &self.shared,
            &self.st,
            &self.prober.status(),
            &self.targets,
            self.announcer.as_ref(),
            self.walker.as_ref(),
            datapath,
        );
    }
}

/// `sluice run`: brings the datapath up with `path`'s config and runs until SIGTERM or
/// SIGINT; SIGHUP (or the API) reloads the config.
pub async fn run(path: &Path) -> Result<(), RunError> {
    let file = config::load(path)?;
    sys::mem::release_free_heap();
    if !nix::unistd::geteuid().is_root() {
        return Err(RunError::NotRoot);
    }
    let resolver = Resolver::new().map_err(RunError::Netlink)?;
    // A fleet member starts on the last revision it activated, if one is kept.
    let start = super::fleet::start_from(path, file);
    let mut st = State::new(path.to_path_buf(), start.config);
    let keeper = super::kept::Keeper::start(&mut st);
    let (hops, misses) = neighbours::first(&resolver)
        .await
        .map_err(RunError::Netlink)?;
    st.next_hops = hops;
    let (published, targets) = first_version(&mut st)?;
    let (cmd_tx, cmd_rx) = mpsc::channel::<Command>(64);
    let shared = Arc::new(shared(&st, path, &published, cmd_tx)?);
    let walker = match &shared.flow_cache {
        Some(c) => Some(
            cache::Walker::spawn(Arc::clone(c), Arc::clone(&shared.published))
                .map_err(RunError::Thread)?,
        ),
        None => None,
    };
    let dp = start_datapath(&st, &shared)?;
    dp.set_vips(&st.steering.vips)?;
    dp.set_return_keys(&st.steering.returns)?;
    dp.set_flood(&st.config.flood)?;
    dp.set_stateless(&shared.published.current(), shared.flow_cache.as_deref())?;
    view::restart_sync_clock(&shared, Instant::now());
    let listeners = api::start(Arc::clone(&shared), &st.config.api)
        .await
        .map_err(RunError::Api)?;
    say_running(&st, &published);
    let sync_task = tokio::spawn(view::watch_sync(Arc::clone(&shared)));
    let (prober, transitions) = health::Prober::spawn_with(probe_context(&shared));
    set_probes(&prober, &targets);
    let settle_by = Instant::now() + prepare::settle_time(&st.config);
    // The speaker starts now that the datapath forwards; VIPs are announced as their health
    // checks settle (every tick re-syncs).
    let announcer = start_speaker(st.config.bgp.as_ref()).await;
    let fleet = super::fleet::Link::start_for(&st.config, start.restored.as_ref())?;
    let mut c = Control {
        st,
        shared: Arc::clone(&shared),
        net: neighbours::spawn(resolver, misses),
        dp,
        prober,
        targets,
        announcer,
        settle_by,
        peer_states: HashMap::new(),
        last_drops: 0,
        last_spike: None,
        flood: super::flood::Watch::default(),
        last_not_run: 0,
        health_batch: Default::default(),
        health_since: None,
        fleet,
        walker,
        last_ramp_step: None,
        keeper,
    };
    c.sync_bgp(Instant::now());
    c.view(c.dp.stats().ok());
    let started = format!("version {}: started", published.version());
    event(&shared, Kind::Commit, started);
    c.fleet_started(start.problem);
    c.kept_started();
    c.event_loop(cmd_rx, transitions).await?;
    listeners.stop();
    sync_task.abort();
    c.stop().await
}

/// The datapath forwards and the API answers: the log says so, and so does systemd's
/// readiness protocol (`Type=notify`).
fn say_running(st: &State, published: &Published) {
    info!(
        version = published.version(),
        vips = st.config.vips.len(),
        api = %st.config.api.socket.display(),
        "sluice running (appliance {})",
        st.config.appliance.name
    );
    super::notify::notify(&format!(
        "READY=1\nSTATUS=version {}, {} VIPs",
        published.version(),
        st.config.vips.len()
    ));
}

/// The first version: tables prepared from the file and the kernel's routes and neighbours
/// alone; the state takes it and the workers will start on it.
fn first_version(st: &mut State) -> Result<(Arc<Published>, Targets), RunError> {
    let version = st.next_version();
    let p = prepare::prepare(Inputs {
        running: None,
        file: &st.file_config,
        overrides: &st.overrides,
        health: HealthSource::Verdicts(&st.health),
        next_hops: &st.next_hops,
        host_addresses: &crate::datapath::host_addresses(),
        version,
        now: Instant::now(),
        resettle: false,
        ramps: &st.ramps,
        agents: &st.policy.agents,
    })?;
    let rest = st.adopt(p);
    st.steering = rest.steering;
    Ok((Arc::new(Published::new(rest.tables)), rest.targets))
}

/// The prober's context: DR and tunnel backends' VIP probes go out through the datapath's
/// path to them, read from the tables published when each probe runs.
fn probe_context(shared: &Arc<Shared>) -> health::ProbeContext {
    let published = Arc::clone(&shared.published);
    let vip = VipProbes::new(
        Arc::new(move || published.current()),
        Arc::clone(&shared.vip_probes),
    );
    health::ProbeContext::new().with_vip_prober(Arc::new(vip))
}

/// What the loop shares with the API and metrics, before the workers exist.
fn shared(
    st: &State,
    path: &Path,
    published: &Arc<Published>,
    commands: mpsc::Sender<Command>,
) -> Result<Shared, RunError> {
    let flow_cache = if st.config.appliance.flow_cache {
        Some(Arc::new(FlowCache::create(flowcache::CACHE_ENTRIES)?))
    } else {
        None
    };
    Ok(Shared {
        flow_cache,
        vip_probes: Default::default(),
        started: Instant::now(),
        config_path: path.to_path_buf(),
        published: Arc::clone(published),
        workers: Mutex::new(Vec::new()),
        view: Default::default(),
        events: Mutex::new(EventRing::default()),
        sync: Mutex::new(Sync {
            version: published.version(),
            published_at: Instant::now(),
            lag: None,
            health_since: None,
        }),
        sync_changed: tokio::sync::Notify::new(),
        commands,
        api_errors: Default::default(),
        probes_not_run: Default::default(),
        listeners: Default::default(),
        reloads_rejected: Default::default(),
        health: Default::default(),
        fleet: Default::default(),
        overrides_file_errors: Default::default(),
    })
}

/// Starts the datapath with one engine per worker, each registered with `shared` so the
/// API can read its counters and the version it runs.
fn start_datapath(st: &State, shared: &Arc<Shared>) -> Result<Datapath, RunError> {
    let capacity = st.config.appliance.conntrack_capacity as usize;
    let factory = {
        let shared = Arc::clone(shared);
        move |worker: usize, workers: usize| -> Box<dyn FrameHandler> {
            let out = Arc::new(Mutex::new(CounterSnapshot::default()));
            let running = Arc::new(AtomicU64::new(0));
            if let Ok(mut w) = shared.workers.lock() {
                w.push(WorkerView {
                    snapshot: Arc::clone(&out),
                    running: Arc::clone(&running),
                });
            }
            let h = LbHandler::new(
                Arc::clone(&shared.published),
                capacity,
                worker as u16,
                workers as u16,
                out,
                running,
            );
            match &shared.flow_cache {
                Some(c) => Box::new(h.with_flow_cache(Arc::clone(c))),
                None => Box::new(h),
            }
        }
    };
    let dp_cfg = DatapathConfig::from(&st.config.appliance);
    Ok(Datapath::start_with_cache(
        dp_cfg,
        shared.flow_cache.clone(),
        factory,
    )?)
}

impl Control {
    /// Routes each event to its handler until SIGTERM or SIGINT.
    async fn event_loop(
        &mut self,
        mut commands: mpsc::Receiver<Command>,
        mut transitions: mpsc::UnboundedReceiver<health::Transition>,
    ) -> Result<(), RunError> {
        let mut term = signal(SignalKind::terminate()).map_err(RunError::Signal)?;
        let mut int = signal(SignalKind::interrupt()).map_err(RunError::Signal)?;
        let mut hup = signal(SignalKind::hangup()).map_err(RunError::Signal)?;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut ticks: u64 = 0;
        let mut stall = StallHook::from_env()?;
        loop {
            let due = self
                .health_batch
                .due(super::batch::Pacing::of(&self.st.config));
            // A far deadline stands in while no batch waits (the branch is disabled then).
            let batch_at = due.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            let ramp = self.ramp_at();
            let ramp_at = ramp.unwrap_or(batch_at);
            tokio::select! {
                _ = term.recv() => { info!("SIGTERM: stopping"); return Ok(()); }
                _ = int.recv() => { info!("SIGINT: stopping"); return Ok(()); }
                _ = hup.recv() => self.on_hangup().await,
                Some(cmd) = commands.recv() => self.on_command(cmd).await,
                Some(tr) = transitions.recv() => self.on_transitions(tr, &mut transitions).await,
                _ = tokio::time::sleep_until(batch_at.into()), if due.is_some() => {
                    self.commit_health().await;
                }
                _ = tokio::time::sleep_until(ramp_at.into()), if ramp.is_some() => {
                    self.ramp_step().await;
                }
                Some(u) = super::fleet::Link::next(&mut self.fleet) => self.on_fleet_update(u).await,
                Some(ev) = self.net.events.recv() => self.on_net_event(ev),
                _ = tick.tick() => {
                    ticks += 1;
                    self.on_tick(ticks, Instant::now()).await;
                    self.fleet_tick().await;
                }
                for_how_long = stall.next() => stall_runtime(for_how_long).await,
            }
        }
    }

    /// Leaves BGP, then detaches the datapath.
    async fn stop(mut self) -> Result<(), RunError> {
        super::notify::notify("STOPPING=1");
        self.fleet_leave().await;
        // Routers move traffic away (GRACEFUL_SHUTDOWN, then withdraw) while we still
        // forward; with graceful restart configured they keep the routes for the next
        // process instead.
        if let Some(a) = self.announcer.take() {
            if a.graceful_restart() {
                a.abandon();
            } else {
                a.shutdown().await;
            }
        }
        self.dp.stop()?;
        info!("final stats: {}", view::summary(&self.shared));
        info!("datapath stopped, XDP detached");
        Ok(())
    }
}

/// The environment variable that arms [`StallHook`]: a duration in milliseconds.
pub const STALL_ENV: &str = "SLUICE_TEST_STALL_MS";

/// A test hook, armed only when [`STALL_ENV`] is set: each SIGUSR2 then blocks every worker
/// thread of the control plane's runtime for that long, as a stuck syscall or a huge commit
/// would. Tests use it to prove that what must not wait for the control plane (BGP and BFD
/// timers, the datapath) does not.
struct StallHook(Option<(tokio::signal::unix::Signal, Duration)>);

impl StallHook {
    fn from_env() -> Result<StallHook, RunError> {
        let Some(ms) = std::env::var(STALL_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        else {
            return Ok(StallHook(None));
        };
        let sig = signal(SignalKind::user_defined2()).map_err(RunError::Signal)?;
        tracing::warn!("{STALL_ENV}={ms}: SIGUSR2 stalls the control plane (a test hook)");
        Ok(StallHook(Some((sig, Duration::from_millis(ms)))))
    }

    /// The next stall asked for; never, when the hook is not armed.
    async fn next(&mut self) -> Duration {
        match &mut self.0 {
            Some((sig, d)) => {
                sig.recv().await;
                *d
            }
            None => std::future::pending().await,
        }
    }
}

/// Blocks each of the runtime's worker threads (one blocking task each) for `d`; logs how
/// many it held for (nearly) all of `d`, so a test can tell a full stall from a partial one.
async fn stall_runtime(d: Duration) {
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    let until = Instant::now() + d;
    let held = Arc::new(AtomicU64::new(0));
    info!(workers, "test hook: stalling the control plane for {d:?}");
    for _ in 0..workers {
        let held = Arc::clone(&held);
        tokio::spawn(async move {
            let left = until.saturating_duration_since(Instant::now());
            if left >= d * 9 / 10 {
                held.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            std::thread::sleep(left);
        });
    }
    tokio::time::sleep_until(until.into()).await;
    info!(
        "test hook: the control plane stalled {} of {workers} runtime workers for {d:?}",
        held.load(std::sync::atomic::Ordering::Relaxed)
    );
}
