//! Which etcd history a member follows. Revisions are the fleet's versions, and a member
//! compares them as if they only grew; that holds only within one history of the keys.
//! After etcd is restored from a snapshot, or the fleet moves to another cluster, new
//! pushes get revisions below the ones members run: members would neither prepare them nor
//! count as behind, and the fleet would split without a word. So a member remembers the
//! history it follows (the cluster's ID and the fleet's epoch key, kept with its last good
//! revision on disk) and judges each view against it and against the revision it runs:
//!
//! - the same history, not behind the revision it runs: followed;
//! - a new epoch (an operator's `sluice fleet rebase`): adopted, the member's revisions
//!   start over (it prepares and activates the keys as they are, and forwards on what it
//!   runs until then);
//! - another cluster with the same epoch, or revisions below the one it runs: refused. The
//!   member reports the config revision refused with the reason, which blocks its
//!   activation for every member (a refusal does), and keeps forwarding on what it runs.
//!   The operator checks the config in etcd and runs `sluice fleet rebase`.

use serde::{Deserialize, Serialize};

use crate::view::View;

/// The history a member follows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The etcd cluster's ID (0: not known).
    #[serde(default)]
    pub cluster: u64,
    /// The fleet's epoch id (empty: none written yet).
    #[serde(default)]
    pub epoch: String,
}

impl History {
    /// The history `view` shows.
    pub fn of(view: &View) -> History {
        History {
            cluster: view.cluster,
            epoch: view.epoch.as_ref().map_or(String::new(), |e| e.id.clone()),
        }
    }
}

/// What a member does with a view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// The history it follows: act on it.
    Follow,
    /// A history to follow from now on; `rebased` when an operator's new epoch starts the
    /// member's revisions over.
    Adopt { history: History, rebased: bool },
    /// Not its history: do not act on it; why, for the operator.
    Refuse(String),
}

/// Judges `view` for a member that follows `known` (none yet: its first view, or a
/// release before this one) and runs revision `running`.
pub fn judge(known: Option<&History>, running: u64, view: &View) -> Judged {
    let seen = History::of(view);
    let fix = "check the fleet's config in etcd, then run `sluice fleet rebase` to follow \
               etcd as it is now";
    let config = view.config.as_ref().map_or(0, |c| c.revision);
    let behind = |what: &str, r: u64| {
        Judged::Refuse(format!(
            "etcd's history went back: {what} {r} is below revision {running}, which this \
             member runs (etcd restored from a snapshot, or another cluster?); it keeps \
             forwarding on revision {running}: {fix}"
        ))
    };
    if let Some(k) = known
        && !seen.epoch.is_empty()
        && seen.epoch != k.epoch
    {
        return Judged::Adopt {
            history: seen,
            rebased: true,
        };
    }
    if let Some(k) = known
        && k.cluster != 0
        && seen.cluster != 0
        && seen.cluster != k.cluster
    {
        return Judged::Refuse(format!(
            "etcd is another cluster (ID {:x}; this member followed {:x}): etcd restored from \
             a snapshot, or the fleet moved; it keeps forwarding on revision {running}: {fix}",
            seen.cluster, k.cluster
        ));
    }
    // Within one history the store's revision and the config key's only grow, and the
    // revision a member runs was the config key's.
    if running > 0 && view.revision > 0 && view.revision < running {
        return behind("etcd's revision", view.revision);
    }
    if running > 0 && config > 0 && config < running {
        return behind("the config key's revision", config);
    }
    match known {
        Some(k) if *k == seen => Judged::Follow,
        // The first view, or the cluster's ID or epoch learnt now.
        _ => Judged::Adopt {
            history: seen,
            rebased: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::Epoch;
    use crate::view::ConfigAt;

    fn view(cluster: u64, epoch: &str, revision: u64, config: u64) -> View {
        View {
            revision,
            cluster,
            epoch: (!epoch.is_empty()).then(|| Epoch {
                id: epoch.into(),
                at_ms: 0,
            }),
            config: Some(ConfigAt {
                revision: config,
                text: String::new(),
            }),
            ..View::default()
        }
    }

    fn history(cluster: u64, epoch: &str) -> History {
        History {
            cluster,
            epoch: epoch.into(),
        }
    }

    #[test]
    fn the_same_history_is_followed_and_the_first_is_adopted() {
        let k = history(7, "e1");
        assert_eq!(judge(Some(&k), 40, &view(7, "e1", 55, 40)), Judged::Follow);
        assert_eq!(
            judge(None, 0, &view(7, "", 3, 2)),
            Judged::Adopt {
                history: history(7, ""),
                rebased: false
            }
        );
        // A member restored from disk by a release that kept no history.
        assert_eq!(
            judge(None, 40, &view(7, "", 55, 40)),
            Judged::Adopt {
                history: history(7, ""),
                rebased: false
            }
        );
    }

    #[test]
    fn a_history_that_went_back_is_refused() {
        let k = history(7, "e1");
        // A restore that kept the cluster's ID: the store's revision, or the config key's.
        let r = judge(Some(&k), 340, &view(7, "e1", 120, 118));
        assert!(
            matches!(&r, Judged::Refuse(w) if w.contains("etcd's revision 120 is below revision 340")),
            "{r:?}"
        );
        let r = judge(Some(&k), 340, &view(7, "e1", 900, 118));
        assert!(
            matches!(&r, Judged::Refuse(w) if w.contains("config key's revision 118")),
            "{r:?}"
        );
        // A restore with a new cluster ID, even with revisions above.
        let r = judge(Some(&k), 340, &view(8, "e1", 900, 800));
        assert!(
            matches!(&r, Judged::Refuse(w) if w.contains("another cluster") && w.contains("rebase")),
            "{r:?}"
        );
        // Without any history kept (a release before), the revisions still tell.
        assert!(matches!(
            judge(None, 340, &view(8, "", 120, 118)),
            Judged::Refuse(_)
        ));
    }

    #[test]
    fn a_new_epoch_is_adopted_and_starts_the_revisions_over() {
        let k = history(7, "e1");
        assert_eq!(
            judge(Some(&k), 340, &view(8, "e2", 125, 121)),
            Judged::Adopt {
                history: history(8, "e2"),
                rebased: true
            }
        );
        // The first epoch written in a fleet that had none.
        assert_eq!(
            judge(Some(&history(7, "")), 40, &view(7, "e1", 60, 40)),
            Judged::Adopt {
                history: history(7, "e1"),
                rebased: true
            }
        );
    }
}
