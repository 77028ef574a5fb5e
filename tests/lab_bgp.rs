//! BGP in the lab: two appliances announce their VIPs to a BIRD router that spreads flows
//! over them by ECMP. Checks the multipath route, live TCP downloads surviving the hard loss
//! of one appliance, withdrawal when every backend is down (and re-announcement when they
//! return), and RFC 8326 graceful shutdown on SIGTERM. Prints `MEASURE` lines with the
//! convergence times. Needs root, bird2, nftables and python3.

use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lab::testing::poll;
use lab::{Lab, LabMode, LabOptions, appliance_addr, blob, slow_download};

/// Builds a two-appliance BGP lab, starts both appliances and waits until the router has
/// every VIP through every appliance serving it; returns the lab and how long that took.
fn start(modes: Vec<LabMode>) -> (Lab, Duration) {
    lab::netns::require_program("python3", "python3");
    lab::netns::require_program("bird", "bird2");
    lab::netns::require_program("birdc", "bird2");
    lab::netns::require_program("nft", "nftables");
    let mut lab = lab::testing::build(LabOptions {
        modes,
        appliances: Some(2),
        ..LabOptions::default()
    });
    assert!(lab.bgp(), "two appliances must default to BGP routing");
    let routed = lab.start_routed(lab::sluice!().path());
    (lab, routed)
}

fn hops(lab: &Lab, vip: IpAddr) -> Vec<IpAddr> {
    lab.next_hops(vip)
        .unwrap_or_else(|e| panic!("ip route show {vip}: {e}"))
}

fn both(v6: bool) -> Vec<IpAddr> {
    vec![appliance_addr(0, v6), appliance_addr(1, v6)]
}

/// How often the waits for the router ask again.
const POLL: Duration = Duration::from_millis(50);

const DR_VIPS: [(LabMode, bool); 4] = [
    (LabMode::Dr, false),
    (LabMode::Dr, true),
    (LabMode::Vxlan, false),
    (LabMode::Vxlan, true),
];

/// (a) both appliances announce and the router installs a multipath route to every DR and
/// VXLAN VIP (NAT and FullNAT only through lb1); (b) SIGKILL of one appliance while 16 slow
/// downloads run through it and its peer: the router drops its next hop and every download
/// completes with identical bytes through the survivor.
#[test]
fn ecmp_routes_and_appliance_loss_with_live_flows() {
    let _serial = lab::testing::serial();
    let (lab, up) = start(LabMode::ALL.to_vec());
    println!(
        "MEASURE lab_bgp: sluice run start (2 appliances) -> every VIP route in the router's kernel: {up:?}"
    );
    for (mode, v6) in DR_VIPS {
        let route = lab.router_route(mode.vip(v6)).expect("ip route");
        println!("router: ip route show {}\n{route}", mode.vip(v6));
        assert_eq!(
            hops(&lab, mode.vip(v6)),
            both(v6),
            "{} {}:\n{route}",
            mode.name(),
            mode.vip(v6)
        );
        assert!(
            route.contains("nexthop via"),
            "not a multipath route:\n{route}"
        );
        assert!(
            route.contains("proto bird"),
            "not installed by BIRD:\n{route}"
        );
    }
    for mode in [LabMode::Nat, LabMode::FullNat] {
        for v6 in [false, true] {
            assert_eq!(
                hops(&lab, mode.vip(v6)),
                vec![appliance_addr(0, v6)],
                "{} VIPs must be served by lb1 only",
                mode.name()
            );
        }
    }
    appliance_loss(lab, Loss::Kill);
}

/// How the lab loses lb2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// SIGKILL of `sluice run`: its kernel still closes the BGP session (FIN), so the router
    /// learns at once.
    Kill,
    /// lb2's link goes dark first (power or cable loss), then SIGKILL: nothing reaches the
    /// router, which must wait for the hold timer.
    Silent,
}

/// (b) without the warm-up: lb2 is lost while 16 slow downloads run through both
/// appliances; the router drops its next hop and every download completes intact.
#[test]
fn silent_appliance_loss_waits_for_hold_time() {
    let _serial = lab::testing::serial();
    let (lab, _) = start(vec![LabMode::Dr, LabMode::Vxlan]);
    appliance_loss(lab, Loss::Silent);
}

fn appliance_loss(mut lab: Lab, loss: Loss) {
    // Small receive buffers and a slow reader keep each 1 MB download in flight for ~13 s.
    lab.client
        .try_sh("sysctl -qw net.ipv4.tcp_rmem='4096 8192 16384'")
        .expect("sysctl");
    let flows = 8;
    let pace = Duration::from_millis(100);
    let (tx, rx) = mpsc::channel();
    let mut downloads = Vec::new();
    for (mode, v6) in [(LabMode::Dr, false), (LabMode::Vxlan, true)] {
        let vip = SocketAddr::new(mode.vip(v6), 80);
        for _ in 0..flows {
            let tx = tx.clone();
            let h = lab
                .client
                .in_thread(move || slow_download(vip, pace, tx))
                .expect("client thread");
            downloads.push((mode, v6, h));
        }
    }
    let before: Vec<(u64, u64)> = (0..2)
        .map(|k| lab.client_packets_to(k).expect("nft"))
        .collect();
    let mut backends = Vec::new();
    for _ in 0..downloads.len() {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(b) => backends.push(b),
            Err(_) => panic!("a download got no headers within 10 s\n{}", lab.bgp_view()),
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    let carried: Vec<(u64, u64)> = (0..2)
        .map(|k| {
            let (v4, v6) = lab.client_packets_to(k).expect("nft");
            (v4 - before[k].0, v6 - before[k].1)
        })
        .collect();
    println!(
        "downloads served by {backends:?}; client packets per appliance (v4, v6): {carried:?}"
    );
    for (k, (v4, v6)) in carried.iter().enumerate() {
        assert!(
            v4 + v6 > 0,
            "ECMP sent none of the {} flows through lb{}: {carried:?}",
            2 * flows,
            k + 1
        );
    }
    let finished = downloads.iter().filter(|(_, _, h)| h.is_finished()).count();
    assert_eq!(
        finished, 0,
        "downloads ended before the kill: every one must span the loss of lb2"
    );
    // The victim is lb2 (it serves only DR and VXLAN VIPs, so nothing else depends on it).
    let pid = lab.appliance_pid(1).expect("lb2 runs");
    let killed = Instant::now();
    if loss == Loss::Silent {
        lab.appliance_ns(1)
            .try_run(&["ip", "link", "set", "eth0", "down"])
            .expect("cut lb2's link");
    }
    assert!(lab.kill_appliance_at(1), "SIGKILL lb2 (pid {pid})");
    let link = lab
        .appliance_ns(1)
        .try_run(&["ip", "-d", "link", "show", "eth0"])
        .expect("ip link");
    let link = String::from_utf8_lossy(&link.stdout).into_owned();
    println!(
        "after SIGKILL, lb2's eth0 {} an XDP program:\n{link}",
        if link.contains("prog/xdp") {
            "still has"
        } else {
            "has no"
        }
    );
    let dropped = poll(Duration::from_secs(15), POLL, || {
        DR_VIPS.iter().all(|(m, v6)| {
            lab.next_hops(m.vip(*v6))
                .is_ok_and(|h| h == vec![appliance_addr(0, *v6)])
        })
    });
    if dropped.is_none() {
        panic!(
            "the router kept lb2's next hop 15 s after losing it ({loss:?})\n{}",
            lab.bgp_view()
        );
    }
    // From the loss itself, not from when the polling began.
    let gone = killed.elapsed();
    println!(
        "MEASURE lab_bgp: loss of lb2 ({loss:?}) -> its next hop gone from every VIP route: {gone:?}"
    );
    if loss == Loss::Silent {
        // BIRD's hold timer restarts with each keepalive (every second): it expires 2 to 3 s
        // after the last one got through.
        assert!(
            gone >= Duration::from_millis(1500) && gone < Duration::from_secs(5),
            "a silent loss must be detected by the 3 s hold timer, took {gone:?}"
        );
    }
    let proto = lab.birdc(&["show", "protocols", "lb2"]).unwrap_or_default();
    println!("bird after the kill:\n{proto}");
    let expected = blob();
    let mut failures = Vec::new();
    for (mode, v6, h) in downloads {
        match h.join().expect("download thread") {
            Ok(body) if body == expected => {}
            Ok(body) => failures.push(format!(
                "{} {}: {} bytes, not the blob",
                mode.name(),
                mode.vip(v6),
                body.len()
            )),
            Err(e) => failures.push(format!("{} {}: {e}", mode.name(), mode.vip(v6))),
        }
    }
    println!(
        "MEASURE lab_bgp: loss of lb2 ({loss:?}) -> every one of {} downloads complete: {:?}",
        2 * flows,
        killed.elapsed()
    );
    assert!(
        failures.is_empty(),
        "downloads broken by the loss of lb2: {failures:?}\n{}",
        lab.bgp_view()
    );
    if loss == Loss::Kill {
        // The killed process leaves its XDP program attached (netlink attachment, no link
        // fd to close): a restart must take the interface over and announce again.
        let t0 = Instant::now();
        lab.spawn_appliance_at(1, lab::sluice!().path())
            .expect("restart lb2");
        let back = poll(Duration::from_secs(30), POLL, || {
            DR_VIPS
                .iter()
                .all(|(m, v6)| lab.next_hops(m.vip(*v6)).is_ok_and(|h| h == both(*v6)))
        });
        let Some(back) = back else {
            panic!(
                "lb2 restarted after SIGKILL but its routes did not return\n{}",
                lab.bgp_view()
            );
        };
        println!(
            "MEASURE lab_bgp: restart of lb2 after SIGKILL -> ECMP again: {back:?} ({:?})",
            t0.elapsed()
        );
        assert!(
            lab.stop_appliance_at(1),
            "restarted lb2 did not exit cleanly"
        );
    }
    assert!(lab.stop_appliance_at(0), "lb1 did not exit cleanly");
}

/// (c) every backend down: health checks fail, both appliances withdraw and the VIP routes
/// leave the router; backends back: the routes return through both appliances.
#[test]
fn withdraw_when_unhealthy_and_announce_again() {
    let _serial = lab::testing::serial();
    let (mut lab, up) = start(vec![LabMode::Dr, LabMode::Vxlan]);
    println!("MEASURE lab_bgp: start -> routes (DR+VXLAN lab): {up:?}");
    for i in 0..lab.backends.len() {
        lab.stop_backend(i);
    }
    let gone = poll(Duration::from_secs(20), POLL, || {
        DR_VIPS
            .iter()
            .all(|(m, v6)| lab.next_hops(m.vip(*v6)).is_ok_and(|h| h.is_empty()))
    });
    let Some(gone) = gone else {
        panic!(
            "VIP routes stayed 20 s after every backend stopped\n{}",
            lab.bgp_view()
        );
    };
    println!(
        "MEASURE lab_bgp: last backend stopped -> every VIP route gone from the router: {gone:?}"
    );
    for k in 0..2 {
        let log = std::fs::read_to_string(lab.log_path_at(k)).unwrap_or_default();
        assert!(
            log.contains("bgp: withdraw"),
            "lb{} logged no withdraw:\n{log}",
            k + 1
        );
    }
    let t0 = Instant::now();
    for i in 0..lab.backends.len() {
        lab.start_backend(i).expect("restart backend");
    }
    let back = poll(Duration::from_secs(20), POLL, || {
        DR_VIPS
            .iter()
            .all(|(m, v6)| lab.next_hops(m.vip(*v6)).is_ok_and(|h| h == both(*v6)))
    });
    let Some(back) = back else {
        panic!(
            "VIP routes did not return within 20 s of the backends\n{}",
            lab.bgp_view()
        );
    };
    println!(
        "MEASURE lab_bgp: backends listening again -> every VIP route back with both next hops: \
         {back:?} ({:?} from the first restart)",
        t0.elapsed()
    );
    assert!(
        lab.stop_appliance_at(0) && lab.stop_appliance_at(1),
        "clean exits"
    );
}

/// (d) SIGTERM on one appliance: BIRD first sees its paths tagged GRACEFUL_SHUTDOWN
/// (65535:0), then the withdraw; the VIP routes lose that next hop and it exits 0.
#[test]
fn graceful_shutdown_on_sigterm() {
    let _serial = lab::testing::serial();
    let (mut lab, _) = start(vec![LabMode::Dr, LabMode::Vxlan]);
    let vip = LabMode::Dr.vip(false);
    let lb2 = appliance_addr(1, false).to_string();
    let t0 = Instant::now();
    let seen = std::thread::scope(|scope| {
        let lab_ref = &lab;
        let watcher = scope.spawn(move || {
            let mut gshut_at = None;
            let mut gone = None;
            let target = format!("{vip}/32");
            while t0.elapsed() < Duration::from_secs(20) {
                // Kernel first, BIRD second: when the hop is gone from the kernel, the BIRD
                // view read just after tells why (path still there with GRACEFUL_SHUTDOWN:
                // drained by policy; path absent: withdrawn).
                let kernel = lab_ref.next_hops(vip).unwrap_or_default();
                let routes = lab_ref
                    .birdc(&["show", "route", "all", &target])
                    .unwrap_or_default();
                // Each path starts with `unicast [PROTOCOL ...`: keep lb2's block.
                let lb2_path = routes
                    .split("unicast [")
                    .find(|p| p.starts_with("lb2 "))
                    .unwrap_or("")
                    .to_string();
                if gshut_at.is_none() && lb2_path.contains("(65535,0)") {
                    gshut_at = Some(t0.elapsed());
                }
                if gone.is_none() && !kernel.iter().any(|h| h.to_string() == lb2) {
                    gone = Some((t0.elapsed(), lb2_path.clone()));
                }
                if gone.is_some() && lb2_path.is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (gshut_at, gone)
        });
        assert!(lab_ref.terminate_appliance_at(1), "SIGTERM lb2");
        watcher.join().expect("watcher")
    });
    let exited = lab.wait_appliance_at(1, Duration::from_secs(15));
    let exit_time = t0.elapsed();
    let (gshut, gone) = seen;
    println!(
        "MEASURE lab_bgp: SIGTERM of lb2 -> GRACEFUL_SHUTDOWN seen by BIRD: {gshut:?}, \
         next hop gone from the kernel: {:?}, process exited by: {exit_time:?}",
        gone.as_ref().map(|g| g.0)
    );
    let (gone, path_then) = gone.unwrap_or_else(|| {
        panic!(
            "lb2's next hop stayed 20 s after SIGTERM\n{}",
            lab.bgp_view()
        )
    });
    assert!(
        gshut.is_some(),
        "BIRD never saw lb2's paths with GRACEFUL_SHUTDOWN\n{}",
        lab.bgp_view()
    );
    // The router's RFC 8326 policy drains lb2 on GRACEFUL_SHUTDOWN: its path is still in
    // BIRD, tagged, when the kernel route has already dropped it, well before the withdraw
    // that follows the appliance's 2 s wait.
    assert!(
        path_then.contains("(65535,0)"),
        "when the next hop left the kernel, lb2's path in BIRD was not a GRACEFUL_SHUTDOWN \
         one:\n{path_then}"
    );
    assert!(
        gone + Duration::from_millis(1000) < exit_time,
        "the next hop left at {gone:?}, not ahead of the withdraw (exit at {exit_time:?})"
    );
    assert!(
        exited,
        "lb2 did not exit 0 after SIGTERM\n{}",
        lab.bgp_view()
    );
    for (m, v6) in DR_VIPS {
        assert_eq!(
            hops(&lab, m.vip(v6)),
            vec![appliance_addr(0, v6)],
            "{} {}",
            m.name(),
            m.vip(v6)
        );
    }
    assert!(lab.stop_appliance_at(0), "lb1 clean exit");
}
