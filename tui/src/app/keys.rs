//! The key map: what a key means in the mode the console is in (a prompt, the help page,
//! a view), as an [`Action`], and the key list the footer and the help page show.

use api::BackendAction;
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::{App, Prompt, Tab};

/// What a key means, given the mode the console is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    NextTab,
    PrevTab,
    GoTo(Tab),
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    /// Enter on a VIP: its backends.
    Open,
    Sort,
    ReverseSort,
    StartFilter,
    Backend(BackendAction),
    StartWeight,
    Withdraw,
    Announce,
    /// `c`: capture the selected VIP's frames.
    Capture,
    Reload,
    Refresh,
    Help,
    /// Esc: close the help page, a prompt, the capture panel, the error details, the filter.
    Cancel,
    /// Text typed into a prompt (filter, weight).
    Input(char),
    Backspace,
    /// Enter in a prompt.
    Submit,
    /// `y` or `n` to a confirmation.
    Confirm(bool),
}

/// What a key means in the console's current mode; `None` for keys that mean nothing there.
pub fn keymap(app: &App, key: KeyEvent) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && matches!(key.code, KeyCode::Char('c')) {
        return Some(Action::Quit);
    }
    match &app.prompt {
        Some(Prompt::Confirm { .. }) => {
            return match key.code {
                KeyCode::Char('y' | 'Y') => Some(Action::Confirm(true)),
                KeyCode::Char('n' | 'N') => Some(Action::Confirm(false)),
                KeyCode::Esc => Some(Action::Cancel),
                _ => None,
            };
        }
        Some(Prompt::Weight { .. } | Prompt::Filter) => {
            return match key.code {
                KeyCode::Enter => Some(Action::Submit),
                KeyCode::Esc => Some(Action::Cancel),
                KeyCode::Backspace => Some(Action::Backspace),
                KeyCode::Char(c) if !ctrl => Some(Action::Input(c)),
                _ => None,
            };
        }
        None => {}
    }
    if app.help {
        return match key.code {
            KeyCode::Char('q') => Some(Action::Quit),
            KeyCode::Char('?') | KeyCode::Esc => Some(Action::Cancel),
            _ => None,
        };
    }
    if app.capture.is_some() {
        return capture_panel(key);
    }
    let action = match key.code {
        KeyCode::Char('q') => Action::Quit,
        KeyCode::Tab => Action::NextTab,
        KeyCode::BackTab => Action::PrevTab,
        KeyCode::Char(c @ '1'..='7') => Action::GoTo(Tab::ALL[(c as u8 - b'1') as usize]),
        KeyCode::Left | KeyCode::Char('h') => Action::PrevTab,
        KeyCode::Right | KeyCode::Char('l') => Action::NextTab,
        KeyCode::Up | KeyCode::Char('k') => Action::Up,
        KeyCode::Down | KeyCode::Char('j') => Action::Down,
        KeyCode::PageUp => Action::PageUp,
        KeyCode::PageDown => Action::PageDown,
        KeyCode::Home | KeyCode::Char('g') => Action::Top,
        KeyCode::End | KeyCode::Char('G') => Action::Bottom,
        KeyCode::Enter => Action::Open,
        KeyCode::Esc => Action::Cancel,
        KeyCode::Char('s') => Action::Sort,
        KeyCode::Char('S') => Action::ReverseSort,
        KeyCode::Char('/') => Action::StartFilter,
        KeyCode::Char('d') => Action::Backend(BackendAction::Drain),
        KeyCode::Char('u') => Action::Backend(BackendAction::Undrain),
        KeyCode::Char('x') => Action::Backend(BackendAction::Disable),
        KeyCode::Char('e') => Action::Backend(BackendAction::Enable),
        KeyCode::Char('w') => Action::StartWeight,
        KeyCode::Char('W') => Action::Withdraw,
        KeyCode::Char('a') => Action::Announce,
        KeyCode::Char('c') => Action::Capture,
        KeyCode::Char('R') => Action::Reload,
        KeyCode::Char('r') => Action::Refresh,
        KeyCode::Char('?') => Action::Help,
        _ => return None,
    };
    Some(action)
}

/// The capture panel covers the view: its keys only (scrolling, `c` again), until Esc.
fn capture_panel(key: KeyEvent) -> Option<Action> {
    match key.code {
        KeyCode::Char('q') => Some(Action::Quit),
        KeyCode::Esc => Some(Action::Cancel),
        KeyCode::Char('c') => Some(Action::Capture),
        KeyCode::Char('?') => Some(Action::Help),
        KeyCode::Up | KeyCode::Char('k') => Some(Action::Up),
        KeyCode::Down | KeyCode::Char('j') => Some(Action::Down),
        KeyCode::PageUp => Some(Action::PageUp),
        KeyCode::PageDown => Some(Action::PageDown),
        KeyCode::Home | KeyCode::Char('g') => Some(Action::Top),
        KeyCode::End | KeyCode::Char('G') => Some(Action::Bottom),
        _ => None,
    }
}

/// The keys, for the footer and the help page: (keys, what they do).
pub const KEYS: &[(&str, &str)] = &[
    ("1-7 Tab S-Tab ←→ h l", "switch view"),
    ("↑↓ j k PgUp PgDn g G", "move the selection"),
    ("Enter", "VIPs: show the selected VIP's backends"),
    ("s / S", "VIPs: cycle the sort column / reverse it"),
    ("/", "VIPs: filter by name, address, mode (Esc clears)"),
    ("d / u", "Backends: drain (asks y/n) / undrain"),
    ("x / e", "Backends: disable (asks y/n) / enable"),
    ("w", "Backends: set the weight (digits, Enter)"),
    (
        "W / a",
        "withdraw the selected VIP (asks y/n) / announce it",
    ),
    ("c", "capture the selected VIP's frames (50 or 5 s)"),
    ("R", "reload the config file (asks y/n)"),
    ("r", "refresh now"),
    ("Esc", "cancel, close this page, hide error details"),
    ("?", "this page"),
    ("Ctrl-L", "repaint the whole screen"),
    ("q Ctrl-C", "quit (forwarding carries on)"),
];
