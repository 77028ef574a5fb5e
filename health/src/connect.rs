//! Plain TCP connect probes without a task, a timer or a socket of their own.
//!
//! A `tcp` check with nothing to send or expect only has to see the three-way handshake
//! complete. At ten thousand probes a second, giving each its own tokio task, timer entry,
//! socket and epoll registration cost more than the handshake itself (issue #6: the
//! prober thread used 16% of a core, half of it above the kernel's own cost). Here the run
//! loop ([`crate::tasks`]) starts each such probe with one non-blocking `connect` on a
//! pooled socket that stays registered in one epoll set. The set is a single tokio
//! registration: its readiness wakes the loop, one `epoll_wait` collects every handshake
//! that finished, and `connect(AF_UNSPEC)` aborts the connection and returns the socket
//! to the pool. The abort is the kernel's `tcp_disconnect`, the same call a close with
//! `SO_LINGER` 0 makes: one RST, no FIN exchange, no TIME_WAIT; a probe still waiting for
//! its SYN-ACK just stops. A passing probe costs two system calls (connect, reset) instead
//! of seven (socket, setsockopt, connect, epoll add, getsockopt, epoll delete, close);
//! a failing one adds a `getsockopt(SO_ERROR)` for its reason.
//!
//! Deadlines sit in queues that the loop checks after collecting completions, so a
//! handshake that finished before the loop woke for its deadline still counts, as with
//! `tokio::time::timeout`, which polls the probe before its timer.

use std::collections::VecDeque;
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::event::{Timespec, epoll};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::outcome::{Failure, Outcome, Pass};
use crate::probe::io_failure;
use crate::scheduler::ProbeId;

/// Events taken per `epoll_wait`; more wait for the next call in the same turn.
const EVENTS: usize = 256;
/// Idle sockets always kept: a dispatch round at 10,000 probes a second is about 100.
const MIN_IDLE: usize = 128;
/// How often idle sockets beyond the recent peak in flight are closed.
const TRIM_EVERY: Duration = Duration::from_secs(10);
const NO_WAIT: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 0,
};

/// A finished probe: which probe, its sequence number, what it found.
pub(crate) type Finished = (ProbeId, u64, Outcome);

/// The in-flight plain connects and the idle sockets they reuse.
pub(crate) struct Connects {
    epoll: AsyncFd<OwnedFd>,
    /// Indexed by the low half of each socket's epoll data.
    slots: Vec<Option<Slot>>,
    free_slots: Vec<u32>,
    /// Idle sockets per address family and source (few: usually one).
    pools: Vec<Pool>,
    /// Deadlines, one queue per check timeout: probes start in time order, so each queue
    /// is sorted by construction and pushes and pops cost O(1), in order in memory.
    /// Entries of probes that finished first are skipped when they come up.
    deadlines: Vec<Deadlines>,
    attempts: u64,
    /// Bumped whenever a slot index gets a new socket, so an event queued for the old
    /// socket cannot be taken for the new one.
    generation: u32,
    in_flight: usize,
    peak: usize,
    trimmed: Instant,
}

struct Slot {
    fd: OwnedFd,
    generation: u32,
    pool: usize,
    busy: Option<Busy>,
}

struct Busy {
    id: ProbeId,
    seq: u64,
    attempt: u64,
}

struct Deadlines {
    timeout: Duration,
    /// (deadline, slot, attempt), earliest first.
    queue: VecDeque<(Instant, u32, u64)>,
}

struct Pool {
    v6: bool,
    source: Option<IpAddr>,
    idle: Vec<u32>,
}

impl std::fmt::Debug for Connects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connects")
            .field("in_flight", &self.in_flight)
            .field("sockets", &(self.slots.len() - self.free_slots.len()))
            .finish()
    }
}

impl Connects {
    /// An empty set; must be called inside a tokio runtime with the io driver enabled.
    pub(crate) fn new() -> io::Result<Connects> {
        let fd = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        // tokio 1.54 deprecated its safe constructors for `T: AsRawFd` types that could
        // change or close their descriptor under the registration; an `OwnedFd` owned by
        // the `AsyncFd` can do neither, and this crate forbids the `unsafe` replacement.
        #[allow(deprecated)]
        let epoll = AsyncFd::with_interest(fd, Interest::READABLE)?;
        Ok(Connects {
            epoll,
            slots: Vec::new(),
            free_slots: Vec::new(),
            pools: Vec::new(),
            deadlines: Vec::new(),
            attempts: 0,
            generation: 0,
            in_flight: 0,
            peak: 0,
            trimmed: Instant::now(),
        })
    }

    /// Starts a connect to `addr` from `source` that must complete by `deadline`.
    /// Returns the outcome at once when the connect cannot even start (no socket, the
    /// source cannot be bound, no route); otherwise it comes from [`Connects::reap`] or
    /// [`Connects::expire`].
    pub(crate) fn start(
        &mut self,
        id: ProbeId,
        seq: u64,
        addr: SocketAddr,
        source: Option<IpAddr>,
        timeout: Duration,
        deadline: Instant,
    ) -> Option<Outcome> {
        let pool = self.pool(addr.is_ipv6(), source);
        let slot = match self.pools[pool].idle.pop() {
            Some(slot) => slot,
            None => match self.open(pool) {
                Ok(slot) => slot,
                Err(failure) => return Some(Err(failure)),
            },
        };
        let s = self.slots[slot as usize].as_mut().expect("pooled slot");
        match rustix::net::connect(&s.fd, &addr) {
            Err(Errno::INPROGRESS) => {}
            // Only a handshake that completed returns success.
            Ok(()) => {
                self.reset(slot);
                return Some(Ok(Pass::Connected));
            }
            Err(e) => {
                // No route, no local port, a firewall: the socket is fine, but a fresh
                // one costs nothing next to an error path.
                self.close(slot);
                return Some(Err(io_failure(e.into())));
            }
        }
        self.attempts += 1;
        s.busy = Some(Busy {
            id,
            seq,
            attempt: self.attempts,
        });
        let q = match self.deadlines.iter().position(|d| d.timeout == timeout) {
            Some(i) => i,
            None => {
                self.deadlines.push(Deadlines {
                    timeout,
                    queue: VecDeque::new(),
                });
                self.deadlines.len() - 1
            }
        };
        // Deadlines are `now + timeout` with `now` never going back, so the queue stays
        // sorted; should a caller break that, a late entry waits for the ones before it.
        self.deadlines[q]
            .queue
            .push_back((deadline, slot, self.attempts));
        self.in_flight += 1;
        self.peak = self.peak.max(self.in_flight);
        None
    }

    /// Waits until the epoll set may hold events. Cancel-safe: dropping it loses nothing.
    pub(crate) async fn readable(&self) {
        match self.epoll.readable().await {
            // Cleared before `reap` reads the set, so an event that arrives after the
            // read marks the set ready again instead of being lost.
            Ok(mut guard) => guard.clear_ready(),
            // Only a runtime shutting down fails here; the loop is about to be dropped.
            Err(_) => std::future::pending().await,
        }
    }

    /// Collects every connect that has finished into `out`.
    pub(crate) fn reap(&mut self, out: &mut Vec<Finished>) {
        // On the stack: epoll's event type holds a pointer union, which is not `Send`,
        // and the loop's future must be.
        let mut buf = [MaybeUninit::<epoll::Event>::uninit(); EVENTS];
        loop {
            let n = match epoll::wait(self.epoll.get_ref(), &mut buf[..], Some(&NO_WAIT)) {
                Ok((events, _)) => {
                    for event in events.iter() {
                        let (flags, data) = (event.flags, event.data.u64());
                        let (slot, generation) = ((data & 0xffff_ffff) as u32, (data >> 32) as u32);
                        self.complete(slot, generation, flags, out);
                    }
                    events.len()
                }
                Err(Errno::INTR) => continue,
                Err(e) => {
                    // EBADF or EINVAL would be a bug; deadlines still end every probe.
                    tracing::error!("health probes: epoll_wait failed: {e}");
                    return;
                }
            };
            if n < EVENTS {
                return;
            }
        }
    }

    /// Ends every probe whose deadline is not after `now` with a timeout. Call after
    /// [`Connects::reap`], so a handshake that made it in time is not counted as late.
    pub(crate) fn expire(&mut self, now: Instant, out: &mut Vec<Finished>) {
        for q in 0..self.deadlines.len() {
            while let Some(&(deadline, slot, attempt)) = self.deadlines[q].queue.front() {
                if deadline > now {
                    break;
                }
                self.deadlines[q].queue.pop_front();
                if let Some(busy) = self.take_busy(slot, attempt) {
                    self.reset(slot);
                    out.push((busy.id, busy.seq, Err(Failure::Timeout)));
                }
            }
        }
        if now.saturating_duration_since(self.trimmed) >= TRIM_EVERY {
            self.trim(now);
        }
    }

    /// The earliest deadline of a probe still in flight.
    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for q in 0..self.deadlines.len() {
            // Probes that finished leave their entry behind; dropping them here keeps
            // the loop from waking for deadlines that no longer matter.
            while let Some(&(deadline, slot, attempt)) = self.deadlines[q].queue.front() {
                if self.is_busy(slot, attempt) {
                    next = Some(next.map_or(deadline, |n| n.min(deadline)));
                    break;
                }
                self.deadlines[q].queue.pop_front();
            }
        }
        next
    }

    fn complete(
        &mut self,
        slot: u32,
        generation: u32,
        flags: epoll::EventFlags,
        out: &mut Vec<Finished>,
    ) {
        let Some(Some(s)) = self.slots.get(slot as usize) else {
            return;
        };
        // An idle socket reports its own reset; a closed one may have left an event.
        if s.generation != generation || s.busy.is_none() {
            return;
        }
        // epoll_wait reports the socket's state at the time of the call: a socket still
        // in SYN-SENT is never reported, so OUT without ERR is an established connection.
        let outcome = if flags.contains(epoll::EventFlags::ERR) {
            match rustix::net::sockopt::socket_error(&s.fd) {
                Ok(Err(e)) => Err(io_failure(e.into())),
                Ok(Ok(())) if !flags.contains(epoll::EventFlags::HUP) => Ok(Pass::Connected),
                Ok(Ok(())) => Err(Failure::Io("connection closed without an error".into())),
                Err(e) => Err(Failure::Io(format!("cannot read socket error: {e}"))),
            }
        } else if flags.contains(epoll::EventFlags::OUT) {
            Ok(Pass::Connected)
        } else {
            return;
        };
        let attempt = s.busy.as_ref().map_or(0, |b| b.attempt);
        if let Some(busy) = self.take_busy(slot, attempt) {
            self.reset(slot);
            out.push((busy.id, busy.seq, outcome));
        }
    }

    fn is_busy(&self, slot: u32, attempt: u64) -> bool {
        matches!(
            self.slots.get(slot as usize),
            Some(Some(Slot { busy: Some(b), .. })) if b.attempt == attempt
        )
    }

    fn take_busy(&mut self, slot: u32, attempt: u64) -> Option<Busy> {
        if !self.is_busy(slot, attempt) {
            return None;
        }
        self.in_flight -= 1;
        self.slots[slot as usize].as_mut()?.busy.take()
    }

    /// Aborts the slot's connection (RST if established) and makes it idle again.
    fn reset(&mut self, slot: u32) {
        let Some(s) = self.slots[slot as usize].as_ref() else {
            return;
        };
        match rustix::net::connect_unspec(&s.fd) {
            Ok(()) => {
                let pool = s.pool;
                self.pools[pool].idle.push(slot);
            }
            Err(e) => {
                tracing::warn!("health probes: cannot reset a probe socket: {e}");
                self.close(slot);
            }
        }
    }

    fn close(&mut self, slot: u32) {
        // Closing the last descriptor also removes it from the epoll set.
        self.slots[slot as usize] = None;
        self.free_slots.push(slot);
    }

    fn pool(&mut self, v6: bool, source: Option<IpAddr>) -> usize {
        if let Some(i) = self
            .pools
            .iter()
            .position(|p| p.v6 == v6 && p.source == source)
        {
            return i;
        }
        self.pools.push(Pool {
            v6,
            source,
            idle: Vec::new(),
        });
        self.pools.len() - 1
    }

    /// A new non-blocking socket for `pool`, bound to its source and in the epoll set.
    fn open(&mut self, pool: usize) -> Result<u32, Failure> {
        let (v6, source) = (self.pools[pool].v6, self.pools[pool].source);
        let family = if v6 {
            AddressFamily::INET6
        } else {
            AddressFamily::INET
        };
        let fd = rustix::net::socket_with(
            family,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| {
            crate::outcome::local_or(e.into(), |e| {
                Failure::Io(format!("cannot create socket: {e}"))
            })
        })?;
        // Should the socket ever be closed while connected (the prober stopping), it
        // resets rather than leaving TIME_WAIT behind.
        rustix::net::sockopt::set_socket_linger(&fd, Some(Duration::ZERO))
            .map_err(|e| io_failure(e.into()))?;
        if let Some(src) = source {
            // Port 0: the kernel picks a fresh port at each connect, the address stays.
            rustix::net::bind(&fd, &SocketAddr::new(src, 0))
                .map_err(|e| Failure::Bind(format!("{src}: {}", io::Error::from(e))))?;
        }
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 probe sockets")
            }
        };
        self.generation = self.generation.wrapping_add(1);
        let data = u64::from(self.generation) << 32 | u64::from(slot);
        if let Err(e) = epoll::add(
            self.epoll.get_ref(),
            &fd,
            epoll::EventData::new_u64(data),
            epoll::EventFlags::OUT | epoll::EventFlags::ET,
        ) {
            self.free_slots.push(slot);
            return Err(Failure::Io(format!(
                "cannot watch a probe socket: {}",
                io::Error::from(e)
            )));
        }
        self.slots[slot as usize] = Some(Slot {
            fd,
            generation: self.generation,
            pool,
            busy: None,
        });
        Ok(slot)
    }

    /// Closes idle sockets beyond what the busiest moment since the last trim needed.
    fn trim(&mut self, now: Instant) {
        let mut keep = MIN_IDLE.max(self.peak);
        let mut surplus = Vec::new();
        for p in &mut self.pools {
            let k = keep.min(p.idle.len());
            keep -= k;
            // The oldest idle sockets sit at the bottom of the stack.
            surplus.extend(p.idle.drain(..p.idle.len() - k));
        }
        for slot in surplus {
            self.close(slot);
        }
        self.peak = self.in_flight;
        self.trimmed = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream};

    const MS: Duration = Duration::from_millis(1);

    /// Waits for the outcome of probe `id`, driving the set as the run loop does;
    /// others that finish meanwhile wait in `out`.
    async fn outcome_of(c: &mut Connects, out: &mut Vec<Finished>, id: ProbeId) -> Outcome {
        let give_up = Instant::now() + Duration::from_secs(5);
        loop {
            c.reap(out);
            c.expire(Instant::now(), out);
            if let Some(i) = out.iter().position(|f| f.0 == id) {
                return out.swap_remove(i).2;
            }
            assert!(Instant::now() < give_up, "probe {id} never finished");
            let _ = tokio::time::timeout(10 * MS, c.readable()).await;
        }
    }

    fn sockets(c: &Connects) -> usize {
        c.slots.len() - c.free_slots.len()
    }

    /// Passing, refused and timed-out connects over both families, one after another on
    /// the same few sockets: none inherits the previous probe's state or error. Loopback
    /// only; the timeout comes from a listener whose accept queue is full (Linux drops
    /// the SYN instead of answering).
    #[tokio::test]
    async fn pooled_sockets_pass_refuse_and_time_out_in_any_order() {
        let open4 = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("listen on 127.0.0.1");
        let open6 = TcpListener::bind((Ipv6Addr::LOCALHOST, 0))
            .expect("listen on ::1 (the test needs IPv6 on the loopback interface)");
        let closed = {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("listen");
            l.local_addr().expect("addr")
        };
        let full = {
            let fd =
                rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).expect("socket");
            rustix::net::bind(&fd, &SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).expect("bind");
            rustix::net::listen(&fd, 0).expect("listen");
            TcpListener::from(fd)
        };
        let full_addr = full.local_addr().expect("addr");
        // Takes the one place in the accept queue; nobody accepts it.
        let _filler = TcpStream::connect(full_addr).expect("fill the accept queue");

        let mut c = Connects::new().expect("epoll set");
        let mut out = Vec::new();
        let timeout = 150 * MS;
        let plan = [
            (open4.local_addr().unwrap(), Ok(Pass::Connected)),
            (closed, Err(Failure::Refused)),
            (full_addr, Err(Failure::Timeout)),
            (open4.local_addr().unwrap(), Ok(Pass::Connected)),
            (open6.local_addr().unwrap(), Ok(Pass::Connected)),
            (closed, Err(Failure::Refused)),
            (open6.local_addr().unwrap(), Ok(Pass::Connected)),
            (full_addr, Err(Failure::Timeout)),
            (open4.local_addr().unwrap(), Ok(Pass::Connected)),
        ];
        for (round, (addr, want)) in plan.iter().enumerate() {
            let id = round as ProbeId;
            let started = Instant::now();
            let now = c.start(id, 1, *addr, None, timeout, started + timeout);
            assert_eq!(now, None, "round {round}: {addr} finished at once");
            let got = outcome_of(&mut c, &mut out, id).await;
            assert_eq!(&got, want, "round {round}: {addr}");
            if got == Err(Failure::Timeout) {
                assert!(started.elapsed() >= timeout, "timed out early");
            }
            assert_eq!(c.in_flight, 0);
            assert!(
                sockets(&c) <= 2,
                "one socket per family, reused: {}",
                sockets(&c)
            );
        }
        // Many at once: each gets a socket, all come back to the pool.
        for id in 100..110 {
            assert_eq!(
                c.start(
                    id,
                    1,
                    open4.local_addr().unwrap(),
                    None,
                    timeout,
                    Instant::now() + timeout
                ),
                None
            );
        }
        for id in 100..110 {
            assert_eq!(outcome_of(&mut c, &mut out, id).await, Ok(Pass::Connected));
        }
        assert_eq!(
            c.next_deadline(),
            None,
            "finished probes leave no deadline behind"
        );
        assert_eq!(
            c.pools.iter().map(|p| p.idle.len()).sum::<usize>(),
            sockets(&c)
        );
    }

    #[tokio::test]
    async fn unbindable_source_fails_with_the_address() {
        let mut c = Connects::new().expect("epoll set");
        // TEST-NET-3: never configured on this host.
        let source: IpAddr = "203.0.113.9".parse().unwrap();
        let got = c.start(
            1,
            1,
            SocketAddr::from((Ipv4Addr::LOCALHOST, 9)),
            Some(source),
            MS,
            Instant::now() + MS,
        );
        match got {
            Some(Err(Failure::Bind(m))) => assert!(m.starts_with("203.0.113.9: "), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(sockets(&c), 0);
    }
}
