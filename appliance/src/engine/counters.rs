//! What a worker counts and publishes: its [`CounterSnapshot`] (per-slot counters of the
//! table version it runs) and the totals per VIP and per backend that survive reloads.

use std::collections::HashMap;
use std::sync::Arc;

use crate::lb::BackendId;
use crate::lb::{self, DropReason, Tables};

/// Counters of one VIP, kept across table versions by its name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VipTotals {
    pub packets: u64,
    pub bytes: u64,
    pub new_flows: u64,
    /// QUIC-LB outcomes, by [`lb::quic::Counter`] (zero unless the VIP has `quic_lb`).
    pub quic: [u64; lb::quic::COUNTERS],
}

/// Counters of one backend of one VIP, kept across table versions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendTotals {
    pub packets: u64,
    pub bytes: u64,
    /// New flows scheduled to it (connections for TCP, flows or datagrams for UDP).
    pub new_flows: u64,
}

/// A worker's counters as last published.
///
/// Per-slot counters restart with every table version (slots move when the config does), so
/// the worker folds the old version's counters into `retired_*`, keyed by names that survive
/// a reload, before it adopts a new version: a VIP's totals never go backwards.
#[derive(Debug, Clone, Default)]
pub struct CounterSnapshot {
    /// Table version the worker runs.
    pub version: u64,
    /// The tables of `version`, to map the per-slot counters to names.
    pub tables: Option<Arc<Tables>>,
    pub drops: [u64; DropReason::COUNT],
    pub stats: lb::process::WorkerStats,
    /// Per VIP slot of `version`.
    pub vip_packets: Vec<u64>,
    pub vip_bytes: Vec<u64>,
    pub vip_new_flows: Vec<u64>,
    pub vip_quic: Vec<[u64; lb::quic::COUNTERS]>,
    /// Per backend slot of `version`.
    pub backend_packets: Vec<u64>,
    pub backend_bytes: Vec<u64>,
    pub backend_new_flows: Vec<u64>,
    /// Flows in the connection table per backend slot of `version` (active, inactive).
    pub backend_flows: Vec<(u32, u32)>,
    pub conntrack_len: usize,
    pub conntrack_capacity: usize,
    /// The connection table's counters.
    pub conntrack: lb::conntrack::ConnStats,
    /// Entries per timeout class ([`lb::FlowState::class`]).
    pub conntrack_fill: [usize; lb::conntrack::CLASSES],
    /// FullNAT local ports its flows hold ([`lb::conntrack::ConnTable::snat_ports`]).
    pub snat_ports: usize,
    /// Counters of earlier versions.
    pub retired_vips: HashMap<String, VipTotals>,
    pub retired_backends: HashMap<BackendId, BackendTotals>,
}

impl std::ops::AddAssign for VipTotals {
    fn add_assign(&mut self, o: VipTotals) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.new_flows += o.new_flows;
        for (a, b) in self.quic.iter_mut().zip(o.quic) {
            *a += b;
        }
    }
}

impl std::ops::AddAssign for BackendTotals {
    fn add_assign(&mut self, o: BackendTotals) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.new_flows += o.new_flows;
    }
}

/// Per-slot counters of one table version, borrowed from a worker's state or snapshot.
pub(super) struct SlotCounters<'a> {
    pub(super) vip_packets: &'a [u64],
    pub(super) vip_bytes: &'a [u64],
    pub(super) vip_new_flows: &'a [u64],
    pub(super) vip_quic: &'a [[u64; lb::quic::COUNTERS]],
    pub(super) backend_packets: &'a [u64],
    pub(super) backend_bytes: &'a [u64],
    pub(super) backend_new_flows: &'a [u64],
}

impl SlotCounters<'_> {
    /// Adds these counters of version `t` to totals keyed by VIP name and backend identity.
    pub(super) fn fold_into(
        &self,
        t: &Tables,
        vips: &mut HashMap<String, VipTotals>,
        backends: &mut HashMap<BackendId, BackendTotals>,
    ) {
        let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
        for (i, v) in t.vips.iter().enumerate() {
            *vips.entry(v.name.clone()).or_default() += VipTotals {
                packets: at(self.vip_packets, i),
                bytes: at(self.vip_bytes, i),
                new_flows: at(self.vip_new_flows, i),
                quic: self.vip_quic.get(i).copied().unwrap_or_default(),
            };
        }
        for i in 0..t.backends.len() {
            let Some(id) = BackendId::of_slot(t, i) else {
                continue;
            };
            *backends.entry(id).or_default() += BackendTotals {
                packets: at(self.backend_packets, i),
                bytes: at(self.backend_bytes, i),
                new_flows: at(self.backend_new_flows, i),
            };
        }
    }
}

impl CounterSnapshot {
    /// Totals per VIP name and per backend: retired versions plus the running one.
    pub fn totals(
        &self,
    ) -> (
        HashMap<String, VipTotals>,
        HashMap<BackendId, BackendTotals>,
    ) {
        let (mut vips, mut backends) = (self.retired_vips.clone(), self.retired_backends.clone());
        if let Some(t) = &self.tables {
            SlotCounters {
                vip_packets: &self.vip_packets,
                vip_bytes: &self.vip_bytes,
                vip_new_flows: &self.vip_new_flows,
                vip_quic: &self.vip_quic,
                backend_packets: &self.backend_packets,
                backend_bytes: &self.backend_bytes,
                backend_new_flows: &self.backend_new_flows,
            }
            .fold_into(t, &mut vips, &mut backends);
        }
        (vips, backends)
    }
}
