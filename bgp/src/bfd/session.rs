//! The RFC 5880 session state machine (§6.2, §6.8) as a pure transition function: it takes
//! `now` and an event, and returns the packets to send, the state changes to report and the
//! next timer deadlines. Keeping the clock and the socket out makes every transition,
//! timer value and Poll sequence testable in a table, like the BGP FSM.
//!
//! Only asynchronous mode without authentication or echo is implemented; a neighbour that
//! asks for Demand mode is honoured by ceasing periodic transmission (§6.8.7).

use super::packet::{BfdDecodeError, ControlPacket, Diag, State};
use std::time::{Duration, Instant};
use thiserror::Error;

/// The floor on bfd.DesiredMinTxInterval while the session is not Up (§6.8.3), µs.
pub const SLOW_TX_US: u32 = 1_000_000;

/// Per-session parameters chosen by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// bfd.LocalDiscr: nonzero and unique among the caller's sessions (§6.8.1).
    pub local_discriminator: u32,
    /// bfd.DesiredMinTxInterval once Up.
    pub desired_min_tx: Duration,
    /// bfd.RequiredMinRxInterval.
    pub required_min_rx: Duration,
    /// bfd.DetectMult.
    pub detect_mult: u8,
    /// Seed of the transmit-jitter generator, so runs (and tests) are reproducible.
    pub jitter_seed: u64,
}

/// A parameter the session cannot run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ParamError {
    /// Discriminator 0 is reserved for "unknown" on the wire.
    #[error("bfd: local discriminator must be nonzero")]
    ZeroDiscriminator,
    /// A multiplier of 0 would make the detection time 0.
    #[error("bfd: detect multiplier must be at least 1")]
    ZeroDetectMult,
    /// RFC 5880 §6.8.1: the desired transmit interval must be nonzero.
    #[error("bfd: desired min tx interval must be at least 1µs")]
    ZeroDesiredMinTx,
    /// A receive interval of 0 tells the neighbour not to send, so nothing could be detected.
    #[error("bfd: required min rx interval must be at least 1µs")]
    ZeroRequiredMinRx,
    /// Intervals travel as 32-bit microseconds (about 71 minutes).
    #[error("bfd: interval {0:?} does not fit 32-bit microseconds")]
    IntervalTooLarge(Duration),
}

/// Why [`Session::on_packet`] ignored a packet (each is worth a counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discard {
    /// The packet fails a §6.8.6 field check (a packet built in memory, not decoded).
    Invalid(BfdDecodeError),
    /// Your Discriminator names another session.
    WrongDiscriminator(u32),
    /// The local session is AdminDown, which discards everything (§6.8.6).
    AdminDown,
}

/// The deadlines the caller must call [`Session::on_timer`] at (the earlier of the two).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timers {
    /// Next periodic transmission; `None` while transmission must not happen.
    pub transmit: Option<Instant>,
    /// When the neighbour is declared dead; `None` until a packet has been accepted.
    pub detect: Option<Instant>,
}

impl Timers {
    /// The earliest armed deadline.
    pub fn next(&self) -> Option<Instant> {
        match (self.transmit, self.detect) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A side effect for the caller to carry out, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Transmit this packet to the neighbour.
    Send(ControlPacket),
    /// The local session state changed; `diag` is the reason (also sent to the neighbour).
    StateChanged {
        /// State before.
        from: State,
        /// State after.
        to: State,
        /// bfd.LocalDiag after the change.
        diag: Diag,
    },
    /// The received packet was ignored.
    Discarded(Discard),
    /// The deadlines after this event; always the last action of every call.
    Timers(Timers),
}

/// One BFD session (the §6.8.1 state variables plus the timers).
#[derive(Debug, Clone)]
pub struct Session {
    state: State,
    remote_state: State,
    local_discr: u32,
    remote_discr: u32,
    local_diag: Diag,
    detect_mult: u8,
    /// Configured intervals, µs.
    cfg_desired_tx: u32,
    cfg_required_rx: u32,
    /// bfd.DesiredMinTxInterval / bfd.RequiredMinRxInterval as advertised.
    adv_desired_tx: u32,
    adv_required_rx: u32,
    /// The values timers use, which lag the advertised ones during a Poll sequence (§6.8.3).
    tx_active: u32,
    rx_active: u32,
    remote_min_rx: u32,
    remote_desired_tx: u32,
    remote_detect_mult: u8,
    remote_demand: bool,
    polling: bool,
    timers: Timers,
    rng: u64,
}

fn micros(d: Duration) -> Result<u32, ParamError> {
    u32::try_from(d.as_micros()).map_err(|_| ParamError::IntervalTooLarge(d))
}

fn check(desired: Duration, required: Duration, mult: u8) -> Result<(u32, u32), ParamError> {
    let (d, r) = (micros(desired)?, micros(required)?);
    if d == 0 {
        return Err(ParamError::ZeroDesiredMinTx);
    }
    if r == 0 {
        return Err(ParamError::ZeroRequiredMinRx);
    }
    if mult == 0 {
        return Err(ParamError::ZeroDetectMult);
    }
    Ok((d, r))
}

/// The §6.8.7 jittered transmit interval: `interval` reduced by 0–25%, or by 10–25% when
/// the local detect multiplier is 1 (so one late packet cannot trip detection). `random`
/// picks the point in that range, spread over the whole `u32`.
pub fn jittered(interval: Duration, detect_mult: u8, random: u32) -> Duration {
    let us = interval.as_micros().min(u128::from(u64::MAX / 4)) as u64;
    let max_cut = us / 4;
    let min_cut = if detect_mult == 1 { us / 10 } else { 0 };
    // (span * random) >> 32 is below span, so the cut never exceeds 25%; u128 because the
    // product of a large span and a 32-bit random does not fit u64.
    let span = max_cut - min_cut;
    let cut = min_cut + ((u128::from(span) * u128::from(random)) >> 32) as u64;
    Duration::from_micros(us - cut)
}

impl Session {
    /// A session in state Down whose first packet is due at `now`.
    pub fn new(cfg: SessionConfig, now: Instant) -> Result<Session, ParamError> {
        if cfg.local_discriminator == 0 {
            return Err(ParamError::ZeroDiscriminator);
        }
        let (d, r) = check(cfg.desired_min_tx, cfg.required_min_rx, cfg.detect_mult)?;
        let desired = d.max(SLOW_TX_US);
        Ok(Session {
            state: State::Down,
            remote_state: State::Down,
            local_discr: cfg.local_discriminator,
            remote_discr: 0,
            local_diag: Diag::NoDiagnostic,
            detect_mult: cfg.detect_mult,
            cfg_desired_tx: d,
            cfg_required_rx: r,
            adv_desired_tx: desired,
            adv_required_rx: r,
            tx_active: desired,
            rx_active: r,
            // §6.8.1: initialised to 1 so the first packets go out before anything is heard.
            remote_min_rx: 1,
            remote_desired_tx: 0,
            remote_detect_mult: 0,
            remote_demand: false,
            polling: false,
            timers: Timers {
                transmit: Some(now),
                detect: None,
            },
            // xorshift needs a nonzero state.
            rng: if cfg.jitter_seed == 0 {
                0x9e37_79b9_7f4a_7c15
            } else {
                cfg.jitter_seed
            },
        })
    }

    /// bfd.SessionState.
    pub fn state(&self) -> State {
        self.state
    }

    /// bfd.RemoteSessionState.
    pub fn remote_state(&self) -> State {
        self.remote_state
    }

    /// bfd.LocalDiag.
    pub fn local_diag(&self) -> Diag {
        self.local_diag
    }

    /// bfd.LocalDiscr.
    pub fn local_discriminator(&self) -> u32 {
        self.local_discr
    }

    /// bfd.RemoteDiscr (0 until heard, and again after a detection timeout).
    pub fn remote_discriminator(&self) -> u32 {
        self.remote_discr
    }

    /// Whether a Poll sequence is in progress (outgoing periodic packets carry P).
    pub fn polling(&self) -> bool {
        self.polling
    }

    /// The current deadlines.
    pub fn timers(&self) -> Timers {
        self.timers
    }

    /// The un-jittered periodic transmit interval (§6.8.7), or `None` when periodic
    /// transmission must not happen (neighbour's RequiredMinRxInterval 0, or Demand mode).
    pub fn tx_interval(&self) -> Option<Duration> {
        if self.remote_min_rx == 0
            || (self.remote_demand && self.state == State::Up && self.remote_state == State::Up)
        {
            return None;
        }
        Some(Duration::from_micros(u64::from(
            self.tx_active.max(self.remote_min_rx),
        )))
    }

    /// The detection time (§6.8.4, asynchronous mode): the neighbour's Detect Mult times the
    /// agreed interval, the larger of our RequiredMinRxInterval and its DesiredMinTxInterval.
    /// `None` until a packet has been accepted.
    pub fn detection_time(&self) -> Option<Duration> {
        if self.remote_detect_mult == 0 {
            return None;
        }
        let iv = u64::from(self.rx_active.max(self.remote_desired_tx));
        Some(Duration::from_micros(
            u64::from(self.remote_detect_mult) * iv,
        ))
    }

    /// A received (already decoded) packet addressed to this session (§6.8.6). The caller
    /// demultiplexes: by Your Discriminator when nonzero, otherwise by addresses and
    /// interface (RFC 5881 §3); a nonzero Your Discriminator naming another session is
    /// discarded here as a second line of defence.
    pub fn on_packet(&mut self, pkt: &ControlPacket, now: Instant) -> Vec<Action> {
        let mut acts = Vec::new();
        if let Err(e) = pkt.validate() {
            acts.push(Action::Discarded(Discard::Invalid(e)));
            return self.finish(acts);
        }
        if pkt.your_discriminator != 0 && pkt.your_discriminator != self.local_discr {
            acts.push(Action::Discarded(Discard::WrongDiscriminator(
                pkt.your_discriminator,
            )));
            return self.finish(acts);
        }
        let old_iv = self.tx_interval();
        self.remote_discr = pkt.my_discriminator;
        self.remote_state = pkt.state;
        self.remote_demand = pkt.demand;
        self.remote_min_rx = pkt.required_min_rx;
        self.remote_desired_tx = pkt.desired_min_tx;
        self.remote_detect_mult = pkt.detect_mult;
        if pkt.final_ && self.polling {
            self.end_poll();
        }
        if self.state == State::AdminDown {
            self.retime(old_iv, now);
            acts.push(Action::Discarded(Discard::AdminDown));
            return self.finish(acts);
        }
        let changed = match (self.state, pkt.state) {
            (State::Down, _) if pkt.state == State::AdminDown => false,
            (_, State::AdminDown) => {
                self.change(State::Down, Diag::NeighborSignaledSessionDown, &mut acts);
                true
            }
            (State::Down, State::Down) => {
                self.change(State::Init, Diag::NoDiagnostic, &mut acts);
                true
            }
            (State::Down, State::Init) | (State::Init, State::Init | State::Up) => {
                self.change(State::Up, Diag::NoDiagnostic, &mut acts);
                true
            }
            (State::Up, State::Down) => {
                self.change(State::Down, Diag::NeighborSignaledSessionDown, &mut acts);
                true
            }
            _ => false,
        };
        self.timers.detect = self.detection_time().map(|d| now + d);
        if changed || pkt.poll {
            // One packet answers both: the new state, and F for the neighbour's Poll, which
            // must go out at once (§6.8.6); P and F are never set together.
            let mut out = self.packet();
            out.final_ = pkt.poll;
            out.poll = self.polling && !pkt.poll;
            acts.push(Action::Send(out));
        }
        if changed {
            self.schedule_tx(now);
        } else {
            self.retime(old_iv, now);
        }
        self.finish(acts)
    }

    /// A deadline passed: declare the neighbour dead and/or send the periodic packet.
    pub fn on_timer(&mut self, now: Instant) -> Vec<Action> {
        let mut acts = Vec::new();
        if self.timers.detect.is_some_and(|d| now >= d) {
            self.timers.detect = None;
            // §6.8.1: the neighbour is forgotten, so a restarted peer can rejoin.
            self.remote_discr = 0;
            self.remote_state = State::Down;
            self.remote_demand = false;
            if matches!(self.state, State::Init | State::Up) {
                self.change(State::Down, Diag::ControlDetectionTimeExpired, &mut acts);
                acts.push(Action::Send(self.packet()));
                self.schedule_tx(now);
            }
        }
        if self.timers.transmit.is_some_and(|t| now >= t) {
            acts.push(Action::Send(self.packet()));
            self.schedule_tx(now);
        }
        self.finish(acts)
    }

    /// The operator holds the session down (§6.8.16); AdminDown packets keep going out at
    /// the slow rate so the neighbour learns why instead of timing out.
    pub fn admin_down(&mut self, now: Instant) -> Vec<Action> {
        let mut acts = Vec::new();
        if self.state != State::AdminDown {
            self.change(State::AdminDown, Diag::AdministrativelyDown, &mut acts);
            self.timers.detect = None;
            acts.push(Action::Send(self.packet()));
            self.schedule_tx(now);
        }
        self.finish(acts)
    }

    /// The operator releases the session: AdminDown → Down, and the handshake starts again.
    pub fn admin_up(&mut self, now: Instant) -> Vec<Action> {
        let mut acts = Vec::new();
        if self.state == State::AdminDown {
            self.change(State::Down, Diag::NoDiagnostic, &mut acts);
            acts.push(Action::Send(self.packet()));
            self.schedule_tx(now);
        }
        self.finish(acts)
    }

    /// New intervals and multiplier. A change starts a Poll sequence (§6.8.3): while Up, a
    /// larger transmit interval waits for the neighbour's Final, and so does a smaller
    /// receive interval for the detection time; the other directions apply at once.
    pub fn set_params(
        &mut self,
        desired_min_tx: Duration,
        required_min_rx: Duration,
        detect_mult: u8,
        now: Instant,
    ) -> Result<Vec<Action>, ParamError> {
        let (d, r) = check(desired_min_tx, required_min_rx, detect_mult)?;
        let old_iv = self.tx_interval();
        let mult_changed = detect_mult != self.detect_mult;
        self.detect_mult = detect_mult;
        self.cfg_desired_tx = d;
        self.cfg_required_rx = r;
        self.refresh_params();
        if mult_changed {
            self.polling = true;
        }
        self.retime(old_iv, now);
        Ok(self.finish(Vec::new()))
    }

    fn finish(&self, mut acts: Vec<Action>) -> Vec<Action> {
        acts.push(Action::Timers(self.timers));
        acts
    }

    fn packet(&self) -> ControlPacket {
        ControlPacket {
            version: 1,
            diag: self.local_diag,
            state: self.state,
            poll: self.polling,
            final_: false,
            control_plane_independent: false,
            auth_present: false,
            demand: false,
            multipoint: false,
            detect_mult: self.detect_mult,
            my_discriminator: self.local_discr,
            your_discriminator: self.remote_discr,
            desired_min_tx: self.adv_desired_tx,
            required_min_rx: self.adv_required_rx,
            required_min_echo_rx: 0,
        }
    }

    fn change(&mut self, to: State, diag: Diag, acts: &mut Vec<Action>) {
        let from = self.state;
        self.state = to;
        self.local_diag = diag;
        acts.push(Action::StateChanged { from, to, diag });
        self.refresh_params();
    }

    /// Recomputes bfd.DesiredMinTxInterval (slow while not Up) and starts a Poll sequence
    /// when an advertised interval changes, deferring as §6.8.3 requires.
    fn refresh_params(&mut self) {
        let desired = if self.state == State::Up {
            self.cfg_desired_tx
        } else {
            self.cfg_desired_tx.max(SLOW_TX_US)
        };
        let required = self.cfg_required_rx;
        if desired == self.adv_desired_tx && required == self.adv_required_rx {
            return;
        }
        let up = self.state == State::Up;
        if !(up && desired > self.tx_active) {
            self.tx_active = desired;
        }
        if !(up && required < self.rx_active) {
            self.rx_active = required;
        }
        self.adv_desired_tx = desired;
        self.adv_required_rx = required;
        self.polling = true;
    }

    fn end_poll(&mut self) {
        self.polling = false;
        self.tx_active = self.adv_desired_tx;
        self.rx_active = self.adv_required_rx;
    }

    fn next_random(&mut self) -> u32 {
        // xorshift64*: deterministic for a seed, good enough to de-synchronise senders.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    fn schedule_tx(&mut self, now: Instant) {
        self.timers.transmit = match self.tx_interval() {
            Some(iv) => {
                let r = self.next_random();
                Some(now + jittered(iv, self.detect_mult, r))
            }
            None => None,
        };
    }

    /// §6.8.7: the interval is recalculated when either side's value changes; a shorter one
    /// (or transmission becoming allowed) takes effect now rather than after the old gap.
    fn retime(&mut self, old_iv: Option<Duration>, now: Instant) {
        let new_iv = self.tx_interval();
        if new_iv == old_iv {
            return;
        }
        let Some(iv) = new_iv else {
            self.timers.transmit = None;
            return;
        };
        let r = self.next_random();
        let candidate = now + jittered(iv, self.detect_mult, r);
        if self.timers.transmit.is_none_or(|t| candidate < t) {
            self.timers.transmit = Some(candidate);
        }
    }
}
