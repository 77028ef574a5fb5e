//! The `sluice` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sluice::config::{self, Config, LoadError};

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: a layer-4 load-balancer appliance"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a configuration file and print a summary, or every error it has.
    Check {
        /// Configuration file.
        #[arg(long, short, default_value = config::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Bring the datapath up and forward until SIGTERM or SIGINT; SIGHUP reloads.
    Run {
        /// Configuration file.
        #[arg(long, short, default_value = config::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Show which backend a flow gets, by which rule and Maglev slot, computed by the same
    /// code the datapath runs.
    Trace {
        /// Configuration file.
        #[arg(long, short, default_value = config::DEFAULT_PATH)]
        config: PathBuf,
        /// The flow, e.g. "tcp 198.51.100.7:40000 -> 192.0.2.10:80".
        #[arg(long)]
        flow: String,
    },
    /// Build a lab in network namespaces (client, router, appliance, backends), start the
    /// appliance on it, send real traffic through every VIP and report; removes it all after.
    Lab {
        /// Number of backends.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=9))]
        backends: u8,
        /// HTTP requests per VIP.
        #[arg(long, default_value_t = 60)]
        requests: usize,
        /// Scheduler for every VIP (maglev, rr, wrr, sh, dh, lc, wlc, sed, nq, lblc, lblcr).
        #[arg(long, default_value = "maglev")]
        scheduler: String,
        /// Appliances behind the router (DR and tunnel VIPs on all of them, ECMP over BGP).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=10))]
        appliances: u8,
        /// Static VIP routes on the router instead of BIRD and BGP (one appliance only).
        #[arg(long)]
        no_bgp: bool,
    },
    /// Packet-rate benchmark (root): 64-byte UDP to a VIP over veth, Sluice against kernel
    /// forwarding with nftables DNAT on the same namespaces, side by side.
    Bench {
        /// Generator seconds per run.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: u64,
        /// Rounds of (Sluice run, nftables run), alternating; the report gives the medians.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=20))]
        rounds: u64,
        /// Run the appliance with busy_poll = true (workers spin on their rings).
        #[arg(long)]
        busy_poll: bool,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => check(&config),
        Command::Run { config } => run(&config),
        Command::Trace { config, flow } => trace(&config, &flow),
        Command::Lab {
            backends,
            requests,
            scheduler,
            appliances,
            no_bgp,
        } => lab(sluice::lab::LabOptions {
            backends: usize::from(backends),
            requests,
            scheduler,
            appliances: Some(usize::from(appliances)),
            bgp: Some(!no_bgp),
            ..Default::default()
        }),
        Command::Bench {
            seconds,
            rounds,
            busy_poll,
            json,
        } => bench(
            sluice::bench::BenchOptions {
                seconds,
                sluice: PathBuf::new(),
                busy_poll,
                rounds: rounds as usize,
            },
            json,
        ),
    }
}

fn bench(mut options: sluice::bench::BenchOptions, json: bool) -> ExitCode {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, std::sync::Arc::clone(&stop)) {
            eprintln!("sluice bench: cannot handle signals: {e}");
            return ExitCode::FAILURE;
        }
    }
    options.sluice = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sluice bench: cannot find the sluice binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    match sluice::bench::run(&options, stop) {
        Ok(report) if json => match serde_json::to_string_pretty(&report) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("sluice bench: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(report) => {
            print!("{}", report.table());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn trace(path: &std::path::Path, flow: &str) -> ExitCode {
    let cfg = match config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    match sluice::trace::trace(&cfg, flow) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice trace: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    // rtnetlink's connection task warns for every late reply to a dropped request (a
    // neighbour lookup that timed out); those are not the operator's business.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,netlink_proto=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn run(path: &std::path::Path) -> ExitCode {
    init_logging();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice run: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(sluice::control::run(path)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice run: {e}");
            ExitCode::FAILURE
        }
    }
}

fn lab(options: sluice::lab::LabOptions) -> ExitCode {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, std::sync::Arc::clone(&stop)) {
            eprintln!("sluice lab: cannot handle signals: {e}");
            return ExitCode::FAILURE;
        }
    }
    match sluice::lab::run_lab(options, stop) {
        Ok(true) => {
            println!("lab: every VIP answered correctly");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("lab: some VIPs failed (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("sluice lab: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check(path: &std::path::Path) -> ExitCode {
    match config::load(path) {
        Ok(cfg) => {
            print!("{}", summary(path, &cfg));
            ExitCode::SUCCESS
        }
        Err(LoadError::Invalid { path, errors }) => {
            eprintln!(
                "{}: {} error{}",
                path.display(),
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
            for e in errors.iter() {
                eprintln!("  {e}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The short summary `sluice check` prints for a valid file.
fn summary(path: &std::path::Path, cfg: &Config) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let backends: usize = cfg.vips.iter().map(|v| v.backends.len()).sum();
    let peers = cfg.bgp.as_ref().map_or(0, |b| b.peers.len());
    let _ = writeln!(
        s,
        "{}: ok: appliance {:?} on {}; {} vip(s), {} backend(s), {} health check(s), {} bgp peer(s)",
        path.display(),
        cfg.appliance.name,
        cfg.appliance.interfaces.join(", "),
        cfg.vips.len(),
        backends,
        cfg.health_checks.len(),
        peers
    );
    for v in &cfg.vips {
        let mode = match v.mode {
            config::Mode::Tunnel(e) => format!("tunnel/{}", e.name()),
            m => m.name().to_string(),
        };
        let addr = match v.address {
            std::net::IpAddr::V4(a) => format!("{a}:{}", v.port),
            std::net::IpAddr::V6(a) => format!("[{a}]:{}", v.port),
        };
        let _ = writeln!(
            s,
            "  vip {:<12} {}/{} {} {} {} backends={} check={}",
            v.name,
            addr,
            v.protocol.name(),
            mode,
            v.scheduler.name(),
            v.hash.name(),
            v.backends.len(),
            v.health_check.as_deref().unwrap_or("-")
        );
    }
    if let Some(b) = &cfg.bgp {
        for p in &b.peers {
            let _ = writeln!(
                s,
                "  bgp peer {} as {} (local as {}, hold {})",
                p.address,
                p.asn,
                b.asn,
                humantime::format_duration(p.hold_time)
            );
        }
    }
    s
}
