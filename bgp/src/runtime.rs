//! The speaker's own tokio runtime. Keepalives, the hold timer and BFD (down to tens of
//! milliseconds) must fire on time whatever the embedding program is doing: a control plane
//! busy with a long commit, or blocked on I/O, must not let a router declare the appliance
//! dead. So every task of a [`crate::Speaker`] runs on one dedicated worker thread, and the
//! embedder talks to them only through the speaker's channels and status snapshots.
//!
//! The worker thread is created from the thread that starts the speaker, so it inherits that
//! thread's network namespace, as the speaker's sockets must.

use std::future::Future;

use tokio::runtime::{Builder, Runtime};

use crate::SpeakerError;

/// Name of the speaker's worker thread (as `top -H` and `/proc/PID/task` show it).
pub const THREAD_NAME: &str = "sluice-bgp";

/// A one-thread runtime that stops, without waiting for its tasks, when dropped.
#[derive(Debug)]
pub(crate) struct SpeakerRuntime(Option<Runtime>);

impl SpeakerRuntime {
    /// Starts the runtime's worker thread.
    pub(crate) fn new() -> Result<SpeakerRuntime, SpeakerError> {
        Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(THREAD_NAME)
            .enable_all()
            .build()
            .map(|rt| SpeakerRuntime(Some(rt)))
            .map_err(SpeakerError::Runtime)
    }

    /// Runs `f` on the speaker's thread and waits for its result; callable from any
    /// runtime (the wait is a plain future). A panic in `f` resumes in the caller.
    pub(crate) async fn run<F>(&self, f: F) -> Result<F::Output, SpeakerError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let Some(rt) = &self.0 else {
            return Err(SpeakerError::Stopped);
        };
        match rt.spawn(f).await {
            Ok(v) => Ok(v),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(SpeakerError::Stopped),
        }
    }
}

impl Drop for SpeakerRuntime {
    fn drop(&mut self) {
        // Dropping a runtime blocks until its threads end, which tokio forbids inside another
        // runtime (where the speaker usually is dropped); the tasks were aborted before.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}
