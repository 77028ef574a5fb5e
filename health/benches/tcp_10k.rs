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
//! Server-side accept work runs on another thread and is not counted; the server side's
//! kernel handshake work is (veth runs it in the sender's softirq), which is why the
//! report also measures a plain blocking connect loop as the kernel's floor.

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
use nix::sched::{CloneFlags, setns};
use nix::sys::resource::{Resource, UsageWho, getrlimit, getrusage, setrlimit};
use nix::sys::socket::{setsockopt, sockopt};

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

/// User and system CPU time of the calling thread.
fn cpu_time() -> (Duration, Duration) {
    let u = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    (tv(u.user_time()), tv(u.system_time()))
}

/// The same connect-and-reset per target, from plain blocking sockets in a loop on this
/// thread: the kernel's own cost of a TCP probe (both ends, since over veth the server's
/// handshake work runs in the sender's softirq). Returns user and system time and count.
fn connect_floor(targets: &[SocketAddr]) -> (Duration, Duration, usize) {
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
    (end.0 - start.0, end.1 - start.1, ok)
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
    // Probe sockets in flight, listeners and accepted sockets share this process: raise
    // the soft limit to the hard one (without CAP_SYS_RESOURCE we cannot go further).
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("raise RLIMIT_NOFILE");
    run(addrs, ports, secs);
}

/// One measurement: everything shares the machine's CPUs, so the server side's handshake
/// work, which veth runs in the sender's softirq, is charged to the prober thread.
fn run(addrs: u8, ports: u16, secs: u64) {
    let n = u32::from(addrs) * u32::from(ports);
    let prb = Netns::new("bprb");
    let srv = Netns::new("bsrv");
    veth(&prb, "eth0", &srv, "eth0");
    prb.run(&["ip", "addr", "add", &format!("{PROBER}/24"), "dev", "eth0"]);
    srv.sh(&format!(
        "for i in $(seq 2 {}); do ip addr add 10.202.0.$i/24 dev eth0; done",
        u32::from(addrs) + 1
    ));

    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let srv_name = srv.name.clone();
    let server_stop = Arc::clone(&stop);
    // The backends drain their accept queues every 20 ms instead of waking per
    // connection: a server thread woken 10,000 times a second on the prober's CPUs would
    // preempt the prober thousands of times a second, which real (remote) backends don't.
    let server = std::thread::spawn(move || {
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
    let (floor_tx, floor_rx) = std::sync::mpsc::channel::<(Duration, Duration, usize)>();
    let (handle_tx, handle_rx) = std::sync::mpsc::channel::<Arc<Prober>>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let (cpu_tx, cpu_rx) = std::sync::mpsc::channel::<(Duration, Duration, Duration)>();
    let prb_name = prb.name.clone();
    let warmup = Duration::from_secs(3);
    let prober_thread = std::thread::spawn(move || {
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

    let (floor_user, floor_sys, floor_n) = floor_rx.recv().expect("floor numbers");
    let prober = handle_rx.recv().expect("prober handle");
    std::thread::sleep(warmup);
    let t0 = Instant::now();
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
        "health tcp_10k: {n} TCP targets ({addrs} addresses x {ports} ports), interval {INTERVAL:?}, {secs} s measured"
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
         (the kernel floor; over veth it includes the server side's handshake work)",
        100.0 * floor(floor_user),
        100.0 * floor(floor_sys)
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
