//! Frames handed from the worker that received them to the worker that owns their flow.
//!
//! An AF_XDP socket bound to queue q receives only queue q's frames, and the XDP program
//! cannot redirect a frame into another queue's socket, so when RSS puts FullNAT return
//! traffic, or a NAT flow's frame of either direction, on a queue whose worker does not
//! hold the flow (`lb::process::owner`), the receiving worker copies the frame into a ring
//! toward the owner, and the owner copies it
//! into a free frame of its own socket on the same interface and processes it as if it had
//! received it, transmitting on its own sockets. Where the driver takes ntuple rules
//! (`sys::ethtool`), the NIC steers those frames to the owner's queue and this path stays
//! idle.
//!
//! There is one bounded single-producer single-consumer ring per ordered pair of workers,
//! allocated at start. A slot is a row of `AtomicU64` words, so both sides copy with plain
//! (relaxed) loads and stores and publish with one release store of the ring index: no
//! lock, no allocation and no `unsafe` on the hot path. A full ring drops the frame and
//! counts it (`handoff_ring_full`), as a full tx ring would.
//!
//! An idle owner sleeps in `poll`; it also polls its [`Waker`]'s eventfd, which a producer
//! writes (one syscall per pass, not per frame) only when the owner said it was about to
//! sleep, so a handed-off frame never waits for the idle timeout.
//!
//! ```text
//! worker r: rx -> owner(frame) == o != r -> ring[r -> o].push(copy) -> wake o if asleep
//! worker o: each pass: ring[* -> o].pop -> take_free on its socket -> handler -> tx
//! ```

use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};

use super::doorbell::Doorbell;
use super::xsk::FRAME_SIZE;

/// Frames a ring between two workers holds: one rx batch of the sender.
pub const DEPTH: usize = 256;
/// Words of a slot's frame bytes: a whole UMEM frame, so any frame fits.
const WORDS: usize = FRAME_SIZE as usize / 8;
/// Words per slot: one of metadata (offset, length, ifindex), then the frame.
const SLOT_WORDS: usize = 1 + WORDS;

/// One frame as it sits in a ring: where it starts in its UMEM frame, how long it is, and
/// the interface it arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Offset of the packet in its UMEM frame (the owner keeps it, and so the headroom).
    pub offset: u16,
    /// Packet length in bytes.
    pub len: u16,
    /// Interface the packet arrived on.
    pub ifindex: u32,
}

impl Meta {
    fn pack(self) -> u64 {
        (u64::from(self.offset) << 48) | (u64::from(self.len) << 32) | u64::from(self.ifindex)
    }

    fn unpack(w: u64) -> Meta {
        Meta {
            offset: (w >> 48) as u16,
            len: (w >> 32) as u16,
            ifindex: w as u32,
        }
    }
}

/// A bounded SPSC ring of frames from one worker to another.
struct Ring {
    words: Box<[AtomicU64]>,
    /// Next slot to read (written by the consumer).
    head: AtomicU64,
    /// Next slot to write (written by the producer).
    tail: AtomicU64,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            words: (0..DEPTH * SLOT_WORDS).map(|_| AtomicU64::new(0)).collect(),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
        }
    }

    fn slot(&self, index: u64) -> &[AtomicU64] {
        let at = (index as usize % DEPTH) * SLOT_WORDS;
        &self.words[at..at + SLOT_WORDS]
    }

    /// Copies `packet` into the next slot; false when the ring is full or the packet does
    /// not fit a UMEM frame.
    fn push(&self, meta: Meta, packet: &[u8]) -> bool {
        let tail = self.tail.load(Ordering::Relaxed);
        if tail - self.head.load(Ordering::Acquire) >= DEPTH as u64
            || packet.len() > WORDS * 8
            || usize::from(meta.len) != packet.len()
        {
            return false;
        }
        let slot = self.slot(tail);
        slot[0].store(meta.pack(), Ordering::Relaxed);
        for (w, bytes) in slot[1..].iter().zip(packet.chunks(8)) {
            let mut b = [0u8; 8];
            b[..bytes.len()].copy_from_slice(bytes);
            w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
        }
        self.tail.store(tail + 1, Ordering::Release);
        true
    }

    /// The metadata of the oldest frame, if any.
    fn peek(&self) -> Option<Meta> {
        let head = self.head.load(Ordering::Relaxed);
        if head == self.tail.load(Ordering::Acquire) {
            return None;
        }
        Some(Meta::unpack(self.slot(head)[0].load(Ordering::Relaxed)))
    }

    /// Copies the oldest frame into `to` (at least its length long) and frees its slot.
    fn pop_into(&self, to: &mut [u8]) {
        let head = self.head.load(Ordering::Relaxed);
        let slot = self.slot(head);
        for (bytes, w) in to.chunks_mut(8).zip(&slot[1..]) {
            let b = w.load(Ordering::Relaxed).to_ne_bytes();
            bytes.copy_from_slice(&b[..bytes.len()]);
        }
        self.head.store(head + 1, Ordering::Release);
    }

    fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) == self.tail.load(Ordering::Acquire)
    }
}

/// Wakes a worker that sleeps in `poll`: its doorbell, rung by a producer only when the
/// worker said it was about to sleep.
pub struct Waker {
    bell: Doorbell,
    /// Set by the worker just before it sleeps, cleared when it wakes.
    sleeping: AtomicBool,
}

impl Waker {
    fn new() -> std::io::Result<Waker> {
        Ok(Waker {
            bell: Doorbell::new()?,
            sleeping: AtomicBool::new(false),
        })
    }
}

/// One worker's ends of the rings: the rings toward every other worker, the rings from
/// them, and their wakers.
pub struct HandoffPort {
    me: usize,
    /// Per destination worker, the ring toward it (`None` for this worker itself).
    out: Vec<Option<Arc<Ring>>>,
    /// Rings from the other workers.
    inbound: Vec<Arc<Ring>>,
    wakers: Vec<Arc<Waker>>,
    /// Bit `o` set: a frame was pushed toward worker `o` in this pass.
    pushed: u64,
}

/// Most workers the handoff serves (a wake mask is one `u64`); the datapath starts at most
/// `steer::MAX_QUEUES` workers, which is below this.
pub const MAX_WORKERS: usize = 64;

impl HandoffPort {
    /// The ports of `workers` workers, in worker order; allocates every ring.
    pub fn mesh(workers: usize) -> std::io::Result<Vec<HandoffPort>> {
        let workers = workers.clamp(1, MAX_WORKERS);
        let wakers = (0..workers)
            .map(|_| Waker::new().map(Arc::new))
            .collect::<std::io::Result<Vec<_>>>()?;
        // rings[from][to]
        let rings: Vec<Vec<Option<Arc<Ring>>>> = (0..workers)
            .map(|from| {
                (0..workers)
                    .map(|to| (from != to && workers > 1).then(|| Arc::new(Ring::new())))
                    .collect()
            })
            .collect();
        Ok((0..workers)
            .map(|me| HandoffPort {
                me,
                out: rings[me].clone(),
                inbound: (0..workers)
                    .filter_map(|from| rings[from][me].clone())
                    .collect(),
                wakers: wakers.clone(),
                pushed: 0,
            })
            .collect())
    }

    /// The eventfd this worker polls besides its sockets.
    pub fn wake_fd(&self) -> RawFd {
        self.wakers[self.me].bell.fd()
    }

    /// This worker's doorbell, for whoever else must wake it (`Datapath::stop`).
    pub fn doorbell(&self) -> Doorbell {
        self.wakers[self.me].bell.clone()
    }

    /// Copies `packet` toward worker `to`; false when its ring is full (or `to` is this
    /// worker or no worker at all).
    pub fn push(&mut self, to: usize, meta: Meta, packet: &[u8]) -> bool {
        let Some(Some(ring)) = self.out.get(to) else {
            return false;
        };
        if !ring.push(meta, packet) {
            return false;
        }
        self.pushed |= 1 << to;
        true
    }

    /// After a pass: wakes every worker a frame was pushed to that is asleep.
    pub fn wake_pushed(&mut self) {
        if self.pushed == 0 {
            return;
        }
        // Pairs with the fence in `may_sleep`: either the owner sees the frame before it
        // sleeps, or this side sees it sleeping and wakes it.
        fence(Ordering::SeqCst);
        let mut mask = std::mem::take(&mut self.pushed);
        while mask != 0 {
            let o = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let w = &self.wakers[o];
            if w.sleeping.load(Ordering::SeqCst) {
                w.bell.ring();
            }
        }
    }

    /// Announces that this worker is about to sleep; false (and not sleeping) when a frame
    /// is already waiting for it.
    pub fn may_sleep(&self) -> bool {
        let w = &self.wakers[self.me];
        w.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.inbound.iter().any(|r| !r.is_empty()) {
            w.sleeping.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// After `poll` returned: no longer asleep; clears a wake-up.
    pub fn woke(&self) {
        let w = &self.wakers[self.me];
        w.sleeping.store(false, Ordering::SeqCst);
        w.bell.clear();
    }

    /// Rings from the other workers, for [`HandoffPort::peek`] and [`HandoffPort::pop_into`].
    pub fn inbound(&self) -> usize {
        self.inbound.len()
    }

    /// The oldest frame waiting on inbound ring `ring`.
    pub fn peek(&self, ring: usize) -> Option<Meta> {
        self.inbound.get(ring)?.peek()
    }

    /// Copies the frame [`HandoffPort::peek`] showed into `to` and frees its slot.
    pub fn pop_into(&self, ring: usize, to: &mut [u8]) {
        if let Some(r) = self.inbound.get(ring) {
            r.pop_into(to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(len: usize) -> Meta {
        Meta {
            offset: 256,
            len: len as u16,
            ifindex: 7,
        }
    }

    #[test]
    fn frames_arrive_intact_in_order_and_a_full_ring_refuses() {
        let mut ports = HandoffPort::mesh(3).expect("eventfds");
        let (a, rest) = ports.split_at_mut(1);
        let (a, c) = (&mut a[0], &mut rest[1]);
        for i in 0..DEPTH {
            let pkt: Vec<u8> = (0..(60 + i % 13)).map(|b| (b + i) as u8).collect();
            assert!(a.push(2, meta(pkt.len()), &pkt), "slot {i}");
        }
        assert!(!a.push(2, meta(60), &[0; 60]), "a full ring refuses");
        assert!(!a.push(0, meta(60), &[0; 60]), "no ring to itself");
        assert!(!a.push(9, meta(60), &[0; 60]), "no such worker");
        assert_eq!(c.inbound(), 2);
        let ring = (0..c.inbound())
            .find(|r| c.peek(*r).is_some())
            .expect("a ring with frames");
        for i in 0..DEPTH {
            let m = c.peek(ring).expect("frame");
            let want: Vec<u8> = (0..(60 + i % 13)).map(|b| (b + i) as u8).collect();
            assert_eq!(m, meta(want.len()));
            let mut got = vec![0xa5; usize::from(m.len)];
            c.pop_into(ring, &mut got);
            assert_eq!(got, want, "frame {i}");
        }
        assert_eq!(c.peek(ring), None);
        assert!(
            a.push(2, meta(4000), &[1; 4000]),
            "room again, a whole frame fits"
        );
        assert!(
            !a.push(2, meta(4097), &[1; 4097]),
            "larger than a UMEM frame"
        );
    }

    #[test]
    fn a_sleeping_owner_is_woken_and_a_busy_one_is_not_put_to_sleep() {
        let mut ports = HandoffPort::mesh(2).expect("eventfds");
        let (a, b) = ports.split_at_mut(1);
        let (a, b) = (&mut a[0], &mut b[0]);
        assert!(b.may_sleep(), "nothing waits");
        assert!(a.push(1, meta(64), &[3; 64]));
        a.wake_pushed();
        let mut fds = [libc::pollfd {
            fd: b.wake_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(
            super::super::xsk::poll_readable(&mut fds, 1000).ok(),
            Some(true),
            "the eventfd is readable"
        );
        b.woke();
        assert_eq!(
            super::super::xsk::poll_readable(&mut fds, 0).ok(),
            Some(false),
            "woke() cleared it"
        );
        assert!(!b.may_sleep(), "a frame waits, so no sleep");
    }

    #[test]
    fn a_frame_pushed_while_the_owner_drains_survives_the_threads() {
        let mut ports = HandoffPort::mesh(2).expect("eventfds");
        let b = ports.pop().expect("b");
        let mut a = ports.pop().expect("a");
        let n = 20_000u32;
        let producer = std::thread::spawn(move || {
            let mut i = 0u32;
            while i < n {
                let pkt = i.to_ne_bytes().repeat(20);
                if a.push(1, meta(pkt.len()), &pkt) {
                    i += 1;
                }
                a.wake_pushed();
            }
        });
        let mut next = 0u32;
        while next < n {
            if b.peek(0).is_some() {
                let mut got = vec![0; 80];
                b.pop_into(0, &mut got);
                assert_eq!(got, next.to_ne_bytes().repeat(20));
                next += 1;
            }
        }
        producer.join().expect("producer");
    }
}
