//! The `sluice run` a bench starts in its lb namespace, the same way for every bench: its
//! config and log in the bench's directory, the wait until it forwards (each bench brings
//! its own probe), and the stop (SIGTERM, so it detaches XDP itself).

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lab::netns::{LabError, Netns};

use crate::{BenchError, READY_TIMEOUT};

/// A running `sluice run`.
pub(crate) struct Appliance {
    child: Child,
}

/// The log of the appliance a bench in `dir` starts.
pub(crate) fn log_path(dir: &Path) -> PathBuf {
    dir.join("sluice.log")
}

/// The last 20 lines of the appliance's log in `dir` (empty when it cannot be read).
pub(crate) fn log_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(log_path(dir)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

impl Appliance {
    /// Writes `config` to `dir`/sluice.toml and starts `sluice run` with it in `lb`, its
    /// output into `dir`/sluice.log.
    pub(crate) fn start(
        lb: &Netns,
        sluice: &Path,
        dir: &Path,
        config: &str,
    ) -> Result<Appliance, BenchError> {
        let cfg = dir.join("sluice.toml");
        std::fs::write(&cfg, config).map_err(|e| LabError {
            command: format!("write {}", cfg.display()),
            detail: e.to_string(),
        })?;
        let log = std::fs::File::create(log_path(dir)).ok();
        let child = lab::spawn_sluice_run(lb, sluice, &cfg, log)?;
        Ok(Appliance { child })
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, so the appliance detaches its XDP program itself; SIGKILL after 15 s.
    /// Whether it exited cleanly.
    pub(crate) fn stop(mut self) -> bool {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return false;
                }
            }
        }
    }
}

/// Probes until `probe` answers `Ok(None)` (forwarding), for at most [`READY_TIMEOUT`];
/// `Ok(Some(why))` is not yet, and the last `why` goes into the error. Gives up at once
/// when `appliance` (the run's, if any) exits or `stop` is set. `dir` holds its log.
pub(crate) fn wait_ready(
    run: &str,
    mut appliance: Option<&mut Appliance>,
    dir: &Path,
    stop: &AtomicBool,
    mut probe: impl FnMut() -> Result<Option<String>, BenchError>,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut last = String::from("never probed");
    while Instant::now() < deadline {
        if stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted);
        }
        if let Some(a) = appliance.as_deref_mut()
            && let Ok(Some(status)) = a.child.try_wait()
        {
            return Err(BenchError::NotForwarding {
                run: run.into(),
                detail: format!("sluice run exited ({status}); log:\n{}", log_tail(dir)),
            });
        }
        match probe()? {
            None => return Ok(()),
            Some(why) => last = why,
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = if appliance.is_some() {
        format!("; log:\n{}", log_tail(dir))
    } else {
        String::new()
    };
    Err(BenchError::NotForwarding {
        run: run.into(),
        detail: format!("{last} within {} s{log}", READY_TIMEOUT.as_secs()),
    })
}
