//! Console test helpers: recorded API responses (tests/fixtures/*.json, two polls one second
//! apart: `t0-*` and `t1-*`), an `App` fed from them, and screens rendered to text.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use api::{Backend, Bgp, Event, FleetStatus, Status, Vip};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use serde::de::DeserializeOwned;
use tui::app::{App, Effect, Msg, Snapshot, Tab, update};
use tui::view::view;

pub const ENDPOINT: &str = "/run/sluice/api.sock";

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn fixture<T: DeserializeOwned>(name: &str) -> T {
    let path = fixture_path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The recorded poll `k` (0 or 1), with the backends of `vip`.
pub fn recorded(k: u32, vip: &str) -> Snapshot {
    Snapshot {
        status: fixture::<Status>(&format!("t{k}-status.json")),
        vips: fixture::<Vec<Vip>>(&format!("t{k}-vips.json")),
        backends: Some((
            vip.to_string(),
            fixture::<Vec<Backend>>(&format!("t{k}-backends-{vip}.json")),
        )),
        bgp: fixture::<Bgp>(&format!("t{k}-bgp.json")),
        events: fixture::<Vec<Event>>(&format!("t{k}-events.json")),
        fleet: Some(fixture::<FleetStatus>(&format!("t{k}-fleet.json"))),
    }
}

/// Traffic of one poll relative to the recorded one-second delta: a fixed wave, so the
/// sparklines have a shape and the snapshots stay the same run after run.
const WAVE: [f64; 12] = [0.6, 0.8, 1.1, 1.3, 1.2, 0.9, 0.7, 0.5, 0.8, 1.2, 1.4, 1.0];

fn step(prev: u64, t0: u64, t1: u64, f: f64) -> u64 {
    prev + ((t1 - t0) as f64 * f).round() as u64
}

/// The next poll after `prev`: every counter moves by the recorded delta times `f`.
fn advance(prev: &Snapshot, t0: &Snapshot, t1: &Snapshot, f: f64) -> Snapshot {
    let mut s = prev.clone();
    s.status.uptime_seconds += 1;
    let (a, b) = (&t0.status.totals, &t1.status.totals);
    let tot = &mut s.status.totals;
    tot.rx_packets = step(tot.rx_packets, a.rx_packets, b.rx_packets, f);
    tot.tx_packets = step(tot.tx_packets, a.tx_packets, b.tx_packets, f);
    tot.passed_packets = step(tot.passed_packets, a.passed_packets, b.passed_packets, f);
    tot.dropped_packets = step(tot.dropped_packets, a.dropped_packets, b.dropped_packets, f);
    tot.vip_bytes = step(tot.vip_bytes, a.vip_bytes, b.vip_bytes, f);
    for ((v, a), b) in s.vips.iter_mut().zip(&t0.vips).zip(&t1.vips) {
        v.packets = step(v.packets, a.packets, b.packets, f);
        v.bytes = step(v.bytes, a.bytes, b.bytes, f);
        v.new_flows = step(v.new_flows, a.new_flows, b.new_flows, f);
    }
    if let (Some((_, list)), Some((_, l0)), Some((_, l1))) =
        (&mut s.backends, &t0.backends, &t1.backends)
    {
        for ((x, a), b) in list.iter_mut().zip(l0).zip(l1) {
            x.packets = step(x.packets, a.packets, b.packets, f);
            x.bytes = step(x.bytes, a.bytes, b.bytes, f);
        }
    }
    s.events = Vec::new();
    s
}

/// An app that has seen the recorded poll and then `polls` more, one second apart (the
/// last one with exactly the recorded delta, so the rates on screen are the recorded ones).
pub fn app_after(polls: usize, vip: &str, no_color: bool) -> App {
    let mut app = App::new(ENDPOINT, no_color);
    let t0 = recorded(0, vip);
    let t1 = recorded(1, vip);
    app.selected_vip = Some(vip.to_string());
    let start = Instant::now();
    let mut snap = t0.clone();
    feed(&mut app, start, snap.clone());
    for i in 0..polls {
        let f = if i + 1 == polls {
            1.0
        } else {
            WAVE[i % WAVE.len()]
        };
        snap = advance(&snap, &t0, &t1, f);
        feed(
            &mut app,
            start + Duration::from_secs(i as u64 + 1),
            snap.clone(),
        );
    }
    app
}

/// The app every view's snapshot starts from: 40 polls, VIP `web` selected.
pub fn sample_app() -> App {
    app_after(40, "web", false)
}

pub fn feed(app: &mut App, at: Instant, snap: Snapshot) -> Vec<Effect> {
    update(
        app,
        Msg::Polled {
            at,
            result: Ok(Box::new(snap)),
        },
    )
}

pub fn key(app: &mut App, code: KeyCode) -> Vec<Effect> {
    update(app, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

pub fn ch(app: &mut App, c: char) -> Vec<Effect> {
    let mods = if c.is_ascii_uppercase() {
        KeyModifiers::SHIFT
    } else {
        KeyModifiers::NONE
    };
    update(app, Msg::Key(KeyEvent::new(KeyCode::Char(c), mods)))
}

pub fn goto(app: &mut App, tab: Tab) {
    let n = Tab::ALL.iter().position(|t| *t == tab).unwrap();
    ch(app, char::from(b'1' + n as u8));
    assert_eq!(app.tab, tab);
}

/// The whole screen at `w`x`h`.
pub fn screen(app: &App, w: u16, h: u16) -> Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| view(app, f)).unwrap();
    term.backend().buffer().clone()
}

/// A buffer as lines of text, trailing spaces trimmed.
pub fn text(buf: &Buffer) -> String {
    let area = buf.area;
    let mut out = String::new();
    for y in area.top()..area.bottom() {
        let mut line = String::new();
        for x in area.left()..area.right() {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn screen_text(app: &App, w: u16, h: u16) -> String {
    text(&screen(app, w, h))
}

/// 2023-11-14 22:13:20.123456789 UTC, when the recorded capture starts.
pub const CAPTURE_TS: u64 = 1_700_000_000_123_456_789;

/// A TCP segment between two endpoints, as a whole Ethernet frame.
fn segment(src: (&str, u16), dst: (&str, u16), seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    use wire::{
        EtherType, EthernetRepr, FrameRepr, IpProtocol, Ipv4Repr, L4Repr, MacAddr, TcpRepr,
    };
    let frame = FrameRepr {
        ethernet: EthernetRepr {
            src: MacAddr([2, 0, 0, 0, 0, 1]),
            dst: MacAddr([2, 0, 0, 0, 0, 2]),
            vlan_tci: None,
            ethertype: EtherType::Ipv4,
        },
        ip: Ipv4Repr::new(
            src.0.parse().unwrap(),
            dst.0.parse().unwrap(),
            IpProtocol::Tcp,
            0,
        )
        .into(),
        l4: L4Repr::Tcp(TcpRepr {
            src_port: src.1,
            dst_port: dst.1,
            seq_number: seq,
            ack_number: ack,
            flags,
            window_len: 64240,
            urgent_at: 0,
            options: &[],
            payload: &[],
        }),
    };
    let mut buf = vec![0; frame.buffer_len()];
    frame.emit(&mut buf, true).unwrap();
    buf
}

/// What `POST /v1/capture` answers for VIP web (NAT to 10.0.0.11:80): a client's SYN in and
/// out of XDP, the backend's SYN-ACK in and out of the engine, then `more` ACKs on xdp-in,
/// 1 ms apart. Built with wire's own pcapng writer.
pub fn capture_file(more: u32) -> Vec<u8> {
    use wire::pcapng::{Interface, Writer};
    use wire::tcp::flags::{ACK, SYN};
    let stages: Vec<Interface> = ["xdp-in", "xdp-out", "engine-in", "engine-out"]
        .iter()
        .map(|name| Interface {
            name: name.to_string(),
            description: String::new(),
            snaplen: 256,
        })
        .collect();
    let client = ("198.51.100.10", 40000);
    let vip = ("192.0.2.10", 80);
    let backend = ("10.0.0.11", 80);
    let mut frames = vec![
        (0, segment(client, vip, 1, 0, SYN)),
        (1, segment(client, backend, 1, 0, SYN)),
        (2, segment(backend, client, 7, 2, SYN | ACK)),
        (3, segment(vip, client, 7, 2, SYN | ACK)),
    ];
    for i in 0..more {
        frames.push((0, segment(client, vip, 2, 8 + i, ACK)));
    }
    let mut w = Writer::new(Vec::new(), &stages).unwrap();
    for (i, (stage, frame)) in frames.iter().enumerate() {
        let ts = CAPTURE_TS + i as u64 * 1_000_000;
        w.write_packet(*stage, ts, frame.len() as u32, frame, None)
            .unwrap();
    }
    w.finish(&[], CAPTURE_TS + 5_000_000_000).unwrap()
}
