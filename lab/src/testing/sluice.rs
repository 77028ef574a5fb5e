//! The `sluice` binary under test, run as an operator runs it: `sluice check`, `sluice ctl`
//! (plain, or `--json` read as a document), a shell wrapper that starts it under other
//! conditions. The lab knows the binary only by its path; an integration test of the
//! appliance names it with [`crate::sluice!`].

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::netns::Netns;

/// The `sluice` binary the appliance's integration tests run: cargo builds it for them and
/// says where in `CARGO_BIN_EXE_sluice`, which only they see, so this expands to
/// [`Sluice::at`] that path in the test's own crate.
#[macro_export]
macro_rules! sluice {
    () => {
        $crate::testing::Sluice::at(::std::env!("CARGO_BIN_EXE_sluice"))
    };
}

/// A `sluice` binary, run here or inside a namespace ([`Sluice::inside`]).
#[derive(Debug, Clone)]
pub struct Sluice {
    path: PathBuf,
    netns: Option<String>,
}

/// What a finished command said: its exit code (-1 for a signal), stdout and stderr.
#[derive(Debug, Clone)]
pub struct Said {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Said {
    fn of(out: &Output) -> Said {
        Said {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Whether it exited 0.
    pub fn ok(&self) -> bool {
        self.code == 0
    }
}

impl Sluice {
    /// The binary at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Sluice {
        Sluice {
            path: path.into(),
            netns: None,
        }
    }

    /// The same binary, run inside `ns` (`ip netns exec`).
    pub fn inside(&self, ns: &Netns) -> Sluice {
        Sluice {
            path: self.path.clone(),
            netns: Some(ns.name.clone()),
        }
    }

    /// The binary's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A command that runs the binary (inside its namespace, if it has one).
    pub fn command(&self) -> Command {
        match &self.netns {
            None => Command::new(&self.path),
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.path);
                c
            }
        }
    }

    /// `sluice ARGS` to its end, without `RUST_BACKTRACE` (a panic shows as an operator
    /// would see it).
    pub fn run(&self, args: &[&str]) -> Said {
        let out = self
            .command()
            .args(args)
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap_or_else(|e| panic!("run {} {args:?}: {e}", self.path.display()));
        Said::of(&out)
    }

    /// `sluice ctl --socket SOCKET ARGS`.
    pub fn ctl(&self, socket: &Path, args: &[&str]) -> Said {
        let mut all = vec!["ctl", "--socket"];
        let socket = socket.to_string_lossy();
        all.push(&socket);
        all.extend_from_slice(args);
        self.run(&all)
    }

    /// [`Sluice::ctl`]'s stdout, failing the test unless it exited 0.
    pub fn ctl_ok(&self, socket: &Path, args: &[&str]) -> String {
        let said = self.ctl(socket, args);
        assert!(
            said.ok(),
            "sluice ctl {args:?}: {}{}",
            said.stdout,
            said.stderr
        );
        said.stdout
    }

    /// `sluice ctl --socket SOCKET --json ARGS` read as `T`; what went wrong otherwise (on a
    /// loaded machine a call may time out, and the caller may ask again).
    pub fn try_ctl_json<T: serde::de::DeserializeOwned>(
        &self,
        socket: &Path,
        args: &[&str],
    ) -> Result<T, String> {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let said = self.ctl(socket, &all);
        if !said.ok() {
            return Err(format!("sluice ctl --json {args:?}: {}", said.stderr));
        }
        serde_json::from_str(&said.stdout)
            .map_err(|e| format!("sluice ctl --json {args:?}: {e}: {}", said.stdout))
    }

    /// [`Sluice::try_ctl_json`], failing the test when it fails.
    pub fn ctl_json<T: serde::de::DeserializeOwned>(&self, socket: &Path, args: &[&str]) -> T {
        self.try_ctl_json(socket, args)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Writes `dir`/`name`, a shell script that runs `prelude` and then execs this binary
    /// with its arguments (a lower descriptor limit, an environment variable), and returns
    /// its path.
    pub fn wrapper(&self, dir: &Path, name: &str, prelude: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        let script = format!(
            "#!/bin/sh\n{prelude}\nexec {} \"$@\"\n",
            self.path.display()
        );
        std::fs::write(&p, script).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
        p
    }
}
