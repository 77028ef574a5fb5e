//! Flood mode's control side: `[flood]` goes into the XDP program at start and with every
//! commit (an effect), and every tick turns the program's state into events when the mode
//! switches on or off ([`transition`]). The shedding itself is the XDP program's
//! (datapath/bpf/steer.bpf.c): it alone sees every frame before the AF_XDP rings, which a
//! flood would fill.

use crate::datapath::FloodCounters;

/// What the last tick saw of flood mode.
#[derive(Debug, Default)]
pub struct Watch {
    /// The counters when the mode last switched on (while it is on), for the totals of
    /// the episode when it ends.
    since: Option<FloodCounters>,
}

impl Watch {
    /// Whether the mode was on at the last tick.
    pub fn on(&self) -> bool {
        self.since.is_some()
    }
}

/// The API's document of the counters.
pub fn document(f: FloodCounters) -> api::Flood {
    api::Flood {
        active_cpus: f.active_cpus,
        first_packets: f.first,
        admitted: f.admitted,
        shed: f.shed,
        switched_on: f.switched_on,
        switched_off: f.switched_off,
        no_room: f.no_room,
        refunded: f.refunded,
        stateless: f.stateless,
    }
}

/// The event text when `now` switches the mode relative to `w`, updating `w`.
pub fn transition(w: &mut Watch, now: FloodCounters) -> Option<String> {
    match (w.since, now.active_cpus) {
        (None, n) if n > 0 => {
            w.since = Some(now);
            Some(format!(
                "flood mode on ({n} CPU(s) above [flood] threshold): DR VIPs' first \
                 packets are answered in XDP from their rings, other VIPs' first packets \
                 of sources over their rate are dropped in XDP"
            ))
        }
        (Some(then), 0) => {
            w.since = None;
            Some(format!(
                "flood mode off: {} first packets answered in XDP, {} shed, {} admitted \
                 while it was on",
                now.stateless.saturating_sub(then.stateless),
                now.shed.saturating_sub(then.shed),
                now.admitted.saturating_sub(then.admitted)
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_when_the_mode_switches_on_and_one_with_the_totals_when_it_ends() {
        let mut w = Watch::default();
        let quiet = FloodCounters::default();
        assert_eq!(transition(&mut w, quiet), None);
        let on = FloodCounters {
            active_cpus: 2,
            shed: 10,
            admitted: 5,
            ..quiet
        };
        let m = transition(&mut w, on).expect("switched on");
        assert!(w.on());
        assert!(m.contains("flood mode on (2 CPU(s)"), "{m}");
        let still = FloodCounters {
            active_cpus: 1,
            shed: 500,
            ..on
        };
        assert_eq!(transition(&mut w, still), None, "still on: no event");
        let off = FloodCounters {
            active_cpus: 0,
            shed: 1010,
            admitted: 25,
            ..on
        };
        let m = transition(&mut w, off).expect("switched off");
        assert_eq!(
            m,
            "flood mode off: 0 first packets answered in XDP, 1000 shed, 20 admitted while \
             it was on"
        );
        assert!(!w.on());
        assert_eq!(transition(&mut w, off), None);
    }
}
