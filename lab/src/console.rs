//! Handing the terminal to `sluice console` on lb1 at the end of `sluice lab --console`,
//! with light background traffic so the console has something to show.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::netns::{LabError, Result};
use crate::{Lab, LabMode, http_get};

/// Runs `sluice console` on lb1's API in this terminal while the client sends a request to
/// `mode`'s IPv4 VIP every 100 ms, so the console has traffic to show; returns when the
/// operator quits it.
pub(crate) fn open_console(lab: &Lab, sluice: &Path, mode: LabMode) -> Result<()> {
    println!(
        "lab: opening the console on lb1 (background HTTP to the {} VIP; q quits and tears \
         the lab down)",
        mode.name()
    );
    std::thread::sleep(Duration::from_secs(2));
    let quit = Arc::new(AtomicBool::new(false));
    let traffic = {
        let quit = Arc::clone(&quit);
        lab.client.in_thread(move || {
            let addr = SocketAddr::new(mode.vip(false), 80);
            while !quit.load(Ordering::Relaxed) {
                let _ = http_get(addr, "/whoami", Duration::from_millis(500));
                std::thread::sleep(Duration::from_millis(100));
            }
        })?
    };
    let status = std::process::Command::new(sluice)
        .arg("console")
        .arg("--socket")
        .arg(lab.api_socket_at(0))
        .status();
    quit.store(true, Ordering::Relaxed);
    let _ = traffic.join();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(LabError {
            command: "sluice console".into(),
            detail: format!("exited with {s}"),
        }),
        Err(e) => Err(LabError {
            command: "sluice console".into(),
            detail: e.to_string(),
        }),
    }
}
