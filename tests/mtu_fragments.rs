//! Packets that do not fit: large UDP datagrams in fragments through the NAT and FullNAT
//! VIPs (IPv4 and IPv6) of the lab, over four queues so FullNAT return fragments that land
//! on another worker's queue follow their first fragment through the handoff. The backends'
//! echo servers answer each datagram whole, so the replies come back fragmented by the
//! backends' kernels. And the VXLAN VIP over an underlay smaller than the client's path:
//! the MSS clamp seen at the backend, 4 MB each way, and ICMP too-big that the client's
//! kernel acts on. Needs root.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use lab::testing::sample;
use lab::{Lab, LabMode, LabOptions};

fn start(prefix: &'static str, queues: u32) -> Lab {
    lab::netns::require_program("python3", "python3");
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat, LabMode::FullNat],
        backends: 2,
        queues,
        prefix,
        ..LabOptions::default()
    });
    let vips = [LabMode::Nat, LabMode::FullNat].map(|m| SocketAddr::new(m.vip(false), 80));
    lab.start_serving(lab::sluice!().path(), &vips);
    lab
}

/// Sends `payload` to `addr` and waits for one reply, retrying twice (UDP: a datagram lost
/// to a busy machine is not the fragment table's fault, a wrong or cut reply is).
fn ask(addr: SocketAddr, payload: &[u8]) -> Result<Vec<u8>, String> {
    let bind: SocketAddr = if addr.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let s = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    s.connect(addr).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65536];
    let mut last = String::new();
    for _ in 0..3 {
        s.send(payload).map_err(|e| e.to_string())?;
        match s.recv(&mut buf) {
            Ok(n) => return Ok(buf[..n].to_vec()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("no reply: {last}"))
}

fn datagram(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The appliance's metrics: the fragment-table lines and the `fragment_*` drops.
fn fragment_metrics(lab: &Lab) -> Vec<String> {
    let metrics = lab.api_at(0).call(|c| c.metrics()).expect("metrics");
    metrics
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("fragment"))
        .map(str::to_string)
        .collect()
}

fn metric(lines: &[String], name: &str) -> u64 {
    sample(&lines.join("\n"), name).unwrap_or_else(|| panic!("no {name} in {lines:?}")) as u64
}

/// 4 KB and 9 KB datagrams through NAT and FullNAT, both families: each arrives whole at a
/// backend (its echo is the whole datagram behind the backend's name) and its reply, in
/// fragments from the backend, whole at the client.
#[test]
fn large_udp_datagrams_cross_nat_and_fullnat_in_fragments_both_ways() {
    let lab = start("mf", 4);
    let before = fragment_metrics(&lab);
    let mut failures = Vec::new();
    let mut sent = 0u64;
    for mode in [LabMode::Nat, LabMode::FullNat] {
        for v6 in [false, true] {
            for (k, len) in [4096usize, 9000].into_iter().enumerate() {
                for round in 0..4u8 {
                    let vip = SocketAddr::new(mode.vip(v6), 80);
                    let payload = datagram(len, round * 2 + k as u8);
                    let want = payload.clone();
                    sent += 1;
                    let got = lab
                        .from_client(move || ask(vip, &payload))
                        .expect("client thread");
                    match got {
                        Ok(reply) if reply.ends_with(&want) && reply.len() > want.len() => {
                            let name = &reply[..reply.len() - want.len()];
                            assert!(
                                name.starts_with(b"be") && name.ends_with(b":"),
                                "{vip}: reply from {:?}",
                                String::from_utf8_lossy(name)
                            );
                        }
                        Ok(reply) => failures.push(format!(
                            "{} {vip} {len} B: reply of {} B is not the datagram echoed",
                            mode.name(),
                            reply.len()
                        )),
                        Err(e) => failures.push(format!("{} {vip} {len} B: {e}", mode.name())),
                    }
                }
            }
        }
    }
    // Workers publish their counters when idle: wait for the last ones.
    let tracked_name = "sluice_fragment_table_total{event=\"tracked\"}";
    let mut after = fragment_metrics(&lab);
    for _ in 0..50 {
        if metric(&after, tracked_name) - metric(&before, tracked_name) >= 2 * sent {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        after = fragment_metrics(&lab);
    }
    println!(
        "fragment metrics after {sent} datagrams:\n{}",
        after.join("\n")
    );
    assert!(failures.is_empty(), "{failures:#?}\nmetrics: {after:#?}");
    let grew = |name: &str| metric(&after, name) - metric(&before, name);
    // Every datagram and every reply is at least three fragments; each first fragment is
    // remembered (a retried datagram counts again) and each datagram completes.
    let tracked = grew(tracked_name);
    let completed = grew("sluice_fragment_table_total{event=\"completed\"}");
    let rewritten = grew("sluice_fragment_table_total{event=\"rewritten\"}");
    assert!(
        tracked >= 2 * sent,
        "tracked {tracked} for {sent} round trips"
    );
    assert!(completed >= 2 * sent, "completed {completed}");
    assert!(rewritten >= 2 * 2 * sent, "rewritten {rewritten}");
    assert_eq!(
        grew("sluice_dropped_packets_total{reason=\"fragment_overlap\"}"),
        0
    );
    assert_eq!(
        grew("sluice_dropped_packets_total{reason=\"fragment_no_first\"}"),
        0
    );
}

/// The lab with its LAN (the appliance, the backends and the router's bridge) at an
/// underlay MTU of 1400 while the client's link stays at 1500: the VXLAN VIP's frames grow by
/// 50 (IPv4 outer) or 70 (IPv6 outer) bytes on the way to the backends.
fn start_small_underlay() -> Lab {
    lab::netns::require_program("python3", "python3");
    lab::netns::require_program("tcpdump", "tcpdump");
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Vxlan],
        backends: 1,
        prefix: "mv",
        ..LabOptions::default()
    });
    let mtu = |ns: &lab::netns::Netns, dev: &str| {
        ns.try_run(&["ip", "link", "set", "dev", dev, "mtu", "1400"])
            .unwrap_or_else(|e| panic!("mtu of {dev}: {e}"));
    };
    mtu(&lab.lb, "eth0");
    mtu(&lab.backends[0], "eth0");
    for dev in ["lb1", "be1", "lan"] {
        mtu(&lab.router, dev);
    }
    let vips = [false, true].map(|v6| SocketAddr::new(LabMode::Vxlan.vip(v6), 80));
    lab.start_serving(lab::sluice!().path(), &vips);
    lab
}

/// The MSS option of the first SYN tcpdump printed (`... options [mss 1310,...]`).
fn mss_in(tcpdump: &str) -> Option<u16> {
    let at = tcpdump.find("mss ")? + 4;
    let digits: String = tcpdump[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The VXLAN VIP with a 1400-byte underlay: the SYN the backend decapsulates carries the
/// clamped MSS (1400 − 50 − 40 = 1310 over IPv4, 1400 − 70 − 60 = 1270 over IPv6), 4 MB go
/// down and up intact, and a DF datagram too big for the tunnel gets ICMP
/// fragmentation-needed / packet-too-big with the MTU that fits (1350 / 1330), which the
/// client's kernel takes into its route cache.
#[test]
fn vxlan_through_a_smaller_underlay_clamps_the_mss_and_answers_too_big() {
    let lab = start_small_underlay();
    for (v6, dev, mss, fits) in [(false, "vx4", 1310, 1350), (true, "vx6", 1270, 1330)] {
        let vip = SocketAddr::new(LabMode::Vxlan.vip(v6), 80);
        // The SYN as the backend's kernel sees it, decapsulated.
        // The client's SYN only (the VIP probes come from the appliance's address). tcpdump
        // reads TCP flags through `tcp[]` over IPv4 only; over IPv6 at the fixed offset.
        let filter = if v6 {
            "src host 2001:db8:c::2 and ip6[6] == 6 and ip6[53] & 2 != 0"
        } else {
            "src host 198.51.100.2 and tcp[tcpflags] & tcp-syn != 0"
        };
        let cap = lab.backends[0].capture(
            Duration::from_secs(15),
            &["-l", "-nn", "-v", "-c", "1", "-i", dev, filter],
        );
        let down = lab
            .from_client(move || {
                lab::http_request(vip, "GET", "/blob4", b"", Duration::from_secs(30))
            })
            .expect("client thread")
            .unwrap_or_else(|e| panic!("{vip}: download: {e}"));
        let out = cap.wait_with_output().expect("tcpdump output");
        let seen = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(mss_in(&seen), Some(mss), "{vip}: the backend saw {seen:?}");
        let blob = lab::blob();
        assert_eq!(down.len(), 4 * blob.len(), "{vip}: download length");
        assert!(
            down.chunks(blob.len()).all(|c| c == blob.as_slice()),
            "{vip}: download corrupted"
        );
        let up: Vec<u8> = (0..4u32 << 20).map(|i| (i * 13 + i / 509) as u8).collect();
        let want = format!("{} {}", up.len(), lab::crc32(&up));
        let got = lab
            .from_client(move || {
                lab::http_request(vip, "POST", "/upload", &up, Duration::from_secs(30))
            })
            .expect("client thread")
            .unwrap_or_else(|e| panic!("{vip}: upload: {e}"));
        assert_eq!(String::from_utf8_lossy(&got), want, "{vip}: upload");
        // A 1400-byte datagram (the kernel sets DF on what fits its path; IPv6 never
        // fragments on the path): too big for the tunnel. The appliance answers from the VIP; the client's kernel caches the MTU.
        let dgram = if v6 { 1400 - 48 } else { 1400 - 28 };
        let cached = lab
            .from_client(move || {
                let s = UdpSocket::bind(if v6 { "[::]:0" } else { "0.0.0.0:0" }).expect("bind");
                s.connect(vip).expect("connect");
                // Until the answer is in the route cache (a busy machine may be slow).
                let mut route = String::new();
                for _ in 0..40 {
                    let _ = s.send(&vec![0u8; dgram]);
                    std::thread::sleep(Duration::from_millis(250));
                    let out = std::process::Command::new("ip")
                        .args(["route", "get", &vip.ip().to_string()])
                        .output()
                        .expect("ip route get");
                    route = String::from_utf8_lossy(&out.stdout).into_owned();
                    if route.contains(" mtu ") {
                        break;
                    }
                }
                route
            })
            .expect("client thread");
        assert!(
            cached.contains(&format!("mtu {fits}")),
            "{vip}: the client's route cache after the too-big frame: {cached}"
        );
    }
    let metrics = lab.api_at(0).call(|c| c.metrics()).expect("metrics");
    let lines: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("sluice_mss_clamped") || l.starts_with("sluice_icmp_too_big"))
        .collect();
    println!("{}", lines.join("\n"));
    for l in &lines {
        let v: u64 = l
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(v > 0, "{l}");
    }
}
