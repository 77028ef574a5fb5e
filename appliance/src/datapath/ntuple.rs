//! ntuple rules that steer FullNAT return traffic to the queue of the worker that owns it.
//!
//! Worker `w` of `W` allocates the FullNAT local ports `p` with `p % W == w` and serves
//! queue `w` (among others) of every interface. When `W` is a power of two, `p % W` is the
//! port's low bits, so `W` rules per (SNAT address, protocol) and interface, matching the
//! destination address and those bits, send every return frame to queue `w`, where the
//! owner's socket receives it and no handoff is needed. Rules follow the SNAT addresses
//! the control plane steers ([`Datapath::set_return_keys`](super::Datapath::set_return_keys))
//! and are removed at stop.
//!
//! Where the driver has no ntuple filters (veth, most virtual NICs: `EOPNOTSUPP`), with a
//! worker count that is not a power of two, or when the driver refuses a rule, the handoff
//! rings (`handoff`) carry those frames instead; the reason is logged once per interface and
//! shown in the interface's status. The handoff stays on in every case, so a frame that a
//! rule has not caught yet (or an ICMP error, which no rule matches) still reaches its owner.

use std::net::IpAddr;

use sys::ethtool::{self, L4, NtupleRule};

use super::steer::ReturnKey;
use crate::config::model::Protocol;

/// How FullNAT return traffic reaches its owning worker on one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnSteering {
    /// One worker: every frame reaches the owner, whatever its queue.
    OneWorker,
    /// No FullNAT addresses are steered: nothing to do.
    Idle,
    /// The NIC steers by ntuple rules (this many installed).
    Ntuple(usize),
    /// The driver has no ntuple filters (`EOPNOTSUPP`): the handoff rings carry them.
    Unsupported,
    /// The worker count is not a power of two, which port masks cannot express: handoff.
    NotPowerOfTwo,
    /// The driver refused a rule with this errno: handoff.
    Refused(i32),
}

impl ReturnSteering {
    /// What the operator reads in the API and the log.
    pub fn describe(self) -> String {
        match self {
            ReturnSteering::OneWorker => "one worker".into(),
            ReturnSteering::Idle => "no FullNAT addresses".into(),
            ReturnSteering::Ntuple(n) => format!("ntuple ({n} rules)"),
            ReturnSteering::Unsupported => {
                "handoff: the driver has no ntuple filters (EOPNOTSUPP)".into()
            }
            ReturnSteering::NotPowerOfTwo => {
                "handoff: the worker count is not a power of two".into()
            }
            ReturnSteering::Refused(errno) => format!(
                "handoff: the driver refused an ntuple rule ({})",
                std::io::Error::from_raw_os_error(errno)
            ),
        }
    }
}

/// The rules one interface holds and how its return traffic is steered.
#[derive(Debug)]
struct Iface {
    name: String,
    /// Locations of the installed rules.
    installed: Vec<u32>,
    status: ReturnSteering,
    /// The reason for the handoff was logged already.
    told: bool,
}

/// Every datapath interface's ntuple rules.
#[derive(Debug)]
pub(super) struct Ntuple {
    workers: u32,
    ifaces: Vec<Iface>,
    /// The (SNAT address, protocol) pairs the rules are for.
    wanted: Vec<(IpAddr, L4)>,
}

/// The rules that send every FullNAT local port of worker `w` to queue `w`.
fn rules_for(wanted: &[(IpAddr, L4)], workers: u32) -> Vec<NtupleRule> {
    let mask = (workers - 1) as u16;
    wanted
        .iter()
        .flat_map(|&(dst, proto)| {
            (0..workers).map(move |w| NtupleRule {
                dst,
                proto,
                port: w as u16,
                port_mask: mask,
                queue: w,
            })
        })
        .collect()
}

impl Ntuple {
    /// Nothing installed yet on `interfaces`, for `workers` workers.
    pub(super) fn new(interfaces: &[String], workers: u32) -> Ntuple {
        let status = if workers <= 1 {
            ReturnSteering::OneWorker
        } else {
            ReturnSteering::Idle
        };
        Ntuple {
            workers,
            ifaces: interfaces
                .iter()
                .map(|name| Iface {
                    name: name.clone(),
                    installed: Vec::new(),
                    status,
                    told: false,
                })
                .collect(),
            wanted: Vec::new(),
        }
    }

    /// How interface `i` steers return traffic now.
    pub(super) fn status(&self, i: usize) -> ReturnSteering {
        self.ifaces
            .get(i)
            .map_or(ReturnSteering::OneWorker, |f| f.status)
    }

    /// Follows the FullNAT addresses of `keys`: when they changed, replaces every
    /// interface's rules.
    pub(super) fn follow(&mut self, keys: &[ReturnKey]) {
        if self.workers <= 1 {
            return;
        }
        let mut wanted: Vec<(IpAddr, L4)> = keys
            .iter()
            .filter_map(|k| match *k {
                ReturnKey::Local { addr, proto, .. } => Some((
                    addr,
                    match proto {
                        Protocol::Tcp => L4::Tcp,
                        Protocol::Udp => L4::Udp,
                    },
                )),
                ReturnKey::Backend { .. } | ReturnKey::Outbound { .. } => None,
            })
            .collect();
        wanted.sort_by_key(|(a, p)| (*a, *p == L4::Udp));
        wanted.dedup();
        if wanted == self.wanted {
            return;
        }
        self.clear();
        self.wanted = wanted;
        let rules = rules_for(&self.wanted, self.workers);
        let power_of_two = self.workers.is_power_of_two();
        for f in &mut self.ifaces {
            f.status = if self.wanted.is_empty() {
                ReturnSteering::Idle
            } else if !power_of_two {
                ReturnSteering::NotPowerOfTwo
            } else if f.status == ReturnSteering::Unsupported {
                // The driver said so once; it will not change its mind.
                ReturnSteering::Unsupported
            } else {
                install(f, &rules)
            };
            if !matches!(f.status, ReturnSteering::Idle | ReturnSteering::Ntuple(_)) && !f.told {
                f.told = true;
                tracing::warn!(
                    interface = %f.name,
                    workers = self.workers,
                    steering = %f.status.describe(),
                    "FullNAT return traffic reaches its worker by software handoff"
                );
            }
        }
    }

    /// Removes every rule installed (at stop, and before a new set).
    pub(super) fn clear(&mut self) {
        for f in &mut self.ifaces {
            for loc in f.installed.drain(..) {
                if let Err(e) = ethtool::delete_ntuple(&f.name, loc) {
                    tracing::error!(interface = %f.name, location = loc, error = %e, "cannot remove ntuple rule");
                }
            }
            if let ReturnSteering::Ntuple(_) = f.status {
                f.status = ReturnSteering::Idle;
            }
        }
        self.wanted.clear();
    }
}

/// Installs `rules` on `f`; on the first refusal removes what it installed and says why.
fn install(f: &mut Iface, rules: &[NtupleRule]) -> ReturnSteering {
    for r in rules {
        match ethtool::insert_ntuple(&f.name, r) {
            Ok(loc) => f.installed.push(loc),
            Err(e) => {
                for loc in f.installed.drain(..) {
                    let _ = ethtool::delete_ntuple(&f.name, loc);
                }
                let errno = e.raw_os_error().unwrap_or(0);
                return if errno == libc::EOPNOTSUPP {
                    ReturnSteering::Unsupported
                } else {
                    ReturnSteering::Refused(errno)
                };
            }
        }
    }
    tracing::info!(interface = %f.name, rules = rules.len(), "ntuple rules steer FullNAT return traffic");
    ReturnSteering::Ntuple(rules.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_gets_its_port_class_on_its_queue() {
        let a: IpAddr = "10.0.0.100".parse().expect("literal");
        let rules = rules_for(&[(a, L4::Tcp), (a, L4::Udp)], 4);
        assert_eq!(rules.len(), 8);
        for r in &rules {
            assert_eq!(r.port_mask, 3);
            assert_eq!(u32::from(r.port), r.queue);
        }
        // Every port matches exactly one rule per protocol, the one of its owner.
        for port in [1024u16, 1025, 40_001, 65_535] {
            let hits: Vec<_> = rules
                .iter()
                .filter(|r| r.proto == L4::Tcp && port & r.port_mask == r.port)
                .collect();
            assert_eq!(hits.len(), 1);
            assert_eq!(hits[0].queue, u32::from(port) % 4);
        }
    }

    #[test]
    fn a_driver_without_ntuple_is_said_once_and_left_to_the_handoff() {
        let mut n = Ntuple::new(&["nosuchif7".to_string()], 4);
        assert_eq!(n.status(0), ReturnSteering::Idle);
        let key = |a: &str| ReturnKey::Local {
            addr: a.parse().expect("literal"),
            port: 0,
            proto: Protocol::Udp,
        };
        n.follow(&[key("10.0.0.100")]);
        // A missing interface is refused (ENODEV), not a crash; the handoff carries on.
        assert!(
            matches!(n.status(0), ReturnSteering::Refused(_)),
            "{:?}",
            n.status(0)
        );
        assert!(n.ifaces[0].told);
        n.follow(&[]);
        assert_eq!(n.status(0), ReturnSteering::Idle);
        let mut three = Ntuple::new(&["nosuchif7".to_string()], 3);
        three.follow(&[key("10.0.0.100")]);
        assert_eq!(three.status(0), ReturnSteering::NotPowerOfTwo);
        let mut one = Ntuple::new(&["nosuchif7".to_string()], 1);
        one.follow(&[key("10.0.0.100")]);
        assert_eq!(one.status(0), ReturnSteering::OneWorker);
    }
}
