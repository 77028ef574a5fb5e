//! The SYN proxy with real clients and servers (issue 42): NAT and FullNAT TCP VIPs, IPv4 and
//! IPv6, with `syn_proxy = "always"`. Linux clients connect through the appliance's cookie
//! handshake to the lab's Python backends; whole downloads and uploads of 1 MB keep every
//! byte (the backend's sequence numbers shifted toward the client, the client's
//! acknowledgements, SACK edges and windows toward the backend), the counters show that
//! every handshake was the proxy's, and slow downloads opened through the proxy carry on
//! across a takeover by a new process (the shift is part of the flow record), which checks
//! cookies with the secret the old one kept. Once the backend answered, the XDP flow cache
//! forwards the flows with their shift (most of the transfers' frames are its hits). Needs
//! root, python3 and curl.

use std::net::SocketAddr;
use std::time::Duration;

use lab::testing::{Api, file_text};
use lab::{Lab, LabMode, LabOptions, blob, crc32, http_get, slow_download, upload};

const TIMEOUT: Duration = Duration::from_secs(10);
const TOKEN: &str = "syn-proxy-lab-token-0123456789";

/// The proxied VIPs: NAT and FullNAT, both families.
fn vips() -> Vec<SocketAddr> {
    [LabMode::Nat, LabMode::FullNat]
        .iter()
        .flat_map(|m| [false, true].map(|v6| SocketAddr::new(m.vip(v6), 80)))
        .collect()
}

/// `cfg` with `syn_proxy = "always"` on every NAT and FullNAT TCP VIP.
fn proxied(cfg: &str) -> String {
    let mut parts = cfg.split("[[vip]]\n");
    let mut out = parts.next().unwrap_or_default().to_string();
    for p in parts {
        out.push_str("[[vip]]\n");
        let stateful = p.contains("mode = \"nat\"") || p.contains("mode = \"fullnat\"");
        if stateful && p.contains("protocol = \"tcp\"") {
            out.push_str("syn_proxy = \"always\"\n");
        }
        out.push_str(p);
    }
    out
}

fn start() -> Lab {
    lab::netns::require_program("python3", "python3");
    lab::netns::require_program("curl", "curl");
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat, LabMode::FullNat],
        prefix: "sp",
        ..LabOptions::default()
    });
    let (cfg, _token) = lab.config_with_listeners(TOKEN, "plain_tcp = true\n");
    let cfg = proxied(&cfg);
    assert_eq!(
        cfg.matches("syn_proxy = \"always\"").count(),
        4,
        "one per NAT/FullNAT TCP VIP:\n{cfg}"
    );
    lab.write_config(&cfg).expect("write the config");
    lab.start_serving(lab::sluice!().path(), &vips());
    lab
}

/// The sum of every sample of `family` with `label` in the appliance's metrics.
fn metric(lab: &Lab, family: &str, label: &str) -> u64 {
    let body = lab
        .lb
        .try_sh("curl -s http://127.0.0.1:9300/metrics")
        .expect("metrics");
    String::from_utf8_lossy(&body.stdout)
        .lines()
        .filter(|l| l.starts_with(family) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Frames the XDP flow cache forwarded so far.
fn cache_hits(lab: &Lab) -> u64 {
    let status = Api::unix(&lab.api_socket_at(0))
        .call(|c| c.status())
        .expect("status");
    status.flow_cache.expect("the flow cache is on").hits
}

fn steps(lab: &Lab) -> [u64; 4] {
    ["answered", "opened", "established", "bad_cookie"]
        .map(|s| metric(lab, "sluice_syn_proxy_total", &format!("step=\"{s}\"")))
}

#[test]
fn real_clients_get_every_byte_through_the_syn_proxy_and_keep_it_across_a_takeover() {
    let _serial = lab::testing::serial();
    let mut lab = start();
    let before = steps(&lab);
    let hits_before = cache_hits(&lab);
    let expected = blob();
    let up: Vec<u8> = (0..1_000_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let want_up = format!("{} {}", up.len(), crc32(&up));
    let mut connections = 0;
    for vip in vips() {
        for _ in 0..3 {
            let (code, body) = lab
                .from_client(move || http_get(vip, "/blob", TIMEOUT))
                .expect("client thread")
                .unwrap_or_else(|e| panic!("GET /blob via {vip}: {e}\n{}", lab.logs_tail(30)));
            assert_eq!(code, 200, "{vip}");
            assert!(
                body == expected,
                "{vip}: {} bytes, not the blob",
                body.len()
            );
            let up = up.clone();
            let got = lab
                .from_client(move || upload(vip, &up, TIMEOUT))
                .expect("client thread")
                .unwrap_or_else(|e| panic!("POST /upload via {vip}: {e}"));
            assert_eq!(got, want_up, "{vip}: the backend got other bytes");
            connections += 2;
        }
    }
    let after = steps(&lab);
    let [answered, opened, established, bad] =
        [0, 1, 2, 3].map(|i| after[i].saturating_sub(before[i]));
    println!(
        "MEASURE syn_proxy: {connections} connections: {answered} SYNs answered, {opened} opened, {established} established, {bad} bad cookies"
    );
    // Every handshake was the proxy's (the health checks do not go through the VIPs).
    assert!(
        answered >= connections,
        "answered {answered} < {connections}"
    );
    assert!(opened >= connections, "opened {opened} < {connections}");
    assert!(
        established >= connections,
        "established {established} < {connections}"
    );
    assert_eq!(bad, 0, "a client's ACK failed its cookie");
    // Once the backend answered, the kernel forwards the flows with their shift: each
    // download's ACKs and each upload's data (about 700 segments a MB) are cache hits.
    let hits = cache_hits(&lab) - hits_before;
    println!("MEASURE syn_proxy: {hits} frames forwarded by the XDP flow cache");
    assert!(
        hits > 100 * connections,
        "the flow cache forwarded {hits} frames of {connections} proxied connections"
    );

    // Slow downloads through the proxy, then a takeover: they finish byte for byte.
    let (tx, rx) = std::sync::mpsc::channel();
    let slow: Vec<_> = vips()
        .into_iter()
        .map(|vip| {
            let tx = tx.clone();
            lab.client
                .in_thread(move || slow_download(vip, Duration::from_millis(100), tx))
                .expect("client thread")
        })
        .collect();
    for _ in 0..slow.len() {
        rx.recv_timeout(TIMEOUT).expect("a slow download's headers");
    }
    let secret_file = {
        let mut p = lab.api_socket_at(0).into_os_string();
        p.push(".cookies");
        std::path::PathBuf::from(p)
    };
    let secret = std::fs::read(&secret_file).expect("the cookie secret beside the API socket");
    assert_eq!(secret.len(), 16);
    let (exited, log) = lab
        .take_over_at(0, lab::sluice!().path(), 1, Duration::from_secs(30))
        .expect("spawn the new process");
    assert!(exited, "the old process did not exit:\n{}", file_text(&log));
    for (vip, h) in vips().into_iter().zip(slow) {
        let body = h.join().expect("download thread").unwrap_or_else(|e| {
            // What the new process saw: its log, its drops and the proxy's steps.
            let drops = Api::unix(&lab.api_socket_at(0))
                .call(|c| c.status())
                .map(|s| {
                    s.drops
                        .iter()
                        .filter(|c| c.value > 0)
                        .map(|c| format!("{}={}", c.name, c.value))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            panic!(
                "slow download via {vip} across the takeover: {e}
drops {drops:?}, proxy                  steps {:?}
new process:
{}
{}",
                steps(&lab),
                file_text(&log),
                lab.logs_tail(30)
            )
        });
        assert!(
            body == expected,
            "{vip}: {} bytes after the takeover",
            body.len()
        );
    }
    // The new process checks the old one's cookies: it read the secret, did not draw one.
    let text = file_text(&log);
    assert!(
        !text.contains("cookie secret kept there is not used"),
        "the new process did not read the secret:\n{text}"
    );
    assert_eq!(
        std::fs::read(&secret_file).expect("the secret"),
        secret,
        "the new process drew another secret"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret_file)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the secret is root's alone");
    }
    // New connections through the new process's proxy.
    for vip in vips() {
        let (code, body) = lab
            .from_client(move || http_get(vip, "/blob", TIMEOUT))
            .expect("client thread")
            .unwrap_or_else(|e| panic!("GET /blob via {vip} after the takeover: {e}"));
        assert!(code == 200 && body == expected, "{vip} after the takeover");
    }
    assert!(
        steps(&lab)[0] >= 4,
        "the new process's proxy answered the new SYNs"
    );
}
