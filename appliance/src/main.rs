//! The `sluice` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

mod api_args;
mod bench_cmd;
mod capture_cmd;
mod cli;
mod docgen;
mod quiclb_cmd;
use api_args::ApiArgs;
use cli::{Cli, Command, CtlCmd, DatapathCmd, FleetCmd, ImageCmd, ImportFrom};
use sluice::config::{self, Config, LoadError};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Commands that print and end: a reader that went away (`| head`) ends them quietly,
    // as it ends cat or grep. The ones that serve sockets or a terminal keep ignoring it.
    if !matches!(
        cli.command,
        Command::Run { .. } | Command::Lab { .. } | Command::Bench(_) | Command::Console { .. }
    ) {
        sys::signal::default_sigpipe();
    }
    match cli.command {
        Command::Man { dir } => match docgen::man(&dir) {
            Ok(pages) => {
                println!("{} manual pages written to {}", pages.len(), dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("sluice man: {}: {e}", dir.display());
                ExitCode::FAILURE
            }
        },
        Command::Completions { shell } => {
            docgen::completions(shell, &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Check {
            explain: Some(key), ..
        } => explain(&key),
        Command::Check { config, .. } => check(&config),
        Command::Ctl { api, json, command } => ctl(&api, command, json),
        Command::Fleet {
            config,
            json,
            command,
        } => fleet(&config, command, json),
        Command::Console {
            api,
            no_color,
            refresh,
        } => console(&api, no_color, refresh),
        Command::Run { config, takeover } => run(&config, takeover),
        Command::Import {
            from:
                ImportFrom::Keepalived {
                    file,
                    output,
                    allow_include,
                },
        } => import_keepalived(&file, output.as_deref(), &allow_include),
        Command::Trace {
            config,
            flow,
            vni,
            cid,
        } => trace(&config, &flow, vni, cid.as_deref()),
        Command::QuicLb(cmd) => quiclb_cmd::run(cmd),
        Command::Lab {
            backends,
            requests,
            scheduler,
            appliances,
            no_bgp,
            console,
            no_flow_cache,
        } => run_lab(lab::LabOptions {
            backends: usize::from(backends),
            requests,
            scheduler,
            appliances: Some(usize::from(appliances)),
            bgp: Some(!no_bgp),
            console,
            flow_cache: no_flow_cache.then_some(false),
            ..Default::default()
        }),
        Command::Bench(args) => bench_cmd::run(args),
        Command::Capture(args) => capture_cmd::run(args),
        Command::Image { command } => image(command),
    }
}

fn image(command: ImageCmd) -> ExitCode {
    use sluice::image;
    let paths = image::Paths::default();
    let r = match command {
        ImageCmd::Update {
            bundle,
            sha256,
            tries,
            allow_unsigned,
            ca_file,
            idle_timeout,
            download_timeout,
            reboot,
        } => image::update(
            &image::Source::parse(&bundle),
            &image::Update {
                sha256,
                tries,
                allow_unsigned,
                download: image::Download {
                    ca: ca_file,
                    idle: idle_timeout,
                    body: download_timeout,
                    ..Default::default()
                },
            },
            &paths,
        )
        .map(|said| {
            println!("{said}");
            if reboot {
                let _ = std::process::Command::new("systemctl")
                    .arg("reboot")
                    .status();
            }
        }),
        ImageCmd::Status => image::status(&paths).map(|s| print!("{s}")),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice image: {e}");
            ExitCode::FAILURE
        }
    }
}

fn fleet(config: &std::path::Path, command: FleetCmd, json: bool) -> ExitCode {
    use sluice::fleetctl;
    let r = match command {
        FleetCmd::Push { file, wait } => fleetctl::push(config, &file).and_then(|rev| {
            // --json: {"pushed", "revision"}, and with --wait the status document too.
            let mut out = serde_json::json!({ "pushed": file, "revision": rev });
            if !json {
                println!("pushed {} as revision {rev}", file.display());
            }
            if let Some(secs) = wait {
                let v = fleetctl::wait(config, rev, std::time::Duration::from_secs(secs))?;
                let (local, _) = fleetctl::read(config)?;
                let doc = fleetctl::document(&local, &v);
                if !json {
                    print!("{}", fleetctl::format(&doc));
                }
                out["status"] = serde_json::to_value(&doc).unwrap_or_default();
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            }
            Ok(())
        }),
        FleetCmd::Rebase => fleetctl::rebase(config).map(|(epoch, v)| {
            let config = v.config.as_ref().map_or(0, |c| c.revision);
            if json {
                let out = serde_json::json!({ "epoch": epoch, "config_revision": config });
                println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
                return;
            }
            println!(
                "epoch {} written: every member follows etcd as it is now and activates the \
                 config's revision {config}",
                epoch.id
            );
        }),
        FleetCmd::Status => fleetctl::read(config).map(|(local, v)| {
            let doc = fleetctl::document(&local, &v);
            if json {
                println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            } else {
                print!("{}", fleetctl::format(&doc));
            }
        }),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Every error's message carries its list (a bad file's errors, one a line).
            eprintln!("sluice fleet: {e}");
            ExitCode::FAILURE
        }
    }
}

fn ctl(api: &ApiArgs, command: CtlCmd, json: bool) -> ExitCode {
    let endpoint = match api.endpoint() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("sluice ctl: {e}");
            return ExitCode::from(2);
        }
    };
    let cmd = ctl_command(command);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice ctl: tokio: {e}");
            return ExitCode::from(2);
        }
    };
    let client = api::Client::new(endpoint);
    match rt.block_on(sluice::ctl::run(&client, cmd, json)) {
        Ok(out) => {
            print!("{out}");
            if !out.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice ctl: {e}");
            ExitCode::from(e.code())
        }
    }
}

/// What `sluice ctl COMMAND` asks the API.
fn ctl_command(command: CtlCmd) -> sluice::ctl::CtlCommand {
    use api::BackendAction as A;
    use api::Command as W;
    use sluice::ctl::CtlCommand as C;
    let b = |vip: String, backend: String, action| {
        C::Send(W::Backend {
            vip,
            backend,
            action,
        })
    };
    match command {
        CtlCmd::Status => C::Status,
        CtlCmd::Vips(page) => C::Vips(page.into()),
        CtlCmd::Backends { vip } => C::Backends { vip },
        CtlCmd::Outbound { vip } => C::Outbound { vip },
        CtlCmd::Drain { vip, backend } => b(vip, backend, A::Drain),
        CtlCmd::Undrain { vip, backend } => b(vip, backend, A::Undrain),
        CtlCmd::Disable { vip, backend } => b(vip, backend, A::Disable),
        CtlCmd::Enable { vip, backend } => b(vip, backend, A::Enable),
        CtlCmd::Weight {
            vip,
            backend,
            weight,
        } => C::Send(W::Weight {
            vip,
            backend,
            weight,
        }),
        CtlCmd::Withdraw { vip } => C::Send(W::Announce {
            vip,
            announce: false,
        }),
        CtlCmd::Announce { vip } => C::Send(W::Announce {
            vip,
            announce: true,
        }),
        CtlCmd::Reload => C::Send(W::Reload),
        CtlCmd::Datapath(DatapathCmd::Reclaim) => C::Send(W::ReclaimDatapath),
        CtlCmd::Events { since } => C::Events { since },
        CtlCmd::Bgp => C::Bgp,
        CtlCmd::List {
            stats,
            rate,
            interval,
        } => list_command(stats, rate, interval),
        CtlCmd::Metrics => C::Metrics,
    }
}

/// `sluice import keepalived`: 0 when the file was written (its placeholders still to be
/// filled in), 1 when the input cannot be imported or the output not written.
fn import_keepalived(
    file: &std::path::Path,
    output: Option<&std::path::Path>,
    allow_include: &[PathBuf],
) -> ExitCode {
    let imported = match sluice::import::keepalived::import_file(file, allow_include) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("sluice import: {}: {e}", file.display());
            return ExitCode::FAILURE;
        }
    };
    for n in &imported.notes.notes {
        eprintln!("{}: {}", file.display(), imported.notes.show(n));
    }
    match output {
        Some(out) => {
            if let Err(e) = std::fs::write(out, &imported.toml) {
                eprintln!("sluice import: {}: {e}", out.display());
                return ExitCode::FAILURE;
            }
            eprintln!(
                "sluice import: wrote {} vip(s) to {}, {} line(s) not carried over as they were; \
                 fill in its placeholders, then `sluice check --config {}`",
                imported.vips,
                out.display(),
                imported.notes.notes.len(),
                out.display()
            );
        }
        None => print!("{}", imported.toml),
    }
    ExitCode::SUCCESS
}

/// `ctl list`, `ctl list --stats` or `ctl list --rate`.
fn list_command(stats: bool, rate: bool, interval: std::time::Duration) -> sluice::ctl::CtlCommand {
    use sluice::ctl::ListKind;
    let kind = match (stats, rate) {
        (_, true) => ListKind::Rate,
        (true, false) => ListKind::Stats,
        (false, false) => ListKind::Conns,
    };
    sluice::ctl::CtlCommand::List { kind, interval }
}

fn console(api: &ApiArgs, no_color: bool, refresh: std::time::Duration) -> ExitCode {
    let endpoint = match api.endpoint() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("sluice console: {e}");
            return ExitCode::from(2);
        }
    };
    let no_color = no_color || std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    match tui::run(tui::ConsoleOptions {
        endpoint,
        no_color,
        refresh,
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice console: {e}");
            ExitCode::FAILURE
        }
    }
}

fn trace(path: &std::path::Path, flow: &str, vni: Option<u32>, cid: Option<&str>) -> ExitCode {
    let cfg = match config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // A fleet member runs its file merged with the fleet's last activated revision (kept
    // under [fleet] state_dir): that is what it forwards with, so that is what is traced.
    let cfg = match cfg.fleet.is_some() {
        false => cfg,
        true => {
            let start = sluice::control::fleet::start_from(path, cfg);
            match (&start.restored, &start.problem) {
                (Some(lg), _) => eprintln!(
                    "sluice trace: fleet member: tracing the fleet's revision {} with {}",
                    lg.revision,
                    path.display()
                ),
                (None, Some(p)) => eprintln!("sluice trace: {p}"),
                (None, None) => eprintln!(
                    "sluice trace: fleet member without an activated revision kept yet: \
                     tracing {} alone",
                    path.display()
                ),
            }
            start.config
        }
    };
    // The egress lines need the kernel's routes; without them the rest still stands.
    let net = sluice::trace::kernel_routes()
        .map_err(|e| eprintln!("sluice trace: routes not read ({e}); no egress shown"))
        .ok();
    let traced = sluice::trace::trace_with(&cfg, flow, vni, net.as_ref())
        .map_err(|e| e.to_string())
        .and_then(|r| quiclb_cmd::with_cid(path, r, cid));
    match traced {
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

/// Raises the soft descriptor limit to the hard one: systemd and shells leave it at 1,024,
/// which the API's clients and the prober's sockets would otherwise share with the
/// datapath's and BGP's.
fn raise_nofile() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::info!("descriptor limit raised from {soft} to {hard}"),
            Err(e) => {
                tracing::warn!("descriptor limit stays {soft}: cannot raise it to {hard}: {e}")
            }
        },
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot read the descriptor limit: {e}"),
    }
}

fn run(path: &std::path::Path, takeover: bool) -> ExitCode {
    init_logging();
    raise_nofile();
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
    match rt.block_on(sluice::control::run(path, takeover)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice run: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_lab(options: lab::LabOptions) -> ExitCode {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // SIGHUP too: a closed terminal must tear the namespaces down like Ctrl-C does.
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        if let Err(e) = signal_hook::flag::register(sig, std::sync::Arc::clone(&stop)) {
            eprintln!("sluice lab: cannot handle signals: {e}");
            return ExitCode::FAILURE;
        }
    }
    let sluice = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sluice lab: cannot find the sluice binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    match lab::run_lab(options, &sluice, stop) {
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

/// `sluice check --explain KEY`: the key's reference entry, or the keys of a table, or
/// (status 1) what is near the name.
fn explain(key: &str) -> ExitCode {
    if let Some(doc) = config::keys::explain(key) {
        print!("{}", doc.to_text());
        let inner = config::keys::under(key);
        if !inner.is_empty() {
            println!("\nKeys of {}:", doc.path);
            for k in inner {
                println!("  {:<40} {}", k.path, k.kind);
            }
        }
        return ExitCode::SUCCESS;
    }
    let near = config::keys::near(key);
    eprintln!("sluice check --explain: no key {key:?} in the configuration reference");
    if !near.is_empty() {
        eprintln!("keys with a similar name:");
        for k in near {
            eprintln!("  {}", k.path);
        }
    }
    ExitCode::FAILURE
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
        // A tenant VIP's address is the tenant's (another tenant may have it too).
        let tenant = v
            .tenant_vni
            .map(|n| format!(" vni {n}"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  vip {:<12} {}/{}{tenant} {} {} {} backends={} ring={} check={}",
            v.name,
            addr,
            v.protocol.name(),
            mode,
            v.scheduler.name(),
            v.hash.name(),
            v.backends.len(),
            v.maglev_table_size,
            match v.health_checks.as_slice() {
                [] => "-".to_string(),
                names => names.join(match v.health_combine {
                    config::Combine::All => "+",
                    config::Combine::Any => "|",
                }),
            }
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

#[cfg(test)]
mod tests {
    /// The config `sluice bench` starts `sluice run` with (runs A and A2) is one the
    /// appliance accepts: one NAT VIP, two-arm, the flow cache and flood mode as asked.
    #[test]
    fn bench_config_is_valid_and_two_arm() {
        for (flow_cache, flood) in [(false, true), (true, true), (false, false), (true, false)] {
            let dir = std::env::temp_dir().join(format!(
                "sluice-bench-test-{}-{flow_cache}-{flood}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).expect("tmp dir");
            let path = dir.join("sluice.toml");
            let text = bench::appliance_config(&dir.join("api.sock"), true, flow_cache, flood);
            std::fs::write(&path, text).expect("write");
            let cfg = sluice::config::load_with_env(&path, Vec::new());
            let _ = std::fs::remove_dir_all(&dir);
            let cfg = cfg.expect("the bench config validates");
            assert_eq!(cfg.appliance.interfaces, ["eth0", "eth1"]);
            assert_eq!(cfg.vips.len(), 1);
            let v = &cfg.vips[0];
            assert_eq!(v.address, std::net::IpAddr::V4(bench::VIP));
            assert_eq!(v.port, bench::PORT);
            assert_eq!(v.mode, sluice::config::Mode::Nat);
            assert_eq!(v.backends.len(), 1);
            assert_eq!(v.backends[0].address, std::net::IpAddr::V4(bench::BACKEND));
            assert_eq!(cfg.api.metrics, None, "no metrics listener in the bench");
            assert!(cfg.appliance.busy_poll);
            assert_eq!(cfg.appliance.flow_cache, flow_cache);
            assert_eq!(cfg.flood.enabled, flood);
        }
    }
}
