//! A VIP's quorum and what serves without it, as keepalived's `quorum`, `hysteresis` and
//! `sorry_server` (check/ipwrapper.c, `update_quorum_state`): the VIP has its quorum while
//! its primary backends that may take new flows weigh `quorum` or more in all. It is gained
//! at `quorum + hysteresis` and lost below `quorum - hysteresis` (or when no primary is up),
//! so a pool hovering at the quorum does not flap; a first build has it at `quorum +
//! hysteresis`, as keepalived starts. Without it, `on_quorum_lost` decides: the sorry
//! backends take the new flows in the primaries' place (keepalived swaps the sorry server
//! in), the VIP is withdrawn from BGP, or the primaries still up go on serving. Flows already
//! running stay where they are either way: a primary set aside or a sorry backend no longer
//! needed keeps its flows and takes no new ones, as a drained backend does.
//!
//! Pure: the state before is the running version's, handed in by the caller.

use std::ops::Range;

use config::{Fallback, QuorumLost, Vip};

use crate::tables::Core;

/// Where a VIP stands with its quorum in one table version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuorumState {
    /// The VIP has its quorum (a VIP that never sets one has it while a primary is up).
    pub up: bool,
    /// New flows go to the sorry backends now.
    pub sorry: bool,
    /// The VIP is to be withdrawn from BGP now (`on_quorum_lost = "withdraw"`).
    pub withdraw: bool,
}

/// Whether the quorum holds with primaries weighing `up_weight` in all, given whether it
/// held in the version before (`None`: a first build).
pub fn quorum_up(f: &Fallback, up_weight: u64, before: Option<bool>) -> bool {
    let (q, h) = (u64::from(f.quorum), u64::from(f.hysteresis));
    match before {
        Some(true) => up_weight > 0 && up_weight + h >= q,
        Some(false) | None => up_weight >= q + h,
    }
}

impl Core {
    /// Settles the quorum of VIP `v` over its backend slots `range`, whose eligibility has
    /// just been set from health, state and weight alone: sorry backends are set aside
    /// while the quorum holds; without it they take the primaries' place, if one of them
    /// can. Returns the VIP's state for this version.
    pub(crate) fn apply_fallback(
        &mut self,
        v: &Vip,
        range: Range<u32>,
        before: Option<bool>,
    ) -> QuorumState {
        let slots = range.start as usize..range.end as usize;
        let has_sorry = slots.clone().any(|s| self.backends[s].sorry);
        if !has_sorry && v.fallback == Fallback::default() {
            return QuorumState {
                up: slots.clone().any(|s| self.eligible[s]),
                ..QuorumState::default()
            };
        }
        let up_weight: u64 = slots
            .clone()
            .filter(|&s| !self.backends[s].sorry && self.eligible[s])
            .map(|s| u64::from(self.weights[s]))
            .sum();
        let up = quorum_up(&v.fallback, up_weight, before);
        let sorry_ready = slots
            .clone()
            .any(|s| self.backends[s].sorry && self.eligible[s]);
        let sorry = !up && v.fallback.on_lost == QuorumLost::Sorry && sorry_ready;
        for s in slots {
            if self.backends[s].sorry != sorry {
                self.eligible[s] = false;
            }
        }
        QuorumState {
            up,
            sorry,
            withdraw: !up && v.fallback.on_lost == QuorumLost::Withdraw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::Tables;
    use config::Mode;
    use testkit::unit::{backend, vip, with_vips as config};

    fn keepalived(quorum: u32, hysteresis: u32) -> Fallback {
        Fallback {
            quorum,
            hysteresis,
            on_lost: QuorumLost::Sorry,
        }
    }

    #[test]
    fn quorum_with_hysteresis_as_keepalived_counts_it() {
        // keepalived.conf.quorum: quorum 7, hysteresis 2, ten servers of weight 1.
        let f = keepalived(7, 2);
        assert!(!quorum_up(&f, 8, None), "starts needing 9");
        assert!(quorum_up(&f, 9, None));
        assert!(quorum_up(&f, 5, Some(true)), "kept down to 5");
        assert!(!quorum_up(&f, 4, Some(true)), "lost below 5");
        assert!(!quorum_up(&f, 8, Some(false)), "regained only at 9");
        assert!(quorum_up(&f, 9, Some(false)));
        let any = Fallback::default();
        assert!(quorum_up(&any, 1, None) && !quorum_up(&any, 0, Some(true)));
    }

    #[test]
    fn sorry_backends_serve_only_without_the_quorum() {
        let mut v = vip(
            "web",
            "192.0.2.10",
            80,
            Mode::Nat,
            vec![
                backend("10.0.0.1", 80, 1),
                backend("10.0.0.2", 80, 1),
                backend("10.0.0.9", 80, 1),
            ],
        );
        v.backends[2].sorry = true;
        v.fallback = keepalived(2, 0);
        let c = config(vec![v]);
        let all = Tables::build(&c, &|_, _| true, 1).expect("tables");
        assert_eq!(all.eligible, [true, true, false]);
        assert_eq!(
            all.vips[0].quorum,
            QuorumState {
                up: true,
                ..QuorumState::default()
            }
        );
        assert_eq!(all.vips[0].ring.counts(3)[2], 0, "the sorry backend is out");
        let one = |_: &Vip, b: &config::Backend| b.address.to_string() != "10.0.0.2";
        let lost = Tables::build_from(&c, &one, 2, Some(&all), &crate::Serial).expect("t");
        assert_eq!(
            lost.eligible,
            [false, false, true],
            "the sorry backend alone"
        );
        assert!(lost.vips[0].quorum.sorry && !lost.vips[0].quorum.up);
        assert!(lost.backends[0].keeps_flows(), "set aside, flows kept");
        // A sorry backend that is down itself: the primaries still up go on.
        let sorry_down = |_: &Vip, b: &config::Backend| {
            !matches!(b.address.to_string().as_str(), "10.0.0.2" | "10.0.0.9")
        };
        let t = Tables::build_from(&c, &sorry_down, 3, Some(&lost), &crate::Serial).expect("t");
        assert_eq!(t.eligible, [true, false, false]);
        assert!(!t.vips[0].quorum.sorry);
        // Back: the health version sees the quorum regained and sets the sorry one aside.
        let back = lost
            .with_health(&c, &|_, _| true, &[0], 4, &crate::Serial)
            .expect("same config")
            .expect("built");
        assert_eq!(back.eligible, [true, true, false]);
        assert!(back.vips[0].quorum.up && !back.vips[0].quorum.sorry);
    }

    #[test]
    fn withdraw_and_serve_keep_the_primaries() {
        let mut v = vip(
            "web",
            "192.0.2.10",
            80,
            Mode::Dr,
            vec![backend("10.0.0.1", 80, 1), backend("10.0.0.2", 80, 1)],
        );
        v.fallback = Fallback {
            quorum: 2,
            hysteresis: 0,
            on_lost: QuorumLost::Withdraw,
        };
        let c = config(vec![v]);
        let one = |_: &Vip, b: &config::Backend| b.address.to_string() != "10.0.0.2";
        let t = Tables::build(&c, &one, 1).expect("tables");
        assert_eq!(t.eligible, [true, false]);
        assert!(t.vips[0].quorum.withdraw && !t.vips[0].quorum.up);
    }
}
