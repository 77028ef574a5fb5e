//! The datapath end to end: the lab topology (client, router, appliance, three backends in
//! network namespaces) with `sluice run` forwarding real HTTP and UDP through one VIP per mode
//! (NAT, FullNAT, DR, VXLAN tunnel) and family. Needs root.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use std::net::SocketAddr;

use lab::testing::{Api, file_text};
use lab::{Lab, LabMode, LabOptions, exercise_vip, format_reports};

fn start(scheduler: &str, flow_cache: Option<bool>, queues: u32) -> Lab {
    lab::netns::require_program("python3", "python3");
    let mut lab = lab::testing::build(LabOptions {
        scheduler: scheduler.into(),
        flow_cache,
        queues,
        ..LabOptions::default()
    });
    lab.start_serving(
        lab::sluice!().path(),
        &[SocketAddr::new(LabMode::Nat.vip(false), 80)],
    );
    lab
}

/// With the XDP flow cache, the default: the kernel forwards what the engine decided.
#[test]
fn every_mode_and_family_forwards_http_and_udp() {
    every_mode_and_family(None, 1);
}

/// Pure AF_XDP: the engine forwards every frame.
#[test]
fn every_mode_and_family_forwards_http_and_udp_with_the_flow_cache_off() {
    every_mode_and_family(Some(false), 1);
}

/// Four queues on every veth, so four workers: flows spread over them, and FullNAT return
/// traffic that lands on another worker's queue is handed to the worker that owns it (veth
/// has no ntuple filters).
#[test]
fn every_mode_and_family_forwards_http_and_udp_over_four_queues() {
    every_mode_and_family(None, 4);
}

/// Four queues, pure AF_XDP: every FullNAT return frame goes through the handoff.
#[test]
fn every_mode_and_family_forwards_http_and_udp_over_four_queues_with_the_flow_cache_off() {
    every_mode_and_family(Some(false), 4);
}

fn every_mode_and_family(flow_cache: Option<bool>, queues: u32) {
    let mut lab = start("rr", flow_cache, queues);
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
        // Round robin per worker: 60 new connections land 20/20/20 on one worker; each of
        // `queues` workers cycles on its own from the first backend, which moves a backend
        // at most one flow per worker off its share.
        let counts: Vec<usize> = r.per_backend.values().copied().collect();
        assert_eq!(
            counts.len(),
            3,
            "{} {}: rr spread {:?}",
            r.mode,
            r.vip,
            r.per_backend
        );
        assert_eq!(counts.iter().sum::<usize>(), 60);
        for c in &counts {
            assert!(
                c.abs_diff(20) <= queues as usize - usize::from(queues > 1),
                "{} {}: rr spread {:?} over {queues} workers",
                r.mode,
                r.vip,
                r.per_backend
            );
        }
    }
    let api = Api::unix(&lab.api_socket_at(0));
    let status = if queues > 1 {
        workers_shared_the_flows(&api, queues)
    } else {
        api.call(|c| c.status()).expect("status")
    };
    match (&status.flow_cache, flow_cache) {
        (Some(c), None) => {
            // Every mode's established frames (DR and NAT both ways) went through the kernel.
            assert!(
                c.hits > 0,
                "the kernel forwarded nothing: {c:?}; status: {status:?}\nappliance log:\n{}",
                file_text(&lab.log_path_at(0))
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

/// Every worker's counters as the API shows them after the traffic: flows spread over at
/// least 3 of the `queues` workers (so the senders spread over the queues), FullNAT return
/// traffic was handed over between them and nothing was lost on the way. Returns the status
/// the assertions held on.
fn workers_shared_the_flows(api: &Api, queues: u32) -> api::Status {
    // The datapath's ring counters reach the API once a second.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = api.call(|c| c.status()).expect("status");
        let w = &status.workers;
        let with_flows = w.iter().filter(|w| w.new_flows > 0).count();
        let receiving = w.iter().filter(|w| w.rx_packets > 0).count();
        let handed: u64 = w.iter().map(|w| w.handed_off).sum();
        let received: u64 = w.iter().map(|w| w.handoff_received).sum();
        let settled = handed > 0 && handed == received;
        if !settled && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        assert_eq!(w.len(), queues as usize, "one worker per queue: {w:?}");
        for i in &status.interfaces {
            assert_eq!(i.queues, queues, "{i:?}");
            assert!(
                i.return_steering.starts_with("handoff"),
                "veth has no ntuple filters, so the handoff carries FullNAT returns: {i:?}"
            );
        }
        assert!(
            with_flows >= 3,
            "new flows on {with_flows} of {queues} workers: {w:?}"
        );
        assert!(
            receiving >= 3,
            "frames on {receiving} of {queues} queues: {w:?}"
        );
        assert!(
            handed > 0,
            "no FullNAT return frame needed its owner: {w:?}"
        );
        assert_eq!(
            handed, received,
            "every handed-off frame reached its owner: {w:?}"
        );
        assert!(w.iter().all(|w| w.handoff_ring_full == 0), "{w:?}");
        let entries: u64 = w.iter().map(|w| w.conntrack_entries).sum();
        assert_eq!(
            entries, status.conntrack_entries,
            "totals are the workers' sums"
        );
        println!("MEASURE lab_modes {queues} queues: {w:?}");
        return status;
    }
}

#[test]
fn maglev_spreads_and_icmp_echo_is_answered() {
    let mut lab = start("maglev", None, 1);
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
    let log = lab.start_appliance(lab::sluice!().path()).expect("restart");
    let ok = lab
        .wait_vip(
            SocketAddr::new(LabMode::Dr.vip(true), 80),
            Duration::from_secs(20),
        )
        .expect("client");
    assert!(ok, "no traffic after restart:\n{}", file_text(&log));
    assert!(lab.stop_appliance());
}
