//! Routers a test starts next to a speaker or an appliance: BIRD 2 ([`crate::bird`]'s daemon
//! in a scratch directory of its own) and FRR (zebra, bgpd and optionally bfdd with private
//! sockets), each asked through its own CLI, and the kernel's view of a route.

use std::path::Path;
use std::time::Duration;

use super::{Daemon, TempDir, output_text, wait_until};
use crate::bird::Bird;
use crate::netns::{Netns, require_program};

/// `ip route show PREFIX` in `ns` (IPv6 when the prefix has a colon): the kernel's
/// forwarding view.
pub fn kernel_route(ns: &Netns, prefix: &str) -> String {
    let fam = if prefix.contains(':') { "-6" } else { "-4" };
    output_text(&ns.output(&["ip", fam, "route", "show", prefix]))
}

/// A BIRD 2 daemon in `ns` with the config a test gives it ([`crate::bird::Config`]), its
/// control socket and files in a scratch directory; killed on drop.
pub struct BirdRouter<'a> {
    ns: &'a Netns,
    bird: Bird,
    _dir: TempDir,
}

impl<'a> BirdRouter<'a> {
    /// Starts BIRD with `config` and waits until it answers on its control socket.
    pub fn start(ns: &'a Netns, config: &str) -> BirdRouter<'a> {
        require_program("bird", "bird2");
        require_program("birdc", "bird2");
        let dir = TempDir::new("bird");
        let bird = Bird::start(ns, dir.dir(), config).unwrap_or_else(|e| panic!("{e}"));
        BirdRouter {
            ns,
            bird,
            _dir: dir,
        }
    }

    /// The control socket (for `birdc -s` from another thread).
    pub fn sock(&self) -> String {
        self.bird.socket.to_string_lossy().into_owned()
    }

    /// SIGSTOP (`stop`) or SIGCONT the daemon: a router that hangs, and resumes.
    pub fn freeze(&self, stop: bool) {
        self.bird.freeze(stop).unwrap_or_else(|e| panic!("{e}"));
    }

    /// What `birdc ARGS` printed (its errors too).
    pub fn cmd(&self, args: &[&str]) -> String {
        let sock = self.sock();
        let mut full = vec!["birdc", "-s", &sock];
        full.extend_from_slice(args);
        output_text(&self.ns.output(&full))
    }

    /// BIRD's word for the session state of `proto` ("Established", "Active", "Connect").
    pub fn bgp_state(&self, proto: &str) -> String {
        let out = self.cmd(&["show", "protocols", "all", proto]);
        out.lines()
            .find_map(|l| l.trim().strip_prefix("BGP state:"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| format!("no BGP state in:\n{out}"))
    }

    /// Every protocol and route, for failure messages.
    pub fn view(&self) -> String {
        format!(
            "{}\n{}",
            self.cmd(&["show", "protocols", "all"]),
            self.cmd(&["show", "route", "all"])
        )
    }
}

/// FRR in `ns`: zebra, bgpd and (with a config for it) bfdd, with private sockets in a
/// scratch directory; killed on drop.
pub struct Frr<'a> {
    ns: &'a Netns,
    vty: String,
    _daemons: Vec<Daemon>,
    _dir: TempDir,
}

impl<'a> Frr<'a> {
    /// Starts the daemons; `bgpd_conf` and `bfdd_conf` are whole config files (no bfdd
    /// without the latter). Waits for zebra's socket before starting the others.
    pub fn start(ns: &'a Netns, bgpd_conf: &str, bfdd_conf: Option<&str>) -> Frr<'a> {
        use std::os::unix::fs::PermissionsExt;
        require_program("vtysh", "frr");
        let mut names = vec!["zebra", "bgpd"];
        if bfdd_conf.is_some() {
            names.insert(1, "bfdd");
        }
        for d in &names {
            let p = format!("/usr/lib/frr/{d}");
            assert!(
                Path::new(&p).exists(),
                "{p} is missing: install the Debian package frr"
            );
        }
        let dir = TempDir::new("frr");
        // The daemons drop privileges to the frr user, which must create its sockets here.
        std::fs::set_permissions(dir.dir(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod frr dir");
        let (vty, zsock) = (dir.path(""), dir.path("zserv.api"));
        let write = |name: &str, text: &str| {
            std::fs::write(dir.path(name), text).unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        write("zebra.conf", "hostname r\n");
        write("bgpd.conf", bgpd_conf);
        if let Some(conf) = bfdd_conf {
            write("bfdd.conf", conf);
        }
        let mut daemons = Vec::new();
        for d in names {
            let mut args = vec![format!("/usr/lib/frr/{d}"), "-f".into()];
            args.push(dir.path(&format!("{d}.conf")));
            args.extend(["-i".into(), dir.path(&format!("{d}.pid")), "-z".into()]);
            args.extend([zsock.clone(), "--vty_socket".into(), vty.clone()]);
            args.extend(["-P".into(), "0".into()]);
            if d == "bfdd" {
                args.extend(["--bfdctl".into(), dir.path("bfdd.sock")]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            daemons.push(Daemon(ns.spawn(&args)));
            if d == "zebra" {
                wait_until(
                    "zebra's socket",
                    Duration::from_secs(10),
                    || Path::new(&zsock).exists(),
                    || "zebra did not start".to_string(),
                );
            }
        }
        Frr {
            ns,
            vty,
            _daemons: daemons,
            _dir: dir,
        }
    }

    /// What one vtysh command printed.
    pub fn show(&self, cmd: &str) -> String {
        output_text(
            &self
                .ns
                .output(&["vtysh", "--vty_socket", &self.vty, "-c", cmd]),
        )
    }
}
