//! The `sluice` command line's grammar: every command, argument and help text, in one
//! place, so the man pages (`sluice man`) and the shell completions (`sluice completions`)
//! are generated from the same definitions the parser uses and cannot drift from them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::api_args::ApiArgs;
use crate::bench_cmd;
use sluice::config;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: a layer-4 load-balancer appliance"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Validate a configuration file and print a summary, or every error it has.
    Check {
        /// Configuration file.
        #[arg(long, short, default_value = config::DEFAULT_PATH)]
        config: PathBuf,
        /// Print a key's entry of the configuration reference (type, default, example,
        /// what it does) instead of checking a file: `vip.backend.weight`, or a path as an
        /// error names it (`vip "web".backend[0].weight`); a table lists its keys.
        #[arg(long, value_name = "KEY")]
        explain: Option<String>,
    },
    /// Bring the datapath up and forward until SIGTERM or SIGINT; SIGHUP reloads.
    Run {
        /// Configuration file.
        #[arg(long, short, default_value = config::DEFAULT_PATH)]
        config: PathBuf,
        /// Take over from the appliance running on this config: its connections, XDP
        /// program and flow cache go on in this process, without a reset (an upgrade or a
        /// restart); the old process exits once this one forwards.
        #[arg(long)]
        takeover: bool,
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
        /// The VXLAN VNI the flow arrives with: trace it to the tenant VIP (tenant_vni) of
        /// that VNI. Without it only the underlay's VIPs match.
        #[arg(long, value_parser = clap::value_parser!(u32).range(0..=0xff_ffff))]
        vni: Option<u32>,
        /// A QUIC datagram's destination connection ID (hex) on a quic_lb VIP: which
        /// backend its server ID names, or the fallback and why.
        #[arg(long)]
        cid: Option<String>,
    },
    /// QUIC-LB (quic_lb VIPs): the configuration their QUIC servers need.
    #[command(name = "quic-lb", subcommand)]
    QuicLb(crate::quiclb_cmd::QuicLbCommand),
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
        /// After the traffic report, open the console on lb1 and keep the lab up until it
        /// quits (q).
        #[arg(long)]
        console: bool,
        /// Run the appliances without the XDP flow cache (pure AF_XDP)
        #[arg(long)]
        no_flow_cache: bool,
    },
    /// Talk to the running appliance through its local API: status, VIPs, backends, drain,
    /// weights, reload, events.
    Ctl {
        #[command(flatten)]
        api: ApiArgs,
        /// Print the API's JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        command: CtlCmd,
    },
    /// Capture the frames of a VIP (or of endpoints) as the running appliance received and
    /// sent them, where tcpdump cannot see them: in its XDP program and its AF_XDP engine.
    /// Writes pcapng with an interface per stage (xdp-in, xdp-out, engine-in, engine-out),
    /// or prints a line per frame.
    Capture(crate::capture_cmd::CaptureArgs),
    /// Turn another load balancer's configuration into a commented sluice.toml.
    Import {
        #[command(subcommand)]
        from: ImportFrom,
    },
    /// A fleet of appliances driven by etcd ([fleet] in the member file): push the fleet's
    /// configuration, or show every member's version, readiness, sync lag and health
    /// disagreements.
    Fleet {
        /// A member's configuration file (its [fleet] says where etcd is).
        #[arg(long, short, global = true, default_value = config::DEFAULT_PATH)]
        config: PathBuf,
        /// Print JSON instead of a table (status), before or after the subcommand.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        command: FleetCmd,
    },
    /// The terminal console: VIPs, backends, health, BGP and events, with actions. Talks to
    /// the running appliance through its local API only.
    Console {
        #[command(flatten)]
        api: ApiArgs,
        /// No colours (also when NO_COLOR is set).
        #[arg(long)]
        no_color: bool,
        /// Refresh interval, e.g. 1s or 500ms.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        refresh: std::time::Duration,
    },
    /// Packet-rate benchmark (root): 64-byte UDP to a VIP over veth, Sluice against kernel
    /// forwarding with nftables DNAT on the same namespaces, side by side. With --cps, the
    /// connection-rate bench; with --idle, the idle appliance's CPU.
    Bench(bench_cmd::BenchArgs),
    /// Write the manual pages generated from this command line: sluice(8) and one page per
    /// subcommand (sluice-ctl-drain(8), ...), into DIR (the image installs them under
    /// /usr/share/man/man8).
    Man {
        /// Directory to write the pages into (created when missing).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// Print the shell completion script for SHELL on standard output, e.g.
    /// `sluice completions bash > /usr/share/bash-completion/completions/sluice`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The appliance image's two system slots (A/B): write an update bundle into the slot
    /// that is not running, or show which slot runs and what became of the other.
    Image {
        #[command(subcommand)]
        command: ImageCmd,
    },
}

#[derive(Subcommand)]
pub enum ImageCmd {
    /// Write BUNDLE (the signed sluice-update-*.tar image/build.sh writes: a file, a block
    /// device, or an http:// or https:// URL, streamed) into the other slot; the next boot
    /// tries it and falls back by itself.
    Update {
        bundle: String,
        /// The bundle's sha256 as published next to it, checked before the boot entry is
        /// written.
        #[arg(long)]
        sha256: Option<String>,
        /// Boots the new slot gets to reach sluice ready before systemd-boot gives up on it.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=9))]
        tries: u32,
        /// Install a bundle that no key in /usr/lib/sluice/update-keys signed (labs only:
        /// anyone who can change the bundle on its way then chooses what boots).
        #[arg(long)]
        allow_unsigned: bool,
        /// The CA certificates (PEM) an https mirror's certificate must chain to, instead of
        /// the system's.
        #[arg(long)]
        ca_file: Option<PathBuf>,
        /// A download fails when no byte arrives for this long.
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        idle_timeout: std::time::Duration,
        /// A download fails when its body takes longer than this.
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        download_timeout: std::time::Duration,
        /// Reboot into it once written.
        #[arg(long)]
        reboot: bool,
    },
    /// The running slot, the other slot's state, the last failed trial boot.
    Status,
}

#[derive(Subcommand)]
pub enum ImportFrom {
    /// keepalived.conf's virtual_server blocks as [[vip]]s; prints what it could not carry
    /// over on stderr (and as comments in the output).
    Keepalived {
        /// The keepalived.conf to read.
        file: PathBuf,
        /// Write the sluice.toml here instead of to standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Follow absolute `include` paths inside DIR (relative ones stay inside the
        /// including file's directory); repeat for several.
        #[arg(long, value_name = "DIR")]
        allow_include: Vec<PathBuf>,
    },
}

/// `sluice ctl vips`: which page of the VIPs.
#[derive(Args, Clone)]
pub struct PageArgs {
    /// Only VIPs whose name contains this text (ASCII case ignored).
    #[arg(long)]
    name: Option<String>,
    /// VIPs to skip (after the filter).
    #[arg(long, default_value_t = 0)]
    offset: usize,
    /// Most VIPs to show.
    #[arg(long)]
    limit: Option<usize>,
}

impl From<PageArgs> for api::Page {
    fn from(a: PageArgs) -> api::Page {
        api::Page {
            offset: a.offset,
            limit: a.limit,
            name: a.name,
        }
    }
}

#[derive(Subcommand, Clone)]
pub enum FleetCmd {
    /// Validate FILE (the fleet's [[vip]], [[health_check]] and [flood]) merged with the
    /// member file, then write it to etcd as the fleet's next version.
    Push {
        file: PathBuf,
        /// Then wait up to this many seconds until every live member runs it.
        #[arg(long)]
        wait: Option<u64>,
    },
    /// Every live member: the revision it prepared and runs, readiness, sync lag; the
    /// activation spread; backends the members' probes disagree on.
    Status,
    /// After etcd's history went back (a restore from a snapshot, a move to another
    /// cluster), which members refuse: write a new epoch, so every member follows etcd's
    /// keys as they are now and activates the config there. Check that config first.
    Rebase,
}

/// `sluice ctl datapath ...`.
#[derive(Subcommand, Clone)]
pub enum DatapathCmd {
    /// Take every datapath interface another XDP program holds back from it, in one step
    /// (the appliance names the holder in its events and stays withdrawn until then).
    Reclaim,
}

#[derive(Subcommand, Clone)]
pub enum CtlCmd {
    /// The appliance: version and sync, interfaces, totals, drops.
    Status,
    /// The VIPs with their announcement, backends, traffic and hash imbalance (every one,
    /// or a page of them).
    Vips(PageArgs),
    /// The backends of a VIP: state, health, weight, ring share, flows, traffic.
    Backends { vip: String },
    /// A DR or tunnel VIP's outbound range: each backend's ports, and the nft lines it runs.
    Outbound { vip: String },
    /// Drain a backend: it keeps its flows and takes no new ones.
    Drain { vip: String, backend: String },
    /// Undo drain.
    Undrain { vip: String, backend: String },
    /// Disable a backend: it takes nothing; its flows move to other backends.
    Disable { vip: String, backend: String },
    /// Undo disable.
    Enable { vip: String, backend: String },
    /// Set a backend's weight (0..=65535).
    Weight {
        vip: String,
        backend: String,
        weight: u32,
    },
    /// Withdraw a VIP from BGP.
    Withdraw { vip: String },
    /// Announce a withdrawn VIP again.
    Announce { vip: String },
    /// Reload the config file (like SIGHUP); a bad file is rejected with every error.
    Reload,
    /// The datapath: `reclaim` takes the interfaces another XDP program holds back.
    #[command(subcommand)]
    Datapath(DatapathCmd),
    /// Recent events (health, BGP, commits, operator actions, drops).
    Events {
        /// Only events after this sequence number.
        #[arg(long, default_value_t = 0)]
        since: u64,
    },
    /// Services and backends like `ipvsadm -L -n` (Forward, Weight, ActiveConn, InActConn).
    List {
        /// ipvsadm's --stats: connections, packets and bytes since start.
        #[arg(long, conflicts_with = "rate")]
        stats: bool,
        /// ipvsadm's --rate: per second, from two samples --interval apart.
        #[arg(long)]
        rate: bool,
        /// Time between the two samples of --rate.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        interval: std::time::Duration,
    },
    /// BGP peers and announced prefixes.
    Bgp,
    /// The Prometheus exposition.
    Metrics,
}
