//! BFD against real routers: BIRD 2 (`protocol bfd`, `bfd on`) and FRR (bfdd, `neighbor X
//! bfd`), each in its own namespace, peered with a speaker in its own process
//! (`sluice-bgp-speaker`) in another. Both sides must show the BFD session Up; freezing the
//! speaker (SIGSTOP) must make the router drop the VIP's next hop within the BFD detection
//! time (plus slack), long before the 3 s hold time; resuming brings the route back. With
//! BFD off, the same freeze keeps the route until the hold time.
//!
//! Run as root: `cargo test -p bgp --test bgp_bfd -- --nocapture --test-threads=1`
//! (prints the measured freeze -> route-gone times; one test at a time gives steadier
//! numbers on a loaded machine).

#[path = "bgp_common/mod.rs"]
mod bgp_common;

use bgp_common::SpeakerProc;
use lab::bird::Config;
use lab::netns::{Netns, link, require_root};
use lab::testing::{BirdRouter, FAILOVER_POLL, Frr, kernel_route, poll, wait_until};
use std::time::Duration;

const SPEAKER: &str = env!("CARGO_BIN_EXE_sluice-bgp-speaker");
const VIP: &str = "192.0.2.10/32";
/// Both sides: 100 ms intervals, multiplier 3.
const BFD_INTERVAL: Duration = Duration::from_millis(100);
const BFD_MULT: u32 = 3;
/// What the router's detection time should be: our multiplier × the agreed interval.
const DETECT: Duration = Duration::from_millis(300);
/// The BGP hold time both sides use.
const HOLD: Duration = Duration::from_secs(3);
/// Slack on a loaded machine (several builds at once): generous, but far below HOLD.
const SLACK: Duration = Duration::from_millis(1000);
/// Freeze/thaw rounds per router, for a spread of measurements.
const ROUNDS: usize = 3;

/// BIRD with one session `sp1` to the speaker at `net`.2, hold time [`HOLD`], with BFD at
/// our interval and multiplier when `bfd`.
fn bird_config(net: &str, bfd: bool) -> String {
    let c = Config::new(&format!("{net}.1"), 65000)
        .kernel(true, false, false)
        .hold(HOLD.as_secs() as u32)
        .quick_retry();
    let c = if bfd {
        c.bfd(BFD_INTERVAL, BFD_MULT)
    } else {
        c
    };
    c.peer("sp1", &format!("{net}.2"), 65001).render()
}

/// The speaker of `net`, with BFD at our interval and multiplier when `bfd`.
fn start_speaker(s: &Netns, net: &str, bfd: bool) -> SpeakerProc {
    let timers = format!("{}ms:{BFD_MULT}", BFD_INTERVAL.as_millis());
    let extra: &[&str] = if bfd { &["--bfd", &timers] } else { &[] };
    SpeakerProc::start_on(s, SPEAKER, net, HOLD, VIP, extra)
}

fn has_route(r: &Netns, via: &str) -> bool {
    kernel_route(r, VIP).contains(via)
}

fn summary(name: &str, times: &[Duration]) {
    let mut ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    println!(
        "MEASURE {name}, {} rounds: min {:.0} ms, median {:.0} ms, \
         max {:.0} ms (all: {ms:.0?})",
        ms.len(),
        ms[0],
        ms[ms.len() / 2],
        ms[ms.len() - 1]
    );
}

/// Freezes the speaker, measures until `gone()`, asks the router why (`blamed_bfd()`, while
/// still frozen), thaws, waits until `back()`. Asserts the route went within the detection
/// time plus slack, i.e. well before the hold time, and that the router blames BFD.
fn freeze_rounds(
    name: &str,
    sp: &SpeakerProc,
    gone: impl Fn() -> bool,
    blamed_bfd: impl Fn() -> bool,
    back: impl Fn() -> bool,
    view: impl Fn() -> String,
) -> Vec<Duration> {
    let mut times = Vec::new();
    for round in 1..=ROUNDS {
        sp.freeze();
        let t = poll(HOLD * 3, FAILOVER_POLL, &gone);
        let blamed = t.is_some() && blamed_bfd();
        let frozen_view = view();
        sp.thaw();
        let t = t.unwrap_or_else(|| {
            panic!(
                "{name} round {round}: route still there 9 s after the freeze\n{}",
                view()
            )
        });
        println!("MEASURE {name} round {round}: freeze -> route gone: {t:?}");
        assert!(
            t <= DETECT + SLACK,
            "{name} round {round}: route gone after {t:?}, later than the BFD detection time \
             {DETECT:?} + {SLACK:?}: BFD did not act\n{}",
            view()
        );
        assert!(
            blamed,
            "{name} round {round}: the router does not name BFD as the reason\n{frozen_view}"
        );
        let up = poll(Duration::from_secs(30), FAILOVER_POLL, &back);
        assert!(
            up.is_some(),
            "{name} round {round}: route did not come back after SIGCONT\n{}",
            view()
        );
        println!("MEASURE {name} round {round}: thaw -> route and BFD back: {up:?}");
        times.push(t);
    }
    times
}

/// BIRD's line for `peer` in `show bfd sessions`, e.g.
/// `10.7.1.2  s1  Up  12:00:00.000  0.100  0.300`.
fn bird_bfd_line(bird: &BirdRouter<'_>, peer: &str) -> String {
    let out = bird.cmd(&["show", "bfd", "sessions"]);
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(peer))
        .map(str::to_string)
        .unwrap_or_else(|| format!("no session for {peer} in:\n{out}"))
}

#[test]
fn bird_bfd_freeze_drops_next_hop_within_detect_time() {
    require_root();
    let r = Netns::new("hbr");
    let s = Netns::new("hbs");
    let net = "10.71.1";
    link(&r, "s1", &s, "upl", net);
    let bird = BirdRouter::start(&r, &bird_config(net, true));
    let sp = start_speaker(&s, net, true);
    let peer = format!("{net}.2");
    let bfd_up = || bird_bfd_line(&bird, &peer).split_whitespace().nth(2) == Some("Up");
    let view = || {
        format!(
            "{}\n{}\n{}",
            kernel_route(&r, VIP),
            bird.cmd(&["show", "bfd", "sessions"]),
            bird.view()
        )
    };
    wait_until(
        "VIP in the kernel and BFD Up in BIRD",
        Duration::from_secs(30),
        || has_route(&r, &peer) && bfd_up(),
        view,
    );
    let line = bird_bfd_line(&bird, &peer);
    println!("BIRD show bfd sessions: {line}");
    // Interval and timeout columns: BIRD runs 100 ms and detects us after 300 ms.
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols.get(4..6), Some(&["0.100", "0.300"][..]), "{line}");

    let times = freeze_rounds(
        "bird bfd",
        &sp,
        || !has_route(&r, &peer),
        || {
            bird.cmd(&["show", "protocols", "all", "sp1"])
                .contains("BFD session down")
        },
        || has_route(&r, &peer) && bfd_up(),
        view,
    );
    summary("bird bfd: speaker frozen -> route gone", &times);
}

#[test]
fn bird_without_bfd_freeze_takes_the_hold_time() {
    require_root();
    let r = Netns::new("hbr");
    let s = Netns::new("hbs");
    let net = "10.72.1";
    link(&r, "s1", &s, "upl", net);
    let bird = BirdRouter::start(&r, &bird_config(net, false));
    let sp = start_speaker(&s, net, false);
    let peer = format!("{net}.2");
    let view = || format!("{}\n{}", kernel_route(&r, VIP), bird.view());
    wait_until(
        "VIP in the kernel",
        Duration::from_secs(30),
        || has_route(&r, &peer),
        view,
    );
    // A keepalive just went out at most 1 s ago; freeze, then check past the BFD bound.
    sp.freeze();
    let t0 = std::time::Instant::now();
    std::thread::sleep(DETECT + SLACK);
    let still = has_route(&r, &peer);
    let gone =
        poll(HOLD + SLACK * 3, FAILOVER_POLL, || !has_route(&r, &peer)).map(|d| d + DETECT + SLACK);
    sp.thaw();
    assert!(
        still,
        "without BFD the route must survive {:?} of silence (hold time {HOLD:?})\n{}",
        DETECT + SLACK,
        view()
    );
    let gone = gone.unwrap_or_else(|| {
        panic!(
            "route still there {:?} after the freeze (hold {HOLD:?})\n{}",
            t0.elapsed(),
            view()
        )
    });
    println!("MEASURE bird no-bfd: freeze -> route gone (hold timer): {gone:?}");
    let proto = bird.cmd(&["show", "protocols", "all", "sp1"]);
    assert!(
        proto.to_lowercase().contains("hold timer"),
        "BIRD should report a hold timer expiry:\n{proto}"
    );
    wait_until(
        "VIP back after SIGCONT",
        Duration::from_secs(30),
        || has_route(&r, &peer),
        view,
    );
}

#[test]
fn frr_bfd_freeze_drops_next_hop_within_detect_time() {
    require_root();
    let r = Netns::new("hbr");
    let s = Netns::new("hbs");
    let net = "10.73.1";
    link(&r, "s1", &s, "upl", net);
    let peer = format!("{net}.2");
    let ms = BFD_INTERVAL.as_millis();
    let frr = Frr::start(
        &r,
        &format!(
            "hostname r
router bgp 65000
 bgp router-id {net}.1
 no bgp ebgp-requires-policy
 timers bgp 1 {hold}
 neighbor {peer} remote-as 65001
 neighbor {peer} timers connect 1
 neighbor {peer} bfd profile fast
",
            hold = HOLD.as_secs()
        ),
        Some(&format!(
            "hostname r
bfd
 profile fast
  receive-interval {ms}
  transmit-interval {ms}
  detect-multiplier {BFD_MULT}
 !
!
"
        )),
    );
    let sp = start_speaker(&s, net, true);
    let peers = || frr.show(&format!("show bfd peer {peer}"));
    let bfd_up = || peers().contains("Status: up");
    let view = || {
        format!(
            "{}\n{}\n{}\n{}",
            kernel_route(&r, VIP),
            peers(),
            frr.show("show bgp summary"),
            frr.show(&format!("show bgp neighbor {peer}"))
        )
    };
    wait_until(
        "VIP in the kernel and BFD up in FRR",
        Duration::from_secs(40),
        || has_route(&r, &peer) && bfd_up(),
        view,
    );
    let p = frr.show("show bfd peers");
    println!("FRR show bfd peers:\n{p}");
    assert!(
        p.contains(&format!("peer {peer}")) && p.contains("Status: up"),
        "{p}"
    );
    assert!(
        p.contains(&format!("Detect-multiplier: {BFD_MULT}"))
            && p.contains(&format!("Transmission interval: {ms}ms")),
        "FRR should run our 100 ms x 3:\n{p}"
    );
    let times = freeze_rounds(
        "frr bfd",
        &sp,
        || !has_route(&r, &peer),
        || {
            frr.show(&format!("show bgp neighbor {peer}"))
                .contains("Cease/BFD Down")
        },
        || has_route(&r, &peer) && bfd_up(),
        view,
    );
    summary("frr bfd: speaker frozen -> route gone", &times);
}

/// The other direction: BIRD hangs (SIGSTOP), so our BFD session times out and must end
/// our BGP session at once (Cease/BFD Down) and count it, instead of waiting for the hold
/// timer. Timed from the speaker's own status lines.
#[test]
fn bird_frozen_router_our_bfd_takes_bgp_down() {
    require_root();
    let r = Netns::new("hbr");
    let s = Netns::new("hbs");
    let net = "10.76.1";
    link(&r, "s1", &s, "upl", net);
    let bird = BirdRouter::start(&r, &bird_config(net, true));
    let sp = start_speaker(&s, net, true);
    let peer = format!("{net}.2");
    let view = || format!("{}\n{}", bird.view(), sp.output());
    wait_until(
        "VIP in the kernel and BFD Up on our side",
        Duration::from_secs(30),
        || {
            has_route(&r, &peer)
                && sp
                    .line_after(std::time::Instant::now() - Duration::from_secs(60), |l| {
                        l.starts_with("bgp Established bfd up")
                    })
                    .is_some()
        },
        view,
    );
    let mut times = Vec::new();
    for round in 1..=ROUNDS {
        let t0 = std::time::Instant::now();
        bird.freeze(true);
        let down = poll(HOLD * 3, FAILOVER_POLL, || {
            sp.line_after(t0, |l| !l.starts_with("bgp Established"))
                .is_some()
        });
        let line = sp.line_after(t0, |l| !l.starts_with("bgp Established"));
        bird.freeze(false);
        let (at, line) = line.unwrap_or_else(|| {
            panic!(
                "round {round}: our BGP session stayed up {down:?} with BIRD frozen\n{}",
                view()
            )
        });
        let t = at - t0;
        println!("MEASURE ours round {round}: BIRD frozen -> our BGP session down: {t:?} ({line})");
        assert!(
            t <= DETECT + SLACK,
            "round {round}: our side took {t:?} (> {DETECT:?} + {SLACK:?}): BFD did not act\n{}",
            view()
        );
        assert!(
            line.ends_with(&format!("resets {round}")),
            "round {round}: BFD must count the BGP reset it caused: {line}"
        );
        wait_until(
            "session, route and BFD back after SIGCONT",
            Duration::from_secs(30),
            || {
                has_route(&r, &peer)
                    && sp
                        .line_after(at, |l| l.starts_with("bgp Established bfd up"))
                        .is_some()
            },
            view,
        );
        times.push(t);
    }
    summary("ours: BIRD frozen -> our BGP session down", &times);
}

/// BFD over IPv6 (hop limit 255, IPV6_RECVHOPLIMIT): BIRD sees the session Up and drops the
/// /128 within the detection time when the speaker freezes.
#[test]
fn bird_bfd_ipv6() {
    require_root();
    let r = Netns::new("hbr");
    let s = Netns::new("hbs");
    link(&r, "s1", &s, "upl", "fd00:77::");
    let (rip, sip) = ("fd00:77::1", "fd00:77::2");
    let vip6 = "2001:db8:77::10/128";
    let ms = BFD_INTERVAL.as_millis();
    let bird = BirdRouter::start(
        &r,
        &Config::new("10.77.1.1", 65000)
            .kernel(false, true, false)
            .bfd(BFD_INTERVAL, BFD_MULT)
            .hold(HOLD.as_secs() as u32)
            .quick_retry()
            .families(false, true)
            .peer("sp1", sip, 65001)
            .render(),
    );
    let bfd = format!("{ms}ms:{BFD_MULT}");
    let hold = HOLD.as_secs().to_string();
    let sp = SpeakerProc::start(
        &s,
        SPEAKER,
        &[
            "--asn",
            "65001",
            "--router-id",
            "10.77.1.2",
            "--peer",
            rip,
            "--peer-asn",
            "65000",
            "--local",
            sip,
            "--hold",
            &hold,
            "--bfd",
            &bfd,
            "--announce",
            vip6,
        ],
    );
    let has = || kernel_route(&r, vip6).contains(sip);
    let bfd_up = || bird_bfd_line(&bird, sip).split_whitespace().nth(2) == Some("Up");
    let view = || {
        format!(
            "{}\n{}\n{}",
            kernel_route(&r, vip6),
            bird.cmd(&["show", "bfd", "sessions"]),
            bird.view()
        )
    };
    wait_until(
        "/128 in the kernel and BFD Up in BIRD",
        Duration::from_secs(30),
        || has() && bfd_up(),
        view,
    );
    println!(
        "BIRD show bfd sessions (IPv6): {}",
        bird_bfd_line(&bird, sip)
    );
    sp.freeze();
    let t = poll(HOLD * 3, FAILOVER_POLL, || !has());
    sp.thaw();
    let t = t.unwrap_or_else(|| panic!("/128 still there 9 s after the freeze\n{}", view()));
    println!("MEASURE bird bfd ipv6: freeze -> /128 gone: {t:?}");
    assert!(t <= DETECT + SLACK, "gone after {t:?}\n{}", view());
    wait_until(
        "/128 and BFD back",
        Duration::from_secs(30),
        || has() && bfd_up(),
        view,
    );
}
