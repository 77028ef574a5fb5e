//! How `lb` runs work on several cores without starting a thread itself: the caller that
//! owns threads (the control plane) passes an [`Executor`]; tests, `trace` and small builds
//! pass [`Serial`]. A build's result never depends on the executor, only its time does.

/// One independent piece of a batch: it writes its result where it was told to.
pub type Job<'a> = Box<dyn FnOnce() + Send + 'a>;

/// Runs a batch of independent jobs, possibly at once on several threads, and returns when
/// every one has run. A panic in a job reaches the caller.
pub trait Executor: Sync {
    /// How many jobs it runs at once (1: one after another): how finely a batch is cut.
    fn width(&self) -> usize;
    /// Runs every job of `jobs`; returns when all have run.
    fn run<'a>(&self, jobs: Vec<Job<'a>>);
}

/// Every job on the calling thread, in order.
#[derive(Debug, Clone, Copy, Default)]
pub struct Serial;

impl Executor for Serial {
    fn width(&self) -> usize {
        1
    }

    fn run<'a>(&self, jobs: Vec<Job<'a>>) {
        for job in jobs {
            job();
        }
    }
}
