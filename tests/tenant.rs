//! Tenant VIPs (issue 23) end to end: two tenants, each with the VIP 10.0.0.5:80 (and
//! fd00:5::5:80) and backends 10.1.0.11-12 (fd00:1::11-12) of its own, in VXLAN networks
//! VNI 100 and 200, served by one appliance. Each tenant's client reaches only its own
//! backends: 300 new connections per tenant and family, every one answered by a backend of
//! the client's tenant (0 crossings), both backends of the tenant used, and the per-VIP
//! counters of all four VIPs grown. Needs root, nginx, tcpdump and ethtool.
//!
//! ```text
//!  tenant 100: client ─ gw100 ─┐                            ┌─ b100a (vtep .11) ┐ VNI 100
//!  10.9.0.2  fd00:9::2   (vx4) │    underlay bridge "ul"    ├─ b100b (vtep .12) ┘
//!                              ├── 192.168.50.0/24 ─────────┤
//!  tenant 200: client ─ gw200 ─┘    2001:db8:50::/64        ├─ b200a (vtep .21, ::21) ┐ VNI 200
//!  10.9.0.2  fd00:9::2 (vx4, vx6)        │                  └─ b200b (vtep .22, ::22) ┘
//!                                   appliance .2 / ::2 (sluice run, AF_XDP on eth0)
//! ```
//! Both tenants' clients have the same addresses: only the VNI tells their flows apart. A
//! gateway routes the VIP into its vxlan device (static neighbour, default fdb entry to the
//! appliance); the appliance decapsulates, picks a backend and sends the inner frame in
//! VXLAN to the backend's VTEP. A backend host decapsulates on its vxlan device (eth0's MAC:
//! the inner frame goes to the VTEP's next hop's MAC), holds the VIP on lo and answers its
//! client straight through the tenant network (static fdb entry and neighbour toward its
//! gateway); a capture checks no reply reaches the appliance. Tenant 100 has an IPv4
//! underlay for both families, tenant 200 an IPv6 one (vx6) for its IPv6 VIP. A VIP that
//! never answers is traced: tcpdump on the bridge's ports and the backends' vxlan devices.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use lab::netns::{Netns, bridge, require_program, require_root, stop_capture, veth};
use lab::testing::{Nginx, file_text, poll, tail};
use lab::{Appliance, http_get, wait_answer};

/// New connections per tenant and family.
const REQUESTS: usize = 300;
/// The appliance's underlay addresses.
const LB4: &str = "192.168.50.2";
const LB6: &str = "2001:db8:50::2";
/// The VIP of both tenants.
const VIP4: &str = "10.0.0.5";
const VIP6: &str = "fd00:5::5";
/// The clients of both tenants (the same addresses) and their gateways' side of that LAN.
const CLIENT_NET4: &str = "10.9.0.0/24";
const CLIENT_NET6: &str = "fd00:9::/64";
/// The gateway in a tenant's VXLAN network, and the on-link next hop it sends the VIP to
/// (a static neighbour: nobody answers ARP or ND for it, the appliance takes any MAC).
const GW_TENANT4: &str = "10.1.0.1";
const GW_TENANT6: &str = "fd00:1::1";
const VIP_HOP4: &str = "10.1.0.254";
const VIP_HOP6: &str = "fd00:1::fe";
const VIP_HOP_MAC: &str = "02:00:00:00:00:fe";
/// How long a VIP may take to answer its first request.
const READY: Duration = Duration::from_secs(20);

/// One tenant: its VNI and whether its IPv6 VIP runs over an IPv6 underlay.
#[derive(Debug, Clone, Copy)]
struct Tenant {
    vni: u32,
    v6_underlay: bool,
}

const TENANTS: [Tenant; 2] = [Tenant::new(100, false), Tenant::new(200, true)];

impl Tenant {
    const fn new(vni: u32, v6_underlay: bool) -> Tenant {
        Tenant { vni, v6_underlay }
    }

    /// What its backends answer start with: `tenant-100`.
    fn name(self) -> String {
        format!("tenant-{}", self.vni)
    }

    /// `tenant-100 IPv4`, for reports.
    fn label(self, v6: bool) -> String {
        format!("tenant-{} {}", self.vni, family(v6))
    }

    /// The `[[vip]]` name of its VIP in one family: `t100-web4`.
    fn vip_name(self, v6: bool) -> String {
        format!("t{}-web{}", self.vni, if v6 { 6 } else { 4 })
    }

    /// Last part of backend `j`'s underlay addresses: 11, 12 (tenant 100), 21, 22 (200).
    fn be_host(self, j: usize) -> u32 {
        self.vni / 10 + j as u32 + 1
    }

    /// The gateway's MAC in the tenant network (its vxlan devices').
    fn gw_mac(self) -> String {
        format!("02:00:00:00:{:02x}:01", self.vni / 100)
    }

    /// The device carrying the tenant's traffic of a family (`vx4` or `vx6`).
    fn dev(self, v6: bool) -> &'static str {
        if v6 && self.v6_underlay { "vx6" } else { "vx4" }
    }
}

/// An underlay address (`192.168.50.H` or `2001:db8:50::H`).
fn underlay(host: u32, v6: bool) -> String {
    if v6 {
        format!("2001:db8:50::{host}")
    } else {
        format!("192.168.50.{host}")
    }
}

fn vip(v6: bool) -> SocketAddr {
    let a: IpAddr = if v6 { VIP6 } else { VIP4 }.parse().expect("literal");
    SocketAddr::new(a, 80)
}

fn family(v6: bool) -> &'static str {
    if v6 { "IPv6" } else { "IPv4" }
}

/// The test bed. Drop kills the appliance and removes the directory; the namespaces drop
/// after it (fields), killing nginx and anything else left in them.
struct Bed {
    appliance: Option<Appliance>,
    /// The backends' nginx processes.
    servers: Vec<Nginx>,
    dir: PathBuf,
    switch: Netns,
    lb: Netns,
    gws: Vec<Netns>,
    clients: Vec<Netns>,
    /// Per tenant, its two backend hosts.
    backends: Vec<Vec<Netns>>,
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.appliance = None;
        self.servers.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `cmds` (one command a line) in `ns`, panicking with the failing one's output.
fn script(ns: &Netns, cmds: &str) {
    for line in cmds.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let args: Vec<&str> = line.split_whitespace().collect();
        ns.run(&args);
    }
}

fn no_dad(ns: &Netns) {
    ns.sh(
        "sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 \
         net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0",
    );
}

/// A vxlan device `dev` in `ns` (UDP 4789, no learning) with the MAC `mac`, up, transmit
/// checksum offload off and no reverse-path filter; `remote` makes its default fdb entry.
fn vxlan(ns: &Netns, dev: &str, vni: u32, local: &str, remote: Option<&str>, mac: &str) {
    let remote = remote.map_or(String::new(), |r| format!(" remote {r}"));
    script(
        ns,
        &format!(
            "ip link add {dev} type vxlan id {vni} dstport 4789 local {local} nolearning{remote}
             ip link set {dev} address {mac}
             ip link set {dev} up
             sysctl -qw net.ipv4.conf.{dev}.rp_filter=0"
        ),
    );
    let _ = ns.try_run(&["ethtool", "-K", dev, "tx", "off"]);
}

/// A port of the underlay bridge for `ns` (its `eth0`) with its two underlay addresses.
fn to_underlay(sw: &Netns, port: &str, ns: &Netns, host: u32) {
    veth(ns, "eth0", sw, port);
    sw.run(&["ip", "link", "set", port, "master", "ul"]);
    let (a4, a6) = (underlay(host, false), underlay(host, true));
    script(
        ns,
        &format!("ip addr add {a4}/24 dev eth0\nip addr add {a6}/64 dev eth0"),
    );
}

impl Bed {
    fn build() -> Bed {
        let dir = std::env::temp_dir().join(format!("sluice-tenant-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("test directory");
        let mut bed = Bed {
            appliance: None,
            servers: Vec::new(),
            dir,
            switch: Netns::new("tn-sw"),
            lb: Netns::new("tn-lb"),
            gws: Vec::new(),
            clients: Vec::new(),
            backends: Vec::new(),
        };
        for t in TENANTS {
            let k = t.vni / 100;
            bed.gws.push(Netns::new(&format!("tn-g{k}")));
            bed.clients.push(Netns::new(&format!("tn-c{k}")));
            bed.backends.push(vec![
                Netns::new(&format!("tnb{k}a")),
                Netns::new(&format!("tnb{k}b")),
            ]);
        }
        let all = [&bed.switch, &bed.lb]
            .into_iter()
            .chain(&bed.gws)
            .chain(&bed.clients)
            .chain(bed.backends.iter().flatten());
        all.for_each(no_dad);
        bridge(&bed.switch, "ul");
        bed.wire_appliance();
        for (i, t) in TENANTS.into_iter().enumerate() {
            bed.wire_gateway(i, t);
            for j in 0..2 {
                let server = bed.wire_backend(i, t, j);
                bed.servers.push(server);
            }
        }
        bed
    }

    /// The appliance on the bridge; GRO on the bridge's end, so the veth accepts what the
    /// appliance's XDP program sends back (see `xdp_tx_ready` in lab/src/topology.rs).
    fn wire_appliance(&self) {
        to_underlay(&self.switch, "p-lb", &self.lb, 2);
        self.switch.run(&["ethtool", "-K", "p-lb", "gro", "on"]);
    }

    /// Tenant `i`'s client LAN, its gateway on the underlay and its vxlan devices toward
    /// the appliance, and the routes of the VIP into them.
    fn wire_gateway(&self, i: usize, t: Tenant) {
        let (gw, client) = (&self.gws[i], &self.clients[i]);
        veth(client, "eth0", gw, "lan");
        script(
            client,
            "ip addr add 10.9.0.2/24 dev eth0
             ip -6 addr add fd00:9::2/64 dev eth0
             ip route add default via 10.9.0.1
             ip -6 route add default via fd00:9::1",
        );
        script(
            gw,
            "ip addr add 10.9.0.1/24 dev lan
             ip -6 addr add fd00:9::1/64 dev lan",
        );
        gw.sh("sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1");
        to_underlay(&self.switch, &format!("p-g{}", i + 1), gw, t.vni);
        let mac = t.gw_mac();
        let local4 = underlay(t.vni, false);
        vxlan(gw, "vx4", t.vni, &local4, Some(LB4), &mac);
        if t.v6_underlay {
            let local6 = underlay(t.vni, true);
            vxlan(gw, "vx6", t.vni, &local6, Some(LB6), &mac);
        }
        let (d4, d6) = (t.dev(false), t.dev(true));
        script(
            gw,
            &format!(
                "ip addr add {GW_TENANT4}/24 dev {d4}
                 ip -6 addr add {GW_TENANT6}/64 dev {d6}
                 ip neigh add {VIP_HOP4} lladdr {VIP_HOP_MAC} dev {d4} nud permanent
                 ip -6 neigh add {VIP_HOP6} lladdr {VIP_HOP_MAC} dev {d6} nud permanent
                 ip route add {VIP4}/32 via {VIP_HOP4} dev {d4}
                 ip -6 route add {VIP6}/128 via {VIP_HOP6} dev {d6}"
            ),
        );
    }

    /// Backend `j` of tenant `i`: its underlay address (the VTEP), vxlan devices with eth0's
    /// MAC, its tenant addresses, the VIP on lo and the way back to its tenant's client.
    fn wire_backend(&self, i: usize, t: Tenant, j: usize) -> Nginx {
        let be = &self.backends[i][j];
        let host = t.be_host(j);
        to_underlay(&self.switch, &format!("p-b{}{}", i + 1, j + 1), be, host);
        be.sh(
            "sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 \
             net.ipv4.conf.lo.arp_ignore=1",
        );
        let mac = be.sysfs("eth0", "address");
        vxlan(be, "vx4", t.vni, &underlay(host, false), None, &mac);
        if t.v6_underlay {
            vxlan(be, "vx6", t.vni, &underlay(host, true), None, &mac);
        }
        let (d4, d6) = (t.dev(false), t.dev(true));
        let (gw4, gw6) = (underlay(t.vni, false), underlay(t.vni, true));
        let gw_mac = t.gw_mac();
        let n = 11 + j;
        script(
            be,
            &format!(
                "ip addr add {VIP4}/32 dev lo
                 ip -6 addr add {VIP6}/128 dev lo
                 ip addr add 10.1.0.{n}/24 dev {d4}
                 ip -6 addr add fd00:1::{n}/64 dev {d6}
                 bridge fdb append 00:00:00:00:00:00 dev vx4 dst {gw4}
                 ip neigh add {GW_TENANT4} lladdr {gw_mac} dev {d4} nud permanent
                 ip -6 neigh add {GW_TENANT6} lladdr {gw_mac} dev {d6} nud permanent
                 ip route add {CLIENT_NET4} via {GW_TENANT4} dev {d4}
                 ip -6 route add {CLIENT_NET6} via {GW_TENANT6} dev {d6}"
            ),
        );
        if t.v6_underlay {
            script(
                be,
                &format!("bridge fdb append 00:00:00:00:00:00 dev vx6 dst {gw6}"),
            );
        }
        start_nginx(
            be,
            &self.dir.join(format!("nginx-{}-{}", t.vni, j + 1)),
            &answer(t, j),
        )
    }
}

/// What backend `j` of tenant `t` answers: `tenant-100 backend-1`.
fn answer(t: Tenant, j: usize) -> String {
    format!("{} backend-{}", t.name(), j + 1)
}

/// Starts nginx in `ns` (files in `dir`) answering every request with `body`, and waits
/// until it listens on port 80 in both families.
fn start_nginx(ns: &Netns, dir: &Path, body: &str) -> Nginx {
    let http = format!(
        "  access_log off;\n\
           server {{\n\
             listen 80;\n\
             listen [::]:80 ipv6only=on;\n\
             location / {{ default_type text/plain; return 200 \"{body}\\n\"; }}\n\
           }}\n"
    );
    Nginx::start(ns, dir, 512, &http, 80)
}

/// The appliance's config: one tenant VIP per tenant and family, no health checks.
fn config(socket: &Path) -> String {
    let mut s = format!(
        "[appliance]\nname = \"tn-lb\"\ninterfaces = [\"eth0\"]\nxdp_mode = \"auto\"\n\
         umem_frames = 4096\nring_size = 1024\nconntrack_capacity = 65536\n\n\
         [api]\nsocket = \"{}\"\nmetrics = \"\"\n\n",
        socket.display()
    );
    for v6 in [false, true] {
        for t in TENANTS {
            let address = if v6 { VIP6 } else { VIP4 };
            s.push_str(&format!(
                "[[vip]]\nname = \"{}\"\naddress = \"{address}\"\nport = 80\n\
                 protocol = \"tcp\"\nscheduler = \"maglev\"\ntenant_vni = {}\n\
                 mode = \"tunnel\"\ntunnel = \"vxlan\"\n\n",
                t.vip_name(v6),
                t.vni
            ));
            for j in 0..2 {
                let n = 11 + j;
                let be = [format!("10.1.0.{n}"), format!("fd00:1::{n}")][usize::from(v6)].clone();
                let vtep = underlay(t.be_host(j), v6 && t.v6_underlay);
                s.push_str(&format!(
                    "[[vip.backend]]\naddress = \"{be}\"\nport = 80\nvtep = \"{vtep}\"\n\n"
                ));
            }
        }
    }
    s
}

/// The appliance's local API.
struct Api(lab::testing::Api);

impl Api {
    /// (packets, new flows) of every VIP, by name.
    fn vip_counters(&self) -> BTreeMap<String, (u64, u64)> {
        let vips = self.0.call(|c| c.vips()).expect("GET /v1/vips");
        vips.into_iter()
            .map(|v| (v.name, (v.packets, v.new_flows)))
            .collect()
    }

    /// (address, vtep, packets, new flows) of every backend of the VIP `name`.
    fn backend_counters(&self, name: &str) -> Vec<(String, Option<String>, u64, u64)> {
        let bs = self.0.call(|c| c.backends(name));
        let bs = bs.unwrap_or_else(|e| panic!("GET /v1/vips/{name}/backends: {e}"));
        bs.into_iter()
            .map(|b| (b.address, b.vtep, b.packets, b.new_flows))
            .collect()
    }

    /// The metrics lines about the tenant VIPs, and the drops that are not zero.
    fn tenant_metrics(&self) -> Vec<String> {
        let text = self.0.call(|c| c.metrics());
        let text = text.expect("GET /metrics");
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                let tenant = l.contains("vip=\"t100-") || l.contains("vip=\"t200-");
                let counter = l.contains("_total") || l.contains("active_flows");
                (tenant && counter) || (l.contains("drop") && !l.trim_end().ends_with(" 0"))
            })
            .map(str::to_string)
            .collect()
    }
}

impl Bed {
    fn log_path(&self) -> PathBuf {
        self.dir.join("sluice.log")
    }

    fn log(&self) -> String {
        file_text(&self.log_path())
    }

    /// Writes the config, starts `sluice run` in the appliance's namespace and waits (20 s)
    /// until its API answers; panics with its log when it exits or never answers.
    fn start_appliance(&mut self) -> Api {
        let socket = self.dir.join("api.sock");
        let appliance =
            Appliance::start(&self.lb, lab::sluice!().path(), &self.dir, &config(&socket))
                .unwrap_or_else(|e| panic!("start sluice: {e}"));
        let appliance = self.appliance.insert(appliance);
        let api = Api(lab::testing::Api::unix(&socket).with_timeout(Duration::from_secs(5)));
        let answered = poll(Duration::from_secs(20), Duration::from_millis(200), || {
            appliance.exited().is_some() || (socket.exists() && api.0.call(|c| c.status()).is_ok())
        });
        let exited = appliance.exited();
        let config = appliance.config_path().display().to_string();
        assert!(
            answered.is_some() && exited.is_none(),
            "the appliance {} (config {config}):\n{}",
            exited.map_or("never answered its API".into(), |s| format!("exited: {s}")),
            self.log()
        );
        api
    }
}

/// What one client saw: answers by body, and failed requests.
#[derive(Debug, Default)]
struct Tally {
    answers: BTreeMap<String, usize>,
    errors: usize,
    first_error: Option<String>,
}

impl Tally {
    fn total(&self) -> usize {
        self.answers.values().sum::<usize>() + self.errors
    }
}

/// `n` requests to `vip`, each on a new connection.
fn requests(vip: SocketAddr, n: usize) -> Tally {
    let mut t = Tally::default();
    for _ in 0..n {
        match http_get(vip, "/", Duration::from_secs(2)) {
            Ok((200, body)) => {
                let b = String::from_utf8_lossy(&body).trim().to_string();
                *t.answers.entry(b).or_insert(0) += 1;
            }
            other => {
                t.errors += 1;
                t.first_error
                    .get_or_insert(format!("{:?}", other.map(|r| r.0)));
            }
        }
    }
    t
}

/// Output of a capture started by `Netns::capture`, after stopping it.
fn captured(mut cap: Child) -> String {
    use std::io::Read;
    stop_capture(&mut cap);
    let mut s = String::new();
    if let Some(mut out) = cap.stdout.take() {
        let _ = out.read_to_string(&mut s);
    }
    s
}

/// Where the packets of tenant `i`'s VIP stop: tcpdump on the underlay bridge's ports of
/// the tenant and the appliance, the gateway's client side and the backends' vxlan devices
/// while the client tries three requests; and the appliance's neighbour table.
fn trace_path(bed: &Bed, i: usize, v6: bool) -> String {
    let t = TENANTS[i];
    let limit = Duration::from_secs(15);
    let sw = &bed.switch;
    let (filter, inner) = ("udp port 4789 or arp or icmp6 or icmp", "tcp port 80");
    let mut points = vec![
        (sw, format!("p-g{}", i + 1), filter),
        (sw, "p-lb".into(), filter),
    ];
    points.extend((1..=2).map(|j| (sw, format!("p-b{}{j}", i + 1), filter)));
    points.push((&bed.gws[i], "lan".into(), inner));
    let dev = t.dev(v6);
    points.extend(bed.backends[i].iter().map(|be| (be, dev.into(), inner)));
    let caps: Vec<(String, Child)> = points
        .iter()
        .map(|(ns, dev, f)| {
            let cap = ns.capture(limit, &["-nn", "-l", "-v", "-i", dev, f]);
            (format!("{} {dev} ({f})", ns.name), cap)
        })
        .collect();
    let target = vip(v6);
    let get = move || http_get(target, "/", Duration::from_secs(1)).map(|r| r.0);
    let tried: Vec<String> = (0..3)
        .map(|_| format!("{:?}", bed.clients[i].call(get)))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let neigh = bed.lb.output(&["ip", "neigh", "show", "dev", "eth0"]);
    let neigh = String::from_utf8_lossy(&neigh.stdout);
    let mut report = format!(
        "{} requests: {tried:?}\n--- appliance's neighbours on eth0:\n{neigh}",
        t.label(v6)
    );
    for (point, cap) in caps {
        let text = captured(cap);
        let lines: Vec<&str> = text.lines().collect();
        report.push_str(&format!("--- {point}: {} lines\n", lines.len()));
        for l in lines.iter().take(30) {
            report.push_str(&format!("    {l}\n"));
        }
    }
    report
}

/// One tenant and family: how its requests went, and what is wrong with them.
fn judge(i: usize, v6: bool, tally: &Tally) -> Vec<String> {
    let t = TENANTS[i];
    let what = t.label(v6);
    let mut wrong = Vec::new();
    let own: usize = tally
        .answers
        .iter()
        .filter(|(b, _)| b.starts_with(&format!("{} ", t.name())))
        .map(|(_, n)| n)
        .sum();
    let crossed = tally.total() - own - tally.errors;
    if tally.errors > 0 {
        wrong.push(format!(
            "{what}: {} of {} requests failed (first: {:?})",
            tally.errors,
            tally.total(),
            tally.first_error
        ));
    }
    if crossed > 0 {
        wrong.push(format!(
            "{what}: {crossed} answers from outside the tenant: {:?}",
            tally.answers
        ));
    }
    for j in 0..2 {
        if tally.answers.get(&answer(t, j)).copied().unwrap_or(0) == 0 && own > 0 {
            let (n, answers) = (j + 1, &tally.answers);
            wrong.push(format!("{what}: backend-{n} got no request: {answers:?}"));
        }
    }
    wrong
}

/// Both tenants' clients at once, [`REQUESTS`] each, in one family; tenants whose VIP never
/// answered are traced instead. Returns what went wrong.
fn exercise(bed: &Bed, v6: bool) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut ready = Vec::new();
    for (i, t) in TENANTS.iter().enumerate() {
        let start = Instant::now();
        let target = vip(v6);
        let try_timeout = Duration::from_millis(700);
        if bed.clients[i].call(move || wait_answer(target, try_timeout, READY)) {
            println!("{}: first answer after {:?}", t.label(v6), start.elapsed());
            ready.push(i);
        } else {
            let trace = trace_path(bed, i, v6);
            println!("TRACE {trace}");
            let what = t.label(v6);
            wrong.push(format!(
                "{what}: no answer within {READY:?}; trace:\n{trace}"
            ));
        }
    }
    // Direct return: no frame from a backend's VTEP may reach the appliance.
    let dsr = bed.switch.capture(
        Duration::from_secs(300),
        &["-nn", "-l", "-v", "-i", "p-lb", &from_vteps()],
    );
    let runs: Vec<_> = ready
        .iter()
        .map(|&i| {
            let target = vip(v6);
            let h = bed.clients[i]
                .in_thread(move || requests(target, REQUESTS))
                .expect("client thread");
            (i, h)
        })
        .collect();
    for (i, h) in runs {
        let tally = h.join().expect("client thread");
        let (what, first) = (TENANTS[i].label(v6), &tally.first_error);
        println!(
            "{what}: {:?}, {} failed (first: {first:?})",
            tally.answers, tally.errors
        );
        wrong.extend(judge(i, v6, &tally));
    }
    let back = captured(dsr).matches("VXLAN").count();
    if back > 0 {
        wrong.push(format!(
            "{}: {back} VXLAN frames from the backends' VTEPs reached the appliance (replies \
             must go straight to the tenant's gateway)",
            family(v6)
        ));
    }
    wrong
}

/// A tcpdump filter for VXLAN from any backend host's underlay addresses.
fn from_vteps() -> String {
    let hosts: Vec<String> = TENANTS
        .iter()
        .flat_map(|t| (0..2).map(move |j| t.be_host(j)))
        .flat_map(|h| [underlay(h, false), underlay(h, true)])
        .map(|a| format!("src host {a}"))
        .collect();
    format!("udp dst port 4789 and ({})", hosts.join(" or "))
}

/// Waits (5 s) until every tenant VIP counts [`REQUESTS`] new flows (workers publish their
/// counters when idle), prints the counters and metrics, and returns what is wrong.
fn check_counters(api: &Api) -> Vec<String> {
    let names: Vec<String> = [false, true]
        .into_iter()
        .flat_map(|v6| TENANTS.iter().map(move |t| t.vip_name(v6)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut counters = api.vip_counters();
    while Instant::now() < deadline
        && !names
            .iter()
            .all(|n| counters.get(n).is_some_and(|c| c.1 >= REQUESTS as u64))
    {
        std::thread::sleep(Duration::from_millis(250));
        counters = api.vip_counters();
    }
    println!("VIP counters (packets, new flows): {counters:?}");
    for l in api.tenant_metrics() {
        println!("METRIC {l}");
    }
    let mut wrong = Vec::new();
    for n in &names {
        match counters.get(n) {
            None => wrong.push(format!("the API lists no VIP {n}: {:?}", counters.keys())),
            Some((0, _)) => wrong.push(format!("VIP {n} counted no packets")),
            Some((_, flows)) if *flows < REQUESTS as u64 => wrong.push(format!(
                "VIP {n} counted {flows} new flows, {REQUESTS} expected"
            )),
            Some(_) => {}
        }
        for (addr, vtep, packets, flows) in api.backend_counters(n) {
            let b = format!("VIP {n} backend {addr} (vtep {vtep:?})");
            println!("{b}: {packets} packets, {flows} new flows");
            if flows == 0 {
                wrong.push(format!("{b}: no new flows counted (API)"));
            }
        }
    }
    wrong
}

#[test]
fn two_tenants_share_a_vip_address_and_reach_only_their_own_backends() {
    require_root();
    for p in ["ip", "bridge", "ethtool", "nginx", "tcpdump"] {
        require_program(
            p,
            if p.len() > 2 && p != "bridge" {
                p
            } else {
                "iproute2"
            },
        );
    }
    let mut bed = Bed::build();
    let api = bed.start_appliance();
    let mut wrong = Vec::new();
    for v6 in [false, true] {
        wrong.extend(exercise(&bed, v6));
    }
    wrong.extend(check_counters(&api));
    assert!(
        wrong.is_empty(),
        "{} problems:\n{}\n--- appliance log (tail):\n{}",
        wrong.len(),
        wrong.join("\n"),
        tail(&bed.log(), 60)
    );
    let mut appliance = bed.appliance.take().expect("appliance");
    let (clean, took) = appliance.stop(Duration::from_secs(60));
    assert!(
        clean,
        "the appliance stops cleanly (after {took:?})\n{}",
        tail(&bed.log(), 40)
    );
}
