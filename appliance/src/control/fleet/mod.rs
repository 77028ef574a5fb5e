//! The control loop's side of a fleet (`[fleet]`): versions come from etcd instead of the
//! file. The `fleet` crate's session task hands views of the fleet's keys to the loop; the
//! member state machine turns them into actions, which this module carries out: prepare a
//! revision (the fleet's TOML merged with the local file, validated and built like a
//! reload, running nothing), report ready or refused, write the coordinator's activation,
//! and switch when the activation names the prepared revision. Health in a fleet is the
//! fleet's: local probe verdicts are published under the member's lease and the tables use
//! the quorum over every live member's; operator overrides are written to etcd and applied
//! from it by every member. When etcd is out of reach the member keeps forwarding on what it
//! runs, says it is stale, and the session retries with backoff; the VIPs stay announced.
//! A member that comes back behind the fleet holds its announcements until it has caught up.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub mod lastgood;
pub mod status;

use ::fleet::client::{self, Request, Settings, TlsFiles, Update};
use ::fleet::member::{Action, Member};
use ::fleet::quorum::{self, Verdict};
use ::fleet::{HealthReport, Keys, OverrideDoc, View};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use super::change::ChangeError;
use super::events::Kind;
use super::prepare::{self, HealthSource, Inputs, Prepared};
use super::run::Control;
use super::shared::Override;
use super::view::event;
use crate::config::{self, BackendState, Config};
use crate::lb::BackendId;
use crate::lb::Tables;
use lastgood::LastGood;
use status::Parts;

/// Why a fleet member could not start.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("fleet.password_file: cannot read {path}: {source}")]
    PasswordFile {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What the loop keeps of the fleet.
pub(super) struct Link {
    requests: mpsc::Sender<Request>,
    updates: mpsc::Receiver<Update>,
    name: String,
    member: Member,
    view: View,
    quorum: Option<usize>,
    connected: bool,
    /// When etcd was last reached (or the member started), for the stale time.
    last_contact: Instant,
    last_error: Option<String>,
    /// This member's own probe verdicts.
    local: HashMap<BackendId, bool>,
    verdicts: BTreeMap<String, Verdict>,
    /// The fleet's overrides as last applied.
    applied_overrides: BTreeMap<(String, String), OverrideDoc>,
    /// The prepared revision: its file config (fleet merged with the local file), and the
    /// tables built for it with the version number they took, committed as they are at
    /// the activation when nothing else was committed since.
    pending: Option<(u64, Arc<Config>)>,
    built: Option<(u64, Prepared)>,
    refused: Option<(u64, Vec<(String, String)>)>,
    /// The fleet's text of the prepared revision, and of the running one (what a reload
    /// merges with the file, and what is kept on disk).
    prepared_text: Option<(u64, String)>,
    running_doc: Option<(u64, String)>,
    /// Where the last good revision is kept; whether the running one was read from there
    /// and etcd has not confirmed it yet; failed writes and reads of it.
    state_file: PathBuf,
    from_disk: bool,
    last_good_errors: u64,
}

/// What a member starts on: its file, or its file merged with the last good fleet revision
/// kept on disk (stale until etcd answers), and any problem reading that revision.
pub(super) struct Start {
    pub config: Config,
    pub restored: Option<LastGood>,
    pub problem: Option<String>,
}

/// The config a member at `path` starts on (see [`Start`]); `file` alone without `[fleet]`.
pub(super) fn start_from(path: &Path, file: Config) -> Start {
    let alone = |file, problem| Start {
        config: file,
        restored: None,
        problem,
    };
    let Some(f) = &file.fleet else {
        return alone(file, None);
    };
    let at = lastgood::path(&f.state_dir, &f.name);
    match lastgood::load(&at, &f.name) {
        Ok(None) => alone(file, None),
        Ok(Some(lg)) => match config::load_fleet(path, &lg.text, lg.revision) {
            Ok(config) => Start {
                config,
                restored: Some(lg),
                problem: None,
            },
            Err(e) => {
                let m = format!(
                    "fleet: the last good revision {} in {} does not validate with {} now, \
                     starting without it: {e}",
                    lg.revision,
                    at.display(),
                    path.display()
                );
                alone(file, Some(m))
            }
        },
        Err(e) => alone(file, Some(e.to_string())),
    }
}

impl Link {
    /// The fleet member `cfg` makes (`None` without `[fleet]`), see [`Link::start`].
    pub(super) fn start_for(
        cfg: &Config,
        restored: Option<&LastGood>,
    ) -> Result<Option<Link>, FleetError> {
        cfg.fleet
            .as_ref()
            .map(|f| Link::start(f, &cfg.appliance.name, restored))
            .transpose()
    }

    /// Starts the etcd session for member `member` of `cfg`, running `restored` when the
    /// member started on its last good revision.
    pub(super) fn start(
        cfg: &config::Fleet,
        member: &str,
        restored: Option<&LastGood>,
    ) -> Result<Link, FleetError> {
        let user = match (&cfg.user, &cfg.password_file) {
            (Some(u), Some(p)) => {
                let pw = std::fs::read_to_string(p).map_err(|source| FleetError::PasswordFile {
                    path: p.clone(),
                    source,
                })?;
                Some((u.clone(), pw.trim_end_matches(['\n', '\r']).to_string()))
            }
            _ => None,
        };
        let settings = Settings {
            endpoints: cfg.endpoints.clone(),
            user,
            tls: cfg.tls.as_ref().map(|t| TlsFiles {
                ca: t.ca.clone(),
                cert: t.cert.clone(),
                key: t.key.clone(),
            }),
            keys: Keys::new(&cfg.prefix, &cfg.name),
            member: member.to_string(),
            lease_ttl: cfg.lease_ttl,
        };
        let (requests, updates) = client::spawn(settings);
        let mut m = Member::new(member, cfg.activation_timeout);
        if let Some(lg) = restored {
            m.restore(lg.revision);
        }
        Ok(Link {
            requests,
            updates,
            name: cfg.name.clone(),
            member: m,
            view: View::default(),
            quorum: cfg.quorum.map(|q| q as usize),
            connected: false,
            last_contact: Instant::now(),
            last_error: None,
            local: HashMap::new(),
            verdicts: BTreeMap::new(),
            applied_overrides: BTreeMap::new(),
            pending: None,
            built: None,
            refused: None,
            prepared_text: None,
            running_doc: restored.map(|lg| (lg.revision, lg.text.clone())),
            state_file: lastgood::path(&cfg.state_dir, &cfg.name),
            from_disk: restored.is_some(),
            last_good_errors: 0,
        })
    }

    /// Keeps the running revision on disk; an error is returned for the event log.
    fn save_last_good(&mut self) -> Result<(), String> {
        let Some((revision, text)) = self.running_doc.clone() else {
            return Ok(());
        };
        let lg = LastGood {
            fleet: self.name.clone(),
            revision,
            text,
        };
        lastgood::save(&self.state_file, &lg).map_err(|e| {
            self.last_good_errors += 1;
            e.to_string()
        })
    }

    /// The next update from the session (pending forever without a fleet).
    pub(super) async fn next(link: &mut Option<Link>) -> Option<Update> {
        match link {
            Some(l) => l.updates.recv().await,
            None => std::future::pending().await,
        }
    }

    fn send(&self, r: Request) {
        if let Err(e) = self.requests.try_send(r) {
            warn!("fleet: request to the etcd session dropped: {e}");
        }
    }

    /// The fleet's health verdicts as backend ids, counting this member's newest verdicts.
    fn fleet_health(&mut self, me: &str) -> HashMap<BackendId, bool> {
        let mine = self.local_report();
        let mut live: BTreeMap<&str, &HealthReport> = self.view.live_health();
        live.insert(me, &mine);
        self.verdicts = quorum::decide(&live, self.quorum);
        self.verdicts
            .iter()
            .filter_map(|(name, v)| Some((backend_id(name)?, v.up)))
            .collect()
    }

    fn local_report(&self) -> HealthReport {
        HealthReport {
            backends: self
                .local
                .iter()
                .map(|(id, up)| {
                    let addr = SocketAddr::new(id.address, id.port);
                    (::fleet::doc::backend_name(&id.vip, &addr), *up)
                })
                .collect(),
        }
    }
}

/// `vip/address:port` back to a backend id.
fn backend_id(name: &str) -> Option<BackendId> {
    let (vip, addr) = name.split_once('/')?;
    let a: SocketAddr = addr.parse().ok()?;
    Some(BackendId::new(vip, a.ip(), a.port()))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn override_of(doc: &OverrideDoc) -> Override {
    Override {
        state: doc.state.as_deref().and_then(|s| match s {
            "active" => Some(BackendState::Active),
            "drain" => Some(BackendState::Drain),
            "disabled" => Some(BackendState::Disabled),
            _ => None,
        }),
        weight: doc.weight,
    }
}

fn doc_of(o: &Override) -> OverrideDoc {
    OverrideDoc {
        state: o.state.map(|s| {
            match s {
                BackendState::Active => "active",
                BackendState::Drain => "drain",
                BackendState::Disabled => "disabled",
            }
            .to_string()
        }),
        weight: o.weight,
    }
}

impl Control {
    /// A view, an outage or an activation's outcome from the etcd session.
    pub(super) async fn on_fleet_update(&mut self, u: Update) {
        let Some(link) = self.fleet.as_mut() else {
            return;
        };
        match u {
            Update::View { view, fresh } => {
                if !link.connected {
                    let m = format!(
                        "fleet {}: etcd reached at revision {}",
                        link.name, view.revision
                    );
                    info!("{m}");
                    event(&self.shared, Kind::Commit, m);
                }
                link.connected = true;
                link.last_contact = Instant::now();
                link.last_error = None;
                link.view = *view;
                let mut actions = Vec::new();
                if fresh {
                    actions = link.member.reconnected();
                    if link.from_disk && link.member.caught_up(&link.view) {
                        link.from_disk = false;
                    }
                    if !link.member.caught_up(&link.view) && link.view.activated() > 0 {
                        let m = format!(
                            "fleet: running revision {} behind the fleet's {}: announcements \
                             held until caught up",
                            link.member.running(),
                            link.view.activated()
                        );
                        event(&self.shared, Kind::Bgp, m);
                        self.st.fleet_hold = true;
                        self.sync_bgp(Instant::now());
                    }
                }
                self.run_actions(actions).await;
                self.fleet_follow().await;
            }
            Update::Down { error, retry_in } => {
                if link.connected || link.last_error.is_none() {
                    let m = format!(
                        "fleet {}: etcd unreachable ({error}); forwarding on revision {}, \
                         stale; retrying every {retry_in:?} or so",
                        link.name,
                        link.member.running()
                    );
                    warn!("{m}");
                    event(&self.shared, Kind::Commit, m);
                }
                link.connected = false;
                link.last_error = Some(error);
            }
            Update::Activation { revision, won } => {
                if won {
                    let m = format!("fleet {}: activated revision {revision}", link.name);
                    info!("{m}");
                    event(&self.shared, Kind::Commit, m);
                }
            }
        }
        self.fleet_status();
    }

    /// Health and overrides from the view, then the member's decisions on it. Fleet
    /// verdicts that moved with the view (another member's probes, a member gone) join the
    /// health batch, so a storm of reports makes one version per `health_batch`.
    async fn fleet_follow(&mut self) {
        let name = self.st.config.appliance.name.clone();
        if let Some(link) = self.fleet.as_mut()
            && link.fleet_health(&name) != self.st.health
        {
            self.health_batch.touch(Instant::now());
        }
        self.fleet_apply_overrides().await;
        let Some(link) = self.fleet.as_mut() else {
            return;
        };
        let actions = link.member.on_view(&link.view, now_ms());
        self.run_actions(actions).await;
    }

    /// Once a second: the activation timeout moves, the stale time grows.
    pub(super) async fn fleet_tick(&mut self) {
        let Some(link) = self.fleet.as_mut() else {
            return;
        };
        if link.connected {
            let actions = link.member.on_view(&link.view, now_ms());
            self.run_actions(actions).await;
        }
        self.fleet_status();
    }

    /// Carries out the member's actions (and those they lead to).
    async fn run_actions(&mut self, mut actions: Vec<Action>) {
        while let Some(a) = (!actions.is_empty()).then(|| actions.remove(0)) {
            let Some(link) = self.fleet.as_mut() else {
                return;
            };
            match a {
                Action::Prepare { revision, text } => {
                    let r = self.fleet_prepare(revision, &text);
                    if let Err(e) = &r {
                        let m = format!("fleet: revision {revision} refused here: {e}");
                        warn!("{m}");
                        event(&self.shared, Kind::Reload, m);
                    }
                    if let Some(link) = self.fleet.as_mut() {
                        actions.extend(link.member.prepared_result(revision, r));
                    }
                }
                Action::Report(r) => link.send(Request::Report(r)),
                Action::WriteActivation { activation, expect } => {
                    link.send(Request::Activate { activation, expect })
                }
                Action::Activate { revision } => {
                    actions.extend(self.fleet_activate(revision).await)
                }
                Action::Refused { revision, by } => {
                    let who: Vec<String> = by.iter().map(|(m, e)| format!("{m}: {e}")).collect();
                    let m = format!(
                        "fleet: revision {revision} refused, not activated ({}); revision {} \
                         keeps running",
                        who.join("; "),
                        link.member.running()
                    );
                    warn!("{m}");
                    link.refused = Some((revision, by));
                    event(&self.shared, Kind::Reload, m);
                }
            }
        }
    }

    /// Validates revision `revision` merged with the local file and builds its tables
    /// without running them; keeps the config for the activation.
    fn fleet_prepare(&mut self, revision: u64, text: &str) -> Result<(), String> {
        let file =
            config::load_fleet(&self.st.path, text, revision).map_err(|e| match e.errors() {
                Some(list) => list
                    .0
                    .iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join("\n"),
                None => e.to_string(),
            })?;
        let file = Arc::new(file);
        let version = self.st.next_version();
        let built = self
            .fleet_build(&file, version)
            .map_err(|e| e.to_string())?;
        if let Some(link) = self.fleet.as_mut() {
            link.pending = Some((revision, file));
            link.built = Some((version, built));
            link.prepared_text = Some((revision, text.to_string()));
        }
        Ok(())
    }

    fn fleet_build(
        &self,
        file: &Arc<Config>,
        version: u64,
    ) -> Result<Prepared, prepare::PrepareError> {
        let running = self.shared.published.current();
        prepare::prepare(Inputs {
            running: Some(&running),
            file,
            overrides: &self.st.overrides,
            health: HealthSource::Verdicts(&self.st.health),
            next_hops: &self.st.next_hops,
            host_addresses: &crate::datapath::host_addresses(),
            version,
            now: Instant::now(),
            resettle: true,
            ramps: &self.st.ramps,
            agents: &self.st.policy.agents,
        })
    }

    /// Switches to the prepared `revision`.
    async fn fleet_activate(&mut self, revision: u64) -> Vec<Action> {
        let Some((rev, file)) = self.fleet.as_ref().and_then(|l| l.pending.clone()) else {
            return Vec::new();
        };
        if rev != revision {
            return Vec::new();
        }
        let why = format!("fleet revision {revision}");
        // The tables built at the prepare phase, unless a commit since (health, overrides,
        // routes) made them stale: then they are built again, as they would have been.
        let built = self.fleet.as_mut().and_then(|l| l.built.take());
        let reuse = built.filter(|(v, _)| *v == self.st.version);
        let version = match &reuse {
            Some((v, _)) => *v,
            None => self.st.next_version(),
        };
        let prepared = match reuse {
            Some((_, p)) => Ok(p),
            None => self.fleet_build(&file, version),
        };
        let committed = match prepared {
            Ok(p) => self
                .commit(p, &why, Instant::now())
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = committed {
            let m = format!("fleet: revision {revision} could not be switched to here: {e}");
            warn!("{m}");
            event(&self.shared, Kind::Reload, m);
            return Vec::new();
        }
        let Some(link) = self.fleet.as_mut() else {
            return Vec::new();
        };
        let out = link.member.activated(revision, &link.view, now_ms());
        let m = format!("fleet: revision {revision} running (table version {version})");
        info!("{m}");
        event(&self.shared, Kind::Commit, m);
        if let Some(doc) = link.prepared_text.take().filter(|(r, _)| *r == revision) {
            link.running_doc = Some(doc);
            link.from_disk = false;
            if let Err(e) = link.save_last_good() {
                warn!("{e}");
                event(&self.shared, Kind::Reload, e);
            }
        }
        if self.st.fleet_hold && link.member.caught_up(&link.view) {
            self.st.fleet_hold = false;
            event(
                &self.shared,
                Kind::Bgp,
                format!("fleet: caught up with revision {revision}; announcing again"),
            );
            self.sync_bgp(Instant::now());
        }
        out
    }

    /// Rebuilds the tables when the fleet's verdicts changed; whether a version was
    /// committed.
    async fn fleet_apply_health(&mut self, why: &str) -> bool {
        let name = self.st.config.appliance.name.clone();
        let Some(link) = self.fleet.as_mut() else {
            return false;
        };
        let health = link.fleet_health(&name);
        if health == self.st.health {
            return false;
        }
        self.st.health = health;
        let overrides = self.st.overrides.clone();
        self.update(&overrides, why).await.is_ok()
    }

    /// Applies the fleet's overrides when they changed since last applied.
    async fn fleet_apply_overrides(&mut self) {
        let Some(link) = self.fleet.as_mut() else {
            return;
        };
        if link.view.overrides == link.applied_overrides {
            return;
        }
        link.applied_overrides = link.view.overrides.clone();
        let wanted: HashMap<BackendId, Override> = link
            .view
            .overrides
            .iter()
            .filter_map(|((vip, b), doc)| {
                let a: SocketAddr = b.parse().ok()?;
                Some((BackendId::new(vip, a.ip(), a.port()), override_of(doc)))
            })
            .collect();
        let _ = self.update(&wanted, "fleet: operator overrides").await;
    }

    /// A health batch (`[appliance] health_batch`) in a fleet: the member's own verdicts
    /// take the batch and are published once for all of it; the tables follow the fleet's
    /// quorum over every live member, one version for the batch.
    pub(super) async fn commit_fleet_health(&mut self, batch: super::batch::Taken) {
        let Some(link) = self.fleet.as_mut() else {
            return;
        };
        if batch.apply(&mut link.local) {
            link.send(Request::Health(link.local_report()));
        }
        let why = match batch.transitions {
            1 => "health change".to_string(),
            n => format!("health: {n} transitions"),
        };
        self.health_since = Some(batch.first);
        let committed = self.fleet_apply_health(&why).await;
        self.health_since = None;
        if committed {
            self.shared.health.commits.fetch_add(1, Ordering::Relaxed);
        }
        self.sync_bgp(Instant::now());
        self.fleet_status();
        self.view(None);
    }

    /// An operator's change to a backend, written to etcd for every member; refused while
    /// etcd is out of reach (it would hold on this member only).
    pub(super) async fn fleet_override(
        &mut self,
        id: &BackendId,
        o: &Override,
    ) -> Result<(), ChangeError> {
        let Some(link) = self.fleet.as_ref() else {
            return Ok(());
        };
        let (reply, rx) = oneshot::channel();
        let backend = SocketAddr::new(id.address, id.port).to_string();
        let req = Request::Override {
            vip: id.vip.clone(),
            backend,
            doc: Some(doc_of(o)),
            reply,
        };
        link.requests
            .send(req)
            .await
            .map_err(|e| ChangeError::Fleet(e.to_string()))?;
        match tokio::time::timeout(Duration::from_secs(5), rx).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(ChangeError::Fleet(e.to_string())),
            _ => Err(ChangeError::Fleet("no answer from etcd within 5s".into())),
        }
    }

    /// The member leaves the fleet: its lease is revoked so nobody waits for it.
    pub(super) async fn fleet_leave(&mut self) {
        let Some(link) = self.fleet.as_ref() else {
            return;
        };
        let (reply, rx) = oneshot::channel();
        if link.requests.send(Request::Leave { reply }).await.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(2), rx).await;
        }
    }

    /// The config text a reload in a fleet uses: the local file merged with the revision
    /// this member runs, and the fleet's health.
    pub(super) fn fleet_reload_file(&self) -> Option<Result<Config, config::LoadError>> {
        let link = self.fleet.as_ref()?;
        let (revision, text) = link.running_doc.as_ref()?;
        Some(config::load_fleet(&self.st.path, text, *revision))
    }

    /// Tells the event log what the member started on: the last good revision (stale until
    /// etcd answers), or why the kept one could not be used.
    pub(super) fn fleet_started(&mut self, problem: Option<String>) {
        let Some(link) = self.fleet.as_mut() else {
            return;
        };
        if let Some(p) = problem {
            link.last_good_errors += 1;
            warn!("{p}");
            event(&self.shared, Kind::Reload, p);
        }
        if link.from_disk {
            let m = format!(
                "fleet {}: started on the last good revision {} from {}; stale until etcd \
                 answers",
                link.name,
                link.member.running(),
                link.state_file.display()
            );
            info!("{m}");
            event(&self.shared, Kind::Commit, m);
        }
        self.fleet_status();
    }

    /// Republishes the fleet document readers see.
    fn fleet_status(&self) {
        let Some(link) = self.fleet.as_ref() else {
            return;
        };
        let tables = self.shared.published.current();
        let s = status::status(
            link_parts(link),
            &self.st.config.appliance.name,
            !self.st.fleet_hold,
            &fingerprint(&tables),
        );
        if let Ok(mut f) = self.shared.fleet.lock() {
            *f = Some(s);
        }
    }
}

fn link_parts(l: &Link) -> Parts<'_> {
    Parts {
        name: &l.name,
        view: &l.view,
        connected: l.connected,
        stale_for: (!l.connected).then(|| l.last_contact.elapsed()),
        last_error: l.last_error.as_deref(),
        running: l.member.running(),
        verdicts: &l.verdicts,
        refused: l.refused.as_ref(),
        from_disk: l.from_disk,
        last_good_errors: l.last_good_errors,
    }
}

/// The table fingerprint members compare and `GET /v1/status` shows: [`Tables::fingerprint`]
/// (VIPs, backends with weight, state and health, and every ring through its digest) as 16
/// hex digits. It costs a pass over the VIPs and backends, not over the ring slots.
pub fn fingerprint(t: &Tables) -> String {
    format!("{:016x}", t.fingerprint())
}

/// `GET /v1/fleet`: the fleet document, or 404 on an appliance that runs alone.
pub(super) async fn api_fleet(
    axum::extract::State(s): axum::extract::State<Arc<super::shared::Shared>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let doc = s.fleet.lock().ok().and_then(|f| f.clone());
    match doc {
        Some(d) => axum::Json(d).into_response(),
        None => (
            axum::http::StatusCode::NOT_FOUND,
            axum::Json(::api::ApiError {
                error: "this appliance is not a fleet member (no [fleet] section)".into(),
                field: None,
                errors: Vec::new(),
            }),
        )
            .into_response(),
    }
}
