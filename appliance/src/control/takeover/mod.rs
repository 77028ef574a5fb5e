//! The hand-over between two `sluice run` processes on one appliance (`sluice run
//! --takeover`): the new process asks the running one, over a unix socket beside the API's
//! (`<api.socket>.takeover`), first for the health verdicts and table version its tables
//! are built on (the running one keeps forwarding meanwhile), then, once its own tables are
//! ready, for the connection tables: the running process stops its workers (their sockets
//! close; the XDP program stays attached and holds the engine's frames, its flow cache goes
//! on forwarding established flows), exports every worker's table and sends it. The new
//! process replaces the program in one step (the same flow-cache maps), imports the flows
//! into its workers before they see a frame, and says DONE: the old process abandons its BGP
//! session (graceful restart keeps the routers' routes until the new speaker's End-of-RIB)
//! and exits without detaching anything. FAIL, or no word within [`ANSWER_TIME`], and the old
//! process starts its workers again with the tables it exported.
//!
//! ```text
//! new -> old  "HELLO"          old -> new  bundle (version, health verdicts, no flows)
//! new -> old  "TAKE"           old -> new  bundle (version, health verdicts, every worker's flows)
//! new -> old  "DONE" | "FAIL"  old: exits (socket closes) | resumes
//! ```
//! Every message is a frame: its length (u32, little-endian), then its bytes. A bundle of a
//! format this build cannot read is refused (`bundle::BundleError`): the new process says so
//! and starts cold, never misreading state.

pub mod bundle;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

pub use bundle::{Bundle, BundleError};

pub const HELLO: &[u8] = b"HELLO";
pub const TAKE: &[u8] = b"TAKE";
pub const DONE: &[u8] = b"DONE";
pub const FAIL: &[u8] = b"FAIL";

/// The longest frame read: a bundle of several million flows.
const MAX_FRAME: usize = 1 << 31;

/// How long either side waits for the other's next message.
pub const ANSWER_TIME: Duration = Duration::from_secs(30);

/// Why a takeover did not happen.
#[derive(Debug, thiserror::Error)]
pub enum TakeoverError {
    #[error(
        "no running appliance answers on {path}: {source} (start without --takeover when none runs)"
    )]
    Connect {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the hand-over socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("the running appliance did not answer within {ANSWER_TIME:?}")]
    Timeout,
    #[error("the running appliance refused the hand-over: {0}")]
    Refused(String),
    #[error(
        "an appliance already runs on {0} (stop it first, or start with --takeover to take its connections over)"
    )]
    AlreadyRunning(String),
    #[error("cannot listen for a takeover on {path}: {source}")]
    Listen {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The hand-over socket for the API socket at `api_socket`.
pub fn socket_path(api_socket: &Path) -> PathBuf {
    let mut s = api_socket.as_os_str().to_owned();
    s.push(".takeover");
    PathBuf::from(s)
}

/// Writes one frame.
pub async fn write_frame(s: &mut UnixStream, b: &[u8]) -> std::io::Result<()> {
    s.write_all(&(b.len() as u32).to_le_bytes()).await?;
    s.write_all(b).await?;
    s.flush().await
}

/// Reads one frame (`None`: the other side closed).
pub async fn read_frame(s: &mut UnixStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a hand-over frame of {len} bytes"),
        ));
    }
    let mut b = vec![0u8; len];
    s.read_exact(&mut b).await?;
    Ok(Some(b))
}

async fn answer(s: &mut UnixStream) -> Result<Vec<u8>, TakeoverError> {
    match tokio::time::timeout(ANSWER_TIME, read_frame(s)).await {
        Err(_) => Err(TakeoverError::Timeout),
        Ok(Ok(Some(b))) => Ok(b),
        Ok(Ok(None)) => Err(TakeoverError::Refused("it closed the connection".into())),
        Ok(Err(e)) => Err(e.into()),
    }
}

/// Reads a bundle, or the refusal the old side sent instead (a frame starting "NO "). A
/// bundle this build cannot read is `None`, said in the log: never misread.
fn bundle_or_refusal(b: &[u8]) -> Result<Option<Bundle>, TakeoverError> {
    if let Some(why) = b.strip_prefix(b"NO ") {
        return Err(TakeoverError::Refused(
            String::from_utf8_lossy(why).into_owned(),
        ));
    }
    match Bundle::decode(b) {
        Ok(b) => Ok(Some(b)),
        Err(e) => {
            tracing::error!(
                "takeover: the running appliance's state cannot be read ({e}): starting cold, \
                 its connections are lost"
            );
            Ok(None)
        }
    }
}

// ---- the new process's side ----

/// A hand-over under way, seen from the new process.
pub struct Taking {
    stream: UnixStream,
    /// When the new process asked.
    pub started: std::time::Instant,
    /// When it asked for the tables: from then on only the flow cache forwarded.
    pub took: Option<std::time::Instant>,
}

impl Taking {
    /// Connects to the running appliance and reads its health verdicts and table version
    /// (`None`: in a format this build cannot read).
    pub async fn hello(path: &Path) -> Result<(Taking, Option<Bundle>), TakeoverError> {
        let started = std::time::Instant::now();
        let mut stream =
            UnixStream::connect(path)
                .await
                .map_err(|source| TakeoverError::Connect {
                    path: path.display().to_string(),
                    source,
                })?;
        write_frame(&mut stream, HELLO).await?;
        let b = bundle_or_refusal(&answer(&mut stream).await?)?;
        let t = Taking {
            stream,
            started,
            took: None,
        };
        Ok((t, b))
    }

    /// Asks for the connection tables: from now on the old process forwards nothing but
    /// its flow cache until this one says [`Taking::done`] (or it gives up waiting).
    /// `None`: the tables came in a format this build cannot read; the old process's
    /// workers are stopped all the same, and this one starts cold.
    pub async fn take(&mut self) -> Result<Option<Bundle>, TakeoverError> {
        self.took = Some(std::time::Instant::now());
        write_frame(&mut self.stream, TAKE).await?;
        let b = answer(&mut self.stream).await?;
        bundle_or_refusal(&b)
    }

    /// The new datapath runs: the old process may exit. Returns once it has (its end of the
    /// socket closed), or after [`ANSWER_TIME`].
    pub async fn done(mut self) -> Result<(), TakeoverError> {
        write_frame(&mut self.stream, DONE).await?;
        let mut sink = [0u8; 64];
        match tokio::time::timeout(ANSWER_TIME, async {
            loop {
                match self.stream.read(&mut sink).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        {
            Ok(()) => Ok(()),
            Err(_) => Err(TakeoverError::Timeout),
        }
    }

    /// This process could not start with the hand-over: the old one resumes.
    pub async fn fail(mut self) {
        let _ = write_frame(&mut self.stream, FAIL).await;
    }
}

// ---- the running process's side ----

/// What a new process asks of the running loop.
#[derive(Debug)]
pub enum Asked {
    /// The verdicts and the version: answered with a bundle without flows.
    Hello { answer: oneshot::Sender<Vec<u8>> },
    /// The connection tables: the loop stops its workers and sends them, then hears
    /// whether the new process runs (`true`) through `outcome`.
    Take {
        answer: oneshot::Sender<Vec<u8>>,
        outcome: oneshot::Receiver<bool>,
    },
}

/// The listener's task and the requests it passes on.
pub type Offer = (tokio::task::JoinHandle<()>, mpsc::Receiver<Asked>);

/// Listens for a new process on `path` (created root-only beside the API socket); each
/// request reaches the loop through the returned channel. `replace`: this process took over
/// from the one that listened there, whose listener may outlive the end of the hand-over by
/// a moment (it closes with that process's exit, not before its stream): the path is taken
/// without asking who answers on it.
pub fn listen(
    path: &Path,
    replace: bool,
) -> std::io::Result<(tokio::task::JoinHandle<()>, mpsc::Receiver<Asked>)> {
    if path.exists() {
        if !replace && std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{}: another appliance listens there", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let listener = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = listener?;
    let (tx, rx) = mpsc::channel(1);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            // One hand-over at a time: the next waits until this one is over.
            serve(stream, &tx).await;
        }
    });
    Ok((task, rx))
}

/// One new process's requests.
async fn serve(mut s: UnixStream, loop_tx: &mpsc::Sender<Asked>) {
    loop {
        let frame = match tokio::time::timeout(ANSWER_TIME, read_frame(&mut s)).await {
            Ok(Ok(Some(f))) => f,
            _ => return,
        };
        let (answer, answered) = oneshot::channel();
        let outcome_tx = match frame.as_slice() {
            HELLO => {
                if loop_tx.send(Asked::Hello { answer }).await.is_err() {
                    return;
                }
                None
            }
            TAKE => {
                let (tx, outcome) = oneshot::channel();
                if loop_tx.send(Asked::Take { answer, outcome }).await.is_err() {
                    return;
                }
                Some(tx)
            }
            other => {
                tracing::warn!(
                    "takeover socket: an unknown request of {} bytes, ignored",
                    other.len()
                );
                let _ = write_frame(&mut s, b"NO unknown request").await;
                return;
            }
        };
        let Ok(bytes) = answered.await else { return };
        if write_frame(&mut s, &bytes).await.is_err() {
            if let Some(tx) = outcome_tx {
                let _ = tx.send(false);
            }
            return;
        }
        let Some(tx) = outcome_tx else { continue };
        let ran = matches!(
            tokio::time::timeout(ANSWER_TIME, read_frame(&mut s)).await,
            Ok(Ok(Some(f))) if f == DONE
        );
        let _ = tx.send(ran);
        if ran {
            // The loop exits now; the socket closes with the process, which the new
            // process waits for.
            std::future::pending::<()>().await;
        }
        return;
    }
}

// ---- a restart under systemd: the hand-over through a file ----

/// The file a process stopped for a restart leaves its state in, beside the API socket (in
/// the image: `/run/sluice`, kept across `systemctl restart` by
/// `RuntimeDirectoryPreserve=restart`).
pub fn file_path(api_socket: &Path) -> PathBuf {
    let mut s = api_socket.as_os_str().to_owned();
    s.push(".handover");
    PathBuf::from(s)
}

/// The test hook that makes SIGTERM hand over through the file as a restart would.
pub const ON_TERM_ENV: &str = "SLUICE_TEST_HANDOVER_ON_TERM";

/// Whether this SIGTERM is the stop half of a restart, after which a new process starts on
/// the same config: under systemd, a `restart` job of this process's unit is running (what
/// `systemctl restart` makes); or the test hook is set.
pub fn restarting() -> bool {
    if std::env::var_os(ON_TERM_ENV).is_some() {
        return true;
    }
    if std::env::var_os("INVOCATION_ID").is_none() {
        return false;
    }
    let Some(unit) = own_unit() else { return false };
    let out = std::process::Command::new("systemctl")
        .args(["list-jobs", "--no-legend", "--plain", "--no-pager"])
        .output();
    let Ok(out) = out else { return false };
    restart_job_of(&String::from_utf8_lossy(&out.stdout), &unit)
}

/// The unit whose cgroup this process is in (`sluice.service`).
fn own_unit() -> Option<String> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cg.lines()
        .filter_map(|l| l.rsplit('/').next())
        .find(|u| u.ends_with(".service"))
        .map(str::to_string)
}

/// Whether `systemctl list-jobs` shows a restart job for `unit` (lines: id, unit, type,
/// state).
fn restart_job_of(list: &str, unit: &str) -> bool {
    list.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 3 && f[1] == unit && f[2] == "restart"
    })
}

/// Writes `bytes` to `path` whole or not at all (a temporary file renamed), root-only.
pub fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_job_of_this_unit_is_told_from_others() {
        let list = "1234 sluice.service restart running\n77 other.service restart waiting\n";
        assert!(restart_job_of(list, "sluice.service"));
        assert!(!restart_job_of(list, "nginx.service"));
        let stop = "1234 sluice.service stop running\n";
        assert!(!restart_job_of(stop, "sluice.service"));
        assert!(!restart_job_of("", "sluice.service"));
    }

    #[test]
    fn the_files_sit_beside_the_api_socket() {
        let api = Path::new("/run/sluice/api.sock");
        assert_eq!(socket_path(api), Path::new("/run/sluice/api.sock.takeover"));
        assert_eq!(file_path(api), Path::new("/run/sluice/api.sock.handover"));
    }

    /// CI caught this: the process taken over still listened for a moment after the
    /// hand-over's stream closed, and the new process refused to start its own offer.
    #[tokio::test]
    async fn a_process_that_took_over_takes_the_path_of_a_lingering_listener() {
        let dir = std::env::temp_dir().join(format!("sluice-takeover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("api.sock.takeover");
        let _ = std::fs::remove_file(&path);
        let lingering = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let refused = listen(&path, false).err().map(|e| e.kind());
        assert_eq!(refused, Some(std::io::ErrorKind::AddrInUse));
        let (task, _asked) = listen(&path, true).expect("a takeover replaces the path");
        drop(lingering);
        // The path is this process's now: a client reaches the new listener.
        tokio::net::UnixStream::connect(&path).await.unwrap();
        task.abort();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
