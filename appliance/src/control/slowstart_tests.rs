use proptest::prelude::*;

use super::*;

const CFG: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
slow_start = "9s"

[[vip.backend]]
address = "10.1.0.11"
weight = 100

[[vip.backend]]
address = "10.1.0.12"
weight = 100

[[vip]]
name = "api"
address = "192.0.2.11"
port = 80

[[vip.backend]]
address = "10.1.0.21"
"#;

use testkit::unit::parse as cfg;

const UP: Readiness = Readiness {
    up: true,
    decided: true,
};
const DOWN: Readiness = Readiness {
    up: false,
    decided: true,
};

fn all(r: Readiness) -> impl Fn(&Vip, &Backend) -> Readiness {
    move |_, _| r
}

/// Every backend up except `addr`, which is `r`.
fn but(addr: &'static str, r: Readiness) -> impl Fn(&Vip, &Backend) -> Readiness {
    move |_, b| if b.address.to_string() == addr { r } else { UP }
}

/// The weights `ramps` gives VIP `web` at `now`, and when the next level is due.
fn weights(c: &Config, ramps: &Ramps, now: Instant) -> (Vec<u32>, Option<Instant>) {
    let mut built = c.clone();
    let due = ramps.apply(&mut built, now);
    (
        built.vips[0].backends.iter().map(|b| b.weight).collect(),
        due,
    )
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[test]
fn levels_and_weights() {
    let p = Duration::from_secs(9);
    assert_eq!(level(Duration::ZERO, p), 0);
    assert_eq!(level(Duration::from_millis(999), p), 0);
    assert_eq!(level(Duration::from_secs(1), p), 1);
    assert_eq!(level(Duration::from_secs(8), p), 8);
    assert_eq!(level(Duration::from_secs(9), p), 9);
    assert_eq!(level(Duration::from_secs(60), p), 9);
    assert_eq!(ramped(100, 0), 10);
    assert_eq!(ramped(100, 4), 50);
    assert_eq!(ramped(100, 9), 100);
    assert_eq!(ramped(3, 0), 1, "never 0 while ramping");
    assert_eq!(ramped(0, 5), 0, "weight 0 stays out of the pool");
}

#[test]
fn nobody_ramps_at_start_up_nor_on_the_first_verdicts() {
    let c = cfg(CFG);
    let t0 = Instant::now();
    // First version: the backends with a check are undecided.
    let pending = Readiness {
        up: false,
        decided: false,
    };
    let r = Ramps::default().next(&c, &all(pending), t0);
    assert!(r.is_empty());
    // Their first verdicts come in: up, and nobody ramps.
    let r = r.next(&c, &but("10.1.0.12", pending), t0 + secs(1.0));
    let r = r.next(&c, &all(UP), t0 + secs(2.0));
    assert!(r.is_empty(), "a start-up verdict is not a recovery");
    // Without checks everything is up in the first version: nobody ramps either.
    let r = Ramps::default().next(&c, &all(UP), t0);
    assert!(r.is_empty());
    assert_eq!(weights(&c, &r, t0), (vec![100, 100], None));
}

#[test]
fn a_backend_that_comes_back_ramps_in_ten_levels_to_its_full_weight() {
    let c = cfg(CFG);
    let t0 = Instant::now();
    let r = Ramps::default().next(&c, &all(UP), t0);
    let r = r.next(&c, &but("10.1.0.12", DOWN), t0 + secs(1.0));
    assert!(r.is_empty());
    let back = t0 + secs(5.0);
    let mut r = r.next(&c, &all(UP), back);
    assert_eq!(r.len(), 1);
    let v = &c.vips[0];
    assert_eq!(
        r.ramp(v, &v.backends[1]),
        Some(Ramp {
            since: back,
            until: back + secs(9.0)
        })
    );
    assert_eq!(r.ramp(v, &v.backends[0]), None);
    // Follow the ramp the way the control loop does: commit at each due time.
    let mut now = back;
    let mut seen = Vec::new();
    loop {
        let (w, due) = weights(&c, &r, now);
        assert_eq!(w[0], 100, "the other backend keeps its weight");
        seen.push(w[1]);
        let Some(due) = due else { break };
        assert!(due > now, "the next level is in the future");
        now = due;
        r = r.next(&c, &all(UP), now);
    }
    assert_eq!(seen, vec![10, 20, 30, 40, 50, 60, 70, 80, 90, 100]);
    assert_eq!(
        now,
        back + secs(9.0),
        "full weight at the end of the period"
    );
    assert!(r.is_empty());
}

#[test]
fn going_down_mid_ramp_restarts_the_ramp_from_the_first_level() {
    let c = cfg(CFG);
    let t0 = Instant::now();
    let r = Ramps::default().next(&c, &all(UP), t0);
    let r = r.next(&c, &but("10.1.0.12", DOWN), t0 + secs(1.0));
    let r = r.next(&c, &all(UP), t0 + secs(2.0));
    let r = r.next(&c, &all(UP), t0 + secs(7.0));
    assert_eq!(weights(&c, &r, t0 + secs(7.0)).0, vec![100, 60]);
    // Interrupted: down again, then back.
    let r = r.next(&c, &but("10.1.0.12", DOWN), t0 + secs(7.5));
    assert!(r.is_empty(), "a backend that is down does not ramp");
    let r = r.next(&c, &all(UP), t0 + secs(8.0));
    let (w, due) = weights(&c, &r, t0 + secs(8.0));
    assert_eq!(w, vec![100, 10], "from the first level again");
    assert_eq!(due, Some(t0 + secs(9.0)));
}

#[test]
fn a_reload_that_turns_slow_start_off_ends_the_ramp() {
    let c = cfg(CFG);
    let t0 = Instant::now();
    let r = Ramps::default().next(&c, &all(UP), t0);
    let r = r.next(&c, &but("10.1.0.12", DOWN), t0 + secs(1.0));
    let r = r.next(&c, &all(UP), t0 + secs(2.0));
    assert!(!r.is_empty());
    let off = cfg(&CFG.replace("slow_start = \"9s\"\n", ""));
    let r = r.next(&off, &all(UP), t0 + secs(3.0));
    assert!(r.is_empty());
    assert_eq!(weights(&off, &r, t0 + secs(3.0)), (vec![100, 100], None));
}

#[test]
fn added_backends_ramp_but_not_those_of_a_new_vip_nor_those_already_up() {
    let t0 = Instant::now();
    let c = cfg(&CFG.replace("slow_start = \"9s\"\n", ""));
    let r = Ramps::default().next(&c, &all(UP), t0);
    // A reload turns slow start on: the backends already up do not ramp.
    let on = cfg(CFG);
    let r = r.next(&on, &all(UP), t0 + secs(1.0));
    assert!(r.is_empty());
    // A reload adds a backend to web and a VIP with slow start: only the backend ramps.
    let more = format!(
        "{CFG}\n[[vip]]\nname = \"new\"\naddress = \"192.0.2.12\"\nport = 80\n\
         slow_start = \"9s\"\n[[vip.backend]]\naddress = \"10.1.0.31\"\n"
    )
    .replace(
        "[[vip]]\nname = \"api\"",
        "[[vip.backend]]\naddress = \"10.1.0.13\"\n\n[[vip]]\nname = \"api\"",
    );
    let more = cfg(&more);
    let r = r.next(&more, &all(UP), t0 + secs(2.0));
    assert_eq!(r.len(), 1);
    let v = &more.vips[0];
    assert_eq!(v.backends[2].address.to_string(), "10.1.0.13");
    assert!(r.ramp(v, &v.backends[2]).is_some());
    let mut built = more.clone();
    r.apply(&mut built, t0 + secs(2.0));
    assert_eq!(built.vips[0].backends[2].weight, 10);
    assert_eq!(
        built.vips[2].backends[0].weight, 100,
        "a new VIP starts whole"
    );
}

#[test]
fn a_backend_s_own_slow_start_overrides_the_vip_s() {
    let text = CFG.replace(
        "address = \"10.1.0.12\"\nweight = 100\n",
        "address = \"10.1.0.12\"\nweight = 100\nslow_start = \"0s\"\n",
    );
    let c = cfg(&text);
    let t0 = Instant::now();
    let r = Ramps::default().next(&c, &all(UP), t0);
    let r = r.next(&c, &all(DOWN), t0 + secs(1.0));
    let r = r.next(&c, &all(UP), t0 + secs(2.0));
    assert_eq!(r.len(), 1, "10.1.0.12 has slow start off");
    assert_eq!(weights(&c, &r, t0 + secs(2.0)).0, vec![10, 100]);
}

proptest! {
    /// Whatever the period, weight and sampling times: the effective weight never falls
    /// while the ramp runs, starts near a tenth, and is the full weight from the period's
    /// end on; the due times strictly advance.
    #[test]
    fn a_ramp_is_monotone_and_ends_at_the_full_weight(
        period_ms in 1_000u64..3_600_000,
        weight in 1u32..=65535,
        samples in proptest::collection::vec(0u64..4_000_000, 1..40),
    ) {
        let text = CFG
            .replace("slow_start = \"9s\"", &format!("slow_start = \"{period_ms}ms\""))
            .replace("address = \"10.1.0.12\"\nweight = 100", &format!("address = \"10.1.0.12\"\nweight = {weight}"));
        let c = cfg(&text);
        let period = Duration::from_millis(period_ms);
        let t0 = Instant::now();
        let r = Ramps::default().next(&c, &all(UP), t0);
        let r = r.next(&c, &but("10.1.0.12", DOWN), t0);
        let mut r = r.next(&c, &all(UP), t0);
        let (w, _) = weights(&c, &r, t0);
        prop_assert_eq!(w[1], (weight / 10).max(1));
        let mut times = samples;
        times.sort_unstable();
        let mut last = w[1];
        for ms in times {
            let now = t0 + Duration::from_millis(ms);
            r = r.next(&c, &all(UP), now);
            let (w, due) = weights(&c, &r, now);
            prop_assert!(w[1] >= last, "fell from {} to {}", last, w[1]);
            prop_assert!(w[1] <= weight);
            last = w[1];
            if now >= t0 + period {
                prop_assert_eq!(w[1], weight);
                prop_assert!(r.is_empty());
                prop_assert_eq!(due, None);
            } else {
                let due = due.expect("a ramp has a next level");
                prop_assert!(due > now && due <= t0 + period);
            }
        }
    }
}
