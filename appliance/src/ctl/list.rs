//! `sluice ctl list`: the VIPs and their backends in the shape `ipvsadm -L -n` prints them,
//! for operators (and their scripts) who read LVS tables: a service line per VIP
//! (`TCP  192.0.2.10:80 wlc persistent 300`), a `  -> address:port Forward Weight ActiveConn
//! InActConn` line per backend, and ipvsadm's `--stats` and `--rate` columns. Sluice's names
//! map to ipvsadm's (maglev is `mh`, nat `Masq`, dr `Route`, tunnel `Tunnel`); FullNAT, which
//! LVS lacks, is `FullNat`. Figures the appliance does not count are `-`.

use std::cmp::Ordering;
use std::fmt::Write as _;
use std::net::IpAddr;

/// Which numbers the list shows: ipvsadm's connection counts, `--stats` or `--rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Conns,
    Stats,
    Rate,
}

/// One VIP and its backends, as the API documents them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Service {
    pub vip: api::Vip,
    pub backends: Vec<api::Backend>,
}

/// `Sluice 0.1.0 on lb1 (config version 7, 3 services)`: ipvsadm's version line.
fn version_line(status: &api::Status, n: usize) -> String {
    format!(
        "Sluice {} on {} (config version {}, {n} service{})\n",
        status.release,
        status.appliance,
        status.config_version,
        if n == 1 { "" } else { "s" }
    )
}

/// `192.0.2.10:80`, `[2001:db8::10]:80`; ipvsadm prints port 0 (every port) as `:0`.
fn addr(address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// `TCP  192.0.2.10:80` (ipvsadm's `%-4s %s`).
fn service_name(v: &api::Vip) -> String {
    format!(
        "{:<4} {}",
        v.protocol.to_uppercase(),
        addr(&v.address, v.port)
    )
}

/// ` vni 100` at the end of a tenant VIP's service line: LVS has no tenants, and two of
/// them may have the same address; the VNI tells their services apart. After ipvsadm's
/// fields, so its parsers still read them.
fn vni(v: &api::Vip) -> String {
    v.tenant_vni
        .map(|n| format!(" vni {n}"))
        .unwrap_or_default()
}

/// ` vtep 192.0.2.50` at the end of a tenant VIP's backend line (the underlay address of
/// the backend's host).
fn vtep(b: &api::Backend) -> String {
    b.vtep
        .as_ref()
        .map(|a| format!(" vtep {a}"))
        .unwrap_or_default()
}

/// ipvsadm's forwarding names; FullNAT has none in LVS.
pub fn forward(mode: &str) -> &'static str {
    match mode {
        "nat" => "Masq",
        "dr" => "Route",
        "tunnel" => "Tunnel",
        "fullnat" => "FullNat",
        _ => "?",
    }
}

/// The scheduler as ipvsadm names it, with its flags: Sluice's Maglev is IPVS's `mh`, with
/// `mh-port` when the VIP hashes the client's port (the 5-tuple).
pub fn scheduler(v: &api::Vip) -> (String, Vec<String>) {
    if v.scheduler == "maglev" {
        let flags = if v.hash == "5-tuple" {
            vec!["mh-port".to_string()]
        } else {
            Vec::new()
        };
        return ("mh".into(), flags);
    }
    (v.scheduler.clone(), v.scheduler_flags.clone())
}

/// ` persistent 300 mask 255.255.255.0`, ` ops`: what follows the scheduler.
fn service_flags(v: &api::Vip) -> String {
    let mut s = String::new();
    let (_, flags) = scheduler(v);
    if !flags.is_empty() {
        let _ = write!(s, " ({})", flags.join(","));
    }
    if let Some(t) = v.persistence_seconds {
        let _ = write!(s, " persistent {t}");
        let v6 = v.address.contains(':');
        match v.persistence_netmask {
            Some(m) if !v6 && m < 32 => {
                let mask =
                    std::net::Ipv4Addr::from(u32::MAX.checked_shl(32 - u32::from(m)).unwrap_or(0));
                let _ = write!(s, " mask {mask}");
            }
            Some(m) if v6 && m < 128 => {
                let _ = write!(s, " mask {m}");
            }
            _ => {}
        }
    }
    if v.udp_one_packet {
        s.push_str(" ops");
    }
    s
}

/// The weight new flows see: 0 while the backend takes none (drained, disabled or
/// unhealthy), as IPVS shows a quiesced real server.
fn weight(b: &api::Backend) -> u32 {
    if b.eligible { b.weight } else { 0 }
}

fn by_address(a: &str, ap: u16, b: &str, bp: u16) -> Ordering {
    match (a.parse::<IpAddr>(), b.parse::<IpAddr>()) {
        (Ok(x), Ok(y)) => (x, ap).cmp(&(y, bp)),
        _ => (a, ap).cmp(&(b, bp)),
    }
}

/// Services by protocol, address and port (tenants' VIPs on one address after the
/// underlay's, by VNI), backends by address and port (ipvsadm's order).
pub fn sorted(mut services: Vec<Service>) -> Vec<Service> {
    services.sort_by(|a, b| {
        a.vip
            .protocol
            .cmp(&b.vip.protocol)
            .then_with(|| by_address(&a.vip.address, a.vip.port, &b.vip.address, b.vip.port))
            .then_with(|| a.vip.tenant_vni.cmp(&b.vip.tenant_vni))
    });
    for s in &mut services {
        s.backends
            .sort_by(|a, b| by_address(&a.address, a.port, &b.address, b.port));
    }
    services
}

/// `ipvsadm -L -n`.
pub fn format_list(status: &api::Status, services: &[Service]) -> String {
    let mut o = version_line(status, services.len());
    o.push_str("Prot LocalAddress:Port Scheduler Flags\n");
    o.push_str("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n");
    for s in services {
        let (sched, _) = scheduler(&s.vip);
        let _ = writeln!(
            o,
            "{} {sched}{}{}",
            service_name(&s.vip),
            service_flags(&s.vip),
            vni(&s.vip)
        );
        for b in &s.backends {
            let line = format!(
                "  -> {:<28} {:<7} {:<6} {:<10} {:<10}{}",
                addr(&b.address, b.port),
                forward(&s.vip.mode),
                weight(b),
                b.active_connections,
                b.inactive_connections,
                vtep(b)
            );
            let _ = writeln!(o, "{}", line.trim_end());
        }
    }
    o
}

/// ipvsadm's `print_largenum`: right-aligned in 9, with K/M/G/T past 100 million.
fn large(v: Option<u64>) -> String {
    let Some(i) = v else {
        return format!("{:>9}", "-");
    };
    match i {
        0..100_000_000 => format!("{i:>9}"),
        100_000_000..1_000_000_000 => format!("{:>8}K", i / 1_000),
        1_000_000_000..100_000_000_000 => format!("{:>8}M", i / 1_000_000),
        100_000_000_000..100_000_000_000_000 => format!("{:>8}G", i / 1_000_000_000),
        _ => format!("{:>8}T", i / 1_000_000_000_000),
    }
}

/// The five counters of a `--stats` or `--rate` line.
type Five = [Option<u64>; 5];

/// Whether the appliance sees the replies (NAT and FullNAT), and so counts both directions
/// in one figure; DR and tunnel replies bypass it, so every packet it counts is inbound.
fn two_way(mode: &str) -> bool {
    matches!(mode, "nat" | "fullnat")
}

/// Conns, InPkts, OutPkts, InBytes, OutBytes from running totals; `None` where Sluice
/// does not count the figure.
fn split(mode: &str, conns: Option<u64>, packets: u64, bytes: u64) -> Five {
    if two_way(mode) {
        [conns, Some(packets), None, Some(bytes), None]
    } else {
        [conns, Some(packets), Some(0), Some(bytes), Some(0)]
    }
}

fn numbers_table(
    status: &api::Status,
    services: &[Service],
    heads: [&str; 5],
    row: impl Fn(&Service, Option<&api::Backend>) -> Five,
) -> String {
    let mut o = version_line(status, services.len());
    let _ = writeln!(
        o,
        "{:<33} {:>8} {:>8} {:>8} {:>8} {:>8}\n  -> RemoteAddress:Port",
        "Prot LocalAddress:Port", heads[0], heads[1], heads[2], heads[3], heads[4]
    );
    for s in services {
        let nums: String = row(s, None).iter().map(|n| large(*n)).collect();
        let _ = writeln!(o, "{:<33}{nums}{}", service_name(&s.vip), vni(&s.vip));
        for b in &s.backends {
            let nums: String = row(s, Some(b)).iter().map(|n| large(*n)).collect();
            let _ = writeln!(o, "  -> {:<28}{nums}{}", addr(&b.address, b.port), vtep(b));
        }
    }
    if services.iter().any(|s| two_way(&s.vip.mode)) {
        let _ = writeln!(
            o,
            "NAT and FullNAT: In columns count both directions, Out is not counted apart (-)."
        );
    }
    o
}

/// `ipvsadm -L -n --stats`: running totals since the appliance started.
pub fn format_stats(status: &api::Status, services: &[Service]) -> String {
    numbers_table(
        status,
        services,
        ["Conns", "InPkts", "OutPkts", "InBytes", "OutBytes"],
        |s, b| match b {
            None => split(
                &s.vip.mode,
                Some(s.vip.new_flows),
                s.vip.packets,
                s.vip.bytes,
            ),
            Some(b) => split(&s.vip.mode, Some(b.new_flows), b.packets, b.bytes),
        },
    )
}

/// Per-second figures of one line between two samples: CPS, InPPS, OutPPS, InBPS, OutBPS
/// (`None`: not counted, or the service or backend is new since the first sample).
fn rate_of(before: &[Service], s: &Service, b: Option<&api::Backend>, seconds: f64) -> Five {
    let per_s = |now: u64, then: Option<u64>| {
        then.map(|t| (now.saturating_sub(t) as f64 / seconds.max(1e-3)).round() as u64)
    };
    let old = before.iter().find(|o| o.vip.name == s.vip.name);
    match b {
        None => {
            let o = old.map(|o| &o.vip);
            rate_row(
                &s.vip.mode,
                per_s(s.vip.new_flows, o.map(|v| v.new_flows)),
                per_s(s.vip.packets, o.map(|v| v.packets)),
                per_s(s.vip.bytes, o.map(|v| v.bytes)),
            )
        }
        Some(b) => {
            let o = old.and_then(|o| o.backends.iter().find(|x| x.id == b.id));
            rate_row(
                &s.vip.mode,
                per_s(b.new_flows, o.map(|x| x.new_flows)),
                per_s(b.packets, o.map(|x| x.packets)),
                per_s(b.bytes, o.map(|x| x.bytes)),
            )
        }
    }
}

/// `ipvsadm -L -n --rate`: per second between two samples `seconds` apart.
pub fn format_rate(
    status: &api::Status,
    before: &[Service],
    after: &[Service],
    seconds: f64,
) -> String {
    numbers_table(
        status,
        after,
        ["CPS", "InPPS", "OutPPS", "InBPS", "OutBPS"],
        |s, b| rate_of(before, s, b, seconds),
    )
}

/// One line of `--rate --json`: a VIP (`backend` null) or one of its backends.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rate {
    pub vip: String,
    pub backend: Option<String>,
    pub cps: Option<u64>,
    pub in_pps: Option<u64>,
    pub out_pps: Option<u64>,
    pub in_bps: Option<u64>,
    pub out_bps: Option<u64>,
}

/// The `--rate` figures as data, for `--json`.
pub fn rates(before: &[Service], after: &[Service], seconds: f64) -> Vec<Rate> {
    let row = |s: &Service, b: Option<&api::Backend>| {
        let [cps, in_pps, out_pps, in_bps, out_bps] = rate_of(before, s, b, seconds);
        Rate {
            vip: s.vip.name.clone(),
            backend: b.map(|b| b.id.clone()),
            cps,
            in_pps,
            out_pps,
            in_bps,
            out_bps,
        }
    };
    after
        .iter()
        .flat_map(|s| {
            std::iter::once(row(s, None)).chain(s.backends.iter().map(move |b| row(s, Some(b))))
        })
        .collect()
}

fn rate_row(mode: &str, cps: Option<u64>, pps: Option<u64>, bps: Option<u64>) -> Five {
    let zero = |x: Option<u64>| x.map(|_| 0);
    if two_way(mode) {
        [cps, pps, None, bps, None]
    } else {
        [cps, pps, zero(pps), bps, zero(bps)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed set of API documents: two samples one second apart.
    #[derive(serde::Deserialize)]
    struct Documents {
        status: api::Status,
        seconds: f64,
        before: Vec<Service>,
        after: Vec<Service>,
    }

    fn golden(name: &str, text: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/ctl/golden")
            .join(name);
        if std::env::var_os("SLUICE_UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, text).expect("write golden");
        }
        let want = std::fs::read_to_string(&path).expect("golden file");
        assert_eq!(text, want, "output differs from {}", path.display());
    }

    /// `ctl list`, `--stats` and `--rate` from fixed documents, against their golden files
    /// (`SLUICE_UPDATE_GOLDEN=1` rewrites them).
    #[test]
    fn list_stats_and_rate_match_their_golden_files() {
        let d: Documents =
            serde_json::from_str(include_str!("golden/documents.json")).expect("documents");
        let (before, after) = (sorted(d.before), sorted(d.after));
        golden("list.txt", &format_list(&d.status, &after));
        golden("stats.txt", &format_stats(&d.status, &after));
        golden(
            "rate.txt",
            &format_rate(&d.status, &before, &after, d.seconds),
        );
    }

    /// Two tenants' VIPs on one address: each service line ends with its VNI, each backend
    /// line with its VTEP, after ipvsadm's own fields; the underlay's lines are unchanged.
    #[test]
    fn tenant_services_end_with_their_vni_and_vteps() {
        let d: Documents =
            serde_json::from_str(include_str!("golden/documents.json")).expect("documents");
        let plain = format_list(&d.status, &sorted(d.after.clone()));
        let mut after = d.after;
        let web = after[0].clone();
        for (vni, vtep) in [(200, "10.9.0.2"), (100, "10.9.0.1")] {
            let mut t = web.clone();
            t.vip.name = format!("t{vni}");
            t.vip.mode = "tunnel".into();
            t.vip.tenant_vni = Some(vni);
            t.backends.truncate(1);
            t.backends[0].vtep = Some(vtep.into());
            after.push(t);
        }
        let list = format_list(&d.status, &sorted(after.clone()));
        for line in plain.lines().skip(1) {
            assert!(list.contains(line), "{line:?} changed:\n{list}");
        }
        let want = "TCP  192.0.2.10:80 mh (mh-port) vni 100\n  \
                    -> 10.1.0.12:8080               Tunnel  100    812        40         vtep 10.9.0.1\n\
                    TCP  192.0.2.10:80 mh (mh-port) vni 200\n  \
                    -> 10.1.0.12:8080               Tunnel  100    812        40         vtep 10.9.0.2\n";
        assert!(list.contains(want), "{list}");
        let stats = format_stats(&d.status, &sorted(after));
        let line = stats
            .lines()
            .find(|l| l.ends_with(" vni 200"))
            .unwrap_or_else(|| panic!("{stats}"));
        assert!(line.starts_with("TCP  192.0.2.10:80 "), "{line}");
        assert!(stats.contains(" vtep 10.9.0.1\n"), "{stats}");
    }

    #[test]
    fn names_flags_and_numbers_as_ipvsadm_spells_them() {
        assert_eq!(large(Some(99_999_999)), " 99999999");
        assert_eq!(large(Some(410_000_000)), "  410000K");
        assert_eq!(large(Some(350_000_000_000)), "     350G");
        assert_eq!(large(None), "        -");
        assert_eq!(forward("nat"), "Masq");
        assert_eq!(forward("dr"), "Route");
        assert_eq!(forward("tunnel"), "Tunnel");
        assert_eq!(forward("fullnat"), "FullNat");
        assert_eq!(addr("2001:db8::1", 0), "[2001:db8::1]:0");
    }
}
