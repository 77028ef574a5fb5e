//! The SYN proxy's cookie secret across processes. A cookie answered by one process comes
//! back in the client's ACK up to two periods later, maybe to the next process (a takeover,
//! a `systemctl restart`, a crash and systemd's restart): that process must check it with the
//! same secret, or the client's connection is lost. So the secret lives in a file beside the
//! API socket (in the image `/run/sluice`, kept across restarts by
//! `RuntimeDirectoryPreserve=restart`, gone at reboot, when no cookie is in flight): read
//! when it is root's alone and whole, else drawn anew from the kernel and written there
//! (mode 0600, renamed into place).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use tracing::warn;

use crate::lb::process::CookieKey;

/// The file beside the API socket.
pub fn path(api_socket: &Path) -> PathBuf {
    let mut s = api_socket.as_os_str().to_owned();
    s.push(".cookies");
    PathBuf::from(s)
}

/// The secret and whether it was kept from a process before (whose cookies may still come
/// back: the workers then check ACKs for two periods).
pub fn load_or_draw(api_socket: &Path) -> (CookieKey, bool) {
    let file = path(api_socket);
    match read(&file) {
        Ok(Some(k)) => return (k, true),
        Ok(None) => {}
        Err(why) => warn!(
            file = %file.display(),
            "SYN proxy: the cookie secret kept there is not used ({why}); a new one is drawn, cookies the process before made are refused"
        ),
    }
    let key = crate::engine::draw_cookie_key();
    if let Err(e) = write(&file, &key) {
        warn!(
            file = %file.display(),
            "SYN proxy: the cookie secret cannot be kept ({e}): the next process will refuse this one's cookies"
        );
    }
    (key, false)
}

fn read(file: &Path) -> Result<Option<CookieKey>, String> {
    if !file.exists() {
        return Ok(None);
    }
    if let Some(why) = super::secret::not_private(file) {
        return Err(why);
    }
    let b = std::fs::read(file).map_err(|e| e.to_string())?;
    let Ok(b) = <[u8; 16]>::try_from(b.as_slice()) else {
        return Err(format!("{} bytes, not 16", b.len()));
    };
    Ok(Some(CookieKey::from_bytes(b)))
}

fn write(file: &Path, key: &CookieKey) -> std::io::Result<()> {
    // The API socket's directory may not exist yet (the API creates it 0700 a moment later).
    if let Some(dir) = file.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&key.to_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_process_reads_the_secret_and_a_bad_file_is_replaced() {
        let dir = std::env::temp_dir().join(format!("sluice-cookies-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let api = dir.join("api.sock");
        let _ = std::fs::remove_file(path(&api));
        let (first, kept) = load_or_draw(&api);
        assert!(!kept, "nothing kept before the first process");
        let (second, kept) = load_or_draw(&api);
        assert!(
            kept && second == first,
            "the next process checks with the same secret"
        );
        // A file others may read is not trusted: a new secret replaces it.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path(&api), std::fs::Permissions::from_mode(0o644)).unwrap();
        let (third, kept) = load_or_draw(&api);
        assert!(!kept && third != first);
        std::fs::write(path(&api), b"short").unwrap();
        std::fs::set_permissions(path(&api), std::fs::Permissions::from_mode(0o600)).unwrap();
        let (_, kept) = load_or_draw(&api);
        assert!(!kept, "a cut file is not a secret");
        let meta = std::fs::metadata(path(&api)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
