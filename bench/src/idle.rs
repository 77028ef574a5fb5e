//! `sluice bench --idle`: what an appliance with VIPs and no traffic costs. It starts
//! `sluice run` on the connection-rate bench's namespaces ([`crate::cps`], nginx up behind
//! both VIPs), lets it settle, and measures for `--seconds` the CPU time (user + system) of
//! the process and of each of its threads, and the whole machine's, first with the default
//! (workers sleep until the kernel wakes them: need_wakeup), then with `busy_poll = true`
//! (workers spin) for comparison. The goal is under 1% of one core by default. With a
//! baseline binary (`--baseline PATH`, an older build) its two windows come first, on the
//! same namespaces in the same run, so a change's before and after sit side by side.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::BenchError;
use crate::counters::{NS_PER_TICK, cpu_times, parse_pid_stat};
use crate::cps::{CPS_NAT_VIP, CpsBench, loadavg};

/// How long the appliance runs before the window opens: start-up work (loading XDP, the
/// first health and route passes) is not idle cost.
const SETTLE: Duration = Duration::from_secs(3);
/// How the report names the binary that runs the bench.
const THIS_BUILD: &str = "this build";
/// The idle goal, in percent of one core.
pub const IDLE_GOAL_PCT: f64 = 1.0;

/// What `sluice bench --idle` measures.
#[derive(Debug, Clone)]
pub struct IdleOptions {
    /// Seconds of each window.
    pub seconds: u64,
    /// The `sluice` binary.
    pub sluice: std::path::PathBuf,
    /// Queues per veth (appliance workers).
    pub queues: u32,
    /// Another `sluice` binary measured first the same way (before and after a change).
    pub baseline: Option<std::path::PathBuf>,
}

/// One thread's share of a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadCost {
    /// The thread's name (`/proc/PID/task/TID/comm`).
    pub name: String,
    /// Its CPU time over the window, in percent of one core.
    pub pct_of_core: f64,
}

/// One idle window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleRun {
    /// The binary measured: `this build`, or the baseline's path.
    pub binary: String,
    /// Whether the workers spun.
    pub busy_poll: bool,
    /// The window's length, seconds.
    pub seconds: f64,
    /// The appliance process's CPU time over the window, in percent of one core.
    pub process_pct_of_core: f64,
    /// The whole machine's busy CPU over the window, in cores (everything else included).
    pub machine_busy_cores: f64,
    /// The appliance's threads that used any CPU, the busiest first.
    pub threads: Vec<ThreadCost>,
}

/// The idle bench's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleReport {
    /// `/proc/loadavg` before and after.
    pub load_before: String,
    /// See `load_before`.
    pub load_after: String,
    /// The default run, then the busy_poll one.
    pub runs: Vec<IdleRun>,
    /// The default run stayed under [`IDLE_GOAL_PCT`].
    pub goal_met: bool,
}

/// Ticks of every thread of `pid`, with its name.
fn thread_ticks(pid: u32) -> Vec<(String, u64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let name = stat.get(stat.find('(')? + 1..stat.rfind(')')?)?.to_string();
            Some((
                format!("{name} {}", e.file_name().to_string_lossy()),
                parse_pid_stat(&stat)?,
            ))
        })
        .collect()
}

/// Ticks of `pid`'s CPU time, or an error naming it.
pub(crate) fn process_ticks(pid: u32) -> Result<u64, BenchError> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|t| parse_pid_stat(&t))
        .ok_or_else(|| BenchError::Counter {
            what: "the sluice process's CPU time".into(),
            detail: format!("/proc/{pid}/stat unreadable (did it exit?)"),
        })
}

/// The per-thread costs between two samples, the busiest first.
pub fn thread_costs(
    before: &[(String, u64)],
    after: &[(String, u64)],
    seconds: f64,
) -> Vec<ThreadCost> {
    let mut v: Vec<ThreadCost> = after
        .iter()
        .filter_map(|(name, t1)| {
            let t0 = before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, t)| *t);
            let d = t1.saturating_sub(t0);
            (d > 0).then(|| ThreadCost {
                name: name.clone(),
                pct_of_core: pct(d, seconds),
            })
        })
        .collect();
    v.sort_by(|a, b| b.pct_of_core.total_cmp(&a.pct_of_core));
    v
}

/// `ticks` over `seconds`, in percent of one core.
pub fn pct(ticks: u64, seconds: f64) -> f64 {
    ticks as f64 * NS_PER_TICK / 1e9 / seconds.max(1e-9) * 100.0
}

fn window(
    bench: &mut CpsBench,
    options: &IdleOptions,
    (binary, sluice): (&str, &std::path::Path),
    busy_poll: bool,
    stop: &AtomicBool,
) -> Result<IdleRun, BenchError> {
    let pid = bench.start_appliance(sluice, busy_poll, crate::cps::Variant::DEFAULT)?;
    let label = if busy_poll { "idle, busy_poll" } else { "idle" };
    // Forwarding proves the VIPs are up; the probe is the last traffic before the window.
    bench.wait_answers(label, (CPS_NAT_VIP, 80).into(), stop)?;
    std::thread::sleep(SETTLE);
    eprintln!(
        "bench: {label}: measuring sluice run (pid {pid}) for {} s",
        options.seconds
    );
    let (p0, th0, m0, t0) = (
        process_ticks(pid)?,
        thread_ticks(pid),
        cpu_times()?,
        Instant::now(),
    );
    let end = t0 + Duration::from_secs(options.seconds);
    while Instant::now() < end {
        if stop.load(Ordering::Relaxed) {
            bench.stop_appliance();
            return Err(BenchError::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(200).min(end - Instant::now().min(end)));
    }
    let (p1, th1, m1) = (process_ticks(pid)?, thread_ticks(pid), cpu_times()?);
    let seconds = t0.elapsed().as_secs_f64();
    if !bench.stop_appliance() {
        eprintln!(
            "bench: warning: sluice run did not exit cleanly; log:\n{}",
            bench.log_tail()
        );
    }
    Ok(IdleRun {
        binary: binary.to_string(),
        busy_poll,
        seconds,
        process_pct_of_core: pct(p1.saturating_sub(p0), seconds),
        machine_busy_cores: pct(m1.busy.saturating_sub(m0.busy), seconds) / 100.0,
        threads: thread_costs(&th0, &th1, seconds),
    })
}

/// Runs both idle windows; every namespace is removed before it returns.
pub fn run_idle(options: &IdleOptions, stop: Arc<AtomicBool>) -> Result<IdleReport, BenchError> {
    let options = IdleOptions {
        seconds: options.seconds.max(1),
        queues: options.queues.max(1),
        ..options.clone()
    };
    let load_before = loadavg();
    let mut bench = CpsBench::build(options.queues, true)?;
    let baseline = options.baseline.as_ref().map(|p| p.display().to_string());
    let mut binaries = Vec::new();
    if let (Some(label), Some(path)) = (&baseline, &options.baseline) {
        binaries.push((label.as_str(), path.as_path()));
    }
    binaries.push((THIS_BUILD, options.sluice.as_path()));
    let mut runs = Vec::new();
    for binary in binaries {
        for busy_poll in [false, true] {
            runs.push(window(&mut bench, &options, binary, busy_poll, &stop)?);
        }
    }
    drop(bench);
    let goal_met = runs
        .iter()
        .any(|r| r.binary == THIS_BUILD && !r.busy_poll && r.process_pct_of_core < IDLE_GOAL_PCT);
    Ok(IdleReport {
        load_before,
        load_after: loadavg(),
        runs,
        goal_met,
    })
}

impl IdleReport {
    /// The report as text for a terminal.
    pub fn table(&self) -> String {
        let mut s = format!(
            "sluice bench --idle: sluice run with a NAT and a DR VIP, no traffic\n\
             load average before {}, after {}\n\n{:<22} {:<26} {:>8} {:>14} {:>14}\n",
            self.load_before,
            self.load_after,
            "binary",
            "run",
            "seconds",
            "sluice % core",
            "machine cores"
        );
        for r in &self.runs {
            s.push_str(&format!(
                "{:<22} {:<26} {:>8.1} {:>14.2} {:>14.2}\n",
                r.binary,
                if r.busy_poll {
                    "busy_poll = true"
                } else {
                    "default (need_wakeup)"
                },
                r.seconds,
                r.process_pct_of_core,
                r.machine_busy_cores
            ));
        }
        for r in &self.runs {
            let top: Vec<String> = r
                .threads
                .iter()
                .take(6)
                .map(|t| format!("{} {:.2}%", t.name, t.pct_of_core))
                .collect();
            s.push_str(&format!(
                "threads, {}, {}: {}\n",
                r.binary,
                if r.busy_poll { "busy_poll" } else { "default" },
                if top.is_empty() {
                    "none used CPU".into()
                } else {
                    top.join(", ")
                }
            ));
        }
        s.push_str(&format!(
            "goal ({THIS_BUILD}, default, under {IDLE_GOAL_PCT}% of one core): {}\n",
            if self.goal_met { "met" } else { "NOT met" }
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_costs_are_per_window_and_sorted() {
        let before = vec![("a 1".to_string(), 10), ("b 2".to_string(), 5)];
        let after = vec![
            ("a 1".to_string(), 16),
            ("b 2".to_string(), 5),
            ("c 3".to_string(), 30),
        ];
        let v = thread_costs(&before, &after, 60.0);
        assert_eq!(v.len(), 2, "a thread that used nothing is left out: {v:?}");
        assert_eq!(
            v[0].name, "c 3",
            "a thread born in the window counts from zero"
        );
        assert!(
            (v[0].pct_of_core - 0.5).abs() < 1e-9,
            "30 ticks in 60 s: {v:?}"
        );
        assert!(
            (v[1].pct_of_core - 0.1).abs() < 1e-9,
            "6 ticks in 60 s: {v:?}"
        );
        assert!(
            (pct(100, 1.0) - 100.0).abs() < 1e-9,
            "100 ticks a second is one core"
        );
    }
}
