//! Doorbells: how a thread wakes a datapath worker that sleeps in `poll`.
//!
//! An idle worker sleeps until a frame arrives, a handed-over frame waits for it, or its
//! handler's next timer is due, with no periodic wake-up: an appliance without traffic
//! should cost nothing. What else needs the worker comes through a doorbell, an eventfd
//! the worker polls beside its sockets: a new table version (the control plane rings every
//! worker's bell after it publishes) and [`crate::datapath::Datapath::stop`]. A ring is one
//! `write` on a counter the worker clears when it wakes, so a ring while the worker is
//! awake is not lost either: its next `poll` returns at once.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, Weak};

use nix::sys::eventfd::{EfdFlags, EventFd};

/// One worker's doorbell; clones ring the same bell.
#[derive(Debug, Clone)]
pub struct Doorbell(Arc<EventFd>);

impl Doorbell {
    /// A new bell (an eventfd; fails only when the process is out of file descriptors).
    pub fn new() -> std::io::Result<Doorbell> {
        EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map(|fd| Doorbell(Arc::new(fd)))
            .map_err(std::io::Error::from)
    }

    /// Wakes the worker polling this bell, now or at its next `poll`.
    pub fn ring(&self) {
        // EAGAIN means the counter is full, which wakes the worker all the same.
        let _ = self.0.write(1);
    }

    /// The descriptor the worker polls.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// After `poll`: clears the rings so far (nothing to clear is not an error).
    pub fn clear(&self) {
        let _ = self.0.read();
    }
}

/// The bells of every worker that registered, rung together (a table version for all of
/// them). Holds them weakly: a worker that went away leaves nothing behind.
#[derive(Debug, Default)]
pub struct Bells(Mutex<Vec<Weak<EventFd>>>);

impl Bells {
    /// A new bell, registered here.
    pub fn register(&self) -> std::io::Result<Doorbell> {
        let bell = Doorbell::new()?;
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&bell.0));
        Ok(bell)
    }

    /// Rings every registered bell whose worker is still there.
    pub fn ring_all(&self) {
        let all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for fd in all.iter().filter_map(Weak::upgrade) {
            Doorbell(fd).ring();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(bell: &Doorbell) -> bool {
        let mut fds = [libc::pollfd {
            fd: bell.fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        sys::xsk::poll_readable(&mut fds, 0).expect("poll")
    }

    #[test]
    fn a_ring_waits_until_cleared_and_gone_bells_are_dropped() {
        let bells = Bells::default();
        let a = bells.register().expect("eventfd");
        let b = bells.register().expect("eventfd");
        assert!(!readable(&a), "a new bell is quiet");
        bells.ring_all();
        assert!(readable(&a) && readable(&b), "every registered bell rings");
        a.clear();
        assert!(!readable(&a), "clear() quiets it");
        assert!(readable(&b), "until its own worker clears it");
        drop(b);
        bells.ring_all();
        let c = bells.register().expect("eventfd");
        assert_eq!(
            bells.0.lock().expect("lock").len(),
            2,
            "the dropped bell left the list"
        );
        assert!(readable(&a) && !readable(&c));
    }
}
