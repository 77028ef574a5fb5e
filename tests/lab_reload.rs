//! Flow safety across pool changes: a long TCP download keeps its backend and its bytes while
//! that backend is drained, another is added and the config is reloaded (SIGHUP), and a
//! broken config leaves the running version in place. Needs root.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lab::testing::{file_text, slow_downloads};
use lab::{LabMode, LabOptions, blob, http_get};

/// How long the download may take to get its headers.
const HEADERS: Duration = Duration::from_secs(5);

/// The NAT IPv4 TCP VIP's block of the generated config, with its backends' `lines`.
fn with_nat4_backends(config: &str, backends: &[(&str, &str)]) -> String {
    let start = config
        .find("name = \"nat4-tcp\"")
        .expect("nat4-tcp in config");
    let end = start + config[start..].find("\n\n").expect("end of vip block");
    let head_end = start + config[start..].find("[[vip.backend]]").expect("backends");
    let mut block = config[start..head_end].to_string();
    for (addr, state) in backends {
        block.push_str(&format!(
            "[[vip.backend]]\naddress = \"{addr}\"\nport = 8080\nstate = \"{state}\"\n"
        ));
    }
    format!("{}{}{}", &config[..start], block.trim_end(), &config[end..])
}

fn backend_ip(name: &str) -> String {
    let i: usize = name.trim_start_matches("be").parse().expect("backend name");
    format!("10.0.0.{}", 20 + i)
}

#[test]
fn long_transfer_survives_drain_add_and_reloads() {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        ..LabOptions::default()
    });
    let full = lab.config(&lab.dir.join("api.sock"));
    // Start with be1 and be2 only.
    let two = with_nat4_backends(&full, &[("10.0.0.21", "active"), ("10.0.0.22", "active")]);
    lab.write_config(&two).expect("config");
    let vip = SocketAddr::new(LabMode::Nat.vip(false), 80);
    let log = lab.start_serving(lab::sluice!().path(), &[vip]);
    let log_text = || file_text(&log);

    // Receive buffer small enough that the 1 MB download lasts seconds.
    lab.client
        .try_sh("sysctl -qw net.ipv4.tcp_rmem='4096 8192 16384'")
        .expect("sysctl");
    let pace = Duration::from_millis(40);
    let (mut downloads, serving) = slow_downloads(&lab.client, vip, pace, 1, HEADERS);
    let (download, serving) = (downloads.remove(0), serving[0].clone());
    assert!(serving == "be1" || serving == "be2", "served by {serving}");
    let other = if serving == "be1" { "be2" } else { "be1" };

    // Drain the backend serving the download, add be3, reload; then reload unchanged, and
    // then with a broken file.
    let drained = with_nat4_backends(
        &full,
        &[
            (&backend_ip(&serving), "drain"),
            (&backend_ip(other), "active"),
            ("10.0.0.23", "active"),
        ],
    );
    for _ in 0..3 {
        lab.write_config(&drained).expect("config");
        assert!(lab.reload(), "SIGHUP");
        std::thread::sleep(Duration::from_millis(400));
    }
    lab.write_config("[appliance]\nname = \"broken\"\n")
        .expect("config");
    assert!(lab.reload(), "SIGHUP");
    std::thread::sleep(Duration::from_millis(400));

    assert!(
        !download.is_finished(),
        "the download ended before the reloads: it must span them"
    );
    let body = download
        .join()
        .expect("download thread")
        .unwrap_or_else(|e| panic!("download broke: {e}\n{}", log_text()));
    assert_eq!(body.len(), blob().len(), "download length");
    assert!(body == blob(), "download bytes differ");

    // New flows avoid the drained backend and reach the added one; the broken file changed
    // nothing (the drained config still runs).
    let counts = lab
        .from_client(move || {
            let mut c = std::collections::BTreeMap::new();
            for _ in 0..60 {
                let (status, body) =
                    http_get(vip, "/whoami", Duration::from_secs(3)).expect("request after reload");
                assert_eq!(status, 200);
                *c.entry(String::from_utf8_lossy(&body).to_string())
                    .or_insert(0) += 1;
            }
            c
        })
        .expect("client");
    assert!(
        !counts.contains_key(&serving),
        "drained {serving} got new flows: {counts:?}"
    );
    assert!(
        counts.get("be3").copied().unwrap_or(0) > 0,
        "added be3 got nothing: {counts:?}"
    );
    // A VIP added by a reload whose backend shares a probe that is already running (same
    // address, port and check as nat4-tcp's) is served at once: it takes the probe's
    // verdict instead of waiting for a transition that will never come.
    let extra = format!(
        "{drained}\n[[vip]]\nname = \"extra\"\naddress = \"192.0.2.50\"\nport = 80\n\
         mode = \"nat\"\nhealth_check = \"http\"\n\
         [[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
        backend_ip(other)
    );
    lab.write_config(&extra).expect("config");
    lab.router
        .try_run(&["ip", "route", "add", "192.0.2.50", "via", "10.0.0.10"])
        .expect("route");
    assert!(lab.reload(), "SIGHUP");
    let extra_vip = SocketAddr::new("192.0.2.50".parse().expect("literal"), 80);
    let served = lab
        .from_client(move || {
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok((200, body)) = http_get(extra_vip, "/whoami", Duration::from_millis(500))
                {
                    return Some(String::from_utf8_lossy(&body).into_owned());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            None
        })
        .expect("client");
    assert_eq!(
        served.as_deref(),
        Some(other),
        "new VIP on a shared probe:\n{}",
        log_text()
    );

    let text = log_text();
    assert!(
        text.contains("reload rejected"),
        "broken reload not reported:\n{text}"
    );
    assert!(
        text.contains("appliance.interfaces"),
        "error names the key:\n{text}"
    );
    assert!(lab.stop_appliance(), "clean exit");
}
