//! The Fleet view (7): the fleet this appliance is a member of, as etcd drives it: the
//! versions (pushed, activated, run here), whether this member is stale (etcd out of reach,
//! forwarding on what it runs), every live member's readiness, running revision and sync
//! lag, and the backends the members' probes disagree on (the member named has a suspect
//! path to it; the fleet's verdict is what every table uses).

use api::FleetStatus;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Wrap};

use super::widgets::{Theme, put};
use crate::app::App;

pub(super) fn fleet(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let Some(f) = &app.fleet else {
        put(
            buf,
            Paragraph::new(
                " Not a fleet member (no [fleet] section): this appliance runs alone on its file.",
            )
            .wrap(Wrap { trim: false }),
            area,
        );
        return;
    };
    let summary = summary(t, f);
    // The summary wraps on a narrow screen: its height is what its lines take there.
    let width = usize::from(area.width.max(1));
    let head_h = summary
        .iter()
        .map(|l| rows(&l.to_string(), width))
        .sum::<u16>()
        .min(area.height / 2);
    let dis = (f.disagreements.len() as u16).clamp(1, 8) + 1;
    let [head, gap1, members, gap2, disagreements] = Layout::vertical([
        Constraint::Length(head_h),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(dis),
    ])
    .areas(area);
    let _ = (gap1, gap2);
    put(
        buf,
        Paragraph::new(summary).wrap(Wrap { trim: false }),
        head,
    );
    member_table(t, f, members, buf);
    put(buf, Paragraph::new(disagreement_lines(t, f)), disagreements);
}

/// Rows `text` takes word-wrapped at `width` columns (as the paragraph wraps it).
fn rows(text: &str, width: usize) -> u16 {
    let (mut rows, mut col) = (1u16, 0usize);
    for word in text.split(' ') {
        let w = word.chars().count();
        let need = if col == 0 { w } else { col + 1 + w };
        if need <= width {
            col = need;
        } else {
            rows += 1 + (w.saturating_sub(1) / width) as u16;
            col = w % width;
        }
    }
    rows
}

/// The fleet, the versions, and whether this member is stale or holding its announcements.
fn summary(t: Theme, f: &FleetStatus) -> Vec<Line<'static>> {
    let from_disk = if f.running_from_disk {
        " (kept on disk, not yet confirmed by etcd)"
    } else {
        ""
    };
    let state = if f.stale {
        let secs = f
            .stale_seconds
            .map_or(String::new(), |s| format!(" for {s:.0}s"));
        Span::styled(
            format!(
                "STALE{secs}: out of the fleet ({}), forwarding on revision {}{from_disk}",
                f.last_error.as_deref().unwrap_or("no answer"),
                f.running_revision
            ),
            t.bad(),
        )
    } else if !f.announcing {
        Span::styled("catching up: announcements held", t.warn())
    } else {
        Span::styled("in sync with etcd", t.good())
    };
    let spread = f
        .activation_spread_ms
        .map_or("-".into(), |ms| format!("{ms} ms"));
    let mut lines = vec![
        Line::from(vec![
            Span::styled(
                format!(" fleet {} · member {} · ", f.fleet, f.member),
                t.header(),
            ),
            state,
        ]),
        Line::raw(format!(
            " revision pushed {}, activated {}, running here {}",
            f.config_revision, f.activated_revision, f.running_revision
        )),
        Line::raw(format!(
            " activation spread {spread} · tables {}",
            f.table_fingerprint
        )),
    ];
    if let Some(r) = &f.refused {
        let by: Vec<String> = r.by.iter().map(|(m, e)| format!("{m}: {e}")).collect();
        lines.push(Line::styled(
            format!(
                " revision {} refused, not activated: {}",
                r.revision,
                by.join("; ")
            ),
            t.bad(),
        ));
    }
    lines
}

fn member_table(t: Theme, f: &FleetStatus, area: Rect, buf: &mut Buffer) {
    let rows = f.members.iter().map(|m| {
        let ready = if m.readiness == "ready" {
            t.good()
        } else {
            t.bad()
        };
        let behind = if m.running < f.activated_revision {
            t.warn()
        } else {
            t.dim()
        };
        Row::new(vec![
            Cell::from(m.name.clone()),
            Cell::from(m.prepared.to_string()),
            Cell::from(m.readiness.clone()).style(ready),
            Cell::from(m.running.to_string()).style(behind),
            Cell::from(m.sync_lag_ms.map_or("-".into(), |l| format!("{l} ms"))),
            Cell::from(m.error.clone().unwrap_or_default()),
        ])
    });
    put(
        buf,
        Table::new(
            rows,
            [
                Constraint::Length(16),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(8),
                Constraint::Length(9),
                Constraint::Min(10),
            ],
        )
        .header(
            Row::new(vec![
                "Member", "Prepared", "Ready", "Running", "Sync lag", "Error",
            ])
            .style(t.header().add_modifier(Modifier::UNDERLINED)),
        )
        .column_spacing(1),
        area,
    );
}

fn disagreement_lines(t: Theme, f: &FleetStatus) -> Vec<Line<'static>> {
    let mut lines = vec![Line::styled(" Health disagreements", t.header())];
    if f.disagreements.is_empty() {
        lines.push(Line::styled(
            " none: every live member's probes agree",
            t.dim(),
        ));
    }
    for d in f.disagreements.iter().take(8) {
        lines.push(Line::from(vec![
            Span::raw(format!(" {} ", d.backend)),
            Span::styled(
                format!(
                    "fleet {} ({} up, {} down)",
                    if d.fleet_up { "up" } else { "down" },
                    d.up_votes,
                    d.down_votes
                ),
                if d.fleet_up { t.good() } else { t.bad() },
            ),
            Span::styled(format!(" · {} disagree", d.members.join(", ")), t.warn()),
        ]));
    }
    lines
}
