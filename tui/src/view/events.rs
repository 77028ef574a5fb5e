//! The event list (5): health transitions, BGP changes, commits, operator actions and
//! drop spikes, newest first.

use api::fmt::clock;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table, TableState};

use super::widgets::{Theme, put, put_stateful};
use crate::app::App;

/// Each kind of event in its own colour.
fn kind_style(t: Theme, kind: &str) -> Style {
    match kind {
        "health" => t.warn(),
        "bgp" => t.label(),
        "commit" | "reload" => t.good(),
        "drops" => t.bad(),
        _ => t.header(),
    }
}

pub(super) fn events(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
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
