//! 1,000 DR VIPs with real backends: 600 backend addresses on three backend namespaces,
//! each VIP with one backend on each, every address under a TCP health check. The appliance
//! starts, settles health, announces every VIP to the lab's BIRD router and forwards a sample
//! of them from the client; then 300 backend addresses go away at once (a switch failure) and
//! the test prints how many versions that made and how long until every worker ran the
//! result, asserting only loosely (versions far fewer than the 300 transitions). Needs root.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lab::testing::{file_text, sample, tail};
use lab::{LabMode, LabOptions, bird, http_get};
use serde_json::Value;

const VIPS: usize = 1000;
/// Backend addresses per backend namespace.
const PER_NS: usize = 200;
/// Backend addresses taken away at once.
const DOWN: usize = 300;

fn vip(k: usize) -> String {
    format!("198.18.{}.{}", k / 250, k % 250 + 1)
}

/// Backend address `j` of backend namespace `ns`: a /32 on its LAN link, in 10.0.8.0/22
/// (the appliance reaches them on-link).
fn backend(ns: usize, j: usize) -> String {
    format!("10.0.{}.{}", 8 + ns, j + 1)
}

/// VIP `k`'s backend in namespace `ns`: every address serves five VIPs.
fn backend_of(k: usize, ns: usize) -> String {
    backend(ns, (k + ns * 67) % PER_NS)
}

/// The appliance's config. Its 3,000 probe targets get slack for a loaded 2-core machine
/// (a 1.5 s timeout, three misses before down): with less, probes that a busy debug build
/// answers late flap backends, and the test never sees all of them healthy at once.
fn config(api: &Path) -> String {
    let a4 = lab::appliance_addr(0, false);
    let a6 = lab::appliance_addr(0, true);
    let mut s = format!(
        "[appliance]\nname = \"scale\"\ninterfaces = [\"eth0\"]\numem_frames = 4096\n\
         ring_size = 1024\nconntrack_capacity = 65536\n\n\
         [api]\nsocket = \"{}\"\nmetrics = \"\"\n\n\
         [bgp]\nasn = {}\nrouter_id = \"{a4}\"\ngraceful_shutdown_wait = \"1s\"\n\n\
         [[bgp.peer]]\naddress = \"{}\"\nasn = {}\nhold_time = \"9s\"\nconnect_retry = \"1s\"\n\
         source = \"{a4}\"\nnext_hop = \"{a6}\"\n\n\
         [[health_check]]\nname = \"tcp\"\nkind = \"tcp\"\ninterval = \"2s\"\n\
         timeout = \"1500ms\"\nrise = 1\nfall = 3\n\n",
        api.display(),
        bird::APPLIANCE_ASN,
        lab::ROUTER_LAN4,
        bird::ROUTER_ASN,
    );
    for k in 0..VIPS {
        let _ = writeln!(
            s,
            "[[vip]]\nname = \"v{k}\"\naddress = \"{}\"\nport = 80\nmode = \"dr\"\n\
             health_check = \"tcp\"\nhealth_via_vip = false",
            vip(k)
        );
        for ns in 0..3 {
            let _ = writeln!(s, "[[vip.backend]]\naddress = \"{}\"", backend_of(k, ns));
        }
        s.push('\n');
    }
    s
}

/// Runs `ip -batch` in `ns` with `lines`.
fn ip_batch(ns: &lab::netns::Netns, dir: &Path, name: &str, lines: &str) {
    let path = dir.join(name);
    std::fs::write(&path, lines).expect("write ip batch");
    ns.run(&["ip", "-batch", &path.to_string_lossy()]);
}

/// (config version, every worker on it, healthy backends over all VIPs).
fn state(socket: &Path) -> Result<(u64, bool, u64), String> {
    // On a loaded machine a call may time out: the caller asks again.
    let sluice = lab::sluice!();
    let s: Value = sluice.try_ctl_json(socket, &["status"])?;
    let vips: Value = sluice.try_ctl_json(socket, &["vips"])?;
    let healthy = vips
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v["backends_healthy"].as_u64())
                .sum()
        })
        .unwrap_or(0);
    Ok((
        s["config_version"].as_u64().unwrap_or(0),
        s["synced"].as_bool().unwrap_or(false),
        healthy,
    ))
}

/// Waits up to `limit` until the appliance shows `healthy` backends, synced; returns when
/// and the version it runs.
fn wait_for(socket: &Path, healthy: u64, limit: Duration, log: &Path) -> (Instant, u64) {
    let deadline = Instant::now() + limit;
    let mut last;
    loop {
        match state(socket) {
            Ok((version, true, h)) if h == healthy => return (Instant::now(), version),
            Ok((_, synced, h)) => last = format!("{h} backends healthy (synced {synced})"),
            Err(e) => last = e,
        }
        assert!(
            Instant::now() < deadline,
            "{last}, expected {healthy} healthy; log:\n{}",
            log_tail(log)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The last 40 lines of the appliance's log.
fn log_tail(log: &Path) -> String {
    tail(&file_text(log), 40)
}

/// One sample from the metrics: `name value`.
fn metric(socket: &Path, name: &str) -> Option<f64> {
    sample(&lab::sluice!().ctl(socket, &["metrics"]).stdout, name)
}

#[test]
fn a_thousand_vips_announce_forward_and_absorb_a_storm() {
    lab::netns::require_root();
    let started = Instant::now();
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Dr],
        bgp: Some(true),
        health_checks: false,
        prefix: "sc",
        ..LabOptions::default()
    });
    // Backend addresses on the backends' LAN links, every VIP on their lo.
    let mut vips_on_lo = String::new();
    for k in 0..VIPS {
        let _ = writeln!(vips_on_lo, "addr add {}/32 dev lo", vip(k));
    }
    for ns in 0..3 {
        let mut addrs = String::new();
        for j in 0..PER_NS {
            let _ = writeln!(addrs, "addr add {}/32 dev eth0", backend(ns, j));
        }
        let be = &lab.backends[ns];
        ip_batch(be, &lab.dir, &format!("be{ns}-addrs"), &addrs);
        ip_batch(be, &lab.dir, &format!("be{ns}-vips"), &vips_on_lo);
    }
    lab.lb
        .run(&["ip", "route", "add", "10.0.8.0/22", "dev", "eth0"]);
    let api = lab.api_socket_at(0);
    lab.write_config(&config(&api)).expect("config");
    let log: PathBuf = lab
        .start_appliance(lab::sluice!().path())
        .expect("start the appliance");

    // Every backend healthy, and every VIP announced to BIRD.
    let all = (VIPS * 3) as u64;
    let (up_at, _) = wait_for(&api, all, Duration::from_secs(60), &log);
    let routes_deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = lab.birdc(&["show", "route"]).unwrap_or_default();
        let n = text
            .lines()
            .filter(|l| l.trim_start().starts_with("198.18."))
            .count();
        if n >= VIPS {
            break;
        }
        assert!(
            Instant::now() < routes_deadline,
            "BIRD has learned {n} of {VIPS} VIPs\n{}",
            log_tail(&log)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let announced = started.elapsed();

    // A sample of VIPs answers from one of its backends.
    let sample: Vec<SocketAddr> = (0..VIPS)
        .step_by(50)
        .map(|k| format!("{}:80", vip(k)).parse().expect("vip"))
        .collect();
    for addr in &sample {
        assert!(
            lab.wait_vip(*addr, Duration::from_secs(10))
                .expect("client"),
            "VIP {addr} does not answer\n{}",
            log_tail(&log)
        );
    }
    let answers = lab
        .from_client({
            let sample = sample.clone();
            move || answered(&sample, "sample")
        })
        .expect("client");
    assert_eq!(answers, sample.len(), "every sampled VIP answers");

    // The storm: 200 addresses of the first backend namespace and 100 of the second go.
    let (_, before) = wait_for(&api, all, Duration::from_secs(30), &log);
    let transitions_before = metric(&api, "sluice_health_transitions_total").unwrap_or(0.0);
    let mut del = [String::new(), String::new()];
    for j in 0..DOWN {
        let (ns, j) = (j / PER_NS, j % PER_NS);
        let _ = writeln!(del[ns], "addr del {}/32 dev eth0", backend(ns, j));
    }
    let storm = Instant::now();
    for (ns, lines) in del.iter().enumerate() {
        ip_batch(&lab.backends[ns], &lab.dir, &format!("be{ns}-down"), lines);
    }
    // Each address serves five VIPs.
    let left = all - (DOWN * 5) as u64;
    let (done, after) = wait_for(&api, left, Duration::from_secs(60), &log);
    let versions = after - before;
    let transitions =
        metric(&api, "sluice_health_transitions_total").unwrap_or(0.0) - transitions_before;
    let lag = metric(&api, "sluice_health_sync_lag_seconds");
    println!(
        "scale_vips: {VIPS} VIPs healthy {:.1} s and announced {:.1} s after the lab was built; \
         {DOWN} backends down: {transitions} transitions made {versions} versions, every worker \
         on the result {:.2} s after the addresses went (health sync lag of the last version \
         {:?} s)",
        up_at.duration_since(started).as_secs_f64(),
        announced.as_secs_f64(),
        done.duration_since(storm).as_secs_f64(),
        lag,
    );
    assert!(
        transitions >= DOWN as f64,
        "every transition counted: {transitions}"
    );
    assert!(
        versions >= 1 && versions < (DOWN / 3) as u64,
        "{versions} versions for {DOWN} transitions\n{}",
        log_tail(&log)
    );
    // Still forwarding: every VIP kept a backend in the third namespace.
    let answers = lab
        .from_client(move || answered(&sample, "after the storm"))
        .expect("client");
    assert_eq!(answers, VIPS / 50, "every sampled VIP still answers");
}

/// How many of `sample` answer: each VIP gets tries of 2 s until one answers or 20 s pass.
/// On a loaded machine a few of 20 miss their first try while health batches commit, and
/// now and then one misses a few (printed with what they saw; the cause is open).
fn answered(sample: &[SocketAddr], what: &str) -> usize {
    let mut misses = Vec::new();
    let ok = sample
        .iter()
        .filter(|a| {
            let deadline = Instant::now() + Duration::from_secs(20);
            for tries in 1.. {
                let r = http_get(**a, "/whoami", Duration::from_secs(2)).map(|r| r.0);
                if matches!(r, Ok(200)) {
                    if tries > 1 {
                        misses.push(format!("{a} answered on try {tries}"));
                    }
                    return true;
                }
                if tries == 1 || Instant::now() >= deadline {
                    misses.push(format!("{a} try {tries}: {r:?}"));
                }
                if Instant::now() >= deadline {
                    return false;
                }
            }
            false
        })
        .count();
    println!(
        "MEASURE scale {what}: {ok} of {} answered; misses: {misses:?}",
        sample.len()
    );
    ok
}
