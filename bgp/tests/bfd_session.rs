//! The RFC 5880 session state machine as tables: each row puts a `Session` in a state,
//! feeds one event at a fixed `now`, and compares the state change, the packets sent and
//! the timers. Then the Poll/Final sequence of a parameter change and the timer values
//! (negotiated intervals, slow rate while not Up, jitter bounds, detection time).

use bgp::bfd::session::{SLOW_TX_US, jittered};
use bgp::bfd::{
    Action, BfdDecodeError, ControlPacket, Diag, Discard, ParamError, Session, SessionConfig,
    State, Timers,
};
use std::time::{Duration, Instant};

const LOCAL: u32 = 0x1111;
const REMOTE: u32 = 0x2222;
const MS: Duration = Duration::from_millis(1);

fn cfg() -> SessionConfig {
    SessionConfig {
        local_discriminator: LOCAL,
        desired_min_tx: 100 * MS,
        required_min_rx: 100 * MS,
        detect_mult: 3,
        jitter_seed: 42,
    }
}

/// A packet from the neighbour: 100 ms both ways, multiplier 3 unless changed after.
fn rx(state: State) -> ControlPacket {
    ControlPacket {
        version: 1,
        diag: Diag::NoDiagnostic,
        state,
        poll: false,
        final_: false,
        control_plane_independent: false,
        auth_present: false,
        demand: false,
        multipoint: false,
        detect_mult: 3,
        my_discriminator: REMOTE,
        your_discriminator: if state == State::Down || state == State::AdminDown {
            0
        } else {
            LOCAL
        },
        desired_min_tx: 100_000,
        required_min_rx: 100_000,
        required_min_echo_rx: 0,
    }
}

fn changes(acts: &[Action]) -> Vec<(State, State, Diag)> {
    acts.iter()
        .filter_map(|a| match *a {
            Action::StateChanged { from, to, diag } => Some((from, to, diag)),
            _ => None,
        })
        .collect()
}

fn sent(acts: &[Action]) -> Vec<ControlPacket> {
    acts.iter()
        .filter_map(|a| match *a {
            Action::Send(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn timers(acts: &[Action]) -> Timers {
    match acts.last() {
        Some(Action::Timers(t)) => *t,
        other => panic!("last action is not Timers: {other:?} in {acts:?}"),
    }
}

/// A session brought to `state` by the real handshake (or admin_down), at `t0`.
fn session_in(state: State, t0: Instant) -> Session {
    let mut s = Session::new(cfg(), t0).expect("valid config");
    match state {
        State::Down => {}
        State::Init => {
            s.on_packet(&rx(State::Down), t0);
        }
        State::Up => {
            s.on_packet(&rx(State::Down), t0);
            s.on_packet(&rx(State::Init), t0);
        }
        State::AdminDown => {
            s.admin_down(t0);
        }
    }
    assert_eq!(s.state(), state, "setup");
    s
}

const ALL: [State; 4] = [State::AdminDown, State::Down, State::Init, State::Up];

#[test]
fn received_state_table() {
    use Diag::*;
    use State::*;
    // (local, received, next, diag reported on change)
    let table: &[(State, State, State, Option<Diag>)] = &[
        (Down, AdminDown, Down, None),
        (Down, Down, Init, Some(NoDiagnostic)),
        (Down, Init, Up, Some(NoDiagnostic)),
        (Down, Up, Down, None),
        (Init, AdminDown, Down, Some(NeighborSignaledSessionDown)),
        (Init, Down, Init, None),
        (Init, Init, Up, Some(NoDiagnostic)),
        (Init, Up, Up, Some(NoDiagnostic)),
        (Up, AdminDown, Down, Some(NeighborSignaledSessionDown)),
        (Up, Down, Down, Some(NeighborSignaledSessionDown)),
        (Up, Init, Up, None),
        (Up, Up, Up, None),
        (AdminDown, AdminDown, AdminDown, None),
        (AdminDown, Down, AdminDown, None),
        (AdminDown, Init, AdminDown, None),
        (AdminDown, Up, AdminDown, None),
    ];
    assert_eq!(table.len(), 16, "every state × every received state");
    let t0 = Instant::now();
    let now = t0 + 10 * MS;
    for &(local, got, next, diag) in table {
        let mut s = session_in(local, t0);
        let acts = s.on_packet(&rx(got), now);
        let row = format!("{local:?} rx {got:?}: {acts:?}");
        assert_eq!(s.state(), next, "{row}");
        let want: Vec<_> = diag.map(|d| (local, next, d)).into_iter().collect();
        assert_eq!(changes(&acts), want, "{row}");
        let out = sent(&acts);
        if let Some(d) = diag {
            // A state change is announced at once, carrying the new state and reason.
            assert_eq!(out.len(), 1, "{row}");
            assert_eq!(out[0].state, next, "{row}");
            assert_eq!(out[0].diag, d, "{row}");
            assert_eq!(out[0].your_discriminator, REMOTE, "{row}");
        } else {
            assert!(out.is_empty(), "{row}");
        }
        if local == AdminDown {
            assert!(
                acts.contains(&Action::Discarded(Discard::AdminDown)),
                "{row}"
            );
            assert_eq!(timers(&acts).detect, None, "{row}");
        } else {
            assert_eq!(s.remote_discriminator(), REMOTE, "{row}");
            assert_eq!(s.remote_state(), got, "{row}");
            // Every accepted packet re-arms detection: 3 × max(100, 100) ms.
            assert_eq!(timers(&acts).detect, Some(now + 300 * MS), "{row}");
        }
    }
}

#[test]
fn detection_timeout_table() {
    let t0 = Instant::now();
    for local in ALL {
        let mut s = session_in(local, t0);
        let deadline = s.timers().detect;
        if local == State::AdminDown {
            assert_eq!(deadline, None);
            let acts = s.on_timer(t0 + Duration::from_secs(60));
            assert!(changes(&acts).is_empty(), "{acts:?}");
            continue;
        }
        if local == State::Down {
            // Nothing heard yet: no detection timer; hear a Down to arm it.
            assert_eq!(deadline, None);
            // Down with a neighbour heard: reached by the neighbour signalling Down.
            let mut d = session_in(State::Up, t0);
            d.on_packet(&rx(State::Down), t0);
            assert_eq!(d.state(), State::Down);
            let dl = d.timers().detect.expect("armed by the packet");
            assert!(changes(&d.on_timer(dl - Duration::from_micros(1))).is_empty());
            let acts = d.on_timer(dl);
            assert!(changes(&acts).is_empty(), "Down stays Down: {acts:?}");
            assert_eq!(d.remote_discriminator(), 0, "RemoteDiscr forgotten");
            assert_eq!(timers(&acts).detect, None);
            continue;
        }
        let dl = deadline.expect("armed");
        assert_eq!(dl, t0 + 300 * MS);
        let early = s.on_timer(dl - Duration::from_micros(1));
        assert!(changes(&early).is_empty(), "{local:?} early: {early:?}");
        let acts = s.on_timer(dl);
        assert_eq!(
            changes(&acts),
            vec![(local, State::Down, Diag::ControlDetectionTimeExpired)],
            "{local:?}"
        );
        let out = sent(&acts);
        assert_eq!(out[0].state, State::Down);
        assert_eq!(out[0].diag, Diag::ControlDetectionTimeExpired);
        assert_eq!(out[0].your_discriminator, 0, "{local:?}: RemoteDiscr reset");
        assert_eq!(timers(&acts).detect, None);
    }
}

#[test]
fn admin_down_and_up_table() {
    let t0 = Instant::now();
    let now = t0 + 5 * MS;
    for local in ALL {
        let mut s = session_in(local, t0);
        let acts = s.admin_down(now);
        assert_eq!(s.state(), State::AdminDown);
        if local == State::AdminDown {
            assert!(changes(&acts).is_empty(), "idempotent: {acts:?}");
            assert!(sent(&acts).is_empty());
        } else {
            assert_eq!(
                changes(&acts),
                vec![(local, State::AdminDown, Diag::AdministrativelyDown)]
            );
            let out = sent(&acts);
            assert_eq!(out.len(), 1);
            assert_eq!(
                (out[0].state, out[0].diag),
                (State::AdminDown, Diag::AdministrativelyDown)
            );
        }
        let t = timers(&acts);
        assert_eq!(t.detect, None, "{local:?}: no detection while AdminDown");
        // AdminDown keeps telling the neighbour, at the slow rate.
        let next = t.transmit.expect("still transmitting");
        assert!(next > now + 750 * MS && next <= now + Duration::from_secs(1));
        let periodic = sent(&s.on_timer(next));
        assert_eq!(periodic[0].state, State::AdminDown);

        let acts = s.admin_up(next);
        assert_eq!(
            changes(&acts),
            vec![(State::AdminDown, State::Down, Diag::NoDiagnostic)]
        );
        assert_eq!(sent(&acts)[0].state, State::Down);
        assert_eq!(s.state(), State::Down);
    }
    // admin_up on a session that is not AdminDown does nothing.
    for local in [State::Down, State::Init, State::Up] {
        let mut s = session_in(local, t0);
        let acts = s.admin_up(now);
        assert_eq!(s.state(), local);
        assert!(
            changes(&acts).is_empty() && sent(&acts).is_empty(),
            "{acts:?}"
        );
    }
}

#[test]
fn handshake_between_two_sessions() {
    // Two real sessions talking through a lossless wire reach Up within one exchange each.
    let t0 = Instant::now();
    let mut a = Session::new(cfg(), t0).unwrap();
    let mut b = Session::new(
        SessionConfig {
            local_discriminator: REMOTE,
            jitter_seed: 7,
            ..cfg()
        },
        t0,
    )
    .unwrap();
    let pa = sent(&a.on_timer(t0));
    let pb = sent(&b.on_timer(t0));
    let ra = a.on_packet(&pb[0], t0);
    let rb = b.on_packet(&pa[0], t0);
    assert_eq!((a.state(), b.state()), (State::Init, State::Init));
    a.on_packet(&sent(&rb)[0], t0);
    b.on_packet(&sent(&ra)[0], t0);
    assert_eq!((a.state(), b.state()), (State::Up, State::Up));
}

#[test]
fn bad_packets_and_foreign_discriminators_are_discarded() {
    let t0 = Instant::now();
    let mut s = session_in(State::Up, t0);
    let mut p = rx(State::Up);
    p.your_discriminator = 0x9999;
    let acts = s.on_packet(&p, t0);
    assert_eq!(
        acts[0],
        Action::Discarded(Discard::WrongDiscriminator(0x9999))
    );
    let mut p = rx(State::Down);
    p.detect_mult = 0;
    let acts = s.on_packet(&p, t0);
    assert_eq!(
        acts[0],
        Action::Discarded(Discard::Invalid(BfdDecodeError::ZeroDetectMult))
    );
    assert_eq!(s.state(), State::Up, "neither touched the session");
}

/// Up with the Poll sequence of going Up (1 s → 100 ms) already acknowledged.
fn up_and_settled(t0: Instant, remote_tx: u32, remote_rx: u32) -> Session {
    let mut s = Session::new(cfg(), t0).unwrap();
    let mut p = rx(State::Down);
    p.desired_min_tx = remote_tx;
    p.required_min_rx = remote_rx;
    s.on_packet(&p, t0);
    let mut p = rx(State::Up);
    p.desired_min_tx = remote_tx;
    p.required_min_rx = remote_rx;
    let acts = s.on_packet(&p, t0);
    assert_eq!(s.state(), State::Up);
    assert!(
        s.polling(),
        "going Up changes DesiredMinTx, so a Poll starts"
    );
    assert!(sent(&acts)[0].poll);
    assert_eq!(sent(&acts)[0].desired_min_tx, 100_000);
    p.final_ = true;
    s.on_packet(&p, t0);
    assert!(!s.polling(), "F ends the Poll");
    s
}

#[test]
fn poll_sequence_defers_slower_tx_and_faster_rx_until_final() {
    let t0 = Instant::now();
    // The neighbour is fast (20 ms) so our values decide both intervals.
    let mut s = up_and_settled(t0, 20_000, 20_000);
    assert_eq!(s.tx_interval(), Some(100 * MS));
    assert_eq!(s.detection_time(), Some(300 * MS));

    let now = t0 + 10 * MS;
    let acts = s.set_params(300 * MS, 50 * MS, 3, now).unwrap();
    assert!(s.polling());
    assert!(changes(&acts).is_empty());
    // §6.8.3: while Up, the slower tx and the faster rx wait for the Final.
    assert_eq!(s.tx_interval(), Some(100 * MS), "tx increase deferred");
    assert_eq!(s.detection_time(), Some(300 * MS), "rx decrease deferred");

    let next = timers(&acts).transmit.unwrap();
    let out = sent(&s.on_timer(next));
    assert_eq!(out.len(), 1);
    assert!(out[0].poll && !out[0].final_);
    assert_eq!(
        (out[0].desired_min_tx, out[0].required_min_rx),
        (300_000, 50_000)
    );

    // The neighbour's packets without F change nothing.
    let mut p = rx(State::Up);
    p.desired_min_tx = 20_000;
    p.required_min_rx = 20_000;
    s.on_packet(&p, next);
    assert!(s.polling());
    assert_eq!(s.tx_interval(), Some(100 * MS));

    p.final_ = true;
    let acts = s.on_packet(&p, next);
    assert!(!s.polling());
    assert!(sent(&acts).is_empty(), "a Final needs no answer");
    assert_eq!(s.tx_interval(), Some(300 * MS));
    assert_eq!(s.detection_time(), Some(150 * MS), "3 × max(50, 20) ms");
    assert_eq!(timers(&acts).detect, Some(next + 150 * MS));
    let after = s.timers().transmit.unwrap();
    assert!(!sent(&s.on_timer(after))[0].poll, "P cleared after F");
}

#[test]
fn poll_sequence_applies_faster_tx_and_slower_rx_at_once() {
    let t0 = Instant::now();
    let mut s = up_and_settled(t0, 20_000, 20_000);
    let now = t0 + 10 * MS;
    let acts = s.set_params(50 * MS, 200 * MS, 3, now).unwrap();
    assert!(s.polling());
    assert_eq!(s.tx_interval(), Some(50 * MS));
    assert_eq!(s.detection_time(), Some(600 * MS));
    // The faster rate starts now, not after the old 100 ms gap.
    let next = timers(&acts).transmit.unwrap();
    assert!(next <= now + 50 * MS && next >= now + Duration::from_micros(37_500));
}

#[test]
fn received_poll_is_answered_at_once_with_final_only() {
    let t0 = Instant::now();
    let mut s = up_and_settled(t0, 100_000, 100_000);
    // Our own Poll in flight must not leak P into the Final.
    s.set_params(200 * MS, 100 * MS, 3, t0).unwrap();
    assert!(s.polling());
    let mut p = rx(State::Up);
    p.poll = true;
    p.desired_min_tx = 500_000;
    let acts = s.on_packet(&p, t0 + MS);
    let out = sent(&acts);
    assert_eq!(out.len(), 1);
    assert!(out[0].final_ && !out[0].poll, "{out:?}");
    assert!(s.polling(), "our Poll continues");
    assert_eq!(s.detection_time(), Some(1500 * MS), "3 × max(100, 500) ms");
}

#[test]
fn detect_mult_change_polls_and_is_advertised() {
    let t0 = Instant::now();
    let mut s = up_and_settled(t0, 100_000, 100_000);
    let acts = s.set_params(100 * MS, 100 * MS, 5, t0).unwrap();
    assert!(s.polling());
    let out = sent(&s.on_timer(timers(&acts).transmit.unwrap()));
    assert_eq!(out[0].detect_mult, 5);
    assert!(out[0].poll);
}

#[test]
fn bad_params_are_refused() {
    let t0 = Instant::now();
    let mut s = up_and_settled(t0, 100_000, 100_000);
    assert_eq!(
        s.set_params(Duration::ZERO, 100 * MS, 3, t0),
        Err(ParamError::ZeroDesiredMinTx)
    );
    assert_eq!(
        s.set_params(100 * MS, Duration::ZERO, 3, t0),
        Err(ParamError::ZeroRequiredMinRx)
    );
    assert_eq!(
        s.set_params(100 * MS, 100 * MS, 0, t0),
        Err(ParamError::ZeroDetectMult)
    );
    let huge = Duration::from_secs(5000);
    assert_eq!(
        s.set_params(huge, 100 * MS, 3, t0),
        Err(ParamError::IntervalTooLarge(huge))
    );
    assert!(!s.polling(), "a refused change starts no Poll");
    assert_eq!(s.tx_interval(), Some(100 * MS), "and changes nothing");
    assert_eq!(s.detection_time(), Some(300 * MS));
    let bad = SessionConfig {
        local_discriminator: 0,
        ..cfg()
    };
    assert_eq!(
        Session::new(bad, t0).unwrap_err(),
        ParamError::ZeroDiscriminator
    );
}

#[test]
fn slow_tx_while_not_up() {
    let t0 = Instant::now();
    let mut s = Session::new(cfg(), t0).unwrap();
    assert_eq!(s.timers().transmit, Some(t0), "first packet right away");
    let acts = s.on_timer(t0);
    let p = sent(&acts)[0];
    assert_eq!(p.state, State::Down);
    assert_eq!(
        p.desired_min_tx, SLOW_TX_US,
        "advertised ≥ 1 s while not Up"
    );
    assert_eq!(p.required_min_rx, 100_000);
    assert_eq!(p.your_discriminator, 0);
    assert_eq!(s.tx_interval(), Some(Duration::from_secs(1)));
    let next = timers(&acts).transmit.unwrap();
    assert!(next >= t0 + 750 * MS && next <= t0 + Duration::from_secs(1));

    // Init is still slow.
    s.on_packet(&rx(State::Down), t0);
    assert_eq!(s.state(), State::Init);
    assert_eq!(s.tx_interval(), Some(Duration::from_secs(1)));
    // Up: the configured 100 ms (a decrease, so at once).
    s.on_packet(&rx(State::Up), t0);
    assert_eq!(s.tx_interval(), Some(100 * MS));
    // Down again by the neighbour: back to 1 s.
    s.on_packet(&rx(State::Down), t0);
    assert_eq!(s.state(), State::Down);
    assert_eq!(s.tx_interval(), Some(Duration::from_secs(1)));
}

#[test]
fn negotiated_intervals() {
    let t0 = Instant::now();
    // Neighbour wants no more than one packet per 300 ms: we send at 300 ms.
    let s = up_and_settled(t0, 100_000, 300_000);
    assert_eq!(s.tx_interval(), Some(300 * MS));
    // Neighbour sends every 250 ms with multiplier 3: detection is 750 ms.
    let t1 = t0 + MS;
    let mut s = up_and_settled(t0, 250_000, 100_000);
    let mut p = rx(State::Up);
    p.desired_min_tx = 250_000;
    let acts = s.on_packet(&p, t1);
    assert_eq!(s.detection_time(), Some(750 * MS));
    assert_eq!(timers(&acts).detect, Some(t1 + 750 * MS));
    // Neighbour multiplier 5 with our 100 ms rx dominating: 500 ms.
    p.desired_min_tx = 10_000;
    p.detect_mult = 5;
    s.on_packet(&p, t1);
    assert_eq!(s.detection_time(), Some(500 * MS));
}

#[test]
fn no_periodic_tx_when_neighbour_rx_is_zero_or_demand() {
    let t0 = Instant::now();
    let mut s = session_in(State::Up, t0);
    let mut p = rx(State::Up);
    p.required_min_rx = 0;
    let acts = s.on_packet(&p, t0);
    assert_eq!(timers(&acts).transmit, None);
    p.required_min_rx = 100_000;
    let acts = s.on_packet(&p, t0 + MS);
    let t = timers(&acts).transmit.expect("resumes");
    assert!(t <= t0 + MS + 100 * MS);
    p.demand = true;
    let acts = s.on_packet(&p, t0 + 2 * MS);
    assert_eq!(
        timers(&acts).transmit,
        None,
        "Demand mode: periodic tx ceases"
    );
}

#[test]
fn jitter_bounds() {
    let iv = 100 * MS;
    assert_eq!(jittered(iv, 3, 0), iv);
    let top = jittered(iv, 3, u32::MAX);
    assert!(
        top >= 75 * MS && top < 75 * MS + Duration::from_micros(2),
        "{top:?}"
    );
    // Detect multiplier 1: never more than 90% of the interval.
    assert_eq!(jittered(iv, 1, 0), 90 * MS);
    let top = jittered(iv, 1, u32::MAX);
    assert!(
        top >= 75 * MS && top < 75 * MS + Duration::from_micros(2),
        "{top:?}"
    );
    for r in [1u32, 1 << 16, 1 << 31, 3 << 30] {
        let j = jittered(iv, 3, r);
        assert!(j > 75 * MS && j <= iv, "{r}: {j:?}");
        let j = jittered(iv, 1, r);
        assert!(j >= 75 * MS && j <= 90 * MS, "{r}: {j:?}");
    }
    // The largest wire interval does not overflow.
    let big = Duration::from_micros(u64::from(u32::MAX));
    assert!(jittered(big, 3, u32::MAX) >= big * 3 / 4);
}

/// Successive gaps of the session's own transmit timer, starting in Up at 100 ms.
fn gaps(mult: u8, seed: u64, n: usize) -> Vec<Duration> {
    let t0 = Instant::now();
    let mut s = Session::new(
        SessionConfig {
            detect_mult: mult,
            jitter_seed: seed,
            ..cfg()
        },
        t0,
    )
    .unwrap();
    s.on_packet(&rx(State::Down), t0);
    s.on_packet(&rx(State::Up), t0);
    let mut last = s.timers().transmit.unwrap();
    s.on_timer(last);
    let mut out = Vec::new();
    for _ in 0..n {
        // Keep detection from firing: the neighbour keeps talking.
        s.on_packet(&rx(State::Up), last);
        let next = s.timers().transmit.unwrap();
        s.on_timer(next);
        out.push(next - last);
        last = next;
    }
    out
}

#[test]
fn session_jitter_is_in_range_spread_and_reproducible() {
    for (mult, lo, hi) in [(3u8, 75, 100), (1, 75, 90)] {
        let g = gaps(mult, 1234, 400);
        for d in &g {
            assert!(*d >= lo * MS && *d <= hi * MS, "mult {mult}: gap {d:?}");
        }
        let min = g.iter().min().unwrap();
        let max = g.iter().max().unwrap();
        // A real spread, not a constant: most of the allowed range is used.
        assert!(
            *max - *min > (hi - lo) * MS * 8 / 10,
            "mult {mult}: {min:?}..{max:?}"
        );
    }
    assert_eq!(gaps(3, 99, 50), gaps(3, 99, 50), "same seed, same timers");
    assert_ne!(gaps(3, 99, 50), gaps(3, 100, 50), "seed matters");
}
