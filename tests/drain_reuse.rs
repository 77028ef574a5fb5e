//! Drain means no new connection reaches the drained backend, ever (issue 41): a client that
//! closes second (the server sent its FIN first, as with `Connection: close`) holds no
//! TIME_WAIT and may reuse its source port at once, and the appliance's entry of the closed
//! connection must not send the new connection to the old backend.
//!
//! One lab per flow-cache setting (on, off), each with a NAT, a FullNAT and a DR VIP: 40
//! client ports (forced with `bind`) each make one request; the backend that served most of
//! them is drained; the same 40 ports connect again at once. Every new connection must reach
//! an active backend, in under half a second and with no SYN retransmission (the client's
//! `TCPSynRetrans` counter), while fresh ports still avoid the drained backend. The same for
//! UDP: a flow from a fixed port whose entry expired after its backend was drained is
//! scheduled anew. `tcp_closing` is two minutes here, so the closed connections' entries are
//! certainly still in the table when their ports come back. Needs root.

use std::collections::BTreeMap;
use std::time::Duration;

use api::BackendAction;
use lab::testing::Api;
use lab::{Lab, LabMode, LabOptions};
use serde::Deserialize;

/// Connects from `SRC:port` for every port, one request each, and prints the backend that
/// answered and how long the connect took per port, and how many SYNs the client's kernel
/// retransmitted meanwhile. `udp` sends one datagram (or two, with `udp2`: a DR flow
/// is established by its second) from each port and prints who answered.
const HELPER: &str = r#"
import json, socket, sys, time
def syn_retrans():
    lines = open("/proc/net/netstat").read().split("\n")
    for i in range(0, len(lines) - 1, 2):
        if lines[i].startswith("TcpExt:"):
            return int(dict(zip(lines[i].split()[1:], lines[i + 1].split()[1:]))["TCPSynRetrans"])
    raise SystemExit("no TcpExt in /proc/net/netstat")
mode, vip, src, ports = sys.argv[1], sys.argv[2], sys.argv[3], [int(p) for p in sys.argv[4].split(",")]
fam = socket.AF_INET6 if ":" in vip else socket.AF_INET
out = {}
before = syn_retrans()
for p in ports:
    try:
        if mode == "tcp":
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.settimeout(5)
            s.bind((src, p))
            t0 = time.monotonic()
            s.connect((vip, 80))
            took = time.monotonic() - t0
            s.sendall(b"GET /whoami HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                d = s.recv(4096)
                if not d:
                    break
                data += d
            s.close()
            out[str(p)] = [data.split(b"\r\n\r\n", 1)[1].decode().strip(), took]
        else:
            s = socket.socket(fam, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.settimeout(2)
            s.bind((src, p))
            name = None
            for i in range(2 if mode == "udp2" else 1):
                t0 = time.monotonic()
                s.sendto(b"q%d" % i, (vip, 80))
                name = s.recvfrom(2048)[0].decode().split(":")[0]
            s.close()
            out[str(p)] = [name, time.monotonic() - t0]
    except Exception as e:
        out[str(p)] = ["error " + repr(e), 0.0]
print(json.dumps({"flows": out, "syn_retrans": syn_retrans() - before}))
"#;

#[derive(Debug, Deserialize)]
struct Round {
    /// Port -> (backend name or "error ...", seconds the connect or the answer took).
    flows: BTreeMap<String, (String, f64)>,
    syn_retrans: i64,
}

impl Round {
    fn per_backend(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for (b, _) in self.flows.values() {
            *m.entry(b.clone()).or_insert(0) += 1;
        }
        m
    }

    /// The ports that went to `backend`.
    fn ports_on(&self, backend: &str) -> Vec<u16> {
        self.flows
            .iter()
            .filter(|(_, (b, _))| b == backend)
            .map(|(p, _)| p.parse().expect("port"))
            .collect()
    }
}

struct Rig {
    lab: Lab,
    helper: std::path::PathBuf,
    api: Api,
}

impl Rig {
    fn start(flow_cache: bool, prefix: &'static str) -> Rig {
        lab::netns::require_program("python3", "python3");
        let mut lab = lab::testing::build(LabOptions {
            modes: vec![LabMode::Nat, LabMode::FullNat, LabMode::Dr],
            flow_cache: Some(flow_cache),
            prefix,
            ..LabOptions::default()
        });
        let base = lab.config(&lab.dir.join("api.sock"));
        // Closed connections stay in the table long after their ports come back (the test
        // must be able to fail), and UDP flows expire quickly.
        let timeouts = "[appliance.timeouts]\ntcp_closing = \"120s\"\nudp = \"3s\"\n\
                        udp_new = \"3s\"\n\n[api]\n";
        let cfg = base.replacen("[api]\n", timeouts, 1);
        assert_ne!(cfg, base, "the lab config has no [api] section:\n{base}");
        lab.write_config(&cfg).expect("config");
        let helper = lab.dir.join("reuse_client.py");
        std::fs::write(&helper, HELPER).expect("helper");
        let modes = [LabMode::Nat, LabMode::FullNat, LabMode::Dr];
        let vips = modes.map(|m| std::net::SocketAddr::new(m.vip(false), 80));
        lab.start_serving(lab::sluice!().path(), &vips);
        let api = lab.api_at(0);
        Rig { lab, helper, api }
    }

    fn round(&self, mode: &str, vip: &str, ports: &[u16]) -> Round {
        let list: Vec<String> = ports.iter().map(u16::to_string).collect();
        let helper = self.helper.display().to_string();
        let out = self.lab.client.output(&[
            "python3",
            &helper,
            mode,
            vip,
            "198.51.100.2",
            &list.join(","),
        ]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "helper {mode} {vip}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("helper output {text:?}: {e}"))
    }

    fn log(&self) -> String {
        self.lab.log_text(0)
    }

    fn drain(&self, vip: &str, backend: &str) {
        let c = self
            .api
            .call(|c| c.backend_action(vip, backend, BackendAction::Drain))
            .unwrap_or_else(|e| panic!("drain {backend} of {vip}: {e}\n{}", self.log()));
        assert!(c.synced, "drain of {backend} not on every worker: {c:?}");
    }
}

/// The backend with the most flows of `r` (a name such as `be2`), and its address.
fn busiest(r: &Round) -> (String, String) {
    let (name, _) = r
        .per_backend()
        .into_iter()
        .filter(|(b, _)| b.starts_with("be"))
        .max_by_key(|(_, n)| *n)
        .unwrap_or_else(|| panic!("no backend answered: {r:?}"));
    let i: usize = name[2..].parse().expect("backend name");
    let addr = format!("10.0.0.{}", 20 + i);
    (name, addr)
}

fn reuse(flow_cache: bool, prefix: &'static str) {
    let rig = Rig::start(flow_cache, prefix);
    for (k, mode) in [LabMode::Nat, LabMode::FullNat, LabMode::Dr]
        .into_iter()
        .enumerate()
    {
        let m = mode.name();
        let vip = mode.vip(false).to_string();
        let name = format!("{m}4-tcp");
        let first_port = 41000 + 100 * k as u16;
        let ports: Vec<u16> = (first_port..first_port + 40).collect();
        let first = rig.round("tcp", &vip, &ports);
        assert!(
            first.flows.values().all(|(b, _)| b.starts_with("be")),
            "{m}: first connections failed: {first:?}\n{}",
            rig.log()
        );
        let (drained, addr) = busiest(&first);
        let reused = first.ports_on(&drained);
        rig.drain(&name, &format!("{addr}:{}", mode.backend_port()));
        let again = rig.round("tcp", &vip, &reused);
        let fresh_ports: Vec<u16> = (first_port + 50..first_port + 90).collect();
        let fresh = rig.round("tcp", &vip, &fresh_ports);
        let slowest = again.flows.values().map(|(_, t)| *t).fold(0.0, f64::max);
        println!(
            "MEASURE drain_reuse flow_cache={flow_cache} {m}: {} ports reused after draining \
             {drained}: {:?} (slowest connect {slowest:.3} s, SYN retransmissions {}); 40 \
             fresh ports: {:?}",
            reused.len(),
            again.per_backend(),
            again.syn_retrans,
            fresh.per_backend()
        );
        for (p, (b, _)) in &again.flows {
            assert!(
                b.starts_with("be") && *b != drained,
                "{m}, flow cache {flow_cache}: port {p} reused after the drain reached {b} \
                 (drained: {drained}): {:?}\n{}",
                again.per_backend(),
                rig.log()
            );
        }
        assert_eq!(
            again.syn_retrans, 0,
            "{m}: a reused port's SYN was retransmitted"
        );
        assert!(slowest < 0.5, "{m}: a reused port took {slowest:.3} s");
        assert!(
            fresh
                .flows
                .values()
                .all(|(b, _)| b.starts_with("be") && *b != drained),
            "{m}: fresh ports: {:?}",
            fresh.per_backend()
        );
    }
    udp_expired(&rig, flow_cache);
}

/// UDP: flows from fixed ports are established, their backend is drained, they go idle
/// past the UDP timeout (3 s), and the same ports' next datagrams go to an active backend.
fn udp_expired(rig: &Rig, flow_cache: bool) {
    for (k, mode) in [LabMode::Nat, LabMode::FullNat, LabMode::Dr]
        .into_iter()
        .enumerate()
    {
        let m = mode.name();
        let vip = mode.vip(false).to_string();
        let first_port = 42000 + 100 * k as u16;
        let ports: Vec<u16> = (first_port..first_port + 30).collect();
        // Two datagrams: a DR flow is established by its second.
        let first = rig.round("udp2", &vip, &ports);
        assert!(
            first.flows.values().all(|(b, _)| b.starts_with("be")),
            "{m} udp: {first:?}\n{}",
            rig.log()
        );
        let (drained, addr) = busiest(&first);
        let reused = first.ports_on(&drained);
        // Still established: the drained backend keeps the flow.
        let kept = rig.round("udp", &vip, &reused);
        rig.drain(
            &format!("{m}4-udp"),
            &format!("{addr}:{}", mode.backend_port()),
        );
        let kept_after = rig.round("udp", &vip, &reused);
        std::thread::sleep(Duration::from_secs(5));
        let again = rig.round("udp", &vip, &reused);
        println!(
            "MEASURE drain_reuse flow_cache={flow_cache} {m} udp: {} flows on {drained}: \
             before the drain {:?}, after it {:?}, after 5 s idle {:?}",
            reused.len(),
            kept.per_backend(),
            kept_after.per_backend(),
            again.per_backend()
        );
        assert!(
            kept_after.flows.values().all(|(b, _)| *b == drained),
            "{m}: an established UDP flow left its draining backend: {:?}",
            kept_after.per_backend()
        );
        assert!(
            again
                .flows
                .values()
                .all(|(b, _)| b.starts_with("be") && *b != drained),
            "{m}, flow cache {flow_cache}: expired UDP flows reached the drained backend: {:?}\n{}",
            again.per_backend(),
            rig.log()
        );
    }
}

#[test]
fn reused_ports_never_reach_a_drained_backend_with_the_flow_cache() {
    reuse(true, "ru");
}

#[test]
fn reused_ports_never_reach_a_drained_backend_without_the_flow_cache() {
    reuse(false, "rv");
}
