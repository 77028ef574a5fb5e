//! The datapath end to end: the lab topology (client, router, appliance, three backends in
//! network namespaces) with `sluice run` forwarding real HTTP and UDP through one VIP per mode
//! (NAT, FullNAT, DR, VXLAN tunnel) and family. Needs root.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use api::{Client, Endpoint};
use lab::{Lab, LabMode, LabOptions, exercise_vip, format_reports, http_get};

fn start(scheduler: &str, flow_cache: Option<bool>) -> Lab {
    lab::netns::require_root();
    lab::netns::require_program("python3", "python3");
    let mut lab = Lab::build(LabOptions {
        scheduler: scheduler.into(),
        flow_cache,
        ..LabOptions::default()
    })
    .unwrap_or_else(|e| panic!("lab: {e}"));
    let log = lab
        .start_appliance(std::path::Path::new(env!("CARGO_BIN_EXE_sluice")))
        .unwrap_or_else(|e| panic!("start appliance: {e}"));
    let ready = lab
        .wait_vip(
            std::net::SocketAddr::new(LabMode::Nat.vip(false), 80),
            Duration::from_secs(20),
        )
        .expect("client thread");
    assert!(
        ready,
        "the NAT VIP never answered; appliance log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    lab
}

/// With the XDP flow cache, the default: the kernel forwards what the engine decided.
#[test]
fn every_mode_and_family_forwards_http_and_udp() {
    every_mode_and_family(None);
}

/// Pure AF_XDP: the engine forwards every frame.
#[test]
fn every_mode_and_family_forwards_http_and_udp_with_the_flow_cache_off() {
    every_mode_and_family(Some(false));
}

fn every_mode_and_family(flow_cache: Option<bool>) {
    let mut lab = start("rr", flow_cache);
    let stop = Arc::new(AtomicBool::new(false));
    let mut reports = Vec::new();
    for mode in LabMode::ALL {
        for v6 in [false, true] {
            let st = stop.clone();
            reports.push(
                lab.from_client(move || exercise_vip(mode, v6, 60, st))
                    .expect("client"),
            );
        }
    }
    println!("{}", format_reports(&reports));
    for r in &reports {
        assert_eq!(r.failures, 0, "{} {}: {:?}", r.mode, r.vip, r.first_error);
        assert!(
            r.blob_intact,
            "{} {}: 1 MB body not intact ({:?})",
            r.mode, r.vip, r.first_error
        );
        assert_eq!(
            r.udp_replies, r.udp_sent,
            "{} {}: UDP ({:?})",
            r.mode, r.vip, r.first_error
        );
        // Round robin over one worker: 60 new connections land 20/20/20.
        let counts: Vec<usize> = r.per_backend.values().copied().collect();
        assert_eq!(
            counts,
            vec![20, 20, 20],
            "{} {}: rr spread {:?}",
            r.mode,
            r.vip,
            r.per_backend
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let status = rt
        .block_on(Client::new(Endpoint::Unix(lab.api_socket_at(0))).status())
        .expect("status");
    match (&status.flow_cache, flow_cache) {
        (Some(c), None) => {
            // Every mode's established frames (DR and NAT both ways) went through the kernel.
            assert!(
                c.hits > 0,
                "the kernel forwarded nothing: {c:?}; status: {status:?}\nappliance log:\n{}",
                std::fs::read_to_string(lab.log_path_at(0)).unwrap_or_default()
            );
            println!("MEASURE lab_modes flow cache: {c:?}");
        }
        (None, Some(false)) => {}
        (c, _) => panic!("flow cache status {c:?} with flow_cache {flow_cache:?}"),
    }
    assert!(
        lab.stop_appliance(),
        "sluice run did not exit cleanly on SIGTERM"
    );
    let attached = lab
        .lb
        .try_run(&["ip", "-d", "link", "show", "eth0"])
        .expect("ip link");
    let text = String::from_utf8_lossy(&attached.stdout);
    assert!(
        !text.contains("prog/xdp"),
        "an XDP program is still attached:\n{text}"
    );
}

#[test]
fn maglev_spreads_and_icmp_echo_is_answered() {
    let mut lab = start("maglev", None);
    let stop = Arc::new(AtomicBool::new(false));
    let r = lab
        .from_client(move || exercise_vip(LabMode::Nat, false, 90, stop))
        .expect("client");
    assert_eq!(r.failures, 0, "{:?}", r.first_error);
    assert_eq!(
        r.per_backend.len(),
        3,
        "every backend gets flows: {:?}",
        r.per_backend
    );
    for (b, n) in &r.per_backend {
        assert!(
            *n >= 10,
            "backend {b} got only {n} of 90: {:?}",
            r.per_backend
        );
    }
    // The appliance itself answers ICMP echo to a VIP (the backends do not hold NAT VIPs).
    for v6 in [false, true] {
        let vip = LabMode::Nat.vip(v6).to_string();
        let out = lab.client.try_run(&["ping", "-c", "2", "-W", "2", &vip]);
        assert!(out.is_ok(), "ping {vip}: {:?}", out.err());
    }
    assert!(
        lab.stop_appliance(),
        "sluice run did not exit cleanly on SIGTERM"
    );
    // A second start on the same interfaces works right after.
    let log = lab
        .start_appliance(std::path::Path::new(env!("CARGO_BIN_EXE_sluice")))
        .expect("restart");
    let ok = lab
        .from_client(|| {
            let deadline = Instant::now() + Duration::from_secs(20);
            let addr = std::net::SocketAddr::new(LabMode::Dr.vip(true), 80);
            while Instant::now() < deadline {
                if let Ok((200, _)) = http_get(addr, "/whoami", Duration::from_millis(500)) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            false
        })
        .expect("client");
    assert!(
        ok,
        "no traffic after restart:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(lab.stop_appliance());
}
