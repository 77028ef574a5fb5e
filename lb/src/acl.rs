//! A VIP's `allow` and `deny` lists as the engine checks them (issue 46; the rules and
//! their longest-match meaning are `config::acl`'s).
//!
//! Every path a client's frame takes to a VIP asks [`VipAcl::check`] before any state is
//! read or made: forwarding in every mode (the stateless answer included), fragments, ICMP
//! echo, tenant VIPs; NAT's stateless return asks it for the client the reply goes to. A
//! table swap ends the flows of every source the new lists deny
//! (`WorkerState::adopt`), and the control plane evicts their flow-cache entries in the
//! same commit, so a change reaches established flows too. The XDP program holds the same
//! rules in LPM tries (`datapath/bpf/acl.h`) and drops denied frames before the engine
//! sees them; this check is what the engine would do, so both paths agree.
//!
//! The lookup is one hash probe per distinct prefix length of the VIP's lists, longest
//! first: a handful for real lists.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use config::SourceAcl;

use crate::hash::addr_to_u128;
use crate::tables::{FastMap, VipEntry};

/// A drop counter of one (VIP, list), shared by every worker and carried from version to
/// version while the VIP and list keep their names, so totals never go backwards.
#[derive(Debug, Default)]
pub struct AclCounter {
    /// The list's name (`config::AclRule::list`, or "allow" for sources no rule matched).
    pub list: String,
    /// Frames the engine dropped for it.
    pub dropped: AtomicU64,
}

/// One rule: its verdict and the counter a drop by it goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rule {
    allow: bool,
    counter: u16,
}

/// A VIP's lists compiled for the engine.
#[derive(Debug)]
pub struct VipAcl {
    /// Prefix lengths (in the 128-bit space, IPv4 mapped) longest first, each with its
    /// networks' rules.
    by_len: Vec<(u8, FastMap<u128, Rule>)>,
    /// The counter of sources no rule matched, when the VIP has an `allow` list.
    default_deny: Option<u16>,
    /// The counters, one per list a drop may be counted under.
    pub counters: Vec<Arc<AclCounter>>,
    /// What this was compiled from (a new version with the same lists keeps it).
    pub source: SourceAcl,
}

/// The mask of the first `len` bits of 128.
fn mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

impl VipAcl {
    /// Compiles `acl`; `prev` (the same VIP's in the version before) lends its counters
    /// for the lists it shares. `None` for a VIP without lists.
    pub fn build(acl: &SourceAcl, prev: Option<&VipAcl>) -> Option<Arc<VipAcl>> {
        if acl.is_open() {
            return None;
        }
        let counters: Vec<Arc<AclCounter>> = acl
            .deny_lists()
            .into_iter()
            .map(|l| {
                prev.and_then(|p| p.counters.iter().find(|c| c.list == l))
                    .map(Arc::clone)
                    .unwrap_or_else(|| {
                        Arc::new(AclCounter {
                            list: l.to_string(),
                            dropped: AtomicU64::new(0),
                        })
                    })
            })
            .collect();
        let slot = |l: &str| counters.iter().position(|c| c.list == l).unwrap_or(0) as u16;
        let mut by_len: Vec<(u8, FastMap<u128, Rule>)> = Vec::new();
        for r in &acl.rules {
            let base = if r.prefix.addr.is_ipv4() { 96 } else { 0 };
            let len = base + r.prefix.len;
            let net = addr_to_u128(r.prefix.addr) & mask(len);
            let rule = Rule {
                allow: r.allow,
                counter: if r.allow { 0 } else { slot(&r.list) },
            };
            match by_len.iter_mut().find(|(l, _)| *l == len) {
                Some((_, m)) => {
                    m.insert(net, rule);
                }
                None => {
                    let mut m = FastMap::default();
                    m.insert(net, rule);
                    by_len.push((len, m));
                }
            }
        }
        by_len.sort_by_key(|b| std::cmp::Reverse(b.0));
        Some(Arc::new(VipAcl {
            by_len,
            default_deny: acl.default_deny.then(|| slot("allow")),
            counters,
            source: acl.clone(),
        }))
    }

    /// [`VipAcl::build`], or `prev` itself when its lists are the same (a version that did
    /// not change them shares them).
    pub fn carried(acl: &SourceAcl, prev: Option<&Arc<VipAcl>>) -> Option<Arc<VipAcl>> {
        match prev {
            Some(p) if p.source == *acl => Some(Arc::clone(p)),
            _ => VipAcl::build(acl, prev.map(|p| &**p)),
        }
    }

    /// `None` when `src` (IPv4 mapped) may reach the VIP, else the counter its drop goes to.
    #[inline]
    pub fn check(&self, src: u128) -> Option<u16> {
        for (len, m) in &self.by_len {
            if let Some(r) = m.get(&(src & mask(*len))) {
                return (!r.allow).then_some(r.counter);
            }
        }
        self.default_deny
    }

    /// Counts a drop under counter `c` (see [`VipAcl::check`]).
    #[inline]
    pub fn count(&self, c: u16) {
        if let Some(k) = self.counters.get(usize::from(c)) {
            k.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether `src` may reach the VIP, counting a drop when not.
    #[inline]
    pub fn admits(&self, src: u128) -> bool {
        match self.check(src) {
            None => true,
            Some(c) => {
                self.count(c);
                false
            }
        }
    }
}

impl VipEntry {
    /// Whether client `src` may reach the VIP, counting the drop when not.
    #[inline(always)]
    pub fn admits(&self, src: u128) -> bool {
        self.acl.as_ref().is_none_or(|a| a.admits(src))
    }

    /// Whether client `src` may reach the VIP, counting nothing.
    #[inline]
    pub fn allows(&self, src: u128) -> bool {
        self.acl.as_ref().is_none_or(|a| a.check(src).is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::{AclRule, Prefix};

    fn acl(rules: &[(&str, bool, &str)], default_deny: bool) -> SourceAcl {
        SourceAcl {
            rules: rules
                .iter()
                .map(|(p, allow, list)| AclRule {
                    prefix: Prefix::parse(p).unwrap(),
                    allow: *allow,
                    list: list.to_string(),
                })
                .collect(),
            default_deny,
        }
    }

    fn src(s: &str) -> u128 {
        addr_to_u128(s.parse().unwrap())
    }

    #[test]
    fn the_engine_agrees_with_the_config_walk() {
        let a = acl(
            &[
                ("10.0.0.0/8", true, "office"),
                ("10.1.0.0/16", false, "deny"),
                ("10.1.2.0/24", true, "allow"),
                ("0.0.0.0/0", false, "world"),
                ("2001:db8::/32", true, "allow"),
            ],
            true,
        );
        let v = VipAcl::build(&a, None).unwrap();
        for s in [
            "10.9.9.9",
            "10.1.9.9",
            "10.1.2.9",
            "192.0.2.1",
            "2001:db8::7",
            "2001:db9::7",
        ] {
            let ip = s.parse().unwrap();
            assert_eq!(
                v.check(src(s)).is_none(),
                a.decide(ip).allowed(),
                "source {s}"
            );
        }
        let names: Vec<&str> = v.counters.iter().map(|c| c.list.as_str()).collect();
        assert_eq!(names, ["deny", "world", "allow"]);
        assert_eq!(v.check(src("10.1.9.9")), Some(0));
        assert_eq!(v.check(src("192.0.2.1")), Some(1));
        assert_eq!(v.check(src("2001:db9::7")), Some(2));
        assert!(!v.admits(src("10.1.9.9")));
        assert_eq!(v.counters[0].dropped.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn counters_carry_over_by_list_name() {
        let a = acl(&[("10.1.0.0/16", false, "bad")], false);
        let v1 = VipAcl::build(&a, None).unwrap();
        v1.count(0);
        let b = acl(
            &[
                ("10.1.0.0/16", false, "bad"),
                ("10.2.0.0/16", false, "worse"),
            ],
            false,
        );
        let v2 = VipAcl::build(&b, Some(&v1)).unwrap();
        assert_eq!(v2.counters[0].dropped.load(Ordering::Relaxed), 1);
        assert_eq!(v2.counters[1].dropped.load(Ordering::Relaxed), 0);
        assert!(VipAcl::build(&SourceAcl::default(), None).is_none());
    }
}
