//! A flow that can leave its table: [`FlowRecord`] is a connection as a new process (the
//! restart hand-over) or another appliance (connection sync) needs it, with nothing that
//! only one table version means. A [`Flow`] names its VIP and backend by slots of the
//! version it was bound to; a record names them by what every version agrees on (the key's
//! zone, address, port and protocol for the VIP; the backend's address and port), and its
//! age instead of a timestamp of the writer's clock. [`super::codec`] is its one wire form.

use super::{Carry, ConnTable, Evidence, Flow, FlowState, InsertError, Track};
use crate::hash::FlowKey;
use crate::tables::Tables;
use config::Mode;

/// One connection, portable between tables, processes and appliances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRecord {
    /// Client → VIP key, zone included: the VIP is the one serving its destination.
    pub key: FlowKey,
    /// Backend address (IPv4-mapped for IPv4) and port.
    pub backend: (u128, u16),
    /// Connection state.
    pub state: FlowState,
    /// Evidence toward established (an embryonic flow keeps what it has shown).
    pub evidence: Evidence,
    /// FullNAT local address and port.
    pub snat: Option<(u128, u16)>,
    /// How the flow carries the client's address, and where it stands.
    pub carry: Carry,
    /// Where its sequence spaces stand.
    pub track: Track,
    /// Nanoseconds since its last packet, when it was written.
    pub age_ns: u64,
}

/// Why a record did not become a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// No VIP of the tables serves the record's destination (the config changed).
    #[error("no VIP serves the flow's destination")]
    NoVip,
    /// A FullNAT record without a local port, or a local port on a VIP of another mode.
    #[error("the flow's FullNAT port does not fit its VIP's mode")]
    ModeMismatch,
    /// The record is older than its state's timeout here.
    #[error("the flow would have expired")]
    Expired,
    /// The table is full of established flows.
    #[error("the connection table is full")]
    Full,
}

impl FlowRecord {
    /// The record of `f` at `now` (on the clock `f.last_seen` is on).
    pub fn of(f: &Flow, now: u64) -> FlowRecord {
        FlowRecord {
            key: f.key,
            backend: (f.backend_addr, f.backend_port),
            state: f.state,
            evidence: f.evidence,
            snat: f.snat,
            carry: f.carry,
            track: f.track,
            age_ns: now.saturating_sub(f.last_seen),
        }
    }
}

impl ConnTable {
    /// Every live flow (expired ones not yet reclaimed are left out) as a record at `now`:
    /// class by class, each oldest first, so that
    /// [`ConnTable::import`] in this order rebuilds every class's list in the same order
    /// (its tail is the next to expire).
    pub fn export(&self, now: u64) -> impl Iterator<Item = FlowRecord> + '_ {
        let mut class = 0;
        let mut cur = self.lists[0].tail;
        std::iter::from_fn(move || {
            while cur == super::NONE {
                class += 1;
                if class >= super::CLASSES {
                    return None;
                }
                cur = self.lists[class].tail;
            }
            let id = cur;
            cur = self.slots[id as usize].prev;
            Some(id)
        })
        .filter(move |&id| !self.expired(id, now))
        .map(move |id| FlowRecord::of(self.flow(id), now))
    }

    /// Makes `r` a flow of this table, bound to `tables` (the version the caller runs), as
    /// if its last packet came `r.age_ns` before `now`. A flow with the same key is
    /// replaced (the record is newer news of it). A backend the tables no longer hold
    /// leaves the flow to be re-chosen on its next packet, as a table swap would.
    pub fn import(
        &mut self,
        r: &FlowRecord,
        tables: &Tables,
        now: u64,
    ) -> Result<u32, ImportError> {
        let vip = tables.vip_of_key(&r.key).ok_or(ImportError::NoVip)?;
        let v = &tables.vips[vip as usize];
        let fullnat = v.mode == Mode::FullNat;
        if fullnat != r.snat.is_some() {
            return Err(ImportError::ModeMismatch);
        }
        if r.age_ns > self.timeout_ns(r.state) {
            return Err(ImportError::Expired);
        }
        let backend = tables
            .backend_slot(vip, r.backend.0, r.backend.1)
            .unwrap_or(super::NONE);
        let last_seen = now.saturating_sub(r.age_ns);
        if let Some(id) = self.lookup(&r.key, now) {
            self.remove(id);
        }
        let flow = Flow {
            key: r.key,
            vip,
            backend,
            backend_addr: r.backend.0,
            backend_port: r.backend.1,
            version: tables.version,
            state: r.state,
            evidence: r.evidence,
            last_seen,
            hash: r.key.hash(v.hash),
            snat: r.snat,
            reverse: matches!(v.mode, Mode::Nat | Mode::FullNat),
            carry: r.carry,
            track: r.track,
        };
        let id = self.insert(flow, last_seen).map_err(|e| match e {
            InsertError::Full | InsertError::SourceBudget | InsertError::ZoneBudget => {
                ImportError::Full
            }
        })?;
        // A flow taken in (from a peer's sync, or a process before this one) is this
        // table's now: its peers hear of it as of any flow established here.
        if let Some(n) = &mut self.news
            && !r.state.is_embryonic()
            && r.state != FlowState::TcpClosing
        {
            super::news::News::note(&mut n.established, &mut n.lost, r.key);
        }
        Ok(id)
    }
}
