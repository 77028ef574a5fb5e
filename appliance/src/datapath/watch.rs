//! The datapath watches itself: what it needs on each interface can be taken away under it
//! by another tool (`ip link set dev IF xdp off`, a second XDP loader, a channel change, the
//! link going down), and a datapath that only checked at start would keep attracting
//! traffic it no longer forwards. [`Datapath::watch`] is a cheap check the control loop runs
//! a few times a second: the interface still exists and is up with a link, the program
//! attached in its hook is ours (by program id), its queue count is the one the AF_XDP
//! sockets were bound for. What it may repair it repairs at once, with the same loaded
//! program (so its maps, the flow cache and flood state, stay): a program gone is attached
//! again, a changed queue count gets every socket re-bound and the workers restarted with
//! the handlers they had. Another program in our place is not fought: the watch names it
//! and leaves it until an operator takes the interface back ([`Datapath::reclaim`]).
//!
//! Which state an interface is in is a pure function of what a check observed
//! ([`state_of`]); the control loop decides what a state means for BGP (a VIP is announced
//! only while every datapath interface forwards).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::steer::{Attached, MAX_QUEUES};
use super::{AttachMode, Datapath, DatapathError, lookup_interfaces, open_sockets, queue_count};
use crate::config::model::XdpMode;

/// Whether a datapath interface forwards, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LinkState {
    /// Our program is attached, the sockets are bound for every queue, the link is up.
    #[default]
    Forwarding,
    /// The interface is down or has no carrier.
    LinkDown,
    /// Our program is gone and could not be attached again.
    Detached { error: String },
    /// Another program is attached in our place; it stays until an operator reclaims the
    /// interface.
    Foreign {
        id: u32,
        name: String,
        mode: AttachMode,
    },
    /// The queue count changed and the sockets could not be bound for the new queues.
    Unbound { error: String },
    /// The interface is gone.
    Missing,
}

impl LinkState {
    /// True while frames for the engine reach it through this interface.
    pub fn forwarding(&self) -> bool {
        matches!(self, LinkState::Forwarding)
    }

    /// Lower-case name for metrics labels and documents.
    pub fn name(&self) -> &'static str {
        match self {
            LinkState::Forwarding => "forwarding",
            LinkState::LinkDown => "link_down",
            LinkState::Detached { .. } => "detached",
            LinkState::Foreign { .. } => "foreign",
            LinkState::Unbound { .. } => "unbound",
            LinkState::Missing => "missing",
        }
    }

    /// The state in words, for `sluice ctl status`, the console and events.
    pub fn describe(&self) -> String {
        match self {
            LinkState::Forwarding => "forwarding".into(),
            LinkState::LinkDown => "link down".into(),
            LinkState::Detached { error } => {
                format!(
                    "not forwarding: the steering program is gone and cannot be attached again: {error}"
                )
            }
            LinkState::Foreign { id, name, mode } => format!(
                "not forwarding: another XDP program holds the interface: id {id} ({name}), {}; \
                 `sluice ctl datapath reclaim` takes it back",
                mode.name()
            ),
            LinkState::Unbound { error } => {
                format!("not forwarding: AF_XDP sockets cannot be bound for the queues: {error}")
            }
            LinkState::Missing => "not forwarding: the interface is gone".into(),
        }
    }
}

/// One thing the watch did or saw on an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// Our program was gone and is attached again (same program, same maps).
    Reattached { interface: String, mode: AttachMode },
    /// The queue count changed; every socket was bound again for the new count.
    Rebound {
        interface: String,
        from: u32,
        to: u32,
    },
    /// An operator took the interface back from another program.
    Reclaimed {
        interface: String,
        id: u32,
        name: String,
    },
    /// The interface's state changed.
    State { interface: String, state: LinkState },
}

impl WatchEvent {
    /// What happened, for the counter's label: the action, or the new state's name.
    pub fn name(&self) -> &'static str {
        match self {
            WatchEvent::Reattached { .. } => "reattached",
            WatchEvent::Rebound { .. } => "rebound",
            WatchEvent::Reclaimed { .. } => "reclaimed",
            WatchEvent::State { state, .. } => state.name(),
        }
    }

    /// True when it tells of something taken away (a state that does not forward).
    pub fn is_fault(&self) -> bool {
        matches!(self, WatchEvent::State { state, .. } if !state.forwarding())
    }

    /// The event's sentence for the event log and the log.
    pub fn message(&self) -> String {
        match self {
            WatchEvent::Reattached { interface, mode } => format!(
                "datapath {interface}: the steering program was detached by someone else; \
                 attached again ({}, same maps: flow cache and flood state kept)",
                mode.name()
            ),
            WatchEvent::Rebound {
                interface,
                from,
                to,
            } => format!(
                "datapath {interface}: queue count changed from {from} to {to}; AF_XDP \
                 sockets bound again on every queue"
            ),
            WatchEvent::Reclaimed {
                interface,
                id,
                name,
            } => format!(
                "datapath {interface}: taken back from XDP program id {id} ({name}) by the \
                 operator"
            ),
            WatchEvent::State { interface, state } => {
                format!("datapath {interface}: {}", state.describe())
            }
        }
    }
}

/// What one check (or a reclaim) did and saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchReport {
    /// In order; empty when nothing changed.
    pub events: Vec<WatchEvent>,
    /// Every interface's state now, in configuration order.
    pub interfaces: Vec<(String, LinkState)>,
}

impl WatchReport {
    /// The interfaces that do not forward, each with its state in words.
    pub fn faults(&self) -> Vec<String> {
        self.interfaces
            .iter()
            .filter(|(_, s)| !s.forwarding())
            .map(|(i, s)| format!("{i}: {}", s.describe()))
            .collect()
    }
}

/// What a check observed on one interface, after the repairs it made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub present: bool,
    /// Ours (`Ok`), another's, or gone and not put back (the error).
    pub program: Result<(), Holder>,
    pub up: bool,
    /// Why the sockets are not bound for the interface's queues, if they are not.
    pub unbound: Option<String>,
}

/// Who holds the hook when our program does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    Other {
        id: u32,
        name: String,
        mode: AttachMode,
    },
    Nobody(String),
}

/// The state an interface is in after a check observed `o`: the first thing that keeps it
/// from forwarding, the most fundamental first.
pub fn state_of(o: &Observed) -> LinkState {
    if !o.present {
        return LinkState::Missing;
    }
    match &o.program {
        Err(Holder::Other { id, name, mode }) => {
            return LinkState::Foreign {
                id: *id,
                name: name.clone(),
                mode: *mode,
            };
        }
        Err(Holder::Nobody(error)) => {
            return LinkState::Detached {
                error: error.clone(),
            };
        }
        Ok(()) => {}
    }
    if let Some(error) = &o.unbound {
        return LinkState::Unbound {
            error: error.clone(),
        };
    }
    if o.up {
        LinkState::Forwarding
    } else {
        LinkState::LinkDown
    }
}

fn xdp_mode(m: AttachMode) -> XdpMode {
    match m {
        AttachMode::Native => XdpMode::Native,
        AttachMode::Generic => XdpMode::Generic,
    }
}

impl Datapath {
    /// One check of every interface, repairing what it may (see the module's paragraph);
    /// reports what it did and every state that changed. Runs in the datapath's network
    /// namespace, like `start`.
    pub fn watch(&mut self) -> WatchReport {
        let mut events = Vec::new();
        let rebind = self.check_queues();
        let unbound = match rebind {
            Some(from) => self.rebind_reporting(from, &mut events),
            None => None,
        };
        for k in 0..self.interfaces.len() {
            let o = self.observe(k, unbound.clone(), &mut events);
            let now = state_of(&o);
            let i = &mut self.interfaces[k];
            if i.state != now {
                i.state = now.clone();
                events.push(WatchEvent::State {
                    interface: i.name.clone(),
                    state: now,
                });
            }
        }
        self.report(events)
    }

    fn report(&self, events: Vec<WatchEvent>) -> WatchReport {
        WatchReport {
            events,
            interfaces: self
                .interfaces
                .iter()
                .map(|i| (i.name.clone(), i.state.clone()))
                .collect(),
        }
    }

    /// The queue counts the sockets were bound for, when any interface's count changed (or
    /// a re-bind is still owed).
    fn check_queues(&self) -> Option<Vec<u32>> {
        let from: Vec<u32> = self.interfaces.iter().map(|i| i.queues).collect();
        let owed = self.parked.lock().is_ok_and(|p| !p.is_empty())
            || self
                .interfaces
                .iter()
                .any(|i| matches!(i.state, LinkState::Unbound { .. }));
        let changed = self.interfaces.iter().any(|i| {
            nix::net::if_::if_nametoindex(i.name.as_str()).is_ok()
                && queue_count(&i.name).min(MAX_QUEUES) != i.queues
        });
        (owed || changed).then_some(from)
    }

    /// Re-binds every socket; an event per interface whose count changed, or the error.
    fn rebind_reporting(&mut self, from: Vec<u32>, events: &mut Vec<WatchEvent>) -> Option<String> {
        match self.rebind() {
            Ok(()) => {
                for (i, was) in self.interfaces.iter().zip(from) {
                    if i.queues != was {
                        events.push(WatchEvent::Rebound {
                            interface: i.name.clone(),
                            from: was,
                            to: i.queues,
                        });
                    }
                }
                None
            }
            Err(e) => Some(e.to_string()),
        }
    }

    /// What interface `k` looks like now, after putting our program back when nobody
    /// holds its hook.
    fn observe(
        &mut self,
        k: usize,
        unbound: Option<String>,
        events: &mut Vec<WatchEvent>,
    ) -> Observed {
        let (name, ifindex, mode) = {
            let i = &self.interfaces[k];
            (i.name.clone(), i.ifindex, i.xdp_mode)
        };
        let present = nix::net::if_::if_nametoindex(name.as_str()) == Ok(ifindex);
        if !present {
            return Observed {
                present,
                program: Ok(()),
                up: false,
                unbound,
            };
        }
        let attached = self.steer().attached_on(&name, ifindex);
        let program = match attached {
            Ok(Attached::Ours(_)) => Ok(()),
            Ok(Attached::Other { id, name, mode }) => Err(Holder::Other { id, name, mode }),
            Ok(Attached::Nothing) => match self.reattach(&name, ifindex, mode) {
                Ok(mode) => {
                    self.interfaces[k].xdp_mode = mode;
                    events.push(WatchEvent::Reattached {
                        interface: name.clone(),
                        mode,
                    });
                    Ok(())
                }
                Err(e) => Err(Holder::Nobody(e.to_string())),
            },
            Err(e) => Err(Holder::Nobody(e.to_string())),
        };
        Observed {
            present,
            program,
            up: sys::xsk::link_up(&name).unwrap_or(true),
            unbound,
        }
    }

    /// Attaches the loaded program again where nobody holds the hook, in the mode it had.
    fn reattach(
        &self,
        name: &str,
        ifindex: u32,
        mode: AttachMode,
    ) -> Result<AttachMode, DatapathError> {
        self.steer().attach(name, ifindex, xdp_mode(mode))
    }

    /// Binds a socket on every queue of every interface again (their counts read anew) and
    /// restarts the workers, as many as before, with the handlers they had: their
    /// connection tables go on. The program stays held meanwhile (frames for the engine
    /// that find no socket are dropped and counted, never the kernel's). When it fails
    /// half-way the handlers are parked for the next try.
    fn rebind(&mut self) -> Result<(), DatapathError> {
        let handlers = self.join_workers();
        let n = handlers.len();
        self.sockets.clear();
        self.stop = Arc::new(AtomicBool::new(false));
        self.bells.clear();
        if n == 0 {
            return Err(DatapathError::Thread(std::io::Error::other(
                "every datapath worker is gone",
            )));
        }
        let opened = lookup_interfaces(&self.cfg).and_then(|ifaces| {
            let sockets = open_sockets(&self.steer(), &self.cfg, &ifaces, n)?;
            Ok((ifaces, sockets))
        });
        let (ifaces, sockets) = match opened {
            Ok(o) => o,
            Err(e) => {
                *self.parked.get_mut().unwrap_or_else(|p| p.into_inner()) = handlers;
                return Err(e);
            }
        };
        for ((status, i), zc) in self
            .interfaces
            .iter_mut()
            .zip(&ifaces)
            .zip(&sockets.zero_copy)
        {
            status.ifindex = i.ifindex;
            status.queues = i.queues;
            status.zero_copy = zc.all;
            status.zero_copy_refused = zc.refused.clone();
        }
        self.sockets = sockets.fds;
        self.spawn_workers(&ifaces, sockets.ports, handlers)
    }

    /// Takes every interface another program holds back from it, in one step (the
    /// operator's `sluice ctl datapath reclaim`), attaches ours where nothing is attached,
    /// then checks every interface as [`Datapath::watch`] does.
    pub fn reclaim(&mut self) -> Result<WatchReport, DatapathError> {
        let mut events = Vec::new();
        for k in 0..self.interfaces.len() {
            let (name, ifindex) = (self.interfaces[k].name.clone(), self.interfaces[k].ifindex);
            let attached = self.steer().attached_on(&name, ifindex)?;
            if let Attached::Other {
                id,
                name: prog,
                mode,
            } = attached
            {
                let taken = self.steer().take_back(&name, ifindex, id, mode);
                let mode = taken?;
                self.interfaces[k].xdp_mode = mode;
                tracing::warn!(interface = %name, id, program = %prog, "datapath: taken back");
                events.push(WatchEvent::Reclaimed {
                    interface: name,
                    id,
                    name: prog,
                });
            }
        }
        let mut r = self.watch();
        events.append(&mut r.events);
        r.events = events;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> Observed {
        Observed {
            present: true,
            program: Ok(()),
            up: true,
            unbound: None,
        }
    }

    #[test]
    fn an_interface_forwards_only_with_everything_in_place() {
        assert_eq!(state_of(&seen()), LinkState::Forwarding);
        let down = Observed {
            up: false,
            ..seen()
        };
        assert_eq!(state_of(&down), LinkState::LinkDown);
        let unbound = Observed {
            unbound: Some("EBUSY".into()),
            ..down.clone()
        };
        assert!(matches!(state_of(&unbound), LinkState::Unbound { .. }));
        let gone = Observed {
            present: false,
            ..unbound.clone()
        };
        assert_eq!(state_of(&gone), LinkState::Missing);
    }

    #[test]
    fn another_program_is_named_before_anything_else_the_interface_lacks() {
        let o = Observed {
            program: Err(Holder::Other {
                id: 42,
                name: "xdp_pass".into(),
                mode: AttachMode::Native,
            }),
            up: false,
            unbound: Some("x".into()),
            ..seen()
        };
        let s = state_of(&o);
        assert_eq!(s.name(), "foreign");
        assert!(!s.forwarding());
        let said = s.describe();
        assert!(said.contains("id 42 (xdp_pass)"), "{said}");
        assert!(said.contains("sluice ctl datapath reclaim"), "{said}");
        let detached = Observed {
            program: Err(Holder::Nobody("EBUSY".into())),
            ..seen()
        };
        assert_eq!(state_of(&detached).name(), "detached");
    }

    #[test]
    fn a_report_lists_what_does_not_forward_and_events_say_which_are_faults() {
        let r = WatchReport {
            events: vec![
                WatchEvent::Reattached {
                    interface: "eth0".into(),
                    mode: AttachMode::Native,
                },
                WatchEvent::State {
                    interface: "eth1".into(),
                    state: LinkState::LinkDown,
                },
            ],
            interfaces: vec![
                ("eth0".into(), LinkState::Forwarding),
                ("eth1".into(), LinkState::LinkDown),
            ],
        };
        assert_eq!(r.faults(), vec!["eth1: link down".to_string()]);
        assert!(!r.events[0].is_fault());
        assert!(r.events[1].is_fault());
        assert_eq!(r.events[0].name(), "reattached");
        assert_eq!(r.events[1].name(), "link_down");
    }
}
