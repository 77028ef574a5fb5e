//! What the console draws: pure functions of [`App`] into a ratatui `Frame`, so tests render
//! them into a `TestBackend` and compare text. Every view fits an 80x24 serial console (wider
//! screens get more columns) and reads without colours: with `--no-color` the selection is
//! reverse video and emphasis is bold.

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Borders, Cell, Clear, Paragraph, Row, Sparkline, StatefulWidget, Table, TableState,
    Tabs, Widget, Wrap,
};

use super::app::{App, Conn, KEYS, Prompt, Tab, VipSort};
use super::format::{bits, clock, duration, grouped, percent, share, si, sparkline};
use crate::api::{Backend, Vip};

/// Screens at least this wide get the extra columns.
const WIDE: u16 = 110;

/// Styles, with or without colour.
#[derive(Debug, Clone, Copy)]
pub struct Theme {
    color: bool,
}

impl Theme {
    pub fn new(no_color: bool) -> Theme {
        Theme { color: !no_color }
    }

    fn fg(self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }

    /// The selected row and the current tab.
    pub fn selected(self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }

    pub fn header(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }

    pub fn label(self) -> Style {
        self.fg(Color::Cyan)
    }

    pub fn good(self) -> Style {
        self.fg(Color::Green)
    }

    /// Something wrong: red, or bold without colour.
    pub fn bad(self) -> Style {
        if self.color {
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        }
    }

    pub fn warn(self) -> Style {
        if self.color {
            Style::new().fg(Color::Yellow)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        }
    }

    pub fn dim(self) -> Style {
        self.fg(Color::DarkGray)
    }

    pub fn key(self) -> Style {
        if self.color {
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        }
    }

    /// The unreachable banner and confirmation questions.
    pub fn alert(self) -> Style {
        if self.color {
            Style::new()
                .fg(Color::White)
                .bg(Color::Red)
                .add_modifier(Modifier::BOLD)
        } else {
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        }
    }
}

/// Draws the whole screen.
pub fn view(app: &App, f: &mut Frame<'_>) {
    let area = f.area();
    render(app, area, f.buffer_mut());
}

/// Draws the whole screen into `buf` (what [`view`] does to a frame).
pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let t = Theme::new(app.no_color);
    let banner = banner(app);
    let details = app
        .status_line
        .as_ref()
        .map(|s| s.details.len())
        .unwrap_or(0);
    let details_h = if details == 0 {
        0
    } else {
        (details as u16 + 2).min(area.height / 3)
    };
    // A long error wraps rather than hiding "retrying".
    let banner_h = banner.as_ref().map_or(0, |b| {
        (b.chars().count() as u16)
            .div_ceil(area.width.max(1))
            .clamp(1, 3)
    });
    let [head, ban, body, det, status, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(banner_h),
        Constraint::Min(0),
        Constraint::Length(details_h),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);

    header(app, t, head, buf);
    if let Some(text) = banner {
        put(
            buf,
            Paragraph::new(text)
                .style(t.alert())
                .wrap(Wrap { trim: false }),
            ban,
        );
    }
    render_tab(app, app.tab, body, buf);
    if let Some(s) = app.status_line.as_ref().filter(|s| !s.details.is_empty()) {
        let lines: Vec<Line<'_>> = s.details.iter().map(|d| Line::raw(d.as_str())).collect();
        put(
            buf,
            Paragraph::new(lines).block(
                Block::new()
                    .borders(Borders::ALL)
                    .title(" errors (Esc hides) ")
                    .border_style(t.bad()),
            ),
            det,
        );
    }
    status_line(app, t, status, buf);
    footer(app, t, foot, buf);
    if app.help {
        help(t, area, buf);
    }
}

/// Draws one view's body (no header, status line or footer).
pub fn render_tab(app: &App, tab: Tab, area: Rect, buf: &mut Buffer) {
    let t = Theme::new(app.no_color);
    match tab {
        Tab::Overview => overview(app, t, area, buf),
        Tab::Vips => vips(app, t, area, buf),
        Tab::Backends => backends(app, t, area, buf),
        Tab::Bgp => bgp(app, t, area, buf),
        Tab::Events => events(app, t, area, buf),
    }
}

/// Draws the status line: a pending question, or the last result.
pub fn render_status_line(app: &App, area: Rect, buf: &mut Buffer) {
    status_line(app, Theme::new(app.no_color), area, buf);
}

/// Draws the key footer of the current view.
pub fn render_footer(app: &App, area: Rect, buf: &mut Buffer) {
    footer(app, Theme::new(app.no_color), area, buf);
}

fn put(buf: &mut Buffer, w: impl Widget, area: Rect) {
    w.render(area, buf);
}

fn put_stateful<W: StatefulWidget>(buf: &mut Buffer, w: W, area: Rect, state: &mut W::State) {
    w.render(area, buf, state);
}

fn banner(app: &App) -> Option<String> {
    match &app.conn {
        Conn::Up => None,
        Conn::Connecting => Some(format!("connecting to {}…", app.endpoint)),
        Conn::Down { error } => Some(format!(
            "appliance unreachable at {}: {error} — retrying",
            app.endpoint
        )),
    }
}

fn header(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let right = match &app.status {
        Some(s) => format!(" {} · v{} ", s.appliance, s.config_version),
        None => " sluice ".to_string(),
    };
    let [left, r] = Layout::horizontal([
        Constraint::Min(0),
        // The tabs come first: a long appliance name gets a third of the line at most.
        Constraint::Length((right.chars().count() as u16).min(area.width / 3)),
    ])
    .areas(area);
    let titles = Tab::ALL
        .iter()
        .enumerate()
        .map(|(i, tab)| Line::raw(format!("{} {}", i + 1, tab.title())));
    put(
        buf,
        Tabs::new(titles)
            .select(app.tab.index())
            .highlight_style(t.selected().add_modifier(Modifier::BOLD))
            .divider("│")
            .padding(" ", " "),
        left,
    );
    put(
        buf,
        Paragraph::new(right)
            .style(t.header())
            .alignment(Alignment::Right),
        r,
    );
}

/// A `label  value` line of the overview.
fn field<'a>(t: Theme, label: &'a str, value: Vec<Span<'a>>) -> Line<'a> {
    let mut spans = vec![Span::styled(format!(" {label:<11} "), t.label())];
    spans.extend(value);
    Line::from(spans)
}

fn overview(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let Some(s) = &app.status else {
        put(buf, Paragraph::new(" waiting for the appliance…"), area);
        return;
    };
    let r = &app.total_rates;
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
    let lagging: Vec<String> = s
        .workers
        .iter()
        .filter(|w| w.version != s.config_version)
        .map(|w| format!("{}:v{}", w.id, w.version))
        .collect();
    lines.push(field(
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
    ));
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
            ],
        ));
    }
    lines.push(Line::raw(""));
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
    lines.push(Line::raw(""));

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

/// What an operator should look at first, worst first: VIPs that cannot take new flows,
/// VIPs with backends down, BGP peers not established, a nearly full connection table.
fn attention(app: &App, s: &crate::api::Status) -> Vec<String> {
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

fn right(s: String) -> Cell<'static> {
    Cell::from(Line::from(s).alignment(Alignment::Right))
}

fn width_of<'a>(items: impl Iterator<Item = &'a str>, header: &str, max: usize) -> u16 {
    items
        .map(|s| s.chars().count())
        .chain([header.chars().count()])
        .max()
        .unwrap_or(0)
        .min(max) as u16
}

/// `192.0.2.10:80/tcp`, `[2001:db8::10]:443/tcp`, `192.0.2.10:*/udp`.
pub fn vip_address(v: &Vip) -> String {
    let port = if v.port == 0 {
        "*".to_string()
    } else {
        v.port.to_string()
    };
    if v.address.contains(':') {
        format!("[{}]:{port}/{}", v.address, v.protocol)
    } else {
        format!("{}:{port}/{}", v.address, v.protocol)
    }
}

fn vip_bgp(app: &App, v: &Vip, wide: bool) -> (&'static str, bool) {
    let bgp = app.status.as_ref().is_some_and(|s| s.bgp);
    match (bgp, v.withdrawn_by_operator, v.announced, wide) {
        (_, true, _, true) => ("withdrawn", true),
        (_, true, _, false) => ("wdr", true),
        (false, _, _, _) => ("-", false),
        (true, _, true, true) => ("announced", false),
        (true, _, true, false) => ("ann", false),
        (true, _, false, _) => ("no", true),
    }
}

fn mode(v: &Vip) -> String {
    match &v.encap {
        Some(e) => format!("{}/{e}", v.mode),
        None => v.mode.clone(),
    }
}

fn vips(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
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
    let mut head = vec![Span::styled(
        format!(
            " {} of {} VIPs · sorted by {} {arrow}",
            list.len(),
            app.vips.len(),
            app.sort.title()
        ),
        t.header(),
    )];
    if !app.filter.is_empty() || app.prompt == Some(Prompt::Filter) {
        head.push(Span::styled(format!(" · filter: {}", app.filter), t.warn()));
    }
    put(buf, Paragraph::new(Line::from(head)), title);

    let addrs: Vec<String> = list.iter().map(|v| vip_address(v)).collect();
    let name_w = width_of(list.iter().map(|v| v.name.as_str()), "VIP", 16);
    let addr_w = width_of(addrs.iter().map(String::as_str), "Address", 26);
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

    let rows = list.iter().zip(&addrs).map(|(v, addr)| {
        let r = app.vip_rates.get(&v.name).copied().unwrap_or_default();
        let (bgp, bgp_bad) = vip_bgp(app, v, wide);
        let mut cells = vec![Cell::from(v.name.clone()), Cell::from(addr.clone())];
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
        let imbalance = v
            .hash_imbalance
            .map(|x| format!("{x:.2}"))
            .unwrap_or("-".into());
        cells.extend([
            Cell::from(bgp).style(if bgp_bad { t.warn() } else { Style::new() }),
            right(format!("{}/{}", v.backends_healthy, v.backends_total)).style(health_style),
            right(si(r.pps)),
            right(si(r.bps)),
            right(si(r.new_flows)),
            right(si(Some(v.active_flows as f64))),
            right(imbalance).style(if v.hash_imbalance.is_some_and(|x| x > 1.2) {
                t.warn()
            } else {
                Style::new()
            }),
        ]);
        Row::new(cells)
    });
    let mut state = TableState::default().with_selected(app.vip_row());
    put_stateful(
        buf,
        Table::new(rows, widths)
            .header(Row::new(header).style(t.header().add_modifier(Modifier::UNDERLINED)))
            .row_highlight_style(t.selected())
            .column_spacing(1),
        table,
        &mut state,
    );

    let lines = match app.selected_vip() {
        None => vec![Line::styled(" no VIP selected", t.dim())],
        Some(v) => {
            let (bgp, _) = vip_bgp(app, v, true);
            vec![
                Line::from(vec![
                    Span::styled(format!(" {} ", v.name), t.header()),
                    Span::raw(format!(
                        "{} · {} · {} · {} hash · BGP {bgp}",
                        vip_address(v),
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
    };
    put(buf, Paragraph::new(lines), detail);
}

fn health_style(t: Theme, b: &Backend) -> Style {
    match b.health.as_str() {
        "up" | "unchecked" => t.good(),
        "down" => t.bad(),
        _ => t.warn(),
    }
}

fn state_style(t: Theme, b: &Backend) -> Style {
    match b.state.as_str() {
        "active" => Style::new(),
        "drain" => t.warn(),
        _ => t.bad(),
    }
}

fn backends(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let Some(vip) = app.selected_vip() else {
        put(
            buf,
            Paragraph::new(" no VIP selected: pick one in the VIPs view (2) and press Enter"),
            area,
        );
        return;
    };
    let wide = area.width >= WIDE;
    let list = app.shown_backends();
    // A tall screen shows the selected backend's traffic as a big sparkline.
    let graph_h = if area.height >= 18 { 7 } else { 0 };
    let [title, table, graph, detail] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(graph_h),
        Constraint::Length(2),
    ])
    .areas(area);

    let eligible = list.iter().filter(|b| b.eligible).count();
    put(
        buf,
        Paragraph::new(Line::styled(
            format!(
                " Backends of VIP {} ({}) · {eligible} of {} take new flows",
                vip.name,
                vip_address(vip),
                list.len()
            ),
            t.header(),
        )),
        title,
    );
    if list.is_empty() {
        put(buf, Paragraph::new(" loading…").style(t.dim()), table);
        return;
    }

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
        Constraint::Length(6),
        Constraint::Length(6),
    ]);
    if wide {
        header.push(right("bps".into()));
        widths.push(Constraint::Length(7));
    }
    header.push(Cell::from("Traffic"));
    widths.push(Constraint::Min(6));
    // The sparkline column: whatever width the others leave.
    let fixed: u16 = widths
        .iter()
        .map(|c| match c {
            Constraint::Length(n) => n + 1,
            _ => 1,
        })
        .sum();
    let spark_w = area.width.saturating_sub(fixed).max(6) as usize;

    let spark_max = list
        .iter()
        .filter_map(|b| app.history.get(&b.id))
        .flat_map(|h| h.iter().rev().take(spark_w))
        .copied()
        .max()
        .unwrap_or(0);
    let rows = list.iter().map(|b| {
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
        if wide {
            cells.push(Cell::from(b.health_reason.clone().unwrap_or_default()));
        }
        let share_style = if b.eligible && (b.ring_share - b.ideal_share).abs() > 0.05 {
            t.warn()
        } else {
            Style::new()
        };
        cells.extend([
            right(format!("{}{}", b.weight, over(b.weight_overridden))),
            right(format!("{}/{}%", share(b.ring_share), share(b.ideal_share))).style(share_style),
            right(si(Some(b.active_flows as f64))),
            right(si(r.pps)),
        ]);
        if wide {
            cells.push(right(si(r.bps)));
        }
        let history = app.history.get(&b.id);
        cells.push(
            Cell::from(sparkline(
                history.into_iter().flatten().copied(),
                spark_w,
                spark_max,
            ))
            .style(t.good()),
        );
        Row::new(cells)
    });
    let mut state = TableState::default().with_selected(Some(app.backend_sel));
    put_stateful(
        buf,
        Table::new(rows, widths)
            .header(Row::new(header).style(t.header().add_modifier(Modifier::UNDERLINED)))
            .row_highlight_style(t.selected())
            .column_spacing(1),
        table,
        &mut state,
    );

    let Some(b) = app.selected_backend() else {
        return;
    };
    if graph_h > 0 {
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
                .style(t.good()),
            graph,
        );
    }
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
    let lines = vec![
        Line::from(vec![
            Span::styled(format!(" {} ", b.id), t.header()),
            Span::styled(format!("health {}{reason}", b.health), health_style(t, b)),
            Span::raw(" · "),
            Span::styled(
                format!("state {}{}", b.state, who(b.state_overridden)),
                state_style(t, b),
            ),
        ]),
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
    put(buf, Paragraph::new(lines), detail);
}

fn bgp(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let Some(b) = &app.bgp else {
        put(buf, Paragraph::new(" waiting for the appliance…"), area);
        return;
    };
    if !b.enabled {
        put(
            buf,
            Paragraph::new(" BGP is not configured (no [bgp] section in the config file)."),
            area,
        );
        return;
    }
    let [title, table, detail] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(0),
        Constraint::Length(2),
    ])
    .areas(area);
    let prefixes = if b.announced.is_empty() {
        "nothing".to_string()
    } else {
        b.announced.join(" ")
    };
    put(
        buf,
        Paragraph::new(vec![
            Line::styled(
                format!(
                    " AS {} · router id {} · {} peers",
                    b.asn.map(|a| a.to_string()).unwrap_or("-".into()),
                    b.router_id.as_deref().unwrap_or("-"),
                    b.peers.len()
                ),
                t.header(),
            ),
            Line::raw(format!(" announcing {prefixes}")),
        ]),
        title,
    );
    let addr_w = width_of(b.peers.iter().map(|p| p.address.as_str()), "Peer", 26);
    let asns: Vec<String> = b.peers.iter().map(|p| p.asn.to_string()).collect();
    let asn_w = width_of(asns.iter().map(String::as_str), "AS", 10);
    let bfd_w = width_of(
        b.peers.iter().map(|p| p.bfd.as_deref().unwrap_or("-")),
        "BFD",
        9,
    );
    let header = Row::new(vec![
        Cell::from("Peer"),
        right("AS".into()),
        Cell::from("State"),
        right("Uptime".into()),
        right("Out".into()),
        right("In".into()),
        right("Flaps".into()),
        Cell::from("BFD"),
        Cell::from("Last error"),
    ])
    .style(t.header().add_modifier(Modifier::UNDERLINED));
    let widths = [
        Constraint::Length(addr_w),
        Constraint::Length(asn_w),
        Constraint::Length(11),
        Constraint::Length(7),
        Constraint::Length(4),
        Constraint::Length(4),
        Constraint::Length(5),
        Constraint::Length(bfd_w),
        Constraint::Min(10),
    ];
    let rows = b.peers.iter().map(|p| {
        Row::new(vec![
            Cell::from(p.address.clone()),
            right(p.asn.to_string()),
            Cell::from(p.state.clone()).style(if p.state == "Established" {
                t.good()
            } else {
                t.bad()
            }),
            right(p.uptime_seconds.map(duration).unwrap_or("-".into())),
            right(p.prefixes_announced.to_string()),
            right(p.prefixes_received.to_string()),
            right(p.flaps.to_string()),
            Cell::from(p.bfd.clone().unwrap_or("-".into())).style(match p.bfd.as_deref() {
                Some("Up") | None => Style::new(),
                Some(_) => t.bad(),
            }),
            Cell::from(p.last_error.clone().unwrap_or_default()),
        ])
    });
    let mut state = TableState::default().with_selected(Some(app.peer_sel));
    put_stateful(
        buf,
        Table::new(rows, widths)
            .header(header)
            .row_highlight_style(t.selected())
            .column_spacing(1),
        table,
        &mut state,
    );
    if let Some(p) = b.peers.get(app.peer_sel) {
        put(
            buf,
            Paragraph::new(Line::from(vec![
                Span::styled(format!(" {} ", p.address), t.header()),
                Span::raw(format!(
                    "last error: {}",
                    p.last_error.as_deref().unwrap_or("none")
                )),
            ]))
            .wrap(Wrap { trim: false }),
            detail,
        );
    }
}

fn kind_style(t: Theme, kind: &str) -> Style {
    match kind {
        "health" => t.warn(),
        "bgp" => t.label(),
        "commit" | "reload" => t.good(),
        "drops" => t.bad(),
        _ => t.header(),
    }
}

fn events(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let [title, table] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
    put(
        buf,
        Paragraph::new(Line::styled(
            format!(" {} events, newest first · times UTC", app.events.len()),
            t.header(),
        )),
        title,
    );
    let rows = app.events.iter().rev().map(|e| {
        Row::new(vec![
            Cell::from(clock(e.time_ms)),
            Cell::from(e.kind.clone()).style(kind_style(t, &e.kind)),
            Cell::from(e.message.clone()),
        ])
    });
    let mut state = TableState::default().with_selected(if app.events.is_empty() {
        None
    } else {
        Some(app.event_sel)
    });
    put_stateful(
        buf,
        Table::new(
            rows,
            [
                Constraint::Length(8),
                Constraint::Length(8),
                Constraint::Min(10),
            ],
        )
        .header(
            Row::new(vec!["Time", "Kind", "Message"])
                .style(t.header().add_modifier(Modifier::UNDERLINED)),
        )
        .row_highlight_style(t.selected())
        .column_spacing(1),
        table,
        &mut state,
    );
}

fn status_line(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let line = match &app.prompt {
        Some(Prompt::Confirm { question, .. }) => Line::styled(format!(" {question} "), t.alert()),
        Some(Prompt::Weight {
            vip,
            backend,
            input,
        }) => Line::from(vec![
            Span::styled(
                format!(" Weight for backend {backend} of VIP {vip}: "),
                t.header(),
            ),
            Span::styled(format!("{input}_"), t.selected()),
            Span::styled("  Enter sets, Esc cancels", t.dim()),
        ]),
        Some(Prompt::Filter) => Line::from(vec![
            Span::styled(" Filter VIPs: /", t.header()),
            Span::styled(format!("{}_", app.filter), t.selected()),
            Span::styled("  Enter keeps, Esc clears", t.dim()),
        ]),
        None => match &app.status_line {
            Some(s) if s.error => Line::styled(format!(" {}", s.text), t.bad()),
            Some(s) => Line::raw(format!(" {}", s.text)),
            None => Line::raw(""),
        },
    };
    put(buf, Paragraph::new(line), area);
}

fn footer(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let keys: &[(&str, &str)] = match app.tab {
        Tab::Overview => &[("1-5", "views"), ("R", "reload"), ("r", "refresh")],
        Tab::Vips => &[
            ("Enter", "backends"),
            ("s", "sort"),
            ("/", "filter"),
            ("W", "withdraw"),
            ("a", "announce"),
        ],
        Tab::Backends => &[
            ("d", "drain"),
            ("u", "undrain"),
            ("x", "disable"),
            ("e", "enable"),
            ("w", "weight"),
        ],
        Tab::Bgp | Tab::Events => &[("↑↓", "scroll"), ("1-5", "views"), ("R", "reload")],
    };
    let mut spans = vec![Span::raw(" ")];
    for (k, what) in keys.iter().chain(&[("?", "help"), ("q", "quit")]) {
        spans.push(Span::styled(*k, t.key()));
        spans.push(Span::raw(format!(" {what}  ")));
    }
    put(buf, Paragraph::new(Line::from(spans)).style(t.dim()), area);
}

fn help(t: Theme, area: Rect, buf: &mut Buffer) {
    let w = area.width.min(78);
    let h = area.height.min(KEYS.len() as u16 + 3);
    let rect = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    let mut lines: Vec<Line<'_>> = KEYS
        .iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::styled(format!(" {k:<21}"), t.key()),
                Span::raw(*what),
            ])
        })
        .collect();
    lines.push(Line::styled(
        " A * after a state or weight: set by an operator, not the config file.",
        t.dim(),
    ));
    put(buf, Clear, rect);
    put(
        buf,
        Paragraph::new(lines).block(
            Block::new()
                .borders(Borders::ALL)
                .title(" keys (? or Esc closes) ")
                .title_style(t.header()),
        ),
        rect,
    );
}
