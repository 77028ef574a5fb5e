//! `sluice image`: A/B upgrades of the appliance image. The disk has two system partitions
//! (`sluice-root-a`, `sluice-root-b`) and one boot loader entry per slot on the ESP;
//! `update` writes an update bundle (see [`bundle`]) into the slot that is not running and
//! gives it a boot loader entry with a boot counter, so the next boot tries it and, when
//! sluice does not become ready there, systemd-boot goes back to the running slot by itself
//! (see [`slots`]). `status` says which slot runs and what became of the other. Nothing
//! bootable changes until every member of the bundle matched its sha256.

pub mod bundle;
pub mod slots;
pub mod source;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use self::slots::Slot;
pub use self::source::Source;

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
}

impl Default for Paths {
    fn default() -> Paths {
        Paths {
            esp: "/efi".into(),
            partitions: "/dev/disk/by-partlabel".into(),
            cmdline: "/proc/cmdline".into(),
            failures: "/var/lib/sluice/slot-failures.log".into(),
        }
    }
}

/// Why an image command failed; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(
        "not a Sluice update bundle: {0} (give the sluice-update-*.tar that image/build.sh writes)"
    )]
    NotABundle(String),
    #[error(
        "cannot download {url}: {reason} (is the URL right, and the server reachable from the \
         appliance?); the running slot is untouched"
    )]
    Fetch { url: String, reason: String },
    #[error(
        "the downloaded bundle's sha256 is {got}, not the {want} given: it is not the one \
         meant; slot {slot} is left without a boot entry, the running slot is untouched"
    )]
    StreamSum {
        got: String,
        want: String,
        slot: Slot,
    },
    #[error("the bundle's manifest cannot be used: {0}")]
    Manifest(String),
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("reading the bundle: {0} (is it complete?)")]
    Read(#[source] io::Error),
    #[error("writing the slot: {0}")]
    Write(#[source] io::Error),
    #[error("the ESP at {path}: {source} (is it mounted? /efi, see image/README.md)")]
    Esp {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the bundle's sha256 is {got}, not the {want} given: it is damaged or not the one \
         meant; nothing was written"
    )]
    BundleSum { got: String, want: String },
    #[error(
        "{member}: sha256 {got}, the manifest says {want}: the bundle is damaged (download it \
         again); slot {slot} is left without a boot entry, the running slot is untouched"
    )]
    MemberSum {
        member: String,
        got: String,
        want: String,
        slot: Slot,
    },
    #[error(
        "{0}: missing from the bundle (or listed twice); slot {1} is left without a boot entry"
    )]
    Missing(String, Slot),
    #[error(
        "root.img is {need} bytes, slot {slot}'s partition {have}: this bundle needs a new disk layout"
    )]
    TooBig { need: u64, have: u64, slot: Slot },
    #[error("root.img is not an ext4 filesystem")]
    NotExt4,
    #[error(
        "cannot tell the running slot: no sluice.slot= on the kernel command line (booted \
         without systemd-boot's slot entries?); nothing was written"
    )]
    NoSlot,
    #[error(
        "slot {0} runs on trial (its boot is not marked good yet: sluice.service not ready?); \
         updating now would leave no good slot to fall back to; wait, see sluice image status"
    )]
    OnTrial(Slot),
}

/// What `update` needs besides the bundle.
#[derive(Debug, Clone)]
pub struct Update {
    /// The bundle's expected sha256 (as published next to it), checked before anything is written.
    pub sha256: Option<String>,
    /// Boots the new slot gets to become ready.
    pub tries: u32,
}

/// Writes the bundle from `source` into the slot that is not running; returns what was
/// done, for the operator.
pub fn update(source: &Source, u: &Update, p: &Paths) -> Result<String, ImageError> {
    let cmdline = fs::read_to_string(&p.cmdline).unwrap_or_default();
    let running = slots::running(&cmdline).ok_or(ImageError::NoSlot)?;
    let entries = slots::entries(&p.esp)?;
    if let Some(e) = entries.iter().find(|e| e.slot == running)
        && e.tries.is_some()
    {
        return Err(ImageError::OnTrial(running));
    }
    let target = running.other();
    let (m, need) = match source {
        Source::File(file) => {
            let open = || {
                File::open(file).map_err(|source| ImageError::Open {
                    path: file.to_path_buf(),
                    source,
                })
            };
            if let Some(want) = &u.sha256 {
                let got = sum_of(open()?)?;
                if !got.eq_ignore_ascii_case(want.trim()) {
                    return Err(ImageError::BundleSum {
                        got,
                        want: want.clone(),
                    });
                }
            }
            let r = io::BufReader::with_capacity(1 << 20, open()?);
            let (_, m, need) = write_slot(r, target, &entries, p)?;
            (m, need)
        }
        Source::Url(url) => {
            let (rest, m, need) = write_slot(source::get(url)?, target, &entries, p)?;
            let got = rest.finish()?;
            if let Some(want) = &u.sha256
                && !got.eq_ignore_ascii_case(want.trim())
            {
                return Err(ImageError::StreamSum {
                    got,
                    want: want.clone(),
                    slot: target,
                });
            }
            (m, need)
        }
    };
    let edir = slots::entries_dir(&p.esp);
    let generation = entries.iter().map(|e| e.generation).max().unwrap_or(0) + 1;
    let (name, text) = slots::entry(target, generation, &m.version, &m.cmdline, u.tries);
    let tmp = edir.join(format!(".{name}.new"));
    fs::write(&tmp, text).map_err(esp_err(&tmp))?;
    fs::rename(&tmp, edir.join(&name)).map_err(esp_err(&edir.join(&name)))?;
    nix::unistd::sync();
    Ok(format!(
        "slot {target}: Sluice {} written from {source} (root {} MB, kernel and initrd on the \
         ESP, every sha256 matched); entry {name}: the next boot starts it and keeps it once \
         sluice.service is ready, else slot {running} boots again by itself ({} tries). \
         Reboot to switch: systemctl reboot",
        m.version,
        need >> 20,
        u.tries
    ))
}

/// Everything but the boot entry: the target slot loses its entry first, then the bundle's
/// members go to their places; returns the input (for a stream's sum), the manifest and
/// the root filesystem's size.
fn write_slot<R: Read>(
    input: R,
    target: Slot,
    entries: &[slots::Entry],
    p: &Paths,
) -> Result<(R, bundle::Manifest, u64), ImageError> {
    let mut r = bundle::Reader::new(input);
    let m = r.manifest()?;
    let dev = p.partitions.join(format!("sluice-root-{target}"));
    let mut part = OpenOptions::new()
        .write(true)
        .open(&dev)
        .map_err(|source| ImageError::Open {
            path: dev.clone(),
            source,
        })?;
    let have = part.seek(SeekFrom::End(0)).map_err(ImageError::Write)?;
    part.seek(SeekFrom::Start(0)).map_err(ImageError::Write)?;
    let need = m.files["root.img"].size;
    if need > have {
        return Err(ImageError::TooBig {
            need,
            have,
            slot: target,
        });
    }
    // The target slot stops being bootable before a byte of it changes.
    let edir = slots::entries_dir(&p.esp);
    for e in entries.iter().filter(|e| e.slot == target) {
        let f = edir.join(&e.file);
        fs::remove_file(&f).map_err(esp_err(&f))?;
    }
    nix::unistd::sync();
    write_members(&mut r, &m, target, &mut part, &p.esp)?;
    Ok((r.into_inner(), m, need))
}

fn esp_err(path: &Path) -> impl FnOnce(io::Error) -> ImageError {
    let path = path.to_path_buf();
    move |source| ImageError::Esp { path, source }
}

/// Streams every member to its place (root.img to the partition, the kernel and initrd to
/// the ESP under temporary names, renamed once all of them matched).
fn write_members<R: Read>(
    r: &mut bundle::Reader<R>,
    m: &bundle::Manifest,
    target: Slot,
    part: &mut File,
    esp: &Path,
) -> Result<(), ImageError> {
    let kdir = esp.join(format!("sluice/{target}"));
    fs::create_dir_all(&kdir).map_err(esp_err(&kdir))?;
    let mut seen: Vec<String> = Vec::new();
    while let Some((name, size)) = r.next_member()? {
        let Some(want) = m.files.get(&name).filter(|_| !seen.contains(&name)) else {
            return Err(ImageError::Missing(name, target));
        };
        let got = if name == "root.img" {
            let mut w = Ext4Check::new(&mut *part);
            let got = r.copy_to(size, &mut w)?;
            w.finish()?;
            part.sync_all().map_err(ImageError::Write)?;
            got
        } else {
            let tmp = kdir.join(format!(".{name}.new"));
            let mut f = File::create(&tmp).map_err(esp_err(&tmp))?;
            let got = r.copy_to(size, &mut f)?;
            f.sync_all().map_err(ImageError::Write)?;
            got
        };
        if got != want.sha256 || size != want.size {
            return Err(ImageError::MemberSum {
                member: name,
                got,
                want: want.sha256.clone(),
                slot: target,
            });
        }
        seen.push(name);
    }
    if let Some(m) = bundle::MEMBERS
        .iter()
        .find(|n| !seen.iter().any(|s| s == *n))
    {
        return Err(ImageError::Missing(m.to_string(), target));
    }
    for name in ["vmlinuz", "initrd"] {
        let (tmp, fin) = (kdir.join(format!(".{name}.new")), kdir.join(name));
        fs::rename(&tmp, &fin).map_err(esp_err(&fin))?;
    }
    Ok(())
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

fn sum_of(mut f: File) -> Result<String, ImageError> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(ImageError::Read)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(bundle::hex(&h.finalize()))
}

/// Passes bytes through once the first 2 KiB show an ext4 superblock.
struct Ext4Check<W> {
    out: W,
    head: Vec<u8>,
    checked: bool,
}

impl<W: Write> Ext4Check<W> {
    fn new(out: W) -> Self {
        Ext4Check {
            out,
            head: Vec::with_capacity(2048),
            checked: false,
        }
    }

    fn check(&mut self) -> io::Result<()> {
        // The superblock starts at 1024; its magic 0xEF53 is at offset 56 in it.
        if self.head.len() < 1082 || self.head[1080..1082] != [0x53, 0xef] {
            return Err(io::Error::other("root.img is not an ext4 filesystem"));
        }
        self.checked = true;
        self.out.write_all(&self.head)
    }

    fn finish(mut self) -> Result<(), ImageError> {
        if !self.checked {
            self.check().map_err(|_| ImageError::NotExt4)?;
        }
        self.out.flush().map_err(ImageError::Write)
    }
}

impl<W: Write> Write for Ext4Check<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.checked {
            return self.out.write(buf);
        }
        let take = (2048 - self.head.len()).min(buf.len());
        self.head.extend_from_slice(&buf[..take]);
        if self.head.len() == 2048 {
            self.check()?;
        }
        Ok(take)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests;
