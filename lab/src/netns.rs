//! Network namespaces, veth pairs and bridges for the lab, the bench and the integration
//! tests: created with unique names, removed (with every process in them) on drop, so a lab
//! or a test that fails half-way leaves nothing behind.
//!
//! Every operation comes twice over one implementation: a `try_` form that returns a
//! [`LabError`] naming the command and what it printed (the `sluice lab` and `sluice bench`
//! runs report it to the operator), and a short form that panics with the same message
//! (integration tests, where a failed setup step is a failed test).

use std::fs::File;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Why a lab step failed: the command and what it printed.
#[derive(Debug, thiserror::Error)]
#[error("{command}: {detail}")]
pub struct LabError {
    pub command: String,
    pub detail: String,
}

pub type Result<T> = std::result::Result<T, LabError>;

/// Runs a command and returns its output, or an error carrying its stderr.
pub fn try_run(args: &[&str]) -> Result<Output> {
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

/// Runs a command, panicking with its output when it fails (tests).
pub fn run(args: &[&str]) -> Output {
    try_run(args).unwrap_or_else(|e| panic!("{e}"))
}

/// A short name unique to this process and call, usable for namespaces and interfaces
/// (at most 15 bytes): `tag` (up to 5 bytes) + pid + counter.
pub fn unique(tag: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tag: String = tag.chars().take(5).collect();
    format!("{tag}{}{n}", std::process::id() % 100_000)
}

/// A network namespace, deleted (with every process in it killed) on drop.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Creates the namespace `name` and brings its loopback up.
    pub fn create(name: &str) -> Result<Netns> {
        try_run(&["ip", "netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
        };
        ns.try_run(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Creates a namespace named from `tag` ([`unique`]), panicking when that fails (tests).
    pub fn new(tag: &str) -> Netns {
        Netns::create(&unique(tag)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A command that runs inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs a command inside the namespace.
    pub fn try_run(&self, args: &[&str]) -> Result<Output> {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        try_run(&full)
    }

    /// Runs a command inside the namespace, panicking when it fails (tests).
    pub fn run(&self, args: &[&str]) -> Output {
        self.try_run(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs a shell snippet inside the namespace.
    pub fn try_sh(&self, script: &str) -> Result<Output> {
        self.try_run(&["sh", "-c", script])
    }

    /// Runs a shell snippet inside the namespace, panicking when it fails (tests).
    pub fn sh(&self, script: &str) -> Output {
        self.run(&["sh", "-c", script])
    }

    /// Runs a command inside the namespace and returns its output whatever its status.
    pub fn output(&self, args: &[&str]) -> Output {
        self.command(args[0])
            .args(&args[1..])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {args:?} in {}: {e}", self.name))
    }

    /// Starts a long-running process inside the namespace, its output sent to `log` (or
    /// discarded without one).
    pub fn try_spawn(&self, args: &[&str], log: Option<File>) -> Result<Child> {
        let mut c = self.command(args[0]);
        c.args(&args[1..]).stdin(Stdio::null());
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

    /// Starts a long-running process inside the namespace with the caller's stdout and
    /// stderr (killed when the namespace drops), panicking when it cannot start (tests).
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {args:?} in {}: {e}", self.name))
    }

    /// Starts `tcpdump ARGS` inside the namespace in immediate mode (every packet is handed
    /// to it at once, not when the kernel retires a ring block up to a second later) and
    /// returns once it is listening, so nothing sent after this call is missed. It ends by
    /// itself after `limit` (a capture waiting for a packet that never comes must not hang
    /// a test) or at [`stop_capture`]. Its stdout is piped (read it for text output); its
    /// stderr is drained.
    pub fn capture(&self, limit: std::time::Duration, args: &[&str]) -> Child {
        use std::io::BufRead;
        let mut cap = self
            .command("timeout")
            .arg(limit.as_secs().max(1).to_string())
            .args(["tcpdump", "--immediate-mode"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn tcpdump {args:?} in {}: {e}", self.name));
        let err = cap.stderr.take().expect("tcpdump stderr");
        let mut reader = std::io::BufReader::new(err);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        assert!(
            line.contains("listening"),
            "tcpdump {args:?} in {} did not start: {line:?}",
            self.name
        );
        // Keep draining, so its last words at exit find the pipe open.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        cap
    }

    /// Runs `f` on a thread inside this namespace ([`Netns::in_thread`]) and returns what it
    /// returns, panicking when the thread cannot start or `f` panics (tests).
    pub fn call<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let thread = self.in_thread(f).unwrap_or_else(|e| panic!("{e}"));
        thread
            .join()
            .unwrap_or_else(|_| panic!("the thread in namespace {} panicked", self.name))
    }

    /// Attribute `attr` of interface `dev` in this namespace as sysfs shows it
    /// (`/sys/class/net/DEV/ATTR`: `address`, `ifindex`, `statistics/rx_packets`), trimmed.
    pub fn try_sysfs(&self, dev: &str, attr: &str) -> Result<String> {
        let out = self.try_run(&["cat", &format!("/sys/class/net/{dev}/{attr}")])?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// [`Netns::try_sysfs`], panicking when it fails (tests).
    pub fn sysfs(&self, dev: &str, attr: &str) -> String {
        self.try_sysfs(dev, attr).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The MAC address of interface `dev` in this namespace.
    pub fn try_mac(&self, dev: &str) -> Result<[u8; 6]> {
        let text = self.try_sysfs(dev, "address")?;
        let bytes: Option<Vec<u8>> = text
            .split(':')
            .map(|h| u8::from_str_radix(h, 16).ok())
            .collect();
        bytes
            .and_then(|b| <[u8; 6]>::try_from(b).ok())
            .ok_or_else(|| LabError {
                command: format!("cat /sys/class/net/{dev}/address in {}", self.name),
                detail: format!("not a MAC address: {text:?}"),
            })
    }

    /// [`Netns::try_mac`], panicking when it fails (tests).
    pub fn mac(&self, dev: &str) -> [u8; 6] {
        self.try_mac(dev).unwrap_or_else(|e| panic!("{e}"))
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

/// Connects `a` and `b` with a veth pair named `a_if` / `b_if` inside them, each end with
/// `queues` rx and tx queues (for multi-queue datapaths), both up, with transmit checksum
/// offload off (locally generated traffic would otherwise carry partial checksums that the
/// AF_XDP engine and tunnels forward unfinished).
pub fn try_veth_mq(a: &Netns, a_if: &str, b: &Netns, b_if: &str, queues: u32) -> Result<()> {
    let tmp_a = unique("va");
    let tmp_b = unique("vb");
    let q = queues.to_string();
    try_run(&[
        "ip",
        "link",
        "add",
        &tmp_a,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
        "type",
        "veth",
        "peer",
        "name",
        &tmp_b,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
    ])?;
    try_run(&["ip", "link", "set", &tmp_a, "netns", &a.name])?;
    try_run(&["ip", "link", "set", &tmp_b, "netns", &b.name])?;
    a.try_run(&["ip", "link", "set", &tmp_a, "name", a_if])?;
    b.try_run(&["ip", "link", "set", &tmp_b, "name", b_if])?;
    for (ns, ifname) in [(a, a_if), (b, b_if)] {
        ns.try_run(&["ip", "link", "set", ifname, "up"])?;
        // Best effort: a missing ethtool only costs checksum trouble, reported by traffic.
        let _ = ns.try_run(&["ethtool", "-K", ifname, "tx", "off"]);
    }
    Ok(())
}

/// Moves the calling thread into the namespace `name` (every socket it opens from now on
/// lives there), panicking when it cannot (tests, and threads a test spawns for it).
pub fn enter(name: &str) {
    let path = format!("/run/netns/{name}");
    let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
        .unwrap_or_else(|e| panic!("setns into {path}: {e}"));
}

/// Links `a` and `b` with a veth pair (`a_if` / `b_if`) on the subnet `net`: three octets
/// of a /24 (`"10.71.1"`: `a` holds `10.71.1.1`, `b` `10.71.1.2`) or the first half of a
/// /64 (`"fd00:77::"`: `fd00:77::1` and `fd00:77::2`, usable at once: no DAD). Panics when
/// it fails (tests).
pub fn link(a: &Netns, a_if: &str, b: &Netns, b_if: &str, net: &str) {
    veth(a, a_if, b, b_if);
    for (ns, dev, host) in [(a, a_if, 1), (b, b_if, 2)] {
        if net.contains(':') {
            let addr = format!("{net}{host}/64");
            ns.run(&["ip", "-6", "addr", "add", &addr, "dev", dev, "nodad"]);
        } else {
            ns.run(&["ip", "addr", "add", &format!("{net}.{host}/24"), "dev", dev]);
        }
    }
}

/// [`try_veth_mq`] with one queue each way.
pub fn try_veth(a: &Netns, a_if: &str, b: &Netns, b_if: &str) -> Result<()> {
    try_veth_mq(a, a_if, b, b_if, 1)
}

/// [`try_veth`], panicking when it fails (tests).
pub fn veth(a: &Netns, a_if: &str, b: &Netns, b_if: &str) {
    try_veth(a, a_if, b, b_if).unwrap_or_else(|e| panic!("{e}"));
}

/// [`try_veth_mq`], panicking when it fails (tests).
pub fn veth_mq(a: &Netns, a_if: &str, b: &Netns, b_if: &str, queues: u32) {
    try_veth_mq(a, a_if, b, b_if, queues).unwrap_or_else(|e| panic!("{e}"));
}

/// Creates a bridge inside `ns` and brings it up.
pub fn try_bridge(ns: &Netns, name: &str) -> Result<()> {
    ns.try_run(&["ip", "link", "add", name, "type", "bridge"])?;
    ns.try_run(&["ip", "link", "set", name, "up"])?;
    Ok(())
}

/// [`try_bridge`], panicking when it fails (tests).
pub fn bridge(ns: &Netns, name: &str) {
    try_bridge(ns, name).unwrap_or_else(|e| panic!("{e}"));
}

/// Whether this process runs as root (namespaces and XDP need it).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Fails the test with a clear message unless it runs as root.
pub fn require_root() {
    assert!(
        is_root(),
        "this test needs root (network namespaces); run it as root, as .ci/run does"
    );
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

/// [`require`], failing the test when `program` is missing.
pub fn require_program(program: &str, package: &str) {
    require(program, package).unwrap_or_else(|e| panic!("{e}"));
}

/// Ends a capture started by [`Netns::capture`] the way tcpdump finishes cleanly (SIGTERM,
/// which `timeout` hands on; its output file is complete afterwards) and waits for it.
pub fn stop_capture(cap: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &cap.id().to_string()])
        .status();
    let _ = cap.wait();
}
