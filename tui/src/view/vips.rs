//! The VIP list (2): every VIP with its announcement, backends and traffic, sorted and
//! filtered as the operator asked, and the selected VIP's details below. A tenant VIP's
//! address carries its VNI (`10.0.0.5:80/tcp vni 100`): tenants may reuse addresses.
//!
//! The list is virtualised: only the rows that fit the screen are built (the window that
//! keeps the selected VIP in view), so 10,000 VIPs cost a screenful of rows per frame.

use api::Vip;
use api::fmt::{grouped, mode, ratio, si, vip_addr};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, TableState};

use super::WIDE;
use super::widgets::{Theme, put, put_stateful, right, width_of};
use crate::app::{App, Prompt, VipSort};

/// The BGP column (short on a narrow screen), and whether it deserves a warning. A tenant
/// VIP's address is never announced (it is the tenant's): `-`, no warning.
fn vip_bgp(app: &App, v: &Vip, wide: bool) -> (&'static str, bool) {
    let bgp = app.status.as_ref().is_some_and(|s| s.bgp) && v.tenant_vni.is_none();
    match (bgp, v.withdrawn_by_operator, v.announced, wide) {
        (_, true, _, true) => ("withdrawn", true),
        (_, true, _, false) => ("wdr", true),
        (false, _, _, _) => ("-", false),
        (true, _, true, true) => ("announced", false),
        (true, _, true, false) => ("ann", false),
        (true, _, false, _) => ("no", true),
    }
}

pub(super) fn vips(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let wide = area.width >= WIDE;
    let list = app.visible_vips();
    let [title, table, detail] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(2),
    ])
    .areas(area);

    let arrow = if app.sort.descending() != app.sort_reverse {
        "▼"
    } else {
        "▲"
    };
    put(
        buf,
        Paragraph::new(title_line(app, t, list.len(), arrow)),
        title,
    );

    let addrs: Vec<String> = list.iter().map(|v| vip_addr(v)).collect();
    let (header, widths) = columns(app, &list, &addrs, arrow, wide);
    let selected = app
        .selected_vip
        .as_ref()
        .and_then(|n| list.iter().position(|v| &v.name == n));
    let shown = window(
        selected,
        usize::from(table.height.saturating_sub(1)),
        list.len(),
    );
    let rows = list[shown.clone()]
        .iter()
        .zip(&addrs[shown.clone()])
        .map(|(v, addr)| row(app, t, v, addr, wide));
    let mut state = TableState::default().with_selected(selected.map(|s| s - shown.start));
    put_stateful(
        buf,
        Table::new(rows, widths)
            .header(Row::new(header).style(t.header().add_modifier(Modifier::UNDERLINED)))
            .row_highlight_style(t.selected())
            .column_spacing(1),
        table,
        &mut state,
    );
    put(buf, Paragraph::new(details(app, t)), detail);
}

/// The rows of a list of `len` that a table of `height` rows shows: from the top while the
/// selection fits, else with the selection on the last row (where scrolling down puts it).
pub fn window(selected: Option<usize>, height: usize, len: usize) -> std::ops::Range<usize> {
    let start = match selected {
        Some(s) if height > 0 && s >= height => s + 1 - height,
        _ => 0,
    };
    start..(start + height).min(len)
}

/// How many VIPs are shown, the sort and the filter.
fn title_line<'a>(app: &'a App, t: Theme, shown: usize, arrow: &str) -> Line<'a> {
    let mut head = vec![Span::styled(
        format!(
            " {} of {} VIPs · sorted by {} {arrow}",
            shown,
            app.vips.len(),
            app.sort.title()
        ),
        t.header(),
    )];
    if !app.filter.is_empty() || app.prompt == Some(Prompt::Filter) {
        head.push(Span::styled(format!(" · filter: {}", app.filter), t.warn()));
    }
    Line::from(head)
}

/// The header cells (the sort column marked) and the column widths.
fn columns(
    app: &App,
    list: &[&Vip],
    addrs: &[String],
    arrow: &str,
    wide: bool,
) -> (Vec<Cell<'static>>, Vec<Constraint>) {
    let name_w = width_of(list.iter().map(|v| v.name.as_str()), "VIP", 16);
    // Room for a tenant VIP's VNI after an IPv6 address (`[2001:db8::10]:443/tcp vni 100`).
    let addr_w = width_of(addrs.iter().map(String::as_str), "Address", 32);
    let mark = |s: VipSort, h: &str| {
        if app.sort == s {
            format!("{h}{arrow}")
        } else {
            h.to_string()
        }
    };
    let mut header = vec![
        Cell::from(mark(VipSort::Name, "VIP")),
        Cell::from(mark(VipSort::Address, "Address")),
    ];
    let mut widths = vec![Constraint::Length(name_w), Constraint::Length(addr_w)];
    if wide {
        header.extend([Cell::from("Mode"), Cell::from("Scheduler")]);
        widths.extend([Constraint::Length(10), Constraint::Length(9)]);
    }
    header.extend([
        Cell::from("BGP"),
        right(mark(VipSort::Healthy, "Up")),
        right(mark(VipSort::Pps, "pps")),
        right(mark(VipSort::Bps, "bps")),
        right(mark(VipSort::NewFlows, "new/s")),
        right(mark(VipSort::ActiveFlows, "flows")),
        right(mark(VipSort::Imbalance, "imbal")),
    ]);
    widths.extend([
        Constraint::Length(if wide { 9 } else { 3 }),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(6),
    ]);
    (header, widths)
}

fn row<'a>(app: &App, t: Theme, v: &Vip, addr: &str, wide: bool) -> Row<'a> {
    let r = app.vip_rates.get(&v.name).copied().unwrap_or_default();
    let (bgp, bgp_bad) = vip_bgp(app, v, wide);
    let mut cells = vec![Cell::from(v.name.clone()), Cell::from(addr.to_string())];
    if wide {
        cells.extend([Cell::from(mode(v)), Cell::from(v.scheduler.clone())]);
    }
    let health_style = if v.backends_eligible == 0 {
        t.bad()
    } else if v.backends_healthy < v.backends_total {
        t.warn()
    } else {
        Style::new()
    };
    cells.extend([
        Cell::from(bgp).style(if bgp_bad { t.warn() } else { Style::new() }),
        right(format!("{}/{}", v.backends_healthy, v.backends_total)).style(health_style),
        right(si(r.pps)),
        right(si(r.bps)),
        right(si(r.new_flows)),
        right(si(Some(v.active_flows as f64))),
        right(ratio(v.hash_imbalance)).style(if v.hash_imbalance.is_some_and(|x| x > 1.2) {
            t.warn()
        } else {
            Style::new()
        }),
    ]);
    Row::new(cells)
}

/// The selected VIP in two lines.
fn details(app: &App, t: Theme) -> Vec<Line<'static>> {
    match app.selected_vip() {
        None => vec![Line::styled(" no VIP selected", t.dim())],
        Some(v) => {
            let (bgp, _) = vip_bgp(app, v, true);
            vec![
                Line::from(vec![
                    Span::styled(format!(" {} ", v.name), t.header()),
                    Span::raw(format!(
                        "{} · {} · {} · {} hash · BGP {bgp}",
                        vip_addr(v),
                        mode(v),
                        v.scheduler,
                        v.hash
                    )),
                ]),
                Line::raw(format!(
                    " {} of {} backends take new flows, {} healthy · {} active flows",
                    v.backends_eligible,
                    v.backends_total,
                    v.backends_healthy,
                    grouped(v.active_flows)
                )),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::window;

    #[test]
    fn the_window_keeps_the_selection_in_view() {
        assert_eq!(window(None, 10, 10_000), 0..10);
        assert_eq!(window(Some(3), 10, 10_000), 0..10);
        assert_eq!(window(Some(9), 10, 10_000), 0..10);
        assert_eq!(window(Some(10), 10, 10_000), 1..11);
        assert_eq!(window(Some(9_999), 10, 10_000), 9_990..10_000);
        assert_eq!(window(Some(2), 10, 3), 0..3, "short list");
        assert_eq!(window(Some(5), 0, 10), 0..0, "no room");
        assert_eq!(window(None, 5, 0), 0..0);
    }
}
