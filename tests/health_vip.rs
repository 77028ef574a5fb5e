//! Health that proves the VIP: a DR or VXLAN-tunnel backend that loses the VIP keeps
//! answering its own address, yet its check goes down (the VIP probe reaches it the way
//! client traffic does and gets no answer), new flows avoid it, and it rejoins once the VIP
//! is back. IPv4 and IPv6, TCP and UDP VIPs. Needs root.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use lab::testing::{Whoami, file_text};
use lab::{Lab, LabMode, LabOptions, http_get};

/// The lab's check: interval 500 ms, timeout 300 ms, rise 2, fall 2.
const INTERVAL: Duration = Duration::from_millis(500);
const TIMEOUT: Duration = Duration::from_millis(300);
const FALL: u32 = 2;
const RISE: u32 = 2;
/// What a loaded two-core machine may add to a bound (scheduling, log writes, polling).
const SLACK: Duration = Duration::from_millis(1500);

/// Waits (at most 15 s) until 30 round-robin requests (1 s each) split exactly as `want`.
fn settle_to(lab: &Lab, vip: SocketAddr, want: &[(&str, usize)], log: &dyn Fn() -> String) {
    Whoami::new(lab, vip, Duration::from_secs(1)).settle_to(want, Duration::from_secs(15), log);
}

/// The probe key of backend `be` (0-based) for `vip` as the appliance logs it, minus the
/// check name: "10.0.0.22:80 via vip tcp 192.0.2.12:80".
fn key_of(be: usize, vip: IpAddr, proto: &str) -> String {
    let (addr, vip) = match vip {
        IpAddr::V4(v) => (format!("10.0.0.{}:80", 21 + be), format!("{v}:80")),
        IpAddr::V6(v) => (format!("[2001:db8:a::{}]:80", 21 + be), format!("[{v}]:80")),
    };
    format!("{addr} via vip {proto} {vip}")
}

/// Waits until the log, past byte `from`, has a transition of `key` to `to`; returns how
/// long after `since` it was seen and the line.
fn wait_transition(
    log: &dyn Fn() -> String,
    from: usize,
    key: &str,
    to: &str,
    since: Instant,
    limit: Duration,
) -> (Duration, String) {
    let needle = format!("-> {to}");
    loop {
        let text = log();
        let found = text
            .get(from..)
            .unwrap_or_default()
            .lines()
            .find(|l| l.contains(key) && l.contains(&needle))
            .map(str::to_string);
        if let Some(line) = found {
            return (since.elapsed(), line);
        }
        assert!(
            since.elapsed() < limit,
            "no transition of {key} to {to} within {limit:?}\n{text}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Removes the VIP from be2, checks it leaves within the bound with the VIP probe's reason,
/// that new flows avoid it, then puts the VIP back and checks it rejoins.
fn vip_loss_and_return(lab: &Lab, mode: LabMode, v6: bool, log: &dyn Fn() -> String) {
    let vip_ip = mode.vip(v6);
    let vip = SocketAddr::new(vip_ip, 80);
    let be2 = &lab.backends[1];
    let (cidr, fam) = if v6 {
        (format!("{vip_ip}/128"), "-6")
    } else {
        (format!("{vip_ip}/32"), "-4")
    };
    settle_to(lab, vip, &[("be1", 10), ("be2", 10), ("be3", 10)], log);

    let mark = log().len();
    be2.run(&["ip", fam, "addr", "del", &cidr, "dev", "lo"]);
    let removed = Instant::now();
    let bound = INTERVAL * FALL + TIMEOUT + INTERVAL;
    let (tcp_after, line) = wait_transition(
        log,
        mark,
        &key_of(1, vip_ip, "tcp"),
        "down",
        removed,
        bound + SLACK * 4,
    );
    println!(
        "{} v6={v6}: be2 down {tcp_after:?} after losing the VIP (bound {bound:?}): {line}",
        mode.name()
    );
    assert!(
        tcp_after <= bound + SLACK,
        "down after {tcp_after:?}, bound {bound:?} + {SLACK:?}"
    );
    assert!(
        line.contains("did not answer for VIP"),
        "the reason names the VIP probe: {line}"
    );
    // The UDP VIP on the same address loses its backend too.
    let (udp_after, _) = wait_transition(
        log,
        mark,
        &key_of(1, vip_ip, "udp"),
        "down",
        removed,
        bound + SLACK * 4,
    );
    assert!(udp_after <= bound + SLACK, "udp down after {udp_after:?}");
    // be2's own address still answers: the plain check alone would have kept it.
    let own = SocketAddr::new(
        if v6 {
            "2001:db8:a::22".parse().unwrap()
        } else {
            "10.0.0.22".parse().unwrap()
        },
        80,
    );
    let answered = lab
        .from_client(move || http_get(own, "/whoami", Duration::from_secs(2)).map(|r| r.0))
        .expect("client");
    assert_eq!(answered.ok(), Some(200), "be2 serves its own address");
    // New flows avoid be2 and every request succeeds.
    settle_to(lab, vip, &[("be1", 15), ("be3", 15)], log);

    let mark = log().len();
    be2.run(&["ip", fam, "addr", "add", &cidr, "dev", "lo"]);
    let restored = Instant::now();
    let rise_bound = INTERVAL * (RISE + 1) + TIMEOUT;
    let (back, _) = wait_transition(
        log,
        mark,
        &key_of(1, vip_ip, "tcp"),
        "up",
        restored,
        rise_bound + SLACK * 4,
    );
    println!(
        "{} v6={v6}: be2 up {back:?} after the VIP returned",
        mode.name()
    );
    assert!(back <= rise_bound + SLACK, "up after {back:?}");
    settle_to(lab, vip, &[("be1", 10), ("be2", 10), ("be3", 10)], log);
}

#[test]
fn backend_without_the_vip_is_marked_down_and_rejoins() {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Dr, LabMode::Vxlan],
        scheduler: "rr".into(),
        ..LabOptions::default()
    });
    let log_path = lab.start_appliance(lab::sluice!().path()).expect("start");
    let log = move || file_text(&log_path);
    assert!(
        lab.wait_healthy(0, Duration::from_secs(30)).is_some(),
        "every backend passes its check and its VIP probe\n{}",
        log()
    );
    for mode in [LabMode::Dr, LabMode::Vxlan] {
        for v6 in [false, true] {
            vip_loss_and_return(&lab, mode, v6, &log);
        }
    }
    let metrics = log();
    assert!(lab.stop_appliance(), "appliance stops cleanly\n{metrics}");
}
