//! `sluice console` end to end: the real console under tmux against a running appliance in a
//! lab. It drains a backend with keystrokes (filter, Backends view, `d`, `y`), then checks
//! the screen text and that the backend really stopped getting new flows; then it stops the
//! appliance (the console must say it is unreachable and keep polling), starts it again
//! (the console must say it reconnected), and quits with `q` (the terminal must be given
//! back: no alternate screen, exit status 0). Needs root and tmux.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lab::testing::{Whoami, wait_for};
use lab::{LabMode, LabOptions};

/// A tmux server of our own (its own socket), killed on drop even when the test fails.
struct Tmux {
    socket: PathBuf,
    /// Where the shell around the console writes its exit status: tmux 3.3 sometimes
    /// reports a pane whose process exited 0 as killed by a signal (it hangs up the pane as
    /// soon as the terminal closes, racing the exit), so the status comes from a shell.
    status: PathBuf,
}

impl Tmux {
    fn start(name: &str, command: &str, width: u16, height: u16) -> Tmux {
        let base = std::env::temp_dir().join(format!("ht-console-{name}-{}", std::process::id()));
        let t = Tmux {
            socket: base.with_extension("tmux"),
            status: base.with_extension("status"),
        };
        let _ = std::fs::remove_file(&t.status);
        let command = format!("{command}; echo $? > {}", t.status.display());
        t.run(&[
            "new-session",
            "-d",
            "-s",
            "console",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            &command,
        ]);
        // Keep the pane after the console exits, to read its exit status and screen.
        t.run(&["set-option", "-t", "console", "remain-on-exit", "on"]);
        t
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "console"])
    }

    /// The screen with its attributes as SGR escape sequences.
    fn screen_sgr(&self) -> String {
        self.run(&["capture-pane", "-p", "-e", "-t", "console"])
    }

    /// Types `text` literally.
    fn type_text(&self, text: &str) {
        self.run(&["send-keys", "-t", "console", "-l", text]);
    }

    /// Sends a key by tmux name (`Enter`, `Escape`).
    fn key(&self, name: &str) {
        self.run(&["send-keys", "-t", "console", name]);
    }

    fn pane(&self, format: &str) -> String {
        self.run(&["display-message", "-p", "-t", "console", format])
            .trim()
            .to_string()
    }

    /// Waits for the console to exit, and checks it exited with status 0 (not a signal).
    fn wait_dead(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Ok(s) = std::fs::read_to_string(&self.status)
                && s.ends_with('\n')
            {
                break s.trim().to_string();
            }
            assert!(
                Instant::now() < deadline,
                "the console did not exit:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(status, "0", "the console's exit status (128+N: signal N)");
    }

    /// Waits until the screen contains every one of `needles`; fails showing the screen.
    fn wait_for(&self, needles: &[&str], timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.screen();
            if needles.iter().all(|n| s.contains(n)) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {needles:?} on the console; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.status);
    }
}

/// Waits (30 s) until the appliance has created its API socket.
fn wait_socket(socket: &Path) {
    wait_for(
        &format!("the appliance's API socket {}", socket.display()),
        Duration::from_secs(30),
        Duration::from_millis(100),
        || socket.exists().then_some(()),
    );
}

/// SGR parameters of every escape sequence in `screen` (`ESC [ p;p;... m`).
fn sgr_params(screen: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for chunk in screen.split("\x1b[").skip(1) {
        if let Some(end) = chunk.find('m') {
            let params = &chunk[..end];
            if params.chars().all(|c| c.is_ascii_digit() || c == ';') {
                out.extend(params.split(';').filter_map(|p| p.parse::<u32>().ok()));
            }
        }
    }
    out
}

/// Foreground or background colour parameters (30-38, 40-48, 90-97, 100-107; 38 and 48
/// start extended ones). 39 and 49 are "default colour", which is no colour.
fn is_colour(p: u32) -> bool {
    (30..=38).contains(&p)
        || (40..=48).contains(&p)
        || (90..=97).contains(&p)
        || (100..=107).contains(&p)
}

#[test]
fn console_drains_a_backend_with_keystrokes() {
    lab::netns::require_root();
    lab::netns::require_program("tmux", "tmux");
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        ..LabOptions::default()
    });
    lab.start_appliance(lab::sluice!().path())
        .expect("start the appliance");
    let socket = lab.api_socket_at(0);
    wait_socket(&socket);
    let vip = std::net::SocketAddr::new(LabMode::Nat.vip(false), 80);
    let whoami = Whoami::new(&lab, vip, Duration::from_secs(3));

    // Before: be1 takes its share of new flows (so the check after the drain can fail).
    let before = whoami.spread(60);
    assert!(
        before.get("be1").copied().unwrap_or(0) > 0 && before.len() == 3,
        "every backend should answer before the drain: {before:?}"
    );

    let tmux = Tmux::start(
        "drain",
        &format!(
            "{} console --socket {} --refresh 500ms",
            lab::sluice!().path().display(),
            socket.display()
        ),
        120,
        40,
    );
    tmux.wait_for(
        &["1 Overview", "lab-lb1", "12 of 12 healthy"],
        Duration::from_secs(20),
    );

    // Filter to the VIP, open its backends, select the first (10.0.0.21:8080 = be1).
    tmux.type_text("2/nat4-tcp");
    tmux.key("Enter");
    tmux.wait_for(
        &["1 of 4 VIPs", "filter: nat4-tcp"],
        Duration::from_secs(10),
    );
    tmux.key("Enter");
    let s = tmux.wait_for(
        &[
            "Backends of VIP nat4-tcp",
            "10.0.0.21:8080",
            "10.0.0.23:8080",
        ],
        Duration::from_secs(10),
    );
    assert!(s.contains("3 of 3 take new flows"), "{s}");
    tmux.type_text("g");

    // d asks first; y drains.
    tmux.type_text("d");
    tmux.wait_for(
        &["Drain backend 10.0.0.21:8080 of VIP nat4-tcp? y/n"],
        Duration::from_secs(5),
    );
    tmux.type_text("y");
    tmux.wait_for(
        &[
            "drain 10.0.0.21:8080 of VIP nat4-tcp: version",
            "on every worker",
        ],
        Duration::from_secs(15),
    );
    // The next refresh shows the new state of the backend.
    let s = tmux.wait_for(
        &["drain*", "2 of 3 take new flows"],
        Duration::from_secs(10),
    );
    let row = s
        .lines()
        .find(|l| l.starts_with("10.0.0.21:8080"))
        .unwrap_or_else(|| panic!("no row for 10.0.0.21:8080:\n{s}"));
    assert!(row.contains("drain*") && row.contains("0.0/0.0%"), "{row}");

    // After: be1 gets no new flows; the others take them all.
    let after = whoami.spread(60);
    eprintln!("new flows per backend: before the drain {before:?}, after {after:?}");
    assert_eq!(after.get("be1"), None, "be1 still got new flows: {after:?}");
    assert_eq!(
        after.get("be2").copied().unwrap_or(0) + after.get("be3").copied().unwrap_or(0),
        60,
        "{after:?}"
    );

    // The appliance goes away: the console says so and keeps polling.
    assert!(lab.stop_appliance(), "stop the appliance");
    let s = tmux.wait_for(
        &[
            &format!("appliance unreachable at {}", socket.display()),
            "retrying",
        ],
        Duration::from_secs(15),
    );
    assert!(
        s.contains("nat4-tcp"),
        "the last data stays on screen:\n{s}"
    );
    // It comes back: the console reconnects by itself.
    lab.start_appliance(lab::sluice!().path())
        .expect("restart the appliance");
    wait_socket(&socket);
    tmux.wait_for(
        &[&format!("reconnected to {}", socket.display())],
        Duration::from_secs(30),
    );
    let s = tmux.screen();
    assert!(!s.contains("unreachable"), "{s}");

    // q quits and gives the terminal back.
    tmux.type_text("q");
    tmux.wait_dead();
    assert_eq!(
        tmux.pane("#{alternate_on}"),
        "0",
        "left the alternate screen"
    );
    let s = tmux.screen();
    assert!(
        !s.contains("1 Overview"),
        "the console's screen is gone:\n{s}"
    );
    drop(tmux);

    // NO_COLOR: not one colour on screen, the current tab still in reverse video. The same
    // screen with colours has some (so the check can fail).
    let colour = Tmux::start(
        "colour",
        &format!(
            "{} console --socket {}",
            lab::sluice!().path().display(),
            socket.display()
        ),
        80,
        24,
    );
    colour.wait_for(&["1 Overview", "lab-lb1"], Duration::from_secs(20));
    let params = sgr_params(&colour.screen_sgr());
    assert!(params.iter().any(|p| is_colour(*p)), "{params:?}");
    drop(colour);
    let plain = Tmux::start(
        "nocolour",
        &format!(
            "env NO_COLOR=1 {} console --socket {}",
            lab::sluice!().path().display(),
            socket.display()
        ),
        80,
        24,
    );
    plain.wait_for(&["1 Overview", "lab-lb1"], Duration::from_secs(20));
    let params = sgr_params(&plain.screen_sgr());
    assert!(
        !params.iter().any(|p| is_colour(*p)),
        "NO_COLOR, yet colours: {params:?}"
    );
    assert!(params.contains(&7), "reverse video for the tab: {params:?}");

    // SIGTERM (systemd stopping the console's tty): it gives the terminal back too.
    // The pane runs a shell around the console: signal the shell's child.
    let shell = plain.pane("#{pane_pid}");
    lab::netns::run(&["pkill", "-TERM", "-P", &shell]);
    plain.wait_dead();
    assert_eq!(
        plain.pane("#{alternate_on}"),
        "0",
        "left the alternate screen on SIGTERM"
    );
}
