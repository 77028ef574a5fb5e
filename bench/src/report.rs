//! The bench's report: rates and CPU per packet computed from a run's counters, each side
//! at its median round, the ratios between the sides, and the table and JSON
//! `sluice bench` prints.

use std::fmt::Write as _;

use serde::Serialize;

use crate::counters::{NS_PER_TICK, RawRun};
use crate::{FRAME_LEN, PORT, VIP};

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    /// What forwarded.
    pub name: String,
    /// Generator wall time, seconds.
    pub seconds: f64,
    /// Frames offered by the generator.
    pub offered: u64,
    /// Frames that reached the sink rewritten to the backend.
    pub delivered: u64,
    /// UDP frames that reached the sink NOT rewritten to the backend (a forwarder passed
    /// them on unchanged); the sink drops them too, and they do not count as delivered.
    pub sink_stray: u64,
    /// Offered rate, millions of packets per second.
    pub offered_mpps: f64,
    /// Delivered rate, millions of packets per second.
    pub delivered_mpps: f64,
    /// Delivered share of offered, percent.
    pub delivered_pct: f64,
    /// Whole-machine busy CPU time per delivered packet, nanoseconds (includes the
    /// generator, the sink and anything else running on the machine).
    pub cpu_ns_per_pkt: f64,
    /// The generator thread's own CPU time per delivered packet, nanoseconds.
    pub generator_ns_per_pkt: f64,
    /// `cpu_ns_per_pkt` minus the generator's share.
    pub without_generator_ns_per_pkt: f64,
    /// Whole-machine softirq time per delivered packet, nanoseconds.
    pub softirq_ns_per_pkt: f64,
    /// The `sluice run` process's CPU time per delivered packet (run A only).
    pub lb_process_ns_per_pkt: Option<f64>,
    /// Average busy CPUs over the run.
    pub busy_cpus: f64,
    /// Frames lb's ingress interface received.
    pub lb_ingress_rx: u64,
    /// Frames lb's ingress interface dropped on receive.
    pub lb_ingress_dropped: u64,
    /// Generator frames the veth could not hand to lb (its ring was full).
    pub generator_xmit_dropped: u64,
    /// Busy CPUs over one quiet second just before the run: other work on the machine,
    /// which `cpu_ns_per_pkt` includes and which competes with the forwarding.
    pub background_busy_cpus: f64,
}

impl RunResult {
    /// Turns raw counters into rates. Counter deltas saturate at zero, so a counter that
    /// went backwards (it cannot, short of a bug) shows as nothing delivered, not as garbage.
    pub fn compute(name: &str, raw: &RawRun) -> RunResult {
        let delivered = raw.end.delivered.saturating_sub(raw.start.delivered);
        let secs = raw.elapsed.as_secs_f64();
        let per_sec = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let per_pkt = |ns: f64| {
            if delivered > 0 {
                ns / delivered as f64
            } else {
                f64::INFINITY
            }
        };
        let busy_ns = raw.end.cpu.busy.saturating_sub(raw.start.cpu.busy) as f64 * NS_PER_TICK;
        // The CPU counters span the flood plus the drain and the sampling around it.
        let cpu_secs = match (raw.start.cpu_at, raw.end.cpu_at) {
            (Some(a), Some(b)) if b > a => (b - a).as_secs_f64(),
            _ => secs,
        };
        let softirq_ns =
            raw.end.cpu.softirq.saturating_sub(raw.start.cpu.softirq) as f64 * NS_PER_TICK;
        let gen_ns = raw.generator_cpu.as_nanos() as f64;
        let lb_ns = match (raw.start.lb_process, raw.end.lb_process) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 * NS_PER_TICK),
            _ => None,
        };
        RunResult {
            name: name.to_string(),
            seconds: secs,
            offered: raw.offered,
            delivered,
            sink_stray: raw.end.stray.saturating_sub(raw.start.stray),
            offered_mpps: per_sec(raw.offered) / 1e6,
            delivered_mpps: per_sec(delivered) / 1e6,
            delivered_pct: if raw.offered > 0 {
                100.0 * delivered as f64 / raw.offered as f64
            } else {
                0.0
            },
            cpu_ns_per_pkt: per_pkt(busy_ns),
            generator_ns_per_pkt: per_pkt(gen_ns),
            without_generator_ns_per_pkt: per_pkt((busy_ns - gen_ns).max(0.0)),
            softirq_ns_per_pkt: per_pkt(softirq_ns),
            lb_process_ns_per_pkt: lb_ns.map(per_pkt),
            lb_ingress_rx: raw
                .end
                .lb_ingress
                .rx_packets
                .saturating_sub(raw.start.lb_ingress.rx_packets),
            lb_ingress_dropped: raw
                .end
                .lb_ingress
                .rx_dropped
                .saturating_sub(raw.start.lb_ingress.rx_dropped),
            generator_xmit_dropped: raw
                .end
                .generator_link
                .tx_dropped
                .saturating_sub(raw.start.generator_link.tx_dropped),
            background_busy_cpus: 0.0,
            busy_cpus: if cpu_secs > 0.0 {
                busy_ns / 1e9 / cpu_secs
            } else {
                0.0
            },
        }
    }
}

/// The whole benchmark's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    /// Frame length without FCS.
    pub frame_len: usize,
    /// Generator seconds per run.
    pub seconds: u64,
    /// Whether the appliance's workers spun (`busy_poll`).
    pub busy_poll: bool,
    /// CPUs on this machine.
    pub cpus: usize,
    /// Every round, in order.
    pub rounds: Vec<Round>,
    /// Run A: Sluice (the round with the median delivered rate).
    pub sluice: RunResult,
    /// Run B: the kernel with nftables DNAT (the round with the median delivered rate).
    pub nftables: RunResult,
    /// Run A2: Sluice with the XDP flow cache (median round), when measured.
    pub cache: Option<RunResult>,
    /// Run C: the XDP_REDIRECT ceiling (median round), when measured.
    pub ceiling: Option<RunResult>,
    /// Run A over two queues (median round), when measured.
    pub sluice_2q: Option<RunResult>,
    /// Run A2 over two queues (median round), when measured.
    pub cache_2q: Option<RunResult>,
    /// The flow cache's delivered rate over the ceiling's (target: at least 0.8).
    pub cache_vs_ceiling: f64,
    /// The flow cache's delivered rate over nftables' (target: at least 4).
    pub cache_vs_nftables: f64,
    /// Both flow-cache targets met.
    pub cache_targets_met: bool,
    /// Sluice's delivered rate over nftables'.
    pub delivered_ratio: f64,
    /// Sluice's CPU per packet over nftables'.
    pub cpu_per_pkt_ratio: f64,
    /// The goal: Sluice delivers at least the nftables rate (in AF_XDP copy mode).
    pub target_met: bool,
    /// How the runs were set up, for the reader of the numbers.
    pub notes: Vec<String>,
}

/// One run A and the runs after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Round {
    /// Run A.
    pub sluice: RunResult,
    /// Run B.
    pub nftables: RunResult,
    /// Run A2: the flow cache.
    pub cache: Option<RunResult>,
    /// Run C: the XDP_REDIRECT ceiling.
    pub ceiling: Option<RunResult>,
    /// Run A over two queues (two workers, one generator per CPU).
    pub sluice_2q: Option<RunResult>,
    /// Run A2 over two queues.
    pub cache_2q: Option<RunResult>,
}

/// The run with the median delivered rate (the lower middle one for an even count).
pub(crate) fn median_run<'a>(runs: impl Iterator<Item = &'a RunResult>) -> RunResult {
    let mut v: Vec<&RunResult> = runs.collect();
    v.sort_by(|x, y| x.delivered_mpps.total_cmp(&y.delivered_mpps));
    v.get(v.len().saturating_sub(1) / 2)
        .map(|r| (*r).clone())
        .unwrap_or_else(|| RunResult::compute("none", &RawRun::default()))
}

impl BenchReport {
    pub(crate) fn new(seconds: u64, rounds: Vec<Round>) -> BenchReport {
        let a = median_run(rounds.iter().map(|r| &r.sluice));
        let b = median_run(rounds.iter().map(|r| &r.nftables));
        let ratio = |x: f64, y: f64| {
            if y > 0.0 && y.is_finite() {
                x / y
            } else {
                f64::NAN
            }
        };
        let cache = rounds
            .iter()
            .any(|r| r.cache.is_some())
            .then(|| median_run(rounds.iter().filter_map(|r| r.cache.as_ref())));
        let ceiling = rounds
            .iter()
            .any(|r| r.ceiling.is_some())
            .then(|| median_run(rounds.iter().filter_map(|r| r.ceiling.as_ref())));
        let median_of = |f: fn(&Round) -> Option<&RunResult>| {
            rounds
                .iter()
                .any(|r| f(r).is_some())
                .then(|| median_run(rounds.iter().filter_map(f)))
        };
        let sluice_2q = median_of(|r| r.sluice_2q.as_ref());
        let cache_2q = median_of(|r| r.cache_2q.as_ref());
        let cache_mpps = cache.as_ref().map_or(0.0, |c| c.delivered_mpps);
        let cache_vs_ceiling = ratio(
            cache_mpps,
            ceiling.as_ref().map_or(0.0, |c| c.delivered_mpps),
        );
        let cache_vs_nftables = ratio(cache_mpps, b.delivered_mpps);
        BenchReport {
            cache_targets_met: cache_vs_ceiling >= 0.8 && cache_vs_nftables >= 4.0,
            cache_vs_ceiling,
            cache_vs_nftables,
            cache,
            ceiling,
            sluice_2q,
            cache_2q,
            frame_len: FRAME_LEN,
            seconds,
            busy_poll: false,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            rounds,
            delivered_ratio: ratio(a.delivered_mpps, b.delivered_mpps),
            cpu_per_pkt_ratio: ratio(a.cpu_ns_per_pkt, b.cpu_ns_per_pkt),
            target_met: a.delivered > 0 && a.delivered_mpps >= b.delivered_mpps,
            sluice: a,
            nftables: b,
            notes: notes(),
        }
    }

    /// The table `sluice bench` prints.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "sluice bench: {}-byte UDP frames to {VIP}:{PORT} over veth, {} s per run, {} \
             round(s), {} CPUs, appliance busy_poll {}",
            self.frame_len,
            self.seconds,
            self.rounds.len(),
            self.cpus,
            self.busy_poll
        );
        head(
            &mut s,
            [
                "run",
                "offered",
                "delivered",
                "deliv",
                "CPU",
                "gen",
                "w/o gen",
                "softirq",
                "sluice",
                "busy",
                "bg",
            ],
        );
        head(
            &mut s,
            [
                "", "Mpps", "Mpps", "%", "ns/pkt", "ns/pkt", "ns/pkt", "ns/pkt", "ns/pkt", "CPUs",
                "CPUs",
            ],
        );
        let medians = sides(&Round {
            sluice: self.sluice.clone(),
            nftables: self.nftables.clone(),
            cache: self.cache.clone(),
            ceiling: self.ceiling.clone(),
            sluice_2q: self.sluice_2q.clone(),
            cache_2q: self.cache_2q.clone(),
        });
        if self.rounds.len() > 1 {
            for (i, round) in self.rounds.iter().enumerate() {
                for r in &sides(round) {
                    row(&mut s, format!("{}: {}", i + 1, r.name), r);
                }
            }
            for r in &medians {
                row(&mut s, format!("median: {}", r.name), r);
            }
        } else {
            for r in &medians {
                row(&mut s, r.name.clone(), r);
            }
        }
        self.summary(&mut s, &medians);
        s
    }

    /// The lines under the table: each median run's counters, the ratios and the notes.
    fn summary(&self, s: &mut String, medians: &[RunResult]) {
        for r in medians {
            let _ = writeln!(
                s,
                "{}: offered {}, generator xmit drops {}, lb eth0 received {} (dropped {}), \
                 delivered {}, UDP at the sink not rewritten {}",
                r.name,
                r.offered,
                r.generator_xmit_dropped,
                r.lb_ingress_rx,
                r.lb_ingress_dropped,
                r.delivered,
                r.sink_stray
            );
        }
        let _ = writeln!(
            s,
            "sluice / nftables: delivered rate x{:.2}, CPU per packet x{:.2}; target \
             (sluice delivers at least the nftables rate): {}",
            self.delivered_ratio,
            self.cpu_per_pkt_ratio,
            if self.target_met { "met" } else { "NOT met" }
        );
        if let (Some(c), Some(x)) = (&self.cache, &self.ceiling) {
            let _ = writeln!(
                s,
                "flow cache: {:.3} Mpps = x{:.2} the XDP_REDIRECT ceiling ({:.3} Mpps; target \
                 >= 0.8), x{:.2} nftables DNAT (target >= 4): {}",
                c.delivered_mpps,
                self.cache_vs_ceiling,
                x.delivered_mpps,
                self.cache_vs_nftables,
                if self.cache_targets_met {
                    "met"
                } else {
                    "NOT met"
                }
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "  - {n}");
        }
    }
}

/// One line of the table's two-line header.
fn head(s: &mut String, cols: [&str; 11]) {
    let _ = writeln!(
        s,
        "{:<34} {:>8} {:>9} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6}",
        cols[0],
        cols[1],
        cols[2],
        cols[3],
        cols[4],
        cols[5],
        cols[6],
        cols[7],
        cols[8],
        cols[9],
        cols[10]
    );
}

/// One run's row of the table.
fn row(s: &mut String, label: String, r: &RunResult) {
    let _ = writeln!(
        s,
        "{:<34} {:>8.3} {:>9.3} {:>6.1} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8} {:>6.2} {:>6.2}",
        label,
        r.offered_mpps,
        r.delivered_mpps,
        r.delivered_pct,
        r.cpu_ns_per_pkt,
        r.generator_ns_per_pkt,
        r.without_generator_ns_per_pkt,
        r.softirq_ns_per_pkt,
        r.lb_process_ns_per_pkt
            .map_or_else(|| "-".to_string(), |v| format!("{v:.0}")),
        r.busy_cpus,
        r.background_busy_cpus
    );
}

/// A round's runs in the order the table shows them.
fn sides(r: &Round) -> Vec<RunResult> {
    let mut v = vec![r.sluice.clone()];
    v.extend(r.cache.clone());
    v.extend(r.ceiling.clone());
    v.push(r.nftables.clone());
    v.extend(r.sluice_2q.clone());
    v.extend(r.cache_2q.clone());
    v
}

/// How the runs were set up, for the reader of the numbers.
fn notes() -> Vec<String> {
    vec![
        "topology: gen -- lb -- sink over two veth pairs (two-arm), 1 queue each; the \
         \", 2 queues\" runs on a copy whose veths have 2 queues (2 workers), fed by two \
         generators pinned to CPUs 0 and 1, one flow each"
            .into(),
        "generator: BPF_PROG_TEST_RUN live frames (XDP_TX out of gen's veth), one \
         flow; its program rewrites the template into every frame, because recycled \
         live-frame pages keep whatever the kernel's forwarding wrote into them"
            .into(),
        "sink: bpf/sink.bpf.c on the sink's s0 in native XDP mode counts IPv4 UDP \
         to the backend's address and port (and, apart, UDP that was not rewritten) \
         and drops all UDP at XDP (XDP-forwarded frames never become an skb); generator, forwarder and \
         sink share one CPU, and the sink is measuring apparatus (on real hardware \
         another machine), so it is as cheap as it can be and the same for every run"
            .into(),
        "run A: `sluice run` with one NAT VIP and `flow_cache = false` (pure AF_XDP: \
         every frame goes through the engine); XDP and AF_XDP bind modes as the \
         appliance logged them (below)"
            .into(),
        "run B: Sluice stopped; ip_forward=1, nftables `table ip sluicebench` DNAT in \
         prerouting; GRO on on lb's eth0 so the generator's XDP_TX frames are accepted \
         without an XDP program"
            .into(),
        "run A2: `sluice run` with the same config and `flow_cache = true`: the engine \
         decides the flow, the XDP program forwards its frames with a DEVMAP redirect"
            .into(),
        "run C (ceiling): bpf/ceiling.bpf.c on eth0, no lookup: destination \
         rewritten to the backend, MACs set, DEVMAP redirect to eth1"
            .into(),
        "the sink's s0 has GRO off: its XDP program already gives the veth the NAPI \
         that frames XDP-redirected into eth1 need; kernel-forwarded skbs (run B) \
         meet the same program in veth's skb path, which first copies an skb whose \
         buffer XDP cannot use in place (e.g. less than 256 bytes of headroom)"
            .into(),
        "CPU: whole-machine busy time (/proc/stat) over the run divided by delivered \
         packets, including the generator, the sink and any other load"
            .into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{CpuTimes, Sample};
    use std::time::Duration;

    fn raw(delivered: u64, busy_ticks: u64, offered: u64, secs: u64) -> RawRun {
        RawRun {
            start: Sample {
                delivered: 1000,
                stray: 40,
                cpu: CpuTimes {
                    busy: 5000,
                    softirq: 700,
                },
                lb_process: Some(10),
                ..Sample::default()
            },
            end: Sample {
                delivered: 1000 + delivered,
                stray: 43,
                cpu: CpuTimes {
                    busy: 5000 + busy_ticks,
                    softirq: 700 + busy_ticks / 2,
                },
                lb_process: Some(10 + busy_ticks / 4),
                ..Sample::default()
            },
            offered,
            elapsed: Duration::from_secs(secs),
            generator_cpu: Duration::from_millis(busy_ticks * 10 / 4),
        }
    }

    #[test]
    fn rates_and_cpu_per_packet_come_from_deltas() {
        // 2 s, 4 M delivered of 10 M offered, 300 ticks = 3 s of CPU.
        let r = RunResult::compute("x", &raw(4_000_000, 300, 10_000_000, 2));
        assert_eq!(r.delivered, 4_000_000);
        assert_eq!(r.sink_stray, 3, "UDP the sink saw not rewritten, apart");
        assert!((r.offered_mpps - 5.0).abs() < 1e-9);
        assert!((r.delivered_mpps - 2.0).abs() < 1e-9);
        assert!((r.delivered_pct - 40.0).abs() < 1e-9);
        assert!(
            (r.cpu_ns_per_pkt - 750.0).abs() < 1e-9,
            "{}",
            r.cpu_ns_per_pkt
        );
        assert!((r.softirq_ns_per_pkt - 375.0).abs() < 1e-9);
        assert!((r.generator_ns_per_pkt - 187.5).abs() < 1e-9);
        assert!((r.without_generator_ns_per_pkt - 562.5).abs() < 1e-9);
        assert!((r.lb_process_ns_per_pkt.expect("lb") - 187.5).abs() < 1e-9);
        assert!((r.busy_cpus - 1.5).abs() < 1e-9);
    }

    fn one_round(sluice: RunResult, nftables: RunResult) -> BenchReport {
        BenchReport::new(
            1,
            vec![Round {
                sluice,
                nftables,
                cache: None,
                ceiling: None,
                sluice_2q: None,
                cache_2q: None,
            }],
        )
    }

    #[test]
    fn rounds_report_each_side_at_its_median_round() {
        let run = |name: &str, delivered: u64| {
            RunResult::compute(name, &raw(delivered, 300, 6_000_000, 1))
        };
        let rounds = vec![
            Round {
                sluice: run("a", 1_000_000),
                nftables: run("b", 2_500_000),
                cache: None,
                ceiling: None,
                sluice_2q: None,
                cache_2q: None,
            },
            Round {
                sluice: run("a", 3_000_000),
                nftables: run("b", 1_500_000),
                cache: None,
                ceiling: None,
                sluice_2q: None,
                cache_2q: None,
            },
            Round {
                sluice: run("a", 2_000_000),
                nftables: run("b", 2_000_000),
                cache: None,
                ceiling: None,
                sluice_2q: None,
                cache_2q: None,
            },
        ];
        let rep = BenchReport::new(1, rounds);
        assert_eq!(rep.sluice.delivered, 2_000_000);
        assert_eq!(rep.nftables.delivered, 2_000_000);
        assert!((rep.delivered_ratio - 1.0).abs() < 1e-9);
        let t = rep.table();
        assert_eq!(
            t.lines().filter(|l| l.starts_with("median: ")).count(),
            2,
            "{t}"
        );
        assert!(t.lines().any(|l| l.starts_with("3: a")), "{t}");
        // An even count takes the lower middle round of each side.
        let two = BenchReport::new(
            1,
            vec![
                Round {
                    sluice: run("a", 1_000_000),
                    nftables: run("b", 1_000_000),
                    cache: None,
                    ceiling: None,
                    sluice_2q: None,
                    cache_2q: None,
                },
                Round {
                    sluice: run("a", 3_000_000),
                    nftables: run("b", 3_000_000),
                    cache: None,
                    ceiling: None,
                    sluice_2q: None,
                    cache_2q: None,
                },
            ],
        );
        assert_eq!(two.sluice.delivered, 1_000_000);
    }

    #[test]
    fn the_flow_cache_is_compared_with_the_ceiling_and_nftables() {
        let run = |name: &str, delivered: u64| {
            RunResult::compute(name, &raw(delivered, 300, 9_000_000, 1))
        };
        let round = |cache: u64| Round {
            sluice: run("a", 1_000_000),
            nftables: run("b", 1_000_000),
            cache: Some(run("cache", cache)),
            ceiling: Some(run("ceiling", 5_000_000)),
            sluice_2q: None,
            cache_2q: None,
        };
        let met = BenchReport::new(1, vec![round(4_500_000)]);
        assert!((met.cache_vs_ceiling - 0.9).abs() < 1e-9);
        assert!((met.cache_vs_nftables - 4.5).abs() < 1e-9);
        assert!(met.cache_targets_met);
        let t = met.table();
        assert!(t.lines().any(|l| l.starts_with("cache ")), "{t}");
        assert!(t.lines().any(|l| l.starts_with("ceiling ")), "{t}");
        assert!(t.contains("x0.90 the XDP_REDIRECT ceiling"), "{t}");
        // 3.9 Mpps: 0.78 of the ceiling and 3.9x nftables, both short.
        let short = BenchReport::new(1, vec![round(3_900_000)]);
        assert!(!short.cache_targets_met);
        assert!(short.table().contains("NOT met"));
        // Without the cache runs the report has no such line.
        let old = one_round(run("a", 1), run("b", 1));
        assert!(old.cache.is_none() && !old.table().contains("flow cache:"));
    }

    #[test]
    fn nothing_delivered_is_not_a_division_by_zero() {
        let r = RunResult::compute("x", &raw(0, 100, 1_000_000, 1));
        assert_eq!(r.delivered_mpps, 0.0);
        assert!(r.cpu_ns_per_pkt.is_infinite());
        let report = one_round(r.clone(), r);
        assert!(report.delivered_ratio.is_nan());
        assert!(report.table().contains("delivered rate x"));
    }

    #[test]
    fn report_table_and_json_carry_both_rows_and_the_ratio() {
        let a = RunResult::compute("sluice", &raw(3_000_000, 300, 6_000_000, 1));
        let b = RunResult::compute("nft", &raw(2_000_000, 300, 6_000_000, 1));
        let rep = one_round(a, b);
        assert!((rep.delivered_ratio - 1.5).abs() < 1e-9);
        assert!(rep.target_met);
        assert!(rep.table().contains("rate): met"));
        let slower = one_round(rep.nftables.clone(), rep.sluice.clone());
        assert!(!slower.target_met);
        assert!(slower.table().contains("NOT met"));
        assert!((rep.cpu_per_pkt_ratio - 2.0 / 3.0).abs() < 1e-9);
        let t = rep.table();
        assert!(t.contains("x1.50"), "{t}");
        assert!(
            t.contains("delivered 3000000, UDP at the sink not rewritten 3"),
            "{t}"
        );
        assert!(
            t.lines()
                .any(|l| l.starts_with("sluice ") && l.contains("3.000")),
            "{t}"
        );
        assert!(
            t.lines()
                .any(|l| l.starts_with("nft ") && l.contains("2.000")),
            "{t}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&rep).expect("serialises"))
                .expect("valid json");
        assert_eq!(json["sluice"]["delivered"], 3_000_000);
        assert_eq!(json["nftables"]["delivered"], 2_000_000);
        assert_eq!(json["frame_len"], 64);
    }
}
