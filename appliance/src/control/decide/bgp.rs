//! The BGP decision: which VIP addresses the speaker announces now, as a function of the
//! running state, the tables and the prober's status ([`announcements`]), and the effect
//! that brings the speaker in line ([`sync_bgp`]).

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use super::out::Out;
use crate::config::{self, Vip};
use crate::control::announce::{self, Wanted};
use crate::control::effect::Effect;
use crate::control::events::Kind;
use crate::control::input::Now;
use crate::control::prepare;
use crate::control::state::State;
use crate::lb::BackendId;

/// Brings the BGP announcements in line with the running tables (see [`announcements`]);
/// nothing without a speaker.
pub(super) fn sync_bgp(st: &State, now: &Now, out: &mut Out) {
    if !st.speaker {
        return;
    }
    let settling = now.at < st.settle_by;
    let undecided = prepare::undecided(&now.probes, &st.targets, &st.health, settling);
    let (wanted, initial_done) = announcements(st, &undecided, settling);
    out.push(Effect::Announce {
        wanted,
        initial_done,
    });
}

/// Connection sync caught up: the VIPs may be announced now.
pub(super) fn sync_caught_up(st: &mut State, now: &Now, out: &mut Out) {
    if !st.sync_hold {
        return;
    }
    st.sync_hold = false;
    out.event(
        Kind::Bgp,
        "sync: caught up with the peers' flows; announcing".to_string(),
    );
    sync_bgp(st, now, out);
}

/// The BGP decision for the running tables: a VIP is wanted once the tables can serve it
/// and its health checks have decided (`undecided` holds the pairs still waiting while
/// `settling`), and not while an operator withdrew it. Also whether every VIP has settled,
/// which ends the speaker's initial wait.
pub fn announcements(
    st: &State,
    undecided: &HashSet<&BackendId>,
    settling: bool,
) -> (BTreeMap<IpAddr, Wanted>, bool) {
    let tables = &st.tables;
    // Once settled nothing is undecided: no backend identity to make per VIP.
    let settled = |v: &Vip| {
        undecided.is_empty()
            || v.backends.iter().all(|b| {
                b.state == config::BackendState::Disabled
                    || !undecided.contains(&BackendId::of(v, b))
            })
    };
    let mut wanted = announce::wanted(&st.config, tables, &settled);
    if st.fleet_hold || st.sync_hold || !st.datapath_faults.is_empty() {
        // A fleet member that came back behind the fleet catches up before it announces;
        // so does an appliance that does not have its peers' flows yet (`crate::sync`); a
        // datapath that does not forward on every interface attracts nothing.
        wanted.clear();
    }
    let all_settled = !settling || st.config.vips.iter().all(settled);
    // An address stays wanted only while a VIP on it that no operator withdrew can serve.
    let serving: HashSet<IpAddr> = st
        .config
        .vips
        .iter()
        .enumerate()
        .filter(|(slot, v)| {
            !st.withdrawn.contains(&v.name)
                && tables
                    .vips
                    .get(*slot)
                    .is_some_and(|e| e.backends.clone().any(|b| tables.eligible[b as usize]))
        })
        .map(|(_, v)| v.address)
        .collect();
    wanted.retain(|addr, _| serving.contains(addr));
    let snat = announce::snat_routes(&st.config, &wanted);
    wanted.extend(snat);
    (wanted, all_settled)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::net::IpAddr;

    use super::*;
    use crate::control::decide::tests::state;

    use crate::control::decide::tests::ONE_BACKEND as CFG;

    #[test]
    fn a_vip_is_wanted_while_it_can_serve_and_no_operator_withdrew_it() {
        let mut st = state(CFG);
        let vip: IpAddr = "192.0.2.10".parse().expect("literal");
        let (wanted, settled) = announcements(&st, &HashSet::new(), false);
        assert!(wanted.contains_key(&vip));
        assert!(settled);
        st.withdrawn.insert("web".into());
        let (wanted, _) = announcements(&st, &HashSet::new(), false);
        assert!(wanted.is_empty(), "withdrawn by the operator");
    }

    const FULLNAT: &str = r#"
[appliance]
name = "lb2"
interfaces = ["eth0"]

[bgp]
asn = 65001
router_id = "192.0.2.2"
[[bgp.peer]]
address = "192.0.2.254"
asn = 65000

[[vip]]
name = "full"
address = "192.0.2.10"
port = 80
mode = "fullnat"
snat = ["10.0.100.1", "10.0.100.2"]
[[vip.backend]]
address = "10.1.0.11"
port = 8080

[sync]
listen = "192.0.2.2:7946"
peers = ["192.0.2.1:7946"]
key_file = "/etc/sluice/sync.key"
snat = ["10.0.100.2"]
"#;

    #[test]
    fn the_snat_pool_is_announced_with_the_owner_preferred_while_its_vip_is() {
        let mut st = state(FULLNAT);
        st.sync_hold = false; // caught up
        let ip = |s: &str| s.parse::<IpAddr>().expect("literal");
        let (wanted, _) = announcements(&st, &HashSet::new(), false);
        let mine = &wanted[&ip("10.0.100.2")];
        assert_eq!(mine.role, config::Role::Active, "this appliance's address");
        assert_eq!(mine.attrs, wanted[&ip("192.0.2.10")].attrs, "as the VIP's");
        let theirs = &wanted[&ip("10.0.100.1")];
        assert_eq!(theirs.role, config::Role::Standby, "a peer's address");
        assert_eq!(
            theirs.attrs.as_path_prepend, 3,
            "[bgp.standby]'s worse path"
        );
        assert_eq!(wanted.len(), 3);

        st.sync_hold = true;
        let (wanted, _) = announcements(&st, &HashSet::new(), false);
        assert!(wanted.is_empty(), "not before the catch-up: {wanted:?}");
        st.sync_hold = false;
        st.withdrawn.insert("full".into());
        let (wanted, _) = announcements(&st, &HashSet::new(), false);
        assert!(wanted.is_empty(), "nor for a VIP withdrawn: {wanted:?}");

        // Without [sync] snat nothing but the VIP: the operator routes the pool.
        let plain = FULLNAT.replace("snat = [\"10.0.100.2\"]\n", "");
        let mut st = state(&plain);
        st.sync_hold = false;
        let (wanted, _) = announcements(&st, &HashSet::new(), false);
        assert_eq!(wanted.keys().collect::<Vec<_>>(), vec![&ip("192.0.2.10")]);
    }

    #[test]
    fn the_initial_wait_lasts_while_a_backend_is_undecided() {
        let st = state(CFG);
        let id = BackendId::new("web", "10.1.0.11".parse().expect("literal"), 8080);
        let undecided = HashSet::from([&id]);
        let (_, settled) = announcements(&st, &undecided, true);
        assert!(!settled, "settling, one backend undecided");
        let (_, settled) = announcements(&st, &undecided, false);
        assert!(settled, "past the settle time");
    }
}
