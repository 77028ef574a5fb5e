//! Routes and neighbours from the kernel, kept current without ever blocking the control
//! loop.
//!
//! One task ([`spawn`]) owns the rtnetlink side: it dumps interfaces, the main routing
//! table and the neighbour table, listens to route and neighbour notifications, and sends
//! the loop [`NetEvent`]s (a fresh snapshot after a route change, single neighbour changes
//! as they come). It also makes the kernel resolve next hops nobody has a MAC for: the
//! addresses the loop asks for (backends, routers; at most once a second each, within a
//! budget per second) and the on-link destinations workers missed (`lb::egress::MissQueue`).
//! Resolution never waits: the kernel's answer comes back as a neighbour notification,
//! which makes a new table version sharing everything but the egress
//! ([`crate::lb::Tables::with_egress`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::{debug, warn};
use wire::MacAddr;

use crate::config::{BackendState, Config};
use crate::datapath::neigh::{self, NetChange, Resolver};
use crate::lb::egress::{Egress, NetState, Unresolved};
use crate::lb::{MissQueue, Tables};

/// Requests a worker may leave for the control plane before further misses are dropped.
pub const MISS_QUEUE_DEPTH: usize = 1024;
/// Resolutions the task starts per second at most (each is one datagram).
const RESOLVE_BUDGET: usize = 256;
/// How often one address is asked for at most.
const RESOLVE_EVERY: Duration = Duration::from_secs(1);
/// How long route notifications are gathered before one re-dump.
const ROUTE_SETTLE: Duration = Duration::from_millis(20);
/// How long after asking the kernel for a neighbour a worker missed the tables are re-read:
/// a neighbour the kernel already knew changes no state and sends no notification. (Seen in
/// CI: a NAT backend the kernel knew was missing from the datapath's table for 25 s, until
/// the 30 s re-read; its VIP probe failed 62 times and the first connections of
/// tests/drain_reuse.rs timed out.)
const MISS_REREAD: Duration = Duration::from_millis(300);
/// A full re-dump this often repairs anything a lost notification left behind.
const RESYNC_EVERY: Duration = Duration::from_secs(30);

/// Egress input from the kernel (rtnetlink): interfaces, routes and neighbours, and the
/// queue workers report missed neighbours on (see `lb::egress`).
#[derive(Debug, Clone, Default)]
pub struct NextHops {
    /// The kernel's interfaces, main routing table and neighbour table.
    pub net: NetState,
    /// Where workers offer neighbours they lacked; `None` in tests and `sluice trace`.
    pub misses: Option<MissQueue>,
}

/// What the task tells the control loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetEvent {
    /// Interfaces, routes and neighbours as dumped now.
    Snapshot(NetState),
    /// One neighbour entry appeared, changed (`Some`) or went away / failed (`None`).
    Neighbour {
        ifindex: u32,
        addr: IpAddr,
        mac: Option<MacAddr>,
    },
}

/// The loop's handle on the task: resolution requests out (its events come to `run.rs`).
#[derive(Debug)]
pub struct NetTask {
    requests: mpsc::Sender<Vec<Unresolved>>,
}

impl NetTask {
    /// Asks the task to make the kernel resolve `want`; never waits (a busy task drops it,
    /// the next tick asks again).
    pub fn resolve(&self, want: Vec<Unresolved>) {
        if !want.is_empty() {
            let _ = self.requests.try_send(want);
        }
    }
}

/// Takes the first snapshot (before the first version is built) and returns the next hops
/// with the workers' miss queue, and the receiving end of that queue for [`spawn`].
pub async fn first(
    resolver: &Resolver,
) -> Result<(NextHops, Receiver<Unresolved>), neigh::NeighError> {
    let net = resolver.snapshot().await?;
    let (misses, rx) = MissQueue::new(MISS_QUEUE_DEPTH);
    Ok((
        NextHops {
            net,
            misses: Some(misses),
        },
        rx,
    ))
}

/// Starts the task on the current runtime; returns its handle and the events it sends.
pub fn spawn(
    resolver: Resolver,
    misses: Receiver<Unresolved>,
) -> (NetTask, mpsc::Receiver<NetEvent>) {
    let (ev_tx, events) = mpsc::channel(4096);
    let (requests, req_rx) = mpsc::channel(64);
    tokio::spawn(run(resolver, misses, ev_tx, req_rx));
    (NetTask { requests }, events)
}

/// Per-address rate limit and per-second budget of resolutions.
#[derive(Debug, Default)]
struct Asked {
    last: HashMap<Unresolved, Instant>,
    window: Option<Instant>,
    in_window: usize,
}

impl Asked {
    /// Whether `u` may be resolved now; records it when so.
    fn admit(&mut self, u: Unresolved, now: Instant) -> bool {
        if self
            .window
            .is_none_or(|w| now.duration_since(w) >= Duration::from_secs(1))
        {
            self.window = Some(now);
            self.in_window = 0;
            self.last
                .retain(|_, t| now.duration_since(*t) < RESOLVE_EVERY);
        }
        if self.in_window >= RESOLVE_BUDGET {
            return false;
        }
        if self
            .last
            .get(&u)
            .is_some_and(|t| now.duration_since(*t) < RESOLVE_EVERY)
        {
            return false;
        }
        self.last.insert(u, now);
        self.in_window += 1;
        true
    }
}

async fn run(
    resolver: Resolver,
    misses: Receiver<Unresolved>,
    events: mpsc::Sender<NetEvent>,
    mut requests: mpsc::Receiver<Vec<Unresolved>>,
) {
    let mut changes = match neigh::watch() {
        Ok(rx) => Some(rx),
        Err(e) => {
            warn!("cannot watch neighbour and route changes ({e}); re-reading them every 30 s");
            None
        }
    };
    let mut asked = Asked::default();
    let mut poll = tokio::time::interval(Duration::from_millis(10));
    let mut resync = tokio::time::interval(RESYNC_EVERY);
    resync.reset();
    // Re-read at once: what the kernel learned since the first snapshot sent no notification.
    let mut dump_at: Option<tokio::time::Instant> = Some(tokio::time::Instant::now());
    loop {
        let dump_due = async {
            match dump_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(c) = async {
                match changes.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => match c {
                NetChange::Neighbour { ifindex, addr, mac } => {
                    debug!(ifindex, %addr, ?mac, "neighbour notification");
                    let ev = NetEvent::Neighbour { ifindex, addr, mac: mac.map(MacAddr) };
                    if events.send(ev).await.is_err() {
                        return;
                    }
                }
                NetChange::Route { .. } | NetChange::Link { .. } => {
                    dump_at.get_or_insert(tokio::time::Instant::now() + ROUTE_SETTLE);
                }
            },
            _ = dump_due => {
                dump_at = None;
                if !dump(&resolver, &events).await {
                    return;
                }
            }
            _ = resync.tick() => {
                if !dump(&resolver, &events).await {
                    return;
                }
            }
            Some(want) = requests.recv() => {
                let now = Instant::now();
                for u in want {
                    if asked.admit(u, now) {
                        neigh::provoke_resolution(u.addr, u.ifindex);
                    }
                }
            }
            _ = poll.tick() => {
                let now = Instant::now();
                for u in misses.try_iter().take(RESOLVE_BUDGET) {
                    if asked.admit(u, now) {
                        debug!(addr = %u.addr, ifindex = u.ifindex, "datapath missed a neighbour: resolving");
                        neigh::provoke_resolution(u.addr, u.ifindex);
                        // One the kernel knows sends no notification (see MISS_REREAD).
                        dump_at.get_or_insert(tokio::time::Instant::now() + MISS_REREAD);
                    }
                }
            }
        }
    }
}

/// Dumps and sends a snapshot; `false` once the loop is gone.
async fn dump(resolver: &Resolver, events: &mpsc::Sender<NetEvent>) -> bool {
    match resolver.snapshot().await {
        Ok(net) => events.send(NetEvent::Snapshot(net)).await.is_ok(),
        Err(e) => {
            warn!("reading routes and neighbours: {e}");
            true
        }
    }
}

/// Applies `ev` to `net`; returns whether anything changed.
pub fn apply(net: &mut NetState, ev: NetEvent) -> bool {
    match ev {
        NetEvent::Snapshot(s) => {
            let changed = *net != s;
            *net = s;
            changed
        }
        NetEvent::Neighbour { ifindex, addr, mac } => match mac {
            Some(m) => net.neighbours.insert((ifindex, addr), m) != Some(m),
            None => net.neighbours.remove(&(ifindex, addr)).is_some(),
        },
    }
}

/// The backend addresses of `tables` by slot.
pub fn backend_addresses(tables: &Tables) -> Vec<IpAddr> {
    tables.backends.iter().map(|b| b.ip()).collect()
}

/// The egress for `tables`' backends from `hops`, on the interfaces `config` drives.
pub fn egress(config: &Config, tables: &Tables, hops: &NextHops) -> Egress {
    Egress::build(
        &hops.net,
        &config.appliance.interfaces,
        &backend_addresses(tables),
        hops.misses.clone(),
    )
}

/// Next hops the running tables lack a MAC for and that are worth asking for: routers of
/// datapath routes and backends that are not disabled.
pub fn wanted(config: &Config, tables: &Tables) -> Vec<Unresolved> {
    let live: Vec<IpAddr> = config
        .vips
        .iter()
        .flat_map(|v| &v.backends)
        .filter(|b| b.state != BackendState::Disabled)
        // A tenant backend is reached at its VTEP.
        .map(|b| b.underlay())
        .collect();
    tables.egress().unresolved(&live)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(a: &str) -> Unresolved {
        Unresolved {
            ifindex: 2,
            addr: a.parse().expect("literal"),
        }
    }

    #[test]
    fn each_address_is_asked_once_a_second_within_the_budget() {
        let mut a = Asked::default();
        let t0 = Instant::now();
        assert!(a.admit(u("10.0.0.1"), t0));
        assert!(!a.admit(u("10.0.0.1"), t0 + Duration::from_millis(500)));
        assert!(a.admit(u("10.0.0.1"), t0 + Duration::from_millis(1001)));
        let mut b = Asked::default();
        let admitted = (0..1000u32)
            .filter(|i| b.admit(u(&format!("10.1.{}.{}", i / 256, i % 256)), t0))
            .count();
        assert_eq!(admitted, RESOLVE_BUDGET);
    }

    #[test]
    fn neighbour_events_change_the_state_only_when_they_differ() {
        let mut net = NetState::default();
        let ev = |mac| NetEvent::Neighbour {
            ifindex: 2,
            addr: "10.0.0.1".parse().expect("literal"),
            mac,
        };
        let m = Some(MacAddr([2, 0, 0, 0, 0, 1]));
        assert!(apply(&mut net, ev(m)));
        assert!(!apply(&mut net, ev(m)), "same entry again");
        assert!(apply(&mut net, ev(None)));
        assert!(!apply(&mut net, ev(None)));
        assert!(!apply(&mut net, NetEvent::Snapshot(NetState::default())));
    }
}
