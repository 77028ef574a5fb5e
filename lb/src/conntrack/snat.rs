//! FullNAT local port allocation.
//!
//! No two flows may share (protocol, backend address, backend port, local address, local
//! port): a candidate port is free exactly when the reverse index has no live entry for it
//! and no removed flow still waiting in the journal holds it (its kernel flow-cache entries
//! may still exist). Ports are partitioned between workers (`port % workers == worker`) so
//! the steering program can send return traffic to the worker that owns the flow.

use super::{ConnTable, RevKey};
use crate::hash::mix64;

/// Lowest FullNAT local port (below are well-known and registered services).
pub const SNAT_PORT_MIN: u16 = 1024;
/// FullNAT port candidates tried per local address before trying the next address.
pub const SNAT_PROBES: usize = 64;

impl ConnTable {
    /// Allocates a FullNAT local address and port toward `backend:backend_port` over
    /// `proto`, starting at a hash-derived address and port so flows spread. Expired flows
    /// holding a candidate are reclaimed; when every candidate is held, the oldest
    /// embryonic holder gives its port up. `None` when established flows hold every probe.
    pub fn alloc_snat(
        &mut self,
        proto: u8,
        backend: u128,
        backend_port: u16,
        pool: &[u128],
        hash: u32,
        now: u64,
    ) -> Option<(u128, u16)> {
        self.alloc_snat_avoiding(proto, backend, backend_port, pool, hash, now, &|_| false)
    }

    /// [`ConnTable::alloc_snat`], also passing over every candidate `busy` says another
    /// appliance's flow holds: a synced flow of this appliance's own address, carried on by
    /// a peer while this one was away, keeps its port until it ends.
    #[allow(clippy::too_many_arguments)]
    pub fn alloc_snat_avoiding(
        &mut self,
        proto: u8,
        backend: u128,
        backend_port: u16,
        pool: &[u128],
        hash: u32,
        now: u64,
        busy: &dyn Fn(&RevKey) -> bool,
    ) -> Option<(u128, u16)> {
        if pool.is_empty() {
            return None;
        }
        let w = u32::from(self.workers);
        let id = u32::from(self.worker);
        let min = u32::from(SNAT_PORT_MIN);
        // First port >= min owned by this worker, and how many such ports exist.
        let first = min + (id + w - min % w) % w;
        if first > 65535 {
            return None;
        }
        let count = (65535 - first) / w + 1;
        let start_addr = (hash as usize) % pool.len();
        let start_port = mix64(u64::from(hash)) as u32 % count;
        // The oldest embryonic holder among the candidates: a port held by a handshake
        // nobody finished (a spoofed SYN's, most of the time) serves a new flow before
        // that flow is refused for want of a port.
        let mut victim: Option<(u32, u64, u128, u16)> = None;
        for a in 0..pool.len() {
            let local = pool[(start_addr + a) % pool.len()];
            for i in 0..SNAT_PROBES as u32 {
                let port = (first + ((start_port + i) % count) * w) as u16;
                let rk = RevKey {
                    proto,
                    backend,
                    backend_port,
                    local,
                    local_port: port,
                };
                match self.find_rev(&rk) {
                    None if !self.held(&rk) && !busy(&rk) => return Some((local, port)),
                    None => {}
                    // The holder's removal journals its port: held until drained.
                    Some(holder) if self.expired(holder, now) && self.journal.is_none() => {
                        self.remove(holder);
                        self.stats.expired += 1;
                        return Some((local, port));
                    }
                    Some(holder) if self.expired(holder, now) => {
                        self.remove(holder);
                        self.stats.expired += 1;
                    }
                    Some(holder) if self.slots[holder as usize].flow.state.is_embryonic() => {
                        let at = self.slots[holder as usize].lru_at;
                        if victim.is_none_or(|(_, t, _, _)| at < t) {
                            victim = Some((holder, at, local, port));
                        }
                    }
                    Some(_) => {}
                }
            }
        }
        // The victim's kernel flow-cache entries (its SYN-ACK's return entry, at most) are
        // evicted when the engine drains the journal, before this frame is sent: the new
        // flow's replies cannot come back before that.
        let (holder, _, local, port) = victim?;
        self.remove(holder);
        self.stats.evicted_embryonic += 1;
        self.stats.snat_reclaimed += 1;
        Some((local, port))
    }
}
