//! Packets that do not fit: large UDP datagrams in fragments through the NAT and FullNAT
//! VIPs (IPv4 and IPv6) of the lab, over four queues so FullNAT return fragments that land
//! on another worker's queue follow their first fragment through the handoff. The backends'
//! echo servers answer each datagram whole, so the replies come back fragmented by the
//! backends' kernels. Needs root.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use api::{Client, Endpoint};
use lab::{Lab, LabMode, LabOptions};

fn start(prefix: &'static str, queues: u32) -> Lab {
    lab::netns::require_root();
    lab::netns::require_program("python3", "python3");
    let mut lab = Lab::build(LabOptions {
        modes: vec![LabMode::Nat, LabMode::FullNat],
        backends: 2,
        queues,
        prefix,
        ..LabOptions::default()
    })
    .unwrap_or_else(|e| panic!("lab: {e}"));
    let log = lab
        .start_appliance(std::path::Path::new(env!("CARGO_BIN_EXE_sluice")))
        .unwrap_or_else(|e| panic!("start appliance: {e}"));
    for mode in [LabMode::Nat, LabMode::FullNat] {
        let ready = lab
            .wait_vip(
                SocketAddr::new(mode.vip(false), 80),
                Duration::from_secs(20),
            )
            .expect("client thread");
        assert!(
            ready,
            "the {} VIP never answered; appliance log:\n{}",
            mode.name(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    lab
}

/// Sends `payload` to `addr` and waits for one reply, retrying twice (UDP: a datagram lost
/// to a busy machine is not the fragment table's fault, a wrong or cut reply is).
fn ask(addr: SocketAddr, payload: &[u8]) -> Result<Vec<u8>, String> {
    let bind: SocketAddr = if addr.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let s = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    s.connect(addr).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65536];
    let mut last = String::new();
    for _ in 0..3 {
        s.send(payload).map_err(|e| e.to_string())?;
        match s.recv(&mut buf) {
            Ok(n) => return Ok(buf[..n].to_vec()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("no reply: {last}"))
}

fn datagram(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The appliance's metrics: the fragment-table lines and the `fragment_*` drops.
fn fragment_metrics(lab: &Lab) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client =
        Client::new(Endpoint::Unix(lab.api_socket_at(0))).with_timeout(Duration::from_secs(5));
    let metrics = rt.block_on(client.metrics()).expect("metrics");
    metrics
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("fragment"))
        .map(str::to_string)
        .collect()
}

fn metric(lines: &[String], name: &str) -> u64 {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {lines:?}"))
}

/// 4 KB and 9 KB datagrams through NAT and FullNAT, both families: each arrives whole at a
/// backend (its echo is the whole datagram behind the backend's name) and its reply, in
/// fragments from the backend, whole at the client.
#[test]
fn large_udp_datagrams_cross_nat_and_fullnat_in_fragments_both_ways() {
    let lab = start("mf", 4);
    let before = fragment_metrics(&lab);
    let mut failures = Vec::new();
    let mut sent = 0u64;
    for mode in [LabMode::Nat, LabMode::FullNat] {
        for v6 in [false, true] {
            for (k, len) in [4096usize, 9000].into_iter().enumerate() {
                for round in 0..4u8 {
                    let vip = SocketAddr::new(mode.vip(v6), 80);
                    let payload = datagram(len, round * 2 + k as u8);
                    let want = payload.clone();
                    sent += 1;
                    let got = lab
                        .from_client(move || ask(vip, &payload))
                        .expect("client thread");
                    match got {
                        Ok(reply) if reply.ends_with(&want) && reply.len() > want.len() => {
                            let name = &reply[..reply.len() - want.len()];
                            assert!(
                                name.starts_with(b"be") && name.ends_with(b":"),
                                "{vip}: reply from {:?}",
                                String::from_utf8_lossy(name)
                            );
                        }
                        Ok(reply) => failures.push(format!(
                            "{} {vip} {len} B: reply of {} B is not the datagram echoed",
                            mode.name(),
                            reply.len()
                        )),
                        Err(e) => failures.push(format!("{} {vip} {len} B: {e}", mode.name())),
                    }
                }
            }
        }
    }
    // Workers publish their counters when idle: wait for the last ones.
    let tracked_name = "sluice_fragment_table_total{event=\"tracked\"}";
    let mut after = fragment_metrics(&lab);
    for _ in 0..50 {
        if metric(&after, tracked_name) - metric(&before, tracked_name) >= 2 * sent {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        after = fragment_metrics(&lab);
    }
    println!(
        "fragment metrics after {sent} datagrams:\n{}",
        after.join("\n")
    );
    assert!(failures.is_empty(), "{failures:#?}\nmetrics: {after:#?}");
    let grew = |name: &str| metric(&after, name) - metric(&before, name);
    // Every datagram and every reply is at least three fragments; each first fragment is
    // remembered (a retried datagram counts again) and each datagram completes.
    let tracked = grew(tracked_name);
    let completed = grew("sluice_fragment_table_total{event=\"completed\"}");
    let rewritten = grew("sluice_fragment_table_total{event=\"rewritten\"}");
    assert!(
        tracked >= 2 * sent,
        "tracked {tracked} for {sent} round trips"
    );
    assert!(completed >= 2 * sent, "completed {completed}");
    assert!(rewritten >= 2 * 2 * sent, "rewritten {rewritten}");
    assert_eq!(
        grew("sluice_dropped_packets_total{reason=\"fragment_overlap\"}"),
        0
    );
    assert_eq!(
        grew("sluice_dropped_packets_total{reason=\"fragment_no_first\"}"),
        0
    );
}
