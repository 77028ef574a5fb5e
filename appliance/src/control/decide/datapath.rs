//! The datapath watch's reports (`datapath/watch.rs`): each thing it did or saw becomes an
//! event, a log line and a counter; while any datapath interface does not forward, no VIP
//! is announced (the appliance would attract traffic it cannot forward), and once every
//! interface forwards again the VIPs are announced as before.

use tracing::{info, warn};

use super::bgp::sync_bgp;
use super::out::Out;
use crate::control::effect::{Counter, Effect};
use crate::control::events::Kind;
use crate::control::input::Now;
use crate::control::state::State;
use crate::datapath::{DatapathStats, WatchReport};

/// What the watch (or an operator's reclaim) reported.
pub(super) fn seen(
    st: &mut State,
    now: &Now,
    out: &mut Out,
    report: WatchReport,
    stats: Option<DatapathStats>,
) {
    for e in &report.events {
        let m = e.message();
        if e.is_fault() {
            warn!("{m}");
        } else {
            info!("{m}");
        }
        out.event(Kind::Datapath, m);
        out.count(Counter::DatapathWatch(e.name()));
    }
    let faults = report.faults();
    if faults != st.datapath_faults {
        let was_down = !st.datapath_faults.is_empty();
        st.datapath_faults = faults;
        match (was_down, st.datapath_faults.is_empty()) {
            (false, false) => {
                let m = format!(
                    "datapath not forwarding ({}): every VIP withdrawn until it is back",
                    st.datapath_faults.join("; ")
                );
                warn!("{m}");
                out.event(Kind::Datapath, m);
            }
            (true, true) => {
                let m = "datapath forwarding on every interface again: VIPs announced again";
                info!("{m}");
                out.event(Kind::Datapath, m);
            }
            _ => {}
        }
        sync_bgp(st, now, out);
    }
    out.push(Effect::View {
        datapath: stats.map(Box::new),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::input::Input;
    use crate::datapath::{AttachMode, LinkState, WatchEvent};

    use crate::control::decide::tests::ONE_BACKEND as CFG;

    fn report(state: LinkState) -> WatchReport {
        WatchReport {
            events: vec![WatchEvent::State {
                interface: "eth0".into(),
                state: state.clone(),
            }],
            interfaces: vec![("eth0".into(), state)],
        }
    }

    /// The addresses the `Announce` effect among `effects` wants, if there is one.
    fn announced(effects: &[Effect]) -> Option<Vec<String>> {
        effects.iter().find_map(|e| match e {
            Effect::Announce { wanted, .. } => Some(wanted.keys().map(|a| a.to_string()).collect()),
            _ => None,
        })
    }

    fn counted(effects: &[Effect], what: &str) -> bool {
        effects
            .iter()
            .any(|e| matches!(e, Effect::Count(Counter::DatapathWatch(w)) if *w == what))
    }

    #[test]
    fn a_foreign_program_withdraws_every_vip_until_the_datapath_is_back() {
        let mut st = crate::control::decide::tests::state(CFG);
        st.speaker = true;
        let now = Now::at(st.settle_by);
        let foreign = LinkState::Foreign {
            id: 42,
            name: "xdp_pass".into(),
            mode: AttachMode::Native,
        };
        let fx = super::super::handle(
            &mut st,
            Input::Datapath {
                report: report(foreign),
                stats: None,
            },
            &now,
        );
        assert_eq!(announced(&fx), Some(vec![]), "{fx:?}");
        let said: Vec<String> = fx
            .iter()
            .filter_map(|e| match e {
                Effect::Event(Kind::Datapath, m) => Some(m.clone()),
                _ => None,
            })
            .collect();
        assert!(
            said.iter().any(|m| m.contains("id 42 (xdp_pass)")),
            "{said:?}"
        );
        assert!(counted(&fx, "foreign"), "{fx:?}");
        // The tick keeps it withdrawn.
        let tick = Input::Tick(Box::new(crate::control::input::Tick {
            datapath: Err("not read in this test".into()),
            peers: Vec::new(),
            drops: 0,
            probes_not_run: 0,
            table_full: 0,
        }));
        let fx = super::super::handle(&mut st, tick, &now);
        assert_eq!(announced(&fx), Some(vec![]), "{fx:?}");
        // Back: announced again.
        let fx = super::super::handle(
            &mut st,
            Input::Datapath {
                report: report(LinkState::Forwarding),
                stats: None,
            },
            &now,
        );
        assert_eq!(
            announced(&fx),
            Some(vec!["192.0.2.10".to_string()]),
            "{fx:?}"
        );
    }

    #[test]
    fn a_repair_that_keeps_forwarding_is_told_but_withdraws_nothing() {
        let mut st = crate::control::decide::tests::state(CFG);
        st.speaker = true;
        let now = Now::at(st.settle_by);
        let r = WatchReport {
            events: vec![WatchEvent::Reattached {
                interface: "eth0".into(),
                mode: AttachMode::Native,
            }],
            interfaces: vec![("eth0".into(), LinkState::Forwarding)],
        };
        let fx = super::super::handle(
            &mut st,
            Input::Datapath {
                report: r,
                stats: None,
            },
            &now,
        );
        assert_eq!(announced(&fx), None, "no BGP change: {fx:?}");
        assert!(counted(&fx, "reattached"), "{fx:?}");
    }
}
