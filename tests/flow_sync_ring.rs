//! Connection sync through an ECMP reshuffle and a pool change at once (issue 44): three
//! appliances behind BIRD (ECMP over L4 ports), a DR VIP on `wrr` with three of the lab's
//! four backends, long downloads spread over all three appliances. The operator withdraws
//! the VIP's address on the appliance that holds the most downloads (`sluice ctl withdraw`;
//! it keeps running), so the routers move its flows onto the other two (and, when it is the
//! first or the last next hop, some of theirs between them: the kernel's ECMP splits the
//! hash space in ranges), and at the same moment every appliance reloads a config that adds
//! be4 to the pool (`sluice ctl reload`), so the scheduler and the ring change while the
//! moved flows arrive. With `[sync]` every download completes with every byte, new
//! connections reach be4, and announcing the appliance again (the flows move back) breaks
//! nothing; without `[sync]` the moved `wrr` flows find no entry where they land and most
//! break (the control, so the test can tell sync from luck: ten or more flows move, each
//! surviving only when the survivor's stateless Maglev answer happens to name the backend
//! `wrr` chose). Prints `MEASURE` lines. Needs root, bird2, nftables and python3.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use lab::testing::{Download, Whoami, log_lines, poll, sample, slow_downloads, wait_for};
use lab::{Lab, LabMode, LabOptions, appliance_addr, backend_addr, blob};

const POLL: Duration = Duration::from_millis(50);
/// Downloads through the DR VIP (about a third of them through each appliance).
const FLOWS: usize = 30;
/// Between two 8 KB reads of a download: with the client's small receive buffer each 1 MB
/// download lasts about 26 s, longer than the withdraw, reload and re-announce together.
const PACE: Duration = Duration::from_millis(200);
/// The backend the reload adds to the pool (be4, by index).
const NEW: usize = 3;
/// The VIPs on the DR IPv4 address: withdrawing both takes the address off the routers.
const DR4_VIPS: [&str; 2] = ["dr4-tcp", "dr4-udp"];

fn vip() -> IpAddr {
    LabMode::Dr.vip(false)
}

/// Appliance `k`'s lab config with `be4` in no VIP's pool.
fn without_new_backend(config: &str) -> String {
    let mut text = config.to_string();
    for v6 in [false, true] {
        let block = format!(
            "[[vip.backend]]\naddress = \"{}\"\nport = 80\n",
            backend_addr(NEW, v6)
        );
        assert_eq!(
            text.matches(&block).count(),
            2,
            "be4 is in the TCP and UDP VIPs of its family:\n{config}"
        );
        text = text.replace(&block, "");
    }
    text
}

/// The lab: four backends, every appliance's pool without be4, all three routed and healthy.
fn start(sync: bool) -> Lab {
    lab::testing::require_sync_lab();
    let mut lab = lab::testing::build(LabOptions {
        backends: 4,
        modes: vec![LabMode::Dr],
        appliances: Some(3),
        scheduler: "wrr".into(),
        prefix: "fr",
        sync,
        // What moves flows here is ECMP and the pool, not health: a check timing out on a
        // loaded machine must not re-choose (reset) a backend's flows (see flow_sync.rs).
        inhibit_on_failure: true,
        ..LabOptions::default()
    });
    for k in 0..3 {
        let full = lab.config_for(k, &lab.api_socket_at(k));
        lab.write_config_at(k, &without_new_backend(&full))
            .expect("write config");
    }
    lab.start_routed(lab::sluice!().path());
    // Small receive buffers and a slow reader keep each download in flight for the test.
    lab.client
        .try_sh("sysctl -qw net.ipv4.tcp_rmem='4096 8192 16384'")
        .expect("sysctl");
    lab
}

/// Whether the router's next hops for the DR VIP are exactly appliances `ks`.
fn routed_through(lab: &Lab, ks: &[usize]) -> bool {
    lab.next_hops(vip()).is_ok_and(|h| {
        h.len() == ks.len() && ks.iter().all(|k| h.contains(&appliance_addr(*k, false)))
    })
}

/// Waits (30 s) until the router's next hops are `ks`; how long it took.
fn wait_routed(lab: &Lab, ks: &[usize], what: &str) -> Duration {
    poll(Duration::from_secs(30), POLL, || routed_through(lab, ks)).unwrap_or_else(|| {
        panic!(
            "{what}: the router's next hops never became lb{ks:?} (0-based)\n{}",
            lab.bgp_view()
        )
    })
}

/// `sluice ctl ARGS` on appliance `k`, as the operator runs it.
fn ctl(lab: &Lab, k: usize, args: &[&str]) -> String {
    lab::sluice!().ctl_ok(&lab.api_socket_at(k), args)
}

/// Withdraws (or announces again) the DR IPv4 address on appliance `k`.
fn set_announced(lab: &Lab, k: usize, announce: bool) {
    let action = if announce { "announce" } else { "withdraw" };
    for name in DR4_VIPS {
        ctl(lab, k, &[action, name]);
    }
}

/// Writes every appliance's full lab config (be4 in the pool) and reloads all three at
/// once (`sluice ctl reload` answers once every worker runs the new tables).
fn grow_pool_everywhere(lab: &Lab) -> Duration {
    for k in 0..3 {
        let full = lab.config_for(k, &lab.api_socket_at(k));
        lab.write_config_at(k, &full).expect("write config");
    }
    let t0 = Instant::now();
    let reloads: Vec<_> = (0..3)
        .map(|k| {
            let socket = lab.api_socket_at(k);
            std::thread::spawn(move || lab::sluice!().ctl(&socket, &["reload"]))
        })
        .collect();
    for (k, h) in reloads.into_iter().enumerate() {
        let said = h.join().expect("reload thread");
        assert!(
            said.ok(),
            "lb{}: sluice ctl reload: {}{}",
            k + 1,
            said.stdout,
            said.stderr
        );
    }
    t0.elapsed()
}

fn status(lab: &Lab, k: usize) -> api::Status {
    wait_for(
        &format!("lb{}'s status", k + 1),
        Duration::from_secs(30),
        Duration::from_millis(200),
        || lab.api_at(k).call(|c| c.status()).ok(),
    )
}

/// What one appliance's counters say of moved and re-chosen flows.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    /// Established TCP connections of the DR IPv4 TCP VIP in its own table.
    established: u64,
    standby_taken: u64,
    stateless_no_entry: u64,
    rechosen: u64,
}

fn counters(lab: &Lab, k: usize) -> Counters {
    let s = status(lab, k);
    let metrics = wait_for(
        &format!("lb{}'s metrics", k + 1),
        Duration::from_secs(30),
        Duration::from_millis(200),
        || lab.api_at(k).call(|c| c.metrics()).ok(),
    );
    let backends = wait_for(
        &format!("lb{}'s backends", k + 1),
        Duration::from_secs(30),
        Duration::from_millis(200),
        || lab.api_at(k).call(|c| c.backends(DR4_VIPS[0])).ok(),
    );
    Counters {
        established: backends.iter().map(|b| b.active_connections).sum(),
        standby_taken: s.sync.map_or(0, |s| s.standby_taken),
        stateless_no_entry: s.conntrack.stateless_no_entry,
        rechosen: sample(&metrics, "sluice_flows_rechosen_total")
            .unwrap_or_else(|| panic!("lb{}: no sluice_flows_rechosen_total", k + 1))
            as u64,
    }
}

fn all_counters(lab: &Lab) -> Vec<Counters> {
    (0..3).map(|k| counters(lab, k)).collect()
}

/// Each appliance's table fingerprint: equal when they forward the same way.
fn fingerprints(lab: &Lab) -> Vec<String> {
    (0..3).map(|k| status(lab, k).table_fingerprint).collect()
}

/// TCP counter `name` of `/proc/net/netstat` (`TcpExt`) in `ns`.
fn tcp_ext(ns: &lab::netns::Netns, name: &str) -> u64 {
    let out = ns.output(&["cat", "/proc/net/netstat"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("TcpExt:"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let [names, values] = rows.as_slice() else {
        panic!(
            "no TcpExt rows in /proc/net/netstat of {}:\n{text}",
            ns.name
        );
    };
    let i = names.iter().position(|n| *n == name);
    i.and_then(|i| values.get(i)?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /proc/net/netstat of {}", ns.name))
}

/// The client's SYN retransmissions and the backends' listen-queue overflows: a SYN a
/// backend drops is resent after a second, and the client's kernel gives the resent SYN a
/// new flow hash (`net.core.txrehash`), which the router's ECMP may send to another
/// appliance than the first (the lab's veths keep the sender's hash).
fn syn_trouble(lab: &Lab) -> String {
    let overflows: Vec<u64> = lab
        .backends
        .iter()
        .map(|b| tcp_ext(b, "ListenOverflows"))
        .collect();
    format!(
        "client SYN retransmissions {}, backends' listen overflows be1..be4 {overflows:?}",
        tcp_ext(&lab.client, "TCPSynRetrans")
    )
}

/// How many of `hs` did not end with the whole blob, and why. A download that ended before
/// a step it had to span (`early`) and still got the whole blob fails the test: it proves
/// nothing about that step.
fn broken_of(hs: Vec<Download>, early: &[Option<&'static str>]) -> Vec<String> {
    let expected = blob();
    hs.into_iter()
        .zip(early)
        .filter_map(
            |(h, early)| match (h.join().expect("download thread"), early) {
                (Ok(body), Some(step)) if body == expected => {
                    panic!("a download completed before {step}: make the downloads longer")
                }
                (Ok(body), _) if body == expected => None,
                (Ok(body), _) => Some(format!("{} bytes, not the blob", body.len())),
                (Err(e), _) => Some(e.to_string()),
            },
        )
        .collect()
}

/// Marks the downloads that have ended before `step` (broken ones do; whole ones must not).
fn note_ended(hs: &[Download], early: &mut [Option<&'static str>], step: &'static str) {
    for (h, e) in hs.iter().zip(early.iter_mut()) {
        if e.is_none() && h.is_finished() {
            *e = Some(step);
        }
    }
}

/// What a run saw.
struct Outcome {
    broken: Vec<String>,
    /// [`syn_trouble`] at the end.
    syn_trouble: String,
    /// The appliance withdrawn.
    out: usize,
    /// Counters before the downloads, before the withdraw, after the withdraw and the
    /// reload, and after the re-announce and the downloads' end.
    start: Vec<Counters>,
    before: Vec<Counters>,
    withdrawn: Vec<Counters>,
    after: Vec<Counters>,
}

/// Requests on new connections, through the VIP, until be4 answers some (the pool grew on
/// the appliances the routers use); the last spread.
fn new_backend_serves(lab: &Lab) -> BTreeMap<String, usize> {
    let whoami = Whoami::new(lab, SocketAddr::new(vip(), 80), Duration::from_secs(5));
    let mut last = BTreeMap::new();
    let took = poll(Duration::from_secs(30), Duration::from_millis(200), || {
        last = whoami.spread(16);
        last.contains_key("be4")
    });
    assert!(
        took.is_some(),
        "no new connection reached be4 after the reload: {last:?}\n{}",
        lab.bgp_view()
    );
    last
}

/// The appliances other than `out`.
fn others(out: usize) -> Vec<usize> {
    (0..3).filter(|k| *k != out).collect()
}

/// Withdraws appliance `out` and grows the pool on every appliance while the downloads run;
/// returns once be4 serves new connections and every appliance forwards the same way again.
fn withdraw_and_grow(lab: &Lab, out: usize) {
    let before = fingerprints(lab);
    assert!(
        before.iter().all(|f| *f == before[0]),
        "the appliances forward differently before the change: {before:?}"
    );
    let t0 = Instant::now();
    set_announced(lab, out, false);
    let gone = wait_routed(lab, &others(out), "the withdraw");
    let reload = grow_pool_everywhere(lab);
    println!(
        "MEASURE flow_sync_ring: withdraw of lb{} -> its next hop gone {gone:?} (from the withdraw: {:?}); reload of all three {reload:?}",
        out + 1,
        t0.elapsed() - reload
    );
    for k in 0..3 {
        assert!(
            lab.wait_healthy(k, Duration::from_secs(30)).is_some(),
            "lb{} did not see be4 up\n{}",
            k + 1,
            lab.bgp_view()
        );
    }
    let same = poll(Duration::from_secs(30), Duration::from_millis(200), || {
        let f = fingerprints(lab);
        f.iter().all(|x| *x == f[0]) && f[0] != before[0]
    });
    assert!(
        same.is_some(),
        "the appliances' tables differ after the reload: {:?} (before: {before:?})",
        fingerprints(lab)
    );
    let spread = new_backend_serves(lab);
    println!(
        "MEASURE flow_sync_ring: new connections while lb{} is withdrawn: {spread:?}",
        out + 1
    );
    assert!(
        routed_through(lab, &others(out)),
        "lb{} came back by itself after the reload\n{}",
        out + 1,
        lab.bgp_view()
    );
}

/// The whole scenario: downloads, the withdraw of the appliance holding the most of them
/// with the pool growing, that appliance announced again, every download joined.
fn run(lab: &Lab) -> Outcome {
    let vip = SocketAddr::new(vip(), 80);
    let start = all_counters(lab);
    let headers = Duration::from_secs(20);
    let (hs, serving) = slow_downloads(&lab.client, vip, PACE, FLOWS, headers);
    let mut by_backend: BTreeMap<String, usize> = BTreeMap::new();
    for b in serving {
        *by_backend.entry(b).or_default() += 1;
    }
    println!("MEASURE flow_sync_ring: {FLOWS} downloads served by {by_backend:?}");
    assert!(
        !by_backend.contains_key("be4"),
        "be4 served before the reload"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let mut early = vec![None; FLOWS];
    note_ended(&hs, &mut early, "the withdraw");
    let before = all_counters(lab);
    let held: Vec<u64> = before.iter().map(|c| c.established).collect();
    let out = (0..3).max_by_key(|k| held[*k]).expect("three appliances");
    let packets: Vec<u64> = (0..3)
        .map(|k| lab.client_packets_to(k).expect("nft").0)
        .collect();
    println!(
        "MEASURE flow_sync_ring: established downloads by appliance lb1..lb3: {held:?} (client packets through each: {packets:?}); withdrawing lb{}",
        out + 1
    );
    assert!(
        held.iter().sum::<u64>() >= FLOWS as u64,
        "the appliances hold {held:?} of {FLOWS} downloads"
    );
    withdraw_and_grow(lab, out);
    note_ended(&hs, &mut early, "the reload");
    let withdrawn = all_counters(lab);
    // The appliance comes back: ECMP moves every flow back to the appliance it ran on
    // before the withdraw, which still holds it.
    set_announced(lab, out, true);
    let back = wait_routed(lab, &[0, 1, 2], "the announce");
    println!(
        "MEASURE flow_sync_ring: announce of lb{} -> routed again {back:?}",
        out + 1
    );
    note_ended(&hs, &mut early, "the re-announce");
    let whoami = Whoami::new(lab, vip, Duration::from_secs(5));
    let spread = whoami.spread(30);
    println!("MEASURE flow_sync_ring: new connections with all three routed: {spread:?}");
    assert!(
        spread.keys().all(|b| b.starts_with("be")),
        "new connections failed with all three routed: {spread:?}"
    );
    let broken = broken_of(hs, &early);
    let after = all_counters(lab);
    Outcome {
        broken,
        syn_trouble: syn_trouble(lab),
        out,
        start,
        before,
        withdrawn,
        after,
    }
}

/// `after - before` of one counter, per appliance.
fn deltas(a: &[Counters], b: &[Counters], f: fn(&Counters) -> u64) -> Vec<u64> {
    a.iter()
        .zip(b)
        .map(|(x, y)| f(y).saturating_sub(f(x)))
        .collect()
}

fn measure(sync: bool, o: &Outcome) {
    let mode = if sync { "with sync" } else { "without sync" };
    let taken = deltas(&o.before, &o.withdrawn, |c| c.standby_taken);
    let taken_back = deltas(&o.withdrawn, &o.after, |c| c.standby_taken);
    let stateless = |a, b| deltas(a, b, |c| c.stateless_no_entry);
    let stateless = [
        stateless(&o.start, &o.before),
        stateless(&o.before, &o.withdrawn),
        stateless(&o.withdrawn, &o.after),
    ];
    let rechosen = deltas(&o.start, &o.after, |c| c.rechosen);
    println!("MEASURE flow_sync_ring: {mode}, {}", o.syn_trouble);
    println!(
        "MEASURE flow_sync_ring: {mode}, {} of {FLOWS} downloads broke ({} of them held by lb{}, withdrawn)",
        o.broken.len(),
        o.before[o.out].established,
        o.out + 1
    );
    println!(
        "MEASURE flow_sync_ring: {mode}, per appliance lb1..lb3: standby taken while lb{} was withdrawn {taken:?}, after its re-announce {taken_back:?}; stateless answers (no entry; the health probes' RSTs routed to the VIP are some) while the downloads started, during the withdraw, after it {stateless:?}; flows re-chosen {rechosen:?}",
        o.out + 1
    );
}

/// The control: without `[sync]`, the `wrr` flows ECMP moves find no entry where they land,
/// and the stateless answer there (the Maglev ring, grown by be4) sends most of them to a
/// backend that never saw them.
#[test]
fn without_sync_a_withdraw_with_a_pool_change_breaks_moved_wrr_flows() {
    let _serial = lab::testing::serial();
    let lab = start(false);
    let o = run(&lab);
    measure(false, &o);
    assert!(
        !o.broken.is_empty(),
        "every download survived without sync: the test cannot tell sync from luck"
    );
}

#[test]
fn with_sync_no_connection_moves_when_a_withdraw_and_a_pool_change_meet() {
    let _serial = lab::testing::serial();
    let mut lab = start(true);
    let o = run(&lab);
    measure(true, &o);
    let survivors: u64 = deltas(&o.before, &o.withdrawn, |c| c.standby_taken)
        .iter()
        .sum();
    let syncs: Vec<String> = (0..3)
        .map(|k| format!("lb{}: {:?}", k + 1, status(&lab, k).sync))
        .collect();
    assert!(
        o.broken.is_empty(),
        "downloads broken: {:?}\n{}\ncounters before {:?}\nwithdrawn {:?}\nafter {:?}\nsync:\n{}\nhealth in the logs:\n{}\n{}",
        o.broken,
        o.syn_trouble,
        o.before,
        o.withdrawn,
        o.after,
        syncs.join("\n"),
        log_lines(&lab.dir, "health: ").join("\n"),
        lab.bgp_view()
    );
    // Every flow of the withdrawn appliance sent frames meanwhile: each one was taken over.
    assert!(
        survivors >= o.before[o.out].established,
        "the survivors took {survivors} flows over, lb{} held {}: {syncs:?}",
        o.out + 1,
        o.before[o.out].established
    );
    for k in 0..3 {
        let s = status(&lab, k).sync.expect("sync status");
        assert_eq!(
            (s.auth_failures, s.garbage, s.replays, s.unknown_peer),
            (0, 0, 0, 0),
            "lb{}: {s:?}",
            k + 1
        );
    }
    for k in 0..3 {
        assert!(lab.stop_appliance_at(k), "lb{} did not exit cleanly", k + 1);
    }
}
