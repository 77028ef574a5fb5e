//! The backends of the selected VIP (3): state, health, weight, ring share against the
//! ideal, flows and traffic with a sparkline per backend, a big one for the selected
//! backend on a tall screen, and its details below. A backend at its connection limit shows
//! its flows as `812/812!`, one that slow start ramps its weight as `40^` (the weight the
//! schedulers use now); the title counts both.

use api::Backend;
use api::fmt::{percent, share, si, vip_addr};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Sparkline, Table, TableState};

use super::WIDE;
use super::widgets::{Theme, put, put_stateful, right, sparkline, width_of};
use crate::app::App;

/// Up is good, down is bad, anything undecided is a warning.
fn health_style(t: Theme, b: &Backend) -> Style {
    verdict_style(t, &b.health)
}

/// The style of a health verdict (`up`, `down`, `unknown`, `unchecked`).
fn verdict_style(t: Theme, verdict: &str) -> Style {
    match verdict {
        "up" | "unchecked" => t.good(),
        "down" => t.bad(),
        _ => t.warn(),
    }
}

/// Draining is a warning, disabled is bad.
fn state_style(t: Theme, b: &Backend) -> Style {
    match b.state.as_str() {
        "active" => Style::new(),
        "drain" => t.warn(),
        _ => t.bad(),
    }
}

pub(super) fn backends(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let Some(vip) = app.selected_vip() else {
        put(
            buf,
            Paragraph::new(" no VIP selected: pick one in the VIPs view (2) and press Enter"),
            area,
        );
        return;
    };
    let list = app.shown_backends();
    // A tall screen shows the selected backend's traffic as a big sparkline.
    let graph_h = if area.height >= 18 { 7 } else { 0 };
    // A third line of details for a selected backend with a limit or a ramp.
    let detail_h = match app.selected_backend() {
        Some(b) if b.max_connections.is_some() || b.ramping_until_ms.is_some() => 3,
        _ => 2,
    };
    let [title, table, graph, detail] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(graph_h),
        Constraint::Length(detail_h),
    ])
    .areas(area);

    let eligible = list.iter().filter(|b| b.eligible).count();
    let full = list.iter().filter(|b| b.full).count();
    let ramping = list.iter().filter(|b| b.ramping_until_ms.is_some()).count();
    // With limits or ramps to count, "eligible" keeps the title within 80 columns.
    let takes = if full + ramping > 0 {
        "eligible"
    } else {
        "take new flows"
    };
    let mut heading = format!(
        " Backends of VIP {} ({}) · {eligible} of {} {takes}",
        vip.name,
        vip_addr(vip),
        list.len()
    );
    if full > 0 {
        heading.push_str(&format!(" · {full} full"));
    }
    if ramping > 0 {
        heading.push_str(&format!(" · {ramping} ramping"));
    }
    put(
        buf,
        Paragraph::new(Line::styled(heading, t.header())),
        title,
    );
    if list.is_empty() {
        put(buf, Paragraph::new(" loading…").style(t.dim()), table);
        return;
    }

    backend_table(app, t, list, area.width, table, buf);
    let Some(b) = app.selected_backend() else {
        return;
    };
    if graph_h > 0 {
        backend_graph(app, t, b, graph, buf);
    }
    put(buf, Paragraph::new(backend_details(t, b)), detail);
}

/// One row per backend; the sparkline column takes whatever width the others leave.
fn backend_table(app: &App, t: Theme, list: &[Backend], width: u16, area: Rect, buf: &mut Buffer) {
    let wide = width >= WIDE;
    let fleet = list.iter().any(|b| b.fleet_health.is_some());
    let (header, widths) = columns(list, wide, fleet);
    let fixed: u16 = widths
        .iter()
        .map(|c| match c {
            Constraint::Length(n) => n + 1,
            _ => 1,
        })
        .sum();
    let spark_w = width.saturating_sub(fixed).max(6) as usize;
    let spark_max = list
        .iter()
        .filter_map(|b| app.history.get(&b.id))
        .flat_map(|h| h.iter().rev().take(spark_w))
        .copied()
        .max()
        .unwrap_or(0);
    let rows = list
        .iter()
        .map(|b| row(app, t, b, (wide, fleet), spark_w, spark_max));
    let mut state = TableState::default().with_selected(Some(app.backend_sel));
    put_stateful(
        buf,
        Table::new(rows, widths)
            .header(Row::new(header).style(t.header().add_modifier(Modifier::UNDERLINED)))
            .row_highlight_style(t.selected())
            .column_spacing(1),
        area,
        &mut state,
    );
}

/// The header cells and the column widths (more columns on a wide screen; on a fleet member
/// a Fleet column, the fleet's verdict that the ring follows, beside Health, this member's
/// own probes, as `sluice ctl backends` shows them).
fn columns(list: &[Backend], wide: bool, fleet: bool) -> (Vec<Cell<'static>>, Vec<Constraint>) {
    let id_w = width_of(list.iter().map(|b| b.id.as_str()), "Backend", 24);
    let mut header = vec![
        Cell::from("Backend"),
        Cell::from("State"),
        Cell::from("Health"),
    ];
    let mut widths = vec![
        Constraint::Length(id_w),
        Constraint::Length(9),
        Constraint::Length(8),
    ];
    if fleet {
        header.push(Cell::from("Fleet"));
        widths.push(Constraint::Length(7));
    }
    if wide {
        header.push(Cell::from("Reason"));
        widths.push(Constraint::Length(14));
    }
    header.extend([
        right("Weight".into()),
        right("Ring/ideal".into()),
        right("flows".into()),
        right("pps".into()),
    ]);
    widths.extend([
        Constraint::Length(6),
        Constraint::Length(10),
        Constraint::Length(flows_w(list)),
        Constraint::Length(6),
    ]);
    if wide {
        header.push(right("bps".into()));
        widths.push(Constraint::Length(7));
    }
    header.push(Cell::from("Traffic"));
    widths.push(Constraint::Min(6));
    (header, widths)
}

fn row(
    app: &App,
    t: Theme,
    b: &Backend,
    (wide, fleet): (bool, bool),
    spark_w: usize,
    spark_max: u64,
) -> Row<'static> {
    let r = app.backend_rates.get(&b.id).copied().unwrap_or_default();
    let over = |o: bool| if o { "*" } else { "" };
    let mut cells = vec![
        Cell::from(b.id.clone()),
        Cell::from(format!("{}{}", b.state, over(b.state_overridden))).style(state_style(t, b)),
        Cell::from(if b.health == "unchecked" {
            "no check".to_string()
        } else {
            b.health.clone()
        })
        .style(health_style(t, b)),
    ];
    if fleet {
        let verdict = b.fleet_health.clone().unwrap_or_default();
        cells.push(Cell::from(verdict.clone()).style(verdict_style(t, &verdict)));
    }
    if wide {
        cells.push(Cell::from(b.health_reason.clone().unwrap_or_default()));
    }
    let share_style = if b.eligible && (b.ring_share - b.ideal_share).abs() > 0.05 {
        t.warn()
    } else {
        Style::new()
    };
    cells.extend([
        weight_cell(t, b),
        right(format!("{}/{}%", share(b.ring_share), share(b.ideal_share))).style(share_style),
        flows_cell(t, b),
        right(si(r.pps)),
    ]);
    if wide {
        cells.push(right(si(r.bps)));
    }
    let history = app.history.get(&b.id);
    cells.push(
        Cell::from(sparkline(
            t,
            history.into_iter().flatten().copied(),
            spark_w,
            spark_max,
        ))
        .style(t.good()),
    );
    Row::new(cells)
}

/// The weight column: the configured weight (`*` when an operator set it), or while slow
/// start ramps it the weight the schedulers use now, with `^`.
fn weight_cell(t: Theme, b: &Backend) -> Cell<'static> {
    let over = if b.weight_overridden { "*" } else { "" };
    if b.ramping_until_ms.is_some() {
        right(format!("{}^{over}", b.effective_weight)).style(t.warn())
    } else {
        right(format!("{}{over}", b.weight))
    }
}

/// `flows`, or `flows/max` for a backend with `max_connections` (with `!` at the limit).
fn flows_text(b: &Backend) -> String {
    let flows = si(Some(b.active_flows as f64));
    match b.max_connections {
        Some(m) => format!(
            "{flows}/{}{}",
            si(Some(f64::from(m))),
            if b.full { "!" } else { "" }
        ),
        None => flows,
    }
}

fn flows_cell(t: Theme, b: &Backend) -> Cell<'static> {
    let c = right(flows_text(b));
    if b.full { c.style(t.bad()) } else { c }
}

/// The flows column: wide enough for `flows/max!` when a backend has a limit.
fn flows_w(list: &[Backend]) -> u16 {
    list.iter()
        .map(|b| flows_text(b).chars().count() as u16)
        .max()
        .unwrap_or(0)
        .clamp(6, 13)
}

/// The selected backend's packet rate over the kept history.
fn backend_graph(app: &App, t: Theme, b: &Backend, area: Rect, buf: &mut Buffer) {
    let data: Vec<u64> = app
        .history
        .get(&b.id)
        .map(|h| h.iter().copied().collect())
        .unwrap_or_default();
    let max = data.iter().copied().max().unwrap_or(0);
    put(
        buf,
        Sparkline::default()
            .block(
                Block::new()
                    .borders(Borders::ALL)
                    .border_style(t.dim())
                    .title(format!(
                        " packets/s of {} · last {} samples · max {} ",
                        b.id,
                        data.len(),
                        si(Some(max as f64))
                    )),
            )
            .data(&data)
            .bar_set(t.bars())
            .style(t.good()),
        area,
    );
}

/// The selected backend in two lines (three with a limit or a ramp): health, state and
/// weight with where they come from (and a tenant VIP's backend's VTEP), then its limit
/// and ramp.
fn backend_details(t: Theme, b: &Backend) -> Vec<Line<'static>> {
    let reason = b
        .health_reason
        .as_ref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    let who = |o: bool| {
        if o {
            " (set by an operator)"
        } else {
            " (config)"
        }
    };
    let mut lvs = Vec::new();
    if b.ramping_until_ms.is_some() {
        lvs.push(format!(
            "slow start: weight {} now, ramping to {}",
            b.effective_weight, b.weight
        ));
    }
    if let Some(m) = b.max_connections {
        let at = if b.full { "at its limit" } else { "limit" };
        lvs.push(format!(
            "{at} {m} connections (resumes below {})",
            b.resume_connections.unwrap_or(m)
        ));
    }
    let mut first = vec![
        Span::styled(format!(" {} ", b.id), t.header()),
        Span::styled(format!("health {}{reason}", b.health), health_style(t, b)),
        Span::raw(" · "),
    ];
    // On a fleet member, `health` is its own probes; the ring follows the fleet's verdict.
    if let Some(f) = &b.fleet_health {
        first.push(Span::styled(format!("fleet {f}"), verdict_style(t, f)));
        first.push(Span::raw(" · "));
    }
    first.extend([Span::styled(
        format!("state {}{}", b.state, who(b.state_overridden)),
        state_style(t, b),
    )]);
    // A tenant VIP's backend: `id` is its tenant address, its frames go to its host.
    if let Some(v) = &b.vtep {
        first.push(Span::raw(format!(" · vtep {v}")));
    }
    let mut out = vec![
        Line::from(first),
        Line::raw(format!(
            " weight {}{} · {} · ring share {} of ideal {}",
            b.weight,
            who(b.weight_overridden),
            if b.eligible {
                "takes new flows"
            } else {
                "takes no new flows"
            },
            percent(b.ring_share),
            percent(b.ideal_share),
        )),
    ];
    if !lvs.is_empty() {
        out.push(Line::styled(
            format!(" {}", lvs.join(" · ")),
            if b.full { t.bad() } else { t.warn() },
        ));
    }
    out
}
