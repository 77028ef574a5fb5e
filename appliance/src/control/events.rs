//! The event ring: the last [`CAPACITY`] things that happened to the appliance (health
//! transitions, BGP session changes, config commits, operator actions, drop spikes), kept
//! for the API and the console. Every event is also logged through `tracing`, so the ring is
//! a convenience for operators, not the record.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

/// Events kept; older ones fall off.
pub const CAPACITY: usize = 1024;

/// What kind of thing happened; the API's `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Health,
    Bgp,
    Commit,
    Operator,
    Reload,
    Drops,
    Flood,
    Takeover,
    Datapath,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Health => "health",
            Kind::Bgp => "bgp",
            Kind::Commit => "commit",
            Kind::Operator => "operator",
            Kind::Reload => "reload",
            Kind::Drops => "drops",
            Kind::Flood => "flood",
            Kind::Takeover => "takeover",
            Kind::Datapath => "datapath",
        }
    }
}

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Increases by one per event, from 1.
    pub seq: u64,
    /// Unix time, milliseconds.
    pub time_ms: u64,
    pub kind: Kind,
    pub message: String,
}

impl Event {
    /// The API's document of it.
    pub fn document(&self) -> api::Event {
        api::Event {
            seq: self.seq,
            time_ms: self.time_ms,
            kind: self.kind.name().to_string(),
            message: self.message.clone(),
        }
    }
}

/// A bounded, sequence-numbered ring of events.
#[derive(Debug, Default)]
pub struct EventRing {
    next_seq: u64,
    events: VecDeque<Event>,
}

impl EventRing {
    /// Records an event and logs it.
    pub fn push(&mut self, kind: Kind, message: impl Into<String>) {
        let message = message.into();
        tracing::info!(kind = kind.name(), "event: {message}");
        self.next_seq += 1;
        if self.events.len() == CAPACITY {
            self.events.pop_front();
        }
        let time_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        self.events.push_back(Event {
            seq: self.next_seq,
            time_ms,
            kind,
            message,
        });
    }

    /// Events with `seq > since`, oldest first.
    pub fn since(&self, since: u64) -> Vec<Event> {
        self.events
            .iter()
            .filter(|e| e.seq > since)
            .cloned()
            .collect()
    }

    /// Events recorded so far (including those that fell off).
    pub fn total(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_bounded_and_numbered() {
        let mut r = EventRing::default();
        for i in 0..CAPACITY + 10 {
            r.push(Kind::Commit, format!("commit {i}"));
        }
        let all = r.since(0);
        assert_eq!(all.len(), CAPACITY);
        assert_eq!(all[0].seq, 11, "the ten oldest fell off");
        assert_eq!(all.last().map(|e| e.seq), Some((CAPACITY + 10) as u64));
        assert_eq!(r.since((CAPACITY + 8) as u64).len(), 2);
        assert_eq!(r.total(), (CAPACITY + 10) as u64);
        assert_eq!(all[0].kind, Kind::Commit);
        assert_eq!(all[0].document().kind, "commit");
    }
}
