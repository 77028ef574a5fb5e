//! A member's name is one appliance's: the session claims `members/{member}` under its lease
//! with an etcd transaction before it writes anything else, and writes the member's keys
//! only while that key is under its lease. A second appliance configured with the same
//! name (a copied config) is refused with a message naming the holder, instead of the two
//! overwriting each other's reports and the one that leaves deleting the other's keys.
//!
//! The name passes to another process only when it is the same appliance's (its machine
//! and API socket) and younger: the process that takes over from the one before, or the
//! next start after a crash, whose predecessor's lease has not run out yet. The older
//! process then finds its writes refused and stops; it cannot take the name back.

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};

use crate::client::{ClientError, Settings};
use crate::doc::{Holder, MemberReport, Readiness};

/// Whether the process `ours` may take the name from `held` (the report under the name):
/// `Err` says who holds it, for the operator.
pub fn may_take(ours: &Holder, held: &MemberReport) -> Result<(), String> {
    let h = &held.holder;
    if h.appliance.is_empty() {
        // A release that did not claim names: it is the one before this process on the
        // same appliance during an upgrade, or a duplicate nobody can tell apart.
        return Ok(());
    }
    if h.appliance != ours.appliance {
        return Err(format!(
            "the appliance {} holds it (another appliance with the same [appliance] name?)",
            h.appliance
        ));
    }
    if h.started_ms > ours.started_ms {
        return Err(format!(
            "a newer process of this appliance holds it (started at {} ms, this one at {} ms)",
            h.started_ms, ours.started_ms
        ));
    }
    Ok(())
}

/// What the member's key says while the member has not prepared anything yet.
pub fn joining() -> MemberReport {
    MemberReport {
        prepared: 0,
        readiness: Readiness::Ready,
        error: None,
        running: 0,
        activated_at_ms: 0,
        sync_lag_ms: None,
        fingerprint: String::new(),
        holder: Holder::default(),
    }
}

/// Claims the member's name for `lease`, writing `report` (stamped with this process) under
/// it: when no key holds the name, or [`may_take`] lets this process take it.
pub async fn claim(
    s: &Settings,
    c: &mut Client,
    lease: i64,
    report: &MemberReport,
) -> Result<(), ClientError> {
    let key = s.keys.member(&s.member);
    let mut doc = report.clone();
    doc.holder = s.holder.clone();
    let value = serde_json::to_vec(&doc)?;
    let put = || {
        TxnOp::put(
            key.clone(),
            value.clone(),
            Some(PutOptions::new().with_lease(lease)),
        )
    };
    let free = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([put()])
        .or_else([TxnOp::get(key.clone(), None)]);
    let resp = c.txn(free).await?;
    if resp.succeeded() {
        return Ok(());
    }
    let held = resp.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Get(g) => g
            .kvs()
            .first()
            .map(|kv| (kv.value().to_vec(), kv.mod_revision(), kv.lease())),
        _ => None,
    });
    let Some((value_held, modrev, held_lease)) = held else {
        return Err(ClientError::NameContested);
    };
    if held_lease != lease {
        let taken = |why: String| ClientError::NameTaken {
            member: s.member.clone(),
            why,
        };
        // A value that is no report is nobody's claim (a hand edit): the name is free.
        if let Ok(r) = serde_json::from_slice::<MemberReport>(&value_held) {
            may_take(&s.holder, &r).map_err(taken)?;
        }
    }
    let take = Txn::new()
        .when([Compare::mod_revision(key.clone(), CompareOp::Equal, modrev)])
        .and_then([put()]);
    match c.txn(take).await?.succeeded() {
        true => Ok(()),
        false => Err(ClientError::NameContested),
    }
}

/// Writes `value` at `key` under `lease` while the member's key is under it (the name is
/// still this process's); `false` when it is not.
pub async fn put_held(
    s: &Settings,
    c: &mut Client,
    lease: i64,
    key: String,
    value: Vec<u8>,
) -> Result<bool, ClientError> {
    let txn = Txn::new()
        .when([Compare::lease(
            s.keys.member(&s.member),
            CompareOp::Equal,
            lease,
        )])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )]);
    Ok(c.txn(txn).await?.succeeded())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(appliance: &str, started_ms: u64) -> MemberReport {
        MemberReport {
            holder: Holder {
                appliance: appliance.into(),
                started_ms,
            },
            ..joining()
        }
    }

    #[test]
    fn a_name_passes_only_to_a_younger_process_of_the_same_appliance() {
        let ours = Holder {
            appliance: "m1:/run/sluice/api.sock".into(),
            started_ms: 2_000,
        };
        // The process before this one on the same appliance (a takeover, a crash).
        assert_eq!(
            may_take(&ours, &held_by("m1:/run/sluice/api.sock", 1_000)),
            Ok(())
        );
        // A release that did not claim names.
        assert_eq!(may_take(&ours, &held_by("", 0)), Ok(()));
        // Another appliance with the same name: refused, and named.
        let other = may_take(&ours, &held_by("m2:/run/sluice/api.sock", 1_000));
        assert!(
            other
                .as_ref()
                .is_err_and(|e| e.contains("m2:/run/sluice/api.sock")),
            "{other:?}"
        );
        // Two appliances of one machine (a lab) are two appliances.
        assert!(may_take(&ours, &held_by("m1:/tmp/lab/b/api.sock", 1_000)).is_err());
        // The older process cannot take the name back from the newer one.
        let newer = may_take(&ours, &held_by("m1:/run/sluice/api.sock", 3_000));
        assert!(newer.is_err_and(|e| e.contains("newer process")));
    }
}
