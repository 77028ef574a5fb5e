//! What the console draws: pure functions of [`App`] into a ratatui `Frame`, so tests render
//! them into a `TestBackend` and compare text. Every view fits an 80x24 serial console (wider
//! screens get more columns) and reads without colours: with `--no-color` the selection is
//! reverse video and emphasis is bold.

//!
//! One file per view (overview, vips, backends, bgp, events, conns, fleet); the pieces they share are in
//! `widgets`; the capture panel over them is in `capture`; the frame around them (tabs,
//! banner, status line, footer, help) is here.

mod backends;
mod bgp;
mod capture;
mod conns;
mod events;
mod fleet;
mod overview;
mod vips;
mod widgets;

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Tabs, Wrap};

use crate::app::{App, Conn, KEYS, Prompt, Tab};
pub use widgets::Theme;
use widgets::put;

/// Screens at least this wide get the extra columns.
const WIDE: u16 = 110;

/// Draws the whole screen.
pub fn view(app: &App, f: &mut Frame<'_>) {
    let area = f.area();
    render(app, area, f.buffer_mut());
}

/// Draws the whole screen into `buf` (what [`view`] does to a frame).
pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let t = Theme::of(app);
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
    capture::capture(app, t, body, buf);
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
    let t = Theme::of(app);
    match tab {
        Tab::Overview => overview::overview(app, t, area, buf),
        Tab::Vips => vips::vips(app, t, area, buf),
        Tab::Backends => backends::backends(app, t, area, buf),
        Tab::Bgp => bgp::bgp(app, t, area, buf),
        Tab::Events => events::events(app, t, area, buf),
        Tab::Conns => conns::conns(app, t, area, buf),
        Tab::Fleet => fleet::fleet(app, t, area, buf),
    }
}

/// Draws the status line: a pending question, or the last result.
pub fn render_status_line(app: &App, area: Rect, buf: &mut Buffer) {
    status_line(app, Theme::of(app), area, buf);
}

/// Draws the key footer of the current view.
pub fn render_footer(app: &App, area: Rect, buf: &mut Buffer) {
    footer(app, Theme::of(app), area, buf);
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
    let titles: Vec<String> = Tab::ALL
        .iter()
        .enumerate()
        .map(|(i, tab)| format!("{} {}", i + 1, tab.title()))
        .collect();
    // Every tab padded, or, when that does not fit beside the name (80 columns), unpadded.
    let bare: usize = titles.iter().map(|s| s.chars().count()).sum::<usize>() + titles.len() - 1;
    let pad = if bare + 2 * titles.len() <= usize::from(left.width) {
        " "
    } else {
        ""
    };
    put(
        buf,
        Tabs::new(titles.into_iter().map(Line::raw))
            .select(app.tab.index())
            .highlight_style(t.selected().add_modifier(Modifier::BOLD))
            .divider("│")
            .padding(pad, pad),
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
    // Withdraw or announce, whichever the selected VIP can take: both do not fit 80 columns
    // beside the capture.
    let bgp = match app.selected_vip() {
        Some(v) if !v.announced => ("a", "announce"),
        _ => ("W", "withdraw"),
    };
    let vips = [
        ("Enter", "backends"),
        ("s", "sort"),
        ("/", "filter"),
        bgp,
        ("c", "capture"),
    ];
    let keys: &[(&str, &str)] = match app.tab {
        _ if app.capture.is_some() => &[("Esc", "close"), ("↑↓", "scroll"), ("c", "again")],
        Tab::Overview => &[("1-7", "views"), ("R", "reload"), ("r", "refresh")],
        Tab::Vips => &vips,
        Tab::Backends => &[
            ("d", "drain"),
            ("u", "undrain"),
            ("x", "disable"),
            ("e", "enable"),
            ("w", "weight"),
        ],
        Tab::Bgp | Tab::Events => &[("↑↓", "scroll"), ("1-7", "views"), ("R", "reload")],
        Tab::Conns | Tab::Fleet => &[("1-7", "views"), ("R", "reload"), ("r", "refresh")],
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
