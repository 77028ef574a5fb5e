//! Graceful restart (RFC 4724) with BIRD 2 as the helper: the speaker (`sluice-bgp-speaker`,
//! its own process) advertises the capability with the forwarding-state bit; killing it and
//! starting it again must leave the VIP in BIRD's table throughout (BIRD keeps it stale
//! until our End-of-RIB), polled every 50 ms, even though the restarted process announces
//! only 1.5 s after its session is up (End-of-RIB must wait for it); a VIP the restarted
//! process no longer announces goes when its End-of-RIB arrives. Without graceful restart the same kill makes
//! the route disappear.
//!
//! Run as root: `cargo test -p bgp --test bgp_gr -- --nocapture`.

#[path = "bgp_common/mod.rs"]
mod bgp_common;

use bgp_common::SpeakerProc;
use lab::bird::Config;
use lab::netns::{Netns, link, require_root};
use lab::testing::{BirdRouter, FAILOVER_POLL, poll, wait_until};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const SPEAKER: &str = env!("CARGO_BIN_EXE_sluice-bgp-speaker");
const VIP: &str = "192.0.2.10/32";
/// Announced before the restart only: End-of-RIB must flush it.
const OLD_VIP: &str = "192.0.2.11/32";
/// Restart time we advertise: how long BIRD keeps our routes stale waiting for us.
const RESTART_TIME: u64 = 30;

/// BIRD with one session `sp1` to the speaker at `net`.2.
fn bird_config(net: &str) -> String {
    // `graceful restart aware` is BIRD's default (helper role); said here for the reader.
    Config::new(&format!("{net}.1"), 65000)
        .quick_retry()
        .session("graceful restart aware;")
        .peer("sp1", &format!("{net}.2"), 65001)
        .render()
}

/// The speaker of `net` (hold time 3 s), with graceful restart when `gr`, and `extra`.
fn start_speaker(s: &Netns, net: &str, gr: bool, extra: &[&str]) -> SpeakerProc {
    let restart = RESTART_TIME.to_string();
    let mut args = Vec::new();
    if gr {
        args.extend(["--graceful-restart", restart.as_str()]);
    }
    args.extend_from_slice(extra);
    SpeakerProc::start_on(s, SPEAKER, net, Duration::from_secs(3), VIP, &args)
}

fn in_bird(bird: &BirdRouter<'_>, via: &str) -> bool {
    bird.cmd(&["show", "route", VIP]).contains(via)
}

#[test]
fn bird_keeps_the_route_across_a_restart_with_graceful_restart() {
    require_root();
    let r = Netns::new("hgr");
    let s = Netns::new("hgs");
    let net = "10.74.1";
    link(&r, "s1", &s, "upl", net);
    let bird = BirdRouter::start(&r, &bird_config(net));
    let via = format!("{net}.2");
    let mut sp = start_speaker(&s, net, true, &["--announce", OLD_VIP]);
    wait_until(
        "both VIPs in BIRD",
        Duration::from_secs(30),
        || {
            in_bird(&bird, &via)
                && bird.cmd(&["show", "route", OLD_VIP]).contains(&via)
                && bird.bgp_state("sp1") == "Established"
        },
        || bird.view(),
    );
    let caps = bird.cmd(&["show", "protocols", "all", "sp1"]);
    let neighbor_caps = caps
        .split("Neighbor capabilities")
        .nth(1)
        .unwrap_or_default();
    assert!(
        neighbor_caps.contains("Graceful restart") && neighbor_caps.contains("Restart time: 30"),
        "BIRD should see our graceful restart capability with restart time {RESTART_TIME}:\n{caps}"
    );

    // Poll BIRD every 50 ms on another thread while the speaker dies and comes back.
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (stop, sock_ns, via) = (stop.clone(), r.name.clone(), via.clone());
        let sock = bird.sock();
        std::thread::spawn(move || {
            let (mut polls, mut misses) = (0u32, Vec::new());
            let t0 = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let out = std::process::Command::new("ip")
                    .args([
                        "netns", "exec", &sock_ns, "birdc", "-s", &sock, "show", "route", VIP,
                    ])
                    .output()
                    .expect("birdc");
                polls += 1;
                if !String::from_utf8_lossy(&out.stdout).contains(&via) {
                    misses.push(t0.elapsed());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (polls, misses)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let t_kill = Instant::now();
    sp.kill();
    // BIRD notices the closed connection and keeps the route stale.
    let noticed = poll(Duration::from_secs(10), FAILOVER_POLL, || {
        bird.bgp_state("sp1") != "Established"
    });
    std::thread::sleep(Duration::from_secs(1));
    let stale_view = bird.cmd(&["show", "protocols", "all", "sp1"]);
    let stale_old = bird.cmd(&["show", "route", "all", OLD_VIP]);
    // Announcing late (an appliance waits for its health checks): End-of-RIB must wait too,
    // or BIRD would flush the stale VIP in the meantime.
    let sp2 = start_speaker(&s, net, true, &["--announce-delay-ms", "1500"]);
    let back = poll(Duration::from_secs(30), FAILOVER_POLL, || {
        bird.bgp_state("sp1") == "Established"
    });
    let t_up = Instant::now();
    // End-of-RIB flushes what the new process did not announce again, after the delay.
    let flushed = poll(Duration::from_secs(10), FAILOVER_POLL, || {
        !bird.cmd(&["show", "route", OLD_VIP]).contains(&via)
    })
    .map(|_| t_up.elapsed());
    println!("MEASURE gr: re-established -> stale {OLD_VIP} flushed by End-of-RIB: {flushed:?}");
    // Keep polling a little after that.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (polls, misses) = poller.join().expect("poller thread");
    println!(
        "MEASURE gr: kill -> BIRD noticed {noticed:?}; kill -> re-established {:?}; {polls} polls, \
         {} misses",
        back.map(|_| t_kill.elapsed()),
        misses.len()
    );
    assert!(
        noticed.is_some(),
        "BIRD never saw the session go\n{}",
        bird.view()
    );
    assert!(back.is_some(), "session did not come back\n{}", bird.view());
    assert!(
        stale_view.contains("Neighbor graceful restart active"),
        "BIRD should be in graceful-restart helper mode while we are away:\n{stale_view}"
    );
    assert!(
        stale_old.contains(&via),
        "while we were away BIRD should keep our routes (stale):\n{stale_old}\n{stale_view}"
    );
    println!("BIRD while the speaker was down:\n{stale_view}\n{stale_old}");
    let flushed = flushed.unwrap_or_else(|| {
        panic!(
            "End-of-RIB should have flushed {OLD_VIP}, which the new process does not announce\n{}",
            bird.view()
        )
    });
    assert!(
        flushed >= Duration::from_millis(1000),
        "{OLD_VIP} flushed {flushed:?} after the session came back: End-of-RIB did not wait \
         for the announcements delayed by 1.5 s"
    );
    assert!(
        polls >= 20,
        "only {polls} polls across the restart: the check saw too little"
    );
    assert!(
        misses.is_empty(),
        "the VIP left BIRD's table during the restart at {misses:?}\nduring:\n{stale_view}\n\
         after:\n{}",
        bird.view()
    );
    assert!(
        in_bird(&bird, &via),
        "VIP missing after the restart\n{}",
        bird.view()
    );
    drop(sp2);
}

#[test]
fn bird_drops_the_route_on_restart_without_graceful_restart() {
    require_root();
    let r = Netns::new("hgr");
    let s = Netns::new("hgs");
    let net = "10.75.1";
    link(&r, "s1", &s, "upl", net);
    let bird = BirdRouter::start(&r, &bird_config(net));
    let via = format!("{net}.2");
    let mut sp = start_speaker(&s, net, false, &[]);
    wait_until(
        "VIP in BIRD",
        Duration::from_secs(30),
        || in_bird(&bird, &via),
        || bird.view(),
    );
    sp.kill();
    let gone = poll(Duration::from_secs(10), FAILOVER_POLL, || {
        !in_bird(&bird, &via)
    });
    println!("MEASURE no-gr: kill -> route gone from BIRD: {gone:?}");
    assert!(
        gone.is_some(),
        "without graceful restart the route must go when the speaker dies\n{}",
        bird.view()
    );
    let _sp2 = start_speaker(&s, net, false, &[]);
    wait_until(
        "VIP back after the restart",
        Duration::from_secs(30),
        || in_bird(&bird, &via),
        || bird.view(),
    );
}
