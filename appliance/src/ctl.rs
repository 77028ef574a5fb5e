//! `sluice ctl`: the command line over the local API, like `ipvsadm -L -n` but readable.
//! Human tables by default, the API's JSON with `--json` for scripts. The documents, the
//! write calls and the spelling of numbers, durations and addresses are the `api` crate's,
//! shared with the console; this file is the command line's tables around them.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use api::fmt::{bytes, duration, mode, percent, ratio, si, vip_addr};
use api::{ApiError, Client, ClientError};

pub mod list;

pub use list::ListKind;

/// One `sluice ctl` command: a read, or a change the API makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CtlCommand {
    Status,
    /// A page of the VIPs (every one with the default page).
    Vips(api::Page),
    Backends {
        vip: String,
    },
    /// A VIP's outbound range and shares, with each backend's nft lines.
    Outbound {
        vip: String,
    },
    Events {
        since: u64,
    },
    Bgp,
    Metrics,
    /// Services and backends like `ipvsadm -L -n`; `interval` between the two samples of
    /// `--rate`.
    List {
        kind: ListKind,
        interval: std::time::Duration,
    },
    /// Drain, undrain, disable, enable, weight, withdraw, announce, reload.
    Send(api::Command),
}

/// What went wrong; [`CtlError::code`] is the exit code for it.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// The API refused the request.
    #[error("{}", refusal(*.status, .error))]
    Refused { status: u16, error: ApiError },
    /// The appliance could not be reached, or answered garbage.
    #[error(transparent)]
    Client(ClientError),
}

impl CtlError {
    /// 1: the API refused; 2: the appliance could not be reached or answered garbage.
    pub fn code(&self) -> u8 {
        match self {
            CtlError::Refused { .. } => 1,
            CtlError::Client(_) => 2,
        }
    }
}

impl From<ClientError> for CtlError {
    fn from(e: ClientError) -> CtlError {
        match e {
            ClientError::Api { status, error } => CtlError::Refused { status, error },
            other => CtlError::Client(other),
        }
    }
}

/// `error (404): no VIP named "x" [field: vip]`, then every error of a rejected config.
fn refusal(status: u16, error: &ApiError) -> String {
    let mut message = format!("error ({status}): {}", error.error);
    if let Some(f) = &error.field {
        let _ = write!(message, " [field: {f}]");
    }
    for x in &error.errors {
        let _ = write!(message, "\n  {x}");
    }
    message
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// Runs `cmd` against `client`; returns what to print.
pub async fn run(client: &Client, cmd: CtlCommand, json: bool) -> Result<String, CtlError> {
    Ok(match cmd {
        CtlCommand::Status => {
            let s = client.status().await?;
            if json { to_json(&s) } else { format_status(&s) }
        }
        CtlCommand::Vips(page) => {
            let v = client.vips_page(&page).await?;
            if json {
                to_json(&v)
            } else {
                let mut out = format_vips(&v);
                if page.limit.is_some_and(|l| l > 0 && v.len() == l) {
                    let _ = writeln!(out, "(more may follow: --offset {})", page.offset + v.len());
                }
                out
            }
        }
        CtlCommand::Backends { vip } => {
            let b = client.backends(&vip).await?;
            if json {
                to_json(&b)
            } else {
                format_backends(&vip, &b)
            }
        }
        CtlCommand::Outbound { vip } => {
            let o = client.outbound(&vip).await?;
            if json {
                to_json(&o)
            } else {
                format_outbound(&o)
            }
        }
        CtlCommand::Send(command) => {
            let c = client.send(&command).await?;
            if json { to_json(&c) } else { format_commit(&c) }
        }
        CtlCommand::Events { since } => {
            let e = client.events(since).await?;
            if json { to_json(&e) } else { format_events(&e) }
        }
        CtlCommand::Bgp => {
            let b = client.bgp().await?;
            if json { to_json(&b) } else { format_bgp(&b) }
        }
        CtlCommand::Metrics => client.metrics().await?,
        CtlCommand::List { kind, interval } => list(client, kind, interval, json).await?,
    })
}

/// A VIP's outbound range, then per backend its ports and the commands to run on it.
fn format_outbound(o: &api::Outbound) -> String {
    let mut out = format!(
        "VIP {} {} {}: outbound ports {} (drain {})",
        o.vip,
        o.protocol,
        o.address,
        o.range,
        duration(o.drain_seconds.round() as u64)
    );
    if let Some(s) = o.drain_ends_in_seconds {
        let _ = write!(
            out,
            ", draining: the shares settle in {}",
            duration(s.ceil() as u64)
        );
    }
    out.push('\n');
    for b in &o.backends {
        match &b.ports {
            Some(p) => {
                let _ = writeln!(out, "\n# backend {}: ports {p}", b.address);
                for line in &b.snat {
                    let _ = writeln!(out, "{line}");
                }
            }
            None => {
                let _ = writeln!(out, "\n# backend {}: no ports now", b.address);
            }
        }
    }
    out
}

/// Every VIP with its backends, in ipvsadm's order.
async fn services(client: &Client) -> Result<Vec<list::Service>, CtlError> {
    let mut out = Vec::new();
    for vip in client.vips().await? {
        let backends = client.backends(&vip.name).await?;
        out.push(list::Service { vip, backends });
    }
    Ok(list::sorted(out))
}

async fn list(
    client: &Client,
    kind: ListKind,
    interval: std::time::Duration,
    json: bool,
) -> Result<String, CtlError> {
    let status = client.status().await?;
    let first = services(client).await?;
    Ok(match kind {
        _ if json && kind != ListKind::Rate => to_json(&first),
        ListKind::Conns => list::format_list(&status, &first),
        ListKind::Stats => list::format_stats(&status, &first),
        ListKind::Rate => {
            let started = std::time::Instant::now();
            tokio::time::sleep(interval).await;
            let second = services(client).await?;
            let seconds = started.elapsed().as_secs_f64();
            if json {
                to_json(&list::rates(&first, &second, seconds))
            } else {
                list::format_rate(&status, &first, &second, seconds)
            }
        }
    })
}

/// Left-aligned columns, two spaces apart.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < w.len() {
                w[i] = w[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                let _ = write!(s, "{c:<width$}  ", width = w[i]);
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// The kernel's losses at an interface's AF_XDP sockets in words; `None` while there are none.
fn socket_drops(d: &api::SocketDrops) -> Option<String> {
    let parts: Vec<String> = [
        ("receive ring full", d.rx_ring_full),
        ("fill ring empty", d.rx_fill_ring_empty),
        ("dropped", d.rx_dropped),
        ("invalid rx descriptors", d.rx_invalid),
        ("invalid tx descriptors", d.tx_invalid),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(what, n)| format!("{what} {}", count(*n)))
    .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// A count, short: `950`, `12.3k`, `4.56M`.
fn count(n: u64) -> String {
    si(Some(n as f64))
}

pub fn format_status(s: &api::Status) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "appliance   {} (sluice {})", s.appliance, s.release);
    let _ = writeln!(o, "uptime      {}", duration(s.uptime_seconds));
    let _ = writeln!(o, "config      {}", s.config_path);
    let sync = if s.synced {
        match s.sync_lag_ms {
            Some(l) => format!(
                "all {} workers run it (synced in {l:.1} ms)",
                s.workers.len()
            ),
            None => format!("all {} workers run it", s.workers.len()),
        }
    } else {
        let behind = s
            .workers
            .iter()
            .filter(|w| w.version < s.config_version)
            .count();
        format!("{behind} of {} workers behind", s.workers.len())
    };
    let _ = writeln!(o, "version     {} ({sync})", s.config_version);
    for i in &s.interfaces {
        let _ = writeln!(
            o,
            "interface   {} xdp {} af_xdp {} queues {}{}{}",
            i.name,
            i.xdp_mode,
            if i.zero_copy { "zero-copy" } else { "copy" },
            i.queues,
            match &i.zero_copy_refused {
                Some(why) => format!(" (zero-copy refused: {why})"),
                None => String::new(),
            },
            match i.state.as_str() {
                "" => String::new(),
                _ => format!(" · {}", i.state_detail),
            }
        );
        if let Some(lost) = socket_drops(&i.socket_drops) {
            let _ = writeln!(o, "            lost at its sockets: {lost}");
        }
    }
    let t = &s.totals;
    let _ = writeln!(
        o,
        "packets     rx {} tx {} passed {} dropped {}",
        count(t.rx_packets),
        count(t.tx_packets),
        count(t.passed_packets),
        count(t.dropped_packets)
    );
    let _ = writeln!(
        o,
        "conntrack   {} of {} entries, {} fallbacks",
        s.conntrack_entries, s.conntrack_capacity, s.conntrack_fallbacks
    );
    let drops: Vec<String> = s
        .drops
        .iter()
        .filter(|d| d.value > 0)
        .map(|d| format!("{} {}", d.name, d.value))
        .collect();
    if !drops.is_empty() {
        let _ = writeln!(o, "drops       {}", drops.join(", "));
    }
    let _ = writeln!(
        o,
        "bgp         {}",
        if s.bgp { "configured" } else { "off" }
    );
    if let Some(y) = &s.sync {
        sync_lines(&mut o, y);
    }
    o
}

/// `sluice ctl status`'s connection-sync lines.
fn sync_lines(o: &mut String, y: &api::SyncStatus) {
    let _ = writeln!(
        o,
        "sync        {}; standby {} entries ({} taken over); records sent {} received {}; \
         ended sent {} received {}; lag {} ms",
        if y.catching_up {
            "catching up (VIPs held)"
        } else {
            "caught up"
        },
        y.standby_entries,
        y.standby_taken,
        y.records_sent,
        y.records_received,
        y.ended_sent,
        y.ended_received,
        y.lag_ms
    );
    let refused = y.auth_failures + y.garbage + y.replays + y.unknown_peer;
    if refused + y.left_out > 0 {
        let _ = writeln!(
            o,
            "sync        refused: auth {} garbage {} replay {} unknown peer {}; left out {}",
            y.auth_failures, y.garbage, y.replays, y.unknown_peer, y.left_out
        );
    }
}

pub fn format_vips(vips: &[api::Vip]) -> String {
    let rows: Vec<Vec<String>> = vips
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                vip_addr(v),
                mode(v),
                v.scheduler.clone(),
                if v.withdrawn_by_operator {
                    "withdrawn (operator)".into()
                } else if v.announced {
                    "announced".into()
                } else {
                    "-".into()
                },
                format!("{}/{}", v.backends_eligible, v.backends_total),
                count(v.packets),
                bytes(v.bytes),
                count(v.new_flows),
                v.active_flows.to_string(),
                ratio(v.hash_imbalance),
            ]
        })
        .collect();
    table(
        &[
            "VIP", "ADDRESS", "MODE", "SCHED", "BGP", "UP", "PKTS", "BYTES", "NEW", "FLOWS",
            "IMBAL",
        ],
        &rows,
    )
}

/// A VIP's backends; a tenant VIP's with a VTEP column (the underlay address of each
/// backend's host), which the underlay's VIPs do not have.
pub fn format_backends(vip: &str, b: &[api::Backend]) -> String {
    let vteps = b.iter().any(|b| b.vtep.is_some());
    let fleet = b.iter().any(|b| b.fleet_health.is_some());
    let rows: Vec<Vec<String>> = b
        .iter()
        .map(|b| {
            let mut state = b.state.clone();
            if b.state_overridden {
                state.push('*');
            }
            let mut weight = b.weight.to_string();
            if b.weight_overridden {
                weight.push('*');
            }
            let health = match &b.health_reason {
                Some(r) if b.health != "up" => format!("{} ({r})", b.health),
                _ => b.health.clone(),
            };
            let mut row = vec![b.id.clone()];
            if vteps {
                row.push(b.vtep.clone().unwrap_or_else(|| "-".into()));
            }
            row.extend([state, health]);
            if fleet {
                row.push(b.fleet_health.clone().unwrap_or_else(|| "-".into()));
            }
            row.extend([
                weight,
                percent(b.ring_share),
                percent(b.ideal_share),
                b.active_flows.to_string(),
                count(b.packets),
                bytes(b.bytes),
            ]);
            row
        })
        .collect();
    let mut header = vec!["BACKEND"];
    if vteps {
        header.push("VTEP");
    }
    header.extend(["STATE", "HEALTH"]);
    if fleet {
        header.push("FLEET");
    }
    header.extend(["WEIGHT", "RING", "IDEAL", "FLOWS", "PKTS", "BYTES"]);
    let mut out = format!("VIP {vip}\n");
    out.push_str(&table(&header, &rows));
    if fleet {
        out.push_str(
            "HEALTH: this member's own probes; FLEET: the fleet's verdict (quorum of the live \
             members), which the ring follows\n",
        );
    }
    if b.iter().any(|b| b.state_overridden || b.weight_overridden) {
        out.push_str("* set through the API (overrides the config file until undone)\n");
    }
    out
}

pub fn format_commit(c: &api::Commit) -> String {
    format!(
        "{}\nversion {} {}\n",
        c.message,
        c.version,
        if c.synced {
            "running on every worker"
        } else {
            "published; some workers have not picked it up yet"
        }
    )
}

pub fn format_events(e: &[api::Event]) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let rows: Vec<Vec<String>> = e
        .iter()
        .map(|e| {
            vec![
                e.seq.to_string(),
                format!("{} ago", duration(now.saturating_sub(e.time_ms) / 1000)),
                e.kind.clone(),
                e.message.clone(),
            ]
        })
        .collect();
    table(&["SEQ", "WHEN", "KIND", "EVENT"], &rows)
}

pub fn format_bgp(b: &api::Bgp) -> String {
    if !b.enabled {
        return "bgp: not configured\n".into();
    }
    let mut out = format!(
        "asn {} router-id {}\nannounced: {}\n",
        b.asn.unwrap_or(0),
        b.router_id.clone().unwrap_or_default(),
        if b.announced.is_empty() {
            "-".to_string()
        } else {
            b.announced.join(", ")
        }
    );
    let rows: Vec<Vec<String>> = b
        .peers
        .iter()
        .map(|p| {
            vec![
                p.address.clone(),
                p.asn.to_string(),
                p.state.clone(),
                p.uptime_seconds.map(duration).unwrap_or_else(|| "-".into()),
                p.prefixes_announced.to_string(),
                p.bfd.clone().unwrap_or_else(|| "-".into()),
                p.flaps.to_string(),
                p.last_error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "PEER",
            "ASN",
            "STATE",
            "UPTIME",
            "SENT",
            "BFD",
            "FLAPS",
            "LAST ERROR",
        ],
        &rows,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let t = table(
            &["A", "BB"],
            &[
                vec!["xxx".into(), "1".into()],
                vec!["y".into(), "22".into()],
            ],
        );
        assert_eq!(t, "A    BB\nxxx  1\ny    22\n");
    }

    #[test]
    fn numbers_are_spelled_as_in_the_console() {
        assert_eq!(count(999), "999");
        assert_eq!(count(1_500), "1.50k");
        assert_eq!(count(2_500_000), "2.50M");
        assert_eq!(bytes(2048), "2.0KiB");
        assert_eq!(duration(3725), "1h 02m");
        assert_eq!(duration(303), "5m 03s");
    }

    /// A tenant VIP's address shows its VNI, its backends their VTEP in a column of their
    /// own; the underlay's tables have no such column.
    #[test]
    fn tenant_vips_show_their_vni_and_backends_their_vtep() {
        let d: serde_json::Value =
            serde_json::from_str(include_str!("ctl/golden/documents.json")).expect("documents");
        let s: list::Service = serde_json::from_value(d["after"][0].clone()).expect("service");
        let plain = format_backends("web", &s.backends);
        assert!(plain.starts_with("VIP web\nBACKEND "), "{plain}");
        assert!(!plain.contains("VTEP"), "{plain}");
        let mut v = s.vip.clone();
        v.tenant_vni = Some(100);
        let vips = format_vips(&[s.vip.clone(), v]);
        assert!(vips.contains("192.0.2.10:80/tcp vni 100  "), "{vips}");
        let mut b = s.backends.clone();
        b[0].vtep = Some("10.9.0.1".into());
        let t = format_backends("t100", &b);
        let mut lines = t.lines().skip(1);
        let head = lines.next().unwrap_or_default();
        assert!(head.starts_with("BACKEND         VTEP      STATE"), "{t}");
        let first = lines.next().unwrap_or_default();
        assert!(first.starts_with("10.1.0.12:8080  10.9.0.1  active"), "{t}");
        assert!(
            lines.next().unwrap_or_default().contains("  -         "),
            "{t}"
        );
    }

    /// On a fleet member the backends show whose verdict is which: the member's own
    /// probes under HEALTH, the fleet's (which the ring follows) under FLEET.
    #[test]
    fn a_fleet_member_shows_its_own_and_the_fleets_health() {
        let d: serde_json::Value =
            serde_json::from_str(include_str!("ctl/golden/documents.json")).expect("documents");
        let s: list::Service = serde_json::from_value(d["after"][0].clone()).expect("service");
        let mut b = s.backends.clone();
        b[0].health = "down".into();
        b[0].health_reason = None;
        b[0].fleet_health = Some("up".into());
        let t = format_backends("web", &b);
        let mut lines = t.lines().skip(1);
        let head = lines.next().unwrap_or_default();
        assert!(
            head.starts_with("BACKEND         STATE   HEALTH  FLEET"),
            "{t}"
        );
        let first = lines.next().unwrap_or_default();
        assert!(
            first.starts_with("10.1.0.12:8080  active  down    up "),
            "{t}"
        );
        assert!(t.contains("the fleet's verdict"), "{t}");
    }

    #[test]
    fn refusals_name_the_field_and_every_error() {
        let e = CtlError::from(ClientError::Api {
            status: 422,
            error: ApiError {
                error: "config rejected".into(),
                field: Some("config".into()),
                errors: vec!["vips[0].port: 0".into()],
            },
        });
        assert_eq!(e.code(), 1);
        assert_eq!(
            e.to_string(),
            "error (422): config rejected [field: config]\n  vips[0].port: 0"
        );
        let e = CtlError::from(ClientError::Timeout(std::time::Duration::from_secs(1)));
        assert_eq!(e.code(), 2);
    }

    #[test]
    fn status_shows_sync_and_what_it_refused() {
        let mut y = api::SyncStatus {
            catching_up: true,
            standby_entries: 12,
            standby_taken: 3,
            records_sent: 40,
            records_received: 12,
            ..Default::default()
        };
        let mut o = String::new();
        sync_lines(&mut o, &y);
        assert_eq!(
            o,
            "sync        catching up (VIPs held); standby 12 entries (3 taken over); records \
             sent 40 received 12; ended sent 0 received 0; lag 0 ms\n"
        );
        y.auth_failures = 5;
        let mut o = String::new();
        sync_lines(&mut o, &y);
        assert!(
            o.ends_with("refused: auth 5 garbage 0 replay 0 unknown peer 0; left out 0\n"),
            "{o}"
        );
    }

    #[test]
    fn status_names_what_the_kernel_lost_at_the_sockets() {
        let mut d = api::SocketDrops::default();
        assert_eq!(socket_drops(&d), None, "no line while nothing was lost");
        d.rx_ring_full = 1500;
        d.tx_invalid = 2;
        assert_eq!(
            socket_drops(&d).as_deref(),
            Some("receive ring full 1.50k, invalid tx descriptors 2")
        );
    }
}
