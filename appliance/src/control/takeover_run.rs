//! The new process's half of a takeover, as `run.rs` goes through it (see
//! [`super::takeover`]): the verdicts and version first (the old process still forwards),
//! the tables last, just before this process's datapath starts; then DONE, and the old
//! process's exit awaited before the API socket is bound.

use std::path::Path;
use std::sync::{Arc, Mutex};

use tracing::{info, warn};

use super::run::RunError;
use super::takeover::{self, Bundle, Offer, Taking};
use crate::engine::{Imported, LbHandler};
use crate::lb::BackendId;
use crate::lb::conntrack::FlowRecord;

/// What the process before this one built its running tables on.
#[derive(Debug, Default)]
pub(super) struct Handed {
    pub health: Vec<(BackendId, bool)>,
    pub version: u64,
    /// The old process's state could not be read: this one starts cold.
    pub cold: Option<String>,
}

/// Asks the running appliance for its verdicts (with `takeover`); without, refuses to start
/// beside one that runs (it would take its interfaces away from under it).
pub(super) async fn handed_over(
    api_socket: &Path,
    takeover: bool,
) -> Result<(Option<Taking>, Handed), RunError> {
    let path = takeover::socket_path(api_socket);
    if !takeover {
        let live = |p: &Path| std::os::unix::net::UnixStream::connect(p).is_ok();
        if live(api_socket) || live(&path) {
            return Err(RunError::AlreadyRunning(api_socket.display().to_string()));
        }
        return Ok((None, Handed::default()));
    }
    let (t, b) = Taking::hello(&path).await?;
    let handed = match b {
        Some(b) => {
            info!(
                version = b.version,
                verdicts = b.health.len(),
                "takeover: the running appliance's verdicts read"
            );
            Handed {
                health: b.health,
                version: b.version,
                cold: None,
            }
        }
        None => Handed {
            cold: Some("its state is in a format this build cannot read".into()),
            ..Handed::default()
        },
    };
    Ok((Some(t), handed))
}

/// Asks for the connection tables (the old process's workers stop); `None` when they come
/// in a format this build cannot read.
pub(super) async fn take_flows(t: &mut Taking) -> Result<Option<Bundle>, RunError> {
    Ok(t.take().await?)
}

/// The handed-over flows, waiting for their workers.
#[derive(Clone)]
pub(super) struct Imports {
    inner: Arc<Mutex<ImportState>>,
}

struct ImportState {
    /// Per worker of the old process, its records (taken as the new workers are built).
    records: Vec<Vec<FlowRecord>>,
    done: Imported,
}

impl Imports {
    pub fn new(records: Vec<Vec<FlowRecord>>) -> Imports {
        Imports {
            inner: Arc::new(Mutex::new(ImportState {
                records,
                done: Imported::default(),
            })),
        }
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
            st.done.flows += got.flows;
            st.done.refused += got.refused;
            st.done.cached += got.cached;
        }
    }

    fn done(&self) -> Imported {
        self.inner.lock().map(|s| s.done).unwrap_or_default()
    }
}

/// Says DONE and waits for the old process's exit; the outcome for status and events.
pub(super) async fn finish_takeover(
    t: Taking,
    handed: &Handed,
    taken: Option<usize>,
    imports: Option<&Imports>,
) -> api::Takeover {
    let held_from = t.took.unwrap_or(t.started);
    let held_ms = held_from.elapsed().as_millis() as u64;
    let started = t.started;
    if let Err(e) = t.done().await {
        warn!("takeover: the process before did not exit: {e}");
    }
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
        total_ms: started.elapsed().as_millis() as u64,
        cold,
    };
    info!("{report}");
    report
}

/// Listens for the next process's takeover beside the API socket.
pub(super) fn offer_takeover(api_socket: &Path) -> Result<Option<Offer>, RunError> {
    let path = takeover::socket_path(api_socket);
    takeover::listen(&path)
        .map(Some)
        .map_err(|source| RunError::TakeoverSocket {
            path: path.display().to_string(),
            source,
        })
}
