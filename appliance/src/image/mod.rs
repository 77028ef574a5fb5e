//! `sluice image`: A/B upgrades of the appliance image. The disk has two system partitions
//! (`sluice-root-a`, `sluice-root-b`) and one boot loader entry per slot on the ESP;
//! `update` writes an update bundle (see [`bundle`]) into the slot that is not running and
//! gives it a boot loader entry with a boot counter, so the next boot tries it and, when
//! sluice does not become ready there, systemd-boot goes back to the running slot by itself
//! (see [`slots`]). `status` says which slot runs and what became of the other.
//!
//! What is trusted: the manifest's signature by a key the image carries ([`trust`]),
//! checked before anything is written; then every member against the manifest's size and
//! sha256 as it streams ([`install`]). Nothing bootable changes until every member matched.
//! One update runs at a time (a lock in /run).

pub mod bundle;
mod error;
mod install;
pub mod slots;
pub mod source;
pub mod trust;

use std::fs::{self, File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

pub use self::error::ImageError;
use self::install::{Scratch, esp_err};
pub use self::source::{Download, Source};
pub use self::trust::Signer;

/// Where things are: the real appliance's paths by default, a scratch tree in tests.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The ESP's mount point.
    pub esp: PathBuf,
    /// Where `sluice-root-a`/`sluice-root-b` appear (udev's by-partlabel links).
    pub partitions: PathBuf,
    /// The kernel command line.
    pub cmdline: PathBuf,
    /// The trial boots that failed (`sluice-boot-check` appends to it).
    pub failures: PathBuf,
    /// The public keys that may sign an update ([`trust::KEYS`]).
    pub keys: PathBuf,
    /// The lock one update holds while it runs.
    pub lock: PathBuf,
}

impl Default for Paths {
    fn default() -> Paths {
        Paths {
            esp: "/efi".into(),
            partitions: "/dev/disk/by-partlabel".into(),
            cmdline: "/proc/cmdline".into(),
            failures: "/var/lib/sluice/slot-failures.log".into(),
            keys: trust::KEYS.into(),
            lock: "/run/sluice/image-update.lock".into(),
        }
    }
}

/// What `update` needs besides the bundle.
#[derive(Debug, Clone)]
pub struct Update {
    /// The bundle's expected sha256 (as published next to it), checked before the boot
    /// entry is written.
    pub sha256: Option<String>,
    /// Boots the new slot gets to become ready.
    pub tries: u32,
    /// Install a bundle no trusted key signed (labs only).
    pub allow_unsigned: bool,
    /// How a download is made (its CA, its timeouts).
    pub download: Download,
}

/// Writes the bundle from `source` into the slot that is not running; returns what was
/// done, for the operator.
pub fn update(source: &Source, u: &Update, p: &Paths) -> Result<String, ImageError> {
    let _lock = lock(&p.lock)?;
    let cmdline = fs::read_to_string(&p.cmdline).unwrap_or_default();
    let running = slots::running(&cmdline).ok_or(ImageError::NoSlot)?;
    let entries = slots::entries(&p.esp)?;
    if let Some(e) = entries.iter().find(|e| e.slot == running)
        && e.tries.is_some()
    {
        return Err(ImageError::OnTrial(running));
    }
    let target = running.other();
    let mut r = bundle::Reader::new(source::open(source, &u.download)?);
    let head = r.head()?;
    let signer = trust::verify(
        &head.text,
        head.signature.as_deref(),
        &p.keys,
        u.allow_unsigned,
    )?;
    let m = head.manifest;
    let need = install::write_slot(&mut r, &m, target, &entries, p)?;
    // A download's rest is read to its end (and the sum of all of it checked, if given); a
    // file's or device's only for its sum: a device may hold more than the bundle.
    if u.sha256.is_some() || matches!(source, Source::Url(_)) {
        let got = r.into_inner().finish()?;
        if let Some(want) = &u.sha256
            && !got.eq_ignore_ascii_case(want.trim())
        {
            return Err(ImageError::BundleSum {
                got,
                want: want.clone(),
                slot: target,
            });
        }
    }
    let edir = slots::entries_dir(&p.esp);
    let generation = entries.iter().map(|e| e.generation).max().unwrap_or(0) + 1;
    let (name, text) = slots::entry(target, generation, &m.version, &m.cmdline, u.tries);
    let tmp = edir.join(format!(".{name}.new"));
    let mut scratch = Scratch::default();
    scratch.add(tmp.clone());
    fs::write(&tmp, text).map_err(esp_err(&tmp))?;
    fs::rename(&tmp, edir.join(&name)).map_err(esp_err(&edir.join(&name)))?;
    scratch.keep();
    nix::unistd::sync();
    Ok(format!(
        "slot {target}: Sluice {} written from {source} ({signer}; root {} MB, kernel and \
         initrd on the ESP, every sha256 matched); entry {name}: the next boot starts it and \
         keeps it once sluice.service is ready, else slot {running} boots again by itself \
         ({} tries). Reboot to switch: systemctl reboot",
        m.version,
        need >> 20,
        u.tries
    ))
}

/// Takes the update lock at `path` (its directory created 0700), or says who holds it.
/// The lock goes with the returned file.
fn lock(path: &Path) -> Result<File, ImageError> {
    use std::os::unix::fs::DirBuilderExt;
    let err = |source| ImageError::Lock {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.exists()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(err)?;
    }
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(err)?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(TryLockError::WouldBlock) => Err(ImageError::Busy(path.to_path_buf())),
        Err(TryLockError::Error(e)) => Err(err(e)),
    }
}

/// `sluice image status`: the running slot, the other one, the last failed trial boot.
pub fn status(p: &Paths) -> Result<String, ImageError> {
    let cmdline = fs::read_to_string(&p.cmdline).unwrap_or_default();
    let entries = slots::entries(&p.esp)?;
    let failure = fs::read_to_string(&p.failures).ok();
    let last = failure
        .as_deref()
        .and_then(|f| f.lines().rev().find(|l| !l.trim().is_empty()));
    Ok(slots::describe(slots::running(&cmdline), &entries, last))
}

#[cfg(test)]
mod net_tests;
#[cfg(test)]
mod tests;
