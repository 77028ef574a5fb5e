//! A real etcd v3 cluster for the fleet tests: three members (`etcd` from Debian's
//! etcd-server) on one address of a namespace the test created, with short heartbeats so a
//! killed leader is replaced within about a second. Members can be killed one by one (the
//! leader first), all stopped, and started again on their data, as an operator's cluster
//! would be; everything is killed on drop.

use std::fs::File;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::netns::{LabError, Netns, Result, require};

/// Members in a test cluster.
pub const MEMBERS: usize = 3;

/// A three-member etcd cluster inside one namespace.
pub struct EtcdCluster {
    ns_name: String,
    ip: IpAddr,
    base_port: u16,
    dir: PathBuf,
    children: Vec<Option<Child>>,
    /// `user:password` for etcdctl once authentication is on.
    root: Option<String>,
    tls: Option<EtcdTls>,
}

/// PEM files for a cluster that serves its clients over TLS (peers stay plain: they talk
/// inside the test's namespace).
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// The CA that signed `cert`, for etcdctl.
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl EtcdCluster {
    /// Starts the members on `ip` in `ns` (client port `base_port + 10 * i`, peer port one
    /// above), data and logs under `dir`, and waits until the cluster answers.
    pub fn start(ns: &Netns, ip: IpAddr, base_port: u16, dir: &Path) -> Result<EtcdCluster> {
        EtcdCluster::start_with(ns, ip, base_port, dir, None)
    }

    /// [`EtcdCluster::start`], serving clients over TLS with `tls` when given.
    pub fn start_with(
        ns: &Netns,
        ip: IpAddr,
        base_port: u16,
        dir: &Path,
        tls: Option<EtcdTls>,
    ) -> Result<EtcdCluster> {
        require("etcd", "etcd-server")?;
        require("etcdctl", "etcd-client")?;
        let mut c = EtcdCluster {
            ns_name: ns.name.clone(),
            ip,
            base_port,
            dir: dir.to_path_buf(),
            children: (0..MEMBERS).map(|_| None).collect(),
            root: None,
            tls,
        };
        for i in 0..MEMBERS {
            c.start_member(ns, i)?;
        }
        c.wait_ready(ns, Duration::from_secs(30))?;
        Ok(c)
    }

    fn url(&self, port: u16) -> String {
        match self.ip {
            IpAddr::V4(a) => format!("http://{a}:{port}"),
            IpAddr::V6(a) => format!("http://[{a}]:{port}"),
        }
    }

    /// A client URL: `https` when the cluster serves TLS.
    fn client_url(&self, port: u16) -> String {
        let u = self.url(port);
        match self.tls {
            Some(_) => u.replacen("http://", "https://", 1),
            None => u,
        }
    }

    fn client_port(&self, i: usize) -> u16 {
        self.base_port + 10 * i as u16
    }

    /// The members' client endpoints (`http://ip:port`).
    pub fn endpoints(&self) -> Vec<String> {
        (0..MEMBERS)
            .map(|i| self.client_url(self.client_port(i)))
            .collect()
    }

    /// The client ports, for filters that cut a member off from etcd.
    pub fn client_ports(&self) -> Vec<u16> {
        (0..MEMBERS).map(|i| self.client_port(i)).collect()
    }

    /// Starts member `i` (again, on its data directory when it has one).
    pub fn start_member(&mut self, ns: &Netns, i: usize) -> Result<()> {
        let cluster: Vec<String> = (0..MEMBERS)
            .map(|j| format!("e{j}={}", self.url(self.client_port(j) + 1)))
            .collect();
        let peer = self.url(self.client_port(i) + 1);
        let client = self.client_url(self.client_port(i));
        let data = self.dir.join(format!("e{i}"));
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("e{i}.log")))
            .map_err(|e| LabError {
                command: "etcd log".into(),
                detail: e.to_string(),
            })?;
        let name = format!("e{i}");
        let data_s = data.display().to_string();
        let cluster_s = cluster.join(",");
        let args = [
            "etcd",
            "--name",
            &name,
            "--data-dir",
            &data_s,
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster",
            &cluster_s,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            &self.ns_name,
            "--heartbeat-interval",
            "100",
            "--election-timeout",
            "1000",
        ];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        if let Some(t) = &self.tls {
            for (flag, p) in [("--cert-file", &t.cert), ("--key-file", &t.key)] {
                args.extend([flag.to_string(), p.display().to_string()]);
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.children[i] = Some(ns.try_spawn(&args, Some(log))?);
        Ok(())
    }

    /// Starts every member that is not running.
    pub fn start_all(&mut self, ns: &Netns) -> Result<()> {
        for i in 0..MEMBERS {
            if self.children[i].is_none() {
                self.start_member(ns, i)?;
            }
        }
        Ok(())
    }

    /// Kills member `i` (SIGKILL: a crash, not a clean stop).
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills every member.
    pub fn stop_all(&mut self) {
        for i in 0..MEMBERS {
            self.kill_member(i);
        }
    }

    /// The member that leads now, from `etcdctl endpoint status`.
    pub fn leader(&self, ns: &Netns) -> Option<usize> {
        let eps = self.endpoints().join(",");
        // A dead member makes etcdctl fail; the live ones still print their line.
        // No user: etcd answers status without authentication, and logging in first would
        // wait on a dead member's endpoint; a dead member's status gives up after a second.
        let mut cmd = ns.command("etcdctl");
        cmd.args([
            "--endpoints",
            &eps,
            "--dial-timeout",
            "1s",
            "--command-timeout",
            "1s",
        ]);
        if let Some(t) = &self.tls {
            cmd.arg("--cacert").arg(&t.ca);
        }
        let out = cmd.args(["endpoint", "status"]).output().ok()?;
        // "http://ip:port, id, version, db size, is leader, is learner, term, ..."
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let f: Vec<&str> = l.split(", ").collect();
            let first = *f.first()?;
            let i = self.endpoints().iter().position(|e| e == first)?;
            (f.get(4) == Some(&"true")).then_some(i)
        })
    }

    /// `etcdctl` with the cluster's endpoints (and the root user once authentication is
    /// on) and `args`, in `ns`.
    pub fn ctl(&self, ns: &Netns, args: &[&str]) -> Result<std::process::Output> {
        self.ctl_at(ns, &self.endpoints().join(","), args)
    }

    /// [`EtcdCluster::ctl`] with the endpoints `eps` (comma-separated).
    fn ctl_at(&self, ns: &Netns, eps: &str, args: &[&str]) -> Result<std::process::Output> {
        let ca = self.tls.as_ref().map(|t| t.ca.display().to_string());
        let mut all = vec!["etcdctl", "--endpoints", eps, "--dial-timeout", "2s"];
        if let Some(r) = &self.root {
            all.extend(["--user", r.as_str()]);
        }
        if let Some(ca) = &ca {
            all.extend(["--cacert", ca.as_str()]);
        }
        all.extend_from_slice(args);
        ns.try_run(&all)
    }

    /// Saves a snapshot of the cluster's keys to `path` (from member 0, which must run),
    /// as an operator's backup would.
    pub fn snapshot(&self, ns: &Netns, path: &Path) -> Result<()> {
        let ep = self.client_url(self.client_port(0));
        let p = path.display().to_string();
        self.ctl_at(ns, &ep, &["snapshot", "save", &p]).map(|_| ())
    }

    /// Restores every member from the snapshot at `path`, as an operator restores a lost
    /// cluster: the members are stopped, their data replaced by the snapshot's (a new
    /// cluster token: etcd gives the restored cluster a new ID), and started again. The
    /// keys, their revisions and the users are the snapshot's.
    pub fn restore(&mut self, ns: &Netns, path: &Path) -> Result<()> {
        self.stop_all();
        let cluster: Vec<String> = (0..MEMBERS)
            .map(|j| format!("e{j}={}", self.url(self.client_port(j) + 1)))
            .collect();
        let cluster = cluster.join(",");
        let token = format!("{}-restored", self.ns_name);
        for i in 0..MEMBERS {
            let data = self.dir.join(format!("e{i}"));
            let _ = std::fs::remove_dir_all(&data);
            let (name, peer) = (format!("e{i}"), self.url(self.client_port(i) + 1));
            let (p, d) = (path.display().to_string(), data.display().to_string());
            ns.try_run(&[
                "etcdctl",
                "snapshot",
                "restore",
                &p,
                "--data-dir",
                &d,
                "--name",
                &name,
                "--initial-cluster",
                &cluster,
                "--initial-cluster-token",
                &token,
                "--initial-advertise-peer-urls",
                &peer,
            ])?;
        }
        self.start_all(ns)?;
        self.wait_ready(ns, Duration::from_secs(30))
    }

    /// Turns etcd's authentication on: a root user, and user `user` (password
    /// `password`) that may read and write the keys under `prefix` only.
    pub fn enable_auth(
        &mut self,
        ns: &Netns,
        user: &str,
        password: &str,
        prefix: &str,
    ) -> Result<()> {
        let root = format!("root:{}-root", self.ns_name);
        let user_pw = format!("{user}:{password}");
        for args in [
            vec!["user", "add", root.as_str()],
            vec!["user", "grant-role", "root", "root"],
            vec!["user", "add", user_pw.as_str()],
            vec!["role", "add", user],
            vec![
                "role",
                "grant-permission",
                user,
                "--prefix=true",
                "readwrite",
                prefix,
            ],
            vec!["user", "grant-role", user, user],
            vec!["auth", "enable"],
        ] {
            self.ctl(ns, &args)?;
        }
        self.root = Some(root);
        Ok(())
    }

    /// Waits until the cluster serves a linearizable read.
    pub fn wait_ready(&self, ns: &Netns, timeout: Duration) -> Result<()> {
        let eps = self.endpoints().join(",");
        let until = Instant::now() + timeout;
        loop {
            let r = self.ctl(ns, &["get", "/sluice-ready-probe"]);
            match r {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > until => {
                    return Err(LabError {
                        command: format!("etcd cluster at {eps}"),
                        detail: format!("not ready after {timeout:?}: {}", e.detail),
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}
