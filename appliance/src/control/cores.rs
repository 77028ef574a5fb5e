//! The control plane's [`Executor`]: a batch of independent jobs (many VIPs' rings at once,
//! in a storm, a first build or a reload) on every core the system gives. The pure core
//! (`lb`) never starts a thread; it asks this.

use lb::exec::{Executor, Job};

/// Runs a batch on scoped threads, one per core the system gives.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cores;

impl Executor for Cores {
    fn width(&self) -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    fn run<'a>(&self, jobs: Vec<Job<'a>>) {
        std::thread::scope(|s| {
            let mut spawned = Vec::with_capacity(jobs.len());
            for job in jobs {
                // A thread the system will not give (out of memory or threads) is no reason
                // to fail a commit: that job runs here instead.
                let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(job)));
                let theirs = std::sync::Arc::clone(&slot);
                let spawn = std::thread::Builder::new()
                    .name("sluice-rings".into())
                    .spawn_scoped(s, move || take(&theirs).map(|j| j()));
                match spawn {
                    Ok(h) => spawned.push(h),
                    Err(_) => {
                        if let Some(j) = take(&slot) {
                            j();
                        }
                    }
                }
            }
            for h in spawned {
                // A panic in a job is a bug; carry it to this thread as it is.
                h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            }
        });
    }
}

/// The job in `slot`, if nobody took it yet.
fn take<'a>(slot: &std::sync::Mutex<Option<Job<'a>>>) -> Option<Job<'a>> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}
