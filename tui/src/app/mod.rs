//! The console's model and its one transition, `update`.
//!
//! Everything the screen shows is in [`App`]: the last API samples, the previous ones (for
//! rates), the selection, sort, filter, a pending confirmation and the status line. Keys map
//! to [`Action`]s ([`keymap`]); [`update`] applies a [`Msg`] (a key, a timer tick, a poll
//! result, an action's result) and returns the API calls to make as [`Effect`]s, which the
//! runtime executes and feeds back as messages. Nothing here reads the clock, touches the
//! terminal or a socket, so tests drive the whole console through `update`.
//!
//! The model and `update` are here; [`keys`](mod@keys) maps keys to actions, `actions`
//! applies them (one method per concern), `snapshot` takes in a poll round.

mod actions;
mod capture;
pub mod keys;
mod snapshot;

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use api::{Backend, Bgp, CaptureRequest, Command, Commit, Event, FleetStatus, Status, Vip};
use crossterm::event::KeyEvent;

use crate::rates::{BackendRates, Counters, TotalRates, VipRates};
pub use capture::{
    CAPTURE_COUNT, CAPTURE_DURATION_MS, CAPTURE_SNAPLEN, CapturePanel, CaptureState, packet_lines,
};
pub use keys::{Action, KEYS, keymap};

/// Samples of traffic kept per backend for its sparkline.
pub const HISTORY: usize = 60;
/// Events kept in memory (the appliance's ring is the authority).
pub const EVENTS_KEPT: usize = 1000;

/// The views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tab {
    Overview,
    Vips,
    Backends,
    Bgp,
    Events,
    /// The connection tables, FullNAT ports and flood mode.
    Conns,
    /// The fleet this appliance is a member of (`[fleet]`): versions, members, disagreements.
    Fleet,
}

impl Tab {
    pub const ALL: [Tab; 7] = [
        Tab::Overview,
        Tab::Vips,
        Tab::Backends,
        Tab::Bgp,
        Tab::Events,
        Tab::Conns,
        Tab::Fleet,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Overview => "Overview",
            Tab::Vips => "VIPs",
            Tab::Backends => "Backends",
            Tab::Bgp => "BGP",
            Tab::Events => "Events",
            Tab::Conns => "Conns",
            Tab::Fleet => "Fleet",
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
    /// The fleet document (`None`: the appliance runs alone, without `[fleet]`).
    pub fleet: Option<FleetStatus>,
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
    /// A capture of `vip` ended: the pcapng file and the frames the appliance lost.
    Captured {
        vip: String,
        result: Result<(Vec<u8>, u64), Failure>,
    },
}

/// What `update` asks the runtime to do: API calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Status, VIPs, BGP, events after `since`, and the backends of `vip`.
    Poll { vip: Option<String>, since: u64 },
    /// One write call (drain, weight, withdraw, reload...), made by [`api::Client::send`].
    Send(Command),
    /// A capture ([`api::Client::capture`]), answered by [`Msg::Captured`].
    Capture(CaptureRequest),
}

impl Effect {
    /// The action in words, for the status line.
    pub fn describe(&self) -> String {
        match self {
            Effect::Poll { .. } => "refresh".to_string(),
            Effect::Send(command) => command.describe(),
            Effect::Capture(req) => format!(
                "capturing VIP {} (up to {} frames or {} s)",
                req.vip.as_deref().unwrap_or("-"),
                req.count,
                req.duration_ms / 1000
            ),
        }
    }
}

/// A question on the status line waiting for keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// A destructive action waiting for `y`.
    Confirm { question: String, command: Command },
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
    /// The terminal is the Linux console (`TERM=linux`), whose font lacks most block
    /// elements: the sparklines draw with the ones it has.
    pub vt_font: bool,
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
    /// The fleet as this member sees it (`None`: not a fleet member).
    pub fleet: Option<FleetStatus>,

    pub sort: VipSort,
    pub sort_reverse: bool,
    pub filter: String,
    pub prompt: Option<Prompt>,
    pub status_line: Option<StatusLine>,
    /// A poll is on its way (no second one until it ends).
    pub polling: bool,
    /// The capture panel (`c`), shown until Esc.
    pub capture: Option<CapturePanel>,
    /// The VIP a capture request is out for (one at a time, panel shown or not).
    pub capturing: Option<String>,

    prev_totals: Option<(Instant, Counters)>,
    prev_vips: HashMap<String, (Instant, Counters)>,
    prev_backends: HashMap<String, (Instant, Counters)>,
}

impl App {
    pub fn new(endpoint: impl Into<String>, no_color: bool) -> App {
        App {
            endpoint: endpoint.into(),
            no_color,
            vt_font: false,
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
            fleet: None,
            sort: VipSort::Name,
            sort_reverse: false,
            filter: String::new(),
            prompt: None,
            status_line: None,
            polling: false,
            capture: None,
            capturing: None,
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
                    || v.tenant_vni
                        .is_some_and(|n| format!("vni {n}").contains(&needle))
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
                // The underlay's VIPs, then each tenant's network (by VNI).
                VipSort::Address => {
                    (a.tenant_vni, &a.address, a.port).cmp(&(b.tenant_vni, &b.address, b.port))
                }
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

    pub fn peers(&self) -> &[api::Peer] {
        self.bgp.as_ref().map(|b| b.peers.as_slice()).unwrap_or(&[])
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
        Msg::Polled { at, result } => app.on_polled(at, result),
        Msg::Done { what, result } => {
            app.status_line = Some(done_line(&what, result));
            app.poll()
        }
        Msg::Captured { vip, result } => {
            app.on_captured(vip, result);
            Vec::new()
        }
    }
}

/// The status line after an action's reply.
fn done_line(what: &str, result: Result<Commit, Failure>) -> StatusLine {
    match result {
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
    }
}
