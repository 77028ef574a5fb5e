//! Taking in a poll round: the new documents replace the old, the previous samples turn
//! into rates, backend traffic into sparkline history, and new events join the list.

use std::collections::HashMap;
use std::time::Instant;

use api::Backend;

use super::{App, Conn, EVENTS_KEPT, Effect, HISTORY, Snapshot, StatusLine, Tab};
use crate::rates::{BackendRates, Counters, TotalRates, VipRates};

impl App {
    /// A poll round ended at `at`: the connection's state, then the data.
    pub(super) fn on_polled(
        &mut self,
        at: Instant,
        result: Result<Box<Snapshot>, String>,
    ) -> Vec<Effect> {
        self.polling = false;
        match result {
            Ok(snap) => {
                if matches!(self.conn, Conn::Down { .. }) {
                    self.status_line = Some(StatusLine::info(format!(
                        "reconnected to {}",
                        self.endpoint
                    )));
                }
                self.conn = Conn::Up;
                let wanted = self.selected_vip.clone();
                let got = snap.backends.as_ref().map(|(v, _)| v.clone());
                self.apply_snapshot(at, *snap);
                // The selection moved while the poll was out: fetch the right backends
                // now rather than a refresh later.
                if self.tab == Tab::Backends && wanted.is_some() && got != wanted {
                    return self.poll();
                }
                Vec::new()
            }
            Err(error) => {
                self.conn = Conn::Down { error };
                Vec::new()
            }
        }
    }

    fn apply_snapshot(&mut self, at: Instant, snap: Snapshot) {
        // A smaller uptime: the appliance restarted, so its counters and event numbers did too.
        if let Some(old) = &self.status
            && snap.status.uptime_seconds < old.uptime_seconds
        {
            self.events.clear();
            self.last_seq = 0;
            self.event_sel = 0;
            self.prev_totals = None;
            self.prev_vips.clear();
            self.prev_backends.clear();
        }

        let totals = Counters::totals(&snap.status.totals);
        self.total_rates = TotalRates::from_samples(self.prev_totals.as_ref(), (at, &totals));
        self.prev_totals = Some((at, totals));
        self.status = Some(snap.status);

        let mut rates = HashMap::new();
        let mut prev = HashMap::new();
        for v in &snap.vips {
            let c = Counters::vip(v);
            rates.insert(
                v.name.clone(),
                VipRates::from_samples(self.prev_vips.get(&v.name), (at, &c)),
            );
            prev.insert(v.name.clone(), (at, c));
        }
        self.vip_rates = rates;
        self.prev_vips = prev;
        self.vips = snap.vips;
        if self.selected_vip().is_none() {
            self.selected_vip = self.visible_vips().first().map(|v| v.name.clone());
        }

        if let Some((vip, backends)) = snap.backends {
            self.apply_backends(at, vip, backends);
        }

        self.peer_sel = self.peer_sel.min(snap.bgp.peers.len().saturating_sub(1));
        self.bgp = Some(snap.bgp);
        self.fleet = snap.fleet;

        for e in snap.events {
            if e.seq > self.last_seq {
                self.last_seq = e.seq;
                self.events.push_back(e);
            }
        }
        while self.events.len() > EVENTS_KEPT {
            self.events.pop_front();
        }
        self.event_sel = self.event_sel.min(self.events.len().saturating_sub(1));
    }

    /// The backends of `vip`: rates from the previous sample, one more history point each.
    fn apply_backends(&mut self, at: Instant, vip: String, backends: Vec<Backend>) {
        if self.backends_vip.as_ref() != Some(&vip) {
            self.history.clear();
            self.prev_backends.clear();
            self.backend_sel = 0;
        }
        let mut rates = HashMap::new();
        let mut prev = HashMap::new();
        for b in &backends {
            let c = Counters::backend(b);
            let r = BackendRates::from_samples(self.prev_backends.get(&b.id), (at, &c));
            if let Some(pps) = r.pps {
                let h = self.history.entry(b.id.clone()).or_default();
                h.push_back(pps.round() as u64);
                while h.len() > HISTORY {
                    h.pop_front();
                }
            }
            rates.insert(b.id.clone(), r);
            prev.insert(b.id.clone(), (at, c));
        }
        self.history.retain(|id, _| prev.contains_key(id));
        self.backend_rates = rates;
        self.prev_backends = prev;
        self.backends = backends;
        self.backends_vip = Some(vip);
        self.backend_sel = self.backend_sel.min(self.backends.len().saturating_sub(1));
    }
}
