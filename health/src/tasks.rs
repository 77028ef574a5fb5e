//! The tokio layer: one task that drives the [`Scheduler`] with the real clock.
//!
//! ```text
//!  Prober::set_targets ──lock──▶ Scheduler ◀──lock── Prober::status / counters
//!          │ notify                ▲   │ poll(now) -> due probes
//!          ▼                       │   ▼
//!      run loop ─┬─ plain tcp ──▶ connect::Connects (pooled sockets, one epoll set,
//!          ▲     │                  deadline queues; reap + expire each turn)
//!          │     └─ others ─────▶ JoinSet of probes (probe::ProbeContext, timeout_at)
//!          │                               │ (id, seq, outcome)
//!          └───────── on_result ◀──────────┘
//!                         │ Transition
//!                         ▼
//!              mpsc::UnboundedSender<Transition> ──▶ the appliance's pool updater
//! ```
//!
//! Plain TCP connect checks, the bulk of a large deployment, skip the task, the timer
//! entry and the socket of their own that every other check gets: see `crate::connect`
//! for why and what it saves.
//!
//! The transitions channel is unbounded on purpose: transitions are rare (bounded by
//! targets times rise/fall), and a slow consumer must never stall probing, which would
//! turn into false timeouts. The scheduler sits behind a `std::sync::Mutex` held only for
//! microseconds, so status queries from other threads never wait on a probe.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc};
use tokio::task::{JoinHandle, JoinSet};

use crate::check::{CheckKind, ProbeKey, Target};
use crate::connect::{Connects, Finished};
use crate::outcome::{Failure, Outcome};
use crate::probe::ProbeContext;
use crate::scheduler::{
    Counters, Dispatch, IdHash, ProbeId, Reload, Scheduler, Status, Transition, sort_status,
};

/// The shortest sleep between dispatch rounds: the most a probe starts late.
const TICK: Duration = Duration::from_millis(10);

/// A running prober. Dropping it stops every probe.
#[derive(Debug)]
pub struct Prober {
    scheduler: Arc<Mutex<Scheduler>>,
    wake: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Prober {
    /// Starts the prober's task on the current tokio runtime (which must have the time and
    /// io drivers enabled). Returns the handle and the stream of health transitions.
    pub fn spawn() -> (Prober, mpsc::UnboundedReceiver<Transition>) {
        Prober::spawn_with(ProbeContext::new())
    }

    /// [`Prober::spawn`] with a context of the caller's (one that sends VIP probes).
    pub fn spawn_with(ctx: ProbeContext) -> (Prober, mpsc::UnboundedReceiver<Transition>) {
        let scheduler = Arc::new(Mutex::new(Scheduler::new()));
        let wake = Arc::new(Notify::new());
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(
            Arc::clone(&scheduler),
            Arc::clone(&wake),
            tx,
            Arc::new(ctx),
        ));
        (
            Prober {
                scheduler,
                wake,
                task,
            },
            rx,
        )
    }

    /// Replaces the set of targets (on start and on every config reload). Unchanged
    /// probes keep their state and rhythm; new ones start within one interval; removed
    /// ones stop at once.
    pub fn set_targets(&self, targets: impl IntoIterator<Item = Target>) -> Reload {
        let reload = lock(&self.scheduler).set_targets(targets, Instant::now());
        self.wake.notify_one();
        for key in &reload.added {
            tracing::debug!(%key, "probe started");
        }
        for key in &reload.removed {
            tracing::debug!(%key, "probe stopped");
        }
        reload
    }

    /// Status of every probe, ordered by address, port and check name.
    pub fn status(&self) -> Vec<Status> {
        let mut v = lock(&self.scheduler).status();
        // Sorting ten thousand entries takes milliseconds: not while probes wait.
        sort_status(&mut v);
        v
    }

    /// Status of the probe serving `target`, if it is being probed.
    pub fn status_of(&self, target: &Target) -> Option<Status> {
        lock(&self.scheduler).status_of(&target.key())
    }

    /// Scheduler-wide counters.
    pub fn counters(&self) -> Counters {
        lock(&self.scheduler).counters()
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        // Aborting the loop drops its JoinSet, which aborts every probe in flight.
        self.task.abort();
    }
}

fn lock(s: &Mutex<Scheduler>) -> MutexGuard<'_, Scheduler> {
    // The scheduler has no invariants a panicking holder could break halfway that
    // matter more than keeping health checks running.
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// Probes running as tasks, by task id: which probe and sequence number each answers.
type Running = HashMap<tokio::task::Id, (ProbeId, u64), IdHash>;

async fn run(
    scheduler: Arc<Mutex<Scheduler>>,
    wake: Arc<Notify>,
    tx: mpsc::UnboundedSender<Transition>,
    ctx: Arc<ProbeContext>,
) {
    let mut connects = match Connects::new() {
        Ok(c) => Some(c),
        Err(e) => {
            // Not expected with a working io driver; every check still runs, as a task.
            tracing::warn!(
                "health probes: no epoll set for connect checks ({e}), using a task each"
            );
            None
        }
    };
    let mut probes: JoinSet<Outcome> = JoinSet::new();
    let mut running = Running::default();
    let mut finished: Vec<Finished> = Vec::new();
    let sleep = tokio::time::sleep_until(far_future());
    tokio::pin!(sleep);
    loop {
        if let Some(c) = connects.as_mut() {
            c.reap(&mut finished);
            c.expire(Instant::now(), &mut finished);
        }
        let (due, next) = record_and_poll(&scheduler, &mut finished, &tx);
        for d in due {
            start(
                d,
                connects.as_mut(),
                &mut probes,
                &mut running,
                &mut finished,
                &ctx,
            );
        }
        if !finished.is_empty() {
            // Probes that could not even start: record them before sleeping.
            continue;
        }
        let target = wake_at(next, connects.as_mut());
        // One timer entry, moved only when the next wake-up changes: re-creating it on
        // every loop turn cost more than the scheduling it serves.
        if sleep.deadline() != target {
            sleep.as_mut().reset(target);
        }
        tokio::select! {
            () = wake.notified() => {}
            () = &mut sleep => {}
            () = readable(connects.as_ref()) => {}
            Some(joined) = probes.join_next_with_id(), if !probes.is_empty() => {
                collect(joined, &mut running, &mut finished);
                while let Some(joined) = probes.try_join_next_with_id() {
                    collect(joined, &mut running, &mut finished);
                }
            }
        }
    }
}

/// Feeds the finished probes to the scheduler, sends the transitions they cause, and
/// returns the probes due now and when the next one is.
fn record_and_poll(
    scheduler: &Mutex<Scheduler>,
    finished: &mut Vec<Finished>,
    tx: &mpsc::UnboundedSender<Transition>,
) -> (Vec<Dispatch>, Option<Instant>) {
    let now = Instant::now();
    let mut s = lock(scheduler);
    for (id, seq, outcome) in finished.drain(..) {
        if let Some(t) = s.on_result(id, seq, outcome, now) {
            log_transition(&t);
            // A dropped receiver means nobody listens; probing still feeds
            // the status snapshot.
            let _ = tx.send(t);
        }
    }
    (s.poll(now), s.next_wakeup())
}

/// Starts one due probe: a plain TCP connect in the connect set when there is one (an
/// outcome known at once goes to `finished`), any other check as a task.
fn start(
    d: Dispatch,
    connects: Option<&mut Connects>,
    probes: &mut JoinSet<Outcome>,
    running: &mut Running,
    finished: &mut Vec<Finished>,
    ctx: &Arc<ProbeContext>,
) {
    if let Some(c) = connects
        && let CheckKind::Tcp {
            send: None,
            expect: None,
        } = &d.key.check.kind
        && d.key.via_vip.is_none()
    {
        let addr = SocketAddr::new(d.key.address, d.key.port);
        let (source, timeout) = (d.key.check.source, d.key.check.timeout);
        if let Some(outcome) = c.start(d.id, d.seq, addr, source, timeout, d.deadline) {
            finished.push((d.id, d.seq, outcome));
        }
        return;
    }
    let ctx = Arc::clone(ctx);
    let (id, seq) = (d.id, d.seq);
    let handle = probes.spawn(async move {
        let deadline = tokio::time::Instant::from_std(d.deadline);
        match tokio::time::timeout_at(deadline, ctx.probe(&d.key)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::Timeout),
        }
    });
    running.insert(handle.id(), (id, seq));
}

/// When the loop must wake next: the next dispatch or the connect set's next deadline.
fn wake_at(next: Option<Instant>, connects: Option<&mut Connects>) -> tokio::time::Instant {
    // Probes due within one tick of each other start together: at 10,000 probes a
    // second, waking for each one would cost more than the probes themselves.
    // Deadlines are not rounded: a timeout is reported when it happens.
    let dispatch = next.map(|t| t.max(Instant::now() + TICK));
    let deadline = connects.and_then(|c| c.next_deadline());
    match (dispatch, deadline) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
    .map_or(far_future(), tokio::time::Instant::from_std)
}

/// Resolves when the connect set may have finished probes; never without one.
async fn readable(connects: Option<&Connects>) {
    match connects {
        Some(c) => c.readable().await,
        None => std::future::pending().await,
    }
}

/// A wake-up time that never comes in practice (a year away).
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(365 * 86_400)
}

fn collect(
    joined: Result<(tokio::task::Id, Outcome), tokio::task::JoinError>,
    running: &mut Running,
    finished: &mut Vec<Finished>,
) {
    let (task, outcome) = match joined {
        Ok((task, outcome)) => (task, outcome),
        Err(e) => {
            // Only a bug panics a probe; count it against the target rather than leave
            // the probe marked in flight forever.
            tracing::error!("health probe task failed: {e}");
            (e.id(), Err(Failure::Io(format!("probe task failed: {e}"))))
        }
    };
    if let Some((id, seq)) = running.remove(&task) {
        finished.push((id, seq, outcome));
    }
}

/// Transitions go to the consumer on the channel, which logs them with its own context
/// (the appliance names the VIPs); here they are debug detail only.
fn log_transition(t: &Transition) {
    tracing::debug!(key = %t.key, reason = %t.reason, probe = t.probe, to = %t.to, "transition");
}

/// Runs one probe now, outside any schedule, bounded by the check's timeout: for
/// `sluice check`-style diagnostics ("what would the prober see right now?").
pub async fn probe_once(key: &ProbeKey) -> Outcome {
    let ctx = ProbeContext::new();
    match tokio::time::timeout(key.check.timeout, ctx.probe(key)).await {
        Ok(o) => o,
        Err(_) => Err(Failure::Timeout),
    }
}
