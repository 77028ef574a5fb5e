//! Egress by route lookup, end to end: a two-arm appliance (`interfaces = [eth0, eth1]`)
//! with no default route, an on-link client on the uplink, backends on a bridge behind the
//! backend-side arm with the appliance as their gateway, a second client network behind a
//! router on the uplink (a specific route), a far network behind two routers (multipath,
//! route changes), and backends nobody answers ARP for (the control loop must not stall).
//! NAT and FullNAT, IPv4 and IPv6, HTTP and UDP, through `sluice run`. Needs root.
//!
//! ```text
//!  client 10.0.0.1 ──┐                      ┌── be1 10.1.0.11
//!  r1 10.0.0.2 ──────┤ up (bridge)  lb  bs ├── be2 10.1.0.12
//!  r2 10.0.0.3 ──────┘   eth0 10.0.0.10     └── (10.1.0.51-60: nobody)
//!  r1 ── c2 10.2.0.2        eth1 10.1.0.1
//!  r1, r2 ── far 10.9.0.1
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use lab::Appliance;
use lab::netns::{Netns, bridge, veth};
use lab::testing::{Api, Sluice, file_text, poll};
use lab::{http_get, udp_ask, wait_answer};

const BLOB: usize = 4 << 20;

/// The backends' server: HTTP on 8080 (`/whoami`, `/blob` of 4 MiB) and UDP echo on 8080.
const SERVER_PY: &str = r#"
import socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
NAME = sys.argv[1]
# Built at the first /blob, not at start: four million Python steps take seconds on a loaded
# machine, and the server must listen at once.
BLOB = None
BLOB_LOCK = threading.Lock()
def blob():
    global BLOB
    with BLOB_LOCK:
        if BLOB is None:
            BLOB = bytes((i * 7 + i // 251) % 256 for i in range(4 << 20))
    return BLOB
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = NAME.encode() if self.path == "/whoami" else blob() if self.path == "/blob" else None
        if body is None:
            self.send_error(404); return
        self.send_response(200)
        self.send_header("X-Backend", NAME)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
class S(ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True
    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        super().server_bind()
def echo():
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", 8080))
    while True:
        d, a = s.recvfrom(2048)
        s.sendto(NAME.encode() + b":" + d, a)
threading.Thread(target=echo, daemon=True).start()
S(("::", 8080), H).serve_forever()
"#;

/// The lab: namespaces (removed on drop) and the appliance process.
struct Rt {
    dir: PathBuf,
    appliance: Option<Appliance>,
    lb: Netns,
    client: Netns,
    c2: Netns,
    far: Netns,
    routers: [Netns; 2],
    _bridges: [Netns; 2],
    _backends: Vec<Netns>,
    servers: Vec<Child>,
}

fn ns(tag: &str) -> Netns {
    let n = Netns::new(tag);
    n.sh("sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0");
    n
}

fn addrs(n: &Netns, dev: &str, list: &[&str]) {
    for a in list {
        n.run(&["ip", "addr", "add", a, "dev", dev]);
    }
}

/// Joins `n`'s `dev` to the bridge in `br` through a port named `port`; the port runs NAPI
/// (GRO) so that frames the appliance's XDP program sends (flow cache) are accepted.
fn attach(br: &Netns, port: &str, n: &Netns, dev: &str) {
    veth(n, dev, br, port);
    br.run(&["ip", "link", "set", port, "master", "br0"]);
    br.run(&["ethtool", "-K", port, "gro", "on"]);
}

impl Rt {
    fn build() -> Rt {
        lab::netns::require_root();
        lab::netns::require_program("python3", "python3");
        lab::netns::require_program("nft", "nftables");
        lab::netns::require_program("ethtool", "ethtool");
        let dir = std::env::temp_dir().join(format!("sluice-{}", lab::netns::unique("rt")));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (up, bs) = (ns("rtup"), ns("rtbs"));
        bridge(&up, "br0");
        bridge(&bs, "br0");
        let lb = ns("rtlb");
        attach(&up, "plb", &lb, "eth0");
        attach(&bs, "plb", &lb, "eth1");
        addrs(&lb, "eth0", &["10.0.0.10/24", "2001:db8:a::10/64"]);
        addrs(
            &lb,
            "eth1",
            &["10.1.0.1/24", "2001:db8:b::1/64", "10.1.0.100/32"],
        );
        // The FullNAT source, held so the kernel answers ND; deprecated so the appliance's
        // own traffic never takes it as a source.
        lb.run(&[
            "ip",
            "addr",
            "add",
            "2001:db8:b::100/128",
            "dev",
            "eth1",
            "preferred_lft",
            "0",
        ]);
        let client = ns("rtcl");
        attach(&up, "pcl", &client, "eth0");
        addrs(&client, "eth0", &["10.0.0.1/24", "2001:db8:a::1/64"]);
        client.run(&["ip", "route", "add", "192.0.2.0/24", "via", "10.0.0.10"]);
        client.run(&[
            "ip",
            "-6",
            "route",
            "add",
            "2001:db8:f::/64",
            "via",
            "2001:db8:a::10",
        ]);
        let mut backends = Vec::new();
        for i in 1..=2 {
            let be = ns("rtbe");
            attach(&bs, &format!("pb{i}"), &be, "eth0");
            addrs(
                &be,
                "eth0",
                &[&format!("10.1.0.1{i}/24"), &format!("2001:db8:b::1{i}/64")],
            );
            be.run(&["ip", "route", "add", "default", "via", "10.1.0.1"]);
            be.run(&[
                "ip",
                "-6",
                "route",
                "add",
                "default",
                "via",
                "2001:db8:b::1",
            ]);
            backends.push(be);
        }
        let routers = [ns("rtr1"), ns("rtr2")];
        for (i, r) in routers.iter().enumerate() {
            attach(&up, &format!("pr{}", i + 1), r, "eth0");
            let (a4, a6) = (
                format!("10.0.0.{}/24", i + 2),
                format!("2001:db8:a::{}/64", i + 2),
            );
            addrs(r, "eth0", &[&a4, &a6]);
            r.sh(
                "sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 \
                  net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0",
            );
            r.run(&["ip", "route", "add", "192.0.2.0/24", "via", "10.0.0.10"]);
            r.run(&[
                "ip",
                "-6",
                "route",
                "add",
                "2001:db8:f::/64",
                "via",
                "2001:db8:a::10",
            ]);
        }
        // c2: behind r1 only.
        let c2 = ns("rtc2");
        veth(&routers[0], "eth1", &c2, "eth0");
        addrs(&routers[0], "eth1", &["10.2.0.1/24", "2001:db8:2::1/64"]);
        addrs(&c2, "eth0", &["10.2.0.2/24", "2001:db8:2::2/64"]);
        c2.run(&["ip", "route", "add", "default", "via", "10.2.0.1"]);
        c2.run(&[
            "ip",
            "-6",
            "route",
            "add",
            "default",
            "via",
            "2001:db8:2::1",
        ]);
        // far: behind both routers; asks through r1, hears back through whichever router
        // the appliance routes by.
        let far = ns("rtfar");
        far.sh("sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0");
        addrs(&far, "lo", &["10.9.0.1/32", "2001:db8:9::1/128"]);
        for (i, r) in routers.iter().enumerate() {
            let dev = format!("eth{i}");
            let rdev = if i == 0 { "eth2" } else { "eth1" };
            veth(r, rdev, &far, &dev);
            let n = i + 1;
            addrs(
                r,
                rdev,
                &[&format!("10.3.{n}.1/24"), &format!("2001:db8:3{n}::1/64")],
            );
            addrs(
                &far,
                &dev,
                &[&format!("10.3.{n}.2/24"), &format!("2001:db8:3{n}::2/64")],
            );
            r.run(&[
                "ip",
                "route",
                "add",
                "10.9.0.1/32",
                "via",
                &format!("10.3.{n}.2"),
            ]);
            r.run(&[
                "ip",
                "-6",
                "route",
                "add",
                "2001:db8:9::1/128",
                "via",
                &format!("2001:db8:3{n}::2"),
            ]);
            // What each router forwards from the VIPs toward far, counted.
            let rules = "table inet rtc {\n chain counts {\n  type filter hook forward priority 0; policy accept;\n  ip saddr 192.0.2.0/24 ip daddr 10.9.0.1 counter comment \"v4\"\n  ip6 saddr 2001:db8:f::/64 ip6 daddr 2001:db8:9::1 counter comment \"v6\"\n }\n}\n";
            let file = dir.join(format!("nft{n}.conf"));
            std::fs::write(&file, rules).expect("nft rules");
            r.run(&["nft", "-f", &file.to_string_lossy()]);
        }
        far.run(&[
            "ip", "route", "add", "default", "via", "10.3.1.1", "src", "10.9.0.1",
        ]);
        far.run(&[
            "ip",
            "-6",
            "route",
            "add",
            "default",
            "via",
            "2001:db8:31::1",
            "src",
            "2001:db8:9::1",
        ]);
        // The appliance: c2 by a specific route through r1; far through r1 for now; no
        // default route.
        lb.run(&["ip", "route", "add", "10.2.0.0/24", "via", "10.0.0.2"]);
        lb.run(&[
            "ip",
            "-6",
            "route",
            "add",
            "2001:db8:2::/64",
            "via",
            "2001:db8:a::2",
        ]);
        lb.run(&["ip", "route", "add", "10.9.0.1/32", "via", "10.0.0.2"]);
        lb.run(&[
            "ip",
            "-6",
            "route",
            "add",
            "2001:db8:9::1/128",
            "via",
            "2001:db8:a::2",
        ]);
        let script = dir.join("server.py");
        std::fs::write(&script, SERVER_PY).expect("server script");
        let mut servers = Vec::new();
        for (i, be) in backends.iter().enumerate() {
            let log = std::fs::File::create(dir.join(format!("be{}.log", i + 1))).ok();
            let name = format!("be{}", i + 1);
            servers.push(
                be.try_spawn(&["python3", &script.to_string_lossy(), &name], log)
                    .expect("backend server"),
            );
        }
        for (i, be) in backends.iter().enumerate() {
            let me = vip(&format!("10.1.0.1{}", i + 1), 8080);
            let up = be.call(move || {
                let deadline = Instant::now() + Duration::from_secs(20);
                while Instant::now() < deadline {
                    if std::net::TcpStream::connect_timeout(&me, Duration::from_millis(200)).is_ok()
                    {
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                false
            });
            assert!(up, "backend {me} never listened");
        }
        Rt {
            dir,
            appliance: None,
            lb,
            client,
            c2,
            far,
            routers,
            _bridges: [up, bs],
            _backends: backends,
            servers,
        }
    }

    fn config(&self, flow_cache: bool, extra: &str) -> String {
        let mut s = format!(
            "[appliance]\nname = \"rt\"\ninterfaces = [\"eth0\", \"eth1\"]\nxdp_mode = \"auto\"\n\
             umem_frames = 4096\nring_size = 1024\nconntrack_capacity = 65536\n\
             flow_cache = {flow_cache}\n\n[api]\nsocket = \"{}\"\nmetrics = \"\"\n\n{extra}",
            self.socket().display()
        );
        for (name, mode, v4, v6, snat) in [
            ("nat", "nat", "192.0.2.10", "2001:db8:f::10", None),
            (
                "fnat",
                "fullnat",
                "192.0.2.20",
                "2001:db8:f::20",
                Some(("10.1.0.100", "2001:db8:b::100")),
            ),
        ] {
            for (fam, addr, be) in [("4", v4, "10.1.0.1"), ("6", v6, "2001:db8:b::1")] {
                for (proto, port) in [("tcp", 80), ("udp", 53)] {
                    s.push_str(&format!(
                        "[[vip]]\nname = \"{name}{fam}-{proto}\"\naddress = \"{addr}\"\nport = {port}\n\
                         protocol = \"{proto}\"\nmode = \"{mode}\"\n"
                    ));
                    if let Some((s4, s6)) = snat {
                        let a = if fam == "4" { s4 } else { s6 };
                        s.push_str(&format!("snat = [\"{a}\"]\n"));
                    }
                    for i in 1..=2 {
                        s.push_str(&format!(
                            "[[vip.backend]]\naddress = \"{be}{i}\"\nport = 8080\n"
                        ));
                    }
                    s.push('\n');
                }
            }
        }
        s
    }

    /// The endpoints' (clients' and backends') counters of segments and datagrams their
    /// kernel dropped for a bad checksum, where not zero: (host counter, value).
    fn checksum_errors(&self) -> Vec<(String, u64)> {
        let hosts = [
            ("client", &self.client),
            ("c2", &self.c2),
            ("far", &self.far),
        ];
        let backends = self._backends.iter().enumerate();
        let mut out = Vec::new();
        let named: Vec<(String, &Netns)> = hosts
            .iter()
            .map(|(n, ns)| (n.to_string(), *ns))
            .chain(backends.map(|(i, ns)| (format!("be{}", i + 1), ns)))
            .collect();
        for (host, ns) in named {
            let text = String::from_utf8_lossy(&ns.sh("cat /proc/net/snmp6").stdout).into_owned();
            for line in text.lines() {
                let mut w = line.split_whitespace();
                if let (Some(name), Some(v)) = (w.next(), w.next())
                    && name.ends_with("InCsumErrors")
                    && v != "0"
                {
                    out.push((format!("{host} {name}"), v.parse().unwrap_or(0)));
                }
            }
            let snmp = String::from_utf8_lossy(&ns.sh("cat /proc/net/snmp").stdout).into_owned();
            let lines: Vec<&str> = snmp.lines().collect();
            for pair in lines.chunks(2) {
                let [head, values] = pair else { continue };
                let proto = head.split(':').next().unwrap_or("");
                let names = head.split_whitespace().skip(1);
                let vals = values.split_whitespace().skip(1);
                for (n, v) in names.zip(vals) {
                    if n == "InCsumErrors" && v != "0" {
                        out.push((format!("{host} {proto}{n}"), v.parse().unwrap_or(0)));
                    }
                }
            }
        }
        out
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("api.sock")
    }

    fn log(&self) -> String {
        file_text(&self.dir.join("sluice.log"))
    }

    /// Starts `sluice` (the binary under test unless `bin` says otherwise) with `config` and
    /// waits (20 s) for its API socket.
    fn start(&mut self, bin: &Sluice, config: &str) {
        let appliance =
            Appliance::start(&self.lb, bin.path(), &self.dir, config).expect("sluice run");
        self.appliance = Some(appliance);
        let socket = self.socket();
        let up = poll(Duration::from_secs(20), Duration::from_millis(100), || {
            socket.exists()
        });
        assert!(up.is_some(), "no API socket:\n{}", self.log());
    }

    fn status(&self) -> api::model::Status {
        Api::unix(&self.socket())
            .call(|c| c.status())
            .expect("status")
    }

    /// SIGTERM; whether it exited 0 within `within`, and how long it took.
    fn stop(&mut self, within: Duration) -> (bool, Duration) {
        match self.appliance.take() {
            Some(mut a) => a.stop(within),
            None => (false, Duration::ZERO),
        }
    }

    /// Packets router `k` forwarded from the VIPs to far, (IPv4, IPv6).
    fn router_count(&self, k: usize) -> (u64, u64) {
        let out = self.routers[k].run(&["nft", "list", "chain", "inet", "rtc", "counts"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let count = |tag: &str| {
            text.lines()
                .find(|l| l.contains(&format!("comment \"{tag}\"")))
                .and_then(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    w.windows(2)
                        .find(|p| p[0] == "packets")
                        .and_then(|p| p[1].parse().ok())
                })
                .unwrap_or_else(|| panic!("no {tag} counter in:\n{text}"))
        };
        (count("v4"), count("v6"))
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        self.appliance = None;
        for c in &mut self.servers {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The binary under test; `RT_SLUICE` points elsewhere (to show a test fails on an older
/// build).
fn sluice() -> Sluice {
    std::env::var_os("RT_SLUICE").map_or_else(|| lab::sluice!(), Sluice::at)
}

fn vip(addr: &str, port: u16) -> SocketAddr {
    SocketAddr::new(addr.parse::<IpAddr>().expect("literal"), port)
}

/// What one source saw through one VIP.
#[derive(Debug, Default)]
struct Seen {
    ok: usize,
    failed: Vec<String>,
    backends: std::collections::BTreeSet<String>,
}

/// `n` HTTP requests and `n` UDP requests to the VIP pair at `tcp` / `udp`.
fn exercise(tcp: SocketAddr, udp: SocketAddr, n: usize) -> Seen {
    let mut s = Seen::default();
    for i in 0..n {
        match http_get(tcp, "/whoami", Duration::from_secs(3)) {
            Ok((200, body)) => {
                s.ok += 1;
                s.backends
                    .insert(String::from_utf8_lossy(&body).into_owned());
            }
            Ok((st, _)) => s.failed.push(format!("http {tcp}: status {st}")),
            Err(e) => s.failed.push(format!("http {tcp}: {e}")),
        }
        let payload = format!("q{i}");
        match udp_ask(udp, payload.as_bytes(), Duration::from_secs(2)) {
            Ok(r) if r.ends_with(payload.as_bytes()) => s.ok += 1,
            Ok(r) => s
                .failed
                .push(format!("udp {udp}: {}", String::from_utf8_lossy(&r))),
            Err(e) => s.failed.push(format!("udp {udp}, query {i} of {n}: {e}")),
        }
    }
    s
}

/// Every VIP from `from`, `n` times each: (vip name, what was seen).
fn every_vip(from: &Netns, n: usize) -> Vec<(String, Seen)> {
    from.call(move || {
        let mut out = Vec::new();
        for (name, a4, a6) in [
            ("nat", "192.0.2.10", "2001:db8:f::10"),
            ("fullnat", "192.0.2.20", "2001:db8:f::20"),
        ] {
            for a in [a4, a6] {
                out.push((format!("{name} {a}"), exercise(vip(a, 80), vip(a, 53), n)));
            }
        }
        out
    })
}

/// Waits (20 s) until an HTTP request through the NAT VIP from `from` is answered.
fn wait_ready(rt: &Rt, from: &Netns) {
    let nat = vip("192.0.2.10", 80);
    let ok =
        from.call(move || wait_answer(nat, Duration::from_millis(500), Duration::from_secs(20)));
    assert!(ok, "the NAT VIP never answered:\n{}", rt.log());
}

fn no_neighbor(st: &api::model::Status) -> u64 {
    st.drops
        .iter()
        .find(|c| c.name == "no_neighbor")
        .map_or(0, |c| c.value)
}

/// The engine's drops, and what else could have lost a frame: the workers' ring counters,
/// the interfaces (the kernel's AF_XDP counters among them), the flow cache and flood mode.
fn drops(st: &api::model::Status) -> String {
    format!(
        "{:?}; workers {:?}; interfaces {:?}; flow cache {:?}; flood {:?}",
        st.drops, st.workers, st.interfaces, st.flow_cache, st.flood
    )
}

fn two_arm(flow_cache: bool) {
    let _serial = lab::testing::serial();
    let mut rt = Rt::build();
    let cfg = rt.config(flow_cache, "");
    rt.start(&sluice(), &cfg);
    wait_ready(&rt, &rt.client);
    for (who, from) in [("on-link client", &rt.client), ("c2 via r1", &rt.c2)] {
        for (name, seen) in every_vip(from, 20) {
            assert!(
                seen.failed.is_empty(),
                "{who} -> {name}: {} failed, first {:?}; drops {}\n{}",
                seen.failed.len(),
                seen.failed.first(),
                drops(&rt.status()),
                rt.log()
            );
            assert_eq!(seen.ok, 40, "{who} -> {name}");
            assert_eq!(
                seen.backends.len(),
                2,
                "{who} -> {name}: {:?}",
                seen.backends
            );
        }
    }
    // A client the appliance has never heard from: its first connection must not lose its
    // SYN-ACK for want of the client's MAC (a retransmitted SYN costs 1 s).
    let before = no_neighbor(&rt.status());
    let fresh = ns("rtnew");
    attach(&rt._bridges[0], "pnew", &fresh, "eth0");
    addrs(&fresh, "eth0", &["10.0.0.5/24", "2001:db8:a::5/64"]);
    fresh.run(&["ip", "route", "add", "192.0.2.0/24", "via", "10.0.0.10"]);
    fresh.run(&[
        "ip",
        "-6",
        "route",
        "add",
        "2001:db8:f::/64",
        "via",
        "2001:db8:a::10",
    ]);
    let firsts = fresh.call(|| {
        [
            "192.0.2.10",
            "2001:db8:f::10",
            "192.0.2.20",
            "2001:db8:f::20",
        ]
        .map(|a| {
            let t0 = Instant::now();
            let r = http_get(vip(a, 80), "/whoami", Duration::from_secs(5));
            (a, r.is_ok(), t0.elapsed())
        })
    });
    let after = no_neighbor(&rt.status());
    println!(
        "MEASURE routes first connection of a new client (flow_cache={flow_cache}): {firsts:?}; \
         no_neighbor drops meanwhile: {}",
        after - before
    );
    for (a, ok, took) in firsts {
        assert!(ok, "new client -> {a}: failed");
        assert!(
            took < Duration::from_millis(900),
            "new client -> {a}: first request took {took:?} (SYN-ACK lost?)\n{}",
            rt.log()
        );
    }
    let st = rt.status();
    println!(
        "MEASURE routes two-arm flow_cache={flow_cache}: drops {}",
        drops(&st)
    );
    if flow_cache {
        let c = st.flow_cache.as_ref().expect("flow cache status");
        assert!(c.hits > 0, "the kernel forwarded nothing: {c:?}");
    }
    let (clean, took) = rt.stop(Duration::from_secs(5));
    assert!(
        clean,
        "sluice did not exit 0 on SIGTERM ({took:?}):\n{}",
        rt.log()
    );
}

/// The textbook LVS-NAT topology: no default route on the appliance, the client on-link on
/// the uplink, a second client network by a specific route through r1; with the flow cache.
#[test]
fn rt_two_arm_nat_and_fullnat_on_link_and_routed_clients() {
    two_arm(true);
}

/// The same with every frame through the engine.
#[test]
fn rt_two_arm_nat_and_fullnat_on_link_and_routed_clients_without_the_flow_cache() {
    two_arm(false);
}

/// Bytes of the backends' `/blob` (must match `SERVER_PY`).
fn blob() -> Vec<u8> {
    (0..BLOB).map(|i| ((i * 7 + i / 251) % 256) as u8).collect()
}

fn digest(b: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

/// A multipath default route over r1 and r2: replies to far's flows leave by both routers
/// (counted on the routers), each flow by one.
#[test]
fn rt_multipath_default_spreads_flows_over_both_routers() {
    let _serial = lab::testing::serial();
    let mut rt = Rt::build();
    for (fam, far, a, b) in [
        ("-4", "10.9.0.1/32", "10.0.0.2", "10.0.0.3"),
        ("-6", "2001:db8:9::1/128", "2001:db8:a::2", "2001:db8:a::3"),
    ] {
        rt.lb.run(&["ip", fam, "route", "del", far]);
        rt.lb.run(&[
            "ip", fam, "route", "add", "default", "nexthop", "via", a, "nexthop", "via", b,
        ]);
    }
    let cfg = rt.config(true, "");
    rt.start(&sluice(), &cfg);
    wait_ready(&rt, &rt.client);
    let before = [rt.router_count(0), rt.router_count(1)];
    for (name, seen) in every_vip(&rt.far, 30) {
        assert!(
            seen.failed.is_empty(),
            "far -> {name}: {} failed, first {:?}; checksum errors at the endpoints {:?}; \
             drops {}\n{}",
            seen.failed.len(),
            seen.failed.first(),
            rt.checksum_errors(),
            drops(&rt.status()),
            rt.log()
        );
    }
    // A frame the appliance rewrote with a wrong checksum is lost at the endpoint, which
    // counts it; nothing else does (an IPv6 UDP checksum that summed to zero once went out
    // as 0, which receivers discard: one datagram in 65,536).
    assert_eq!(rt.checksum_errors(), Vec::<(String, u64)>::new());
    let after = [rt.router_count(0), rt.router_count(1)];
    let d = |k: usize| (after[k].0 - before[k].0, after[k].1 - before[k].1);
    let (r1, r2) = (d(0), d(1));
    println!("MEASURE routes multipath: packets toward far by r1 {r1:?}, by r2 {r2:?} (v4, v6)");
    for (fam, a, b) in [("v4", r1.0, r2.0), ("v6", r1.1, r2.1)] {
        let total = a + b;
        assert!(total > 0, "{fam}: nothing counted");
        assert!(
            a * 10 >= total && b * 10 >= total,
            "{fam}: r1 {a}, r2 {b}: not spread over both next hops"
        );
    }
    let (clean, took) = rt.stop(Duration::from_secs(5));
    assert!(clean, "exit on SIGTERM ({took:?}):\n{}", rt.log());
}

/// The route toward far moves from r1 to r2 in the middle of a 4 MiB download through the
/// NAT VIP: the download arrives intact and the frames after the change leave by r2.
#[test]
fn rt_route_change_mid_download_keeps_the_bytes_and_moves_the_path() {
    let _serial = lab::testing::serial();
    let mut rt = Rt::build();
    let cfg = rt.config(true, "");
    rt.start(&sluice(), &cfg);
    wait_ready(&rt, &rt.client);
    // A small receive window so that the download lasts seconds.
    rt.far.sh("sysctl -qw net.ipv4.tcp_rmem='4096 8192 16384'");
    let (tx, rx) = std::sync::mpsc::channel();
    let download = rt
        .far
        .in_thread(move || lab::slow_download(vip("192.0.2.10", 80), Duration::from_millis(4), tx))
        .expect("thread");
    rx.recv_timeout(Duration::from_secs(5))
        .expect("download headers");
    std::thread::sleep(Duration::from_millis(800));
    let c0 = [rt.router_count(0).0, rt.router_count(1).0];
    rt.lb
        .run(&["ip", "route", "replace", "10.9.0.1/32", "via", "10.0.0.3"]);
    std::thread::sleep(Duration::from_millis(500));
    let c1 = [rt.router_count(0).0, rt.router_count(1).0];
    assert!(
        !download.is_finished(),
        "the download ended before the route change: it must span it"
    );
    let body = download
        .join()
        .expect("download thread")
        .unwrap_or_else(|e| panic!("download broke: {e}\n{}", rt.log()));
    let c2 = [rt.router_count(0).0, rt.router_count(1).0];
    let want = blob();
    println!(
        "MEASURE routes route change mid-download: {} bytes, digest {:016x} (want {:016x}); \
         r1/r2 packets before {c0:?}, 0.5 s after the change {c1:?}, at the end {c2:?}",
        body.len(),
        digest(&body),
        digest(&want)
    );
    assert_eq!(body.len(), want.len(), "download length");
    assert_eq!(digest(&body), digest(&want), "download bytes differ");
    assert!(
        c0[0] > 0,
        "before the change the download went by r1: {c0:?}"
    );
    assert!(
        c2[1] > c1[1],
        "after the change the download goes by r2: {c1:?} -> {c2:?}"
    );
    assert_eq!(
        c2[0], c1[0],
        "nothing by r1 once the change applied: {c1:?} -> {c2:?}"
    );
    let (clean, took) = rt.stop(Duration::from_secs(5));
    assert!(clean, "exit on SIGTERM ({took:?}):\n{}", rt.log());
}

/// `sluice ctl status` over the socket; how long it took and whether it answered.
fn ctl_status(bin: &Sluice, socket: &Path) -> (bool, Duration) {
    let t0 = Instant::now();
    let ok = bin.ctl(socket, &["status"]).ok();
    (ok, t0.elapsed())
}

/// Ten backends whose next hops nobody answers for (10.1.0.51-60, on the backend subnet):
/// resolution never holds the control loop, so `sluice ctl status` answers within 1 s
/// throughout, a SIGHUP applies within 2 s and SIGTERM ends within 3 s with the graceful
/// BGP shutdown that BIRD, the peer on r1, sees.
#[test]
fn rt_unreachable_backends_never_stall_the_control_loop() {
    let _serial = lab::testing::serial();
    lab::netns::require_program("bird", "bird2");
    let mut rt = Rt::build();
    let lb_addr: IpAddr = "10.0.0.10".parse().expect("literal");
    let bird = lab::bird::Bird::start(
        &rt.routers[0],
        &rt.dir,
        &lab::bird::config("10.0.0.2", &rt.dir.join("bird.log"), &[lb_addr], None),
    )
    .expect("bird");
    let bgp = format!(
        "[bgp]\nasn = {}\nrouter_id = \"10.0.0.10\"\ngraceful_shutdown_wait = \"1s\"\n\n\
         [[bgp.peer]]\naddress = \"10.0.0.2\"\nasn = {}\nhold_time = \"3s\"\n\
         connect_retry = \"1s\"\nsource = \"10.0.0.10\"\nnext_hop = \"2001:db8:a::10\"\n\n",
        lab::bird::APPLIANCE_ASN,
        lab::bird::ROUTER_ASN
    );
    let mut dead = String::from(
        "[[vip]]\nname = \"dead\"\naddress = \"192.0.2.30\"\nport = 80\nmode = \"nat\"\n",
    );
    for i in 51..=60 {
        dead.push_str(&format!(
            "[[vip.backend]]\naddress = \"10.1.0.{i}\"\nport = 8080\n"
        ));
    }
    let cfg = rt.config(true, &bgp) + &dead;
    let bin = sluice();
    rt.start(&bin, &cfg);
    wait_ready(&rt, &rt.client);
    // BIRD has the NAT VIP from us.
    let route = |rt: &Rt| {
        bird.cmd(&rt.routers[0], &["show", "route", "all", "192.0.2.10/32"])
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !route(&rt).contains("192.0.2.10/32") {
        assert!(
            Instant::now() < deadline,
            "BIRD never learned the VIP:\n{}",
            rt.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Status answers within 1 s, every 200 ms for 6 s.
    let socket = rt.socket();
    let mut worst = Duration::ZERO;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(6) {
        let (ok, took) = ctl_status(&bin, &socket);
        assert!(ok, "sluice ctl status failed:\n{}", rt.log());
        worst = worst.max(took);
        std::thread::sleep(Duration::from_millis(200));
    }
    // SIGHUP: a changed config (one dead backend fewer) runs within 2 s.
    let before = rt.status().config_version;
    let path = rt.dir.join("sluice.toml");
    let fewer = cfg.replace(
        "[[vip.backend]]\naddress = \"10.1.0.60\"\nport = 8080\n",
        "",
    );
    std::fs::write(&path, &fewer).expect("config");
    let hup = Instant::now();
    rt.appliance.as_ref().expect("running").signal("-HUP");
    let applied = loop {
        let (ok, took) = ctl_status(&bin, &socket);
        worst = worst.max(took);
        assert!(ok, "status after SIGHUP");
        if rt.status().config_version > before {
            break hup.elapsed();
        }
        assert!(
            hup.elapsed() < Duration::from_secs(2),
            "SIGHUP not applied within 2 s:\n{}",
            rt.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // SIGTERM: BIRD sees the path tagged GRACEFUL_SHUTDOWN, then the session go down.
    let (tx, rx) = std::sync::mpsc::channel();
    let watch_router = rt.routers[0].name.clone();
    let sock = bird.socket.clone();
    let watcher = std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut gshut = false;
        while t0.elapsed() < Duration::from_secs(6) {
            let out = std::process::Command::new("ip")
                .args(["netns", "exec", &watch_router, "birdc", "-s"])
                .arg(&sock)
                .args(["show", "route", "all", "192.0.2.10/32"])
                .output();
            if let Ok(o) = out
                && String::from_utf8_lossy(&o.stdout).contains("(65535,0)")
            {
                gshut = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = tx.send(gshut);
    });
    std::thread::sleep(Duration::from_millis(100));
    let (clean, exit) = rt.stop(Duration::from_secs(3));
    let gshut = rx.recv_timeout(Duration::from_secs(8)).unwrap_or(false);
    let _ = watcher.join();
    let protocols = bird
        .cmd(&rt.routers[0], &["show", "protocols", "all", "lb1"])
        .unwrap_or_default();
    println!(
        "MEASURE routes 10 unreachable backends: slowest ctl status {worst:?}, SIGHUP applied \
         in {applied:?}, SIGTERM exit in {exit:?} (clean {clean}), BIRD saw GRACEFUL_SHUTDOWN \
         {gshut}"
    );
    assert!(
        worst < Duration::from_secs(1),
        "ctl status took {worst:?}:\n{}",
        rt.log()
    );
    assert!(
        clean,
        "SIGTERM: no clean exit within 3 s ({exit:?}):\n{}",
        rt.log()
    );
    assert!(
        gshut,
        "BIRD never saw the VIP with GRACEFUL_SHUTDOWN:\n{protocols}\n{}",
        rt.log()
    );
    assert!(
        !protocols.contains("Established"),
        "the session is still up after the exit:\n{protocols}"
    );
}

/// The UDP payload, of `prefix` and two bytes, whose datagram from `src:sport` to
/// `dst:dport`, once the backend named `name` echoes it as `name:payload`, carries a UDP
/// checksum that sums to zero: one datagram in 65,536 does.
fn zero_sum_payload(
    src: std::net::Ipv6Addr,
    dst: std::net::Ipv6Addr,
    (sport, dport): (u16, u16),
    name: &str,
) -> Vec<u8> {
    use wire::checksum::{finish, pseudo_header_v6, sum};
    (0..=u16::MAX)
        .map(|w| {
            let mut p = b"z".to_vec();
            p.extend_from_slice(&w.to_be_bytes());
            p
        })
        .find(|p| {
            let mut dgram = Vec::new();
            let body = [name.as_bytes(), b":", p].concat();
            let len = 8 + body.len() as u16;
            for x in [sport, dport, len, 0] {
                dgram.extend_from_slice(&x.to_be_bytes());
            }
            dgram.extend_from_slice(&body);
            let ph = pseudo_header_v6(src, dst, 17, u32::from(len));
            finish(sum(&dgram, ph)) == 0
        })
        .expect("one payload in 65,536 sums to zero")
}

/// An IPv6 UDP answer that the NAT and FullNAT rewrites leave with a checksum summing to
/// zero arrives (sent as 0xffff: a zero UDP checksum over IPv6 means none, and receivers
/// discard it, RFC 8200 8.1). Before, such a datagram went out with 0 and far's kernel
/// dropped it, counted only there (Udp6InCsumErrors): the multipath test's rare lost query.
#[test]
fn rt_ipv6_udp_answers_whose_checksum_sums_to_zero_arrive() {
    let _serial = lab::testing::serial();
    let mut rt = Rt::build();
    let cfg = rt.config(true, "");
    rt.start(&sluice(), &cfg);
    wait_ready(&rt, &rt.client);
    let far: std::net::Ipv6Addr = "2001:db8:9::1".parse().expect("literal");
    let mut asked = Vec::new();
    for (vip, sport) in [("2001:db8:f::10", 33301u16), ("2001:db8:f::20", 33302)] {
        let v: std::net::Ipv6Addr = vip.parse().expect("literal");
        // Whichever backend the flow lands on, one of the two queries is the edge.
        for (i, name) in ["be1", "be2"].into_iter().enumerate() {
            let payload = zero_sum_payload(v, far, (53, sport + 10 * i as u16), name);
            asked.push((vip.to_string(), sport + 10 * i as u16, payload));
        }
    }
    let answers = rt
        .far
        .in_thread(move || {
            asked
                .into_iter()
                .map(|(vip, sport, payload)| {
                    let s = std::net::UdpSocket::bind(("::", sport)).expect("bind");
                    s.set_read_timeout(Some(Duration::from_secs(2)))
                        .expect("timeout");
                    s.connect((vip.as_str(), 53)).expect("connect");
                    s.send(&payload).expect("send");
                    let mut buf = [0u8; 256];
                    let got = s.recv(&mut buf).map(|n| buf[..n].to_vec());
                    (vip, sport, got.map_err(|e| e.to_string()))
                })
                .collect::<Vec<_>>()
        })
        .expect("thread")
        .join()
        .expect("far");
    let lost: Vec<_> = answers.iter().filter(|a| a.2.is_err()).collect();
    println!(
        "MEASURE routes zero-sum IPv6 UDP answers: {} of {} arrived; endpoint checksum errors {:?}",
        answers.len() - lost.len(),
        answers.len(),
        rt.checksum_errors()
    );
    assert!(
        lost.is_empty(),
        "answers lost: {lost:?}; endpoint checksum errors {:?}; drops {}",
        rt.checksum_errors(),
        drops(&rt.status())
    );
    assert_eq!(rt.checksum_errors(), Vec::<(String, u64)>::new());
}
