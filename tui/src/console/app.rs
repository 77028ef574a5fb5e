//! The console's model and its one transition, `update`.
//!
//! Everything the screen shows is in [`App`]: the last API samples, the previous ones (for
//! rates), the selection, sort, filter, a pending confirmation and the status line. Keys map
//! to [`Action`]s ([`keymap`]); [`update`] applies a [`Msg`] (a key, a timer tick, a poll
//! result, an action's result) and returns the API calls to make as [`Effect`]s, which the
//! runtime executes and feeds back as messages. Nothing here reads the clock, touches the
//! terminal or a socket, so tests drive the whole console through `update`.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::rates::{BackendRates, Counters, TotalRates, VipRates};
use crate::api::{Backend, BackendAction, Bgp, Commit, Event, Status, Vip};

/// Samples of traffic kept per backend for its sparkline.
pub const HISTORY: usize = 60;
/// Events kept in memory (the appliance's ring is the authority).
pub const EVENTS_KEPT: usize = 1000;
/// Lines PageUp/PageDown move.
const PAGE: usize = 10;

/// The views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tab {
    Overview,
    Vips,
    Backends,
    Bgp,
    Events,
}

impl Tab {
    pub const ALL: [Tab; 5] = [
        Tab::Overview,
        Tab::Vips,
        Tab::Backends,
        Tab::Bgp,
        Tab::Events,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Overview => "Overview",
            Tab::Vips => "VIPs",
            Tab::Backends => "Backends",
            Tab::Bgp => "BGP",
            Tab::Events => "Events",
        }
    }

    pub fn index(self) -> usize {
        Tab::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }

    fn next(self) -> Tab {
        Tab::ALL[(self.index() + 1) % Tab::ALL.len()]
    }

    fn prev(self) -> Tab {
        Tab::ALL[(self.index() + Tab::ALL.len() - 1) % Tab::ALL.len()]
    }
}

/// The VIP list's sort column (`s` cycles, `S` reverses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VipSort {
    Name,
    Address,
    Healthy,
    Pps,
    Bps,
    NewFlows,
    ActiveFlows,
    Imbalance,
}

impl VipSort {
    pub const ALL: [VipSort; 8] = [
        VipSort::Name,
        VipSort::Address,
        VipSort::Healthy,
        VipSort::Pps,
        VipSort::Bps,
        VipSort::NewFlows,
        VipSort::ActiveFlows,
        VipSort::Imbalance,
    ];

    pub fn title(self) -> &'static str {
        match self {
            VipSort::Name => "name",
            VipSort::Address => "address",
            VipSort::Healthy => "healthy",
            VipSort::Pps => "pps",
            VipSort::Bps => "bps",
            VipSort::NewFlows => "new flows/s",
            VipSort::ActiveFlows => "active flows",
            VipSort::Imbalance => "imbalance",
        }
    }

    fn next(self) -> VipSort {
        let i = VipSort::ALL.iter().position(|s| *s == self).unwrap_or(0);
        VipSort::ALL[(i + 1) % VipSort::ALL.len()]
    }

    /// Names and addresses read best A to Z; numbers biggest first.
    pub fn descending(self) -> bool {
        !matches!(self, VipSort::Name | VipSort::Address)
    }
}

/// One poll round's answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub status: Status,
    pub vips: Vec<Vip>,
    /// The backends of the VIP the poll asked for (`None`: none asked, or the VIP is gone).
    pub backends: Option<(String, Vec<Backend>)>,
    pub bgp: Bgp,
    /// Events after the `since` the poll was given, oldest first.
    pub events: Vec<Event>,
}

/// A failed action as the operator should read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The API's `error` (or why the request did not get an answer).
    pub message: String,
    /// Every error of a rejected config (reload).
    pub errors: Vec<String>,
}

/// What `update` reacts to.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    Key(KeyEvent),
    /// The refresh timer fired.
    Tick,
    /// The terminal changed size (the next draw uses the new size).
    Resize,
    /// A poll round ended at `at`.
    Polled {
        at: Instant,
        result: Result<Box<Snapshot>, String>,
    },
    /// An action (`what`, as [`Effect::describe`] says it) got its reply.
    Done {
        what: String,
        result: Result<Commit, Failure>,
    },
}

/// API calls `update` asks the runtime to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Status, VIPs, BGP, events after `since`, and the backends of `vip`.
    Poll {
        vip: Option<String>,
        since: u64,
    },
    Backend {
        vip: String,
        backend: String,
        action: BackendAction,
    },
    Weight {
        vip: String,
        backend: String,
        weight: u32,
    },
    Announce {
        vip: String,
        announce: bool,
    },
    Reload,
}

impl Effect {
    /// The action in words, for the status line.
    pub fn describe(&self) -> String {
        match self {
            Effect::Poll { .. } => "refresh".to_string(),
            Effect::Backend {
                vip,
                backend,
                action,
            } => format!("{} backend {backend} of VIP {vip}", action.name()),
            Effect::Weight {
                vip,
                backend,
                weight,
            } => format!("weight {weight} for backend {backend} of VIP {vip}"),
            Effect::Announce { vip, announce } => {
                format!(
                    "{} VIP {vip}",
                    if *announce { "announce" } else { "withdraw" }
                )
            }
            Effect::Reload => "reload".to_string(),
        }
    }
}

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
    Reload,
    Refresh,
    Help,
    /// Esc: close the help page, a prompt, the error details, the filter.
    Cancel,
    /// Text typed into a prompt (filter, weight).
    Input(char),
    Backspace,
    /// Enter in a prompt.
    Submit,
    /// `y` or `n` to a confirmation.
    Confirm(bool),
}

/// A question on the status line waiting for keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// A destructive action waiting for `y`.
    Confirm { question: String, effect: Effect },
    /// `w`: the new weight being typed.
    Weight {
        vip: String,
        backend: String,
        input: String,
    },
    /// `/`: the VIP filter being typed (applied as it is typed).
    Filter,
}

/// The API connection as the console knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conn {
    /// No answer yet.
    Connecting,
    Up,
    /// The last poll failed; the console keeps polling.
    Down {
        error: String,
    },
}

/// The line above the footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusLine {
    pub text: String,
    pub error: bool,
    /// Extra lines shown in a panel (every error of a rejected reload).
    pub details: Vec<String>,
}

impl StatusLine {
    fn info(text: impl Into<String>) -> StatusLine {
        StatusLine {
            text: text.into(),
            error: false,
            details: Vec::new(),
        }
    }

    fn error(text: impl Into<String>) -> StatusLine {
        StatusLine {
            text: text.into(),
            error: true,
            details: Vec::new(),
        }
    }
}

/// Everything the console shows.
#[derive(Debug, Clone)]
pub struct App {
    /// The API endpoint, as the banner names it.
    pub endpoint: String,
    /// No colours: selection by reverse video, emphasis by bold.
    pub no_color: bool,
    pub tab: Tab,
    pub help: bool,
    pub conn: Conn,
    pub quit: bool,

    pub status: Option<Status>,
    pub total_rates: TotalRates,
    pub vips: Vec<Vip>,
    pub vip_rates: HashMap<String, VipRates>,
    /// The selected VIP by name (stable across sorting and refreshes).
    pub selected_vip: Option<String>,
    /// The VIP `backends` belong to.
    pub backends_vip: Option<String>,
    pub backends: Vec<Backend>,
    pub backend_rates: HashMap<String, BackendRates>,
    /// Per backend id, its last [`HISTORY`] packet rates, oldest first.
    pub history: HashMap<String, VecDeque<u64>>,
    pub backend_sel: usize,
    pub bgp: Option<Bgp>,
    pub peer_sel: usize,
    /// Oldest first (the view shows newest first).
    pub events: VecDeque<Event>,
    pub last_seq: u64,
    /// Row in the newest-first event list.
    pub event_sel: usize,

    pub sort: VipSort,
    pub sort_reverse: bool,
    pub filter: String,
    pub prompt: Option<Prompt>,
    pub status_line: Option<StatusLine>,
    /// A poll is on its way (no second one until it ends).
    pub polling: bool,

    prev_totals: Option<(Instant, Counters)>,
    prev_vips: HashMap<String, (Instant, Counters)>,
    prev_backends: HashMap<String, (Instant, Counters)>,
}

impl App {
    pub fn new(endpoint: impl Into<String>, no_color: bool) -> App {
        App {
            endpoint: endpoint.into(),
            no_color,
            tab: Tab::Overview,
            help: false,
            conn: Conn::Connecting,
            quit: false,
            status: None,
            total_rates: TotalRates::default(),
            vips: Vec::new(),
            vip_rates: HashMap::new(),
            selected_vip: None,
            backends_vip: None,
            backends: Vec::new(),
            backend_rates: HashMap::new(),
            history: HashMap::new(),
            backend_sel: 0,
            bgp: None,
            peer_sel: 0,
            events: VecDeque::new(),
            last_seq: 0,
            event_sel: 0,
            sort: VipSort::Name,
            sort_reverse: false,
            filter: String::new(),
            prompt: None,
            status_line: None,
            polling: false,
            prev_totals: None,
            prev_vips: HashMap::new(),
            prev_backends: HashMap::new(),
        }
    }

    /// The VIP list as shown: filtered by `/`, sorted by `s`.
    pub fn visible_vips(&self) -> Vec<&Vip> {
        let needle = self.filter.to_lowercase();
        let mut list: Vec<&Vip> = self
            .vips
            .iter()
            .filter(|v| {
                needle.is_empty()
                    || v.name.to_lowercase().contains(&needle)
                    || v.address.to_lowercase().contains(&needle)
                    || v.mode.contains(&needle)
                    || v.scheduler.contains(&needle)
            })
            .collect();
        let rate = |v: &Vip, f: fn(&VipRates) -> Option<f64>| {
            self.vip_rates.get(&v.name).and_then(f).unwrap_or(-1.0)
        };
        list.sort_by(|a, b| {
            let ord = match self.sort {
                VipSort::Name => a.name.cmp(&b.name),
                VipSort::Address => (&a.address, a.port).cmp(&(&b.address, b.port)),
                VipSort::Healthy => (a.backends_healthy, a.backends_total)
                    .cmp(&(b.backends_healthy, b.backends_total)),
                VipSort::Pps => rate(a, |r| r.pps).total_cmp(&rate(b, |r| r.pps)),
                VipSort::Bps => rate(a, |r| r.bps).total_cmp(&rate(b, |r| r.bps)),
                VipSort::NewFlows => rate(a, |r| r.new_flows).total_cmp(&rate(b, |r| r.new_flows)),
                VipSort::ActiveFlows => a.active_flows.cmp(&b.active_flows),
                VipSort::Imbalance => a
                    .hash_imbalance
                    .unwrap_or(-1.0)
                    .total_cmp(&b.hash_imbalance.unwrap_or(-1.0)),
            };
            let ord = if self.sort.descending() {
                ord.reverse()
            } else {
                ord
            };
            let ord = if self.sort_reverse {
                ord.reverse()
            } else {
                ord
            };
            ord.then_with(|| a.name.cmp(&b.name))
        });
        list
    }

    /// The selected VIP's row in [`App::visible_vips`].
    pub fn vip_row(&self) -> Option<usize> {
        let name = self.selected_vip.as_ref()?;
        self.visible_vips().iter().position(|v| &v.name == name)
    }

    pub fn selected_vip(&self) -> Option<&Vip> {
        let name = self.selected_vip.as_ref()?;
        self.vips.iter().find(|v| &v.name == name)
    }

    /// The backends shown: those of the selected VIP (empty while they load).
    pub fn shown_backends(&self) -> &[Backend] {
        if self.backends_vip.is_some() && self.backends_vip == self.selected_vip {
            &self.backends
        } else {
            &[]
        }
    }

    pub fn selected_backend(&self) -> Option<&Backend> {
        self.shown_backends().get(self.backend_sel)
    }

    pub fn peers(&self) -> &[crate::api::Peer] {
        self.bgp.as_ref().map(|b| b.peers.as_slice()).unwrap_or(&[])
    }

    fn poll(&mut self) -> Vec<Effect> {
        if self.polling {
            return Vec::new();
        }
        self.polling = true;
        vec![Effect::Poll {
            vip: self.selected_vip.clone(),
            since: self.last_seq,
        }]
    }

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

    fn move_selection(&mut self, f: impl Fn(usize, usize) -> usize) {
        match self.tab {
            Tab::Overview => {}
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

    /// After the filter changed: keep the selection on a visible VIP.
    fn reselect_vip(&mut self) {
        if self.vip_row().is_none()
            && let Some(first) = self.visible_vips().first()
        {
            self.selected_vip = Some(first.name.clone());
        }
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

    /// The VIP announce/withdraw acts on, or a status line saying what to select.
    fn vip_target(&mut self) -> Option<Vip> {
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

    fn confirm(&mut self, question: String, effect: Effect) {
        self.prompt = Some(Prompt::Confirm { question, effect });
    }

    /// Runs an action now: shows what is happening and asks the runtime for the call.
    fn start(&mut self, effect: Effect) -> Vec<Effect> {
        self.status_line = Some(StatusLine::info(format!("{}…", effect.describe())));
        vec![effect]
    }

    fn apply_snapshot(&mut self, at: Instant, snap: Snapshot) {
        // A smaller uptime: the appliance restarted, so its counters and event numbers did too.
        if let Some(old) = &self.status
            && snap.status.uptime_seconds < old.uptime_seconds
        {
            self.events.clear();
            self.last_seq = 0;
            self.event_sel = 0;
            self.prev_totals = None;
            self.prev_vips.clear();
            self.prev_backends.clear();
        }

        let totals = Counters::totals(&snap.status.totals);
        self.total_rates = TotalRates::from_samples(self.prev_totals.as_ref(), (at, &totals));
        self.prev_totals = Some((at, totals));
        self.status = Some(snap.status);

        let mut rates = HashMap::new();
        let mut prev = HashMap::new();
        for v in &snap.vips {
            let c = Counters::vip(v);
            rates.insert(
                v.name.clone(),
                VipRates::from_samples(self.prev_vips.get(&v.name), (at, &c)),
            );
            prev.insert(v.name.clone(), (at, c));
        }
        self.vip_rates = rates;
        self.prev_vips = prev;
        self.vips = snap.vips;
        if self.selected_vip().is_none() {
            self.selected_vip = self.visible_vips().first().map(|v| v.name.clone());
        }

        if let Some((vip, backends)) = snap.backends {
            if self.backends_vip.as_ref() != Some(&vip) {
                self.history.clear();
                self.prev_backends.clear();
                self.backend_sel = 0;
            }
            let mut rates = HashMap::new();
            let mut prev = HashMap::new();
            for b in &backends {
                let c = Counters::backend(b);
                let r = BackendRates::from_samples(self.prev_backends.get(&b.id), (at, &c));
                if let Some(pps) = r.pps {
                    let h = self.history.entry(b.id.clone()).or_default();
                    h.push_back(pps.round() as u64);
                    while h.len() > HISTORY {
                        h.pop_front();
                    }
                }
                rates.insert(b.id.clone(), r);
                prev.insert(b.id.clone(), (at, c));
            }
            self.history.retain(|id, _| prev.contains_key(id));
            self.backend_rates = rates;
            self.prev_backends = prev;
            self.backends = backends;
            self.backends_vip = Some(vip);
            self.backend_sel = self.backend_sel.min(self.backends.len().saturating_sub(1));
        }

        self.peer_sel = self.peer_sel.min(snap.bgp.peers.len().saturating_sub(1));
        self.bgp = Some(snap.bgp);

        for e in snap.events {
            if e.seq > self.last_seq {
                self.last_seq = e.seq;
                self.events.push_back(e);
            }
        }
        while self.events.len() > EVENTS_KEPT {
            self.events.pop_front();
        }
        self.event_sel = self.event_sel.min(self.events.len().saturating_sub(1));
    }

    fn on_action(&mut self, action: Action) -> Vec<Effect> {
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
                if self.help {
                    self.help = false;
                } else if let Some(p) = self.prompt.take() {
                    match p {
                        Prompt::Filter => {
                            self.filter.clear();
                        }
                        Prompt::Confirm { effect, .. } => {
                            self.status_line = Some(StatusLine::info(format!(
                                "cancelled: {}",
                                effect.describe()
                            )));
                        }
                        Prompt::Weight { .. } => {
                            self.status_line = Some(StatusLine::info("cancelled: weight"));
                        }
                    }
                } else if self
                    .status_line
                    .as_ref()
                    .is_some_and(|s| !s.details.is_empty())
                {
                    self.status_line = None;
                } else if !self.filter.is_empty() {
                    self.filter.clear();
                }
                Vec::new()
            }
            Action::Confirm(yes) => match self.prompt.take() {
                Some(Prompt::Confirm { effect, .. }) => {
                    if yes {
                        self.start(effect)
                    } else {
                        self.status_line = Some(StatusLine::info(format!(
                            "cancelled: {}",
                            effect.describe()
                        )));
                        Vec::new()
                    }
                }
                other => {
                    self.prompt = other;
                    Vec::new()
                }
            },
            Action::Input(c) => {
                match &mut self.prompt {
                    Some(Prompt::Filter) => {
                        self.filter.push(c);
                        self.reselect_vip();
                    }
                    Some(Prompt::Weight { input, .. })
                        if c.is_ascii_digit() && input.len() < 10 =>
                    {
                        input.push(c);
                    }
                    _ => {}
                }
                Vec::new()
            }
            Action::Backspace => {
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
                Vec::new()
            }
            Action::Submit => match self.prompt.take() {
                Some(Prompt::Filter) => Vec::new(),
                Some(Prompt::Weight {
                    vip,
                    backend,
                    input,
                }) => match input.parse::<u32>() {
                    Ok(weight) => self.start(Effect::Weight {
                        vip,
                        backend,
                        weight,
                    }),
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
            },
            Action::NextTab => self.set_tab(self.tab.next()),
            Action::PrevTab => self.set_tab(self.tab.prev()),
            Action::GoTo(tab) => self.set_tab(tab),
            Action::Open => {
                if self.tab == Tab::Vips && self.selected_vip.is_some() {
                    self.backend_sel = 0;
                    return self.set_tab(Tab::Backends);
                }
                Vec::new()
            }
            Action::Up => {
                self.move_selection(|i, _| i.saturating_sub(1));
                Vec::new()
            }
            Action::Down => {
                self.move_selection(|i, n| (i + 1).min(n - 1));
                Vec::new()
            }
            Action::PageUp => {
                self.move_selection(|i, _| i.saturating_sub(PAGE));
                Vec::new()
            }
            Action::PageDown => {
                self.move_selection(|i, n| (i + PAGE).min(n - 1));
                Vec::new()
            }
            Action::Top => {
                self.move_selection(|_, _| 0);
                Vec::new()
            }
            Action::Bottom => {
                self.move_selection(|_, n| n - 1);
                Vec::new()
            }
            Action::Sort => {
                if self.tab == Tab::Vips {
                    self.sort = self.sort.next();
                    self.sort_reverse = false;
                    self.status_line = Some(StatusLine::info(format!(
                        "VIPs sorted by {}",
                        self.sort.title()
                    )));
                }
                Vec::new()
            }
            Action::ReverseSort => {
                if self.tab == Tab::Vips {
                    self.sort_reverse = !self.sort_reverse;
                }
                Vec::new()
            }
            Action::StartFilter => {
                if self.tab != Tab::Vips {
                    self.tab = Tab::Vips;
                }
                self.prompt = Some(Prompt::Filter);
                Vec::new()
            }
            Action::Backend(action) => {
                let Some((vip, backend)) = self.backend_target() else {
                    return Vec::new();
                };
                let effect = Effect::Backend {
                    vip: vip.clone(),
                    backend: backend.clone(),
                    action,
                };
                match action {
                    BackendAction::Drain => {
                        self.confirm(format!("Drain backend {backend} of VIP {vip}? y/n"), effect);
                        Vec::new()
                    }
                    BackendAction::Disable => {
                        self.confirm(
                            format!("Disable backend {backend} of VIP {vip}? y/n"),
                            effect,
                        );
                        Vec::new()
                    }
                    BackendAction::Undrain | BackendAction::Enable => self.start(effect),
                }
            }
            Action::StartWeight => {
                if let Some((vip, backend)) = self.backend_target() {
                    self.prompt = Some(Prompt::Weight {
                        vip,
                        backend,
                        input: String::new(),
                    });
                }
                Vec::new()
            }
            Action::Withdraw => {
                if let Some(v) = self.vip_target() {
                    self.confirm(
                        format!("Withdraw VIP {} ({})? y/n", v.name, v.address),
                        Effect::Announce {
                            vip: v.name,
                            announce: false,
                        },
                    );
                }
                Vec::new()
            }
            Action::Announce => match self.vip_target() {
                Some(v) => self.start(Effect::Announce {
                    vip: v.name,
                    announce: true,
                }),
                None => Vec::new(),
            },
            Action::Reload => {
                let file = self
                    .status
                    .as_ref()
                    .map(|s| format!(" {}", s.config_path))
                    .unwrap_or_default();
                self.confirm(format!("Reload the config file{file}? y/n"), Effect::Reload);
                Vec::new()
            }
            Action::Refresh => self.poll(),
        }
    }
}

/// Applies one message; returns the API calls to make.
pub fn update(app: &mut App, msg: Msg) -> Vec<Effect> {
    match msg {
        Msg::Key(key) => match keymap(app, key) {
            Some(action) => app.on_action(action),
            None => Vec::new(),
        },
        Msg::Tick => app.poll(),
        Msg::Resize => Vec::new(),
        Msg::Polled { at, result } => {
            app.polling = false;
            match result {
                Ok(snap) => {
                    if matches!(app.conn, Conn::Down { .. }) {
                        app.status_line =
                            Some(StatusLine::info(format!("reconnected to {}", app.endpoint)));
                    }
                    app.conn = Conn::Up;
                    let wanted = app.selected_vip.clone();
                    let got = snap.backends.as_ref().map(|(v, _)| v.clone());
                    app.apply_snapshot(at, *snap);
                    // The selection moved while the poll was out: fetch the right backends
                    // now rather than a refresh later.
                    if app.tab == Tab::Backends && wanted.is_some() && got != wanted {
                        return app.poll();
                    }
                    Vec::new()
                }
                Err(error) => {
                    app.conn = Conn::Down { error };
                    Vec::new()
                }
            }
        }
        Msg::Done { what, result } => {
            app.status_line = Some(match result {
                // The API's message already names the change and its version.
                Ok(c) => StatusLine::info(format!(
                    "{}{}",
                    if c.message.is_empty() {
                        format!("{what}: version {}", c.version)
                    } else {
                        c.message
                    },
                    if c.synced {
                        ", on every worker"
                    } else {
                        ", not yet on every worker"
                    }
                )),
                Err(f) => StatusLine {
                    text: if f.errors.is_empty() {
                        format!("{what} failed: {}", f.message)
                    } else {
                        format!(
                            "{what} failed: {} ({} errors, Esc hides them)",
                            f.message,
                            f.errors.len()
                        )
                    },
                    error: true,
                    details: f.errors,
                },
            });
            app.poll()
        }
    }
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
    let action = match key.code {
        KeyCode::Char('q') => Action::Quit,
        KeyCode::Tab => Action::NextTab,
        KeyCode::BackTab => Action::PrevTab,
        KeyCode::Char(c @ '1'..='5') => Action::GoTo(Tab::ALL[(c as u8 - b'1') as usize]),
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
        KeyCode::Char('R') => Action::Reload,
        KeyCode::Char('r') => Action::Refresh,
        KeyCode::Char('?') => Action::Help,
        _ => return None,
    };
    Some(action)
}

/// The keys, for the footer and the help page: (keys, what they do).
pub const KEYS: &[(&str, &str)] = &[
    ("1-5 Tab S-Tab ←→ h l", "switch view"),
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
    ("R", "reload the config file (asks y/n)"),
    ("r", "refresh now"),
    ("Esc", "cancel, close this page, hide error details"),
    ("?", "this page"),
    ("Ctrl-L", "repaint the whole screen"),
    ("q Ctrl-C", "quit (forwarding carries on)"),
];
