//! The LVS semantics of issue 24 through the datapath: one lab (client, router, one
//! appliance, three backends serving HTTP and UDP), one appliance config with a NAT VIP per
//! feature, real connections from the client namespace. Each section asserts the numbers
//! the issue names and prints them as `MEASURE lvs ...`:
//! - sh: 300 connections from one client address land on one backend; 30 client addresses
//!   spread; with `sh-port` one address spreads. dh: 300 connections to one destination on
//!   one backend; eight destinations (VIPs) spread.
//! - persistence 10 s: a client stays on its backend while a backend is added and weights
//!   change (a reload); a disabled backend's client moves at once; after 10 s idle the
//!   table is empty.
//! - `max_connections = 5`, 20 concurrent connections over 3 backends: no backend above 5,
//!   the rest refused by `overflow = "reset"` (a RST: the client sees ECONNREFUSED), counted.
//! - `udp_one_packet`: 300 datagrams from one source port spread over the backends (rr), no
//!   UDP flow entries.
//! - slow start 10 s: a backend enabled again gets a rising share of new connections over
//!   10 s (shares per second printed), then its even share; the API shows it ramping.
//!
//! Clients with many source addresses use a small Python helper in the client namespace
//! (the lab needs python3 anyway). Needs root.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::BackendAction;
use lab::testing::Api;
use lab::{Lab, LabMode, LabOptions};

/// VIP addresses of this test (routed to the appliance as one /28).
const NET: &str = "192.0.2.64/28";
const SH: &str = "192.0.2.64";
const SH_PORT: &str = "192.0.2.65";
const PERSIST: &str = "192.0.2.66";
const LIMIT: &str = "192.0.2.67";
const ONE_PACKET: &str = "192.0.2.68";
const SLOW: &str = "192.0.2.69";
/// dh VIPs: 192.0.2.70 to .77.
const DH_FIRST: u8 = 70;
const DH_VIPS: u8 = 8;
const BACKENDS: [&str; 3] = ["10.0.0.21", "10.0.0.22", "10.0.0.23"];

/// Connects `n` times (source addresses taken in turn from `srcs`) to `vip:80`, asks
/// `/whoami` and prints `{source: {backend: count}}` as JSON; with `hold`, opens `n`
/// connections at once, asks nothing, keeps them `hold` seconds and prints
/// `{"open": k, "refused": r}`; `timeline` connects one after another for a number of
/// seconds and prints `[[seconds since its start, backend], ...]`. UDP mode sends `n` datagrams from one socket and prints
/// `{backend: replies}`.
const HELPER: &str = r#"
import collections, json, socket, sys, time
mode, vip, n, srcs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
if mode == "http":
    out = collections.defaultdict(collections.Counter)
    for i in range(n):
        src = srcs[i % len(srcs)]
        s = socket.socket()
        s.settimeout(5)
        s.bind((src, 0))
        s.connect((vip, 80))
        s.sendall(b"GET /whoami HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            data += d
        s.close()
        out[src][data.split(b"\r\n\r\n", 1)[1].decode().strip()] += 1
    print(json.dumps(out))
elif mode == "hold":
    held, refused = [], 0
    for i in range(n):
        s = socket.socket()
        s.settimeout(5)
        s.bind((srcs[0], 0))
        try:
            s.connect((vip, 80))
            held.append(s)
        except ConnectionRefusedError:
            refused += 1
        time.sleep(0.05)
    print(json.dumps({"open": len(held), "refused": refused}), flush=True)
    time.sleep(float(srcs[1]))
elif mode == "timeline":
    t0, out = time.monotonic(), []
    while time.monotonic() - t0 < float(srcs[1]):
        s = socket.socket()
        s.settimeout(5)
        s.bind((srcs[0], 0))
        s.connect((vip, 80))
        s.sendall(b"GET /whoami HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            data += d
        s.close()
        out.append([time.monotonic() - t0, data.split(b"\r\n\r\n", 1)[1].decode().strip()])
    print(json.dumps(out))
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 40053))
    s.settimeout(0.5)
    out = collections.Counter()
    for i in range(n):
        s.sendto(b"q%d" % i, (vip, 80))
        try:
            out[s.recvfrom(2048)[0].decode().split(":")[0]] += 1
        except socket.timeout:
            out["lost"] += 1
    print(json.dumps(out))
"#;

type PerSource = BTreeMap<String, BTreeMap<String, u32>>;

struct Rig {
    lab: Lab,
    helper: std::path::PathBuf,
    api: Api,
    base: String,
}

impl Rig {
    fn helper(&self, args: &[&str]) -> String {
        let helper = self.helper.display().to_string();
        let mut all = vec!["python3", helper.as_str()];
        all.extend_from_slice(args);
        let out = self.lab.client.output(&all);
        if !out.status.success() {
            let s = self.status();
            let drops: Vec<_> = s.drops.iter().filter(|d| d.value > 0).collect();
            panic!(
                "helper {args:?} failed: {}\ndrops {drops:?}\nconntrack {:?}\nlvs {:?}\n{}",
                String::from_utf8_lossy(&out.stderr),
                s.conntrack,
                s.lvs,
                self.log()
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn http(&self, vip: &str, n: u32, srcs: &[String]) -> PerSource {
        let text = self.helper(&["http", vip, &n.to_string(), &srcs.join(",")]);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("helper output {text:?}: {e}"))
    }

    /// Backend counts over every source.
    fn totals(per: &PerSource) -> BTreeMap<String, u32> {
        let mut t = BTreeMap::new();
        for m in per.values() {
            for (b, n) in m {
                *t.entry(b.clone()).or_default() += n;
            }
        }
        t
    }

    /// The status document, after the workers' idle ticks have published their counters.
    fn status(&self) -> api::Status {
        std::thread::sleep(Duration::from_millis(300));
        self.api.call(|c| c.status()).expect("status")
    }

    fn log(&self) -> String {
        self.lab.log_text(0)
    }

    fn reload_with(&self, extra: &str) {
        self.lab
            .write_config(&format!("{}{extra}", self.base))
            .expect("config");
        self.api
            .call(|c| c.reload())
            .unwrap_or_else(|e| panic!("reload: {e}\n{}", self.log()));
    }
}

fn vip(name: &str, addr: &str, lines: &str, backends: &[&str], backend_lines: &str) -> String {
    let mut s = format!(
        "[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = 80\nmode = \"nat\"\n{lines}\n"
    );
    for b in backends {
        s.push_str(&format!(
            "[[vip.backend]]\naddress = \"{b}\"\nport = 8080\n{backend_lines}\n"
        ));
    }
    s.push('\n');
    s
}

fn lvs_vips(persist_backends: &[&str], persist_weight: &str) -> String {
    let mut s = String::new();
    s += &vip("sh", SH, "scheduler = \"sh\"", &BACKENDS, "");
    s += &vip(
        "shport",
        SH_PORT,
        "scheduler = \"sh\"\nscheduler_flags = [\"sh-port\"]",
        &BACKENDS,
        "",
    );
    for i in 0..DH_VIPS {
        s += &vip(
            &format!("dh{i}"),
            &format!("192.0.2.{}", DH_FIRST + i),
            "scheduler = \"dh\"",
            &BACKENDS,
            "",
        );
    }
    s += &vip(
        "persist",
        PERSIST,
        "persistence = \"10s\"",
        persist_backends,
        persist_weight,
    );
    s += &vip(
        "limit",
        LIMIT,
        "overflow = \"reset\"",
        &BACKENDS,
        "max_connections = 5",
    );
    s += &vip(
        "onepacket",
        ONE_PACKET,
        "protocol = \"udp\"\nscheduler = \"rr\"\nudp_one_packet = true",
        &BACKENDS,
        "",
    );
    s += &vip("slow", SLOW, "slow_start = \"10s\"", &BACKENDS, "");
    s
}

fn start() -> Rig {
    lab::netns::require_program("python3", "python3");
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        prefix: "lv4",
        ..LabOptions::default()
    });
    let base = lab.config(&lab.dir.join("api.sock"));
    let helper = lab.dir.join("lvs_client.py");
    std::fs::write(&helper, HELPER).expect("helper");
    lab.write_config(&format!("{base}{}", lvs_vips(&BACKENDS[..2], "")))
        .expect("config");
    lab.router
        .try_run(&["ip", "route", "add", NET, "via", lab::LB_LAN4])
        .expect("route");
    // More client addresses of the client's own subnet (198.51.100.0/24), so that no two
    // sections share a client address: NAT maps a backend's reply back by the backend's
    // address and port and the client's, so two VIPs with the same backends and one client
    // port would be one reply key (the closing entries of the earlier one still hold it).
    for i in 0..43 {
        lab.client
            .try_run(&[
                "ip",
                "addr",
                "add",
                &format!("198.51.100.{}/24", 100 + i),
                "dev",
                "eth0",
            ])
            .expect("client address");
    }
    let probe = std::net::SocketAddr::new(SH.parse().expect("literal"), 80);
    lab.start_serving(lab::sluice!().path(), &[probe]);
    let api = lab.api_at(0);
    Rig {
        lab,
        helper,
        api,
        base,
    }
}

/// Client address `i` of the extra ones (198.51.100.100 and up).
fn src(i: u8) -> String {
    format!("198.51.100.{}", 100 + u32::from(i))
}

fn sh_and_dh(rig: &Rig) {
    let one = vec!["198.51.100.2".to_string()];
    let t = Rig::totals(&rig.http(SH, 300, &one));
    println!("MEASURE lvs sh one address: {t:?}");
    assert_eq!(t.len(), 1, "sh sent one client to several backends: {t:?}");
    assert_eq!(t.values().sum::<u32>(), 300);

    let many: Vec<String> = (0..30).map(src).collect();
    let per = rig.http(SH, 90, &many);
    let t = Rig::totals(&per);
    println!("MEASURE lvs sh 30 addresses: {t:?}");
    assert!(t.len() >= 2, "30 addresses did not spread: {t:?}");
    for (src, m) in &per {
        assert_eq!(m.len(), 1, "{src} went to several backends: {m:?}");
    }

    let t = Rig::totals(&rig.http(SH_PORT, 300, &[src(30)]));
    println!("MEASURE lvs sh-port one address: {t:?}");
    assert_eq!(t.len(), 3, "sh-port did not spread: {t:?}");
    assert!(t.values().all(|&n| n >= 45), "sh-port shares: {t:?}");

    let t = Rig::totals(&rig.http(&format!("192.0.2.{DH_FIRST}"), 300, &[src(31)]));
    println!("MEASURE lvs dh one destination: {t:?}");
    assert_eq!(t.len(), 1, "dh spread one destination: {t:?}");
    let mut per_vip = BTreeMap::new();
    for i in 0..DH_VIPS {
        let t = Rig::totals(&rig.http(&format!("192.0.2.{}", DH_FIRST + i), 20, &[src(32 + i)]));
        assert_eq!(t.len(), 1, "dh VIP {i}: {t:?}");
        let b = t.keys().next().cloned().unwrap_or_default();
        *per_vip.entry(b).or_insert(0u32) += 1;
    }
    println!("MEASURE lvs dh {DH_VIPS} destinations: VIPs per backend {per_vip:?}");
    assert!(
        per_vip.len() >= 2,
        "{DH_VIPS} destinations on one backend: {per_vip:?}"
    );
}

fn persistence(rig: &mut Rig) {
    let me = vec![src(40)];
    let t = Rig::totals(&rig.http(PERSIST, 50, &me));
    assert_eq!(t.len(), 1, "persistent client spread: {t:?}");
    let first = t.keys().next().cloned().unwrap_or_default();
    // be3 added and the weights changed.
    rig.reload_with(&lvs_vips(&BACKENDS, "weight = 7"));
    let t = Rig::totals(&rig.http(PERSIST, 50, &me));
    println!("MEASURE lvs persistence after add and weights: first {first}, now {t:?}");
    assert_eq!(
        t.keys().collect::<Vec<_>>(),
        vec![&first],
        "moved on a pool change"
    );
    let s = rig.status();
    println!(
        "MEASURE lvs persistence hits {} misses {} of 100 connections",
        s.lvs.persistence_hits, s.lvs.persistence_misses
    );
    // The counters reach the API when a worker publishes its snapshot (idle ticks); the
    // backends above are the semantic check, this one only that hits are counted.
    assert!(s.lvs.persistence_hits >= 90, "{:?}", s.lvs);
    assert!(s.lvs.persistence_entries >= 1, "{:?}", s.lvs);
    // A takeover carries the table: the entries are there before any new connection, and
    // the client stays on its backend (a fresh table would give it the ring's choice).
    let entries = s.lvs.persistence_entries;
    let (exited, log) = rig
        .lab
        .take_over_at(0, lab::sluice!().path(), 1, Duration::from_secs(30))
        .expect("take over");
    assert!(
        exited,
        "the old process did not exit:\n{}",
        lab::testing::file_text(&log)
    );
    let mut carried = 0;
    lab::testing::poll(Duration::from_secs(20), Duration::from_millis(200), || {
        carried = rig
            .api
            .call(|c| c.status())
            .map(|s| s.lvs.persistence_entries)
            .unwrap_or(0);
        carried > 0
    });
    println!("MEASURE lvs persistence entries before a takeover {entries}, after {carried}");
    assert!(
        carried >= 1,
        "the takeover lost the persistence table:\n{}",
        lab::testing::file_text(&log)
    );
    let t = Rig::totals(&rig.http(PERSIST, 20, &me));
    assert_eq!(
        t.keys().collect::<Vec<_>>(),
        vec![&first],
        "moved by the takeover"
    );
    // Disable the client's backend: its next connections move at once, and stay together.
    let n: usize = first
        .trim_start_matches("be")
        .parse()
        .expect("backend name");
    let id = format!("{}:8080", BACKENDS[n - 1]);
    rig.api
        .call(|c| c.backend_action("persist", &id, BackendAction::Disable))
        .expect("disable");
    let t = Rig::totals(&rig.http(PERSIST, 30, &me));
    println!("MEASURE lvs persistence after disabling {first}: {t:?}");
    assert!(
        !t.contains_key(&first),
        "disabled {first} kept its client: {t:?}"
    );
    assert_eq!(t.len(), 1, "moved client spread: {t:?}");
    // Idle for the timeout: the table forgets the client.
    let idle = Instant::now();
    let deadline = idle + Duration::from_secs(14);
    while rig.status().lvs.persistence_entries > 0 {
        assert!(Instant::now() < deadline, "entry outlived 10 s idle");
        std::thread::sleep(Duration::from_millis(500));
    }
    println!(
        "MEASURE lvs persistence entry gone {:.1} s after the last connection",
        idle.elapsed().as_secs_f64()
    );
}

fn limits(rig: &Rig) {
    let helper = rig.helper.display().to_string();
    let mut child = rig
        .lab
        .client
        .command("python3")
        .args([
            helper.as_str(),
            "hold",
            LIMIT,
            "20",
            &format!("{},8", src(41)),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("hold helper");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).expect("line");
    let held: BTreeMap<String, u32> = serde_json::from_str(&line).expect("hold output");
    let backends = rig.api.call(|c| c.backends("limit")).expect("backends");
    let counts: Vec<(String, u64, bool)> = backends
        .iter()
        .map(|b| (b.id.clone(), b.active_flows, b.full))
        .collect();
    let s = rig.status();
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "MEASURE lvs max_connections=5, 20 concurrent: client {held:?}, backends {counts:?}, \
         refused {} resets {} skips {}",
        s.lvs.overflow_refused, s.lvs.overflow_resets, s.lvs.limit_skips
    );
    assert_eq!(held.get("open"), Some(&15), "{held:?}");
    assert_eq!(held.get("refused"), Some(&5), "{held:?}");
    for (id, n, full) in &counts {
        assert_eq!(*n, 5, "{id} holds {n} connections");
        assert!(*full, "{id} not marked full");
    }
    assert_eq!(s.lvs.overflow_resets, 5, "{:?}", s.lvs);
    assert_eq!(s.lvs.overflow_refused, 5, "{:?}", s.lvs);
}

fn one_packet(rig: &Rig) {
    let before = rig.status().lvs.one_packet;
    let text = rig.helper(&["udp", ONE_PACKET, "300", "-"]);
    let t: BTreeMap<String, u32> = serde_json::from_str(&text).expect("udp output");
    let s = rig.status();
    println!(
        "MEASURE lvs one-packet 300 datagrams from one port: {t:?}, udp entries {} + {}",
        s.conntrack.embryonic_udp, s.conntrack.established_udp
    );
    for b in ["be1", "be2", "be3"] {
        assert!(t.get(b).copied().unwrap_or(0) >= 80, "{b}: {t:?}");
    }
    assert_eq!(s.conntrack.embryonic_udp + s.conntrack.established_udp, 0);
    assert_eq!(s.lvs.one_packet - before, 300, "{:?}", s.lvs);
}

/// The VIP `slow`'s backend `be3` as the API shows it: (weight, effective weight, ramping).
fn be3_weights(rig: &Rig) -> (u32, u32, bool) {
    let bs = rig.api.call(|c| c.backends("slow")).expect("backends");
    let b = bs.iter().find(|b| b.address == BACKENDS[2]).expect("be3");
    (b.weight, b.effective_weight, b.ramping_until_ms.is_some())
}

fn slow_start(rig: &Rig) {
    let id = format!("{}:8080", BACKENDS[2]);
    let act = |a| {
        rig.api
            .call(|c| c.backend_action("slow", &id, a))
            .unwrap_or_else(|e| panic!("{a:?}: {e}"))
    };
    assert_eq!(
        be3_weights(rig),
        (100, 100, false),
        "nobody ramps at start-up"
    );
    act(BackendAction::Disable);
    act(BackendAction::Enable);
    let enabled = Instant::now();
    let (_, effective, ramping) = be3_weights(rig);
    println!("MEASURE lvs slow start: be3 enabled, effective weight {effective}");
    assert!(
        ramping && effective < 50,
        "not ramping: effective {effective}"
    );
    let text = rig.helper(&["timeline", SLOW, "0", &format!("{},14", src(42))]);
    let hits: Vec<(f64, String)> =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("timeline {text:?}: {e}"));
    let after = be3_weights(rig);
    // Per second since the enable (the helper started a moment after it).
    let offset = enabled.elapsed().as_secs_f64() - 14.0;
    let mut per: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    for (t, b) in &hits {
        let e = per.entry((t + offset.max(0.0)) as u32).or_default();
        e.0 += u32::from(b == "be3");
        e.1 += 1;
    }
    let share = |from: u32, to: u32| {
        let (a, n) = per
            .range(from..to)
            .fold((0, 0), |acc, (_, v)| (acc.0 + v.0, acc.1 + v.1));
        (f64::from(a) / f64::from(n.max(1)), n)
    };
    for (s, (a, n)) in &per {
        println!(
            "MEASURE lvs slow start second {s}: be3 {a} of {n} new connections ({:.0} %)",
            100.0 * f64::from(*a) / f64::from((*n).max(1))
        );
    }
    let (early, n_early) = share(0, 3);
    let (late, n_late) = share(11, 15);
    println!(
        "MEASURE lvs slow start: be3 share {:.1} % in seconds 0-2 ({n_early} conns),          {:.1} % in seconds 11-14 ({n_late} conns), even 33.3 %; after: {after:?}",
        100.0 * early,
        100.0 * late
    );
    assert!(
        n_early >= 30 && n_late >= 30,
        "too few connections: {per:?}"
    );
    assert!(early < late / 2.0, "no ramp: {early} then {late}");
    assert!(
        (0.2..0.47).contains(&late),
        "final share {late} not near 1/3"
    );
    assert_eq!(after, (100, 100, false), "ramp not over after 14 s");
}

#[test]
fn lvs_semantics_through_the_datapath() {
    let mut rig = start();
    slow_start(&rig);
    sh_and_dh(&rig);
    limits(&rig);
    one_packet(&rig);
    persistence(&mut rig);
    assert!(rig.lab.stop_appliance(), "clean exit:\n{}", rig.log());
}
