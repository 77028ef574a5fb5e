//! Prober cost at scale: 10,000 TCP targets probed every second.
//!
//! Run as root: `cargo bench -p health --bench tcp_10k` (env `HEALTH_BENCH_ADDRS` and
//! `HEALTH_BENCH_PORTS`, default 100 x 100, and `HEALTH_BENCH_SECS`, default 20). It
//! builds a two-namespace lab whose server namespace holds 100 addresses and listens on
//! 100 wildcard ports (100 x 100 = 10,000 distinct targets from only 100 listening
//! sockets: containers often cap RLIMIT_NOFILE below what 10,000 listeners need), runs
//! the prober on its own single-threaded tokio runtime in the prober namespace, and
//! reports:
//! - CPU of the prober thread (getrusage RUSAGE_THREAD user+sys over wall time),
//! - how probe starts spread over each interval (100 ms buckets, busiest 10 ms),
//! - start lateness (actual start minus scheduled due time),
//! - probes done versus expected, and failures (should be none).
//!
//! Over veth, a packet's receive processing runs in the transmitting CPU's softirq, and
//! softirq time is charged to whatever thread is current there. Left alone, the server
//! side's kernel TCP work (SYN -> SYN-ACK, the handshake ACK, RST teardown) would run on
//! the prober's CPU inside the prober thread's time: work a real prober never pays, its
//! backends being other machines. The prober thread is pinned to CPU 0 and everything
//! else in the benchmark to CPU 1. `HEALTH_BENCH_STEER=1` also sets RPS on the
//! server-side veth, sending the server namespace's receive processing to CPU 1, and on
//! the prober-side veth, keeping the SYN-ACK's receive processing on CPU 0 (the prober's
//! own SYN send, SYN-ACK receive, ACK and RST stay on its CPU, as with a real NIC).
//! Steering is off by default because it is not cheaper here: it moves 3 of the 4
//! packets of a probe to CPU 1, but the prober thread's CPU went up (about 16% -> 18% of
//! a core, side by side), as steered packets cost the sender inter-processor interrupts
//! (trapping x2APIC MSR writes in a VM; perf showed them inside connect and close) and
//! the handshake no longer completes inside connect(). Perf put the server-side receive
//! work charged to the unsteered prober at about 3% of a core. Either way the report
//! gives per-CPU packets processed (/proc/net/softnet_stat), softirq time (/proc/stat)
//! and function-call IPIs received (/proc/interrupts) so the split and its price can be
//! checked, and a plain blocking connect loop under the same arrangement as the kernel's
//! floor (only a floor unsteered: steered, each blocking connect also sleeps and wakes).
//! Server-side accept work runs on a thread pinned to CPU 1 and is not counted.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::fs::File;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Netns, require_program, require_root, veth};
use health::{CheckKind, HealthCheck, InitialHealth, Prober, Target};
use nix::sched::{CloneFlags, CpuSet, sched_setaffinity, setns};
use nix::sys::resource::{Resource, UsageWho, getrlimit, getrusage, setrlimit};
use nix::sys::socket::{setsockopt, sockopt};
use nix::unistd::Pid;

const PROBER: &str = "10.202.0.1";
const FIRST_PORT: u16 = 20000;
const INTERVAL: Duration = Duration::from_secs(1);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn enter(ns: &str) {
    let f = File::open(format!("/run/netns/{ns}")).expect("open netns");
    setns(f, CloneFlags::CLONE_NEWNET).expect("setns");
}

/// Pins the calling thread to one CPU, so that what it is charged for is what runs there.
fn pin(cpu: usize) {
    let mut set = CpuSet::new();
    set.set(cpu).expect("cpu index");
    sched_setaffinity(Pid::from_raw(0), &set).expect("sched_setaffinity");
}

/// Sets the RPS mask of `eth0`'s receive queue inside `ns` and checks it took.
fn rps(ns: &Netns, mask: u32) {
    let path = "/sys/class/net/eth0/queues/rx-0/rps_cpus";
    ns.sh(&format!("echo {mask:x} > {path}"));
    let out = ns.run(&["cat", path]);
    let got = u32::from_str_radix(String::from_utf8_lossy(&out.stdout).trim(), 16)
        .expect("rps_cpus is hex");
    assert_eq!(got, mask, "rps_cpus of eth0 in {} did not take", ns.name);
}

/// Per-CPU kernel counters for the first two CPUs: packets taken off the receive backlog
/// (/proc/net/softnet_stat, column 1) and softirq time in USER_HZ ticks (/proc/stat).
#[derive(Clone, Copy, Default)]
struct CpuCounters {
    packets: [u64; 2],
    softirq_ticks: [u64; 2],
    call_ipis: [u64; 2],
}

impl CpuCounters {
    fn read() -> CpuCounters {
        let mut c = CpuCounters::default();
        let softnet = std::fs::read_to_string("/proc/net/softnet_stat").expect("softnet_stat");
        for (cpu, line) in softnet.lines().take(2).enumerate() {
            let first = line.split_whitespace().next().expect("softnet_stat column");
            c.packets[cpu] = u64::from_str_radix(first, 16).expect("softnet_stat is hex");
        }
        let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
        for cpu in 0..2 {
            let prefix = format!("cpu{cpu} ");
            let line = stat
                .lines()
                .find(|l| l.starts_with(&prefix))
                .expect("per-CPU line in /proc/stat");
            // user nice system idle iowait irq softirq ...
            c.softirq_ticks[cpu] = line
                .split_whitespace()
                .nth(7)
                .and_then(|v| v.parse().ok())
                .expect("softirq column");
        }
        let interrupts = std::fs::read_to_string("/proc/interrupts").expect("/proc/interrupts");
        let cal = interrupts
            .lines()
            .find(|l| l.trim_start().starts_with("CAL:"))
            .expect("CAL line in /proc/interrupts");
        for (cpu, v) in cal.split_whitespace().skip(1).take(2).enumerate() {
            c.call_ipis[cpu] = v.parse().expect("CAL count");
        }
        c
    }

    fn since(self, earlier: CpuCounters) -> CpuCounters {
        CpuCounters {
            packets: [0, 1].map(|i| self.packets[i] - earlier.packets[i]),
            softirq_ticks: [0, 1].map(|i| self.softirq_ticks[i] - earlier.softirq_ticks[i]),
            call_ipis: [0, 1].map(|i| self.call_ipis[i] - earlier.call_ipis[i]),
        }
    }

    /// One line: packets per second and softirq % of each CPU over `wall`.
    fn describe(&self, wall: Duration) -> String {
        let w = wall.as_secs_f64();
        // USER_HZ is 100 on Linux, so one tick is 10 ms.
        let pct = |t: u64| t as f64 / 100.0 / w * 100.0;
        format!(
            "CPU0 {:.0} pkt/s, softirq {:.1}%, {:.0} IPIs/s in; CPU1 {:.0} pkt/s, softirq {:.1}%, {:.0} IPIs/s in",
            self.packets[0] as f64 / w,
            pct(self.softirq_ticks[0]),
            self.call_ipis[0] as f64 / w,
            self.packets[1] as f64 / w,
            pct(self.softirq_ticks[1]),
            self.call_ipis[1] as f64 / w
        )
    }
}

/// User and system CPU time of the calling thread.
fn cpu_time() -> (Duration, Duration) {
    let u = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    (tv(u.user_time()), tv(u.system_time()))
}

/// The same connect-and-reset per target, from plain blocking sockets in a loop on this
/// thread: the kernel's own cost of a TCP probe under the same CPU arrangement as the
/// prober. Returns user and system time, count, and the per-CPU counters over the loop.
fn connect_floor(targets: &[SocketAddr]) -> Floor {
    let (k0, w0) = (CpuCounters::read(), Instant::now());
    let start = cpu_time();
    let mut ok = 0;
    for t in targets {
        if let Ok(s) = TcpStream::connect(t) {
            setsockopt(
                &s,
                sockopt::Linger,
                &nix::libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                },
            )
            .expect("SO_LINGER");
            ok += 1;
        }
    }
    let end = cpu_time();
    Floor {
        user: end.0 - start.0,
        sys: end.1 - start.1,
        ok,
        kernel: CpuCounters::read().since(k0),
        wall: w0.elapsed(),
    }
}

/// What [`connect_floor`] measured.
struct Floor {
    user: Duration,
    sys: Duration,
    ok: usize,
    kernel: CpuCounters,
    wall: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this without it
    // (and a filter argument means some other bench was asked for): do nothing then.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| !a.starts_with("--")) {
        return;
    }
    require_root();
    require_program("ip", "iproute2");
    let addrs = env_or("HEALTH_BENCH_ADDRS", 100).clamp(1, 250) as u8;
    let ports = env_or("HEALTH_BENCH_PORTS", 100).clamp(1, 10_000) as u16;
    let secs = env_or("HEALTH_BENCH_SECS", 20);
    let steer = env_or("HEALTH_BENCH_STEER", 0) != 0;
    assert!(
        std::thread::available_parallelism().map_or(0, |n| n.get()) >= 2,
        "the benchmark needs 2 CPUs: the prober on CPU 0, the simulated backends on CPU 1"
    );
    // Probe sockets in flight, listeners and accepted sockets share this process: raise
    // the soft limit to the hard one (without CAP_SYS_RESOURCE we cannot go further).
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("raise RLIMIT_NOFILE");
    run(addrs, ports, secs, steer);
}

/// One measurement. With `steer`, the server namespace's receive processing runs on CPU 1
/// and the prober's on CPU 0 (its own thread's CPU); without, all of it runs on the CPU
/// that transmitted, which for most packets is the prober's.
fn run(addrs: u8, ports: u16, secs: u64, steer: bool) {
    let n = u32::from(addrs) * u32::from(ports);
    let prb = Netns::new("bprb");
    let srv = Netns::new("bsrv");
    veth(&prb, "eth0", &srv, "eth0");
    prb.run(&["ip", "addr", "add", &format!("{PROBER}/24"), "dev", "eth0"]);
    srv.sh(&format!(
        "for i in $(seq 2 {}); do ip addr add 10.202.0.$i/24 dev eth0; done",
        u32::from(addrs) + 1
    ));
    if steer {
        rps(&srv, 0b10);
        rps(&prb, 0b01);
    }
    // The sampler (this thread) copies 10,000 statuses now and then: keep it off CPU 0.
    pin(1);

    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let srv_name = srv.name.clone();
    let server_stop = Arc::clone(&stop);
    // The backends drain their accept queues every 20 ms instead of waking per
    // connection: a server thread woken 10,000 times a second on the prober's CPUs would
    // preempt the prober thousands of times a second, which real (remote) backends don't.
    let server = std::thread::spawn(move || {
        pin(1);
        enter(&srv_name);
        let listeners: Vec<std::net::TcpListener> = (0..ports)
            .map(|i| {
                let l = std::net::TcpListener::bind(("0.0.0.0", FIRST_PORT + i))
                    .expect("bind listener");
                l.set_nonblocking(true).expect("nonblocking");
                l
            })
            .collect();
        ready_tx.send(()).expect("ready");
        while !server_stop.load(Ordering::Relaxed) {
            for l in &listeners {
                while let Ok((s, _)) = l.accept() {
                    drop(s);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    ready_rx.recv().expect("server start");

    let check = Arc::new(HealthCheck {
        name: "bench".into(),
        kind: CheckKind::Tcp {
            send: None,
            expect: None,
        },
        port: None,
        interval: INTERVAL,
        timeout: Duration::from_millis(500),
        rise: 2,
        fall: 3,
        jitter: Duration::from_millis(50),
        initial: InitialHealth::Down,
        source: None,
    });
    let targets: Vec<Target> = (0..addrs)
        .flat_map(|a| (0..ports).map(move |p| (a, p)))
        .map(|(a, p)| Target {
            address: IpAddr::from([10, 202, 0, a + 2]),
            port: FIRST_PORT + p,
            check: Arc::clone(&check),
        })
        .collect();

    let floor_targets: Vec<SocketAddr> = targets
        .iter()
        .map(|t| SocketAddr::new(t.address, t.port))
        .collect();
    let (floor_tx, floor_rx) = std::sync::mpsc::channel::<Floor>();
    let (handle_tx, handle_rx) = std::sync::mpsc::channel::<Arc<Prober>>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let (cpu_tx, cpu_rx) = std::sync::mpsc::channel::<(Duration, Duration, Duration)>();
    let prb_name = prb.name.clone();
    let warmup = Duration::from_secs(3);
    let prober_thread = std::thread::spawn(move || {
        pin(0);
        enter(&prb_name);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let floor = connect_floor(&floor_targets);
        floor_tx.send(floor).expect("floor");
        rt.block_on(async move {
            let (prober, mut rx) = Prober::spawn();
            let prober = Arc::new(prober);
            prober.set_targets(targets);
            handle_tx.send(Arc::clone(&prober)).expect("handle");
            tokio::spawn(async move { while rx.recv().await.is_some() {} });
            // First round spreads over one interval and rise takes two: measure after.
            tokio::time::sleep(warmup).await;
            let (cpu0, wall0) = (cpu_time(), Instant::now());
            let _ = done_rx.await;
            let cpu1 = cpu_time();
            cpu_tx
                .send((cpu1.0 - cpu0.0, cpu1.1 - cpu0.1, wall0.elapsed()))
                .expect("cpu");
        });
    });

    let fl = floor_rx.recv().expect("floor numbers");
    let (floor_user, floor_sys, floor_n) = (fl.user, fl.sys, fl.ok);
    let prober = handle_rx.recv().expect("prober handle");
    std::thread::sleep(warmup);
    let t0 = Instant::now();
    let k0 = CpuCounters::read();
    let before: u64 = prober.status().iter().map(|s| s.started).sum();
    // Sample often enough to see every start (each target starts once per interval)
    // and rarely enough that copying 10,000 statuses does not crowd the prober.
    let mut starts: HashMap<(IpAddr, u16, Instant), Duration> = HashMap::new();
    while t0.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(env_or("HEALTH_BENCH_SAMPLE_MS", 300)));
        for s in prober.status() {
            if let Some((due, started)) = s.last_start
                && started >= t0
            {
                starts.insert((s.key.address, s.key.port, started), started - due);
            }
        }
    }
    let kernel = CpuCounters::read().since(k0);
    let kernel_wall = t0.elapsed();
    let _ = done_tx.send(());
    let (user, sys, wall) = cpu_rx.recv().expect("cpu numbers");
    let cpu = user + sys;
    let status = prober.status();
    let after: u64 = status.iter().map(|s| s.started).sum();
    let failed: u64 = status.iter().map(|s| s.failed).sum();
    let up = status
        .iter()
        .filter(|s| s.state == health::Health::Up)
        .count();
    let counters = prober.counters();
    drop(prober);
    prober_thread.join().expect("prober thread");
    stop.store(true, Ordering::Relaxed);
    server.join().expect("server thread");

    let mut lateness: Vec<Duration> = starts.values().copied().collect();
    lateness.sort();
    let mut buckets = [0u64; 10];
    let mut per_10ms: HashMap<u128, u64> = HashMap::new();
    for (_, _, started) in starts.keys() {
        let off = (*started - t0).as_nanos() % INTERVAL.as_nanos();
        buckets[(off / (INTERVAL.as_nanos() / 10)) as usize] += 1;
        *per_10ms
            .entry((*started - t0).as_millis() / 10)
            .or_default() += 1;
    }
    let seen = starts.len() as u64;
    let mean_bucket = seen as f64 / 10.0;
    let busiest_10ms = per_10ms.values().copied().max().unwrap_or(0);
    let expected_10ms = seen as f64 / (secs as f64 * 100.0);

    println!(
        "health tcp_10k: {n} TCP targets ({addrs} addresses x {ports} ports), interval {INTERVAL:?}, {secs} s measured, {}",
        if steer {
            "prober pinned to CPU 0, server rx steered to CPU 1 (RPS), prober rx on CPU 0"
        } else {
            "prober pinned to CPU 0, no RPS (rx runs on the transmitting CPU)"
        }
    );
    println!(
        "  prober CPU: {:.3} s user + {:.3} s sys over {:.3} s wall = {:.2}% of one core",
        user.as_secs_f64(),
        sys.as_secs_f64(),
        wall.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64()
    );
    let floor = |d: Duration| d.as_secs_f64() / floor_n.max(1) as f64 * f64::from(n);
    println!(
        "  peer: plain blocking connect + RST loop, {floor_n} connects: {:.2}% user + {:.2}% sys of one core at {n}/s \
         (the kernel floor, same CPU arrangement)",
        100.0 * floor(floor_user),
        100.0 * floor(floor_sys)
    );
    println!(
        "  floor loop: {} over {:.3} s",
        fl.kernel.describe(fl.wall),
        fl.wall.as_secs_f64()
    );
    println!(
        "  prober window: {} (steered: ~1 packet/probe on CPU0, 3 on CPU1; else all 4 on CPU0)",
        kernel.describe(kernel_wall)
    );
    println!(
        "  prober above the floor: {:.2}% of one core",
        100.0 * (cpu.as_secs_f64() / wall.as_secs_f64() - floor(floor_user + floor_sys))
    );
    println!(
        "  probes started: {} in window (expected {}), {} sampled starts; failures {failed}; up {up}/{n}",
        after - before,
        u64::from(n) * secs,
        seen
    );
    println!(
        "  start spread over the interval (100 ms buckets, % of mean): {}",
        buckets
            .iter()
            .map(|b| format!("{:.0}", 100.0 * *b as f64 / mean_bucket))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("  busiest 10 ms: {busiest_10ms} starts (mean {expected_10ms:.1})");
    println!(
        "  start lateness (start - due): p50 {:?}, p99 {:?}, max {:?}",
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        percentile(&lateness, 1.0)
    );
    println!(
        "  counters: dispatched {}, completed {}, stale {}, skipped rounds {}",
        counters.dispatched, counters.completed, counters.stale_results, counters.skipped_rounds
    );
}
