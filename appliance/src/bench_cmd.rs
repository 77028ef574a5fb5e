//! `sluice bench`'s arguments and the choice between its benches (packet rate, many
//! flows, connection rate, idle cost), kept out of `main.rs` so the binary's entry point
//! stays a table of subcommands.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// `sluice bench`'s arguments.
#[derive(Args)]
pub(crate) struct BenchArgs {
    /// Seconds per run (default 5; 60 for --idle).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: Option<u64>,
    /// Rounds of (Sluice run, nftables run), alternating; the report gives the medians.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=20))]
    rounds: u64,
    /// Run the appliance with busy_poll = true (workers spin on their rings).
    #[arg(long)]
    busy_poll: bool,
    /// Connection rate: short HTTP connections through a NAT and a DR VIP, against the
    /// kernel (nftables DNAT, a route) and a direct run, with nginx as the backend.
    #[arg(long, conflicts_with = "idle")]
    cps: bool,
    /// Idle cost: the appliance with VIPs and no traffic, default and busy_poll.
    #[arg(long, conflicts_with_all = ["busy_poll", "flows"])]
    idle: bool,
    /// Many flows: the packet-rate bench at these flow counts (source addresses x
    /// ports), one queue, cache on and off; without a list 256,65536,1000000.
    #[arg(long, value_delimiter = ',', num_args = 0.., conflicts_with = "cps")]
    flows: Option<Vec<u32>>,
    /// --cps: connections in flight.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10000))]
    concurrency: u64,
    /// --cps: client threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    threads: u64,
    /// --idle: also measure this other `sluice` binary (an older build), in the same run
    /// before this one, default and busy_poll; --cps: also run it (default settings) in
    /// every round, next to this build; --flows: its runs A and A2 follow this build's in
    /// every round.
    #[arg(long, value_name = "PATH")]
    baseline: Option<PathBuf>,
    /// --cps: also run this build with flood mode off (`[flood] enabled = false`) in
    /// every round, next to the default run.
    #[arg(long, requires = "cps")]
    flood_off: bool,
    /// --cps: also run this build with `syn_proxy = "always"` on the NAT VIP in every
    /// round, next to the default run (what the SYN proxy's handshake costs).
    #[arg(long, requires = "cps")]
    syn_proxy: bool,
    /// --cps: also run this build with `[sync]` to one peer (a socket in the backend's
    /// namespace that counts what it gets) in every round, next to the default run: the
    /// rate with sync on over off, and the sync bytes sent per connection.
    #[arg(long, requires = "cps")]
    sync: bool,
    /// --cps and --idle: queues per veth (the appliance runs one worker per queue).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    queues: u32,
    /// --flows: runs A and A2 (this build's, not the baseline's) with a `sluice capture` running
    /// through its whole measurement, of an endpoint no bench frame carries: the cost of a
    /// running capture to the traffic it does not take (compare with --baseline set to this
    /// same binary).
    #[arg(long, requires = "flows")]
    capture: bool,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs the bench `args` choose and prints its report.
pub(crate) fn run(args: BenchArgs) -> ExitCode {
    let BenchArgs {
        seconds,
        rounds,
        busy_poll,
        cps,
        idle,
        flows,
        concurrency,
        threads,
        queues,
        baseline,
        flood_off,
        syn_proxy,
        sync,
        capture,
        json,
    } = args;
    if baseline.is_some() && !idle && !cps && flows.is_none() {
        eprintln!(
            "sluice bench: --baseline needs --idle, --cps or --flows (the packet-rate bench \
             has no baseline run)"
        );
        return ExitCode::from(2);
    }
    let mode = if idle {
        BenchMode::Idle(bench::IdleOptions {
            seconds: seconds.unwrap_or(60),
            sluice: PathBuf::new(),
            queues,
            baseline,
        })
    } else if cps {
        BenchMode::Cps(bench::CpsOptions {
            seconds: seconds.unwrap_or(5),
            rounds: rounds as usize,
            sluice: PathBuf::new(),
            concurrency: concurrency as usize,
            threads: threads as usize,
            queues,
            busy_poll,
            flood_off,
            syn_proxy,
            sync,
            baseline,
        })
    } else {
        let options = bench::BenchOptions {
            seconds: seconds.unwrap_or(5),
            sluice: PathBuf::new(),
            busy_poll,
            rounds: rounds as usize,
            baseline,
            capture,
        };
        match flows {
            Some(f) if f.is_empty() => BenchMode::Flows(options, bench::DEFAULT_FLOWS.to_vec()),
            Some(f) => BenchMode::Flows(options, f),
            None => BenchMode::Packets(options),
        }
    };
    run_bench(mode, json)
}

/// Which of `sluice bench`'s benches to run.
enum BenchMode {
    Packets(bench::BenchOptions),
    Flows(bench::BenchOptions, Vec<u32>),
    Cps(bench::CpsOptions),
    Idle(bench::IdleOptions),
}

fn run_bench(mut mode: BenchMode, json: bool) -> ExitCode {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, std::sync::Arc::clone(&stop)) {
            eprintln!("sluice bench: cannot handle signals: {e}");
            return ExitCode::FAILURE;
        }
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sluice bench: cannot find the sluice binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = match &mut mode {
        BenchMode::Packets(o) => {
            o.sluice = exe;
            bench::run(o, stop).map(|r| (serde_json::to_string_pretty(&r), r.table()))
        }
        BenchMode::Flows(o, flows) => {
            o.sluice = exe;
            bench::run_flows(o, flows, stop).map(|r| (serde_json::to_string_pretty(&r), r.table()))
        }
        BenchMode::Cps(o) => {
            o.sluice = exe;
            bench::run_cps(o, stop).map(|r| (serde_json::to_string_pretty(&r), r.table()))
        }
        BenchMode::Idle(o) => {
            o.sluice = exe;
            bench::run_idle(o, stop).map(|r| (serde_json::to_string_pretty(&r), r.table()))
        }
    };
    match report {
        Ok((Ok(text), _)) if json => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Ok((Err(e), _)) if json => {
            eprintln!("sluice bench: {e}");
            ExitCode::FAILURE
        }
        Ok((_, table)) => {
            print!("{table}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice bench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, SynProxy};
    use bench::CpsVariant;

    /// Every variant of the connection-rate bench is a config the appliance takes, only
    /// `--syn-proxy`'s proxies the NAT VIP (the DR VIP cannot be) and only `--sync`'s syncs.
    #[test]
    fn the_cps_bench_configs_are_valid_and_proxy_only_when_asked() {
        let sock = std::path::Path::new("/run/bench/api.sock");
        for (flood, syn_proxy, sync) in [
            (true, false, false),
            (false, false, false),
            (true, true, false),
            (true, false, true),
        ] {
            let v = CpsVariant {
                flood,
                syn_proxy,
                sync,
            };
            let c = Config::from_toml_str(&bench::cps_config(sock, false, v))
                .unwrap_or_else(|e| panic!("{v:?}: {e}"));
            let nat = c.vips.iter().find(|v| v.name == "nat").expect("nat VIP");
            let want = if syn_proxy {
                SynProxy::Always
            } else {
                SynProxy::Flood
            };
            assert_eq!(nat.syn_proxy, want, "{v:?}");
            assert_eq!(c.flood.enabled, flood, "{v:?}");
            let peers = c.sync.as_ref().map(|s| s.peers.clone());
            assert_eq!(peers, sync.then(|| vec![bench::SYNC_PEER]), "{v:?}");
        }
    }
}
