//! Control-plane cost at scale: 1,000 and 10,000 VIPs of 10 DR backends each, every
//! backend under a health check. For each size and for four ways of committing:
//!
//! - `main`: what `sluice run` did before incremental commits: every version builds every
//!   ring (`running: None`) at the old default ring size, 65537 slots, and every health
//!   transition is its own version;
//! - `rings`: 16381-slot rings, transitions batched for `health_batch`, each version
//!   prepared in full from the config against the running one (only changed rings are
//!   built, but the effective config, probe targets, steering, egress and every VIP's
//!   entries are made again): how health versions were committed before
//!   `prepare_health`;
//! - `last`: the last release: health versions and pacing as `now`, every ring at the last
//!   release's default size, 16381 slots;
//! - `now`: this release: a health batch's version is the running tables with only the
//!   touched VIPs rebuilt (`prepare_health`), everything else shared or copied, the
//!   default pacing (the first transition after a quiet spell waits `health_batch_delay`,
//!   10 ms; commits start at least `health_batch`, 50 ms, apart) and the default ring size
//!   for the pool (1021 slots for 10 backends).
//!
//! Figures: start-up (the config's parse and validation, the first full build with its
//! next hops resolved from a routing snapshot holding a neighbour entry for every backend,
//! and their sum); the resident memory after it with the tables held and the peaks
//! (`VmHWM`, reset between phases) of the parse, the first build and the commits after it;
//! the table fingerprint `GET /v1/status` computes; one health transition's
//! commit (preparing the next version as the control loop does before the swap); a storm
//! of 1,000 backends going down, their transitions arriving 1 ms apart (probes fail on
//! their own schedules) or all at once: commits made, total commit work, and the sync lag
//! (first transition of a batch to its version being published; workers adopt a
//! published version within one poll of their rings). The storm runs on a virtual clock
//! that advances by each commit's measured time, as the single control loop would.
//! `main`'s storm is one full build per transition: measured for a few, extrapolated to
//! 1,000.
//!
//! Before them, `sizes`: for every default ring size (`sluice::config::DEFAULT_TABLE_SIZES`)
//! and the smallest and largest pool that gets it, one ring's build time, the balance
//! (most and fewest slots of a backend) and the disruption when one backend leaves or
//! joins (the share of slots whose backend changes, against the ideal 1/N), and for the
//! largest pool the share of flows that change backend when one more backend takes the pool
//! to the next size.
//!
//! `cargo bench -p appliance --bench control` (the figures are printed; the goals
//! are one transition at 1,000 VIPs under 5 ms, 10,000 VIPs under 500 MB, a storm under 1 s
//! of commit work with the lag under 200 ms). `-- 1000 now last` runs one size and two
//! modes, `-- sizes` only the ring sizes.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::config::{Config, DEFAULT_TABLE_SIZES, MIN_SLOTS_PER_BACKEND, default_table_size};
use sluice::control::cores::Cores;
use sluice::control::prepare::{
    HealthInputs, HealthSource, Inputs, NextHops, prepare, prepare_health,
};
use sluice::lb::BackendId;
use sluice::lb::Tables;
use sluice::lb::egress::{Link, NetState, Route, RouteHop};
use sluice::lb::maglev::{MaglevBackend, Ring};
use std::process::Command;

const BACKENDS: usize = 10;
const STORM: usize = 1000;

/// The config text: `vips` DR VIPs of [`BACKENDS`] backends, one TCP health check.
fn config_text(vips: usize, table_size: Option<u32>) -> String {
    let mut t = String::from("[appliance]\nname = \"bench\"\ninterfaces = [\"eth0\"]\n");
    if let Some(m) = table_size {
        let _ = writeln!(t, "maglev_table_size = {m}");
    }
    t.push_str("\n[[health_check]]\nname = \"tcp\"\nkind = \"tcp\"\n");
    for v in 0..vips {
        let _ = write!(
            t,
            "\n[[vip]]\nname = \"v{v}\"\naddress = \"10.{}.{}.{}\"\nport = 80\nmode = \"dr\"\nhealth_check = \"tcp\"\n",
            100 + v / 65536,
            (v / 256) % 256,
            v % 256
        );
        for b in 0..BACKENDS {
            let n = v * BACKENDS + b;
            let _ = write!(
                t,
                "[[vip.backend]]\naddress = \"172.{}.{}.{}\"\n",
                16 + n / 65536,
                (n / 256) % 256,
                n % 256
            );
        }
    }
    t
}

/// A kernel figure from `/proc/self/status` in bytes (`VmRSS`, `VmHWM`).
fn proc_status(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn mb(bytes: u64) -> String {
    format!("{:.0} MB", bytes as f64 / 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// How a mode commits a health change.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// Every ring built (`running: None`).
    Full,
    /// Prepared in full against the running version (its unchanged rings shared).
    Rings,
    /// The running tables with the touched VIPs rebuilt (`prepare_health`).
    Health,
}

/// One way of committing.
#[derive(Clone, Copy)]
struct Mode {
    name: &'static str,
    commit: Commit,
    table_size: Option<u32>,
    pacing: Pacing,
}

/// The control loop's inputs for one size, and the running version.
struct Loop {
    file: Arc<Config>,
    /// The running version's effective config (the file's: the bench has no overrides).
    config: Arc<Config>,
    next_hops: NextHops,
    health: HashMap<BackendId, bool>,
    running: Option<Arc<Tables>>,
    version: u64,
    commit: Commit,
}

impl Loop {
    /// Prepares the next version from the current health, `changed` the pairs whose verdict
    /// changed since the running one; returns its commit time.
    fn commit(&mut self, changed: &[BackendId]) -> Duration {
        let t = Instant::now();
        self.version += 1;
        let fast = match (&self.running, self.commit) {
            (Some(r), Commit::Health) => Some(
                prepare_health(
                    HealthInputs {
                        running: r,
                        config: &self.config,
                        health: &self.health,
                        // No slow start in the bench config: nothing ever ramps.
                        ramps: &Default::default(),
                        host_addresses: &[],
                        version: self.version,
                        exec: &Cores,
                    },
                    changed,
                )
                .expect("the running tables came from this config")
                .expect("the bench config builds")
                .tables,
            ),
            _ => None,
        };
        let tables = fast.unwrap_or_else(|| {
            let p = prepare(Inputs {
                running: self
                    .running
                    .as_deref()
                    .filter(|_| self.commit != Commit::Full),
                file: &self.file,
                overrides: &HashMap::new(),
                health: HealthSource::Verdicts(&self.health),
                next_hops: &self.next_hops,
                host_addresses: &[],
                version: self.version,
                now: Instant::now(),
                now_ns: sluice::datapath::monotonic_ns(),
                resettle: false,
                ramps: &Default::default(),
                agents: &Default::default(),
                exec: &Cores,
            })
            .expect("the bench config builds");
            self.config = p.config;
            p.tables
        });
        self.running = Some(Arc::new(tables));
        t.elapsed()
    }

    /// The `i`-th backend of the storm: spread over the VIPs, one per VIP first.
    fn storm_backend(&self, i: usize) -> BackendId {
        let vips = self.file.vips.len();
        let v = &self.file.vips[i % vips];
        let b = &v.backends[(i / vips) % v.backends.len()];
        BackendId::of(v, b)
    }

    /// Sets a pair's verdict; `changed` collects it.
    fn set(&mut self, id: BackendId, up: bool, changed: &mut Vec<BackendId>) {
        self.health.insert(id.clone(), up);
        changed.push(id);
    }
}

/// The routing snapshot of a host whose backends are all on-link on `eth0`, every one with
/// a neighbour entry: what resolving every next hop gives the first build.
fn resolved(config: &Config) -> NextHops {
    let mut net = NetState::default();
    net.links.insert(
        2,
        Link {
            name: "eth0".into(),
            mac: Some(wire::MacAddr([2, 0, 0, 0, 0, 1])),
            mtu: 1500,
        },
    );
    net.routes.push(Route {
        dst: "172.16.0.0".parse().expect("literal"),
        len: 12,
        metric: 0,
        hops: vec![RouteHop {
            ifindex: 2,
            gateway: None,
            weight: 1,
        }],
    });
    for (i, b) in config.vips.iter().flat_map(|v| &v.backends).enumerate() {
        let mac = wire::MacAddr([2, 1, (i >> 16) as u8, (i >> 8) as u8, i as u8, 0]);
        net.neighbours.insert((2, b.address), mac);
    }
    NextHops { net, misses: None }
}

/// A storm's outcome.
struct Storm {
    commits: usize,
    work: Duration,
    max_lag: Duration,
    extrapolated: bool,
}

/// Transitions `i` at `spacing * i`; a batch commits when its pacing says (`delay` after
/// its first arrival, `hold` after the last batch was taken; at once when both are zero)
/// or when the loop is free again, whichever is later; the virtual clock advances by each
/// commit's measured time.
fn storm(l: &mut Loop, pacing: Pacing, spacing: Duration) -> Storm {
    let arrivals: Vec<Duration> = (0..STORM).map(|i| spacing * i as u32).collect();
    if l.commit == Commit::Full {
        // One full build per transition: measure a few, the rest cost the same.
        let sample = 3;
        let mut work = Duration::ZERO;
        for i in 0..sample {
            let mut changed = Vec::new();
            l.set(l.storm_backend(i), false, &mut changed);
            work += l.commit(&changed);
        }
        let per = work / sample as u32;
        // The loop serialises them: each transition waits behind every earlier commit.
        let (mut free, mut max_lag) = (Duration::ZERO, Duration::ZERO);
        for a in &arrivals {
            free = free.max(*a) + per;
            max_lag = max_lag.max(free - *a);
        }
        return Storm {
            commits: STORM,
            work: per * STORM as u32,
            max_lag,
            extrapolated: true,
        };
    }
    let mut clock = Duration::ZERO;
    let mut next = 0usize;
    let (mut commits, mut work, mut max_lag) = (0usize, Duration::ZERO, Duration::ZERO);
    let mut last_taken: Option<Duration> = None;
    while next < STORM {
        let first = arrivals[next];
        let mut due = clock.max(first + pacing.delay);
        if let Some(t) = last_taken {
            due = due.max(t + pacing.hold);
        }
        last_taken = Some(due);
        let mut changed = Vec::new();
        while next < STORM && arrivals[next] <= due {
            l.set(l.storm_backend(next), false, &mut changed);
            next += 1;
        }
        let took = l.commit(&changed);
        clock = due + took;
        commits += 1;
        work += took;
        max_lag = max_lag.max(clock - first);
    }
    Storm {
        commits,
        work,
        max_lag,
        extrapolated: false,
    }
}

/// Resets the peak (`VmHWM`) to the resident size now, so the next reading is the peak of
/// what runs in between.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn run(vips: usize, mode: Mode) {
    let text = config_text(vips, mode.table_size);
    reset_peak();
    let t = Instant::now();
    let file = Arc::new(Config::from_toml_str(&text).expect("valid bench config"));
    let parse = t.elapsed();
    drop(text);
    let peak_parse = proc_status("VmHWM:");
    let health: HashMap<BackendId, bool> = file
        .vips
        .iter()
        .flat_map(|v| v.backends.iter().map(move |b| (BackendId::of(v, b), true)))
        .collect();
    let next_hops = resolved(&file);
    let rss_before = proc_status("VmRSS:");
    let mut l = Loop {
        running: None,
        config: Arc::clone(&file),
        file,
        next_hops,
        health,
        version: 0,
        commit: Commit::Full,
    };
    reset_peak();
    let full = l.commit(&[]);
    let rss = proc_status("VmRSS:");
    let peak_build = proc_status("VmHWM:");
    reset_peak();
    let (rings, fingerprint) = {
        let t = l.running.as_ref().expect("a first version");
        let at = Instant::now();
        let f = sluice::control::fleet::fingerprint(t);
        (t.ring_bytes() as u64, (at.elapsed(), f))
    };
    l.commit = mode.commit;
    // One transition: a backend of the middle VIP goes down, then up again.
    let one = {
        let id = l.storm_backend(vips / 2);
        let mut took = Duration::ZERO;
        for up in [false, true] {
            let mut changed = Vec::new();
            l.set(id.clone(), up, &mut changed);
            took += l.commit(&changed);
        }
        took / 2
    };
    let spread = storm(&mut l, mode.pacing, Duration::from_millis(1));
    let all: Vec<BackendId> = l.health.keys().cloned().collect();
    for v in l.health.values_mut() {
        *v = true;
    }
    l.commit(&all);
    let burst = storm(&mut l, mode.pacing, Duration::ZERO);
    let peak_commits = proc_status("VmHWM:");
    let storm_line = |s: &Storm| {
        format!(
            "{} commits, {} of commit work, lag {}{}",
            s.commits,
            ms(s.work),
            ms(s.max_lag),
            if s.extrapolated {
                " (extrapolated)"
            } else {
                ""
            }
        )
    };
    println!(
        "{vips:>6} VIPs  {:<5} start-up {} (parse and validate {}, first build with next hops {})\n\
         {:>19}rss {} (+{} for the tables, rings {})  peak: parse {}, first build {}, commits {}\n\
         {:>19}fingerprint {} ({})\n\
         {:>19}one transition {}\n\
         {:>19}storm, 1 ms apart: {}\n\
         {:>19}storm, at once:    {}",
        mode.name,
        ms(parse + full),
        ms(parse),
        ms(full),
        "",
        mb(rss),
        mb(rss.saturating_sub(rss_before)),
        mb(rings),
        mb(peak_parse),
        mb(peak_build),
        mb(peak_commits),
        "",
        ms(fingerprint.0),
        fingerprint.1,
        "",
        ms(one),
        "",
        storm_line(&spread),
        "",
        storm_line(&burst),
    );
}

/// How a commit is paced: see `sluice::control::batch`.
#[derive(Clone, Copy)]
struct Pacing {
    delay: Duration,
    hold: Duration,
}

/// The pacing before `health_batch_delay`: a batch committed `health_batch` after its
/// first transition.
const WINDOW: Pacing = Pacing {
    delay: sluice::config::DEFAULT_HEALTH_BATCH,
    hold: sluice::config::DEFAULT_HEALTH_BATCH,
};

const MODES: [Mode; 4] = [
    Mode {
        name: "now",
        commit: Commit::Health,
        table_size: None,
        pacing: Pacing {
            delay: sluice::config::DEFAULT_HEALTH_BATCH_DELAY,
            hold: sluice::config::DEFAULT_HEALTH_BATCH,
        },
    },
    Mode {
        name: "last",
        commit: Commit::Health,
        table_size: Some(16381),
        pacing: Pacing {
            delay: sluice::config::DEFAULT_HEALTH_BATCH_DELAY,
            hold: sluice::config::DEFAULT_HEALTH_BATCH,
        },
    },
    Mode {
        name: "rings",
        commit: Commit::Rings,
        table_size: Some(16381),
        pacing: WINDOW,
    },
    Mode {
        name: "main",
        commit: Commit::Full,
        table_size: Some(65537),
        pacing: Pacing {
            delay: Duration::ZERO,
            hold: Duration::ZERO,
        },
    },
];

/// Each size and mode runs in a child process of its own, so that its peak memory is its
/// own. `cargo bench` passes `--bench`; a number argument (e.g. `1000`) picks one size, a
/// mode's name (e.g. `now`) one mode.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let vips: usize = args[i + 1].parse().expect("size");
        let mode = MODES[args[i + 2].parse::<usize>().expect("mode")];
        run(vips, mode);
        return;
    }
    let filter: Option<usize> = args.iter().skip(1).find_map(|a| a.parse().ok());
    let only: Vec<&str> = args
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|a| *a == "sizes" || MODES.iter().any(|m| m.name == *a))
        .collect();
    let exe = std::env::current_exe().expect("the bench binary");
    // `cargo test --all-targets` runs this binary without `--bench` (and unoptimised): one
    // small size proves the bench still runs without spending CI's minutes on it.
    let bench = args.iter().any(|a| a == "--bench");
    let sizes: &[usize] = if bench {
        &[1000, 10_000]
    } else {
        println!("smoke run (no --bench): 100 VIPs only; `cargo bench` runs 1,000 and 10,000");
        &[100]
    };
    if (only.is_empty() || only.contains(&"sizes")) && filter.is_none() {
        ring_sizes(if bench { DEFAULT_TABLE_SIZES.len() } else { 1 });
    }
    println!("control plane at scale ({BACKENDS} DR backends per VIP, storms of {STORM})");
    for &vips in sizes {
        if filter.is_some_and(|f| f != vips) {
            continue;
        }
        for (mode, m) in MODES.iter().enumerate() {
            if !only.is_empty() && !only.contains(&m.name) {
                continue;
            }
            let ok = Command::new(&exe)
                .args(["--child", &vips.to_string(), &mode.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "the {vips}-VIP run failed");
        }
    }
}

/// `n` distinct backend identities (addresses 172.16.0.0 and up, port 80).
fn identities(n: usize) -> Vec<[u8; 18]> {
    (0..n as u32)
        .map(|i| {
            let a = std::net::Ipv4Addr::from(0xac10_0000 + i);
            sluice::lb::hash::backend_identity(a.into(), 80)
        })
        .collect()
}

/// A ring of equal weights over `ids` at `m` slots, and its build time.
fn timed_ring(ids: &[[u8; 18]], m: u32) -> (Ring, Duration) {
    let b: Vec<MaglevBackend<'_>> = ids
        .iter()
        .map(|id| MaglevBackend { id, weight: 1 })
        .collect();
    let t = Instant::now();
    let r = Ring::build(&b, m).expect("a prime with room for the pool");
    (r, t.elapsed())
}

/// The share of flows whose backend identity differs between ring `a` over `ia` and ring
/// `b` over `ib`: every slot when the sizes are equal, else a fixed sample of 2^20 hashes.
fn flows_moved(a: &Ring, ia: &[[u8; 18]], b: &Ring, ib: &[[u8; 18]]) -> f64 {
    // Rings of one size: every slot once (hash h lands on slot h).
    let (sample, stride) = if a.len() == b.len() {
        (a.len() as u32, 1)
    } else {
        (1u32 << 20, 0x9e37_79b9u32)
    };
    let moved = (0..sample)
        .map(|i| i.wrapping_mul(stride))
        .filter(|&h| {
            let x = a.lookup(h).map(|p| ia[p as usize]);
            let y = b.lookup(h).map(|p| ib[p as usize]);
            x != y
        })
        .count();
    moved as f64 / f64::from(sample)
}

/// The balance and disruption figures of the first `steps` default ring sizes.
fn ring_sizes(steps: usize) {
    println!("default ring sizes (equal weights; moves: the share of flows that change backend)");
    let room = |m: u32| (u64::from(m) / MIN_SLOTS_PER_BACKEND) as usize;
    for (i, &m) in DEFAULT_TABLE_SIZES.iter().enumerate().take(steps) {
        let low = if i == 0 {
            2
        } else {
            room(DEFAULT_TABLE_SIZES[i - 1]) + 1
        };
        let high = room(m).min(sluice::lb::maglev::MAX_POOL - 1);
        for n in [low, high] {
            assert_eq!(default_table_size(n), m);
            let ids = identities(n + 1);
            let (full, took) = timed_ring(&ids[..n], m);
            let c = full.counts(n);
            let (min, max) = (c.iter().min().unwrap(), c.iter().max().unwrap());
            // The last backend leaves (a fresh ring of the others) ...
            let (left, _) = timed_ring(&ids[..n - 1], m);
            let leave = flows_moved(&full, &ids[..n], &left, &ids[..n - 1]);
            // ... or one more joins: the same size, or the next step when it crosses one.
            let (joined, _) = timed_ring(&ids, default_table_size(n + 1));
            let join = flows_moved(&full, &ids[..n], &joined, &ids);
            let cross = if default_table_size(n + 1) == m {
                String::new()
            } else {
                format!(" (to {} slots)", default_table_size(n + 1))
            };
            println!(
                "  M {m:>8} N {n:>5}: build {}, slots per backend {min}..{max} \
                 (max/min {:.4}), one leaving moves {:.3}% (ideal {:.3}%), one joining{cross} \
                 {:.3}% (ideal {:.3}%)",
                ms(took),
                f64::from(*max) / f64::from(*min),
                100.0 * leave,
                100.0 / n as f64,
                100.0 * join,
                100.0 / (n + 1) as f64,
            );
        }
    }
}
