//! The BGP view (4): the speaker, the prefixes it announces, and every peer's session.

use api::fmt::duration;
use api::{Bgp, Peer};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, TableState, Wrap};

use super::widgets::{Theme, put, put_stateful, right, width_of};
use crate::app::App;

pub(super) fn bgp(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
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
    put(buf, Paragraph::new(speaker(t, b)), title);
    peers(app, t, b, table, buf);
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

/// The AS, the router id and the announced prefixes.
fn speaker(t: Theme, b: &Bgp) -> Vec<Line<'static>> {
    let prefixes = if b.announced.is_empty() {
        "nothing".to_string()
    } else {
        b.announced.join(" ")
    };
    vec![
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
    ]
}

/// One row per peer.
fn peers(app: &App, t: Theme, b: &Bgp, area: Rect, buf: &mut Buffer) {
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
    let rows = b.peers.iter().map(|p| peer(t, p));
    let mut state = TableState::default().with_selected(Some(app.peer_sel));
    put_stateful(
        buf,
        Table::new(rows, widths)
            .header(header)
            .row_highlight_style(t.selected())
            .column_spacing(1),
        area,
        &mut state,
    );
}

fn peer(t: Theme, p: &Peer) -> Row<'static> {
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
}
