//! The pieces every view draws with: the [`Theme`] (styles with or without colour), table
//! cells and column widths, the overview's `label  value` line and the text sparkline.

use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, StatefulWidget, Widget};

/// Styles, with or without colour, and the glyphs the terminal's font has.
#[derive(Debug, Clone, Copy)]
pub struct Theme {
    color: bool,
    /// The Linux console's font (`TERM=linux`, the appliance's screen on tty1): of the block
    /// elements it has only the full and the half blocks, so the sparklines use three levels.
    vt_font: bool,
}

impl Theme {
    /// The theme `app` draws with.
    pub fn of(app: &crate::app::App) -> Theme {
        Theme {
            color: !app.no_color,
            vt_font: app.vt_font,
        }
    }

    /// The bar glyphs of the big sparkline: eighths, or on the Linux console three levels.
    pub fn bars(self) -> ratatui::symbols::bar::Set<'static> {
        if self.vt_font {
            ratatui::symbols::bar::THREE_LEVELS
        } else {
            ratatui::symbols::bar::NINE_LEVELS
        }
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

pub(super) fn put(buf: &mut Buffer, w: impl Widget, area: Rect) {
    w.render(area, buf);
}

pub(super) fn put_stateful<W: StatefulWidget>(
    buf: &mut Buffer,
    w: W,
    area: Rect,
    state: &mut W::State,
) {
    w.render(area, buf, state);
}

/// A `label  value` line of the overview.
pub(super) fn field<'a>(t: Theme, label: &'a str, value: Vec<Span<'a>>) -> Line<'a> {
    let mut spans = vec![Span::styled(format!(" {label:<11} "), t.label())];
    spans.extend(value);
    Line::from(spans)
}

/// A right-aligned table cell (numbers).
pub(super) fn right(s: String) -> Cell<'static> {
    Cell::from(Line::from(s).alignment(Alignment::Right))
}

/// A column as wide as its widest item or header, at most `max`.
pub(super) fn width_of<'a>(items: impl Iterator<Item = &'a str>, header: &str, max: usize) -> u16 {
    items
        .map(|s| s.chars().count())
        .chain([header.chars().count()])
        .max()
        .unwrap_or(0)
        .min(max) as u16
}

/// The last `width` values as one line of block characters, scaled so `max` is a full
/// block (callers pass one `max` for a whole table so rows compare); all zero is a flat
/// baseline.
pub(super) fn sparkline(
    t: Theme,
    values: impl IntoIterator<Item = u64>,
    width: usize,
    max: u64,
) -> String {
    const EIGHTHS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    // What the Linux console's font draws: a baseline, the lower half block, the full block.
    const THREE: [char; 3] = ['_', '▄', '█'];
    let bars: &[char] = if t.vt_font { &THREE } else { &EIGHTHS };
    let top = bars.len() as u64 - 1;
    let values: Vec<u64> = values.into_iter().collect();
    let shown = &values[values.len().saturating_sub(width)..];
    shown
        .iter()
        .map(|v| match (v.min(&max) * top + max / 2).checked_div(max) {
            Some(level) => bars[level as usize],
            None => bars[0],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparklines() {
        let t = Theme {
            color: true,
            vt_font: false,
        };
        assert_eq!(sparkline(t, [0, 0, 0], 10, 0), "▁▁▁");
        assert_eq!(sparkline(t, [0, 50, 100], 10, 100), "▁▅█");
        assert_eq!(
            sparkline(t, [100, 0, 7], 2, 7),
            "▁█",
            "only the last `width` values"
        );
        assert_eq!(
            sparkline(t, [5, 200], 10, 100),
            "▁█",
            "one scale for the whole table"
        );
    }

    #[test]
    fn on_the_linux_console_sparklines_use_only_glyphs_its_font_has() {
        let t = Theme {
            color: true,
            vt_font: true,
        };
        let line = sparkline(t, [0, 10, 40, 60, 100], 10, 100);
        assert_eq!(line, "__▄▄█");
        // The Linux console's default font has these of the block elements (and ASCII).
        assert!(line.chars().all(|c| c == '_' || c == '▄' || c == '█'));
        for s in [t.bars().half, t.bars().one_eighth, t.bars().seven_eighths] {
            assert!([" ", "▄", "█"].contains(&s), "{s:?}");
        }
    }
}
