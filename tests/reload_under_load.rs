//! Flow-safe reload under load: steady HTTP requests and one long download through a NAT VIP
//! while the config is reloaded 20 times (through the API and SIGHUP, alternately), each
//! time changing this VIP's weights and other VIPs' pools. Zero failed requests, the
//! download intact, every reload a new version that every worker runs. Needs root.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lab::testing::{Api, file_text, slow_downloads};
use lab::{LabMode, LabOptions, blob, http_get};

/// Rewrites the `[[vip.backend]]` blocks of VIP `name` with `weights` (one per backend,
/// `None` leaves that backend out).
fn set_pool(config: &str, name: &str, weights: &[Option<u32>]) -> String {
    let start = config
        .find(&format!("name = \"{name}\""))
        .unwrap_or_else(|| panic!("{name} in config"));
    let end = start + config[start..].find("\n\n").expect("end of vip block");
    let head_end = start + config[start..].find("[[vip.backend]]").expect("backends");
    let block = &config[head_end..end];
    let backends: Vec<&str> = block
        .split("[[vip.backend]]")
        .filter(|b| !b.trim().is_empty())
        .collect();
    let mut out = config[start..head_end].to_string();
    for (b, w) in backends.iter().zip(weights) {
        if let Some(w) = w {
            out.push_str("[[vip.backend]]");
            out.push_str(b.trim_end());
            out.push_str(&format!("\nweight = {w}\n"));
        }
    }
    format!("{}{}{}", &config[..start], out.trim_end(), &config[end..])
}

/// With the XDP flow cache (the default): the kernel forwards the established flows, and
/// every commit evicts what the new tables would not forward the same way.
#[test]
fn twenty_reloads_under_traffic_lose_nothing() {
    twenty_reloads(true);
}

/// The same in pure AF_XDP (`flow_cache = false`): the engine forwards every frame.
#[test]
fn twenty_reloads_under_traffic_lose_nothing_with_the_flow_cache_off() {
    twenty_reloads(false);
}

fn twenty_reloads(flow_cache: bool) {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        flow_cache: Some(flow_cache),
        ..LabOptions::default()
    });
    let cfg = lab.config(&lab.api_socket_at(0));
    assert!(
        cfg.contains(&format!("flow_cache = {flow_cache}")),
        "lab config:\n{cfg}"
    );
    lab.write_config(&cfg).expect("write");
    let vip = SocketAddr::new(LabMode::Nat.vip(false), 80);
    let log = lab.start_serving(lab::sluice!().path(), &[vip]);
    let log_text = || file_text(&log);
    let base = std::fs::read_to_string(lab.config_path()).expect("config");
    let api = Api::unix(&lab.api_socket_at(0));
    let first = api.call(|c| c.status()).expect("status").config_version;

    // The long transfer: a slow reader makes the 1 MB download last across the reloads.
    lab.client
        .try_sh("sysctl -qw net.ipv4.tcp_rmem='4096 8192 16384'")
        .expect("sysctl");
    let pace = Duration::from_millis(50);
    let limit = Duration::from_secs(5);
    let (mut downloads, serving) = slow_downloads(&lab.client, vip, pace, 1, limit);
    let (download, serving) = (downloads.remove(0), serving[0].clone());

    // Steady traffic: one request after another, every failure kept.
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let stop = Arc::clone(&stop);
        lab.client
            .in_thread(move || {
                let (mut ok, mut failed) = (0u32, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    match http_get(vip, "/whoami", Duration::from_secs(3)) {
                        Ok((200, _)) => ok += 1,
                        Ok((s, _)) => failed.push(format!("status {s}")),
                        Err(e) => failed.push(e.to_string()),
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                (ok, failed)
            })
            .expect("thread")
    };

    for i in 0..20u32 {
        // This VIP's weights change every time; other VIPs lose and regain a backend.
        let mut cfg = set_pool(
            &base,
            "nat4-tcp",
            &[Some(100), Some(100 + 10 * i), Some(50 + 5 * i)],
        );
        let third = (i % 2 == 0).then_some(100);
        cfg = set_pool(&cfg, "nat6-tcp", &[Some(100), Some(100), third]);
        cfg = set_pool(&cfg, "nat4-udp", &[Some(100 + i), third, Some(100)]);
        lab.write_config(&cfg).expect("write");
        if i % 2 == 0 {
            let c = api
                .call(|c| c.reload())
                .unwrap_or_else(|e| panic!("reload {i}: {e}\n{}", log_text()));
            assert!(c.synced, "reload {i}: not every worker ran it: {c:?}");
        } else {
            assert!(lab.reload(), "SIGHUP");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        !download.is_finished(),
        "the download ended before the reloads did: it must span them"
    );
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = traffic.join().expect("traffic thread");
    let body = download
        .join()
        .expect("download thread")
        .unwrap_or_else(|e| panic!("download broke: {e}\n{}", log_text()));
    assert!(
        body == blob(),
        "download bytes differ ({} bytes)",
        body.len()
    );
    assert!(
        failed.is_empty(),
        "{} of {} requests failed: {:?}\n{}",
        failed.len(),
        ok as usize + failed.len(),
        failed,
        log_text()
    );
    // Requests run one after another for the whole ~7 s of reloads: hundreds of them, with
    // the cache or without (each well under 10 ms when nothing stalls them).
    assert!(ok >= 100, "only {ok} requests in 20 reloads");
    let status = api.call(|c| c.status()).expect("status");
    assert!(
        status.config_version >= first + 20,
        "20 reloads, versions {first} -> {}",
        status.config_version
    );
    let backends = api.call(|c| c.backends("nat4-tcp")).expect("backends");
    assert_eq!(backends[1].weight, 290, "the last weights run");
    match (&status.flow_cache, flow_cache) {
        (Some(c), true) => {
            assert!(
                c.hits > 0,
                "the kernel forwarded nothing from the cache: {c:?}"
            );
            println!("MEASURE flow cache: {c:?}");
        }
        (None, false) => {}
        (c, _) => panic!("flow cache status {c:?} with flow_cache = {flow_cache}"),
    }
    println!(
        "MEASURE reload_under_load (flow_cache {flow_cache}): {ok} requests, 0 failed, download from {serving} intact \
         ({} bytes), versions {first} -> {}, last sync lag {:?} ms",
        body.len(),
        status.config_version,
        status.sync_lag_ms
    );
    assert!(lab.stop_appliance(), "clean exit");
}
