//! The connection-rate bench's figures: one run's connections per second, connect latency
//! and CPU per connection, each run's medians over the rounds, and the ratios to the peer
//! from the same bench (Sluice's NAT VIP to nftables DNAT, its DR VIP to the kernel's route).

use std::net::Ipv4Addr;

use serde::Serialize;

use crate::client::ClientResult;
use crate::counters::NS_PER_TICK;
use crate::cps::CpsOptions;

/// Which forwarder a run measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// Client to nginx over the direct link: no forwarder.
    Direct,
    /// lb's kernel with an nftables DNAT rule, to the NAT VIP.
    KernelNat,
    /// lb's kernel routing the DR VIP to the backend holding it.
    KernelDr,
    /// `sluice run`'s NAT VIP.
    SluiceNat,
    /// `sluice run`'s DR VIP.
    SluiceDr,
    /// `sluice run`'s NAT VIP with flood mode off (`--flood-off`).
    SluiceNatFloodOff,
    /// `sluice run`'s DR VIP with flood mode off (`--flood-off`).
    SluiceDrFloodOff,
    /// `sluice run`'s NAT VIP with `syn_proxy = "always"` (`--syn-proxy`): every
    /// handshake answered by the appliance's SYN cookie first.
    SluiceNatSynProxy,
    /// `sluice run`'s NAT VIP with `[sync]` to one peer (`--sync`): every connection's
    /// establishment and end sent as records.
    SluiceNatSync,
    /// `sluice run`'s DR VIP with `[sync]` to one peer (`--sync`).
    SluiceDrSync,
    /// The `--baseline` binary's NAT VIP (an older build, default settings).
    BaselineNat,
    /// The `--baseline` binary's DR VIP.
    BaselineDr,
}

impl RunKind {
    /// Every run, in the order of the report.
    pub const ALL: [RunKind; 12] = [
        RunKind::Direct,
        RunKind::KernelNat,
        RunKind::BaselineNat,
        RunKind::SluiceNat,
        RunKind::SluiceNatFloodOff,
        RunKind::SluiceNatSynProxy,
        RunKind::SluiceNatSync,
        RunKind::KernelDr,
        RunKind::BaselineDr,
        RunKind::SluiceDr,
        RunKind::SluiceDrFloodOff,
        RunKind::SluiceDrSync,
    ];

    /// Runs only some invocations make (`--flood-off`, `--baseline`): the report leaves
    /// them out when they did not run.
    fn optional(self) -> bool {
        matches!(
            self,
            RunKind::SluiceNatFloodOff
                | RunKind::SluiceDrFloodOff
                | RunKind::SluiceNatSynProxy
                | RunKind::SluiceNatSync
                | RunKind::SluiceDrSync
                | RunKind::BaselineNat
                | RunKind::BaselineDr
        )
    }

    /// The run of this build with default settings on the same VIP, for a variant's run
    /// (flood mode off, the SYN proxy, sync): what the variant costs, from one invocation.
    pub fn default_run(self) -> Option<RunKind> {
        match self {
            RunKind::SluiceNatFloodOff | RunKind::SluiceNatSynProxy | RunKind::SluiceNatSync => {
                Some(RunKind::SluiceNat)
            }
            RunKind::SluiceDrFloodOff | RunKind::SluiceDrSync => Some(RunKind::SluiceDr),
            _ => None,
        }
    }

    /// The run's name in the report.
    pub fn label(self) -> &'static str {
        match self {
            RunKind::Direct => "direct (client -> nginx, no forwarder)",
            RunKind::KernelNat => "kernel + nftables DNAT (NAT VIP)",
            RunKind::KernelDr => "kernel route to the VIP holder (DR VIP)",
            RunKind::SluiceNat => "sluice NAT VIP",
            RunKind::SluiceDr => "sluice DR VIP",
            RunKind::SluiceNatFloodOff => "sluice NAT VIP, flood mode off",
            RunKind::SluiceDrFloodOff => "sluice DR VIP, flood mode off",
            RunKind::SluiceNatSynProxy => "sluice NAT VIP, syn_proxy = always",
            RunKind::SluiceNatSync => "sluice NAT VIP, [sync] to one peer",
            RunKind::SluiceDrSync => "sluice DR VIP, [sync] to one peer",
            RunKind::BaselineNat => "baseline sluice NAT VIP",
            RunKind::BaselineDr => "baseline sluice DR VIP",
        }
    }

    /// The address the client connects to.
    pub(crate) fn target(self, nat: Ipv4Addr, dr: Ipv4Addr, direct: Ipv4Addr) -> Ipv4Addr {
        match self {
            RunKind::Direct => direct,
            RunKind::KernelNat
            | RunKind::SluiceNat
            | RunKind::SluiceNatFloodOff
            | RunKind::SluiceNatSynProxy
            | RunKind::SluiceNatSync
            | RunKind::BaselineNat => nat,
            RunKind::KernelDr
            | RunKind::SluiceDr
            | RunKind::SluiceDrFloodOff
            | RunKind::SluiceDrSync
            | RunKind::BaselineDr => dr,
        }
    }

    /// The kernel run Sluice's run is compared with.
    pub fn peer(self) -> Option<RunKind> {
        match self {
            RunKind::SluiceNat
            | RunKind::SluiceNatFloodOff
            | RunKind::SluiceNatSynProxy
            | RunKind::SluiceNatSync
            | RunKind::BaselineNat => Some(RunKind::KernelNat),
            RunKind::SluiceDr
            | RunKind::SluiceDrFloodOff
            | RunKind::SluiceDrSync
            | RunKind::BaselineDr => Some(RunKind::KernelDr),
            RunKind::Direct | RunKind::KernelNat | RunKind::KernelDr => None,
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpsRun {
    /// What was measured.
    pub kind: RunKind,
    /// Connections that completed the exchange.
    pub completed: u64,
    /// Connections that failed or timed out.
    pub failed: u64,
    /// Completed connections per second.
    pub rate: f64,
    /// Median connect latency (SYN sent to connected), microseconds.
    pub connect_p50_us: u32,
    /// 99th percentile connect latency, microseconds.
    pub connect_p99_us: u32,
    /// Busy CPU time of the whole machine per completed connection, microseconds.
    pub machine_us_per_conn: f64,
    /// CPU time (user + system) of the `sluice run` process per completed connection,
    /// microseconds; Sluice's runs only.
    pub appliance_us_per_conn: Option<f64>,
    /// The first failure the client saw.
    pub first_error: Option<String>,
    /// What flood mode did meanwhile (Sluice's runs): the one client address opens
    /// thousands of connections a second, which flood mode must not take for a flood.
    pub flood: Option<FloodSeen>,
    /// What connection sync sent meanwhile (the `--sync` runs).
    pub sync: Option<SyncSeen>,
}

/// Connection sync's traffic over one run: the appliance's counters and what its peer (a
/// counting socket) received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SyncSeen {
    /// Flow records sent (established and ended).
    pub records: u64,
    /// Bytes of sync datagrams the appliance sent (UDP payload).
    pub sent_bytes: u64,
    /// Datagrams and payload bytes the peer received.
    pub peer_datagrams: u64,
    /// See `peer_datagrams`.
    pub peer_bytes: u64,
    /// Flows not synced (queue full, rate spent, send refused).
    pub left_out: u64,
}

/// Flood mode's counters over one Sluice run (differences of the appliance's status).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FloodSeen {
    /// Times a CPU switched the mode on.
    pub switched_on: u64,
    /// The client's frames dropped in XDP (over its source's rate).
    pub shed: u64,
    /// Connections that proved themselves and paid the client's bucket back.
    pub refunded: u64,
    /// DR first packets the XDP program answered itself while the mode was on: the
    /// engine never saw them, so they cost the sluice process nothing.
    pub stateless: u64,
}

impl FloodSeen {
    /// The counters' growth from `a` to `b`.
    pub fn between(a: &api::Flood, b: &api::Flood) -> FloodSeen {
        FloodSeen {
            switched_on: b.switched_on.saturating_sub(a.switched_on),
            shed: b.shed.saturating_sub(a.shed),
            refunded: b.refunded.saturating_sub(a.refunded),
            stateless: b.stateless.saturating_sub(a.stateless),
        }
    }
}

impl CpsRun {
    /// The figures of one client run; `machine_ticks` and `appliance_ticks` are the CPU the
    /// machine and the appliance spent meanwhile, in `/proc/stat` ticks.
    pub fn compute(
        kind: RunKind,
        r: &ClientResult,
        machine_ticks: u64,
        appliance_ticks: Option<u64>,
    ) -> CpsRun {
        let per_conn = |ticks: u64| {
            if r.completed == 0 {
                0.0
            } else {
                ticks as f64 * NS_PER_TICK / 1e3 / r.completed as f64
            }
        };
        CpsRun {
            kind,
            completed: r.completed,
            failed: r.failed,
            rate: r.rate(),
            connect_p50_us: r.connect_percentile(50.0).unwrap_or(0),
            connect_p99_us: r.connect_percentile(99.0).unwrap_or(0),
            machine_us_per_conn: per_conn(machine_ticks),
            appliance_us_per_conn: appliance_ticks.map(per_conn),
            first_error: r.first_error.clone(),
            flood: None,
            sync: None,
        }
    }
}

/// The median of `v` (the lower middle one for an even count); 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0.0)
}

/// One run's medians over the rounds (each figure its own median).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpsMedian {
    /// What was measured.
    pub kind: RunKind,
    /// Connections per second.
    pub rate: f64,
    /// Each round's rate, in order.
    pub rates: Vec<f64>,
    /// Connect latency p50 and p99, microseconds.
    pub connect_p50_us: f64,
    /// See `connect_p50_us`.
    pub connect_p99_us: f64,
    /// Whole machine CPU per connection, microseconds.
    pub machine_us_per_conn: f64,
    /// The appliance's own CPU per connection, microseconds.
    pub appliance_us_per_conn: Option<f64>,
    /// Failed connections over all rounds.
    pub failed: u64,
    /// The rate over the peer's rate (Sluice's runs).
    pub vs_peer: Option<f64>,
    /// The rate over the direct run's.
    pub vs_direct: f64,
    /// A variant's rate over the default run's on the same VIP ([`RunKind::default_run`]).
    pub vs_default: Option<f64>,
    /// Sync bytes sent per completed connection, over all rounds (the `--sync` runs).
    pub sync_bytes_per_conn: Option<f64>,
}

/// The connection-rate bench's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpsReport {
    /// Client seconds per run.
    pub seconds: u64,
    /// Connections in flight.
    pub concurrency: usize,
    /// Client threads.
    pub threads: usize,
    /// Queues per veth (appliance workers).
    pub queues: u32,
    /// Whether the appliance spun.
    pub busy_poll: bool,
    /// `/proc/loadavg` before and after.
    pub load_before: String,
    /// See `load_before`.
    pub load_after: String,
    /// Every run of every round, in the order run.
    pub rounds: Vec<Vec<CpsRun>>,
    /// Each run's medians, in the report's order.
    pub medians: Vec<CpsMedian>,
    /// Whether the direct run beat every forwarder's median rate (the client and nginx
    /// outran what they measured).
    pub direct_fastest: bool,
}

impl CpsReport {
    pub(crate) fn new(
        options: &CpsOptions,
        rounds: Vec<Vec<CpsRun>>,
        load_before: String,
        load_after: String,
    ) -> CpsReport {
        let runs_of = |k: RunKind| -> Vec<&CpsRun> {
            rounds.iter().flatten().filter(|r| r.kind == k).collect()
        };
        let mut medians: Vec<CpsMedian> = RunKind::ALL
            .iter()
            .filter(|k| !k.optional() || !runs_of(**k).is_empty())
            .map(|&k| {
                let runs = runs_of(k);
                let m = |f: &dyn Fn(&CpsRun) -> f64| median(runs.iter().map(|r| f(r)).collect());
                CpsMedian {
                    kind: k,
                    rate: m(&|r| r.rate),
                    rates: runs.iter().map(|r| r.rate).collect(),
                    connect_p50_us: m(&|r| f64::from(r.connect_p50_us)),
                    connect_p99_us: m(&|r| f64::from(r.connect_p99_us)),
                    machine_us_per_conn: m(&|r| r.machine_us_per_conn),
                    appliance_us_per_conn: runs
                        .iter()
                        .all(|r| r.appliance_us_per_conn.is_some())
                        .then(|| m(&|r| r.appliance_us_per_conn.unwrap_or(0.0))),
                    failed: runs.iter().map(|r| r.failed).sum(),
                    vs_peer: None,
                    vs_direct: 0.0,
                    vs_default: None,
                    sync_bytes_per_conn: sync_bytes_per_conn(&runs),
                }
            })
            .collect();
        let rate_of =
            |ms: &[CpsMedian], k: RunKind| ms.iter().find(|m| m.kind == k).map_or(0.0, |m| m.rate);
        let snapshot = medians.clone();
        let direct = rate_of(&snapshot, RunKind::Direct);
        for m in &mut medians {
            m.vs_direct = ratio(m.rate, direct);
            m.vs_peer = m.kind.peer().map(|p| ratio(m.rate, rate_of(&snapshot, p)));
            m.vs_default = m
                .kind
                .default_run()
                .map(|d| ratio(m.rate, rate_of(&snapshot, d)));
        }
        let direct_fastest = snapshot
            .iter()
            .filter(|m| m.kind != RunKind::Direct)
            .all(|m| m.rate < direct);
        CpsReport {
            seconds: options.seconds,
            concurrency: options.concurrency,
            threads: options.threads,
            queues: options.queues,
            busy_poll: options.busy_poll,
            load_before,
            load_after,
            rounds,
            medians,
            direct_fastest,
        }
    }

    /// The report as a table for a terminal.
    pub fn table(&self) -> String {
        let mut s = format!(
            "sluice bench --cps: HTTP GET with Connection: close, {} in flight from {} client \
             threads, {} s per run, {} round(s), medians; {} queue(s){}\n\
             load average before {}, after {}\n\n",
            self.concurrency,
            self.threads,
            self.seconds,
            self.rounds.len(),
            self.queues,
            if self.busy_poll { ", busy_poll" } else { "" },
            self.load_before,
            self.load_after,
        );
        s.push_str(&format!(
            "{:<42} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7}\n",
            "run", "conn/s", "vs peer", "p50 us", "p99 us", "cpu us/c", "lb us/c", "failed"
        ));
        for m in &self.medians {
            s.push_str(&format!(
                "{:<42} {:>9.0} {:>8} {:>8.0} {:>8.0} {:>9.1} {:>9} {:>7}\n",
                m.kind.label(),
                m.rate,
                m.vs_peer.map_or("-".into(), |r| format!("{r:.2}x")),
                m.connect_p50_us,
                m.connect_p99_us,
                m.machine_us_per_conn,
                m.appliance_us_per_conn
                    .map_or("-".into(), |v| format!("{v:.1}")),
                m.failed,
            ));
        }
        s.push_str(
            "\nconn/s: completed exchanges per second; vs peer: Sluice's NAT VIP over nftables \
             DNAT, its DR VIP over the kernel's route; p50/p99: connect latency (connect() to \
             connected); cpu us/c: the whole machine's busy CPU per connection (client, nginx \
             and forwarder share it); lb us/c: the sluice process's own.\n",
        );
        for m in &self.medians {
            let rates: Vec<String> = m.rates.iter().map(|r| format!("{r:.0}")).collect();
            s.push_str(&format!(
                "rounds, {}: {}\n",
                m.kind.label(),
                rates.join(", ")
            ));
        }
        for r in self.rounds.iter().flatten() {
            if let Some(f) = r.flood {
                s.push_str(&format!(
                    "flood mode, {}: switched on {} times, {} frames shed, {} connections \
                     refunded, {} first packets answered in XDP\n",
                    r.kind.label(),
                    f.switched_on,
                    f.shed,
                    f.refunded,
                    f.stateless
                ));
            }
        }
        s.push_str(&self.variant_lines());
        for r in self.rounds.iter().flatten() {
            if let Some(e) = &r.first_error {
                s.push_str(&format!("first failure, {}: {e}\n", r.kind.label()));
            }
        }
        s.push_str(&if self.direct_fastest {
            "the direct run beat every forwarder: the client and nginx outran what they measured\n"
                .to_string()
        } else {
            "WARNING: a forwarder's rate reached the direct run's: the client or nginx may be \
             the limit, not the forwarder\n"
                .to_string()
        });
        s
    }
}

impl CpsReport {
    /// What each variant costs against the default run (its rate's ratio), and what sync
    /// sent in each of its runs.
    fn variant_lines(&self) -> String {
        let mut s = String::new();
        for m in &self.medians {
            if let (Some(v), Some(d)) = (m.vs_default, m.kind.default_run()) {
                s.push_str(&format!(
                    "{}: {v:.2}x the rate of {} (medians, same rounds)\n",
                    m.kind.label(),
                    d.label()
                ));
            }
            if let Some(b) = m.sync_bytes_per_conn {
                s.push_str(&format!(
                    "{}: {b:.1} sync bytes sent per connection\n",
                    m.kind.label()
                ));
            }
        }
        for r in self.rounds.iter().flatten() {
            if let Some(y) = r.sync {
                s.push_str(&format!(
                    "sync, {}: {} records, {} bytes sent; the peer received {} bytes in {} \
                     datagrams; {} flows left out\n",
                    r.kind.label(),
                    y.records,
                    y.sent_bytes,
                    y.peer_bytes,
                    y.peer_datagrams,
                    y.left_out
                ));
            }
        }
        s
    }
}

impl SyncSeen {
    /// The counters' growth from `a` to `b`.
    pub fn between(a: &SyncSeen, b: &SyncSeen) -> SyncSeen {
        SyncSeen {
            records: b.records.saturating_sub(a.records),
            sent_bytes: b.sent_bytes.saturating_sub(a.sent_bytes),
            peer_datagrams: b.peer_datagrams.saturating_sub(a.peer_datagrams),
            peer_bytes: b.peer_bytes.saturating_sub(a.peer_bytes),
            left_out: b.left_out.saturating_sub(a.left_out),
        }
    }
}

/// Sync bytes sent per completed connection over `runs`, when they synced.
fn sync_bytes_per_conn(runs: &[&CpsRun]) -> Option<f64> {
    let synced: Vec<(&SyncSeen, u64)> = runs
        .iter()
        .filter_map(|r| r.sync.as_ref().map(|s| (s, r.completed)))
        .collect();
    let conns: u64 = synced.iter().map(|(_, c)| c).sum();
    (conns > 0).then(|| synced.iter().map(|(s, _)| s.sent_bytes).sum::<u64>() as f64 / conns as f64)
}

fn ratio(x: f64, y: f64) -> f64 {
    if y > 0.0 && y.is_finite() { x / y } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn run(kind: RunKind, completed: u64, lat: &[u32]) -> CpsRun {
        let r = ClientResult {
            completed,
            failed: 1,
            elapsed: Duration::from_secs(1),
            connect_us: lat.to_vec(),
            first_error: None,
        };
        // 100 ticks = 1 s of CPU.
        CpsRun::compute(kind, &r, 100, (kind == RunKind::SluiceNat).then_some(50))
    }

    /// The bench's options for `rounds` rounds, with `--sync` or without.
    fn options(rounds: usize, sync: bool) -> CpsOptions {
        CpsOptions {
            seconds: 1,
            rounds,
            sluice: "sluice".into(),
            concurrency: 8,
            threads: 2,
            queues: 1,
            busy_poll: false,
            flood_off: false,
            syn_proxy: false,
            sync,
            baseline: None,
        }
    }

    #[test]
    fn figures_per_run_and_medians_over_rounds() {
        let r = run(RunKind::SluiceNat, 1000, &[10, 20, 30, 40]);
        assert_eq!(r.rate, 1000.0);
        assert_eq!((r.connect_p50_us, r.connect_p99_us), (20, 40));
        assert_eq!(
            r.machine_us_per_conn, 1000.0,
            "1 s of CPU over 1000 connections"
        );
        assert_eq!(r.appliance_us_per_conn, Some(500.0));

        let opts = options(3, false);
        let round = |d, k, s| {
            vec![
                run(RunKind::Direct, d, &[1]),
                run(RunKind::KernelNat, k, &[1]),
                run(RunKind::SluiceNat, s, &[1]),
            ]
        };
        let report = CpsReport::new(
            &opts,
            vec![
                round(900, 400, 100),
                round(1000, 500, 800),
                round(950, 450, 600),
            ],
            "0".into(),
            "0".into(),
        );
        let of = |k| report.medians.iter().find(|m| m.kind == k).unwrap();
        assert_eq!(
            of(RunKind::SluiceNat).rate,
            600.0,
            "median of 100, 800, 600"
        );
        assert_eq!(of(RunKind::KernelNat).rate, 450.0);
        assert_eq!(of(RunKind::SluiceNat).vs_peer, Some(600.0 / 450.0));
        assert_eq!(of(RunKind::SluiceNat).failed, 3);
        assert_eq!(of(RunKind::Direct).vs_peer, None);
        assert!(report.direct_fastest);
        assert!(report.table().contains("sluice NAT VIP"));
        // No DR runs here: their medians are zero, not a panic or NaN.
        assert_eq!(of(RunKind::SluiceDr).vs_peer, Some(0.0));
        assert!(
            !report.medians.iter().any(|m| m.kind.optional()),
            "runs this invocation did not make are left out"
        );
        let mut with_off = vec![round(900, 400, 100)];
        with_off[0].push(run(RunKind::SluiceNatFloodOff, 300, &[1]));
        let report = CpsReport::new(&opts, with_off, "0".into(), "0".into());
        let off = report
            .medians
            .iter()
            .find(|m| m.kind == RunKind::SluiceNatFloodOff)
            .expect("the flood-off run is reported");
        assert_eq!(off.vs_peer, Some(300.0 / 400.0), "against nftables DNAT");
        assert_eq!(
            off.vs_default,
            Some(300.0 / 100.0),
            "against the default run"
        );
        assert!(report.table().contains("flood mode off"));
    }

    /// A sync run is set against the default run of its VIP, and its bytes per connection
    /// are all its rounds' bytes over all their connections.
    #[test]
    fn sync_runs_report_their_cost_and_their_bytes_per_connection() {
        let opts = options(2, true);
        let synced = |completed, bytes| {
            let mut r = run(RunKind::SluiceDrSync, completed, &[1]);
            r.sync = Some(SyncSeen {
                records: 2 * completed,
                sent_bytes: bytes,
                peer_datagrams: 3,
                peer_bytes: bytes,
                left_out: 0,
            });
            r
        };
        let rounds = vec![
            vec![run(RunKind::SluiceDr, 1000, &[1]), synced(900, 90_000)],
            vec![run(RunKind::SluiceDr, 1000, &[1]), synced(800, 70_000)],
        ];
        let report = CpsReport::new(&opts, rounds, "0".into(), "0".into());
        let m = report
            .medians
            .iter()
            .find(|m| m.kind == RunKind::SluiceDrSync)
            .expect("the sync run is reported");
        assert_eq!(
            m.vs_default,
            Some(800.0 / 1000.0),
            "lower median of 900, 800"
        );
        assert_eq!(m.sync_bytes_per_conn, Some(160_000.0 / 1700.0));
        let table = report.table();
        assert!(table.contains("0.80x the rate of sluice DR VIP"), "{table}");
        assert!(
            table.contains("94.1 sync bytes sent per connection"),
            "{table}"
        );
        assert!(table.contains("1800 records, 90000 bytes sent"), "{table}");
    }

    /// Each counter is its own growth over the run, and a counter that went back (a
    /// restarted appliance) is no growth, not a wrap.
    #[test]
    fn flood_counters_are_the_growth_over_the_run() {
        let at = |n: u64| api::Flood {
            active_cpus: 0,
            first_packets: n,
            admitted: n,
            shed: n,
            switched_on: n,
            switched_off: n,
            no_room: n,
            refunded: 2 * n,
            stateless: 3 * n,
        };
        let seen = FloodSeen::between(&at(10), &at(15));
        assert_eq!(
            seen,
            FloodSeen {
                switched_on: 5,
                shed: 5,
                refunded: 10,
                stateless: 15,
            }
        );
        assert_eq!(FloodSeen::between(&at(15), &at(10)), FloodSeen::default());
    }

    #[test]
    fn median_takes_the_lower_middle() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.0);
    }
}
