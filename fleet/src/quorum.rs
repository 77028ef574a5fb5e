//! Fleet-consistent health: one verdict per backend from every live member's probe results,
//! so every member builds its tables from the same health. A backend is up when at least
//! `need` of the live members that have a verdict on it see it up, where `need` is the
//! configured quorum capped at the number of such members (so a fleet that lost members
//! still decides), or, when no quorum is configured, half of them rounded up: a backend goes
//! down only when a strict majority sees it down, so with two members one member's failing
//! probes do not take it down for both (a tie keeps it up). A member whose own verdict
//! differs from the fleet's is a disagreement: its path to that backend is suspect, and the
//! backend is not flipped for everyone because of it.

use std::collections::BTreeMap;

use crate::doc::HealthReport;

/// The fleet's verdict on one backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub up: bool,
    /// Live members that see it up, and down.
    pub up_votes: usize,
    pub down_votes: usize,
    /// Members whose own verdict is not the fleet's.
    pub dissent: Vec<String>,
}

/// The verdict on every backend any live member reports; `quorum` as configured.
pub fn decide(
    live: &BTreeMap<&str, &HealthReport>,
    quorum: Option<usize>,
) -> BTreeMap<String, Verdict> {
    let mut votes: BTreeMap<&str, Vec<(&str, bool)>> = BTreeMap::new();
    for (member, report) in live {
        for (backend, up) in &report.backends {
            votes.entry(backend).or_default().push((member, *up));
        }
    }
    votes
        .into_iter()
        .map(|(backend, v)| {
            let voters = v.len();
            let up_votes = v.iter().filter(|(_, up)| *up).count();
            let need = quorum.unwrap_or(voters.div_ceil(2)).clamp(1, voters.max(1));
            let up = up_votes >= need;
            let dissent = v
                .iter()
                .filter(|(_, u)| *u != up)
                .map(|(m, _)| m.to_string())
                .collect();
            (
                backend.to_string(),
                Verdict {
                    up,
                    up_votes,
                    down_votes: voters - up_votes,
                    dissent,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reports(rows: &[(&str, bool)]) -> BTreeMap<String, HealthReport> {
        rows.iter()
            .map(|(m, up)| {
                let mut r = HealthReport::default();
                r.backends.insert("web/10.1.0.11:8080".into(), *up);
                (m.to_string(), r)
            })
            .collect()
    }

    fn verdict(rows: &[(&str, bool)], quorum: Option<usize>) -> Verdict {
        let r = reports(rows);
        let live = r.iter().map(|(m, r)| (m.as_str(), r)).collect();
        decide(&live, quorum).remove("web/10.1.0.11:8080").unwrap()
    }

    #[test]
    fn one_member_that_cannot_reach_a_backend_is_a_disagreement_not_a_flip() {
        let v = verdict(&[("lb1", true), ("lb2", true), ("lb3", false)], None);
        assert!(v.up);
        assert_eq!((v.up_votes, v.down_votes), (2, 1));
        assert_eq!(v.dissent, vec!["lb3".to_string()]);
    }

    #[test]
    fn a_backend_no_member_reaches_is_down_everywhere() {
        let v = verdict(&[("lb1", false), ("lb2", false), ("lb3", false)], None);
        assert!(!v.up);
        assert!(v.dissent.is_empty());
    }

    #[test]
    fn a_configured_quorum_is_capped_by_the_members_left() {
        // quorum 3 of 3: one dissenter takes the backend down.
        assert!(!verdict(&[("lb1", true), ("lb2", true), ("lb3", false)], Some(3)).up);
        // quorum 2, but one member left: its verdict decides.
        assert!(verdict(&[("lb1", true)], Some(2)).up);
        // a quorum of 1: any member that reaches it keeps it up.
        assert!(verdict(&[("lb1", false), ("lb2", true)], Some(1)).up);
    }

    #[test]
    fn one_of_two_members_cannot_take_a_backend_down_for_both() {
        // Two members: the one whose probes fail is the disagreement, as with three.
        let v = verdict(&[("lb1", true), ("lb2", false)], None);
        assert!(v.up);
        assert_eq!(v.dissent, vec!["lb2".to_string()]);
        // Both see it down: down.
        assert!(!verdict(&[("lb1", false), ("lb2", false)], None).up);
        // Four members split two and two: no majority sees it down, it stays up; three of
        // four down take it down.
        let four = |downs: usize| {
            let rows: Vec<(&str, bool)> = ["lb1", "lb2", "lb3", "lb4"]
                .iter()
                .enumerate()
                .map(|(i, m)| (*m, i >= downs))
                .collect();
            verdict(&rows, None).up
        };
        assert!(four(1) && four(2));
        assert!(!four(3));
        // One member alone decides by its own verdict.
        assert!(!verdict(&[("lb1", false)], None).up);
        assert!(verdict(&[("lb1", true)], None).up);
    }
}
