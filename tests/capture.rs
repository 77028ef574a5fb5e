//! `sluice capture` in a lab (issue 46): while the client opens connections to a NAT and a
//! FullNAT VIP, the capture's pcapng opens with `tcpdump -r` and `tshark -r` and shows the
//! client's SYN as it came in and as the engine sent it on, rewritten (to the backend for
//! NAT; from the SNAT address too for FullNAT), both with correct IP and TCP checksums by
//! tshark's and tcpdump's own checks; the flow cache's forwarded frames show on the
//! "xdp-out" interface; `-w -` feeds `tcpdump -r -` through a pipe; a request for a VIP
//! the appliance does not have is refused. Needs root, tcpdump and tshark.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;

use lab::testing::{file_text, sample, tail};
use lab::{LabMode, LabOptions};

/// How long each capture runs: several of the client's connections fit in it whenever it
/// armed.
const CAPTURE: &str = "4s";

fn run(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} could not start: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The SYNs tshark finds in `file`: (interface, source, destination, destination port,
/// IP checksum status, TCP checksum status), with checksum verification on.
fn tshark_syns(file: &Path) -> BTreeSet<(String, String, String, String, String, String)> {
    let out = run(std::process::Command::new("tshark").args([
        "-n",
        "-r",
        &file.display().to_string(),
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "tcp.check_checksum:TRUE",
        "-Y",
        "tcp.flags.syn == 1 && tcp.flags.ack == 0",
        "-T",
        "fields",
        "-e",
        "frame.interface_name",
        "-e",
        "ip.src",
        "-e",
        "ip.dst",
        "-e",
        "tcp.dstport",
        "-e",
        "ip.checksum.status",
        "-e",
        "tcp.checksum.status",
    ]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<String> = l.split('\t').map(str::to_string).collect();
            assert_eq!(f.len(), 6, "tshark line {l:?}");
            (
                f[0].clone(),
                f[1].clone(),
                f[2].clone(),
                f[3].clone(),
                f[4].clone(),
                f[5].clone(),
            )
        })
        .collect()
}

#[test]
fn a_capture_shows_the_syn_in_and_rewritten_out_with_correct_checksums() {
    lab::netns::require_program("tcpdump", "tcpdump");
    lab::netns::require_program("tshark", "tshark");
    let _one = lab::testing::serial();
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat, LabMode::FullNat],
        flow_cache: Some(true),
        backends: 2,
        prefix: "cp",
        ..LabOptions::default()
    });
    let sock = lab.dir.join("api.sock");
    let config = lab.config(&sock);
    lab.write_config(&config).expect("config");
    let vips = [LabMode::Nat, LabMode::FullNat].map(|m| SocketAddr::new(m.vip(false), 80));
    let log = lab.start_serving(lab::sluice!().path(), &vips);
    let why = || tail(&file_text(&log), 30);
    let sluice = lab::sluice!().path().to_path_buf();
    let client = "198.51.100.2";

    for (mode, vip) in [LabMode::Nat, LabMode::FullNat].into_iter().zip(vips) {
        let name = format!("{}4-tcp", mode.name());
        let file = lab.dir.join(format!("{}.pcapng", mode.name()));
        let capture = std::process::Command::new(&sluice)
            .args(["capture", "--socket"])
            .arg(&sock)
            .args(["--vip", &name, "-c", "2000", "--duration", CAPTURE, "-w"])
            .arg(&file)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sluice capture");
        // New connections, each with a request, through the whole capture.
        let requests = lab.client.spawn(&[
            "sh",
            "-c",
            &format!(
                "for i in $(seq 40); do curl -s -o /dev/null -m 2 http://{vip}/whoami; sleep 0.2; done"
            ),
        ]);
        let out = capture.wait_with_output().expect("sluice capture");
        let mut requests = requests;
        let _ = requests.kill();
        let _ = requests.wait();
        assert!(
            out.status.success(),
            "{mode:?}: sluice capture: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            why()
        );

        // Our own reading: every stage is an interface, and frames came from both sides.
        let bytes = std::fs::read(&file).expect("the capture file");
        let c = wire::pcapng::read(&bytes).expect("pcapng");
        let names: Vec<_> = c.interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["xdp-in", "xdp-out", "engine-in", "engine-out"]);
        let per_stage = |i: u32| c.packets.iter().filter(|p| p.interface == i).count();
        assert!(
            per_stage(0) > 0 && per_stage(2) > 0 && per_stage(3) > 0,
            "{mode:?}: frames per stage {:?}",
            (0..4).map(per_stage).collect::<Vec<_>>()
        );
        // The flow cache forwards the connections' later frames itself.
        assert!(
            per_stage(1) > 0,
            "{mode:?}: nothing on xdp-out with the flow cache on"
        );

        // tshark: the SYN in (to the VIP) and out (rewritten), checksums good (1).
        let syns = tshark_syns(&file);
        let backend_port = mode.backend_port().to_string();
        let vip_ip = vip.ip().to_string();
        let syn_in = syns
            .iter()
            .find(|s| s.0 == "engine-in" && s.1 == client && s.2 == vip_ip && s.3 == "80");
        assert!(syn_in.is_some(), "{mode:?}: no SYN in among {syns:?}");
        let src_out = match mode {
            LabMode::FullNat => lab::SNAT4,
            _ => client,
        };
        let backends: Vec<String> = (0..2).map(|i| lab::backend_addr(i, false)).collect();
        let syn_out = syns.iter().find(|s| {
            s.0 == "engine-out" && s.1 == src_out && backends.contains(&s.2) && s.3 == backend_port
        });
        assert!(
            syn_out.is_some(),
            "{mode:?}: no rewritten SYN from {src_out} to a backend:{backend_port} among {syns:?}"
        );
        for s in &syns {
            assert_eq!(
                (s.4.as_str(), s.5.as_str()),
                ("1", "1"),
                "{mode:?}: a SYN whose checksums tshark finds bad: {s:?}"
            );
        }

        // tcpdump reads the same file, and checks the checksums itself (-vv).
        let out = run(std::process::Command::new("tcpdump").args([
            "-nn",
            "-vv",
            "-r",
            &file.display().to_string(),
        ]));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("{vip_ip}.80: Flags [S]")),
            "{mode:?}: tcpdump shows no SYN to the VIP:\n{}",
            tail(&text, 20)
        );
        assert!(
            !text.contains("incorrect") && !text.contains("bad cksum"),
            "{mode:?}: tcpdump finds a bad checksum:\n{}",
            text.lines()
                .filter(|l| l.contains("incorrect") || l.contains("bad cksum"))
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    // `-w -` into `tcpdump -r -`, while one request goes through.
    let vip = vips[0];
    let piped = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} capture --socket {} --vip nat4-tcp -c 4 --duration 5s -w - | tcpdump -nn -r -",
            sluice.display(),
            sock.display()
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the pipe");
    let requests = lab.client.spawn(&[
        "sh",
        "-c",
        &format!(
            "for i in $(seq 20); do curl -s -o /dev/null -m 2 http://{vip}/whoami; sleep 0.2; done"
        ),
    ]);
    let out = piped.wait_with_output().expect("the pipe");
    let mut requests = requests;
    let _ = requests.kill();
    let _ = requests.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.lines().count() == 4,
        "sluice capture -w - | tcpdump -r -: {}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    // Counted: three captures to their end, their frames.
    let metrics = lab.api_at(0).call(|c| c.metrics()).expect("GET /metrics");
    assert_eq!(
        sample(&metrics, "sluice_captures_total"),
        Some(3.0),
        "{}",
        tail(&metrics, 5)
    );
    assert!(sample(&metrics, "sluice_capture_frames_total").unwrap_or(0.0) > 4.0);

    // A VIP the appliance does not have: refused, saying so.
    let out = std::process::Command::new(&sluice)
        .args(["capture", "--socket"])
        .arg(&sock)
        .args(["--vip", "nope", "--duration", "1s"])
        .output()
        .expect("sluice capture");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no VIP named \"nope\""),
        "{}: {err}",
        out.status
    );
}
