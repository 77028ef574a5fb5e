//! The lab's appliances: `sluice run` processes (the binary the caller names) in their
//! namespaces, started with the config the lab wrote, signalled (reload, graceful stop) and
//! reaped.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::netns::{Netns, Result};
use crate::{Lab, STARTUP_HEALTH_WAIT};

impl Lab {
    /// was written already); its output goes to `sluice.log` in the lab directory.
    pub fn start_appliance(&mut self, sluice: &Path) -> Result<PathBuf> {
        self.start_appliance_at(0, sluice)
    }

    /// Starts every appliance and waits (up to 20 s) until each reports its health-checked
    /// backends up; returns their log paths in order.
    pub fn start_appliances(&mut self, sluice: &Path) -> Result<Vec<PathBuf>> {
        let logs = self.spawn_appliances(sluice)?;
        for k in 0..self.appliance_count() {
            self.wait_healthy(k, STARTUP_HEALTH_WAIT);
        }
        Ok(logs)
    }

    /// Starts every appliance without waiting for anything; returns their log paths.
    pub fn spawn_appliances(&mut self, sluice: &Path) -> Result<Vec<PathBuf>> {
        (0..self.appliance_count())
            .map(|k| self.spawn_appliance_at(k, sluice))
            .collect()
    }

    /// Starts `sluice run` for appliance `k` (see [`Lab::spawn_appliance_at`]) and waits up to
    /// 20 s until it reports every health-checked backend up, so that the first flows see
    /// the whole pool (a flow started while backends still rise is pinned to a smaller
    /// ring). Returns early, without an error, when the appliance exits or the wait times
    /// out: the caller's own traffic check reports what is wrong.
    pub fn start_appliance_at(&mut self, k: usize, sluice: &Path) -> Result<PathBuf> {
        let log = self.spawn_appliance_at(k, sluice)?;
        self.wait_healthy(k, STARTUP_HEALTH_WAIT);
        Ok(log)
    }

    /// Starts `sluice run` for appliance `k` with its lab config (unless a config was
    /// written already) and returns at once; its output goes to [`Lab::log_path_at`].
    pub fn spawn_appliance_at(&mut self, k: usize, sluice: &Path) -> Result<PathBuf> {
        let cfg = self.config_path_at(k);
        if !cfg.exists() {
            self.write_config_at(k, &self.config_for(k, &self.api_socket_at(k)))?;
        }
        let log_path = self.log_path_at(k);
        let log = std::fs::File::create(&log_path).ok();
        let child = spawn_sluice_run(self.appliance_ns(k), sluice, &cfg, log)?;
        self.appliances[k] = Some(child);
        Ok(log_path)
    }

    /// The process id of appliance `k`'s `sluice run`, while the lab runs it.
    pub fn appliance_pid(&self, k: usize) -> Option<u32> {
        self.appliances.get(k)?.as_ref().map(Child::id)
    }

    fn signal_appliance(&self, k: usize, signal: &str) -> bool {
        let Some(pid) = self.appliance_pid(k) else {
            return false;
        };
        std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Asks the appliance to reload its config file (SIGHUP).
    pub fn reload(&self) -> bool {
        self.reload_at(0)
    }

    /// Asks appliance `k` to reload its config file (SIGHUP).
    pub fn reload_at(&self, k: usize) -> bool {
        self.signal_appliance(k, "-HUP")
    }

    /// Sends SIGTERM to the appliance and waits for it to exit; returns whether it exited
    /// cleanly.
    pub fn stop_appliance(&mut self) -> bool {
        self.stop_appliance_at(0)
    }

    /// Sends SIGTERM to appliance `k` and waits (up to 15 s) for it to exit; returns whether
    /// it exited cleanly (status 0).
    pub fn stop_appliance_at(&mut self, k: usize) -> bool {
        self.terminate_appliance_at(k) && self.wait_appliance_at(k, Duration::from_secs(15))
    }

    /// Sends SIGTERM to appliance `k` without waiting (it shuts down gracefully: BGP
    /// GRACEFUL_SHUTDOWN, withdraw, datapath stop); returns whether the signal was sent.
    pub fn terminate_appliance_at(&self, k: usize) -> bool {
        self.signal_appliance(k, "-TERM")
    }

    /// Waits up to `timeout` for appliance `k` to exit and reaps it; returns whether it
    /// exited with status 0. Kills it (and returns false) when it outlives `timeout`.
    pub fn wait_appliance_at(&mut self, k: usize, timeout: Duration) -> bool {
        let Some(mut child) = self.appliances.get_mut(k).and_then(Option::take) else {
            return false;
        };
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return false;
                }
            }
        }
    }

    /// Kills appliance `k` hard (SIGKILL: no graceful shutdown, no withdraw, no cleanup)
    /// and reaps it; returns whether there was one to kill.
    pub fn kill_appliance_at(&mut self, k: usize) -> bool {
        let Some(mut child) = self.appliances.get_mut(k).and_then(Option::take) else {
            return false;
        };
        let killed = child.kill().is_ok();
        let _ = child.wait();
        killed
    }

    /// Whether appliance `k`'s process runs (exists and is not a zombie awaiting reaping).
    pub(crate) fn appliance_alive(&self, k: usize) -> bool {
        let Some(pid) = self.appliance_pid(k) else {
            return false;
        };
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|st| st.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
            .unwrap_or(false)
    }
}

/// Starts `sluice run --config CFG` in `ns`, its output into `log` (or discarded).
pub fn spawn_sluice_run(
    ns: &Netns,
    sluice: &Path,
    cfg: &Path,
    log: Option<std::fs::File>,
) -> Result<Child> {
    ns.try_spawn(
        &[
            &sluice.to_string_lossy(),
            "run",
            "--config",
            &cfg.to_string_lossy(),
        ],
        log,
    )
}

/// `sluice ctl --socket SOCKET ARGS...`: (exit code, stdout, stderr).
pub fn sluice_ctl(sluice: &Path, socket: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(sluice)
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("run sluice ctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
