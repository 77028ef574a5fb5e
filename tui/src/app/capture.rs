//! `c`: a short capture of the selected VIP's frames, read on the spot.
//!
//! The appliance takes the frames (`POST /v1/capture`) and answers with a pcapng file; the
//! console turns each packet into one tcpdump-like line with the stage that saw it, so an
//! operator can see "the SYN arrives on xdp-in, nothing leaves on xdp-out" without copying a
//! file off the box. The request runs in the background like every API call (it lasts up to
//! [`CAPTURE_DURATION_MS`]); one capture at a time, so a held key cannot pile them up on the
//! appliance.

use api::CaptureRequest;
use api::fmt::clock;
use wire::pcapng;

use super::{App, Effect, Failure, StatusLine};

/// Frames a console capture stops after.
pub const CAPTURE_COUNT: u32 = 50;
/// How long a console capture lasts at most.
pub const CAPTURE_DURATION_MS: u64 = 5_000;
/// Bytes kept of each frame: every header of a VXLAN-encapsulated TCP segment with options.
pub const CAPTURE_SNAPLEN: u32 = 256;

/// The capture panel (over the view until Esc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturePanel {
    pub vip: String,
    pub state: CaptureState,
    /// Lines scrolled back from the newest (0: the newest line at the bottom). The view
    /// clamps it to what the panel can show.
    pub back: usize,
}

/// Where a capture is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureState {
    /// The request is out.
    Running,
    /// The packets, one line each ([`packet_lines`]), oldest first.
    Done {
        lines: Vec<String>,
        /// Frames in the file.
        captured: usize,
        /// Frames that matched but the appliance lost (its ring or queue was full).
        lost: u64,
    },
    /// The API's error, or why its file could not be read.
    Failed { message: String },
}

/// `HH:MM:SS.micro  stage  summary` per packet, times UTC, the stage being the pcapng
/// interface's name.
pub fn packet_lines(capture: &pcapng::Capture) -> Vec<String> {
    capture
        .packets
        .iter()
        .map(|p| {
            let stage = capture
                .interfaces
                .get(p.interface as usize)
                .map_or_else(|| format!("if {}", p.interface), |i| i.name.clone());
            format!(
                "{}.{:06}  {stage:<10}  {}",
                clock(p.ts_unix_ns / 1_000_000),
                p.ts_unix_ns / 1_000 % 1_000_000,
                wire::summary::line(&p.data)
            )
        })
        .collect()
}

impl App {
    /// `c` on a VIP: asks the appliance for its frames and opens the panel.
    pub(super) fn start_capture(&mut self) -> Vec<Effect> {
        if let Some(vip) = &self.capturing {
            self.status_line = Some(StatusLine::error(format!(
                "a capture of VIP {vip} is running; one at a time"
            )));
            return Vec::new();
        }
        let Some(vip) = self.vip_target() else {
            return Vec::new();
        };
        self.capturing = Some(vip.name.clone());
        self.capture = Some(CapturePanel {
            vip: vip.name.clone(),
            state: CaptureState::Running,
            back: 0,
        });
        self.start(Effect::Capture(CaptureRequest {
            vip: Some(vip.name),
            endpoints: Vec::new(),
            count: CAPTURE_COUNT,
            duration_ms: CAPTURE_DURATION_MS,
            snaplen: CAPTURE_SNAPLEN,
        }))
    }

    /// The capture of `vip` ended: the file's packets as lines, or the error. A panel closed
    /// meanwhile stays closed; the status line has the count either way.
    pub(super) fn on_captured(&mut self, vip: String, result: Result<(Vec<u8>, u64), Failure>) {
        self.capturing = None;
        let failed = |message: String| {
            let line = StatusLine::error(format!("capture of VIP {vip} failed: {message}"));
            (CaptureState::Failed { message }, line)
        };
        let (state, line) = match result {
            Ok((bytes, lost)) => match pcapng::read(&bytes) {
                Ok(c) => (
                    CaptureState::Done {
                        lines: packet_lines(&c),
                        captured: c.packets.len(),
                        lost,
                    },
                    StatusLine::info(format!(
                        "capture of VIP {vip}: {} frames, {lost} lost",
                        c.packets.len()
                    )),
                ),
                Err(e) => failed(format!("the appliance's reply: {e}")),
            },
            Err(f) => failed(f.message),
        };
        self.status_line = Some(line);
        if let Some(panel) = &mut self.capture
            && panel.vip == vip
        {
            panel.state = state;
            panel.back = 0;
        }
    }

    /// Moves the panel's view `by` lines back (positive) or forward, within its lines.
    pub(super) fn scroll_capture(&mut self, by: isize) {
        if let Some(panel) = &mut self.capture {
            let n = match &panel.state {
                CaptureState::Done { lines, .. } => lines.len(),
                _ => 0,
            };
            panel.back = panel
                .back
                .saturating_add_signed(by)
                .min(n.saturating_sub(1));
        }
    }
}
