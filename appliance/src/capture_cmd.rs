//! `sluice capture`: the frames of a VIP or of endpoints as the running appliance received
//! and sent them, through its API (`POST /v1/capture`), as pcapng to a file or stdout, or
//! one summary line per frame.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::api_args::ApiArgs;

/// `sluice capture`'s arguments.
#[derive(clap::Args)]
pub(crate) struct CaptureArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The VIP whose frames to capture: to and from its address and port, and its
    /// backends' (NAT and FullNAT return traffic).
    #[arg(long)]
    vip: Option<String>,
    /// Frames to or from this endpoint too: ADDR, ADDR:PORT or [V6]:PORT (repeatable).
    #[arg(long = "endpoint", value_name = "ENDPOINT")]
    endpoints: Vec<String>,
    /// Write pcapng here (`-` for stdout, as `tcpdump -r -` reads it) instead of printing a
    /// summary line per frame.
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    write: Option<PathBuf>,
    /// Stop after this many frames (at most 10000).
    #[arg(short = 'c', long, default_value_t = 1000)]
    count: u32,
    /// Stop after this long (at most 10m).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Bytes kept of each frame (64 to 2048).
    #[arg(short = 's', long, default_value_t = 2048)]
    snaplen: u32,
}

/// Runs `sluice capture`.
pub(crate) fn run(args: CaptureArgs) -> ExitCode {
    match capture(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice capture: {e}");
            ExitCode::FAILURE
        }
    }
}

fn capture(args: &CaptureArgs) -> Result<(), String> {
    let endpoint = args.api.endpoint().map_err(|e| e.to_string())?;
    let req = api::CaptureRequest {
        vip: args.vip.clone(),
        endpoints: args.endpoints.clone(),
        count: args.count,
        duration_ms: u64::try_from(args.duration.as_millis()).unwrap_or(u64::MAX),
        snaplen: args.snaplen,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))?;
    let client = api::Client::new(endpoint);
    let (pcapng, lost) = rt
        .block_on(client.capture(&req))
        .map_err(|e| e.to_string())?;
    let parsed = wire::pcapng::read(&pcapng).map_err(|e| format!("the reply: {e}"))?;
    match &args.write {
        Some(path) if path.as_os_str() == "-" => std::io::stdout()
            .write_all(&pcapng)
            .and_then(|()| std::io::stdout().flush())
            .map_err(|e| format!("stdout: {e}"))?,
        Some(path) => {
            std::fs::write(path, &pcapng).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => print!("{}", summary(&parsed)),
    }
    eprintln!("{} frames captured, {lost} lost", parsed.packets.len());
    Ok(())
}

/// One line per frame: its time (UTC), stage, Ethernet interface and summary.
fn summary(c: &wire::pcapng::Capture) -> String {
    let mut out = String::new();
    for p in &c.packets {
        let stage = c
            .interfaces
            .get(p.interface as usize)
            .map_or("?", |i| i.name.as_str());
        let secs = p.ts_unix_ns / 1_000_000_000;
        let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
        let us = (p.ts_unix_ns % 1_000_000_000) / 1000;
        out.push_str(&format!(
            "{h:02}:{m:02}:{s:02}.{us:06} {stage:<10} {:<6} {}\n",
            p.comment.as_deref().unwrap_or(""),
            wire::summary::line(&p.data)
        ));
    }
    out
}
