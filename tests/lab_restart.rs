//! Graceful restart (RFC 4724) with `sluice run`: with `graceful_restart` configured, a
//! SIGTERM closes the BGP session without withdrawing and the next process takes over, so
//! the router (BIRD) keeps the VIP route through the whole restart. Without it, SIGTERM
//! withdraws (RFC 8326 graceful shutdown) and the route goes. The operator's overrides (a
//! drain, a weight, a VIP withdrawn from BGP) are kept in `[appliance] state_dir` and come
//! back with the next process; a corrupt overrides file is reported and ignored. Needs root
//! and bird2.

use std::net::IpAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lab::testing::{file_text, poll, wait_for};
use lab::{Lab, LabMode, LabOptions};

fn lab(graceful_restart: bool) -> Lab {
    lab::netns::require_root();
    lab::netns::require_program("bird", "bird2");
    lab::netns::require_program("birdc", "bird2");
    let lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        appliances: Some(1),
        bgp: Some(true),
        ..LabOptions::default()
    });
    let mut cfg = lab.config(&lab.api_socket_at(0));
    if graceful_restart {
        cfg = cfg.replace(
            "graceful_shutdown_wait = \"2s\"\n",
            "graceful_shutdown_wait = \"2s\"\ngraceful_restart = { enabled = true, restart_time = \"30s\" }\n",
        );
        assert!(cfg.contains("graceful_restart"), "config edit");
    }
    lab.write_config(&cfg).expect("write");
    lab
}

/// Whether the router has a route to `vip` (polled from another thread, by namespace name).
fn routed(router_ns: &str, vip: IpAddr) -> bool {
    let out = Command::new("ip")
        .args(["-n", router_ns, "-4", "route", "show", &vip.to_string()])
        .output();
    out.map(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
        .unwrap_or(false)
}

/// Waits (polling every 50 ms) up to `timeout` until the router has a route to `vip`.
fn wait_routed(lab: &Lab, vip: IpAddr, timeout: Duration) -> bool {
    let router = lab.router.name.clone();
    poll(timeout, Duration::from_millis(50), || routed(&router, vip)).is_some()
}

/// Restarts the appliance (SIGTERM, wait, start) while a thread polls the router every
/// 50 ms; returns (polls, polls without the route, how long the restart took).
fn restart_watching(lab: &mut Lab, vip: IpAddr) -> (u32, u32, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(AtomicU32::new(0));
    let misses = Arc::new(AtomicU32::new(0));
    let watcher = {
        let (stop, polls, misses) = (Arc::clone(&stop), Arc::clone(&polls), Arc::clone(&misses));
        let ns = lab.router.name.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                polls.fetch_add(1, Ordering::Relaxed);
                if !routed(&ns, vip) {
                    misses.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let t0 = Instant::now();
    assert!(lab.terminate_appliance_at(0), "SIGTERM");
    assert!(
        lab.wait_appliance_at(0, Duration::from_secs(15)),
        "clean exit on SIGTERM"
    );
    lab.start_appliance(lab::sluice!().path()).expect("restart");
    // The new process announces once its checks settle; give the router time to take it.
    let back = wait_routed(lab, vip, Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");
    assert!(back, "the route never came back after the restart");
    (
        polls.load(Ordering::Relaxed),
        misses.load(Ordering::Relaxed),
        took,
    )
}

#[test]
fn route_stays_through_a_restart_with_graceful_restart() {
    let mut lab = lab(true);
    let log = lab.start_appliance(lab::sluice!().path()).expect("start");
    let vip = LabMode::Nat.vip(false);
    assert!(
        wait_routed(&lab, vip, Duration::from_secs(30)),
        "router never learned {vip}:\n{}",
        file_text(&log)
    );
    let (polls, misses, took) = restart_watching(&mut lab, vip);
    println!("MEASURE graceful_restart: {polls} polls over {took:?}, {misses} without the route");
    assert!(polls >= 20, "only {polls} polls");
    assert_eq!(
        misses,
        0,
        "the route left the router during a graceful restart:\n{}",
        lab.log_text(0)
    );
    assert!(lab.stop_appliance(), "clean exit");
}

#[test]
fn route_goes_on_sigterm_without_graceful_restart() {
    let mut lab = lab(false);
    lab.start_appliance(lab::sluice!().path()).expect("start");
    let vip = LabMode::Nat.vip(false);
    assert!(
        wait_routed(&lab, vip, Duration::from_secs(30)),
        "router never learned {vip}"
    );
    let (polls, misses, took) = restart_watching(&mut lab, vip);
    println!(
        "MEASURE no_graceful_restart: {polls} polls over {took:?}, {misses} without the route"
    );
    assert!(
        misses > 0,
        "without graceful restart SIGTERM must withdraw the route"
    );
    assert!(lab.stop_appliance(), "clean exit");
}

/// The VIP's backends as `sluice ctl --json backends` reports them, polled until the API
/// answers (a process just started may not listen yet).
fn backends(lab: &Lab, vip: &str) -> Vec<api::Backend> {
    let socket = lab.api_socket_at(0);
    wait_for(
        "an answer from the API",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            lab::sluice!()
                .try_ctl_json(&socket, &["backends", vip])
                .ok()
        },
    )
}

fn backend<'a>(list: &'a [api::Backend], id: &str) -> &'a api::Backend {
    list.iter()
        .find(|b| b.id == id)
        .unwrap_or_else(|| panic!("no backend {id} in {list:?}"))
}

fn withdrawn_by_operator(lab: &Lab, vip: &str) -> bool {
    let vips: Vec<api::Vip> = lab::sluice!().ctl_json(&lab.api_socket_at(0), &["vips"]);
    vips.iter()
        .find(|v| v.name == vip)
        .unwrap_or_else(|| panic!("no VIP {vip}: {vips:?}"))
        .withdrawn_by_operator
}

fn restart(lab: &mut Lab) -> String {
    assert!(lab.terminate_appliance_at(0), "SIGTERM");
    assert!(
        lab.wait_appliance_at(0, Duration::from_secs(15)),
        "clean exit on SIGTERM"
    );
    let log = lab.start_appliance(lab::sluice!().path()).expect("restart");
    // The log is complete up to the start once the API answers.
    backends(lab, "nat4-tcp");
    file_text(&log)
}

#[test]
fn operator_overrides_survive_a_restart_and_a_corrupt_file_is_ignored() {
    let mut lab = lab(false);
    let state = lab.dir.join("im6-state");
    let cfg = std::fs::read_to_string(lab.config_path_at(0)).expect("config");
    let cfg = cfg.replacen(
        "[appliance]\n",
        &format!("[appliance]\nstate_dir = \"{}\"\n", state.display()),
        1,
    );
    assert!(cfg.contains("state_dir"), "config edit");
    lab.write_config(&cfg).expect("write");
    lab.start_appliance(lab::sluice!().path()).expect("start");
    let vip = LabMode::Nat.vip(false);
    assert!(
        wait_routed(&lab, vip, Duration::from_secs(30)),
        "router never learned {vip}"
    );
    for args in [
        &["drain", "nat4-tcp", "10.0.0.21:8080"][..],
        &["weight", "nat4-tcp", "10.0.0.22:8080", "7"],
        &["withdraw", "nat4-tcp"],
    ] {
        lab::sluice!().ctl_ok(&lab.api_socket_at(0), args);
    }
    let file = state.join("overrides.json");
    let text = std::fs::read_to_string(&file).expect("overrides.json written");
    assert!(
        text.contains("\"drain\"") && text.contains("nat4-tcp"),
        "{text}"
    );

    let log = restart(&mut lab);
    assert!(
        log.contains("operator overrides restored from"),
        "start log:\n{log}"
    );
    let list = backends(&lab, "nat4-tcp");
    let drained = backend(&list, "10.0.0.21:8080");
    assert_eq!(
        (drained.state.as_str(), drained.state_overridden),
        ("drain", true)
    );
    let weighted = backend(&list, "10.0.0.22:8080");
    assert_eq!((weighted.weight, weighted.weight_overridden), (7, true));
    assert!(withdrawn_by_operator(&lab, "nat4-tcp"), "withdrawal lost");

    // An undo is kept too: undrain, restart, the backend is active from the file.
    let undrain = ["undrain", "nat4-tcp", "10.0.0.21:8080"];
    lab::sluice!().ctl_ok(&lab.api_socket_at(0), &undrain);
    restart(&mut lab);
    let list = backends(&lab, "nat4-tcp");
    assert_eq!(backend(&list, "10.0.0.21:8080").state, "active");
    assert!(backend(&list, "10.0.0.22:8080").weight_overridden);

    // A corrupt file: reported with its path, ignored; the appliance runs on its config.
    std::fs::write(&file, "{\"format\": 1, \"backends\": [").expect("corrupt");
    let log = restart(&mut lab);
    let said = format!("{} is not a sluice overrides file", file.display());
    assert!(log.contains(&said), "start log lacks {said:?}:\n{log}");
    assert!(
        state.join("overrides.json.corrupt").exists(),
        "the corrupt file is kept aside"
    );
    let list = backends(&lab, "nat4-tcp");
    assert!(!backend(&list, "10.0.0.22:8080").weight_overridden);
    assert!(!withdrawn_by_operator(&lab, "nat4-tcp"));
    assert!(
        wait_routed(&lab, vip, Duration::from_secs(30)),
        "{vip} not announced again once the withdrawal was gone"
    );
    assert!(lab.stop_appliance(), "clean exit");
}
