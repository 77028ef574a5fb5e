//! The flood matrix (issue 42): one lab with a NAT, a FullNAT and a DR VIP (IPv6, the flow
//! cache on, `[flood] threshold` sized to this machine) and one spoofed flood at a time
//! against all three at once, from [`SOURCES`] unused addresses of the client's subnet, each
//! far under its per-source rate (`off_path/spray.py`, AF_PACKET; the router blackholes
//! them):
//!
//! 1. a UDP two-datagram spray to a UDP port of each VIP address that no backend serves,
//!    with a connection table ([`CAPACITY`]) smaller than the flows it makes;
//! 2. SYNs just under the flood threshold, each a new flow the appliance keeps state for;
//! 3. SYNs three times over it: flood mode on, the SYN proxy answers the NAT and FullNAT
//!    VIPs' SYNs, the XDP program the DR VIP's.
//!
//! Meanwhile, on each VIP, a steady client opens a connection every [`CLIENT_EVERY`] and a
//! slow 1 MB download runs through all three floods. What must hold: per flood and mode, no
//! connection answered after a second or more (a lost SYN is sent again after one); over
//! the matrix, at least 99.9% of the client's connections answered (the bar); the
//! downloads intact, no new flow refused for a full table and no FullNAT SYN without a port;
//! and the mechanism, not luck: the table was pressed (entries evicted or refused by the
//! budgets) in floods 1 and 2, and in 3 flood mode switched on, the proxy answered and the
//! XDP program answered the DR VIP's SYNs itself.
//!
//! Seen: one run in CI lost one FullNAT connection of 170 in flood 3 (1,529 of 1,530 in
//! all): it connected (the proxy's cookie answer) and its request went unanswered for its
//! 3 s. A likely cause, not yet confirmed: the SYN the proxy sends the backend on the
//! client's ACK is not sent again when it is lost, and the client's retransmissions in the
//! opening phase are only kept and dropped (`synproxy::early`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lab::testing::{Spray, SprayKind, SteadyReport, steady_client};
use lab::{Lab, LabMode, blob};

/// Unused addresses of the client's subnet (2001:db8:c::/64) the floods come from.
const PREFIX: &str = "2001:db8:c::2:0";
const NET: &str = "2001:db8:c::2:0/112";
const SOURCES: u32 = 3000;
/// First frames a second per CPU above which flood mode switches on: sized to the debug
/// engine on two shared cores (the default suits a release build on its own machine).
const THRESHOLD: u32 = 2000;
/// The connection table: fewer entries than the spray's and the SYNs' flows.
const CAPACITY: u32 = 4096;
/// The UDP port of every VIP address that the spray targets: a `[[vip]]` per mode whose
/// backends do not listen on it (they answer with ICMP port unreachable at most).
const SPRAY_PORT: u16 = 5353;
/// How long each flood lasts.
const SECONDS: f64 = 10.0;
/// The steady clients' pace, and how long one connection may take.
const CLIENT_EVERY: Duration = Duration::from_millis(60);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause between the downloads' 8 KB reads: 128 reads, about 38 s, longer than the floods.
const DOWNLOAD_PACE: Duration = Duration::from_millis(300);
const MODES: [LabMode; 3] = [LabMode::Nat, LabMode::FullNat, LabMode::Dr];

struct Flood {
    what: &'static str,
    kind: SprayKind,
    port: u16,
    rate: u32,
}

const FLOODS: [Flood; 3] = [
    Flood {
        what: "UDP two-datagram spray",
        kind: SprayKind::Udp2,
        port: SPRAY_PORT,
        rate: 1600,
    },
    Flood {
        what: "SYNs under the threshold",
        kind: SprayKind::Syn,
        port: 80,
        rate: THRESHOLD * 3 / 4,
    },
    Flood {
        what: "SYNs over the threshold",
        kind: SprayKind::Syn,
        port: 80,
        rate: THRESHOLD * 3,
    },
];

/// The spray's `[[vip]]`s: UDP [`SPRAY_PORT`] on each mode's IPv6 address, to the same port
/// of both backends.
fn spray_vips() -> String {
    let mut out = String::new();
    for mode in MODES {
        let extra = match mode {
            LabMode::FullNat => format!("snat = [\"{}\"]\n", lab::SNAT6),
            _ => String::new(),
        };
        out.push_str(&format!(
            "[[vip]]\nname = \"{0}-spray\"\naddress = \"{1}\"\nport = {SPRAY_PORT}\n\
             protocol = \"udp\"\nscheduler = \"maglev\"\nmode = \"{0}\"\n{extra}",
            mode.name(),
            mode.vip(true),
        ));
        for i in 0..2 {
            out.push_str(&format!(
                "[[vip.backend]]\naddress = \"{}\"\nport = {SPRAY_PORT}\n",
                lab::backend_addr(i, true)
            ));
        }
        out.push('\n');
    }
    out
}

/// The appliance's counters a flood moves, read from its status and metrics.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    evicted: u64,
    budget_refused: u64,
    table_full: u64,
    snat_exhausted: u64,
    switched_on: u64,
    stateless: u64,
    proxy_answered: u64,
}

impl Counters {
    fn read(lab: &Lab) -> Counters {
        let api = lab.api_at(0);
        let status = api.call(|c| c.status()).expect("status");
        let metrics = api.call(|c| c.metrics()).expect("metrics");
        let sum = |name: &str, label: &str| -> u64 {
            metrics
                .lines()
                .filter(|l| l.starts_with(name) && l.contains(label))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum()
        };
        let flood = status.flood.expect("status shows flood mode");
        Counters {
            evicted: sum("sluice_conntrack_evicted", ""),
            budget_refused: sum("sluice_conntrack_budget_refused", ""),
            table_full: status.conntrack.table_full,
            snat_exhausted: status.conntrack.snat_exhausted,
            switched_on: flood.switched_on,
            stateless: flood.stateless,
            proxy_answered: sum("sluice_syn_proxy", "step=\"answered\""),
        }
    }

    fn since(self, before: Counters) -> Counters {
        Counters {
            evicted: self.evicted - before.evicted,
            budget_refused: self.budget_refused - before.budget_refused,
            table_full: self.table_full - before.table_full,
            snat_exhausted: self.snat_exhausted - before.snat_exhausted,
            switched_on: self.switched_on - before.switched_on,
            stateless: self.stateless - before.stateless,
            proxy_answered: self.proxy_answered - before.proxy_answered,
        }
    }
}

/// Runs `flood` while a steady client opens connections to each mode's VIP; the clients'
/// reports, in [`MODES`] order, and what the sender said.
fn under(lab: &Lab, flood: &Flood) -> (Vec<SteadyReport>, String) {
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = MODES
        .iter()
        .map(|m| {
            let (vip, st) = (SocketAddr::new(m.vip(true), 80), stop.clone());
            lab.client
                .in_thread(move || steady_client(vip, CLIENT_EVERY, CLIENT_TIMEOUT, st))
                .expect("client thread")
        })
        .collect();
    let said = Spray {
        prefix: PREFIX,
        sources: SOURCES,
        kind: flood.kind,
        port: flood.port,
        rate: flood.rate,
        seconds: SECONDS,
        vips: MODES.iter().map(|m| m.vip(true)).collect(),
    }
    .send(lab);
    stop.store(true, Ordering::Relaxed);
    let reports = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    (reports, said)
}

/// What `flood` must have done to the appliance (the mechanism each flood is there to
/// exercise), as failures.
fn mechanism(flood: &Flood, c: Counters) -> Vec<String> {
    let mut failures = Vec::new();
    if c.table_full > 0 || c.snat_exhausted > 0 {
        failures.push(format!(
            "{}: {} new flows found the table full, {} FullNAT SYNs no port",
            flood.what, c.table_full, c.snat_exhausted
        ));
    }
    let pressed = c.evicted + c.budget_refused > 0;
    match flood.rate > THRESHOLD {
        false if !pressed => failures.push(format!(
            "{}: the table was never pressed (no entry evicted or refused: {c:?})",
            flood.what
        )),
        true if c.switched_on == 0 || c.proxy_answered == 0 || c.stateless == 0 => {
            failures.push(format!(
                "{}: flood mode, the proxy or the DR VIP's answer in XDP never worked: {c:?}",
                flood.what
            ))
        }
        _ => {}
    }
    failures
}

#[test]
fn a_steady_client_keeps_every_connection_under_each_flood_in_every_mode() {
    let _serial = lab::testing::serial();
    let extra = format!("{}[flood]\nthreshold = {THRESHOLD}\n", spray_vips());
    let lab = super::start_modes(&MODES, "sm", &extra, CAPACITY);
    lab.router.sh(&format!("ip -6 route add blackhole {NET}"));
    let downloads: Vec<_> = MODES
        .iter()
        .map(|m| {
            let vip = SocketAddr::new(m.vip(true), 80);
            let (d, _) = lab::testing::slow_downloads(
                &lab.client,
                vip,
                DOWNLOAD_PACE,
                1,
                Duration::from_secs(10),
            );
            d.into_iter().next().expect("one download")
        })
        .collect();
    let mut failures = Vec::new();
    let (mut attempts, mut answered) = (0, 0);
    for flood in &FLOODS {
        let before = Counters::read(&lab);
        let (reports, said) = under(&lab, flood);
        let moved = Counters::read(&lab).since(before);
        let status = lab.api_at(0).call(|c| c.status()).expect("status");
        println!(
            "MEASURE flood_matrix {} ({} frames/s from {SOURCES} sources, {said}): {moved:?}; \
             table {}/{}",
            flood.what, flood.rate, status.conntrack_entries, status.conntrack_capacity
        );
        for (mode, r) in MODES.iter().zip(&reports) {
            let slow = r.slower_than(Duration::from_secs(1));
            println!(
                "MEASURE flood_matrix {} {}: client {}/{} answered, {slow} after >= 1 s, \
                 first error {:?}",
                flood.what,
                mode.name(),
                r.answered,
                r.attempts,
                r.first_error
            );
            attempts += r.attempts;
            answered += r.answered;
            // 10 s at one every 60 ms: about 166; fewer than 120 and the client stalled. A
            // SYN sent again (an answer after a second or more) fails the run; a connection
            // lost counts toward the bar below.
            if r.attempts < 120 || slow > 0 {
                failures.push(format!(
                    "{} {}: {}/{} answered, {slow} after >= 1 s ({:?})",
                    flood.what,
                    mode.name(),
                    r.answered,
                    r.attempts,
                    r.first_error
                ));
            }
        }
        failures.extend(mechanism(flood, moved));
    }
    // The bar: the steady client keeps at least 99.9% of its new connections over
    // the matrix (about 1,530: one lost is 99.93%). Each lost one is printed above with its
    // error; see the module docs for what was seen.
    println!("MEASURE flood_matrix: {answered}/{attempts} connections answered in all");
    if (answered as f64) < 0.999 * attempts as f64 {
        failures.push(format!(
            "{answered}/{attempts} connections answered, under 99.9%"
        ));
    }
    let expected = blob();
    for (mode, d) in MODES.iter().zip(downloads) {
        match d.join().expect("download") {
            Ok(body) if body == expected => {}
            Ok(body) => failures.push(format!(
                "{} download: {} bytes differ",
                mode.name(),
                body.len()
            )),
            Err(e) => failures.push(format!("{} download: {e}", mode.name())),
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        lab.log_tail(0, 40)
    );
}
