//! Key handling through `update()`: every action, the confirmation step (y and n), weight
//! entry, filter, sort, navigation, and API results and errors in the status line. Also
//! the connection states and rates, which arrive as messages too.

mod common;

use std::time::{Duration, Instant};

use api::{BackendAction, CaptureRequest, Command, Commit};
use common::*;
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tui::app::{
    App, CaptureState, Conn, Effect, Failure, HISTORY, Msg, Prompt, StatusLine, Tab, VipSort,
    update,
};

fn on_backends() -> App {
    let mut app = app_after(3, "web", false);
    goto(&mut app, Tab::Backends);
    app
}

fn status(app: &App) -> &StatusLine {
    app.status_line.as_ref().expect("a status line")
}

fn ok(version: u64, message: &str) -> Result<Commit, Failure> {
    Ok(Commit {
        version,
        synced: true,
        message: message.into(),
    })
}

#[test]
fn tabs_switch_by_number_tab_and_arrows() {
    let mut app = app_after(1, "web", false);
    assert_eq!(app.tab, Tab::Overview);
    for (c, tab) in [
        ('2', Tab::Vips),
        ('4', Tab::Bgp),
        ('5', Tab::Events),
        ('6', Tab::Conns),
        ('7', Tab::Fleet),
        ('1', Tab::Overview),
    ] {
        ch(&mut app, c);
        assert_eq!(app.tab, tab);
    }
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.tab, Tab::Vips);
    key(&mut app, KeyCode::BackTab);
    key(&mut app, KeyCode::BackTab);
    assert_eq!(app.tab, Tab::Fleet, "Shift-Tab wraps around");
    ch(&mut app, 'l');
    assert_eq!(app.tab, Tab::Overview);
    key(&mut app, KeyCode::Left);
    ch(&mut app, 'h');
    assert_eq!(app.tab, Tab::Conns);
    key(&mut app, KeyCode::Right);
    assert_eq!(app.tab, Tab::Fleet);
}

#[test]
fn arrows_and_vim_keys_move_the_selection_in_every_list() {
    let mut app = app_after(1, "web", false);
    goto(&mut app, Tab::Vips);
    assert_eq!(app.selected_vip.as_deref(), Some("web"));
    ch(&mut app, 'j');
    assert_eq!(app.selected_vip.as_deref(), Some("web6"));
    key(&mut app, KeyCode::Down);
    assert_eq!(
        app.selected_vip.as_deref(),
        Some("web6"),
        "stops at the end"
    );
    ch(&mut app, 'k');
    key(&mut app, KeyCode::Up);
    assert_eq!(app.selected_vip.as_deref(), Some("mail"));
    ch(&mut app, 'g');
    assert_eq!(app.selected_vip.as_deref(), Some("api"));
    ch(&mut app, 'G');
    assert_eq!(app.selected_vip.as_deref(), Some("web6"));
    key(&mut app, KeyCode::PageUp);
    assert_eq!(app.selected_vip.as_deref(), Some("api"));
    key(&mut app, KeyCode::PageDown);
    assert_eq!(app.selected_vip.as_deref(), Some("web6"));

    let mut app = on_backends();
    ch(&mut app, 'j');
    ch(&mut app, 'j');
    assert_eq!(app.selected_backend().unwrap().id, "10.0.0.13:80");
    key(&mut app, KeyCode::End);
    key(&mut app, KeyCode::Down);
    assert_eq!(app.selected_backend().unwrap().id, "10.0.0.14:80");
    key(&mut app, KeyCode::Home);
    assert_eq!(app.backend_sel, 0);

    goto(&mut app, Tab::Bgp);
    ch(&mut app, 'j');
    assert_eq!(app.peers()[app.peer_sel].address, "198.51.100.2");
    goto(&mut app, Tab::Events);
    key(&mut app, KeyCode::End);
    assert_eq!(app.event_sel, 11);
}

#[test]
fn enter_on_a_vip_opens_its_backends_and_fetches_them() {
    let mut app = app_after(1, "web", false);
    goto(&mut app, Tab::Vips);
    ch(&mut app, 'j');
    assert_eq!(app.selected_vip.as_deref(), Some("web6"));
    let effects = key(&mut app, KeyCode::Enter);
    assert_eq!(app.tab, Tab::Backends);
    assert_eq!(
        effects,
        [Effect::Poll {
            vip: Some("web6".into()),
            since: 12
        }]
    );
    assert!(
        app.shown_backends().is_empty(),
        "web's backends are not shown as web6's"
    );
    feed(&mut app, Instant::now(), recorded(0, "web6"));
    assert_eq!(app.shown_backends().len(), 3);
    assert_eq!(app.shown_backends()[0].id, "[2001:db8:1::11]:8443");
}

#[test]
fn s_cycles_the_sort_column_and_capital_s_reverses() {
    let mut app = app_after(1, "web", false);
    goto(&mut app, Tab::Vips);
    let names = |app: &App| {
        app.visible_vips()
            .iter()
            .map(|v| v.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(app.sort, VipSort::Name);
    let mut seen = vec![];
    for _ in 0..VipSort::ALL.len() {
        ch(&mut app, 's');
        seen.push(app.sort);
    }
    assert_eq!(
        seen.last(),
        Some(&VipSort::Name),
        "cycles back to the start"
    );
    assert_eq!(seen.len(), 8);
    ch(&mut app, 's');
    assert_eq!(app.sort, VipSort::Address);
    assert_eq!(status(&app).text, "VIPs sorted by address");
    assert_eq!(names(&app), ["web", "api", "dns", "web6", "mail"]);
    ch(&mut app, 'S');
    assert_eq!(names(&app), ["mail", "web6", "dns", "api", "web"]);
    while app.sort != VipSort::NewFlows {
        ch(&mut app, 's');
    }
    assert_eq!(names(&app), ["dns", "web", "web6", "mail", "api"]);
}

#[test]
fn slash_filters_the_vips_as_typed() {
    let mut app = app_after(1, "web", false);
    goto(&mut app, Tab::Overview);
    ch(&mut app, '/');
    assert_eq!(app.tab, Tab::Vips, "/ goes to the VIP list");
    assert_eq!(app.prompt, Some(Prompt::Filter));
    for c in "2001".chars() {
        ch(&mut app, c);
    }
    let names: Vec<_> = app.visible_vips().iter().map(|v| v.name.clone()).collect();
    assert_eq!(names, ["mail", "web6"]);
    assert_eq!(
        app.selected_vip.as_deref(),
        Some("mail"),
        "the selection follows the filter"
    );
    key(&mut app, KeyCode::Backspace);
    assert_eq!(app.filter, "200");
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.prompt, None);
    assert_eq!(app.filter, "200", "Enter keeps the filter");
    // Keys act as keys again (q would quit; j moves).
    ch(&mut app, 'j');
    assert_eq!(app.selected_vip.as_deref(), Some("web6"));
    key(&mut app, KeyCode::Esc);
    assert_eq!(app.filter, "", "Esc clears a kept filter");
    ch(&mut app, '/');
    ch(&mut app, 'd');
    ch(&mut app, 'q');
    assert!(!app.quit, "letters in the filter are text");
    key(&mut app, KeyCode::Esc);
    assert_eq!((app.filter.as_str(), app.prompt.clone()), ("", None));
}

#[test]
fn drain_asks_first_and_n_cancels() {
    let mut app = on_backends();
    ch(&mut app, 'j');
    assert!(ch(&mut app, 'd').is_empty(), "nothing happens before y");
    match &app.prompt {
        Some(Prompt::Confirm { question, .. }) => {
            assert_eq!(question, "Drain backend 10.0.0.12:80 of VIP web? y/n")
        }
        p => panic!("{p:?}"),
    }
    ch(&mut app, 'j');
    assert_eq!(app.backend_sel, 1, "other keys wait for the answer");
    assert!(ch(&mut app, 'n').is_empty());
    assert_eq!(app.prompt, None);
    assert_eq!(
        status(&app).text,
        "cancelled: drain backend 10.0.0.12:80 of VIP web"
    );
}

#[test]
fn drain_y_sends_it_and_shows_the_result() {
    let mut app = on_backends();
    ch(&mut app, 'j');
    ch(&mut app, 'd');
    let effects = ch(&mut app, 'y');
    assert_eq!(
        effects,
        [Effect::Send(Command::Backend {
            vip: "web".into(),
            backend: "10.0.0.12:80".into(),
            action: BackendAction::Drain
        })]
    );
    assert_eq!(status(&app).text, "drain backend 10.0.0.12:80 of VIP web…");
    let effects = update(
        &mut app,
        Msg::Done {
            what: effects[0].describe(),
            result: ok(43, "drain 10.0.0.12:80 of VIP web: version 43"),
        },
    );
    assert_eq!(
        status(&app).text,
        "drain 10.0.0.12:80 of VIP web: version 43, on every worker"
    );
    assert!(!status(&app).error);
    assert_eq!(
        effects,
        [Effect::Poll {
            vip: Some("web".into()),
            since: 12
        }],
        "refreshes right away to show the new state"
    );
}

#[test]
fn disable_asks_first_esc_cancels_y_sends() {
    let mut app = on_backends();
    ch(&mut app, 'x');
    match &app.prompt {
        Some(Prompt::Confirm { question, .. }) => {
            assert_eq!(question, "Disable backend 10.0.0.11:80 of VIP web? y/n")
        }
        p => panic!("{p:?}"),
    }
    key(&mut app, KeyCode::Esc);
    assert_eq!(app.prompt, None);
    ch(&mut app, 'x');
    assert_eq!(
        ch(&mut app, 'Y'),
        [Effect::Send(Command::Backend {
            vip: "web".into(),
            backend: "10.0.0.11:80".into(),
            action: BackendAction::Disable
        })]
    );
}

#[test]
fn undrain_and_enable_need_no_confirmation() {
    let mut app = on_backends();
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Down);
    for (c, action) in [('u', BackendAction::Undrain), ('e', BackendAction::Enable)] {
        assert_eq!(
            ch(&mut app, c),
            [Effect::Send(Command::Backend {
                vip: "web".into(),
                backend: "10.0.0.13:80".into(),
                action
            })]
        );
        assert_eq!(app.prompt, None);
    }
}

#[test]
fn backend_actions_need_the_backends_view() {
    let mut app = app_after(1, "web", false);
    goto(&mut app, Tab::Vips);
    for c in ['d', 'u', 'x', 'e', 'w'] {
        assert!(ch(&mut app, c).is_empty());
        assert_eq!(app.prompt, None);
        assert_eq!(
            status(&app).text,
            "select a backend first: Backends tab (3)"
        );
        assert!(status(&app).error);
    }
}

#[test]
fn weight_entry_takes_digits_and_enter() {
    let mut app = on_backends();
    ch(&mut app, 'G');
    assert!(ch(&mut app, 'w').is_empty());
    for c in ['1', 'x', '2', '0', '5'] {
        assert!(ch(&mut app, c).is_empty());
    }
    key(&mut app, KeyCode::Backspace);
    match &app.prompt {
        Some(Prompt::Weight { backend, input, .. }) => {
            assert_eq!((backend.as_str(), input.as_str()), ("10.0.0.14:80", "120"))
        }
        p => panic!("{p:?}"),
    }
    let effects = key(&mut app, KeyCode::Enter);
    assert_eq!(
        effects,
        [Effect::Send(Command::Weight {
            vip: "web".into(),
            backend: "10.0.0.14:80".into(),
            weight: 120
        })]
    );
    assert_eq!(
        status(&app).text,
        "weight 120 for backend 10.0.0.14:80 of VIP web…"
    );
    // Empty: an error, no call. Esc: cancelled.
    ch(&mut app, 'w');
    assert!(key(&mut app, KeyCode::Enter).is_empty());
    assert!(status(&app).error);
    assert!(
        status(&app)
            .text
            .starts_with("weight must be a whole number")
    );
    ch(&mut app, 'w');
    ch(&mut app, '7');
    assert!(key(&mut app, KeyCode::Esc).is_empty());
    assert_eq!(app.prompt, None);
    assert_eq!(status(&app).text, "cancelled: weight");
}

#[test]
fn withdraw_asks_first_and_announce_does_not() {
    let mut app = app_after(1, "web", false);
    goto(&mut app, Tab::Vips);
    assert!(ch(&mut app, 'W').is_empty());
    match &app.prompt {
        Some(Prompt::Confirm { question, .. }) => {
            assert_eq!(question, "Withdraw VIP web (192.0.2.10)? y/n")
        }
        p => panic!("{p:?}"),
    }
    assert!(ch(&mut app, 'n').is_empty());
    ch(&mut app, 'W');
    assert_eq!(
        ch(&mut app, 'y'),
        [Effect::Send(Command::Announce {
            vip: "web".into(),
            announce: false
        })]
    );
    ch(&mut app, 'g');
    assert_eq!(
        ch(&mut app, 'a'),
        [Effect::Send(Command::Announce {
            vip: "api".into(),
            announce: true
        })]
    );
    goto(&mut app, Tab::Events);
    assert!(ch(&mut app, 'W').is_empty());
    assert_eq!(status(&app).text, "select a VIP first: VIPs tab (2)");
}

#[test]
fn reload_asks_first_and_shows_every_error_of_a_rejected_file() {
    let mut app = app_after(1, "web", false);
    ch(&mut app, 'R');
    match &app.prompt {
        Some(Prompt::Confirm { question, .. }) => {
            assert_eq!(
                question,
                "Reload the config file /etc/sluice/sluice.toml? y/n"
            )
        }
        p => panic!("{p:?}"),
    }
    assert!(ch(&mut app, 'n').is_empty());
    ch(&mut app, 'R');
    assert_eq!(ch(&mut app, 'y'), [Effect::Send(Command::Reload)]);
    update(
        &mut app,
        Msg::Done {
            what: "reload".into(),
            result: Err(Failure {
                message: "config file rejected (422)".into(),
                errors: vec![
                    "vips.web.port: must be 1-65535".into(),
                    "bgp.asn: missing".into(),
                ],
            }),
        },
    );
    let s = status(&app);
    assert!(s.error);
    assert_eq!(
        s.text,
        "reload failed: config file rejected (422) (2 errors, Esc hides them)"
    );
    assert_eq!(s.details.len(), 2);
    let screen = screen_text(&app, 80, 24);
    assert!(
        screen.contains("vips.web.port: must be 1-65535"),
        "{screen}"
    );
    assert!(screen.contains("bgp.asn: missing"), "{screen}");
    key(&mut app, KeyCode::Esc);
    assert!(app.status_line.is_none());
}

#[test]
fn an_api_error_shows_in_the_status_line() {
    let mut app = on_backends();
    ch(&mut app, 'd');
    let effects = ch(&mut app, 'y');
    update(
        &mut app,
        Msg::Done {
            what: effects[0].describe(),
            result: Err(Failure {
                message: "vip web has no backend 10.0.0.11:80 (404)".into(),
                errors: vec![],
            }),
        },
    );
    assert_eq!(
        status(&app),
        &StatusLine {
            text: "drain backend 10.0.0.11:80 of VIP web failed: vip web has no backend \
                   10.0.0.11:80 (404)"
                .into(),
            error: true,
            details: vec![],
        }
    );
    let screen = screen_text(&app, 120, 40);
    assert!(
        screen.contains("drain backend 10.0.0.11:80 of VIP web failed: vip web has no backend"),
        "{screen}"
    );
}

#[test]
fn q_and_ctrl_c_quit_even_from_a_prompt() {
    let mut app = app_after(1, "web", false);
    ch(&mut app, 'q');
    assert!(app.quit);
    let mut app = on_backends();
    ch(&mut app, 'w');
    update(
        &mut app,
        Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
    );
    assert!(app.quit);
}

#[test]
fn question_mark_opens_help_and_other_keys_wait() {
    let mut app = app_after(1, "web", false);
    ch(&mut app, '?');
    assert!(app.help);
    ch(&mut app, '3');
    assert_eq!(
        app.tab,
        Tab::Overview,
        "keys do not act behind the help page"
    );
    key(&mut app, KeyCode::Esc);
    assert!(!app.help);
    ch(&mut app, '?');
    ch(&mut app, '?');
    assert!(!app.help);
    ch(&mut app, '?');
    ch(&mut app, 'q');
    assert!(app.quit);
}

#[test]
fn key_releases_are_ignored() {
    let mut app = app_after(1, "web", false);
    let mut k = KeyEvent::new(KeyCode::Char('q'), KeyModifiers::NONE);
    k.kind = KeyEventKind::Release;
    update(&mut app, Msg::Key(k));
    assert!(!app.quit);
}

#[test]
fn ticks_poll_once_at_a_time_and_r_refreshes() {
    let mut app = App::new(ENDPOINT, false);
    assert_eq!(app.conn, Conn::Connecting);
    assert_eq!(
        update(&mut app, Msg::Tick),
        [Effect::Poll {
            vip: None,
            since: 0
        }]
    );
    assert!(update(&mut app, Msg::Tick).is_empty(), "one poll in flight");
    assert!(ch(&mut app, 'r').is_empty());
    feed(&mut app, Instant::now(), recorded(0, "web"));
    assert_eq!(app.conn, Conn::Up);
    assert_eq!(
        app.selected_vip.as_deref(),
        Some("api"),
        "the first VIP by name"
    );
    assert_eq!(app.last_seq, 12);
    assert_eq!(
        ch(&mut app, 'r'),
        [Effect::Poll {
            vip: Some("api".into()),
            since: 12
        }]
    );
}

#[test]
fn unreachable_then_reconnected() {
    let mut app = app_after(1, "web", false);
    update(&mut app, Msg::Tick);
    update(
        &mut app,
        Msg::Polled {
            at: Instant::now(),
            result: Err("Connection refused (os error 111)".into()),
        },
    );
    assert_eq!(
        app.conn,
        Conn::Down {
            error: "Connection refused (os error 111)".into()
        }
    );
    let screen = screen_text(&app, 120, 40);
    assert!(
        screen.contains(
            "appliance unreachable at /run/sluice/api.sock: Connection refused (os error 111) — retrying"
        ),
        "{screen}"
    );
    assert!(
        screen.contains("web   192.0.2.10:80/tcp") || screen.contains("lb-fra1"),
        "last data stays"
    );
    assert!(!update(&mut app, Msg::Tick).is_empty(), "keeps polling");
    feed(&mut app, Instant::now(), recorded(1, "web"));
    assert_eq!(app.conn, Conn::Up);
    assert_eq!(status(&app).text, "reconnected to /run/sluice/api.sock");
    assert!(!screen_text(&app, 120, 40).contains("unreachable"));
}

#[test]
fn rates_come_from_two_samples_and_the_elapsed_time() {
    let mut app = App::new(ENDPOINT, false);
    app.selected_vip = Some("web".into());
    let t0 = Instant::now();
    feed(&mut app, t0, recorded(0, "web"));
    assert_eq!(app.vip_rates["web"].pps, None, "one sample has no rate");
    feed(&mut app, t0 + Duration::from_secs(2), recorded(1, "web"));
    let r = app.vip_rates["web"];
    assert_eq!(r.pps, Some(12_000.0), "24,000 packets in 2 s");
    assert_eq!(r.bps, Some(80_000_000.0));
    assert_eq!(r.new_flows, Some(600.0));
    assert_eq!(app.backend_rates["10.0.0.11:80"].pps, Some(6_050.0));
    assert_eq!(app.total_rates.rx_pps, Some(24_150.0));
    assert_eq!(
        app.history["10.0.0.11:80"]
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [6_050]
    );
}

#[test]
fn sparkline_history_keeps_the_last_60_samples() {
    let app = app_after(75, "web", false);
    assert_eq!(HISTORY, 60);
    assert_eq!(app.history["10.0.0.11:80"].len(), 60);
    assert_eq!(app.history["10.0.0.11:80"].back(), Some(&12_100));
}

#[test]
fn an_appliance_restart_resets_events_and_rates() {
    let mut app = app_after(2, "web", false);
    assert_eq!(app.last_seq, 12);
    let mut snap = recorded(0, "web");
    snap.status.uptime_seconds = 3;
    snap.events.truncate(1);
    feed(&mut app, Instant::now() + Duration::from_secs(10), snap);
    assert_eq!(app.events.len(), 1, "the new appliance's events only");
    assert_eq!(app.last_seq, 1);
    assert_eq!(app.vip_rates["web"].pps, None, "no rate across a restart");
}

/// `c` on a VIP asks the appliance for 50 frames or 5 s of it, in the background: the console
/// keeps polling, a second `c` waits for the first, the panel takes the keys until Esc.
#[test]
fn c_captures_the_selected_vip_one_capture_at_a_time() {
    let mut app = app_after(1, "web", false);
    assert!(ch(&mut app, 'c').is_empty(), "not from the Overview");
    assert_eq!(status(&app).text, "select a VIP first: VIPs tab (2)");
    assert!(app.capture.is_none());

    goto(&mut app, Tab::Vips);
    let effects = ch(&mut app, 'c');
    assert_eq!(
        effects,
        [Effect::Capture(CaptureRequest {
            vip: Some("web".into()),
            endpoints: vec![],
            count: 50,
            duration_ms: 5000,
            snaplen: 256,
        })]
    );
    assert_eq!(
        status(&app).text,
        "capturing VIP web (up to 50 frames or 5 s)…"
    );
    assert_eq!(
        app.capture.as_ref().map(|p| &p.state),
        Some(&CaptureState::Running)
    );
    assert!(
        matches!(&update(&mut app, Msg::Tick)[..], [Effect::Poll { .. }]),
        "polls go on while the capture runs"
    );
    assert!(ch(&mut app, 'c').is_empty());
    assert_eq!(
        status(&app).text,
        "a capture of VIP web is running; one at a time"
    );
    ch(&mut app, 'j');
    assert_eq!(
        app.selected_vip.as_deref(),
        Some("web"),
        "the panel has the keys"
    );

    update(
        &mut app,
        Msg::Captured {
            vip: "web".into(),
            result: Ok((capture_file(0), 0)),
        },
    );
    match &app.capture.as_ref().expect("the panel").state {
        CaptureState::Done {
            lines,
            captured: 4,
            lost: 0,
        } => assert!(
            lines[3].starts_with("22:13:20.126456  engine-out  IP 192.0.2.10.80 > "),
            "{lines:#?}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(status(&app).text, "capture of VIP web: 4 frames, 0 lost");
    key(&mut app, KeyCode::Esc);
    assert!(app.capture.is_none());
    ch(&mut app, 'j');
    assert_eq!(
        app.selected_vip.as_deref(),
        Some("web6"),
        "the list's keys again"
    );
}

/// Esc while the capture runs closes the panel, not the capture: its count comes on the
/// status line. Errors, the API's or an unreadable reply, show in the panel.
#[test]
fn capture_results_and_errors() {
    let mut app = app_after(1, "web", false);
    goto(&mut app, Tab::Vips);
    ch(&mut app, 'c');
    key(&mut app, KeyCode::Esc);
    assert!(app.capture.is_none());
    update(
        &mut app,
        Msg::Captured {
            vip: "web".into(),
            result: Ok((capture_file(2), 1)),
        },
    );
    assert!(app.capture.is_none(), "stays closed");
    assert_eq!(status(&app).text, "capture of VIP web: 6 frames, 1 lost");

    let failed = |app: &App| match &app.capture.as_ref().expect("the panel").state {
        CaptureState::Failed { message } => message.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(ch(&mut app, 'c').len(), 1, "the next capture may start");
    update(
        &mut app,
        Msg::Captured {
            vip: "web".into(),
            result: Err(Failure {
                message: "no VIP web (404)".into(),
                errors: vec![],
            }),
        },
    );
    assert_eq!(failed(&app), "no VIP web (404)");
    assert!(status(&app).error);
    assert_eq!(
        status(&app).text,
        "capture of VIP web failed: no VIP web (404)"
    );

    assert_eq!(ch(&mut app, 'c').len(), 1, "c in the panel captures again");
    update(
        &mut app,
        Msg::Captured {
            vip: "web".into(),
            result: Ok((b"HTTP/1.1 200 OK".to_vec(), 0)),
        },
    );
    assert_eq!(
        failed(&app),
        "the appliance's reply: not a pcapng file: it does not start with a Section Header Block"
    );
}

/// The arrows, PgUp/PgDn, g and G scroll the panel's lines (0: the newest at the bottom).
#[test]
fn the_capture_panel_scrolls_within_its_lines() {
    let mut app = app_after(1, "web", false);
    goto(&mut app, Tab::Vips);
    ch(&mut app, 'c');
    update(
        &mut app,
        Msg::Captured {
            vip: "web".into(),
            result: Ok((capture_file(60), 0)),
        },
    );
    let back = |app: &App| app.capture.as_ref().unwrap().back;
    for (k, want) in [
        (KeyCode::Up, 1),
        (KeyCode::Char('k'), 2),
        (KeyCode::PageUp, 12),
        (KeyCode::Down, 11),
        (KeyCode::Home, 63),
        (KeyCode::Up, 63),
        (KeyCode::PageDown, 53),
        (KeyCode::Char('G'), 0),
        (KeyCode::Down, 0),
    ] {
        key(&mut app, k);
        assert_eq!(back(&app), want, "after {k:?}");
    }
}
