//! What connection sync tells the peers about a table: the flows that became established
//! (embryonic ones are not worth a record: half of them are scans and floods), the ones it
//! took in established (a peer's it took over: it is their owner now, and a peer that
//! rejoins learns them in its catch-up), and the established ones that ended. The table notes their keys as it goes ([`News`]); the
//! worker drains them now and then ([`ConnTable::drain_news`]) and sends each established
//! flow as it stands then. Bounded: a burst beyond [`NEWS_MAX`] keys between two drains is
//! counted and left out (those flows are not synced; a peer that takes over their frames
//! schedules them afresh).

use super::{ConnTable, FlowRecord};
use crate::hash::FlowKey;

/// Keys kept between two drains, each way.
pub const NEWS_MAX: usize = 1 << 16;

/// Keys of flows established and ended since the last drain.
#[derive(Debug, Clone, Default)]
pub(super) struct News {
    pub(super) established: Vec<FlowKey>,
    pub(super) ended: Vec<FlowKey>,
    /// Keys left out because a list was full.
    pub(super) lost: u64,
}

impl News {
    pub(super) fn note(list: &mut Vec<FlowKey>, lost: &mut u64, k: FlowKey) {
        if list.len() < NEWS_MAX {
            list.push(k);
        } else {
            *lost += 1;
        }
    }
}

impl ConnTable {
    /// Turns the notes for connection sync on or off.
    pub fn note_news(&mut self, on: bool) {
        self.news = on.then(News::default);
    }

    /// Hands every flow established since the last call (as a record at `now`, if it is
    /// still live) to `established`, every key of an established flow removed since to
    /// `ended`; returns the keys left out since the last call because too many came.
    pub fn drain_news(
        &mut self,
        now: u64,
        mut established: impl FnMut(FlowRecord),
        mut ended: impl FnMut(&FlowKey),
    ) -> u64 {
        let Some(n) = &mut self.news else {
            return 0;
        };
        let est = std::mem::take(&mut n.established);
        let lost = std::mem::take(&mut n.lost);
        // A lookup may expire a flow: its key joins `ended` before that is drained.
        for k in &est {
            if let Some(id) = self.lookup(k, now) {
                established(FlowRecord::of(self.flow(id), now));
            }
        }
        if let Some(n) = &mut self.news {
            for k in n.ended.drain(..) {
                ended(&k);
            }
            // The allocation goes back for the next round.
            n.established = est;
            n.established.clear();
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use crate::conntrack::{Carry, Evidence, Flow, FlowState, Track};
    use crate::conntrack::{ConnTable, Seen};
    use crate::hash::FlowKey;
    use config::Timeouts;

    fn flow(port: u16) -> Flow {
        let key = FlowKey {
            src: 0xffff_0a00_0001,
            dst: 0xffff_c000_020a,
            sport: port,
            dport: 80,
            proto: 17,
            v6: false,
            zone: 0,
        };
        Flow {
            key,
            vip: 0,
            backend: 0,
            backend_addr: 0xffff_0a01_000b,
            backend_port: 80,
            version: 1,
            state: FlowState::UdpNew,
            evidence: Evidence::default(),
            last_seen: 0,
            hash: 0,
            snat: None,
            reverse: true,
            carry: Carry::default(),
            track: Track::default(),
        }
    }

    fn reply() -> Seen {
        Seen {
            reverse: true,
            both_ways: true,
            payload: true,
            seq: 0,
            ack: 0,
            len: 0,
            closes: false,
        }
    }

    #[test]
    fn established_and_ended_flows_are_news() {
        let mut ct = ConnTable::new(16, Timeouts::default(), 1, 0, 1);
        ct.note_news(true);
        let a = ct.insert(flow(1), 10).unwrap();
        let _b = ct.insert(flow(2), 10).unwrap();
        ct.step(a, 20, 0, reply());
        assert_eq!(ct.flow(a).state, FlowState::Udp);
        let (mut est, mut end) = (Vec::new(), Vec::new());
        ct.drain_news(30, |r| est.push(r), |k| end.push(*k));
        assert_eq!(est.len(), 1, "only the flow that became established");
        assert_eq!(est[0].key.sport, 1);
        assert_eq!(est[0].age_ns, 10);
        assert!(end.is_empty());
        ct.remove(a);
        let b = ct.lookup(&flow(2).key, 31).unwrap();
        ct.remove(b);
        est.clear();
        ct.drain_news(40, |r| est.push(r), |k| end.push(*k));
        assert!(est.is_empty());
        assert_eq!(end.len(), 1, "the embryonic flow was never news");
        assert_eq!(end[0].sport, 1);
    }

    #[test]
    fn off_by_default() {
        let mut ct = ConnTable::new(16, Timeouts::default(), 1, 0, 1);
        let a = ct.insert(flow(1), 10).unwrap();
        ct.step(a, 20, 0, reply());
        let (mut e, mut n) = (0, 0);
        ct.drain_news(30, |_| e += 1, |_| n += 1);
        assert_eq!((e, n), (0, 0));
    }
}
