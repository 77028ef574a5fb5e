//! The overview (1): the appliance, its traffic and tables at a glance, and what needs
//! attention first.

use api::Status;
use api::fmt::{bits, clock, duration, grouped, percent, si};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::widgets::{Theme, field, put};
use crate::app::App;
use crate::rates::TotalRates;

pub(super) fn overview(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let Some(s) = &app.status else {
        put(buf, Paragraph::new(" waiting for the appliance…"), area);
        return;
    };
    let mut lines = appliance(t, s);
    lines.push(Line::raw(""));
    lines.extend(traffic(t, &app.total_rates));
    lines.extend(tables(t, s));
    lines.push(Line::raw(""));
    lines.extend(service(app, t, s));
    let problems = attention(app, s);
    if !problems.is_empty() {
        lines.push(Line::raw(""));
        for (i, p) in problems.into_iter().enumerate() {
            lines.push(field(
                t,
                if i == 0 { "Attention" } else { "" },
                vec![Span::styled(p, t.warn())],
            ));
        }
    }
    put(buf, Paragraph::new(lines), area);
}

/// Name, release, uptime, config, worker sync and the interfaces.
fn appliance(t: Theme, s: &Status) -> Vec<Line<'_>> {
    let mut lines = vec![
        field(
            t,
            "Appliance",
            vec![
                Span::styled(s.appliance.as_str(), t.header()),
                Span::raw(format!(
                    " · sluice {} · up {}",
                    s.release,
                    duration(s.uptime_seconds)
                )),
            ],
        ),
        field(
            t,
            "Config",
            vec![Span::raw(format!(
                "{} · version {}",
                s.config_path, s.config_version
            ))],
        ),
    ];
    lines.push(workers(t, s));
    for (i, ifc) in s.interfaces.iter().enumerate() {
        let copy = if ifc.zero_copy {
            "zero-copy"
        } else {
            "copy mode"
        };
        let copy_style = if ifc.zero_copy { t.good() } else { t.warn() };
        lines.push(field(
            t,
            if i == 0 { "Interfaces" } else { "" },
            vec![
                Span::styled(format!("{:<10}", ifc.name), t.header()),
                Span::raw(format!("{} XDP · ", ifc.xdp_mode)),
                Span::styled(copy, copy_style),
                Span::raw(format!(
                    " · {} queue{}",
                    ifc.queues,
                    if ifc.queues == 1 { "" } else { "s" }
                )),
                Span::raw(if ifc.state.is_empty() { "" } else { " · " }),
                Span::styled(
                    ifc.state_detail.clone(),
                    if ifc.state == "forwarding" {
                        t.good()
                    } else {
                        t.bad()
                    },
                ),
            ],
        ));
    }
    lines
}

/// Whether every worker runs the config version, or which lag behind.
fn workers(t: Theme, s: &Status) -> Line<'_> {
    let lagging: Vec<String> = s
        .workers
        .iter()
        .filter(|w| w.version != s.config_version)
        .map(|w| format!("{}:v{}", w.id, w.version))
        .collect();
    field(
        t,
        "Workers",
        if s.synced {
            let lag = s
                .sync_lag_ms
                .map(|ms| format!(" · last commit reached them in {ms:.1} ms"))
                .unwrap_or_default();
            vec![
                Span::styled(
                    format!("{} run version {}", s.workers.len(), s.config_version),
                    t.good(),
                ),
                Span::raw(lag),
            ]
        } else {
            vec![Span::styled(
                format!(
                    "NOT synced: {} behind ({})",
                    lagging.len(),
                    lagging.join(" ")
                ),
                t.bad(),
            )]
        },
    )
}

/// Packet rates in, out, passed and dropped, and the VIP bit rate.
fn traffic(t: Theme, r: &TotalRates) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    lines.push(Line::styled(
        format!(
            " {:<11} {:>10} {:>10} {:>10} {:>10}",
            "Traffic", "in", "out", "passed", "dropped"
        ),
        t.header(),
    ));
    lines.push(Line::from(vec![
        Span::styled(format!(" {:<11} ", "packets/s"), t.label()),
        Span::raw(format!(
            "{:>10} {:>10} {:>10} ",
            si(r.rx_pps),
            si(r.tx_pps),
            si(r.passed_pps)
        )),
        Span::styled(
            format!("{:>10}", si(r.dropped_pps)),
            if r.dropped_pps.unwrap_or(0.0) > 0.0 {
                t.bad()
            } else {
                Style::new()
            },
        ),
    ]));
    lines.push(field(
        t,
        "VIP bits/s",
        vec![Span::raw(format!("{} (both directions)", bits(r.vip_bps)))],
    ));
    lines
}

/// The connection table, the flow cache and drops by reason.
fn tables(t: Theme, s: &Status) -> Vec<Line<'_>> {
    let mut lines = Vec::new();
    let fill = if s.conntrack_capacity > 0 {
        format!(
            " ({})",
            percent(s.conntrack_entries as f64 / s.conntrack_capacity as f64)
        )
    } else {
        String::new()
    };
    lines.push(field(
        t,
        "Conntrack",
        vec![
            Span::raw(format!(
                "{} of {} entries{fill} · ",
                grouped(s.conntrack_entries),
                grouped(s.conntrack_capacity)
            )),
            Span::styled(
                format!("{} ring fallbacks", grouped(s.conntrack_fallbacks)),
                if s.conntrack_fallbacks > 0 {
                    t.warn()
                } else {
                    Style::new()
                },
            ),
        ],
    ));
    lines.push(field(
        t,
        "Flow cache",
        vec![Span::raw(match &s.flow_cache {
            Some(c) => {
                let all = c.hits + c.misses;
                let share = if all > 0 {
                    format!(" ({} in the kernel)", percent(c.hits as f64 / all as f64))
                } else {
                    String::new()
                };
                format!(
                    "{} entries · {} hits · {} misses{share}",
                    grouped(c.entries),
                    grouped(c.hits),
                    grouped(c.misses)
                )
            }
            None => "off (every frame through the AF_XDP engine)".to_string(),
        })],
    ));
    let mut drops: Vec<_> = s.drops.iter().filter(|d| d.value > 0).collect();
    drops.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
    let drops = if drops.is_empty() {
        "none".to_string()
    } else {
        drops
            .iter()
            .map(|d| format!("{} {}", d.name, grouped(d.value)))
            .collect::<Vec<_>>()
            .join(" · ")
    };
    lines.push(field(t, "Drops", vec![Span::raw(drops)]));
    lines
}

/// VIPs, backends, BGP and the last event.
fn service<'a>(app: &'a App, t: Theme, s: &Status) -> Vec<Line<'a>> {
    let mut lines = Vec::new();
    let announced = app.vips.iter().filter(|v| v.announced).count();
    let withdrawn = app.vips.iter().filter(|v| v.withdrawn_by_operator).count();
    let healthy: u32 = app.vips.iter().map(|v| v.backends_healthy).sum();
    let total: u32 = app.vips.iter().map(|v| v.backends_total).sum();
    let mut vip_line = vec![Span::raw(format!("{}", app.vips.len()))];
    if s.bgp {
        vip_line.push(Span::raw(format!(" · {announced} announced")));
    }
    if withdrawn > 0 {
        vip_line.push(Span::raw(" · "));
        vip_line.push(Span::styled(
            format!("{withdrawn} withdrawn by an operator"),
            t.warn(),
        ));
    }
    lines.push(field(t, "VIPs", vip_line));
    lines.push(field(
        t,
        "Backends",
        vec![Span::styled(
            format!("{healthy} of {total} healthy"),
            if healthy < total { t.warn() } else { t.good() },
        )],
    ));
    if let Some(b) = app.bgp.as_ref().filter(|b| b.enabled) {
        let up = b.peers.iter().filter(|p| p.state == "Established").count();
        lines.push(field(
            t,
            "BGP",
            vec![
                Span::raw(format!("AS {} · ", b.asn.unwrap_or(0))),
                Span::styled(
                    format!("{up} of {} peers established", b.peers.len()),
                    if up < b.peers.len() {
                        t.warn()
                    } else {
                        t.good()
                    },
                ),
                Span::raw(format!(" · {} prefixes announced", b.announced.len())),
            ],
        ));
    }
    if let Some(e) = app.events.back() {
        lines.push(field(
            t,
            "Last event",
            vec![Span::raw(format!(
                "{} {} {}",
                clock(e.time_ms),
                e.kind,
                e.message
            ))],
        ));
    }
    lines
}

/// What an operator should look at first, worst first: VIPs that cannot take new flows,
/// VIPs with backends down, BGP peers not established, a nearly full connection table.
fn attention(app: &App, s: &Status) -> Vec<String> {
    let mut out = Vec::new();
    for v in app.vips.iter().filter(|v| v.backends_eligible == 0) {
        let why = if v.withdrawn_by_operator {
            ", withdrawn by an operator"
        } else {
            ""
        };
        out.push(format!("VIP {}: no backend takes new flows{why}", v.name));
    }
    for v in app
        .vips
        .iter()
        .filter(|v| v.backends_eligible > 0 && v.backends_healthy < v.backends_total)
    {
        out.push(format!(
            "VIP {}: {} of {} backends healthy",
            v.name, v.backends_healthy, v.backends_total
        ));
    }
    for p in app.peers().iter().filter(|p| p.state != "Established") {
        let err = p
            .last_error
            .as_ref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        out.push(format!("BGP peer {}: {}{err}", p.address, p.state));
    }
    if s.conntrack_capacity > 0 && s.conntrack_entries * 10 >= s.conntrack_capacity * 9 {
        out.push(format!(
            "connection table {} full",
            percent(s.conntrack_entries as f64 / s.conntrack_capacity as f64)
        ));
    }
    out
}
