//! Prober cost at scale: 10,000 TCP targets probed every second.
//!
//! Run as root: `cargo bench -p health --bench tcp_10k` (env `HEALTH_BENCH_ADDRS` and
//! `HEALTH_BENCH_PORTS`, default 100 x 100, `HEALTH_BENCH_SECS`, default 20, and
//! `HEALTH_BENCH_ARRANGEMENTS`, default `shared,split`, below). It builds a two-namespace lab
//! whose server namespace holds 100 addresses and listens on 100 wildcard ports (100 x 100
//! = 10,000 distinct targets from only 100 listening sockets: containers often cap
//! RLIMIT_NOFILE below what 10,000 listeners need), runs the prober on its own
//! single-threaded tokio runtime in the prober namespace, and reports:
//! - probes started per second, failures, and how many targets are up;
//! - CPU of the prober thread (getrusage RUSAGE_THREAD user+sys over wall time), pinned to
//!   CPU 0, and in the split arrangement that of the kernel thread doing its receive
//!   work, and separately that of the simulated backends;
//! - the kernel floors: the same connects from a plain blocking loop, both as socket +
//!   connect + close (RST) and as connect + reset on one reused socket (what the prober
//!   does), scaled to the target rate;
//! - how probe starts spread over each interval (100 ms buckets, busiest 10 ms) and start
//!   lateness (actual start minus scheduled due time).
//!
//! Where the backends' work lands. Over veth, a packet's receive processing runs where it
//! was sent, and its time is charged to whatever thread is current there, so in the
//! "shared" arrangement the prober thread also pays the server side of every handshake:
//! SYN -> SYN-ACK, the handshake ACK that creates the accepted socket, and the RST that
//! frees it (perf put that at 31-45% of the prober thread's samples after issue #6).
//! Real backends are other machines. The "split" arrangement turns on threaded NAPI on
//! both veth ends (GRO on, so veth receives through NAPI; one real-time kernel thread per
//! end, with NIC-like interrupt moderation): the server end's thread is pinned to CPU 1
//! and reported as the backends' cost, the prober end's thread is pinned to CPU 0 and
//! counted with the prober, as a NIC's receive processing would be. That split is
//! measurable per thread but not free: packets now wake a thread on the other CPU, and in
//! this VM an inter-processor interrupt traps to the hypervisor, which the prober's side
//! pays; so split overstates the prober a little, shared overstates it a lot. "steered"
//! (opt-in) is the older alternative (RPS: the server end's receive processing goes to
//! CPU 1 in softirq context, which no thread's time shows). The report always gives
//! per-CPU packets processed (/proc/net/softnet_stat), softirq time (/proc/stat) and
//! function-call IPIs received (/proc/interrupts) so the split and its price can be
//! checked, and the veth drop counters. Server-side accept work runs on a thread pinned
//! to CPU 1 and is reported, not counted.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use health::{CheckKind, HealthCheck, InitialHealth, Prober, Target};
use lab::netns::{Netns, require_program, require_root, veth};
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

/// A kernel thread doing one veth end's receive processing (threaded NAPI).
#[derive(Clone, Copy)]
struct NapiThread {
    pid: i32,
}

impl NapiThread {
    /// Turns on threaded NAPI for `ifname` in `ns` (GRO on, so veth receives through
    /// NAPI), finds the kernel thread that appeared and pins it to `cpu`.
    fn start(ns: &Netns, ifname: &str, cpu: usize) -> NapiThread {
        require_program("ethtool", "ethtool");
        let before = napi_threads();
        ns.run(&["ethtool", "-K", ifname, "gro", "on"]);
        // Interrupt moderation, as a NIC has: after a poll, wait up to 100 us for more
        // packets instead of waking the thread for each one (10,000 wake-ups a second
        // cost more than the packets they carry).
        ns.sh(&format!(
            "echo 2 > /sys/class/net/{ifname}/napi_defer_hard_irqs && \
             echo 100000 > /sys/class/net/{ifname}/gro_flush_timeout"
        ));
        ns.sh(&format!("echo 1 > /sys/class/net/{ifname}/threaded"));
        // The thread is created by the write above; give the kernel a moment to name it.
        let deadline = Instant::now() + Duration::from_secs(5);
        let pid = loop {
            let new: Vec<i32> = napi_threads().difference(&before).copied().collect();
            match new.as_slice() {
                [pid] => break *pid,
                [] if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                _ => panic!(
                    "expected one new napi/{ifname} kernel thread in {}, found {new:?}",
                    ns.name
                ),
            }
        };
        let mut set = CpuSet::new();
        set.set(cpu).expect("cpu index");
        sched_setaffinity(Pid::from_raw(pid), &set).expect("pin the napi thread");
        // Real-time, like the interrupt handling it stands for: as an ordinary thread it
        // queues behind whatever else the (shared, busy) machine runs, and every
        // handshake waits milliseconds for it.
        require_program("chrt", "util-linux");
        lab::netns::run(&["chrt", "--fifo", "--pid", "50", &pid.to_string()]);
        NapiThread { pid }
    }

    /// Time the thread has run, from /proc/PID/schedstat (nanoseconds, exact).
    fn runtime(self) -> Duration {
        let s = std::fs::read_to_string(format!("/proc/{}/schedstat", self.pid))
            .expect("napi thread schedstat");
        let ns: u64 = s
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .expect("schedstat runtime");
        Duration::from_nanos(ns)
    }
}

/// Pids of the kernel's threaded-NAPI threads ("napi/IFNAME-ID").
fn napi_threads() -> HashSet<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            comm.starts_with("napi/").then_some(pid)
        })
        .collect()
}

/// CPU used on the prober's side: its thread, plus its receive thread when split.
#[derive(Clone, Copy)]
struct ProberSide {
    user: Duration,
    sys: Duration,
    rx: Duration,
}

impl ProberSide {
    fn read(rx: Option<NapiThread>) -> ProberSide {
        let (user, sys) = cpu_time();
        ProberSide {
            user,
            sys,
            rx: rx.map_or(Duration::ZERO, NapiThread::runtime),
        }
    }

    fn since(self, earlier: ProberSide) -> ProberSide {
        ProberSide {
            user: self.user - earlier.user,
            sys: self.sys - earlier.sys,
            rx: self.rx - earlier.rx,
        }
    }

    fn total(self) -> Duration {
        self.user + self.sys + self.rx
    }
}

/// How the kernel floors open and close their connections.
#[derive(Clone, Copy)]
enum FloorKind {
    /// socket, connect, SO_LINGER 0, close (RST): what the prober did before issue #6.
    SocketPerProbe,
    /// connect, connect(AF_UNSPEC) (RST) on one socket: what the prober does now.
    Reused,
}

/// The same connects from a plain blocking loop on this thread, which must be the
/// prober's: the kernel's own cost of a TCP probe under the same CPU arrangement.
fn connect_floor(targets: &[SocketAddr], kind: FloorKind, rx: Option<NapiThread>) -> Floor {
    let (k0, w0) = (CpuCounters::read(), Instant::now());
    let start = ProberSide::read(rx);
    let mut ok = 0;
    match kind {
        FloorKind::SocketPerProbe => {
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
        }
        FloorKind::Reused => {
            use rustix::net::{AddressFamily, SocketFlags, SocketType};
            let s = rustix::net::socket_with(
                AddressFamily::INET,
                SocketType::STREAM,
                SocketFlags::CLOEXEC,
                None,
            )
            .expect("socket");
            for t in targets {
                if rustix::net::connect(&s, t).is_ok() {
                    ok += 1;
                }
                rustix::net::connect_unspec(&s).expect("reset");
            }
        }
    }
    Floor {
        cpu: ProberSide::read(rx).since(start),
        ok,
        kernel: CpuCounters::read().since(k0),
        wall: w0.elapsed(),
    }
}

/// What [`connect_floor`] measured.
struct Floor {
    cpu: ProberSide,
    ok: usize,
    kernel: CpuCounters,
    wall: Duration,
}

impl Floor {
    /// Its CPU per connect, scaled to `rate` connects a second, in % of one core.
    fn pct_at(&self, rate: f64, d: Duration) -> f64 {
        100.0 * d.as_secs_f64() / self.ok.max(1) as f64 * rate
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Where the simulated backends' receive work runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arrangement {
    /// On the CPU that sent each packet, charged to the prober thread (default).
    Shared,
    /// Threaded NAPI: each veth end's receive work in its own measured kernel thread.
    Split,
    /// RPS: the server end's receive work in softirq on CPU 1, the prober end's on CPU 0.
    Steered,
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
    let arrangements: Vec<Arrangement> = std::env::var("HEALTH_BENCH_ARRANGEMENTS")
        .unwrap_or_else(|_| "shared,split".into())
        .split(',')
        .map(|a| match a.trim() {
            "shared" => Arrangement::Shared,
            "split" => Arrangement::Split,
            "steered" => Arrangement::Steered,
            other => panic!(
                "HEALTH_BENCH_ARRANGEMENTS: unknown arrangement {other:?} (shared, split, steered)"
            ),
        })
        .collect();
    assert!(
        std::thread::available_parallelism().map_or(0, |n| n.get()) >= 2,
        "the benchmark needs 2 CPUs: the prober on CPU 0, the simulated backends on CPU 1"
    );
    // Probe sockets in flight, listeners and accepted sockets share this process: raise
    // the soft limit to the hard one (without CAP_SYS_RESOURCE we cannot go further).
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("raise RLIMIT_NOFILE");
    for arrangement in arrangements {
        run(addrs, ports, secs, arrangement);
    }
}

/// One measurement.
fn run(addrs: u8, ports: u16, secs: u64, arrangement: Arrangement) {
    let n = u32::from(addrs) * u32::from(ports);
    let prb = Netns::new("hh-p");
    let srv = Netns::new("hh-s");
    veth(&prb, "eth0", &srv, "eth0");
    prb.run(&["ip", "addr", "add", &format!("{PROBER}/24"), "dev", "eth0"]);
    srv.sh(&format!(
        "for i in $(seq 2 {}); do ip addr add 10.202.0.$i/24 dev eth0; done",
        u32::from(addrs) + 1
    ));
    let (mut prober_rx, mut server_rx) = (None, None);
    match arrangement {
        Arrangement::Shared => {}
        Arrangement::Split => {
            server_rx = Some(NapiThread::start(&srv, "eth0", 1));
            prober_rx = Some(NapiThread::start(&prb, "eth0", 0));
        }
        Arrangement::Steered => {
            rps(&srv, 0b10);
            rps(&prb, 0b01);
        }
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
        let (u0, s0) = cpu_time();
        let w0 = Instant::now();
        while !server_stop.load(Ordering::Relaxed) {
            for l in &listeners {
                while let Ok((s, _)) = l.accept() {
                    drop(s);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let (u1, s1) = cpu_time();
        (u1 + s1 - u0 - s0, w0.elapsed())
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
        address: None,
    });
    let targets: Vec<Target> = (0..addrs)
        .flat_map(|a| (0..ports).map(move |p| (a, p)))
        .map(|(a, p)| Target {
            address: IpAddr::from([10, 202, 0, a + 2]),
            port: FIRST_PORT + p,
            check: Arc::clone(&check),
            via_vip: None,
        })
        .collect();

    // Three passes over the targets: a single pass lasts a fraction of a second, short
    // enough for a neighbour's burst to skew it.
    let floor_targets: Vec<SocketAddr> = std::iter::repeat_n(&targets, 3)
        .flatten()
        .map(|t| SocketAddr::new(t.address, t.port))
        .collect();
    let (floor_tx, floor_rx) = std::sync::mpsc::channel::<(Floor, Floor)>();
    let (handle_tx, handle_rx) = std::sync::mpsc::channel::<Arc<Prober>>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let (cpu_tx, cpu_rx) = std::sync::mpsc::channel::<(ProberSide, Duration)>();
    let prb_name = prb.name.clone();
    let warmup = Duration::from_secs(3);
    let prober_thread = std::thread::spawn(move || {
        pin(0);
        enter(&prb_name);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let floors = (
            connect_floor(&floor_targets, FloorKind::SocketPerProbe, prober_rx),
            connect_floor(&floor_targets, FloorKind::Reused, prober_rx),
        );
        floor_tx.send(floors).expect("floor");
        rt.block_on(async move {
            let (prober, mut rx) = Prober::spawn();
            let prober = Arc::new(prober);
            prober.set_targets(targets);
            handle_tx.send(Arc::clone(&prober)).expect("handle");
            tokio::spawn(async move { while rx.recv().await.is_some() {} });
            // First round spreads over one interval and rise takes two: measure after.
            tokio::time::sleep(warmup).await;
            let (cpu0, wall0) = (ProberSide::read(prober_rx), Instant::now());
            let _ = done_rx.await;
            let cpu = ProberSide::read(prober_rx).since(cpu0);
            cpu_tx.send((cpu, wall0.elapsed())).expect("cpu");
        });
    });

    let (floor_socket, floor_reused) = floor_rx.recv().expect("floor numbers");
    let prober = handle_rx.recv().expect("prober handle");
    std::thread::sleep(warmup);
    let t0 = Instant::now();
    let k0 = CpuCounters::read();
    let server_rx0 = server_rx.map(NapiThread::runtime);
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
    let drops = [&prb, &srv].map(|ns| {
        let out = ns.run(&["cat", "/sys/class/net/eth0/statistics/rx_dropped"]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    });
    let server_rx_cpu = server_rx.zip(server_rx0).map(|(t, r0)| t.runtime() - r0);
    let kernel_wall = t0.elapsed();
    let after: u64 = prober.status().iter().map(|s| s.started).sum();
    let _ = done_tx.send(());
    let (cpu, wall) = cpu_rx.recv().expect("cpu numbers");
    let status = prober.status();
    let failed: u64 = status.iter().map(|s| s.failed).sum();
    let up = status
        .iter()
        .filter(|s| s.state == health::Health::Up)
        .count();
    let counters = prober.counters();
    drop(prober);
    prober_thread.join().expect("prober thread");
    stop.store(true, Ordering::Relaxed);
    let (accept_cpu, accept_wall) = server.join().expect("server thread");

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

    let w = wall.as_secs_f64();
    let pct = |d: Duration| 100.0 * d.as_secs_f64() / w;
    let rate = (after - before) as f64 / kernel_wall.as_secs_f64();
    println!(
        "health tcp_10k: {n} TCP targets ({addrs} addresses x {ports} ports), interval {INTERVAL:?}, {secs} s measured, prober pinned to CPU 0, {}",
        match arrangement {
            Arrangement::Shared =>
                "shared (no NAPI threads, no RPS: the backends' receive work runs on the prober's thread)",
            Arrangement::Split =>
                "split (threaded NAPI: prober end's receive thread on CPU 0, backends' on CPU 1)",
            Arrangement::Steered =>
                "steered (RPS: backends' receive work in softirq on CPU 1, prober end's on CPU 0)",
        }
    );
    println!(
        "  probes: {} started in the window = {rate:.0}/s (target {n}/s); failures {failed}; up {up}/{n}",
        after - before
    );
    println!(
        "  prober thread: {:.3} s user + {:.3} s sys over {w:.3} s = {:.2}% of one core{}",
        cpu.user.as_secs_f64(),
        cpu.sys.as_secs_f64(),
        pct(cpu.user + cpu.sys),
        if arrangement == Arrangement::Shared {
            " (includes the backends' kernel receive work: see the split arrangement)"
        } else {
            ""
        }
    );
    if arrangement == Arrangement::Split {
        println!(
            "  prober end's receive thread (CPU 0): {:.2}% -> prober total {:.2}% of one core",
            pct(cpu.rx),
            pct(cpu.total())
        );
        if let Some(s) = server_rx_cpu {
            println!(
                "  backends' receive thread (CPU 1, not counted): {:.2}% of one core",
                100.0 * s.as_secs_f64() / kernel_wall.as_secs_f64()
            );
        }
    }
    println!(
        "  backends' accept thread (CPU 1, not counted): {:.2}% of one core",
        100.0 * accept_cpu.as_secs_f64() / accept_wall.as_secs_f64()
    );
    for (name, f) in [
        ("socket + connect + close (RST)", &floor_socket),
        ("connect + reset on one socket ", &floor_reused),
    ] {
        println!(
            "  kernel floor, {name}: {:.2}% user + {:.2}% sys{} of one core at {rate:.0}/s ({} connects in {:.3} s)",
            f.pct_at(rate, f.cpu.user),
            f.pct_at(rate, f.cpu.sys),
            if arrangement == Arrangement::Split {
                format!(" + {:.2}% receive thread", f.pct_at(rate, f.cpu.rx))
            } else {
                String::new()
            },
            f.ok,
            f.wall.as_secs_f64()
        );
    }
    if arrangement == Arrangement::Split {
        // Each blocking connect wakes the receive threads for every packet; the prober's
        // traffic comes in bursts that share wake-ups. No floor to compare with here.
        println!("  (split: the blocking floor loops pay a thread wake-up per packet)");
    } else {
        println!(
            "  prober above the reuse floor: {:.2}% of one core",
            pct(cpu.total()) - floor_reused.pct_at(rate, floor_reused.cpu.total())
        );
    }
    println!(
        "  floor loops: {} over {:.3} s; {} over {:.3} s",
        floor_socket.kernel.describe(floor_socket.wall),
        floor_socket.wall.as_secs_f64(),
        floor_reused.kernel.describe(floor_reused.wall),
        floor_reused.wall.as_secs_f64()
    );
    println!(
        "  prober window: {}; veth receive drops since setup: prober end {}, server end {}",
        kernel.describe(kernel_wall),
        drops[0],
        drops[1]
    );
    println!(
        "  start spread over the interval (100 ms buckets, % of mean): {}",
        buckets
            .iter()
            .map(|b| format!("{:.0}", 100.0 * *b as f64 / mean_bucket))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "  busiest 10 ms: {busiest_10ms} starts (mean {expected_10ms:.1}); {seen} starts sampled"
    );
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
