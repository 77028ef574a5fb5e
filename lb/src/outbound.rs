//! Outbound connections through a DR or tunnel VIP, without per-connection state (Ananta's
//! SNAT, seeds 000/001): backends that open connections to the outside use the VIP as their
//! source address, each with source ports from a share of the VIP's `outbound` range of its
//! own, so an appliance can send an answer (to VIP:port) to the backend that owns the port
//! from the table alone.
//!
//! Every appliance given the same pool computes the same shares ([`Assignment::new`] sorts
//! the backends' identities and splits the range in that order), so ECMP between appliances
//! does not matter. When the pool changes, the shares move, but connections a backend opened
//! on a port that now belongs to another one are still open. [`Outbound`] keeps both
//! assignments for a drain period:
//! - answers go by the old assignment, where the port's old owner is still in the pool (a
//!   removed backend's ports go to their new owner at once);
//! - each backend may open new connections only on the ports it owns in both
//!   ([`Outbound::usable`]), so every port it uses is forwarded to it;
//! - when the drain ends, the new assignment alone holds.
//!
//! Time is the caller's `now` in nanoseconds, as elsewhere in `lb`.

use std::net::IpAddr;

use crate::Tables;
use crate::hash::addr_to_u128;
use config::{BackendState, Config};

pub use config::PortRange;

/// `range` cut into `n` contiguous shares in order, their sizes differing by at most one (the
/// first `len % n` shares one port longer). Fewer shares than `n` when the range has fewer
/// ports than `n` (one port each, in order).
pub fn split(range: PortRange, n: usize) -> Vec<PortRange> {
    let len = range.len();
    let n = (n as u32).min(len);
    if n == 0 {
        return Vec::new();
    }
    let (base, extra) = (len / n, len % n);
    let mut first = u32::from(range.first);
    (0..n)
        .map(|i| {
            let size = base + u32::from(i < extra);
            let share = PortRange {
                first: first as u16,
                last: (first + size - 1) as u16,
            };
            first += size;
            share
        })
        .collect()
}

/// Which backend owns which ports of one VIP's outbound range. `K` is the backend's
/// identity (its address for DR and tunnel backends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment<K> {
    range: PortRange,
    /// The pool, sorted: a backend without a share (more backends than ports) is still in it.
    pool: Vec<K>,
    /// Shares in port order, each with its owner.
    shares: Vec<(PortRange, K)>,
}

impl<K: Ord + Clone> Assignment<K> {
    /// The range split among `backends`, sorted (and deduplicated) so that the order they
    /// are given in does not matter. Backends past the range's port count get no share.
    pub fn new(range: PortRange, backends: impl IntoIterator<Item = K>) -> Assignment<K> {
        let mut keys: Vec<K> = backends.into_iter().collect();
        keys.sort();
        keys.dedup();
        let shares = split(range, keys.len())
            .into_iter()
            .zip(keys.iter().cloned())
            .collect();
        Assignment {
            range,
            pool: keys,
            shares,
        }
    }

    /// The whole outbound range.
    pub fn range(&self) -> PortRange {
        self.range
    }

    /// Every share in port order.
    pub fn shares(&self) -> &[(PortRange, K)] {
        &self.shares
    }

    /// The backend that owns `port`, if the port is in the range and has an owner.
    pub fn owner(&self, port: u16) -> Option<&K> {
        let i = self.shares.partition_point(|(r, _)| r.last < port);
        self.shares
            .get(i)
            .filter(|(r, _)| r.contains(port))
            .map(|(_, k)| k)
    }

    /// `backend`'s share, if it has one.
    pub fn share(&self, backend: &K) -> Option<PortRange> {
        self.shares
            .iter()
            .find(|(_, k)| k == backend)
            .map(|(r, _)| *r)
    }

    fn has(&self, backend: &K) -> bool {
        self.pool.binary_search(backend).is_ok()
    }
}

/// A VIP's outbound assignment over time: the one in force and, during a drain, the one
/// that follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound<K> {
    current: Assignment<K>,
    /// The assignment being moved to, and when (ns) the drain ends.
    next: Option<(Assignment<K>, u64)>,
}

impl<K: Ord + Clone> Outbound<K> {
    /// An assignment in force from the start (a VIP's first version: nothing to drain).
    pub fn new(a: Assignment<K>) -> Outbound<K> {
        Outbound {
            current: a,
            next: None,
        }
    }

    /// The pool (or range) changed to `a` at `now`: the drain toward it ends `drain` ns from
    /// now. The same assignment as the target changes nothing. A change during a drain
    /// keeps the assignment in force (connections from before the first change may still
    /// be open on it) and drains toward the newest target from `now`.
    pub fn update(&mut self, a: Assignment<K>, now: u64, drain: u64) {
        if self.target() == &a {
            return;
        }
        if self.current == a || self.current.range != a.range {
            // Back to the assignment in force, or a new range: the old ports' connections
            // cannot be told apart from new ones, so the new assignment holds at once.
            self.current = a;
            self.next = None;
            return;
        }
        self.next = Some((a, now.saturating_add(drain)));
    }

    /// Ends the drain once its time has come; true when it did.
    pub fn tick(&mut self, now: u64) -> bool {
        match self.next.take() {
            Some((a, end)) if now >= end => {
                self.current = a;
                true
            }
            other => {
                self.next = other;
                false
            }
        }
    }

    /// The assignment the pool asks for (the drain's target, else the one in force).
    pub fn target(&self) -> &Assignment<K> {
        self.next.as_ref().map_or(&self.current, |(a, _)| a)
    }

    /// When the drain ends, if one is under way.
    pub fn drain_ends(&self) -> Option<u64> {
        self.next.as_ref().map(|(_, end)| *end)
    }

    /// The backend an answer to `port` goes to: during a drain the port's old owner while it
    /// is still in the pool, else the new one.
    pub fn forward(&self, port: u16) -> Option<&K> {
        let Some((next, _)) = &self.next else {
            return self.current.owner(port);
        };
        match self.current.owner(port) {
            Some(old) if next.has(old) => Some(old),
            _ => next.owner(port),
        }
    }

    /// The ports `backend` may open new connections from now: its share, and during a drain
    /// only the part of it that it owns in both assignments (possibly none).
    pub fn usable(&self, backend: &K) -> Option<PortRange> {
        let Some((next, _)) = &self.next else {
            return self.current.share(backend);
        };
        let new = next.share(backend)?;
        self.current.share(backend)?.intersect(&new)
    }

    /// The whole range (the same in both assignments of a drain).
    pub fn range(&self) -> PortRange {
        self.current.range
    }

    /// [`Outbound::forward`] as it stands at `now`: a drain whose time has come is over,
    /// whether or not [`Outbound::tick`] has run (the datapath reads a table version that
    /// the control plane built earlier).
    pub fn forward_at(&self, port: u16, now: u64) -> Option<&K> {
        match &self.next {
            Some((next, end)) if now >= *end => next.owner(port),
            _ => self.forward(port),
        }
    }

    /// [`Outbound::usable`] as it stands at `now` (see [`Outbound::forward_at`]).
    pub fn usable_at(&self, backend: &K, now: u64) -> Option<PortRange> {
        match &self.next {
            Some((next, end)) if now >= *end => next.share(backend),
            _ => self.usable(backend),
        }
    }
}

/// One VIP's outbound state as a hand-over carries it to the next process: the pool of
/// the assignment in force and, during a drain, the pool drained toward and when the drain
/// ends (ns on `CLOCK_MONOTONIC`, which the next process on the host shares). The shares
/// follow from pool and range ([`Assignment::new`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carried {
    /// The VIP's name: the next process's VIP of the same name takes it on.
    pub name: String,
    pub range: PortRange,
    pub current: Vec<IpAddr>,
    pub next: Option<(Vec<IpAddr>, u64)>,
}

impl Outbound<IpAddr> {
    /// What a hand-over carries of this state, for the VIP `name`.
    pub fn carried(&self, name: &str) -> Carried {
        Carried {
            name: name.to_string(),
            range: self.current.range,
            current: self.current.pool.clone(),
            next: self.next.as_ref().map(|(a, end)| (a.pool.clone(), *end)),
        }
    }

    /// The state `c` carried (a drain goes on toward the same pool until the same time).
    pub fn from_carried(c: &Carried) -> Outbound<IpAddr> {
        let next = c
            .next
            .as_ref()
            .map(|(pool, end)| (Assignment::new(c.range, pool.iter().copied()), *end));
        Outbound {
            current: Assignment::new(c.range, c.current.iter().copied()),
            next,
        }
    }
}

/// One VIP's outbound state in a table version (`Tables::outbound_for`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VipOutbound {
    /// The VIP's slot.
    pub vip: u32,
    /// Its name: the next version carries the state of the VIP of the same name on.
    pub name: String,
    /// The assignment (and drain) in force, over the backends' addresses.
    pub state: Outbound<IpAddr>,
}

impl Tables {
    /// The outbound state of the VIP on `addr` with protocol `proto`, if it has a range.
    #[inline]
    pub fn outbound_for(&self, addr: u128, proto: u8) -> Option<&VipOutbound> {
        if self.outbound.is_empty() {
            return None;
        }
        self.outbound.get(&(addr, proto))
    }

    /// Every VIP's outbound state, in no order.
    pub fn outbound_vips(&self) -> impl Iterator<Item = &VipOutbound> {
        self.outbound.values()
    }

    /// Before publication: each `outbound` VIP's assignment over its backends that are not
    /// disabled (health does not move ports: a backend failing its check still makes its
    /// own connections), carried on from the VIP of the same name in `previous` with a drain
    /// from `now` (ns, the datapath's clock) when the pool changed.
    pub fn set_outbound(&mut self, config: &Config, previous: Option<&Tables>, now: u64) {
        let before = |name: &str| {
            previous
                .and_then(|p| p.outbound.values().find(|x| x.name == name))
                .map(|x| x.state.clone())
        };
        self.set_outbound_with(config, &before, now);
    }

    /// [`Tables::set_outbound`] carried on from a process before this one's states
    /// (`carried`, a hand-over's), instead of a previous version's.
    pub fn carry_outbound(&mut self, config: &Config, carried: &[Carried], now: u64) {
        let before = |name: &str| {
            carried
                .iter()
                .find(|c| c.name == name)
                .map(Outbound::from_carried)
        };
        self.set_outbound_with(config, &before, now);
    }

    /// Every VIP's outbound state as a hand-over carries it.
    pub fn outbound_carried(&self) -> Vec<Carried> {
        let mut out: Vec<Carried> = self
            .outbound
            .values()
            .map(|v| v.state.carried(&v.name))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    fn set_outbound_with(
        &mut self,
        config: &Config,
        before: &dyn Fn(&str) -> Option<Outbound<IpAddr>>,
        now: u64,
    ) {
        let mut map = super::tables::FastMap::default();
        for (slot, v) in config.vips.iter().enumerate() {
            let Some(o) = v.outbound else { continue };
            let pool = v
                .backends
                .iter()
                .filter(|b| b.state != BackendState::Disabled)
                .map(|b| b.address);
            let a = Assignment::new(o.range, pool);
            let drain = u64::try_from(o.drain.as_nanos()).unwrap_or(u64::MAX);
            let state = match before(&v.name) {
                Some(mut s) => {
                    s.tick(now);
                    s.update(a, now, drain);
                    s
                }
                None => Outbound::new(a),
            };
            let entry = VipOutbound {
                vip: slot as u32,
                name: v.name.clone(),
                state,
            };
            map.insert((addr_to_u128(v.address), v.protocol.number()), entry);
        }
        self.outbound = map;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn range(first: u16, last: u16) -> PortRange {
        PortRange::new(first, last).unwrap()
    }

    #[test]
    fn a_range_splits_into_contiguous_shares_one_port_apart_at_most() {
        let shares = split(range(40000, 40009), 3);
        assert_eq!(
            shares,
            vec![
                range(40000, 40003),
                range(40004, 40006),
                range(40007, 40009)
            ]
        );
        assert_eq!(split(range(1, 2), 5), vec![range(1, 1), range(2, 2)]);
        assert!(split(range(1, 2), 0).is_empty());
        assert_eq!(split(range(0, 65535), 1), vec![range(0, 65535)]);
        assert_eq!(range(0, 65535).len(), 65536);
    }

    #[test]
    fn every_appliance_computes_the_same_owners_whatever_the_order() {
        let a = Assignment::new(range(1000, 1999), ["10.1.0.12", "10.1.0.11", "10.1.0.13"]);
        let b = Assignment::new(range(1000, 1999), ["10.1.0.13", "10.1.0.11", "10.1.0.12"]);
        assert_eq!(a, b);
        assert_eq!(a.owner(1000), Some(&"10.1.0.11"));
        assert_eq!(a.owner(1333), Some(&"10.1.0.11"));
        assert_eq!(a.owner(1334), Some(&"10.1.0.12"));
        assert_eq!(a.owner(1999), Some(&"10.1.0.13"));
        assert_eq!(a.owner(999), None);
        assert_eq!(a.owner(2000), None);
        assert_eq!(a.share(&"10.1.0.12"), Some(range(1334, 1666)));
        assert_eq!(a.share(&"10.1.0.99"), None);
    }

    #[test]
    fn a_drain_keeps_old_ports_with_their_owner_until_it_ends() {
        let r = range(100, 199);
        let mut o = Outbound::new(Assignment::new(r, [1u8, 2]));
        assert_eq!(o.usable(&1), Some(range(100, 149)));
        o.update(Assignment::new(r, [1u8, 2, 3]), 1_000, 500);
        assert_eq!(o.drain_ends(), Some(1_500));
        // Backend 2 owned 150-199 and now owns 134-166: 150-166 are its in both.
        assert_eq!(o.usable(&2), Some(range(150, 166)));
        assert_eq!(o.usable(&1), Some(range(100, 133)));
        // The newcomer waits for the drain: its new ports still carry others' connections.
        assert_eq!(o.usable(&3), None);
        assert_eq!(
            o.forward(140),
            Some(&1),
            "old owner keeps 134-149 during the drain"
        );
        assert_eq!(o.forward(190), Some(&2));
        assert!(!o.tick(1_499));
        assert!(o.tick(1_500));
        assert_eq!(o.forward(140), Some(&2));
        assert_eq!(o.forward(190), Some(&3));
        assert_eq!(o.usable(&3), Some(range(167, 199)));
        assert_eq!(o.drain_ends(), None);
    }

    #[test]
    fn a_removed_backends_ports_go_to_their_new_owner_at_once() {
        let r = range(100, 199);
        let mut o = Outbound::new(Assignment::new(r, [1u8, 2]));
        o.update(Assignment::new(r, [1u8]), 0, 500);
        assert_eq!(o.forward(190), Some(&1));
        assert_eq!(o.forward(120), Some(&1));
        // Backend 1 keeps only what it owned: 150-199 may still hold 2's connections.
        assert_eq!(o.usable(&1), Some(range(100, 149)));
        assert_eq!(o.usable(&2), None);
    }

    #[test]
    fn a_backend_left_without_a_share_keeps_its_connections_through_the_drain() {
        // One port, then four backends: 7 stays in the pool but the port's share is 0's.
        let r = range(1000, 1000);
        let mut o = Outbound::new(Assignment::new(r, [7u8]));
        o.update(Assignment::new(r, [0u8, 1, 3, 7]), 0, 10);
        assert_eq!(o.forward(1000), Some(&7));
        assert_eq!(o.usable(&0), None);
        assert!(o.tick(10));
        assert_eq!(o.forward(1000), Some(&0));
    }

    #[test]
    fn a_new_range_or_a_change_undone_holds_at_once() {
        let mut o = Outbound::new(Assignment::new(range(100, 199), [1u8, 2]));
        o.update(Assignment::new(range(100, 199), [1u8, 2, 3]), 0, 500);
        o.update(Assignment::new(range(100, 199), [1u8, 2]), 10, 500);
        assert_eq!(o.drain_ends(), None);
        o.update(Assignment::new(range(300, 399), [1u8, 2]), 20, 500);
        assert_eq!(o.drain_ends(), None);
        assert_eq!(o.forward(300), Some(&1));
        assert_eq!(o.forward(150), None);
    }

    proptest! {
        /// The one promise: whatever the changes, every port a backend may use is forwarded
        /// to that backend, and a connection opened on it stays forwarded there while its
        /// backend stays in the pool, through any later change, until a drain has run its
        /// whole period since that change.
        #[test]
        fn usable_ports_are_forwarded_to_their_user(
            pools in prop::collection::vec(prop::collection::btree_set(0u8..8, 1..6), 1..8),
            first in 1000u16..2000,
            len in 1u16..300,
            drain in 1u64..100,
            steps in prop::collection::vec(0u64..150, 8),
        ) {
            let r = range(first, first + len - 1);
            let mut o = Outbound::new(Assignment::new(r, pools[0].iter().copied()));
            let mut now = 0;
            let mut open: Vec<(u8, u16)> = Vec::new();
            for (i, pool) in pools.iter().enumerate().skip(1) {
                now += steps[i];
                if o.tick(now) {
                    // The drain ran its period: connections on moved ports were given it.
                    open.retain(|(b, p)| o.forward(*p) == Some(b));
                }
                for b in 0u8..8 {
                    if let Some(u) = o.usable(&b) {
                        for p in [u.first, u.last] {
                            prop_assert_eq!(o.forward(p), Some(&b));
                            open.push((b, p));
                        }
                    }
                }
                o.update(Assignment::new(r, pool.iter().copied()), now, drain);
                open.retain(|(b, _)| pool.contains(b));
                for (b, p) in &open {
                    prop_assert_eq!(o.forward(*p), Some(b));
                }
            }
        }
    }

    fn config(backends: &[(&str, &str)]) -> Config {
        testkit::unit::outbound_dr(backends, "10s")
    }

    fn tables(c: &Config, previous: Option<&Tables>, now: u64) -> Tables {
        let mut t = Tables::build(c, &|_, _| true, 1).expect("tables");
        t.set_outbound(c, previous, now);
        t
    }

    #[test]
    fn a_new_version_drains_from_the_running_ones_shares() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let vip = addr_to_u128(ip("192.0.2.10"));
        let two = config(&[("10.1.0.12", "active"), ("10.1.0.11", "active")]);
        let t1 = tables(&two, None, 0);
        let o = t1.outbound_for(vip, 6).expect("outbound state");
        assert_eq!(o.state.forward_at(40600, 0), Some(&ip("10.1.0.12")));
        assert_eq!(
            o.state.drain_ends(),
            None,
            "a first version has nothing to drain"
        );
        assert!(t1.outbound_for(vip, 17).is_none(), "another protocol");
        // A third backend, and a disabled one that gets no ports.
        let three = config(&[
            ("10.1.0.12", "active"),
            ("10.1.0.11", "active"),
            ("10.1.0.13", "active"),
            ("10.1.0.14", "disabled"),
        ]);
        let t2 = tables(&three, Some(&t1), 1_000);
        let o = t2.outbound_for(vip, 6).expect("outbound state");
        let end = 1_000 + 10_000_000_000;
        assert_eq!(o.state.drain_ends(), Some(end));
        // 40600 was .12's and stays so through the drain; at its end it is .12's share of
        // three (40334-40666) anyway; 40900 moves from .12 to .13.
        assert_eq!(o.state.forward_at(40900, end - 1), Some(&ip("10.1.0.12")));
        assert_eq!(o.state.forward_at(40900, end), Some(&ip("10.1.0.13")));
        assert_eq!(o.state.usable_at(&ip("10.1.0.13"), end - 1), None);
        assert_eq!(
            o.state.usable_at(&ip("10.1.0.13"), end),
            PortRange::new(40667, 40999)
        );
        assert_eq!(o.state.usable_at(&ip("10.1.0.14"), end), None);
        // The same pool again changes nothing: the drain runs on.
        let t3 = tables(&three, Some(&t2), 5_000);
        assert_eq!(
            t3.outbound_for(vip, 6).unwrap().state.drain_ends(),
            Some(end)
        );
    }

    #[test]
    fn a_drain_under_way_goes_on_in_the_next_process() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let vip = addr_to_u128(ip("192.0.2.10"));
        let two = config(&[("10.1.0.12", "active"), ("10.1.0.11", "active")]);
        let three = config(&[
            ("10.1.0.12", "active"),
            ("10.1.0.11", "active"),
            ("10.1.0.13", "active"),
        ]);
        let t1 = tables(&two, None, 0);
        let t2 = tables(&three, Some(&t1), 1_000);
        let end = 1_000 + 10_000_000_000;
        let carried = t2.outbound_carried();
        assert_eq!(carried.len(), 1);
        assert_eq!(carried[0].name, "web");
        assert_eq!(
            Outbound::from_carried(&carried[0]),
            t2.outbound_for(vip, 6).unwrap().state
        );
        // A new process's first version: without the carry, the new shares at once (40900
        // would go to .13 while .12's connections from it are open); with it, the drain.
        let fresh = tables(&three, None, 2_000);
        assert_eq!(
            fresh
                .outbound_for(vip, 6)
                .unwrap()
                .state
                .forward_at(40900, 2_000),
            Some(&ip("10.1.0.13"))
        );
        let mut next = Tables::build(&three, &|_, _| true, 1).expect("tables");
        next.carry_outbound(&three, &carried, 2_000);
        let o = &next.outbound_for(vip, 6).unwrap().state;
        assert_eq!(o.drain_ends(), Some(end));
        assert_eq!(o.forward_at(40900, 2_000), Some(&ip("10.1.0.12")));
        assert_eq!(o.forward_at(40900, end), Some(&ip("10.1.0.13")));
    }
}
