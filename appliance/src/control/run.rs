//! `sluice run`: brings the datapath up with the first version, then turns every event it
//! waits on (signals, API writes, health transitions, routes and neighbours, the fleet's
//! etcd session, the tick, the state's own deadlines) into an [`Input`] for the executor
//! (`io.rs`), which has the decision (`decide`) handle it and carries out its effects. On
//! SIGTERM or SIGINT the effects withdraw (or, with graceful restart, abandon) the routes
//! and detach the datapath, and the loop ends.
//!
//! ```text
//! signals, API (mpsc Command), prober (transitions), neighbours task (NetEvent),
//! etcd session (Update), tick, State::due deadlines
//!        |  run.rs: one Input at a time
//!        v
//! io.rs: Now (clocks, prober status, host addresses) -> decide::handle(&mut State, Input, &Now)
//!        <- Vec<Effect>: datapath, speaker, prober, walker, readers' model, replies, etcd
//!        '-> an effect's outcome the decision must see comes back as an Input, first
//! ```

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::fleet::client::Update;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::info;

use super::change::{Command, PrepareError};
use super::cores::Cores;
use super::counters::WorkerView;
use super::decide;
use super::events::EventRing;
use super::fleet::{self, FleetError, Membership, Session};
use super::input::{Input, Now};
use super::io::{self, Io, Turn};
use super::kept::Keeper;
use super::leftovers;
use super::model::{Shared, Sync};
use super::neighbours::{self, NetEvent};
use super::state::{First, State};
use super::takeover::{Asked, Offer, TakeoverError};
use super::takeover_run::{
    Handed, Imports, Source, fail, finish_takeover, handed_over, offer_takeover, take_flows,
};
use super::{api, cache, notify, prepare, view};
use crate::config;
use crate::datapath::flowcache::{self, FlowCache};
use crate::datapath::neigh::{NeighError, Resolver};
use crate::datapath::vipprobe::VipProbes;
use crate::datapath::{Datapath, DatapathConfig, FrameHandler, Loaded};
use crate::engine::{CounterSnapshot, LbHandler, Published};

/// Why `sluice run` could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Config(#[from] config::LoadError),
    #[error("sluice run needs root (or CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW and CAP_SYS_ADMIN)")]
    NotRoot,
    #[error("cannot build tables: {0}")]
    Tables(#[from] PrepareError),
    #[error("datapath: {0}")]
    Datapath(#[from] crate::datapath::DatapathError),
    /// Routes and neighbours come from rtnetlink in the appliance's network namespace.
    #[error("netlink: {0} (sluice run reads routes and neighbours over rtnetlink)")]
    Netlink(#[source] NeighError),
    #[error("cannot install signal handlers: {0}")]
    Signal(#[source] std::io::Error),
    #[error("{0}")]
    Api(#[from] api::ApiStartError),
    #[error("{0}")]
    Fleet(#[from] FleetError),
    #[error("cannot start the flow cache's walker thread: {0} (out of threads or memory?)")]
    Thread(#[source] std::io::Error),
    #[error("{0}")]
    Takeover(#[from] TakeoverError),
    #[error("{0}")]
    Sync(#[from] crate::sync::SyncError),
}

/// Where the loop's events come from.
struct Sources {
    commands: mpsc::Receiver<Command>,
    transitions: mpsc::UnboundedReceiver<health::Transition>,
    net: mpsc::Receiver<NetEvent>,
    fleet: Option<mpsc::Receiver<Update>>,
    /// A new process asking to take over (see [`super::takeover`]).
    takeover: Option<Offer>,
    /// Fires once connection sync caught up (`None` without `[sync]`, or after).
    sync: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// `sluice run`: brings the datapath up with `path`'s config and runs until SIGTERM or
/// SIGINT; SIGHUP (or the API) reloads the config. With `takeover`, the appliance running on
/// the same config hands its connections over to this process (see [`super::takeover`]).
pub async fn run(path: &Path, takeover: bool) -> Result<(), RunError> {
    let file = config::load(path)?;
    sys::mem::release_free_heap();
    if !nix::unistd::geteuid().is_root() {
        return Err(RunError::NotRoot);
    }
    let api_socket = file.api.socket.clone();
    let (taking, handed) = handed_over(&api_socket, takeover).await?;
    let resolver = Resolver::new().map_err(RunError::Netlink)?;
    // A fleet member starts on the last revision it activated, if one is kept.
    let start = fleet::start_from(path, file);
    let (keeper, kept) = Keeper::read(&start.config);
    let (next_hops, misses) = neighbours::first(&resolver)
        .await
        .map_err(RunError::Netlink)?;
    let left = leftovers::read(&start.config, &next_hops.net, taking.is_some());
    let first = First {
        path: path.to_path_buf(),
        file: Arc::new(start.config),
        overrides: kept.backends,
        withdrawn: kept.withdrawn,
        keeper,
        next_hops,
        exec: &Cores,
        health: handed.health.iter().chain(&left.health).cloned().collect(),
        versions_from: handed.version,
        outbound: handed.outbound.clone(),
    };
    let mut st = decide::first(first, &reading(crate::datapath::host_addresses()))?;
    let (cmd_tx, commands) = mpsc::channel::<Command>(64);
    let shared = Arc::new(shared(&st, path, cmd_tx, taking.is_some(), left.cache)?);
    let walker = match &shared.flow_cache {
        Some(c) => Some(
            cache::Walker::spawn(Arc::clone(c), Arc::clone(&shared.published))
                .map_err(RunError::Thread)?,
        ),
        None => None,
    };
    // Connection sync (`crate::sync`): the workers attach to it; the loop hears when it
    // caught up with the peers' flows, and the VIPs are held back until then.
    let (sync, sync_done) = start_sync(&st, &shared)?;
    let sync_handle = sync.as_ref().map(|s| s.handle.clone());
    let over_socket = matches!(taking, Some(Source::Socket(_)));
    let (dp, report) = forward(&st, &shared, (taking, left.imports), &handed, sync_handle).await?;
    view::restart_sync_clock(&shared, Instant::now());
    let listeners = api::start(Arc::clone(&shared), &st.config.api)
        .await
        .map_err(RunError::Api)?;
    let offer = offer_takeover(&api_socket, over_socket)?;
    say_running(&st);
    let quick = took_over(&shared, report, &handed);
    let sync_task = tokio::spawn(view::watch_sync(Arc::clone(&shared)));
    let (prober, transitions) = health::Prober::spawn_with(probe_context(&shared));
    io::set_probes(&prober, &st.targets);
    st.settle_by = match quick {
        // The verdicts the tables were built on are the old process's: nothing to wait for.
        true => Instant::now(),
        false => Instant::now() + prepare::settle_time(&st.config),
    };
    // The speaker starts now that the datapath forwards; VIPs are announced as their health
    // checks settle (every tick re-syncs).
    let announcer = io::start_speaker(st.config.bgp.as_ref()).await;
    let (session, updates) = join_fleet(&mut st, start.restored.as_ref())?;
    let (net, net_events) = neighbours::spawn(resolver, misses);
    let mut io = Io::new(
        shared, dp, prober, announcer, net, session, walker, listeners, sync_task,
    );
    let started = io.started(start.problem);
    io.turn(&mut st, started).await?;
    let sources = Sources {
        commands,
        transitions,
        net: net_events,
        fleet: updates,
        takeover: offer,
        sync: sync_done,
    };
    // `sync` lives until the loop ends (its thread stops when it drops).
    event_loop(&mut st, &mut io, sources).await
}

/// Joins the fleet's etcd session when `[fleet]` is set (`restored`: the last good revision
/// kept on disk).
fn join_fleet(
    st: &mut State,
    restored: Option<&fleet::lastgood::LastGood>,
) -> Result<(Option<Session>, Option<mpsc::Receiver<Update>>), RunError> {
    let Some(f) = &st.config.fleet else {
        return Ok((None, None));
    };
    let name = st.config.appliance.name.clone();
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let holder = super::fleet::session::holder(&st.config.api.socket, started_ms);
    let (s, updates) = Session::start(f, &name, holder)?;
    st.fleet = Some(Membership::new(f, &name, restored, Instant::now()));
    Ok((Some(s), Some(updates)))
}

/// Starts the datapath with the first version (with a takeover: the program loaded while the
/// old process still forwards, then the old process's tables taken and imported, then DONE
/// and its exit awaited); returns it and the takeover's outcome.
async fn forward(
    st: &State,
    shared: &Arc<Shared>,
    (mut taking, rebuilt): (Option<Source>, Option<Imports>),
    handed: &Handed,
    sync: Option<crate::sync::SyncHandle>,
) -> Result<(Datapath, Option<::api::Takeover>), RunError> {
    // The program is loaded, verified and given the first version's steering while the old
    // process still forwards: from its attach on, every VIP frame is the engine's.
    let mut loaded = Loaded::load(shared.flow_cache.as_deref())?;
    let steer = loaded.steer();
    steer.set_vips_with_acls(&st.steering.vips, &st.steering.acls)?;
    steer.set_return_keys(&st.steering.returns)?;
    steer.set_flood(&st.config.flood)?;
    steer.set_stateless(&st.tables, shared.flow_cache.as_deref())?;
    let flows = match taking.as_mut() {
        Some(t) => take_flows(t).await?,
        None => None,
    };
    let taken = flows.as_ref().map(|b| b.flows());
    if let Some(b) = &flows {
        let now_s = (crate::datapath::instant_ns(Instant::now()) / 1_000_000_000) as u32;
        let kept = shared.published.persistence().import(&b.persistence, now_s);
        info!(kept, "takeover: persistence entries carried over");
    }
    let imports = flows.map(|b| Imports::new(b.workers)).or(rebuilt);
    let dp = match start_datapath(st, shared, loaded, imports.clone(), sync) {
        Ok(dp) => dp,
        Err(e) => {
            if let Some(t) = taking.take() {
                fail(t).await;
            }
            return Err(e);
        }
    };
    dp.set_vips(&st.steering.vips, &st.steering.acls)?;
    dp.set_return_keys(&st.steering.returns)?;
    dp.set_flood(&st.config.flood)?;
    dp.set_stateless(&st.tables, shared.flow_cache.as_deref())?;
    let report = match taking.take() {
        Some(t) => Some(finish_takeover(t, handed, taken, imports.as_ref()).await),
        None => None,
    };
    if let (None, Some(i)) = (taken, &imports) {
        let d = i.done();
        let text = format!(
            "the run before stopped without a hand-over: {} flows rebuilt from its flow \
             cache ({} with their cache entries), {} refused",
            d.flows, d.cached, d.refused
        );
        info!("{text}");
        view::event(shared, super::events::Kind::Takeover, text);
    }
    Ok((dp, report))
}

/// Keeps a takeover's outcome for status and the console, as an event too; whether the
/// process started on the old one's verdicts (BGP then need not wait for checks to settle).
fn took_over(shared: &Shared, report: Option<::api::Takeover>, handed: &Handed) -> bool {
    let Some(r) = report else { return false };
    view::event(shared, super::events::Kind::Takeover, r.to_string());
    let quick = r.cold.is_none() && !handed.health.is_empty();
    if let Ok(mut t) = shared.takeover.lock() {
        *t = Some(r);
    }
    quick
}

/// Starts connection sync when `[sync]` is set, and shows it to the API and metrics.
fn start_sync(
    st: &State,
    shared: &Shared,
) -> Result<
    (
        Option<crate::sync::service::Service>,
        Option<tokio::sync::oneshot::Receiver<()>>,
    ),
    RunError,
> {
    let Some(c) = &st.config.sync else {
        return Ok((None, None));
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = crate::sync::service::Service::start(c, st.config.appliance.timeouts, tx)?;
    let _ = shared.flow_sync.set(s.handle.clone());
    Ok((Some(s), Some(rx)))
}

/// Resolves once sync caught up (or its thread is gone: the VIPs are not held forever).
async fn sync_caught_up(rx: &mut Option<tokio::sync::oneshot::Receiver<()>>) -> Option<()> {
    match rx {
        Some(r) => {
            let _ = r.await;
            *rx = None;
            Some(())
        }
        None => std::future::pending().await,
    }
}

/// The clocks now and `host_addresses`, for the first version (nothing probes yet).
fn reading(host_addresses: Vec<IpAddr>) -> Now {
    let mut now = Now::at(Instant::now());
    now.ns = crate::datapath::instant_ns(now.at);
    now.host_addresses = host_addresses;
    now
}

/// The datapath forwards and the API answers: the log says so, and so does systemd's
/// readiness protocol (`Type=notify`).
fn say_running(st: &State) {
    let version = st.tables.version;
    info!(
        version,
        vips = st.config.vips.len(),
        api = %st.config.api.socket.display(),
        "sluice running (appliance {})",
        st.config.appliance.name
    );
    notify::notify(&format!(
        "READY=1\nSTATUS=version {version}, {} VIPs",
        st.config.vips.len()
    ));
}

/// The prober's context: DR and tunnel backends' VIP probes go out through the datapath's
/// path to them, read from the tables published when each probe runs.
fn probe_context(shared: &Arc<Shared>) -> health::ProbeContext {
    let published = Arc::clone(&shared.published);
    let vip = VipProbes::new(
        Arc::new(move || published.current()),
        Arc::clone(&shared.counters.vip_probes),
    );
    health::ProbeContext::new().with_vip_prober(Arc::new(vip))
}

/// What the loop shares with the API and metrics, before the workers exist: the flow cache
/// is the attached program's when taking over, a crashed run's when it `left` one (see
/// [`leftovers`]), else a new one.
fn shared(
    st: &State,
    path: &Path,
    commands: mpsc::Sender<Command>,
    taking_over: bool,
    left: Option<FlowCache>,
) -> Result<Shared, RunError> {
    let flow_cache = if st.config.appliance.flow_cache {
        let kept = match taking_over {
            true => leftovers::attached_cache(&st.config),
            false => left,
        };
        match kept {
            Some(c) => {
                info!(
                    taking_over,
                    "the flow cache of the program attached before this run is kept"
                );
                Some(Arc::new(c))
            }
            None => Some(Arc::new(FlowCache::create(flowcache::CACHE_ENTRIES)?)),
        }
    } else {
        None
    };
    let (cookie_key, kept) = super::cookie_secret::load_or_draw(&st.config.api.socket);
    let published = Published::new(Arc::clone(&st.tables)).with_cookie_key(
        cookie_key,
        kept,
        crate::datapath::monotonic_ns(),
    );
    let published = Arc::new(published);
    let shared = Shared {
        flow_cache,
        started: Instant::now(),
        config_path: path.to_path_buf(),
        workers: Mutex::new(Vec::new()),
        view: Default::default(),
        events: Mutex::new(EventRing::default()),
        sync: Mutex::new(Sync {
            version: published.version(),
            published_at: Instant::now(),
            lag: None,
            health_since: None,
        }),
        published,
        sync_changed: tokio::sync::Notify::new(),
        commands,
        fleet: Default::default(),
        flow_sync: Default::default(),
        counters: Default::default(),
        takeover: Default::default(),
        capture: Default::default(),
    };
    Ok(shared)
}

/// Starts the datapath with one engine per worker, each registered with `shared` so the
/// API can read its counters and the version it runs; with `imports`, each takes in the
/// flows a process before this one handed over before it sees a frame.
fn start_datapath(
    st: &State,
    shared: &Arc<Shared>,
    loaded: Loaded,
    imports: Option<Imports>,
    sync: Option<crate::sync::SyncHandle>,
) -> Result<Datapath, RunError> {
    let capacity = st.config.appliance.conntrack_capacity as usize;
    let factory = worker_factory(Arc::clone(shared), capacity, imports, sync);
    let dp_cfg = DatapathConfig::from(&st.config.appliance);
    let dp = Datapath::start_loaded(dp_cfg, loaded, shared.flow_cache.clone(), factory)?;
    attach_capture(shared, &dp);
    Ok(dp)
}

/// Gives `sluice capture` the capture points of `dp`; without them the datapath still
/// forwards and a capture says so.
pub(super) fn attach_capture(shared: &Shared, dp: &Datapath) {
    if let Err(e) = shared.capture.attach(dp) {
        tracing::warn!(error = %e, "the datapath's capture points are not available: sluice capture will fail");
    }
}

/// The handler of each worker: an engine over the published tables (and the flow cache),
/// its table filled from `imports` when a hand-over brought flows.
pub(super) fn worker_factory(
    shared: Arc<Shared>,
    capacity: usize,
    imports: Option<Imports>,
    sync: Option<crate::sync::SyncHandle>,
) -> impl Fn(usize, usize) -> Box<dyn FrameHandler> {
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
        let h = match &sync {
            Some(s) => h.with_sync(s),
            None => h,
        };
        let mut h = match &shared.flow_cache {
            Some(c) => h.with_flow_cache(Arc::clone(c)),
            None => h,
        };
        if let Some(i) = &imports {
            i.fill(&mut h, worker, workers);
        }
        Box::new(h)
    }
}

/// What the loop received.
enum Got {
    Input(Input),
    Command(Command),
    Tick,
    /// The datapath watch's check is due (`datapath/watch.rs`).
    Watch,
    Stall(Duration),
    Takeover(Asked),
    /// SIGTERM: a stop, or the stop half of a restart.
    Term,
}

/// How often the datapath watch checks every interface: a program taken away is back (or
/// the VIPs withdrawn) well within a second.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// Hands every event to the executor as an input until a stop ends the loop.
async fn event_loop(st: &mut State, io: &mut Io, mut src: Sources) -> Result<(), RunError> {
    let mut term = signal(SignalKind::terminate()).map_err(RunError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(RunError::Signal)?;
    let mut hup = signal(SignalKind::hangup()).map_err(RunError::Signal)?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut stall = StallHook::from_env()?;
    let mut watch = tokio::time::interval(WATCH_EVERY);
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let due = st.due();
        // A far deadline stands in while nothing is due (the branch is disabled then).
        let far = Instant::now() + Duration::from_secs(3600);
        let got = tokio::select! {
            _ = term.recv() => Got::Term,
            _ = int.recv() => Got::Input(Input::Terminate("SIGINT")),
            _ = hup.recv() => Got::Input(Input::Hangup),
            Some(cmd) = src.commands.recv() => Got::Command(cmd),
            Some(tr) = src.transitions.recv() => {
                Got::Input(Input::Transitions(queued(tr, || src.transitions.try_recv().ok())))
            }
            _ = tokio::time::sleep_until(due.health.unwrap_or(far).into()), if due.health.is_some() => {
                Got::Input(Input::HealthDue)
            }
            _ = tokio::time::sleep_until(due.ramp.unwrap_or(far).into()), if due.ramp.is_some() => {
                Got::Input(Input::RampDue)
            }
            Some(u) = next_update(&mut src.fleet) => Got::Input(Input::Fleet(u)),
            Some(asked) = next_asked(&mut src.takeover) => Got::Takeover(asked),
            Some(()) = sync_caught_up(&mut src.sync) => Got::Input(Input::SyncCaughtUp),
            Some(ev) = src.net.recv() => {
                Got::Input(Input::Net(queued(ev, || src.net.try_recv().ok())))
            }
            _ = tick.tick() => Got::Tick,
            _ = watch.tick() => Got::Watch,
            for_how_long = stall.next() => Got::Stall(for_how_long),
        };
        let input = match got {
            Got::Input(i) => i,
            Got::Command(cmd) => io.command(cmd),
            Got::Tick => Input::Tick(Box::new(io.tick())),
            Got::Watch => match io.watch_datapath() {
                Some(i) => i,
                None => continue,
            },
            Got::Stall(d) => {
                stall_runtime(d).await;
                continue;
            }
            Got::Term => {
                if super::takeover::restarting() && io.hand_over_to_file(st)? {
                    return Ok(());
                }
                Input::Terminate("SIGTERM")
            }
            Got::Takeover(asked) => match io.hand_over(st, asked).await? {
                Turn::Stop => return Ok(()),
                Turn::Continue => continue,
            },
        };
        if io.turn(st, input).await? == Turn::Stop {
            return Ok(());
        }
    }
}

/// `first` and everything already queued behind it.
fn queued<T>(first: T, mut next: impl FnMut() -> Option<T>) -> Vec<T> {
    let mut all = vec![first];
    while let Some(t) = next() {
        all.push(t);
    }
    all
}

/// The next request of a new process (pending forever when none can come).
async fn next_asked(offer: &mut Option<Offer>) -> Option<Asked> {
    match offer {
        Some((_, rx)) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The next update from the fleet's session (pending forever without a fleet).
async fn next_update(updates: &mut Option<mpsc::Receiver<Update>>) -> Option<Update> {
    match updates {
        Some(u) => u.recv().await,
        None => std::future::pending().await,
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
