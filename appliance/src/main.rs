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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => check(&config),
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
