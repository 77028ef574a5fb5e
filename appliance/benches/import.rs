//! `sluice import keepalived` at scale: a keepalived.conf of 1,000, 10,000 and 100,000
//! virtual servers (one NAT real server with a TCP_CHECK each, the shape of a large LVS
//! host), imported five times per size. Printed: the file's size, each round's time, the
//! median and spread, and the time per virtual server; the import is linear when the time
//! per virtual server holds as the file grows tenfold (the last column, each size's median
//! per virtual server over the 10,000's).
//!
//! `cargo bench -p appliance --bench import` (`-- 10000` runs one size). Without `--bench`
//! (`cargo test --all-targets` runs it so, unoptimised: the 100,000 took 40 s of CI) it is
//! a smoke run of the two smaller sizes, three rounds each.

use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
const ROUNDS: usize = 5;
const SMOKE_ROUNDS: usize = 3;

/// `n` virtual servers, each on its own address, port 80, with one checked real server.
fn conf(n: usize) -> String {
    let mut s = String::with_capacity(n * 230);
    for i in 0..n {
        let (a, b, c) = ((i >> 16) & 255, (i >> 8) & 255, i & 255);
        s.push_str(&format!(
            "virtual_server 10.{a}.{b}.{c} 80 {{\n    delay_loop 6\n    lb_algo rr\n    \
             lb_kind NAT\n    protocol TCP\n    real_server 192.168.{b}.{c} 8080 {{\n        \
             weight 1\n        TCP_CHECK {{\n            connect_timeout 3\n        }}\n    \
             }}\n}}\n"
        ));
    }
    s
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let only: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let rounds = if bench { ROUNDS } else { SMOKE_ROUNDS };
    if !bench {
        println!("smoke run (no --bench): `cargo bench` runs 100,000 too, {ROUNDS} rounds each");
    }
    let sizes: Vec<usize> = SIZES
        .into_iter()
        .filter(|n| only.is_empty() || only.contains(n))
        .filter(|n| bench || !only.is_empty() || *n < 100_000)
        .collect();
    println!(
        "{:>8} {:>9} {:>10} {:>10} {:>10} {:>12} {:>8}",
        "vs", "MiB", "median", "min", "max", "per vs", "x 10k"
    );
    let mut per_10k = None;
    for n in sizes {
        let text = conf(n);
        let mut times: Vec<Duration> = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let t = Instant::now();
            let out = sluice::import::keepalived::import(text.as_bytes(), "bench.conf")
                .unwrap_or_else(|e| panic!("{n}: {e}"));
            times.push(t.elapsed());
            assert_eq!(out.vips, n);
            std::hint::black_box(out);
        }
        times.sort();
        let median = times[rounds / 2];
        let per = median.as_secs_f64() / n as f64;
        if n == 10_000 {
            per_10k = Some(per);
        }
        let ratio = per_10k.map_or("-".to_string(), |p| format!("{:.2}", per / p));
        println!(
            "{n:>8} {:>9.1} {:>10} {:>10} {:>10} {:>10.2}us {ratio:>8}",
            text.len() as f64 / f64::from(1 << 20),
            format!("{:.1?}", median),
            format!("{:.1?}", times[0]),
            format!("{:.1?}", times[rounds - 1]),
            per * 1e6,
        );
    }
}
