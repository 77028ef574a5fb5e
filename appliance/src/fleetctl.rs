//! `sluice fleet push FILE` and `sluice fleet status`: an operator's hands on the fleet's
//! etcd keys, from any machine with a member's file (its `[fleet]` says where etcd is).
//! A push is validated first, merged with that member's file exactly as every member will
//! merge it, and written only when valid; `--wait` then follows the two-phase activation
//! until every live member runs the pushed revision or one refuses it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ::fleet::client::{self, Settings, TlsFiles};
use ::fleet::{Keys, View, quorum};

use crate::config::{self, Config, LoadError};
use crate::control::fleet::status::{self, Parts};

/// Why a fleet command failed.
#[derive(Debug, thiserror::Error)]
pub enum FleetCtlError {
    #[error("{0}")]
    Config(#[from] LoadError),
    /// The pushed file does not validate merged with the member file: named once, with
    /// every error.
    #[error("{}: not pushed: {}", file.display(), pushed_errors(member, source))]
    Pushed {
        file: PathBuf,
        member: PathBuf,
        source: LoadError,
    },
    #[error("{0}: no [fleet] section: the file must say where the fleet's etcd is")]
    NotAFleet(PathBuf),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Etcd(#[from] client::ClientError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("revision {revision} refused: {by}")]
    Refused { revision: u64, by: String },
    #[error("revision {revision} not running on every live member after {waited:?}")]
    Timeout { revision: u64, waited: Duration },
}

/// The member file's `[fleet]` as client settings (member name: `sluice-fleet`).
fn settings(c: &Config, path: &Path) -> Result<Settings, FleetCtlError> {
    let f = c
        .fleet
        .as_ref()
        .ok_or_else(|| FleetCtlError::NotAFleet(path.to_path_buf()))?;
    let user = match (&f.user, &f.password_file) {
        (Some(u), Some(p)) => {
            let pw = std::fs::read_to_string(p).map_err(|source| FleetCtlError::Read {
                path: p.clone(),
                source,
            })?;
            Some((u.clone(), pw.trim_end().to_string()))
        }
        _ => None,
    };
    Ok(Settings {
        endpoints: f.endpoints.clone(),
        user,
        tls: f.tls.as_ref().map(|t| TlsFiles {
            ca: t.ca.clone(),
            cert: t.cert.clone(),
            key: t.key.clone(),
        }),
        keys: Keys::new(&f.prefix, &f.name),
        member: "sluice-fleet".into(),
        lease_ttl: f.lease_ttl,
        holder: fleet::Holder::default(),
    })
}

/// A pushed file's errors, without the merged file's path (the pushed file's is named
/// before them), each on its own line.
fn pushed_errors(member: &Path, e: &LoadError) -> String {
    match e {
        LoadError::Invalid { errors, .. } => format!(
            "{} error{} (merged with the member file {}):\n{}",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" },
            member.display(),
            errors
                .iter()
                .map(|x| format!("  {x}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
        LoadError::Syntax { message, .. } => format!("not valid TOML: {message}"),
        e => e.to_string(),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, FleetCtlError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(FleetCtlError::Runtime)
}

/// Validates `file` merged with the member file `config_path`, then writes it as the
/// fleet's configuration; returns the new revision.
pub fn push(config_path: &Path, file: &Path) -> Result<u64, FleetCtlError> {
    let local = config::load(config_path)?;
    let s = settings(&local, config_path)?;
    let text = std::fs::read_to_string(file).map_err(|source| FleetCtlError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    // Revision 0 in errors: the revision is only known once written. The member file
    // alone validated above, so what fails now is the pushed file's.
    config::load_fleet(config_path, &text, 0).map_err(|source| FleetCtlError::Pushed {
        file: file.to_path_buf(),
        member: config_path.to_path_buf(),
        source,
    })?;
    // etcd refuses writes for a second or two while it elects a leader: retry then, on
    // another endpoint (a write that landed twice only makes one more identical revision).
    runtime()?.block_on(async {
        let mut last = None;
        for attempt in 0..4u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
            }
            let r = match client::connect(&s).await {
                Ok(mut c) => client::push(&mut c, &s.keys, &text).await,
                Err(e) => Err(e),
            };
            match r {
                Ok(rev) => return Ok(rev),
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or(
            FleetCtlError::Etcd(client::ClientError::Stopped),
            FleetCtlError::Etcd,
        ))
    })
}

/// Writes a new epoch ([`fleet::history`]); returns it and the fleet as etcd holds it.
pub fn rebase(config_path: &Path) -> Result<(fleet::Epoch, View), FleetCtlError> {
    let local = config::load(config_path)?;
    let s = settings(&local, config_path)?;
    let mut raw = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut raw));
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    // Without randomness the time alone still differs from every epoch before.
    let id = match random {
        Ok(()) => raw.iter().map(|b| format!("{b:02x}")).collect(),
        Err(_) => format!("{at_ms:016x}"),
    };
    runtime()?
        .block_on(async {
            let mut c = client::connect(&s).await?;
            let epoch = client::rebase(&mut c, &s.keys, id, at_ms).await?;
            Ok((epoch, client::read(&mut c, &s.keys).await?))
        })
        .map_err(FleetCtlError::Etcd)
}

/// The fleet as etcd holds it now.
pub fn read(config_path: &Path) -> Result<(Config, View), FleetCtlError> {
    let local = config::load(config_path)?;
    let s = settings(&local, config_path)?;
    let view = runtime()?.block_on(async {
        let mut c = client::connect(&s).await?;
        client::read(&mut c, &s.keys).await
    })?;
    Ok((local, view))
}

/// The fleet document for `view` (as `GET /v1/fleet` gives it, seen from etcd), for the
/// member whose file this is: its running revision and table digest as it reported them.
pub fn document(local: &Config, view: &View) -> api::FleetStatus {
    let f = local.fleet.as_ref();
    let verdicts = quorum::decide(
        &view.live_health(),
        f.and_then(|f| f.quorum).map(|q| q as usize),
    );
    let me = local.appliance.name.as_str();
    let mine = view.members.get(me);
    let refused = status::refusal(view).map(|r| (r.revision, r.by));
    status::status(
        Parts {
            name: f.map_or("", |f| f.name.as_str()),
            view,
            connected: true,
            stale_for: None,
            last_error: None,
            running: mine.map_or(0, |m| m.running),
            verdicts: &verdicts,
            refused: refused.as_ref(),
            from_disk: false,
            last_good_errors: 0,
        },
        me,
        true,
        mine.map_or("", |m| m.fingerprint.as_str()),
    )
}

/// Waits until every live member runs `revision` (or a member refuses it).
pub fn wait(config_path: &Path, revision: u64, timeout: Duration) -> Result<View, FleetCtlError> {
    let start = Instant::now();
    loop {
        let (_, v) = read(config_path)?;
        let refused: Vec<String> = v
            .members
            .iter()
            .filter(|(_, m)| m.prepared == revision && m.readiness == ::fleet::Readiness::Refused)
            .map(|(n, m)| format!("{n}: {}", m.error.clone().unwrap_or_default()))
            .collect();
        if !refused.is_empty() {
            return Err(FleetCtlError::Refused {
                revision,
                by: refused.join("; "),
            });
        }
        if !v.members.is_empty() && v.members.values().all(|m| m.running >= revision) {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(FleetCtlError::Timeout {
                revision,
                waited: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The operator's table of the fleet document.
pub fn format(s: &api::FleetStatus) -> String {
    let mut out = format!(
        "fleet {}: config revision {}, activated {}",
        s.fleet, s.config_revision, s.activated_revision
    );
    if let Some(ms) = s.activation_spread_ms {
        out.push_str(&format!(", activation spread {ms} ms"));
    }
    out.push('\n');
    if let Some(r) = &s.refused {
        for (m, e) in &r.by {
            out.push_str(&format!("revision {} refused by {m}: {e}\n", r.revision));
        }
        if s.activated_revision >= r.revision {
            out.push_str(&format!(
                "revision {} is activated on the others; the members that refused it keep \
                 their running revision\n",
                r.revision
            ));
        }
    }
    for (key, why) in &s.ignored_keys {
        out.push_str(&format!("ignored {key}: {why}\n"));
    }
    out.push_str(&format!(
        "{:<16} {:>9} {:<9} {:>8} {:>9}  {}\n",
        "member", "prepared", "readiness", "running", "sync lag", "tables"
    ));
    for m in &s.members {
        let lag = m.sync_lag_ms.map_or("-".into(), |l| format!("{l} ms"));
        let tables = if m.table_fingerprint.is_empty() {
            "-"
        } else {
            &m.table_fingerprint
        };
        out.push_str(&format!(
            "{:<16} {:>9} {:<9} {:>8} {:>9}  {tables}\n",
            m.name, m.prepared, m.readiness, m.running, lag
        ));
    }
    if s.disagreements.is_empty() {
        out.push_str("health: every live member agrees\n");
    }
    for d in &s.disagreements {
        out.push_str(&format!(
            "disagreement {}: fleet says {} ({} up, {} down); {} disagree{}\n",
            d.backend,
            if d.fleet_up { "up" } else { "down" },
            d.up_votes,
            d.down_votes,
            d.members.join(", "),
            if d.members.len() == 1 { "s" } else { "" }
        ));
    }
    out
}
