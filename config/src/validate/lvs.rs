//! The keys LVS and keepalived users know, on `[[vip]]` and `[[vip.backend]]`: scheduler
//! flags (`sh-port`, `dh-port`), persistence and its netmask, connection limits with the
//! overflow policy, slow start and one-packet UDP scheduling. They live apart from `vip.rs`
//! because they interlock (a limit means nothing without connection state, slow start
//! nothing without weights) and each combination that cannot work is explained here.

use std::net::IpAddr;
use std::time::Duration;

use super::MAX_DURATION;
use crate::error::ConfigErrors;
use crate::model::{Mode, Overflow, Protocol, Scheduler, SchedulerFlag};
use crate::reader::Table;

/// The shortest `slow_start` (its ten levels are committed at least a tenth of it apart).
const MIN_SLOW_START: Duration = Duration::from_secs(1);
/// The longest `slow_start` (a ramp longer than this is a misconfiguration, not a ramp).
const MAX_SLOW_START: Duration = Duration::from_secs(3600);
/// The largest `max_connections` (far above what one backend's table entries can reach).
const MAX_CONNECTIONS: i64 = 100_000_000;

/// What the VIP's own keys said, before the VIP is assembled.
pub(super) struct VipFacts {
    pub(super) scheduler: Scheduler,
    pub(super) protocol: Protocol,
    pub(super) mode: Option<Mode>,
    pub(super) address: Option<IpAddr>,
}

/// The LVS keys of one `[[vip]]`.
pub(super) struct VipLvs {
    pub(super) scheduler_flags: Vec<SchedulerFlag>,
    pub(super) persistence: Option<Duration>,
    pub(super) persistence_netmask: u8,
    pub(super) overflow: Overflow,
    pub(super) slow_start: Option<Duration>,
    pub(super) udp_one_packet: bool,
}

/// The LVS keys of one `[[vip.backend]]`.
pub(super) struct BackendLvs {
    pub(super) max_connections: Option<u32>,
    pub(super) resume_connections: Option<u32>,
    pub(super) slow_start: Option<Duration>,
}

/// Reads `scheduler_flags`, `persistence`, `persistence_netmask`, `overflow`, `slow_start`
/// and `udp_one_packet`, and explains the combinations that cannot work.
pub(super) fn vip_keys(t: &mut Table<'_>, f: &VipFacts, errs: &mut ConfigErrors) -> VipLvs {
    let scheduler_flags = flags(t, f.scheduler, errs);
    let persistence = t.duration("persistence", Duration::from_secs(1)..=MAX_DURATION, errs);
    let persistence_netmask = netmask(t, persistence.is_some(), f.address, errs);
    let overflow = t
        .choice("overflow", &Overflow::ALL, errs)
        .unwrap_or(Overflow::Drop);
    if overflow == Overflow::Reset && f.protocol == Protocol::Udp {
        errs.push(
            t.key("overflow"),
            "\"reset\" answers a TCP SYN with a RST, and a udp VIP has nothing to reset: \
             use \"drop\" or \"ignore\"",
        );
    }
    let slow_start = t.duration("slow_start", MIN_SLOW_START..=MAX_SLOW_START, errs);
    if slow_start.is_some() {
        unweighted(t, "slow_start", f.scheduler, errs);
    }
    let udp_one_packet = t.bool("udp_one_packet", errs).unwrap_or(false);
    if udp_one_packet && f.protocol != Protocol::Udp {
        errs.push(
            t.key("udp_one_packet"),
            "true needs protocol = \"udp\": a TCP connection is one flow by definition",
        );
    }
    if udp_one_packet && f.mode == Some(Mode::FullNat) {
        errs.push(
            t.key("udp_one_packet"),
            "true cannot work with mode \"fullnat\": its replies are mapped back through the \
             connection-table entry that one-packet scheduling does not make (use \"nat\")",
        );
    }
    VipLvs {
        scheduler_flags,
        persistence,
        persistence_netmask,
        overflow,
        slow_start,
        udp_one_packet,
    }
}

/// `scheduler_flags`: each word known, none twice, each with its scheduler.
fn flags(t: &mut Table<'_>, scheduler: Scheduler, errs: &mut ConfigErrors) -> Vec<SchedulerFlag> {
    let mut out = Vec::new();
    for (path, s) in t.strings("scheduler_flags", errs).unwrap_or_default() {
        let Some(&(_, flag)) = SchedulerFlag::ALL.iter().find(|(n, _)| *n == s) else {
            errs.push(path, format!("{s:?} is not one of sh-port, dh-port"));
            continue;
        };
        let needs = match flag {
            SchedulerFlag::ShPort => Scheduler::Sh,
            SchedulerFlag::DhPort => Scheduler::Dh,
        };
        if scheduler != needs {
            errs.push(
                path,
                format!(
                    "{s:?} needs scheduler = {:?} (the scheduler is {:?}, which does not hash \
                     addresses that way)",
                    needs.name(),
                    scheduler.name()
                ),
            );
        } else if out.contains(&flag) {
            errs.push(path, format!("{s:?} listed twice"));
        } else {
            out.push(flag);
        }
    }
    out
}

/// `hash` with `sh` or `dh`: those hash the client's (destination's) address as LVS does,
/// so a hash choice would be silently ignored; say what to write instead.
pub(super) fn hash_with_lvs_hash(t: &mut Table<'_>, scheduler: Scheduler, errs: &mut ConfigErrors) {
    let (what, flag) = match scheduler {
        Scheduler::Sh => ("the client's address", "sh-port"),
        Scheduler::Dh => ("the destination address", "dh-port"),
        _ => return,
    };
    if let Some(h) = t.string("hash", errs) {
        errs.push(
            t.key("hash"),
            format!(
                "{h:?} does not apply to scheduler {:?}, which hashes {what} only (as LVS \
                 does): remove hash, or add scheduler_flags = [\"{flag}\"] to hash the port too",
                scheduler.name()
            ),
        );
    }
}

/// `persistence_netmask`: a prefix length of the VIP's family, only with `persistence`;
/// the whole address (32 or 128) when not given.
fn netmask(
    t: &mut Table<'_>,
    persistent: bool,
    address: Option<IpAddr>,
    errs: &mut ConfigErrors,
) -> u8 {
    let full = if address.is_some_and(|a| a.is_ipv6()) {
        128
    } else {
        32
    };
    if !persistent {
        t.reject(
            "persistence_netmask",
            "without persistence (it groups the clients persistence keeps together)",
            errs,
        );
        return full;
    }
    t.int("persistence_netmask", 0..=i64::from(full), errs)
        .map_or(full, |n| n as u8)
}

/// Records an error when `scheduler` ignores weights, so `key` (which acts on weights)
/// would do nothing.
fn unweighted(t: &Table<'_>, key: &str, scheduler: Scheduler, errs: &mut ConfigErrors) {
    if matches!(scheduler, Scheduler::Rr | Scheduler::Lc | Scheduler::Dh) {
        errs.push(
            t.key(key),
            format!(
                "scheduler {:?} ignores weights, so slow start would do nothing: use maglev, \
                 wrr, wlc, sed, nq, sh, lblc or lblcr",
                scheduler.name()
            ),
        );
    }
}

/// Reads `max_connections`, `resume_connections` and `slow_start` of one backend.
pub(super) fn backend_keys(
    b: &mut Table<'_>,
    vip: &VipFacts,
    one_packet: bool,
    errs: &mut ConfigErrors,
) -> BackendLvs {
    let max = b
        .int("max_connections", 1..=MAX_CONNECTIONS, errs)
        .map(|n| n as u32);
    if max.is_some() && one_packet {
        errs.push(
            b.key("max_connections"),
            "counts connection-table entries, which a udp_one_packet VIP never makes: remove \
             one of them",
        );
    }
    let resume = match max {
        // Read over max_connections' own range, so the key's type does not depend on the
        // file; the bound by this backend's limit is checked apart.
        Some(m) => match b.int("resume_connections", 1..=MAX_CONNECTIONS, errs) {
            Some(n) if n > i64::from(m) => {
                errs.push(
                    b.key("resume_connections"),
                    format!("{n} is out of range 1..={m} (at most max_connections)"),
                );
                None
            }
            n => n.map(|n| n as u32),
        },
        None => {
            b.reject(
                "resume_connections",
                "without max_connections (it is the level a full backend resumes below)",
                errs,
            );
            None
        }
    };
    let slow_start = b.duration("slow_start", Duration::ZERO..=MAX_SLOW_START, errs);
    if let Some(d) = slow_start.filter(|d| !d.is_zero()) {
        if d < MIN_SLOW_START {
            errs.push(
                b.key("slow_start"),
                format!(
                    "{d:?} is shorter than 1s, too short to ramp in steps: give 1s or more, \
                     or \"0s\" to turn the VIP's slow start off for this backend"
                ),
            );
        }
        unweighted(b, "slow_start", vip.scheduler, errs);
    }
    BackendLvs {
        max_connections: max,
        resume_connections: resume.or(max),
        slow_start,
    }
}
