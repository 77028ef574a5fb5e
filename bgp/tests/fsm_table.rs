//! The RFC 4271 state machine as tables: each row puts an `Fsm` in a state, feeds one
//! event at a fixed `now`, and compares the exact actions and the next state. No sockets.

use bgp::codec::{
    Capability, DecodeError, HeaderError, Message, Notification, Open, RouteRefresh, Update,
};
use bgp::fsm::{
    Action, ConnId, DownReason, Event, Fsm, FsmConfig, LARGE_HOLD, Session, State, Timer,
};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const LOCAL_ID: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const OUT: ConnId = ConnId(1);
const IN: ConnId = ConnId(2);

fn cfg(passive: bool) -> FsmConfig {
    FsmConfig {
        local_asn: 65001,
        peer_asn: 65000,
        router_id: LOCAL_ID,
        hold_time: 9,
        passive,
        connect_retry: Duration::from_secs(2),
        connect_retry_max: Duration::from_secs(16),
        idle_hold: Duration::from_secs(1),
        idle_hold_max: Duration::from_secs(8),
        capabilities: vec![
            Capability::FourOctetAs(65001),
            Capability::Multiprotocol { afi: 1, safi: 1 },
        ],
    }
}

fn peer_open(id: [u8; 4], hold: u16) -> Open {
    Open::new(
        65000,
        hold,
        Ipv4Addr::from(id),
        vec![
            Capability::FourOctetAs(65000),
            Capability::Multiprotocol { afi: 1, safi: 1 },
        ],
    )
}

fn local_open() -> Open {
    Fsm::new(cfg(false)).local_open()
}

fn notif(code: u8, subcode: u8) -> Notification {
    Notification {
        code,
        subcode,
        data: vec![],
    }
}

fn collision() -> Notification {
    Notification::cease(7, "")
}

/// Builds a machine in `state` (active open unless `passive`) over connection OUT, at `t`.
fn machine(state: State, passive: bool, t: Instant) -> Fsm {
    let mut f = Fsm::new(cfg(passive));
    let steps: Vec<Event> = match state {
        State::Idle => vec![],
        State::Connect => vec![Event::ManualStart],
        State::Active if passive => vec![Event::ManualStart],
        State::Active => vec![Event::ManualStart, Event::TcpFailed(ConnId(0))],
        State::OpenSent => vec![Event::ManualStart, Event::TcpConnected(OUT)],
        State::OpenConfirm => vec![
            Event::ManualStart,
            Event::TcpConnected(OUT),
            Event::Message(OUT, Message::Open(peer_open([10, 0, 0, 1], 30))),
        ],
        State::Established => vec![
            Event::ManualStart,
            Event::TcpConnected(OUT),
            Event::Message(OUT, Message::Open(peer_open([10, 0, 0, 1], 30))),
            Event::Message(OUT, Message::Keepalive),
        ],
    };
    for e in steps {
        f.on_event(e, t);
    }
    assert_eq!(f.state(), state, "setup reached the wrong state");
    f
}

fn secs(t: Instant, s: u64) -> Option<Instant> {
    Some(t + Duration::from_secs(s))
}

fn idle_after_error(reason: DownReason, established: bool, t: Instant) -> Vec<Action> {
    vec![
        Action::SetTimer(Timer::ConnectRetry, None),
        Action::SetTimer(Timer::Hold, None),
        Action::SetTimer(Timer::Keepalive, None),
        Action::SetTimer(Timer::IdleHold, secs(t, 1)),
        Action::Down {
            reason,
            established,
        },
    ]
}

struct Row {
    name: &'static str,
    from: State,
    passive: bool,
    event: Event,
    to: State,
    actions: Vec<Action>,
}

fn rows(t: Instant) -> Vec<Row> {
    let open_out = Action::Send(OUT, Message::Open(local_open()));
    let send_notif = |c, n| Action::Send(c, Message::Notification(n));
    let mut rows = vec![
        // Idle
        Row {
            name: "Idle + ManualStart (active) -> Connect, connect and arm ConnectRetry",
            from: State::Idle,
            passive: false,
            event: Event::ManualStart,
            to: State::Connect,
            actions: vec![
                Action::SetTimer(Timer::IdleHold, None),
                Action::Connect,
                Action::SetTimer(Timer::ConnectRetry, secs(t, 2)),
            ],
        },
        Row {
            name: "Idle + ManualStart (passive) -> Active, no connect",
            from: State::Idle,
            passive: true,
            event: Event::ManualStart,
            to: State::Active,
            actions: vec![Action::SetTimer(Timer::IdleHold, None)],
        },
        Row {
            name: "Idle refuses an incoming connection",
            from: State::Idle,
            passive: false,
            event: Event::TcpAccepted(IN),
            to: State::Idle,
            actions: vec![Action::Close(IN)],
        },
        Row {
            name: "Idle ignores stray timers",
            from: State::Idle,
            passive: false,
            event: Event::TimerExpired(Timer::Hold),
            to: State::Idle,
            actions: vec![],
        },
        Row {
            name: "Idle: IdleHold expiry without a start does nothing",
            from: State::Idle,
            passive: false,
            event: Event::TimerExpired(Timer::IdleHold),
            to: State::Idle,
            actions: vec![],
        },
        // Connect
        Row {
            name: "Connect + TcpConnected -> OpenSent, OPEN and large hold timer",
            from: State::Connect,
            passive: false,
            event: Event::TcpConnected(OUT),
            to: State::OpenSent,
            actions: vec![
                Action::SetTimer(Timer::ConnectRetry, None),
                open_out.clone(),
                Action::SetTimer(Timer::Hold, Some(t + LARGE_HOLD)),
            ],
        },
        Row {
            name: "Connect + TcpAccepted -> OpenSent on the incoming one, abort ours",
            from: State::Connect,
            passive: false,
            event: Event::TcpAccepted(IN),
            to: State::OpenSent,
            actions: vec![
                Action::AbortConnect,
                Action::SetTimer(Timer::ConnectRetry, None),
                Action::Send(IN, Message::Open(local_open())),
                Action::SetTimer(Timer::Hold, Some(t + LARGE_HOLD)),
            ],
        },
        Row {
            name: "Connect + attempt failed -> Active with backed-off ConnectRetry",
            from: State::Connect,
            passive: false,
            event: Event::TcpFailed(ConnId(0)),
            to: State::Active,
            actions: vec![Action::SetTimer(Timer::ConnectRetry, secs(t, 4))],
        },
        Row {
            name: "Connect + ConnectRetry expiry -> abort and retry, backed off",
            from: State::Connect,
            passive: false,
            event: Event::TimerExpired(Timer::ConnectRetry),
            to: State::Connect,
            actions: vec![
                Action::AbortConnect,
                Action::Connect,
                Action::SetTimer(Timer::ConnectRetry, secs(t, 4)),
            ],
        },
        // Active
        Row {
            name: "Active + ConnectRetry expiry -> Connect",
            from: State::Active,
            passive: false,
            event: Event::TimerExpired(Timer::ConnectRetry),
            to: State::Connect,
            actions: vec![
                Action::Connect,
                Action::SetTimer(Timer::ConnectRetry, secs(t, 4)),
            ],
        },
        Row {
            name: "Active (passive) ignores ConnectRetry",
            from: State::Active,
            passive: true,
            event: Event::TimerExpired(Timer::ConnectRetry),
            to: State::Active,
            actions: vec![],
        },
        Row {
            name: "Active (passive) + TcpAccepted -> OpenSent",
            from: State::Active,
            passive: true,
            event: Event::TcpAccepted(IN),
            to: State::OpenSent,
            actions: vec![
                Action::SetTimer(Timer::ConnectRetry, None),
                Action::Send(IN, Message::Open(local_open())),
                Action::SetTimer(Timer::Hold, Some(t + LARGE_HOLD)),
            ],
        },
        // OpenSent
        Row {
            name: "OpenSent + OPEN -> OpenConfirm, hold = min(9, 30), keepalive = 3 s",
            from: State::OpenSent,
            passive: false,
            event: Event::Message(OUT, Message::Open(peer_open([10, 0, 0, 1], 30))),
            to: State::OpenConfirm,
            actions: vec![
                Action::Send(OUT, Message::Keepalive),
                Action::SetTimer(Timer::Keepalive, secs(t, 3)),
                Action::SetTimer(Timer::Hold, secs(t, 9)),
            ],
        },
        Row {
            name: "OpenSent + OPEN with hold 3 -> hold 3, keepalive 1 s",
            from: State::OpenSent,
            passive: false,
            event: Event::Message(OUT, Message::Open(peer_open([10, 0, 0, 1], 3))),
            to: State::OpenConfirm,
            actions: vec![
                Action::Send(OUT, Message::Keepalive),
                Action::SetTimer(Timer::Keepalive, secs(t, 1)),
                Action::SetTimer(Timer::Hold, secs(t, 3)),
            ],
        },
        Row {
            name: "OpenSent + OPEN with hold 0 -> no keepalives, no hold timer",
            from: State::OpenSent,
            passive: false,
            event: Event::Message(OUT, Message::Open(peer_open([10, 0, 0, 1], 0))),
            to: State::OpenConfirm,
            actions: vec![
                Action::Send(OUT, Message::Keepalive),
                Action::SetTimer(Timer::Keepalive, None),
                Action::SetTimer(Timer::Hold, None),
            ],
        },
        Row {
            name: "OpenSent + OPEN from the wrong AS -> Bad Peer AS",
            from: State::OpenSent,
            passive: false,
            event: Event::Message(
                OUT,
                Message::Open(Open::new(
                    65009,
                    90,
                    Ipv4Addr::new(10, 0, 0, 1),
                    vec![Capability::FourOctetAs(65009)],
                )),
            ),
            to: State::Idle,
            actions: [
                vec![send_notif(OUT, notif(2, 2)), Action::Close(OUT)],
                idle_after_error(DownReason::Sent(notif(2, 2)), false, t),
            ]
            .concat(),
        },
        Row {
            name: "OpenSent + OPEN without 4-octet AS -> Unsupported Capability",
            from: State::OpenSent,
            passive: false,
            event: Event::Message(
                OUT,
                Message::Open(Open::new(65000, 90, Ipv4Addr::new(10, 0, 0, 1), vec![])),
            ),
            to: State::Idle,
            actions: {
                let n = Notification {
                    code: 2,
                    subcode: 7,
                    data: vec![65, 4, 0, 0, 0xfd, 0xe9],
                };
                [
                    vec![send_notif(OUT, n.clone()), Action::Close(OUT)],
                    idle_after_error(DownReason::Sent(n), false, t),
                ]
                .concat()
            },
        },
        Row {
            name: "OpenSent + KEEPALIVE -> FSM error (RFC 6608 subcode 1)",
            from: State::OpenSent,
            passive: false,
            event: Event::Message(OUT, Message::Keepalive),
            to: State::Idle,
            actions: [
                vec![send_notif(OUT, notif(5, 1)), Action::Close(OUT)],
                idle_after_error(DownReason::Sent(notif(5, 1)), false, t),
            ]
            .concat(),
        },
        Row {
            name: "OpenSent + TCP failure -> Active, ConnectRetry",
            from: State::OpenSent,
            passive: false,
            event: Event::TcpFailed(OUT),
            to: State::Active,
            actions: vec![
                Action::Close(OUT),
                Action::SetTimer(Timer::Hold, None),
                Action::SetTimer(Timer::ConnectRetry, secs(t, 4)),
            ],
        },
        Row {
            name: "OpenSent + hold timer -> Hold Timer Expired",
            from: State::OpenSent,
            passive: false,
            event: Event::TimerExpired(Timer::Hold),
            to: State::Idle,
            actions: [
                vec![send_notif(OUT, notif(4, 0)), Action::Close(OUT)],
                idle_after_error(DownReason::Sent(notif(4, 0)), false, t),
            ]
            .concat(),
        },
        Row {
            name: "OpenSent + malformed message -> its NOTIFICATION",
            from: State::OpenSent,
            passive: false,
            event: Event::DecodeError(OUT, DecodeError::Header(HeaderError::BadType(9))),
            to: State::Idle,
            actions: {
                let n = Notification {
                    code: 1,
                    subcode: 3,
                    data: vec![9],
                };
                [
                    vec![send_notif(OUT, n.clone()), Action::Close(OUT)],
                    idle_after_error(DownReason::Sent(n), false, t),
                ]
                .concat()
            },
        },
        Row {
            name: "OpenSent + NOTIFICATION -> Idle, no reply",
            from: State::OpenSent,
            passive: false,
            event: Event::Message(OUT, Message::Notification(notif(6, 5))),
            to: State::Idle,
            actions: [
                vec![Action::Close(OUT)],
                idle_after_error(DownReason::Received(notif(6, 5)), false, t),
            ]
            .concat(),
        },
        // OpenConfirm
        Row {
            name: "OpenConfirm + KEEPALIVE -> Established",
            from: State::OpenConfirm,
            passive: false,
            event: Event::Message(OUT, Message::Keepalive),
            to: State::Established,
            actions: vec![
                Action::SetTimer(Timer::Hold, secs(t, 9)),
                Action::Established(Session {
                    conn: OUT,
                    hold_time: 9,
                    local_open: local_open(),
                    peer_open: peer_open([10, 0, 0, 1], 30),
                }),
            ],
        },
        Row {
            name: "OpenConfirm + keepalive timer -> KEEPALIVE, rearm",
            from: State::OpenConfirm,
            passive: false,
            event: Event::TimerExpired(Timer::Keepalive),
            to: State::OpenConfirm,
            actions: vec![
                Action::Send(OUT, Message::Keepalive),
                Action::SetTimer(Timer::Keepalive, secs(t, 3)),
            ],
        },
        Row {
            name: "OpenConfirm + UPDATE -> FSM error subcode 2",
            from: State::OpenConfirm,
            passive: false,
            event: Event::Message(OUT, Message::Update(Update::default())),
            to: State::Idle,
            actions: [
                vec![send_notif(OUT, notif(5, 2)), Action::Close(OUT)],
                idle_after_error(DownReason::Sent(notif(5, 2)), false, t),
            ]
            .concat(),
        },
        Row {
            name: "OpenConfirm + TCP failure -> Idle",
            from: State::OpenConfirm,
            passive: false,
            event: Event::TcpFailed(OUT),
            to: State::Idle,
            actions: [
                vec![Action::Close(OUT)],
                idle_after_error(DownReason::ConnectionLost, false, t),
            ]
            .concat(),
        },
        // Established
        Row {
            name: "Established + KEEPALIVE -> restart hold timer",
            from: State::Established,
            passive: false,
            event: Event::Message(OUT, Message::Keepalive),
            to: State::Established,
            actions: vec![Action::SetTimer(Timer::Hold, secs(t, 9))],
        },
        Row {
            name: "Established + UPDATE -> hold restarted, update delivered",
            from: State::Established,
            passive: false,
            event: Event::Message(OUT, Message::Update(Update::default())),
            to: State::Established,
            actions: vec![
                Action::SetTimer(Timer::Hold, secs(t, 9)),
                Action::UpdateReceived(Update::default()),
            ],
        },
        Row {
            name: "Established + ROUTE-REFRESH -> refresh requested",
            from: State::Established,
            passive: false,
            event: Event::Message(
                OUT,
                Message::RouteRefresh(RouteRefresh {
                    afi: 1,
                    subtype: 0,
                    safi: 1,
                }),
            ),
            to: State::Established,
            actions: vec![
                Action::SetTimer(Timer::Hold, secs(t, 9)),
                Action::RouteRefreshRequested(RouteRefresh {
                    afi: 1,
                    subtype: 0,
                    safi: 1,
                }),
            ],
        },
        Row {
            name: "Established + OPEN -> FSM error subcode 3",
            from: State::Established,
            passive: false,
            event: Event::Message(OUT, Message::Open(peer_open([10, 0, 0, 1], 30))),
            to: State::Idle,
            actions: [
                vec![send_notif(OUT, notif(5, 3)), Action::Close(OUT)],
                idle_after_error(DownReason::Sent(notif(5, 3)), true, t),
            ]
            .concat(),
        },
        Row {
            name: "Established + hold timer -> Hold Timer Expired, down",
            from: State::Established,
            passive: false,
            event: Event::TimerExpired(Timer::Hold),
            to: State::Idle,
            actions: [
                vec![send_notif(OUT, notif(4, 0)), Action::Close(OUT)],
                idle_after_error(DownReason::Sent(notif(4, 0)), true, t),
            ]
            .concat(),
        },
        Row {
            name: "Established + BFD down -> Cease/BFD Down (RFC 9384 subcode 10), down",
            from: State::Established,
            passive: false,
            event: Event::BfdDown,
            to: State::Idle,
            actions: [
                vec![send_notif(OUT, notif(6, 10)), Action::Close(OUT)],
                idle_after_error(DownReason::Sent(notif(6, 10)), true, t),
            ]
            .concat(),
        },
        Row {
            name: "Established + too many prefixes -> Cease/Maximum Number of Prefixes (RFC 4486 subcode 1), down",
            from: State::Established,
            passive: false,
            event: Event::PrefixLimit(notif(6, 1)),
            to: State::Idle,
            actions: [
                vec![send_notif(OUT, notif(6, 1)), Action::Close(OUT)],
                idle_after_error(DownReason::Sent(notif(6, 1)), true, t),
            ]
            .concat(),
        },
        Row {
            name: "OpenSent + too many prefixes -> ignored (no UPDATE before Established)",
            from: State::OpenSent,
            passive: false,
            event: Event::PrefixLimit(notif(6, 1)),
            to: State::OpenSent,
            actions: vec![],
        },
        Row {
            name: "OpenConfirm + BFD down -> ignored (nothing to protect yet)",
            from: State::OpenConfirm,
            passive: false,
            event: Event::BfdDown,
            to: State::OpenConfirm,
            actions: vec![],
        },
        Row {
            name: "Idle + BFD down -> ignored",
            from: State::Idle,
            passive: false,
            event: Event::BfdDown,
            to: State::Idle,
            actions: vec![],
        },
        Row {
            name: "Established + NOTIFICATION -> down",
            from: State::Established,
            passive: false,
            event: Event::Message(OUT, Message::Notification(notif(6, 2))),
            to: State::Idle,
            actions: [
                vec![Action::Close(OUT)],
                idle_after_error(DownReason::Received(notif(6, 2)), true, t),
            ]
            .concat(),
        },
        Row {
            name: "Established + TCP failure -> down",
            from: State::Established,
            passive: false,
            event: Event::TcpFailed(OUT),
            to: State::Idle,
            actions: [
                vec![Action::Close(OUT)],
                idle_after_error(DownReason::ConnectionLost, true, t),
            ]
            .concat(),
        },
        Row {
            name: "Established + new incoming connection -> refused with Cease/collision",
            from: State::Established,
            passive: false,
            event: Event::TcpAccepted(IN),
            to: State::Established,
            actions: vec![send_notif(IN, collision()), Action::Close(IN)],
        },
        Row {
            name: "Established ignores messages on unknown connections",
            from: State::Established,
            passive: false,
            event: Event::Message(ConnId(99), Message::Keepalive),
            to: State::Established,
            actions: vec![],
        },
    ];
    // ManualStop from every state.
    let stop = Notification::cease(2, "bye");
    for (from, conn) in [
        (State::Connect, None),
        (State::OpenSent, Some(OUT)),
        (State::OpenConfirm, Some(OUT)),
        (State::Established, Some(OUT)),
    ] {
        let mut actions = Vec::new();
        if let Some(c) = conn {
            actions.push(send_notif(c, stop.clone()));
            actions.push(Action::Close(c));
        } else {
            actions.push(Action::AbortConnect);
        }
        for tm in [
            Timer::ConnectRetry,
            Timer::Hold,
            Timer::Keepalive,
            Timer::IdleHold,
        ] {
            actions.push(Action::SetTimer(tm, None));
        }
        actions.push(Action::Down {
            reason: DownReason::Stopped,
            established: from == State::Established,
        });
        rows.push(Row {
            name: "ManualStop -> Cease, Idle, no restart",
            from,
            passive: false,
            event: Event::ManualStop(stop.clone()),
            to: State::Idle,
            actions,
        });
    }
    rows
}

#[test]
fn transition_table() {
    let t = Instant::now();
    let mut failures = Vec::new();
    for row in rows(t) {
        let mut f = machine(row.from, row.passive, t);
        let got = f.on_event(row.event.clone(), t);
        if got != row.actions || f.state() != row.to {
            failures.push(format!(
                "{} ({:?} + {:?})\n  want {:?} {:#?}\n  got  {:?} {:#?}",
                row.name,
                row.from,
                row.event,
                row.to,
                row.actions,
                f.state(),
                got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn connect_retry_backs_off_exponentially_up_to_the_cap() {
    let t = Instant::now();
    let mut f = machine(State::Connect, false, t);
    let mut delays = Vec::new();
    for _ in 0..6 {
        let a = f.on_event(Event::TimerExpired(Timer::ConnectRetry), t);
        let d = a.iter().find_map(|x| match x {
            Action::SetTimer(Timer::ConnectRetry, Some(d)) => Some(d.duration_since(t).as_secs()),
            _ => None,
        });
        delays.push(d.expect("ConnectRetry armed"));
    }
    assert_eq!(delays, vec![4, 8, 16, 16, 16, 16]);
}

#[test]
fn idle_hold_damps_and_restarts_and_resets_on_established() {
    let t = Instant::now();
    let mut f = machine(State::OpenSent, false, t);
    let mut holds = Vec::new();
    for _ in 0..5 {
        let a = f.on_event(Event::TimerExpired(Timer::Hold), t);
        assert_eq!(f.state(), State::Idle);
        holds.push(
            a.iter()
                .find_map(|x| match x {
                    Action::SetTimer(Timer::IdleHold, Some(d)) => {
                        Some(d.duration_since(t).as_secs())
                    }
                    _ => None,
                })
                .expect("IdleHold armed"),
        );
        let a = f.on_event(Event::TimerExpired(Timer::IdleHold), t);
        assert_eq!(f.state(), State::Connect, "automatic restart");
        assert!(a.contains(&Action::Connect));
        f.on_event(Event::TcpConnected(OUT), t);
    }
    assert_eq!(holds, vec![1, 2, 4, 8, 8]);
    // Reaching Established resets the damping.
    f.on_event(
        Event::Message(OUT, Message::Open(peer_open([10, 0, 0, 1], 30))),
        t,
    );
    f.on_event(Event::Message(OUT, Message::Keepalive), t);
    assert_eq!(f.state(), State::Established);
    let a = f.on_event(Event::TimerExpired(Timer::Hold), t);
    assert!(
        a.contains(&Action::SetTimer(Timer::IdleHold, secs(t, 1))),
        "{a:?}"
    );
}

#[test]
fn manual_stop_disables_automatic_restart() {
    let t = Instant::now();
    let mut f = machine(State::Established, false, t);
    f.on_event(Event::ManualStop(Notification::cease(2, "")), t);
    let a = f.on_event(Event::TimerExpired(Timer::IdleHold), t);
    assert!(a.is_empty());
    assert_eq!(f.state(), State::Idle);
}

/// Collision (§6.8): our outgoing connection is in OpenSent when the peer connects too.
/// Remote identifier higher than ours: the connection the peer opened survives.
#[test]
fn collision_higher_remote_id_keeps_incoming() {
    let t = Instant::now();
    let mut f = machine(State::OpenSent, false, t);
    let a = f.on_event(Event::TcpAccepted(IN), t);
    assert_eq!(a, vec![Action::Send(IN, Message::Open(local_open()))]);
    // OPEN on our outgoing connection first: resolution closes it at once.
    let a = f.on_event(
        Event::Message(OUT, Message::Open(peer_open([10, 0, 0, 9], 30))),
        t,
    );
    assert_eq!(
        a,
        vec![
            Action::Send(OUT, Message::Notification(collision())),
            Action::Close(OUT),
            Action::SetTimer(Timer::Keepalive, None),
            Action::SetTimer(Timer::Hold, Some(t + LARGE_HOLD)),
        ]
    );
    assert_eq!(f.state(), State::OpenSent);
    assert_eq!(f.conn(), Some(IN));
    f.on_event(
        Event::Message(IN, Message::Open(peer_open([10, 0, 0, 9], 30))),
        t,
    );
    f.on_event(Event::Message(IN, Message::Keepalive), t);
    assert_eq!(f.state(), State::Established);
    assert_eq!(f.conn(), Some(IN));
}

/// Remote identifier lower than ours: our own connection survives, the incoming is closed.
#[test]
fn collision_lower_remote_id_keeps_outgoing() {
    let t = Instant::now();
    let mut f = machine(State::OpenConfirm, false, t);
    // We already know the peer (10.0.0.1 < 10.0.0.2): resolve when it connects.
    let a = f.on_event(Event::TcpAccepted(IN), t);
    assert_eq!(
        a,
        vec![
            Action::Send(IN, Message::Open(local_open())),
            Action::Send(IN, Message::Notification(collision())),
            Action::Close(IN),
        ]
    );
    assert_eq!(f.state(), State::OpenConfirm);
    assert_eq!(f.conn(), Some(OUT));
}

/// OPEN arrives first on the second connection, remote id higher: switch to it.
#[test]
fn collision_open_on_second_connection_first() {
    let t = Instant::now();
    let mut f = machine(State::OpenSent, false, t);
    f.on_event(Event::TcpAccepted(IN), t);
    let a = f.on_event(
        Event::Message(IN, Message::Open(peer_open([10, 0, 0, 9], 30))),
        t,
    );
    assert_eq!(
        a,
        vec![
            Action::Send(OUT, Message::Notification(collision())),
            Action::Close(OUT),
            Action::SetTimer(Timer::Keepalive, None),
            Action::SetTimer(Timer::Hold, Some(t + LARGE_HOLD)),
            Action::Send(IN, Message::Keepalive),
            Action::SetTimer(Timer::Keepalive, secs(t, 3)),
            Action::SetTimer(Timer::Hold, secs(t, 9)),
        ]
    );
    assert_eq!(f.state(), State::OpenConfirm);
    assert_eq!(f.conn(), Some(IN));
}

#[test]
fn second_connection_failing_leaves_the_first() {
    let t = Instant::now();
    let mut f = machine(State::OpenSent, false, t);
    f.on_event(Event::TcpAccepted(IN), t);
    let a = f.on_event(Event::TcpFailed(IN), t);
    assert!(a.is_empty());
    assert_eq!(f.conn(), Some(OUT));
    // And if the first fails, a pending second one takes over instead of going Active.
    f.on_event(Event::TcpAccepted(IN), t);
    f.on_event(Event::TcpFailed(OUT), t);
    assert_eq!(f.state(), State::OpenSent);
    assert_eq!(f.conn(), Some(IN));
}

#[test]
fn ibgp_open_with_our_identifier_is_rejected() {
    let t = Instant::now();
    let mut c = cfg(false);
    c.peer_asn = 65001;
    let mut f = Fsm::new(c);
    f.on_event(Event::ManualStart, t);
    f.on_event(Event::TcpConnected(OUT), t);
    let o = Open::new(65001, 90, LOCAL_ID, vec![Capability::FourOctetAs(65001)]);
    let a = f.on_event(Event::Message(OUT, Message::Open(o)), t);
    assert_eq!(a[0], Action::Send(OUT, Message::Notification(notif(2, 3))));
    assert_eq!(f.state(), State::Idle);
}
