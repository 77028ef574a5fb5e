//! The control loop's decisions as tables: each row builds the state of a config's first
//! version, feeds inputs at fixed moments after its start, and compares the effects (one
//! line each, as the executor logs them) exactly, then checks what the state holds. No
//! datapath, speaker, prober or socket: what the executor would bring back (a config file
//! read, a commit's staged half) is an input of the row.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{first, handle};
use crate::config::{Config, LoadError};
use crate::control::change::{BackendOp, CommitError, Request};
use crate::control::fleet::Membership;
use crate::control::input::{Input, Now, Reload, ReplyTo, Staged, Tick};
use crate::control::kept::Keeper;
use crate::control::neighbours::{NetEvent, NextHops};
use crate::control::state::{First, State};
use crate::datapath::DatapathError;
use crate::lb::BackendId;
use crate::lb::exec::Serial;

/// The state running the first version of `text`, at `now`.
pub(crate) fn state_at(text: &str, now: Instant) -> State {
    let file = testkit::unit::parse(text);
    let f = First {
        path: "sluice.toml".into(),
        file: Arc::new(file),
        overrides: HashMap::new(),
        withdrawn: BTreeSet::new(),
        keeper: Keeper::default(),
        next_hops: NextHops::default(),
        exec: &Serial,
        health: HashMap::new(),
        versions_from: 0,
        outbound: Vec::new(),
    };
    first(f, &Now::at(now)).unwrap_or_else(|e| panic!("{e}"))
}

/// The state running the first version of `text`.
pub(crate) fn state(text: &str) -> State {
    state_at(text, Instant::now())
}

/// One VIP of one backend, and a BGP peer (the BGP and datapath-watch decisions' tests).
pub(crate) const ONE_BACKEND: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[bgp]
asn = 65001
router_id = "192.0.2.1"
[[bgp.peer]]
address = "192.0.2.254"
asn = 65000

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
[[vip.backend]]
address = "10.1.0.11"
port = 8080
"#;

/// One VIP of two NAT backends behind a TCP check, and a BGP peer.
const BASE: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[bgp]
asn = 65001
router_id = "192.0.2.1"
[[bgp.peer]]
address = "192.0.2.254"
asn = 65000

[[health_check]]
name = "tcp"
kind = "tcp"

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
health_check = "tcp"
[[vip.backend]]
address = "10.1.0.11"
port = 8080
[[vip.backend]]
address = "10.1.0.12"
port = 8080
"#;

/// `BASE` with a second VIP.
fn two_vips() -> String {
    format!(
        "{BASE}\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.20\"\nport = 443\n\
         [[vip.backend]]\naddress = \"10.1.0.21\"\nport = 8443\n"
    )
}

/// `BASE` whose checks start up and whose pool ramps for 9 s.
fn slow_start() -> String {
    BASE.replace(
        "health_check = \"tcp\"\n",
        "health_check = \"tcp\"\nslow_start = \"9s\"\n",
    )
    .replace("kind = \"tcp\"\n", "kind = \"tcp\"\ninitial = \"up\"\n")
}

/// `BASE` whose backends are decided by an agent (HAProxy's agent-check) that starts up.
fn agent() -> String {
    BASE.replace(
        "kind = \"tcp\"\n",
        "kind = \"agent\"\nport = 9777\ninitial = \"up\"\n",
    )
}

/// `agent()` on a fleet member.
fn agent_member() -> String {
    agent() + "\n[fleet]\nname = \"edge\"\nendpoints = [\"127.0.0.1:2379\"]\n"
}

/// Backend `addr`'s agent asks for half its weight, its verdict unchanged (up).
fn agent_half(st: &State, addr: &str) -> Input {
    let mut tr = transition(st, addr, true);
    tr.from = health::Health::Up;
    tr.reason = health::Reason::Passed(health::Pass::Agent(HALF));
    tr.agent = Some(HALF);
    Input::Transitions(vec![tr])
}

const HALF: health::AgentState = health::AgentState {
    admin: health::AgentAdmin::Ready,
    weight_percent: Some(50),
};

fn config(text: &str) -> Result<Config, LoadError> {
    Ok(testkit::unit::parse(text))
}

/// A transition of the probe of backend `addr` of `st`'s config.
fn transition(st: &State, addr: &str, up: bool) -> health::Transition {
    let addr: IpAddr = addr.parse().expect("literal");
    let key = st
        .targets
        .keys()
        .find(|k| k.address == addr)
        .expect("a probe of the backend")
        .clone();
    let (from, to, reason) = match up {
        true => (
            health::Health::Down,
            health::Health::Up,
            health::Reason::Passed(health::Pass::Connected),
        ),
        false => (
            health::Health::Up,
            health::Health::Down,
            health::Reason::Failed(health::Failure::Refused),
        ),
    };
    health::Transition {
        key,
        from,
        to,
        reason,
        at: Instant::now(),
        probe: 3,
        agent: None,
    }
}

fn ups(st: &State) -> Input {
    Input::Transitions(vec![
        transition(st, "10.1.0.11", true),
        transition(st, "10.1.0.12", true),
    ])
}

fn drain(_: &State) -> Input {
    Input::Api {
        request: Request::Backend {
            vip: "web".into(),
            backend: "10.1.0.11".into(),
            op: BackendOp::Action(api::BackendAction::Drain),
        },
        reply: ReplyTo(1),
    }
}

fn staged_ok(_: &State) -> Input {
    Input::Staged(Staged {
        result: Ok(()),
        steered: true,
        speaker: true,
    })
}

/// One input at `at` ms after the row's start, and the effects it must give.
struct Step {
    at: u64,
    input: fn(&State) -> Input,
    effects: &'static [&'static str],
}

/// A row: a config's first version, with or without a speaker running (and as a fleet
/// member when the config has `[fleet]`), then steps, then what the state must hold.
struct Row {
    name: &'static str,
    config: fn() -> String,
    speaker: bool,
    steps: &'static [Step],
    check: fn(&State),
}

/// A fleet member's own file: no VIP, the fleet brings them.
const MEMBER: &str = "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\n\
                      [fleet]\nname = \"edge\"\nendpoints = [\"127.0.0.1:2379\"]\n";

/// The fleet's revision 3.
const REVISION: &str = "[[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n\
                        [[vip.backend]]\naddress = \"10.1.0.11\"\nport = 8080\n";

fn member() -> String {
    MEMBER.to_string()
}

/// The fleet as the member sees it at etcd revision `at`: revision 3 of the config, and
/// its activation when `activated`.
fn fleet_view(at: u64, activated: bool, fresh: bool) -> Input {
    let view = ::fleet::View {
        revision: at,
        config: Some(::fleet::view::ConfigAt {
            revision: 3,
            text: REVISION.to_string(),
        }),
        activation: activated.then(|| ::fleet::Activation {
            revision: 3,
            by: "lb1".into(),
            at_ms: 0,
            all_ready: true,
        }),
        ..Default::default()
    };
    Input::Fleet(::fleet::client::Update::View {
        view: Box::new(view),
        fresh,
    })
}

fn base() -> String {
    BASE.to_string()
}

const ROWS: &[Row] = &[
    Row {
        name: "an API reload that adds a VIP stages its steering keys, then runs whole",
        config: base,
        speaker: true,
        steps: &[
            Step {
                at: 0,
                input: |_| Input::Api {
                    request: Request::Reload,
                    reply: ReplyTo(7),
                },
                effects: &["load config"],
            },
            Step {
                at: 1,
                input: |_| Input::Loaded {
                    reload: Reload::Api(ReplyTo(7)),
                    file: config(&two_vips()),
                },
                effects: &["stage [steering]"],
            },
            Step {
                at: 2,
                input: staged_ok,
                effects: &[
                    "withdraw all but [192.0.2.10, 192.0.2.20] (VIP removed)",
                    "flood settings",
                    "publish version 2",
                    "event commit: version 2: API reload",
                    "stateless rings of version 2",
                    "announce [192.0.2.20] (initial done)",
                    "view",
                    "event reload: API reload: version 2 running",
                    "reply 7: config reloaded: version 2",
                ],
            },
        ],
        check: |st| {
            assert_eq!(st.config.vips.len(), 2);
            assert_eq!((st.tables.version, st.versions.last()), (2, 2));
            assert_eq!(
                st.steering.vips.len(),
                2,
                "the staged keys are the running ones"
            );
        },
    },
    Row {
        name: "a reload the file rejects changes nothing and takes no version",
        config: base,
        speaker: true,
        steps: &[
            Step {
                at: 0,
                input: |_| Input::Hangup,
                effects: &["load config"],
            },
            Step {
                at: 1,
                input: |_| Input::Loaded {
                    reload: Reload::Signal,
                    file: Err(LoadError::Empty {
                        path: "sluice.toml".into(),
                    }),
                },
                effects: &[
                    "count reloads rejected",
                    "event reload: SIGHUP reload: rejected, running version kept: 1 error(s)",
                ],
            },
        ],
        check: |st| assert_eq!((st.tables.version, st.versions.last()), (1, 1)),
    },
    Row {
        name: "a steering-map failure leaves nothing of the version running",
        config: base,
        speaker: true,
        steps: &[
            Step {
                at: 0,
                input: |_| Input::Loaded {
                    reload: Reload::Api(ReplyTo(2)),
                    file: config(&two_vips()),
                },
                effects: &["stage [steering]"],
            },
            Step {
                at: 1,
                input: |_| {
                    let e = DatapathError::InterfaceMissing("eth9".into());
                    Input::Staged(Staged {
                        result: Err(vec![CommitError::Steering(e)]),
                        steered: false,
                        speaker: true,
                    })
                },
                effects: &[
                    "count reloads rejected",
                    "event reload: API reload: rejected, running version kept: config \
                     rejected: not applied, running version kept: steering maps: interface \
                     eth9 does not exist (check [appliance] interfaces and `ip link`); the XDP \
                     program keeps steering the running version's keys",
                    "reply 2: error: config rejected: not applied, running version kept: \
                     steering maps: interface eth9 does not exist (check [appliance] interfaces \
                     and `ip link`); the XDP program keeps steering the running version's keys",
                ],
            },
        ],
        check: |st| {
            assert_eq!(st.config.vips.len(), 1, "the running config stays");
            assert_eq!(st.steering.vips.len(), 1, "and its keys");
            assert_eq!(st.tables.version, 1, "nothing published");
            assert_eq!(st.versions.last(), 2, "the number is used");
            assert!(st.pending.is_none());
        },
    },
    Row {
        name: "an operator's drain runs as a version and answers after the flow-cache walk",
        config: base,
        speaker: true,
        steps: &[Step {
            at: 0,
            input: drain,
            effects: &[
                "withdraw all but [192.0.2.10] (VIP removed)",
                "flood settings",
                "publish version 2",
                "event commit: version 2: operator: drain 10.1.0.11:8080 of VIP web",
                "stateless rings of version 2",
                "announce [] (initial done)",
                "view",
                "event operator: operator: drain 10.1.0.11:8080 of VIP web",
                "reply 1: drain 10.1.0.11:8080 of VIP web: version 2",
            ],
        }],
        check: |st| {
            let b = &st.config.vips[0].backends[0];
            assert_eq!(b.state, crate::config::BackendState::Drain);
            assert_eq!(st.overrides.len(), 1);
        },
    },
    Row {
        name: "health transitions wait for the batch and run as one version",
        config: base,
        speaker: true,
        steps: &[
            Step {
                at: 0,
                input: ups,
                effects: &[
                    "count health transitions",
                    "event health: tcp tcp 10.1.0.11:8080: down -> up (connected)",
                    "count health transitions",
                    "event health: tcp tcp 10.1.0.12:8080: down -> up (connected)",
                ],
            },
            Step {
                at: 10,
                input: |_| Input::HealthDue,
                effects: &[
                    "publish version 2",
                    "event commit: version 2: health: 2 transitions",
                    "announce [192.0.2.10] (initial done)",
                    "view",
                    "count health commits",
                ],
            },
        ],
        check: |st| {
            assert_eq!(st.health.values().filter(|up| **up).count(), 2);
            assert_eq!(st.due().health, None, "the batch was taken");
        },
    },
    Row {
        name: "an agent's answer alone makes a full version with the weight it asks for",
        config: agent,
        speaker: false,
        steps: &[
            Step {
                at: 0,
                input: |st| agent_half(st, "10.1.0.11"),
                effects: &[
                    "count health transitions",
                    "event health: tcp agent 10.1.0.11:9777: up -> up (agent: ready 50%)",
                ],
            },
            Step {
                at: 10,
                input: |_| Input::HealthDue,
                effects: &[
                    "flood settings",
                    "publish version 2",
                    "event commit: version 2: health change",
                    "stateless rings of version 2",
                    "view",
                    "count health commits",
                ],
            },
        ],
        check: |st| {
            assert_eq!(st.tables.backends[0].weight, 50, "half of 100");
            assert_eq!(st.tables.backends[1].weight, 100);
            assert_eq!(
                st.file_config.vips[0].backends[0].weight, 100,
                "the operator's weight stays"
            );
            assert!(st.overrides.is_empty(), "no override written for it");
            assert!(!st.policy.agents_changed, "applied");
        },
    },
    Row {
        name: "a fleet member applies its agent's answer at the health batch",
        config: agent_member,
        speaker: false,
        steps: &[
            Step {
                at: 0,
                input: |st| agent_half(st, "10.1.0.12"),
                effects: &[
                    "count health transitions",
                    "event health: tcp agent 10.1.0.12:9777: up -> up (agent: ready 50%)",
                ],
            },
            Step {
                at: 10,
                input: |_| Input::HealthDue,
                effects: &[
                    "flood settings",
                    "publish version 2",
                    "event commit: version 2: health change",
                    "stateless rings of version 2",
                    "view",
                    "count health commits",
                    "fleet status",
                    "view",
                ],
            },
        ],
        check: |st| {
            assert_eq!(st.tables.backends[1].weight, 50, "half of 100");
            assert_eq!(st.tables.backends[0].weight, 100);
        },
    },
    Row {
        name: "a backend back up ramps, and its next level is a version of its own",
        config: slow_start,
        speaker: false,
        steps: &[
            Step {
                at: 0,
                input: |st| Input::Transitions(vec![transition(st, "10.1.0.12", false)]),
                effects: &[
                    "count health transitions",
                    "event health: tcp tcp 10.1.0.12:8080: up -> down (connection refused)",
                ],
            },
            Step {
                at: 10,
                input: |_| Input::HealthDue,
                effects: &[
                    "flood settings",
                    "publish version 2",
                    "event commit: version 2: health change",
                    "stateless rings of version 2",
                    "view",
                    "count health commits",
                ],
            },
            Step {
                at: 100,
                input: |st| Input::Transitions(vec![transition(st, "10.1.0.12", true)]),
                effects: &[
                    "count health transitions",
                    "event health: tcp tcp 10.1.0.12:8080: down -> up (connected)",
                ],
            },
            Step {
                at: 150,
                input: |_| Input::HealthDue,
                effects: &[
                    "flood settings",
                    "publish version 3",
                    "event commit: version 3: health change",
                    "stateless rings of version 3",
                    "view",
                    "count health commits",
                ],
            },
            Step {
                at: 1150,
                input: |_| Input::RampDue,
                effects: &[
                    "flood settings",
                    "publish version 4",
                    "event commit: version 4: slow start: 1 backend(s) ramping",
                    "stateless rings of version 4",
                    "view",
                ],
            },
        ],
        check: |st| {
            assert_eq!(st.ramps.len(), 1);
            assert_eq!(st.tables.backends[1].weight, 20, "the second level of 100");
            assert!(st.due().ramp.is_some(), "the next level is due");
        },
    },
    Row {
        name: "a neighbour that resolves makes an egress-only version; the same again none",
        config: base,
        speaker: true,
        steps: &[
            Step {
                at: 0,
                input: |_| Input::Net(vec![neighbour()]),
                effects: &[
                    "publish version 2",
                    "event commit: version 2: routes or neighbours changed",
                    "stateless rings of version 2",
                    "view",
                ],
            },
            Step {
                at: 1,
                input: |_| Input::Net(vec![neighbour(), neighbour()]),
                effects: &[],
            },
        ],
        check: |st| assert_eq!(st.next_hops.net.neighbours.len(), 1),
    },
    Row {
        name: "the tick syncs BGP, asks for next hops and reports a drop spike",
        config: base,
        speaker: true,
        steps: &[Step {
            at: 0,
            input: |_| {
                Input::Tick(Box::new(Tick {
                    datapath: Err("not attached".into()),
                    peers: Vec::new(),
                    drops: 5000,
                    probes_not_run: 0,
                    table_full: 0,
                }))
            },
            effects: &[
                "announce [] (initial done)",
                "event drops: 5000 frames dropped in the last second (see \
                 sluice_dropped_packets_total by reason)",
                "view",
            ],
        }],
        check: |st| assert_eq!(st.last.ticks, 1),
    },
    Row {
        name: "the tick tells the workers when flood mode switches and reports a full table at most every 10 s",
        config: base,
        speaker: false,
        steps: &[
            Step {
                at: 0,
                input: |_| flood_tick(1, 3),
                effects: &[
                    "event drops: connection table full: 3 new flows refused since the last \
                     report (NAT and DR answered from the ring, FullNAT dropped); raise \
                     [appliance] conntrack_capacity (see sluice_conntrack_evicted_total and \
                     sluice_stateless_answers_total)",
                    "event flood: flood mode on (1 CPU(s) above [flood] threshold): DR VIPs' \
                     first packets are answered in XDP from their rings, other VIPs' first \
                     packets of sources over their rate are dropped in XDP",
                    "flood mode on",
                    "view with datapath counters",
                ],
            },
            Step {
                at: 1,
                input: |_| flood_tick(2, 9),
                effects: &["view with datapath counters"],
            },
            Step {
                at: 2,
                input: |_| flood_tick(0, 9),
                effects: &[
                    "event flood: flood mode off: 0 first packets answered in XDP, 0 shed, 0 \
                     admitted while it was on",
                    "flood mode off",
                    "view with datapath counters",
                ],
            },
        ],
        check: |st| assert_eq!(st.last.table_full, 3, "6 more wait for the next report"),
    },
    Row {
        name: "a [bgp] change whose new speaker does not start keeps the running version",
        config: base,
        speaker: true,
        steps: &[
            Step {
                at: 0,
                input: |_| Input::Loaded {
                    reload: Reload::Api(ReplyTo(4)),
                    file: config(&other_asn()),
                },
                effects: &["stage [speaker]"],
            },
            Step {
                at: 1,
                input: |_| {
                    let e = bgp::SpeakerError::Listen {
                        addr: "0.0.0.0:179".parse().expect("literal"),
                        source: std::io::ErrorKind::AddrInUse.into(),
                    };
                    Input::Staged(Staged {
                        result: Err(vec![CommitError::Speaker(e)]),
                        steered: false,
                        speaker: true,
                    })
                },
                effects: &[
                    "announce [] (initial done)",
                    "count reloads rejected",
                    "event reload: API reload: rejected, running version kept: config \
                     rejected: not applied, running version kept: [bgp]: the new speaker did \
                     not start: bgp: cannot listen on 0.0.0.0:179: address in use",
                    "reply 4: error: config rejected: not applied, running version kept: \
                     [bgp]: the new speaker did not start: bgp: cannot listen on 0.0.0.0:179: \
                     address in use",
                ],
            },
        ],
        check: |st| {
            let asn = st.config.bgp.as_ref().map(|b| b.asn);
            assert_eq!(asn, Some(65001), "the running [bgp] stays");
            assert_eq!(st.tables.version, 1);
        },
    },
    Row {
        name: "a fleet revision is prepared, reported, and switched to when activated",
        config: member,
        speaker: false,
        steps: &[
            Step {
                at: 0,
                input: |_| fleet_view(5, false, true),
                effects: &[
                    "event commit: fleet edge: etcd reached at revision 5",
                    "fleet: report",
                    "fleet: load revision 3",
                    "fleet status",
                ],
            },
            Step {
                at: 1,
                input: |_| Input::RevisionLoaded {
                    revision: 3,
                    text: REVISION.to_string(),
                    file: config(&format!("{MEMBER}\n{REVISION}")),
                },
                effects: &["fleet: report"],
            },
            Step {
                at: 2,
                input: |_| fleet_view(6, true, false),
                effects: &["stage [steering]", "fleet status"],
            },
            Step {
                at: 3,
                input: |_| {
                    Input::Staged(Staged {
                        result: Ok(()),
                        steered: true,
                        speaker: false,
                    })
                },
                effects: &[
                    "flood settings",
                    "publish version 2",
                    "event commit: version 2: fleet revision 3",
                    "stateless rings of version 2",
                    "view",
                    "event commit: fleet: revision 3 running (table version 2)",
                    "fleet: keep revision 3",
                    "fleet: report",
                ],
            },
        ],
        check: |st| {
            assert_eq!(st.tables.version, 2, "the tables built at the prepare run");
            assert_eq!(st.versions.last(), 2, "no number taken for the activation");
            let f = st.fleet.as_ref().expect("a member");
            assert_eq!(f.member.running(), 3);
            assert_eq!(f.running_doc.as_ref().map(|d| d.0), Some(3));
            assert!(!f.waiting && f.actions.is_empty());
        },
    },
    Row {
        name: "SIGTERM leaves BGP through graceful shutdown, then detaches",
        config: base,
        speaker: true,
        steps: &[Step {
            at: 0,
            input: |_| Input::Terminate("SIGTERM"),
            effects: &[
                "stopping",
                "stop speaker (graceful shutdown, withdraw)",
                "stop datapath",
            ],
        }],
        check: |_| {},
    },
    Row {
        name: "announce and withdraw need a speaker",
        config: base,
        speaker: false,
        steps: &[Step {
            at: 0,
            input: |_| Input::Api {
                request: Request::Announce {
                    vip: "web".into(),
                    announce: false,
                },
                reply: ReplyTo(3),
            },
            effects: &[
                "reply 3: error: BGP is not running (no [bgp] section, or the speaker failed \
                 to start)",
            ],
        }],
        check: |st| assert!(st.withdrawn.is_empty()),
    },
    Row {
        name: "with [sync], the VIPs wait for the peers' flows before they are announced",
        config: with_sync,
        speaker: true,
        steps: &[
            Step {
                at: 0,
                input: ups,
                effects: &[
                    "count health transitions",
                    "event health: tcp tcp 10.1.0.11:8080: down -> up (connected)",
                    "count health transitions",
                    "event health: tcp tcp 10.1.0.12:8080: down -> up (connected)",
                ],
            },
            Step {
                at: 10,
                input: |_| Input::HealthDue,
                effects: &[
                    "publish version 2",
                    "event commit: version 2: health: 2 transitions",
                    "announce [] (initial done)",
                    "view",
                    "count health commits",
                ],
            },
            Step {
                at: 20,
                input: |_| Input::SyncCaughtUp,
                effects: &[
                    "event bgp: sync: caught up with the peers' flows; announcing",
                    "announce [192.0.2.10] (initial done)",
                ],
            },
        ],
        check: |st| assert!(!st.sync_hold),
    },
];

/// `BASE` with connection sync.
fn with_sync() -> String {
    format!(
        "{BASE}\n[sync]\nlisten = \"10.0.0.11:7946\"\npeers = [\"10.0.0.12:7946\"]\n\
         key_file = \"/etc/sluice/sync.key\"\n"
    )
}

/// `BASE` with another ASN: the speaker restarts.
fn other_asn() -> String {
    BASE.replace("asn = 65001", "asn = 65002")
}

fn neighbour() -> NetEvent {
    NetEvent::Neighbour {
        ifindex: 2,
        addr: "10.1.0.11".parse().expect("literal"),
        mac: Some(wire::MacAddr([2, 0, 0, 0, 0, 1])),
    }
}

#[test]
fn the_control_loop_s_decisions() {
    let mut wrong = Vec::new();
    for row in ROWS {
        let t0 = Instant::now();
        let mut st = state_at(&(row.config)(), t0);
        st.speaker = row.speaker;
        if let Some(f) = &st.config.fleet {
            let name = st.config.appliance.name.clone();
            st.fleet = Some(Membership::new(f, &name, None, t0));
        }
        for (i, step) in row.steps.iter().enumerate() {
            let now = Now::at(t0 + Duration::from_millis(step.at));
            let input = (step.input)(&st);
            let got: Vec<String> = handle(&mut st, input, &now)
                .iter()
                .map(ToString::to_string)
                .collect();
            if got != step.effects {
                wrong.push(format!(
                    "{}, step {i}:\n  want {:#?}\n  got {got:#?}",
                    row.name, step.effects
                ));
            }
        }
        (row.check)(&st);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A takeover's first version is built on the verdicts the process before ran on (a
/// backend it had down stays out of the ring, where a cold start assumes every backend
/// serves until its check says otherwise) and numbers its versions on from that process's.
#[test]
fn a_takeover_starts_on_the_verdicts_and_versions_handed_over() {
    let file = testkit::unit::parse(BASE);
    let down = BackendId {
        vip: "web".into(),
        address: "10.1.0.12".parse().expect("literal"),
        port: 8080,
    };
    let up = BackendId {
        address: "10.1.0.11".parse().expect("literal"),
        ..down.clone()
    };
    let first_with = |health: HashMap<BackendId, bool>, versions_from: u64| {
        let f = First {
            path: "sluice.toml".into(),
            file: Arc::new(file.clone()),
            overrides: HashMap::new(),
            withdrawn: BTreeSet::new(),
            keeper: Keeper::default(),
            next_hops: NextHops::default(),
            exec: &Serial,
            health,
            versions_from,
            outbound: Vec::new(),
        };
        first(f, &Now::at(Instant::now())).unwrap_or_else(|e| panic!("{e}"))
    };
    let cold = first_with(HashMap::new(), 0);
    let taken = first_with(
        HashMap::from([(up.clone(), true), (down.clone(), false)]),
        41,
    );
    assert_eq!(cold.tables.version, 1);
    assert_eq!(
        taken.tables.version, 42,
        "numbers go on from the old process's"
    );
    assert_eq!(taken.health.get(&down), Some(&false));
    assert_ne!(
        cold.tables.vips[0].ring, taken.tables.vips[0].ring,
        "the handed-over verdict (one backend down) shapes the first ring"
    );
}

/// A tick whose XDP program has flood mode on `cpus` CPUs, the tables having refused
/// `full` new flows so far.
fn flood_tick(cpus: u32, full: u64) -> Input {
    let mut steer = crate::datapath::steer::SteerCounters::default();
    steer.flood.active_cpus = cpus;
    Input::Tick(Box::new(Tick {
        datapath: Ok(crate::datapath::DatapathStats {
            workers: Vec::new(),
            interfaces: Vec::new(),
            steer,
            acl_drops: Default::default(),
        }),
        peers: Vec::new(),
        drops: 0,
        probes_not_run: 0,
        table_full: full,
    }))
}
