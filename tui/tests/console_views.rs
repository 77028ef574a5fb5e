//! The console's views, rendered from recorded API responses: widget tests into a
//! `Buffer`, whole screens with `TestBackend` at 80x24 and 120x40 (insta snapshots in
//! tests/snapshots/), and the text captures under docs/console/ (regenerate them with
//! `SLUICE_UPDATE_DOCS=1 cargo test -p tui --test console_views`).

mod common;

use api::{Backend, Bgp, Event, FleetStatus, Status, Vip};
use common::*;
use crossterm::event::KeyCode;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use tui::app::{App, Conn, Effect, Failure, Msg, Tab, update};
use tui::view::{render_footer, render_status_line, render_tab};

const VIEWS: [(Tab, &str); 7] = [
    (Tab::Overview, "overview"),
    (Tab::Vips, "vips"),
    (Tab::Backends, "backends"),
    (Tab::Bgp, "bgp"),
    (Tab::Events, "events"),
    (Tab::Conns, "conns"),
    (Tab::Fleet, "fleet"),
];

fn app_on(tab: Tab) -> App {
    let mut app = sample_app();
    goto(&mut app, tab);
    app
}

/// Each fixture is exactly a model type: parsing it and serialising it again gives the
/// same JSON (no unknown, missing or misspelt fields).
#[test]
fn fixtures_are_model_documents() {
    fn same<T: serde::de::DeserializeOwned + serde::Serialize>(name: &str) {
        let raw: serde_json::Value = fixture(name);
        let typed: T = fixture(name);
        assert_eq!(serde_json::to_value(&typed).unwrap(), raw, "{name}");
    }
    for k in 0..2 {
        same::<Status>(&format!("t{k}-status.json"));
        same::<Vec<Vip>>(&format!("t{k}-vips.json"));
        same::<Vec<Backend>>(&format!("t{k}-backends-web.json"));
        same::<Vec<Backend>>(&format!("t{k}-backends-web6.json"));
        same::<Bgp>(&format!("t{k}-bgp.json"));
        same::<Vec<Event>>(&format!("t{k}-events.json"));
        same::<FleetStatus>(&format!("t{k}-fleet.json"));
    }
}

#[test]
fn every_view_at_80x24() {
    for (tab, name) in VIEWS {
        insta::assert_snapshot!(format!("{name}_80x24"), screen_text(&app_on(tab), 80, 24));
    }
}

#[test]
fn every_view_at_120x40() {
    for (tab, name) in VIEWS {
        insta::assert_snapshot!(format!("{name}_120x40"), screen_text(&app_on(tab), 120, 40));
    }
}

#[test]
fn ipv6_backends_at_80x24() {
    let mut app = app_after(40, "web6", false);
    goto(&mut app, Tab::Backends);
    insta::assert_snapshot!("backends_web6_80x24", screen_text(&app, 80, 24));
}

#[test]
fn help_page_at_80x24() {
    let mut app = app_on(Tab::Vips);
    ch(&mut app, '?');
    insta::assert_snapshot!("help_80x24", screen_text(&app, 80, 24));
}

#[test]
fn unreachable_banner_at_80x24() {
    let mut app = app_on(Tab::Vips);
    update(
        &mut app,
        Msg::Polled {
            at: std::time::Instant::now(),
            result: Err("Connection refused (os error 111)".into()),
        },
    );
    insta::assert_snapshot!("unreachable_80x24", screen_text(&app, 80, 24));
}

#[test]
fn rejected_reload_at_80x24() {
    let mut app = app_on(Tab::Overview);
    ch(&mut app, 'R');
    ch(&mut app, 'y');
    update(
        &mut app,
        Msg::Done {
            what: "reload".into(),
            result: Err(Failure {
                message: "config file rejected (422)".into(),
                errors: vec![
                    "vips.web.backends[2]: 10.0.0.13:80 listed twice".into(),
                    "bgp.peers[1].asn: must be 1-4294967295".into(),
                ],
            }),
        },
    );
    insta::assert_snapshot!("reload_rejected_80x24", screen_text(&app, 80, 24));
}

/// The Fleet view of a member cut off from etcd (stale, forwarding on what it runs) and of
/// one catching up (announcements held); and of an appliance that runs alone.
#[test]
fn fleet_view_stale_catching_up_and_alone() {
    let mut app = app_on(Tab::Fleet);
    let f = app.fleet.as_mut().expect("the recorded fleet");
    f.connected = false;
    f.stale = true;
    f.stale_seconds = Some(42.4);
    f.last_error = Some("etcd: connection refused (10.1.0.1:2379)".into());
    f.members.truncate(1);
    f.disagreements.clear();
    f.running_from_disk = true;
    let stale = screen_text(&app, 80, 24);
    insta::assert_snapshot!("fleet_stale_80x24", stale);
    assert!(stale.contains("STALE for 42s"), "{stale}");
    assert!(
        stale.contains("forwarding on revision 1184 (kept on disk"),
        "{stale}"
    );

    let f = app.fleet.as_mut().expect("the recorded fleet");
    f.stale = false;
    f.connected = true;
    f.announcing = false;
    f.running_revision = 1180;
    let held = screen_text(&app, 80, 24);
    assert!(held.contains("catching up: announcements held"), "{held}");

    app.fleet = None;
    let alone = screen_text(&app, 80, 24);
    assert!(alone.contains("Not a fleet member"), "{alone}");
}

/// The recorded fleet: the refused revision with the member and its error, every member's
/// readiness and lag, the disagreement with the dissenting member named.
#[test]
fn fleet_view_shows_refusal_members_and_disagreements() {
    let mut app = app_on(Tab::Fleet);
    app.fleet = Some(fixture::<FleetStatus>("t1-fleet.json"));
    insta::assert_snapshot!("fleet_refused_80x24", screen_text(&app, 80, 24));
    let s = screen_text(&app, 120, 40);
    for want in [
        "fleet edge-fra · member lb-fra1",
        "pushed 1187, activated 1184, running here 1184",
        "revision 1187 refused, not activated: lb-fra3:",
        "lb-fra3",
        "refused",
        "12 ms",
        "web/10.0.0.13:80 fleet up (2 up, 1 down) · lb-fra2 disagree",
    ] {
        assert!(s.contains(want), "missing {want:?} in\n{s}");
    }
}

#[test]
fn drain_question_at_80x24() {
    let mut app = app_on(Tab::Backends);
    key(&mut app, KeyCode::Down);
    ch(&mut app, 'd');
    insta::assert_snapshot!("drain_question_80x24", screen_text(&app, 80, 24));
}

fn lines(buf: &Buffer) -> Vec<String> {
    text(buf).lines().map(str::to_string).collect()
}

/// The backends table: state with the operator mark, health, weight (the effective one
/// while slow start ramps it), ring share vs ideal, flows against a connection limit, and a
/// sparkline per backend.
#[test]
fn backends_widget_shows_state_health_share_and_traffic() {
    let app = app_on(Tab::Backends);
    let mut buf = Buffer::empty(Rect::new(0, 0, 80, 9));
    render_tab(&app, Tab::Backends, buf.area, &mut buf);
    let l = lines(&buf);
    assert!(
        l[0].contains(
            "Backends of VIP web (192.0.2.10:80/tcp) · 2 of 4 eligible · 1 full · 1 ramping"
        ),
        "{l:#?}"
    );
    assert!(l[1].starts_with("Backend"), "{l:#?}");
    let row = |id: &str| {
        l.iter()
            .find(|x| x.starts_with(id))
            .unwrap_or_else(|| panic!("{id} in {l:#?}"))
            .clone()
    };
    let b11 = row("10.0.0.11:80");
    assert!(
        b11.contains("active") && b11.contains(" up") && b11.contains("76.9/76.9%"),
        "{b11}"
    );
    assert!(b11.contains("812/812!"), "at its connection limit: {b11}");
    let b12 = row("10.0.0.12:80");
    assert!(
        b12.contains(" 30^ "),
        "slow start's effective weight: {b12}"
    );
    assert!(b11.contains("12.1k"), "pps from the recorded delta: {b11}");
    assert!(
        b11.chars().any(|c| ('▁'..='█').contains(&c)),
        "sparkline: {b11}"
    );
    let b13 = row("10.0.0.13:80");
    assert!(b13.contains("drain*"), "drained by an operator: {b13}");
    assert!(b13.contains("0.0/0.0%"), "{b13}");
    let b14 = row("10.0.0.14:80");
    assert!(b14.contains("down") && b14.contains("50*"), "{b14}");
    // The selected row's detail line names the down backend's reason.
    let mut app = app;
    key(&mut app, KeyCode::End);
    let mut buf = Buffer::empty(Rect::new(0, 0, 80, 9));
    render_tab(&app, Tab::Backends, buf.area, &mut buf);
    let l = lines(&buf);
    assert!(l[7].contains("10.0.0.14:80 health down: timeout"), "{l:#?}");
}

/// On a fleet member each backend has two verdicts: Health (this member's probes) and
/// Fleet (the fleet's, which the ring follows); the selected row's details name both.
#[test]
fn a_fleet_member_shows_its_own_and_the_fleets_verdict() {
    let mut snap = recorded(1, "web");
    if let Some((_, list)) = &mut snap.backends {
        for b in list.iter_mut() {
            b.fleet_health = Some("up".into());
        }
        list[3].health = "down".into();
    }
    let mut app = App::new(ENDPOINT, false);
    app.selected_vip = Some("web".into());
    feed(&mut app, std::time::Instant::now(), snap);
    goto(&mut app, Tab::Backends);
    key(&mut app, KeyCode::End);
    let mut buf = Buffer::empty(Rect::new(0, 0, 80, 9));
    render_tab(&app, Tab::Backends, buf.area, &mut buf);
    let l = lines(&buf);
    assert!(l[1].contains("Health   Fleet"), "{l:#?}");
    let b14 = l
        .iter()
        .find(|x| x.starts_with("10.0.0.14:80"))
        .unwrap_or_else(|| panic!("{l:#?}"));
    assert!(
        b14.contains("down     up"),
        "own down, the fleet's up: {b14}"
    );
    assert!(
        l[7].contains("10.0.0.14:80 health down: timeout · fleet up · state"),
        "{l:#?}"
    );
    // Off a fleet there is no Fleet column.
    let app = app_on(Tab::Backends);
    let mut buf = Buffer::empty(Rect::new(0, 0, 80, 9));
    render_tab(&app, Tab::Backends, buf.area, &mut buf);
    assert!(!lines(&buf)[1].contains("Fleet"), "{:#?}", lines(&buf));
}

/// The Conns view carries the LVS counters: persistence, limits and overflow, one-packet.
#[test]
fn conns_view_shows_the_lvs_counters() {
    let app = app_on(Tab::Conns);
    let s = screen_text(&app, 80, 24);
    for want in [
        "Persistence 1,200 of 262,144 clients · 50,000 hits · 1,300 misses · 0 evicted",
        "Limits      40 moved off full · overflow: 3 refused (3 RST) · 0 let past",
        "One-packet  0 datagrams",
    ] {
        assert!(s.contains(want), "missing {want:?} in\n{s}");
    }
}

#[test]
fn vips_widget_sorts_and_marks_withdrawn() {
    let mut app = app_on(Tab::Vips);
    let order = |app: &App| {
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 10));
        render_tab(app, Tab::Vips, buf.area, &mut buf);
        lines(&buf)[2..7]
            .iter()
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(order(&app), ["api", "dns", "mail", "web", "web6"]);
    // s: address, healthy, then pps (biggest first).
    for _ in 0..3 {
        ch(&mut app, 's');
    }
    assert_eq!(order(&app), ["web", "web6", "dns", "mail", "api"]);
    ch(&mut app, 'S');
    assert_eq!(order(&app), ["api", "mail", "dns", "web6", "web"]);

    let mut buf = Buffer::empty(Rect::new(0, 0, 80, 10));
    render_tab(&app, Tab::Vips, buf.area, &mut buf);
    let api = lines(&buf)
        .into_iter()
        .find(|l| l.starts_with("api"))
        .unwrap();
    assert!(
        api.contains("192.0.2.20:*/tcp") && api.contains("wdr") && api.contains("0/2"),
        "{api}"
    );
    let v6 = lines(&buf)
        .into_iter()
        .find(|l| l.starts_with("web6"))
        .unwrap();
    assert!(v6.contains("[2001:db8::10]:443/tcp"), "{v6}");
}

/// Two tenants' VIPs on web's address: the list and the details tell them apart by VNI,
/// the filter finds them by it, the address sort puts each tenant after the underlay, and a
/// tenant backend's details name its VTEP.
#[test]
fn tenant_vips_show_their_vni_and_backends_their_vtep() {
    let mut app = app_on(Tab::Vips);
    let web = app.vips.iter().find(|v| v.name == "web").unwrap().clone();
    for vni in [200, 100] {
        app.vips.push(Vip {
            name: format!("t{vni}"),
            mode: "tunnel".into(),
            encap: Some("vxlan".into()),
            announced: false,
            tenant_vni: Some(vni),
            ..web.clone()
        });
    }
    let render = |app: &App| {
        let mut buf = Buffer::empty(Rect::new(0, 0, 120, 14));
        render_tab(app, Tab::Vips, buf.area, &mut buf);
        lines(&buf)
    };
    let l = render(&app);
    let row = |l: &[String], name: &str| {
        l.iter()
            .find(|x| x.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in {l:#?}"))
            .clone()
    };
    assert!(
        row(&l, "t100").contains("192.0.2.10:80/tcp vni 100 tunnel/vxl maglev    -  "),
        "{l:#?}"
    );
    assert!(
        row(&l, "t200").contains("192.0.2.10:80/tcp vni 200 "),
        "{l:#?}"
    );
    assert!(row(&l, "web").contains("192.0.2.10:80/tcp   "), "{l:#?}");
    // s: by address; the underlay's VIPs first, then tenant 100's, then 200's.
    ch(&mut app, 's');
    let names: Vec<String> = render(&app)[2..9]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    assert_eq!(&names[5..], ["t100", "t200"], "{names:?}");
    app.selected_vip = Some("t100".into());
    let l = render(&app);
    assert!(
        l.iter()
            .any(|x| x.starts_with(" t100 192.0.2.10:80/tcp vni 100 · tunnel/vxlan · maglev")),
        "{l:#?}"
    );
    for c in "/vni 2".chars() {
        ch(&mut app, c);
    }
    assert_eq!(
        app.visible_vips()
            .iter()
            .map(|v| v.name.as_str())
            .collect::<Vec<_>>(),
        ["t200"]
    );

    let mut app = app_on(Tab::Backends);
    let web = app.vips.iter_mut().find(|v| v.name == "web").unwrap();
    web.tenant_vni = Some(100);
    for (i, b) in app.backends.iter_mut().enumerate() {
        b.vtep = Some(format!("10.9.0.{}", i + 1));
    }
    key(&mut app, KeyCode::Down);
    let mut buf = Buffer::empty(Rect::new(0, 0, 80, 9));
    render_tab(&app, Tab::Backends, buf.area, &mut buf);
    let l = lines(&buf);
    assert!(
        l[0].starts_with(" Backends of VIP web (192.0.2.10:80/tcp vni 100) · "),
        "{l:#?}"
    );
    assert!(
        l.iter()
            .any(|x| x == " 10.0.0.12:80 health up · state active (config) · vtep 10.9.0.2"),
        "{l:#?}"
    );
}

#[test]
fn status_line_widget_shows_questions_and_errors() {
    let mut app = app_on(Tab::Backends);
    ch(&mut app, 'w');
    for c in "250".chars() {
        ch(&mut app, c);
    }
    let mut buf = Buffer::empty(Rect::new(0, 0, 80, 1));
    render_status_line(&app, buf.area, &mut buf);
    assert_eq!(
        lines(&buf)[0],
        " Weight for backend 10.0.0.11:80 of VIP web: 250_  Enter sets, Esc cancels"
    );
    key(&mut app, KeyCode::Esc);
    update(
        &mut app,
        Msg::Done {
            what: "drain backend 10.0.0.11:80 of VIP web".into(),
            result: Err(Failure {
                message: "no backend 10.0.0.11:80 in VIP web (404)".into(),
                errors: vec![],
            }),
        },
    );
    let mut buf = Buffer::empty(Rect::new(0, 0, 80, 1));
    render_status_line(&app, buf.area, &mut buf);
    assert_eq!(
        lines(&buf)[0],
        " drain backend 10.0.0.11:80 of VIP web failed: no backend 10.0.0.11:80 in VIP we"
    );
    assert_eq!(buf[(1, 0)].fg, Color::Red, "an error is red");
}

#[test]
fn footer_fits_80_columns_on_every_view() {
    for (tab, _) in VIEWS {
        let app = app_on(tab);
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 1));
        render_footer(&app, buf.area, &mut buf);
        let l = &lines(&buf)[0];
        assert!(l.ends_with("q quit"), "{tab:?}: {l:?}");
    }
}

/// `--no-color`: not one cell has a colour, and the selection is still visible (reverse).
#[test]
fn no_color_uses_no_colours_at_all() {
    for (tab, _) in VIEWS {
        for (w, h) in [(80, 24), (120, 40)] {
            let mut app = app_after(40, "web", true);
            goto(&mut app, tab);
            if tab == Tab::Vips {
                // The rejected-reload panel and a question too.
                ch(&mut app, 'W');
            }
            let buf = screen(&app, w, h);
            for cell in buf.content() {
                assert_eq!(
                    (cell.fg, cell.bg),
                    (Color::Reset, Color::Reset),
                    "{tab:?} {w}x{h}"
                );
            }
            if matches!(tab, Tab::Vips | Tab::Backends | Tab::Bgp | Tab::Events) {
                assert!(
                    buf.content()
                        .iter()
                        .any(|c| c.modifier.contains(Modifier::REVERSED)),
                    "{tab:?}: the selection shows in reverse video"
                );
            }
        }
    }
    let mut app = app_after(2, "web", true);
    app.conn = Conn::Down {
        error: "timed out".into(),
    };
    assert!(
        screen(&app, 80, 24)
            .content()
            .iter()
            .all(|c| c.fg == Color::Reset)
    );
}

/// A resize is just a redraw at the new size: the same app fits both.
#[test]
fn redraws_at_any_size() {
    let app = app_on(Tab::Backends);
    for (w, h) in [(80, 24), (60, 15), (200, 60), (20, 5)] {
        let s = screen_text(&app, w, h);
        assert_eq!(s.lines().count(), h as usize);
    }
}

/// docs/console/*.txt are these screens at 120x40; they must not drift from the code.
#[test]
fn docs_captures_are_current() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/console");
    let update = std::env::var_os("SLUICE_UPDATE_DOCS").is_some();
    let mut captures: Vec<(String, String)> = VIEWS
        .iter()
        .map(|(tab, name)| (format!("{name}.txt"), screen_text(&app_on(*tab), 120, 40)))
        .collect();
    let mut help = app_on(Tab::Overview);
    ch(&mut help, '?');
    captures.push(("help.txt".into(), screen_text(&help, 120, 40)));
    if update {
        std::fs::create_dir_all(&dir).unwrap();
    }
    for (file, text) in captures {
        let path = dir.join(&file);
        if update {
            std::fs::write(&path, &text).unwrap();
        } else {
            let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!(
                    "{}: {e}; regenerate with SLUICE_UPDATE_DOCS=1",
                    path.display()
                )
            });
            assert_eq!(
                committed, text,
                "{file} is stale; regenerate with SLUICE_UPDATE_DOCS=1 cargo test -p tui --test console_views"
            );
        }
    }
}

/// 10,000 VIPs: the list builds a screenful of rows, keeps the selection in view as it
/// moves to the end, and the filter narrows it at once.
#[test]
fn ten_thousand_vips_scroll_and_filter() {
    let mut app = app_on(Tab::Vips);
    let one = app.vips[0].clone();
    app.vips = (0..10_000)
        .map(|i| Vip {
            name: format!("t{i:05}"),
            ..one.clone()
        })
        .collect();
    app.selected_vip = Some("t00000".into());
    let screen = |app: &App| {
        let mut buf = Buffer::empty(Rect::new(0, 0, 120, 40));
        render_tab(app, Tab::Vips, buf.area, &mut buf);
        lines(&buf)
    };
    let l = screen(&app);
    assert!(l[0].contains("10000 of 10000 VIPs"), "{l:#?}");
    key(&mut app, KeyCode::End);
    let l = screen(&app);
    assert!(
        l.iter().any(|x| x.starts_with("t09999")),
        "the last VIP is on screen: {l:#?}"
    );
    assert!(!l.iter().any(|x| x.starts_with("t00000")), "{l:#?}");
    for c in "/t0424".chars() {
        ch(&mut app, c);
    }
    let l = screen(&app);
    assert!(l[0].contains("10 of 10000 VIPs"), "{l:#?}");
    let rows: Vec<&String> = l.iter().filter(|x| x.starts_with("t0424")).collect();
    assert_eq!(rows.len(), 10, "{l:#?}");
}

/// The capture panel over the VIP list: while the request is out, then one line per frame
/// (time, stage, summary) oldest first with the counts, and Esc gives the list back.
#[test]
fn capture_panel_running_then_frames() {
    let mut app = app_on(Tab::Vips);
    let before = screen_text(&app, 80, 24);
    let effects = ch(&mut app, 'c');
    assert!(
        matches!(&effects[..], [Effect::Capture(r)] if r.vip.as_deref() == Some("web")),
        "{effects:?}"
    );
    let s = screen_text(&app, 80, 24);
    for want in [
        "┌ capture of VIP web · times UTC · Esc closes ",
        "│ capturing up to 50 frames or 5 s, 256 bytes of each…",
        " Esc close  ↑↓ scroll  c again  ? help  q quit",
    ] {
        assert!(s.contains(want), "missing {want:?} in\n{s}");
    }
    update(
        &mut app,
        Msg::Captured {
            vip: "web".into(),
            result: Ok((capture_file(0), 2)),
        },
    );
    insta::assert_snapshot!("capture_80x24", screen_text(&app, 80, 24));
    let s = screen_text(&app, 120, 40);
    let want = [
        "│ 4 frames captured, 2 lost",
        "│ 22:13:20.123456  xdp-in      IP 198.51.100.10.40000 > 192.0.2.10.80: Flags [S], seq 1, win 64240, length 0",
        "│ 22:13:20.124456  xdp-out     IP 198.51.100.10.40000 > 10.0.0.11.80: Flags [S], seq 1, win 64240, length 0",
        "│ 22:13:20.125456  engine-in   IP 10.0.0.11.80 > 198.51.100.10.40000: Flags [S.], seq 7, ack 2, win 64240, length 0",
        "│ 22:13:20.126456  engine-out  IP 192.0.2.10.80 > 198.51.100.10.40000: Flags [S.], seq 7, ack 2, win 64240, length 0",
    ];
    let at: Vec<usize> = want
        .iter()
        .map(|w| {
            s.lines()
                .position(|l| l.starts_with(w))
                .unwrap_or_else(|| panic!("missing {w:?} in\n{s}"))
        })
        .collect();
    assert!(
        at.windows(2).all(|p| p[1] == p[0] + 1),
        "in order: {at:?}\n{s}"
    );
    assert!(s.contains(" capture of VIP web: 4 frames, 2 lost"), "{s}");

    key(&mut app, KeyCode::Esc);
    let after = screen_text(&app, 80, 24);
    let body = |s: &str| {
        let mut l: Vec<String> = s.lines().map(str::to_string).collect();
        l.remove(22);
        l
    };
    assert_eq!(
        body(&after),
        body(&before),
        "the list as it was, bar the status line"
    );
}

/// More frames than fit: the newest at the bottom, the range on the count line, and the
/// arrows, g and G move through them.
#[test]
fn capture_panel_scrolls() {
    let mut app = app_on(Tab::Vips);
    ch(&mut app, 'c');
    update(
        &mut app,
        Msg::Captured {
            vip: "web".into(),
            result: Ok((capture_file(60), 0)),
        },
    );
    let shown = |app: &App| {
        let s = screen_text(app, 80, 24);
        let count = s
            .lines()
            .find_map(|l| l.split_once("64 frames captured, 0 lost · "))
            .map(|(_, rest)| rest.trim_end_matches('│').trim_end().to_string())
            .unwrap_or_else(|| panic!("{s}"));
        let first = s.lines().nth(3).unwrap_or_default().to_string();
        (count, first)
    };
    let (count, first) = shown(&app);
    assert_eq!(count, "lines 47-64 of 64, ↑↓ scroll");
    assert!(
        first.contains(
            "22:13:20.169456  xdp-in      IP 198.51.100.10.40000 > 192.0.2.10.80: Flags [."
        ),
        "{first}"
    );
    for _ in 0..3 {
        key(&mut app, KeyCode::Up);
    }
    assert_eq!(shown(&app).0, "lines 44-61 of 64, ↑↓ scroll");
    ch(&mut app, 'g');
    let (count, first) = shown(&app);
    assert_eq!(count, "lines 1-18 of 64, ↑↓ scroll");
    assert!(
        first.contains(
            "22:13:20.123456  xdp-in      IP 198.51.100.10.40000 > 192.0.2.10.80: Flags [S"
        ),
        "{first}"
    );
    ch(&mut app, 'G');
    assert_eq!(shown(&app).0, "lines 47-64 of 64, ↑↓ scroll");
}

/// A failed capture says why in the panel, in red, and on the status line; without colours
/// the panel has none.
#[test]
fn capture_panel_failure_and_no_colour() {
    let mut app = app_on(Tab::Vips);
    ch(&mut app, 'c');
    update(
        &mut app,
        Msg::Captured {
            vip: "web".into(),
            result: Err(Failure {
                message: "capture needs the engine, which is not running (503)".into(),
                errors: vec![],
            }),
        },
    );
    let buf = screen(&app, 80, 24);
    let s = text(&buf);
    assert!(
        s.contains("│ capture failed: capture needs the engine, which is not running (503)"),
        "{s}"
    );
    assert!(
        s.contains(" capture of VIP web failed: capture needs the engine"),
        "{s}"
    );
    let y = s
        .lines()
        .position(|l| l.contains("│ capture failed"))
        .unwrap() as u16;
    assert_eq!(buf[(2, y)].fg, Color::Red, "an error is red");

    let mut app = app_after(40, "web", true);
    goto(&mut app, Tab::Vips);
    ch(&mut app, 'c');
    update(
        &mut app,
        Msg::Captured {
            vip: "web".into(),
            result: Ok((capture_file(3), 5)),
        },
    );
    let buf = screen(&app, 80, 24);
    assert!(text(&buf).contains("7 frames captured, 5 lost"));
    assert!(
        buf.content()
            .iter()
            .all(|c| (c.fg, c.bg) == (Color::Reset, Color::Reset))
    );
}

/// The VIP footer offers the BGP action the selected VIP can take, beside the capture: both
/// withdraw and announce do not fit 80 columns with it.
#[test]
fn vip_footer_offers_withdraw_or_announce_and_capture() {
    let mut app = app_on(Tab::Vips);
    let footer = |app: &App| {
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 1));
        render_footer(app, buf.area, &mut buf);
        lines(&buf)[0].clone()
    };
    assert_eq!(
        footer(&app),
        " Enter backends  s sort  / filter  W withdraw  c capture  ? help  q quit"
    );
    ch(&mut app, 'g');
    assert_eq!(app.selected_vip.as_deref(), Some("api"), "withdrawn");
    assert_eq!(
        footer(&app),
        " Enter backends  s sort  / filter  a announce  c capture  ? help  q quit"
    );
}
