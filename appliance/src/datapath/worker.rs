//! Worker threads: the hot loop that moves frames between rings and the packet core.
//!
//! Worker `w` owns, on every datapath interface, the sockets of the queues `q` with
//! `q % workers == w`, so every frame it receives and every frame it sends stays on its own
//! rings: one-arm replies go back out of the receiving socket without a copy, two-arm
//! forwarding copies the frame into a free frame of the worker's socket on the egress
//! interface. Nothing on this path locks, allocates or makes a syscall other than ring kicks
//! and the idle `poll`.
//!
//! A frame whose flow another worker owns (FullNAT return traffic on a queue RSS chose, see
//! `lb::process::owner`) is copied into that worker's handoff ring instead (`handoff`); each
//! pass, a worker also takes the frames handed to it, copies each into a free frame of its
//! own socket on the arrival interface and processes it as if it had received it.
//!
//! An idle worker sleeps in `poll` at once rather than spinning a while first: on a CPU it
//! shares, a spin window burns the share the worker needs to move frames once they come.
//! It sleeps until a frame comes (need_wakeup has the kernel wake it), another worker hands
//! it one, its handler's doorbell rings (new tables; `doorbell`), or the handler's next
//! timer is due (`FrameHandler::tick` says when: ageing the flows it holds, the flow-cache
//! walk); with no flows, nothing is due and an idle appliance's workers cost nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::capture::Tap;
use super::doorbell::Doorbell;
use super::frame::{Frame, FrameHandler};
use super::handoff::{HandoffPort, Meta};
use super::xsk::{Desc, FRAME_SIZE, Xsk, chunk_of, poll_readable};
use crate::lb::Verdict;

/// Frames taken off an rx ring per pass. Each pass ends with one tx kick per socket, so a
/// larger batch means fewer `sendto`s per frame, and in copy mode fewer kicks that find the
/// kernel's budget spent (EAGAIN).
const BATCH: usize = 256;
/// The period of `FrameHandler::tick` while frames flow (or a timer keeps it busy), and the
/// shortest gap between two ticks.
pub(crate) const TICK_NS: u64 = 10_000_000;
/// The longest an idle worker sleeps with nothing due. New tables and `Datapath::stop`
/// ring its doorbells, so this only bounds what a lost wake-up could cost.
const IDLE_MAX_MS: i32 = 1000;
/// How long a worker backs off after `poll` itself failed.
const POLL_ERROR_BACKOFF_MS: u64 = 10;

/// When a worker next ticks its handler (see [`FrameHandler::tick`]).
#[derive(Debug, Clone, Copy)]
struct Schedule {
    /// The next tick; `None`: only frames or the doorbell bring one.
    due: Option<u64>,
    last: u64,
    /// Every [`TICK_NS`] whatever the handler says (busy_poll, or a handler without a
    /// doorbell, which nothing else could wake for new tables).
    always: bool,
}

impl Schedule {
    /// The first tick is due at once.
    fn new(always: bool) -> Schedule {
        Schedule {
            due: Some(0),
            last: 0,
            always,
        }
    }

    fn is_due(&self, now: u64) -> bool {
        self.due.is_some_and(|d| now >= d)
    }

    /// The handler ticked at `now` and wants the next at `next`: never sooner than a tick
    /// away.
    fn ticked(&mut self, now: u64, next: Option<u64>) {
        self.last = now;
        self.due = if self.always {
            Some(now + TICK_NS)
        } else {
            next.map(|d| d.max(now + TICK_NS))
        };
    }

    /// A pass moved frames, which changed what the handler holds: a tick is due within
    /// [`TICK_NS`] of the last one, as long as frames flow and once after.
    fn moved_frames(&mut self) {
        let soon = self.last + TICK_NS;
        self.due = Some(self.due.map_or(soon, |d| d.min(soon)));
    }

    /// The doorbell rang: tick at once.
    fn rung(&mut self) {
        self.due = Some(0);
    }

    /// How long an idle worker may sleep in `poll` from `now`, in milliseconds rounded up
    /// (a timer never fires early), at most [`IDLE_MAX_MS`].
    fn sleep_ms(&self, now: u64) -> i32 {
        self.due.map_or(IDLE_MAX_MS, |d| {
            d.saturating_sub(now)
                .div_ceil(1_000_000)
                .min(IDLE_MAX_MS as u64) as i32
        })
    }
}

/// Per-worker counters, written by the worker only and read by `Datapath::stats`.
#[derive(Debug, Default)]
pub struct RingCounters {
    /// Frames received.
    pub rx: AtomicU64,
    /// Frames queued for transmission.
    pub tx: AtomicU64,
    /// Frames the handler dropped.
    pub dropped: AtomicU64,
    /// Frames the handler wanted passed to the kernel, which AF_XDP cannot do (dropped).
    pub unpassable: AtomicU64,
    /// Frames dropped because a tx ring was full.
    pub tx_ring_full: AtomicU64,
    /// Two-arm frames dropped because the egress socket had no free frame.
    pub no_tx_frame: AtomicU64,
    /// Frames dropped because the handler named an interface the worker cannot send on.
    pub bad_egress: AtomicU64,
    /// Descriptors from the kernel that did not describe a frame of our UMEM.
    pub bad_desc: AtomicU64,
    /// Frames handed to the worker that owns their flow.
    pub handed_off: AtomicU64,
    /// Frames dropped because the handoff ring toward their owner was full.
    pub handoff_ring_full: AtomicU64,
    /// Frames other workers handed to this one, processed here.
    pub handoff_received: AtomicU64,
}

/// A socket plus the interface it belongs to.
pub struct Port {
    /// The socket.
    pub xsk: Xsk,
    /// Interface index of the socket's interface.
    pub ifindex: u32,
}

/// Everything a worker thread owns.
pub struct Worker {
    /// Sockets this worker receives on (and sends on).
    pub ports: Vec<Port>,
    /// For each datapath ifindex, the index in `ports` of the socket to send on.
    pub egress: Vec<(u32, usize)>,
    /// The packet core.
    pub handler: Box<dyn FrameHandler>,
    /// Counters published to `Datapath::stats`.
    pub counters: Arc<RingCounters>,
    /// Set by `Datapath::stop`.
    pub stop: Arc<AtomicBool>,
    /// Spin instead of sleeping in `poll`.
    pub busy_poll: bool,
    /// This worker's ends of the handoff rings.
    pub handoff: HandoffPort,
    /// `sluice capture`'s copies of the engine's frames (off unless a capture runs).
    pub capture: Arc<Tap>,
}

#[derive(Default)]
struct Local {
    rx: u64,
    tx: u64,
    dropped: u64,
    unpassable: u64,
    tx_ring_full: u64,
    no_tx_frame: u64,
    bad_egress: u64,
    bad_desc: u64,
    handed_off: u64,
    handoff_ring_full: u64,
    handoff_received: u64,
}

impl Local {
    fn publish(&mut self, c: &RingCounters) {
        // Only this thread writes these counters, so a plain add through the atomic is exact.
        for (v, a) in [
            (&mut self.rx, &c.rx),
            (&mut self.tx, &c.tx),
            (&mut self.dropped, &c.dropped),
            (&mut self.unpassable, &c.unpassable),
            (&mut self.tx_ring_full, &c.tx_ring_full),
            (&mut self.no_tx_frame, &c.no_tx_frame),
            (&mut self.bad_egress, &c.bad_egress),
            (&mut self.bad_desc, &c.bad_desc),
            (&mut self.handed_off, &c.handed_off),
            (&mut self.handoff_ring_full, &c.handoff_ring_full),
            (&mut self.handoff_received, &c.handoff_received),
        ] {
            if *v != 0 {
                a.fetch_add(*v, Ordering::Relaxed);
                *v = 0;
            }
        }
    }
}

/// Nanoseconds of CLOCK_MONOTONIC (a vDSO read, not a syscall).
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// `t` on the [`monotonic_ns`] clock (`Instant` reads CLOCK_MONOTONIC too, but keeps its
/// origin to itself): for state the control plane builds at `t` and the workers read by
/// their own `now`.
pub fn instant_ns(t: std::time::Instant) -> u64 {
    let (now, ns) = (std::time::Instant::now(), monotonic_ns());
    match t.checked_duration_since(now) {
        Some(ahead) => ns.saturating_add(ahead.as_nanos() as u64),
        None => ns.saturating_sub(now.duration_since(t).as_nanos() as u64),
    }
}

/// `handler`'s verdict on `frame`, copied in and out while a capture runs.
#[inline]
fn handle(handler: &mut dyn FrameHandler, tap: &Tap, frame: &mut Frame<'_>, now: u64) -> Verdict {
    if !tap.is_on() {
        return handler.handle(frame, now);
    }
    let took = tap.received(frame.data(), frame.ifindex, now);
    let verdict = handler.handle(frame, now);
    if let Verdict::Tx { ifindex } = verdict {
        tap.sent(frame.data(), ifindex, now, took);
    }
    verdict
}

impl Worker {
    /// Runs until the stop flag is set; returns the handler, whose state (its connection
    /// table) a hand-over to another process carries on.
    pub fn run(mut self) -> Box<dyn FrameHandler> {
        let mut descs = [Desc::default(); BATCH];
        let mut local = Local::default();
        let bell = self.handler.doorbell().map(Doorbell::fd);
        let mut pollfds: Vec<libc::pollfd> = self
            .ports
            .iter()
            .map(|p| p.xsk.fd())
            .chain([self.handoff.wake_fd()])
            .chain(bell)
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let mut schedule = Schedule::new(self.busy_poll || bell.is_none());
        while !self.stop.load(Ordering::Relaxed) {
            let now = monotonic_ns();
            if schedule.is_due(now) {
                schedule.ticked(now, self.handler.tick(now));
            }
            let (busy, tx_waiting) = self.pass(&mut descs, now, &mut local);
            if busy {
                schedule.moved_frames();
                continue;
            }
            if self.busy_poll {
                for p in &self.ports {
                    p.xsk.busy_poll_rx();
                }
                continue;
            }
            // Frames still in a tx ring need another kick soon, but a link that is down
            // would never take them: wait a millisecond rather than spin.
            let timeout = if tx_waiting {
                1
            } else {
                schedule.sleep_ms(monotonic_ns())
            };
            if !self.handoff.may_sleep() {
                continue;
            }
            let polled = poll_readable(&mut pollfds, timeout);
            self.handoff.woke();
            if bell.is_some()
                && pollfds
                    .last()
                    .is_some_and(|p| p.revents & libc::POLLIN != 0)
            {
                // Cleared before the tick reads what changed: a ring after this wakes the
                // next poll instead of being lost.
                if let Some(b) = self.handler.doorbell() {
                    b.clear();
                }
                schedule.rung();
            }
            if let Err(e) = polled {
                tracing::error!(error = %e, "poll on AF_XDP sockets failed; worker backs off");
                std::thread::sleep(std::time::Duration::from_millis(POLL_ERROR_BACKOFF_MS));
            }
        }
        local.publish(&self.counters);
        self.handler
    }

    /// One pass over every socket and the handoff rings, then the tx kicks: whether any
    /// frame moved, and whether frames still wait in a tx ring.
    fn pass(&mut self, descs: &mut [Desc; BATCH], now: u64, local: &mut Local) -> (bool, bool) {
        let mut busy = false;
        let mut tx_waiting = false;
        for i in 0..self.ports.len() {
            self.ports[i].xsk.complete();
            let n = self.ports[i].xsk.recv(descs);
            if n > 0 {
                busy = true;
            }
            for d in &descs[..n] {
                self.one(i, *d, now, local);
            }
            self.ports[i].xsk.refill();
        }
        busy |= self.take_handed(now, local);
        self.handoff.wake_pushed();
        for p in &mut self.ports {
            tx_waiting |= p.xsk.flush();
        }
        self.handler.after_tx();
        local.publish(&self.counters);
        (busy, tx_waiting)
    }

    fn one(&mut self, i: usize, d: Desc, now: u64, local: &mut Local) {
        local.rx += 1;
        let chunk = chunk_of(d.addr);
        let offset = (d.addr - chunk) as usize;
        let rx_ifindex = self.ports[i].ifindex;
        let Some(buf) = self.ports[i].xsk.chunk_mut(chunk) else {
            local.bad_desc += 1;
            return;
        };
        let Some(mut frame) = Frame::new(buf, offset, d.len as usize, rx_ifindex) else {
            local.bad_desc += 1;
            self.ports[i].xsk.release(chunk);
            return;
        };
        if let Some(owner) = self.handler.owner(&frame) {
            let meta = Meta {
                offset: offset as u16,
                len: d.len as u16,
                ifindex: rx_ifindex,
            };
            if self.handoff.push(owner, meta, frame.data()) {
                local.handed_off += 1;
            } else {
                local.handoff_ring_full += 1;
            }
            self.ports[i].xsk.release(chunk);
            return;
        }
        let verdict = handle(&mut *self.handler, &self.capture, &mut frame, now);
        let (start, len) = (frame.start() as u64, frame.len() as u32);
        self.apply(i, chunk, verdict, start, len, local);
    }

    /// Takes the frames other workers handed over, each into a free frame of this worker's
    /// socket on the interface it arrived on, and processes it there. A frame waits in its
    /// ring while that socket has no free frame. True when any was taken.
    fn take_handed(&mut self, now: u64, local: &mut Local) -> bool {
        let mut took = false;
        for ring in 0..self.handoff.inbound() {
            for _ in 0..BATCH {
                let Some(meta) = self.handoff.peek(ring) else {
                    break;
                };
                let Some(&(_, i)) = self.egress.iter().find(|(ix, _)| *ix == meta.ifindex) else {
                    // Every worker has a socket on every datapath interface; never reached.
                    let mut sink = [0u8; 0];
                    self.handoff.pop_into(ring, &mut sink);
                    local.bad_egress += 1;
                    continue;
                };
                let Some(chunk) = self.ports[i].xsk.take_free() else {
                    break;
                };
                let (offset, len) = (usize::from(meta.offset), usize::from(meta.len));
                let Some(buf) = self.ports[i].xsk.chunk_mut(chunk) else {
                    local.bad_desc += 1;
                    break;
                };
                let Some(to) = buf.get_mut(offset..offset + len) else {
                    local.bad_desc += 1;
                    self.handoff.pop_into(ring, &mut []);
                    self.ports[i].xsk.release(chunk);
                    continue;
                };
                self.handoff.pop_into(ring, to);
                took = true;
                local.handoff_received += 1;
                let Some(mut frame) = Frame::new(buf, offset, len, meta.ifindex) else {
                    local.bad_desc += 1;
                    self.ports[i].xsk.release(chunk);
                    continue;
                };
                let verdict = handle(&mut *self.handler, &self.capture, &mut frame, now);
                let (start, len) = (frame.start() as u64, frame.len() as u32);
                self.apply(i, chunk, verdict, start, len, local);
            }
        }
        took
    }

    /// Carries out the handler's verdict on `chunk`, a frame of socket `i`.
    fn apply(
        &mut self,
        i: usize,
        chunk: u64,
        verdict: Verdict,
        start: u64,
        len: u32,
        local: &mut Local,
    ) {
        let rx_ifindex = self.ports[i].ifindex;
        match verdict {
            Verdict::Drop(_) => {
                local.dropped += 1;
                self.ports[i].xsk.release(chunk);
            }
            Verdict::Pass => {
                local.unpassable += 1;
                self.ports[i].xsk.release(chunk);
            }
            Verdict::Tx { ifindex } if ifindex == rx_ifindex => {
                if self.ports[i].xsk.send(Desc {
                    addr: chunk + start,
                    len,
                }) {
                    local.tx += 1;
                } else {
                    local.tx_ring_full += 1;
                    self.ports[i].xsk.release(chunk);
                }
            }
            Verdict::Tx { ifindex } => {
                let Some(&(_, j)) = self.egress.iter().find(|(ix, _)| *ix == ifindex) else {
                    local.bad_egress += 1;
                    self.ports[i].xsk.release(chunk);
                    return;
                };
                self.copy_out(i, j, chunk, start as usize, len, local);
            }
        }
    }

    /// Two-arm: copies the frame into a free frame of socket `j` and sends it there.
    fn copy_out(
        &mut self,
        i: usize,
        j: usize,
        chunk: u64,
        start: usize,
        len: u32,
        local: &mut Local,
    ) {
        let Ok([src, dst]) = self.ports.get_disjoint_mut([i, j]) else {
            // `i == j` would mean the same socket, which the caller handles; never reached.
            local.bad_egress += 1;
            self.ports[i].xsk.release(chunk);
            return;
        };
        let Some(out) = dst.xsk.take_free() else {
            local.no_tx_frame += 1;
            src.xsk.release(chunk);
            return;
        };
        let end = start + len as usize;
        let copied = match (src.xsk.chunk_mut(chunk), dst.xsk.chunk_mut(out)) {
            (Some(from), Some(to)) if end <= FRAME_SIZE as usize => {
                // Same offset in the new frame: the headroom in front stays available.
                to[start..end].copy_from_slice(&from[start..end]);
                true
            }
            _ => false,
        };
        if !copied {
            local.bad_desc += 1;
            src.xsk.release(chunk);
            dst.xsk.release(out);
            return;
        }
        src.xsk.release(chunk);
        if dst.xsk.send(Desc {
            addr: out + start as u64,
            len,
        }) {
            local.tx += 1;
        } else {
            local.tx_ring_full += 1;
            dst.xsk.release(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{IDLE_MAX_MS, Schedule, TICK_NS};

    const MS: u64 = 1_000_000;

    /// An idle worker sleeps until its handler's timer, or indefinitely (up to the cap)
    /// when nothing is due; frames bring the 10 ms tick back, and ticks are never closer
    /// than that.
    #[test]
    fn ticks_follow_what_is_due() {
        let mut s = Schedule::new(false);
        assert!(s.is_due(0), "the first tick is at once");
        s.ticked(1000 * MS, None);
        assert!(!s.is_due(u64::MAX), "nothing due: only frames or the bell");
        assert_eq!(s.sleep_ms(1000 * MS), IDLE_MAX_MS);
        s.moved_frames();
        assert!(
            !s.is_due(1009 * MS) && s.is_due(1010 * MS),
            "a tick after frames"
        );
        s.moved_frames();
        assert_eq!(s.due, Some(1010 * MS), "more frames do not push it back");
        s.ticked(1010 * MS, Some(1011 * MS));
        assert_eq!(s.due, Some(1020 * MS), "never closer than a tick");
        s.ticked(1020 * MS, Some(5000 * MS));
        assert_eq!(s.sleep_ms(1020 * MS), IDLE_MAX_MS, "capped");
        assert_eq!(s.sleep_ms(4999 * MS + 1), 1, "rounded up, never early");
        assert_eq!(s.sleep_ms(6000 * MS), 0, "overdue");
        s.rung();
        assert!(s.is_due(1021 * MS), "the bell ticks at once");

        let mut always = Schedule::new(true);
        always.ticked(1000 * MS, None);
        assert_eq!(
            always.due,
            Some(1000 * MS + TICK_NS),
            "busy_poll ticks regardless"
        );
        assert_eq!(always.sleep_ms(1000 * MS), 10);
    }
}
