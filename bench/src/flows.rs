//! `sluice bench --flows N,M,...`: the packet-rate bench at many concurrent flows. The
//! generator cycles through N UDP flows (source addresses of the gen namespace's subnet
//! times source ports: [`FlowSpace`]), so every flow recurs every N frames; each flow count
//! gets its own one-queue topology and rounds of the pure engine (A), the flow cache (A2),
//! the XDP_REDIRECT ceiling (C), the ceiling with one lookup a frame in an LRU hash of the
//! flow cache's own geometry (CL: what any forwarder on the kernel's LRU hash can reach),
//! and nftables DNAT (B); with `--baseline`, an older build's A and A2 too. Beside the rates it reports what the
//! tables did: the cache's hit ratio and entries, the connection table's entries against its
//! capacity and what it evicted or refused, and the memory per flow (the process's resident
//! growth over the connection table's entries; the cache map's kernel memory over its
//! capacity), since the API counts entries but not bytes.
//!
//! Every run's warm-up establishes every flow first (the backend answers each flow once,
//! see `answer.rs`); the timed flood is one-way. Runs A and A2 turn flood mode off
//! (`[flood] enabled = false`), so they measure the engine and the cache, not the flood
//! defence. One more run per round, A2d, is the cache with the default flood settings (what
//! an operator gets), with the frames flood mode shed.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::Serialize;

use crate::cps::loadavg;
use crate::generator::FlowSpace;
use crate::report::{RunResult, median_run};
use crate::topology::Bench;
use crate::{BenchError, BenchOptions};

/// The appliance's IPv4 flow-cache map (steer.bpf.c `flow_cache4`).
const CACHE_MAP4: &str = "flow_cache4";

/// The flow counts `--flows` runs when given no list.
pub const DEFAULT_FLOWS: [u32; 3] = [256, 65_536, 1_000_000];

/// What the tables said at the end of the last round's runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TableState {
    /// Connection-table entries and capacity (run A, summed over workers).
    pub conntrack_entries: u64,
    /// See `conntrack_entries`.
    pub conntrack_capacity: u64,
    /// Entries created, expired, evicted (embryonic and closing) and new flows refused
    /// because the table was full, over run A.
    pub inserted: u64,
    /// See `inserted`.
    pub expired: u64,
    /// See `inserted`.
    pub evicted: u64,
    /// See `inserted`.
    pub table_full: u64,
    /// New flows answered from the Maglev ring because a table was full.
    pub fallbacks: u64,
    /// Frames flood mode shed in XDP in runs A and A2, where it is off (so 0).
    pub flood_shed_off: u64,
    /// Run A2d, the cache with the default flood settings: frames flood mode shed (with
    /// the cache on it polices every frame the cache missed), and the cache's hits and
    /// misses.
    pub flood_shed: u64,
    /// See `flood_shed`.
    pub flood_hits: u64,
    /// See `flood_shed`.
    pub flood_misses: u64,
    /// Flow cache hits and misses and entries (run A2).
    pub cache_hits: u64,
    /// See `cache_hits`.
    pub cache_misses: u64,
    /// See `cache_hits`.
    pub cache_entries: u64,
    /// Run A's resident memory growth over the flood per connection-table entry, bytes.
    pub engine_bytes_per_entry: Option<f64>,
    /// The IPv4 flow-cache map's kernel memory per entry of capacity, bytes, and its
    /// capacity.
    pub cache_bytes_per_entry: Option<f64>,
    /// See `cache_bytes_per_entry`.
    pub cache_capacity: Option<u32>,
    /// One random read's cost in a buffer of the IPv4 cache map's kernel memory, ns
    /// ([`crate::memory::random_read_ns`], after the rounds).
    pub cache_size_read_ns: Option<f64>,
    /// The kernel's connection-tracking entries in lb after run B, and its maximum.
    pub nf_conntrack_count: Option<u64>,
    /// See `nf_conntrack_count`.
    pub nf_conntrack_max: Option<u64>,
}

/// `x / y`, 0 when `y` is not above 0.
fn ratio(x: f64, y: f64) -> f64 {
    if y > 0.0 { x / y } else { 0.0 }
}

/// `hits` over `hits + misses`, percent (0 with no frames).
fn pct_of(hits: u64, misses: u64) -> f64 {
    let all = hits + misses;
    if all == 0 {
        0.0
    } else {
        hits as f64 * 100.0 / all as f64
    }
}

impl TableState {
    /// The cache's hits over all the frames it saw, percent (run A2).
    pub fn hit_pct(&self) -> f64 {
        pct_of(self.cache_hits, self.cache_misses)
    }

    /// The same for run A2d (default flood settings).
    pub fn flood_hit_pct(&self) -> f64 {
        pct_of(self.flood_hits, self.flood_misses)
    }
}

/// One flow count's medians.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowsRow {
    /// Concurrent flows.
    pub flows: u32,
    /// Source addresses they come from.
    pub addresses: u32,
    /// Median rounds of runs A, A2, C and B, and A2d (the cache, default flood settings).
    pub sluice: RunResult,
    /// See `sluice`.
    pub cache: RunResult,
    /// See `sluice`.
    pub cache_flood: RunResult,
    /// See `sluice`.
    pub ceiling: RunResult,
    /// See `sluice`.
    pub nftables: RunResult,
    /// Run CL: the ceiling with one LRU hash lookup a frame (absent when run A2's map was
    /// not found or cannot hold the flows).
    pub ceiling_lookup: Option<RunResult>,
    /// The `--baseline` binary's runs A and A2.
    pub baseline: Option<RunResult>,
    /// See `baseline`.
    pub baseline_cache: Option<RunResult>,
    /// The tables at the end of the last round.
    pub tables: TableState,
    /// Each round's rates, in order: the spread behind the medians.
    pub by_round: Vec<RoundRates>,
}

/// One round's delivered rates, Mpps (`None`: the run was not made).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RoundRates {
    /// Run A.
    pub sluice: f64,
    /// Run A2.
    pub cache: f64,
    /// Run C.
    pub ceiling: f64,
    /// Run CL.
    pub ceiling_lookup: Option<f64>,
    /// Run B.
    pub nftables: f64,
    /// The `--baseline` binary's run A2.
    pub baseline_cache: Option<f64>,
}

/// The many-flows bench's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowsReport {
    /// Generator seconds per run.
    pub seconds: u64,
    /// Rounds per flow count.
    pub rounds: usize,
    /// One random read's cost in a 1 MiB buffer, ns (within the L2 of most machines: what
    /// the cache's reads cost at few flows).
    pub small_read_ns: f64,
    /// `/proc/loadavg` before and after.
    pub load_before: String,
    /// See `load_before`.
    pub load_after: String,
    /// One row per flow count.
    pub rows: Vec<FlowsRow>,
}

fn sysctl_u64(bench: &Bench, key: &str) -> Option<u64> {
    let out = bench.lb.try_run(&["sysctl", "-n", key]).ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The rounds of one flow count on a fresh topology.
fn one_count(
    options: &BenchOptions,
    space: FlowSpace,
    stop: &Arc<AtomicBool>,
) -> Result<FlowsRow, BenchError> {
    let mut bench = Bench::build(1, space)?;
    eprintln!(
        "bench: {} flows from {} address(es): namespaces {} -- {} -- {} up",
        space.flows,
        space.addresses(),
        bench.gen_ns.name,
        bench.lb.name,
        bench.sink.name
    );
    bench.start_generators(stop)?;
    let (mut a, mut a2, mut c, mut b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut a2d, mut cl, mut ab, mut a2b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut tables = TableState::default();
    let baseline = options.baseline.as_ref().map(|old| BenchOptions {
        sluice: old.clone(),
        capture: false,
        ..options.clone()
    });
    for round in 1..=options.rounds {
        eprintln!(
            "bench: {} flows, round {round} of {}",
            space.flows, options.rounds
        );
        bench.flood = false;
        let sluice = bench.run_sluice(options, false, stop)?;
        let cache = bench.run_sluice(options, true, stop)?;
        if let Some(old) = &baseline {
            ab.push(baseline_run(&mut bench, old, false, stop)?);
            a2b.push(baseline_run(&mut bench, old, true, stop)?);
        }
        bench.flood = true;
        let cache_flood = bench.run_sluice(options, true, stop)?;
        c.push(bench.run_ceiling(options.seconds, None, stop)?.0);
        cl.push(match cache_lookup(&cache, space)? {
            Some(lookup) => Some(bench.run_ceiling(options.seconds, Some(lookup), stop)?.0),
            None => None,
        });
        b.push(bench.run_kernel(options.seconds, stop)?);
        tables = table_state(&sluice, &cache, &cache_flood);
        tables.nf_conntrack_count = sysctl_u64(&bench, "net.netfilter.nf_conntrack_count");
        tables.nf_conntrack_max = sysctl_u64(&bench, "net.netfilter.nf_conntrack_max");
        a.push(sluice.result);
        a2.push(cache.result);
        a2d.push(cache_flood.result);
    }
    tables.cache_size_read_ns = tables
        .cache_bytes_per_entry
        .zip(tables.cache_capacity)
        .map(|(b, n)| crate::memory::random_read_ns((b * f64::from(n)) as usize));
    Ok(FlowsRow {
        flows: space.flows,
        addresses: space.addresses(),
        sluice: median_run(a.iter()),
        cache: median_run(a2.iter()),
        cache_flood: median_run(a2d.iter()),
        ceiling: median_run(c.iter()),
        nftables: median_run(b.iter()),
        ceiling_lookup: cl
            .iter()
            .any(Option::is_some)
            .then(|| median_run(cl.iter().flatten())),
        baseline: (!ab.is_empty()).then(|| median_run(ab.iter())),
        baseline_cache: (!a2b.is_empty()).then(|| median_run(a2b.iter())),
        tables,
        by_round: round_rates(&a, &a2, &c, &cl, &b, &a2b),
    })
}

/// Each round's rates, from the runs in the order the rounds made them (`a2b` is empty
/// without `--baseline`; a round's CL is `None` when it was left out).
fn round_rates(
    a: &[RunResult],
    a2: &[RunResult],
    c: &[RunResult],
    cl: &[Option<RunResult>],
    b: &[RunResult],
    a2b: &[RunResult],
) -> Vec<RoundRates> {
    let mpps = |r: &RunResult| r.delivered_mpps;
    a.iter()
        .zip(a2)
        .zip(c)
        .zip(b)
        .enumerate()
        .map(|(i, (((a, a2), c), b))| RoundRates {
            sluice: mpps(a),
            cache: mpps(a2),
            ceiling: mpps(c),
            ceiling_lookup: cl.get(i).and_then(Option::as_ref).map(mpps),
            nftables: mpps(b),
            baseline_cache: a2b.get(i).map(mpps),
        })
        .collect()
}

/// The baseline binary's run A (`flow_cache` off) or A2, flood mode off as this build's.
fn baseline_run(
    bench: &mut Bench,
    old: &BenchOptions,
    flow_cache: bool,
    stop: &AtomicBool,
) -> Result<RunResult, BenchError> {
    let mut r = bench.run_sluice(old, flow_cache, stop)?.result;
    r.name = format!("baseline {}: {}", old.sluice.display(), r.name);
    Ok(r)
}

/// Run CL's map, as the appliance's IPv4 flow-cache map was in run A2 (`None` when the
/// kernel listed no such map for the process, or when the flows outnumber its entries); an
/// error for a key the ceiling cannot fill.
fn cache_lookup(
    a2: &crate::runs::ApplianceRun,
    space: FlowSpace,
) -> Result<Option<crate::ceiling::Lookup>, BenchError> {
    let Some(m) = a2.maps.iter().find(|m| m.name == CACHE_MAP4) else {
        eprintln!("bench: run CL left out: run A2's process held no map {CACHE_MAP4}");
        return Ok(None);
    };
    if space.flows > m.max_entries {
        // CL is the ceiling with every flow in the map; a full LRU holds whichever flows came
        // last, and the readiness probe's may not be among them.
        eprintln!(
            "bench: run CL left out: {} flows outnumber {CACHE_MAP4}'s {} entries",
            space.flows, m.max_entries
        );
        return Ok(None);
    }
    let key_len = crate::ceiling::KEY_LEN;
    if m.key_size as usize != key_len {
        return Err(BenchError::Generator(format!(
            "{CACHE_MAP4} has {}-byte keys; run CL fills {key_len}-byte IPv4 cache keys",
            m.key_size
        )));
    }
    Ok(Some(crate::ceiling::Lookup {
        value_size: m.value_size,
        entries: m.max_entries,
        space,
    }))
}

fn table_state(
    a: &crate::runs::ApplianceRun,
    a2: &crate::runs::ApplianceRun,
    a2d: &crate::runs::ApplianceRun,
) -> TableState {
    let s = &a.status;
    let ct = &s.conntrack;
    let none = api::FlowCache {
        hits: 0,
        misses: 0,
        entries: 0,
    };
    let cache = a2.status.flow_cache.unwrap_or(none);
    let flood = a2d.status.flow_cache.unwrap_or(none);
    let shed = |r: &crate::runs::ApplianceRun| r.status.flood.map_or(0, |f| f.shed);
    let map = a2.maps.iter().find(|m| m.name == CACHE_MAP4);
    TableState {
        conntrack_entries: s.conntrack_entries,
        conntrack_capacity: s.conntrack_capacity,
        inserted: ct.inserted,
        expired: ct.expired,
        evicted: ct.evicted_embryonic + ct.evicted_closing,
        table_full: ct.table_full,
        fallbacks: s.conntrack_fallbacks,
        flood_shed_off: shed(a) + shed(a2),
        flood_shed: shed(a2d),
        flood_hits: flood.hits,
        flood_misses: flood.misses,
        cache_hits: cache.hits,
        cache_misses: cache.misses,
        cache_entries: cache.entries,
        engine_bytes_per_entry: (s.conntrack_entries > 0)
            .then(|| a.rss_growth as f64 / s.conntrack_entries as f64),
        cache_bytes_per_entry: map.map(crate::memory::MapMemory::bytes_per_entry),
        cache_capacity: map.map(|m| m.max_entries),
        cache_size_read_ns: None,
        nf_conntrack_count: None,
        nf_conntrack_max: None,
    }
}

/// Runs every flow count of `flows` and returns the report; every namespace is removed
/// before it returns.
pub fn run_flows(
    options: &BenchOptions,
    flows: &[u32],
    stop: Arc<AtomicBool>,
) -> Result<FlowsReport, BenchError> {
    let options = BenchOptions {
        seconds: options.seconds.max(1),
        rounds: options.rounds.max(1),
        ..options.clone()
    };
    let load_before = loadavg();
    let mut rows = Vec::new();
    for &n in flows {
        let space = FlowSpace::new(n).ok_or_else(|| {
            BenchError::Generator(format!(
                "{n} flows: at most {} fit the bench's source addresses and ports",
                crate::generator::MAX_FLOWS
            ))
        })?;
        rows.push(one_count(&options, space, &stop)?);
    }
    Ok(FlowsReport {
        small_read_ns: crate::memory::random_read_ns(1 << 20),
        seconds: options.seconds,
        rounds: options.rounds,
        load_before,
        load_after: loadavg(),
        rows,
    })
}

impl FlowsReport {
    /// The report as tables for a terminal.
    pub fn table(&self) -> String {
        let mut s = format!(
            "sluice bench --flows: 64-byte UDP, one queue, {} s per run, {} round(s), \
             medians; load average before {}, after {}\n\n\
             {:>9} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6}\n",
            self.seconds,
            self.rounds,
            self.load_before,
            self.load_after,
            "flows",
            "addrs",
            "A Mpps",
            "A2 Mpps",
            "C Mpps",
            "CL Mpps",
            "B Mpps",
            "A/B",
            "A2/C",
            "A2/CL",
            "A ns/p",
            "hit%",
        );
        for row in &self.rows {
            let cl = row.ceiling_lookup.as_ref().map(|r| r.delivered_mpps);
            s.push_str(&format!(
                "{:>9} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>8} {:>8.2} {:>7.2}x {:>7.2}x {:>8} {:>8.0} {:>6.1}\n",
                row.flows,
                row.addresses,
                row.sluice.delivered_mpps,
                row.cache.delivered_mpps,
                row.ceiling.delivered_mpps,
                cl.map_or("-".into(), |v| format!("{v:.2}")),
                row.nftables.delivered_mpps,
                ratio(row.sluice.delivered_mpps, row.nftables.delivered_mpps),
                ratio(row.cache.delivered_mpps, row.ceiling.delivered_mpps),
                cl.map_or("-".into(), |v| format!(
                    "{:.2}x",
                    ratio(row.cache.delivered_mpps, v)
                )),
                row.sluice.lb_process_ns_per_pkt.unwrap_or(0.0),
                row.tables.hit_pct(),
            ));
        }
        s.push_str(
            "\nA: sluice (AF_XDP engine), A2: sluice + XDP flow cache, both with flood mode \
             off ([flood] enabled = false); C: XDP_REDIRECT ceiling; CL: the ceiling with one \
             lookup a frame in an LRU hash of the cache map's size and geometry, holding every \
             flow; B: kernel + nftables DNAT; A ns/p: the sluice process's CPU per packet\n\n",
        );
        s.push_str(&self.baseline_text());
        s.push_str(&self.rounds_text());
        s.push_str(&self.flood_text());
        s.push_str(&self.tables_text());
        s
    }

    /// The `--baseline` binary's runs beside this build's, per flow count.
    fn baseline_text(&self) -> String {
        let mut s = String::new();
        for row in &self.rows {
            let (Some(a), Some(a2)) = (&row.baseline, &row.baseline_cache) else {
                continue;
            };
            s.push_str(&format!(
                "{:>9} flows: {}: A {:.2} Mpps (this build {:.2} = {:.2}x), A2 {:.2} Mpps \
                 (this build {:.2} = {:.2}x)\n",
                row.flows,
                a.name,
                a.delivered_mpps,
                row.sluice.delivered_mpps,
                ratio(row.sluice.delivered_mpps, a.delivered_mpps),
                a2.delivered_mpps,
                row.cache.delivered_mpps,
                ratio(row.cache.delivered_mpps, a2.delivered_mpps),
            ));
        }
        if !s.is_empty() {
            s.push('\n');
        }
        s
    }

    /// Each round's ratios, in the order run: how far apart rounds of one run fall (two
    /// builds of the same code can differ by 10% between runs on a shared machine).
    fn rounds_text(&self) -> String {
        let mut s = String::new();
        for row in self.rows.iter().filter(|r| r.by_round.len() > 1) {
            let each = |f: &dyn Fn(&RoundRates) -> Option<f64>| {
                row.by_round
                    .iter()
                    .map(|r| f(r).map_or("-".into(), |v| format!("{v:.2}x")))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            s.push_str(&format!(
                "{:>9} flows by round: A/B {}; A2/C {}; A2/CL {}",
                row.flows,
                each(&|r| Some(ratio(r.sluice, r.nftables))),
                each(&|r| Some(ratio(r.cache, r.ceiling))),
                each(&|r| r.ceiling_lookup.map(|v| ratio(r.cache, v))),
            ));
            if row.by_round.iter().any(|r| r.baseline_cache.is_some()) {
                s.push_str(&format!(
                    "; A2 over the baseline's A2 {}",
                    each(&|r| r.baseline_cache.map(|v| ratio(r.cache, v)))
                ));
            }
            s.push('\n');
        }
        if !s.is_empty() {
            s.push('\n');
        }
        s
    }

    /// Run A2d per flow count: the cache with the default flood settings.
    fn flood_text(&self) -> String {
        let mut s = String::from(
            "A2d: sluice + XDP flow cache with the default [flood] settings (what an operator \
             gets; each flow answered once in the warm-up, the flood one-way):\n",
        );
        for row in &self.rows {
            s.push_str(&format!(
                "{:>9} flows: {:.2} Mpps = {:.2}x C, hit {:.1}%, flood mode shed {} frames\n",
                row.flows,
                row.cache_flood.delivered_mpps,
                ratio(row.cache_flood.delivered_mpps, row.ceiling.delivered_mpps),
                row.tables.flood_hit_pct(),
                row.tables.flood_shed,
            ));
        }
        s.push('\n');
        s
    }

    fn tables_text(&self) -> String {
        let mut s = String::from("tables at the end of the last round:\n");
        let opt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
        for row in &self.rows {
            let t = &row.tables;
            s.push_str(&format!(
                "{:>9} flows: conntrack {} of {} entries (inserted {}, expired {}, evicted {}, \
                 refused full {}, ring fallbacks {}), flood shed in A and A2 {}; cache {} \
                 entries of {}, hits {} misses {}; memory per flow: engine {} B (RSS growth / entries), \
                 cache {} B (map memory / capacity); kernel conntrack {} of {}\n",
                row.flows,
                t.conntrack_entries,
                t.conntrack_capacity,
                t.inserted,
                t.expired,
                t.evicted,
                t.table_full,
                t.fallbacks,
                t.flood_shed_off,
                t.cache_entries,
                t.cache_capacity.map_or("-".into(), |c| c.to_string()),
                t.cache_hits,
                t.cache_misses,
                opt(t.engine_bytes_per_entry),
                opt(t.cache_bytes_per_entry),
                t.nf_conntrack_count.map_or("-".into(), |c| c.to_string()),
                t.nf_conntrack_max.map_or("-".into(), |c| c.to_string()),
            ));
        }
        s.push_str(&format!(
            "\nmemory behind the caches (userspace, one random read after another, 4 KiB \
             pages): {:.0} ns a read in 1 MiB",
            self.small_read_ns
        ));
        for row in &self.rows {
            let t = &row.tables;
            if let (Some(ns), Some(b), Some(n)) = (
                t.cache_size_read_ns,
                t.cache_bytes_per_entry,
                t.cache_capacity,
            ) {
                s.push_str(&format!(
                    "; {ns:.0} ns in {:.1} MiB (the cache map of the {} flows row)",
                    b * f64::from(n) / f64::from(1u32 << 20),
                    row.flows
                ));
            }
        }
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::RawRun;

    fn run(name: &str, mpps: f64) -> RunResult {
        let mut r = RunResult::compute(name, &RawRun::default());
        r.delivered_mpps = mpps;
        r
    }

    fn row(flows: u32, cl: Option<f64>, baseline: Option<(f64, f64)>) -> FlowsRow {
        FlowsRow {
            flows,
            addresses: 1,
            sluice: run("A", 1.5),
            cache: run("A2", 3.0),
            cache_flood: run("A2d", 2.9),
            ceiling: run("C", 9.0),
            nftables: run("B", 1.0),
            ceiling_lookup: cl.map(|v| run("CL", v)),
            baseline: baseline.map(|(a, _)| run("baseline OLD: A", a)),
            baseline_cache: baseline.map(|(_, a2)| run("baseline OLD: A2", a2)),
            tables: TableState::default(),
            by_round: Vec::new(),
        }
    }

    #[test]
    fn the_table_sets_the_cache_against_the_ceiling_with_and_without_the_lookup() {
        let report = FlowsReport {
            seconds: 5,
            rounds: 3,
            small_read_ns: 12.0,
            load_before: "0.1".into(),
            load_after: "0.2".into(),
            rows: vec![
                row(256, Some(4.0), Some((1.2, 2.0))),
                row(65_536, None, None),
            ],
        };
        let t = report.table();
        let line = |flows: &str| {
            t.lines()
                .find(|l| l.split_whitespace().next() == Some(flows))
                .unwrap_or_else(|| panic!("no row {flows} in\n{t}"))
                .split_whitespace()
                .collect::<Vec<_>>()
        };
        // flows addrs A A2 C CL B A/B A2/C A2/CL ...
        assert_eq!(line("256")[5], "4.00");
        assert_eq!(&line("256")[7..10], ["1.50x", "0.33x", "0.75x"]);
        assert_eq!(line("65536")[5], "-", "no CL run: no figure");
        assert_eq!(line("65536")[9], "-");
        assert!(
            t.contains(
                "A 1.20 Mpps (this build 1.50 = 1.25x), A2 2.00 Mpps (this build 3.00 = 1.50x)"
            ),
            "the baseline beside this build:\n{t}"
        );
        assert!(t.contains("12 ns a read in 1 MiB"), "{t}");
        assert!(
            !t.contains("by round"),
            "one round per row here: nothing to spread\n{t}"
        );
    }

    #[test]
    fn a_rounds_rates_are_its_own_runs() {
        let runs = |v: &[f64]| v.iter().map(|&m| run("x", m)).collect::<Vec<_>>();
        let cl = vec![Some(run("CL", 7.0)), None];
        let r = round_rates(
            &runs(&[1.0, 1.1]),
            &runs(&[2.0, 2.1]),
            &runs(&[3.0, 3.1]),
            &cl,
            &runs(&[4.0, 4.1]),
            &[],
        );
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[1].sluice, r[1].cache, r[1].ceiling, r[1].nftables),
            (1.1, 2.1, 3.1, 4.1)
        );
        assert_eq!(r[0].ceiling_lookup, Some(7.0));
        assert_eq!(r[1].ceiling_lookup, None, "round 2 left CL out");
        assert_eq!(r[0].baseline_cache, None, "no --baseline");
    }

    #[test]
    fn each_rounds_ratios_are_listed_in_order() {
        let mut r = row(256, Some(4.0), Some((1.2, 2.0)));
        let round = |a2: f64, c: f64, cl: Option<f64>, old: Option<f64>| RoundRates {
            sluice: 1.0,
            cache: a2,
            ceiling: c,
            ceiling_lookup: cl,
            nftables: 2.0,
            baseline_cache: old,
        };
        r.by_round = vec![
            round(4.0, 5.0, Some(4.0), Some(5.0)),
            round(4.5, 5.0, None, Some(4.5)),
        ];
        let report = FlowsReport {
            seconds: 5,
            rounds: 2,
            small_read_ns: 12.0,
            load_before: "0.1".into(),
            load_after: "0.2".into(),
            rows: vec![r],
        };
        let t = report.table();
        assert!(
            t.contains(
                "256 flows by round: A/B 0.50x 0.50x; A2/C 0.80x 0.90x; A2/CL 1.00x -; \
                 A2 over the baseline's A2 0.80x 1.00x"
            ),
            "{t}"
        );
    }
}
