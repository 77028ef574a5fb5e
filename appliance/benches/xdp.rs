//! The steering program's own time per frame (BPF_PROG_TEST_RUN with `repeat`: the kernel's
//! mean over the runs), this build's against an older build's object and with `sluice
//! capture` running (issue 46): what the capture's check costs every frame when no capture
//! runs, and what a running capture costs the frames it does not take and those it does.
//! The packet-rate bench (`sluice bench --flows`) measures whole runs, but its generator
//! needs the kernel's live-frame test runs, which some kernels refuse; this needs only
//! BPF_PROG_TEST_RUN. Root (BPF).
//!
//! `cargo bench -p appliance --bench xdp`, with `SLUICE_BASELINE_STEER_OBJ=PATH` for an
//! older build's steer.bpf.o (target/release/build/appliance-*/out/steer.bpf.o of that
//! build). Frames: a TCP SYN to the golden NAT VIP nat4 (steered to the engine; a test run
//! has no socket, so it ends as `no_socket`) and a frame to an address nobody serves (passed
//! to the kernel after every steering lookup missed). Fifteen rounds, each measuring every
//! variant once in turn (the kernel's mean of one measurement moves with the host's noise,
//! so the variants share it round by round); each variant's rounds, median and spread.
//! Without `--bench` (`cargo test --all-targets`) it is a smoke run of one short round.

use std::time::Duration;

use sluice::control::prepare::steering;
use sluice::datapath::capture::{Endpoint, XdpMaps};
use sluice::datapath::steer::Steer;
use testkit::golden::{self, Pkt, tcp};

const ROUNDS: usize = 15;
/// Runs per measurement: the kernel reports their mean.
const REPEAT: u32 = 500_000;
/// Runs of a frame a capture takes: every copy must find room in the ring (8 MiB of about
/// 2 KiB records), which is drained between measurements.
const TAKEN_REPEAT: u32 = 3_000;

struct Variant {
    name: &'static str,
    steer: Steer,
    capture: Option<(XdpMaps, Vec<Endpoint>)>,
}

fn loaded(object: Option<&[u8]>) -> Steer {
    let config = golden::config();
    let mut steer = match object {
        Some(o) => Steer::load_object(o, None),
        None => Steer::load(),
    }
    .expect("load the steering program (needs root)");
    let s = steering(&config);
    steer
        .set_vips_with_acls(&s.vips, &s.acls)
        .expect("the golden VIPs");
    steer
}

fn capturing(name: &'static str, endpoint: &str) -> Variant {
    let steer = loaded(None);
    let maps = XdpMaps::of(&steer).expect("capture maps");
    let endpoints = vec![Endpoint {
        addr: endpoint.parse().expect("address"),
        port: None,
    }];
    maps.arm(&endpoints, 2048).expect("arm");
    Variant {
        name,
        steer,
        capture: Some((maps, endpoints)),
    }
}

fn median_spread(v: &[u32]) -> (u32, u32, u32) {
    let mut s = v.to_vec();
    s.sort_unstable();
    (s[s.len() / 2], s[0], s[s.len() - 1])
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (rounds, repeat, taken) = if full {
        (ROUNDS, REPEAT, TAKEN_REPEAT)
    } else {
        (1, 1_000, 100)
    };
    let baseline = std::env::var_os("SLUICE_BASELINE_STEER_OBJ")
        .map(|p| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.to_string_lossy())));
    let mut variants = Vec::new();
    if let Some(o) = &baseline {
        variants.push(Variant {
            name: "baseline build",
            steer: loaded(Some(o)),
            capture: None,
        });
    }
    variants.push(Variant {
        name: "this build, no capture",
        steer: loaded(None),
        capture: None,
    });
    variants.push(capturing(
        "this build, a capture of another address",
        "203.0.113.254",
    ));
    variants.push(capturing(
        "this build, a capture of the frame's VIP",
        "192.0.2.10",
    ));
    let frames = [
        (
            "SYN to a VIP (steered)",
            Pkt::new(
                "198.51.100.7",
                "192.0.2.10",
                6,
                tcp(40000, 80, 0x02, 1, b""),
            )
            .build(),
        ),
        (
            "frame to nobody (passed)",
            Pkt::new(
                "198.51.100.7",
                "203.0.113.9",
                6,
                tcp(40000, 80, 0x02, 1, b""),
            )
            .build(),
        ),
    ];
    // ns[variant][frame][round]
    let mut ns = vec![vec![Vec::new(); frames.len()]; variants.len()];
    for round in 0..rounds {
        for (vi, v) in variants.iter().enumerate() {
            for (fi, (_, frame)) in frames.iter().enumerate() {
                let takes = fi == 0 && v.name.ends_with("frame's VIP");
                let n = if takes { taken } else { repeat };
                let (_, t) = v.steer.time_run(frame, 0, n).expect("test run");
                ns[vi][fi].push(t);
                if let Some((maps, _)) = &v.capture {
                    // Drained, so the next measurement's copies find room; what was measured
                    // is what it claims: a copy per run of the frame the capture takes, none
                    // of the others.
                    let mut copies = 0u32;
                    maps.read(Duration::ZERO, |_| copies += 1, || true)
                        .expect("drain");
                    let want = if takes { n } else { 0 };
                    assert_eq!(copies, want, "{}: {}", v.name, frames[fi].0);
                }
            }
        }
        eprintln!("xdp bench: round {} of {rounds}", round + 1);
    }
    let reference = usize::from(baseline.is_some());
    for (fi, (frame, _)) in frames.iter().enumerate() {
        println!("{frame}: ns per frame (rounds; median, min-max; median over this build's");
        println!("  without a capture, and over the baseline build's where there is one)");
        let (ref_med, _, _) = median_spread(&ns[reference][fi]);
        let base_med = baseline.as_ref().map(|_| median_spread(&ns[0][fi]).0);
        for (vi, v) in variants.iter().enumerate() {
            let (med, lo, hi) = median_spread(&ns[vi][fi]);
            let over_base = base_med.map_or(String::new(), |b| {
                format!(", {:.2}x baseline", f64::from(med) / f64::from(b.max(1)))
            });
            println!(
                "  {:<44} {:?}; {med} ({lo}-{hi}), {:.2}x{over_base}",
                v.name,
                ns[vi][fi],
                f64::from(med) / f64::from(ref_med.max(1))
            );
        }
    }
    for v in &variants {
        if let Some((maps, _)) = &v.capture {
            maps.disarm().expect("disarm");
        }
    }
}
