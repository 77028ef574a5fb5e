//! The RFC 4271 §8 session state machine as a pure transition function.
//!
//! `Fsm::on_event(event, now) -> Vec<Action>` never touches a socket or reads the clock: the
//! task layer turns socket and timer happenings into [`Event`]s and carries out the returned
//! [`Action`]s (send, close, connect, arm a timer at a deadline). That keeps every transition
//! testable as a table and keeps timing decisions (backoff, hold-time negotiation,
//! connection collision) in one reviewable place.
//!
//! Deviations from the RFC's optional attributes, chosen for a host-route announcer:
//! DelayOpen and SendNOTIFICATIONwithoutOPEN are off; DampPeerOscillations is on (the
//! IdleHold timer doubles after each error and resets once a session reaches Established);
//! ConnectRetry backs off exponentially the same way. Collision detection (§6.8) compares
//! BGP identifiers as soon as an OPEN tells us the remote one, and keeps at most two
//! connections per peer.

use crate::codec::{
    Capability, DecodeError, Message, Notification, Open, OpenError, RouteRefresh, Update, cease,
    code,
};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Hold time used while waiting for the peer's OPEN (RFC 4271 §8.2.2 suggests 4 minutes).
pub const LARGE_HOLD: Duration = Duration::from_secs(240);

/// Session parameters the state machine needs.
#[derive(Debug, Clone)]
pub struct FsmConfig {
    /// Our ASN.
    pub local_asn: u32,
    /// The ASN the peer must announce in its OPEN.
    pub peer_asn: u32,
    /// Our BGP identifier.
    pub router_id: Ipv4Addr,
    /// Hold time we propose, seconds (0 or >= 3).
    pub hold_time: u16,
    /// Never initiate connections; wait for the peer.
    pub passive: bool,
    /// First ConnectRetry interval; doubles per failed attempt.
    pub connect_retry: Duration,
    /// Cap for the ConnectRetry backoff.
    pub connect_retry_max: Duration,
    /// First IdleHold interval after an error; doubles per consecutive error.
    pub idle_hold: Duration,
    /// Cap for the IdleHold backoff.
    pub idle_hold_max: Duration,
    /// Capabilities we advertise (must include 4-octet AS).
    pub capabilities: Vec<Capability>,
}

/// Session states (RFC 4271 §8.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Refusing connections; waiting for a start (or the IdleHold timer).
    Idle,
    /// An outgoing TCP connection is in progress.
    Connect,
    /// Waiting for the peer to connect (and, unless passive, for ConnectRetry).
    Active,
    /// OPEN sent, waiting for the peer's.
    OpenSent,
    /// OPENs exchanged, waiting for the first KEEPALIVE.
    OpenConfirm,
    /// Exchanging routes.
    Established,
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Idle => "Idle",
            State::Connect => "Connect",
            State::Active => "Active",
            State::OpenSent => "OpenSent",
            State::OpenConfirm => "OpenConfirm",
            State::Established => "Established",
        })
    }
}

/// Identifies one TCP connection; the task layer allocates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// The timers the state machine arms as deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Next outgoing connection attempt (or give up on the current one).
    ConnectRetry,
    /// The peer has been silent for the negotiated hold time.
    Hold,
    /// Time to send a KEEPALIVE.
    Keepalive,
    /// Leave Idle after an error (peer oscillation damping).
    IdleHold,
}

/// Inputs to the state machine.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Administrative start (RFC events 1 and 4; passive comes from the config).
    ManualStart,
    /// Administrative stop: send this Cease and go Idle without restarting.
    ManualStop(Notification),
    /// A timer's deadline passed.
    TimerExpired(Timer),
    /// Our outgoing connection attempt succeeded (RFC event 16/17).
    TcpConnected(ConnId),
    /// The peer connected to our listener (RFC event 14).
    TcpAccepted(ConnId),
    /// A connection attempt failed or an open connection closed or errored (RFC event 18).
    TcpFailed(ConnId),
    /// A message arrived on a connection.
    Message(ConnId, Message),
    /// A message on a connection could not be decoded (RFC events 21, 22, 28).
    DecodeError(ConnId, DecodeError),
    /// The BFD session protecting this BGP session went from Up to Down (RFC 5882 §4.3):
    /// an Established session ends at once with Cease/BFD Down (RFC 9384); in any other
    /// state there is nothing to protect yet and the event is ignored.
    BfdDown,
    /// The peer announced more prefixes than it may (RFC 4486): an Established session
    /// ends with this Cease.
    PrefixLimit(Notification),
}

/// Why a session left for Idle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownReason {
    /// Administrative stop.
    Stopped,
    /// We sent this NOTIFICATION (decode error, hold timer, FSM error, bad OPEN).
    Sent(Notification),
    /// The peer sent this NOTIFICATION.
    Received(Notification),
    /// TCP closed or failed without a NOTIFICATION.
    ConnectionLost,
}

impl std::fmt::Display for DownReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DownReason::Stopped => f.write_str("stopped"),
            DownReason::Sent(n) => write!(f, "sent {n}"),
            DownReason::Received(n) => write!(f, "received {n}"),
            DownReason::ConnectionLost => f.write_str("connection lost"),
        }
    }
}

/// What the session negotiated, handed to the task layer on Established.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// The connection that won.
    pub conn: ConnId,
    /// Negotiated hold time in seconds (0: no keepalives, no hold timer).
    pub hold_time: u16,
    /// The OPEN we sent.
    pub local_open: Open,
    /// The OPEN the peer sent.
    pub peer_open: Open,
}

impl Session {
    /// Whether both sides can exchange (afi, unicast) routes. A side without any
    /// Multiprotocol capability implicitly speaks IPv4 unicast only (RFC 4760 §8).
    pub fn family(&self, afi: u16) -> bool {
        let speaks = |o: &Open| {
            let mp = o
                .capabilities
                .iter()
                .any(|c| matches!(c, Capability::Multiprotocol { .. }));
            if mp {
                o.has(&Capability::Multiprotocol {
                    afi,
                    safi: crate::codec::SAFI_UNICAST,
                })
            } else {
                afi == crate::codec::AFI_IPV4
            }
        };
        speaks(&self.local_open) && speaks(&self.peer_open)
    }

    /// Whether both sides advertised the capability.
    pub fn both(&self, c: &Capability) -> bool {
        self.local_open.has(c) && self.peer_open.has(c)
    }
}

/// Outputs of the state machine, carried out in order by the task layer.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Start an outgoing TCP connection attempt.
    Connect,
    /// Abandon the outgoing attempt in progress; whatever it yields later is discarded.
    AbortConnect,
    /// Send a message on a connection.
    Send(ConnId, Message),
    /// Close a connection after flushing what was sent on it.
    Close(ConnId),
    /// Arm a timer at a deadline (`Some`) or cancel it (`None`).
    SetTimer(Timer, Option<Instant>),
    /// The session reached Established.
    Established(Session),
    /// The session left for Idle; `established` tells whether it had been Established.
    Down {
        /// Why.
        reason: DownReason,
        /// Whether routes had been exchanged (the peer now drops ours).
        established: bool,
    },
    /// An UPDATE arrived in Established.
    UpdateReceived(Update),
    /// The peer asked for our routes again (RFC 2918).
    RouteRefreshRequested(RouteRefresh),
}

#[derive(Debug, Clone)]
struct Conn {
    id: ConnId,
    outgoing: bool,
}

/// One peer's state machine.
#[derive(Debug, Clone)]
pub struct Fsm {
    cfg: FsmConfig,
    state: State,
    /// The connection the state refers to (OpenSent onwards).
    conn: Option<Conn>,
    /// A second connection that got our OPEN, kept until collision resolution.
    other: Option<Conn>,
    connecting: bool,
    auto_restart: bool,
    retries: u32,
    errors: u32,
    peer_open: Option<Open>,
    hold: u16,
}

impl Fsm {
    /// A stopped state machine (Idle, no timers).
    pub fn new(cfg: FsmConfig) -> Fsm {
        Fsm {
            cfg,
            state: State::Idle,
            conn: None,
            other: None,
            connecting: false,
            auto_restart: false,
            retries: 0,
            errors: 0,
            peer_open: None,
            hold: 0,
        }
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The connection the session uses, once one carries our OPEN.
    pub fn conn(&self) -> Option<ConnId> {
        self.conn.as_ref().map(|c| c.id)
    }

    /// Replaces the capabilities of the next OPEN (the session in progress keeps what it
    /// negotiated): graceful restart clears its Restart State bit after the first session.
    pub fn set_capabilities(&mut self, capabilities: Vec<Capability>) {
        self.cfg.capabilities = capabilities;
    }

    /// The OPEN this speaker sends.
    pub fn local_open(&self) -> Open {
        Open::new(
            self.cfg.local_asn,
            self.cfg.hold_time,
            self.cfg.router_id,
            self.cfg.capabilities.clone(),
        )
    }

    /// Feeds one event; returns what to do, in order.
    pub fn on_event(&mut self, ev: Event, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        match ev {
            Event::ManualStart => {
                if self.state == State::Idle {
                    self.auto_restart = true;
                    self.errors = 0;
                    self.retries = 0;
                    out.push(Action::SetTimer(Timer::IdleHold, None));
                    self.start(now, &mut out);
                }
            }
            Event::ManualStop(n) => {
                self.auto_restart = false;
                let was = self.state;
                for c in [self.conn.take(), self.other.take()].into_iter().flatten() {
                    out.push(Action::Send(c.id, Message::Notification(n.clone())));
                    out.push(Action::Close(c.id));
                }
                if self.connecting {
                    self.connecting = false;
                    out.push(Action::AbortConnect);
                }
                for t in [
                    Timer::ConnectRetry,
                    Timer::Hold,
                    Timer::Keepalive,
                    Timer::IdleHold,
                ] {
                    out.push(Action::SetTimer(t, None));
                }
                self.state = State::Idle;
                self.peer_open = None;
                if was != State::Idle {
                    out.push(Action::Down {
                        reason: DownReason::Stopped,
                        established: was == State::Established,
                    });
                }
            }
            Event::TimerExpired(t) => self.on_timer(t, now, &mut out),
            Event::TcpConnected(id) => self.on_connected(id, true, now, &mut out),
            Event::TcpAccepted(id) => self.on_connected(id, false, now, &mut out),
            Event::TcpFailed(id) => self.on_tcp_failed(id, now, &mut out),
            Event::Message(id, m) => self.on_message(id, m, now, &mut out),
            Event::BfdDown => {
                if self.state == State::Established {
                    let n = Notification::cease(cease::BFD_DOWN, "");
                    self.fail(DownReason::Sent(n.clone()), Some(n), now, &mut out);
                }
            }
            Event::PrefixLimit(n) => {
                if self.state == State::Established {
                    self.fail(DownReason::Sent(n.clone()), Some(n), now, &mut out);
                }
            }
            Event::DecodeError(id, e) => {
                let n = Notification::from(&e);
                if self.is_other(id) {
                    self.drop_other(Some(n), &mut out);
                } else if self.is_main(id) {
                    self.fail(DownReason::Sent(n.clone()), Some(n), now, &mut out);
                }
            }
        }
        out
    }

    fn is_main(&self, id: ConnId) -> bool {
        self.conn.as_ref().is_some_and(|c| c.id == id)
    }

    fn is_other(&self, id: ConnId) -> bool {
        self.other.as_ref().is_some_and(|c| c.id == id)
    }

    fn backoff(base: Duration, max: Duration, n: u32) -> Duration {
        base.saturating_mul(1u32.checked_shl(n.min(16)).unwrap_or(u32::MAX))
            .min(max)
    }

    /// Leaves Idle: Connect (initiating) or Active (passive).
    fn start(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.cfg.passive {
            self.state = State::Active;
        } else {
            self.enter_connect(now, out);
        }
    }

    fn enter_connect(&mut self, now: Instant, out: &mut Vec<Action>) {
        self.state = State::Connect;
        self.connecting = true;
        out.push(Action::Connect);
        let d = Self::backoff(
            self.cfg.connect_retry,
            self.cfg.connect_retry_max,
            self.retries,
        );
        out.push(Action::SetTimer(Timer::ConnectRetry, Some(now + d)));
    }

    fn on_timer(&mut self, t: Timer, now: Instant, out: &mut Vec<Action>) {
        match (t, self.state) {
            (Timer::IdleHold, State::Idle) if self.auto_restart => self.start(now, out),
            (Timer::ConnectRetry, State::Connect) => {
                // The attempt took too long: give up on it and try again, later each time.
                out.push(Action::AbortConnect);
                self.retries += 1;
                self.enter_connect(now, out);
            }
            (Timer::ConnectRetry, State::Active) if !self.cfg.passive => {
                self.enter_connect(now, out);
            }
            (Timer::Hold, State::OpenSent | State::OpenConfirm | State::Established) => {
                let n = Notification {
                    code: code::HOLD_TIMER_EXPIRED,
                    subcode: 0,
                    data: vec![],
                };
                self.fail(DownReason::Sent(n.clone()), Some(n), now, out);
            }
            (Timer::Keepalive, State::OpenConfirm | State::Established) => {
                if let Some(c) = &self.conn {
                    out.push(Action::Send(c.id, Message::Keepalive));
                }
                if self.hold > 0 {
                    out.push(Action::SetTimer(
                        Timer::Keepalive,
                        Some(now + self.keepalive_interval()),
                    ));
                }
            }
            // A deadline for a state we already left: the task layer may race a cancel.
            _ => {}
        }
    }

    fn keepalive_interval(&self) -> Duration {
        Duration::from_secs(u64::from(self.hold)) / 3
    }

    fn send_open(&self, id: ConnId, out: &mut Vec<Action>) {
        out.push(Action::Send(id, Message::Open(self.local_open())));
    }

    fn on_connected(&mut self, id: ConnId, outgoing: bool, now: Instant, out: &mut Vec<Action>) {
        if outgoing {
            self.connecting = false;
        }
        match self.state {
            State::Connect | State::Active => {
                if self.connecting {
                    self.connecting = false;
                    out.push(Action::AbortConnect);
                }
                out.push(Action::SetTimer(Timer::ConnectRetry, None));
                self.conn = Some(Conn { id, outgoing });
                self.send_open(id, out);
                out.push(Action::SetTimer(Timer::Hold, Some(now + LARGE_HOLD)));
                self.state = State::OpenSent;
            }
            State::OpenSent | State::OpenConfirm if self.other.is_none() => {
                // A second connection from the same peer: answer with our OPEN and resolve
                // the collision when we know the peer's BGP identifier (§6.8).
                self.other = Some(Conn { id, outgoing });
                self.send_open(id, out);
                if let Some(peer) = self.peer_open.clone() {
                    self.resolve_collision(&peer, now, out);
                }
            }
            State::Established => {
                out.push(Action::Send(
                    id,
                    Message::Notification(Notification::cease(cease::CONNECTION_COLLISION, "")),
                ));
                out.push(Action::Close(id));
            }
            _ => out.push(Action::Close(id)),
        }
    }

    /// Keeps one of `conn`/`other` by §6.8: if our identifier is lower, the connection the
    /// peer initiated survives; otherwise ours does.
    fn resolve_collision(&mut self, peer: &Open, now: Instant, out: &mut Vec<Action>) {
        let (Some(main), Some(other)) = (self.conn.clone(), self.other.clone()) else {
            return;
        };
        let keep_incoming = u32::from(self.cfg.router_id) < u32::from(peer.bgp_id);
        let keep_other = other.outgoing != keep_incoming;
        let n = Message::Notification(Notification::cease(cease::CONNECTION_COLLISION, ""));
        if keep_other {
            out.push(Action::Send(main.id, n));
            out.push(Action::Close(main.id));
            self.conn = self.other.take();
            // The surviving connection has not shown us its OPEN yet.
            self.peer_open = None;
            self.state = State::OpenSent;
            out.push(Action::SetTimer(Timer::Keepalive, None));
            out.push(Action::SetTimer(Timer::Hold, Some(now + LARGE_HOLD)));
        } else {
            out.push(Action::Send(other.id, n));
            out.push(Action::Close(other.id));
            self.other = None;
        }
    }

    fn drop_other(&mut self, n: Option<Notification>, out: &mut Vec<Action>) {
        if let Some(o) = self.other.take() {
            if let Some(n) = n {
                out.push(Action::Send(o.id, Message::Notification(n)));
            }
            out.push(Action::Close(o.id));
        }
    }

    fn on_tcp_failed(&mut self, id: ConnId, now: Instant, out: &mut Vec<Action>) {
        if self.is_other(id) {
            self.other = None;
            return;
        }
        if !self.is_main(id) {
            // The outgoing attempt failed (no ConnId reached us for it before), or a stale
            // connection closed.
            if self.state == State::Connect && self.connecting {
                self.connecting = false;
                self.retries += 1;
                self.state = State::Active;
                let d = Self::backoff(
                    self.cfg.connect_retry,
                    self.cfg.connect_retry_max,
                    self.retries,
                );
                out.push(Action::SetTimer(Timer::ConnectRetry, Some(now + d)));
            }
            return;
        }
        match self.state {
            State::OpenSent => {
                out.push(Action::Close(id));
                self.conn = None;
                out.push(Action::SetTimer(Timer::Hold, None));
                if let Some(o) = self.other.take() {
                    // The collision candidate already has our OPEN: carry on with it.
                    self.conn = Some(o);
                    out.push(Action::SetTimer(Timer::Hold, Some(now + LARGE_HOLD)));
                } else {
                    self.retries += 1;
                    self.state = State::Active;
                    if !self.cfg.passive {
                        let d = Self::backoff(
                            self.cfg.connect_retry,
                            self.cfg.connect_retry_max,
                            self.retries,
                        );
                        out.push(Action::SetTimer(Timer::ConnectRetry, Some(now + d)));
                    }
                }
            }
            _ => self.fail(DownReason::ConnectionLost, None, now, out),
        }
    }

    fn fsm_error(&mut self, now: Instant, out: &mut Vec<Action>) {
        // RFC 6608 subcodes: which state received the unexpected message.
        let subcode = match self.state {
            State::OpenSent => 1,
            State::OpenConfirm => 2,
            State::Established => 3,
            _ => 0,
        };
        let n = Notification {
            code: code::FSM,
            subcode,
            data: vec![],
        };
        self.fail(DownReason::Sent(n.clone()), Some(n), now, out);
    }

    fn on_message(&mut self, id: ConnId, m: Message, now: Instant, out: &mut Vec<Action>) {
        if self.is_other(id) {
            match m {
                Message::Open(o) => match self.check_open(&o) {
                    Err(e) => self.drop_other(Some(Notification::from(&e)), out),
                    Ok(()) => {
                        self.resolve_collision(&o, now, out);
                        if self.is_main(id) {
                            self.accept_open(o, now, out);
                        }
                    }
                },
                // Anything but an OPEN first on the second connection ends it.
                Message::Notification(_) => self.drop_other(None, out),
                _ => {
                    let n = Notification {
                        code: code::FSM,
                        subcode: 1,
                        data: vec![],
                    };
                    self.drop_other(Some(n), out);
                }
            }
            return;
        }
        if !self.is_main(id) {
            return;
        }
        match (m, self.state) {
            (Message::Notification(n), _) => {
                self.fail(DownReason::Received(n), None, now, out);
            }
            (Message::Open(o), State::OpenSent) => match self.check_open(&o) {
                Err(e) => {
                    let n = Notification::from(&e);
                    self.fail(DownReason::Sent(n.clone()), Some(n), now, out);
                }
                Ok(()) => {
                    if self.other.is_some() {
                        self.resolve_collision(&o, now, out);
                    }
                    if self.is_main(id) {
                        self.accept_open(o, now, out);
                    }
                }
            },
            (Message::Keepalive, State::OpenConfirm) => {
                self.state = State::Established;
                self.retries = 0;
                self.errors = 0;
                self.drop_other(
                    Some(Notification::cease(cease::CONNECTION_COLLISION, "")),
                    out,
                );
                self.restart_hold(now, out);
                if let Some(peer_open) = self.peer_open.clone() {
                    out.push(Action::Established(Session {
                        conn: id,
                        hold_time: self.hold,
                        local_open: self.local_open(),
                        peer_open,
                    }));
                }
            }
            (Message::Keepalive, State::Established) => self.restart_hold(now, out),
            (Message::Update(u), State::Established) => {
                self.restart_hold(now, out);
                out.push(Action::UpdateReceived(u));
            }
            (Message::RouteRefresh(r), State::Established) => {
                self.restart_hold(now, out);
                out.push(Action::RouteRefreshRequested(r));
            }
            _ => self.fsm_error(now, out),
        }
    }

    fn restart_hold(&self, now: Instant, out: &mut Vec<Action>) {
        if self.hold > 0 {
            out.push(Action::SetTimer(
                Timer::Hold,
                Some(now + Duration::from_secs(u64::from(self.hold))),
            ));
        }
    }

    /// Session-level OPEN checks the codec cannot make (they need our configuration).
    fn check_open(&self, o: &Open) -> Result<(), DecodeError> {
        let Some(asn) = o.four_octet_as() else {
            return Err(OpenError::UnsupportedCapability {
                code: 65,
                data: self.cfg.local_asn.to_be_bytes().to_vec(),
            }
            .into());
        };
        if asn != self.cfg.peer_asn {
            return Err(OpenError::BadPeerAs(asn).into());
        }
        if o.bgp_id == self.cfg.router_id && self.cfg.peer_asn == self.cfg.local_asn {
            // RFC 6286 §2.1: identifiers must differ within an AS.
            return Err(OpenError::BadBgpIdentifier(o.bgp_id).into());
        }
        Ok(())
    }

    /// OPEN accepted on the main connection: negotiate the hold time, answer with a
    /// KEEPALIVE, and wait for the peer's in OpenConfirm.
    fn accept_open(&mut self, o: Open, now: Instant, out: &mut Vec<Action>) {
        let Some(id) = self.conn() else { return };
        self.hold = self.cfg.hold_time.min(o.hold_time);
        self.peer_open = Some(o);
        out.push(Action::Send(id, Message::Keepalive));
        if self.hold > 0 {
            out.push(Action::SetTimer(
                Timer::Keepalive,
                Some(now + self.keepalive_interval()),
            ));
            self.restart_hold(now, out);
        } else {
            out.push(Action::SetTimer(Timer::Keepalive, None));
            out.push(Action::SetTimer(Timer::Hold, None));
        }
        self.state = State::OpenConfirm;
    }

    /// Any error: notify (when we have something to say), close everything, go Idle, and
    /// come back after the damped IdleHold interval.
    fn fail(
        &mut self,
        reason: DownReason,
        notify: Option<Notification>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let was = self.state;
        if let Some(c) = self.conn.take() {
            if let Some(n) = notify {
                out.push(Action::Send(c.id, Message::Notification(n)));
            }
            out.push(Action::Close(c.id));
        }
        self.drop_other(None, out);
        if self.connecting {
            self.connecting = false;
            out.push(Action::AbortConnect);
        }
        for t in [Timer::ConnectRetry, Timer::Hold, Timer::Keepalive] {
            out.push(Action::SetTimer(t, None));
        }
        self.state = State::Idle;
        self.peer_open = None;
        if self.auto_restart {
            let d = Self::backoff(self.cfg.idle_hold, self.cfg.idle_hold_max, self.errors);
            self.errors += 1;
            out.push(Action::SetTimer(Timer::IdleHold, Some(now + d)));
        }
        out.push(Action::Down {
            reason,
            established: was == State::Established,
        });
    }
}
