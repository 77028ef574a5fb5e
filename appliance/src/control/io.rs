//! The control plane's executor: it owns what does I/O (the datapath, the BGP speaker, the
//! prober, the routes-and-neighbours task's requests, the fleet's etcd session, the flow
//! cache's walker, the readers' model and the API's reply channels), hands each input with
//! its readings ([`Now`]) to `decide::handle`, and carries the effects out, in order, here
//! and nowhere else. An effect whose outcome the decision must see comes back as an input,
//! handled before the next event (a commit's staged half first of all, so no other change
//! ever sees half a version).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;
use tracing::{debug, error, info, warn};

use super::announce::Announcer;
use super::api::Listeners;
use super::cache::Walker;
use super::change::{Applied, ChangeError, Command, CommitError};
use super::decide;
use super::effect::{Counter, Effect, SpeakerChange, Stage};
use super::fleet::Session;
use super::fleet::lastgood;
use super::input::{Input, Now, Reload, ReplyTo, Staged, Tick};
use super::model::{Shared, Sync};
use super::neighbours::NetTask;
use super::prepare::{Steering, Targets};

use super::state::State;
use super::{announce, kept, notify, view};
use crate::config;
use crate::datapath::{Datapath, DatapathError, WatchEvent};
use crate::lb::Tables;

type Reply = oneshot::Sender<Result<Applied, ChangeError>>;

/// What carrying out an effect led to.
enum Ran {
    Done,
    /// An input the decision must see.
    Then(Input),
    /// The datapath is detached: the loop ends.
    Stop,
}

/// Whether the loop goes on after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    Continue,
    Stop,
}

/// Everything the control loop does I/O with.
pub struct Io {
    pub(super) shared: Arc<Shared>,
    pub(super) dp: Datapath,
    prober: health::Prober,
    announcer: Option<Announcer>,
    /// Resolution requests to the routes-and-neighbours task.
    net: NetTask,
    fleet: Option<Session>,
    walker: Option<Walker>,
    /// The API listeners and the sync-lag watcher, stopped first at the end.
    listeners: Option<Listeners>,
    sync_task: Option<tokio::task::JoinHandle<()>>,
    replies: HashMap<ReplyTo, Reply>,
    next_reply: u64,
}

impl Io {
    /// The executor over these parts.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        shared: Arc<Shared>,
        dp: Datapath,
        prober: health::Prober,
        announcer: Option<Announcer>,
        net: NetTask,
        fleet: Option<Session>,
        walker: Option<Walker>,
        listeners: Listeners,
        sync_task: tokio::task::JoinHandle<()>,
    ) -> Io {
        Io {
            shared,
            dp,
            prober,
            announcer,
            net,
            fleet,
            walker,
            listeners: Some(listeners),
            sync_task: Some(sync_task),
            replies: HashMap::new(),
            next_reply: 0,
        }
    }

    /// The moment an input is handled; the prober and the host's addresses are read when
    /// it `reads_world`.
    pub fn now(&self, reads_world: bool) -> Now {
        let mut now = Now::at(Instant::now());
        now.ns = crate::datapath::instant_ns(now.at);
        now.wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        if reads_world {
            now.probes = self.prober.status();
            now.host_addresses = crate::datapath::host_addresses();
        }
        now
    }

    /// The first version runs: what the start found, as an input.
    pub fn started(&self, fleet_problem: Option<String>) -> Input {
        Input::Started {
            speaker: self.announcer.is_some(),
            datapath: self.dp.stats().ok(),
            fleet_problem,
        }
    }

    /// An API write as an input; its reply channel is kept until the decision answers.
    pub fn command(&mut self, cmd: Command) -> Input {
        self.next_reply += 1;
        let reply = ReplyTo(self.next_reply);
        self.replies.insert(reply, cmd.reply);
        Input::Api {
            request: cmd.request,
            reply,
        }
    }

    /// What the tick reads.
    pub fn tick(&self) -> Tick {
        Tick {
            datapath: self.dp.stats().map_err(|e| e.to_string()),
            peers: self
                .announcer
                .as_ref()
                .map(Announcer::peers)
                .unwrap_or_default(),
            drops: self.shared.aggregate().drops.iter().sum(),
            probes_not_run: self.prober.counters().local_errors,
            table_full: self.shared.aggregate().conntrack.full,
        }
    }

    /// Hands `first` to the decision and carries out its effects, then those of every
    /// input they lead to.
    pub async fn turn(&mut self, st: &mut State, first: Input) -> Result<Turn, DatapathError> {
        let mut queue = VecDeque::from([first]);
        while let Some(input) = queue.pop_front() {
            let now = self.now(input.reads_world());
            for e in decide::handle(st, input, &now) {
                debug!("effect: {e}");
                match self.run(st, e).await? {
                    Ran::Then(back @ Input::Staged(_)) => queue.push_front(back),
                    Ran::Then(back) => queue.push_back(back),
                    Ran::Done => {}
                    Ran::Stop => return Ok(Turn::Stop),
                }
            }
        }
        Ok(Turn::Continue)
    }

    /// Carries out one effect; returns the input it leads to, if any.
    async fn run(&mut self, st: &State, e: Effect) -> Result<Ran, DatapathError> {
        match e {
            Effect::LoadConfig { reload, fleet } => return Ok(Ran::Then(load(st, reload, fleet))),
            Effect::Stage(s) => return Ok(Ran::Then(Input::Staged(self.stage(s).await))),
            Effect::Withdraw { keep, why } => {
                if let Some(a) = self.announcer.as_mut() {
                    a.withdraw_unless(|ip| keep.contains(ip), why);
                }
            }
            Effect::SetProbes(targets) => set_probes(&self.prober, &targets),
            Effect::Flood { flood, why } => {
                if let Err(e) = self.dp.set_flood(&flood) {
                    error!("{why}: flood-mode settings: {e}");
                }
            }
            Effect::FloodMode(on) => self.shared.published.set_flood(on),
            Effect::Publish {
                tables,
                health_since,
            } => self.publish(tables, health_since),
            Effect::Stateless { tables, why } => self.stateless(&tables, &why),
            Effect::Announce {
                wanted,
                initial_done,
            } => {
                if let Some(a) = self.announcer.as_mut() {
                    a.sync(&wanted);
                    if initial_done {
                        a.initial_routes_done();
                    }
                }
            }
            Effect::View { datapath } => self.view(st, datapath.map(|d| *d)),
            Effect::Event(kind, m) => view::event(&self.shared, kind, m),
            Effect::Count(c) => self.count(c),
            Effect::Reply {
                to,
                result,
                after_walk,
            } => self.reply(to, result, after_walk),
            Effect::Resolve(want) => self.net.resolve(want),
            Effect::SaveOverrides { dir, kept } => {
                let result = kept::save(&dir, &kept);
                return Ok(Ran::Then(Input::OverridesSaved { kept, result }));
            }
            Effect::LogStats => info!("stats: {}", view::summary(&self.shared)),
            Effect::Reclaim(to) => return Ok(self.reclaim(to)),
            e @ (Effect::FleetSend(_)
            | Effect::WriteOverride { .. }
            | Effect::LoadRevision { .. }
            | Effect::SaveLastGood { .. }
            | Effect::FleetStatus(_)
            | Effect::Stopping
            | Effect::LeaveFleet
            | Effect::StopSpeaker { .. }
            | Effect::Stop) => return self.run_fleet_or_stop(st, e).await,
        }
        Ok(Ran::Done)
    }

    /// The fleet's effects and the stop.
    async fn run_fleet_or_stop(&mut self, st: &State, e: Effect) -> Result<Ran, DatapathError> {
        match e {
            Effect::FleetSend(r) => {
                if let Some(s) = &self.fleet {
                    s.send(r);
                }
            }
            Effect::WriteOverride { change, doc } => {
                let result = match &self.fleet {
                    Some(s) => s.write_override(&change.id, doc).await,
                    None => Ok(()),
                };
                return Ok(Ran::Then(Input::OverrideWritten { change, result }));
            }
            Effect::LoadRevision { revision, text } => {
                let file = config::load_fleet(&st.path, &text, revision);
                return Ok(Ran::Then(Input::RevisionLoaded {
                    revision,
                    text,
                    file,
                }));
            }
            Effect::SaveLastGood { path, last_good } => {
                if let Err(e) = lastgood::save(&path, &last_good) {
                    return Ok(Ran::Then(Input::LastGoodNotSaved(e.to_string())));
                }
            }
            Effect::FleetStatus(doc) => {
                if let Ok(mut f) = self.shared.fleet.lock() {
                    *f = Some(*doc);
                }
            }
            Effect::Stopping => self.stopping(),
            Effect::LeaveFleet => {
                if let Some(s) = &self.fleet {
                    s.leave().await;
                }
            }
            Effect::StopSpeaker { graceful_restart } => self.stop_speaker(graceful_restart).await,
            Effect::Stop => {
                self.stop()?;
                return Ok(Ran::Stop);
            }
            // Carried out by `run`.
            other => warn!("effect not carried out: {other}"),
        }
        Ok(Ran::Done)
    }

    /// Swaps `tables` in for the workers, asks the walker to evict the flow-cache entries
    /// it would not repeat (strictly after the swap: a worker that decided with the old
    /// tables takes its own entry back when it sees the new version, and the walk removes
    /// the rest), and restarts the sync-lag clock.
    fn publish(&self, tables: Arc<Tables>, health_since: Option<Instant>) {
        let version = tables.version;
        self.shared.published.publish(tables);
        if let Some(w) = &self.walker {
            w.evict();
        }
        if let Ok(mut s) = self.shared.sync.lock() {
            *s = Sync {
                version,
                published_at: Instant::now(),
                lag: None,
                health_since,
            };
        }
        self.shared.sync_changed.notify_one();
    }

    /// Writes the tables' DR rings and next hops for the XDP program's stateless answer. On
    /// failure the program's answer is switched off (it polices instead) until a later
    /// version writes them whole.
    fn stateless(&self, tables: &Tables, why: &str) {
        match self
            .dp
            .set_stateless(tables, self.shared.flow_cache.as_deref())
        {
            Ok(fill) => debug!(
                version = tables.version,
                vips = fill.vips,
                rings_written = fill.rings_written,
                next_hops = fill.hops,
                skipped = fill.skipped,
                "{why}: stateless answer's rings"
            ),
            Err(e) => {
                error!("{why}: the stateless answer's rings (off until the next version): {e}")
            }
        }
    }

    fn view(&self, st: &State, datapath: Option<crate::datapath::DatapathStats>) {
        view::publish(
            &self.shared,
            st,
            &self.prober.status(),
            self.announcer.as_ref(),
            self.walker.as_ref(),
            datapath,
        );
    }

    /// One check of the datapath watch (`datapath/watch.rs`): an input when it did or saw
    /// something, none while nothing changed.
    pub fn watch_datapath(&mut self) -> Option<Input> {
        let report = self.dp.watch();
        (!report.events.is_empty()).then(|| Input::Datapath {
            report,
            stats: self.dp.stats().ok(),
        })
    }

    /// The operator's reclaim: answered at once, and its report goes to the decision.
    fn reclaim(&mut self, to: ReplyTo) -> Ran {
        match self.dp.reclaim() {
            Ok(report) => {
                let taken = report
                    .events
                    .iter()
                    .filter_map(|e| match e {
                        WatchEvent::Reclaimed {
                            interface,
                            id,
                            name,
                        } => Some((interface.clone(), *id, name.clone())),
                        _ => None,
                    })
                    .collect();
                self.reply(to, Ok(Applied::Reclaimed(taken)), false);
                Ran::Then(Input::Datapath {
                    report,
                    stats: self.dp.stats().ok(),
                })
            }
            Err(e) => {
                warn!("datapath reclaim: {e}");
                self.reply(to, Err(ChangeError::Reclaim(e)), false);
                Ran::Done
            }
        }
    }

    fn count(&self, c: Counter) {
        use std::sync::atomic::Ordering::Relaxed;
        let k = &self.shared.counters;
        if let Counter::DatapathWatch(what) = c {
            if let Ok(mut m) = k.datapath_watch.lock() {
                *m.entry(what).or_default() += 1;
            }
            return;
        }
        match c {
            Counter::HealthTransition => k.health.transitions.fetch_add(1, Relaxed),
            Counter::HealthCommit => k.health.commits.fetch_add(1, Relaxed),
            Counter::ReloadRejected => k.reloads_rejected.fetch_add(1, Relaxed),
            Counter::OverridesFileError => k.overrides_file_errors.fetch_add(1, Relaxed),
            Counter::ProbesNotRun(n) => k.probes_not_run.swap(n, Relaxed),
            Counter::DatapathWatch(_) => 0,
        };
    }

    /// Sends an API write's answer; `after_walk`: once the flow-cache walk asked for so
    /// far has finished, without holding the loop up for it.
    fn reply(&mut self, to: ReplyTo, r: Result<Applied, ChangeError>, after_walk: bool) {
        let Some(reply) = self.replies.remove(&to) else {
            warn!("an API answer for request {} nobody waits for", to.0);
            return;
        };
        match self.walker.as_ref().filter(|_| after_walk) {
            Some(w) => {
                let walked = w.evicted(w.latest());
                tokio::spawn(async move {
                    walked.await;
                    let _ = reply.send(r);
                });
            }
            None => {
                let _ = reply.send(r);
            }
        }
    }

    /// The half of a commit that can fail: the steering maps, then a changed speaker; on
    /// failure what was done is undone (see [`Stage`]).
    async fn stage(&mut self, s: Stage) -> Staged {
        let mut steered = false;
        if let Some((next, running)) = &s.steering {
            if let Err(e) = self.steer(next, running) {
                return self.staged(Err(vec![e]), false);
            }
            steered = true;
        }
        if let Some(sp) = &s.speaker
            && let Err(mut errors) = self.restart_speaker(sp).await
        {
            if let Some((next, running)) = &s.steering {
                match self.steer(running, next) {
                    Ok(()) => steered = false,
                    Err(e) => errors.push(e),
                }
            }
            return self.staged(Err(errors), steered);
        }
        self.staged(Ok(()), steered)
    }

    fn staged(&self, result: Result<(), Vec<CommitError>>, steered: bool) -> Staged {
        Staged {
            result,
            steered,
            speaker: self.announcer.is_some(),
        }
    }

    /// Makes the XDP program steer `to`; on failure the maps hold `from` again (each set is
    /// replaced whole or not at all; the VIP set is put back when the return set fails).
    fn steer(&self, to: &Steering, from: &Steering) -> Result<(), CommitError> {
        self.dp
            .set_vips(&to.vips, &to.acls)
            .map_err(CommitError::Steering)?;
        if let Err(e) = self.dp.set_return_keys(&to.returns) {
            if let Err(back) = self.dp.set_vips(&from.vips, &from.acls) {
                error!("steering maps: cannot put the running VIP keys back: {back}");
            }
            return Err(CommitError::Steering(e));
        }
        Ok(())
    }

    /// Replaces the speaker for a changed `[bgp]`: the new config is checked before the
    /// running speaker stops, and when the new one does not start the running config's
    /// speaker starts again. Returns every error.
    async fn restart_speaker(&mut self, sp: &SpeakerChange) -> Result<(), Vec<CommitError>> {
        if let Some(b) = &sp.next {
            bgp::validate(&announce::speaker_config(b))
                .map_err(|e| vec![CommitError::SpeakerConfig(e)])?;
        }
        info!("reload: [bgp] changed, restarting the speaker");
        if let Some(a) = self.announcer.take() {
            a.shutdown().await;
        }
        let Some(b) = &sp.next else { return Ok(()) };
        match Announcer::start(b).await {
            Ok(a) => {
                self.announcer = Some(a);
                Ok(())
            }
            Err(e) => {
                let mut errors = vec![CommitError::Speaker(e)];
                if let Some(old) = &sp.running {
                    match Announcer::start(old).await {
                        Ok(a) => self.announcer = Some(a),
                        Err(e) => errors.push(CommitError::SpeakerRestore(e)),
                    }
                }
                Err(errors)
            }
        }
    }

    /// The process stops: the API listeners close and systemd hears so.
    pub(super) fn stopping(&mut self) {
        if let Some(l) = self.listeners.take() {
            l.stop();
        }
        if let Some(t) = self.sync_task.take() {
            t.abort();
        }
        notify::notify("STOPPING=1");
    }

    /// Routers move traffic away (GRACEFUL_SHUTDOWN, then withdraw) while the datapath
    /// still forwards; with graceful restart they keep the routes for the next process.
    async fn stop_speaker(&mut self, graceful_restart: bool) {
        let Some(a) = self.announcer.take() else {
            return;
        };
        if graceful_restart {
            a.abandon();
        } else {
            a.shutdown().await;
        }
    }

    /// Closes the BGP sessions without a word (graceful restart: the routers keep the
    /// routes for the next process, which is already running when a takeover calls this).
    pub(super) fn abandon_speaker(&mut self) {
        if let Some(a) = self.announcer.take() {
            a.abandon();
        }
    }

    fn stop(&mut self) -> Result<(), DatapathError> {
        self.dp.stop()?;
        info!("final stats: {}", view::summary(&self.shared));
        info!("datapath stopped, XDP detached");
        Ok(())
    }
}

/// Reads the config file for a reload (a fleet member's merged with the fleet revision it
/// runs), and gives the parsed documents' heap back (large configs).
fn load(st: &State, reload: Reload, fleet: Option<(u64, String)>) -> Input {
    let file = match fleet {
        Some((revision, text)) => config::load_fleet(&st.path, &text, revision),
        None => config::load(&st.path),
    };
    sys::mem::release_free_heap();
    Input::Loaded { reload, file }
}

/// Gives the prober one probe per distinct target; probes that stay keep their state.
pub fn set_probes(prober: &health::Prober, targets: &Targets) {
    prober.set_targets(targets.keys().map(|k| health::Target {
        address: k.address,
        port: k.port,
        check: Arc::clone(&k.check),
        via_vip: k.via_vip,
    }));
}

/// Starts the BGP speaker for `[bgp]`, if there is one; a speaker that cannot start leaves
/// the appliance forwarding without announcements.
pub async fn start_speaker(bgp: Option<&config::Bgp>) -> Option<Announcer> {
    match Announcer::start(bgp?).await {
        Ok(a) => Some(a),
        Err(e) => {
            error!("bgp: {e}; running without announcements");
            None
        }
    }
}
