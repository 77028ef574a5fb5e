//! Network namespaces for the lab: created with unique names, removed (with every process in
//! them) on drop, so a lab that fails half-way leaves nothing behind.

use std::fs::File;
use std::process::{Child, Command, Output, Stdio};

/// Why a lab step failed: the command and what it printed.
#[derive(Debug, thiserror::Error)]
#[error("{command}: {detail}")]
pub struct LabError {
    pub command: String,
    pub detail: String,
}

pub type Result<T> = std::result::Result<T, LabError>;

/// Runs a command and returns its output, or an error carrying its stderr.
pub fn run(args: &[&str]) -> Result<Output> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError {
            command: args.join(" "),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(LabError {
            command: args.join(" "),
            detail: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(out)
}

/// A network namespace owned by the lab.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Creates the namespace and brings its loopback up.
    pub fn create(name: &str) -> Result<Netns> {
        run(&["ip", "netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
        };
        ns.run(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Runs a command inside the namespace.
    pub fn run(&self, args: &[&str]) -> Result<Output> {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    /// Runs a shell snippet inside the namespace.
    pub fn sh(&self, script: &str) -> Result<Output> {
        self.run(&["sh", "-c", script])
    }

    /// Starts a long-running process inside the namespace, its output sent to `log`.
    pub fn spawn(&self, args: &[&str], log: Option<File>) -> Result<Child> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name])
            .args(args)
            .stdin(Stdio::null());
        match log {
            Some(f) => {
                let f2 = f.try_clone().map_err(|e| LabError {
                    command: "log file".into(),
                    detail: e.to_string(),
                })?;
                c.stdout(f).stderr(f2);
            }
            None => {
                c.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        c.spawn().map_err(|e| LabError {
            command: args.join(" "),
            detail: e.to_string(),
        })
    }

    /// Runs `f` on a new thread that has entered this namespace, so every socket it opens
    /// lives here (the lab's traffic generator uses it instead of forking a client per request).
    pub fn in_thread<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<std::thread::JoinHandle<T>> {
        let path = format!("/run/netns/{}", self.name);
        let file = File::open(&path).map_err(|e| LabError {
            command: format!("open {path}"),
            detail: e.to_string(),
        })?;
        Ok(std::thread::spawn(move || {
            if let Err(e) = nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET) {
                panic!("setns into {path}: {e}");
            }
            f()
        }))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Connects `a` and `b` with a veth pair named `a_if` / `b_if` inside them, both up, with
/// transmit checksum offload off (locally generated traffic would otherwise carry partial
/// checksums that the AF_XDP engine and tunnels forward unfinished).
pub fn veth(a: &Netns, a_if: &str, b: &Netns, b_if: &str, tmp: &str) -> Result<()> {
    let ta = format!("{tmp}a");
    let tb = format!("{tmp}b");
    run(&[
        "ip", "link", "add", &ta, "type", "veth", "peer", "name", &tb,
    ])?;
    run(&["ip", "link", "set", &ta, "netns", &a.name])?;
    run(&["ip", "link", "set", &tb, "netns", &b.name])?;
    a.run(&["ip", "link", "set", &ta, "name", a_if])?;
    b.run(&["ip", "link", "set", &tb, "name", b_if])?;
    for (ns, ifname) in [(a, a_if), (b, b_if)] {
        ns.run(&["ip", "link", "set", ifname, "up"])?;
        // Best effort: a missing ethtool only costs checksum trouble, reported by traffic.
        let _ = ns.run(&["ethtool", "-K", ifname, "tx", "off"]);
    }
    Ok(())
}

/// Whether this process runs as root (the lab needs it for namespaces and XDP).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Fails with a clear message when `program` is not installed.
pub fn require(program: &str, package: &str) -> Result<()> {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(LabError {
            command: program.into(),
            detail: format!(
                "not installed: install the Debian package {package} (scripts/setup.sh does)"
            ),
        })
    }
}
