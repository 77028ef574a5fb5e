//! `sluice quic-lb`'s arguments and output, and `sluice trace --cid`'s step, kept out of
//! `main.rs` so the binary's entry point stays a table of subcommands.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use sluice::config;
use sluice::trace::TraceReport;

/// `sluice quic-lb`: the configuration a quic_lb VIP's QUIC servers need.
#[derive(Subcommand)]
pub(crate) enum QuicLbCommand {
    /// Print each backend's QUIC-LB server configuration (config ID, server ID, lengths,
    /// key) for a VIP, one `key=value` line per backend.
    Config {
        /// Configuration file.
        #[arg(long, short, default_value = config::DEFAULT_PATH)]
        config: PathBuf,
        /// The VIP's name.
        #[arg(long)]
        vip: String,
    },
}

/// Runs `sluice quic-lb`.
pub(crate) fn run(cmd: QuicLbCommand) -> ExitCode {
    let QuicLbCommand::Config { config, vip } = cmd;
    let shown = config::load(&config)
        .map_err(|e| e.to_string())
        .and_then(|c| sluice::quiclb::server_config(&c, &vip).map_err(|e| e.to_string()));
    match shown {
        Ok(s) => {
            print!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice quic-lb config: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `sluice trace --cid`: the report with the connection ID's answer, if one was given.
pub(crate) fn with_cid(
    path: &Path,
    report: TraceReport,
    cid: Option<&str>,
) -> Result<TraceReport, String> {
    let Some(cid) = cid else {
        return Ok(report);
    };
    let cfg = config::load(path).map_err(|e| e.to_string())?;
    let mut r = report;
    sluice::quiclb::trace_cid(&cfg, &mut r, cid).map_err(|e| e.to_string())?;
    Ok(r)
}
