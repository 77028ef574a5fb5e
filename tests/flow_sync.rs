//! Connection sync in the lab: three appliances behind BIRD (ECMP over L4 ports), long
//! downloads (1 MB each, every byte checked) spread over all three; SIGKILL of lb2.
//! - The control, a DR VIP on `wrr` (a choice no other appliance would make the same way)
//!   without `[sync]`: the flows ECMP moves off lb2 land on a survivor that answers them
//!   from its own choice, and some reach a backend that never saw them (reset).
//! - A FullNAT VIP on all three with `[sync]`, each appliance taking ports on its own SNAT
//!   address (`[sync] snat`) and announcing the pool with its own preferred: lb2's address
//!   moves to the survivors, which carry its downloads on mid-stream.
//!
//! DR with `[sync]`, and lb2's return (catch-up before announcing, nothing reset), are
//! `flow_sync_scale`'s, at 1,000 connections. Prints `MEASURE` lines. Needs root, bird2,
//! nftables and python3.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lab::testing::{Api, poll};
use lab::{Lab, LabMode, LabOptions, appliance_addr, blob, slow_download};

const POLL: Duration = Duration::from_millis(50);
/// Downloads through the DR VIP (about a third of them through each appliance).
const FLOWS: usize = 24;

fn start(mode: LabMode, sync: bool) -> Lab {
    lab::testing::require_sync_lab();
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![mode],
        appliances: Some(3),
        scheduler: "wrr".into(),
        prefix: "fs",
        sync,
        // Sync is tested, not health: a check timing out on a loaded machine would take
        // a backend out and re-choose (reset) its flows on that appliance; the control
        // (no sync) breaks downloads by ECMP alone.
        inhibit_on_failure: true,
        ..LabOptions::default()
    });
    lab.start_routed(lab::sluice!().path());
    lab
}

/// Long downloads through `mode`'s VIP: their threads, once each has its headers.
fn downloads(
    lab: &Lab,
    mode: LabMode,
    n: usize,
) -> Vec<std::thread::JoinHandle<std::io::Result<Vec<u8>>>> {
    let vip = SocketAddr::new(mode.vip(false), 80);
    let (tx, rx) = mpsc::channel();
    let pace = Duration::from_millis(100);
    let hs: Vec<_> = (0..n)
        .map(|_| {
            let tx = tx.clone();
            lab.client
                .in_thread(move || slow_download(vip, pace, tx))
                .expect("client thread")
        })
        .collect();
    for _ in 0..n {
        if rx.recv_timeout(Duration::from_secs(10)).is_err() {
            panic!("a download got no headers within 10 s\n{}", lab.bgp_view());
        }
    }
    hs
}

/// How many of `hs` did not end with the whole blob, and why.
fn broken_of(hs: Vec<std::thread::JoinHandle<std::io::Result<Vec<u8>>>>) -> Vec<String> {
    let expected = blob();
    hs.into_iter()
        .filter_map(|h| match h.join().expect("download thread") {
            Ok(body) if body == expected => None,
            Ok(body) => Some(format!("{} bytes, not the blob", body.len())),
            Err(e) => Some(e.to_string()),
        })
        .collect()
}

/// Runs the downloads, SIGKILLs lb2 while they run and waits for the router to drop it;
/// returns the downloads that broke and lb2's share of the client's packets before.
fn lose_lb2(lab: &mut Lab, mode: LabMode) -> (Vec<String>, u64) {
    // Small receive buffers and a slow reader keep each 1 MB download in flight for ~13 s.
    lab.client
        .try_sh("sysctl -qw net.ipv4.tcp_rmem='4096 8192 16384'")
        .expect("sysctl");
    let before = lab.client_packets_to(1).expect("nft").0;
    let hs = downloads(lab, mode, FLOWS);
    std::thread::sleep(Duration::from_millis(1500));
    let via_lb2 = lab.client_packets_to(1).expect("nft").0 - before;
    assert!(via_lb2 > 0, "ECMP sent none of the downloads through lb2");
    assert_eq!(
        hs.iter().filter(|h| h.is_finished()).count(),
        0,
        "every download must span the loss of lb2"
    );
    let killed = Instant::now();
    assert!(lab.kill_appliance_at(1), "SIGKILL lb2");
    let vip = mode.vip(false);
    let gone = poll(Duration::from_secs(15), POLL, || {
        lab.next_hops(vip)
            .is_ok_and(|h| !h.contains(&appliance_addr(1, false)) && h.len() == 2)
    });
    assert!(gone.is_some(), "the router kept lb2\n{}", lab.bgp_view());
    println!(
        "MEASURE flow_sync: SIGKILL of lb2 -> its next hop gone: {:?}",
        killed.elapsed()
    );
    (broken_of(hs), via_lb2)
}

fn status(lab: &Lab, k: usize) -> api::Status {
    Api::unix(&lab.api_socket_at(k))
        .call(|c| c.status())
        .expect("status")
}

/// The control: without `[sync]`, lb2's `wrr` flows do not survive its loss (so the test
/// below can tell sync from luck).
#[test]
fn without_sync_the_loss_of_an_appliance_breaks_its_wrr_flows() {
    let _serial = lab::testing::serial();
    let mut lab = start(LabMode::Dr, false);
    let (broken, via_lb2) = lose_lb2(&mut lab, LabMode::Dr);
    println!(
        "MEASURE flow_sync: without sync, {} of {FLOWS} downloads broke ({via_lb2} client packets went through lb2)",
        broken.len()
    );
    assert!(
        !broken.is_empty(),
        "every download survived without sync: the test cannot tell sync from luck"
    );
    assert!(status(&lab, 0).sync.is_none(), "no [sync], no sync status");
}

/// FullNAT on all three appliances, each taking ports on its own SNAT address and announcing
/// the group's pool with its own preferred: the backends' replies go to the appliance that
/// took the port; once lb2 is gone, its address is routed to the survivors, which carry its
/// flows on from their standby tables (client side and reply side, on whichever survivor
/// each lands), every byte intact.
#[test]
fn with_sync_fullnat_connections_survive_the_loss_of_the_appliance_that_took_their_ports() {
    let _serial = lab::testing::serial();
    let mut lab = start(LabMode::FullNat, true);
    // `start_routed` waited for each SNAT address to be routed to its owner alone.
    let lb2_snat = lab::snat_addr(1, false);
    let (broken, via_lb2) = lose_lb2(&mut lab, LabMode::FullNat);
    let hops = lab.next_hops(lb2_snat).unwrap_or_default();
    let taken: u64 = [0, 2]
        .iter()
        .map(|k| status(&lab, *k).sync.expect("sync").standby_taken)
        .sum();
    println!(
        "MEASURE flow_sync: FullNAT with sync, {} of {FLOWS} downloads broke; the survivors took {taken} flows of lb2 over ({via_lb2} client packets went through lb2); lb2's SNAT address now via {hops:?}",
        broken.len()
    );
    assert_eq!(
        hops,
        vec![appliance_addr(0, false), appliance_addr(2, false)],
        "lb2's SNAT address is not routed to the survivors\n{}",
        lab.bgp_view()
    );
    let counters: Vec<String> = [0, 2]
        .iter()
        .map(|k| {
            let s = status(&lab, *k);
            let drops: Vec<_> = s.drops.iter().filter(|d| d.value > 0).collect();
            format!("lb{}: drops {drops:?}, {:?}", k + 1, s.sync)
        })
        .collect();
    assert!(
        broken.is_empty(),
        "downloads broken: {broken:?}\nsurvivors:\n{}\n{}",
        counters.join("\n"),
        lab.bgp_view()
    );
    assert!(taken > 0, "no survivor took a flow from its standby table");
    for k in [0, 2] {
        assert!(lab.stop_appliance_at(k), "lb{} did not exit cleanly", k + 1);
    }
}
