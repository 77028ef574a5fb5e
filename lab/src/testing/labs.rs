//! A [`Lab`] as a test uses it: built or the test fails saying why, its appliance started
//! and serving before the test sends anything, its logs at hand for failure messages.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::{Api, file_text, tail};
use crate::netns::Netns;
use crate::{Lab, LabOptions};

/// How long a started appliance has until each VIP a test waits for answers, or until its
/// health-checked backends are up.
const SERVING_WAIT: Duration = Duration::from_secs(20);
/// How long a BGP lab's router has to learn every VIP after its appliances start.
const ROUTES_WAIT: Duration = Duration::from_secs(30);
/// How long one API call of [`Lab::api_at`]'s client may take.
const API_TIMEOUT: Duration = Duration::from_secs(5);

/// A namespace named from `tag` whose interface indexes are the golden fixtures' egress
/// ones: lo is index 1 (`testkit::golden::UPLINK`) and the veth `{dev}2` (up; its peer
/// `{dev}3` is index 3) is index 2 (`golden::BACKENDS`). A flow cache only installs entries
/// toward interfaces it can send on, and its egress map only takes ones that exist.
pub fn golden_netns(tag: &str, dev: &str) -> Netns {
    let ns = Netns::new(tag);
    let (two, three) = (format!("{dev}2"), format!("{dev}3"));
    ns.run(&[
        "ip", "link", "add", &two, "index", "2", "type", "veth", "peer", "name", &three, "index",
        "3",
    ]);
    ns.run(&["ip", "link", "set", &two, "up"]);
    ns
}

/// Holds the lock that lets one heavy lab (two appliances, a flood) run at a time in this
/// test binary, whose tests run in parallel on a machine of two cores: keep the guard for
/// the test's length.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a lab of several appliances behind BIRD with sync needs on this machine (the
/// backends' python3, BIRD, and nftables for the client's per-appliance counters): a test
/// fails naming what is missing.
pub fn require_sync_lab() {
    crate::netns::require_program("python3", "python3");
    crate::netns::require_program("bird", "bird2");
    crate::netns::require_program("birdc", "bird2");
    crate::netns::require_program("nft", "nftables");
}

/// Builds the lab `options` describe; fails the test unless it runs as root, or when the lab
/// cannot be built.
pub fn build(options: LabOptions) -> Lab {
    crate::netns::require_root();
    Lab::build(options).unwrap_or_else(|e| panic!("lab: {e}"))
}

impl Lab {
    /// Starts the first appliance with `sluice` ([`Lab::start_appliance`]) and waits up to
    /// 20 s until each of `vips` answers `/whoami` from the client; fails the test with the
    /// appliance's log when one never does. Returns the log's path.
    pub fn start_serving(&mut self, sluice: &Path, vips: &[SocketAddr]) -> PathBuf {
        let log = self
            .start_appliance(sluice)
            .unwrap_or_else(|e| panic!("start the appliance: {e}"));
        for vip in vips {
            let ready = self
                .wait_vip(*vip, SERVING_WAIT)
                .unwrap_or_else(|e| panic!("client: {e}"));
            assert!(
                ready,
                "the VIP {vip} never answered; appliance log:\n{}",
                file_text(&log)
            );
        }
        log
    }

    /// Starts every appliance, waits up to 30 s until the router has a route to every VIP
    /// through every appliance serving it ([`crate::wait_for_routes`]) and up to 20 s more
    /// until each appliance sees its health-checked backends up; fails the test with
    /// [`Lab::bgp_view`] otherwise. Returns how long the routes took from the start.
    pub fn start_routed(&mut self, sluice: &Path) -> Duration {
        let t0 = std::time::Instant::now();
        self.spawn_appliances(sluice)
            .unwrap_or_else(|e| panic!("start the appliances: {e}"));
        if crate::wait_for_routes(self, ROUTES_WAIT).is_none() {
            panic!(
                "the router did not learn every VIP within {ROUTES_WAIT:?}\n{}",
                self.bgp_view()
            );
        }
        let routed = t0.elapsed();
        for k in 0..self.appliance_count() {
            if self.wait_healthy(k, SERVING_WAIT).is_none() {
                panic!(
                    "lb{} did not see every backend up within {SERVING_WAIT:?}\n{}",
                    k + 1,
                    self.bgp_view()
                );
            }
        }
        routed
    }

    /// What the router's BIRD says of its sessions and routes, and the last 30 lines of
    /// every appliance's log: for failure messages.
    pub fn bgp_view(&self) -> String {
        let birdc = |args: &[&str]| self.birdc(args).unwrap_or_else(|e| e.to_string());
        format!(
            "{}{}\n{}",
            birdc(&["show", "protocols", "all"]),
            birdc(&["show", "route", "all"]),
            self.logs_tail(30)
        )
    }

    /// The first appliance's lab config with its metrics on 127.0.0.1:9300 and the API on
    /// TCP 127.0.0.1:9400 too (on its namespace's loopback), the latter asking for `token`,
    /// written to a file only root may read (the appliance refuses any other), and the
    /// `[api]` keys `extra` (TLS files, or `plain_tcp = true`); returns the config and the
    /// token file.
    pub fn config_with_listeners(&self, token: &str, extra: &str) -> (String, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let file = self.dir.join("token");
        std::fs::write(&file, format!("{token}\n")).expect("token file");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
            .expect("chmod the token file");
        let cfg = self.config(&self.api_socket_at(0)).replace(
            "metrics = \"\"\n",
            &format!(
                "metrics = \"127.0.0.1:9300\"\nlisten = \"127.0.0.1:9400\"\ntoken_file = \"{}\"\n{extra}",
                file.display()
            ),
        );
        assert!(
            cfg.contains("listen = "),
            "the lab config has no metrics key:\n{cfg}"
        );
        (cfg, file)
    }

    /// What appliance `k` has logged so far (empty before it starts).
    pub fn log_text(&self, k: usize) -> String {
        file_text(&self.log_path_at(k))
    }

    /// The last `n` lines of appliance `k`'s log.
    pub fn log_tail(&self, k: usize, n: usize) -> String {
        tail(&self.log_text(k), n)
    }

    /// The last `n` lines of every appliance's log, each under `--- lbK log (last lines) ---`.
    pub fn logs_tail(&self, n: usize) -> String {
        (0..self.appliance_count())
            .map(|k| {
                format!(
                    "--- lb{} log (last lines) ---\n{}",
                    k + 1,
                    self.log_tail(k, n)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A client of appliance `k`'s API that gives up on a call after 5 s.
    pub fn api_at(&self, k: usize) -> Api {
        Api::unix(&self.api_socket_at(k)).with_timeout(API_TIMEOUT)
    }
}
