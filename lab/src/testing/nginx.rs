//! nginx (Debian's) as a backend a test configures: its pid, logs and temporary files in a
//! directory of the test's, killed on drop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Daemon, file_text, poll};
use crate::netns::Netns;

/// An nginx in a namespace.
pub struct Nginx {
    _daemon: Daemon,
    dir: PathBuf,
}

impl Nginx {
    /// Writes `dir`/nginx.conf (one worker of `worker_connections`, running as root, the
    /// error log and temporary files in `dir`) with `http` as the inside of its `http`
    /// block (log formats, servers), starts nginx in `ns` and waits (10 s) until it listens
    /// on TCP `port` over IPv4 and IPv6. Fails the test with its error log otherwise.
    pub fn start(ns: &Netns, dir: &Path, worker_connections: u32, http: &str, port: u16) -> Nginx {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let d = dir.display();
        let conf = format!(
            "user root;\nworker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log info;\nevents {{ worker_connections {worker_connections}; }}\n\
             http {{\n\
               client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
             {http}}}\n"
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).expect("nginx.conf");
        let log = std::fs::File::create(dir.join("stderr.log")).ok();
        let (p, c, e) = (
            d.to_string(),
            path.display().to_string(),
            format!("{d}/error.log"),
        );
        let child = ns
            .try_spawn(&["nginx", "-p", &p, "-c", &c, "-e", &e], log)
            .unwrap_or_else(|e| panic!("nginx in {}: {e}", ns.name));
        let nginx = Nginx {
            _daemon: Daemon(child),
            dir: dir.to_path_buf(),
        };
        let listening = poll(Duration::from_secs(10), Duration::from_millis(100), || {
            let ss = ns.sh(&format!("ss -ltnH 'sport = :{port}'"));
            let text = String::from_utf8_lossy(&ss.stdout).into_owned();
            text.contains(&format!("0.0.0.0:{port}")) && text.contains(&format!("[::]:{port}"))
        });
        assert!(
            listening.is_some(),
            "nginx in {} did not listen on port {port}:\n{}",
            ns.name,
            nginx.file("error.log")
        );
        nginx
    }

    /// Its directory (config, logs, temporary files).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The text of `name` in its directory (a log), empty when there is none.
    pub fn file(&self, name: &str) -> String {
        file_text(&self.dir.join(name))
    }
}
