//! The capture panel (`c`): over the view, the frames a capture of the selected VIP took, one
//! line each, newest at the bottom; while it runs, what it waits for; or why it failed.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};

use super::widgets::{Theme, put};
use crate::app::{
    App, CAPTURE_COUNT, CAPTURE_DURATION_MS, CAPTURE_SNAPLEN, CapturePanel, CaptureState,
};

pub(super) fn capture(app: &App, t: Theme, area: Rect, buf: &mut Buffer) {
    let Some(panel) = &app.capture else {
        return;
    };
    let block = Block::new()
        .borders(Borders::ALL)
        .title(format!(
            " capture of VIP {} · times UTC · Esc closes ",
            panel.vip
        ))
        .title_style(t.header());
    let inner = block.inner(area);
    put(buf, Clear, area);
    put(buf, block, area);
    let [head, list] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(inner);
    match &panel.state {
        CaptureState::Running => put(
            buf,
            Paragraph::new(Line::styled(
                format!(
                    " capturing up to {CAPTURE_COUNT} frames or {} s, {CAPTURE_SNAPLEN} bytes of \
                     each…",
                    CAPTURE_DURATION_MS / 1000
                ),
                t.dim(),
            )),
            head,
        ),
        CaptureState::Failed { message } => put(
            buf,
            Paragraph::new(Line::styled(format!(" capture failed: {message}"), t.bad()))
                .wrap(Wrap { trim: false }),
            inner,
        ),
        CaptureState::Done {
            lines,
            captured,
            lost,
        } => packets(panel, lines, (*captured, *lost), t, [head, list], buf),
    }
}

/// The count line, then the lines that fit: the newest, or as far back as the operator
/// scrolled.
fn packets(
    panel: &CapturePanel,
    lines: &[String],
    (captured, lost): (usize, u64),
    t: Theme,
    [head, list]: [Rect; 2],
    buf: &mut Buffer,
) {
    let rows = usize::from(list.height);
    let n = lines.len();
    let end = n - panel.back.min(n.saturating_sub(rows));
    let start = end.saturating_sub(rows);
    let mut count = format!(" {captured} frames captured, {lost} lost");
    if n == 0 {
        count.push_str(": nothing matched the VIP in that time");
    } else if n > rows {
        count.push_str(&format!(" · lines {}-{end} of {n}, ↑↓ scroll", start + 1));
    }
    let style = if lost > 0 { t.warn() } else { t.header() };
    put(buf, Paragraph::new(Line::styled(count, style)), head);
    let shown: Vec<Line<'_>> = lines[start..end]
        .iter()
        .map(|l| Line::raw(format!(" {l}")))
        .collect();
    put(buf, Paragraph::new(shown), list);
}
