//! `sluice run` processes (the binary the caller names) in their namespaces: the one way the
//! lab, its appliances and the tests that build their own topology start one on a config
//! file, signal it (reload, graceful stop), wait for its exit and reap it.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use crate::netns::{LabError, Netns, Result};
use crate::{Lab, STARTUP_HEALTH_WAIT};

/// How often a wait for an appliance's exit looks (a test times how long SIGTERM takes).
const EXIT_POLL: Duration = Duration::from_millis(20);

/// A running `sluice run`: its config and log files and its process, killed (SIGKILL) and
/// reaped on drop.
#[derive(Debug)]
pub struct Appliance {
    child: Child,
    config: PathBuf,
    log: PathBuf,
    /// The exit status, once reaped.
    exit: Option<ExitStatus>,
}

impl Drop for Appliance {
    fn drop(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Appliance {
    /// Starts `sluice run --config CONFIG` in `ns`, its output (stdout and stderr) into
    /// `log`.
    pub fn spawn(ns: &Netns, sluice: &Path, config: &Path, log: &Path) -> Result<Appliance> {
        Appliance::spawn_with(ns, sluice, config, log, &[])
    }

    /// [`Appliance::spawn`] with more arguments to `sluice run` (`--takeover`).
    pub fn spawn_with(
        ns: &Netns,
        sluice: &Path,
        config: &Path,
        log: &Path,
        args: &[&str],
    ) -> Result<Appliance> {
        let file = std::fs::File::create(log).map_err(|e| LabError {
            command: format!("create {}", log.display()),
            detail: e.to_string(),
        })?;
        let child = spawn_sluice_run_with(ns, sluice, config, Some(file), args)?;
        Ok(Appliance {
            child,
            config: config.to_path_buf(),
            log: log.to_path_buf(),
            exit: None,
        })
    }

    /// Writes `config` to `dir`/sluice.toml and starts `sluice run` with it in `ns`, its
    /// output into `dir`/sluice.log.
    pub fn start(ns: &Netns, sluice: &Path, dir: &Path, config: &str) -> Result<Appliance> {
        let path = dir.join("sluice.toml");
        std::fs::write(&path, config).map_err(|e| LabError {
            command: format!("write {}", path.display()),
            detail: e.to_string(),
        })?;
        Appliance::spawn(ns, sluice, &path, &dir.join("sluice.log"))
    }

    /// Its process id (`ip netns exec` execs, so it is sluice's own).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The config file it runs on.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// The file its output goes to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// What it has logged so far (empty when the log cannot be read).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (as `kill` names it: `-HUP`, `-TERM`, `-USR2`); whether it was sent.
    pub fn signal(&self, signal: &str) -> bool {
        self.exit.is_none()
            && std::process::Command::new("kill")
                .args([signal, &self.pid().to_string()])
                .status()
                .is_ok_and(|s| s.success())
    }

    /// Whether the process runs (exists and is not a zombie awaiting reaping).
    pub fn alive(&self) -> bool {
        self.exit.is_none()
            && std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
                .ok()
                .and_then(|st| st.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
                .unwrap_or(false)
    }

    /// Its exit status, when it has exited (reaping it).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// Waits up to `timeout` for it to exit and reaps it; whether it exited with status 0,
    /// and how long the wait took. Kills it (and says false) when it outlives `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> (bool, Duration) {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return (status.success(), t0.elapsed());
            }
            if t0.elapsed() >= timeout {
                let _ = self.child.kill();
                self.exit = self.child.wait().ok();
                return (false, t0.elapsed());
            }
            std::thread::sleep(EXIT_POLL);
        }
    }

    /// SIGTERM (it shuts down gracefully: BGP GRACEFUL_SHUTDOWN, withdraw, detach XDP) and
    /// [`Appliance::wait`] up to `timeout`: whether it exited cleanly, and how long it took.
    pub fn stop(&mut self, timeout: Duration) -> (bool, Duration) {
        if !self.signal("-TERM") {
            return (self.exited().is_some_and(|s| s.success()), Duration::ZERO);
        }
        self.wait(timeout)
    }

    /// SIGKILL (no graceful shutdown, no withdraw, no cleanup) and reap; whether it ran.
    pub fn kill(&mut self) -> bool {
        if self.exit.is_some() {
            return false;
        }
        let killed = self.child.kill().is_ok();
        self.exit = self.child.wait().ok();
        killed
    }
}

impl Lab {
    /// Starts `sluice run` for the first appliance ([`Lab::start_appliance_at`]); returns its
    /// log's path.
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
        let log = self.log_path_at(k);
        let appliance = Appliance::spawn(self.appliance_ns(k), sluice, &cfg, &log)?;
        self.appliances[k] = Some(appliance);
        Ok(log)
    }

    /// Starts `sluice run --takeover` for appliance `k` beside the one running, which hands
    /// its connections over and exits; waits up to `timeout` for that exit. Returns whether
    /// the old process exited cleanly, and the new one's log (`log` with `.N` appended).
    pub fn take_over_at(
        &mut self,
        k: usize,
        sluice: &Path,
        n: usize,
        timeout: Duration,
    ) -> Result<(bool, PathBuf)> {
        let cfg = self.config_path_at(k);
        let mut log = self.log_path_at(k).into_os_string();
        log.push(format!(".{n}"));
        let log = PathBuf::from(log);
        let new = Appliance::spawn_with(self.appliance_ns(k), sluice, &cfg, &log, &["--takeover"])?;
        let old = self.appliances[k].replace(new);
        let exited = match old {
            Some(mut a) => a.wait(timeout).0,
            None => false,
        };
        Ok((exited, log))
    }

    /// Appliance `k`'s `sluice run`, while the lab runs it.
    pub fn appliance(&self, k: usize) -> Option<&Appliance> {
        self.appliances.get(k)?.as_ref()
    }

    /// The process id of appliance `k`'s `sluice run`, while the lab runs it.
    pub fn appliance_pid(&self, k: usize) -> Option<u32> {
        self.appliance(k).map(Appliance::pid)
    }

    fn signal_appliance(&self, k: usize, signal: &str) -> bool {
        self.appliance(k).is_some_and(|a| a.signal(signal))
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
        let Some(mut appliance) = self.appliances.get_mut(k).and_then(Option::take) else {
            return false;
        };
        appliance.wait(timeout).0
    }

    /// Kills appliance `k` hard (SIGKILL: no graceful shutdown, no withdraw, no cleanup)
    /// and reaps it; returns whether there was one to kill.
    pub fn kill_appliance_at(&mut self, k: usize) -> bool {
        let Some(mut appliance) = self.appliances.get_mut(k).and_then(Option::take) else {
            return false;
        };
        appliance.kill()
    }

    /// Whether appliance `k`'s process runs (exists and is not a zombie awaiting reaping).
    pub(crate) fn appliance_alive(&self, k: usize) -> bool {
        self.appliance(k).is_some_and(Appliance::alive)
    }
}

/// Starts `sluice run --config CFG` in `ns`, its output into `log` (or discarded).
pub fn spawn_sluice_run(
    ns: &Netns,
    sluice: &Path,
    cfg: &Path,
    log: Option<std::fs::File>,
) -> Result<Child> {
    spawn_sluice_run_with(ns, sluice, cfg, log, &[])
}

/// [`spawn_sluice_run`] with more arguments.
pub fn spawn_sluice_run_with(
    ns: &Netns,
    sluice: &Path,
    cfg: &Path,
    log: Option<std::fs::File>,
    args: &[&str],
) -> Result<Child> {
    let sluice = sluice.to_string_lossy();
    let cfg = cfg.to_string_lossy();
    let mut argv: Vec<&str> = vec![&sluice, "run", "--config", &cfg];
    argv.extend_from_slice(args);
    ns.try_spawn(&argv, log)
}
