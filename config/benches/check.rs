//! `sluice check`'s cost at scale: the parse and validation of a config of 10,000 and
//! 100,000 VIPs of 4 backends each (what `sluice check` and every reload do before anything
//! else). The VIPs mix the modes and the keys that are checked across VIPs: NAT and UDP
//! VIPs under a health check, FullNAT with a snat pool, DR with an outbound range, tunnel
//! (GUE); every address is distinct, so every cross-VIP check finds nothing and looks at
//! everything it looks at.
//!
//! `cargo bench -p sluice-config --bench check` (criterion: median and spread of the
//! samples), each size measured twice: `wall` (the clock) and `cpu` (the thread's CPU
//! time, what an idle machine's clock shows: this one is shared); `-- 10000` runs one size;
//! without `--bench` (`cargo test`), a smoke run of 1,000 VIPs. The figures are in
//! docs/manual/operate.md ("Checking a config").

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sluice_config::Config;

const BACKENDS: usize = 4;
/// The size of the smoke run (without `--bench`).
const SMOKE_VIPS: usize = 1_000;

/// The config text of `vips` VIPs of [`BACKENDS`] backends each.
pub fn config_text(vips: usize) -> String {
    let mut t = String::from(
        "[appliance]\nname = \"bench\"\ninterfaces = [\"eth0\"]\n\n\
         [[health_check]]\nname = \"http\"\nkind = \"http\"\npath = \"/health\"\n\n\
         [[health_check]]\nname = \"udp\"\nkind = \"udp\"\npayload = \"ping\"\n",
    );
    for v in 0..vips {
        let addr = format!("10.{}.{}.{}", 64 + v / 65536, (v / 256) % 256, v % 256);
        let _ = write!(
            t,
            "\n[[vip]]\nname = \"vip-{v:06}\"\naddress = \"{addr}\"\n"
        );
        let port = match v % 5 {
            0 | 1 => {
                t.push_str("port = 80\nmode = \"nat\"\nhealth_check = \"http\"\n");
                8080
            }
            2 => {
                let _ = write!(
                    t,
                    "port = 443\nmode = \"fullnat\"\nscheduler = \"wlc\"\nsnat = [\"100.{}.{}.1\", \"100.{}.{}.2\"]\n",
                    64 + v / 65536,
                    (v / 256) % 256,
                    64 + v / 65536,
                    (v / 256) % 256
                );
                443
            }
            3 => {
                t.push_str(
                    "port = 53\nprotocol = \"udp\"\nmode = \"dr\"\nhealth_check = \"udp\"\noutbound = \"40000-49999\"\n",
                );
                53
            }
            _ => {
                t.push_str("port = 80\nmode = \"tunnel\"\ntunnel = \"gue\"\n");
                80
            }
        };
        for b in 0..BACKENDS {
            let n = v * BACKENDS + b;
            let _ = write!(
                t,
                "\n[[vip.backend]]\naddress = \"172.{}.{}.{}\"\nport = {port}\nweight = {}\n",
                16 + n / 65536,
                (n / 256) % 256,
                n % 256,
                100 + b
            );
        }
    }
    t
}

/// This thread's CPU time: the machine is shared, and a check is one thread's work, so
/// its CPU time is what an idle machine's clock would show.
fn cpu() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("CLOCK_THREAD_CPUTIME_ID");
    Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}

fn check(c: &mut Criterion) {
    let only: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    // Without `--bench` (`cargo test --all-targets` runs this unoptimised, each routine
    // once) the sizes would take 96 s for nothing measured: a smoke run of 1,000 VIPs
    // instead, unless sizes were asked for.
    let bench = std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if bench || !only.is_empty() {
        &[10_000, 100_000]
    } else {
        &[SMOKE_VIPS]
    };
    let mut g = c.benchmark_group("check");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    for &vips in sizes {
        if !only.is_empty() && !only.contains(&vips) {
            continue;
        }
        let text = config_text(vips);
        let cfg = Config::from_toml_str(&text).expect("the bench config is valid");
        assert_eq!(cfg.vips.len(), vips);
        assert_eq!(
            cfg.vips.iter().map(|v| v.backends.len()).sum::<usize>(),
            vips * BACKENDS
        );
        drop(cfg);
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_with_input(BenchmarkId::new("wall", vips), &text, |b, text| {
            b.iter(|| black_box(Config::from_toml_str(text)).is_ok())
        });
        g.bench_with_input(BenchmarkId::new("cpu", vips), &text, |b, text| {
            b.iter_custom(|iters| {
                let t0 = cpu();
                for _ in 0..iters {
                    assert!(black_box(Config::from_toml_str(text)).is_ok());
                }
                cpu() - t0
            })
        });
    }
    g.finish();
}

criterion_group!(benches, check);
criterion_main!(benches);
