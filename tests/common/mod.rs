//! Shared helpers for integration tests: network namespaces, veth pairs and bridges that a test
//! creates with unique names and removes on drop, even when the test fails.
#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Fails the test with a clear message unless it runs as root.
pub fn require_root() {
    let out = Command::new("id").arg("-u").output().expect("run id -u");
    let uid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(
        uid, "0",
        "this test needs root (network namespaces); run it as root, as .ci/run does"
    );
}

/// Fails the test unless `program` is on PATH, naming the package that provides it.
pub fn require_program(program: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "{program} is missing: install the Debian package {package} (scripts/setup.sh does)"
    );
}

/// A short name unique to this process and call, usable for namespaces and interfaces
/// (at most 15 bytes): `tag` (up to 5 bytes) + pid + counter.
pub fn unique(tag: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tag: String = tag.chars().take(5).collect();
    format!("{tag}{}{n}", std::process::id() % 100_000)
}

/// Runs a command, panicking with its stderr when it fails.
pub fn run(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace deleted (with every process in it killed) on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Creates a namespace named from `tag` and brings its loopback up.
    pub fn new(tag: &str) -> Netns {
        let name = unique(tag);
        run(&["ip", "netns", "add", &name]);
        let ns = Netns { name };
        ns.run(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// A command that runs inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs a command inside the namespace, panicking when it fails.
    pub fn run(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    /// Runs a command inside the namespace and returns its output whatever its status.
    pub fn output(&self, args: &[&str]) -> Output {
        self.command(args[0])
            .args(&args[1..])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {args:?} in {}: {e}", self.name))
    }

    /// Starts a long-running process inside the namespace (killed when the namespace drops).
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {args:?} in {}: {e}", self.name))
    }

    /// Runs a shell snippet inside the namespace, panicking when it fails.
    pub fn sh(&self, script: &str) -> Output {
        self.run(&["sh", "-c", script])
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

/// Connects two namespaces with a veth pair, names each end, and sets both up with
/// transmit checksum offload off (locally generated traffic on veth otherwise carries
/// partial checksums that AF_XDP and tunnels see unfinished).
pub fn veth(a: &Netns, a_if: &str, b: &Netns, b_if: &str) {
    veth_mq(a, a_if, b, b_if, 1);
}

/// Creates a bridge inside `ns` and brings it up.
pub fn bridge(ns: &Netns, name: &str) {
    ns.run(&["ip", "link", "add", name, "type", "bridge"]);
    ns.run(&["ip", "link", "set", name, "up"]);
}

/// Like [`veth`], with `queues` rx and tx queues on both ends (for multi-queue datapaths).
pub fn veth_mq(a: &Netns, a_if: &str, b: &Netns, b_if: &str, queues: u32) {
    let tmp_a = unique("va");
    let tmp_b = unique("vb");
    let q = queues.to_string();
    run(&[
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
    ]);
    run(&["ip", "link", "set", &tmp_a, "netns", &a.name]);
    run(&["ip", "link", "set", &tmp_b, "netns", &b.name]);
    a.run(&["ip", "link", "set", &tmp_a, "name", a_if]);
    b.run(&["ip", "link", "set", &tmp_b, "name", b_if]);
    for (ns, ifname) in [(a, a_if), (b, b_if)] {
        ns.run(&["ip", "link", "set", ifname, "up"]);
        let _ = ns.output(&["ethtool", "-K", ifname, "tx", "off"]);
    }
}
