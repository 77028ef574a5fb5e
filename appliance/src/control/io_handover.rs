//! The running process's half of a takeover (see [`super::takeover`]): it answers a new
//! process's HELLO with its health verdicts and table version, and its TAKE with every
//! worker's connection table, its workers stopped and the XDP program left attached and
//! held; then it exits without detaching (DONE) or starts its workers again with the same
//! tables (FAIL, or no word).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracing::{error, info, warn};

use super::events::Kind;
use super::io::{Io, Turn};
use super::state::State;
use super::takeover::{Asked, Bundle};
use super::view;
use crate::datapath::{Datapath, DatapathConfig, DatapathError, FrameHandler, instant_ns};

/// The handlers a resume gives back to their workers, each taken once.
type Kept = Arc<Mutex<Vec<Option<Box<dyn FrameHandler>>>>>;

impl Io {
    /// Answers one request of a new process; `Turn::Stop` once it runs in this one's place.
    pub async fn hand_over(&mut self, st: &State, asked: Asked) -> Result<Turn, DatapathError> {
        match asked {
            Asked::Hello { answer } => {
                let _ = answer.send(verdicts(st).encode());
                Ok(Turn::Continue)
            }
            Asked::Take { answer, outcome } => {
                let started = Instant::now();
                view::event(
                    &self.shared,
                    Kind::Takeover,
                    "a new process takes over: workers stopped, the flow cache forwards".into(),
                );
                let (handlers, bundle) = self.stop_and_export(st);
                let flows = bundle.flows();
                let bytes = bundle.encode();
                drop(bundle);
                let sent = answer.send(bytes).is_ok();
                let ran = sent
                    && tokio::time::timeout(super::takeover::ANSWER_TIME * 2, outcome)
                        .await
                        .is_ok_and(|r| r.unwrap_or(false));
                if ran {
                    info!(
                        flows,
                        ms = started.elapsed().as_millis() as u64,
                        "handed over to the new process: exiting, the XDP program stays attached"
                    );
                    self.stopping();
                    self.abandon_speaker();
                    return Ok(Turn::Stop);
                }
                warn!("the new process did not take over: this one's workers start again");
                view::event(
                    &self.shared,
                    Kind::Takeover,
                    "the new process did not take over: forwarding again".into(),
                );
                self.resume(st, handlers)?;
                Ok(Turn::Continue)
            }
        }
    }

    /// SIGTERM as the stop half of a restart (see [`super::takeover::restarting`]): the
    /// workers stop, their tables go to the hand-over file for the next process, the XDP
    /// program stays attached and held (its flow cache forwards), the BGP sessions close
    /// without a word (graceful restart keeps the routes), and the loop ends. `false`: the
    /// file could not be written; the workers run again and the stop goes on as usual.
    pub fn hand_over_to_file(&mut self, st: &State) -> Result<bool, DatapathError> {
        let path = super::takeover::file_path(&st.config.api.socket);
        let started = Instant::now();
        let (handlers, bundle) = self.stop_and_export(st);
        let flows = bundle.flows();
        match super::takeover::write_file(&path, &bundle.encode()) {
            Ok(()) => {
                info!(
                    flows,
                    file = %path.display(),
                    ms = started.elapsed().as_millis() as u64,
                    "restart: the connection tables are handed to the next process; the XDP program stays attached"
                );
                self.stopping();
                self.abandon_speaker();
                Ok(true)
            }
            Err(e) => {
                error!(
                    file = %path.display(),
                    "restart: cannot write the hand-over ({e}); stopping as usual"
                );
                self.resume(st, handlers)?;
                Ok(false)
            }
        }
    }

    /// Stops the workers (the program stays attached and held) and bundles their tables with
    /// the running version and verdicts; the handlers are kept for a resume.
    fn stop_and_export(&mut self, st: &State) -> (Vec<Box<dyn FrameHandler>>, Bundle) {
        let mut handlers = self.dp.stop_for_handover();
        let now_ns = instant_ns(Instant::now());
        let mut bundle = verdicts(st);
        bundle.exported_ns = now_ns;
        bundle.workers = handlers
            .iter_mut()
            .map(|h| h.export_flows(now_ns))
            .collect();
        // Persistent clients keep their backends (the table the workers shared).
        let now_s = (now_ns / 1_000_000_000) as u32;
        bundle.persistence = self.shared.published.persistence().export(now_s);
        (handlers, bundle)
    }

    /// Starts the workers again with `handlers` (their tables as they were) and the steering
    /// the running version needs; the program a failed new process may have left attached
    /// is replaced.
    fn resume(
        &mut self,
        st: &State,
        handlers: Vec<Box<dyn FrameHandler>>,
    ) -> Result<(), DatapathError> {
        let kept: Kept = Arc::new(Mutex::new(handlers.into_iter().map(Some).collect()));
        let fresh = super::run::worker_factory(
            Arc::clone(&self.shared),
            st.config.appliance.conntrack_capacity as usize,
            None,
            self.shared.flow_sync.get().cloned(),
        );
        let factory = {
            let kept = Arc::clone(&kept);
            move |worker: usize, workers: usize| -> Box<dyn FrameHandler> {
                let taken = kept.lock().ok().and_then(|mut k| k.get_mut(worker)?.take());
                taken.unwrap_or_else(|| {
                    error!(
                        worker,
                        "resuming: no table kept for this worker, it starts empty"
                    );
                    fresh(worker, workers)
                })
            }
        };
        let dp = Datapath::start_with_cache(
            DatapathConfig::from(&st.config.appliance),
            self.shared.flow_cache.clone(),
            factory,
        )?;
        super::run::attach_capture(&self.shared, &dp);
        dp.set_vips(&st.steering.vips, &st.steering.acls)?;
        dp.set_return_keys(&st.steering.returns)?;
        dp.set_flood(&st.config.flood)?;
        dp.set_stateless(&st.tables, self.shared.flow_cache.as_deref())?;
        self.dp = dp;
        Ok(())
    }
}

/// The running version and the health verdicts its tables were built on.
fn verdicts(st: &State) -> Bundle {
    let mut health: Vec<_> = st.health.iter().map(|(id, up)| (id.clone(), *up)).collect();
    health.sort_by(|a, b| {
        (a.0.vip.as_str(), a.0.address, a.0.port).cmp(&(b.0.vip.as_str(), b.0.address, b.0.port))
    });
    Bundle {
        version: st.versions.last(),
        exported_ns: 0,
        health,
        workers: Vec::new(),
        persistence: Vec::new(),
        outbound: st.tables.outbound_carried(),
    }
}
