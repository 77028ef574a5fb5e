//! The seam between the I/O loop and the packet core.
//!
//! Workers hand each received frame to a [`FrameHandler`] as the packet core's [`Frame`]: a
//! view of the whole UMEM chunk with the packet somewhere inside it, so the handler can rewrite headers
//! in place, grow the packet into the headroom (tunnel encapsulation) or into the tailroom,
//! and answer with the packet core's [`Verdict`]. The handler never sees rings, sockets or
//! addresses, which keeps it testable without privileges and keeps `lb` free of I/O.
//!
//! What the worker does with each verdict: `Tx { ifindex }` transmits the (possibly
//! rewritten) frame out of that interface, the one it came in on (one-arm) or another
//! datapath interface (two-arm); `Drop(_)` frees it (the handler has counted the reason);
//! `Pass` means the frame belongs to the kernel, which AF_XDP cannot hand it back to, so the
//! worker frees it and counts it as `unpassable` (the steering program keeps such frames out
//! of the sockets, so that counter should stay near zero).

use super::doorbell::Doorbell;
use crate::lb::Verdict;
pub use crate::lb::{Frame, HEADROOM};

/// Turns received frames into verdicts; one instance per worker thread, so it may keep
/// mutable per-worker state (a connection table) without locks.
pub trait FrameHandler: Send {
    /// Processes one frame (`frame.ifindex` is the interface it arrived on). `now_ns` is `CLOCK_MONOTONIC` in
    /// nanoseconds, read once per batch.
    fn handle(&mut self, frame: &mut Frame<'_>, now_ns: u64) -> Verdict;

    /// The worker (of those the handler factory was told about) that must process `frame`
    /// because its flow lives in that worker's state, when that is not this worker; the
    /// datapath then hands the frame over (`datapath::handoff`) instead of calling
    /// [`FrameHandler::handle`]. `None`: this worker handles it.
    fn owner(&mut self, _frame: &Frame<'_>) -> Option<usize> {
        None
    }

    /// Called after each pass's frames were handed to the kernel (the tx kick), before the
    /// next pass.
    fn after_tx(&mut self) {}

    /// Periodic work (new tables, ageing, counters), at most every 10 ms (`TICK_NS`): within
    /// that of any pass that moved frames, then at the time (`CLOCK_MONOTONIC`, ns) the
    /// previous call returned, and when the handler's [`FrameHandler::doorbell`] rang.
    /// `None`: nothing is due until frames come or the bell rings, and the worker sleeps.
    /// A handler without a doorbell is ticked every 10 ms, idle or not, since nothing
    /// else could tell its worker about new tables.
    fn tick(&mut self, _now_ns: u64) -> Option<u64> {
        None
    }

    /// The bell whoever changes what the handler works with (new tables) rings to wake an
    /// idle worker for a [`FrameHandler::tick`].
    fn doorbell(&self) -> Option<&Doorbell> {
        None
    }

    /// The flows the handler holds, as records at `now_ns` (`CLOCK_MONOTONIC`): what a
    /// hand-over to another process carries on. A handler without a table has none.
    fn export_flows(&mut self, _now_ns: u64) -> Vec<crate::lb::conntrack::FlowRecord> {
        Vec::new()
    }
}
