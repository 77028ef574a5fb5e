//! What each [`Action`] does to the [`App`], one method per concern: prompts (Esc, y/n,
//! typing, Enter), moving around (views, selection, sort, filter) and the operator's
//! changes (backends, weights, announcements, reload), which become [`Effect`]s.

use api::{BackendAction, Command, Vip};

use super::{Action, App, Effect, Prompt, StatusLine, Tab};

/// Lines PageUp/PageDown move.
const PAGE: usize = 10;

impl App {
    pub(super) fn on_action(&mut self, action: Action) -> Vec<Effect> {
        // Any key but Esc leaves the previous error's details behind.
        if !matches!(action, Action::Cancel)
            && let Some(s) = &mut self.status_line
        {
            s.details.clear();
        }
        match action {
            Action::Quit => {
                self.quit = true;
                Vec::new()
            }
            Action::Help => {
                self.help = !self.help;
                Vec::new()
            }
            Action::Cancel => {
                self.cancel();
                Vec::new()
            }
            Action::Confirm(yes) => self.answer(yes),
            Action::Input(c) => {
                self.type_char(c);
                Vec::new()
            }
            Action::Backspace => {
                self.backspace();
                Vec::new()
            }
            Action::Submit => self.submit(),
            Action::NextTab => self.set_tab(self.tab.next()),
            Action::PrevTab => self.set_tab(self.tab.prev()),
            Action::GoTo(tab) => self.set_tab(tab),
            Action::Open => self.open(),
            Action::Up
            | Action::Down
            | Action::PageUp
            | Action::PageDown
            | Action::Top
            | Action::Bottom => {
                self.step(action);
                Vec::new()
            }
            Action::Sort | Action::ReverseSort | Action::StartFilter => {
                self.arrange(action);
                Vec::new()
            }
            Action::Backend(a) => self.backend(a),
            Action::StartWeight => {
                self.start_weight();
                Vec::new()
            }
            Action::Withdraw => {
                self.withdraw();
                Vec::new()
            }
            Action::Announce => match self.vip_target() {
                Some(v) => self.start(Effect::Send(Command::Announce {
                    vip: v.name,
                    announce: true,
                })),
                None => Vec::new(),
            },
            Action::Capture => self.start_capture(),
            Action::Reload => {
                self.reload();
                Vec::new()
            }
            Action::Refresh => self.poll(),
        }
    }

    pub(super) fn poll(&mut self) -> Vec<Effect> {
        if self.polling {
            return Vec::new();
        }
        self.polling = true;
        vec![Effect::Poll {
            vip: self.selected_vip.clone(),
            since: self.last_seq,
        }]
    }

    // Prompts.

    /// Esc: closes the help page, else a prompt, else the capture panel, else the error
    /// details, else the filter.
    fn cancel(&mut self) {
        if self.help {
            self.help = false;
        } else if let Some(p) = self.prompt.take() {
            match p {
                Prompt::Filter => {
                    self.filter.clear();
                }
                Prompt::Confirm { command, .. } => {
                    self.status_line = Some(StatusLine::info(format!(
                        "cancelled: {}",
                        command.describe()
                    )));
                }
                Prompt::Weight { .. } => {
                    self.status_line = Some(StatusLine::info("cancelled: weight"));
                }
            }
        } else if self.capture.is_some() {
            // A capture still running goes on; its result lands on the status line.
            self.capture = None;
        } else if self
            .status_line
            .as_ref()
            .is_some_and(|s| !s.details.is_empty())
        {
            self.status_line = None;
        } else if !self.filter.is_empty() {
            self.filter.clear();
        }
    }

    /// `y` or `n` to a pending confirmation.
    fn answer(&mut self, yes: bool) -> Vec<Effect> {
        match self.prompt.take() {
            Some(Prompt::Confirm { command, .. }) => {
                if yes {
                    self.start(Effect::Send(command))
                } else {
                    self.status_line = Some(StatusLine::info(format!(
                        "cancelled: {}",
                        command.describe()
                    )));
                    Vec::new()
                }
            }
            other => {
                self.prompt = other;
                Vec::new()
            }
        }
    }

    fn type_char(&mut self, c: char) {
        match &mut self.prompt {
            Some(Prompt::Filter) => {
                self.filter.push(c);
                self.reselect_vip();
            }
            Some(Prompt::Weight { input, .. }) if c.is_ascii_digit() && input.len() < 10 => {
                input.push(c);
            }
            _ => {}
        }
    }

    fn backspace(&mut self) {
        match &mut self.prompt {
            Some(Prompt::Filter) => {
                self.filter.pop();
                self.reselect_vip();
            }
            Some(Prompt::Weight { input, .. }) => {
                input.pop();
            }
            _ => {}
        }
    }

    /// Enter in a prompt: keeps the filter, or sends the typed weight.
    fn submit(&mut self) -> Vec<Effect> {
        match self.prompt.take() {
            Some(Prompt::Filter) => Vec::new(),
            Some(Prompt::Weight {
                vip,
                backend,
                input,
            }) => match input.parse::<u32>() {
                Ok(weight) => self.start(Effect::Send(Command::Weight {
                    vip,
                    backend,
                    weight,
                })),
                Err(_) => {
                    self.status_line = Some(StatusLine::error(format!(
                        "weight must be a whole number 0-{}, not {input:?}",
                        u32::MAX
                    )));
                    Vec::new()
                }
            },
            other => {
                self.prompt = other;
                Vec::new()
            }
        }
    }

    // Moving around.

    fn set_tab(&mut self, tab: Tab) -> Vec<Effect> {
        self.tab = tab;
        if tab == Tab::Backends
            && self.selected_vip.is_some()
            && self.backends_vip != self.selected_vip
        {
            return self.poll();
        }
        Vec::new()
    }

    /// Enter on a VIP: its backends.
    fn open(&mut self) -> Vec<Effect> {
        if self.tab == Tab::Vips && self.selected_vip.is_some() {
            self.backend_sel = 0;
            return self.set_tab(Tab::Backends);
        }
        Vec::new()
    }

    /// Up, Down, PageUp, PageDown, Top, Bottom in the capture panel, else in the current
    /// view's list.
    fn step(&mut self, action: Action) {
        if self.capture.is_some() {
            let page = PAGE as isize;
            self.scroll_capture(match action {
                Action::Up => 1,
                Action::Down => -1,
                Action::PageUp => page,
                Action::PageDown => -page,
                Action::Top => isize::MAX,
                Action::Bottom => isize::MIN,
                _ => 0,
            });
            return;
        }
        match action {
            Action::Up => self.move_selection(|i, _| i.saturating_sub(1)),
            Action::Down => self.move_selection(|i, n| (i + 1).min(n - 1)),
            Action::PageUp => self.move_selection(|i, _| i.saturating_sub(PAGE)),
            Action::PageDown => self.move_selection(|i, n| (i + PAGE).min(n - 1)),
            Action::Top => self.move_selection(|_, _| 0),
            Action::Bottom => self.move_selection(|_, n| n - 1),
            _ => {}
        }
    }

    fn move_selection(&mut self, f: impl Fn(usize, usize) -> usize) {
        match self.tab {
            Tab::Overview | Tab::Conns | Tab::Fleet => {}
            Tab::Vips => {
                let names: Vec<String> =
                    self.visible_vips().iter().map(|v| v.name.clone()).collect();
                if names.is_empty() {
                    return;
                }
                let next = match self.vip_row() {
                    Some(i) => f(i, names.len()),
                    None => 0,
                };
                self.selected_vip = Some(names[next].clone());
            }
            Tab::Backends => {
                let n = self.shown_backends().len();
                if n > 0 {
                    self.backend_sel = f(self.backend_sel.min(n - 1), n);
                }
            }
            Tab::Bgp => {
                let n = self.peers().len();
                if n > 0 {
                    self.peer_sel = f(self.peer_sel.min(n - 1), n);
                }
            }
            Tab::Events => {
                let n = self.events.len();
                if n > 0 {
                    self.event_sel = f(self.event_sel.min(n - 1), n);
                }
            }
        }
    }

    /// Sort, reverse the sort, start the filter: the VIP list's order and contents.
    fn arrange(&mut self, action: Action) {
        match action {
            Action::Sort if self.tab == Tab::Vips => {
                self.sort = self.sort.next();
                self.sort_reverse = false;
                self.status_line = Some(StatusLine::info(format!(
                    "VIPs sorted by {}",
                    self.sort.title()
                )));
            }
            Action::ReverseSort if self.tab == Tab::Vips => {
                self.sort_reverse = !self.sort_reverse;
            }
            Action::StartFilter => {
                if self.tab != Tab::Vips {
                    self.tab = Tab::Vips;
                }
                self.prompt = Some(Prompt::Filter);
            }
            _ => {}
        }
    }

    /// After the filter changed: keep the selection on a visible VIP.
    fn reselect_vip(&mut self) {
        if self.vip_row().is_none()
            && let Some(first) = self.visible_vips().first()
        {
            self.selected_vip = Some(first.name.clone());
        }
    }

    // The operator's changes.

    /// Drain and disable ask first; undrain and enable go straight out.
    fn backend(&mut self, action: BackendAction) -> Vec<Effect> {
        let Some((vip, backend)) = self.backend_target() else {
            return Vec::new();
        };
        let command = Command::Backend {
            vip: vip.clone(),
            backend: backend.clone(),
            action,
        };
        match action {
            BackendAction::Drain => {
                self.confirm(
                    format!("Drain backend {backend} of VIP {vip}? y/n"),
                    command,
                );
                Vec::new()
            }
            BackendAction::Disable => {
                self.confirm(
                    format!("Disable backend {backend} of VIP {vip}? y/n"),
                    command,
                );
                Vec::new()
            }
            BackendAction::Undrain | BackendAction::Enable => self.start(Effect::Send(command)),
        }
    }

    fn start_weight(&mut self) {
        if let Some((vip, backend)) = self.backend_target() {
            self.prompt = Some(Prompt::Weight {
                vip,
                backend,
                input: String::new(),
            });
        }
    }

    fn withdraw(&mut self) {
        if let Some(v) = self.vip_target() {
            self.confirm(
                format!("Withdraw VIP {} ({})? y/n", v.name, v.address),
                Command::Announce {
                    vip: v.name,
                    announce: false,
                },
            );
        }
    }

    fn reload(&mut self) {
        let file = self
            .status
            .as_ref()
            .map(|s| format!(" {}", s.config_path))
            .unwrap_or_default();
        self.confirm(
            format!("Reload the config file{file}? y/n"),
            Command::Reload,
        );
    }

    /// The selected backend with its VIP, or a status line saying what to select.
    fn backend_target(&mut self) -> Option<(String, String)> {
        if self.tab != Tab::Backends {
            self.status_line = Some(StatusLine::error(
                "select a backend first: Backends tab (3)",
            ));
            return None;
        }
        match (self.selected_vip.clone(), self.selected_backend()) {
            (Some(vip), Some(b)) => Some((vip, b.id.clone())),
            _ => {
                self.status_line = Some(StatusLine::error("no backend selected"));
                None
            }
        }
    }

    /// The VIP announce/withdraw/capture act on, or a status line saying what to select.
    pub(super) fn vip_target(&mut self) -> Option<Vip> {
        if !matches!(self.tab, Tab::Vips | Tab::Backends) {
            self.status_line = Some(StatusLine::error("select a VIP first: VIPs tab (2)"));
            return None;
        }
        let vip = self.selected_vip().cloned();
        if vip.is_none() {
            self.status_line = Some(StatusLine::error("no VIP selected"));
        }
        vip
    }

    fn confirm(&mut self, question: String, command: Command) {
        self.prompt = Some(Prompt::Confirm { question, command });
    }

    /// Runs an action now: shows what is happening and asks the runtime for the call.
    pub(super) fn start(&mut self, effect: Effect) -> Vec<Effect> {
        self.status_line = Some(StatusLine::info(format!("{}…", effect.describe())));
        vec![effect]
    }
}
