//! Health checks wired into the pools: a backend whose server stops leaves the VIP's pool
//! within `fall * interval + timeout`, and comes back after `rise` successes. Needs root.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lab::testing::{Whoami, file_text};
use lab::{LabMode, LabOptions};

/// The lab's check: interval 500 ms, timeout 300 ms, rise 2, fall 2.
const INTERVAL: Duration = Duration::from_millis(500);
const TIMEOUT: Duration = Duration::from_millis(300);
const FALL: u32 = 2;
const RISE: u32 = 2;

/// Each request of the test's spreads may take this long.
const REQUEST: Duration = Duration::from_secs(2);
/// How long the tables may take to settle (a loaded machine serves 30 requests slowly, and
/// the other checks of a returning backend commit their own versions one by one).
const SETTLE: Duration = Duration::from_secs(10);

#[test]
fn stopped_backend_leaves_and_rejoins_the_pool() {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        scheduler: "rr".into(),
        ..LabOptions::default()
    });
    let log = lab.start_appliance(lab::sluice!().path()).expect("start");
    let log_text = || file_text(&log);
    let vip = SocketAddr::new(LabMode::Nat.vip(false), 80);
    let whoami = Whoami::new(&lab, vip, REQUEST);

    // Backends start down until `rise` checks pass: wait for all three.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = whoami.spread(30);
        if ["be1", "be2", "be3"].iter().all(|b| c.contains_key(*b)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not all backends joined: {c:?}\n{}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    lab.stop_backend(1);
    let stopped = Instant::now();
    // Poll cheaply until be2 is out: with round robin over three backends, 30 requests
    // without an error and without be2 means it left the pool.
    let bound = INTERVAL * FALL + TIMEOUT;
    let left = loop {
        let c = whoami.spread(6);
        if !c.keys().any(|k| k != "be1" && k != "be3") {
            break stopped.elapsed();
        }
        assert!(
            stopped.elapsed() < bound + Duration::from_secs(5),
            "be2 never left the pool: {c:?}\n{}",
            log_text()
        );
    };
    // be2's other checks (IPv6, UDP) go down moments later, and each new table version
    // restarts round robin; once the tables are stable, 30 requests split exactly 15/15.
    whoami.settle_to(&[("be1", 15), ("be3", 15)], SETTLE, &log_text);
    // Checks run every interval with jitter 0; the down decision needs `fall` failed probes,
    // each failing within `timeout`, plus one interval of phase: allow one more interval.
    println!(
        "be2 left the pool {:?} after its server stopped (bound {:?})",
        left,
        bound + INTERVAL
    );
    assert!(
        left <= bound + INTERVAL,
        "left after {left:?}, bound {:?}",
        bound + INTERVAL
    );
    assert!(
        log_text().contains("-> down"),
        "transition logged:\n{}",
        log_text()
    );

    lab.start_backend(1).expect("restart be2");
    let started = Instant::now();
    let back = loop {
        let c = whoami.spread(6);
        if c.contains_key("be2") {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < INTERVAL * (RISE + 2) + Duration::from_secs(5),
            "be2 never came back: {c:?}\n{}",
            log_text()
        );
    };
    println!("be2 rejoined {back:?} after its server started");
    assert!(back <= INTERVAL * (RISE + 2), "rejoined after {back:?}");
    whoami.settle_to(&[("be1", 10), ("be2", 10), ("be3", 10)], SETTLE, &log_text);
    assert!(lab.stop_appliance());
}
