//! The connection-table view (6): how full the workers' connection tables are and with
//! what (entries per state), what admitted, promoted, evicted and refused entries, FullNAT
//! port use and flood mode. It is the screen for a flood: embryonic classes fill and get
//! evicted while established flows stay put, and flood mode says whether XDP is shedding.
//! The LVS counters sit here too: persistence entries are per client, limits and overflow
//! per new connection, so they read next to the table they act on.

use api::fmt::{grouped, percent};
use api::{Conntrack, Flood, Lvs, Status};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::widgets::{Theme, field, put};
use crate::app::App;

/// Cells of the fill bar.
const BAR: usize = 30;

pub(super) fn conns(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let Some(s) = &app.status else {
        put(buf, Paragraph::new(" waiting for the appliance…"), area);
        return;
    };
    let c = &s.conntrack;
    let mut lines = vec![
        Line::styled(
            format!(
                " Connection tables of {} workers · entries by state, counters since start",
                s.workers.len()
            ),
            t.header(),
        ),
        Line::raw(""),
    ];
    lines.extend(fill(t, s));
    lines.push(Line::raw(""));
    lines.extend(states(t, c));
    lines.push(Line::raw(""));
    lines.extend(counters(t, s, c));
    lines.push(Line::raw(""));
    lines.extend(lvs(t, &s.lvs));
    lines.push(Line::raw(""));
    lines.extend(flood(t, s.flood.as_ref()));
    put(buf, Paragraph::new(lines), area);
}

/// Fill against capacity, as a bar and in figures.
fn fill(t: Theme, s: &Status) -> Vec<Line<'static>> {
    let share = if s.conntrack_capacity > 0 {
        s.conntrack_entries as f64 / s.conntrack_capacity as f64
    } else {
        0.0
    };
    let cells = ((share * BAR as f64).round() as usize).min(BAR);
    let style = if share >= 0.9 {
        t.bad()
    } else if share >= 0.7 {
        t.warn()
    } else {
        t.good()
    };
    vec![field(
        t,
        "Fill",
        vec![
            Span::raw("["),
            Span::styled("#".repeat(cells), style),
            Span::raw(format!("{}] ", ".".repeat(BAR - cells))),
            Span::raw(format!(
                "{} of {} ({})",
                grouped(s.conntrack_entries),
                grouped(s.conntrack_capacity),
                percent(share)
            )),
        ],
    )]
}

/// Entries per state: embryonic ones are a SYN or one datagram that has not earned
/// established yet, and the first to go when the table needs room.
fn states(t: Theme, c: &Conntrack) -> Vec<Line<'static>> {
    vec![
        field(
            t,
            "TCP",
            vec![Span::raw(format!(
                "{} embryonic · {} established · {} closing",
                grouped(c.embryonic_tcp),
                grouped(c.established_tcp),
                grouped(c.closing_tcp)
            ))],
        ),
        field(
            t,
            "UDP",
            vec![Span::raw(format!(
                "{} embryonic · {} established",
                grouped(c.embryonic_udp),
                grouped(c.established_udp)
            ))],
        ),
    ]
}

/// `n` in the warning style when it is not zero.
fn count(t: Theme, n: u64, what: &str) -> Span<'static> {
    Span::styled(
        format!("{} {what}", grouped(n)),
        if n > 0 { t.warn() } else { Style::new() },
    )
}

/// What admitted, promoted, removed and refused entries, and the FullNAT ports.
fn counters(t: Theme, s: &Status, c: &Conntrack) -> Vec<Line<'static>> {
    vec![
        field(
            t,
            "Admitted",
            vec![Span::raw(format!(
                "{} inserted · {} promoted · {} expired",
                grouped(c.inserted),
                grouped(c.promoted),
                grouped(c.expired)
            ))],
        ),
        field(
            t,
            "Evicted",
            vec![
                count(t, c.evicted_embryonic, "embryonic"),
                dot_span(),
                count(t, c.evicted_closing, "closing"),
                Span::styled(" · established: never", t.dim()),
            ],
        ),
        field(
            t,
            "Refused",
            vec![
                count(t, c.table_full, "table full"),
                dot_span(),
                count(t, s.conntrack_fallbacks, "ring fallbacks"),
            ],
        ),
        field(
            t,
            "Stateless",
            vec![
                Span::raw(format!("{} no entry", grouped(c.stateless_no_entry))),
                dot_span(),
                count(t, c.stateless_table_full, "table full"),
            ],
        ),
        field(
            t,
            "FullNAT",
            vec![
                Span::raw(format!("{} local ports held", grouped(c.snat_ports))),
                dot_span(),
                Span::styled(
                    format!("{} flows found no free port", grouped(c.snat_exhausted)),
                    if c.snat_exhausted > 0 {
                        t.bad()
                    } else {
                        Style::new()
                    },
                ),
            ],
        ),
    ]
}

/// The LVS features: the persistence table (clients remembered and what it answered),
/// connection limits (new flows moved off a full backend) and what `overflow` did when
/// every backend was full, one-packet UDP.
fn lvs(t: Theme, l: &Lvs) -> Vec<Line<'static>> {
    vec![
        field(
            t,
            "Persistence",
            vec![
                Span::raw(format!(
                    "{} of {} clients · {} hits · {} misses · ",
                    grouped(l.persistence_entries),
                    grouped(l.persistence_capacity),
                    grouped(l.persistence_hits),
                    grouped(l.persistence_misses)
                )),
                count(t, l.persistence_evictions, "evicted"),
            ],
        ),
        field(
            t,
            "Limits",
            vec![
                count(t, l.limit_skips, "moved off full"),
                Span::raw(" · overflow: "),
                Span::styled(
                    format!(
                        "{} refused ({} RST)",
                        grouped(l.overflow_refused),
                        grouped(l.overflow_resets)
                    ),
                    if l.overflow_refused > 0 {
                        t.bad()
                    } else {
                        Style::new()
                    },
                ),
                dot_span(),
                count(t, l.overflow_ignored, "let past"),
            ],
        ),
        field(
            t,
            "One-packet",
            vec![Span::raw(format!(
                "{} datagrams scheduled on their own",
                grouped(l.one_packet)
            ))],
        ),
    ]
}

/// Whether XDP sheds first packets now, and what it did since start.
fn flood(t: Theme, f: Option<&Flood>) -> Vec<Line<'static>> {
    let Some(f) = f else {
        return vec![field(
            t,
            "Flood mode",
            vec![Span::styled("not read yet", t.dim())],
        )];
    };
    let state = if f.active_cpus > 0 {
        Span::styled(
            format!(
                "ON in {} CPU{}: XDP sheds sources over their rate",
                f.active_cpus,
                if f.active_cpus == 1 { "" } else { "s" }
            ),
            t.bad(),
        )
    } else {
        Span::styled("off", t.good())
    };
    vec![
        field(t, "Flood mode", vec![state]),
        field(
            t,
            "First pkts",
            vec![
                Span::raw(format!(
                    "{} seen · {} admitted · ",
                    grouped(f.first_packets),
                    grouped(f.admitted)
                )),
                count(t, f.shed, "shed"),
                dot_span(),
                count(t, f.no_room, "no room"),
            ],
        ),
        field(
            t,
            "Switched",
            vec![Span::raw(format!(
                "on {} · off {} (times a CPU switched the mode)",
                grouped(f.switched_on),
                grouped(f.switched_off)
            ))],
        ),
    ]
}

/// The separator between figures on a line.
fn dot_span() -> Span<'static> {
    Span::raw(" · ")
}
