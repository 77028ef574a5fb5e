//! The console's I/O: the terminal, the key reader, the refresh timer and the API calls.
//!
//! ```text
//!  crossterm EventStream ──Key/Resize──┐
//!  refresh interval ───────Tick────────┼──> update(&mut App, Msg) ──> view(&App) ──> terminal
//!  effect tasks ──Polled/Done (mpsc)───┘            │
//!        ^                                          │ Vec<Effect>
//!        └──────────── tokio::spawn(execute) <──────┘
//! ```
//!
//! One loop owns the `App`; every API call runs in its own task and reports back through
//! the channel, so a slow or dead appliance never freezes the keys.

use std::time::{Duration, Instant};

use crossterm::event::{Event as TermEvent, EventStream, KeyEventKind};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::app::{App, Effect, Failure, Msg, Snapshot, update};
use crate::view::view;
use crate::{ConsoleError, ConsoleOptions};
use api::{Client, ClientError};

/// Restores the terminal when dropped: on quit, on error, and while a panic unwinds.
/// (`ratatui::try_init` also installs a panic hook that restores it before the message
/// prints, which covers `panic = "abort"` builds.)
struct TerminalGuard(ratatui::DefaultTerminal);

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = self.0.show_cursor();
        ratatui::restore();
    }
}

/// Blanks the screen and makes the next draw write every cell. Not `Terminal::clear`,
/// which asks the terminal for the cursor position: a serial line with nothing on the other
/// end never answers, and the console would give up with an error.
fn repaint(term: &mut ratatui::DefaultTerminal) -> std::io::Result<()> {
    // Spaces over everything ratatui drew, so its idea of the screen is blank...
    term.draw(|f| f.render_widget(ratatui::widgets::Clear, f.area()))?;
    // ...and so is the screen, whatever else wrote to it.
    crossterm::execute!(
        std::io::stdout(),
        crossterm::terminal::Clear(crossterm::terminal::ClearType::All)
    )
}

/// How often the whole screen is repainted.
const FULL_REDRAW: Duration = Duration::from_secs(30);

pub(super) async fn run(opts: ConsoleOptions) -> Result<(), ConsoleError> {
    // Polls give up before the next two would be due; actions (a reload) may take longer.
    let poll_client = Client::new(opts.endpoint.clone())
        .with_timeout((opts.refresh * 2).max(Duration::from_secs(2)));
    let action_client = Client::new(opts.endpoint.clone());
    let mut app = App::new(opts.endpoint.to_string(), opts.no_color);
    app.vt_font = std::env::var("TERM").is_ok_and(|t| t == "linux");

    let mut term = TerminalGuard(ratatui::try_init()?);
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let mut keys = EventStream::new();
    let mut tick = tokio::time::interval(opts.refresh.max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut term_signal =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    // Ctrl-C at the keyboard is a key in raw mode; this is `kill -INT` from elsewhere.
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;

    // Something else may write to the terminal behind ratatui's back (kernel and systemd
    // messages on a system console), and ratatui only redraws what it changed: repaint the
    // whole screen now and then, and on Ctrl-L.
    // Terminals without an alternate screen (a vt220 on a serial line) keep whatever was
    // on them: start from a blank one.
    repaint(&mut term.0)?;
    let mut last_full = Instant::now();
    loop {
        if last_full.elapsed() >= FULL_REDRAW {
            repaint(&mut term.0)?;
            last_full = Instant::now();
        }
        term.0.draw(|f| view(&app, f))?;
        let msg = tokio::select! {
            _ = tick.tick() => Msg::Tick,
            Some(msg) = rx.recv() => msg,
            ev = keys.next() => match ev {
                Some(Ok(TermEvent::Key(k)))
                    if k.kind != KeyEventKind::Release
                        && k.code == crossterm::event::KeyCode::Char('l')
                        && k.modifiers.contains(crossterm::event::KeyModifiers::CONTROL) =>
                {
                    repaint(&mut term.0)?;
                    last_full = Instant::now();
                    continue;
                }
                Some(Ok(TermEvent::Key(k))) if k.kind != KeyEventKind::Release => Msg::Key(k),
                Some(Ok(TermEvent::Resize(..))) => Msg::Resize,
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.into()),
                // The terminal went away (stdin closed).
                None => return Ok(()),
            },
            _ = term_signal.recv() => return Ok(()),
            _ = hup.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
        };
        for effect in update(&mut app, msg) {
            let client = if matches!(effect, Effect::Poll { .. }) {
                poll_client.clone()
            } else {
                action_client.clone()
            };
            tokio::spawn(execute(client, effect, tx.clone()));
        }
        if app.quit {
            return Ok(());
        }
    }
}

/// Makes one effect's API calls and reports the result.
async fn execute(client: Client, effect: Effect, tx: mpsc::UnboundedSender<Msg>) {
    let msg = match effect {
        Effect::Poll { vip, since } => {
            let result = poll(&client, vip, since).await;
            Msg::Polled {
                at: Instant::now(),
                result: result.map(Box::new),
            }
        }
        Effect::Send(command) => Msg::Done {
            what: command.describe(),
            result: client.send(&command).await.map_err(failure),
        },
        // The client raises its own timeout to cover the capture's duration.
        Effect::Capture(req) => Msg::Captured {
            vip: req.vip.clone().unwrap_or_default(),
            result: client
                .capture(&req)
                .await
                .map(|(pcapng, lost)| (pcapng.to_vec(), lost))
                .map_err(failure),
        },
    };
    // The loop has ended when the send fails: nothing to report to.
    let _ = tx.send(msg);
}

/// One refresh: everything the views show. Any failure but a missing VIP means the
/// appliance cannot be read right now.
async fn poll(client: &Client, vip: Option<String>, since: u64) -> Result<Snapshot, String> {
    let status = client.status().await.map_err(unreachable)?;
    let vips = client.vips().await.map_err(unreachable)?;
    let backends = match vip {
        Some(vip) => match client.backends(&vip).await {
            Ok(list) => Some((vip, list)),
            // The VIP went away (a reload removed it): the next VIP list shows that.
            Err(ClientError::Api { .. }) => None,
            Err(e) => return Err(unreachable(e)),
        },
        None => None,
    };
    let bgp = client.bgp().await.map_err(unreachable)?;
    let events = client.events(since).await.map_err(unreachable)?;
    let fleet = client.fleet().await.map_err(unreachable)?;
    Ok(Snapshot {
        status,
        vips,
        backends,
        bgp,
        events,
        fleet,
    })
}

/// The reason in the unreachable banner (which names the endpoint itself).
pub(super) fn unreachable(e: ClientError) -> String {
    match e {
        ClientError::Connect { source, .. } => source.to_string(),
        e => e.to_string(),
    }
}

/// An action's error as the status line shows it: the API's own words when it answered.
pub(super) fn failure(e: ClientError) -> Failure {
    match e {
        ClientError::Api { status, error } => Failure {
            message: format!("{} ({status})", error.error),
            errors: error.errors,
        },
        e => Failure {
            message: e.to_string(),
            errors: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::ApiError;

    #[test]
    fn api_errors_keep_the_apis_words_and_every_reload_error() {
        let f = failure(ClientError::Api {
            status: 422,
            error: ApiError {
                error: "config file rejected".into(),
                field: None,
                errors: vec!["vips.web.port: must be 1-65535".into()],
            },
        });
        assert_eq!(f.message, "config file rejected (422)");
        assert_eq!(f.errors, ["vips.web.port: must be 1-65535"]);
        let f = failure(ClientError::Timeout(Duration::from_secs(10)));
        assert_eq!(f.message, "API request timed out after 10s");
    }

    #[test]
    fn the_banner_reason_does_not_repeat_the_endpoint() {
        let e = ClientError::Connect {
            endpoint: "/run/sluice/api.sock".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        assert_eq!(unreachable(e), "connection refused");
    }
}
