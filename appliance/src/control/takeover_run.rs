//! The new process's half of a takeover, as `run.rs` goes through it (see
//! [`super::takeover`]): the verdicts and version first (the old process still forwards),
//! the tables last, just before this process's datapath starts; then DONE, and the old
//! process's exit awaited before the API socket is bound.

use std::path::Path;
use std::sync::{Arc, Mutex};

use tracing::{info, warn};

use super::takeover::{self, Bundle, Offer, TakeoverError, Taking};

use crate::engine::rebuild::Owner;
use crate::engine::{Imported, LbHandler};
use crate::lb::BackendId;
use crate::lb::conntrack::FlowRecord;

/// What the process before this one built its running tables on.
#[derive(Debug, Default)]
pub(super) struct Handed {
    pub health: Vec<(BackendId, bool)>,
    pub version: u64,
    /// Its VIPs' outbound states (drains under way).
    pub outbound: Vec<crate::lb::outbound::Carried>,
    /// The old process's state could not be read: this one starts cold.
    pub cold: Option<String>,
}

/// Where the state a process before this one handed over comes from.
pub(super) enum Source {
    /// The running appliance, over the takeover socket.
    Socket(Taking),
    /// The file a process stopped for a restart left (`None`: unreadable, start cold).
    File {
        bundle: Option<Bundle>,
        read: std::time::Instant,
        /// When the process before exported it (`CLOCK_MONOTONIC`, ns).
        exported_ns: u64,
    },
}

/// Asks the running appliance for its verdicts (with `takeover`); without, refuses to start
/// beside one that runs (it would take its interfaces away from under it), and reads the
/// state a process stopped for a restart left, if there is one.
pub(super) async fn handed_over(
    api_socket: &Path,
    takeover: bool,
) -> Result<(Option<Source>, Handed), TakeoverError> {
    let path = takeover::socket_path(api_socket);
    if !takeover {
        let live = |p: &Path| std::os::unix::net::UnixStream::connect(p).is_ok();
        if live(api_socket) || live(&path) {
            return Err(TakeoverError::AlreadyRunning(
                api_socket.display().to_string(),
            ));
        }
        return Ok(from_file(&takeover::file_path(api_socket)));
    }
    let (t, b) = Taking::hello(&path).await?;
    Ok((Some(Source::Socket(t)), handed_of(b.as_ref())))
}

fn handed_of(b: Option<&Bundle>) -> Handed {
    match b {
        Some(b) => {
            info!(
                version = b.version,
                verdicts = b.health.len(),
                "takeover: the verdicts of the process before read"
            );
            Handed {
                health: b.health.clone(),
                version: b.version,
                outbound: b.outbound.clone(),
                cold: None,
            }
        }
        None => Handed {
            cold: Some("its state is in a format this build cannot read".into()),
            ..Handed::default()
        },
    }
}

/// The hand-over file of a restart, read and removed (it is used once). A file older than
/// [`takeover::ANSWER_TIME`] (on the monotonic clock, so never one from before a reboot) is
/// stale: its flows would have moved on.
fn from_file(path: &Path) -> (Option<Source>, Handed) {
    let Ok(bytes) = std::fs::read(path) else {
        return (None, Handed::default());
    };
    if let Err(e) = std::fs::remove_file(path) {
        warn!(file = %path.display(), "restart: the hand-over file cannot be removed: {e}");
    }
    let read = std::time::Instant::now();
    let now_ns = crate::datapath::instant_ns(read);
    let bundle = match Bundle::decode(&bytes) {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::error!(
                file = %path.display(),
                "restart: the state the process before left cannot be read ({e}): starting cold, its connections are lost"
            );
            None
        }
    };
    if let Some(b) = &bundle {
        let age = now_ns.checked_sub(b.exported_ns);
        if age.is_none_or(|a| a > takeover::ANSWER_TIME.as_nanos() as u64) {
            warn!(file = %path.display(), "restart: the hand-over file is stale, ignored");
            return (None, Handed::default());
        }
        info!(
            flows = b.flows(),
            age_ms = age.unwrap_or(0) / 1_000_000,
            "restart: taking over the connection tables the process before left"
        );
    }
    let handed = handed_of(bundle.as_ref());
    let exported_ns = bundle.as_ref().map_or(now_ns, |b| b.exported_ns);
    let source = Source::File {
        bundle,
        read,
        exported_ns,
    };
    (Some(source), handed)
}

/// Asks for the connection tables (the old process's workers stop); `None` when they come
/// in a format this build cannot read.
pub(super) async fn take_flows(source: &mut Source) -> Result<Option<Bundle>, TakeoverError> {
    match source {
        Source::Socket(t) => Ok(t.take().await?),
        Source::File { bundle, .. } => Ok(bundle.take()),
    }
}

/// This process could not start: a running old one resumes.
pub(super) async fn fail(source: Source) {
    if let Source::Socket(t) = source {
        t.fail().await;
    }
}

/// The handed-over flows, waiting for their workers.
#[derive(Clone)]
pub(super) struct Imports {
    inner: Arc<Mutex<ImportState>>,
}

struct ImportState {
    /// Per worker of the old process, its records (taken as the new workers are built).
    records: Vec<Vec<FlowRecord>>,
    /// Flows rebuilt from the flow cache of a run that stopped without a hand-over
    /// (`engine::rebuild`), each for the workers its owner names.
    owned: Vec<(FlowRecord, Owner)>,
    done: Imported,
}

impl Imports {
    pub fn new(records: Vec<Vec<FlowRecord>>) -> Imports {
        Imports {
            inner: Arc::new(Mutex::new(ImportState {
                records,
                owned: Vec::new(),
                done: Imported::default(),
            })),
        }
    }

    /// The flows rebuilt from a flow cache (see [`crate::engine::rebuild`]).
    pub fn rebuilt(flows: Vec<(FlowRecord, Owner)>) -> Imports {
        let i = Imports::new(Vec::new());
        if let Ok(mut st) = i.inner.lock() {
            st.owned = flows;
        }
        i
    }

    /// Gives worker `worker` of `workers` its flows: those of the old process's worker with
    /// its number (the same interfaces have the same queues, so its frames come here), or,
    /// when the number of workers changed, every old worker's whose number is `worker`
    /// modulo `workers` (a frame that reaches another worker is handed to this one).
    pub fn fill(&self, h: &mut LbHandler, worker: usize, workers: usize) {
        let Ok(mut st) = self.inner.lock() else {
            return;
        };
        let now_ns = crate::datapath::instant_ns(std::time::Instant::now());
        let n = st.records.len();
        if n != workers && worker == 0 {
            warn!(
                before = n,
                now = workers,
                "takeover: the number of workers changed; flows are spread by worker number"
            );
        }
        for old in (worker..n).step_by(workers.max(1)) {
            let records = std::mem::take(&mut st.records[old]);
            let got = h.import_flows(&records, now_ns);
            st.done.add(got);
        }
        // A flow whose owner the record names goes to that worker; one any worker may see
        // (DR) to each, counted once.
        let (named, any): (Vec<_>, Vec<_>) = st
            .owned
            .iter()
            .filter(|(_, o)| o.takes(worker, workers))
            .partition(|(_, o)| *o != Owner::Any);
        let named: Vec<FlowRecord> = named.into_iter().map(|(r, _)| r).collect();
        let any: Vec<FlowRecord> = any.into_iter().map(|(r, _)| r).collect();
        let got = h.import_flows(&named, now_ns);
        st.done.add(got);
        let got = h.import_flows(&any, now_ns);
        if worker == 0 {
            st.done.add(got);
        }
    }

    pub fn done(&self) -> Imported {
        self.inner.lock().map(|s| s.done).unwrap_or_default()
    }
}

/// Says DONE and waits for the old process's exit (a takeover over the socket); the outcome
/// for status and events.
pub(super) async fn finish_takeover(
    source: Source,
    handed: &Handed,
    taken: Option<usize>,
    imports: Option<&Imports>,
) -> api::Takeover {
    let (held_ms, total_ms) = match source {
        Source::Socket(t) => {
            let held_from = t.took.unwrap_or(t.started);
            let held_ms = held_from.elapsed().as_millis() as u64;
            let started = t.started;
            if let Err(e) = t.done().await {
                warn!("takeover: the process before did not exit: {e}");
            }
            (held_ms, started.elapsed().as_millis() as u64)
        }
        // The gap from the old process's export to this one's workers, and from this
        // one's reading of the file.
        Source::File {
            read, exported_ns, ..
        } => {
            let now_ns = crate::datapath::instant_ns(std::time::Instant::now());
            let held = now_ns.saturating_sub(exported_ns) / 1_000_000;
            (held, read.elapsed().as_millis() as u64)
        }
    };
    let done = imports.map(Imports::done).unwrap_or_default();
    let cold = match (&handed.cold, taken) {
        (Some(why), _) => Some(why.clone()),
        (None, None) => Some("its connection tables are in a format this build cannot read".into()),
        (None, Some(_)) => None,
    };
    let report = api::Takeover {
        from_version: handed.version,
        flows_handed: taken.unwrap_or(0) as u64,
        flows_carried: done.flows as u64,
        flows_lost: done.refused as u64,
        flows_cached: done.cached as u64,
        held_ms,
        total_ms,
        cold,
    };
    info!("{report}");
    report
}

/// Listens for the next process's takeover beside the API socket (`took_over`: this
/// process took over through that socket, see [`takeover::listen`]).
pub(super) fn offer_takeover(
    api_socket: &Path,
    took_over: bool,
) -> Result<Option<Offer>, TakeoverError> {
    let path = takeover::socket_path(api_socket);
    takeover::listen(&path, took_over)
        .map(Some)
        .map_err(|source| TakeoverError::Listen {
            path: path.display().to_string(),
            source,
        })
}
