//! The hand-over's cost at 1,000,000 flows (issue 43): a connection table of 1,000,000
//! established TCP flows (940,000 NAT flows from distinct clients, 60,000 FullNAT flows
//! holding a local port each, every one with both sequence spaces tracked), taken through
//! what `sluice run --takeover` and a restart do with it: the old worker's export to flow
//! records, the bundle's encoding (the bytes that cross the socket or the file), the new
//! process's decoding, and the new worker's import into an empty table. Five rounds; each
//! phase's median, min and max, and the memory the hand-over holds: the bundle's bytes and
//! the records on each side.
//!
//! `cargo bench -p appliance --bench handover` (`-- 100000` for another size). Without
//! `--bench` (`cargo test --all-targets` runs it so, unoptimised) it is a smoke run of
//! 100,000 flows and two rounds: it proves the bench runs without spending CI's minutes.

use std::time::{Duration, Instant};

use sluice::control::takeover::Bundle;
use sluice::lb::conntrack::{ConnTable, FlowRecord, FlowState, Track, track::seen};
use sluice::lb::hash::{FlowKey, addr_to_u128};

const ROUNDS: usize = 5;
/// The smoke run's flows and rounds.
const SMOKE: (usize, usize) = (100_000, 2);
/// FullNAT flows: one local port each on the golden FullNAT VIP's one address.
const FULLNAT: usize = 60_000;

fn a(s: &str) -> u128 {
    addr_to_u128(s.parse().expect("address"))
}

/// Flow `i`: a NAT flow from its own client address and port, or (the last [`FULLNAT`]) a
/// FullNAT flow with its own local port.
fn record(i: usize, n: usize) -> FlowRecord {
    let fullnat = i >= n - FULLNAT.min(n);
    let client = 0xffff_0000_0000 | (0x6400_0000 + i as u128 / 50_000);
    let key = FlowKey {
        src: client,
        dst: if fullnat {
            a("192.0.2.20")
        } else {
            a("192.0.2.10")
        },
        sport: 1024 + (i % 50_000) as u16,
        dport: if fullnat { 443 } else { 80 },
        proto: 6,
        v6: false,
        zone: 0,
    };
    let seq = (i as u32).wrapping_mul(2_654_435_761);
    FlowRecord {
        key,
        backend: if fullnat {
            (a("10.0.0.3"), 8443)
        } else {
            (a("10.0.0.1"), 8080)
        },
        state: FlowState::TcpEstablished,
        evidence: Default::default(),
        snat: fullnat.then(|| (a("10.1.0.1"), 1024 + (n - 1 - i) as u16)),
        carry: Default::default(),
        track: Track {
            client_next: seq,
            client_acked: seq ^ 0x5555,
            backend_next: seq ^ 0x5555,
            backend_acked: seq,
            seen: seen::CLIENT | seen::CLIENT_ACK | seen::BACKEND | seen::BACKEND_ACK,
        },
        age_ns: 1_000_000,
    }
}

fn stats(mut t: Vec<Duration>) -> String {
    t.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "{:>9.1} {:>9.1} {:>9.1}   rounds {}",
        ms(t[t.len() / 2]),
        ms(t[0]),
        ms(t[t.len() - 1]),
        t.iter()
            .map(|d| format!("{:.1}", ms(*d)))
            .collect::<Vec<_>>()
            .join(" ")
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let (default_n, rounds) = if bench { (1_000_000, ROUNDS) } else { SMOKE };
    if !bench {
        println!("smoke run (no --bench): `cargo bench` runs 1,000,000 flows, {ROUNDS} rounds");
    }
    let n: usize = args
        .iter()
        .find_map(|a| a.parse().ok())
        .unwrap_or(default_n);
    let tables = testkit::golden::tables();
    let table = || ConnTable::new(n + n / 8, tables.timeouts, tables.backends.len(), 0, 1);
    let mut old = table();
    let now = 10_000_000_000;
    for i in 0..n {
        old.import(&record(i, n), &tables, now)
            .unwrap_or_else(|e| panic!("flow {i}: {e}"));
    }
    let (mut export, mut encode, mut decode, mut import) = (vec![], vec![], vec![], vec![]);
    let mut bytes = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        let records: Vec<FlowRecord> = old.export(now).collect();
        export.push(t.elapsed());
        assert_eq!(records.len(), n);
        let bundle = Bundle {
            version: 7,
            exported_ns: now,
            health: Vec::new(),
            workers: vec![records],
            persistence: Vec::new(),
            outbound: Vec::new(),
        };
        let t = Instant::now();
        let b = bundle.encode();
        encode.push(t.elapsed());
        bytes = b.len();
        drop(bundle);
        let t = Instant::now();
        let back = Bundle::decode(&b).expect("decode");
        decode.push(t.elapsed());
        drop(b);
        let mut new = table();
        let t = Instant::now();
        for r in &back.workers[0] {
            new.import(r, &tables, now).expect("import");
        }
        import.push(t.elapsed());
        assert_eq!(new.len(), n);
    }
    let record_bytes = std::mem::size_of::<FlowRecord>() * n;
    println!(
        "hand-over of {n} flows ({} FullNAT), {rounds} rounds",
        FULLNAT.min(n)
    );
    println!(
        "{:<28} {:>9} {:>9} {:>9}",
        "phase (ms)", "median", "min", "max"
    );
    println!("{:<28} {}", "export (old worker)", stats(export.clone()));
    println!("{:<28} {}", "encode", stats(encode.clone()));
    println!("{:<28} {}", "decode (new process)", stats(decode.clone()));
    println!("{:<28} {}", "import (new worker)", stats(import.clone()));
    let total: Vec<Duration> = (0..rounds)
        .map(|i| export[i] + encode[i] + decode[i] + import[i])
        .collect();
    println!("{:<28} {}", "all four", stats(total));
    println!(
        "memory: bundle {:.1} MiB ({} bytes a flow); records {:.1} MiB on each side ({} bytes a flow)",
        bytes as f64 / (1 << 20) as f64,
        bytes / n.max(1),
        record_bytes as f64 / (1 << 20) as f64,
        std::mem::size_of::<FlowRecord>()
    );
}
